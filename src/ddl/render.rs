//! SQL text for the shards: quoting, partition bounds and the CREATE statements of a settled
//! [`Resolved`] table.

use std::fmt::Write;

use super::ast::*;
use super::error::RewriteError;
use super::model::*;
use super::naming::{chunk_suffix, partition_relation};
use super::ttl;
use crate::model::{KeyColumn, ShardId, ShardingMethod};

pub use crate::sql::quote::{quote_ident, quote_literal};

fn quote_list<'a>(names: impl IntoIterator<Item = &'a str>) -> String {
    names
        .into_iter()
        .map(quote_ident)
        .collect::<Vec<_>>()
        .join(", ")
}

fn invalid(partition: &str, reason: &'static str) -> RewriteError {
    RewriteError::InvalidBound {
        partition: partition.to_owned(),
        reason,
    }
}

fn value_sql(partition: &str, value: &Value) -> Result<String, RewriteError> {
    Ok(match value {
        Value::String(s) => quote_literal(s),
        Value::Number(n) => {
            let numeric = n
                .chars()
                .all(|c| c.is_ascii_digit() || matches!(c, '.' | 'e' | 'E' | '+' | '-'));
            if !numeric {
                return Err(invalid(partition, "a bound value is not a number"));
            }
            n.clone()
        }
        Value::Null => "NULL".to_owned(),
        Value::MaxValue => "MAXVALUE".to_owned(),
        Value::Typed { type_name, value } => {
            let plain = type_name
                .chars()
                .all(|c| c.is_ascii_alphanumeric() || c == '_' || c == ' ');
            if !plain {
                return Err(invalid(partition, "a typed literal names an unknown type"));
            }
            format!("{type_name} {}", quote_literal(value))
        }
        Value::Default => {
            return Err(invalid(
                partition,
                "DEFAULT can only stand alone in a list bound: VALUES (DEFAULT)",
            ))
        }
    })
}

/// Oracle compares a tuple with MAXVALUE as smaller before the first MAXVALUE; PostgreSQL
/// requires every column after a MAXVALUE to be MAXVALUE too, which means the same.
fn range_tuple(partition: &str, values: &[Value]) -> Result<String, RewriteError> {
    let mut out = Vec::with_capacity(values.len());
    let mut saturated = false;
    for v in values {
        saturated |= *v == Value::MaxValue;
        out.push(match v {
            _ if saturated => "MAXVALUE".to_owned(),
            Value::Null => return Err(invalid(partition, "a range bound cannot be NULL")),
            v => value_sql(partition, v)?,
        });
    }
    Ok(out.join(", "))
}

/// The PostgreSQL bound of a list or range partition; `previous` is the bound of the partition
/// declared before it (Oracle's `LESS THAN` bounds are upper bounds, in ascending order).
pub fn bound_sql(
    method: SetMethod,
    partition: &str,
    bound: &PartitionBound,
    previous: Option<&PartitionBound>,
) -> Result<String, RewriteError> {
    match (method, bound) {
        (SetMethod::List, PartitionBound::In(tuples)) => {
            if tuples.iter().flatten().any(|v| *v == Value::Default) {
                return match tuples.as_slice() {
                    [only] if only.as_slice() == [Value::Default] => Ok("DEFAULT".to_owned()),
                    _ => Err(invalid(
                        partition,
                        "DEFAULT must be the partition's only value",
                    )),
                };
            }
            let mut values = Vec::new();
            for v in tuples.iter().flatten() {
                if *v == Value::MaxValue {
                    return Err(invalid(partition, "MAXVALUE belongs in a range bound"));
                }
                values.push(value_sql(partition, v)?);
            }
            Ok(format!("FOR VALUES IN ({})", values.join(", ")))
        }
        (SetMethod::Range, PartitionBound::LessThan(upper)) => {
            let lower = match previous {
                Some(PartitionBound::LessThan(prev)) => range_tuple(partition, prev)?,
                _ => vec!["MINVALUE"; upper.len()].join(", "),
            };
            Ok(format!(
                "FOR VALUES FROM ({lower}) TO ({})",
                range_tuple(partition, upper)?
            ))
        }
        (SetMethod::List, PartitionBound::LessThan(_)) => Err(invalid(
            partition,
            "VALUES LESS THAN needs RANGE partitioning; a list partition takes VALUES (...)",
        )),
        (SetMethod::Range, PartitionBound::In(_)) => Err(invalid(
            partition,
            "a range partition takes VALUES LESS THAN (...)",
        )),
    }
}

fn action_sql(action: ReferentialAction) -> &'static str {
    match action {
        ReferentialAction::Cascade => "CASCADE",
        ReferentialAction::SetNull => "SET NULL",
        ReferentialAction::SetDefault => "SET DEFAULT",
        ReferentialAction::Restrict => "RESTRICT",
        ReferentialAction::NoAction => "NO ACTION",
    }
}

fn constraint_prefix(name: Option<&Ident>) -> String {
    name.map_or_else(String::new, |n| {
        format!("CONSTRAINT {} ", quote_ident(&n.value))
    })
}

fn column_sql(column: &ColumnDef) -> String {
    let mut sql = format!(
        "{} {}",
        quote_ident(&column.name.value),
        column.data_type.pg
    );
    for c in &column.constraints {
        sql.push(' ');
        sql.push_str(&constraint_prefix(c.name.as_ref()));
        match &c.body {
            ColumnConstraintBody::NotNull => sql.push_str("NOT NULL"),
            ColumnConstraintBody::Null => sql.push_str("NULL"),
            ColumnConstraintBody::Default(e) => {
                let _ = write!(sql, "DEFAULT {e}");
            }
            ColumnConstraintBody::Check(e) => {
                let _ = write!(sql, "CHECK ({e})");
            }
            // The proxy hands sharding-key values out of a cluster-wide sequence and sends
            // them explicitly, which an ALWAYS identity would refuse on the shard; the proxy
            // refuses explicit values of an ALWAYS column itself.
            ColumnConstraintBody::Identity { options, .. } => {
                sql.push_str("GENERATED BY DEFAULT AS IDENTITY");
                if let Some(o) = options {
                    let _ = write!(sql, " ({o})");
                }
            }
        }
    }
    for check in column.data_type.pg.checks(&column.name.value) {
        let _ = write!(sql, " CHECK ({check})");
    }
    sql
}

fn foreign_key_sql(fk: &ResolvedFk<'_>) -> String {
    let mut sql = format!(
        "{}FOREIGN KEY ({}) REFERENCES {} ({})",
        constraint_prefix(fk.constraint.name.as_ref()),
        quote_list(fk.columns.iter().map(String::as_str)),
        fk.target,
        quote_list(fk.ref_columns.iter().map(String::as_str)),
    );
    if let Some(a) = fk.on_delete {
        let _ = write!(sql, " ON DELETE {}", action_sql(a));
    }
    if let Some(a) = fk.on_update {
        let _ = write!(sql, " ON UPDATE {}", action_sql(a));
    }
    sql
}

/// A unique constraint's columns, or `None` for other constraints.
fn unique_columns(resolved: &Resolved<'_>, c: &TableConstraint) -> Option<Vec<String>> {
    match &c.body {
        ConstraintBody::PrimaryKey(_) => Some(
            resolved
                .layout
                .primary_key
                .iter()
                .map(|k| k.name.clone())
                .collect(),
        ),
        ConstraintBody::Unique(cols) => Some(cols.iter().map(|i| i.value.clone()).collect()),
        _ => None,
    }
}

fn constraint_sql(resolved: &Resolved<'_>, c: &TableConstraint, name: Option<&Ident>) -> String {
    let prefix = constraint_prefix(name);
    match &c.body {
        ConstraintBody::PrimaryKey(_) | ConstraintBody::Unique(_) => {
            let cols = unique_columns(resolved, c).unwrap_or_default();
            let kind = if matches!(c.body, ConstraintBody::PrimaryKey(_)) {
                "PRIMARY KEY"
            } else {
                "UNIQUE"
            };
            format!(
                "{prefix}{kind} ({})",
                quote_list(cols.iter().map(String::as_str))
            )
        }
        ConstraintBody::Check(e) => format!("{prefix}CHECK ({e})"),
        ConstraintBody::ForeignKey { .. } => resolved
            .foreign_keys
            .iter()
            .find(|fk| std::ptr::eq(fk.constraint, c))
            .map(foreign_key_sql)
            .unwrap_or_default(),
    }
}

/// A primary key or unique constraint that PostgreSQL cannot hold on the top table of a
/// composite table because it lacks a partition-set column; it goes on each partition set.
fn per_partition_set(resolved: &Resolved<'_>, c: &TableConstraint) -> bool {
    let Some(cols) = unique_columns(resolved, c) else {
        return false;
    };
    resolved
        .layout
        .set_key
        .iter()
        .any(|k| !cols.contains(&k.name))
}

fn partition_by(kind: &str, columns: &[KeyColumn]) -> String {
    format!(
        " PARTITION BY {kind} ({})",
        quote_list(columns.iter().map(|c| c.name.as_str()))
    )
}

fn top_table_sql(resolved: &Resolved<'_>) -> String {
    let layout = &resolved.layout;
    let mut elements: Vec<String> = resolved
        .nosql_parent
        .iter()
        .flat_map(|p| &p.primary_key)
        .filter(|c| resolved.table.column(&c.name).is_none())
        .map(|c| format!("{} {}", quote_ident(&c.name), c.pg_type))
        .collect();
    elements.extend(resolved.table.columns.iter().map(column_sql));
    if layout.nosql {
        let mut expires = format!("{} timestamptz", quote_ident(ttl::EXPIRES));
        if let Some(default) = ttl::default_sql(resolved.table.ttl) {
            let _ = write!(expires, " DEFAULT {default}");
        }
        elements.push(expires);
    }
    elements.extend(
        resolved
            .table
            .constraints
            .iter()
            .filter(|c| !per_partition_set(resolved, c))
            .map(|c| constraint_sql(resolved, c, c.name.as_ref())),
    );
    let partitioning = match layout.method {
        // A layout never holds `Reference` (a child carries its root's method); were one to
        // slip through, the table would be unpartitioned and its PARTITION OF statements fail
        // on the shard, so no row is placed by a wrong method.
        None | Some(ShardingMethod::Reference) => String::new(),
        Some(ShardingMethod::ConsistentHash) => partition_by("HASH", &layout.key),
        Some(ShardingMethod::List) => partition_by("LIST", &layout.key),
        Some(ShardingMethod::CompositeList) => partition_by("LIST", &layout.set_key),
        Some(ShardingMethod::Range) => partition_by("RANGE", &layout.key),
        Some(ShardingMethod::CompositeRange) => partition_by("RANGE", &layout.set_key),
    };
    format!(
        "CREATE TABLE {} ({}){partitioning}",
        stored_name(layout),
        elements.join(", ")
    )
}

/// The relation that holds a table's rows on the shards: a NoSQL table's data table, any
/// other table itself.
fn stored_name(layout: &TableLayout) -> QualifiedName {
    match layout.nosql {
        true => ttl::data_table(&layout.name),
        false => layout.name.clone(),
    }
}

fn chunk_statements(
    out: &mut Vec<String>,
    schema: &str,
    parent: &str,
    chunks: &ChunkMap,
    shard: ShardId,
) {
    for chunk in chunks.chunks_on(shard) {
        out.push(format!(
            "CREATE TABLE {} PARTITION OF {} {}",
            QualifiedName::new(
                schema,
                partition_relation(parent, &chunk_suffix(chunk.id.0))
            ),
            QualifiedName::new(schema, parent),
            chunk.bound(),
        ));
    }
}

/// `CREATE SCHEMA IF NOT EXISTS`, after a lock on the name until the transaction ends: two
/// transactions making the same schema at once would otherwise both find it missing, and the
/// second fail on PostgreSQL's unique index when the first commits.
fn create_schema(out: &mut Vec<String>, schema: &str) {
    out.push(format!(
        "SELECT pg_catalog.pg_advisory_xact_lock(pg_catalog.hashtext({}))",
        quote_literal(&format!("shardwire.schema.{schema}"))
    ));
    out.push(format!(
        "CREATE SCHEMA IF NOT EXISTS {}",
        quote_ident(schema)
    ));
}

/// The statements each shard of the table runs, in order.
pub(super) fn create_statements(resolved: &Resolved<'_>) -> ShardStatements {
    let layout = &resolved.layout;
    let stored = stored_name(layout);
    let schema = &stored.schema;
    let top = top_table_sql(resolved);
    let primary_key: Vec<&str> = layout.primary_key.iter().map(|k| k.name.as_str()).collect();
    let set_constraints: Vec<&TableConstraint> = resolved
        .table
        .constraints
        .iter()
        .filter(|c| per_partition_set(resolved, c))
        .collect();
    let mut per_shard = ShardStatements::new();
    for &shard in &layout.shards {
        let mut out = Vec::new();
        if resolved.nosql_parent.is_some() {
            create_schema(&mut out, &layout.name.schema);
        }
        if layout.nosql {
            create_schema(&mut out, schema);
        }
        out.push(top.clone());
        if let Some(chunks) = &layout.chunks {
            chunk_statements(&mut out, schema, &layout.name.name, chunks, shard);
        }
        for p in &layout.partitions {
            let relation = QualifiedName::new(schema, &p.relation);
            match &p.placement {
                PartitionPlacement::Tablespace { shard: s, .. } if *s == shard => {
                    out.push(format!(
                        "CREATE TABLE {relation} PARTITION OF {stored} {}",
                        p.bound_sql
                    ));
                }
                PartitionPlacement::Tablespace { .. } => {}
                PartitionPlacement::TablespaceSet { chunks, .. } => {
                    if chunks.chunks_on(shard).next().is_none() {
                        continue;
                    }
                    let constraints: Vec<String> = set_constraints
                        .iter()
                        .map(|c| {
                            let name = c.name.as_ref().map(|n| Ident {
                                value: partition_relation(&n.value, &p.name),
                                ..n.clone()
                            });
                            constraint_sql(resolved, c, name.as_ref())
                        })
                        .collect();
                    let constraints = if constraints.is_empty() {
                        String::new()
                    } else {
                        format!(" ({})", constraints.join(", "))
                    };
                    out.push(format!(
                        "CREATE TABLE {relation} PARTITION OF {stored}{constraints} {}{}",
                        p.bound_sql,
                        partition_by("HASH", &layout.key)
                    ));
                    chunk_statements(&mut out, schema, &p.relation, chunks, shard);
                }
            }
        }
        if layout.nosql {
            out.extend(ttl::support_statements(&layout.name, &primary_key));
            out.extend(ttl::show_statements(&layout.name, &primary_key));
        }
        per_shard.insert(shard, out);
    }
    per_shard
}
