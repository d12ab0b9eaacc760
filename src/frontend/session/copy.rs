//! COPY of sharded tables, in the session: COPY FROM STDIN split row by row to the shards'
//! COPYs, COPY TO STDOUT gathered from every shard holding the table.
//!
//! COPY FROM: the first shard's COPY is opened at once, and its CopyInResponse answers the
//! client (so a misspelt column fails before any data is sent, as it does on PostgreSQL); the
//! others open when a row first goes to them. Rows are collected per shard and sent as one
//! CopyData per 64 kB, so memory holds at most that per shard plus one client message. Outside
//! a transaction block each shard's COPY runs in a block of its own, committed only once every
//! shard has taken its rows, so a failure anywhere leaves no rows behind (a COMMIT failing on
//! one shard after others committed is the one gap until distributed transactions land).
//! Inside a block, the shards join it and a failure fails it, as on PostgreSQL.

use super::dest::Dest;
use super::{Session, SessionError};
use crate::backend::BackendError;
use crate::catalog::{ShardId, Snapshot};
use crate::client_error::ClientError;
use crate::executor::copy::shards::{early_answer, read_answer, take_row, ShardCopy};
use crate::executor::copy::{CopyError, CopyFormat, RowReader, RowRouter, Splitter};
use crate::executor::participants::ShardLink;
use crate::frontend::socket::ClientSocket;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, MessageBuilder, TxStatus};
use crate::router::plan::CopyPlan;
use crate::router::route::{self as routing, Params, Route};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio::io::AsyncWriteExt;

mod out;

/// Rows are sent to a shard once this much has collected for it.
const FLUSH_AT: usize = 64 * 1024;

/// A COPY that the session splits or gathers, as `Dest` carries it.
pub(super) struct CopyJob {
    plan: Arc<CopyPlan>,
    shards: Vec<ShardId>,
    /// What each shard runs.
    sql: String,
}

/// What the session is in the middle of, while the client's messages come to
/// [`Session::on_copy_frame`] first.
pub(super) enum CopyState {
    /// A Bind of the COPY was answered; its Execute starts it.
    Portal(CopyJob),
    In(Box<CopyIn>),
    /// An extended-protocol COPY ended: its Sync gets ReadyForQuery with this status. After a
    /// failure the messages before that Sync are dropped, as PostgreSQL drops them.
    AwaitSync {
        status: TxStatus,
        failed: bool,
    },
}

/// A COPY FROM STDIN in progress: the client's CopyData goes here until CopyDone or CopyFail.
pub(super) struct CopyIn {
    /// Started by Execute (extended protocol): ReadyForQuery waits for the client's Sync.
    extended: bool,
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
enum Stop {
    /// The client is told this (an ErrorResponse frame); the session goes on.
    Fail(Bytes),
    Lost(SessionError),
}

impl From<SessionError> for Stop {
    fn from(e: SessionError) -> Stop {
        Stop::Lost(e)
    }
}

impl From<BackendError> for Stop {
    fn from(e: BackendError) -> Stop {
        Stop::Lost(e.into())
    }
}

impl Session {
    /// Where a COPY of a sharded or duplicated table goes.
    pub(super) fn copy_dest(
        &mut self,
        plan: &Arc<CopyPlan>,
        snapshot: &Snapshot,
        params: &Params<'_>,
    ) -> Dest {
        let mut shards = plan.shards.clone();
        if let Some(select) = &plan.select {
            match routing::route(snapshot, select, params) {
                Ok(r) => match r.route {
                    Route::Single(s) => return Dest::Shard(s),
                    Route::Multi(s) => shards = s,
                    Route::All => {}
                },
                Err(e) => return Dest::refuse(&e),
            }
            if let Some(why) = &select.multi_shard_refusal {
                return Dest::refuse(&FrontendError::NotAcrossShards(why.clone()));
            }
            let m = &select.merge;
            if !m.order.is_empty() || m.bounds_rows() {
                return Dest::refuse(&FrontendError::CopyOrdered);
            }
        }
        // COPY TO of a table reads a shard's partitioned table through the rewritten query,
        // even from one shard.
        let rewritten = !plan.from && plan.select.is_none();
        if let ([one], false) = (shards.as_slice(), rewritten) {
            return Dest::Shard(*one);
        }
        Dest::Copy(Box::new(CopyJob {
            plan: plan.clone(),
            shards,
            sql: plan.shard_sql.clone(),
        }))
    }

    /// Runs a COPY the client sent as a simple query (`tag` `Q`), or answers its Bind (`B`)
    /// and waits for its Execute.
    pub(super) async fn run_copy(
        &mut self,
        job: CopyJob,
        tag: u8,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        // Whatever the client is still owed comes first.
        self.drain_current().await?;
        if tag == b'B' {
            MessageBuilder::new(&mut self.cout, b'2').finish();
            self.copy = Some(Box::new(CopyState::Portal(job)));
            return Ok(());
        }
        self.start_copy(job, false, client).await
    }

    async fn start_copy(
        &mut self,
        job: CopyJob,
        extended: bool,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        if job.plan.from {
            self.start_copy_in(job, extended).await
        } else {
            self.copy_out(job, extended, client).await
        }
    }

    fn parked_on(&mut self, shard: ShardId) -> Option<&mut ShardLink> {
        self.links.parked.get_mut(shard)
    }

    /// The client's status after a COPY over parked connections, and the connections given
    /// back where nothing holds them; a failed block is answered from a shard that failed it.
    fn end_copy(&mut self, extended: bool, failed: bool) {
        let status = TxStatus::combined(self.links.parked.iter().map(|p| p.tx_status));
        if extended {
            self.copy = Some(Box::new(CopyState::AwaitSync { status, failed }));
        } else {
            protocol::ready_for_query(&mut self.cout, status);
        }
        self.settle_after_shards();
    }

    /// COPY … FROM STDIN: opens the first shard's COPY, whose CopyInResponse answers the
    /// client; the client's data then comes to [`Session::on_copy_frame`].
    async fn start_copy_in(&mut self, job: CopyJob, extended: bool) -> Result<(), SessionError> {
        let in_block = matches!(
            self.links.current_status(),
            TxStatus::InBlock | TxStatus::Failed
        ) || self.links.parked.iter().any(|p| p.tx_status.in_block());
        if self.links.current.is_some() {
            self.drain_current().await?;
            self.park_current();
        }
        let snapshot = self.ctx.catalog.snapshot();
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
        let mut shards = job.shards.clone();
        if let Some(i) = shards.iter().position(|s| {
            self.links
                .parked
                .iter()
                .any(|p| p.conn.shard == *s && p.tx_status.in_block())
        }) {
            shards.swap(0, i);
        }
        let mut st = CopyIn {
            extended,
            plan: job.plan.clone(),
            sql: job.sql,
            reader,
            splitter,
            header_line: None,
            in_block,
            outs: shards.iter().map(|&shard| ShardCopy::new(shard)).collect(),
        };
        let opening = if job.plan.duplicated {
            st.outs.len()
        } else {
            1
        };
        let mut response = None;
        let mut stop = None;
        for i in 0..opening {
            match self.open_shard(&mut st, i).await {
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
                    table: snapshot
                        .table(st.plan.table)
                        .map(|t| t.qualified_name())
                        .unwrap_or_default(),
                };
                stop = Some(Stop::Fail(e.error_frame()));
            }
        }
        match stop {
            None => {
                if let Some(g) = response {
                    self.cout.extend_from_slice(&g);
                }
                self.copy = Some(Box::new(CopyState::In(Box::new(st))));
                Ok(())
            }
            Some(Stop::Fail(e)) => self.abort_copy(st, e).await,
            Some(Stop::Lost(e)) => Err(self.copy_lost(e)),
        }
    }

    /// After a shard connection failed mid-COPY: every connection the COPY holds is in an
    /// unknown state.
    fn copy_lost(&mut self, e: SessionError) -> SessionError {
        for p in self.links.parked.iter_mut() {
            if p.unsynced {
                p.conn.conn.broken = true;
            }
        }
        e
    }

    /// Sends the COPY to the shard of `st.outs[i]` (joining the transaction block, or in a
    /// block of its own) and returns its CopyInResponse.
    async fn open_shard(&mut self, st: &mut CopyIn, i: usize) -> Result<Bytes, Stop> {
        let shard = st.outs[i].shard;
        if let Err(e) = self.switch_to(shard).await {
            return Err(match e {
                SessionError::Backend(e) => {
                    self.ctx.metrics.backend_error(shard);
                    Stop::Fail(e.error_frame())
                }
                other => Stop::Lost(other),
            });
        }
        self.drain_current().await?;
        self.park_current();
        let Some(p) = self.links.parked.get_mut(shard) else {
            return Err(Stop::Fail(FrontendError::CopyNoConnection.error_frame()));
        };
        // Held by the COPY: not given back to the pool, closed if the client leaves.
        p.unsynced = true;
        p.batch_sent = true;
        let out = &mut st.outs[i];
        out.started = true;
        let conn = &mut p.conn.conn;
        if !st.in_block {
            if let Err(message) = conn.run_internal("BEGIN").await? {
                out.ready = Some(TxStatus::Idle);
                return Err(Stop::Fail(FrontendError::CopyBegin(message).error_frame()));
            }
        }
        let mut query = BytesMut::new();
        protocol::query(&mut query, &st.sql);
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
                b'N' => self.cout.extend_from_slice(&f.raw),
                b'S' => conn.note_parameter_status(f.body()),
                b'Z' => {
                    out.ready = Some(TxStatus::of_ready(f.body()));
                    let e = out
                        .error
                        .clone()
                        .unwrap_or_else(|| FrontendError::CopyNotStarted.error_frame());
                    return Err(Stop::Fail(e));
                }
                _ => {}
            }
        };
        if let Some(h) = &st.header_line {
            out.buf.splice(0..0, h.iter().copied());
        }
        Ok(response)
    }
    /// A client message while a COPY is in progress. Returns false when the message is not
    /// the COPY's and takes the usual path.
    pub(super) async fn on_copy_frame(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        let Some(state) = self.copy.take() else {
            return Ok(false);
        };
        let mut st = match *state {
            CopyState::In(st) => *st,
            CopyState::Portal(job) => {
                return match frame.tag {
                    b'E' => self.start_copy(job, true, client).await.map(|()| true),
                    b'D' => {
                        // A COPY returns no rows.
                        MessageBuilder::new(&mut self.cout, b'n').finish();
                        self.copy = Some(Box::new(CopyState::Portal(job)));
                        Ok(true)
                    }
                    b'H' => {
                        self.copy = Some(Box::new(CopyState::Portal(job)));
                        Ok(true)
                    }
                    _ => Ok(false),
                };
            }
            CopyState::AwaitSync { status, failed } => {
                if frame.tag == b'S' {
                    // The COPY ended its shards' parts itself.
                    self.links.block.atomic_batch = false;
                    protocol::ready_for_query(&mut self.cout, status);
                    return Ok(true);
                }
                if failed {
                    self.copy = Some(Box::new(CopyState::AwaitSync { status, failed }));
                    return Ok(true);
                }
                return Ok(false);
            }
        };
        let step = match frame.tag {
            b'd' => self.copy_data(&mut st, frame.body()).await,
            b'c' => return self.copy_done(st).await.map(|()| true),
            b'f' => {
                let message = frame.body().split(|&c| c == 0).next().unwrap_or_default();
                Err(Stop::Fail(
                    (FrontendError::CopyFailed(String::from_utf8_lossy(message).into_owned()))
                        .error_frame(),
                ))
            }
            // PostgreSQL ignores these during COPY FROM STDIN.
            b'H' | b'S' => Ok(()),
            other => Err(Stop::Fail(
                FrontendError::CopyUnexpectedMessage(other).error_frame(),
            )),
        };
        match step {
            Ok(()) => {
                self.copy = Some(Box::new(CopyState::In(Box::new(st))));
                Ok(true)
            }
            Err(Stop::Fail(e)) => self.abort_copy(st, e).await.map(|()| true),
            Err(Stop::Lost(e)) => Err(self.copy_lost(e)),
        }
    }

    /// Cuts the client's data into rows, each to its shard's buffer; sends the full buffers.
    async fn copy_data(&mut self, st: &mut CopyIn, data: &[u8]) -> Result<(), Stop> {
        let CopyIn {
            reader,
            splitter,
            header_line,
            outs,
            ..
        } = st;
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
        self.send_rows(st, false).await
    }

    /// Sends each shard's collected rows once there are `FLUSH_AT` bytes of them (`all`: any),
    /// opening the shard's COPY first if it has none yet.
    async fn send_rows(&mut self, st: &mut CopyIn, all: bool) -> Result<(), Stop> {
        for i in 0..st.outs.len() {
            let out = &st.outs[i];
            if out.buf.is_empty() || (!all && out.buf.len() < FLUSH_AT) {
                continue;
            }
            if !out.started {
                if out.rows == 0 {
                    // Only a header line waits here: the shard has no rows to take.
                    continue;
                }
                self.open_shard(st, i).await?;
            }
            let out = &mut st.outs[i];
            let Some(p) = self.links.parked.get_mut(out.shard) else {
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
            early_answer(conn, out, &mut self.cout)?;
            if let Some(e) = &out.error {
                return Err(Stop::Fail(e.clone()));
            }
        }
        Ok(())
    }

    /// CopyDone from the client: the last rows out, every shard's COPY ended, the blocks
    /// committed when every shard took its rows, `COPY n` to the client.
    async fn copy_done(&mut self, mut st: CopyIn) -> Result<(), SessionError> {
        let table = self.copy_table_name(&st);
        let CopyIn {
            reader,
            splitter,
            header_line,
            outs,
            ..
        } = &mut st;
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
            step = self.send_rows(&mut st, true).await;
        }
        match step {
            Ok(()) => {}
            Err(Stop::Fail(e)) => return self.abort_copy(st, e).await,
            Err(Stop::Lost(e)) => return Err(self.copy_lost(e)),
        }
        let mut done = BytesMut::new();
        MessageBuilder::new(&mut done, b'c').finish();
        for out in st.outs.iter().filter(|o| o.started && o.ready.is_none()) {
            if let Some(p) = self.links.parked.get_mut(out.shard) {
                if let Err(e) = p.conn.conn.stream.write_all(&done).await {
                    p.conn.conn.broken = true;
                    return Err(self.copy_lost(BackendError::Io(e).into()));
                }
            }
        }
        for out in st
            .outs
            .iter_mut()
            .filter(|o| o.started && o.ready.is_none())
        {
            if let Some(p) = self.links.parked.get_mut(out.shard) {
                if let Err(e) = read_answer(&mut p.conn.conn, out, &mut self.cout).await {
                    return Err(self.copy_lost(e.into()));
                }
            }
        }
        let mut error = st.outs.iter().find_map(|o| o.error.clone());
        for out in st.outs.iter().filter(|o| o.started) {
            let Some(p) = self.links.parked.get_mut(out.shard) else {
                continue;
            };
            p.unsynced = false;
            p.batch_sent = false;
            p.tx_status = out.ready.unwrap_or(TxStatus::Idle);
            p.wrote |= out.count > 0;
        }
        if !st.in_block {
            // The COPY's own blocks end together: committed as one distributed transaction
            // once every shard took its rows, else rolled back everywhere.
            if error.is_some() {
                self.end_every_participant("ROLLBACK").await?;
            } else if let Err(e) = self.commit_participants().await? {
                error = Some(e);
            }
        }
        let failed = error.is_some();
        match error {
            Some(e) => self.cout.extend_from_slice(&e),
            None => {
                let mut counts = st.outs.iter().filter(|o| o.started).map(|o| o.count);
                // The copies of a duplicated table take the same rows: the client hears one.
                let total: u64 = if st.plan.duplicated {
                    counts.next().unwrap_or(0)
                } else {
                    counts.sum()
                };
                protocol::command_complete(&mut self.cout, &format!("COPY {total}"));
            }
        }
        self.end_copy(st.extended, failed);
        Ok(())
    }

    fn copy_table_name(&self, st: &CopyIn) -> String {
        self.ctx
            .catalog
            .snapshot()
            .table(st.plan.table)
            .map(|t| t.qualified_name())
            .unwrap_or_default()
    }

    /// Ends the COPY on every shard it reached with CopyFail, undoes their blocks (or fails
    /// the client's), and answers the client with `error`.
    async fn abort_copy(&mut self, mut st: CopyIn, error: Bytes) -> Result<(), SessionError> {
        if st.in_block && !st.outs.iter().any(|o| o.started) {
            // As on PostgreSQL, a failed COPY fails the transaction block: a shard of the
            // block takes a COPY that fails.
            if let Some(i) = (0..st.outs.len()).next() {
                match self.open_shard(&mut st, i).await {
                    Ok(_) | Err(Stop::Fail(_)) => {}
                    Err(Stop::Lost(e)) => return Err(self.copy_lost(e)),
                }
            }
        }
        let mut fail = BytesMut::new();
        MessageBuilder::new(&mut fail, b'f')
            .cstr(b"COPY aborted by shardwire: the COPY failed on another shard or in the proxy")
            .finish();
        for out in st.outs.iter_mut().filter(|o| o.started) {
            let Some(p) = self.links.parked.get_mut(out.shard) else {
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
                if !st.in_block {
                    // Its own block ends either way; a ROLLBACK that fails has nothing to undo.
                    let _ = conn.run_internal("ROLLBACK").await?;
                    out.ready = Some(TxStatus::Idle);
                }
                Ok::<_, BackendError>(())
            }
            .await;
            if let Err(e) = ended {
                conn.broken = true;
                return Err(self.copy_lost(e.into()));
            }
            p.unsynced = false;
            p.batch_sent = false;
            p.tx_status = out.ready.unwrap_or(TxStatus::Idle);
        }
        self.cout.extend_from_slice(&error);
        self.end_copy(st.extended, true);
        Ok(())
    }
}
