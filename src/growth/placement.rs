//! `CHECK PLACEMENT [FOR table]`: every shard read, one row per table, shard and chunk (or
//! partition) with its rows and the rows that do not belong there. A consistent-hash table's
//! partition for chunk k belongs on the shard the chunk map gives chunk k; PostgreSQL keeps
//! each row in the partition its hash names, which the check proves again row by row with
//! `satisfies_hash_partition`.

use super::plan::hash_key_columns;
use super::settle::{connect, on};
use super::{Growth, GrowthError};
use crate::catalog::{Snapshot, Table};
use crate::model::{Chunk, ChunkId, ShardId, ShardingMethod, TableKind};
use crate::sql::quote::{quote_ident, quote_literal};

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PlacementRow {
    pub table: String,
    pub shard: String,
    /// The chunk number, or the partition's name where the table has no chunks.
    pub chunk: Option<u32>,
    pub partition: Option<String>,
    pub rows: i64,
    pub misplaced: i64,
}

/// The placement of `table` (every recorded table when `None`), as the shards hold it.
pub async fn check_placement(
    g: &Growth,
    table: Option<(&str, &str)>,
) -> Result<Vec<PlacementRow>, GrowthError> {
    let snapshot = g.catalog.snapshot();
    let tables: Vec<&Table> = match table {
        Some((schema, name)) => vec![snapshot
            .table_by_name(schema, name)
            .ok_or_else(|| GrowthError::NoSuchTable(format!("{schema}.{name}")))?],
        None => snapshot.tables().iter().collect(),
    };
    let mut out = Vec::new();
    for t in tables {
        for shard in shards_to_read(&snapshot, t) {
            out.extend(on_shard(g, &snapshot, t, shard).await?);
        }
    }
    Ok(out)
}

/// Where `t` may have rows: every shard of a consistent-hash family's tablespace set (every
/// shard without one), not only those the chunk map names, so rows left behind are found (a
/// shard without the family's tables shows none); elsewhere the shards that hold it.
fn shards_to_read(snapshot: &Snapshot, t: &Table) -> Vec<ShardId> {
    let Some(root) = snapshot
        .root_of(t.id)
        .filter(|r| r.method == Some(ShardingMethod::ConsistentHash))
    else {
        return snapshot.shards_of(t.id);
    };
    match root
        .tablespace_set
        .and_then(|id| snapshot.tablespace_set(id))
    {
        Some(set) => {
            let mut shards = set.shards.clone();
            shards.sort();
            shards
        }
        None => snapshot.shards().iter().map(|s| s.id).collect(),
    }
}

/// The rows of `t`'s partitions on `shard` (of the table itself where it has none).
async fn on_shard(
    g: &Growth,
    snapshot: &Snapshot,
    t: &Table,
    shard: ShardId,
) -> Result<Vec<PlacementRow>, GrowthError> {
    let shard_name = snapshot
        .shard(shard)
        .map(|s| s.name.clone())
        .unwrap_or_default();
    let on = on(&shard_name);
    let client = connect(g, shard, &shard_name).await?;
    let relation = format!("{}.{}", quote_ident(&t.schema), quote_ident(&t.name));
    let display = if t.schema == "public" {
        t.name.clone()
    } else {
        t.qualified_name()
    };
    let row = |chunk, partition, rows, misplaced| PlacementRow {
        table: display.clone(),
        shard: shard_name.clone(),
        chunk,
        partition,
        rows,
        misplaced,
    };
    let hashed = snapshot
        .root_of(t.id)
        .is_some_and(|r| r.method == Some(ShardingMethod::ConsistentHash));
    if !hashed {
        let rows: i64 = client
            .query_one(&format!("SELECT count(*) FROM {relation}"), &[])
            .await
            .map_err(&on)?
            .get(0);
        // A duplicated copy holds every row; an unsharded table lives on its one shard; list
        // and range partitions are on their tablespace's shard by construction.
        let misplaced = match t.kind {
            TableKind::Unsharded if snapshot.chunks(t.id).first() != Some(&shard) => rows,
            _ => 0,
        };
        return Ok(vec![row(None, None, rows, misplaced)]);
    }
    // A shard of the set that holds no chunk of the family has none of its tables either.
    let present: bool = client
        .query_one(
            "SELECT pg_catalog.to_regclass($1) IS NOT NULL",
            &[&relation],
        )
        .await
        .map_err(&on)?
        .get(0);
    if !present {
        return Ok(Vec::new());
    }
    let chunks = snapshot.chunks(t.id);
    let partitions = client
        .query(
            "SELECT c.oid::regclass::text, pg_catalog.pg_get_expr(c.relpartbound, c.oid),
                    pg_catalog.pg_get_partkeydef($1::text::regclass)
               FROM pg_catalog.pg_inherits i JOIN pg_catalog.pg_class c ON c.oid = i.inhrelid
              WHERE i.inhparent = $1::text::regclass ORDER BY 1",
            &[&relation],
        )
        .await
        .map_err(&on)?;
    let mut out = Vec::new();
    for p in partitions {
        let name: String = p.get(0);
        let bound: String = p.get(1);
        let key: String = p.get(2);
        let Some((m, k)) = hash_bound(&bound) else {
            out.push(row(None, Some(name), 0, 0));
            continue;
        };
        let columns = hash_key_columns(&key);
        let counted = client
            .query_one(
                &format!(
                    "SELECT count(*), count(*) FILTER (WHERE NOT pg_catalog.satisfies_hash_partition(\
                     {}::regclass::oid, {m}, {k}, {columns})) FROM {name}",
                    quote_literal(&relation)
                ),
                &[],
            )
            .await
            .map_err(&on)?;
        let rows: i64 = counted.get(0);
        let off_hash: i64 = counted.get(1);
        // A partition of another modulus than its chunk's, or of a chunk the map puts
        // elsewhere, holds rows this shard should not have.
        let owned = chunks.chunk(ChunkId(k))
            == Some(Chunk {
                id: ChunkId(k),
                modulus: m,
                shard,
            });
        let misplaced = if owned { off_hash } else { rows };
        out.push(row(Some(k), Some(name), rows, misplaced));
    }
    Ok(out)
}

/// `(modulus, remainder)` of `FOR VALUES WITH (modulus M, remainder k)`.
fn hash_bound(bound: &str) -> Option<(u32, u32)> {
    let inner = bound.strip_prefix("FOR VALUES WITH (")?.strip_suffix(')')?;
    let mut modulus = None;
    let mut remainder = None;
    for part in inner.split(',') {
        let (word, value) = part.trim().split_once(' ')?;
        let value: u32 = value.trim().parse().ok()?;
        match word {
            "modulus" => modulus = Some(value),
            "remainder" => remainder = Some(value),
            _ => return None,
        }
    }
    Some((modulus?, remainder?))
}

#[cfg(test)]
mod tests {
    use super::hash_bound;

    #[test]
    fn reads_hash_bounds_as_postgresql_prints_them() {
        assert_eq!(
            hash_bound("FOR VALUES WITH (modulus 8, remainder 3)"),
            Some((8, 3))
        );
        assert_eq!(hash_bound("FOR VALUES IN (1)"), None);
    }
}
