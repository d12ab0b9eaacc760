//! The rows of an extended-protocol portal over several shards, read as the client's
//! row-limited Executes ask for them (pgjdbc's fetch size, asyncpg's cursors): each shard runs
//! the statement's Execute without a row limit and its rows wait in the connection, which
//! PostgreSQL stops filling once the socket is full; the proxy reads a batch of a shard's rows
//! only when the ORDER BY merge needs its next row ([`Merging`]). It holds at most a batch per
//! shard, however many rows the portal has.

use std::collections::VecDeque;

use bytes::{Bytes, BytesMut};

use super::cursor::{Merging, Progress};
use super::{check_text_order, own_error, skip_to_end, Origin};
use crate::backend::{BackendConn, BackendError};
use crate::router::plan::Merge;

/// Rows read from one shard's connection at a time.
const BATCH: usize = 1_000;

/// A multi-shard portal's rows, still on its shards' connections past what was merged.
pub struct LiveRows {
    merging: Merging,
    /// The shard's Execute has ended (its rows are all read, or it failed).
    finished: Vec<bool>,
    /// The collation of text sort columns was checked.
    order_checked: bool,
}

/// What a [`LiveRows::take`] came to.
pub enum Taken {
    /// As many rows as asked for; more may follow.
    Suspended,
    /// Every row is out (or the LIMIT reached; the rest was read and dropped).
    Finished,
    /// A shard (or the merge) failed: its ErrorResponse; every shard's Execute is read to its end.
    Failed(Bytes),
}

impl LiveRows {
    /// `description`: the RowDescription read at the Bind, and the index of the shard that
    /// sent it.
    pub fn new(merge: Merge, description: Option<(Bytes, usize)>, shards: usize) -> LiveRows {
        let mut merging = Merging::new(merge, shards);
        if let Some((d, i)) = description {
            merging.fill(i, Some(d), VecDeque::new(), false);
        }
        LiveRows {
            merging,
            finished: vec![false; shards],
            order_checked: false,
        }
    }

    /// The client's RowDescription.
    pub fn description(&self) -> Option<Bytes> {
        self.merging.description()
    }

    /// Passes up to `n` rows (`None`: all the rest) to `emit`, counting them into `taken`,
    /// reading the shards' connections (`conns`, in the order of `origin.shards`) as the merge
    /// needs; their notices go to `notices`.
    pub async fn take(
        &mut self,
        conns: &mut [&mut BackendConn],
        origin: &Origin<'_>,
        n: Option<u64>,
        taken: &mut u64,
        notices: &mut BytesMut,
        emit: &mut (dyn FnMut(Bytes) + Send),
    ) -> Result<Taken, BackendError> {
        loop {
            let dry = match self.merging.take(n, taken, emit) {
                Ok(Progress::Done) => return Ok(Taken::Suspended),
                Ok(Progress::End) => {
                    self.skip_rest(conns).await?;
                    return Ok(Taken::Finished);
                }
                Ok(Progress::NeedRows(dry)) => dry,
                Err(message) => return self.fail(conns, own_error(&message)).await,
            };
            for i in dry {
                let batch = read_rows(conns[i], BATCH).await?;
                notices.extend_from_slice(&batch.notices);
                self.finished[i] = batch.done;
                if let Some(error) = batch.error {
                    return self.fail(conns, error).await;
                }
                self.merging.fill(i, None, batch.rows, batch.done);
            }
            if !self.order_checked && !self.merging.merge().order.is_empty() {
                if let Some((description, i)) = self.merging.shard_description() {
                    let description = description.clone();
                    self.order_checked = true;
                    let checked = check_text_order(
                        &description,
                        origin.shards[i],
                        self.merging.merge(),
                        origin.control,
                    )
                    .await;
                    if let Err(message) = checked {
                        return self.fail(conns, own_error(&message)).await;
                    }
                }
            }
        }
    }

    /// Reads and drops every shard's rows not read yet, up to each Execute's end.
    pub async fn skip_rest(&mut self, conns: &mut [&mut BackendConn]) -> Result<(), BackendError> {
        for (i, conn) in conns.iter_mut().enumerate() {
            if !self.finished[i] {
                skip_to_end(conn).await?;
                self.finished[i] = true;
            }
        }
        Ok(())
    }

    async fn fail(
        &mut self,
        conns: &mut [&mut BackendConn],
        error: Bytes,
    ) -> Result<Taken, BackendError> {
        self.skip_rest(conns).await?;
        Ok(Taken::Failed(error))
    }
}

/// Up to a batch of rows of an Execute still running on a shard.
struct RowBatch {
    rows: VecDeque<Bytes>,
    /// The Execute's end came (its CommandComplete, or its ErrorResponse in `error`).
    done: bool,
    notices: BytesMut,
    error: Option<Bytes>,
}

/// Reads up to `max` DataRows of the Execute running on `conn`, or up to its end.
async fn read_rows(conn: &mut BackendConn, max: usize) -> Result<RowBatch, BackendError> {
    let mut batch = RowBatch {
        rows: VecDeque::new(),
        done: false,
        notices: BytesMut::new(),
        error: None,
    };
    while batch.rows.len() < max {
        let f = conn.read_frame().await?;
        match f.tag {
            b'D' => batch.rows.push_back(f.raw),
            b'C' | b'I' => {
                batch.done = true;
                break;
            }
            b'E' => {
                batch.error = Some(f.raw);
                batch.done = true;
                break;
            }
            b'N' => batch.notices.extend_from_slice(&f.raw),
            b'S' => conn.note_parameter_status(f.body()),
            _ => {}
        }
    }
    Ok(batch)
}
