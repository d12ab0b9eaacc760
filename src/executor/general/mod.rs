//! The general path of a read over several shards (docs/architecture.md §4): rows read from
//! the shards through the session's own connections (so a transaction block sees its own
//! writes), loaded into temporary tables on a combining connection, and the client's statement
//! run there over them. Either each table's rows are read ([`CombinePlan::pulls`]), or, for a
//! grouped read of one family, each shard's partial aggregates ([`PartialPlan`]).
//!
//! The combining connection is not one of the session's: temporary tables would make the
//! client's transaction one two-phase commit cannot prepare. It runs in a transaction of its
//! own, with the client's settings set locally, and rolls back, which drops the tables.
//!
//! The combining statement is the client's read, or what is made of it: its `COPY … TO STDOUT`
//! (passed on as it comes), a holdable cursor's DECLARE (committed, and the connection kept for
//! the cursor, [`declare_cursor`]), statements that store the rows on the combining shard
//! (committed, [`materialize`]), or its EXPLAIN ANALYZE ([`explain_analyze`]). A Bind's
//! messages are built in `bound`.

mod bound;
mod entry;

pub use entry::{answer, declare_cursor, explain_analyze, materialize, MATERIALIZED_ON};

use crate::backend::pool::Pooled;
use crate::backend::{BackendConn, BackendError};
use crate::catalog::Snapshot;
use crate::client_error::ClientError;
use crate::executor::combiner::{self, CopyIn};
use crate::executor::gather::{self, Combine, Combined};
use crate::executor::host::{run_on_shards, Host, Shared, Work};
use crate::model::ShardId;
use crate::protocol::TxStatus;
use crate::router::plan::{CombinePlan, PartialPlan, Plan, StatementKind, PARTIAL_TABLE};
use crate::router::route::{self as routing, Params};
use crate::sql::quote::quote_literal;
use bound::{combining_messages, combining_param_types, declare_messages};
use bytes::{Bytes, BytesMut};
use std::sync::Arc;
use tokio_postgres::error::SqlState;

/// Why the proxy's own part of the general path failed.
#[derive(Debug, thiserror::Error)]
pub enum CombineError {
    #[error(
        "the query needs more than {limit} rows from the shards to combine them (setting \
         [queries] combine_row_limit): narrow the WHERE clause, add the full sharding key, or \
         raise the limit"
    )]
    RowLimit { limit: u64 },
    #[error(
        "this query combines rows of several shards with a table the catalog does not record, \
         which the combining step reads outside this transaction block: run it outside the \
         block, or record the table (CREATE DUPLICATED TABLE)"
    )]
    UnrecordedInBlock,
    /// The combining step failed in a way of the proxy's own (its text).
    #[error("cannot combine the shards' rows: {0}")]
    Combine(String),
}

impl ClientError for CombineError {
    fn sqlstate(&self) -> SqlState {
        match self {
            CombineError::RowLimit { .. } => SqlState::PROGRAM_LIMIT_EXCEEDED,
            CombineError::UnrecordedInBlock => SqlState::FEATURE_NOT_SUPPORTED,
            CombineError::Combine(_) => SqlState::INTERNAL_ERROR,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// The shard whose PostgreSQL combines the rows of tables read whole: where the tables the
/// catalog does not record live.
const COMBINER: ShardId = ShardId(0);
/// Rows fetched from each shard's cursor per round trip.
const FETCH_ROWS: usize = 5_000;
/// The cursor on the shards.
const CURSOR: &str = "shardwire_combine";
/// The combining connection's statement that types the partial rows' table.
const PARTIAL_STATEMENT: &str = "shardwire_partial_q";
/// The settings of the client's connection the combining step takes on: those set by the
/// client (startup packet or SET) that any user may set. A transaction's own characteristics
/// cannot be set once it ran a query, and are the combining transaction's own anyway.
const SETTINGS_SQL: &str = "SELECT name, setting FROM pg_catalog.pg_settings \
     WHERE source IN ('client', 'session') AND context = 'user' \
     AND name NOT IN ('transaction_isolation', 'transaction_read_only', 'transaction_deferrable')";

/// A read the general path answers, with the Bind that executes it (none: a simple query).
pub struct CombineJob {
    pub plan: Arc<CombinePlan>,
    pub bound: Option<BoundCombine>,
    /// The shards of the statement's family, routed: where a partial aggregation runs.
    pub shards: Vec<ShardId>,
}

pub struct BoundCombine {
    pub portal: Box<[u8]>,
    pub param_types: Vec<u8>,
    /// The Bind after its portal and statement names: parameter formats and values, result
    /// formats.
    pub rest: Vec<u8>,
}

/// How the combining statement's answer reached the client.
enum Answered {
    /// Kept, for the caller to answer with.
    Combined(Combined),
    /// A simple query's rows, streamed to the client as the combining step sent them.
    Streamed,
    /// A partial's type rules partial aggregation out: read every row instead.
    Fallback,
    /// The combining statement was made part of statements that keep its rows (a cursor,
    /// a table): they ran, and the combining transaction is to commit.
    Declared,
}

/// Statements that keep the combined rows on the combining shard: `before` the combining
/// statement, then `after` it, in one query string; the combining transaction commits.
#[derive(Clone, Copy)]
struct Keep<'a> {
    before: &'a str,
    after: &'a str,
    /// The connection is kept for the caller (a cursor lives on it).
    connection: bool,
}

/// What the shards and the combining step run.
enum Mode<'p> {
    Pulls(&'p [Vec<ShardId>]),
    Partial(&'p PartialPlan),
}

/// One read on the general path, over the session `host`.
struct GeneralPath<'a, H: Host> {
    host: &'a mut H,
    shared: Shared<'a>,
    /// The combining statement is a COPY TO STDOUT, its answer passed on as it comes.
    copy_out: bool,
    /// The combining statement is made part of statements that keep its rows; a connection
    /// kept for the caller is in `kept`.
    keep: Option<Keep<'a>>,
    kept: Option<Pooled>,
    /// EXPLAIN ANALYZE: the options; each step's plan and time are gathered in `explained`.
    explain: Option<&'a str>,
    explained: Vec<String>,
}

impl<'a, H: Host> GeneralPath<'a, H> {
    /// A read whose combining statement answers the client (the callers set another ending).
    fn new(host: &'a mut H, shared: Shared<'a>) -> GeneralPath<'a, H> {
        GeneralPath {
            host,
            shared,
            copy_out: false,
            keep: None,
            kept: None,
            explain: None,
            explained: Vec::new(),
        }
    }

    /// Every table's rows read whole into the combining step.
    async fn combine_pulls(&mut self, job: &CombineJob) -> Result<Answered, H::Error> {
        let plan = &*job.plan;
        let snapshot = self.shared.catalog.snapshot();
        let mut sources = Vec::with_capacity(plan.pulls.len());
        for pull in &plan.pulls {
            match self.pull_sources(&snapshot, &pull.route) {
                Ok(s) => sources.push(s),
                Err(error) => return Ok(Answered::Combined(failed(error))),
            }
        }
        if plan.reads_unrecorded && self.host.links().in_block_on(COMBINER) {
            return Ok(Answered::Combined(failed(
                CombineError::UnrecordedInBlock.error_frame(),
            )));
        }
        let mut all: Vec<ShardId> = sources.iter().flatten().copied().collect();
        all.push(COMBINER);
        all.sort();
        all.dedup();
        self.combine(job, Mode::Pulls(&sources), &all).await
    }

    /// Runs `mode` with the session's connections to `shards` in a block (one of their own
    /// when the client is in none); the combining connection is to the first shard of them
    /// for a partial aggregation, to [`COMBINER`] otherwise.
    async fn combine(
        &mut self,
        job: &CombineJob,
        mode: Mode<'_>,
        shards: &[ShardId],
    ) -> Result<Answered, H::Error> {
        let implicit = self.host.links().status() == TxStatus::Idle;
        if implicit {
            let begin = vec!["BEGIN".to_string(); shards.len()];
            if let f @ Combined::Failed { .. } = run_on_shards(
                self.host,
                self.shared,
                shards,
                Work::Simple(&begin),
                &select(),
            )
            .await?
            {
                self.host.links().end_open_blocks("ROLLBACK").await?;
                return Ok(Answered::Combined(f));
            }
        }
        let outcome = self.combine_in_block(job, mode, shards).await;
        if implicit {
            let end = match &outcome {
                Ok(
                    Answered::Combined(Combined::Rows(_)) | Answered::Streamed | Answered::Declared,
                ) => "COMMIT",
                _ => "ROLLBACK",
            };
            self.host.links().end_open_blocks(end).await?;
        }
        outcome
    }

    async fn combine_in_block(
        &mut self,
        job: &CombineJob,
        mode: Mode<'_>,
        shards: &[ShardId],
    ) -> Result<Answered, H::Error> {
        // The client's settings, as its connection to the first shard has them.
        let settings = match run_on_shards(
            self.host,
            self.shared,
            &shards[..1],
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
        let at = match mode {
            Mode::Pulls(_) => COMBINER,
            Mode::Partial(_) => shards[0],
        };
        let mut combiner = match self.shared.pools.shard(at).get().await {
            Ok(c) => c,
            Err(e) => {
                self.shared.metrics.backend_error(at);
                return Ok(Answered::Combined(failed(e.error_frame())));
            }
        };
        let outcome = match mode {
            Mode::Pulls(sources) => self.pulls_on(&mut combiner.conn, job, sources, setup).await,
            Mode::Partial(partial) => {
                self.partial_on(&mut combiner.conn, job, partial, shards, setup)
                    .await
            }
        };
        self.host.cancel_reaches(Vec::new());
        if let Ok(Answered::Declared) = outcome {
            // The commit materialises a cursor (the tables go with the transaction).
            return match combiner::run(&mut combiner.conn, "COMMIT").await {
                Ok(None) => {
                    match self.keep {
                        Some(Keep {
                            connection: true, ..
                        }) => self.kept = Some(combiner),
                        _ => self.shared.pools.shard(at).release(combiner),
                    }
                    Ok(Answered::Declared)
                }
                Ok(Some(error)) => {
                    combiner.conn.broken = true;
                    self.shared.pools.shard(at).release(combiner);
                    Ok(Answered::Combined(failed(error)))
                }
                Err(e) => {
                    combiner.conn.broken = true;
                    self.shared.pools.shard(at).release(combiner);
                    Err(H::Error::from(e))
                }
            };
        }
        // Whatever happened, the combining transaction ends and takes its tables with it. A
        // connection whose setup failed half-way may still hold the partial's statement.
        let clean = match &outcome {
            Ok(_) => matches!(
                combiner::run(&mut combiner.conn, "ROLLBACK").await,
                Ok(None)
            ),
            Err(_) => false,
        };
        if !clean
            || matches!(
                outcome,
                Ok(Answered::Combined(Combined::Failed { .. }) | Answered::Fallback)
            )
        {
            combiner.conn.broken = true;
        }
        self.shared.pools.shard(at).release(combiner);
        outcome
    }

    async fn pulls_on(
        &mut self,
        conn: &mut BackendConn,
        job: &CombineJob,
        sources: &[Vec<ShardId>],
        mut setup: String,
    ) -> Result<Answered, H::Error> {
        let plan = &*job.plan;
        for pull in &plan.pulls {
            setup.push_str(&pull.create);
            setup.push(';');
        }
        if let Some(error) = combiner::run(conn, &setup).await? {
            return Ok(Answered::Combined(failed(error)));
        }
        let mut pulled = 0u64;
        for (pull, shards) in plan.pulls.iter().zip(sources) {
            let declare = vec![declare_sql(&pull.select); shards.len()];
            let loaded = self
                .load(
                    conn,
                    &pull.temp,
                    shards,
                    Work::Simple(&declare),
                    &mut pulled,
                )
                .await?;
            if let Some(f) = loaded {
                return Ok(Answered::Combined(f));
            }
        }
        // Temporary tables have no statistics (autovacuum never sees them): without them the
        // planner guesses, and a correlated subquery may rescan a table per outer row (seconds
        // where the one PostgreSQL holding the rows takes milliseconds).
        if !plan.pulls.is_empty() {
            let temps: Vec<&str> = plan.pulls.iter().map(|p| p.temp.as_str()).collect();
            if let Some(error) =
                combiner::run(conn, &format!("ANALYZE {}", temps.join(", "))).await?
            {
                return Ok(Answered::Combined(failed(error)));
            }
        }
        let bound = job
            .bound
            .as_ref()
            .map(|b| (b.param_types.clone(), b.rest.as_slice()));
        self.run_combining_statement(conn, COMBINER, &plan.sql, bound)
            .await
    }

    async fn partial_on(
        &mut self,
        conn: &mut BackendConn,
        job: &CombineJob,
        partial: &PartialPlan,
        shards: &[ShardId],
        setup: String,
    ) -> Result<Answered, H::Error> {
        if let Some(error) = combiner::run(conn, &setup).await? {
            return Ok(Answered::Combined(failed(error)));
        }
        let Some((types, param_oids)) = self.type_partial(conn, partial, shards[0]).await? else {
            return Ok(Answered::Fallback);
        };
        if partial
            .exact_sums
            .iter()
            .any(|&i| !matches!(types.get(i).map(String::as_str), Some("bigint" | "numeric")))
        {
            return Ok(Answered::Fallback);
        }
        let mut combine = partial.combine.clone();
        for (placeholder, i) in &partial.typed {
            let Some(t) = types.get(*i) else {
                return Ok(Answered::Fallback);
            };
            combine = combine.replace(placeholder, t);
        }
        let mut pulled = 0u64;
        let declare = declare_sql(&partial.select);
        let loaded = match &job.bound {
            Some(b) if !partial.params.is_empty() => {
                let messages = match declare_messages(&declare, partial, &param_oids, &b.rest) {
                    Ok(m) => m,
                    Err(e) => {
                        return Ok(Answered::Combined(failed(
                            CombineError::Combine(e).error_frame(),
                        )))
                    }
                };
                let messages = vec![messages; shards.len()];
                self.load(
                    conn,
                    PARTIAL_TABLE,
                    shards,
                    Work::Batches(&messages),
                    &mut pulled,
                )
                .await?
            }
            _ => {
                let declare = vec![declare; shards.len()];
                self.load(
                    conn,
                    PARTIAL_TABLE,
                    shards,
                    Work::Simple(&declare),
                    &mut pulled,
                )
                .await?
            }
        };
        if let Some(f) = loaded {
            return Ok(Answered::Combined(f));
        }
        let bound = job.bound.as_ref().map(|b| {
            (
                combining_param_types(&b.param_types, &b.rest, partial, &param_oids),
                b.rest.as_slice(),
            )
        });
        self.run_combining_statement(conn, shards[0], &combine, bound)
            .await
    }

    /// The partial rows' table, typed (and collated) by PostgreSQL itself from the shards'
    /// statement on the combining connection (to `at`): its columns' types, and the types it
    /// infers for the statement's parameters. Nothing when PostgreSQL cannot type the partial
    /// rows (a row value, …): every row is read instead, which fails as the statement itself
    /// would if the fault is the statement's.
    async fn type_partial(
        &mut self,
        conn: &mut BackendConn,
        partial: &PartialPlan,
        at: ShardId,
    ) -> Result<Option<(Vec<String>, Vec<u32>)>, H::Error> {
        let nulls = vec!["NULL"; partial.params.len()].join(", ");
        let execute = if partial.params.is_empty() {
            format!("EXECUTE {PARTIAL_STATEMENT}")
        } else {
            format!("EXECUTE {PARTIAL_STATEMENT}({nulls})")
        };
        let typing = format!(
            "PREPARE {PARTIAL_STATEMENT} AS {select};\
             CREATE TEMP TABLE {PARTIAL_TABLE} ON COMMIT DROP AS {execute} WITH NO DATA;\
             SELECT pg_catalog.format_type(atttypid, atttypmod) FROM pg_catalog.pg_attribute \
             WHERE attrelid = '{PARTIAL_TABLE}'::pg_catalog.regclass AND attnum > 0 ORDER BY attnum;\
             SELECT parameter_types::pg_catalog.oid[]::text FROM pg_catalog.pg_prepared_statements \
             WHERE name = '{PARTIAL_STATEMENT}';\
             DEALLOCATE {PARTIAL_STATEMENT}",
            select = partial.select
        );
        let origin = gather::Origin {
            shards: &[at],
            control: self.shared.control,
        };
        let (typed, _) =
            gather::run_simple(&mut [&mut *conn], &[typing], &select(), &origin).await?;
        let mut rows = match typed {
            Combined::Rows(r) => r.rows,
            Combined::Failed { .. } => return Ok(None),
        };
        let param_oids: Vec<u32> = rows
            .pop_back()
            .and_then(|r| {
                let v = gather::values(&r);
                let text = String::from_utf8_lossy(v.first().copied().flatten()?).into_owned();
                Some(
                    text.trim_matches(|c| c == '{' || c == '}')
                        .split(',')
                        .filter_map(|o| o.parse().ok())
                        .collect(),
                )
            })
            .unwrap_or_default();
        let types: Vec<String> = rows
            .iter()
            .map(|r| {
                let v = gather::values(r);
                String::from_utf8_lossy(v.first().copied().flatten().unwrap_or_default())
                    .into_owned()
            })
            .collect();
        Ok(Some((types, param_oids)))
    }

    /// Declares the cursor on `shards` (`declare`), fetches its rows a slice at a time and
    /// copies them into `temp` on the combining connection, then closes the cursors. The
    /// failure to answer with, if any.
    async fn load(
        &mut self,
        conn: &mut BackendConn,
        temp: &str,
        shards: &[ShardId],
        declare: Work<'_>,
        pulled: &mut u64,
    ) -> Result<Option<Combined>, H::Error> {
        if let f @ Combined::Failed { .. } =
            run_on_shards(self.host, self.shared, shards, declare, &select()).await?
        {
            return Ok(Some(f));
        }
        let copy = format!("COPY {temp} FROM STDIN (FORMAT binary)");
        let mut copy_in = match CopyIn::start(conn, &copy).await? {
            Ok(c) => c,
            Err(error) => return Ok(Some(failed(error))),
        };
        let limit = self.shared.config.queries.combine_row_limit;
        let fetch = vec![format!("FETCH {FETCH_ROWS} FROM {CURSOR}"); shards.len()];
        loop {
            let rows = match run_on_shards(
                self.host,
                self.shared,
                shards,
                Work::Simple(&fetch),
                &select(),
            )
            .await?
            {
                Combined::Rows(r) => r.rows,
                f @ Combined::Failed { .. } => return Ok(Some(f)),
            };
            if rows.is_empty() {
                break;
            }
            *pulled += rows.len() as u64;
            if *pulled > limit {
                return Ok(Some(failed(
                    (CombineError::RowLimit { limit }).error_frame(),
                )));
            }
            copy_in.rows(&rows).await.map_err(BackendError::from)?;
        }
        if let Err(error) = copy_in.finish().await? {
            return Ok(Some(failed(error)));
        }
        let close = vec![format!("CLOSE {CURSOR}"); shards.len()];
        match run_on_shards(
            self.host,
            self.shared,
            shards,
            Work::Simple(&close),
            &select(),
        )
        .await?
        {
            f @ Combined::Failed { .. } => Ok(Some(f)),
            Combined::Rows(_) => Ok(None),
        }
    }

    /// The combining statement on `conn`: a simple query's rows streamed to the client, a
    /// Bind's (`bound`: its parameter types and the client's Bind) kept for its portal.
    async fn run_combining_statement(
        &mut self,
        conn: &mut BackendConn,
        at: ShardId,
        sql: &str,
        bound: Option<(Vec<u8>, &[u8])>,
    ) -> Result<Answered, H::Error> {
        // A cancel from the client now reaches the combining statement.
        self.host.cancel_reaches(vec![(at, conn.cancel)]);
        let origin = gather::Origin {
            shards: &[at],
            control: self.shared.control,
        };
        if let Some(options) = self.explain {
            let explain = [format!("EXPLAIN ({options}) {sql}")];
            let origin = gather::Origin {
                shards: &[at],
                control: self.shared.control,
            };
            let (combined, _) =
                gather::run_simple(&mut [conn], &explain, &Combine::Each, &origin).await?;
            if let Combined::Rows(rows) = &combined {
                let name = self
                    .shared
                    .catalog
                    .snapshot()
                    .shard(at)
                    .map_or_else(|| at.to_string(), |s| s.name.clone());
                self.explained.push(format!("  Combining on {name}:"));
                for row in &rows.rows {
                    if let Some(Some(line)) = gather::values(row).first() {
                        self.explained
                            .push(format!("    {}", String::from_utf8_lossy(line)));
                    }
                }
            }
            return Ok(Answered::Combined(combined));
        }
        if let Some(Keep { before, after, .. }) = self.keep {
            return Ok(
                match combiner::run(conn, &format!("{before} {sql}{after}")).await? {
                    Some(error) => Answered::Combined(failed(error)),
                    None => Answered::Declared,
                },
            );
        }
        if self.copy_out {
            let (_, mut sink) = self.host.links_and_sink();
            gather::relay_simple(conn, sql, &mut sink).await?;
            return Ok(Answered::Streamed);
        }
        let mut conns = [conn];
        let Some((param_types, rest)) = bound else {
            let merge = Default::default();
            let spec = gather::Spec {
                kind: StatementKind::Select,
                merge: &merge,
                describe: true,
                description: None,
            };
            let (_, mut sink) = self.host.links_and_sink();
            let sql = [sql.to_string()];
            gather::stream_simple(&mut conns, &sql, &spec, &origin, &mut sink).await?;
            return Ok(Answered::Streamed);
        };
        let messages = combining_messages(sql, &param_types, rest);
        let (combined, _) =
            gather::run_batches(&mut conns, &[messages], &select(), &origin).await?;
        Ok(Answered::Combined(combined))
    }

    /// The shards a pull reads, by its plan.
    fn pull_sources(&mut self, snapshot: &Snapshot, route: &Plan) -> Result<Vec<ShardId>, Bytes> {
        match route {
            Plan::Sharded(p) => match routing::route(snapshot, p, &Params::default()) {
                Ok(r) => Ok(r.route.into_shards(snapshot)),
                Err(e) => Err(e.error_frame()),
            },
            // A shard the session already holds, if it holds one of them.
            Plan::AnyOf(shards) => Ok(vec![shards
                .iter()
                .copied()
                .find(|&s| self.host.links().iter().any(|l| l.shard() == s))
                .unwrap_or(shards[0])]),
            Plan::Fixed(s) => Ok(vec![*s]),
            Plan::Anywhere
            | Plan::Every(_)
            | Plan::Utility(_)
            | Plan::Script
            | Plan::Copy(_)
            | Plan::Refused(_)
            | Plan::Sequence(_)
            | Plan::Combine(_)
            | Plan::Explain(_) => Err((CombineError::Combine(
                "a table's rows have no shards to be read from".into(),
            ))
            .error_frame()),
        }
    }
}

fn declare_sql(select: &str) -> String {
    format!("DECLARE {CURSOR} BINARY NO SCROLL CURSOR FOR {select}")
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
