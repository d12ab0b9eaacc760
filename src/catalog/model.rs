//! What the catalog knows, as typed values: shards, tablespace sets, tablespaces, tables with
//! their families, chunks, partition sets and user-defined partitions.
//!
//! Names (schemas, tables, columns, tablespace sets, tablespaces, partitions) are stored exactly
//! as the DDL parser folds them: unquoted names in lower case, quoted names with their case. A
//! lookup therefore compares strings exactly, as PostgreSQL compares resolved identifiers.

use crate::model::{
    ChunkMap, KeyColumn, PartitionBound, RowMovement, ShardId, ShardingMethod, TableId, TableKind,
    TableState, TablespaceSetId, Ttl,
};

/// A shard this proxy's configuration names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Shard {
    pub id: ShardId,
    pub name: String,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TablespaceSet {
    pub id: TablespaceSetId,
    pub name: String,
    /// In the order chunks are dealt out to them.
    pub shards: Vec<ShardId>,
}

/// A tablespace of user-defined sharding: one shard.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Tablespace {
    pub name: String,
    pub shard: ShardId,
}

/// A partition set of composite sharding: its bound on the partition-set key, and its own
/// chunks over its own tablespace set.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionSet {
    pub name: String,
    pub bound: PartitionBound,
    pub tablespace_set: TablespaceSetId,
    pub chunks: ChunkMap,
}

/// A partition of user-defined (list or range) sharding.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Partition {
    pub name: String,
    pub bound: PartitionBound,
    pub tablespace: String,
    /// The tablespace's shard.
    pub shard: ShardId,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Table {
    pub id: TableId,
    pub schema: String,
    pub name: String,
    pub kind: TableKind,
    /// `None` for duplicated and unsharded tables.
    pub method: Option<ShardingMethod>,
    /// The sharding key (the hash columns of composite sharding, the partitioning columns of
    /// user-defined sharding). For a family child: its own columns that map to the root's key,
    /// in the order of the root's key, so `key_columns[i]` corresponds to the root's
    /// `key_columns[i]`.
    pub key_columns: Vec<KeyColumn>,
    /// The partition-set key of composite sharding (for a family child of a composite root, its
    /// own columns that map to the root's); empty otherwise.
    pub partition_set_columns: Vec<KeyColumn>,
    /// The primary key's columns, in order; empty when it has none.
    pub primary_key: Vec<KeyColumn>,
    /// The family's root; a table that is not a child is its own root.
    pub root: TableId,
    pub parent: Option<TableId>,
    pub row_movement: RowMovement,
    pub state: TableState,
    pub tablespace_set: Option<TablespaceSetId>,
    /// Consistent-hash roots (and unsharded tables, with one chunk). Children use their
    /// root's; see [`crate::catalog::Snapshot::chunks`].
    pub chunks: ChunkMap,
    pub partition_sets: Vec<PartitionSet>,
    pub partitions: Vec<Partition>,
    /// Sharding-key columns whose values the cluster-wide sequence gives when an INSERT
    /// gives none.
    pub generated: Vec<GeneratedKey>,
    /// Made by a CREATE TABLE in the Oracle NoSQL dialect, or a child of such a table.
    pub nosql: bool,
    /// A NoSQL table's default time to live.
    pub ttl: Option<Ttl>,
}

/// A sharding-key column that generates its values (serial or identity).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedKey {
    pub column: String,
    /// `GENERATED ALWAYS`: an INSERT may not give a value.
    pub always: bool,
}

impl Table {
    pub fn is_root(&self) -> bool {
        self.parent.is_none()
    }

    /// The sharding key's columns, then the partition-set key's (composite sharding): every
    /// column whose value decides where a row lives.
    pub fn sharding_columns(&self) -> impl Iterator<Item = &KeyColumn> {
        self.key_columns.iter().chain(&self.partition_set_columns)
    }

    /// `schema.name`, for messages.
    pub fn qualified_name(&self) -> String {
        format!("{}.{}", self.schema, self.name)
    }
}

/// A table entry to record: everything of a [`Table`] the catalog does not assign itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewTable {
    pub schema: String,
    pub name: String,
    pub kind: TableKind,
    pub method: Option<ShardingMethod>,
    pub key_columns: Vec<KeyColumn>,
    pub partition_set_columns: Vec<KeyColumn>,
    pub primary_key: Vec<KeyColumn>,
    /// A family child's parent (the root is found through it).
    pub parent: Option<TableId>,
    pub row_movement: RowMovement,
    pub tablespace_set: Option<TablespaceSetId>,
    pub chunks: ChunkMap,
    pub partition_sets: Vec<PartitionSet>,
    pub partitions: Vec<NewPartition>,
    pub nosql: bool,
    pub ttl: Option<Ttl>,
}

/// A user-defined partition to record; its shard is its tablespace's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NewPartition {
    pub name: String,
    pub bound: PartitionBound,
    pub tablespace: String,
}

impl NewTable {
    /// Checks that the entry is one shardwire can route by; the reason otherwise.
    pub fn check(&self) -> Result<(), String> {
        use ShardingMethod as M;
        // Which of chunks, partition sets and partitions each kind of table records.
        let (expected, placement) = match (self.kind, self.method) {
            (TableKind::Sharded, None) => return Err("a sharded table needs a method".into()),
            (TableKind::Duplicated | TableKind::Unsharded, Some(m)) => {
                return Err(format!(
                    "a {} table has no sharding method ({m})",
                    self.kind
                ))
            }
            (TableKind::Duplicated, None) | (TableKind::Sharded, Some(M::Reference)) => {
                ((false, false, false), "no chunks or partitions of its own")
            }
            (TableKind::Unsharded, None) | (TableKind::Sharded, Some(M::ConsistentHash)) => {
                ((true, false, false), "chunks only")
            }
            (TableKind::Sharded, Some(M::CompositeList | M::CompositeRange)) => {
                ((false, true, false), "partition sets only")
            }
            (TableKind::Sharded, Some(M::List | M::Range)) => {
                ((false, false, true), "partitions only")
            }
        };
        let given = (
            !self.chunks.is_empty(),
            !self.partition_sets.is_empty(),
            !self.partitions.is_empty(),
        );
        if given != expected {
            let what = self
                .method
                .map_or(self.kind.as_str(), ShardingMethod::as_str);
            return Err(format!("a {what} table records {placement}"));
        }
        if self.kind == TableKind::Unsharded && self.chunks.len() != 1 {
            return Err("an unsharded table has exactly one chunk: its shard".into());
        }
        if (self.method == Some(M::Reference)) != self.parent.is_some() {
            return Err("a table has a parent exactly when it is partitioned by reference".into());
        }
        if self.kind == TableKind::Sharded && self.key_columns.is_empty() {
            return Err("a sharded table needs sharding key columns".into());
        }
        // A child of a composite root records the columns that hold the root's partition-set
        // key; only the store, which sees the root, can tell whether it must.
        match self.method {
            Some(M::CompositeList | M::CompositeRange) if self.partition_set_columns.is_empty() => {
                return Err("composite sharding needs partition-set key columns".into())
            }
            Some(M::Reference | M::CompositeList | M::CompositeRange) => {}
            Some(M::ConsistentHash | M::List | M::Range) | None => {
                if !self.partition_set_columns.is_empty() {
                    return Err(
                        "partition-set key columns belong to composite sharding only".into(),
                    );
                }
            }
        }
        let single_column = |cols: &[KeyColumn], what: &str| {
            if cols.len() == 1 {
                Ok(())
            } else {
                Err(format!("{what} expects a single partitioning column"))
            }
        };
        match self.method {
            Some(m @ (M::CompositeList | M::CompositeRange)) => {
                if m == M::CompositeList {
                    single_column(&self.partition_set_columns, "a list partition set")?;
                }
                for set in &self.partition_sets {
                    if set.chunks.is_empty() {
                        return Err(format!("partition set {} has no chunks", set.name));
                    }
                    if !set.bound.has_width(self.partition_set_columns.len()) {
                        return Err(format!(
                            "partition set {} needs one value per partition-set column",
                            set.name
                        ));
                    }
                }
            }
            Some(m @ (M::List | M::Range)) => {
                if m == M::List {
                    single_column(&self.key_columns, "a list partition")?;
                }
                for p in &self.partitions {
                    if !p.bound.has_width(self.key_columns.len()) {
                        return Err(format!(
                            "partition {} needs one value per partitioning column",
                            p.name
                        ));
                    }
                }
            }
            Some(M::ConsistentHash | M::Reference) | None => {}
        }
        if self.method.is_some_and(ShardingMethod::hashes_key) {
            for c in &self.key_columns {
                c.key_type()
                    .map_err(|e| format!("sharding key column {}: {e}", c.name))?;
            }
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::model::BoundValue;

    fn hashed() -> NewTable {
        NewTable {
            schema: "public".into(),
            name: "t".into(),
            kind: TableKind::Sharded,
            method: Some(ShardingMethod::ConsistentHash),
            key_columns: vec![KeyColumn::new("id", "bigint")],
            partition_set_columns: Vec::new(),
            primary_key: Vec::new(),
            parent: None,
            row_movement: RowMovement::Disabled,
            tablespace_set: None,
            chunks: vec![ShardId(0), ShardId(1)].into(),
            partition_sets: Vec::new(),
            partitions: Vec::new(),
            nosql: false,
            ttl: None,
        }
    }

    #[test]
    fn placement_must_fit_the_method() {
        assert_eq!(hashed().check(), Ok(()));
        let mut with_partition = hashed();
        with_partition.partitions.push(NewPartition {
            name: "p".into(),
            bound: PartitionBound::In(vec![vec![BoundValue::Literal("1".into())]]),
            tablespace: "tbs".into(),
        });
        assert!(with_partition.check().is_err());
        let child_with_chunks = NewTable {
            method: Some(ShardingMethod::Reference),
            parent: Some(TableId(1)),
            ..hashed()
        };
        assert!(child_with_chunks.check().is_err());
        let child = NewTable {
            chunks: Default::default(),
            ..child_with_chunks
        };
        assert_eq!(child.check(), Ok(()));
        let unsharded = NewTable {
            kind: TableKind::Unsharded,
            method: None,
            ..hashed()
        };
        assert!(unsharded.check().is_err(), "two chunks for one shard");
    }

    #[test]
    fn list_sharding_takes_one_column() {
        let list = NewTable {
            method: Some(ShardingMethod::List),
            key_columns: vec![KeyColumn::new("a", "text"), KeyColumn::new("b", "text")],
            chunks: Default::default(),
            partitions: vec![NewPartition {
                name: "p".into(),
                bound: PartitionBound::In(vec![vec![
                    BoundValue::Literal("x".into()),
                    BoundValue::Literal("y".into()),
                ]]),
                tablespace: "tbs".into(),
            }],
            ..hashed()
        };
        assert!(list
            .check()
            .unwrap_err()
            .contains("single partitioning column"));
    }
}
