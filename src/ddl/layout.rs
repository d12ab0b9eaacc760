//! Settles where a new table lives: its name, kind, family, chunks and partitions, from the
//! statement and the [`RewriteContext`]. The rules that need the finished layout are in
//! [`super::rules`].

use super::ast::{self, *};
use super::error::RewriteError;
use super::model::*;
use super::naming::{nosql_child, partition_relation};
use super::render::bound_sql;
use super::rules;
use crate::model::{KeyColumn, ShardId, ShardingMethod, TableKind};

fn column_type(
    table: &CreateTable,
    nosql_parent: Option<&TableLayout>,
    name: &str,
) -> Option<String> {
    let inherited = nosql_parent.and_then(|p| p.primary_key.iter().find(|c| c.name == name));
    match inherited {
        Some(c) => Some(c.pg_type.clone()),
        None => table.column(name).map(|c| c.data_type.pg.to_string()),
    }
}

fn names(idents: &[Ident]) -> Vec<String> {
    idents.iter().map(|i| i.value.clone()).collect()
}

fn object_name(ctx: &RewriteContext, name: &ObjectName) -> Result<QualifiedName, RewriteError> {
    match name.parts.as_slice() {
        [table] => Ok(QualifiedName::new(&ctx.default_schema, &table.value)),
        [schema, table] => Ok(QualifiedName::new(&schema.value, &table.value)),
        _ => Err(RewriteError::UnsupportedName {
            name: name
                .parts
                .iter()
                .map(|p| p.value.as_str())
                .collect::<Vec<_>>()
                .join("."),
        }),
    }
}

/// The new table's name, and its Oracle NoSQL parent when it is written `parent.child` (or
/// deeper, see [`nosql_child`]) with `parent` an existing NoSQL table, in a plain
/// `CREATE TABLE`.
pub(super) fn table_name<'c>(
    ctx: &'c RewriteContext,
    table: &CreateTable,
) -> Result<(QualifiedName, Option<&'c TableLayout>), RewriteError> {
    let parts: Vec<&str> = table.name.parts.iter().map(|p| p.value.as_str()).collect();
    let plain = table.nosql || table.kind == ast::TableKind::Plain;
    if let (Some((parent_name, name)), true) = (nosql_child(&parts, &ctx.default_schema), plain) {
        match ctx.table(&parent_name).filter(|p| p.nosql) {
            Some(parent) => {
                let has_shard_key = table
                    .primary_key()
                    .is_some_and(|pk| pk.shard_key_len.is_some());
                if has_shard_key {
                    return Err(RewriteError::NoSqlChildShardKey {
                        table: parts.join("."),
                    });
                }
                return Ok((name, Some(parent)));
            }
            None if parts.len() > 2 => {
                return Err(RewriteError::NoSqlParentMissing {
                    table: parts.join("."),
                    parent: parts[..parts.len() - 1].join("."),
                })
            }
            None => {}
        }
    }
    Ok((object_name(ctx, &table.name)?, None))
}

pub(super) fn resolve<'a>(
    ctx: &RewriteContext,
    table: &'a CreateTable,
    name: QualifiedName,
    nosql_parent: Option<&TableLayout>,
) -> Result<Resolved<'a>, RewriteError> {
    let nosql_parent = nosql_parent.cloned();
    let own_pk = table.primary_key().map(|pk| names(&pk.columns));
    let mut pk_names: Vec<String> = nosql_parent
        .iter()
        .flat_map(|p| p.primary_key.iter().map(|c| c.name.clone()))
        .collect();
    pk_names.extend(own_pk.unwrap_or_default());
    let key_column = |n: &str| KeyColumn {
        name: n.to_owned(),
        pg_type: column_type(table, nosql_parent.as_ref(), n).unwrap_or_default(),
    };
    let primary_key: Vec<KeyColumn> = pk_names.iter().map(|n| key_column(n)).collect();

    let mut foreign_keys = Vec::new();
    for constraint in &table.constraints {
        let ConstraintBody::ForeignKey { columns, target } = &constraint.body else {
            continue;
        };
        let target_name = object_name(ctx, &target.table)?;
        // A self-reference names the table being created, which the context cannot know yet.
        let target_layout = match target_name == name {
            true => None,
            false => Some(
                ctx.table(&target_name)
                    .ok_or_else(|| RewriteError::UndefinedTable {
                        table: target_name.to_string(),
                    })?,
            ),
        };
        let ref_columns = match (target.columns.is_empty(), target_layout) {
            (false, _) => names(&target.columns),
            (true, Some(t)) => t.primary_key.iter().map(|c| c.name.clone()).collect(),
            (true, None) => pk_names.clone(),
        };
        foreign_keys.push(ResolvedFk {
            constraint,
            columns: names(columns),
            target: target_name,
            ref_columns,
            on_delete: target.on_delete,
            on_update: target.on_update,
        });
    }

    if nosql_parent.is_some() {
        if let Some(err) = table.non_nosql_type() {
            return Err(err.into());
        }
    }
    let base = TableLayout {
        nosql: table.nosql || nosql_parent.is_some(),
        name: name.clone(),
        kind: TableKind::Unsharded,
        method: None,
        key: vec![],
        set_key: vec![],
        primary_key,
        family: None,
        chunks: None,
        partitions: vec![],
        tablespace_set: None,
        shards: vec![],
    };
    let layout = if let Some(parent) = &nosql_parent {
        let pairs: Vec<(String, String)> = parent
            .primary_key
            .iter()
            .map(|c| (c.name.clone(), c.name.clone()))
            .collect();
        match parent.kind {
            TableKind::Sharded => child_layout(base, parent, &pairs, None, &key_column)?,
            kind => TableLayout {
                kind,
                shards: parent.shards.clone(),
                ..base
            },
        }
    } else {
        match table.kind {
            ast::TableKind::Duplicated => {
                check_tablespace(ctx, table.tablespace.as_ref())?;
                TableLayout {
                    kind: TableKind::Duplicated,
                    shards: ctx.all_shards(),
                    ..base
                }
            }
            ast::TableKind::Plain => {
                check_tablespace(ctx, table.tablespace.as_ref())?;
                TableLayout {
                    kind: TableKind::Unsharded,
                    shards: vec![ShardId(0)],
                    ..base
                }
            }
            ast::TableKind::Sharded => {
                sharded_layout(ctx, table, base, &foreign_keys, &key_column)?
            }
        }
    };
    Ok(Resolved {
        layout,
        table,
        nosql_parent,
        foreign_keys,
    })
}

fn check_tablespace(
    ctx: &RewriteContext,
    placement: Option<&Placement>,
) -> Result<(), RewriteError> {
    match placement {
        Some(Placement::TablespaceSet(set)) => tablespace_set(ctx, &set.value).map(drop),
        Some(Placement::Tablespace(ts)) => tablespace(ctx, &ts.value).map(drop),
        None => Ok(()),
    }
}

fn tablespace_set<'c>(ctx: &'c RewriteContext, name: &str) -> Result<&'c [ShardId], RewriteError> {
    let shards =
        ctx.tablespace_sets
            .get(name)
            .ok_or_else(|| RewriteError::UndefinedTablespaceSet {
                name: name.to_owned(),
            })?;
    if shards.is_empty() {
        return Err(RewriteError::EmptyTablespaceSet {
            name: name.to_owned(),
        });
    }
    Ok(shards)
}

fn tablespace(ctx: &RewriteContext, name: &str) -> Result<ShardId, RewriteError> {
    ctx.tablespaces
        .get(name)
        .copied()
        .ok_or_else(|| RewriteError::UndefinedTablespace {
            name: name.to_owned(),
        })
}

/// The chunks of a hash level over `shards`.
fn chunk_map(
    ctx: &RewriteContext,
    count: PartitionCount,
    shards: &[ShardId],
) -> Result<ChunkMap, RewriteError> {
    let modulus = match count {
        PartitionCount::Fixed(0) => return Err(RewriteError::ZeroPartitions),
        PartitionCount::Fixed(n) => n,
        PartitionCount::Auto => ctx.chunks_per_shard.max(1) * shards.len() as u32,
    };
    Ok(ChunkMap::spread(modulus, shards))
}

/// The shards that hold rows of a sharded table: those its chunks, partition sets' chunks and
/// partitions are on, ascending. Only these get the table: `Snapshot::shards_of` derives the
/// same set from the catalog entry, and DROP, ALTER and CREATE INDEX go there, so a shard
/// outside it would keep an empty copy that no DROP removes.
fn placed_shards(chunks: Option<&ChunkMap>, partitions: &[PartitionPlan]) -> Vec<ShardId> {
    let mut v: Vec<ShardId> = chunks
        .into_iter()
        .flat_map(|c| c.iter().copied())
        .chain(partitions.iter().flat_map(|p| match &p.placement {
            PartitionPlacement::Tablespace { shard, .. } => vec![*shard],
            PartitionPlacement::TablespaceSet { chunks, .. } => chunks.to_vec(),
        }))
        .collect();
    v.sort();
    v.dedup();
    v
}

fn sharded_layout(
    ctx: &RewriteContext,
    table: &CreateTable,
    base: TableLayout,
    foreign_keys: &[ResolvedFk<'_>],
    key_column: &dyn Fn(&str) -> KeyColumn,
) -> Result<TableLayout, RewriteError> {
    let columns = |idents: &[&Ident]| -> Vec<KeyColumn> {
        idents.iter().map(|i| key_column(&i.value)).collect()
    };
    let base = TableLayout {
        kind: TableKind::Sharded,
        ..base
    };
    if let Some(parent_name) = &table.parent {
        return declared_child_layout(ctx, table, parent_name, base, key_column);
    }
    match &table.distribution {
        Distribution::Reference { constraint } => {
            reference_layout(ctx, table, base, foreign_keys, constraint, key_column)
        }
        Distribution::ConsistentHash { partitions, .. } => {
            hash_layout(ctx, table, base, *partitions, key_column)
        }
        Distribution::PrimaryKey => hash_layout(ctx, table, base, PartitionCount::Auto, key_column),
        Distribution::List { column, partitions } => user_partitioned_layout(
            ctx,
            table,
            base,
            SetMethod::List,
            columns(&[column]),
            partitions,
        ),
        Distribution::Range {
            columns: cols,
            partitions,
        } => user_partitioned_layout(
            ctx,
            table,
            base,
            SetMethod::Range,
            columns(&cols.iter().collect::<Vec<_>>()),
            partitions,
        ),
        Distribution::Composite {
            set_method,
            set_columns,
            hash_columns,
            partitions,
            partition_sets,
        } => {
            check_tablespace(ctx, table.tablespace.as_ref())?;
            let sets =
                partition_set_plans(ctx, &base.name, *set_method, *partitions, partition_sets)?;
            Ok(TableLayout {
                method: Some(match set_method {
                    SetMethod::List => ShardingMethod::CompositeList,
                    SetMethod::Range => ShardingMethod::CompositeRange,
                }),
                key: columns(&hash_columns.iter().collect::<Vec<_>>()),
                set_key: columns(&set_columns.iter().collect::<Vec<_>>()),
                shards: placed_shards(None, &sets),
                partitions: sets,
                ..base
            })
        }
        Distribution::None => Err(RewriteError::NoShards),
    }
}

/// A child declared with `PARENT`: its own sharding key pairs up with the parent's key.
fn declared_child_layout(
    ctx: &RewriteContext,
    table: &CreateTable,
    parent_name: &ObjectName,
    base: TableLayout,
    key_column: &dyn Fn(&str) -> KeyColumn,
) -> Result<TableLayout, RewriteError> {
    let parent = parent_table(ctx, parent_name)?;
    let own: Vec<String> = table
        .sharding_key()
        .unwrap_or_default()
        .iter()
        .map(|i| i.value.clone())
        .collect();
    if !parent.set_key.is_empty() || own.len() != parent.key.len() {
        return Err(RewriteError::ParentKeyArity {
            table: base.name.to_string(),
            parent: parent.name.to_string(),
            expected: parent.partition_columns().map(|c| c.name.clone()).collect(),
        });
    }
    let pairs: Vec<(String, String)> = own
        .into_iter()
        .zip(parent.key.iter().map(|c| c.name.clone()))
        .collect();
    child_layout(base, parent, &pairs, table.tablespace.as_ref(), key_column)
}

/// `PARTITION BY REFERENCE`: a child of the table its named foreign key points at.
fn reference_layout(
    ctx: &RewriteContext,
    table: &CreateTable,
    base: TableLayout,
    foreign_keys: &[ResolvedFk<'_>],
    constraint: &Ident,
    key_column: &dyn Fn(&str) -> KeyColumn,
) -> Result<TableLayout, RewriteError> {
    let named = table.foreign_keys();
    let fk = named
        .iter()
        .find(|(_, name)| *name == constraint.value)
        .and_then(|(c, _)| {
            foreign_keys
                .iter()
                .find(|fk| std::ptr::eq(fk.constraint, *c))
        })
        .ok_or_else(|| RewriteError::UndefinedTable {
            table: constraint.value.clone(),
        })?;
    let parent = ctx
        .table(&fk.target)
        .filter(|_| fk.target != base.name)
        .ok_or_else(|| RewriteError::UndefinedTable {
            table: fk.target.to_string(),
        })?;
    let pairs: Vec<(String, String)> = fk
        .columns
        .iter()
        .cloned()
        .zip(fk.ref_columns.iter().cloned())
        .collect();
    child_layout(base, parent, &pairs, table.tablespace.as_ref(), key_column)
}

/// Consistent hash on the sharding key, with `count` chunks spread over the placement's shards.
fn hash_layout(
    ctx: &RewriteContext,
    table: &CreateTable,
    base: TableLayout,
    count: PartitionCount,
    key_column: &dyn Fn(&str) -> KeyColumn,
) -> Result<TableLayout, RewriteError> {
    let (set, shards) = hash_placement(ctx, table.tablespace.as_ref(), base.nosql)?;
    if shards.is_empty() {
        return Err(RewriteError::NoShards);
    }
    let chunks = chunk_map(ctx, count, &shards)?;
    Ok(TableLayout {
        method: Some(ShardingMethod::ConsistentHash),
        key: table
            .sharding_key()
            .unwrap_or_default()
            .iter()
            .map(|i| key_column(&i.value))
            .collect(),
        shards: placed_shards(Some(&chunks), &[]),
        chunks: Some(chunks),
        tablespace_set: set,
        ..base
    })
}

/// Its chunks' tablespace set and shards: as placed, else NoSQL's default set, else all shards.
fn hash_placement(
    ctx: &RewriteContext,
    placement: Option<&Placement>,
    nosql: bool,
) -> Result<(Option<String>, Vec<ShardId>), RewriteError> {
    Ok(match placement {
        Some(Placement::TablespaceSet(set)) => (
            Some(set.value.clone()),
            tablespace_set(ctx, &set.value)?.to_vec(),
        ),
        Some(Placement::Tablespace(ts)) => (None, vec![tablespace(ctx, &ts.value)?]),
        None => match ctx.default_tablespace_set.as_ref().filter(|_| nosql) {
            Some(set) => (Some(set.clone()), tablespace_set(ctx, set)?.to_vec()),
            None => (None, ctx.all_shards()),
        },
    })
}

/// User-defined LIST or RANGE partitions, each on the shard of its own tablespace.
fn user_partitioned_layout(
    ctx: &RewriteContext,
    table: &CreateTable,
    base: TableLayout,
    method: SetMethod,
    key: Vec<KeyColumn>,
    partitions: &[NamedPartition],
) -> Result<TableLayout, RewriteError> {
    check_tablespace(ctx, table.tablespace.as_ref())?;
    let partitions = user_partitions(ctx, &base.name, method, partitions)?;
    Ok(TableLayout {
        method: Some(match method {
            SetMethod::List => ShardingMethod::List,
            SetMethod::Range => ShardingMethod::Range,
        }),
        key,
        shards: placed_shards(None, &partitions),
        partitions,
        ..base
    })
}

/// A composite table's partition sets, each hashed into `count` chunks over its tablespace set.
fn partition_set_plans(
    ctx: &RewriteContext,
    table: &QualifiedName,
    method: SetMethod,
    count: PartitionCount,
    partition_sets: &[NamedPartition],
) -> Result<Vec<PartitionPlan>, RewriteError> {
    let mut sets = Vec::new();
    let mut previous = None;
    for set in partition_sets {
        let set_name = match &set.placement {
            Placement::TablespaceSet(s) | Placement::Tablespace(s) => &s.value,
        };
        let chunks = chunk_map(ctx, count, tablespace_set(ctx, set_name)?)?;
        sets.push(PartitionPlan {
            name: set.name.value.clone(),
            relation: partition_relation(&table.name, &set.name.value),
            bound: set.bound.clone(),
            bound_sql: bound_sql(method, &set.name.value, &set.bound, previous)?,
            placement: PartitionPlacement::TablespaceSet {
                name: set_name.clone(),
                chunks,
            },
        });
        previous = Some(&set.bound);
    }
    Ok(sets)
}

fn user_partitions(
    ctx: &RewriteContext,
    table: &QualifiedName,
    method: SetMethod,
    partitions: &[NamedPartition],
) -> Result<Vec<PartitionPlan>, RewriteError> {
    let mut out = Vec::new();
    let mut previous = None;
    for p in partitions {
        let ts = match &p.placement {
            Placement::Tablespace(t) | Placement::TablespaceSet(t) => &t.value,
        };
        out.push(PartitionPlan {
            name: p.name.value.clone(),
            relation: partition_relation(&table.name, &p.name.value),
            bound: p.bound.clone(),
            bound_sql: bound_sql(method, &p.name.value, &p.bound, previous)?,
            placement: PartitionPlacement::Tablespace {
                name: ts.clone(),
                shard: tablespace(ctx, ts)?,
            },
        });
        previous = Some(&p.bound);
    }
    Ok(out)
}

fn parent_table<'c>(
    ctx: &'c RewriteContext,
    name: &ObjectName,
) -> Result<&'c TableLayout, RewriteError> {
    let name = object_name(ctx, name)?;
    ctx.table(&name).ok_or(RewriteError::UndefinedTable {
        table: name.to_string(),
    })
}

/// A family child: partitioned like `parent` on the child columns that `pairs` (child column,
/// parent column) map to the parent's partitioning columns.
fn child_layout(
    base: TableLayout,
    parent: &TableLayout,
    pairs: &[(String, String)],
    tablespace: Option<&Placement>,
    key_column: &dyn Fn(&str) -> KeyColumn,
) -> Result<TableLayout, RewriteError> {
    if parent.kind != TableKind::Sharded {
        return Err(RewriteError::ParentNotSharded {
            table: base.name.to_string(),
            parent: parent.name.to_string(),
        });
    }
    if let Some(Placement::TablespaceSet(set)) = tablespace {
        if parent.tablespace_set.as_deref() != Some(set.value.as_str()) {
            return Err(RewriteError::ChildPlacement {
                table: base.name.to_string(),
                root: parent.root().to_string(),
                set: set.value.clone(),
            });
        }
    }
    let mut missing = Vec::new();
    let mut map_level = |level: &[KeyColumn]| -> Result<Vec<(KeyColumn, String)>, RewriteError> {
        let mut out = Vec::new();
        for pc in level {
            match pairs.iter().find(|(_, p)| *p == pc.name) {
                Some((child, _)) => {
                    let col = key_column(child);
                    rules::check_key_type(&col, pc)?;
                    let root_col = parent.root_column(&pc.name).unwrap_or(&pc.name).to_owned();
                    out.push((col, root_col));
                }
                None => missing.push(pc.name.clone()),
            }
        }
        Ok(out)
    };
    let set_key = map_level(&parent.set_key)?;
    let key = map_level(&parent.key)?;
    if !missing.is_empty() {
        return Err(RewriteError::ForeignKeyMissesKey {
            table: base.name.to_string(),
            target: parent.name.to_string(),
            missing,
        });
    }
    let column_map = set_key
        .iter()
        .chain(&key)
        .map(|(c, r)| (c.name.clone(), r.clone()))
        .collect();
    let partitions = parent
        .partitions
        .iter()
        .map(|p| PartitionPlan {
            relation: partition_relation(&base.name.name, &p.name),
            ..p.clone()
        })
        .collect();
    Ok(TableLayout {
        kind: TableKind::Sharded,
        method: parent.method,
        key: key.into_iter().map(|(c, _)| c).collect(),
        set_key: set_key.into_iter().map(|(c, _)| c).collect(),
        family: Some(FamilyLink {
            root: parent.root().clone(),
            parent: parent.name.clone(),
            column_map,
        }),
        chunks: parent.chunks.clone(),
        partitions,
        tablespace_set: parent.tablespace_set.clone(),
        shards: parent.shards.clone(),
        ..base
    })
}
