//! COPY FROM's part on each shard: the rows taken to the shard's buffer, and what the shard
//! answers while its COPY runs and at its end. The session drives the COPY and the client's
//! messages; this reads and writes no session state.

use bytes::{Bytes, BytesMut};

use super::{CopyError, RowReader, Taken};
use crate::backend::{BackendConn, BackendError};
use crate::model::ShardId;
use crate::protocol::{self, TxStatus};

/// One shard's part of a COPY FROM.
pub struct ShardCopy {
    pub shard: ShardId,
    pub buf: Vec<u8>,
    /// Rows collected for it, sent or not.
    pub rows: u64,
    /// Its COPY was sent (it needs CopyDone or CopyFail, and its block an end).
    pub started: bool,
    /// Its ReadyForQuery came, with this status: the shard's COPY is over.
    pub ready: Option<TxStatus>,
    pub error: Option<Bytes>,
    pub count: u64,
}

impl ShardCopy {
    pub fn new(shard: ShardId) -> ShardCopy {
        ShardCopy {
            shard,
            buf: Vec::new(),
            rows: 0,
            started: false,
            ready: None,
            error: None,
            count: 0,
        }
    }
}

/// One row of a COPY FROM into a sharded table, to its shard's buffer (a header to every
/// shard's).
pub fn take_row(
    row: &[u8],
    reader: &mut RowReader,
    header_line: &mut Option<Vec<u8>>,
    outs: &mut Vec<ShardCopy>,
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
            outs.push(ShardCopy::new(shard));
            outs.len() - 1
        }
    };
    let out = &mut outs[i];
    out.buf.extend_from_slice(row);
    out.rows += 1;
    Ok(())
}

/// Reads whatever the shard has sent without waiting: an error it raised mid-COPY.
pub fn early_answer(
    conn: &mut BackendConn,
    out: &mut ShardCopy,
    cout: &mut BytesMut,
) -> Result<(), BackendError> {
    loop {
        match conn.stream.try_read_buf(&mut conn.read_buf) {
            Ok(0) => {
                conn.broken = true;
                return Err(BackendError::Closed);
            }
            Ok(_) => continue,
            Err(e) if e.kind() == std::io::ErrorKind::WouldBlock => break,
            Err(e) => return Err(BackendError::Io(e)),
        }
    }
    while let Some(f) = protocol::split_frame(&mut conn.read_buf)? {
        note_frame(conn, out, f, cout);
    }
    Ok(())
}

pub fn note_frame(
    conn: &mut BackendConn,
    out: &mut ShardCopy,
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
pub async fn read_answer(
    conn: &mut BackendConn,
    out: &mut ShardCopy,
    cout: &mut BytesMut,
) -> Result<(), BackendError> {
    while out.ready.is_none() {
        let f = conn.read_frame().await?;
        note_frame(conn, out, f, cout);
    }
    Ok(())
}

/// The count of a `COPY n` tag.
pub fn tag_count(body: &[u8]) -> u64 {
    let tag = body.split(|&c| c == 0).next().unwrap_or(body);
    std::str::from_utf8(tag)
        .ok()
        .and_then(|t| t.rsplit(' ').next()?.parse().ok())
        .unwrap_or(0)
}
