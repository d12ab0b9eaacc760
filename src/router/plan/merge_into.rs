//! MERGE into a sharded table. Each shard holds some of the target's rows, so a MERGE runs
//! right on a shard only when that shard sees exactly the source rows that belong to it:
//! - a source of the target's own family joined on the whole sharding key: each shard merges
//!   its own rows (every shard of the family, one distributed transaction);
//! - a VALUES list whose key columns the join names: each row goes to the shard of its key, as
//!   an INSERT's VALUES rows do;
//! - any source on every shard (a duplicated table, a constant subquery) when no row is
//!   inserted: each shard updates or deletes its own matched rows.
//!
//! Anything else is refused: a MERGE that would insert rows of other shards, join a sharded
//! source across shards, or change a row's sharding key (which would move it).

use super::conditions::{column_fields, conjuncts, op_name, operand};
use super::scope::{resolve, Scope};
use super::{
    unsupported, KeyTuple, Keys, Merge, Operand, Plan, ShardAnswers, ShardedPlan, StatementKind,
};
use crate::catalog::{Table, TableKind};
use pg_query::protobuf::{MergeStmt, MergeWhenClause, Node};
use pg_query::NodeEnum;
use std::sync::Arc;

/// Plans `MERGE INTO target USING source ON … WHEN …` whose target is a recorded table.
pub(super) fn plan_merge(m: &MergeStmt, target: &Table, snapshot: &Scope) -> Plan {
    let refuse = |why: &str| {
        unsupported(format!(
            "MERGE into table \"{}\" {why}",
            target.qualified_name()
        ))
    };
    if target.kind != TableKind::Sharded {
        return refuse(
            "is not supported: it is duplicated, and a MERGE on each copy could decide \
             differently; use INSERT … ON CONFLICT, UPDATE or DELETE",
        );
    }
    let target_alias = m
        .relation
        .as_ref()
        .and_then(|r| r.alias.as_ref())
        .map_or(target.name.as_str(), |a| a.aliasname.as_str());
    let clauses: Vec<&MergeWhenClause> = m
        .merge_when_clauses
        .iter()
        .filter_map(|c| match c.node.as_ref() {
            Some(NodeEnum::MergeWhenClause(w)) => Some(w.as_ref()),
            _ => None,
        })
        .collect();
    let key_names: Vec<&str> = target.sharding_columns().map(|c| c.name.as_str()).collect();
    if clauses.iter().any(|c| updates_key(c, &key_names)) {
        return refuse(
            "would change a row's sharding key, which moves the row to another shard: \
             update the key with UPDATE (row movement)",
        );
    }
    let Some(source) = m.source_relation.as_deref().and_then(|s| s.node.as_ref()) else {
        return refuse("has no source");
    };
    let source_alias = source_alias(source);
    // Target key column → the source column it is joined to.
    let joined = m
        .join_condition
        .as_deref()
        .map(|c| key_equalities(c, target_alias, &source_alias, &key_names))
        .unwrap_or_default();
    let joined_key: Option<Vec<&str>> = key_names
        .iter()
        .map(|k| joined.iter().find(|(t, _)| t == k).map(|(_, s)| s.as_str()))
        .collect();
    let inserts = clauses.iter().any(|c| is_insert(c));
    if inserts {
        let Some(source_key) = &joined_key else {
            return refuse(
                "inserts rows, and its join condition does not equate every sharding-key \
                 column with a source column: write ON target.key = source.key",
            );
        };
        if !clauses
            .iter()
            .filter(|c| is_insert(c))
            .all(|c| inserts_source_key(c, &key_names, source_key, &source_alias))
        {
            return refuse(
                "inserts rows whose sharding key is not the source column it is joined to: \
                 insert the source's key column as the target's key",
            );
        }
    }
    match source_keys(source, target, snapshot, joined_key.as_deref(), inserts) {
        Ok(keys) => Plan::Sharded(Arc::new(ShardedPlan {
            table: target.id,
            kind: StatementKind::Merge,
            keys,
            shards: snapshot.shards_of(target.id),
            merge: Merge::default(),
            multi_shard_refusal: None,
            answers: ShardAnswers::Disjoint,
            returning: false,
            generated: None,
            insert_select: None,
            key_update: None,
            combine: None,
            aggregate: None,
        })),
        Err(why) => refuse(why),
    }
}

/// Which rows of the target the source's rows can meet, by the kind of source: `Err` why the
/// MERGE cannot run on the shards. `joined_key`: the source column joined to each target key
/// column; `inserts`: a WHEN clause inserts.
fn source_keys(
    source: &NodeEnum,
    target: &Table,
    snapshot: &Scope,
    joined_key: Option<&[&str]>,
    inserts: bool,
) -> Result<Keys, &'static str> {
    match source {
        NodeEnum::RangeVar(r) => {
            match resolve(snapshot, r) {
                Some(s) if s.kind == TableKind::Sharded => {
                    let own: Vec<&str> = s.sharding_columns().map(|c| c.name.as_str()).collect();
                    if s.root == target.root && joined_key == Some(own.as_slice()) {
                        Ok(Keys::Any)
                    } else {
                        Err("joins a sharded source that is not of its family, or not on the whole \
                         sharding key: each shard would see only some of the source's rows")
                    }
                }
                Some(_) if !inserts => Ok(Keys::Any),
                Some(_) => Err(
                    "inserts rows from a duplicated table: each shard would insert every \
                            row; use INSERT … SELECT … ON CONFLICT",
                ),
                None => Err(
                    "reads a table the catalog does not record, which is on one shard only: \
                         record it (CREATE DUPLICATED TABLE) or use VALUES",
                ),
            }
        }
        NodeEnum::RangeSubselect(sub) => {
            match values_rows(sub, joined_key, target.key_columns.len()) {
                Some(rows) => rows.map(Keys::Rows),
                None if !inserts && !reads_recorded(sub) => Ok(Keys::Any),
                None => Err(
                    "has a subquery as its source: give the rows as VALUES, or a table of \
                             the target's family joined on the sharding key",
                ),
            }
        }
        _ => Err("has a source shardwire cannot read"),
    }
}

/// The name the source's columns are qualified with.
fn source_alias(source: &NodeEnum) -> String {
    match source {
        NodeEnum::RangeVar(r) => r
            .alias
            .as_ref()
            .map_or_else(|| r.relname.clone(), |a| a.aliasname.clone()),
        NodeEnum::RangeSubselect(s) => s
            .alias
            .as_ref()
            .map(|a| a.aliasname.clone())
            .unwrap_or_default(),
        _ => String::new(),
    }
}

/// `target.k = source.c` (either way round) among the join condition's conjuncts, for the
/// target's key columns `keys`.
fn key_equalities(
    condition: &Node,
    target: &str,
    source: &str,
    keys: &[&str],
) -> Vec<(String, String)> {
    let mut parts = Vec::new();
    conjuncts(condition, &mut parts);
    let mut out = Vec::new();
    for part in parts {
        let Some(NodeEnum::AExpr(a)) = part.node.as_ref() else {
            continue;
        };
        if op_name(a) != Some("=") {
            continue;
        }
        let (Some(l), Some(r)) = (a.lexpr.as_deref(), a.rexpr.as_deref()) else {
            continue;
        };
        for (t, s) in [(l, r), (r, l)] {
            let (Some(t), Some(s)) = (qualified(t), qualified(s)) else {
                continue;
            };
            if t.0 == target && s.0 == source && keys.contains(&t.1.as_str()) {
                out.push((t.1, s.1));
            }
        }
    }
    out
}

/// A column reference `q.c` as (q, c).
fn qualified(node: &Node) -> Option<(String, String)> {
    let names: Vec<&str> = column_fields(node)?
        .iter()
        .map(|f| match f.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match names.as_slice() {
        [q, c] => Some((q.to_string(), c.to_string())),
        _ => None,
    }
}

fn is_insert(c: &MergeWhenClause) -> bool {
    c.command_type == pg_query::protobuf::CmdType::CmdInsert as i32
}

/// A WHEN MATCHED THEN UPDATE SET of a sharding-key column.
fn updates_key(c: &MergeWhenClause, keys: &[&str]) -> bool {
    c.command_type == pg_query::protobuf::CmdType::CmdUpdate as i32
        && c.target_list.iter().any(|t| {
            matches!(t.node.as_ref(), Some(NodeEnum::ResTarget(r)) if keys.contains(&r.name.as_str()))
        })
}

/// The INSERT gives each key column the source column it is joined to.
fn inserts_source_key(
    c: &MergeWhenClause,
    keys: &[&str],
    source_key: &[&str],
    source: &str,
) -> bool {
    if c.target_list.is_empty() {
        // INSERT VALUES (…) in the target's column order: not known here.
        return false;
    }
    keys.iter().zip(source_key).all(|(k, s)| {
        let position = c
            .target_list
            .iter()
            .position(|t| matches!(t.node.as_ref(), Some(NodeEnum::ResTarget(r)) if r.name == *k));
        position.and_then(|p| c.values.get(p)).is_some_and(|v| {
            qualified(v).is_some_and(|(q, col)| q == source && col == *s)
                || column_fields(v).is_some_and(|f| {
                    f.len() == 1
                        && matches!(f[0].node.as_ref(), Some(NodeEnum::String(n)) if n.sval == *s)
                })
        })
    })
}

/// `(VALUES …) AS s(c1, c2, …)`: each row's key, from the columns the join names. `None` when
/// the subquery is not a VALUES list with column names.
fn values_rows(
    sub: &pg_query::protobuf::RangeSubselect,
    source_key: Option<&[&str]>,
    root_key: usize,
) -> Option<Result<Vec<KeyTuple>, &'static str>> {
    let Some(NodeEnum::SelectStmt(select)) = sub.subquery.as_deref().and_then(|q| q.node.as_ref())
    else {
        return None;
    };
    if select.values_lists.is_empty() {
        return None;
    }
    let names: Vec<String> = sub
        .alias
        .as_ref()?
        .colnames
        .iter()
        .filter_map(|n| match n.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.clone()),
            _ => None,
        })
        .collect();
    let Some(source_key) = source_key else {
        return Some(Err(
            "has a VALUES source not joined on every sharding-key column: write ON \
             target.key = source.key",
        ));
    };
    let positions: Option<Vec<usize>> = source_key
        .iter()
        .map(|k| names.iter().position(|n| n == k))
        .collect();
    let Some(positions) = positions else {
        return Some(Err(
            "joins a VALUES column shardwire cannot find: name the VALUES columns (AS s(a, b))",
        ));
    };
    let mut rows = Vec::with_capacity(select.values_lists.len());
    for row in &select.values_lists {
        let Some(NodeEnum::List(list)) = row.node.as_ref() else {
            return Some(Err("has a VALUES row shardwire cannot read"));
        };
        let key: Option<Vec<Operand>> = positions
            .iter()
            .map(|&p| list.items.get(p).and_then(operand))
            .collect();
        let Some(mut key) = key else {
            return Some(Err(
                "has a VALUES row whose key is not a constant or parameter: give the key as a \
                 literal",
            ));
        };
        let set_key = key.split_off(root_key.min(key.len()));
        rows.push(KeyTuple { key, set_key });
    }
    Some(Ok(rows))
}

/// Whether a subquery names any table (it may be recorded; then not every shard has its rows).
fn reads_recorded(sub: &pg_query::protobuf::RangeSubselect) -> bool {
    sub.subquery
        .as_deref()
        .is_some_and(|q| !super::combine::named_tables(q).is_empty())
}
