//! A table's (or view's) columns as a shard's catalog has them, for statements the proxy
//! writes over it: INSERTs that name no columns, the general path's temporary tables, views.

use crate::model::ShardId;
use crate::router::plan::ColumnDef;
use crate::sql::quote::quote_ident;
use crate::txn::{ControlPools, TxnError};

/// The columns of `schema.name` on `shard`, in order.
pub async fn fetch(
    control: &ControlPools,
    shard: ShardId,
    schema: &str,
    name: &str,
) -> Result<Vec<ColumnDef>, TxnError> {
    let pool = control.shard(shard);
    let on_shard = |e| TxnError::on_shard(&pool.label, e);
    let client = pool.pool.get().await.map_err(on_shard)?;
    let rows = client
        .query(
            "SELECT a.attname::text, format_type(a.atttypid, a.atttypmod), \
                    a.attgenerated <> '', \
                    CASE WHEN a.attcollation <> t.typcollation THEN \
                      quote_ident(n.nspname) || '.' || quote_ident(c.collname) END \
             FROM pg_catalog.pg_attribute a \
             JOIN pg_catalog.pg_type t ON t.oid = a.atttypid \
             LEFT JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation \
             LEFT JOIN pg_catalog.pg_namespace n ON n.oid = c.collnamespace \
             WHERE a.attrelid = to_regclass($1) AND a.attnum > 0 AND NOT a.attisdropped \
             ORDER BY a.attnum",
            &[&format!("{}.{}", quote_ident(schema), quote_ident(name))],
        )
        .await
        .map_err(|e| on_shard(e.into()))?;
    Ok(rows
        .iter()
        .map(|r| ColumnDef {
            name: r.get(0),
            type_sql: r.get(1),
            generated: r.get(2),
            collation: r.get(3),
        })
        .collect())
}
