//! The rewrite of sharding DDL into the plain PostgreSQL each shard runs (DESIGN.md §3), as pure
//! functions over a [`RewriteContext`] the executor fills from the catalog.
//!
//! # What each shard gets
//!
//! - **Consistent hash** (`PARTITION BY CONSISTENT HASH`, a NoSQL `SHARD(...)` key, or a sharded
//!   table's primary key): M chunks, M = `PARTITIONS n` or `chunks_per_shard` × the shards of
//!   the table's tablespace set (every shard when none is named). Chunk k lives on shard
//!   `set[k mod S]`, S the number of shards in the set, in the set's order. Every shard that owns
//!   a chunk gets `CREATE TABLE t (…) PARTITION BY HASH (key…)` and one
//!   `CREATE TABLE t_c<k> PARTITION OF t FOR VALUES WITH (MODULUS M, REMAINDER k)` per chunk it
//!   owns (a shard of the set that owns no chunk, when n < S, gets nothing).
//! - **User-defined list / range**: the partitioned table on the shards its partitions'
//!   tablespaces are on, each with only the partitions whose `TABLESPACE` maps to it, each named
//!   `t_<partition>`. Oracle's `VALUES LESS THAN (x)` becomes
//!   `FROM (previous bound, or MINVALUE…) TO (x)`; a MAXVALUE makes every later column MAXVALUE,
//!   as PostgreSQL requires and as Oracle compares. A list value `DEFAULT` is the default
//!   partition.
//! - **Composite**: the table on every shard that owns a chunk of one of its partition sets,
//!   `PARTITION BY LIST|RANGE` on the partition-set key; each partition set is a partition
//!   `t_<set>` on the shards of its tablespace set that own at least one of its chunks, itself `PARTITION BY HASH` on the sharding key with its own
//!   chunks `t_<set>_c<k>` (its own M, counted from its own set's shards, spread as above). A primary key or unique constraint that lacks a
//!   partition-set column is declared on every `t_<set>` (named `<constraint>_<set>`) instead of
//!   on `t`, so it holds per partition set: PostgreSQL requires a constraint on a partitioned
//!   table to contain that level's partition columns, while Oracle requires only the sharding key.
//! - **Family children** (`PARTITION BY REFERENCE (fk)`, `PARENT p`, Oracle NoSQL `p.child`):
//!   partitioned exactly like the root (same method, M, chunk → shard map, partitions) on the
//!   child's columns that map to the root's partitioning columns, and kept on the root's shards,
//!   so the foreign key is enforced by each shard locally.
//! - **Duplicated**: the whole table on every shard. **Unsharded** (plain `CREATE TABLE`): the
//!   first shard only. A `TABLESPACE` clause on either is checked to exist and otherwise ignored.
//!
//! A table is created on exactly the shards the catalog will say hold it
//! (`Snapshot::shards_of`, derived from its chunks and partitions), since DROP, ALTER and
//! CREATE INDEX go to those: a copy anywhere else would outlive its DROP.
//!
//! Partition relation names are `<table>_<suffix>`; a name over PostgreSQL's 63 bytes keeps the
//! suffix and shortens the table part, adding 8 hex digits of a hash of the full table name so two
//! long names cannot collide.
//!
//! An Oracle NoSQL child `CREATE TABLE parent.child (…)` (a plain CREATE whose qualifier names an
//! existing table of the default schema) lives in a schema named after the parent, so
//! `parent.child` means the same on a shard; it inherits the parent's primary-key columns, which
//! open its own primary key, and is placed with the parent.

use std::collections::BTreeMap;
use std::fmt;

use super::ast::{CreateTable, PartitionBound, RowMovement, SetMethod, Ttl};
use super::layout;
pub use super::rules::RewriteError;
use super::types::TypeOptions;
use crate::model::ShardId;

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
            super::render::quote_ident(&self.schema),
            super::render::quote_ident(&self.name)
        )
    }
}

/// How a table is spread over the shards.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum DistributionKind {
    Sharded,
    /// A full copy on every shard.
    Duplicated,
    /// On the first shard only.
    Unsharded,
}

impl fmt::Display for DistributionKind {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.write_str(match self {
            DistributionKind::Sharded => "sharded",
            DistributionKind::Duplicated => "duplicated",
            DistributionKind::Unsharded => "unsharded",
        })
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardingMethod {
    ConsistentHash,
    /// User-defined `PARTITION BY LIST`.
    List,
    /// User-defined `PARTITION BY RANGE`.
    Range,
    /// `PARTITIONSET BY LIST|RANGE … PARTITION BY CONSISTENT HASH`.
    Composite(SetMethod),
}

/// A key column and its PostgreSQL type name (as `PgType` prints it, e.g. `numeric(10,2)`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumn {
    pub name: String,
    pub pg_type: String,
}

/// Chunk k of a hash-partitioned table (or partition set) lives on `self.0[k]`; the modulus is
/// the number of chunks.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ChunkMap(pub Vec<ShardId>);

impl ChunkMap {
    /// M chunks spread over `shards` round-robin: chunk k → `shards[k mod S]`.
    pub fn spread(modulus: u32, shards: &[ShardId]) -> ChunkMap {
        ChunkMap(
            (0..modulus as usize)
                .map(|k| shards[k % shards.len()])
                .collect(),
        )
    }

    pub fn modulus(&self) -> u32 {
        self.0.len() as u32
    }

    /// The chunks `shard` owns, ascending.
    pub fn chunks_on(&self, shard: ShardId) -> impl Iterator<Item = u32> + '_ {
        (0u32..)
            .zip(&self.0)
            .filter(move |(_, s)| **s == shard)
            .map(|(k, _)| k)
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
    pub kind: DistributionKind,
    /// `None` for duplicated and unsharded tables.
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

/// The result of rewriting a CREATE statement.
#[derive(Debug, Clone, PartialEq)]
pub struct TablePlan {
    pub layout: TableLayout,
    /// Oracle's default is DISABLE.
    pub row_movement: RowMovement,
    pub ttl: Option<Ttl>,
    pub per_shard: ShardStatements,
}

#[derive(Debug, Clone, PartialEq)]
pub enum CreateOutcome {
    Create(Box<TablePlan>),
    /// `IF NOT EXISTS` and the table exists: nothing to run (PostgreSQL answers with the notice
    /// `relation "…" already exists, skipping`).
    AlreadyExists(QualifiedName),
}

/// Checks every rule, then plans the table. Nothing is produced when a rule fails.
pub fn rewrite_create(
    ctx: &RewriteContext,
    table: &CreateTable,
) -> Result<CreateOutcome, RewriteError> {
    let table = &table.with_type_options(ctx.types);
    let (name, nosql_parent) = layout::table_name(ctx, table)?;
    if ctx.table(&name).is_some() {
        return if table.if_not_exists {
            Ok(CreateOutcome::AlreadyExists(name))
        } else {
            Err(RewriteError::TableExists {
                table: name.to_string(),
            })
        };
    }
    let resolved = layout::resolve(ctx, table, name, nosql_parent)?;
    super::rules::check(ctx, &resolved)?;
    let per_shard = super::render::create_statements(&resolved);
    Ok(CreateOutcome::Create(Box::new(TablePlan {
        layout: resolved.layout,
        row_movement: table.row_movement.unwrap_or(RowMovement::Disable),
        ttl: table.ttl,
        per_shard,
    })))
}

/// `DROP TABLE` of a sharded, duplicated or unsharded table: run on every shard that holds it.
/// A family's parent cannot be dropped while it has children.
pub fn drop_table(
    ctx: &RewriteContext,
    name: &QualifiedName,
) -> Result<ShardStatements, RewriteError> {
    let table = ctx
        .table(name)
        .ok_or_else(|| RewriteError::UndefinedTable {
            table: name.to_string(),
        })?;
    let children: Vec<String> = ctx
        .tables
        .values()
        .filter(|t| t.family.as_ref().is_some_and(|f| &f.parent == name))
        .map(|t| t.name.to_string())
        .collect();
    if !children.is_empty() {
        return Err(RewriteError::ParentHasChildren {
            table: name.to_string(),
            children,
        });
    }
    let sql = format!("DROP TABLE {name}");
    Ok(on_shards(&table.shards, &sql))
}

/// `CREATE INDEX` (or any statement that must reach every copy of a table, such as `ALTER
/// TABLE`), unchanged, on every shard that holds `table`. PostgreSQL cascades an index on a
/// partitioned table to its partitions.
pub fn passthrough(table: &TableLayout, sql: &str) -> ShardStatements {
    on_shards(&table.shards, sql)
}

fn on_shards(shards: &[ShardId], sql: &str) -> ShardStatements {
    shards.iter().map(|s| (*s, vec![sql.to_owned()])).collect()
}

#[cfg(test)]
#[path = "rewrite_tests.rs"]
mod tests;
