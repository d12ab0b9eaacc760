//! The catalog's writes and reads of views (`view_entry`). Each write is one transaction that
//! bumps `catalog_version`, as every catalog write does.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, Row, Transaction};

use super::store::bump_version;
use super::view::{NewView, ViewEntry};
use super::CatalogError;
use crate::model::{TableId, TableState, ViewShape};

fn ids(ids: &[TableId]) -> Vec<i64> {
    ids.iter().map(|id| id.0).collect()
}

/// Records a view in state CREATING, before any shard has it; its id.
pub(super) async fn create_view(client: &mut Client, v: &NewView) -> Result<TableId, CatalogError> {
    let tx = client.transaction().await?;
    let taken = tx
        .query_opt(
            "SELECT 1 FROM shardwire_catalog.table_entry WHERE schema_name = $1 AND table_name = $2",
            &[&v.schema, &v.name],
        )
        .await?;
    if taken.is_some() {
        return Err(CatalogError::TableExists {
            schema: v.schema.clone(),
            name: v.name.clone(),
        });
    }
    let row = tx
        .query_one(
            "INSERT INTO shardwire_catalog.view_entry (schema_name, view_name, state, shape,
                 placed_like, definition, key_columns, reads)
             VALUES ($1, $2, 'creating', $3, $4, $5, $6, $7) RETURNING id",
            &[
                &v.schema,
                &v.name,
                &v.shape.as_str(),
                &v.placed_like.map(|t| t.0),
                &v.definition,
                &v.key_columns,
                &ids(&v.reads),
            ],
        )
        .await
        .map_err(|e| match e.code() {
            Some(&SqlState::UNIQUE_VIOLATION) => CatalogError::TableExists {
                schema: v.schema.clone(),
                name: v.name.clone(),
            },
            _ => CatalogError::Query(e),
        })?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(TableId(row.get(0)))
}

/// Makes a view's entry say `v` (what the shards now have) and ACTIVE.
pub(super) async fn finish_view(
    client: &mut Client,
    id: TableId,
    v: &NewView,
) -> Result<(), CatalogError> {
    let updated = write(
        client,
        "UPDATE shardwire_catalog.view_entry SET state = 'active', schema_name = $2,
             view_name = $3, shape = $4, placed_like = $5, definition = $6,
             key_columns = $7, reads = $8
         WHERE id = $1",
        &[
            &id.0,
            &v.schema,
            &v.name,
            &v.shape.as_str(),
            &v.placed_like.map(|t| t.0),
            &v.definition,
            &v.key_columns,
            &ids(&v.reads),
        ],
    )
    .await?;
    if updated == 0 {
        return Err(CatalogError::NoSuchTable(id));
    }
    Ok(())
}

/// Sets the state of views: CREATING while a CREATE OR REPLACE changes one (no statement
/// uses it meanwhile), DROPPING before a DROP reaches the shards.
pub(super) async fn set_view_state(
    client: &mut Client,
    views: &[TableId],
    state: TableState,
) -> Result<(), CatalogError> {
    write(
        client,
        "UPDATE shardwire_catalog.view_entry SET state = $2 WHERE id = ANY($1)",
        &[&ids(views), &state.as_str()],
    )
    .await
    .map(drop)
}

/// Removes views' entries.
pub(super) async fn delete_views(
    client: &mut Client,
    views: &[TableId],
) -> Result<(), CatalogError> {
    write(
        client,
        "DELETE FROM shardwire_catalog.view_entry WHERE id = ANY($1)",
        &[&ids(views)],
    )
    .await
    .map(drop)
}

/// One statement as a catalog write (the version bumped with it); the rows it changed.
async fn write(
    client: &mut Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Result<u64, CatalogError> {
    let tx = client.transaction().await?;
    let changed = tx.execute(sql, params).await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(changed)
}

/// Every view's entry, in the loading transaction.
pub(super) async fn load_views(tx: &Transaction<'_>) -> Result<Vec<ViewEntry>, CatalogError> {
    tx.query(
        "SELECT id, schema_name, view_name, state, shape, placed_like, definition, key_columns,
                reads
         FROM shardwire_catalog.view_entry ORDER BY id",
        &[],
    )
    .await?
    .iter()
    .map(view_from_row)
    .collect()
}

fn view_from_row(row: &Row) -> Result<ViewEntry, CatalogError> {
    let id = TableId(row.get(0));
    let corrupt =
        |what: &str, value: &str| CatalogError::Corrupt(format!("view {id}: {what} \"{value}\""));
    let state: &str = row.get(3);
    let shape: &str = row.get(4);
    Ok(ViewEntry {
        id,
        schema: row.get(1),
        name: row.get(2),
        state: TableState::from_code(state).ok_or_else(|| corrupt("state", state))?,
        shape: ViewShape::from_code(shape).ok_or_else(|| corrupt("shape", shape))?,
        placed_like: row.get::<_, Option<i64>>(5).map(TableId),
        definition: row.get(6),
        key_columns: row.get(7),
        reads: row.get::<_, Vec<i64>>(8).into_iter().map(TableId).collect(),
    })
}
