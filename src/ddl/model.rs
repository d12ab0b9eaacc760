//! What the rewrite reasons about: a table's layout (kind, method, key columns, family, chunks,
//! partitions, shards), the context the catalog gives it, and a CREATE with its references
//! resolved. Pure data, below the files that settle, check and render it.

use std::collections::BTreeMap;
use std::fmt;

use super::ast::{CreateTable, PartitionBound, ReferentialAction, TableConstraint};
use super::types::TypeOptions;
pub use crate::model::ChunkMap;
use crate::model::{KeyColumn, ShardId, ShardingMethod, TableKind};
use crate::sql::quote::quote_ident;

/// A table's schema and name, as PostgreSQL stores them (already folded).
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord, Hash)]
pub struct QualifiedName {
    pub schema: String,
    pub name: String,
}

impl QualifiedName {
    pub fn new(schema: impl Into<String>, name: impl Into<String>) -> QualifiedName {
        QualifiedName {
            schema: schema.into(),
            name: name.into(),
        }
    }
}

/// Quoted, as SQL text: `"schema"."name"`.
impl fmt::Display for QualifiedName {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(
            f,
            "{}.{}",
            quote_ident(&self.schema),
            quote_ident(&self.name)
        )
    }
}

/// A user-defined partition or a composite table's partition set.
#[derive(Debug, Clone, PartialEq)]
pub struct PartitionPlan {
    /// The name the user gave it (folded).
    pub name: String,
    /// The partition's relation on the shards (in the table's schema).
    pub relation: String,
    pub bound: PartitionBound,
    /// The PostgreSQL bound as written in `PARTITION OF`: `FOR VALUES IN (…)`,
    /// `FOR VALUES FROM (…) TO (…)` or `DEFAULT`.
    pub bound_sql: String,
    pub placement: PartitionPlacement,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PartitionPlacement {
    /// A user-defined partition: its tablespace's shard.
    Tablespace { name: String, shard: ShardId },
    /// A partition set: its tablespace set's shards and its chunks.
    TablespaceSet { name: String, chunks: ChunkMap },
}

/// Where a family child sits in its family.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct FamilyLink {
    pub root: QualifiedName,
    pub parent: QualifiedName,
    /// (child column, root column) for every partitioning column of the root (partition-set key
    /// first, then sharding key), in the root's order.
    pub column_map: Vec<(String, String)>,
}

/// Everything the catalog records about a table, and what the rewrite needs to know about the
/// tables a statement refers to.
#[derive(Debug, Clone, PartialEq)]
pub struct TableLayout {
    pub name: QualifiedName,
    pub kind: TableKind,
    /// `None` for duplicated and unsharded tables. A family child has its root's method, never
    /// `Reference` (which is how the catalog stores a child): the child is partitioned exactly
    /// like its root, and this says how.
    pub method: Option<ShardingMethod>,
    /// The sharding key: hash columns, or the list/range columns of user-defined sharding. A
    /// child's are its own columns mapped to the root's key.
    pub key: Vec<KeyColumn>,
    /// The partition-set key of composite sharding; empty otherwise.
    pub set_key: Vec<KeyColumn>,
    /// The primary key's columns; a foreign key without a column list refers to them.
    pub primary_key: Vec<KeyColumn>,
    /// `None` for a family root and for unsharded and duplicated tables.
    pub family: Option<FamilyLink>,
    /// The chunks of a consistent-hash table.
    pub chunks: Option<ChunkMap>,
    /// User-defined partitions or composite partition sets, in declaration order.
    pub partitions: Vec<PartitionPlan>,
    /// The tablespace set of a consistent-hash table (`None`: every shard).
    pub tablespace_set: Option<String>,
    /// Every shard that holds the table (DDL, scans and broadcasts go here), ascending.
    pub shards: Vec<ShardId>,
    /// An Oracle NoSQL table: a `parent.child` name under it makes a child.
    pub nosql: bool,
}

impl TableLayout {
    /// The family's root: the table itself unless it is a child.
    pub fn root(&self) -> &QualifiedName {
        self.family.as_ref().map_or(&self.name, |f| &f.root)
    }

    /// The root column `column` holds, when it is one of this table's partitioning columns.
    pub fn root_column(&self, column: &str) -> Option<&str> {
        match &self.family {
            Some(f) => f
                .column_map
                .iter()
                .find(|(c, _)| c == column)
                .map(|(_, r)| r.as_str()),
            None => self
                .partition_columns()
                .find(|c| c.name == column)
                .map(|c| c.name.as_str()),
        }
    }

    /// The columns PostgreSQL partitions on, over all levels: partition-set key, then key.
    pub fn partition_columns(&self) -> impl Iterator<Item = &KeyColumn> {
        self.set_key.iter().chain(&self.key)
    }
}

/// The data the rewrite needs, as the catalog and configuration hold it.
#[derive(Debug, Clone, Default)]
pub struct RewriteContext {
    /// Shard names; `ShardId(i)` is the i-th.
    pub shards: Vec<String>,
    /// Tablespace set → its shards, in order.
    pub tablespace_sets: BTreeMap<String, Vec<ShardId>>,
    /// Tablespace → its shard.
    pub tablespaces: BTreeMap<String, ShardId>,
    /// What `PARTITIONS AUTO` means per shard.
    pub chunks_per_shard: u32,
    /// The schema an unqualified name means (the session's first `search_path` entry).
    pub default_schema: String,
    /// Existing sharded, duplicated and unsharded tables.
    pub tables: BTreeMap<QualifiedName, TableLayout>,
    /// What `DATE` means (`[ddl] oracle_date`).
    pub types: TypeOptions,
    /// Where an Oracle NoSQL table without a TABLESPACE SET clause goes
    /// (`[ddl] default_tablespace_set`); `None`: every shard.
    pub default_tablespace_set: Option<String>,
}

impl RewriteContext {
    pub fn all_shards(&self) -> Vec<ShardId> {
        (0..self.shards.len() as u32).map(ShardId).collect()
    }

    pub fn table(&self, name: &QualifiedName) -> Option<&TableLayout> {
        self.tables.get(name)
    }
}

/// Statements per shard, in the order each shard must run them.
pub type ShardStatements = BTreeMap<ShardId, Vec<String>>;

/// A foreign key with its target resolved.
#[derive(Debug)]
pub struct ResolvedFk<'a> {
    pub constraint: &'a TableConstraint,
    pub columns: Vec<String>,
    pub target: QualifiedName,
    /// The referenced columns: as written, or the target's primary key.
    pub ref_columns: Vec<String>,
    pub on_delete: Option<ReferentialAction>,
    pub on_update: Option<ReferentialAction>,
}

/// A CREATE TABLE with everything around it settled.
#[derive(Debug)]
pub struct Resolved<'a> {
    pub layout: TableLayout,
    pub table: &'a CreateTable,
    /// An Oracle NoSQL child: the parent's primary-key columns, which come first in its column
    /// list and its primary key; its schema is created if missing.
    pub nosql_parent: Option<TableLayout>,
    pub foreign_keys: Vec<ResolvedFk<'a>>,
}
