//! The catalog's record of chunk moves (`chunk_move`): each move is written before each of its
//! steps, and the chunk map changes in the same transaction that records the cutover, so the
//! record and the map never disagree about who owns a chunk.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Row};

use super::splits::lock_chunk;
use super::store::bump_version;
use super::CatalogError;
use crate::model::{Chunk, ChunkId, MoveId, MoveState, TableId};

/// The proxy running a move: its lease's incarnation (cluster, proxy, epoch), as the catalog
/// keeps it. The catalog does not interpret it; the growth layer compares it with leases.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveOwner {
    pub cluster: String,
    pub proxy: String,
    pub epoch: i64,
}

/// One move as recorded. Shards are by name, as the catalog keeps them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MoveRecord {
    pub id: MoveId,
    pub table: TableId,
    pub chunk: ChunkId,
    pub source: String,
    pub target: String,
    pub state: MoveState,
    pub rows: i64,
    pub bytes: i64,
    pub pause_ms: Option<i64>,
    pub error: Option<String>,
    /// ISO 8601 text in UTC.
    pub started: String,
    pub finished: Option<String>,
    pub owner: MoveOwner,
    pub cancel_requested: bool,
    /// The source's tables are kept (detached) until this time, ISO 8601 in UTC; the move is
    /// CLEANING_UP until they are dropped.
    pub keep_until: Option<String>,
    /// Whether `keep_until` has passed, by the catalog's clock.
    pub keep_due: bool,
}

impl MoveState {
    /// Whether the move has ended one way or another.
    pub fn is_finished(self) -> bool {
        match self {
            MoveState::Done | MoveState::Failed | MoveState::RolledBack | MoveState::Canceled => {
                true
            }
            MoveState::Planned
            | MoveState::Copying
            | MoveState::CatchingUp
            | MoveState::CuttingOver
            | MoveState::CleaningUp => false,
        }
    }
}

/// Records a move of `chunk` of family `table` in state PLANNED, run by `owner`; refused
/// while another move of that chunk or a split of the family is unfinished, or when the chunk
/// is no longer as the plan found it.
pub(super) async fn plan(
    client: &mut Client,
    table: TableId,
    chunk: Chunk,
    (source, target): (&str, &str),
    owner: &MoveOwner,
) -> Result<MoveId, CatalogError> {
    let tx = client.transaction().await?;
    lock_chunk(&tx, table, chunk, source).await?;
    let splitting = tx
        .query_opt(
            "SELECT 1 FROM shardwire_catalog.chunk_split
              WHERE table_id = $1 AND state IN ('preparing', 'recorded')",
            &[&table.0],
        )
        .await?;
    if splitting.is_some() {
        return Err(CatalogError::ChunkBusy {
            table,
            chunk: chunk.id,
            why: "a chunk of the family is being split: move it when the split is done",
        });
    }
    let chunk_no = chunk.id.0 as i32;
    let row = tx
        .query_one(
            "INSERT INTO shardwire_catalog.chunk_move (table_id, chunk_no, source, target, state,
                 owner_cluster, owner_proxy, owner_epoch)
             VALUES ($1, $2, $3, $4, 'planned', $5, $6, $7) RETURNING id",
            &[
                &table.0,
                &chunk_no,
                &source,
                &target,
                &owner.cluster,
                &owner.proxy,
                &owner.epoch,
            ],
        )
        .await
        .map_err(|e| match e.code() {
            Some(&SqlState::UNIQUE_VIOLATION) => CatalogError::MoveInProgress {
                table,
                chunk: chunk.id,
            },
            _ => CatalogError::Query(e),
        })?;
    tx.commit().await?;
    Ok(MoveId(row.get(0)))
}

/// Records that the move is about to take the step `state` names (or has ended so, with
/// `error` saying why when it failed).
pub(super) async fn set_state(
    client: &Client,
    id: MoveId,
    state: MoveState,
    error: Option<&str>,
) -> Result<(), CatalogError> {
    client
        .execute(
            "UPDATE shardwire_catalog.chunk_move
                SET state = $2, error = coalesce($3, error),
                    finished = CASE WHEN $4 THEN now() END, holding = NULL, hold_until = NULL
              WHERE id = $1",
            &[&id.0, &state.as_str(), &error, &state.is_finished()],
        )
        .await?;
    Ok(())
}

/// Records how much the move has copied.
pub(super) async fn set_progress(
    client: &Client,
    id: MoveId,
    rows: i64,
    bytes: i64,
) -> Result<(), CatalogError> {
    client
        .execute(
            "UPDATE shardwire_catalog.chunk_move SET rows = $2, bytes = $3 WHERE id = $1",
            &[&id.0, &rows, &bytes],
        )
        .await?;
    Ok(())
}

/// The cutover's catalog step, in one transaction: the chunk map gives the chunk to the
/// target (a new catalog version, which every proxy loads) and the move is CLEANING_UP, with
/// the pause statements on the chunk saw.
pub(super) async fn hand_over(
    client: &mut Client,
    id: MoveId,
    pause_ms: i64,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    let changed = tx
        .execute(
            "UPDATE shardwire_catalog.chunk c SET shard = m.target
               FROM shardwire_catalog.chunk_move m
              WHERE m.id = $1 AND m.state = 'cutting_over'
                AND c.table_id = m.table_id AND c.partition_set_id IS NULL
                AND c.chunk_no = m.chunk_no AND c.shard = m.source",
            &[&id.0],
        )
        .await?;
    if changed != 1 {
        return Err(CatalogError::Corrupt(format!(
            "move {id}: the chunk is no longer on the move's source shard"
        )));
    }
    // Only while the cutover's hold stands: a proxy that waited past it goes on as it was. The
    // hold itself stays until both halves are committed.
    let held = tx
        .execute(
            "UPDATE shardwire_catalog.chunk_move SET state = 'cleaning_up', pause_ms = $2
              WHERE id = $1 AND holding IS NOT NULL AND hold_until > clock_timestamp()",
            &[&id.0, &pause_ms],
        )
        .await?;
    if held != 1 {
        return Err(CatalogError::HoldLapsed(id));
    }
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Records that the source's tables of CLEANING_UP move `id` are kept for `keep`.
pub(super) async fn keep_source(
    client: &Client,
    id: MoveId,
    keep: std::time::Duration,
) -> Result<(), CatalogError> {
    client
        .execute(
            "UPDATE shardwire_catalog.chunk_move
                SET keep_until = now() + make_interval(secs => $2), holding = NULL,
                    hold_until = NULL
              WHERE id = $1 AND state = 'cleaning_up'",
            &[&id.0, &keep.as_secs_f64()],
        )
        .await?;
    Ok(())
}

fn record(row: &Row) -> Result<MoveRecord, CatalogError> {
    let state: String = row.get("state");
    let chunk: i32 = row.get("chunk_no");
    Ok(MoveRecord {
        id: MoveId(row.get("id")),
        table: TableId(row.get("table_id")),
        chunk: ChunkId(chunk as u32),
        source: row.get("source"),
        target: row.get("target"),
        state: MoveState::from_code(&state)
            .ok_or_else(|| CatalogError::Corrupt(format!("unknown move state {state:?}")))?,
        rows: row.get("rows"),
        bytes: row.get("bytes"),
        pause_ms: row.get("pause_ms"),
        error: row.get("error"),
        started: row.get("started"),
        finished: row.get("finished"),
        owner: MoveOwner {
            cluster: row.get("owner_cluster"),
            proxy: row.get("owner_proxy"),
            epoch: row.get("owner_epoch"),
        },
        cancel_requested: row.get("cancel_requested"),
        keep_until: row.get("keep_until"),
        keep_due: row.get("keep_due"),
    })
}

/// Makes `to` the owner of an unfinished move that `from` owned in `state`; `false` when
/// another proxy took it first or it moved on.
pub(super) async fn claim(
    client: &Client,
    id: MoveId,
    state: MoveState,
    from: &MoveOwner,
    to: &MoveOwner,
) -> Result<bool, CatalogError> {
    let claimed = client
        .execute(
            "UPDATE shardwire_catalog.chunk_move
                SET owner_cluster = $5, owner_proxy = $6, owner_epoch = $7
              WHERE id = $1 AND state = $2
                AND owner_cluster = $3 AND owner_proxy = $4 AND owner_epoch = $8",
            &[
                &id.0,
                &state.as_str(),
                &from.cluster,
                &from.proxy,
                &to.cluster,
                &to.proxy,
                &to.epoch,
                &from.epoch,
            ],
        )
        .await?;
    Ok(claimed == 1)
}

/// CANCEL MOVE: asks the move to stop before its cutover. `Ok(None)`: no such move;
/// `Ok(Some(state))`: the move's state, which says whether the request can still be heeded.
pub(super) async fn request_cancel(
    client: &Client,
    id: MoveId,
) -> Result<Option<MoveState>, CatalogError> {
    let row = client
        .query_opt(
            "UPDATE shardwire_catalog.chunk_move SET cancel_requested = true
              WHERE id = $1 AND state IN ('planned', 'copying', 'catching_up', 'cutting_over')
              RETURNING state",
            &[&id.0],
        )
        .await?;
    if let Some(row) = row {
        let state: String = row.get(0);
        return Ok(MoveState::from_code(&state));
    }
    Ok(get(client, id).await?.map(|m| m.state))
}

const COLUMNS: &str = "id, table_id, chunk_no, source, target, state, rows, bytes, pause_ms, \
     error, owner_cluster, owner_proxy, owner_epoch, cancel_requested, to_char(started AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS started, \
     to_char(finished AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS finished, \
     to_char(keep_until AT TIME ZONE 'UTC', 'YYYY-MM-DD\"T\"HH24:MI:SS.MS\"Z\"') AS keep_until, \
     coalesce(keep_until <= now(), false) AS keep_due";

/// Every recorded move, oldest first.
pub(super) async fn list(client: &Client) -> Result<Vec<MoveRecord>, CatalogError> {
    client
        .query(
            &format!("SELECT {COLUMNS} FROM shardwire_catalog.chunk_move ORDER BY id"),
            &[],
        )
        .await?
        .iter()
        .map(record)
        .collect()
}

/// One move, if recorded.
pub(super) async fn get(client: &Client, id: MoveId) -> Result<Option<MoveRecord>, CatalogError> {
    client
        .query_opt(
            &format!("SELECT {COLUMNS} FROM shardwire_catalog.chunk_move WHERE id = $1"),
            &[&id.0],
        )
        .await?
        .as_ref()
        .map(record)
        .transpose()
}
