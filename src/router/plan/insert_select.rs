//! `INSERT INTO sharded … SELECT …`: pushed down whole when the SELECT reads the same family
//! and hands each row the sharding key of the row it reads (every shard then inserts its own
//! rows); otherwise the proxy runs the SELECT and routes its rows like a multi-row INSERT.

use super::conditions::{top_level_uses, using_columns, Slots};
use super::Scope;
use crate::catalog::{ShardId, Table};
use crate::sql::deparse::deparse;
use pg_query::protobuf::{InsertStmt, Node, SelectStmt};
use pg_query::NodeEnum;
use std::sync::Arc;

use super::{
    plan_one, unsupported, ColumnSource, Keys, Merge, Plan, Planned, ShardAnswers, ShardedPlan,
    StatementKind,
};

/// An INSERT … SELECT the proxy runs in two steps.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct InsertSelect {
    /// The SELECT, as the shard (or shards) answering it run it.
    pub select_sql: String,
    /// Where the SELECT goes.
    pub source: Arc<Plan>,
    /// The position in a SELECT row of each sharding-key column of the target (its key
    /// columns, then its partition-set columns).
    pub key_positions: Vec<usize>,
    /// The INSERT, with `$1, $2, …` (one per target column) in place of the SELECT: the shards
    /// run it for batches of rows.
    pub insert_columns: Vec<String>,
    /// The INSERT's text up to its VALUES, and what follows them (ON CONFLICT, RETURNING).
    pub insert_head: String,
    pub insert_tail: String,
}

#[allow(clippy::too_many_arguments)]
pub(super) fn plan_insert_select(
    insert: &InsertStmt,
    target: &Table,
    names: &[String],
    select: &SelectStmt,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
    shards: Vec<ShardId>,
) -> Planned {
    let key_names: Vec<&str> = target.sharding_columns().map(|c| c.name.as_str()).collect();
    let mut key_positions = Vec::with_capacity(key_names.len());
    for k in &key_names {
        match names.iter().position(|n| n == k) {
            Some(p) if p < select.target_list.len() => key_positions.push(p),
            _ => {
                return Planned::Plan(unsupported(format!(
                    "INSERT … SELECT into sharded table \"{}\" must give sharding key column \
                     \"{k}\"",
                    target.qualified_name()
                )))
            }
        }
    }
    let select_node = Node {
        node: Some(NodeEnum::SelectStmt(Box::new(select.clone()))),
    };
    let source = match plan_one(&select_node, snapshot, columns) {
        Planned::Plan(p) => p,
        need => return need,
    };
    if let Plan::Refused(r) = &source {
        return Planned::Plan(Plan::Refused(r.clone()));
    }
    if let Plan::Sharded(sp) = &source {
        let same_family = snapshot.table(sp.table).map(|t| t.root) == Some(target.root);
        // A LIMIT or OFFSET counts rows over the whole table, not per shard.
        let row_by_row = select.limit_count.is_none() && select.limit_offset.is_none();
        if same_family && row_by_row && colocated(select, &key_positions, snapshot) {
            // Each shard reads and writes only its own rows.
            return Planned::Plan(Plan::Sharded(Arc::new(ShardedPlan {
                table: sp.table,
                kind: StatementKind::Insert,
                keys: sp.keys.clone(),
                shards: sp.shards.clone(),
                merge: Merge::default(),
                multi_shard_refusal: sp.multi_shard_refusal.clone(),
                answers: sp.answers,
                returning: insert.returning_clause.is_some(),
                generated: None,
                insert_select: None,
                key_update: None,
                combine: None,
                aggregate: None,
            })));
        }
        if sp.multi_shard_refusal.is_some() && sp.keys == Keys::Any {
            return Planned::Plan(Plan::Refused(super::Refusal::Unsupported(
                sp.multi_shard_refusal.clone().unwrap_or_default(),
            )));
        }
    }
    let (head, tail) = match insert_parts(insert) {
        Ok(parts) => parts,
        Err(e) => return Planned::Plan(unsupported(format!("cannot rewrite the INSERT: {e}"))),
    };
    let select_sql = match deparse_select(select) {
        Ok(s) => s,
        Err(e) => return Planned::Plan(unsupported(format!("cannot rewrite the SELECT: {e}"))),
    };
    Planned::Plan(Plan::Sharded(Arc::new(ShardedPlan {
        table: target.id,
        kind: StatementKind::Insert,
        keys: Keys::Any,
        shards,
        merge: Merge::default(),
        multi_shard_refusal: None,
        answers: ShardAnswers::Disjoint,
        returning: insert.returning_clause.is_some(),
        generated: None,
        insert_select: Some(Box::new(InsertSelect {
            select_sql,
            source: Arc::new(source),
            key_positions,
            insert_columns: names[..select.target_list.len().min(names.len())].to_vec(),
            insert_head: head,
            insert_tail: tail,
        })),
        key_update: None,
        combine: None,
        aggregate: None,
    })))
}

/// Whether the SELECT's output column at each key position is the same sharding-key column of
/// a table of the family it reads (so every row it reads on a shard belongs on that shard).
fn colocated(select: &SelectStmt, key_positions: &[usize], snapshot: &Scope) -> bool {
    let mut uses = Vec::new();
    top_level_uses(&select.from_clause, snapshot, &mut uses);
    let mut merged = Vec::new();
    using_columns(&select.from_clause, &mut merged);
    let slots = Slots {
        uses,
        root_key: 0,
        merged,
    };
    key_positions.iter().enumerate().all(|(key_index, &p)| {
        let Some(NodeEnum::ResTarget(r)) = select.target_list.get(p).and_then(|t| t.node.as_ref())
        else {
            return false;
        };
        let Some(NodeEnum::ColumnRef(c)) = r.val.as_deref().and_then(|v| v.node.as_ref()) else {
            return false;
        };
        slots
            .slot(&c.fields)
            .is_some_and(|(_, pos)| pos == key_index)
    })
}

pub(super) fn deparse_select(select: &SelectStmt) -> Result<String, String> {
    deparse(NodeEnum::SelectStmt(Box::new(select.clone())))
}

/// The INSERT's text around its rows: with a one-row `VALUES ($1)` in place of the SELECT,
/// deparsed and cut at the marker row.
fn insert_parts(insert: &InsertStmt) -> Result<(String, String), String> {
    let mut stmt = insert.clone();
    stmt.select_stmt = Some(Box::new(Node {
        node: Some(NodeEnum::SelectStmt(Box::new(SelectStmt {
            values_lists: vec![Node {
                node: Some(NodeEnum::List(pg_query::protobuf::List {
                    items: vec![Node {
                        node: Some(NodeEnum::ParamRef(pg_query::protobuf::ParamRef {
                            number: 1,
                            location: -1,
                        })),
                    }],
                })),
            }],
            limit_option: pg_query::protobuf::LimitOption::Default as i32,
            op: pg_query::protobuf::SetOperation::SetopNone as i32,
            ..Default::default()
        }))),
    }));
    let text = deparse(NodeEnum::InsertStmt(Box::new(stmt)))?;
    let marker = "VALUES ($1)";
    let at = text
        .find(marker)
        .ok_or("no VALUES in the rewritten INSERT")?;
    Ok((
        text[..at].to_string(),
        text[at + marker.len()..].to_string(),
    ))
}
