//! COPY's binary format (`FORMAT binary`) cut into its header and tuples, and a tuple's fields
//! found, so that each tuple can go to its shard unchanged, every shard's stream opening with
//! the client's header. The layout is PostgreSQL's (`copyfromparse.c`): an 11-byte signature,
//! a 32-bit flags word, a 32-bit header-extension length and the extension; then tuples, each a
//! 16-bit field count and per field a 32-bit length (-1 for NULL) and that many bytes; then a
//! trailer, a field count of -1.

/// The signature that opens the binary format.
const SIGNATURE: &[u8; 11] = b"PGCOPY\n\xff\r\n\0";
/// Signature, flags and extension length.
const FIXED_HEADER: usize = 19;
/// Flag bit 16 says the tuples carry OIDs, which PostgreSQL no longer reads; bits 17 to 31 are
/// critical flags no version defines.
const OIDS_AND_CRITICAL: u32 = 0xffff_0000;
const OIDS: u32 = 1 << 16;

/// Binary COPY data PostgreSQL would refuse, with its words (all `22P04`).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum BinaryError {
    #[error("COPY file signature not recognized")]
    Signature,
    #[error("invalid COPY file header (WITH OIDS)")]
    WithOids,
    #[error("unrecognized critical flags in COPY file header")]
    CriticalFlags,
    #[error("invalid COPY file header (missing length)")]
    ExtensionLength,
    #[error("row field count is {0}, expected a count of fields or -1")]
    FieldCount(i16),
    #[error("invalid field size")]
    FieldSize,
    #[error("received copy data after EOF marker")]
    AfterEnd,
    #[error("unexpected EOF in COPY data")]
    UnexpectedEof,
}

/// How much of a piece (header, tuple or trailer) the bytes at hand show.
enum Piece {
    /// The piece is whole in the first this many bytes.
    Whole(usize),
    /// It is at least this long.
    AtLeast(usize),
}

/// Cuts a stream of binary COPY data into the header and the tuples. Pieces lying wholly in
/// one call's data are passed where they lie; only a piece cut by the end of the data is
/// copied, to wait for the rest.
#[derive(Debug, Default)]
pub struct BinarySplitter {
    carry: Vec<u8>,
    header_read: bool,
    /// The trailer came: nothing may follow it.
    ended: bool,
}

fn i16_at(data: &[u8], at: usize) -> Option<i16> {
    Some(i16::from_be_bytes(data.get(at..at + 2)?.try_into().ok()?))
}

fn i32_at(data: &[u8], at: usize) -> Option<i32> {
    Some(i32::from_be_bytes(data.get(at..at + 4)?.try_into().ok()?))
}

impl BinarySplitter {
    /// The header's length, or how much more it needs; its faults as soon as they show.
    fn header(data: &[u8]) -> Result<Piece, BinaryError> {
        let shown = data.len().min(SIGNATURE.len());
        if data[..shown] != SIGNATURE[..shown] {
            return Err(BinaryError::Signature);
        }
        if data.len() < FIXED_HEADER {
            return Ok(Piece::AtLeast(FIXED_HEADER));
        }
        let flags = i32_at(data, 11).unwrap_or_default() as u32;
        if flags & OIDS != 0 {
            return Err(BinaryError::WithOids);
        }
        if flags & OIDS_AND_CRITICAL != 0 {
            return Err(BinaryError::CriticalFlags);
        }
        let extension = i32_at(data, 15).unwrap_or_default();
        let Ok(extension) = usize::try_from(extension) else {
            return Err(BinaryError::ExtensionLength);
        };
        let len = FIXED_HEADER + extension;
        Ok(if data.len() >= len {
            Piece::Whole(len)
        } else {
            Piece::AtLeast(len)
        })
    }

    /// A tuple's (or the trailer's) length, or how much more it needs.
    fn tuple(data: &[u8]) -> Result<Piece, BinaryError> {
        let Some(count) = i16_at(data, 0) else {
            return Ok(Piece::AtLeast(2));
        };
        if count == -1 {
            return Ok(Piece::Whole(2));
        }
        if count < 0 {
            return Err(BinaryError::FieldCount(count));
        }
        let mut at = 2;
        for _ in 0..count {
            let Some(len) = i32_at(data, at) else {
                return Ok(Piece::AtLeast(at + 4));
            };
            at += 4;
            match len {
                -1 => {}
                len if len < 0 => return Err(BinaryError::FieldSize),
                len => at += len as usize,
            }
        }
        Ok(if data.len() >= at {
            Piece::Whole(at)
        } else {
            Piece::AtLeast(at)
        })
    }

    fn next(&self, data: &[u8]) -> Result<Piece, BinaryError> {
        if self.ended {
            return Err(BinaryError::AfterEnd);
        }
        if self.header_read {
            Self::tuple(data)
        } else {
            Self::header(data)
        }
    }

    /// Notes a whole piece; false for the trailer, which no shard is sent (each shard's COPY
    /// ends at its CopyDone, which PostgreSQL takes as the end of binary data too).
    fn took(&mut self, piece: &[u8]) -> bool {
        if !self.header_read {
            self.header_read = true;
            return true;
        }
        if piece == [0xff, 0xff] {
            self.ended = true;
            return false;
        }
        true
    }

    /// Calls `piece` with the header, then with each tuple, that `data` completes.
    pub fn feed<E: From<BinaryError>>(
        &mut self,
        mut data: &[u8],
        mut piece: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        while !self.carry.is_empty() && !data.is_empty() {
            let need = match self.next(&self.carry)? {
                Piece::Whole(n) | Piece::AtLeast(n) => n,
            };
            let more = need.saturating_sub(self.carry.len()).min(data.len());
            self.carry.extend_from_slice(&data[..more]);
            data = &data[more..];
            if let Piece::Whole(n) = self.next(&self.carry)? {
                debug_assert_eq!(n, self.carry.len(), "only what the piece needs was added");
                let whole = std::mem::take(&mut self.carry);
                let result = if self.took(&whole) {
                    piece(&whole)
                } else {
                    Ok(())
                };
                self.carry = whole;
                self.carry.clear();
                result?;
            }
        }
        while !data.is_empty() {
            match self.next(data)? {
                Piece::Whole(n) => {
                    if self.took(&data[..n]) {
                        piece(&data[..n])?;
                    }
                    data = &data[n..];
                }
                Piece::AtLeast(_) => {
                    self.carry.extend_from_slice(data);
                    break;
                }
            }
        }
        Ok(())
    }

    /// At the end of the data: whether it ended inside the header or a tuple.
    pub fn finish(&mut self) -> bool {
        !std::mem::take(&mut self.carry).is_empty()
    }
}

/// The fields of a whole tuple up to index `upto` (inclusive): each one's bytes, `None` for
/// NULL. Fewer when the tuple has fewer fields.
pub fn fields(tuple: &[u8], upto: usize) -> Vec<Option<&[u8]>> {
    let count = i16_at(tuple, 0).unwrap_or_default().max(0) as usize;
    let mut out = Vec::with_capacity(count.min(upto + 1));
    let mut at = 2;
    while out.len() < count.min(upto + 1) {
        let Some(len) = i32_at(tuple, at) else {
            break;
        };
        at += 4;
        if len < 0 {
            out.push(None);
            continue;
        }
        let Some(value) = tuple.get(at..at + len as usize) else {
            break;
        };
        out.push(Some(value));
        at += len as usize;
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header() -> Vec<u8> {
        let mut h = SIGNATURE.to_vec();
        h.extend_from_slice(&0i32.to_be_bytes());
        h.extend_from_slice(&3i32.to_be_bytes());
        h.extend_from_slice(b"ext");
        h
    }

    fn tuple(fields: &[Option<&[u8]>]) -> Vec<u8> {
        let mut t = (fields.len() as i16).to_be_bytes().to_vec();
        for f in fields {
            match f {
                Some(v) => {
                    t.extend_from_slice(&(v.len() as i32).to_be_bytes());
                    t.extend_from_slice(v);
                }
                None => t.extend_from_slice(&(-1i32).to_be_bytes()),
            }
        }
        t
    }

    fn pieces(data: &[u8], chunk: usize) -> Result<(Vec<Vec<u8>>, bool), BinaryError> {
        let mut s = BinarySplitter::default();
        let mut out = Vec::new();
        for c in data.chunks(chunk) {
            s.feed(c, |p| {
                out.push(p.to_vec());
                Ok::<_, BinaryError>(())
            })?;
        }
        Ok((out, s.finish()))
    }

    #[test]
    fn pieces_are_the_same_however_the_data_is_cut() {
        let (h, a, b) = (
            header(),
            tuple(&[Some(&42i64.to_be_bytes()), None, Some(b"text")]),
            tuple(&[Some(&7i64.to_be_bytes()), Some(b""), Some(&[0; 300])]),
        );
        let data = [h.clone(), a.clone(), b.clone(), vec![0xff, 0xff]].concat();
        for chunk in [1, 2, 3, 5, 19, 22, 64, 1000] {
            assert_eq!(
                pieces(&data, chunk),
                Ok((vec![h.clone(), a.clone(), b.clone()], false)),
                "cut every {chunk} bytes"
            );
        }
        // Data that stops inside a tuple is unfinished; data after the trailer is refused.
        let cut = &data[..h.len() + a.len() + 5];
        assert_eq!(pieces(cut, 7).map(|(_, open)| open), Ok(true));
        let after = [data.clone(), a.clone()].concat();
        assert_eq!(pieces(&after, 4096), Err(BinaryError::AfterEnd));
    }

    #[test]
    fn a_bad_header_or_field_size_is_refused_as_postgres_refuses_it() {
        assert_eq!(pieces(b"PGCOPY\n\xfe", 64), Err(BinaryError::Signature));
        let mut oids = header();
        oids[12] = 1;
        assert_eq!(pieces(&oids, 64), Err(BinaryError::WithOids));
        let mut critical = header();
        critical[11] = 0x80;
        assert_eq!(pieces(&critical, 64), Err(BinaryError::CriticalFlags));
        let mut length = header();
        length[15] = 0xff;
        assert_eq!(pieces(&length, 64), Err(BinaryError::ExtensionLength));
        let mut bad = header();
        bad.extend_from_slice(&1i16.to_be_bytes());
        bad.extend_from_slice(&(-2i32).to_be_bytes());
        assert_eq!(pieces(&bad, 64), Err(BinaryError::FieldSize));
        let mut count = header();
        count.extend_from_slice(&(-3i16).to_be_bytes());
        assert_eq!(pieces(&count, 64), Err(BinaryError::FieldCount(-3)));
    }

    #[test]
    fn fields_are_read_up_to_the_one_asked_for() {
        let t = tuple(&[Some(b"a"), None, Some(b"ccc"), Some(b"d")]);
        assert_eq!(
            fields(&t, 2),
            vec![Some(&b"a"[..]), None, Some(&b"ccc"[..])]
        );
        assert_eq!(fields(&t, 9).len(), 4);
        assert_eq!(fields(&tuple(&[Some(b"a")]), 2), vec![Some(&b"a"[..])]);
    }
}
