//! Reads the whole catalog in one read-only repeatable-read transaction, so a snapshot never
//! mixes two versions.

use std::collections::HashMap;

use tokio_postgres::{Client, IsolationLevel, Row, Transaction};

use super::model::{
    GeneratedKey, Partition, PartitionSet, Shard, Table, Tablespace, TablespaceSet,
};
use super::snapshot::Snapshot;
use super::store::{decode_bound, version};
use super::CatalogError;
use crate::model::{
    Chunk, ChunkId, ChunkMap, KeyColumn, RowMovement, ShardId, ShardingMethod, TableId, TableKind,
    TableState, TablespaceSetId, Ttl, TtlUnit,
};

/// Loads a snapshot; `shards` are this proxy's configured shards, which every shard the catalog
/// places something on must be among.
pub(super) async fn load(client: &mut Client, shards: &[Shard]) -> Result<Snapshot, CatalogError> {
    let tx = client
        .build_transaction()
        .isolation_level(IsolationLevel::RepeatableRead)
        .read_only(true)
        .start()
        .await?;
    let version = version(&tx).await?;
    let resolve = Resolver::new(shards);

    let tablespace_sets = load_tablespace_sets(&tx, &resolve).await?;
    let tablespaces = load_tablespaces(&tx, &resolve).await?;
    let mut tables = load_tables(&tx).await?;
    let index: HashMap<TableId, usize> =
        tables.iter().enumerate().map(|(i, t)| (t.id, i)).collect();
    load_key_sequences(&tx, &mut tables, &index).await?;
    let set_owner = load_partition_sets(&tx, &mut tables, &index).await?;
    load_chunks(&tx, &resolve, &mut tables, &index, &set_owner).await?;
    load_user_partitions(&tx, &tablespaces, &mut tables, &index).await?;
    let views = super::view_store::load_views(&tx).await?;
    let holds = super::holds::load(&tx).await?;
    tx.commit().await?;
    Ok(Snapshot::new(
        version,
        shards.to_vec(),
        tablespace_sets,
        tablespaces,
        tables,
    )
    .with_views(views)
    .with_holds(holds))
}

/// Partition set id → its table's id and its index there, so chunk rows find their set.
type SetOwners = HashMap<i64, (i64, usize)>;

/// Tablespace sets with their member shards in position order, which chunks are spread over.
async fn load_tablespace_sets(
    tx: &Transaction<'_>,
    resolve: &Resolver<'_>,
) -> Result<Vec<TablespaceSet>, CatalogError> {
    let mut tablespace_sets = Vec::new();
    for row in tx
        .query(
            "SELECT s.id, s.name,
                    coalesce(array_agg(m.shard ORDER BY m.position)
                             FILTER (WHERE m.shard IS NOT NULL), '{}')
             FROM shardwire_catalog.tablespace_set s
             LEFT JOIN shardwire_catalog.tablespace_set_shard m ON m.set_id = s.id
             GROUP BY s.id ORDER BY s.id",
            &[],
        )
        .await?
    {
        let name: String = row.get(1);
        let members: Vec<String> = row.get(2);
        let what = || format!("tablespace set {name}");
        tablespace_sets.push(TablespaceSet {
            id: TablespaceSetId(row.get(0)),
            shards: members
                .iter()
                .map(|s| resolve.shard(s, what))
                .collect::<Result<_, _>>()?,
            name,
        });
    }
    Ok(tablespace_sets)
}

/// Tablespaces with their shards; user-defined partitions are placed through them.
async fn load_tablespaces(
    tx: &Transaction<'_>,
    resolve: &Resolver<'_>,
) -> Result<Vec<Tablespace>, CatalogError> {
    let mut tablespaces = Vec::new();
    for row in tx
        .query(
            "SELECT name, shard FROM shardwire_catalog.tablespace ORDER BY name",
            &[],
        )
        .await?
    {
        let name: String = row.get(0);
        let shard = resolve.shard(row.get(1), || format!("tablespace {name}"))?;
        tablespaces.push(Tablespace { name, shard });
    }
    Ok(tablespaces)
}

/// The table entries alone; the steps after this attach what hangs off each.
async fn load_tables(tx: &Transaction<'_>) -> Result<Vec<Table>, CatalogError> {
    let mut tables = Vec::new();
    for row in tx
        .query(
            "SELECT id, schema_name, table_name, kind, method, key_columns, key_types,
                    set_columns, set_types, parent_id, root_id, row_movement, state,
                    tablespace_set_id, pk_columns, pk_types, nosql, ttl_amount, ttl_unit
             FROM shardwire_catalog.table_entry",
            &[],
        )
        .await?
    {
        tables.push(table_from_row(&row)?);
    }
    Ok(tables)
}

/// Attaches the key columns whose values the catalog's sequences generate.
async fn load_key_sequences(
    tx: &Transaction<'_>,
    tables: &mut [Table],
    index: &HashMap<TableId, usize>,
) -> Result<(), CatalogError> {
    for row in tx
        .query(
            "SELECT table_id, column_name, always FROM shardwire_catalog.key_sequence
             ORDER BY table_id, column_name",
            &[],
        )
        .await?
    {
        let table = table_mut(tables, index, row.get(0))?;
        table.generated.push(GeneratedKey {
            column: row.get(1),
            always: row.get(2),
        });
    }
    Ok(())
}

/// Attaches partition sets, still without chunks; returns where each went, for [`load_chunks`].
async fn load_partition_sets(
    tx: &Transaction<'_>,
    tables: &mut [Table],
    index: &HashMap<TableId, usize>,
) -> Result<SetOwners, CatalogError> {
    let mut set_owner = SetOwners::new();
    for row in tx
        .query(
            "SELECT id, table_id, name, bound_kind, bound_width, bound_values, tablespace_set_id
             FROM shardwire_catalog.partition_set ORDER BY table_id, position",
            &[],
        )
        .await?
    {
        let table_id: i64 = row.get(1);
        let name: String = row.get(2);
        let table = table_mut(tables, index, table_id)?;
        let bound = decode_bound(row.get(3), row.get(4), &row.get::<_, Vec<String>>(5))
            .map_err(|e| CatalogError::Corrupt(format!("partition set {name}: {e}")))?;
        set_owner.insert(row.get(0), (table_id, table.partition_sets.len()));
        table.partition_sets.push(PartitionSet {
            name,
            bound,
            tablespace_set: TablespaceSetId(row.get(6)),
            chunks: ChunkMap::default(),
        });
    }
    Ok(set_owner)
}

/// Files each table's and partition set's chunks under it, refusing chunks that do not cover
/// every hash remainder exactly once.
async fn load_chunks(
    tx: &Transaction<'_>,
    resolve: &Resolver<'_>,
    tables: &mut [Table],
    index: &HashMap<TableId, usize>,
    set_owner: &SetOwners,
) -> Result<(), CatalogError> {
    // A level's rows: number, recorded modulus (none before any split), shard.
    type Level = Vec<(u32, Option<u32>, ShardId)>;
    let mut levels: HashMap<(i64, Option<usize>), Level> = HashMap::new();
    for row in tx
        .query(
            "SELECT table_id, partition_set_id, chunk_no, shard, modulus
             FROM shardwire_catalog.chunk",
            &[],
        )
        .await?
    {
        let table_id: i64 = row.get(0);
        let chunk_no: i32 = row.get(2);
        let what = || format!("chunk {chunk_no} of table {table_id}");
        let shard = resolve.shard(row.get(3), what)?;
        let set = match row.get::<_, Option<i64>>(1) {
            None => None,
            Some(set) => match set_owner.get(&set) {
                Some(&(owner, i)) if owner == table_id => Some(i),
                _ => {
                    return Err(CatalogError::Corrupt(format!(
                        "{} names a partition set of another table",
                        what()
                    )))
                }
            },
        };
        let modulus: Option<i32> = row.get(4);
        levels.entry((table_id, set)).or_default().push((
            chunk_no.max(0) as u32,
            modulus.map(|m| m.max(0) as u32),
            shard,
        ));
    }
    for ((table_id, set), rows) in levels {
        let count = rows.len() as u32;
        let chunks: Vec<Chunk> = rows
            .into_iter()
            .map(|(id, modulus, shard)| Chunk {
                id: ChunkId(id),
                modulus: modulus.unwrap_or(count),
                shard,
            })
            .collect();
        let map = ChunkMap::from_chunks(&chunks)
            .map_err(|e| CatalogError::Corrupt(format!("the chunks of table {table_id}: {e}")))?;
        let table = table_mut(tables, index, table_id)?;
        match set {
            None => table.chunks = map,
            Some(i) => table.partition_sets[i].chunks = map,
        }
    }
    Ok(())
}

/// Attaches user-defined partitions, each on the shard of the tablespace it names.
async fn load_user_partitions(
    tx: &Transaction<'_>,
    tablespaces: &[Tablespace],
    tables: &mut [Table],
    index: &HashMap<TableId, usize>,
) -> Result<(), CatalogError> {
    for row in tx
        .query(
            "SELECT table_id, name, bound_kind, bound_width, bound_values, tablespace
             FROM shardwire_catalog.user_partition ORDER BY table_id, position",
            &[],
        )
        .await?
    {
        let name: String = row.get(1);
        let tablespace: String = row.get(5);
        let bound = decode_bound(row.get(2), row.get(3), &row.get::<_, Vec<String>>(4))
            .map_err(|e| CatalogError::Corrupt(format!("partition {name}: {e}")))?;
        let shard = tablespaces
            .iter()
            .find(|t| t.name == tablespace)
            .map(|t| t.shard)
            .ok_or_else(|| {
                CatalogError::Corrupt(format!("partition {name}: no tablespace {tablespace}"))
            })?;
        table_mut(tables, index, row.get(0))?
            .partitions
            .push(Partition {
                name,
                bound,
                tablespace,
                shard,
            });
    }
    Ok(())
}

fn table_mut<'t>(
    tables: &'t mut [Table],
    index: &HashMap<TableId, usize>,
    id: i64,
) -> Result<&'t mut Table, CatalogError> {
    index
        .get(&TableId(id))
        .map(|&i| &mut tables[i])
        .ok_or_else(|| CatalogError::Corrupt(format!("a row names missing table {id}")))
}

fn table_from_row(row: &Row) -> Result<Table, CatalogError> {
    let id = TableId(row.get(0));
    let corrupt =
        |what: &str, value: &str| CatalogError::Corrupt(format!("table {id}: {what} \"{value}\""));
    let kind: &str = row.get(3);
    let method: Option<&str> = row.get(4);
    let state: &str = row.get(12);
    let columns = |names: usize, types: usize| -> Vec<KeyColumn> {
        let names: Vec<String> = row.get(names);
        let types: Vec<String> = row.get(types);
        names
            .into_iter()
            .zip(types)
            .map(|(name, pg_type)| KeyColumn { name, pg_type })
            .collect()
    };
    let parent: Option<i64> = row.get(9);
    let root: Option<i64> = row.get(10);
    let ttl_amount: Option<i32> = row.get(17);
    let ttl_unit: Option<&str> = row.get(18);
    let ttl = match (ttl_amount, ttl_unit) {
        (Some(amount), Some(unit)) => Some(Ttl {
            amount: u32::try_from(amount).map_err(|_| corrupt("ttl", &amount.to_string()))?,
            unit: TtlUnit::from_code(unit).ok_or_else(|| corrupt("ttl unit", unit))?,
        }),
        _ => None,
    };
    Ok(Table {
        id,
        schema: row.get(1),
        name: row.get(2),
        kind: TableKind::from_code(kind).ok_or_else(|| corrupt("kind", kind))?,
        method: method
            .map(|m| ShardingMethod::from_code(m).ok_or_else(|| corrupt("method", m)))
            .transpose()?,
        key_columns: columns(5, 6),
        partition_set_columns: columns(7, 8),
        primary_key: columns(14, 15),
        root: root.map_or(id, TableId),
        parent: parent.map(TableId),
        row_movement: if row.get(11) {
            RowMovement::Enabled
        } else {
            RowMovement::Disabled
        },
        state: TableState::from_code(state).ok_or_else(|| corrupt("state", state))?,
        tablespace_set: row.get::<_, Option<i64>>(13).map(TablespaceSetId),
        chunks: ChunkMap::default(),
        partition_sets: Vec::new(),
        partitions: Vec::new(),
        generated: Vec::new(),
        nosql: row.get(16),
        ttl,
    })
}

/// Shard names as the catalog stores them → this proxy's shard ids.
struct Resolver<'a> {
    by_name: HashMap<&'a str, ShardId>,
}

impl<'a> Resolver<'a> {
    fn new(shards: &'a [Shard]) -> Resolver<'a> {
        Resolver {
            by_name: shards.iter().map(|s| (s.name.as_str(), s.id)).collect(),
        }
    }

    fn shard(&self, name: &str, used_by: impl FnOnce() -> String) -> Result<ShardId, CatalogError> {
        self.by_name
            .get(name)
            .copied()
            .ok_or_else(|| CatalogError::ShardNotConfigured {
                shard: name.to_string(),
                used_by: used_by(),
            })
    }
}
