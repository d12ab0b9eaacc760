//! SPLIT CHUNK: chunk k of modulus m becomes chunks k and k + m of modulus 2m, on the same
//! shard, so the family can later spread over more shards than m allows.
//!
//! PostgreSQL cannot change a partition's bounds, so on the chunk's shard, in one transaction
//! holding the family's tables: each level's partition is detached and set aside, the two
//! halves are made as partitions, the rows go back in through the parent (PostgreSQL places
//! each in its half), and the old partition is dropped. Rows are re-placed, not written anew:
//! `session_replication_role = replica` keeps user triggers and foreign-key checks out of it.
//! Writes to the family on that shard wait for the transaction, which takes as long as copying
//! the chunk; other shards do not notice.
//!
//! The shard's transaction is prepared (two-phase) before the catalog gives the chunk map the
//! halves and committed after; the catalog's split record says which way a split whose proxy
//! died is settled (`settle_orphans`). Routing does not change: both halves stay on the shard.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::plan::{check_movable, levels, Level};
use super::settle::{connect, cut_ties, end_prepared, on};
use super::{Growth, GrowthError};
use crate::catalog::{MoveOwner, SplitRecord, SplitState};
use crate::failpoint::fail_point;
use crate::model::{Chunk, ChunkId};
use crate::sql::quote::{quote_ident, quote_literal};

/// `SPLIT CHUNK n FOR schema.table`.
pub struct SplitRequest {
    pub schema: String,
    pub table: String,
    pub chunk: u32,
}

/// The chunk that was split and its two halves.
#[derive(Debug, Clone, Copy)]
pub struct Split {
    pub halves: [Chunk; 2],
}

/// Splits a chunk, returning when the halves are in place; on failure nothing is left changed.
pub async fn split_chunk(g: &Growth, req: &SplitRequest) -> Result<Split, GrowthError> {
    let snapshot = g.catalog.snapshot();
    let shown = format!("{}.{}", req.schema, req.table);
    let table = snapshot
        .table_by_name(&req.schema, &req.table)
        .ok_or_else(|| GrowthError::NoSuchTable(shown.clone()))?;
    check_movable(table, &shown)?;
    let chunk = table
        .chunks
        .chunk(ChunkId(req.chunk))
        .ok_or(GrowthError::NoSuchChunk {
            table: shown.clone(),
            chunk: req.chunk,
        })?;
    let halved = chunk
        .modulus
        .checked_mul(2)
        .filter(|m| *m <= i32::MAX as u32)
        .ok_or(GrowthError::NotMovable(format!(
            "chunk {} of {shown} has modulus {}, which cannot be doubled",
            req.chunk, chunk.modulus
        )))?;
    let halves = [chunk.id.0, chunk.id.0 + chunk.modulus].map(|id| Chunk {
        id: ChunkId(id),
        modulus: halved,
        shard: chunk.shard,
    });
    let shard_name = snapshot
        .shard(chunk.shard)
        .map(|s| s.name.clone())
        .unwrap_or_default();
    let job = Job {
        old: levels(&snapshot, table.id, chunk.id.0),
        new_half: levels(&snapshot, table.id, halves[1].id.0),
        halves,
        shard: shard_name,
    };
    let root = table.id;
    drop(snapshot);
    let id = g.catalog.begin_split(root, chunk, &g.owner()).await?;
    tracing::info!(split_id = id, table = %shown, chunk = chunk.id.0, modulus = chunk.modulus,
        shard = %job.shard, "chunk split started");
    let conn = connect(g, chunk.shard, &job.shard).await?;
    let gid = prepared_name(g.me.cluster.as_str(), id);
    let prepared = prepare(&conn, g, &job, id, &gid).await;
    if let Err(e) = prepared {
        let _ = conn.batch_execute("ROLLBACK").await;
        g.catalog
            .finish_split(id, SplitState::Preparing, SplitState::RolledBack, None)
            .await?;
        return Err(e);
    }
    fail_point!(
        g.failpoints,
        crate::failpoint::FailPoint::ChunkSplitBeforeRecord
    );
    if let Err(e) = g.catalog.record_split(id).await {
        // A lost connection leaves it unknown whether the record committed: the record says.
        let state = g
            .catalog
            .unfinished_splits()
            .await?
            .into_iter()
            .find(|s| s.id == id)
            .map(|s| s.state);
        if state != Some(SplitState::Recorded) {
            settle_own(g, &conn, &job, id, SplitState::Preparing).await?;
            return Err(e.into());
        }
    }
    settle_own(g, &conn, &job, id, SplitState::Recorded).await?;
    tracing::info!(split_id = id, table = %shown, chunk = chunk.id.0, "chunk split done");
    Ok(Split { halves })
}

/// What the shard's transaction rewrites: each level's partition of the chunk (`old`, whose
/// name the lower half keeps) and the upper half's partition name.
struct Job {
    old: Vec<Level>,
    new_half: Vec<Level>,
    halves: [Chunk; 2],
    shard: String,
}

/// The shard's part, prepared under `gid`: the family locked (within the cutover pause, tried
/// as often as a cutover is), each level's rows re-placed in the halves.
async fn prepare(
    conn: &Client,
    g: &Growth,
    job: &Job,
    id: i64,
    gid: &str,
) -> Result<(), GrowthError> {
    let on_shard = on(&job.shard);
    let pause = std::time::Duration::from_millis(g.config.moves.cutover_pause_ms.max(1));
    let parents: Vec<&str> = job.old.iter().map(|l| l.parent.as_str()).collect();
    let mut attempt = 0;
    loop {
        let locked = conn
            .batch_execute(&format!(
                "BEGIN; SET LOCAL lock_timeout = {}; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
                pause.as_millis(),
                parents.join(", ")
            ))
            .await;
        match locked {
            Ok(()) => break,
            Err(e) if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE) => {
                let _ = conn.batch_execute("ROLLBACK").await;
                attempt += 1;
                if attempt >= g.config.moves.cutover_attempts.max(1) {
                    return Err(GrowthError::CutoverGaveUp {
                        chunk: job.halves[0].id.0,
                        pause,
                        attempts: attempt,
                    });
                }
                tokio::time::sleep(pause / 2).await;
            }
            Err(e) => return Err(on_shard(e)),
        }
    }
    conn.batch_execute("SET LOCAL session_replication_role = replica; SET LOCAL lock_timeout = 0")
        .await
        .map_err(&on_shard)?;
    let set_aside: Vec<String> = (0..job.old.len())
        .map(|i| quote_ident(&format!("shardwire_split_{id}_{i}")))
        .collect();
    // Children first, each cut from the family once set aside: a parent's partition is
    // detached only when no table references its rows.
    for (level, aside) in job.old.iter().zip(&set_aside).rev() {
        conn.batch_execute(&format!(
            "ALTER TABLE {parent} DETACH PARTITION {part}; ALTER TABLE {part} RENAME TO {aside}",
            parent = level.parent,
            part = level.part,
        ))
        .await
        .map_err(&on_shard)?;
        cut_ties(conn, &format!("{}.{aside}", level.schema))
            .await
            .map_err(&on_shard)?;
    }
    for ((level, upper), aside) in job.old.iter().zip(&job.new_half).zip(&set_aside) {
        let old = format!("{}.{aside}", level.schema);
        let comment = own_comment(conn, &old).await.map_err(&on_shard)?;
        let mut sql = String::new();
        for (part, half) in [(&level.part, job.halves[0]), (&upper.part, job.halves[1])] {
            sql.push_str(&format!(
                "CREATE TABLE {part} PARTITION OF {} {};",
                level.parent,
                half.bound()
            ));
            if let Some(comment) = &comment {
                sql.push_str(&format!(
                    "COMMENT ON TABLE {part} IS {};",
                    quote_literal(comment)
                ));
            }
        }
        conn.batch_execute(&sql).await.map_err(&on_shard)?;
        let columns: String = conn
            .query_one(
                "SELECT coalesce(string_agg(pg_catalog.quote_ident(attname), ', ' ORDER BY attnum), '')
                   FROM pg_catalog.pg_attribute
                  WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped
                    AND attgenerated = ''",
                &[&level.parent],
            )
            .await
            .map_err(&on_shard)?
            .get(0);
        let moved = conn
            .execute(
                &format!(
                    "INSERT INTO {} ({columns}) OVERRIDING SYSTEM VALUE SELECT {columns} FROM {old}",
                    level.parent
                ),
                &[],
            )
            .await
            .map_err(&on_shard)?;
        let had: i64 = conn
            .query_one(&format!("SELECT count(*) FROM {old}"), &[])
            .await
            .map_err(&on_shard)?
            .get(0);
        if moved != had as u64 {
            return Err(GrowthError::NotMovable(format!(
                "the split of chunk {} re-placed {moved} of {had} rows of {}; nothing was changed",
                job.halves[0].id.0, level.parent
            )));
        }
    }
    for (level, aside) in job.old.iter().zip(&set_aside).rev() {
        conn.batch_execute(&format!("DROP TABLE {}.{aside}", level.schema))
            .await
            .map_err(&on_shard)?;
    }
    conn.batch_execute(&format!("PREPARE TRANSACTION {}", quote_literal(gid)))
        .await
        .map_err(&on_shard)
}

/// A table's own comment (not its columns').
async fn own_comment(conn: &Client, table: &str) -> Result<Option<String>, tokio_postgres::Error> {
    Ok(conn
        .query_one(
            "SELECT pg_catalog.obj_description($1::text::regclass, 'pg_class')",
            &[&table],
        )
        .await?
        .get(0))
}

/// The name a split's shard transaction is prepared under: never a distributed
/// transaction's, so their recovery leaves it alone.
fn prepared_name(cluster: &str, id: i64) -> String {
    format!("shardwire_split_{cluster}_{id}")
}

/// Ends this proxy's split `id`, which the record has in `state`: RECORDED is committed on
/// the shard, PREPARING rolled back.
async fn settle_own(
    g: &Growth,
    conn: &Client,
    job: &Job,
    id: i64,
    state: SplitState,
) -> Result<(), GrowthError> {
    let recorded = state == SplitState::Recorded;
    let gid = prepared_name(g.me.cluster.as_str(), id);
    end_prepared(conn, &gid, recorded)
        .await
        .map_err(on(&job.shard))?;
    let ended = if recorded {
        SplitState::Done
    } else {
        SplitState::RolledBack
    };
    g.catalog.finish_split(id, state, ended, None).await?;
    Ok(())
}

/// Settles the splits whose proxy holds no live lease (`live` are the others that do): the
/// record decides, as for moves.
pub(super) async fn settle_orphans(g: &Growth, live: &[MoveOwner]) -> Result<usize, GrowthError> {
    let me = g.owner();
    let mut settled = 0;
    for split in g.catalog.unfinished_splits().await? {
        if split.owner == me || live.contains(&split.owner) {
            continue;
        }
        settled += usize::from(settle_orphan(g, &split).await?);
    }
    Ok(settled)
}

async fn settle_orphan(g: &Growth, split: &SplitRecord) -> Result<bool, GrowthError> {
    let recorded = match split.state {
        SplitState::Recorded => true,
        SplitState::Preparing => false,
        SplitState::Done | SplitState::RolledBack => return Ok(false),
    };
    // Rolled back in the record first, so a proxy that only seemed gone cannot record it
    // after its transaction is gone.
    if !recorded
        && !g
            .catalog
            .finish_split(
                split.id,
                SplitState::Preparing,
                SplitState::RolledBack,
                Some(&split.owner),
            )
            .await?
    {
        return Ok(false);
    }
    tracing::info!(
        split_id = split.id,
        state = split.state.as_str(),
        "settling a chunk split whose proxy stopped"
    );
    let shard = g
        .catalog
        .snapshot()
        .shard_by_name(&split.shard)
        .ok_or_else(|| GrowthError::NoSuchShard(split.shard.clone()))?
        .id;
    let conn = connect(g, shard, &split.shard).await?;
    let gid = prepared_name(&split.owner.cluster, split.id);
    end_prepared(&conn, &gid, recorded)
        .await
        .map_err(on(&split.shard))?;
    if recorded {
        g.catalog
            .finish_split(split.id, SplitState::Recorded, SplitState::Done, None)
            .await?;
    }
    Ok(true)
}
