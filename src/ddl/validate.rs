//! The checks on a CREATE TABLE that need nothing but the statement itself. Checks that need
//! other tables (family membership, referenced keys) belong to the catalog.

use super::ast::*;
use super::error::{DdlError, KeyKind};

/// Checks `table` and settles its distribution: a sharded table without a partitioning clause
/// is sharded by its primary key, and a NoSQL `SHARD(...)` key makes a plain table sharded.
/// `partitioning_at` is where the partitioning (or PARENT) clause started.
pub(super) fn validate_create_table(
    table: &mut CreateTable,
    partitioning_at: Option<usize>,
) -> Result<(), DdlError> {
    check_columns_exist(table)?;
    if table.nosql {
        if let Some(err) = table.non_nosql_type() {
            return Err(err);
        }
        if table.primary_key().is_none() {
            return Err(DdlError::NoSqlWithoutPrimaryKey {
                position: table.name.name().position,
            });
        }
        table.kind = TableKind::Sharded;
    }
    let shard_key_at = table
        .primary_key()
        .filter(|pk| pk.shard_key_len.is_some())
        .map(|pk| pk.columns[0].position);
    let partitioned = !matches!(table.distribution, Distribution::None);
    let table_at = table.name.name().position;

    if let Some(position) = shard_key_at {
        if table.parent.is_some() || matches!(table.distribution, Distribution::Reference { .. }) {
            return Err(DdlError::ShardKeyInChild { position });
        }
        if partitioned {
            return Err(DdlError::ShardKeyWithPartitioning { position });
        }
    }

    match table.kind {
        TableKind::Duplicated | TableKind::Plain => {
            if let Some(position) = partitioning_at.or(shard_key_at) {
                let kind = if table.kind == TableKind::Plain {
                    "plain"
                } else {
                    "duplicated"
                };
                return Err(DdlError::PartitioningOnUnsharded { kind, position });
            }
        }
        TableKind::Sharded => {
            if let Distribution::Reference { constraint } = &table.distribution {
                if table.parent.is_some() {
                    return Err(DdlError::ParentAndReference {
                        position: constraint.position,
                    });
                }
                check_reference_names_foreign_key(table, constraint)?;
            }
            if !partitioned {
                if table.parent.is_some() {
                    return Err(DdlError::ParentWithoutKey {
                        position: partitioning_at.unwrap_or(table_at),
                    });
                }
                if table.primary_key().is_none() {
                    return Err(DdlError::NoShardingKey {
                        table: table.name.name().value.clone(),
                        position: table_at,
                    });
                }
                table.distribution = Distribution::PrimaryKey;
            }
        }
    }
    Ok(())
}

fn check_reference_names_foreign_key(
    table: &CreateTable,
    constraint: &Ident,
) -> Result<(), DdlError> {
    let is_fk = table
        .foreign_keys()
        .iter()
        .any(|(_, name)| *name == constraint.value);
    if is_fk {
        Ok(())
    } else {
        Err(DdlError::ReferenceNotForeignKey {
            constraint: constraint.value.clone(),
            position: constraint.position,
        })
    }
}

/// Every column a key or the partitioning names must be a column of the table.
fn check_columns_exist(table: &CreateTable) -> Result<(), DdlError> {
    let missing = |idents: &[Ident], kind: KeyKind| {
        idents
            .iter()
            .find(|i| table.column(&i.value).is_none())
            .map(|i| DdlError::UndefinedKeyColumn {
                column: i.value.clone(),
                kind,
                position: i.position,
            })
    };
    for constraint in &table.constraints {
        let columns = match &constraint.body {
            ConstraintBody::PrimaryKey(pk) => &pk.columns,
            ConstraintBody::Unique(columns) | ConstraintBody::ForeignKey { columns, .. } => columns,
            ConstraintBody::Check(_) => continue,
        };
        if let Some(err) = missing(columns, KeyKind::Constraint) {
            return Err(err);
        }
    }
    let partition_columns: Vec<&[Ident]> = match &table.distribution {
        Distribution::ConsistentHash { columns, .. } | Distribution::Range { columns, .. } => {
            vec![columns]
        }
        Distribution::Composite {
            set_columns,
            hash_columns,
            ..
        } => vec![set_columns, hash_columns],
        Distribution::List { column, .. } => vec![std::slice::from_ref(column)],
        Distribution::Reference { .. } | Distribution::PrimaryKey | Distribution::None => vec![],
    };
    for columns in partition_columns {
        if let Some(err) = missing(columns, KeyKind::Partition) {
            return Err(err);
        }
    }
    Ok(())
}
