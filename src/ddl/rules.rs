//! The sharding rules of docs/architecture.md §2 that need the table's settled layout and the
//! tables it refers to, checked before any SQL is produced.
//!
//! - Primary keys and unique constraints of a sharded table contain its sharding key columns
//!   (a family child's: the columns that hold the root's key).
//! - A foreign key between sharded tables stays inside one family and covers the referenced
//!   table's partitioning columns with the columns that hold the same root columns, so both rows
//!   are always on one shard. A self-reference of a sharded table follows the same rule.
//! - No foreign key from a sharded table to an unsharded or duplicated table, from a duplicated
//!   table to a sharded or unsharded one, or from an unsharded table to a sharded one: none of
//!   them could be enforced by one shard (the last two go beyond Oracle's list for the same reason).
//! - A hash sharding key has a type the router can hash like PostgreSQL, and a family child's key
//!   columns hash like the root's (same type up to typmod; smallint, integer and bigint agree).

use super::ast::ConstraintBody;
use super::error::RewriteError;
use super::model::{Resolved, ResolvedFk, RewriteContext, TableLayout};
use crate::model::{KeyColumn, KeyType, ShardingMethod, TableKind};

/// A child's key column must place rows where the root's column does.
pub(super) fn check_key_type(child: &KeyColumn, root: &KeyColumn) -> Result<(), RewriteError> {
    let same = match (
        KeyType::from_pg_type_name(&child.pg_type),
        KeyType::from_pg_type_name(&root.pg_type),
    ) {
        (Ok(a), Ok(b)) => a.hash_class() == b.hash_class(),
        _ => child.pg_type.eq_ignore_ascii_case(&root.pg_type),
    };
    if same {
        Ok(())
    } else {
        Err(RewriteError::KeyTypeMismatch {
            column: child.name.clone(),
            column_type: child.pg_type.clone(),
            root_column: root.name.clone(),
            root_type: root.pg_type.clone(),
        })
    }
}

pub(super) fn check(ctx: &RewriteContext, resolved: &Resolved<'_>) -> Result<(), RewriteError> {
    let layout = &resolved.layout;
    if layout.kind == TableKind::Sharded {
        check_hashable(layout)?;
        check_unique_constraints(resolved)?;
    }
    for fk in &resolved.foreign_keys {
        let target = if fk.target == layout.name {
            layout
        } else {
            ctx.table(&fk.target)
                .ok_or_else(|| RewriteError::UndefinedTable {
                    table: fk.target.to_string(),
                })?
        };
        check_foreign_key(layout, fk, target)?;
    }
    Ok(())
}

fn check_foreign_key(
    layout: &TableLayout,
    fk: &ResolvedFk<'_>,
    target: &TableLayout,
) -> Result<(), RewriteError> {
    use TableKind::*;
    let constraint = fk.constraint.name.as_ref().map_or_else(
        || format!("({})", fk.columns.join(", ")),
        |n| format!("\"{}\"", n.value),
    );
    let across = || RewriteError::ReferenceAcrossKinds {
        table: layout.name.to_string(),
        kind: layout.kind,
        constraint: constraint.clone(),
        columns: fk.columns.clone(),
        target: target.name.to_string(),
        target_kind: target.kind,
    };
    match (layout.kind, target.kind) {
        (Sharded, Sharded) => {
            if layout.root() != target.root() {
                return Err(RewriteError::ForeignKeyOutsideFamily {
                    table: layout.name.to_string(),
                    constraint,
                    target: target.name.to_string(),
                });
            }
            let missing: Vec<String> = target
                .partition_columns()
                .filter(|tc| !colocated(layout, fk, target, &tc.name))
                .map(|tc| tc.name.clone())
                .collect();
            if missing.is_empty() {
                Ok(())
            } else {
                Err(RewriteError::ForeignKeyMissesKey {
                    table: layout.name.to_string(),
                    target: target.name.to_string(),
                    missing,
                })
            }
        }
        (Sharded, Duplicated | Unsharded) => Err(RewriteError::ShardedToUnshardedOrDuplicated {
            table: layout.name.to_string(),
            constraint,
            columns: fk.columns.clone(),
            target: target.name.to_string(),
            target_kind: target.kind,
        }),
        (Duplicated, Duplicated) | (Unsharded, Duplicated | Unsharded) => Ok(()),
        (Duplicated, Sharded | Unsharded) | (Unsharded, Sharded) => Err(across()),
    }
}

/// Whether the foreign key references `target_column` from a column that holds the same root
/// column, so the referencing and referenced rows always share a shard.
fn colocated(
    layout: &TableLayout,
    fk: &ResolvedFk<'_>,
    target: &TableLayout,
    target_column: &str,
) -> bool {
    let root = target.root_column(target_column);
    fk.columns
        .iter()
        .zip(&fk.ref_columns)
        .any(|(c, r)| r == target_column && root.is_some() && layout.root_column(c) == root)
}

fn check_hashable(layout: &TableLayout) -> Result<(), RewriteError> {
    let hashed = matches!(
        layout.method,
        Some(
            ShardingMethod::ConsistentHash
                | ShardingMethod::CompositeList
                | ShardingMethod::CompositeRange
        )
    );
    if !hashed || layout.family.is_some() {
        return Ok(());
    }
    for c in &layout.key {
        KeyType::from_pg_type_name(&c.pg_type).map_err(|source| RewriteError::UnhashableKey {
            column: c.name.clone(),
            source,
        })?;
    }
    Ok(())
}

fn check_unique_constraints(resolved: &Resolved<'_>) -> Result<(), RewriteError> {
    let layout = &resolved.layout;
    let key: Vec<String> = layout.key.iter().map(|c| c.name.clone()).collect();
    let mut constraints: Vec<(String, Vec<String>)> = Vec::new();
    if !layout.primary_key.is_empty() {
        let name = resolved
            .table
            .constraints
            .iter()
            .find(|c| matches!(c.body, ConstraintBody::PrimaryKey(_)))
            .and_then(|c| c.name.as_ref())
            .map_or("primary key".to_owned(), |n| {
                format!("primary key \"{}\"", n.value)
            });
        let cols = layout.primary_key.iter().map(|c| c.name.clone()).collect();
        constraints.push((name, cols));
    }
    for c in &resolved.table.constraints {
        if let ConstraintBody::Unique(cols) = &c.body {
            let name = c.name.as_ref().map_or("unique constraint".to_owned(), |n| {
                format!("unique constraint \"{}\"", n.value)
            });
            constraints.push((name, cols.iter().map(|i| i.value.clone()).collect()));
        }
    }
    for (constraint, cols) in constraints {
        let missing: Vec<String> = key.iter().filter(|k| !cols.contains(k)).cloned().collect();
        if !missing.is_empty() {
            return Err(RewriteError::KeyNotInConstraint {
                table: layout.name.to_string(),
                constraint,
                key,
                missing,
            });
        }
    }
    Ok(())
}
