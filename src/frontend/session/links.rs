//! A session over several shards: where each client frame goes, and the connections a session
//! holds on other shards while a transaction or an extended-protocol batch spans them.
//!
//! The session talks to one backend connection at a time (the fast path's). When a statement
//! routes elsewhere while that connection still belongs to the client (a transaction block, a
//! batch before its Sync), the connection is first drained — every answer the client is owed
//! read and passed on — and parked; the other shard's connection becomes the current one. A
//! shard joining a transaction block gets the block's BEGIN first. COMMIT/ROLLBACK and Sync
//! reach the parked connections before the current one answers the client. Until distributed
//! transactions land, each shard commits on its own (docs/behaviour.md).

use tokio::io::{AsyncReadExt, AsyncWriteExt};

use super::*;
use crate::catalog::{Snapshot, TableId};
use crate::error::ClientError;
use crate::executor::gather::{self, Combine};
use crate::router::plan::{Keys, Plan, StatementKind};
use crate::router::route::{self as routing, Params};

/// A connection the session holds on a shard it is not talking to now. Its answers are all
/// passed on: nothing is expected from it.
pub(super) struct Parked {
    pub conn: Pooled,
    pub tx_status: u8,
    pub unsynced: bool,
}

/// Where a client frame goes.
pub(super) enum Dest {
    /// The connection held, else the first shard.
    Here,
    Shard(ShardId),
    /// A Parse held back until its Bind, which decides its shard.
    Hold,
    /// A simple query the executor runs on several shards.
    Multi(Multi),
    Refuse(SqlState, String),
    /// An INSERT without a column list needs the table's columns first.
    NeedColumns(TableId),
    /// A COPY the session splits (FROM) or gathers (TO) over several shards.
    Copy(super::copy::CopyJob),
}

pub(super) struct Multi {
    shards: Vec<ShardId>,
    /// Per shard, the SQL it runs.
    sql: Vec<String>,
    combine: Combine,
}

/// How a statement ends a transaction block, by its leading words.
fn ends_block(sql: &[u8]) -> bool {
    const COMMIT: u128 = keyword(b"commit");
    const END: u128 = keyword(b"end");
    const ROLLBACK: u128 = keyword(b"rollback");
    const ABORT: u128 = keyword(b"abort");
    match first_keyword(sql) {
        COMMIT | ROLLBACK => {
            let [_, w1] = crate::sql::classify::leading_words::<2>(sql);
            !(w1.eq_ignore_ascii_case(b"prepared") || w1.eq_ignore_ascii_case(b"to"))
        }
        END | ABORT => true,
        _ => false,
    }
}

fn starts_block(sql: &[u8]) -> bool {
    const BEGIN: u128 = keyword(b"begin");
    const START: u128 = keyword(b"start");
    matches!(first_keyword(sql), BEGIN | START)
}

impl Session {
    pub(super) fn current_shard(&self) -> Option<ShardId> {
        self.backend.as_ref().map(|b| b.shard)
    }

    /// Where `frame` goes. Cheap when the catalog records no table (everything goes where it
    /// always went) and when the statement's plan is cached.
    pub(super) fn decide(&mut self, frame: &Frame<&[u8]>) -> Result<Dest, SessionError> {
        if !matches!(frame.tag, b'Q' | b'P' | b'B' | b'D') {
            return Ok(Dest::Here);
        }
        let snapshot = self.ctx.catalog.snapshot();
        if snapshot.tables().is_empty() {
            return Ok(Dest::Here);
        }
        let parsed = ClientFrame::parse(frame)?;
        let (text, params, simple) = match parsed {
            ClientFrame::Query(sql) => (sql, Params::default(), true),
            ClientFrame::Parse { query, .. } => {
                let plan = match self.plan(query, &snapshot) {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                return Ok(match &*plan {
                    Plan::Sharded(_) | Plan::Every(_) | Plan::AnyOf(_) | Plan::Copy(_) => {
                        Dest::Hold
                    }
                    other => self.dest_for(other, &snapshot, &Params::default(), None),
                });
            }
            ClientFrame::Bind {
                statement, rest, ..
            } => {
                let Some(st) = self.statements.get(statement).cloned() else {
                    return Ok(Dest::Here);
                };
                let plan = match self.plan(&st.query, &snapshot) {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                let params = Params::parse(rest, &st.param_types)?;
                return Ok(self.dest_for(&plan, &snapshot, &params, None));
            }
            ClientFrame::Describe { kind: b'S', name } => {
                let Some(st) = self.statements.get(name).cloned() else {
                    return Ok(Dest::Here);
                };
                let plan = match self.plan(&st.query, &snapshot) {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                // Any shard holding the tables describes the statement: their schemas are equal.
                let shards = match &*plan {
                    Plan::Sharded(p) => p.shards.clone(),
                    Plan::Every(s) | Plan::AnyOf(s) => s.clone(),
                    Plan::Fixed(s) => vec![*s],
                    Plan::Copy(c) => c.shards.clone(),
                    Plan::Anywhere | Plan::Refused(_) => return Ok(Dest::Here),
                };
                return Ok(match self.current_shard() {
                    Some(c) if shards.contains(&c) => Dest::Here,
                    _ => shards.first().map_or(Dest::Here, |s| Dest::Shard(*s)),
                });
            }
            _ => return Ok(Dest::Here),
        };
        let plan = match self.plan(text, &snapshot) {
            Ok(p) => p,
            Err(t) => return Ok(Dest::NeedColumns(t)),
        };
        Ok(self.dest_for(&plan, &snapshot, &params, simple.then_some(text)))
    }

    fn plan(&self, sql: &[u8], snapshot: &Snapshot) -> Result<Arc<Plan>, TableId> {
        self.ctx
            .plans
            .plan(sql, snapshot, &self.ctx.metrics.statement_parses)
    }

    /// Where a planned statement goes. `simple`: the text of a simple query, which may run on
    /// several shards; through the extended protocol only single-shard routes are taken yet.
    fn dest_for(
        &mut self,
        plan: &Plan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        simple: Option<&[u8]>,
    ) -> Dest {
        // A failed transaction block refuses everything but its end, wherever it runs.
        if self.tx_status == b'E' {
            return Dest::Here;
        }
        match plan {
            Plan::Anywhere => Dest::Here,
            Plan::Fixed(s) => Dest::Shard(*s),
            Plan::AnyOf(shards) => match self.current_shard() {
                Some(c) if shards.contains(&c) => Dest::Here,
                _ => {
                    self.round_robin = self.round_robin.wrapping_add(1);
                    Dest::Shard(shards[self.round_robin % shards.len()])
                }
            },
            Plan::Every(shards) => match (shards.as_slice(), simple) {
                ([one], _) => Dest::Shard(*one),
                (_, Some(sql)) => {
                    self.ctx.metrics.routed_multi.increment(1);
                    Dest::Multi(Multi {
                        shards: shards.clone(),
                        sql: vec![String::from_utf8_lossy(sql).into_owned(); shards.len()],
                        combine: Combine::Copies,
                    })
                }
                (_, None) => Dest::Refuse(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "writes to a duplicated table through prepared statements are not supported \
                     yet: send them as simple queries"
                        .into(),
                ),
            },
            Plan::Refused(r) => Dest::Refuse(r.sqlstate(), r.client_message()),
            Plan::Copy(c) => self.copy_dest(c, snapshot, params),
            Plan::Sharded(p) => {
                let routed = match routing::route(snapshot, p, params) {
                    Ok(r) => r,
                    Err(e) => return Dest::Refuse(e.sqlstate(), e.client_message()),
                };
                let shards = match routed.route {
                    Route::Single(s) => {
                        self.ctx.metrics.routed_single.increment(1);
                        return Dest::Shard(s);
                    }
                    Route::Multi(shards) => shards,
                    Route::All => snapshot.shards().iter().map(|s| s.id).collect(),
                };
                let Some(sql) = simple else {
                    return Dest::Refuse(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        "a prepared statement that spans several shards is not supported yet: \
                         give the full sharding key in its WHERE clause, or send it as a simple \
                         query"
                            .into(),
                    );
                };
                if let Some(why) = &p.multi_shard_refusal {
                    return Dest::Refuse(SqlState::FEATURE_NOT_SUPPORTED, why.clone());
                }
                let text = String::from_utf8_lossy(sql);
                let sql = match (&p.keys, p.kind) {
                    (Keys::Rows(_), StatementKind::Insert) => {
                        match crate::executor::split::split_insert(&text, &routed.rows, &shards) {
                            Ok(s) => s,
                            Err(e) => {
                                return Dest::Refuse(
                                    SqlState::FEATURE_NOT_SUPPORTED,
                                    format!("cannot split the INSERT by shard: {e}"),
                                )
                            }
                        }
                    }
                    _ => {
                        let one = p
                            .merge
                            .shard_sql
                            .clone()
                            .unwrap_or_else(|| text.into_owned());
                        vec![one; shards.len()]
                    }
                };
                let rows = routed
                    .rows
                    .iter()
                    .map(|s| shards.iter().position(|t| t == s).unwrap_or(0))
                    .collect();
                self.ctx.metrics.routed_multi.increment(1);
                Dest::Multi(Multi {
                    shards,
                    sql,
                    combine: Combine::Union {
                        kind: p.kind,
                        merge: p.merge.clone(),
                        rows,
                    },
                })
            }
        }
    }

    /// Whether the current connection could go back to its pool now.
    fn current_is_idle(&self) -> bool {
        !self.pinned
            && self.tx_status == b'I'
            && !self.unsynced
            && self.pipeline.is_empty()
            && self.bout.is_empty()
    }

    /// Makes `shard`'s connection the current one: the one held already, a parked one, or one
    /// from the pool (joining the transaction block, if one is open).
    pub(super) async fn switch_to(&mut self, shard: ShardId) -> Result<(), SessionError> {
        if self.current_shard() == Some(shard) {
            return Ok(());
        }
        let in_block = matches!(self.tx_status, b'T' | b'E')
            || self.parked.iter().any(|p| p.tx_status != b'I');
        if self.backend.is_some() {
            if self.current_is_idle() && self.parked.is_empty() {
                self.release_current();
            } else {
                self.drain_current().await?;
                self.park_current();
            }
        }
        if let Some(i) = self.parked.iter().position(|p| p.conn.shard == shard) {
            let p = self.parked.swap_remove(i);
            self.tx_status = p.tx_status;
            self.unsynced = p.unsynced;
            self.cancel.slot.set(Some((shard, p.conn.conn.cancel)));
            self.backend = Some(p.conn);
            self.backend_arm = ReadArm::default();
            return Ok(());
        }
        self.acquire(shard).await?;
        self.tx_status = b'I';
        if in_block {
            let begin = self.begin_sql.clone().unwrap_or_else(|| "BEGIN".into());
            protocol::query(&mut self.bout, &begin);
            self.pipeline.push(Pending::Internal, &mut self.cout);
            // The block is open there once BEGIN answers; until then it counts as open.
            self.tx_status = b'T';
        }
        Ok(())
    }

    fn release_current(&mut self) {
        self.cancel.slot.set(None);
        if let Some(b) = self.backend.take() {
            self.ctx.pools.shard(b.shard).release(b);
        }
    }

    pub(super) fn park_current(&mut self) {
        if let Some(conn) = self.backend.take() {
            self.cancel.slot.set(None);
            self.parked.push(Parked {
                conn,
                tx_status: self.tx_status,
                unsynced: self.unsynced,
            });
            self.tx_status = b'I';
            self.unsynced = false;
        }
    }

    /// Sends what is queued for the current connection and passes on every answer the client
    /// is still owed (asking the backend to flush first, mid-batch).
    pub(super) async fn drain_current(&mut self) -> Result<(), SessionError> {
        if self.backend.is_none() {
            return Ok(());
        }
        if self.unsynced && !self.pipeline.is_empty() {
            protocol::flush(&mut self.bout);
        }
        while !self.bout.is_empty() || !self.pipeline.is_empty() {
            let Some(b) = self.backend.as_mut() else {
                break;
            };
            if !self.bout.is_empty() {
                let r = b.conn.stream.write_all(&self.bout).await;
                r.map_err(|e| self.backend_lost(e))?;
                self.bout.clear();
                continue;
            }
            let conn = &mut b.conn;
            reserve_for_read(&mut conn.read_buf);
            let n = conn.stream.read_buf(&mut conn.read_buf).await;
            let n = n.map_err(|e| self.backend_lost(e))?;
            if n == 0 {
                return Err(self.backend_lost(std::io::ErrorKind::UnexpectedEof.into()));
            }
            self.on_backend_data()?;
        }
        self.backend_arm = ReadArm::default();
        Ok(())
    }

    /// Before the client's Sync reaches the current connection: the parked connections of
    /// the batch end it too.
    pub(super) async fn sync_parked(&mut self) -> Result<(), SessionError> {
        if !self.parked.iter().any(|p| p.unsynced) {
            return Ok(());
        }
        self.drain_current().await?;
        let mut sync = BytesMut::new();
        MessageBuilder::new(&mut sync, b'S').finish();
        for i in 0..self.parked.len() {
            if !self.parked[i].unsynced {
                continue;
            }
            let conn = &mut self.parked[i].conn.conn;
            let answer = async {
                conn.stream.write_all(&sync).await?;
                loop {
                    let f = conn.read_frame().await?;
                    match f.tag {
                        b'Z' => return Ok::<_, BackendError>((f.body()[0], None)),
                        b'E' => {
                            // An error at the end of the batch (a deferred constraint) is
                            // the client's; the status follows.
                            let status = loop {
                                let z = conn.read_frame().await?;
                                if z.tag == b'Z' {
                                    break z.body()[0];
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
                    self.parked[i].tx_status = status;
                    self.parked[i].unsynced = false;
                    if let Some(e) = error {
                        self.cout.extend_from_slice(&e);
                    }
                }
                Err(e) => {
                    self.parked[i].conn.conn.broken = true;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Before the client's COMMIT/ROLLBACK reaches the current connection: every parked
    /// connection of the block ends it the same way.
    pub(super) async fn end_parked_blocks(&mut self, sql: &[u8]) -> Result<(), SessionError> {
        if !ends_block(sql) || self.parked.iter().all(|p| p.tx_status == b'I') {
            return Ok(());
        }
        self.drain_current().await?;
        let text = String::from_utf8_lossy(sql).into_owned();
        let span = self.span.clone();
        for p in self.parked.iter_mut().filter(|p| p.tx_status != b'I') {
            match p.conn.conn.run_internal(&text).await {
                Ok(Ok(())) => p.tx_status = b'I',
                Ok(Err(message)) => {
                    tracing::warn!(
                        parent: &span,
                        shard = %p.conn.shard,
                        error = %message,
                        "ending the transaction on a shard failed; each shard commits on its own"
                    );
                    p.tx_status = b'I';
                }
                Err(e) => {
                    p.conn.conn.broken = true;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// Notes the BEGIN of a block, for shards that join it later.
    pub(super) fn note_block_start(&mut self, frame: &Frame<&[u8]>) {
        if !matches!(frame.tag, b'Q' | b'P') {
            return;
        }
        let text = match ClientFrame::parse(frame) {
            Ok(ClientFrame::Query(sql)) | Ok(ClientFrame::Parse { query: sql, .. }) => sql,
            _ => return,
        };
        if may_start_with(text, &[*b"beg", *b"sta"]) && starts_block(text) {
            self.begin_sql = Some(String::from_utf8_lossy(text).into_owned());
        }
    }

    /// Whether the frame ends a transaction block: a simple COMMIT/ROLLBACK, or the Bind of one.
    pub(super) fn block_end_text(&self, frame: &Frame<&[u8]>) -> Option<Vec<u8>> {
        let text: Vec<u8> = match ClientFrame::parse(frame).ok()? {
            ClientFrame::Query(sql) => sql.to_vec(),
            ClientFrame::Bind { statement, .. } => self.statements.get(statement)?.query.to_vec(),
            _ => return None,
        };
        ends_block(&text).then_some(text)
    }

    /// Runs a simple query on several shards and answers the client with the combined result.
    pub(super) async fn run_multi(&mut self, multi: Multi) -> Result<(), SessionError> {
        // Every shard's connection, with the client's settings applied, parked.
        for &shard in &multi.shards {
            self.switch_to(shard).await?;
            self.drain_current().await?;
            self.park_current();
        }
        let session_status = if self.parked.iter().any(|p| p.tx_status == b'E') {
            b'E'
        } else if self.parked.iter().any(|p| p.tx_status == b'T') {
            b'T'
        } else {
            b'I'
        };
        let mut conns: Vec<&mut crate::backend::BackendConn> = Vec::new();
        let mut order: Vec<usize> = Vec::new();
        // In the order of `multi.shards`, which the SQL and the row assignment follow.
        let mut parked: Vec<Option<&mut Parked>> = self.parked.iter_mut().map(Some).collect();
        for shard in &multi.shards {
            if let Some(i) = parked
                .iter()
                .position(|p| p.as_ref().is_some_and(|p| p.conn.shard == *shard))
            {
                let p = parked[i].take().map(|p| &mut *p.conn.conn);
                if let Some(c) = p {
                    conns.push(c);
                    order.push(i);
                }
            }
        }
        let result = gather::run(
            &mut conns,
            &multi.sql,
            &multi.combine,
            session_status,
            &mut self.cout,
        )
        .await;
        drop(conns);
        match result {
            Ok(statuses) => {
                for (i, status) in order.into_iter().zip(statuses) {
                    self.parked[i].tx_status = status;
                }
                // A failed block is answered from the shard that failed it.
                if let Some(i) = self.parked.iter().position(|p| p.tx_status == b'E') {
                    let p = self.parked.swap_remove(i);
                    self.tx_status = p.tx_status;
                    self.backend = Some(p.conn);
                    self.backend_arm = ReadArm::default();
                }
                self.release_parked_if_idle();
                Ok(())
            }
            Err(e) => {
                for p in &mut self.parked {
                    p.conn.conn.broken = true;
                }
                Err(e.into())
            }
        }
    }

    /// Parked connections go back to their pools once no block or batch holds them.
    pub(super) fn release_parked_if_idle(&mut self) {
        if self.pinned || self.parked.is_empty() {
            return;
        }
        let session_idle = self.backend.is_none() || self.current_is_idle();
        if !session_idle {
            return;
        }
        let mut i = 0;
        while i < self.parked.len() {
            if self.parked[i].tx_status == b'I' && !self.parked[i].unsynced {
                let p = self.parked.swap_remove(i);
                self.ctx.pools.shard(p.conn.shard).release(p.conn);
            } else {
                i += 1;
            }
        }
    }

    /// Fetches a table's columns from a shard holding it, for INSERTs that name none.
    pub(super) async fn fetch_columns(&mut self, table: TableId) -> Result<(), String> {
        let snapshot = self.ctx.catalog.snapshot();
        let (Some(t), Some(shard)) = (
            snapshot.table(table),
            snapshot.shards_of(table).first().copied(),
        ) else {
            return Err("the table is no longer in the catalog".into());
        };
        let client = self
            .ctx
            .control
            .shard(shard)
            .pool
            .get()
            .await
            .map_err(|e| e.to_string())?;
        let rows = client
            .query(
                "SELECT attname::text FROM pg_catalog.pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attnum > 0 AND NOT attisdropped \
                 ORDER BY attnum",
                &[&format!(
                    "{}.{}",
                    quote_ident(&t.schema),
                    quote_ident(&t.name)
                )],
            )
            .await
            .map_err(|e| e.to_string())?;
        let columns = rows.iter().map(|r| r.get::<_, String>(0)).collect();
        self.ctx
            .plans
            .set_columns(snapshot.version(), table, columns);
        Ok(())
    }
}
