//! Reading the frames a shard answers with: RowDescription fields, DataRow values, command
//! tags, and the hidden sort columns the proxy added taken off again.

use bytes::{Bytes, BytesMut};

use crate::protocol::{self, MessageBuilder};

pub(super) fn cstr(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap_or(b)
}

/// The count at the end of a command tag (`INSERT 0 3`, `UPDATE 2`, `SELECT 5`).
pub(super) fn tag_count(tag: &str) -> Option<u64> {
    tag.rsplit(' ').next()?.parse().ok()
}

/// A RowDescription field, as far as the merge looks at it.
pub(super) struct Field {
    pub table_oid: u32,
    pub column: i16,
    pub type_oid: u32,
}

pub(super) fn fields(frame: &[u8]) -> Vec<Field> {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "RowDescription")
        .unwrap_or(0)
        .max(0);
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if protocol::take_cstr(&mut b, "RowDescription").is_err() || b.len() < 18 {
            break;
        }
        out.push(Field {
            table_oid: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            column: i16::from_be_bytes([b[4], b[5]]),
            type_oid: u32::from_be_bytes([b[6], b[7], b[8], b[9]]),
        });
        b = &b[18..];
    }
    out
}

/// The type OID and format code (0 text, 1 binary) of each column of a RowDescription.
pub(crate) fn columns(frame: &[u8]) -> Vec<(u32, i16)> {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "RowDescription")
        .unwrap_or(0)
        .max(0);
    let mut types = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if protocol::take_cstr(&mut b, "RowDescription").is_err() || b.len() < 18 {
            break;
        }
        types.push((
            u32::from_be_bytes([b[6], b[7], b[8], b[9]]),
            i16::from_be_bytes([b[16], b[17]]),
        ));
        b = &b[18..];
    }
    types
}

/// A RowDescription without its last `hidden` fields.
pub(super) fn without_hidden_fields(frame: &[u8], hidden: usize) -> Bytes {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "RowDescription")
        .unwrap_or(0)
        .max(0) as usize;
    let keep = n.saturating_sub(hidden);
    let mut body = BytesMut::new();
    let mut rest = b;
    for _ in 0..keep {
        let start = rest;
        if protocol::take_cstr(&mut rest, "RowDescription").is_err() || rest.len() < 18 {
            break;
        }
        rest = &rest[18..];
        body.extend_from_slice(&start[..start.len() - rest.len()]);
    }
    let mut out = BytesMut::new();
    MessageBuilder::new(&mut out, b'T')
        .i16(keep as i16)
        .bytes(&body)
        .finish();
    out.freeze()
}

/// The column values of a DataRow (`None` for NULL).
pub fn values(frame: &[u8]) -> Vec<Option<&[u8]>> {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "DataRow").unwrap_or(0).max(0);
    let mut v = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let Ok(len) = protocol::take_i32(&mut b, "DataRow") else {
            break;
        };
        if len < 0 {
            v.push(None);
        } else {
            let len = (len as usize).min(b.len());
            v.push(Some(&b[..len]));
            b = &b[len..];
        }
    }
    v
}

pub(super) fn without_hidden_values(frame: &[u8], hidden: usize) -> Bytes {
    let vals = values(frame);
    let keep = vals.len().saturating_sub(hidden);
    let mut out = BytesMut::new();
    let mut m = MessageBuilder::new(&mut out, b'D');
    m.i16(keep as i16);
    for v in &vals[..keep] {
        match v {
            None => {
                m.i32(-1);
            }
            Some(v) => {
                m.i32(v.len() as i32).bytes(v);
            }
        }
    }
    m.finish();
    out.freeze()
}
