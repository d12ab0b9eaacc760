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
    /// A Bind executed on several shards.
    MultiPortal(MultiPortal),
    /// Describe, Execute or Close of the multi-shard portal: answered from its result.
    Portal,
    /// A Bind of a statement the proxy answers itself (admin SHOW, sharding DDL).
    LocalPortal {
        portal: Box<[u8]>,
        sql: Vec<u8>,
    },
    /// A Describe of such a statement.
    LocalDescribe {
        sql: Vec<u8>,
    },
    /// An INSERT … SELECT the proxy runs in two steps.
    InsertSelect(Arc<crate::router::plan::ShardedPlan>),
    /// An INSERT needs `count` values of a generated key column first.
    NeedKeys {
        table: TableId,
        column: String,
        count: usize,
    },
    /// A COPY the session splits (FROM) or gathers (TO) over several shards.
    Copy(super::copy::CopyJob),
}

pub(super) struct Multi {
    shards: Vec<ShardId>,
    /// Per shard, the SQL it runs.
    sql: Vec<String>,
    combine: Combine,
}

/// A Bind whose statement runs on several shards: executed on all of them at once, its
/// combined result kept as the portal the client's Describe and Execute read.
pub(super) struct MultiPortal {
    shards: Vec<ShardId>,
    portal: Box<[u8]>,
    /// Parse, Bind, Describe portal, Execute and Flush, the same for every shard.
    messages: BytesMut,
    combine: Combine,
}

/// A multi-shard portal's result, answered by the proxy.
pub(super) struct Portal {
    name: Box<[u8]>,
    rows: gather::Rows,
}

/// Where a statement's text came from, which decides how it may run on several shards.
enum Source<'a> {
    Simple(&'a [u8]),
    Bind {
        portal: &'a [u8],
        statement: &'a crate::backend::StatementText,
        rest: &'a [u8],
    },
    /// A Parse or Describe: placed, not executed.
    Placement,
}

/// The messages that run a bound statement on a shard through its unnamed statement and
/// portal, up to a Flush: the batch stays open there until the client's Sync. `hidden` sort
/// columns appended to the statement take text format.
fn portal_messages(
    text: &[u8],
    param_types: &[u8],
    rest: &[u8],
    (visible, hidden): (usize, usize),
) -> BytesMut {
    let mut out = BytesMut::new();
    MessageBuilder::new(&mut out, b'P')
        .cstr(b"")
        .cstr(text)
        .bytes(param_types)
        .finish();
    let rest = routing::with_hidden_result_columns(rest, visible, hidden);
    MessageBuilder::new(&mut out, b'B')
        .cstr(b"")
        .cstr(b"")
        .bytes(&rest)
        .finish();
    MessageBuilder::new(&mut out, b'D')
        .u8(b'P')
        .cstr(b"")
        .finish();
    MessageBuilder::new(&mut out, b'E')
        .cstr(b"")
        .i32(0)
        .finish();
    protocol::flush(&mut out);
    out
}

/// A simple-protocol reply the proxy composed, as a portal's result; its ErrorResponse if it
/// failed.
fn rows_of_reply(reply: &[u8]) -> Result<gather::Rows, bytes::Bytes> {
    let mut rows = gather::Rows::default();
    let mut rest = reply;
    while let Ok(Some(len)) = protocol::complete_frame_len(rest) {
        let frame = bytes::Bytes::copy_from_slice(&rest[..len]);
        match frame[0] {
            b'T' => rows.description = Some(frame),
            b'D' => rows.rows.push_back(frame),
            b'C' => {
                let body = &frame[5..];
                let tag = body.split(|&c| c == 0).next().unwrap_or(body);
                rows.tag = Some(String::from_utf8_lossy(tag).into_owned());
            }
            b'E' => return Err(frame),
            b'N' => rows.notices.extend_from_slice(&frame),
            _ => {}
        }
        rest = &rest[len..];
    }
    Ok(rows)
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
        if let Some(portal) = &self.portal {
            let named = match ClientFrame::parse(frame)? {
                ClientFrame::Describe { kind: b'P', name }
                | ClientFrame::Close { kind: b'P', name } => Some(name),
                ClientFrame::Execute => protocol::take_cstr(&mut &frame.raw[5..], "Execute").ok(),
                // A Sync ends the portal, a new Bind of its name replaces it.
                ClientFrame::Sync => {
                    self.portal = None;
                    None
                }
                ClientFrame::Bind { portal: name, .. } => {
                    if *name == *portal.name {
                        self.portal = None;
                    }
                    None
                }
                _ => None,
            };
            if named.is_some_and(|n| self.portal.as_ref().is_some_and(|p| *n == *p.name)) {
                return Ok(Dest::Portal);
            }
        }
        if !matches!(frame.tag, b'Q' | b'P' | b'B' | b'D') {
            return Ok(Dest::Here);
        }
        let snapshot = self.ctx.catalog.snapshot();
        if frame.tag != b'Q' {
            if let Some(local) = self.local_extended(frame, &snapshot)? {
                return Ok(local);
            }
        }
        if snapshot.tables().is_empty() {
            return Ok(Dest::Here);
        }
        let parsed = ClientFrame::parse(frame)?;
        let text = match parsed {
            ClientFrame::Query(sql) => sql,
            ClientFrame::Parse { query, .. } => {
                let plan = match self.plan(query, &snapshot) {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                return Ok(match &*plan {
                    Plan::Sharded(_) | Plan::Every(_) | Plan::AnyOf(_) | Plan::Copy(_) => {
                        Dest::Hold
                    }
                    other => self.dest_for(other, &snapshot, &Params::default(), Source::Placement),
                });
            }
            ClientFrame::Bind {
                portal,
                statement,
                rest,
            } => {
                let Some(st) = self.statements.get(statement).cloned() else {
                    return Ok(Dest::Here);
                };
                let plan = match self.plan(&st.query, &snapshot) {
                    Ok(p) => p,
                    Err(t) => return Ok(Dest::NeedColumns(t)),
                };
                let params = Params::parse(rest, &st.param_types)?;
                let source = Source::Bind {
                    portal,
                    statement: &st,
                    rest,
                };
                return Ok(self.dest_for(&plan, &snapshot, &params, source));
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
        let shared =
            self.ctx
                .plans
                .plan_simple(text, &snapshot, &self.ctx.metrics.statement_parses);
        let (plan, literals) = match shared {
            Ok(p) => p,
            Err(t) => return Ok(Dest::NeedColumns(t)),
        };
        let params = Params::literals(literals);
        Ok(self.dest_for(&plan, &snapshot, &params, Source::Simple(text)))
    }

    /// Statements the proxy answers itself, sent through the extended protocol (JDBC, asyncpg
    /// and most ORMs send everything so): held at Parse, answered at Bind and Describe.
    fn local_extended(
        &self,
        frame: &Frame<&[u8]>,
        snapshot: &Snapshot,
    ) -> Result<Option<Dest>, SessionError> {
        let is_local = |sql: &[u8]| match local_kind(sql) {
            Some(LocalKind::Show) => admin::parse(sql).is_some(),
            Some(LocalKind::Ddl) => ddl::recognise(sql, snapshot).is_some(),
            None => false,
        };
        Ok(match ClientFrame::parse(frame)? {
            ClientFrame::Parse { query, .. } if is_local(query) => Some(Dest::Hold),
            ClientFrame::Bind {
                portal, statement, ..
            } => match self.statements.get(statement) {
                Some(st) if is_local(&st.query) => Some(Dest::LocalPortal {
                    portal: portal.into(),
                    sql: st.query.to_vec(),
                }),
                _ => None,
            },
            ClientFrame::Describe { kind: b'S', name } => match self.statements.get(name) {
                Some(st) if is_local(&st.query) => Some(Dest::LocalDescribe {
                    sql: st.query.to_vec(),
                }),
                _ => None,
            },
            _ => None,
        })
    }

    /// Runs a statement the proxy answers itself for an extended-protocol Bind: its result
    /// becomes the portal the client's Describe and Execute read.
    pub(super) async fn run_local_portal(
        &mut self,
        portal: Box<[u8]>,
        sql: &[u8],
    ) -> Result<(), SessionError> {
        self.drain_current().await?;
        let Some(kind) = local_kind(sql) else {
            return Ok(());
        };
        let span = self.span.clone();
        let reply = Box::pin(self.answer_locally(sql, kind).instrument(span))
            .await
            .unwrap_or_default();
        match rows_of_reply(&reply) {
            Ok(rows) => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portal = Some(Portal { name: portal, rows });
            }
            Err(error) => {
                self.pipeline.push(Pending::composed(error), &mut self.cout);
                self.skip_until_sync = true;
            }
        }
        Ok(())
    }

    /// Describes a statement the proxy answers itself: no parameters; an admin SHOW's columns,
    /// or NoData for DDL (which is not run to describe it).
    pub(super) async fn describe_local(&mut self, sql: &[u8]) -> Result<(), SessionError> {
        self.drain_current().await?;
        let mut out = BytesMut::new();
        MessageBuilder::new(&mut out, b't').i16(0).finish();
        let description = if local_kind(sql) == Some(LocalKind::Show) {
            let span = self.span.clone();
            let reply = Box::pin(self.answer_locally(sql, LocalKind::Show).instrument(span))
                .await
                .unwrap_or_default();
            rows_of_reply(&reply).ok().and_then(|r| r.description)
        } else {
            None
        };
        match description {
            Some(d) => out.extend_from_slice(&d),
            None => out.extend_from_slice(&protocol::empty_message(b'n')),
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    fn plan(&self, sql: &[u8], snapshot: &Snapshot) -> Result<Arc<Plan>, TableId> {
        self.ctx
            .plans
            .plan(sql, snapshot, &self.ctx.metrics.statement_parses)
    }

    /// Where a planned statement goes; `source` says whether and how it may run on several
    /// shards.
    fn dest_for(
        &mut self,
        plan: &Plan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: Source<'_>,
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
            Plan::Every(shards) => match (shards.as_slice(), source) {
                ([one], _) => Dest::Shard(*one),
                (_, Source::Simple(sql)) => {
                    self.ctx.metrics.routed_multi.increment(1);
                    Dest::Multi(Multi {
                        shards: shards.clone(),
                        sql: vec![String::from_utf8_lossy(sql).into_owned(); shards.len()],
                        combine: Combine::Copies,
                    })
                }
                (
                    _,
                    Source::Bind {
                        portal,
                        statement,
                        rest,
                    },
                ) => {
                    self.ctx.metrics.routed_multi.increment(1);
                    Dest::MultiPortal(MultiPortal {
                        shards: shards.clone(),
                        portal: portal.into(),
                        messages: portal_messages(
                            &statement.query,
                            &statement.param_types,
                            rest,
                            (0, 0),
                        ),
                        combine: Combine::Copies,
                    })
                }
                (_, Source::Placement) => Dest::Shard(shards[0]),
            },
            Plan::Refused(r) => Dest::Refuse(r.sqlstate(), r.client_message()),
            Plan::Sharded(p) if p.insert_select.is_some() => match source {
                Source::Simple(_) => Dest::InsertSelect(p.clone()),
                Source::Bind { .. } => Dest::Refuse(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "an INSERT … SELECT that moves rows between shards is not supported as a \
                     prepared statement yet: send it as a simple query"
                        .into(),
                ),
                Source::Placement => Dest::Shard(p.shards[0]),
            },
            Plan::Sharded(p) if p.generated.is_some() => {
                self.generated_insert(p, snapshot, params, source)
            }
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
                if let Some(why) = &p.multi_shard_refusal {
                    return Dest::Refuse(SqlState::FEATURE_NOT_SUPPORTED, why.clone());
                }
                let sql = match source {
                    Source::Simple(sql) => sql,
                    Source::Placement => return Dest::Shard(shards[0]),
                    Source::Bind {
                        portal,
                        statement,
                        rest,
                    } => {
                        if matches!(p.keys, Keys::Rows(_)) {
                            return Dest::Refuse(
                                SqlState::FEATURE_NOT_SUPPORTED,
                                "a prepared multi-row INSERT whose rows belong to several shards \
                                 is not supported yet: insert one row per statement, or send it \
                                 as a simple query"
                                    .into(),
                            );
                        }
                        let text = p
                            .merge
                            .shard_sql
                            .as_deref()
                            .map_or(&statement.query[..], str::as_bytes);
                        self.ctx.metrics.routed_multi.increment(1);
                        return Dest::MultiPortal(MultiPortal {
                            shards,
                            portal: portal.into(),
                            messages: portal_messages(
                                text,
                                &statement.param_types,
                                rest,
                                (p.merge.visible, p.merge.hidden),
                            ),
                            combine: Combine::Union {
                                kind: p.kind,
                                merge: p.merge.clone(),
                                rows: Vec::new(),
                            },
                        });
                    }
                };
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

    /// An INSERT whose generated key column the proxy fills: values from the cluster-wide
    /// sequence (taken beforehand, [`Dest::NeedKeys`]), the statement rewritten to carry them,
    /// each row routed by its value. It always runs through the executor, even on one shard,
    /// since what the shard runs is not the client's text.
    fn generated_insert(
        &mut self,
        p: &crate::router::plan::ShardedPlan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: Source<'_>,
    ) -> Dest {
        let (Some(g), Keys::Rows(rows)) = (&p.generated, &p.keys) else {
            return Dest::Here;
        };
        if matches!(source, Source::Placement) {
            return Dest::Shard(p.shards[0]);
        }
        if self.pending_keys.len() != rows.len() {
            return Dest::NeedKeys {
                table: p.table,
                column: g.column.clone(),
                count: rows.len(),
            };
        }
        let values = std::mem::take(&mut self.pending_keys);
        let with_values = params.clone().with_generated(&values);
        let routed = match routing::route(snapshot, p, &with_values) {
            Ok(r) => r,
            Err(e) => return Dest::Refuse(e.sqlstate(), e.client_message()),
        };
        let mut shards = routed.rows.clone();
        shards.sort();
        shards.dedup();
        let rows: Vec<usize> = routed
            .rows
            .iter()
            .map(|s| shards.iter().position(|t| t == s).unwrap_or(0))
            .collect();
        let combine = Combine::Union {
            kind: StatementKind::Insert,
            merge: Default::default(),
            rows,
        };
        let refuse = |e: String| {
            Dest::Refuse(
                SqlState::FEATURE_NOT_SUPPORTED,
                format!("cannot add the generated key to the INSERT: {e}"),
            )
        };
        use crate::executor::split::{fill_generated, split_insert, KeyValues};
        self.ctx.metrics.routed_single.increment(1);
        match source {
            Source::Simple(sql) => {
                let text = String::from_utf8_lossy(sql);
                let filled =
                    match fill_generated(&text, &g.column, g.missing, KeyValues::Values(&values)) {
                        Ok(t) => t,
                        Err(e) => return refuse(e),
                    };
                let sql = match split_insert(&filled, &routed.rows, &shards) {
                    Ok(s) => s,
                    Err(e) => return refuse(e),
                };
                Dest::Multi(Multi {
                    shards,
                    sql,
                    combine,
                })
            }
            Source::Bind {
                portal,
                statement,
                rest,
            } => {
                if values.len() != 1 {
                    return Dest::Refuse(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        "a prepared multi-row INSERT with generated keys is not supported yet: \
                         insert one row per statement"
                            .into(),
                    );
                }
                let count = params.count();
                let text = String::from_utf8_lossy(&statement.query);
                let filled = match fill_generated(
                    &text,
                    &g.column,
                    g.missing,
                    KeyValues::Param(count as i32 + 1),
                ) {
                    Ok(t) => t,
                    Err(e) => return refuse(e),
                };
                let rest = match routing::with_extra_param(rest, &values[0].to_string()) {
                    Ok(r) => r,
                    Err(e) => return refuse(e.to_string()),
                };
                let types = routing::with_extra_param_type(&statement.param_types, count);
                Dest::MultiPortal(MultiPortal {
                    shards,
                    portal: portal.into(),
                    messages: portal_messages(filled.as_bytes(), &types, &rest, (0, 0)),
                    combine,
                })
            }
            Source::Placement => Dest::Shard(p.shards[0]),
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

    /// Executes a Bind on every shard of its route; the client's Describe and Execute of the
    /// portal are then answered from the combined result ([`Session::answer_portal`]).
    pub(super) async fn run_multi_portal(&mut self, m: MultiPortal) -> Result<(), SessionError> {
        let conns_of = self.connections_for(&m.shards).await?;
        let mut conns: Vec<&mut crate::backend::BackendConn> = Vec::with_capacity(conns_of.len());
        let mut parked: Vec<Option<&mut Parked>> = self.parked.iter_mut().map(Some).collect();
        for &i in &conns_of {
            if let Some(p) = parked[i].take() {
                // The shard's part of the batch stays open until the client's Sync.
                p.unsynced = true;
                p.conn.conn.unnamed = None;
                conns.push(&mut *p.conn.conn);
            }
        }
        let messages = vec![m.messages; conns.len()];
        let result = gather::run_extended(&mut conns, &messages, &m.combine).await;
        drop(conns);
        match result {
            Ok(gather::Combined::Rows(rows)) => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portal = Some(Portal {
                    name: m.portal,
                    rows,
                });
                Ok(())
            }
            Ok(gather::Combined::Failed { mut notices, error }) => {
                notices.extend_from_slice(&error);
                self.pipeline
                    .push(Pending::composed(notices.freeze()), &mut self.cout);
                self.skip_until_sync = true;
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

    /// The parked connections of `shards` (switching to each first, so a block or batch
    /// includes them), as indexes into `self.parked` in the order of `shards`.
    pub(super) async fn connections_for(
        &mut self,
        shards: &[ShardId],
    ) -> Result<Vec<usize>, SessionError> {
        for &shard in shards {
            self.switch_to(shard).await?;
            self.drain_current().await?;
            self.park_current();
        }
        Ok(shards
            .iter()
            .filter_map(|s| self.parked.iter().position(|p| p.conn.shard == *s))
            .collect())
    }

    /// Answers a Describe, Execute or Close of the multi-shard portal.
    pub(super) fn answer_portal(&mut self, frame: &Frame<&[u8]>) -> Result<(), SessionError> {
        let Some(portal) = self.portal.as_mut() else {
            return Ok(());
        };
        let mut out = BytesMut::new();
        match frame.tag {
            b'D' => match &portal.rows.description {
                Some(d) => out.extend_from_slice(d),
                None => out.extend_from_slice(&protocol::empty_message(b'n')),
            },
            b'E' => {
                let mut body = &frame.raw[5..];
                protocol::take_cstr(&mut body, "Execute")?;
                let max = protocol::take_i32(&mut body, "Execute")?;
                let rows = &mut portal.rows;
                out.extend_from_slice(&std::mem::take(&mut rows.notices));
                if rows.empty {
                    out.extend_from_slice(&protocol::empty_message(b'I'));
                } else {
                    let n = if max > 0 {
                        (max as usize).min(rows.rows.len())
                    } else {
                        rows.rows.len()
                    };
                    for r in rows.rows.drain(..n) {
                        out.extend_from_slice(&r);
                    }
                    if max > 0 && !rows.rows.is_empty() {
                        out.extend_from_slice(&protocol::empty_message(b's'));
                    } else {
                        let tag = rows.tag.clone().unwrap_or_default();
                        let tag = match tag.split_once(' ') {
                            // A SELECT's tag counts the rows of this Execute.
                            Some(("SELECT", _)) => format!("SELECT {n}"),
                            _ => tag,
                        };
                        protocol::command_complete(&mut out, &tag);
                    }
                }
            }
            _ => {
                self.portal = None;
                out.extend_from_slice(&protocol::empty_message(b'3'));
            }
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    /// The transaction status the proxy reports when it answers a Sync itself: failed if any
    /// shard's block failed, in a block if any shard is.
    pub(super) fn session_status(&self) -> u8 {
        let all = std::iter::once(self.tx_status).chain(self.parked.iter().map(|p| p.tx_status));
        all.fold(b'I', |acc, s| match (acc, s) {
            (b'E', _) | (_, b'E') => b'E',
            (b'T', _) | (_, b'T') => b'T',
            _ => b'I',
        })
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
