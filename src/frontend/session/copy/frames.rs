//! The pieces of COPY FROM that read no session state: taking one row to its shard's buffer,
//! and what a shard's first answer and later frames mean.

use super::{tag_count, Out, Stop};
use crate::backend::BackendError;
use crate::executor::copy::{CopyError, RowReader, Taken};
use crate::protocol;
use crate::protocol::TxStatus;
use bytes::BytesMut;

/// One row of a COPY FROM into a sharded table, to its shard's buffer (a header to every
/// shard's).
pub(super) fn take_row(
    row: &[u8],
    reader: &mut RowReader,
    header_line: &mut Option<Vec<u8>>,
    outs: &mut Vec<Out>,
) -> Result<(), CopyError> {
    let shard = match reader.take(row)? {
        Taken::Skipped => return Ok(()),
        Taken::Header => {
            // Shards whose COPY opens later are sent it then.
            for out in outs.iter_mut().filter(|o| o.started) {
                out.buf.extend_from_slice(row);
            }
            *header_line = Some(row.to_vec());
            return Ok(());
        }
        Taken::Row(shard) => shard,
    };
    let i = match outs.iter().position(|o| o.shard == shard) {
        Some(i) => i,
        None => {
            outs.push(Out {
                shard,
                buf: Vec::new(),
                rows: 0,
                started: false,
                ready: None,
                error: None,
                count: 0,
            });
            outs.len() - 1
        }
    };
    let out = &mut outs[i];
    out.buf.extend_from_slice(row);
    out.rows += 1;
    Ok(())
}

/// Reads whatever the shard has sent without waiting: an error it raised mid-COPY.
pub(super) fn early_answer(
    conn: &mut crate::backend::BackendConn,
    out: &mut Out,
    cout: &mut BytesMut,
) -> Result<(), Stop> {
    loop {
        match conn.stream.try_read_buf(&mut conn.read_buf) {
            Ok(0) => {
                conn.broken = true;
                return Err(BackendError::Closed.into());
            }
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(BackendError::Io(e).into()),
        }
    }
    while let Some(f) = protocol::split_frame(&mut conn.read_buf).map_err(BackendError::from)? {
        note_frame(conn, out, f, cout);
    }
    Ok(())
}

pub(super) fn note_frame(
    conn: &mut crate::backend::BackendConn,
    out: &mut Out,
    f: protocol::Frame,
    cout: &mut BytesMut,
) {
    match f.tag {
        b'C' => out.count = tag_count(f.body()),
        b'E' => {
            out.error.get_or_insert(f.raw);
        }
        b'N' => cout.extend_from_slice(&f.raw),
        b'S' => conn.note_parameter_status(f.body()),
        b'Z' => out.ready = Some(TxStatus::of_ready(f.body())),
        _ => {}
    }
}

/// Reads the shard's answer to the end of its COPY, up to its ReadyForQuery.
pub(super) async fn read_answer(
    conn: &mut crate::backend::BackendConn,
    out: &mut Out,
    cout: &mut BytesMut,
) -> Result<(), BackendError> {
    while out.ready.is_none() {
        let f = conn.read_frame().await?;
        note_frame(conn, out, f, cout);
    }
    Ok(())
}
