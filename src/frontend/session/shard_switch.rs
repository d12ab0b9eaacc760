//! Switching shards: the session moves its current connection to another shard while a
//! transaction or an extended-protocol batch spans several, parking the one it leaves.
//!
//! The session talks to one backend connection at a time (the fast path's). When a statement
//! routes elsewhere while that connection still belongs to the client (a transaction block, a
//! batch before its Sync), the connection is first drained — every answer the client is owed
//! read and passed on — and parked; the other shard's connection becomes the current one. A
//! shard joining a transaction block gets the block's BEGIN (and savepoints) first. ROLLBACK
//! and Sync reach the parked connections before the current one answers the client; a COMMIT
//! of a block that spans shards is the proxy's own (`commit.rs`: two-phase commit).

use super::{reserve_for_read, Session, SessionError};
use crate::backend::readiness::ReadArm;
use crate::backend::BackendError;
use crate::catalog::ShardId;
use crate::executor::participants::bound_lock_waits;
use crate::frontend::pipeline::Pending;
use crate::frontend::statements::ClientFrame;
use crate::protocol::{self, Extended, Frame, TxStatus};
use crate::sql::classify::{first_keyword, keyword, leading_keywords, may_start_with};
use bytes::BytesMut;
use tokio::io::{AsyncReadExt, AsyncWriteExt};

/// What the Sync that ends a batch does to each shard's part of it.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) enum AtSync {
    /// Commits it (or rolls it back, if it failed), as the client's Sync does.
    Commit,
    /// Leaves it open in a block, for the proxy to commit with the batch's other parts.
    Hold,
}

/// How a statement ends a transaction block, by its leading words.
pub(super) fn ends_block(sql: &[u8]) -> bool {
    const COMMIT: u128 = keyword(b"commit");
    const END: u128 = keyword(b"end");
    const ROLLBACK: u128 = keyword(b"rollback");
    const ABORT: u128 = keyword(b"abort");
    const PREPARED: u128 = keyword(b"prepared");
    const TO: u128 = keyword(b"to");
    match first_keyword(sql) {
        COMMIT | ROLLBACK => {
            let [_, w1] = leading_keywords::<2>(sql);
            !matches!(w1, PREPARED | TO)
        }
        END | ABORT => true,
        _ => false,
    }
}

pub(super) fn starts_block(sql: &[u8]) -> bool {
    const BEGIN: u128 = keyword(b"begin");
    const START: u128 = keyword(b"start");
    matches!(first_keyword(sql), BEGIN | START)
}

impl Session {
    /// Takes a backend connection for the route and brings its settings in line with the
    /// client's.
    async fn acquire(&mut self, shard: ShardId) -> Result<(), BackendError> {
        match self.ctx.pools.shard(shard).get().await {
            Ok(b) => {
                self.adopt(b);
                Ok(())
            }
            Err(e) => {
                self.ctx.metrics.backend_error(shard);
                Err(e)
            }
        }
    }

    /// A CancelRequest for the client reaches every shard connection the session holds while
    /// a statement runs on several of them (an idle one ignores it).
    pub(super) fn announce_running(&self) {
        self.cancel.slot.set_others(self.links.parked.cancel_keys());
    }

    /// Makes `shard`'s connection the current one: the one held already, a parked one, or one
    /// from the pool (joining the transaction block, if one is open).
    pub(super) async fn switch_to(&mut self, shard: ShardId) -> Result<(), SessionError> {
        if self.settings.changed && self.links.current.is_some() {
            self.read_settings().await?;
        }
        if self.links.current_shard() == Some(shard) {
            return Ok(());
        }
        // A batch that ran something on another shard and now goes on here: one transaction,
        // as PostgreSQL's batch is (committed at its Sync, `end_atomic_batch`).
        let batch_elsewhere = self
            .links
            .iter()
            .any(|link| link.batch_sent && link.shard() != shard);
        if batch_elsewhere && self.links.status() == TxStatus::Idle {
            self.links.block.atomic_batch = true;
        }
        if self.links.current.is_some() {
            if self.current_is_idle() && self.links.parked.is_empty() {
                self.release_current();
            } else {
                // Drained first: the answers owed include the ReadyForQuery of a BEGIN the
                // client pipelined before this statement.
                self.drain_current().await?;
                self.park_current();
            }
        }
        let in_block = self.links.parked.iter().any(|p| p.tx_status.in_block());
        if !in_block {
            // Whatever bounded the waits of an earlier block ended with it.
            self.links.block.waits_bounded = false;
        }
        // A connection held from before (a pinned session keeps its idle ones) joins an open
        // block as a new one does.
        let held = self.links.parked.take(shard);
        let joins = in_block
            && held
                .as_ref()
                .is_none_or(|link| link.tx_status == TxStatus::Idle);
        let bound_waits = if joins {
            bound_lock_waits(&self.ctx.config)
        } else {
            String::new()
        };
        if !bound_waits.is_empty() {
            // The block is about to span shards: a lock wait on one shard may now be part of
            // a deadlock no shard can see, so every participant's waits end.
            let alone: Vec<usize> = (0..self.links.parked.len())
                .filter(|&i| self.links.parked[i].tx_status == TxStatus::InBlock)
                .collect();
            // Only a connection between statements can take one of the proxy's: not one in
            // the middle of a COPY, of an extended-protocol batch, or of a portal's rows (its
            // waits then stay as the session set them).
            let between_statements = self.copy.is_none()
                && self.portals.on_shards().is_none()
                && alone.iter().all(|&i| !self.links.parked[i].unsynced);
            if alone.len() == 1 && between_statements && !self.links.block.waits_bounded {
                self.links.parked.ask(&alone, &bound_waits).await?;
                self.links.block.waits_bounded = true;
            }
        }
        match held {
            Some(link) => self.make_current(link),
            None => self.acquire(shard).await?,
        }
        if joins {
            let begin = self
                .links
                .block
                .begin_sql
                .clone()
                .unwrap_or_else(|| "BEGIN".into());
            let replay: Vec<String> = self.savepoint_replay().collect();
            if let Some(link) = self.links.current.as_mut() {
                // A simple query drops the backend's unnamed statement.
                link.conn.conn.unnamed = None;
                protocol::query(&mut link.out, &begin);
                self.pipeline.push(Pending::Internal, &mut self.cout);
                for savepoint in replay {
                    protocol::query(&mut link.out, &savepoint);
                    self.pipeline.push(Pending::Internal, &mut self.cout);
                }
                if !bound_waits.is_empty() {
                    protocol::query(&mut link.out, &bound_waits);
                    self.pipeline.push(Pending::Internal, &mut self.cout);
                }
                // The block is open there once BEGIN answers; until then it counts as open.
                link.tx_status = TxStatus::InBlock;
            }
        }
        Ok(())
    }

    /// Sends what is queued for the current connection and passes on every answer the client
    /// is still owed (asking the backend to flush first, mid-batch).
    pub(super) async fn drain_current(&mut self) -> Result<(), SessionError> {
        let Some(link) = self.links.current.as_mut() else {
            return Ok(());
        };
        if link.unsynced && !self.pipeline.is_empty() {
            protocol::flush(&mut link.out);
        }
        while let Some(link) = self.links.current.as_mut() {
            if link.out.is_empty() && self.pipeline.is_empty() {
                break;
            }
            if !link.out.is_empty() {
                if let Err(e) = link.conn.conn.stream.write_all(&link.out).await {
                    return Err(self.backend_lost(e));
                }
                link.out.clear();
                continue;
            }
            let conn = &mut link.conn.conn;
            reserve_for_read(&mut conn.read_buf);
            let n = conn.stream.read_buf(&mut conn.read_buf).await;
            let n = n.map_err(|e| self.backend_lost(e))?;
            if n == 0 {
                return Err(self.backend_lost(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.on_backend_data()?;
        }
        // Read by awaits here, not through the arm, which knows nothing of it.
        if let Some(link) = self.links.current.as_mut() {
            link.arm = ReadArm::default();
        }
        Ok(())
    }

    /// The session's settings as the current connection has them after the client's SET or
    /// RESET: what the client set there (in a session of the proxy's, the client's startup
    /// parameters and SETs), which every other connection the session uses takes on. Not
    /// while the connection is in the middle of an extended-protocol batch or a failed block;
    /// then at the next switch.
    async fn read_settings(&mut self) -> Result<(), SessionError> {
        self.drain_current().await?;
        let Some(link) = self.links.current.as_mut() else {
            return Ok(());
        };
        if link.batch_sent || link.tx_status == TxStatus::Failed {
            return Ok(());
        }
        // The proxy's own SET LOCAL lock_timeout of a block over several shards is not the
        // client's. SET ROLE's setting is not in pg_settings, and decides what the client may
        // read (privileges, row-level security) on every shard.
        let sql = "SELECT name, setting FROM pg_catalog.pg_settings \
                   WHERE source IN ('client', 'session') AND context = 'user' \
                   AND name NOT IN ('transaction_isolation', 'transaction_read_only', \
                   'transaction_deferrable', 'lock_timeout') \
                   UNION ALL SELECT 'role', pg_catalog.current_setting('role') \
                   WHERE pg_catalog.current_setting('role') <> 'none' ORDER BY 1";
        let conn = &mut link.conn.conn;
        conn.unnamed = None;
        let mut query = BytesMut::new();
        protocol::query(&mut query, sql);
        if let Err(e) = conn.stream.write_all(&query).await {
            return Err(self.backend_lost(e));
        }
        let mut settings = Vec::new();
        let mut failed = false;
        loop {
            let f = conn.read_frame().await?;
            match f.tag {
                b'D' => {
                    let values = crate::executor::gather::values(&f.raw);
                    if let [Some(name), Some(value)] = values[..] {
                        settings.push((
                            String::from_utf8_lossy(name).into_owned(),
                            String::from_utf8_lossy(value).into_owned(),
                        ));
                    }
                }
                b'E' => failed = true,
                b'S' => conn.note_parameter_status(f.body()),
                b'Z' => break,
                _ => {}
            }
        }
        if failed {
            return Ok(());
        }
        let settings = self.ctx.settings.intern(settings);
        if let Some(link) = self.links.current.as_mut() {
            link.conn.conn.applied = settings.clone();
        }
        self.settings.current = settings;
        self.settings.changed = false;
        Ok(())
    }

    /// Before the client's Sync reaches the current connection: the parked connections of
    /// the batch end it too.
    pub(super) async fn sync_parked(&mut self) -> Result<(), SessionError> {
        self.sync_parked_then(AtSync::Commit).await
    }

    /// [`Session::sync_parked`], each connection's part of the batch either ending with the
    /// Sync or, with [`AtSync::Hold`], held open in a block (BEGIN turns an implicit
    /// transaction into a block with what it did so far; a part that failed skips it).
    pub(super) async fn sync_parked_then(&mut self, at_sync: AtSync) -> Result<(), SessionError> {
        self.sync_parked_where(at_sync, &|_| true).await
    }

    /// Ends the batch on the parked connections to `shards` only (a live portal's, whose
    /// Syncs the proxy answered while their Executes ran).
    pub(super) async fn sync_parked_only(
        &mut self,
        shards: &[ShardId],
    ) -> Result<(), SessionError> {
        self.sync_parked_where(AtSync::Commit, &|s| shards.contains(&s))
            .await
    }

    /// [`Session::sync_parked`] but for the connections to `shards` (a live portal's, whose
    /// Executes still run: they take the Sync once it has ended).
    pub(super) async fn sync_parked_except(
        &mut self,
        shards: &[ShardId],
    ) -> Result<(), SessionError> {
        self.sync_parked_where(AtSync::Commit, &|s| !shards.contains(&s))
            .await
    }

    async fn sync_parked_where(
        &mut self,
        at_sync: AtSync,
        wanted: &(dyn Fn(ShardId) -> bool + Sync),
    ) -> Result<(), SessionError> {
        let due = |p: &crate::executor::participants::ShardLink| p.unsynced && wanted(p.shard());
        if !self.links.parked.iter().any(due) {
            return Ok(());
        }
        self.drain_current().await?;
        let mut sync = BytesMut::new();
        Extended::new(&mut sync).sync();
        // BEGIN through the unnamed statement and portal turns the batch's implicit
        // transaction into a block the Sync leaves open.
        let mut held = BytesMut::new();
        Extended::new(&mut held).unnamed(b"BEGIN").sync();
        for i in 0..self.links.parked.len() {
            if !due(&self.links.parked[i]) {
                continue;
            }
            let hold = at_sync == AtSync::Hold && self.links.parked[i].batch_sent;
            let conn = &mut self.links.parked[i].conn.conn;
            if hold {
                conn.unnamed = None;
            }
            let messages = if hold { &held } else { &sync };
            let answer = async {
                conn.stream.write_all(messages).await?;
                loop {
                    let f = conn.read_frame().await?;
                    match f.tag {
                        b'Z' => return Ok::<_, BackendError>((TxStatus::of_ready(f.body()), None)),
                        b'E' => {
                            // An error at the end of the batch (a deferred constraint) is
                            // the client's; the status follows.
                            let status = loop {
                                let z = conn.read_frame().await?;
                                if z.tag == b'Z' {
                                    break TxStatus::of_ready(z.body());
                                }
                            };
                            return Ok((status, Some(f.raw)));
                        }
                        _ => {}
                    }
                }
            }
            .await;
            match answer {
                Ok((status, error)) => {
                    self.links.parked[i].tx_status = status;
                    self.links.parked[i].unsynced = false;
                    self.links.parked[i].batch_sent = false;
                    if let Some(e) = error {
                        self.cout.extend_from_slice(&e);
                    }
                }
                Err(e) => {
                    self.links.parked[i].conn.conn.broken = true;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Before the client's COMMIT/ROLLBACK reaches the current connection: every parked
    /// connection of the block ends it the same way.
    pub(super) async fn end_parked_blocks(&mut self, sql: &[u8]) -> Result<(), SessionError> {
        if !ends_block(sql)
            || self
                .links
                .parked
                .iter()
                .all(|p| p.tx_status == TxStatus::Idle)
        {
            return Ok(());
        }
        self.drain_current().await?;
        let text = String::from_utf8_lossy(sql).into_owned();
        let span = self.span.clone();
        for p in self
            .links
            .parked
            .iter_mut()
            .filter(|p| p.tx_status.in_block())
        {
            match p.conn.conn.run_internal(&text).await {
                Ok(Ok(())) => p.tx_status = TxStatus::Idle,
                Ok(Err(message)) => {
                    tracing::warn!(
                        parent: &span,
                        shard = %p.conn.shard,
                        error = %message,
                        "ending the transaction on a shard failed; each shard commits on its own"
                    );
                    p.tx_status = TxStatus::Idle;
                }
                Err(e) => {
                    p.conn.conn.broken = true;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Notes the BEGIN of a block sent to the current connection (a simple query, or the Bind
    /// of a prepared one), for shards that join the block later. The connection counts as in
    /// the block at once: through the extended protocol its ReadyForQuery comes only at the
    /// batch's Sync, and JDBC sends a block's first statement in BEGIN's batch — a statement
    /// that may run on another shard, which must join the block.
    pub(super) fn note_block_start(&mut self, frame: &ClientFrame<'_>) {
        // Inside a block, BEGIN only warns (the current connection's status is the cheap
        // first look; a parked one may be in a block too).
        if self.links.current_status().in_block() {
            return;
        }
        let Some(text) = self.executed_text(frame) else {
            return;
        };
        if !(may_start_with(text, &[*b"beg", *b"sta"]) && starts_block(text))
            || self.links.status().in_block()
        {
            return;
        }
        self.links.block.begin_sql = Some(String::from_utf8_lossy(text).into_owned());
        self.links.block.savepoints.clear();
        self.links.block.unpreparable = false;
        self.links.block.waits_bounded = false;
        if let Some(link) = self.links.current.as_mut() {
            link.tx_status = TxStatus::InBlock;
        }
    }

    /// Whether the frame ends a transaction block: a simple COMMIT/ROLLBACK, or the Bind of one.
    pub(super) fn block_end_text(&self, frame: &Frame<&[u8]>) -> Option<Vec<u8>> {
        let parsed = ClientFrame::parse(frame).ok()?;
        let text = self.executed_text(&parsed)?;
        ends_block(text).then(|| text.to_vec())
    }

    /// The text a message runs: a simple query's, or the statement a Bind binds (`None` for
    /// other messages and unknown statements).
    pub(super) fn executed_text<'t>(&'t self, frame: &ClientFrame<'t>) -> Option<&'t [u8]> {
        match frame {
            ClientFrame::Query(sql) => Some(sql),
            ClientFrame::Bind { statement, .. } => Some(&self.statements.get(statement)?.query),
            _ => None,
        }
    }

    /// The parked connections of `shards` (switching to each first, so a block or batch
    /// includes them), as indexes into `self.links.parked` in the order of `shards`.
    pub(super) async fn connections_for(
        &mut self,
        shards: &[ShardId],
    ) -> Result<Vec<usize>, SessionError> {
        for &shard in shards {
            self.switch_to(shard).await?;
            self.drain_current().await?;
            self.park_current();
        }
        Ok(self.links.parked.positions(shards))
    }
}
