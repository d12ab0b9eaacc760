//! Batches of the proxy's own statements on several shards at once, each shard's answers kept
//! statement by statement: a row move sends one batch per shard per step, and checks each
//! statement's count on its own (rows deleted against rows locked).

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use super::frames::cstr;
use crate::backend::{BackendConn, BackendError};
use crate::protocol::TxStatus;

/// What one statement of a batch answered.
#[derive(Default)]
pub struct Reply {
    pub description: Option<Bytes>,
    pub rows: Vec<Bytes>,
    pub tag: Option<String>,
}

impl Reply {
    /// The row count of its command tag (`UPDATE 3`, `INSERT 0 3`).
    pub fn count(&self) -> u64 {
        self.tag
            .as_deref()
            .and_then(super::frames::tag_count)
            .unwrap_or(0)
    }
}

/// One shard's answers to a batch ending with Sync: a reply per statement that completed, and
/// the error that skipped the rest, if one did.
#[derive(Default)]
pub struct Replies {
    pub statements: Vec<Reply>,
    pub error: Option<Bytes>,
    pub notices: BytesMut,
    /// The transaction status of its ReadyForQuery.
    pub status: TxStatus,
}

/// Sends `messages[i]` (extended-protocol statements ending with one Sync) to `conns[i]`, all
/// before reading any answer, then reads each connection's answers up to its ReadyForQuery.
pub async fn run_batches_each(
    conns: &mut [&mut BackendConn],
    messages: &[BytesMut],
) -> Result<Vec<Replies>, BackendError> {
    for (conn, msg) in conns.iter_mut().zip(messages) {
        // The messages parse into the backend's unnamed statement.
        conn.unnamed = None;
        let msg = conn.with_own_types(msg);
        conn.stream.write_all(&msg).await?;
    }
    let mut out = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        out.push(read_replies(conn).await?);
    }
    Ok(out)
}

async fn read_replies(conn: &mut BackendConn) -> Result<Replies, BackendError> {
    let mut replies = Replies::default();
    let mut current = Reply::default();
    loop {
        let f = conn.read_frame().await?;
        match f.tag {
            b'T' => current.description = Some(f.raw),
            b'D' => current.rows.push(f.raw),
            b'C' => {
                current.tag = Some(String::from_utf8_lossy(cstr(f.body())).into_owned());
                replies.statements.push(std::mem::take(&mut current));
            }
            b'I' => replies.statements.push(std::mem::take(&mut current)),
            b'E' => {
                replies.error.get_or_insert(f.raw);
            }
            b'N' => replies.notices.extend_from_slice(&f.raw),
            b'S' => conn.note_parameter_status(f.body()),
            b'Z' => {
                replies.status = TxStatus::of_ready(f.body());
                return Ok(replies);
            }
            _ => {}
        }
    }
}
