//! Every write to the catalog (schema `shardwire_catalog`; its setup is `schema`): tables,
//! their states and settings, key sequences, tablespace sets and tablespaces. Each write is one
//! transaction that also increments `catalog_version` and notifies [`NOTIFY_CHANNEL`], so other
//! proxies reload.

use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, GenericClient, Transaction};

use super::model::{NewPartition, NewTable, PartitionSet};
use super::CatalogError;
use crate::model::{
    BoundValue, KeyColumn, PartitionBound, RowMovement, ShardId, TableId, TableState,
    TablespaceSetId, Ttl,
};

/// The channel every catalog write notifies; the payload is the new `catalog_version`.
pub const NOTIFY_CHANNEL: &str = "shardwire_catalog";

/// Records `shards` as the members of tablespace set `set_id`.
pub(super) async fn insert_set_members(
    tx: &Transaction<'_>,
    set_id: i64,
    shards: &[String],
) -> Result<(), CatalogError> {
    tx.execute(
        "INSERT INTO shardwire_catalog.tablespace_set_shard (set_id, position, shard)
         SELECT $1, ordinality - 1, shard FROM unnest($2::text[]) WITH ORDINALITY AS u(shard)",
        &[&set_id, &shards],
    )
    .await?;
    Ok(())
}

/// Increments `catalog_version` and notifies, both taking effect when the transaction commits.
pub(super) async fn bump_version(tx: &Transaction<'_>) -> Result<i64, CatalogError> {
    let row = tx
        .query_one(
            "WITH v AS (
                 UPDATE shardwire_catalog.catalog_version SET version = version + 1
                 RETURNING version)
             SELECT version, pg_notify($1, version::text) FROM v",
            &[&NOTIFY_CHANNEL],
        )
        .await?;
    Ok(row.get(0))
}

/// The current `catalog_version`.
pub(super) async fn version(client: &impl GenericClient) -> Result<i64, CatalogError> {
    Ok(client
        .query_one("SELECT version FROM shardwire_catalog.catalog_version", &[])
        .await?
        .get(0))
}

/// Maps a constraint violation of one statement to the error that explains it.
fn on_violation(
    code: SqlState,
    explain: impl FnOnce() -> CatalogError,
) -> impl FnOnce(tokio_postgres::Error) -> CatalogError {
    move |e| {
        if e.code() == Some(&code) {
            explain()
        } else {
            CatalogError::Query(e)
        }
    }
}

pub(super) fn shard_names(
    shards: &[ShardId],
    names: &[String],
) -> Result<Vec<String>, CatalogError> {
    shards
        .iter()
        .map(|id| {
            names
                .get(id.index())
                .cloned()
                .ok_or(CatalogError::UnknownShard(*id))
        })
        .collect()
}

async fn insert_chunks(
    tx: &Transaction<'_>,
    table: i64,
    partition_set: Option<i64>,
    shards: &[String],
) -> Result<(), CatalogError> {
    tx.execute(
        "INSERT INTO shardwire_catalog.chunk (table_id, partition_set_id, chunk_no, shard)
         SELECT $1, $2, ordinality - 1, shard FROM unnest($3::text[]) WITH ORDINALITY AS u(shard)",
        &[&table, &partition_set, &shards],
    )
    .await?;
    Ok(())
}

/// Records a table in state CREATING with its chunks, partition sets and partitions.
/// `names` maps each `ShardId` to its shard name.
pub(super) async fn create_table(
    client: &mut Client,
    t: &NewTable,
    names: &[String],
) -> Result<TableId, CatalogError> {
    t.check().map_err(CatalogError::InvalidEntry)?;
    let chunks = shard_names(&t.chunks, names)?;
    let tx = client.transaction().await?;
    let root = match t.parent {
        None => None,
        Some(parent) => Some(lock_family_root(&tx, parent).await?),
    };
    let id = insert_table_entry(&tx, t, root).await?;
    insert_chunks(&tx, id, None, &chunks).await?;
    insert_partition_sets(&tx, id, &t.partition_sets, names).await?;
    insert_user_partitions(&tx, id, &t.partitions).await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(TableId(id))
}

/// The root of `parent`'s family, key-share locking `parent` so it cannot go before the commit.
async fn lock_family_root(tx: &Transaction<'_>, parent: TableId) -> Result<i64, CatalogError> {
    let row = tx
        .query_opt(
            "SELECT coalesce(root_id, id), kind FROM shardwire_catalog.table_entry
             WHERE id = $1 FOR KEY SHARE",
            &[&parent.0],
        )
        .await?
        .ok_or(CatalogError::NoSuchTable(parent))?;
    if row.get::<_, &str>(1) != "sharded" {
        return Err(CatalogError::InvalidEntry(
            "a family's parent must be a sharded table".into(),
        ));
    }
    Ok(row.get::<_, i64>(0))
}

/// Column names and types apart, as the catalog stores them in two parallel arrays.
fn names_and_types(columns: &[KeyColumn]) -> (Vec<&str>, Vec<&str>) {
    columns
        .iter()
        .map(|c| (c.name.as_str(), c.pg_type.as_str()))
        .unzip()
}

/// Inserts the `table_entry` row itself; its new id, which everything else hangs off.
async fn insert_table_entry(
    tx: &Transaction<'_>,
    t: &NewTable,
    root: Option<i64>,
) -> Result<i64, CatalogError> {
    let (key_names, key_types) = names_and_types(&t.key_columns);
    let (set_names, set_types) = names_and_types(&t.partition_set_columns);
    let (pk_names, pk_types) = names_and_types(&t.primary_key);
    Ok(tx
        .query_one(
            "INSERT INTO shardwire_catalog.table_entry (schema_name, table_name, kind, method,
                 key_columns, key_types, set_columns, set_types, parent_id, root_id,
                 row_movement, state, tablespace_set_id, pk_columns, pk_types, nosql,
                 ttl_amount, ttl_unit)
             VALUES ($1, $2, $3, $4, $5, $6, $7, $8, $9, $10, $11, $12, $13, $14, $15, $16,
                 $17, $18)
             RETURNING id",
            &[
                &t.schema,
                &t.name,
                &t.kind.as_str(),
                &t.method.map(|m| m.as_str()),
                &key_names,
                &key_types,
                &set_names,
                &set_types,
                &t.parent.map(|p| p.0),
                &root,
                &(t.row_movement == RowMovement::Enabled),
                &TableState::Creating.as_str(),
                &t.tablespace_set.map(|s| s.0),
                &pk_names,
                &pk_types,
                &t.nosql,
                &t.ttl.map(|ttl| ttl.amount as i32),
                &t.ttl.map(|ttl| ttl.unit.as_str()),
            ],
        )
        .await
        .map_err(|e| match e.code() {
            Some(c) if *c == SqlState::UNIQUE_VIOLATION => CatalogError::TableExists {
                schema: t.schema.clone(),
                name: t.name.clone(),
            },
            // The parent is locked, so only the tablespace set can have gone.
            Some(c) if *c == SqlState::FOREIGN_KEY_VIOLATION => match t.tablespace_set {
                Some(set) => CatalogError::TablespaceSetGone(set),
                None => CatalogError::Query(e),
            },
            _ => CatalogError::Query(e),
        })?
        .get(0))
}

/// Records table `id`'s partition sets in order, each with its own chunks.
async fn insert_partition_sets(
    tx: &Transaction<'_>,
    id: i64,
    sets: &[PartitionSet],
    names: &[String],
) -> Result<(), CatalogError> {
    for (position, set) in (0i32..).zip(sets) {
        let (kind, width, values) = encode_bound(&set.bound);
        let set_id: i64 = tx
            .query_one(
                "INSERT INTO shardwire_catalog.partition_set (table_id, position, name,
                     bound_kind, bound_width, bound_values, tablespace_set_id)
                 VALUES ($1, $2, $3, $4, $5, $6, $7) RETURNING id",
                &[
                    &id,
                    &position,
                    &set.name,
                    &kind,
                    &width,
                    &values,
                    &set.tablespace_set.0,
                ],
            )
            .await
            .map_err(on_violation(SqlState::FOREIGN_KEY_VIOLATION, || {
                CatalogError::TablespaceSetGone(set.tablespace_set)
            }))?
            .get(0);
        insert_chunks(tx, id, Some(set_id), &shard_names(&set.chunks, names)?).await?;
    }
    Ok(())
}

/// Records table `id`'s user-defined partitions in order; a missing tablespace is named.
async fn insert_user_partitions(
    tx: &Transaction<'_>,
    id: i64,
    partitions: &[NewPartition],
) -> Result<(), CatalogError> {
    for (position, p) in (0i32..).zip(partitions) {
        let (kind, width, values) = encode_bound(&p.bound);
        tx.execute(
            "INSERT INTO shardwire_catalog.user_partition (table_id, position, name,
                 bound_kind, bound_width, bound_values, tablespace)
             VALUES ($1, $2, $3, $4, $5, $6, $7)",
            &[
                &id,
                &position,
                &p.name,
                &kind,
                &width,
                &values,
                &p.tablespace,
            ],
        )
        .await
        .map_err(on_violation(SqlState::FOREIGN_KEY_VIOLATION, || {
            CatalogError::NoSuchTablespace(p.tablespace.clone())
        }))?;
    }
    Ok(())
}

/// Locks table `id`'s row for the rest of the transaction; its state and `schema.name`.
async fn lock_table(
    tx: &Transaction<'_>,
    id: TableId,
) -> Result<(TableState, String), CatalogError> {
    let row = tx
        .query_opt(
            "SELECT state, schema_name || '.' || table_name FROM shardwire_catalog.table_entry
             WHERE id = $1 FOR UPDATE",
            &[&id.0],
        )
        .await?
        .ok_or(CatalogError::NoSuchTable(id))?;
    let code: &str = row.get(0);
    let state = TableState::from_code(code)
        .ok_or_else(|| CatalogError::Corrupt(format!("table {id} has state \"{code}\"")))?;
    Ok((state, row.get(1)))
}

/// Moves table `id` to state `to`; `holder` is recorded for UPDATING (and cleared otherwise).
pub(super) async fn set_state(
    client: &mut Client,
    id: TableId,
    to: TableState,
    holder: Option<&UpdateHolder>,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    let (from, table) = lock_table(&tx, id).await?;
    if !from.can_become(to) {
        return Err(CatalogError::InvalidTransition { table, from, to });
    }
    tx.execute(
        "UPDATE shardwire_catalog.table_entry
         SET state = $2, updating_cluster = $3, updating_proxy = $4, updating_epoch = $5
         WHERE id = $1",
        &[
            &id.0,
            &to.as_str(),
            &holder.map(|h| h.cluster.as_str()),
            &holder.map(|h| h.proxy.as_str()),
            &holder.map(|h| h.epoch),
        ],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// The proxy incarnation holding a table UPDATING, as its row in `proxy_lease` names it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UpdateHolder {
    pub cluster: String,
    pub proxy: String,
    pub epoch: i64,
}

/// Returns to ACTIVE every UPDATING table whose holder has no unexpired lease (it died, or lost
/// the catalog, mid-statement: its prepared DDL is recovery's to finish, and an expired holder
/// can commit nothing more). One statement, so a holder whose lease is live when it runs keeps
/// its table. Returns the tables released.
pub async fn release_abandoned_updates(
    client: &impl GenericClient,
) -> Result<Vec<String>, CatalogError> {
    let row = client
        .query_one(
            "WITH released AS (
                 UPDATE shardwire_catalog.table_entry t
                 SET state = 'active', updating_cluster = NULL, updating_proxy = NULL,
                     updating_epoch = NULL
                 WHERE t.state = 'updating' AND NOT EXISTS (
                     SELECT 1 FROM shardwire_catalog.proxy_lease l
                     WHERE l.cluster = t.updating_cluster AND l.proxy = t.updating_proxy
                       AND l.epoch = t.updating_epoch AND l.expires_at > clock_timestamp())
                 RETURNING t.schema_name || '.' || t.table_name AS name),
             bumped AS (
                 UPDATE shardwire_catalog.catalog_version SET version = version + 1
                 WHERE EXISTS (SELECT 1 FROM released)
                 RETURNING pg_notify($1, version::text))
             SELECT (SELECT coalesce(array_agg(name), '{}') FROM released),
                    (SELECT count(*) FROM bumped)",
            &[&NOTIFY_CHANNEL],
        )
        .await?;
    Ok(row.get(0))
}

pub(super) async fn record_key_sequence(
    client: &mut Client,
    id: TableId,
    column: &str,
    always: bool,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    tx.execute(
        "INSERT INTO shardwire_catalog.key_sequence (table_id, column_name, always)
         VALUES ($1, $2, $3)",
        &[&id.0, &column, &always],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn take_key_values(
    client: &mut Client,
    id: TableId,
    column: &str,
    count: i64,
) -> Result<i64, CatalogError> {
    let row = client
        .query_opt(
            "UPDATE shardwire_catalog.key_sequence SET next_value = next_value + $3
             WHERE table_id = $1 AND column_name = $2
             RETURNING next_value - $3",
            &[&id.0, &column, &count],
        )
        .await?;
    row.map(|r| r.get(0)).ok_or_else(|| {
        CatalogError::Corrupt(format!("no key sequence for column {column} of table {id}"))
    })
}

pub(super) async fn set_row_movement(
    client: &mut Client,
    id: TableId,
    movement: RowMovement,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    lock_table(&tx, id).await?;
    tx.execute(
        "UPDATE shardwire_catalog.table_entry SET row_movement = $2 WHERE id = $1",
        &[&id.0, &(movement == RowMovement::Enabled)],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// A NoSQL table's default time to live (`None`: rows never expire unless they say so).
pub(super) async fn set_ttl(
    client: &mut Client,
    id: TableId,
    ttl: Option<Ttl>,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    lock_table(&tx, id).await?;
    tx.execute(
        "UPDATE shardwire_catalog.table_entry SET ttl_amount = $2, ttl_unit = $3 WHERE id = $1",
        &[
            &id.0,
            &ttl.map(|t| t.amount as i32),
            &ttl.map(|t| t.unit.as_str()),
        ],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Deletes a table entry with its chunks, partition sets and partitions; refused while the
/// table has children in its family.
pub(super) async fn delete_table(client: &mut Client, id: TableId) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    let (_, table) = lock_table(&tx, id).await?;
    let children: Vec<String> = tx
        .query(
            "SELECT schema_name || '.' || table_name FROM shardwire_catalog.table_entry
             WHERE parent_id = $1 ORDER BY id",
            &[&id.0],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !children.is_empty() {
        return Err(CatalogError::HasChildren { table, children });
    }
    tx.execute(
        "DELETE FROM shardwire_catalog.table_entry WHERE id = $1",
        &[&id.0],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

pub(super) async fn create_tablespace_set(
    client: &mut Client,
    name: &str,
    shards: &[String],
) -> Result<TablespaceSetId, CatalogError> {
    let tx = client.transaction().await?;
    let id: i64 = tx
        .query_one(
            "INSERT INTO shardwire_catalog.tablespace_set (name) VALUES ($1) RETURNING id",
            &[&name],
        )
        .await
        .map_err(on_violation(SqlState::UNIQUE_VIOLATION, || {
            CatalogError::TablespaceSetExists(name.to_string())
        }))?
        .get(0);
    insert_set_members(&tx, id, shards).await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(TablespaceSetId(id))
}

/// Replaces the members of tablespace set `set`.
pub(super) async fn set_tablespace_set_members(
    client: &mut Client,
    set: TablespaceSetId,
    shards: &[String],
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    tx.execute(
        "DELETE FROM shardwire_catalog.tablespace_set_shard WHERE set_id = $1",
        &[&set.0],
    )
    .await?;
    insert_set_members(&tx, set.0, shards).await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Drops a tablespace set; refused while a table or partition set uses it.
pub(super) async fn drop_tablespace_set(
    client: &mut Client,
    name: &str,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    let id: i64 = tx
        .query_opt(
            "SELECT id FROM shardwire_catalog.tablespace_set WHERE name = $1 FOR UPDATE",
            &[&name],
        )
        .await?
        .ok_or_else(|| CatalogError::NoSuchTablespaceSet(name.to_string()))?
        .get(0);
    let users: Vec<String> = tx
        .query(
            "SELECT t.schema_name || '.' || t.table_name FROM shardwire_catalog.table_entry t
             WHERE t.tablespace_set_id = $1
                OR t.id IN (SELECT table_id FROM shardwire_catalog.partition_set
                            WHERE tablespace_set_id = $1)
             ORDER BY t.id",
            &[&id],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !users.is_empty() {
        return Err(CatalogError::TablespaceSetInUse {
            name: name.to_string(),
            tables: users,
        });
    }
    tx.execute(
        "DELETE FROM shardwire_catalog.tablespace_set WHERE id = $1",
        &[&id],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Tablespaces made in SQL share the table with those of `[[tablespaces]]`: one namespace, and
/// one foreign key from the partitions that use them.
pub(super) async fn create_tablespace(
    client: &mut Client,
    name: &str,
    shard: &str,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    tx.execute(
        "INSERT INTO shardwire_catalog.tablespace (name, shard) VALUES ($1, $2)",
        &[&name, &shard],
    )
    .await
    .map_err(on_violation(SqlState::UNIQUE_VIOLATION, || {
        CatalogError::TablespaceExists(name.to_string())
    }))?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// Drops a tablespace; refused while a user-defined partition uses it. The row lock makes a
/// concurrent CREATE that uses the tablespace either finish first (and be seen here) or fail on
/// its foreign key.
pub(super) async fn drop_tablespace(client: &mut Client, name: &str) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    tx.query_opt(
        "SELECT 1 FROM shardwire_catalog.tablespace WHERE name = $1 FOR UPDATE",
        &[&name],
    )
    .await?
    .ok_or_else(|| CatalogError::NoSuchTablespace(name.to_string()))?;
    let users: Vec<String> = tx
        .query(
            "SELECT t.schema_name || '.' || t.table_name FROM shardwire_catalog.table_entry t
             WHERE t.id IN (SELECT table_id FROM shardwire_catalog.user_partition
                            WHERE tablespace = $1)
             ORDER BY t.id",
            &[&name],
        )
        .await?
        .iter()
        .map(|r| r.get(0))
        .collect();
    if !users.is_empty() {
        return Err(CatalogError::TablespaceInUse {
            name: name.to_string(),
            tables: users,
        });
    }
    tx.execute(
        "DELETE FROM shardwire_catalog.tablespace WHERE name = $1",
        &[&name],
    )
    .await?;
    bump_version(&tx).await?;
    tx.commit().await?;
    Ok(())
}

/// A bound as stored: its kind, the values per tuple, and every value as an SQL literal.
pub(super) fn encode_bound(bound: &PartitionBound) -> (&'static str, i32, Vec<String>) {
    let (kind, tuples): (_, Vec<&[BoundValue]>) = match bound {
        PartitionBound::In(tuples) => ("in", tuples.iter().map(Vec::as_slice).collect()),
        PartitionBound::LessThan(values) => ("less_than", vec![values.as_slice()]),
    };
    let width = tuples.first().map_or(0, |t| t.len()) as i32;
    let values = tuples
        .iter()
        .flat_map(|t| t.iter())
        .map(|v| match v {
            BoundValue::Literal(s) => format!("'{}'", s.replace('\'', "''")),
            BoundValue::Null => "NULL".into(),
            BoundValue::Default => "DEFAULT".into(),
            BoundValue::MaxValue => "MAXVALUE".into(),
        })
        .collect();
    (kind, width, values)
}

/// The inverse of [`encode_bound`]; the reason when the stored text is not one it wrote.
pub(super) fn decode_bound(
    kind: &str,
    width: i32,
    values: &[String],
) -> Result<PartitionBound, String> {
    let width = usize::try_from(width)
        .ok()
        .filter(|&w| w > 0 && values.len().is_multiple_of(w) && !values.is_empty())
        .ok_or_else(|| {
            format!(
                "{} bound values do not make tuples of {width}",
                values.len()
            )
        })?;
    let values = values
        .iter()
        .map(|v| match v.as_str() {
            "NULL" => Ok(BoundValue::Null),
            "DEFAULT" => Ok(BoundValue::Default),
            "MAXVALUE" => Ok(BoundValue::MaxValue),
            quoted if quoted.len() >= 2 && quoted.starts_with('\'') && quoted.ends_with('\'') => {
                Ok(BoundValue::Literal(
                    quoted[1..quoted.len() - 1].replace("''", "'"),
                ))
            }
            other => Err(format!("bound value {other:?} is not an SQL literal")),
        })
        .collect::<Result<Vec<_>, _>>()?;
    match kind {
        "in" => Ok(PartitionBound::In(
            values.chunks(width).map(<[_]>::to_vec).collect(),
        )),
        "less_than" if values.len() == width => Ok(PartitionBound::LessThan(values)),
        other => Err(format!("bound kind {other:?} with {} values", values.len())),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn bounds_survive_storage() {
        let bounds = [
            PartitionBound::In(vec![
                vec![BoundValue::Literal("O'Hare".into()), BoundValue::Null],
                vec![
                    BoundValue::Literal("".into()),
                    BoundValue::Literal("NULL".into()),
                ],
            ]),
            PartitionBound::In(vec![vec![BoundValue::Default]]),
            PartitionBound::LessThan(vec![BoundValue::Literal("10".into()), BoundValue::MaxValue]),
        ];
        for bound in bounds {
            let (kind, width, values) = encode_bound(&bound);
            assert_eq!(decode_bound(kind, width, &values), Ok(bound));
        }
    }

    #[test]
    fn malformed_bounds_are_reported() {
        assert!(decode_bound("in", 2, &["'a'".into()]).is_err());
        assert!(decode_bound("in", 1, &["a".into()]).is_err());
        assert!(decode_bound("less_than", 1, &["'a'".into(), "'b'".into()]).is_err());
        assert!(decode_bound("between", 1, &["'a'".into()]).is_err());
    }
}
