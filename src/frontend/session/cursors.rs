//! SQL cursors over recorded tables (`DECLARE`, `FETCH`, `MOVE`, `CLOSE` in simple queries).
//! A cursor whose query runs on one shard is declared there and its FETCHes follow it; one over
//! several shards that the streaming merge answers is declared on each of them and merged on
//! demand by the proxy ([`crate::executor::cursor`]). Any other cursor goes where it always
//! went.

use super::dest::Dest;
use super::host::shared;
use super::{Session, SessionError};
use crate::backend::pool::Pooled;
use crate::catalog::ShardId;
use crate::executor::cursor::{self as shard_cursor, Fetch, ShardCursor};
use crate::executor::cursor_list::ListedCursor;
use crate::executor::gather::{Combine, Combined};
use crate::executor::host::Host;
use crate::executor::host::{run_on_shards, Work};
use crate::frontend::pipeline::Pending;
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements::{self, ClientFrame};
use crate::protocol::{self, Frame, TxStatus};
use crate::router::plan::StatementKind;
use crate::sql::cursor::{self, CursorStatement, Declare, Direction};
use crate::sql::quote::quote_ident;
use bytes::{Bytes, BytesMut};
use std::collections::HashMap;
use tokio_postgres::error::SqlState;

/// Where a cursor the proxy follows lives.
enum Held {
    /// Declared on this shard as the client wrote it.
    OnShard(ShardId),
    /// On several shards, merged by the proxy.
    Merged(Box<ShardCursor>),
    /// Over rows the general path combined: a holdable cursor of the client's name on the
    /// combining connection, which the session keeps until the cursor ends.
    Combined(Box<Pooled>),
}

struct Entry {
    held: Held,
    /// WITH HOLD: it outlives the transaction block.
    hold: bool,
    /// The DECLARE as the client sent it, which `pg_cursors` shows.
    statement: String,
}

/// The session's cursors over recorded tables, by name.
#[derive(Default)]
pub(super) struct Cursors {
    by_name: HashMap<String, Entry>,
}

impl Cursors {
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// The client's transaction block ended: its cursors without HOLD are gone. Returns the
    /// combining connections they held.
    pub fn block_ended(&mut self) -> Vec<Pooled> {
        let ended: Vec<String> = self
            .by_name
            .iter()
            .filter(|(_, e)| !e.hold)
            .map(|(n, _)| n.clone())
            .collect();
        ended
            .iter()
            .filter_map(|n| match self.by_name.remove(n)?.held {
                Held::Combined(conn) => Some(*conn),
                Held::OnShard(_) | Held::Merged(_) => None,
            })
            .collect()
    }

    /// Every cursor is gone (CLOSE ALL, the session's end): the combining connections held.
    pub fn clear(&mut self) -> Vec<Pooled> {
        self.by_name
            .drain()
            .filter_map(|(_, e)| match e.held {
                Held::Combined(conn) => Some(*conn),
                Held::OnShard(_) | Held::Merged(_) => None,
            })
            .collect()
    }
}

impl Cursors {
    /// The connections the session keeps for cursors over combined rows.
    pub fn combining_conns(&mut self) -> Vec<(ShardId, &mut crate::backend::BackendConn)> {
        self.by_name
            .values_mut()
            .filter_map(|e| match &mut e.held {
                Held::Combined(conn) => Some((conn.shard, &mut *conn.conn)),
                Held::OnShard(_) | Held::Merged(_) => None,
            })
            .collect()
    }

    /// The cursors listed on the session's connections as the client declared them: one row
    /// per name (a merged cursor is on each of its shards), and a cursor over combined rows with
    /// the client's statement and holdability, not the proxy's holdable cursor on the
    /// combining connection.
    pub fn as_declared(&self, listed: Vec<ListedCursor>) -> Vec<ListedCursor> {
        let mut seen = std::collections::HashSet::new();
        let mut out = Vec::with_capacity(listed.len());
        for mut c in listed {
            if !seen.insert(c.name.clone()) {
                continue;
            }
            if let Some(entry) = self.by_name.get(&c.name) {
                c.statement.clone_from(&entry.statement);
                c.holdable = entry.hold;
            }
            out.push(c);
        }
        out
    }
}

/// An error of PostgreSQL's own kind, answered by the proxy.
pub(super) struct Refusal(pub(super) SqlState, pub(super) String);

/// What became of a DECLARE.
pub(super) enum Declared {
    /// Its query names no recorded table: it goes its usual way.
    NotOurs,
    /// Declared where its query runs.
    Done,
    /// Refused by the proxy.
    Refused(Refusal),
    /// Refused by a shard: its ErrorResponse.
    Failed(Bytes),
}

impl Session {
    /// Whether a simple query must leave the fast path to be looked at here.
    pub(super) fn may_be_cursor_statement(&self, sql: &[u8]) -> bool {
        cursor::may_be(sql) && (self.ctx.catalog.has_tables() || !self.cursors.is_empty())
    }

    /// Runs a cursor statement the proxy follows; `false`: not one, it goes on its usual way.
    pub(super) async fn on_cursor_statement(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        if frame.tag != b'Q' {
            return Ok(false);
        }
        let sql = statements::query_text(frame)?;
        if !self.may_be_cursor_statement(sql) {
            return Ok(false);
        }
        let Some(statement) = std::str::from_utf8(sql).ok().and_then(cursor::read) else {
            return Ok(false);
        };
        if self.links.status() == TxStatus::Idle {
            self.end_block_cursors();
        }
        let parsed = ClientFrame::parse(frame)?;
        let outcome = match statement {
            CursorStatement::Declare(d) => match self.declare(d, sql, false, client).await? {
                Declared::NotOurs => return Ok(false),
                Declared::Done => Ok(Some("DECLARE CURSOR".to_string())),
                Declared::Refused(refusal) => Err(refusal),
                Declared::Failed(error) => {
                    self.cout.extend_from_slice(&error);
                    Ok(None)
                }
            },
            CursorStatement::Fetch {
                name,
                direction,
                moves,
            } => match self.cursors.by_name.get(&name).map(|e| &e.held) {
                None => return Ok(false),
                Some(Held::OnShard(shard)) => {
                    let shard = *shard;
                    self.run_on_shard(shard, frame, parsed).await?;
                    return Ok(true);
                }
                Some(Held::Merged(_)) => self.fetch_merged(&name, direction, moves, client).await?,
                Some(Held::Combined(_)) => self.on_combiner(&name, sql, false, client).await?,
            },
            CursorStatement::Close(Some(name)) => match self.cursors.by_name.remove(&name) {
                None => return Ok(false),
                Some(Entry {
                    held: Held::OnShard(shard),
                    ..
                }) => {
                    self.run_on_shard(shard, frame, parsed).await?;
                    return Ok(true);
                }
                Some(Entry {
                    held: Held::Merged(c),
                    ..
                }) => self.close_merged(&c, "CLOSE CURSOR", client).await?,
                Some(
                    entry @ Entry {
                        held: Held::Combined(_),
                        ..
                    },
                ) => {
                    self.cursors.by_name.insert(name.clone(), entry);
                    self.on_combiner(&name, sql, true, client).await?
                }
            },
            CursorStatement::Close(None) => {
                if self.cursors.is_empty() {
                    return Ok(false);
                }
                self.close_all(client).await?
            }
        };
        match outcome {
            Ok(Some(tag)) => protocol::command_complete(&mut self.cout, &tag),
            Ok(None) => {}
            // Inside a block, the block fails with it, as on PostgreSQL.
            Err(Refusal(code, message)) => {
                self.refuse_query(frame, &code, &message).await?;
                self.settle_after_shards();
                return Ok(true);
            }
        }
        let status = self.links.status();
        protocol::ready_for_query(&mut self.cout, status);
        self.settle_after_shards();
        Ok(true)
    }

    /// DECLARE (its text `sql`): on the one shard its query runs on, followed there by its
    /// FETCHes, or on each of several, merged by the proxy. `extended`: its Bind, with the
    /// parameters in place, and a query naming no recorded table is declared on the session's
    /// shard too (its Parse was answered by the proxy).
    pub(super) async fn declare(
        &mut self,
        d: Declare,
        sql: &[u8],
        extended: bool,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Declared, SessionError> {
        if self.cursors.by_name.contains_key(&d.name) {
            return Ok(Declared::Refused(Refusal(
                SqlState::DUPLICATE_CURSOR,
                format!("cursor \"{}\" already exists", d.name),
            )));
        }
        let mut query = BytesMut::new();
        protocol::query(&mut query, &d.query);
        let query = Frame::borrowed(&query);
        let dest = self
            .resolve_dest(&query, ClientFrame::parse(&query)?)
            .await?;
        let (shards, merged) = match dest {
            // No recorded table: the statement goes its usual way, and so do its FETCHes.
            Dest::Here if !extended => return Ok(Declared::NotOurs),
            Dest::Here => {
                let shard = self.links.current_shard().unwrap_or(self.unrouted_shard());
                (vec![shard], None)
            }
            Dest::Shard(shard) => (vec![shard], None),
            Dest::Multi(multi) => match multi.combine {
                Combine::Union {
                    kind: StatementKind::Select,
                    merge,
                    ..
                } => (multi.shards, Some((multi.sql, merge))),
                _ => return Ok(Declared::Refused(not_merged())),
            },
            Dest::Combining(job) => return self.declare_combined(d, sql, &job, client).await,
            Dest::Aggregate(job) => {
                return self.declare_combined(d, sql, &job.fallback, client).await
            }
            Dest::Refuse(refusal) => {
                let (code, message) = *refusal;
                return Ok(Declared::Refused(Refusal(code, message)));
            }
            _ => return Ok(Declared::Refused(not_merged())),
        };
        if merged.is_some() && d.scroll {
            // Backward moves need the rows in one place: the general path materialises them.
            return match self.combine_plan_of(&d.query).await {
                Some(plan) => {
                    let job = crate::executor::general::CombineJob {
                        plan,
                        bound: None,
                        shards: shards.clone(),
                    };
                    self.declare_combined(d, sql, &job, client).await
                }
                None => Ok(Declared::Refused(Refusal(
                    SqlState::FEATURE_NOT_SUPPORTED,
                    "a SCROLL cursor over several shards of this query is not supported: \
                     declare it NO SCROLL (FETCH forward only), or give the full sharding key"
                        .into(),
                ))),
            };
        }
        if merged.is_some() && !d.hold && !self.links.status().in_block() {
            return Ok(Declared::Refused(no_block()));
        }
        // The cursors stay on the session's connections (WITH HOLD: beyond the block).
        if d.hold && !self.links.pinned {
            self.links.pinned = true;
            self.ctx.metrics.pinned_sessions.increment(1);
        }
        let ctx = self.ctx.clone();
        let mut host = self.host(Some(client));
        let held = match merged {
            None => {
                let text = vec![String::from_utf8_lossy(sql).into_owned()];
                let declared = run_on_shards(
                    &mut host,
                    shared(&ctx),
                    &shards,
                    Work::Simple(&text),
                    &Combine::Each,
                )
                .await?;
                if let Combined::Failed { error, .. } = declared {
                    return Ok(Declared::Failed(error));
                }
                Held::OnShard(shards[0])
            }
            Some((shard_sql, merge)) => {
                let declared = shard_cursor::Declared {
                    name: &d.name,
                    binary: d.binary,
                    hold: d.hold,
                    shard_sql: &shard_sql,
                    merge,
                };
                match ShardCursor::open(&mut host, shared(&ctx), &shards, declared).await? {
                    Ok(c) => Held::Merged(Box::new(c)),
                    Err(error) => return Ok(Declared::Failed(error)),
                }
            }
        };
        self.cursors.by_name.insert(
            d.name,
            Entry {
                held,
                hold: d.hold,
                statement: String::from_utf8_lossy(sql).into_owned(),
            },
        );
        Ok(Declared::Done)
    }

    /// The general path of a cursor's query, its tables' columns fetched first where the
    /// router needs them.
    async fn combine_plan_of(
        &mut self,
        query: &str,
    ) -> Option<std::sync::Arc<crate::router::plan::CombinePlan>> {
        for _ in 0..32 {
            let snapshot = self.ctx.catalog.snapshot();
            let path = self.routing.search_path.as_deref();
            match self.ctx.plans.plan_combined(query, path, &snapshot) {
                Ok(plan) => return plan,
                Err(table) => self.fetch_columns(table).await.ok()?,
            }
        }
        None
    }

    /// A cursor over a query the general path answers: its rows combined on the combining
    /// shard, a holdable cursor declared over them there, that connection kept for it.
    async fn declare_combined(
        &mut self,
        d: Declare,
        sql: &[u8],
        job: &crate::executor::general::CombineJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Declared, SessionError> {
        if !d.hold && !self.links.status().in_block() {
            return Ok(Declared::Refused(no_block()));
        }
        let declare = format!(
            "DECLARE {} {}{}CURSOR WITH HOLD FOR",
            quote_ident(&d.name),
            if d.binary { "BINARY " } else { "" },
            match (d.scroll, d.no_scroll) {
                (true, _) => "SCROLL ",
                (_, true) => "NO SCROLL ",
                _ => "",
            },
        );
        let ctx = self.ctx.clone();
        let declared = crate::executor::general::declare_cursor(
            &mut self.host(Some(client)),
            shared(&ctx),
            job,
            &declare,
        )
        .await?;
        match declared {
            Ok(conn) => {
                self.cursors.by_name.insert(
                    d.name,
                    Entry {
                        held: Held::Combined(Box::new(conn)),
                        hold: d.hold,
                        statement: String::from_utf8_lossy(sql).into_owned(),
                    },
                );
                Ok(Declared::Done)
            }
            Err(error) => Ok(Declared::Failed(error)),
        }
    }

    /// A FETCH, MOVE or CLOSE (`closes`) of a cursor on a combining connection: the client's
    /// statement runs there as written, its answer passed on. The connection goes back to its
    /// pool once the cursor is closed.
    async fn on_combiner(
        &mut self,
        name: &str,
        sql: &[u8],
        closes: bool,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Result<Option<String>, Refusal>, SessionError> {
        let Some(Entry {
            held: Held::Combined(mut conn),
            hold,
            statement,
        }) = self.cursors.by_name.remove(name)
        else {
            return Ok(Ok(None));
        };
        self.drain_current().await?;
        let text = String::from_utf8_lossy(sql);
        let relayed = {
            let mut host = self.host(Some(client));
            let (_, mut sink) = host.links_and_sink();
            crate::executor::gather::relay_simple(&mut conn.conn, &text, &mut sink).await
        };
        match relayed {
            Ok(()) if closes => self.ctx.pools.shard(conn.shard).release(*conn),
            Ok(()) => {
                self.cursors.by_name.insert(
                    name.to_string(),
                    Entry {
                        held: Held::Combined(conn),
                        hold,
                        statement,
                    },
                );
            }
            Err(e) => {
                conn.conn.broken = true;
                self.ctx.pools.shard(conn.shard).release(*conn);
                return Err(match e {
                    crate::executor::gather::StreamError::Backend(e) => e.into(),
                    crate::executor::gather::StreamError::Client(e) => SessionError::Client(e),
                });
            }
        }
        Ok(Ok(None))
    }

    /// A protocol-level Describe of a cursor on a combining connection, asked there.
    async fn describe_combined(&mut self, name: &str) -> Result<(), SessionError> {
        let Some(Entry {
            held: Held::Combined(conn),
            ..
        }) = self.cursors.by_name.get_mut(name)
        else {
            return Ok(());
        };
        let mut ask = BytesMut::new();
        protocol::MessageBuilder::new(&mut ask, b'D')
            .u8(b'P')
            .cstr(name.as_bytes())
            .finish();
        protocol::MessageBuilder::new(&mut ask, b'S').finish();
        let asked = async {
            tokio::io::AsyncWriteExt::write_all(&mut conn.conn.stream, &ask).await?;
            let mut answer = None;
            loop {
                let f = conn.conn.read_frame().await?;
                match f.tag {
                    b'T' | b'n' | b'E' => answer = Some(f.raw),
                    b'Z' => return Ok::<_, crate::backend::BackendError>(answer),
                    _ => {}
                }
            }
        }
        .await;
        match asked {
            Ok(answer) => {
                let answer = answer.unwrap_or_else(|| protocol::empty_message(b'n'));
                if answer.first() == Some(&b'E') {
                    self.batch.skip_until_sync = true;
                }
                self.pipeline
                    .push(Pending::composed(answer), &mut self.cout);
                Ok(())
            }
            Err(e) => {
                if let Some(Entry {
                    held: Held::Combined(mut conn),
                    ..
                }) = self.cursors.by_name.remove(name)
                {
                    conn.conn.broken = true;
                    self.ctx.pools.shard(conn.shard).release(*conn);
                }
                Err(e.into())
            }
        }
    }

    /// The client's block ended: its cursors without HOLD are gone, and the combining
    /// connections they held are closed (their cursors go with them).
    pub(super) fn end_block_cursors(&mut self) {
        for mut conn in self.cursors.block_ended() {
            conn.conn.broken = true;
            self.ctx.pools.shard(conn.shard).release(conn);
        }
    }

    /// The session ends: every combining connection a cursor held is closed.
    pub(super) fn end_all_cursors(&mut self) {
        for mut conn in self.cursors.clear() {
            conn.conn.broken = true;
            self.ctx.pools.shard(conn.shard).release(conn);
        }
    }

    /// A Describe of the portal a cursor is (psycopg reads a named cursor's columns so):
    /// answered from the cursor's shards. `false`: not one the proxy follows.
    pub(super) async fn describe_cursor(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        let ClientFrame::Describe { kind: b'P', name } = ClientFrame::parse(frame)? else {
            return Ok(false);
        };
        let Ok(name) = std::str::from_utf8(name) else {
            return Ok(false);
        };
        let Some(entry) = self.cursors.by_name.remove(name) else {
            return Ok(false);
        };
        let shard = match &entry.held {
            Held::OnShard(shard) => Some(*shard),
            Held::Merged(_) | Held::Combined(_) => None,
        };
        if let Held::Combined(_) = &entry.held {
            self.cursors.by_name.insert(name.to_string(), entry);
            return self.describe_combined(name).await.map(|()| true);
        }
        let Entry {
            held: Held::Merged(mut c),
            hold,
            statement,
        } = entry
        else {
            self.cursors.by_name.insert(name.to_string(), entry);
            if let Some(shard) = shard {
                self.run_on_shard(shard, frame, ClientFrame::parse(frame)?)
                    .await?;
            }
            return Ok(true);
        };
        self.drain_current().await?;
        let ctx = self.ctx.clone();
        let described = c
            .describe(&mut self.host(Some(client)), shared(&ctx))
            .await?;
        self.cursors.by_name.insert(
            name.to_string(),
            Entry {
                held: Held::Merged(c),
                hold,
                statement,
            },
        );
        let answer = match described {
            Ok(Some(description)) => description,
            Ok(None) => protocol::empty_message(b'n'),
            Err(error) => {
                self.batch.skip_until_sync = true;
                error
            }
        };
        self.pipeline
            .push(Pending::composed(answer), &mut self.cout);
        Ok(true)
    }

    /// FETCH or MOVE of a merged cursor: forward only.
    async fn fetch_merged(
        &mut self,
        name: &str,
        direction: Direction,
        moves: bool,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Result<Option<String>, Refusal>, SessionError> {
        let Some(Entry {
            held: Held::Merged(mut c),
            hold,
            statement,
        }) = self.cursors.by_name.remove(name)
        else {
            return Ok(Ok(None));
        };
        let position = c.position;
        // (rows to pass over first, rows to fetch)
        let steps = match direction {
            Direction::Forward(n) => Some((0, n)),
            Direction::Relative(n) if n > 0 => Some((n as u64 - 1, Some(1))),
            Direction::Absolute(n) if n > 0 && n as u64 > position => {
                Some((n as u64 - position - 1, Some(1)))
            }
            Direction::Backward(_) | Direction::Relative(_) | Direction::Absolute(_) => None,
        };
        let ctx = self.ctx.clone();
        let outcome = match steps {
            None => Err(Refusal(
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
                "cursor can only scan forward: a cursor over several shards is NO SCROLL; \
                 fetch forward, or give the full sharding key"
                    .into(),
            )),
            Some((skip, count)) => {
                let mut host = self.host(Some(client));
                let failed = skip > 0
                    && c.fetch(&mut host, shared(&ctx), Some(skip), Fetch::Pass)
                        .await?;
                if !failed {
                    let how = if moves { Fetch::Move } else { Fetch::Rows };
                    c.fetch(&mut host, shared(&ctx), count, how).await?;
                }
                Ok(None)
            }
        };
        self.cursors.by_name.insert(
            name.to_string(),
            Entry {
                held: Held::Merged(c),
                hold,
                statement,
            },
        );
        Ok(outcome)
    }

    async fn close_merged(
        &mut self,
        c: &ShardCursor,
        tag: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Result<Option<String>, Refusal>, SessionError> {
        let ctx = self.ctx.clone();
        match c.close(&mut self.host(Some(client)), shared(&ctx)).await? {
            None => Ok(Ok(Some(tag.to_string()))),
            Some(error) => {
                self.cout.extend_from_slice(&error);
                Ok(Ok(None))
            }
        }
    }

    /// CLOSE ALL: every cursor on every shard the session holds a connection to.
    async fn close_all(
        &mut self,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Result<Option<String>, Refusal>, SessionError> {
        Ok(Ok(match self.close_everywhere(client).await? {
            Some(error) => {
                self.cout.extend_from_slice(&error);
                None
            }
            None => Some("CLOSE CURSOR ALL".into()),
        }))
    }

    /// Closes every cursor the proxy follows, on every shard the session holds a connection
    /// to; a shard's ErrorResponse if one refused.
    async fn close_everywhere(
        &mut self,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Option<Bytes>, SessionError> {
        let mut shards: Vec<ShardId> = self.links.iter().map(|l| l.shard()).collect();
        for entry in self.cursors.by_name.values() {
            match &entry.held {
                Held::OnShard(s) => shards.push(*s),
                Held::Merged(c) => shards.extend(&c.shards),
                // Closed with its connection.
                Held::Combined(_) => {}
            }
        }
        shards.sort();
        shards.dedup();
        self.end_all_cursors();
        if shards.is_empty() {
            return Ok(None);
        }
        let ctx = self.ctx.clone();
        let close = vec!["CLOSE ALL".to_string(); shards.len()];
        let closed = crate::executor::host::run_on_shards(
            &mut self.host(Some(client)),
            shared(&ctx),
            &shards,
            crate::executor::host::Work::Simple(&close),
            &Combine::Each,
        )
        .await?;
        Ok(match closed {
            crate::executor::gather::Combined::Failed { error, .. } => Some(error),
            crate::executor::gather::Combined::Rows(_) => None,
        })
    }

    /// Before a DISCARD ALL outside a block (which closes every cursor on PostgreSQL): the
    /// cursors the proxy follows are closed on their shards and forgotten, then the DISCARD
    /// goes its usual way. Inside a block PostgreSQL refuses it, and they stay.
    pub(super) async fn before_discard_all(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        if frame.tag != b'Q' || self.cursors.is_empty() || self.links.status() != TxStatus::Idle {
            return Ok(());
        }
        let sql = statements::query_text(frame)?;
        if !crate::sql::classify::is_discard_all(sql) {
            return Ok(());
        }
        if let Some(error) = self.close_everywhere(client).await? {
            tracing::warn!(parent: &self.span, error = ?error, "CLOSE ALL before DISCARD ALL failed");
        }
        Ok(())
    }
}

fn no_block() -> Refusal {
    Refusal(
        SqlState::NO_ACTIVE_SQL_TRANSACTION,
        "DECLARE CURSOR can only be used in transaction blocks".into(),
    )
}

fn not_merged() -> Refusal {
    Refusal(
        SqlState::FEATURE_NOT_SUPPORTED,
        "DECLARE CURSOR over several shards for a query shardwire combines itself (an \
         aggregate, GROUP BY, a join across families, …) is not supported yet: give the full \
         sharding key, or read it without a cursor"
            .into(),
    )
}
