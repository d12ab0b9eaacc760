//! INSERT … VALUES: the sharding key of every row (constants, parameters, generated values).

use super::conditions::operand;
use super::scope::{resolve, Scope};
use super::{
    insert_select, sequence, unsupported, ColumnSource, GeneratedInsert, KeyTuple, Keys, Merge,
    Operand, Plan, Planned, Refusal, ShardAnswers, ShardedPlan, StatementKind,
};
use crate::catalog::{ShardId, Table, TableKind};
use pg_query::protobuf::Node;
use pg_query::NodeEnum;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// INSERT: the key of every VALUES row.

pub(super) fn plan_insert(
    i: &pg_query::protobuf::InsertStmt,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
    shards: Vec<ShardId>,
) -> Planned {
    let Some(target) = i.relation.as_ref().and_then(|r| resolve(snapshot, r)) else {
        return Planned::Plan(unsupported(
            "INSERT into a table that reads sharded tables is not supported yet",
        ));
    };
    if target.kind != TableKind::Sharded {
        return Planned::Plan(unsupported(
            "INSERT … SELECT from sharded tables into another table is not supported yet",
        ));
    }
    let Some(names) = inserted_columns(i, target, columns) else {
        return Planned::NeedColumns(target.id);
    };
    let Some(NodeEnum::SelectStmt(select)) = i.select_stmt.as_deref().and_then(|s| s.node.as_ref())
    else {
        return Planned::Plan(unsupported(format!(
            "INSERT … DEFAULT VALUES into sharded table \"{}\" is not supported yet: give the \
             sharding key",
            target.qualified_name()
        )));
    };
    if select.values_lists.is_empty() {
        return insert_select::plan_insert_select(
            i, target, &names, select, snapshot, columns, shards,
        );
    }
    let (rows, generated) = match values_keys(target, &names, select) {
        Ok(keys) => keys,
        Err(refused) => return Planned::Plan(refused),
    };
    Planned::Plan(Plan::Sharded(Arc::new(ShardedPlan {
        table: target.id,
        kind: StatementKind::Insert,
        keys: Keys::Rows(rows),
        shards,
        merge: Merge::default(),
        multi_shard_refusal: None,
        answers: ShardAnswers::Disjoint,
        returning: i.returning_clause.is_some(),
        generated,
        insert_select: None,
        key_update: None,
        combine: None,
        aggregate: None,
    })))
}

/// The columns the INSERT gives values for, in order, to find the key columns' values in each
/// row; `None` when that is all of the table's and the router does not know them yet.
fn inserted_columns(
    i: &pg_query::protobuf::InsertStmt,
    target: &Table,
    columns: &dyn ColumnSource,
) -> Option<Vec<String>> {
    if i.cols.is_empty() {
        return columns.columns(target.id).map(|c| c.as_ref().clone());
    }
    Some(
        i.cols
            .iter()
            .filter_map(|c| match c.node.as_ref()? {
                NodeEnum::ResTarget(r) => Some(r.name.clone()),
                _ => None,
            })
            .collect(),
    )
}

/// The sharding key of every VALUES row, which decides its shard, and the key column whose
/// values the sequence generates, if any; `Err` the refusal of the statement.
fn values_keys(
    target: &Table,
    names: &[String],
    select: &pg_query::protobuf::SelectStmt,
) -> Result<(Vec<KeyTuple>, Option<GeneratedInsert>), Plan> {
    let key_names: Vec<&str> = target.sharding_columns().map(|c| c.name.as_str()).collect();
    let positions: Vec<Option<usize>> = key_names
        .iter()
        .map(|k| names.iter().position(|n| n == k))
        .collect();
    let root_key = target.key_columns.len();
    let mut generated: Option<GeneratedInsert> = None;
    let mut rows = Vec::with_capacity(select.values_lists.len());
    for (row_no, row) in select.values_lists.iter().enumerate() {
        let Some(NodeEnum::List(list)) = row.node.as_ref() else {
            return Err(unsupported("unexpected VALUES row"));
        };
        let mut values = Vec::with_capacity(positions.len());
        for (k, pos) in key_names.iter().zip(&positions) {
            let expr = pos.and_then(|p| list.items.get(p));
            values.push(key_value(target, k, expr, row_no, &mut generated)?);
        }
        let set_key = values.split_off(root_key);
        rows.push(KeyTuple {
            key: values,
            set_key,
        });
    }
    Ok((rows, generated))
}

/// The value row `row_no` gives key column `k` (`expr`, absent when the INSERT leaves the
/// column out): a constant or parameter the router can hash, or one the sequence generates.
fn key_value(
    target: &Table,
    k: &str,
    expr: Option<&Node>,
    row_no: usize,
    generated: &mut Option<GeneratedInsert>,
) -> Result<Operand, Plan> {
    let generated_key = target.generated.iter().find(|g| g.column == k);
    // `nextval` of the key's own sequence asks for a generated value as DEFAULT does;
    // an ALWAYS identity refuses it below, as PostgreSQL does.
    let is_default = expr.is_some_and(|e| {
        matches!(e.node, Some(NodeEnum::SetToDefault(_)))
            || (sequence::is_own_nextval(e, target, k) && generated_key.is_some_and(|g| !g.always))
    });
    if expr.is_none() || is_default {
        let Some(g) = generated_key else {
            return Err(unsupported(format!(
                "INSERT into sharded table \"{}\" must give sharding key column \"{k}\": \
                 only a serial or identity key column makes its own values",
                target.qualified_name()
            )));
        };
        if generated.as_ref().is_some_and(|gi| gi.column != g.column) {
            return Err(unsupported(
                "an INSERT that leaves two generated sharding-key columns to their \
                 sequences is not supported yet",
            ));
        }
        *generated = Some(GeneratedInsert {
            column: g.column.clone(),
            missing: expr.is_none(),
        });
        return Ok(Operand::Generated(row_no));
    }
    let expr = expr.expect("checked above");
    if generated_key.is_some_and(|g| g.always) {
        return Err(Plan::Refused(Refusal::GeneratedAlways(k.to_string())));
    }
    operand(expr).ok_or_else(|| {
        unsupported(format!(
            "the value of sharding key column \"{k}\" must be a constant or a \
             parameter, not an expression"
        ))
    })
}
