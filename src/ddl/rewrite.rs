//! The rewrite of sharding DDL into the plain PostgreSQL each shard runs (docs/architecture.md §3),
//! as pure functions over a [`RewriteContext`] the executor fills from the catalog.
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
//! existing NoSQL table) lives in a schema named after its root, so `parent.child` means the
//! same on a shard ([`super::naming::nosql_child`]); it inherits the parent's primary-key
//! columns, which open its own primary key, and is placed with the parent.

use super::ast::{CreateTable, Ttl};
use super::error::RewriteError;
use super::layout;
use super::model::{QualifiedName, RewriteContext, ShardStatements, TableLayout};
use crate::model::{RowMovement, ShardId};

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
    let nosql_table;
    let table = match table.nosql || nosql_parent.is_some() {
        true => {
            nosql_table = table.in_nosql_table();
            &nosql_table
        }
        false => table,
    };
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
        row_movement: table.row_movement.unwrap_or(RowMovement::Disabled),
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
    if table.nosql {
        let statements = super::ttl::drop_statements(name, false);
        return Ok(table
            .shards
            .iter()
            .map(|s| (*s, statements.clone()))
            .collect());
    }
    let sql = format!("DROP TABLE {name}");
    Ok(on_shards(&table.shards, &sql))
}

/// A table whose CREATE or DROP did not finish: whatever of it is on its shards is dropped.
pub fn drop_leftovers(table: &TableLayout) -> Vec<String> {
    match table.nosql {
        true => super::ttl::drop_statements(&table.name, true),
        false => vec![format!("DROP TABLE IF EXISTS {}", table.name)],
    }
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
