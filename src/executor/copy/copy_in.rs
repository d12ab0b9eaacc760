//! COPY FROM STDIN split row by row to the shards' COPYs, over the session's connections
//! ([`Host`]); the session hands it the client's CopyData, CopyDone and CopyFail.
//!
//! The first shard's COPY is opened at once, and its CopyInResponse answers the client (so a
//! misspelt column fails before any data is sent, as it does on PostgreSQL); the others open when
//! a row first goes to them. Rows are collected per shard and sent as one CopyData per 64 kB, so
//! memory holds at most that per shard plus one client message. Outside a transaction block each
//! shard's COPY runs in a block of its own, and the blocks commit together (two-phase when
//! several shards took rows) once every shard has taken its rows, so a failure anywhere leaves no
//! rows behind. Inside a block, the shards join it and a failure fails it, as on PostgreSQL.

use std::sync::Arc;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use super::shards::{early_answer, read_answer, take_row, ShardCopy};
use super::{CopyError, CopyFormat, RowReader, RowRouter, Splitter};
use crate::backend::BackendError;
use crate::client_error::ClientError;
use crate::executor::gather::Sink;
use crate::executor::host::{Host, HostError, Shared};
use crate::model::ShardId;
use crate::protocol::{self, MessageBuilder, TxStatus};
use crate::router::plan::CopyPlan;

/// Rows are sent to a shard once this much has collected for it.
const FLUSH_AT: usize = 64 * 1024;

/// A COPY over several shards, as routing made it.
pub struct CopyJob {
    pub plan: Arc<CopyPlan>,
    pub shards: Vec<ShardId>,
    /// What each shard runs.
    pub sql: String,
}

/// A COPY FROM STDIN in progress: the client's CopyData goes here until CopyDone or CopyFail.
pub struct CopyIn {
    /// Started by Execute (extended protocol): ReadyForQuery waits for the client's Sync.
    pub extended: bool,
    plan: Arc<CopyPlan>,
    sql: String,
    /// `None` for a duplicated table, whose every copy takes the client's data as it comes.
    reader: Option<RowReader>,
    splitter: Splitter,
    /// The header line when every shard must see it (HEADER MATCH, and the binary format's
    /// header).
    header_line: Option<Vec<u8>>,
    in_block: bool,
    outs: Vec<ShardCopy>,
}

/// Why a COPY FROM stops early.
enum Stop<E> {
    /// The client is told this (an ErrorResponse frame); the session goes on.
    Fail(Bytes),
    Lost(E),
}

impl<E: From<BackendError>> From<BackendError> for Stop<E> {
    fn from(e: BackendError) -> Stop<E> {
        Stop::Lost(e.into())
    }
}

/// After a shard connection failed mid-COPY: every connection the COPY holds is in an unknown
/// state.
fn lost<H: Host>(host: &mut H, e: H::Error) -> H::Error {
    for p in host.links().parked.iter_mut() {
        if p.unsynced {
            p.conn.conn.broken = true;
        }
    }
    e
}

impl CopyIn {
    /// Opens the first shard's COPY (every copy's, for a duplicated table), whose
    /// CopyInResponse answers the client; the COPY in progress, or nothing when it failed and
    /// its error was written.
    pub async fn start<H: Host>(
        host: &mut H,
        shared: Shared<'_>,
        job: CopyJob,
        extended: bool,
    ) -> Result<Option<Box<CopyIn>>, H::Error> {
        let links = host.links();
        let in_block = links.current_status().in_block()
            || links.parked.iter().any(|p| p.tx_status.in_block());
        let snapshot = shared.catalog.snapshot();
        let format = CopyFormat::from_options(&job.plan.options);
        let (reader, splitter) = match &format {
            Ok(f) => (
                (!job.plan.duplicated).then(|| {
                    RowReader::new(RowRouter::new(
                        snapshot.clone(),
                        job.plan.table,
                        f.clone(),
                        &job.plan.columns,
                        &job.plan.key_positions,
                        job.plan.root_key,
                    ))
                }),
                Splitter::new(f),
            ),
            Err(_) => (None, Splitter::new(&CopyFormat::text())),
        };
        // A shard the block already uses opens first, so a failure fails the block there.
        let mut shards = job.shards;
        if let Some(i) = shards.iter().position(|&s| links.in_block_on(s)) {
            shards.swap(0, i);
        }
        let mut st = Box::new(CopyIn {
            extended,
            plan: job.plan,
            sql: job.sql,
            reader,
            splitter,
            header_line: None,
            in_block,
            outs: shards.iter().map(|&shard| ShardCopy::new(shard)).collect(),
        });
        let opening = if st.plan.duplicated { st.outs.len() } else { 1 };
        let mut response = None;
        let mut stop = None;
        for i in 0..opening {
            match st.open_shard(host, shared, i).await {
                Ok(g) => {
                    response.get_or_insert(g);
                }
                Err(s) => {
                    stop = Some(s);
                    break;
                }
            }
        }
        if stop.is_none() {
            if let Err(e) = &format {
                stop = Some(Stop::Fail(e.error_frame()));
            }
        }
        if let (None, Some(g)) = (&stop, &response) {
            // The shard reads the columns COPY fills; without a column list the key's place
            // was taken from the table's columns, which must be the same ones.
            let ncols = g.get(6..8).map_or(0, |b| i16::from_be_bytes([b[0], b[1]]));
            if !st.plan.duplicated
                && !st.plan.named_columns
                && ncols as usize != st.plan.columns.len()
            {
                let e = CopyError::ColumnCount {
                    table: table_name(shared, &st.plan),
                };
                stop = Some(Stop::Fail(e.error_frame()));
            }
        }
        match stop {
            None => {
                if let Some(g) = response {
                    host.links_and_sink().1.out().extend_from_slice(&g);
                }
                Ok(Some(st))
            }
            Some(Stop::Fail(e)) => st.abort(host, shared, e).await.map(|()| None),
            Some(Stop::Lost(e)) => Err(lost(host, e)),
        }
    }

    /// Sends the COPY to the shard of `self.outs[i]` (joining the transaction block, or in a
    /// block of its own) and returns its CopyInResponse.
    async fn open_shard<H: Host>(
        &mut self,
        host: &mut H,
        shared: Shared<'_>,
        i: usize,
    ) -> Result<Bytes, Stop<H::Error>> {
        let shard = self.outs[i].shard;
        if let Err(e) = host.join(&[shard]).await {
            return Err(match e.into_backend() {
                Ok(e) => {
                    shared.metrics.backend_error(shard);
                    Stop::Fail(e.error_frame())
                }
                Err(other) => Stop::Lost(other),
            });
        }
        let (links, mut sink) = host.links_and_sink();
        let Some(p) = links.parked.get_mut(shard) else {
            return Err(Stop::Fail(CopyError::NoConnection.error_frame()));
        };
        // Held by the COPY: not given back to the pool, closed if the client leaves.
        p.unsynced = true;
        p.batch_sent = true;
        let out = &mut self.outs[i];
        out.started = true;
        let conn = &mut p.conn.conn;
        if !self.in_block {
            if let Err(message) = conn.run_internal("BEGIN").await? {
                out.ready = Some(TxStatus::Idle);
                return Err(Stop::Fail(CopyError::Begin(message).error_frame()));
            }
        }
        let mut query = BytesMut::new();
        protocol::query(&mut query, &self.sql);
        conn.unnamed = None;
        conn.stream
            .write_all(&query)
            .await
            .map_err(BackendError::Io)?;
        let response = loop {
            let f = conn.read_frame().await?;
            match f.tag {
                b'G' => break f.raw,
                b'E' => {
                    out.error.get_or_insert(f.raw);
                }
                b'N' => sink.out().extend_from_slice(&f.raw),
                b'S' => conn.note_parameter_status(f.body()),
                b'Z' => {
                    out.ready = Some(TxStatus::of_ready(f.body()));
                    let e = out
                        .error
                        .clone()
                        .unwrap_or_else(|| CopyError::NotStarted.error_frame());
                    return Err(Stop::Fail(e));
                }
                _ => {}
            }
        };
        if let Some(h) = &self.header_line {
            out.buf.splice(0..0, h.iter().copied());
        }
        Ok(response)
    }

    /// The client's CopyData: cut into rows, each to its shard's buffer; the full buffers
    /// sent. The COPY still in progress, or nothing when it failed and its error was written.
    pub async fn data<H: Host>(
        mut self: Box<Self>,
        host: &mut H,
        shared: Shared<'_>,
        data: &[u8],
    ) -> Result<Option<Box<CopyIn>>, H::Error> {
        match self.take_data(host, shared, data).await {
            Ok(()) => Ok(Some(self)),
            Err(Stop::Fail(e)) => self.abort(host, shared, e).await.map(|()| None),
            Err(Stop::Lost(e)) => Err(lost(host, e)),
        }
    }

    async fn take_data<H: Host>(
        &mut self,
        host: &mut H,
        shared: Shared<'_>,
        data: &[u8],
    ) -> Result<(), Stop<H::Error>> {
        let CopyIn {
            reader,
            splitter,
            header_line,
            outs,
            ..
        } = self;
        match reader {
            Some(reader) if !reader.ended() => splitter
                .feed(data, |row| take_row(row, reader, header_line, outs))
                .map_err(|e| Stop::Fail(e.error_frame()))?,
            // The rest of the data after the end marker, which PostgreSQL ignores too.
            Some(_) => return Ok(()),
            None => {
                for out in outs.iter_mut() {
                    out.buf.extend_from_slice(data);
                }
            }
        }
        self.send_rows(host, shared, false).await
    }

    /// Sends each shard's collected rows once there are `FLUSH_AT` bytes of them (`all`: any),
    /// opening the shard's COPY first if it has none yet.
    async fn send_rows<H: Host>(
        &mut self,
        host: &mut H,
        shared: Shared<'_>,
        all: bool,
    ) -> Result<(), Stop<H::Error>> {
        for i in 0..self.outs.len() {
            let out = &self.outs[i];
            if out.buf.is_empty() || (!all && out.buf.len() < FLUSH_AT) {
                continue;
            }
            if !out.started {
                if out.rows == 0 {
                    // Only a header line waits here: the shard has no rows to take.
                    continue;
                }
                self.open_shard(host, shared, i).await?;
            }
            let out = &mut self.outs[i];
            let (links, mut sink) = host.links_and_sink();
            let Some(p) = links.parked.get_mut(out.shard) else {
                continue;
            };
            let conn = &mut p.conn.conn;
            let mut msg = BytesMut::with_capacity(out.buf.len() + 5);
            MessageBuilder::new(&mut msg, b'd').bytes(&out.buf).finish();
            out.buf.clear();
            conn.stream
                .write_all(&msg)
                .await
                .map_err(BackendError::Io)?;
            // A shard that refused a row says so at once; stop there rather than send it the
            // rest for nothing.
            early_answer(conn, out, sink.out())?;
            if let Some(e) = &out.error {
                return Err(Stop::Fail(e.clone()));
            }
        }
        Ok(())
    }

    /// The client's CopyDone: the last rows out, every shard's COPY ended, the blocks
    /// committed when every shard took its rows, `COPY n` (or the error) to the client. Whether
    /// the COPY failed.
    pub async fn done<H: Host>(
        mut self: Box<Self>,
        host: &mut H,
        shared: Shared<'_>,
    ) -> Result<bool, H::Error> {
        let table = table_name(shared, &self.plan);
        let CopyIn {
            reader,
            splitter,
            header_line,
            outs,
            ..
        } = &mut *self;
        // A duplicated table's data went out as it came: nothing was cut.
        let last =
            match reader {
                Some(reader) => splitter
                    .finish(&table, reader.next_line())
                    .and_then(|last| match last {
                        Some(row) => take_row(&row, reader, header_line, outs),
                        None => Ok(()),
                    }),
                None => Ok(()),
            };
        let mut step = last.map_err(|e| Stop::Fail(e.error_frame()));
        if step.is_ok() {
            step = self.send_rows(host, shared, true).await;
        }
        match step {
            Ok(()) => {}
            Err(Stop::Fail(e)) => return self.abort(host, shared, e).await.map(|()| true),
            Err(Stop::Lost(e)) => return Err(lost(host, e)),
        }
        if let Err(e) = self.end_on_shards(host).await {
            return Err(lost(host, e.into()));
        }
        let mut error = self.outs.iter().find_map(|o| o.error.clone());
        let links = host.links();
        for out in self.outs.iter().filter(|o| o.started) {
            let Some(p) = links.parked.get_mut(out.shard) else {
                continue;
            };
            p.unsynced = false;
            p.batch_sent = false;
            p.tx_status = out.ready.unwrap_or(TxStatus::Idle);
            p.wrote |= out.count > 0;
        }
        if !self.in_block {
            // The COPY's own blocks end together: committed as one distributed transaction
            // once every shard took its rows, else rolled back everywhere.
            if error.is_some() {
                host.links().end_open_blocks("ROLLBACK").await?;
            } else if let Err(e) = host.commit().commit_participants().await? {
                error = Some(e);
            }
        }
        let failed = error.is_some();
        let (_, mut sink) = host.links_and_sink();
        match error {
            Some(e) => sink.out().extend_from_slice(&e),
            None => {
                let mut counts = self.outs.iter().filter(|o| o.started).map(|o| o.count);
                // The copies of a duplicated table take the same rows: the client hears one.
                let total: u64 = if self.plan.duplicated {
                    counts.next().unwrap_or(0)
                } else {
                    counts.sum()
                };
                protocol::command_complete(sink.out(), &format!("COPY {total}"));
            }
        }
        Ok(failed)
    }

    /// CopyDone to every shard whose COPY is still open, then each one's answer.
    async fn end_on_shards<H: Host>(&mut self, host: &mut H) -> Result<(), BackendError> {
        let mut done = BytesMut::new();
        MessageBuilder::new(&mut done, b'c').finish();
        let (links, mut sink) = host.links_and_sink();
        for out in self.outs.iter().filter(|o| o.started && o.ready.is_none()) {
            if let Some(p) = links.parked.get_mut(out.shard) {
                if let Err(e) = p.conn.conn.stream.write_all(&done).await {
                    p.conn.conn.broken = true;
                    return Err(BackendError::Io(e));
                }
            }
        }
        for out in self
            .outs
            .iter_mut()
            .filter(|o| o.started && o.ready.is_none())
        {
            if let Some(p) = links.parked.get_mut(out.shard) {
                read_answer(&mut p.conn.conn, out, sink.out()).await?;
            }
        }
        Ok(())
    }

    /// Ends the COPY on every shard it reached with CopyFail, undoes their blocks (or fails
    /// the client's), and answers the client with `error`.
    pub async fn abort<H: Host>(
        mut self: Box<Self>,
        host: &mut H,
        shared: Shared<'_>,
        error: Bytes,
    ) -> Result<(), H::Error> {
        if self.in_block && !self.outs.iter().any(|o| o.started) {
            // As on PostgreSQL, a failed COPY fails the transaction block: a shard of the
            // block takes a COPY that fails.
            if !self.outs.is_empty() {
                match self.open_shard(host, shared, 0).await {
                    Ok(_) | Err(Stop::Fail(_)) => {}
                    Err(Stop::Lost(e)) => return Err(lost(host, e)),
                }
            }
        }
        let mut fail = BytesMut::new();
        MessageBuilder::new(&mut fail, b'f')
            .cstr(b"COPY aborted by shardwire: the COPY failed on another shard or in the proxy")
            .finish();
        let in_block = self.in_block;
        for out in self.outs.iter_mut().filter(|o| o.started) {
            let Some(p) = host.links().parked.get_mut(out.shard) else {
                continue;
            };
            let conn = &mut p.conn.conn;
            let ended = async {
                if out.ready.is_none() {
                    conn.stream.write_all(&fail).await?;
                    // Its answer is the CopyFail's own error, which the client need not see.
                    let mut discard = BytesMut::new();
                    read_answer(conn, out, &mut discard).await?;
                }
                if !in_block {
                    // Its own block ends either way; a ROLLBACK that fails has nothing to undo.
                    let _ = conn.run_internal("ROLLBACK").await?;
                    out.ready = Some(TxStatus::Idle);
                }
                Ok::<_, BackendError>(())
            }
            .await;
            if let Err(e) = ended {
                conn.broken = true;
                return Err(lost(host, e.into()));
            }
            p.unsynced = false;
            p.batch_sent = false;
            p.tx_status = out.ready.unwrap_or(TxStatus::Idle);
        }
        host.links_and_sink().1.out().extend_from_slice(&error);
        Ok(())
    }
}

fn table_name(shared: Shared<'_>, plan: &CopyPlan) -> String {
    shared
        .catalog
        .snapshot()
        .table(plan.table)
        .map(|t| t.qualified_name())
        .unwrap_or_default()
}
