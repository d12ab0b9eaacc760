//! The session's side of the general path of a read over several shards: each table's rows
//! read from its shards through the session's own connections (so a transaction block sees
//! its own writes), loaded into temporary tables on a combining connection of the first shard,
//! and the client's statement run there over them.
//!
//! The combining connection is not one of the session's: temporary tables would make the
//! client's transaction one two-phase commit cannot prepare. It runs in a transaction of its
//! own, with the client's settings set locally, and rolls back, which drops the tables.

use super::insert_select::Work;
use super::*;
use crate::catalog::Snapshot;
use crate::executor::combiner::{self, CopyIn};
use crate::executor::gather::{self, Combine, Combined};
use crate::router::plan::{CombinePlan, Plan, StatementKind};
use crate::router::route::{self as routing, Params};
use bytes::Bytes;

/// The shard whose PostgreSQL runs the combining step: where the tables the catalog does not
/// record live.
const COMBINER: ShardId = ShardId(0);
/// Rows fetched from each shard's cursor per round trip.
const FETCH_ROWS: usize = 5_000;
/// The cursor on the shards.
const CURSOR: &str = "shardwire_combine";
/// The settings of the client's connection the combining step takes on: those set by the
/// client (startup packet or SET) that any user may set. A transaction's own characteristics
/// cannot be set once it ran a query, and are the combining transaction's own anyway.
const SETTINGS_SQL: &str = "SELECT name, setting FROM pg_catalog.pg_settings \
     WHERE source IN ('client', 'session') AND context = 'user' \
     AND name NOT IN ('transaction_isolation', 'transaction_read_only', 'transaction_deferrable')";

/// A read the general path answers, with the Bind that executes it (none: a simple query).
pub(super) struct CombineJob {
    pub(super) plan: Arc<CombinePlan>,
    pub(super) bound: Option<BoundCombine>,
}

pub(super) struct BoundCombine {
    pub(super) portal: Box<[u8]>,
    pub(super) param_types: Vec<u8>,
    /// The Bind after its portal and statement names: parameter formats and values, result
    /// formats.
    pub(super) rest: Vec<u8>,
}

/// How the combining statement's answer reached the client.
enum Answered {
    /// Kept, for the caller to answer with.
    Combined(Combined),
    /// A simple query's rows, streamed to the client as the combining step sent them.
    Streamed,
}

impl Session {
    pub(super) async fn run_combining(
        &mut self,
        job: CombineJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        self.ctx.metrics.routed_multi.increment(1);
        let combined = match self.combine(&job, client).await? {
            Answered::Streamed => {
                let status = self.session_status();
                protocol::ready_for_query(&mut self.cout, status);
                return Ok(());
            }
            Answered::Combined(c) => c,
        };
        let Some(bound) = job.bound else {
            return self.answer(&combined);
        };
        match combined {
            Combined::Rows(rows) => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portals.put_buffered(bound.portal, rows);
            }
            Combined::Failed { mut notices, error } => {
                notices.extend_from_slice(&error);
                self.pipeline
                    .push(Pending::composed(notices.freeze()), &mut self.cout);
                self.skip_until_sync = true;
            }
        }
        Ok(())
    }

    async fn combine(
        &mut self,
        job: &CombineJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Answered, SessionError> {
        let plan = &*job.plan;
        let snapshot = self.ctx.catalog.snapshot();
        let mut sources = Vec::with_capacity(plan.pulls.len());
        for pull in &plan.pulls {
            match self.pull_sources(&snapshot, &pull.route) {
                Ok(s) => sources.push(s),
                Err(error) => return Ok(Answered::Combined(failed(error))),
            }
        }
        if plan.reads_unrecorded && self.in_block_on(COMBINER) {
            return Ok(Answered::Combined(failed(error_frame(
                &FrontendError::CombineUnrecordedInBlock,
            ))));
        }
        let mut all: Vec<ShardId> = sources.iter().flatten().copied().collect();
        all.sort();
        all.dedup();
        if all.is_empty() {
            all.push(COMBINER);
        }
        let implicit = self.session_status() == b'I';
        if implicit {
            let begin = vec!["BEGIN".to_string(); all.len()];
            if let f @ Combined::Failed { .. } = self
                .run_on_shards(&all, Work::Simple(&begin), &select())
                .await?
            {
                self.end_every_participant("ROLLBACK").await?;
                return Ok(Answered::Combined(f));
            }
        }
        let outcome = self.combine_in_block(job, &sources, all[0], client).await;
        if implicit {
            let end = match &outcome {
                Ok(Answered::Combined(Combined::Rows(_)) | Answered::Streamed) => "COMMIT",
                _ => "ROLLBACK",
            };
            self.end_every_participant(end).await?;
        }
        outcome
    }

    /// The shards a pull reads, by its plan.
    fn pull_sources(&self, snapshot: &Snapshot, route: &Plan) -> Result<Vec<ShardId>, Bytes> {
        match route {
            Plan::Sharded(p) => match routing::route(snapshot, p, &Params::default()) {
                Ok(r) => Ok(match r.route {
                    Route::Single(s) => vec![s],
                    Route::Multi(s) => s,
                    Route::All => snapshot.shards().iter().map(|s| s.id).collect(),
                }),
                Err(e) => Err(error_frame(&e)),
            },
            // A shard the session already holds, if it holds one of them.
            Plan::AnyOf(shards) => Ok(vec![shards
                .iter()
                .copied()
                .find(|&s| {
                    self.current_shard() == Some(s) || self.parked.iter().any(|p| p.shard() == s)
                })
                .unwrap_or(shards[0])]),
            Plan::Fixed(s) => Ok(vec![*s]),
            Plan::Anywhere
            | Plan::Every(_)
            | Plan::Copy(_)
            | Plan::Refused(_)
            | Plan::Sequence(_)
            | Plan::Combine(_)
            | Plan::Explain(_) => Err(error_frame(&FrontendError::Combine(
                "a table's rows have no shards to be read from".into(),
            ))),
        }
    }

    /// Whether the session's connection to `shard` is in a transaction block.
    fn in_block_on(&self, shard: ShardId) -> bool {
        let current = self
            .current
            .as_ref()
            .is_some_and(|l| l.shard() == shard && l.tx_status != b'I');
        current
            || self
                .parked
                .iter()
                .any(|p| p.shard() == shard && p.tx_status != b'I')
    }

    /// The combining step, with the session's connections to `sources` in a block: the
    /// client's settings from `settings_from`, the temporary tables filled, the statement.
    async fn combine_in_block(
        &mut self,
        job: &CombineJob,
        sources: &[Vec<ShardId>],
        settings_from: ShardId,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Answered, SessionError> {
        let plan = &*job.plan;
        let settings = match self
            .run_on_shards(
                &[settings_from],
                Work::Simple(&[SETTINGS_SQL.to_string()]),
                &select(),
            )
            .await?
        {
            Combined::Rows(r) => r.rows,
            f @ Combined::Failed { .. } => return Ok(Answered::Combined(f)),
        };
        let mut setup = String::from("BEGIN;");
        for row in &settings {
            let values = gather::values(row);
            if let [Some(name), Some(value)] = values[..] {
                setup.push_str(&format!(
                    "SELECT pg_catalog.set_config({}, {}, true);",
                    quote_literal(&String::from_utf8_lossy(name)),
                    quote_literal(&String::from_utf8_lossy(value))
                ));
            }
        }
        for pull in &plan.pulls {
            setup.push_str(&pull.create);
            setup.push(';');
        }
        let mut combiner = match self.ctx.pools.shard(COMBINER).get().await {
            Ok(c) => c,
            Err(e) => {
                self.ctx.metrics.backend_error(COMBINER);
                return Ok(Answered::Combined(failed(error_frame(&e))));
            }
        };
        let outcome = self
            .combine_on(&mut combiner.conn, job, sources, &setup, client)
            .await;
        self.cancel.slot.set_others(Vec::new());
        // Whatever happened, the combining transaction ends and takes its tables with it.
        let clean = match &outcome {
            Ok(_) => matches!(
                combiner::run(&mut combiner.conn, "ROLLBACK").await,
                Ok(None)
            ),
            Err(_) => false,
        };
        if !clean {
            combiner.conn.broken = true;
        }
        self.ctx.pools.shard(COMBINER).release(combiner);
        outcome
    }

    async fn combine_on(
        &mut self,
        conn: &mut crate::backend::BackendConn,
        job: &CombineJob,
        sources: &[Vec<ShardId>],
        setup: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Answered, SessionError> {
        let plan = &*job.plan;
        let fail = |error: Bytes| Ok(Answered::Combined(failed(error)));
        if let Some(error) = combiner::run(conn, setup).await? {
            return fail(error);
        }
        let limit = self.ctx.config.queries.combine_row_limit;
        let mut pulled = 0u64;
        for (pull, shards) in plan.pulls.iter().zip(sources) {
            let declare = vec![
                format!(
                    "DECLARE {CURSOR} BINARY NO SCROLL CURSOR FOR {}",
                    pull.select
                );
                shards.len()
            ];
            if let f @ Combined::Failed { .. } = self
                .run_on_shards(shards, Work::Simple(&declare), &select())
                .await?
            {
                return Ok(Answered::Combined(f));
            }
            let copy = format!("COPY {} FROM STDIN (FORMAT binary)", pull.temp);
            let mut copy_in = match CopyIn::start(conn, &copy).await? {
                Ok(c) => c,
                Err(error) => return fail(error),
            };
            let fetch = vec![format!("FETCH {FETCH_ROWS} FROM {CURSOR}"); shards.len()];
            loop {
                let rows = match self
                    .run_on_shards(shards, Work::Simple(&fetch), &select())
                    .await?
                {
                    Combined::Rows(r) => r.rows,
                    f @ Combined::Failed { .. } => return Ok(Answered::Combined(f)),
                };
                if rows.is_empty() {
                    break;
                }
                pulled += rows.len() as u64;
                if pulled > limit {
                    return fail(error_frame(&FrontendError::CombineRowLimit { limit }));
                }
                copy_in.rows(&rows).await.map_err(BackendError::from)?;
            }
            if let Err(error) = copy_in.finish().await? {
                return fail(error);
            }
            let close = vec![format!("CLOSE {CURSOR}"); shards.len()];
            if let f @ Combined::Failed { .. } = self
                .run_on_shards(shards, Work::Simple(&close), &select())
                .await?
            {
                return Ok(Answered::Combined(f));
            }
        }
        // A cancel from the client now reaches the combining statement.
        self.cancel.slot.set_others(vec![(COMBINER, conn.cancel)]);
        let origin = gather::Origin {
            shards: &[COMBINER],
            control: &self.ctx.control,
        };
        let mut conns = [conn];
        let Some(b) = &job.bound else {
            let merge = Default::default();
            let spec = gather::Spec {
                kind: StatementKind::Select,
                merge: &merge,
                describe: true,
                description: None,
            };
            let mut sink = ClientSink {
                cout: &mut self.cout,
                client,
            };
            let sql = std::slice::from_ref(&plan.sql);
            return match gather::stream_simple(&mut conns, sql, &spec, &origin, &mut sink).await {
                Ok(_) => Ok(Answered::Streamed),
                Err(gather::StreamError::Backend(e)) => Err(e.into()),
                Err(gather::StreamError::Client(e)) => Err(SessionError::Client(e)),
            };
        };
        let messages = combining_messages(&plan.sql, &b.param_types, &b.rest);
        let (combined, _) =
            gather::run_batches(&mut conns, &[messages], &select(), &origin).await?;
        Ok(Answered::Combined(combined))
    }
}

/// Parse, Bind (the client's), Describe portal, Execute and Sync of the combining statement.
fn combining_messages(sql: &str, param_types: &[u8], rest: &[u8]) -> BytesMut {
    let mut out = BytesMut::new();
    MessageBuilder::new(&mut out, b'P')
        .cstr(b"")
        .cstr(sql.as_bytes())
        .bytes(param_types)
        .finish();
    MessageBuilder::new(&mut out, b'B')
        .cstr(b"")
        .cstr(b"")
        .bytes(rest)
        .finish();
    MessageBuilder::new(&mut out, b'D')
        .u8(b'P')
        .cstr(b"")
        .finish();
    MessageBuilder::new(&mut out, b'E')
        .cstr(b"")
        .i32(0)
        .finish();
    MessageBuilder::new(&mut out, b'S').finish();
    out
}

fn select() -> Combine {
    Combine::Union {
        kind: StatementKind::Select,
        merge: Default::default(),
        rows: Vec::new(),
    }
}

fn failed(error: Bytes) -> Combined {
    Combined::Failed {
        notices: BytesMut::new(),
        error,
    }
}
