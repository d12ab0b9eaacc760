//! The catalog's stored tables ([`Table`]) and the rewrite's view of them ([`TableLayout`]),
//! both ways: the executor builds a [`RewriteContext`] from a snapshot before it rewrites a
//! CREATE, and records the rewrite's [`TablePlan`] as a [`NewTable`].
//!
//! Kind, method, key columns and row movement are the same `crate::model` types on both sides.
//! The catalog stores less than a layout holds; the rest is derived:
//! - a family child is stored with method `Reference`; its layout carries the root's method,
//!   which says how the child itself is partitioned;
//! - a family child stores only its own key columns, in the order of the root's key (and of the
//!   root's partition-set key), so its column map pairs them up by position;
//! - a child's chunks, partition sets and partitions are its root's (a child is partitioned
//!   exactly like its root), with relation names made from the child's own name;
//! - partition bounds are stored as literals; SQL text reads a quoted literal as any type, so
//!   `'10'` re-renders a bound first written `10` with the same meaning.

use std::collections::BTreeMap;

use crate::catalog::{NewPartition, NewTable, PartitionSet, Snapshot, Table};
use crate::config::Config;
use crate::ddl::ast::{self, SetMethod};
use crate::ddl::model::{
    ChunkMap, FamilyLink, PartitionPlacement, PartitionPlan, QualifiedName, RewriteContext,
    TableLayout,
};
use crate::ddl::naming::partition_relation;
use crate::ddl::render::bound_sql;
use crate::ddl::rewrite::TablePlan;

use super::ddl::ExecError;
use crate::model::{BoundValue, KeyColumn, PartitionBound, ShardingMethod, TableKind};

/// The schema an unqualified table name means in the DDL the proxy runs, whatever the session's
/// `search_path` (which the router follows for other statements): the proxy's own control
/// sessions resolve names in `public` too, so both agree.
pub const DEFAULT_SCHEMA: &str = "public";

pub fn qualified(table: &Table) -> QualifiedName {
    QualifiedName::new(&table.schema, &table.name)
}

fn mismatch(table: &Table, what: &str) -> ExecError {
    ExecError::CatalogMismatch(format!("table {}: {what}", table.qualified_name()))
}

/// What the rewrite needs: shards, tablespace sets and tablespaces, and every recorded table.
pub fn rewrite_context(snapshot: &Snapshot, config: &Config) -> Result<RewriteContext, ExecError> {
    let mut tables = BTreeMap::new();
    for table in snapshot.tables() {
        tables.insert(qualified(table), table_layout(snapshot, table)?);
    }
    Ok(RewriteContext {
        shards: snapshot.shards().iter().map(|s| s.name.clone()).collect(),
        tablespace_sets: snapshot
            .tablespace_sets()
            .iter()
            .map(|s| (s.name.clone(), s.shards.clone()))
            .collect(),
        tablespaces: snapshot
            .tablespaces()
            .iter()
            .map(|t| (t.name.clone(), t.shard))
            .collect(),
        chunks_per_shard: config.proxy.chunks_per_shard,
        default_schema: DEFAULT_SCHEMA.to_owned(),
        tables,
        types: crate::ddl::types::TypeOptions {
            oracle_date: config.ddl.oracle_date,
        },
        default_tablespace_set: config.ddl.default_tablespace_set.clone(),
    })
}

fn ast_bound(bound: &PartitionBound) -> ast::PartitionBound {
    let values = |vs: &[BoundValue]| {
        vs.iter()
            .map(|v| match v {
                BoundValue::Literal(s) => ast::Value::String(s.clone()),
                BoundValue::Null => ast::Value::Null,
                BoundValue::Default => ast::Value::Default,
                BoundValue::MaxValue => ast::Value::MaxValue,
            })
            .collect()
    };
    match bound {
        PartitionBound::In(tuples) => {
            ast::PartitionBound::In(tuples.iter().map(|t| values(t)).collect())
        }
        PartitionBound::LessThan(vs) => ast::PartitionBound::LessThan(values(vs)),
    }
}

/// The stored form of a layout's bound. Literals keep their text; whether `10` was written as a
/// number or a string is not kept, see the module comment.
fn stored_bound(bound: &ast::PartitionBound) -> PartitionBound {
    let values = |vs: &[ast::Value]| {
        vs.iter()
            .map(|v| match v {
                ast::Value::String(s) | ast::Value::Number(s) => BoundValue::Literal(s.clone()),
                ast::Value::Typed { value, .. } => BoundValue::Literal(value.clone()),
                ast::Value::Null => BoundValue::Null,
                ast::Value::Default => BoundValue::Default,
                ast::Value::MaxValue => BoundValue::MaxValue,
            })
            .collect()
    };
    match bound {
        ast::PartitionBound::In(tuples) => {
            PartitionBound::In(tuples.iter().map(|t| values(t)).collect())
        }
        ast::PartitionBound::LessThan(vs) => PartitionBound::LessThan(values(vs)),
    }
}

/// The rewrite's view of a recorded table.
pub fn table_layout(snapshot: &Snapshot, table: &Table) -> Result<TableLayout, ExecError> {
    let root = snapshot
        .root_of(table.id)
        .ok_or_else(|| mismatch(table, "its family's root is missing"))?;
    // A child is stored as `Reference`; its layout carries the root's method.
    let method = match root.method {
        Some(ShardingMethod::Reference) => return Err(mismatch(root, "a root by reference")),
        m => m,
    };
    let family = match table.parent {
        None => None,
        Some(parent) => {
            let parent = snapshot
                .table(parent)
                .ok_or_else(|| mismatch(table, "its parent is missing"))?;
            let pair = |own: &[KeyColumn], roots: &[KeyColumn]| {
                own.iter()
                    .zip(roots)
                    .map(|(c, r)| (c.name.clone(), r.name.clone()))
                    .collect::<Vec<_>>()
            };
            let mut column_map = pair(&table.partition_set_columns, &root.partition_set_columns);
            column_map.extend(pair(&table.key_columns, &root.key_columns));
            Some(FamilyLink {
                root: qualified(root),
                parent: qualified(parent),
                column_map,
            })
        }
    };
    let chunks = match (table.kind, method) {
        (TableKind::Sharded, Some(ShardingMethod::ConsistentHash)) => Some(root.chunks.clone()),
        _ => None,
    };
    let set_name = |id| {
        snapshot
            .tablespace_set(id)
            .map(|s| s.name.clone())
            .ok_or_else(|| mismatch(table, "its tablespace set is missing"))
    };
    let mut partitions = Vec::new();
    let plan = |name: &str,
                bound: &PartitionBound,
                previous: Option<&ast::PartitionBound>,
                placement: PartitionPlacement| {
        let bound = ast_bound(bound);
        let set_method = match method {
            Some(ShardingMethod::Range | ShardingMethod::CompositeRange) => SetMethod::Range,
            _ => SetMethod::List,
        };
        let bound_sql = bound_sql(set_method, name, &bound, previous)?;
        Ok::<_, ExecError>(PartitionPlan {
            name: name.to_owned(),
            relation: partition_relation(&table.name, name),
            bound,
            bound_sql,
            placement,
        })
    };
    let mut previous: Option<ast::PartitionBound> = None;
    for set in &root.partition_sets {
        let placement = PartitionPlacement::TablespaceSet {
            name: set_name(set.tablespace_set)?,
            chunks: set.chunks.clone(),
        };
        let p = plan(&set.name, &set.bound, previous.as_ref(), placement)?;
        previous = Some(p.bound.clone());
        partitions.push(p);
    }
    for part in &root.partitions {
        let placement = PartitionPlacement::Tablespace {
            name: part.tablespace.clone(),
            shard: part.shard,
        };
        let p = plan(&part.name, &part.bound, previous.as_ref(), placement)?;
        previous = Some(p.bound.clone());
        partitions.push(p);
    }
    Ok(TableLayout {
        name: qualified(table),
        kind: table.kind,
        method,
        key: table.key_columns.clone(),
        set_key: table.partition_set_columns.clone(),
        primary_key: table.primary_key.clone(),
        family,
        chunks,
        partitions,
        tablespace_set: table.tablespace_set.map(set_name).transpose()?,
        shards: snapshot.shards_of(table.id),
        nosql: table.nosql,
    })
}

/// The catalog entry that records a rewritten CREATE.
pub fn new_table(snapshot: &Snapshot, plan: &TablePlan) -> Result<NewTable, ExecError> {
    let layout = &plan.layout;
    let missing = |what: String| ExecError::CatalogMismatch(format!("{}: {what}", layout.name));
    let set_id = |name: &str| {
        snapshot
            .tablespace_set_by_name(name)
            .map(|s| s.id)
            .ok_or_else(|| missing(format!("tablespace set {name} is not in the catalog")))
    };
    let parent = match &layout.family {
        None => None,
        Some(f) => Some(
            snapshot
                .table_by_name(&f.parent.schema, &f.parent.name)
                .ok_or_else(|| missing(format!("parent {} is not in the catalog", f.parent)))?
                .id,
        ),
    };
    let method = match parent {
        Some(_) => Some(ShardingMethod::Reference),
        None => layout.method,
    };
    let kind = layout.kind;
    let chunks = match (kind, parent) {
        (TableKind::Unsharded, _) => ChunkMap::uniform(layout.shards.clone()),
        (_, Some(_)) => ChunkMap::default(),
        (_, None) => layout.chunks.clone().unwrap_or_default(),
    };
    let mut partition_sets = Vec::new();
    let mut partitions = Vec::new();
    // A child's partitions are its root's; only a root records them.
    for p in layout.partitions.iter().filter(|_| parent.is_none()) {
        match &p.placement {
            PartitionPlacement::TablespaceSet { name, chunks } => {
                partition_sets.push(PartitionSet {
                    name: p.name.clone(),
                    bound: stored_bound(&p.bound),
                    tablespace_set: set_id(name)?,
                    chunks: chunks.clone(),
                })
            }
            PartitionPlacement::Tablespace { name, .. } => partitions.push(NewPartition {
                name: p.name.clone(),
                bound: stored_bound(&p.bound),
                tablespace: name.clone(),
            }),
        }
    }
    Ok(NewTable {
        schema: layout.name.schema.clone(),
        name: layout.name.name.clone(),
        kind,
        method,
        key_columns: layout.key.clone(),
        partition_set_columns: layout.set_key.clone(),
        primary_key: layout.primary_key.clone(),
        parent,
        row_movement: plan.row_movement,
        tablespace_set: layout.tablespace_set.as_deref().map(set_id).transpose()?,
        chunks,
        partition_sets,
        partitions,
        nosql: layout.nosql,
        ttl: plan.ttl,
    })
}
