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

use super::replication::{self, Names, Synced};
use super::{Growth, GrowthError};
use crate::catalog::{Snapshot, Table};
use crate::ddl::naming::{chunk_suffix, partition_relation};
use crate::model::{ChunkId, MoveId, MoveState, ShardId, ShardingMethod, TableId};
use crate::sql::quote::quote_ident;
use crate::txn::control::ControlConn;

/// The name of the CHECK that stands for the partition bound on the target until it attaches.
const BOUND_CHECK: &str = "shardwire_move_bound";
/// Waits between cutover attempts.
const BACKOFF: Duration = Duration::from_millis(500);
/// How often the source is asked whether the target confirmed its last change.
const CATCH_UP_POLL: Duration = Duration::from_millis(5);

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

/// One table of the family: its partition for the chunk.
struct Level {
    /// The partitioned table, quoted and qualified.
    parent: String,
    /// Its partition for the chunk, quoted and qualified.
    part: String,
}

/// A checked request: what moves from where to where.
struct Plan {
    root: TableId,
    display: String,
    chunk: ChunkId,
    modulus: u32,
    source: ShardId,
    target: ShardId,
    source_name: String,
    target_name: String,
    /// Root first, every parent before its children.
    levels: Vec<Level>,
}

impl Plan {
    fn new(snapshot: &Snapshot, req: &MoveRequest) -> Result<Plan, GrowthError> {
        let display = format!("{}.{}", req.schema, req.table);
        let table = snapshot
            .table_by_name(&req.schema, &req.table)
            .ok_or_else(|| GrowthError::NoSuchTable(display.clone()))?;
        check_movable(table, &display)?;
        let modulus = table.chunks.len() as u32;
        let chunk = ChunkId(req.chunk);
        let source = *table
            .chunks
            .get(req.chunk as usize)
            .ok_or(GrowthError::NoSuchChunk {
                table: display.clone(),
                chunk: req.chunk,
                last: modulus.saturating_sub(1),
            })?;
        let target = snapshot
            .shard_by_name(&req.target)
            .ok_or_else(|| GrowthError::NoSuchShard(req.target.clone()))?
            .id;
        if target == source {
            return Err(GrowthError::AlreadyThere {
                table: display,
                chunk: req.chunk,
                shard: req.target.clone(),
            });
        }
        if let Some(set) = table
            .tablespace_set
            .and_then(|id| snapshot.tablespace_set(id))
        {
            if !set.shards.contains(&target) {
                return Err(GrowthError::NotInSet {
                    table: display,
                    shard: req.target.clone(),
                    set: set.name.clone(),
                });
            }
        }
        let levels = snapshot
            .family(table.id)
            .into_iter()
            .map(|t| Level {
                parent: qualified(&t.schema, &t.name),
                part: qualified(
                    &t.schema,
                    &partition_relation(&t.name, &chunk_suffix(req.chunk)),
                ),
            })
            .collect();
        let name = |id: ShardId| {
            snapshot
                .shard(id)
                .map(|s| s.name.clone())
                .unwrap_or_default()
        };
        Ok(Plan {
            root: table.id,
            display,
            chunk,
            modulus,
            source,
            target,
            source_name: name(source),
            target_name: name(target),
            levels,
        })
    }

    fn parts(&self) -> Vec<String> {
        self.levels.iter().map(|l| l.part.clone()).collect()
    }

    fn bound(&self) -> String {
        format!(
            "FOR VALUES WITH (MODULUS {}, REMAINDER {})",
            self.modulus, self.chunk.0
        )
    }
}

fn check_movable(table: &Table, display: &str) -> Result<(), GrowthError> {
    if !table.is_root() {
        return Err(GrowthError::NotMovable(format!(
            "{display} is a child in a family: move the chunk of its root table, which moves \
             the whole family's chunk"
        )));
    }
    if table.method != Some(ShardingMethod::ConsistentHash) || table.chunks.is_empty() {
        return Err(GrowthError::NotMovable(format!(
            "{display} is not sharded by consistent hash: only the chunks of such a family move \
             (list, range and composite partitions, duplicated and unsharded tables do not)"
        )));
    }
    Ok(())
}

fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// Moves a chunk, returning when it is done; on failure nothing is left changed.
pub async fn move_chunk(g: &Growth, req: &MoveRequest) -> Result<Moved, GrowthError> {
    let plan = Plan::new(&g.catalog.snapshot(), req)?;
    let source = connect(g, plan.source, &plan.source_name).await?;
    check_wal_level(&source, &plan.source_name).await?;
    drop(source);
    let id = g
        .catalog
        .plan_move(plan.root, plan.chunk, plan.source, plan.target)
        .await?;
    tracing::info!(move_id = %id, table = %plan.display, chunk = plan.chunk.0,
        source = %plan.source_name, target = %plan.target_name, "chunk move planned");
    match run(g, &plan, id).await {
        Ok(moved) => Ok(moved),
        Err(e) => {
            let ended = match g.catalog.move_record(id).await {
                // The target owns the chunk: what is left is clean-up, never an undo.
                Ok(Some(r)) if r.state == MoveState::CleaningUp => finish_handed_over(g, &plan, id)
                    .await
                    .map(|()| MoveState::Done),
                Ok(_) => undo(g, &plan, id).await.map(|()| MoveState::Failed),
                Err(unread) => {
                    // Who owns the chunk is unknown: nothing is undone on a guess.
                    tracing::warn!(move_id = %id, error = %unread, "chunk move failed; its record could not be read");
                    return Err(e);
                }
            };
            let state = ended.unwrap_or_else(|undo_error| {
                tracing::warn!(move_id = %id, error = %undo_error, "chunk move: clean-up failed");
                MoveState::Failed
            });
            let text = e.to_string();
            if let Err(record) = g.catalog.set_move_state(id, state, Some(&text)).await {
                tracing::warn!(move_id = %id, error = %record, "chunk move: state not recorded");
            }
            tracing::warn!(move_id = %id, error = %text, "chunk move failed");
            Err(e)
        }
    }
}

async fn run(g: &Growth, plan: &Plan, id: MoveId) -> Result<Moved, GrowthError> {
    let names = Names::of(id);
    g.catalog
        .set_move_state(id, MoveState::Copying, None)
        .await?;
    {
        let source = connect(g, plan.source, &plan.source_name).await?;
        let target = connect(g, plan.target, &plan.target_name).await?;
        make_target_tables(&target, plan)
            .await
            .map_err(on(&plan.target_name))?;
        give_replica_identity(&source, plan)
            .await
            .map_err(on(&plan.source_name))?;
        replication::publish(&source, &names, &plan.parts())
            .await
            .map_err(on(&plan.source_name))?;
        let conninfo = g.config.shard_endpoint(plan.source.index()).conninfo();
        replication::subscribe(&target, &names, &conninfo)
            .await
            .map_err(on(&plan.target_name))?;
        g.catalog
            .set_move_state(id, MoveState::CatchingUp, None)
            .await?;
        let synced = replication::wait_synced(&target, &names, plan.levels.len())
            .await
            .map_err(on(&plan.target_name))?;
        if let Synced::Failed = synced {
            return Err(GrowthError::CopyFailed {
                chunk: plan.chunk.0,
                shard: plan.target_name.clone(),
            });
        }
        let (rows, bytes) = size_of(&target, plan)
            .await
            .map_err(on(&plan.target_name))?;
        g.catalog.set_move_progress(id, rows, bytes).await?;
        tracing::info!(move_id = %id, rows, bytes, "chunk move: copied, catching up");
    }
    g.catalog
        .set_move_state(id, MoveState::CuttingOver, None)
        .await?;
    let pause = Duration::from_millis(g.config.moves.cutover_pause_ms);
    let attempts = g.config.moves.cutover_attempts.max(1);
    let mut held = None;
    for attempt in 1..=attempts {
        match cut_over(g, plan, id, &names, pause).await? {
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
    clean_up(g, plan, id).await?;
    let target = connect(g, plan.target, &plan.target_name).await?;
    let (_, bytes) = size_of(&target, plan)
        .await
        .map_err(on(&plan.target_name))?;
    g.catalog.set_move_progress(id, rows, bytes).await?;
    g.catalog.set_move_state(id, MoveState::Done, None).await?;
    tracing::info!(move_id = %id, rows, pause_ms = pause.as_millis() as u64, "chunk move done");
    Ok(Moved {
        id,
        rows,
        bytes,
        pause,
    })
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
    id: MoveId,
    names: &Names,
    pause: Duration,
) -> Result<Option<Cutover>, GrowthError> {
    let source = connect(g, plan.source, &plan.source_name).await?;
    let target = connect(g, plan.target, &plan.target_name).await?;
    let hold = g.fence.close();
    let started = Instant::now();
    source
        .batch_execute("BEGIN")
        .await
        .map_err(on(&plan.source_name))?;
    let sides = Sides {
        source: &source,
        target: &target,
    };
    let outcome = cut_over_in(g, plan, id, names, sides, started, pause).await;
    if !matches!(outcome, Ok(Some(_))) {
        // The connection goes back to its pool: never with the lock or the transaction.
        let _ = source.batch_execute("ROLLBACK").await;
    }
    drop(hold);
    outcome
}

struct Sides<'c> {
    source: &'c Client,
    target: &'c Client,
}

/// The cutover inside the source's transaction, which the caller ends unless this commits it.
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
    // Every write to the chunk is in the source's WAL now: wait for the target to confirm it.
    let lsn: String = source
        .query_one("SELECT pg_catalog.pg_current_wal_lsn()::text", &[])
        .await
        .map_err(&on_source)?
        .get(0);
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
    replication::set_enabled(target, names, false)
        .await
        .map_err(&on_target)?;
    if !attach_on_target(target, plan, left())
        .await
        .map_err(&on_target)?
    {
        replication::set_enabled(target, names, true)
            .await
            .map_err(&on_target)?;
        return Ok(None);
    }
    let pause_ms = started.elapsed().as_millis() as i64;
    // Should the catalog commit and its answer be lost, the caller reads the record before it
    // undoes anything.
    g.catalog.hand_over_chunk(id, pause_ms).await?;
    remove_chunk_tables(source, plan)
        .await
        .map_err(&on_source)?;
    source.batch_execute("COMMIT").await.map_err(&on_source)?;
    Ok(Some(Cutover {
        pause: started.elapsed(),
        rows: target_rows,
    }))
}

/// Detaches (where still attached) and drops the chunk's partitions, children first, in the
/// caller's transaction, which holds the family's lock. Run again, it finds nothing to do.
async fn remove_chunk_tables(client: &Client, plan: &Plan) -> Result<(), tokio_postgres::Error> {
    for level in plan.levels.iter().rev() {
        let attached: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits
                                 WHERE inhrelid = pg_catalog.to_regclass($1))",
                &[&level.part],
            )
            .await?
            .get(0);
        let detach = if attached {
            format!(
                "ALTER TABLE {} DETACH PARTITION {};",
                level.parent, level.part
            )
        } else {
            String::new()
        };
        client
            .batch_execute(&format!("{detach} DROP TABLE IF EXISTS {}", level.part))
            .await?;
    }
    Ok(())
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

/// Attaches the chunk's tables on the target, root first, within `wait`; `false` when a lock
/// did not come in time (nothing attached).
async fn attach_on_target(
    target: &Client,
    plan: &Plan,
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
    sql.push_str(" COMMIT");
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
        let columns = key
            .strip_prefix("HASH (")
            .and_then(|k| k.strip_suffix(')'))
            .unwrap_or(&key);
        target
            .batch_execute(&format!(
                "CREATE TABLE {part} (LIKE {parent} INCLUDING DEFAULTS INCLUDING CONSTRAINTS \
                 INCLUDING INDEXES INCLUDING STORAGE INCLUDING COMMENTS INCLUDING GENERATED \
                 INCLUDING STATISTICS);
                 ALTER TABLE {part} ADD CONSTRAINT {check} CHECK (pg_catalog.satisfies_hash_partition(\
                 {parent_literal}::regclass::oid, {m}, {k}, {columns}))",
                part = level.part,
                parent = level.parent,
                parent_literal = crate::sql::quote::quote_literal(&level.parent),
                check = quote_ident(BOUND_CHECK),
                m = plan.modulus,
                k = plan.chunk.0,
            ))
            .await?;
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
                crate::sql::quote::quote_literal(&l.part)
            )
        })
        .collect();
    let bytes: i64 = client
        .query_one(&format!("SELECT ({})::bigint", sizes.join(" + ")), &[])
        .await?
        .get(0);
    Ok((rows, bytes))
}

/// Drops what the move made for the copy: the subscription (with its slot) and the
/// publication.
async fn clean_up(g: &Growth, plan: &Plan, id: MoveId) -> Result<(), GrowthError> {
    let names = Names::of(id);
    let target = connect(g, plan.target, &plan.target_name).await?;
    replication::unsubscribe(&target, &names)
        .await
        .map_err(on(&plan.target_name))?;
    let source = connect(g, plan.source, &plan.source_name).await?;
    replication::unpublish(&source, &names)
        .await
        .map_err(on(&plan.source_name))?;
    Ok(())
}

/// After the catalog gave the chunk to the target: the source's copy removed (if the cutover's
/// own removal did not commit), then the clean-up.
async fn finish_handed_over(g: &Growth, plan: &Plan, id: MoveId) -> Result<(), GrowthError> {
    let source = connect(g, plan.source, &plan.source_name).await?;
    let parents: Vec<&str> = plan.levels.iter().map(|l| l.parent.as_str()).collect();
    let removed = async {
        source
            .batch_execute(&format!(
                "BEGIN; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
                parents.join(", ")
            ))
            .await?;
        remove_chunk_tables(&source, plan).await?;
        source.batch_execute("COMMIT").await
    }
    .await;
    if removed.is_err() {
        let _ = source.batch_execute("ROLLBACK").await;
    }
    removed.map_err(on(&plan.source_name))?;
    clean_up(g, plan, id).await
}

/// Removes everything a move made before its cutover: the target's tables (detached first if
/// an attach went through), the subscription, the publication.
async fn undo(g: &Growth, plan: &Plan, id: MoveId) -> Result<(), GrowthError> {
    clean_up(g, plan, id).await?;
    let target = connect(g, plan.target, &plan.target_name).await?;
    let removed = async {
        target.batch_execute("BEGIN").await?;
        remove_chunk_tables(&target, plan).await?;
        target.batch_execute("COMMIT").await
    }
    .await;
    if removed.is_err() {
        let _ = target.batch_execute("ROLLBACK").await;
    }
    removed.map_err(on(&plan.target_name))
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

async fn connect<'g>(
    g: &'g Growth,
    shard: ShardId,
    name: &str,
) -> Result<ControlConn<'g>, GrowthError> {
    g.control
        .shard(shard)
        .pool
        .get()
        .await
        .map_err(|source| GrowthError::Connect {
            shard: name.to_string(),
            source,
        })
}

fn on(shard: &str) -> impl Fn(tokio_postgres::Error) -> GrowthError + '_ {
    move |source| GrowthError::Shard {
        shard: shard.to_string(),
        source,
    }
}
