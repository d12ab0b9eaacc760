//! SQL cursors over recorded tables (`DECLARE`, `FETCH`, `MOVE`, `CLOSE` in simple queries).
//! A cursor whose query runs on one shard is declared there and its FETCHes follow it; one over
//! several shards that the streaming merge answers is declared on each of them and merged on
//! demand by the proxy ([`crate::executor::cursor`]). Any other cursor goes where it always
//! went.

use super::dest::Dest;
use super::host::shared;
use super::{Session, SessionError};
use crate::catalog::ShardId;
use crate::executor::cursor::{self as shard_cursor, Fetch, ShardCursor};
use crate::executor::gather::Combine;
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements::{self, ClientFrame};
use crate::protocol::{self, Frame, TxStatus};
use crate::router::plan::StatementKind;
use crate::sql::cursor::{self, CursorStatement, Declare, Direction};
use bytes::BytesMut;
use std::collections::HashMap;
use tokio_postgres::error::SqlState;

/// Where a cursor the proxy follows lives.
enum Held {
    /// Declared on this shard as the client wrote it.
    OnShard(ShardId),
    /// On several shards, merged by the proxy.
    Merged(Box<ShardCursor>),
}

struct Entry {
    held: Held,
    /// WITH HOLD: it outlives the transaction block.
    hold: bool,
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

    /// The client's transaction block ended: its cursors without HOLD are gone.
    pub fn block_ended(&mut self) {
        self.by_name.retain(|_, e| e.hold);
    }
}

/// An error of PostgreSQL's own kind, answered by the proxy.
struct Refusal(SqlState, String);

/// What became of a DECLARE.
enum Declared {
    /// Its query names no recorded table: it goes its usual way.
    NotOurs,
    /// Sent to the one shard its query runs on, which answers it.
    Forwarded,
    /// Answered here: a command tag, or nothing more (an error was written).
    Answered(Result<Option<String>, Refusal>),
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
            self.cursors.block_ended();
        }
        let parsed = ClientFrame::parse(frame)?;
        let outcome = match statement {
            CursorStatement::Declare(d) => match self.declare(d, frame, parsed, client).await? {
                Declared::NotOurs => return Ok(false),
                Declared::Forwarded => return Ok(true),
                Declared::Answered(outcome) => outcome,
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
            Err(Refusal(code, message)) => {
                protocol::error_response(&mut self.cout, protocol::Severity::Error, &code, &message)
            }
        }
        let status = self.links.status();
        protocol::ready_for_query(&mut self.cout, status);
        self.settle_after_shards();
        Ok(true)
    }

    /// DECLARE: on the one shard its query runs on, or on each of several merged by the proxy.
    /// `Ok(None)`: answered (the one shard's answer, or an error written).
    async fn declare(
        &mut self,
        d: Declare,
        frame: &Frame<&[u8]>,
        parsed: ClientFrame<'_>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Declared, SessionError> {
        if self.cursors.by_name.contains_key(&d.name) {
            return Ok(Declared::Answered(Err(Refusal(
                SqlState::DUPLICATE_CURSOR,
                format!("cursor \"{}\" already exists", d.name),
            ))));
        }
        let mut query = BytesMut::new();
        protocol::query(&mut query, &d.query);
        let query = Frame::borrowed(&query);
        let dest = self
            .resolve_dest(&query, ClientFrame::parse(&query)?)
            .await?;
        let multi = match dest {
            // No recorded table: the statement goes its usual way, and so do its FETCHes.
            Dest::Here => return Ok(Declared::NotOurs),
            Dest::Shard(shard) => {
                self.cursors.by_name.insert(
                    d.name.clone(),
                    Entry {
                        held: Held::OnShard(shard),
                        hold: d.hold,
                    },
                );
                self.run_on_shard(shard, frame, parsed).await?;
                return Ok(Declared::Forwarded);
            }
            Dest::Multi(multi) => multi,
            Dest::Refuse(refusal) => {
                let (code, message) = *refusal;
                return Ok(Declared::Answered(Err(Refusal(code, message))));
            }
            _ => return Ok(Declared::Answered(Err(not_merged()))),
        };
        let Combine::Union {
            kind: StatementKind::Select,
            merge,
            ..
        } = multi.combine
        else {
            return Ok(Declared::Answered(Err(not_merged())));
        };
        if d.scroll {
            return Ok(Declared::Answered(Err(Refusal(
                SqlState::FEATURE_NOT_SUPPORTED,
                "a SCROLL cursor over several shards is not supported yet: declare it NO SCROLL \
                 (FETCH forward only), or give the full sharding key"
                    .into(),
            ))));
        }
        if !d.hold && !self.links.status().in_block() {
            return Ok(Declared::Answered(Err(Refusal(
                SqlState::NO_ACTIVE_SQL_TRANSACTION,
                "DECLARE CURSOR can only be used in transaction blocks".into(),
            ))));
        }
        // The shards' cursors stay on the session's connections (WITH HOLD: beyond the block).
        if d.hold && !self.links.pinned {
            self.links.pinned = true;
            self.ctx.metrics.pinned_sessions.increment(1);
        }
        let ctx = self.ctx.clone();
        let declared = shard_cursor::Declared {
            name: &d.name,
            binary: d.binary,
            hold: d.hold,
            shard_sql: &multi.sql,
            merge,
        };
        let opened = ShardCursor::open(
            &mut self.host(Some(client)),
            shared(&ctx),
            &multi.shards,
            declared,
        )
        .await?;
        match opened {
            Ok(c) => {
                self.cursors.by_name.insert(
                    d.name,
                    Entry {
                        held: Held::Merged(Box::new(c)),
                        hold: d.hold,
                    },
                );
                Ok(Declared::Answered(Ok(Some("DECLARE CURSOR".into()))))
            }
            Err(error) => {
                self.cout.extend_from_slice(&error);
                Ok(Declared::Answered(Ok(None)))
            }
        }
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
        let mut shards: Vec<ShardId> = self.links.iter().map(|l| l.shard()).collect();
        for entry in self.cursors.by_name.values() {
            match &entry.held {
                Held::OnShard(s) => shards.push(*s),
                Held::Merged(c) => shards.extend(&c.shards),
            }
        }
        shards.sort();
        shards.dedup();
        self.cursors.by_name.clear();
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
            crate::executor::gather::Combined::Failed { error, .. } => {
                self.cout.extend_from_slice(&error);
                Ok(None)
            }
            crate::executor::gather::Combined::Rows(_) => Ok(Some("CLOSE CURSOR ALL".into())),
        })
    }
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
