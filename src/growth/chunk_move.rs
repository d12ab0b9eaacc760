//! `MOVE CHUNK n FOR root TO SHARD s`: chunk n of a family (the root's partition for it and
//! every descendant's) moves to another shard while clients keep reading and writing.
//!
//! 1. The chunk's tables are made on the target as plain tables, with the parent's columns,
//!    defaults, constraints and indexes, and a CHECK that is the partition's bound, so that
//!    attaching them later needs no scan.
//! 2. The source publishes exactly those partitions; the target subscribes with `copy_data`
//!    and applies the writes made meanwhile.
//! 3. Cutover, within `[moves] cutover_pause_ms`: this proxy holds new statements (the
//!    [`Fence`]); on the source the family's tables are locked, which waits for the
//!    transactions in flight on them (prepared ones too) and keeps new ones out; once the
//!    target has confirmed the source's last change and holds as many rows, the target attaches
//!    the tables as partitions, the catalog gives the chunk to the target (a new version), and
//!    the source detaches and drops its partitions before its lock goes. A lock or catch-up
//!    that does not come within the pause backs off, with nothing changed, and tries again.
//! 4. Clean up: subscription, slot and publication dropped.
//!
//! Each step is recorded in the catalog before it is taken. A move that fails before the
//! catalog hands the chunk over removes everything it made; after, only clean-up is left.

use std::time::{Duration, Instant};

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::family_schema;
use super::hold;
use super::plan::{hash_key_columns, FamilyAtTarget, Plan};
use super::replication::{self, Half, Names, Synced};
use super::settle::{self, connect, on};
use super::{Growth, GrowthError};
use crate::failpoint::fail_point;
use crate::model::{MoveId, MoveState};
use crate::sql::quote::{quote_ident, quote_literal};

/// The name of the CHECK that stands for the partition bound on the target until it attaches.
const BOUND_CHECK: &str = "shardwire_move_bound";
/// Waits between cutover attempts.
const BACKOFF: Duration = Duration::from_millis(500);
/// How often the source is asked whether the target confirmed its last change.
const CATCH_UP_POLL: Duration = Duration::from_millis(5);
/// How often the copy's progress (and a CANCEL MOVE) is looked at.
const COPY_POLL: Duration = Duration::from_millis(100);
/// Every how many looks the copy's progress is logged.
const PROGRESS_EVERY: u64 = 50;

/// What the client asked to move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveRequest {
    pub schema: String,
    pub table: String,
    pub chunk: u32,
    pub target: String,
}

/// A finished move.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Moved {
    pub id: MoveId,
    pub rows: i64,
    pub bytes: i64,
    /// How long this proxy held statements at the cutover that succeeded.
    pub pause: Duration,
}

/// Moves a chunk, returning when it is done; on failure nothing is left changed.
pub async fn move_chunk(g: &Growth, req: &MoveRequest) -> Result<Moved, GrowthError> {
    let plan = Plan::new(&g.catalog.snapshot(), req)?;
    let source = connect(g, plan.source, &plan.source_name).await?;
    check_wal_level(&source, &plan.source_name).await?;
    drop(source);
    let id = g
        .catalog
        .plan_move(plan.root, plan.moving(), plan.target, &g.owner())
        .await?;
    tracing::info!(move_id = %id, table = %plan.display, chunk = plan.chunk.0,
        source = %plan.source_name, target = %plan.target_name, "chunk move planned");
    g.metrics.running.increment(1.0);
    let ran = run(g, &plan, id).await;
    g.metrics.running.decrement(1.0);
    g.metrics.lag.set(0.0);
    match ran {
        Ok(moved) => {
            g.count_ended(MoveState::Done);
            g.metrics.rows.increment(moved.rows.max(0) as u64);
            g.metrics.bytes.increment(moved.bytes.max(0) as u64);
            g.metrics.cutover_pause.record(moved.pause.as_secs_f64());
            Ok(moved)
        }
        Err(e) => {
            let unfinished = match e {
                GrowthError::Canceled(_) => MoveState::Canceled,
                _ => MoveState::Failed,
            };
            settle::settle(g, &plan, id, unfinished, Some(&e.to_string())).await;
            Err(e)
        }
    }
}

async fn run(g: &Growth, plan: &Plan, id: MoveId) -> Result<Moved, GrowthError> {
    let names = Names::of(&g.me.cluster, id);
    g.catalog
        .set_move_state(id, MoveState::Copying, None)
        .await?;
    copy(g, plan, id, &names).await?;
    fail_point!(
        g.failpoints,
        crate::failpoint::FailPoint::ChunkMoveAfterCopy
    );
    g.catalog
        .set_move_state(id, MoveState::CuttingOver, None)
        .await?;
    let pause = Duration::from_millis(g.config.moves.cutover_pause_ms);
    let attempts = g.config.moves.cutover_attempts.max(1);
    let mut held = None;
    for attempt in 1..=attempts {
        check_cancel(g, id).await?;
        match cut_over(g, plan, (id, attempt), &names, pause).await? {
            Some(outcome) => {
                held = Some(outcome);
                break;
            }
            None => {
                tracing::info!(move_id = %id, attempt, "chunk move: cutover backed off");
                tokio::time::sleep(BACKOFF).await;
            }
        }
    }
    let Some(Cutover { pause, rows }) = held else {
        return Err(GrowthError::CutoverGaveUp {
            chunk: plan.chunk.0,
            pause,
            attempts,
        });
    };
    settle::clean_up(g, plan, id).await?;
    let target = connect(g, plan.target, &plan.target_name).await?;
    let (_, bytes) = size_of(&target, plan)
        .await
        .map_err(on(&plan.target_name))?;
    g.catalog.set_move_progress(id, rows, bytes).await?;
    match settle::kept_prefix(g, id) {
        Some(_) => settle::keep_source(g, id).await?,
        None => g.catalog.set_move_state(id, MoveState::Done, None).await?,
    }
    tracing::info!(move_id = %id, rows, pause_ms = pause.as_millis() as u64, "chunk move done");
    Ok(Moved {
        id,
        rows,
        bytes,
        pause,
    })
}

/// Makes the chunk's tables on the target and copies the rows there by logical replication,
/// until the target applies the source's changes as they come.
async fn copy(g: &Growth, plan: &Plan, id: MoveId, names: &Names) -> Result<(), GrowthError> {
    let source = connect(g, plan.source, &plan.source_name).await?;
    let target = connect(g, plan.target, &plan.target_name).await?;
    family_schema::make_family(&source, &target, plan)
        .await
        .map_err(on(&plan.target_name))?;
    make_target_tables(&target, plan)
        .await
        .map_err(on(&plan.target_name))?;
    copy_partition_comments(&source, &target, plan).await?;
    give_replica_identity(&source, plan)
        .await
        .map_err(on(&plan.source_name))?;
    replication::publish(&source, names, &plan.parts())
        .await
        .map_err(on(&plan.source_name))?;
    let conninfo = g.config.shard_endpoint(plan.source.index()).conninfo();
    replication::subscribe(&target, names, &conninfo)
        .await
        .map_err(on(&plan.target_name))?;
    g.catalog
        .set_move_state(id, MoveState::CatchingUp, None)
        .await?;
    for poll in 0u64.. {
        let lag = replication::lag_bytes(&source, names)
            .await
            .map_err(on(&plan.source_name))?;
        g.metrics.lag.set(lag.unwrap_or(0) as f64);
        if poll % PROGRESS_EVERY == PROGRESS_EVERY - 1 {
            tracing::info!(move_id = %id, lag_bytes = lag, "chunk move: copying");
        }
        match replication::synced(&target, names, plan.levels.len())
            .await
            .map_err(on(&plan.target_name))?
        {
            Synced::Ready => break,
            Synced::Copying => {}
            Synced::Failed => {
                return Err(GrowthError::CopyFailed {
                    chunk: plan.chunk.0,
                    shard: plan.target_name.clone(),
                })
            }
        }
        check_cancel(g, id).await?;
        tokio::time::sleep(COPY_POLL).await;
    }
    let (rows, bytes) = size_of(&target, plan)
        .await
        .map_err(on(&plan.target_name))?;
    g.catalog.set_move_progress(id, rows, bytes).await?;
    tracing::info!(move_id = %id, rows, bytes, "chunk move: copied, catching up");
    Ok(())
}

/// Stops the move when CANCEL MOVE asked for it.
async fn check_cancel(g: &Growth, id: MoveId) -> Result<(), GrowthError> {
    match g.catalog.move_record(id).await? {
        Some(m) if m.cancel_requested => Err(GrowthError::Canceled(id)),
        _ => Ok(()),
    }
}

/// A cutover that went through.
struct Cutover {
    pause: Duration,
    rows: i64,
}

/// One attempt at the cutover; `None`: it backed off (a lock or the catch-up did not come
/// within `pause`), with nothing changed.
async fn cut_over(
    g: &Growth,
    plan: &Plan,
    (id, attempt): (MoveId, u32),
    names: &Names,
    pause: Duration,
) -> Result<Option<Cutover>, GrowthError> {
    let attempt = i32::try_from(attempt).unwrap_or(i32::MAX);
    let outcome = cut_over_held(g, plan, (id, attempt), names, pause).await;
    // Other proxies go on when the hold is cleared: after a hand-over only once both halves
    // are committed. A cutover that failed after handing the chunk over leaves it to the
    // settling, whose recorded end clears it; one that did not (or that cannot tell) lets it
    // be, or lapse.
    let release = match &outcome {
        Ok(_) => true,
        Err(_) => matches!(
            g.catalog.move_record(id).await,
            Ok(Some(m)) if m.state == MoveState::CuttingOver
        ),
    };
    if release {
        if let Err(e) = g.catalog.release_cutover(id).await {
            tracing::warn!(move_id = %id, error = %e, "chunk move: the cutover's hold lapses by itself");
        }
    }
    outcome
}

async fn cut_over_held(
    g: &Growth,
    plan: &Plan,
    (id, attempt): (MoveId, i32),
    names: &Names,
    pause: Duration,
) -> Result<Option<Cutover>, GrowthError> {
    let source = connect(g, plan.source, &plan.source_name).await?;
    let target = connect(g, plan.target, &plan.target_name).await?;
    let hold = g.fence.close();
    let started = Instant::now();
    // Statements this proxy routed just before the fence closed (to the source among them),
    // and batches begun before, finish first; every other proxy holds its own the same way.
    if !g.fence.quiesce(started + pause).await
        || !hold::hold_everywhere(g, id, attempt, pause, started + pause).await?
    {
        return Ok(None);
    }
    source
        .batch_execute("BEGIN")
        .await
        .map_err(on(&plan.source_name))?;
    let sides = Sides {
        source: &source,
        target: &target,
    };
    let outcome = cut_over_in(g, plan, id, names, sides, started, pause).await;
    if outcome.is_err() || matches!(outcome, Ok(None)) {
        // Back to its pool, never inside a transaction (a prepared half is the caller's to
        // settle).
        let _ = source.batch_execute("ROLLBACK").await;
        let _ = target.batch_execute("ROLLBACK").await;
    }
    drop(hold);
    outcome
}

struct Sides<'c> {
    source: &'c Client,
    target: &'c Client,
}

/// The cutover inside the source's transaction. Both shards' halves are prepared (two-phase)
/// before the catalog gives the chunk to the target, and committed after: a proxy that dies
/// between leaves either both to roll back or both to commit, and neither shows a reader the
/// chunk twice meanwhile (the target's partitions are not attached before its commit; the
/// source's stay locked until its own).
async fn cut_over_in(
    g: &Growth,
    plan: &Plan,
    id: MoveId,
    names: &Names,
    Sides { source, target }: Sides<'_>,
    started: Instant,
    pause: Duration,
) -> Result<Option<Cutover>, GrowthError> {
    let on_source = on(&plan.source_name);
    let on_target = on(&plan.target_name);
    let left = || pause.saturating_sub(started.elapsed());
    if !lock_family(source, plan, left())
        .await
        .map_err(&on_source)?
    {
        return Ok(None);
    }
    // DDL through the proxy reaches the shards holding chunks: tables this move made on the
    // target miss what ran since. The lock keeps the source's from changing now.
    if plan.family_at_target == FamilyAtTarget::Made {
        let at_source = family_schema::definition_in(source, plan)
            .await
            .map_err(&on_source)?;
        let at_target = family_schema::definition(target, plan)
            .await
            .map_err(&on_target)?;
        if at_source != at_target {
            return Err(GrowthError::FamilyChanged {
                table: plan.display.clone(),
                shard: plan.target_name.clone(),
            });
        }
    }
    // Every write to the chunk is in the source's WAL now: wait for the target to confirm it.
    // The insert position, not the write position: a commit made with synchronous_commit off
    // may not be written yet. A logical walsender sends only flushed WAL, and nothing flushes
    // a partly filled page soon unless a commit asks: a commit of its own that does.
    let lsn: String = source
        .query_one("SELECT pg_catalog.pg_current_wal_insert_lsn()::text", &[])
        .await
        .map_err(&on_source)?
        .get(0);
    connect(g, plan.source, &plan.source_name)
        .await?
        .batch_execute(
            "BEGIN; SET LOCAL synchronous_commit = on; SELECT pg_catalog.txid_current(); COMMIT",
        )
        .await
        .map_err(&on_source)?;
    while !replication::caught_up(source, names, &lsn)
        .await
        .map_err(&on_source)?
    {
        if left().is_zero() {
            return Ok(None);
        }
        tokio::time::sleep(CATCH_UP_POLL).await;
    }
    let source_rows = count_rows(source, plan).await.map_err(&on_source)?;
    let target_rows = count_rows(target, plan).await.map_err(&on_target)?;
    if source_rows != target_rows {
        return Err(GrowthError::CopyMismatch {
            id,
            source_rows,
            target: target_rows,
        });
    }
    // A statement queued behind the lock would run after the source's partitions are gone and
    // find nothing (an UPDATE of 0 rows where the row exists): back off and let it run first.
    // The fence's quiescence keeps this proxy's own statements from queueing there; this is
    // the net for what it cannot see.
    if has_waiters(source, plan).await.map_err(&on_source)? {
        tracing::info!(move_id = %id, "chunk move: statements wait on the source; backing off");
        return Ok(None);
    }
    replication::set_enabled(target, names, false)
        .await
        .map_err(&on_target)?;
    if !prepare_attach(target, plan, names, left())
        .await
        .map_err(&on_target)?
    {
        replication::set_enabled(target, names, true)
            .await
            .map_err(&on_target)?;
        return Ok(None);
    }
    // Should anything fail from here, the caller reads the record: the prepared halves are
    // committed if the catalog gave the chunk away, rolled back if not.
    settle::remove_chunk_tables(source, plan, settle::kept_prefix(g, id).as_deref())
        .await
        .map_err(&on_source)?;
    source
        .batch_execute(&format!(
            "PREPARE TRANSACTION {}",
            quote_literal(&names.prepared(Half::Source))
        ))
        .await
        .map_err(&on_source)?;
    fail_point!(
        g.failpoints,
        crate::failpoint::FailPoint::ChunkMoveBeforeHandOver
    );
    let pause_ms = started.elapsed().as_millis() as i64;
    g.catalog.hand_over_chunk(id, pause_ms).await?;
    fail_point!(
        g.failpoints,
        crate::failpoint::FailPoint::ChunkMoveAfterHandOver
    );
    for (client, half, on_shard) in [
        (target, Half::Target, &on_target),
        (source, Half::Source, &on_source),
    ] {
        client
            .batch_execute(&format!(
                "COMMIT PREPARED {}",
                quote_literal(&names.prepared(half))
            ))
            .await
            .map_err(on_shard)?;
    }
    Ok(Some(Cutover {
        pause: started.elapsed(),
        rows: target_rows,
    }))
}

/// Whether any session waits for a lock on the family's tables (the cutover holds them all).
async fn has_waiters(source: &Client, plan: &Plan) -> Result<bool, tokio_postgres::Error> {
    let relations: Vec<String> = plan
        .levels
        .iter()
        .flat_map(|l| [l.parent.clone(), l.part.clone()])
        .collect();
    source
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_locks
                             WHERE NOT granted AND locktype = 'relation'
                               AND relation = ANY (SELECT pg_catalog.to_regclass(r)::oid
                                                     FROM unnest($1::text[]) r))",
            &[&relations],
        )
        .await
        .map(|row| row.get(0))
}

/// Locks the family's tables on the source within `wait`; `false` when the wait ran out.
async fn lock_family(
    source: &Client,
    plan: &Plan,
    wait: Duration,
) -> Result<bool, tokio_postgres::Error> {
    let parents: Vec<&str> = plan.levels.iter().map(|l| l.parent.as_str()).collect();
    let locked = source
        .batch_execute(&format!(
            "SET LOCAL lock_timeout = {}; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
            wait.as_millis().max(1),
            parents.join(", ")
        ))
        .await;
    match locked {
        Ok(()) => Ok(true),
        Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => Ok(false),
        Err(e) => Err(e),
    }
}

/// Attaches the chunk's tables on the target, root first, within `wait`, and prepares that
/// transaction; `false` when a lock did not come in time (nothing attached).
async fn prepare_attach(
    target: &Client,
    plan: &Plan,
    names: &Names,
    wait: Duration,
) -> Result<bool, tokio_postgres::Error> {
    let mut sql = format!(
        "BEGIN; SET LOCAL lock_timeout = {};",
        wait.as_millis().max(1)
    );
    for level in &plan.levels {
        sql.push_str(&format!(
            " ALTER TABLE {} ATTACH PARTITION {} {};",
            level.parent,
            level.part,
            plan.bound()
        ));
        sql.push_str(&format!(
            " ALTER TABLE {} DROP CONSTRAINT IF EXISTS {};",
            level.part,
            quote_ident(BOUND_CHECK)
        ));
    }
    sql.push_str(&format!(
        " PREPARE TRANSACTION {}",
        quote_literal(&names.prepared(Half::Target))
    ));
    match target.batch_execute(&sql).await {
        Ok(()) => Ok(true),
        Err(e) => {
            let _ = target.batch_execute("ROLLBACK").await;
            if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) {
                Ok(false)
            } else {
                Err(e)
            }
        }
    }
}

/// The chunk's tables on the target: the parent's shape, as plain tables until the cutover.
async fn make_target_tables(target: &Client, plan: &Plan) -> Result<(), tokio_postgres::Error> {
    for level in &plan.levels {
        let key: String = target
            .query_one(
                "SELECT pg_catalog.pg_get_partkeydef($1::text::regclass)",
                &[&level.parent],
            )
            .await?
            .get(0);
        let columns = hash_key_columns(&key);
        target
            .batch_execute(&format!(
                "CREATE TABLE {part} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS \
                 INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMMENTS INCLUDING GENERATED \
                 INCLUDING STATISTICS);
                 ALTER TABLE {part} ADD CONSTRAINT {check} CHECK (pg_catalog.satisfies_hash_partition(\
                 {parent_literal}::regclass::oid, {m}, {k}, {columns}))",
                part = level.part,
                parent = level.parent,
                parent_literal = quote_literal(&level.parent),
                check = quote_ident(BOUND_CHECK),
                m = plan.modulus,
                k = plan.chunk.0,
            ))
            .await?;
    }
    Ok(())
}

/// The comments made on the chunk's partitions themselves (LIKE copies the parents' column and
/// constraint comments, not a table's own).
async fn copy_partition_comments(
    source: &Client,
    target: &Client,
    plan: &Plan,
) -> Result<(), GrowthError> {
    for level in &plan.levels {
        let comment: Option<String> = source
            .query_one(
                "SELECT pg_catalog.obj_description($1::text::regclass, 'pg_class')",
                &[&level.part],
            )
            .await
            .map_err(on(&plan.source_name))?
            .get(0);
        if let Some(comment) = comment {
            target
                .batch_execute(&format!(
                    "COMMENT ON TABLE {} IS {}",
                    level.part,
                    quote_literal(&comment)
                ))
                .await
                .map_err(on(&plan.target_name))?;
        }
    }
    Ok(())
}

/// Logical replication sends a partition's updates and deletes by its replica identity: the
/// primary key, or every column where there is none.
async fn give_replica_identity(source: &Client, plan: &Plan) -> Result<(), tokio_postgres::Error> {
    for level in &plan.levels {
        let keyed: bool = source
            .query_one(
                "SELECT c.relreplident <> 'n' AND (c.relreplident <> 'd' OR EXISTS (
                        SELECT 1 FROM pg_catalog.pg_index i
                         WHERE i.indrelid = c.oid AND i.indisprimary))
                   FROM pg_catalog.pg_class c WHERE c.oid = $1::text::regclass",
                &[&level.part],
            )
            .await?
            .get(0);
        if !keyed {
            source
                .batch_execute(&format!("ALTER TABLE {} REPLICA IDENTITY FULL", level.part))
                .await?;
        }
    }
    Ok(())
}

async fn count_rows(client: &Client, plan: &Plan) -> Result<i64, tokio_postgres::Error> {
    let counts: Vec<String> = plan
        .levels
        .iter()
        .map(|l| format!("(SELECT count(*) FROM {})", l.part))
        .collect();
    Ok(client
        .query_one(&format!("SELECT {}", counts.join(" + ")), &[])
        .await?
        .get(0))
}

/// Rows and bytes of the chunk's tables on `client`'s shard.
async fn size_of(client: &Client, plan: &Plan) -> Result<(i64, i64), tokio_postgres::Error> {
    let rows = count_rows(client, plan).await?;
    let sizes: Vec<String> = plan
        .levels
        .iter()
        .map(|l| {
            format!(
                "pg_catalog.pg_total_relation_size({}::regclass)",
                quote_literal(&l.part)
            )
        })
        .collect();
    let bytes: i64 = client
        .query_one(&format!("SELECT ({})::bigint", sizes.join(" + ")), &[])
        .await?
        .get(0);
    Ok((rows, bytes))
}

async fn check_wal_level(source: &Client, shard: &str) -> Result<(), GrowthError> {
    let level: String = source
        .query_one("SELECT pg_catalog.current_setting('wal_level')", &[])
        .await
        .map_err(on(shard))?
        .get(0);
    if level == "logical" {
        Ok(())
    } else {
        Err(GrowthError::WalLevel {
            shard: shard.to_string(),
            level,
        })
    }
}
