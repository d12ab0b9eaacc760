//! The slow path of a client frame, and its dispatch: a frame that waits for a connection, that
//! the proxy answers itself, or that the router sends somewhere other than the connection held
//! (several shards, another shard, a held Parse). The fast path in the parent module hands a frame here when it
//! cannot forward it without an await.

use super::dest::Dest;
use super::local::{local_candidate, LocalKind};
use super::{Session, SessionError};
use crate::admin;
use crate::catalog::ShardId;
use crate::client_error::ClientError;
use crate::executor::ddl;
use crate::executor::participants::ShardLink;
use crate::frontend::pipeline::Pending;
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements::{self, ClientFrame};
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, Severity, TxStatus};
use bytes::BytesMut;
use tracing::Instrument;

impl Session {
    /// One client frame on the general path: NoSQL names and `SET TTL` rewritten, what is owed
    /// before routing settled, then run where its destination says.
    pub(super) async fn on_client_frame(
        &mut self,
        frame: Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        // Held while a chunk move's cutover runs; then routed by the catalog it left.
        self.pass_fence(&frame).await?;
        // A string of statements for several shards is cut from the client's own text: each
        // statement is then rewritten as it would be alone.
        let as_sent = frame.raw;
        let rewritten = self.with_nested_names(&frame)?;
        let frame = rewritten.as_deref().map_or(frame, Frame::borrowed);
        let listed = self.with_cursor_list(&frame, client).await?;
        let frame = listed.as_deref().map_or(frame, Frame::borrowed);
        let with_ttl = match self.with_row_ttl(&frame).await? {
            Ok(rewritten) => rewritten,
            Err((code, message)) => return self.refuse_query(&frame, &code, &message).await,
        };
        let frame = with_ttl.as_deref().map_or(frame, Frame::borrowed);
        if self.before_routing(&frame, client).await? {
            return Ok(());
        }
        if self.on_materialized_view(&frame, client).await? {
            return Ok(());
        }
        if self.on_sql_prepared(&frame, client).await? {
            return Ok(());
        }
        self.before_discard_all(&frame, client).await?;
        if self.on_cursor_statement(&frame, client).await? {
            return Ok(());
        }
        if frame.tag == b'D'
            && !self.cursors.is_empty()
            && self.describe_cursor(&frame, client).await?
        {
            return Ok(());
        }
        if let Some((sql, kind)) = local_candidate(&frame)? {
            if kind == LocalKind::Growth {
                // A MOVE CHUNK waits for its own cutover, which waits for every session with
                // statements in flight: this one shows it has none.
                self.drain_current().await?;
                self.settle_flight();
            }
            // Boxed: the DDL path's future is large, and every other query should not carry it.
            let span = self.span.clone();
            let reply = Box::pin(self.answer_locally(sql, kind).instrument(span)).await;
            if let Some(reply) = reply {
                self.pipeline
                    .push(Pending::composed(reply.freeze()), &mut self.cout);
                return Ok(());
            }
        }
        if matches!(frame.tag, b'd' | b'c' | b'f') && self.links.current.is_none() {
            // Copy data with no copy in progress, which PostgreSQL ignores too.
            return Ok(());
        }
        let parsed = ClientFrame::parse(&frame)?;
        let dest = self.resolve_dest(&frame, parsed).await?;
        if dest.runs_apart() {
            self.drain_current().await?;
            if self.batch.skip_until_sync {
                // One of the answers failed the frame's batch: PostgreSQL skips the rest of
                // it up to its Sync.
                return Ok(());
            }
        }
        match self
            .run_apart(dest, &frame, parsed, as_sent, client)
            .await?
        {
            Some(shard) => self.run_on_shard(shard, &frame, parsed).await,
            None => Ok(()),
        }
    }

    /// What comes before routing a frame: a COPY in progress takes it; a portal over several
    /// shards, an atomic batch or a batch being skipped end at it; a frame a failed block
    /// refuses is answered. `true`: the frame is answered.
    async fn before_routing(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        if self.copy.is_some() && self.on_copy_frame(frame, client).await? {
            return Ok(true);
        }
        if let Some(name) = self.portals.on_shards() {
            if !reads_portal(frame, name)? {
                let name = name.to_vec();
                // The portal's connections must be free for what comes now: its rows are read
                // (and dropped, when the transaction ends), or the Sync ends the batch while
                // its Executes go on in the block.
                if frame.tag == b'S' && self.links.status() != TxStatus::InBlock {
                    self.drop_portal(&name).await?;
                } else if frame.tag == b'S' && self.keeps_portal_past_sync(&name).await? {
                    return Ok(true);
                } else if self.block_end_text(frame).is_some() {
                    self.drop_portal(&name).await?;
                } else {
                    self.buffer_portal().await?;
                }
            }
        }
        if frame.tag == b'S' && self.end_atomic_batch().await? {
            return Ok(true);
        }
        if matches!(frame.tag, b'Q' | b'P' | b'B') && self.ctx.pools.types().is_stale() {
            // Before a description of another shard can name a type made since.
            self.ctx.refresh_type_oids().await;
        }
        if self.batch.skip_until_sync {
            if frame.tag != b'S' {
                return Ok(true);
            }
            self.batch.skip_until_sync = false;
            self.drop_portals().await?;
            let failure = self.batch.fail_block_at_sync.take();
            if failure.is_some() {
                // The Sync is answered here, after the block has failed on a shard.
                self.drain_current().await?;
                self.park_current();
            }
            self.sync_parked().await?;
            if let Some(message) = failure {
                self.fail_block(&message).await?;
                self.release_parked_if_idle();
            }
            if self.links.current.is_none() {
                let status = self.links.status();
                protocol::ready_for_query(&mut self.cout, status);
                return Ok(true);
            }
        }
        if matches!(frame.tag, b'Q' | b'P' | b'B') && !self.links.parked.is_empty() {
            // Whether the block failed on another shard is known once the answers still owed
            // are read: a client may send on as soon as it has an ErrorResponse, before the
            // ReadyForQuery that reports the failed block. (In the middle of a batch the
            // current connection reports nothing before the Sync: what is known decides.)
            if self
                .links
                .current
                .as_ref()
                .is_none_or(|link| !link.unsynced)
            {
                self.drain_current().await?;
            }
            if self.fails_with_the_block(frame) {
                let e = FrontendError::BlockFailed;
                self.refuse_query(frame, &e.sqlstate(), &e.client_message())
                    .await?;
                return Ok(true);
            }
        }
        Ok(false)
    }

    /// The frame's destination, once the columns and generated keys it needs are fetched.
    /// Columns fetched at one catalog version are dropped when DDL of another session moves it
    /// on before they are used: a few fetches, each at the version then current.
    pub(super) async fn resolve_dest(
        &mut self,
        frame: &Frame<&[u8]>,
        parsed: ClientFrame<'_>,
    ) -> Result<Dest, SessionError> {
        let mut fetches = 0;
        let dest = loop {
            match self.decide(frame, parsed, None)? {
                Dest::NeedColumns(table) if fetches < 32 => {
                    fetches += 1;
                    if let Err(e) = self.fetch_columns(table).await {
                        break Dest::refuse(&FrontendError::ColumnsUnreadable(e));
                    }
                }
                Dest::NeedKeys(needed) if self.keys.pending.is_empty() => {
                    let taken = self
                        .ctx
                        .keys
                        .take(
                            &self.ctx.catalog,
                            needed.table,
                            &needed.column,
                            needed.count,
                        )
                        .await;
                    match taken {
                        Ok(values) => self.keys.pending = values,
                        Err(e) => break Dest::Refuse(Box::new((e.sqlstate(), e.to_string()))),
                    }
                }
                Dest::NeedKeys(_) => {
                    self.keys.pending.clear();
                    break Dest::refuse(&FrontendError::KeysMissing);
                }
                Dest::NeedColumns(_) => break Dest::refuse(&FrontendError::ColumnsUnknown),
                dest => break dest,
            }
        };
        Ok(dest)
    }

    /// Runs a frame whose destination is not one shard's connection (several shards, a portal
    /// over several, a refusal, an answer of the proxy's own); `Some(shard)`: it goes to that
    /// shard's connection instead.
    async fn run_apart(
        &mut self,
        dest: Dest,
        frame: &Frame<&[u8]>,
        parsed: ClientFrame<'_>,
        as_sent: &[u8],
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Option<ShardId>, SessionError> {
        let shard = match dest {
            Dest::Here if matches!(frame.tag, b'Q' | b'P' | b'B') => self.unrouted_shard(),
            // A Sync after a multi-shard batch goes to one of the shards that took part.
            Dest::Here => self
                .links
                .current_shard()
                .or_else(|| self.links.parked.iter().next().map(ShardLink::shard))
                .unwrap_or(ShardId(0)),
            Dest::Shard(shard) => shard,
            Dest::Hold => {
                self.hold_parse(parsed);
                return Ok(None);
            }
            Dest::Refuse(refusal) => {
                let (code, message) = *refusal;
                return self
                    .refuse_query(frame, &code, &message)
                    .await
                    .map(|()| None);
            }
            Dest::Multi(multi) => {
                self.run_multi(*multi, client).await?;
                return Ok(None);
            }
            Dest::MultiPortal(m) => {
                self.run_multi_portal(*m).await?;
                return Ok(None);
            }
            Dest::Portal => return self.answer_portal(frame, client).await.map(|()| None),
            Dest::LocalPortal(local) => {
                let super::dest::LocalPortal {
                    portal,
                    sql,
                    bound_signal,
                } = *local;
                return self
                    .run_local_portal(portal, &sql, bound_signal)
                    .await
                    .map(|()| None);
            }
            Dest::LocalDescribe(sql) => return self.describe_local(&sql).await.map(|()| None),
            Dest::InsertSelect(plan) => {
                self.run_insert_select(plan).await?;
                self.release_parked_if_idle();
                return Ok(None);
            }
            Dest::Explain(answer) => {
                return self.answer_explain(*answer).map(|()| None);
            }
            Dest::Aggregate(job) => {
                self.run_aggregate(*job, client).await?;
                self.release_parked_if_idle();
                return Ok(None);
            }
            Dest::Combining(job) => {
                self.run_combining(*job, client).await?;
                self.release_parked_if_idle();
                return Ok(None);
            }
            Dest::KeyUpdate(job) => {
                return self.run_key_update(*job).await.map(|()| None);
            }
            Dest::Copy(job) => {
                self.run_copy(*job, frame.tag, client).await?;
                return Ok(None);
            }
            Dest::Sequence(answer) => {
                return self.answer_sequence(*answer, frame).await.map(|()| None);
            }
            Dest::ExplainCombined(e) => {
                return self.run_explain_combined(*e, client).await.map(|()| None);
            }
            Dest::DeclareBind(bound) => {
                return self.declare_at_bind(*bound, client).await.map(|()| None);
            }
            Dest::Script => {
                let sql = statements::query_text(&Frame::borrowed(as_sent))?;
                return self.run_script(sql, client).await.map(|()| None);
            }
            Dest::NeedColumns(_) | Dest::NeedKeys(_) => unreachable!("resolved above"),
        };
        Ok(Some(shard))
    }

    /// Sends a frame to `shard`'s connection, switching to it first; a Sync also reaches the
    /// parked connections, and the end of a block or a savepoint every shard of the block.
    pub(super) async fn run_on_shard(
        &mut self,
        shard: ShardId,
        frame: &Frame<&[u8]>,
        parsed: ClientFrame<'_>,
    ) -> Result<(), SessionError> {
        if let Err(e) = self.switch_to(shard).await {
            tracing::warn!(
                parent: &self.span,
                error = %e,
                "no backend connection for the client's statement"
            );
            match e {
                SessionError::Backend(e) => {
                    self.ctx.metrics.backend_error(shard);
                    return self
                        .refuse_query(frame, &e.sqlstate(), &e.client_message())
                        .await;
                }
                other => return Err(other),
            }
        }
        if self.batch.skip_until_sync && frame.tag != b'S' {
            // An earlier statement of the batch failed on the shard just left: the rest of
            // the batch runs nowhere, as PostgreSQL skips it.
            return Ok(());
        }
        if frame.tag == b'S' {
            if self.links.status() != TxStatus::InBlock {
                self.drop_portals().await?;
            }
            self.sync_parked().await?;
        } else if let Some(text) = self.block_end_text(frame) {
            // The block's portals end with it, and its cursors without HOLD.
            self.drop_portals().await?;
            self.end_block_cursors();
            if self.commit_across_shards(frame, &text).await? {
                return Ok(());
            }
            self.end_parked_blocks(&text).await?;
            self.links.block.begin_sql = None;
        } else if let Some((op, text)) = self.savepoint_of(parsed) {
            self.savepoint_everywhere(&text).await?;
            self.note_savepoint(&op);
        }
        self.forward(frame, parsed, None)
    }

    /// Closes every multi-shard portal (their transaction, or batch, ended).
    pub(super) async fn drop_portals(&mut self) -> Result<(), SessionError> {
        if let Some(name) = self.portals.on_shards().map(<[u8]>::to_vec) {
            self.drop_portal(&name).await?;
        }
        self.portals.clear();
        Ok(())
    }

    /// Statements the proxy answers itself: admin SHOWs and DDL that needs the catalog. The
    /// reply ends with ReadyForQuery, as a simple query's does.
    pub(super) async fn answer_locally(&mut self, sql: &[u8], kind: LocalKind) -> Option<BytesMut> {
        let mut out = BytesMut::new();
        if kind == LocalKind::Signal {
            return self.answer_signal(sql);
        }
        if kind == LocalKind::Growth {
            return self.answer_growth(sql).await;
        }
        if kind == LocalKind::Show {
            let cmd = admin::parse(sql)?;
            let (rs, tag) = match cmd {
                admin::AdminCommand::ShowTransactions => {
                    admin::transactions(&self.ctx.control, &self.ctx.coordinator).await
                }
                admin::AdminCommand::ShowMoves => match admin::moves(&self.ctx.catalog).await {
                    Ok(answer) => answer,
                    Err(e) => {
                        let text = e.to_string();
                        protocol::error_response(&mut out, Severity::Error, &e.sqlstate(), &text);
                        protocol::ready_for_query(&mut out, self.links.current_status());
                        return Some(out);
                    }
                },
                other => {
                    admin::answer(&other, &self.ctx.catalog, &self.ctx.pools, &self.ctx.config)
                }
            };
            rs.encode(&tag, &mut out);
        } else {
            let ddl = ddl::recognise(sql, &self.ctx.catalog.snapshot())?;
            if self.links.current_status().in_block() {
                let e = match ddl.concurrently() {
                    Some(statement) => FrontendError::ConcurrentlyInTransaction(statement),
                    None => FrontendError::DdlInTransaction,
                };
                out.extend_from_slice(&e.error_frame());
            } else {
                match ddl::execute(self.ctx.ddl(), ddl).await {
                    Ok(tag) => protocol::command_complete(&mut out, &tag),
                    Err(e) => protocol::error_response_at(
                        &mut out,
                        Severity::Error,
                        &e.sqlstate(),
                        &e.client_message(),
                        e.position(),
                    ),
                }
            }
        }
        protocol::ready_for_query(&mut out, self.links.current_status());
        Some(out)
    }
}

impl Session {
    /// MOVE CHUNK or CHECK PLACEMENT, run by the growth layer; `None` for anything else (a
    /// cursor's MOVE). A move changes placement, so it runs outside a transaction block, as
    /// sharding DDL does.
    async fn answer_growth(&mut self, sql: &[u8]) -> Option<BytesMut> {
        let cmd = admin::parse_growth(sql)?;
        let mut out = BytesMut::new();
        let outside_blocks_only = match cmd {
            admin::AdminCommand::MoveChunk { .. } => Some("MOVE CHUNK"),
            admin::AdminCommand::SplitChunk { .. } => Some("SPLIT CHUNK"),
            admin::AdminCommand::Rebalance { .. } => Some("REBALANCE"),
            admin::AdminCommand::ChangeSetMembers { .. } => Some("ALTER TABLESPACE SET"),
            _ => None,
        };
        if let Some(statement) =
            outside_blocks_only.filter(|_| self.links.current_status().in_block())
        {
            out.extend_from_slice(
                &FrontendError::ConcurrentlyInTransaction(statement).error_frame(),
            );
        } else {
            match admin::growth(&cmd, &self.ctx.growth()).await? {
                Ok(admin::GrowthAnswer::Rows(rs, tag)) => rs.encode(&tag, &mut out),
                Ok(admin::GrowthAnswer::Done(tag)) => protocol::command_complete(&mut out, &tag),
                Err(e) => out.extend_from_slice(&e.error_frame()),
            }
        }
        protocol::ready_for_query(&mut out, self.links.current_status());
        Some(out)
    }

    /// At the client's Sync inside a block, a multi-shard portal whose rows the merge reads as
    /// the client's Executes ask stays open on its shards (as a portal outlives a Sync in a
    /// block on PostgreSQL): the other connections end the batch, and the proxy answers the
    /// Sync. Whether it did.
    async fn keeps_portal_past_sync(&mut self, name: &[u8]) -> Result<bool, SessionError> {
        if self.links.current.is_some() || self.batch.skip_until_sync {
            return Ok(false);
        }
        if !self.portals.make_live(name) {
            return Ok(false);
        }
        let Some(shards) = self.portals.owe_sync(name) else {
            return Ok(false);
        };
        self.sync_parked_except(&shards).await?;
        let status = self.links.status();
        protocol::ready_for_query(&mut self.cout, status);
        Ok(true)
    }
}

/// Whether the frame is a Describe, Execute or Close of portal `name`, or a Flush.
fn reads_portal(frame: &Frame<&[u8]>, name: &[u8]) -> Result<bool, SessionError> {
    let named = match ClientFrame::parse(frame)? {
        ClientFrame::Describe { kind: b'P', name } | ClientFrame::Close { kind: b'P', name } => {
            name
        }
        ClientFrame::Execute => protocol::take_cstr(&mut &frame.raw[5..], "Execute")?,
        _ => return Ok(frame.tag == b'H'),
    };
    Ok(named == name)
}
