//! The streaming merge of grouped reads: each shard runs the statement without its ORDER BY,
//! LIMIT and OFFSET, and the proxy merges the shards' rows per group — counts and sums added,
//! min and max compared — then sorts and limits. Only for shapes whose every output column is
//! a group key or one of those aggregates of the statement's own; the result types are the
//! shards' (a sum of int4 is int8 on a shard and in the merge alike). What the proxy cannot
//! merge exactly at execution (a numeric sum in binary, a column type it does not compare)
//! goes to the general path instead.

use super::select::{selected_column, strip_location};
use super::SortKey;
use crate::sql::deparse::deparse;
use pg_query::protobuf::{
    a_const, LimitOption, Node, SelectStmt, SetOperation, SortByDir, SortByNulls,
};
use pg_query::NodeEnum;

/// How the proxy merges one output column of a grouped read.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnMerge {
    /// A group key: equal values are one group.
    Group,
    /// count: the shards' counts added.
    Count,
    /// sum: added in the sum's type (bigint or numeric).
    Sum,
    Min,
    Max,
}

/// A grouped read the proxy merges itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct AggregateMerge {
    /// The statement each shard runs: the client's without ORDER BY, LIMIT and OFFSET, its
    /// parameters renumbered `$1…` in the order of `params`.
    pub shard_sql: String,
    /// The client's parameters (0-based) the shards' statement uses.
    pub params: Vec<usize>,
    pub columns: Vec<ColumnMerge>,
    /// The client's ORDER BY over the output columns.
    pub order: Vec<SortKey>,
    pub limit: Option<u64>,
    pub offset: u64,
}

/// Plans the merge of `s`, or `None` when its shape is not one the proxy merges.
pub(super) fn plan_aggregate_merge(s: &SelectStmt) -> Option<AggregateMerge> {
    if !mergeable_shape(s) {
        return None;
    }
    let groups: Vec<&Node> = s
        .group_clause
        .iter()
        .map(|g| match g.node.as_ref() {
            Some(NodeEnum::AConst(c)) => match &c.val {
                Some(a_const::Val::Ival(i)) if i.ival >= 1 => target_value(s, i.ival as usize - 1),
                _ => None,
            },
            Some(NodeEnum::GroupingSet(_)) => None,
            Some(_) => Some(g),
            None => None,
        })
        .collect::<Option<_>>()?;
    let mut columns = Vec::with_capacity(s.target_list.len());
    for i in 0..s.target_list.len() {
        let val = target_value(s, i)?;
        let key = strip_location(val);
        if groups.iter().any(|g| strip_location(g) == key) {
            columns.push(ColumnMerge::Group);
            continue;
        }
        columns.push(aggregate_merge(val)?);
    }
    // Every group key must be an output column: the proxy groups by what the shards send.
    for g in &groups {
        let key = strip_location(g);
        let selected = (0..s.target_list.len())
            .any(|i| target_value(s, i).is_some_and(|v| strip_location(v) == key));
        if !selected {
            return None;
        }
    }
    if columns.iter().all(|c| *c == ColumnMerge::Group) {
        // No aggregate: a plain DISTINCT-like grouping, left to the other paths.
        return None;
    }
    let order = sort_keys(s)?;
    let limit = constant_bound(&s.limit_count)?;
    let offset = constant_bound(&s.limit_offset)?.unwrap_or(0);
    let (shard_sql, params) = shard_statement(s)?;
    Some(AggregateMerge {
        shard_sql,
        params,
        columns,
        order,
        limit,
        offset,
    })
}

/// Whether `s` is one SELECT (no set operation) without the clauses (HAVING, DISTINCT, windows,
/// locking, WITH TIES…) that would apply after the merge, which the proxy does not do.
fn mergeable_shape(s: &SelectStmt) -> bool {
    (s.op == SetOperation::SetopNone as i32 || s.op == SetOperation::Undefined as i32)
        && s.window_clause.is_empty()
        && s.having_clause.is_none()
        && s.distinct_clause.is_empty()
        && s.into_clause.is_none()
        && s.locking_clause.is_empty()
        && s.with_clause.is_none()
        && s.limit_option != LimitOption::WithTies as i32
}

/// How an output that is not a group key merges: only count, sum, min and max of the
/// statement's own, whose merge of the shards' values is exact.
fn aggregate_merge(val: &Node) -> Option<ColumnMerge> {
    let Some(NodeEnum::FuncCall(f)) = val.node.as_ref() else {
        return None;
    };
    if f.over.is_some() || f.agg_distinct || f.agg_within_group || !f.agg_order.is_empty() {
        return None;
    }
    let name = match f.funcname.as_slice() {
        [n] => n,
        [schema, n] if matches!(schema.node.as_ref(), Some(NodeEnum::String(s)) if s.sval == "pg_catalog") => {
            n
        }
        _ => return None,
    };
    let Some(NodeEnum::String(name)) = name.node.as_ref() else {
        return None;
    };
    match (name.sval.as_str(), f.agg_star, f.args.len()) {
        ("count", true, 0) | ("count", false, 1) => Some(ColumnMerge::Count),
        ("sum", false, 1) => Some(ColumnMerge::Sum),
        ("min", false, 1) => Some(ColumnMerge::Min),
        ("max", false, 1) => Some(ColumnMerge::Max),
        _ => None,
    }
}

/// The client's ORDER BY as output columns, which the proxy sorts the merged groups by; `None`
/// for a sort it cannot apply (USING, an expression that is not an output).
fn sort_keys(s: &SelectStmt) -> Option<Vec<SortKey>> {
    let mut order = Vec::with_capacity(s.sort_clause.len());
    for item in &s.sort_clause {
        let Some(NodeEnum::SortBy(sb)) = item.node.as_ref() else {
            return None;
        };
        if sb.sortby_dir == SortByDir::SortbyUsing as i32 {
            return None;
        }
        let descending = sb.sortby_dir == SortByDir::SortbyDesc as i32;
        let nulls_first = match SortByNulls::try_from(sb.sortby_nulls) {
            Ok(SortByNulls::SortbyNullsFirst) => true,
            Ok(SortByNulls::SortbyNullsLast) => false,
            _ => descending,
        };
        let column = selected_column(s, sb.node.as_deref()?)?;
        order.push(SortKey {
            column,
            descending,
            nulls_first,
        });
    }
    Some(order)
}

/// A LIMIT or OFFSET the proxy applies itself after merging: `Some(None)` when absent or NULL,
/// `None` when not a non-negative integer constant (a parameter, an expression).
fn constant_bound(n: &Option<Box<Node>>) -> Option<Option<u64>> {
    match n.as_deref().and_then(|n| n.node.as_ref()) {
        None => Some(None),
        Some(NodeEnum::AConst(c)) if c.isnull => Some(None),
        Some(NodeEnum::AConst(c)) => match &c.val {
            Some(a_const::Val::Ival(i)) if i.ival >= 0 => Some(Some(i.ival as u64)),
            _ => None,
        },
        _ => None,
    }
}

/// The statement each shard runs and the client's parameters it uses: the client's without
/// ORDER BY, LIMIT and OFFSET, which apply only to the merged groups.
fn shard_statement(s: &SelectStmt) -> Option<(String, Vec<usize>)> {
    let mut shard = s.clone();
    shard.sort_clause.clear();
    shard.limit_count = None;
    shard.limit_offset = None;
    shard.limit_option = LimitOption::Default as i32;
    let deparsed = deparse(NodeEnum::SelectStmt(Box::new(shard))).ok()?;
    crate::sql::params::renumber(&deparsed).ok()
}

fn target_value(s: &SelectStmt, i: usize) -> Option<&Node> {
    match s.target_list.get(i)?.node.as_ref()? {
        NodeEnum::ResTarget(r) => r.val.as_deref(),
        _ => None,
    }
}
