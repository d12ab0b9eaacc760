//! Which shard holds a row, from its sharding-key values: the chunk of a consistent-hash
//! family, the partition of list and range sharding, the partition set and then the chunk of
//! composite sharding (DESIGN.md §3).

use std::cmp::Ordering;

use super::hash::{self, Comparable, HashError, KeyType, KeyValue};
use crate::catalog::{
    BoundValue, KeyColumn, PartitionBound, ShardId, ShardingMethod, Snapshot, Table, TableKind,
};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("{0}")]
    Hash(#[from] HashError),
    /// No partition takes the value, as PostgreSQL says of such a row.
    #[error("no partition of relation \"{table}\" found for row")]
    NoPartition { table: String },
    /// The proxy cannot tell the partition itself.
    #[error("cannot tell which partition of \"{table}\" takes the value: {reason}")]
    Undecidable { table: String, reason: String },
}

/// The shard holding the row of `table` whose sharding key is `key` (in the order of the
/// family root's key columns) and, for composite sharding, whose partition-set key is
/// `set_key`. Unsharded and duplicated tables have no key: their first shard.
pub fn shard_for(
    snapshot: &Snapshot,
    table: &Table,
    key: &[KeyValue<'_>],
    set_key: &[KeyValue<'_>],
) -> Result<ShardId, PlaceError> {
    let root = snapshot.root_of(table.id).unwrap_or(table);
    let name = || root.qualified_name();
    match (root.kind, root.method) {
        (TableKind::Duplicated | TableKind::Unsharded, _) | (TableKind::Sharded, None) => {
            Ok(snapshot
                .shards_of(table.id)
                .first()
                .copied()
                .unwrap_or(ShardId(0)))
        }
        (TableKind::Sharded, Some(method)) => match method {
            ShardingMethod::ConsistentHash | ShardingMethod::Reference => {
                chunk_shard(&root.key_columns, key, &root.chunks)
            }
            ShardingMethod::CompositeList | ShardingMethod::CompositeRange => {
                let bounds: Vec<&PartitionBound> =
                    root.partition_sets.iter().map(|s| &s.bound).collect();
                let set = find_partition(&root.partition_set_columns, set_key, &bounds)
                    .map_err(|e| e.naming(name()))?;
                chunk_shard(&root.key_columns, key, &root.partition_sets[set].chunks)
            }
            ShardingMethod::List | ShardingMethod::Range => {
                let bounds: Vec<&PartitionBound> =
                    root.partitions.iter().map(|p| &p.bound).collect();
                let p = find_partition(&root.key_columns, key, &bounds)
                    .map_err(|e| e.naming(name()))?;
                Ok(root.partitions[p].shard)
            }
        },
    }
}

fn chunk_shard(
    columns: &[KeyColumn],
    key: &[KeyValue<'_>],
    chunks: &[ShardId],
) -> Result<ShardId, PlaceError> {
    let typed: Vec<(KeyType, KeyValue<'_>)> = columns
        .iter()
        .zip(key)
        .map(|(c, v)| Ok((c.key_type()?, *v)))
        .collect::<Result<_, HashError>>()?;
    let h = hash::partition_hash(&typed)?;
    let chunk = hash::remainder(h, chunks.len().max(1) as u64) as usize;
    Ok(chunks.get(chunk).copied().unwrap_or(ShardId(0)))
}

/// Why no partition could be picked, before the table's name is known.
enum Miss {
    None,
    Undecidable(String),
    Hash(HashError),
}

impl Miss {
    fn naming(self, table: String) -> PlaceError {
        match self {
            Miss::None => PlaceError::NoPartition { table },
            Miss::Undecidable(reason) => PlaceError::Undecidable { table, reason },
            Miss::Hash(e) => PlaceError::Hash(e),
        }
    }
}

/// The index of the list or range partition (or partition set) that takes `values`.
fn find_partition(
    columns: &[KeyColumn],
    values: &[KeyValue<'_>],
    bounds: &[&PartitionBound],
) -> Result<usize, Miss> {
    let types: Vec<KeyType> = columns
        .iter()
        .map(|c| c.key_type().map_err(Miss::Hash))
        .collect::<Result<_, _>>()?;
    let given: Vec<Option<Comparable>> = types
        .iter()
        .zip(values)
        .map(|(ty, v)| hash::comparable(*ty, v))
        .collect::<Result<_, _>>()
        .map_err(|e| {
            if e.needs_server() {
                Miss::Undecidable(e.to_string())
            } else {
                Miss::Hash(e)
            }
        })?;
    let bound_value = |ty: KeyType, b: &BoundValue| -> Result<Option<Comparable>, Miss> {
        match b {
            BoundValue::Literal(s) => hash::comparable(ty, &KeyValue::Text(s))
                .map_err(|e| Miss::Undecidable(e.to_string())),
            BoundValue::Null | BoundValue::Default | BoundValue::MaxValue => Ok(None),
        }
    };
    let mut default = None;
    for (i, bound) in bounds.iter().enumerate() {
        match bound {
            PartitionBound::In(tuples) => {
                for tuple in tuples {
                    if tuple.contains(&BoundValue::Default) {
                        default = Some(i);
                        continue;
                    }
                    let mut all = true;
                    for ((ty, b), v) in types.iter().zip(tuple).zip(&given) {
                        let b = bound_value(*ty, b)?;
                        if b != *v {
                            all = false;
                            break;
                        }
                    }
                    if all {
                        return Ok(i);
                    }
                }
            }
            PartitionBound::LessThan(upper) => {
                // Partitions are in bound order: the first whose upper bound lies above the
                // value takes it. Range keys never hold NULL.
                if given.iter().any(Option::is_none) {
                    return Err(Miss::None);
                }
                if below(&types, &given, upper, bound_value)? {
                    return Ok(i);
                }
            }
        }
    }
    default.ok_or(Miss::None)
}

/// Whether the tuple `given` sorts before the exclusive upper bound `upper`.
fn below(
    types: &[KeyType],
    given: &[Option<Comparable>],
    upper: &[BoundValue],
    bound_value: impl Fn(KeyType, &BoundValue) -> Result<Option<Comparable>, Miss>,
) -> Result<bool, Miss> {
    for ((ty, v), b) in types.iter().zip(given).zip(upper) {
        if *b == BoundValue::MaxValue {
            return Ok(true);
        }
        let (Some(v), Some(b)) = (v, bound_value(*ty, b)?) else {
            return Err(Miss::Undecidable("a bound without a value".into()));
        };
        match v.order(&b) {
            Some(Ordering::Less) => return Ok(true),
            Some(Ordering::Greater) => return Ok(false),
            Some(Ordering::Equal) => {}
            None => {
                return Err(Miss::Undecidable(
                    "string order depends on the collation".into(),
                ))
            }
        }
    }
    // Equal to the bound on every column: the bound is exclusive.
    Ok(false)
}
