//! The catalog's record of chunk splits (`chunk_split`). A split is recorded before its shard
//! prepares the new partitions, and the chunk map gains the halves in the same transaction that
//! marks it RECORDED: whoever settles a split whose proxy died commits the shard's prepared half
//! exactly when the map has the halves.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Row, Transaction};

use super::moves::MoveOwner;
use super::store::bump_version;
use super::CatalogError;
use crate::model::{Chunk, ChunkId, TableId};

/// Where a split stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SplitState {
    /// Recorded; the shard may have prepared the halves, the map does not have them.
    Preparing,
    /// The map has the halves; the shard's prepared half is to be committed.
    Recorded,
    Done,
    RolledBack,
}

impl SplitState {
    pub fn as_str(self) -> &'static str {
        match self {
            SplitState::Preparing => "preparing",
            SplitState::Recorded => "recorded",
            SplitState::Done => "done",
            SplitState::RolledBack => "rolled_back",
        }
    }

    fn from_code(code: &str) -> Option<SplitState> {
        [
            SplitState::Preparing,
            SplitState::Recorded,
            SplitState::Done,
            SplitState::RolledBack,
        ]
        .into_iter()
        .find(|s| s.as_str() == code)
    }
}

/// One unfinished split as recorded.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SplitRecord {
    pub id: i64,
    pub table: TableId,
    /// The chunk as it was before the split.
    pub chunk: ChunkId,
    pub modulus: u32,
    pub shard: String,
    pub state: SplitState,
    pub owner: MoveOwner,
}

/// Locks the family's chunk rows (a move's plan and a split take them in turn) and checks
/// that `chunk` is still as the caller found it and that no move of the family is unfinished.
pub(super) async fn lock_chunk(
    tx: &Transaction<'_>,
    table: TableId,
    chunk: Chunk,
    shard: &str,
) -> Result<(), CatalogError> {
    let rows = tx
        .query(
            "SELECT chunk_no, shard, modulus FROM shardwire_catalog.chunk
              WHERE table_id = $1 AND partition_set_id IS NULL FOR UPDATE",
            &[&table.0],
        )
        .await?;
    let count = rows.len() as i32;
    let current = rows.iter().find_map(|r| {
        (r.get::<_, i32>(0) == chunk.id.0 as i32).then(|| {
            (
                r.get::<_, String>(1),
                r.get::<_, Option<i32>>(2).unwrap_or(count),
            )
        })
    });
    if current != Some((shard.to_owned(), chunk.modulus as i32)) {
        return Err(CatalogError::ChunkBusy {
            table,
            chunk: chunk.id,
            why: "the chunk changed (moved or split) since it was looked at: look again",
        });
    }
    Ok(())
}

/// Records a split of `chunk` (on shard `shard`) of family `table`, run by `owner`; refused
/// while a move or another split of the family is unfinished.
pub(super) async fn begin(
    client: &mut Client,
    table: TableId,
    chunk: Chunk,
    shard: &str,
    owner: &MoveOwner,
) -> Result<i64, CatalogError> {
    let tx = client.transaction().await?;
    lock_chunk(&tx, table, chunk, shard).await?;
    let moving = tx
        .query_opt(
            "SELECT 1 FROM shardwire_catalog.chunk_move
              WHERE table_id = $1 AND keep_until IS NULL
                AND state IN ('planned', 'copying', 'catching_up', 'cutting_over', 'cleaning_up')
              LIMIT 1",
            &[&table.0],
        )
        .await?;
    if moving.is_some() {
        return Err(CatalogError::ChunkBusy {
            table,
            chunk: chunk.id,
            why: "a chunk of the family is moving: split when the move is done (SHOW MOVES)",
        });
    }
    let row = tx
        .query_one(
            "INSERT INTO shardwire_catalog.chunk_split (table_id, chunk_no, modulus, shard, state,
                 owner_cluster, owner_proxy, owner_epoch)
             VALUES ($1, $2, $3, $4, 'preparing', $5, $6, $7) RETURNING id",
            &[
                &table.0,
                &(chunk.id.0 as i32),
                &(chunk.modulus as i32),
                &shard,
                &owner.cluster,
                &owner.proxy,
                &owner.epoch,
            ],
        )
        .await
        .map_err(|e| match e.code() {
            Some(&SqlState::UNIQUE_VIOLATION) => CatalogError::ChunkBusy {
                table,
                chunk: chunk.id,
                why: "another split of the family is under way",
            },
            _ => CatalogError::Query(e),
        })?;
    tx.commit().await?;
    Ok(row.get(0))
}

/// The split's catalog step, in one transaction: the chunk map has the two halves (a new
/// catalog version) and the split is RECORDED. Refused when the split is no longer PREPARING
/// (recovery rolled it back, its proxy having seemed gone).
pub(super) async fn record(client: &mut Client, id: i64) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    let Some(row) = tx
        .query_opt(
            "SELECT table_id, chunk_no, modulus, shard FROM shardwire_catalog.chunk_split
              WHERE id = $1 AND state = 'preparing' FOR UPDATE",
            &[&id],
        )
        .await?
    else {
        return Err(CatalogError::Corrupt(format!(
            "split {id} is no longer being prepared: another proxy settled it"
        )));
    };
    let (table, chunk_no, modulus, shard): (i64, i32, i32, String) =
        (row.get(0), row.get(1), row.get(2), row.get(3));
    // Rows recorded before any split carry no modulus: the chunk count was theirs.
    tx.execute(
        "UPDATE shardwire_catalog.chunk c
            SET modulus = (SELECT count(*) FROM shardwire_catalog.chunk n
                            WHERE n.table_id = c.table_id AND n.partition_set_id IS NULL)
          WHERE c.table_id = $1 AND c.partition_set_id IS NULL AND c.modulus IS NULL",
        &[&table],
    )
    .await?;
    let halved = modulus * 2;
    let changed = tx
        .execute(
            "UPDATE shardwire_catalog.chunk SET modulus = $4
              WHERE table_id = $1 AND partition_set_id IS NULL AND chunk_no = $2
                AND modulus = $3",
            &[&table, &chunk_no, &modulus, &halved],
        )
        .await?;
    if changed != 1 {
        return Err(CatalogError::Corrupt(format!(
            "split {id}: chunk {chunk_no} no longer has modulus {modulus}"
        )));
    }
    tx.execute(
        "INSERT INTO shardwire_catalog.chunk (table_id, partition_set_id, chunk_no, shard, modulus)
         VALUES ($1, NULL, $2, $3, $4)",
        &[&table, &(chunk_no + modulus), &shard, &halved],
    )
    .await?;
    tx.execute(
        "UPDATE shardwire_catalog.chunk_split SET state = 'recorded' WHERE id = $1",
        &[&id],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Ends split `id` in `state` (DONE or ROLLED_BACK) if it is still in `from`, and, where `owner`
/// is given, still run by it; whether it did.
pub(super) async fn finish(
    client: &Client,
    id: i64,
    from: SplitState,
    state: SplitState,
    owner: Option<&MoveOwner>,
) -> Result<bool, CatalogError> {
    let (cluster, proxy, epoch) = match owner {
        Some(o) => (
            Some(o.cluster.as_str()),
            Some(o.proxy.as_str()),
            Some(o.epoch),
        ),
        None => (None, None, None),
    };
    let changed = client
        .execute(
            "UPDATE shardwire_catalog.chunk_split SET state = $3, finished = now()
              WHERE id = $1 AND state = $2
                AND ($4::text IS NULL OR (owner_cluster = $4 AND owner_proxy = $5
                                          AND owner_epoch = $6))",
            &[
                &id,
                &from.as_str(),
                &state.as_str(),
                &cluster,
                &proxy,
                &epoch,
            ],
        )
        .await?;
    Ok(changed == 1)
}

/// The splits not yet DONE or ROLLED_BACK.
pub(super) async fn unfinished(client: &Client) -> Result<Vec<SplitRecord>, CatalogError> {
    client
        .query(
            "SELECT id, table_id, chunk_no, modulus, shard, state, owner_cluster, owner_proxy,
                    owner_epoch
               FROM shardwire_catalog.chunk_split
              WHERE state IN ('preparing', 'recorded') ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(split_record)
        .collect()
}

fn split_record(row: &Row) -> Result<SplitRecord, CatalogError> {
    let state: String = row.get(5);
    Ok(SplitRecord {
        id: row.get(0),
        table: TableId(row.get(1)),
        chunk: ChunkId(row.get::<_, i32>(2) as u32),
        modulus: row.get::<_, i32>(3) as u32,
        shard: row.get(4),
        state: SplitState::from_code(&state)
            .ok_or_else(|| CatalogError::Corrupt(format!("unknown split state {state:?}")))?,
        owner: MoveOwner {
            cluster: row.get(6),
            proxy: row.get(7),
            epoch: row.get(8),
        },
    })
}
