//! Client frames on their way to the backend connection: the hot path that places a frame
//! without an await (a simple query normalised once, then routed from the plan cache), the
//! session effects noted as a frame goes out, and the answer to a frame that can go nowhere.

use super::dest::Dest;
use super::local::{local_candidate, TextFacts};
use super::shard_switch::{ends_block, starts_block};
use super::{Session, SessionError};
use crate::backend::Settings;
use crate::catalog::ShardId;
use crate::frontend::pipeline::Pending;
use crate::frontend::statements::{self, ClientFrame};
use crate::protocol::{self, Frame, Severity};
use crate::router::normalize::Literals;
use crate::sql::classify::{first_keyword, keyword, session_effect, SessionEffect};
use tokio_postgres::error::SqlState;

impl Session {
    /// The common case, without an await: the frame is not one the proxy may answer itself,
    /// and a backend connection is held or one just given back by another client is there to
    /// take. Returns false when the frame needs the general path.
    pub(super) fn forward_now(&mut self, frame: &Frame<&[u8]>) -> Result<bool, SessionError> {
        if self.batch.skip_until_sync || self.copy.is_some() {
            return Ok(false);
        }
        // A chunk move's cutover holds new statements: the general path waits for it.
        if !self.flight.open_for_frame() && !self.continues_work(frame) {
            return Ok(false);
        }
        if frame.tag == b'Q' {
            let sql = statements::query_text(frame)?;
            if self.may_be_sql_prepared(sql) || self.may_be_cursor_statement(sql) {
                return Ok(false);
            }
        }
        // A Describe may name a cursor the proxy follows.
        if frame.tag == b'D' && !self.cursors.is_empty() {
            return Ok(false);
        }
        if frame.tag == b'Q' && self.ctx.catalog.has_tables() {
            return self.route_simple_now(frame);
        }
        if local_candidate(frame)?.is_some() {
            return Ok(false);
        }
        self.place_now(frame, None, None)
    }

    /// [`Session::forward_now`] of a simple query to be routed: normalised once, for the plan
    /// cache and for what its words say.
    fn route_simple_now(&mut self, frame: &Frame<&[u8]>) -> Result<bool, SessionError> {
        let sql = statements::query_text(frame)?;
        let mut literals = self.routing.simple_memo.normalise(sql);
        let facts = match literals {
            Some(_) => self
                .routing
                .simple_facts
                .of_normalised(self.routing.simple_memo.key()),
            None => TextFacts::of(sql),
        };
        if facts.local.is_some() {
            return Ok(false);
        }
        self.place_now(frame, Some(&mut literals), Some(facts.effect))
    }

    /// The rest of [`Session::forward_now`], for a frame the proxy does not answer itself; a
    /// simple query comes with its literals (taken from there) and its effect on the session.
    /// Inlined into both callers: a call per frame costs the extended protocol's frames more
    /// than the copy of the code does.
    #[inline(always)]
    fn place_now<'q>(
        &mut self,
        frame: &Frame<&'q [u8]>,
        literals: Option<&mut Option<Literals<'q>>>,
        effect: Option<SessionEffect>,
    ) -> Result<bool, SessionError> {
        if self.with_nested_names(frame)?.is_some()
            || self.may_set_row_ttl(frame)
            || self.may_read_cursor_list(frame)
        {
            return Ok(false);
        }
        // The shards' types may have changed: the general path reads them first.
        if self.ctx.pools.types().is_stale() {
            return Ok(false);
        }
        // A session holding connections on several shards takes the general path: Syncs and
        // transaction ends must reach them all.
        if !self.links.parked.is_empty()
            || (self.links.current.is_none() && matches!(frame.tag, b'd' | b'c' | b'f'))
        {
            return Ok(false);
        }
        let parsed = ClientFrame::parse(frame)?;
        let shard = match self.decide(frame, parsed, literals)? {
            Dest::Here => match self.links.current_shard() {
                None => Some(ShardId(0)),
                Some(s) if s == self.unrouted_shard() => None,
                // A pinned session's connection to another shard: the general path switches.
                Some(_) if matches!(frame.tag, b'Q' | b'P' | b'B') => return Ok(false),
                Some(_) => None,
            },
            Dest::Shard(s) if self.links.current_shard() == Some(s) => None,
            Dest::Shard(s) if self.links.current.is_none() => Some(s),
            // Needs no connection at all.
            Dest::Hold => {
                self.hold_parse(parsed);
                return Ok(true);
            }
            _ => return Ok(false),
        };
        if let Some(shard) = shard {
            match self.ctx.pools.shard(shard).get_now() {
                Some(b) => self.adopt(b),
                None => return Ok(false),
            }
        }
        if self.links.current_status().in_block() {
            if let Some((op, _)) = self.savepoint_of(parsed) {
                self.note_savepoint(&op);
            }
        }
        self.forward(frame, parsed, effect)?;
        Ok(true)
    }

    /// Records a Parse whose shard its Bind will decide, answering it in its turn.
    pub(super) fn hold_parse(&mut self, parsed: ClientFrame<'_>) {
        if let ClientFrame::Parse { name, query, types } = parsed {
            let effect = self.batch.parse_effect.session_effect(query);
            let startup = &self.settings.startup;
            let changes = changes_settings(query, effect);
            self.batch.paths.parsed(name, query, changes, startup);
            let only_held = self.cout.len() == self.batch.deferred_parse_len;
            let held = self
                .statements
                .hold(name, query, types, &mut self.pipeline, &mut self.cout);
            // Only answers of held Parses in the buffer: they may wait (client_output_due).
            self.batch.deferred_parse_len = if only_held { self.cout.len() } else { 0 };
            if held.is_err() {
                self.batch.skip_until_sync = true;
            }
            if let Some(link) = self.links.current.as_mut() {
                link.unsynced = true;
            }
        }
    }

    /// Sends a client frame to the held backend connection, noting what it does to the session
    /// (`effect`: a simple query's, when known already).
    pub(super) fn forward(
        &mut self,
        frame: &Frame<&[u8]>,
        parsed: ClientFrame<'_>,
        effect: Option<SessionEffect>,
    ) -> Result<(), SessionError> {
        if self.links.current.is_none() {
            return Ok(());
        }
        let reset_in_batch = match frame.tag {
            b'E' => {
                self.note_execute_path(frame);
                None
            }
            b'S' => self.note_sync_path(),
            _ => None,
        };
        let Some(link) = self.links.current.as_mut() else {
            return Ok(());
        };
        match frame.tag {
            b'S' => {
                link.unsynced = false;
                link.batch_sent = false;
                // Whatever spanned shards in the batch was ended before the Sync came here.
                self.links.block.atomic_batch = false;
                // This Sync ends the batch, also when its failure arrived only while the
                // Sync itself was on its way (the general path waits for other shards first).
                self.batch.skip_until_sync = false;
            }
            b'P' | b'B' | b'D' | b'E' | b'C' | b'H' => {
                link.unsynced = true;
                link.batch_sent = true;
            }
            _ => {}
        }
        if statements::goes_unchanged(frame.raw) {
            statements::send_unchanged(
                frame.raw,
                &mut self.pipeline,
                &mut link.out,
                &mut self.cout,
            );
            if let Some(reset) = reset_in_batch {
                // Only where the RESET took effect: the batch may have failed after it.
                self.restore_startup_settings(&reset, true);
            }
            return Ok(());
        }
        if matches!(parsed, ClientFrame::Query(_) | ClientFrame::Bind { .. }) {
            self.note_block_start(&parsed);
        }
        if self.links.current.is_none() {
            return Ok(());
        }
        let effect = match parsed {
            ClientFrame::Query(sql) => Some(effect.unwrap_or_else(|| session_effect(sql))),
            ClientFrame::Parse { query, .. } => Some(self.batch.parse_effect.session_effect(query)),
            _ => None,
        };
        let mut reset = None;
        self.note_extended_path(parsed, effect);
        if let Some(effect) = effect {
            if effect.pins && !self.links.pinned {
                self.links.pinned = true;
                self.ctx.metrics.pinned_sessions.increment(1);
            }
            if effect.pins || effect.resets {
                let sql = match parsed {
                    ClientFrame::Query(sql) | ClientFrame::Parse { query: sql, .. } => sql,
                    _ => &[][..],
                };
                // A Parse's changes them at its Execute (`note_execute_path`).
                self.settings.changed |= frame.tag == b'Q' && changes_settings(sql, effect);
                if frame.tag == b'Q' {
                    self.note_search_path(sql, true);
                }
                if frame.tag == b'Q' && !self.settings.startup.is_empty() {
                    reset = crate::sql::reset::resets(sql);
                    // What the connection has now is read back before another shard serves
                    // the session (a DISCARD ALL does not pin, nor mark it otherwise).
                    self.settings.changed |= reset.is_some();
                }
            }
            self.links.block.unpreparable |= effect.unpreparable;
        }
        let Some(link) = self.links.current.as_mut() else {
            return Ok(());
        };
        let conn = &mut link.conn.conn;
        if let Some(effect) = effect {
            if effect.resets {
                self.routing.sql_prepared.clear();
                conn.prepared.clear();
                conn.unnamed = None;
                conn.applied = Settings::default();
            }
        }
        if frame.tag == b'Q' {
            // A simple query replaces the unnamed statement, on the backend and for the client.
            conn.unnamed = None;
            self.statements.forget_unnamed();
        }
        let forwarded = self.statements.forward(
            parsed,
            frame,
            conn,
            &mut self.pipeline,
            &mut link.out,
            &mut self.cout,
        );
        if forwarded.is_err() {
            self.batch.skip_until_sync = true;
        } else if let Some(reset) = reset {
            self.restore_startup_settings(&reset, false);
        }
        Ok(())
    }

    /// Gives back the startup packet's values that a statement just sent reset: PostgreSQL
    /// resets to them, the connection to the server's. `if_reset`: only to a setting that has
    /// its reset value then.
    fn restore_startup_settings(&mut self, reset: &crate::sql::reset::Reset, if_reset: bool) {
        let Some(link) = self.links.current.as_mut() else {
            return;
        };
        let conn = &mut link.conn.conn;
        let restore = super::settings::restore_sql(conn, &self.settings.startup, reset, if_reset);
        if !restore.is_empty() {
            conn.unnamed = None;
            protocol::query(&mut link.out, &restore);
            self.pipeline.push(Pending::Internal, &mut self.cout);
        }
    }

    /// What an extended-protocol message on its way to the current connection does to the
    /// path the session follows (see `search_path::ExtendedPaths`).
    fn note_extended_path(&mut self, parsed: ClientFrame<'_>, effect: Option<SessionEffect>) {
        match parsed {
            ClientFrame::Parse { name, query, .. } => {
                let changes = effect.is_some_and(|e| changes_settings(query, e));
                let startup = &self.settings.startup;
                self.batch.paths.parsed(name, query, changes, startup);
            }
            // It replaces the unnamed statement.
            ClientFrame::Query(_) => {
                let startup = &self.settings.startup;
                self.batch.paths.parsed(b"", b"", false, startup);
            }
            ClientFrame::Bind {
                portal, statement, ..
            } => {
                self.batch.paths.bound(portal, statement);
                if self.batch.paths.executed_any()
                    && self
                        .executed_text(&parsed)
                        .is_some_and(|text| starts_block(text) || ends_block(text))
                {
                    self.note_block_control_path();
                }
            }
            _ => {}
        }
    }

    /// The client's message cannot be sent anywhere: answer it as PostgreSQL answers a failed
    /// message, and keep the session usable.
    pub(super) fn refuse(&mut self, frame: &Frame<&[u8]>, code: &SqlState, message: &str) {
        self.batch.paths.failed();
        protocol::error_response(&mut self.cout, Severity::Error, code, message);
        match frame.tag {
            b'Q' | b'F' | b'S' => {
                let status = self.links.status();
                protocol::ready_for_query(&mut self.cout, status)
            }
            _ => {
                self.batch.skip_until_sync = true;
                // Whether a block is open is known only then: a BEGIN earlier in the same
                // batch (JDBC sends one with a block's first statement) has had no answer yet.
                self.batch.fail_block_at_sync = Some(message.to_string());
            }
        }
    }
}

/// Whether a statement with session effect `effect` changes run-time settings (a SET or RESET,
/// a call of set_config, or a DISCARD ALL).
fn changes_settings(sql: &[u8], effect: SessionEffect) -> bool {
    const SET: u128 = keyword(b"set");
    const RESET: u128 = keyword(b"reset");
    effect.resets
        || effect.pins
            && (matches!(first_keyword(sql), SET | RESET)
                || memchr::memmem::find(sql, b"set_config").is_some())
}
