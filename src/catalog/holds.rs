//! Cutover holds in the catalog: the proxy cutting a chunk over records that it holds attempt k
//! of its move (a new catalog version, so every proxy loads it), every other proxy acknowledges
//! once its own statements are held and none is in flight, and the hold is cleared once the
//! chunk is handed over and both shards' halves are committed (or the attempt backed off): a
//! proxy that sees the hold gone sees the new map, and the chunk attached where it says.

use tokio_postgres::Client;

use super::moves::MoveOwner;
use super::store::bump_version;
use super::CatalogError;
use crate::model::MoveId;

/// A cutover holding every proxy's statements, as a snapshot records it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CutoverHold {
    pub id: MoveId,
    pub attempt: i32,
    pub owner: MoveOwner,
    /// Past its time by the catalog's clock when loaded: no hand-over can happen under it
    /// any more.
    pub lapsed: bool,
    /// The chunk map already gives the chunk to the target, whose attach may not be committed
    /// yet: the hold stands until the move's proxy (or recovery) clears it, lapsed or not.
    pub handed_over: bool,
}

/// Records that move `id` holds attempt `attempt` for at most `valid` (by the catalog's clock):
/// a hand-over after that is refused, so a proxy that stops waiting for the hold's end may go on.
pub(super) async fn hold(
    client: &mut Client,
    id: MoveId,
    attempt: i32,
    valid: std::time::Duration,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    tx.execute(
        "UPDATE shardwire_catalog.chunk_move
            SET holding = $2, hold_until = now() + make_interval(secs => $3)
          WHERE id = $1",
        &[&id.0, &attempt, &valid.as_secs_f64()],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Ends move `id`'s hold (a cutover that backs off, or a move that ends).
pub(super) async fn release(client: &mut Client, id: MoveId) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    let changed = tx
        .execute(
            "UPDATE shardwire_catalog.chunk_move SET holding = NULL, hold_until = NULL
              WHERE id = $1 AND holding IS NOT NULL",
            &[&id.0],
        )
        .await?;
    if changed > 0 {
        bump_version(&tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Records that `who` holds its statements for attempt `attempt` of move `id`.
pub(super) async fn acknowledge(
    client: &Client,
    id: MoveId,
    attempt: i32,
    who: &MoveOwner,
) -> Result<(), CatalogError> {
    client
        .execute(
            "INSERT INTO shardwire_catalog.move_hold_ack (move_id, attempt, cluster, proxy, epoch)
             SELECT $1, $2, $3, $4, $5
              WHERE EXISTS (SELECT 1 FROM shardwire_catalog.chunk_move
                             WHERE id = $1 AND holding = $2)
             ON CONFLICT DO NOTHING",
            &[&id.0, &attempt, &who.cluster, &who.proxy, &who.epoch],
        )
        .await?;
    Ok(())
}

/// The proxies that acknowledged attempt `attempt` of move `id`.
pub(super) async fn acknowledged(
    client: &Client,
    id: MoveId,
    attempt: i32,
) -> Result<Vec<MoveOwner>, CatalogError> {
    Ok(client
        .query(
            "SELECT cluster, proxy, epoch FROM shardwire_catalog.move_hold_ack
              WHERE move_id = $1 AND attempt = $2",
            &[&id.0, &attempt],
        )
        .await?
        .iter()
        .map(|r| MoveOwner {
            cluster: r.get(0),
            proxy: r.get(1),
            epoch: r.get(2),
        })
        .collect())
}

/// The holds in force, for a snapshot.
pub(super) async fn load(
    tx: &tokio_postgres::Transaction<'_>,
) -> Result<Vec<CutoverHold>, CatalogError> {
    Ok(tx
        .query(
            "SELECT id, holding, owner_cluster, owner_proxy, owner_epoch,
                    hold_until <= clock_timestamp(), state = 'cleaning_up'
               FROM shardwire_catalog.chunk_move WHERE holding IS NOT NULL ORDER BY id",
            &[],
        )
        .await?
        .iter()
        .map(|r| CutoverHold {
            id: MoveId(r.get(0)),
            attempt: r.get(1),
            owner: MoveOwner {
                cluster: r.get(2),
                proxy: r.get(3),
                epoch: r.get(4),
            },
            lapsed: r.get(5),
            handed_over: r.get(6),
        })
        .collect())
}
