//! Reads over several shards: what the streaming merge needs (ORDER BY keys, hidden sort
//! columns, LIMIT/OFFSET) and what it cannot do yet.

use super::conditions::{column_fields, plan_filtered};
use super::row_origin::preserved_range_vars;
use super::scope::{resolve, Scope};
use super::walk::walk;
use super::{unsupported, Merge, Plan, SortKey, StatementKind};
use crate::catalog::{ShardId, Table, TableKind};
use crate::sql::deparse::deparse;
use pg_query::protobuf::{
    a_const, AExpr, AExprKind, LimitOption, Node, SelectStmt, SetOperation, SortByDir, SortByNulls,
};
use pg_query::NodeEnum;
use std::sync::Arc;

pub(super) fn plan_select(
    s: &SelectStmt,
    snapshot: &Scope,
    sharded: &[&Table],
    shards: Vec<ShardId>,
) -> Plan {
    if s.op != SetOperation::SetopNone as i32 && s.op != SetOperation::Undefined as i32 {
        return unsupported(
            "set operations (UNION, INTERSECT, EXCEPT) over sharded tables are not supported yet",
        );
    }
    let plan = plan_filtered(
        StatementKind::Select,
        &s.from_clause,
        s.where_clause.as_deref(),
        snapshot,
        sharded,
        shards,
        false,
    );
    let Plan::Sharded(mut p) = plan else {
        return plan;
    };
    let inner = Arc::make_mut(&mut p);
    if inner.multi_shard_refusal.is_none() {
        // Groups (or distinct rows) that contain the sharding key each live on one shard:
        // the shards answer them whole, and their rows are only merged.
        let local = groups_are_local(s, snapshot);
        match merge_of(s, local) {
            Ok(m) => inner.merge = m,
            Err(why) => inner.multi_shard_refusal = Some(why),
        }
    }
    Plan::Sharded(p)
}

pub(super) const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "bit_and",
    "bit_or",
    "bit_xor",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "xmlagg",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_avgx",
    "regr_avgy",
    "regr_count",
    "regr_intercept",
    "regr_r2",
    "regr_slope",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "range_agg",
    "range_intersect_agg",
    "any_value",
];

/// Why the select list or clauses need more than concatenation and a sorted merge.
pub(super) fn needs_combining(s: &SelectStmt) -> Option<String> {
    if !s.group_clause.is_empty() {
        return Some("GROUP BY".into());
    }
    if s.having_clause.is_some() {
        return Some("HAVING".into());
    }
    if !s.distinct_clause.is_empty() {
        return Some("DISTINCT".into());
    }
    if !s.window_clause.is_empty() {
        return Some("window functions".into());
    }
    let mut found = None;
    for t in s.target_list.iter().chain(&s.sort_clause) {
        walk(t, &mut |n| {
            if let Some(NodeEnum::FuncCall(f)) = n.node.as_ref() {
                if f.over.is_some() {
                    found.get_or_insert_with(|| "window functions".to_string());
                }
                let name = f.funcname.last().and_then(|n| match n.node.as_ref()? {
                    NodeEnum::String(s) => Some(s.sval.as_str()),
                    _ => None,
                });
                if let Some(name) = name {
                    if f.agg_star || f.agg_distinct || AGGREGATES.contains(&name) {
                        found.get_or_insert_with(|| format!("aggregate {name}()"));
                    }
                }
            }
        });
    }
    found
}

/// Whether every group of a grouped read (or every row of a DISTINCT one) lies on one shard:
/// its GROUP BY (or DISTINCT list) names every sharding-key column (and partition-set column)
/// of one of the family's tables in the FROM list.
fn groups_are_local(s: &SelectStmt, snapshot: &Scope) -> bool {
    if !s.window_clause.is_empty() || needs_window(s) {
        return false;
    }
    let keys: Vec<&Node> = if !s.group_clause.is_empty() {
        if !s.distinct_clause.is_empty() {
            // DISTINCT over grouped rows compares output rows across shards.
            return false;
        }
        s.group_clause
            .iter()
            .map(|g| match selected_position(s, g) {
                Some(i) => target_value(s, i).unwrap_or(g),
                None => g,
            })
            .collect()
    } else if matches!(s.distinct_clause.as_slice(), [one] if one.node.is_none()) {
        if needs_combining_aggregates(s) {
            return false;
        }
        (0..s.target_list.len())
            .filter_map(|i| target_value(s, i))
            .collect()
    } else {
        return false;
    };
    // A table on the nullable side of an outer join has NULL keys in every shard's padded
    // rows: its key does not keep a group on one shard.
    let mut preserved = Vec::new();
    preserved_range_vars(&s.from_clause, &mut preserved);
    preserved.iter().any(|r| {
        let Some(t) = resolve(snapshot, r).filter(|t| t.kind == TableKind::Sharded) else {
            return false;
        };
        let qualifier = r.alias.as_ref().map_or(&r.relname, |a| &a.aliasname);
        t.key_columns
            .iter()
            .chain(&t.partition_set_columns)
            .all(|k| {
                keys.iter().any(|g| match column_fields(g) {
                    Some([f]) => field_name(f) == Some(k.name.as_str()),
                    Some([q, f]) => {
                        field_name(q) == Some(qualifier.as_str())
                            && field_name(f) == Some(k.name.as_str())
                    }
                    _ => false,
                })
            })
    })
}

fn field_name(n: &Node) -> Option<&str> {
    match n.node.as_ref()? {
        NodeEnum::String(s) => Some(s.sval.as_str()),
        _ => None,
    }
}

/// `GROUP BY 2`: the select-list position (0-based) a positional reference names.
fn selected_position(s: &SelectStmt, g: &Node) -> Option<usize> {
    match g.node.as_ref()? {
        NodeEnum::AConst(c) => match &c.val {
            Some(a_const::Val::Ival(i))
                if i.ival >= 1 && (i.ival as usize) <= s.target_list.len() =>
            {
                Some(i.ival as usize - 1)
            }
            _ => None,
        },
        _ => None,
    }
}

fn target_value(s: &SelectStmt, i: usize) -> Option<&Node> {
    match s.target_list.get(i)?.node.as_ref()? {
        NodeEnum::ResTarget(r) => r.val.as_deref(),
        _ => None,
    }
}

fn needs_window(s: &SelectStmt) -> bool {
    let mut found = false;
    for t in s.target_list.iter().chain(&s.sort_clause) {
        walk(t, &mut |n| {
            if let Some(NodeEnum::FuncCall(f)) = n.node.as_ref() {
                found |= f.over.is_some();
            }
        });
    }
    found
}

fn needs_combining_aggregates(s: &SelectStmt) -> bool {
    let stripped = SelectStmt {
        target_list: s.target_list.clone(),
        sort_clause: s.sort_clause.clone(),
        ..Default::default()
    };
    needs_combining(&stripped).is_some()
}

/// How a read's rows from several shards are merged, or why they cannot be yet. `local`: its
/// groups lie each on one shard, so grouping, aggregates, HAVING and DISTINCT are the shards'.
pub(super) fn merge_of(s: &SelectStmt, local: bool) -> Result<Merge, String> {
    if let Some(what) = needs_combining(s).filter(|_| !local) {
        return Err(format!(
            "{what} over several shards is not supported yet: add the full sharding key to the \
             WHERE clause so the query runs on one shard"
        ));
    }
    if s.into_clause.is_some() {
        return Err("SELECT INTO over several shards is not supported yet".into());
    }
    if s.limit_option == LimitOption::WithTies as i32 {
        return Err("FETCH … WITH TIES over several shards is not supported yet".into());
    }
    let limit = bound(&s.limit_count)?;
    let offset = bound(&s.limit_offset)?;

    let mut stmt = s.clone();
    let visible = s.target_list.len();
    if s.target_list.iter().any(|t| {
        matches!(t.node.as_ref(), Some(NodeEnum::ResTarget(r)) if r.val.as_deref().is_some_and(|v| {
            matches!(v.node.as_ref(), Some(NodeEnum::ColumnRef(c)) if c.fields.iter().any(|f| matches!(f.node, Some(NodeEnum::AStar(_)))))
        }))
    }) && !s.sort_clause.is_empty()
    {
        return Err(
            "SELECT * with ORDER BY over several shards is not supported yet: name the columns"
                .into(),
        );
    }
    let mut order = Vec::new();
    let mut hidden = 0;
    for (i, sort) in s.sort_clause.iter().enumerate() {
        let Some(NodeEnum::SortBy(sb)) = sort.node.as_ref() else {
            return Err("unexpected ORDER BY item".into());
        };
        if sb.sortby_dir == SortByDir::SortbyUsing as i32 {
            return Err("ORDER BY … USING over several shards is not supported yet".into());
        }
        let descending = sb.sortby_dir == SortByDir::SortbyDesc as i32;
        let nulls_first = match SortByNulls::try_from(sb.sortby_nulls) {
            Ok(SortByNulls::SortbyNullsFirst) => true,
            Ok(SortByNulls::SortbyNullsLast) => false,
            // PostgreSQL's default: NULLs sort as larger than any value.
            _ => descending,
        };
        let expr = sb.node.as_deref().ok_or("ORDER BY without an expression")?;
        let column = match selected_column(s, expr) {
            Some(c) => c,
            None => {
                // Not in the select list: selected as a hidden column the merge reads.
                hidden += 1;
                stmt.target_list.push(Node {
                    node: Some(NodeEnum::ResTarget(Box::new(
                        pg_query::protobuf::ResTarget {
                            name: format!("shardwire_sort_{i}"),
                            indirection: Vec::new(),
                            val: Some(Box::new(expr.clone())),
                            location: -1,
                        },
                    ))),
                });
                visible + hidden - 1
            }
        };
        order.push(SortKey {
            column,
            descending,
            nulls_first,
        });
    }
    let rewritten = hidden > 0 || s.limit_offset.is_some();
    if rewritten {
        stmt.limit_offset = None;
        stmt.limit_count = shard_limit(&limit, &offset, stmt.limit_count.take());
        if let (Bound::Value(None), Bound::Param(o)) = (&limit, &offset) {
            // The shards return every row, but must still see the parameter: PostgreSQL
            // refuses a statement with a parameter it cannot give a type, and a Bind with more
            // values than the statement's parameters. `0 * $n` offsets by nothing.
            stmt.limit_offset = Some(Box::new(arith("*", int_const(0), int8_param(*o))));
        }
    }
    let shard_sql = if rewritten {
        Some(
            deparse(NodeEnum::SelectStmt(Box::new(stmt)))
                .map_err(|e| format!("cannot rewrite the query for the shards: {e}"))?,
        )
    } else {
        None
    };
    Ok(Merge {
        order,
        hidden,
        visible,
        limit: limit.value(),
        offset: offset.value().unwrap_or(0),
        limit_param: limit.param(),
        offset_param: offset.param(),
        shard_sql,
    })
}

/// A LIMIT or OFFSET as written: a value known from the text, or a Bind parameter.
enum Bound {
    /// `None`: none, `LIMIT ALL` or `LIMIT NULL`.
    Value(Option<u64>),
    /// 0-based.
    Param(usize),
}

impl Bound {
    fn value(&self) -> Option<u64> {
        match self {
            Bound::Value(v) => *v,
            Bound::Param(_) => None,
        }
    }

    fn param(&self) -> Option<usize> {
        match self {
            Bound::Value(_) => None,
            Bound::Param(i) => Some(*i),
        }
    }
}

fn bound(n: &Option<Box<Node>>) -> Result<Bound, String> {
    let Some(n) = n.as_deref() else {
        return Ok(Bound::Value(None));
    };
    match n.node.as_ref() {
        Some(NodeEnum::AConst(c)) if c.isnull => Ok(Bound::Value(None)),
        Some(NodeEnum::AConst(c)) => match &c.val {
            Some(a_const::Val::Ival(i)) if i.ival >= 0 => Ok(Bound::Value(Some(i.ival as u64))),
            Some(a_const::Val::Fval(f)) => f
                .fval
                .parse::<u64>()
                .map(|v| Bound::Value(Some(v)))
                .map_err(|_| "LIMIT and OFFSET over several shards take integers".into()),
            _ => Err("LIMIT and OFFSET over several shards take non-negative integers".into()),
        },
        Some(NodeEnum::ParamRef(p)) if p.number >= 1 => Ok(Bound::Param(p.number as usize - 1)),
        _ => Err(
            "LIMIT and OFFSET over several shards must be constants or parameters for now (not \
             expressions)"
                .into(),
        ),
    }
}

/// The shards' LIMIT: the client's limit plus its offset, so the proxy can drop the offset's
/// rows from the merged ones. With parameters it is an expression the shards evaluate, so the
/// text stays the same for every execution; `::int8` gives the parameters the type
/// PostgreSQL infers for them in LIMIT and OFFSET (an unknown `+` an unknown is ambiguous).
fn shard_limit(limit: &Bound, offset: &Bound, written: Option<Box<Node>>) -> Option<Box<Node>> {
    let node = match (limit, offset) {
        (Bound::Value(None), _) => return written,
        (Bound::Value(Some(n)), Bound::Value(m)) => int_const(n + m.unwrap_or(0)),
        (Bound::Param(_), Bound::Value(None | Some(0))) => return written,
        (Bound::Param(l), Bound::Value(Some(m))) => arith("+", int8_param(*l), int_const(*m)),
        (Bound::Value(Some(n)), Bound::Param(o)) => arith("+", int_const(*n), int8_param(*o)),
        (Bound::Param(l), Bound::Param(o)) => arith("+", int8_param(*l), int8_param(*o)),
    };
    Some(Box::new(node))
}

fn arith(op: &str, left: Node, right: Node) -> Node {
    Node {
        node: Some(NodeEnum::AExpr(Box::new(AExpr {
            kind: AExprKind::AexprOp as i32,
            name: vec![string_node(op)],
            lexpr: Some(Box::new(left)),
            rexpr: Some(Box::new(right)),
            rexpr_list_start: -1,
            rexpr_list_end: -1,
            location: -1,
        }))),
    }
}

/// `$n::int8` for the 0-based parameter `index`.
fn int8_param(index: usize) -> Node {
    let param = Node {
        node: Some(NodeEnum::ParamRef(pg_query::protobuf::ParamRef {
            number: index as i32 + 1,
            location: -1,
        })),
    };
    Node {
        node: Some(NodeEnum::TypeCast(Box::new(pg_query::protobuf::TypeCast {
            arg: Some(Box::new(param)),
            type_name: Some(pg_query::protobuf::TypeName {
                names: vec![string_node("pg_catalog"), string_node("int8")],
                typemod: -1,
                location: -1,
                ..Default::default()
            }),
            location: -1,
        }))),
    }
}

fn string_node(s: &str) -> Node {
    Node {
        node: Some(NodeEnum::String(pg_query::protobuf::String {
            sval: s.into(),
        })),
    }
}

pub(super) fn int_const(n: u64) -> Node {
    let val = if n <= i32::MAX as u64 {
        a_const::Val::Ival(pg_query::protobuf::Integer { ival: n as i32 })
    } else {
        a_const::Val::Fval(pg_query::protobuf::Float {
            fval: n.to_string(),
        })
    };
    Node {
        node: Some(NodeEnum::AConst(pg_query::protobuf::AConst {
            isnull: false,
            location: -1,
            val: Some(val),
        })),
    }
}

/// The select-list position an ORDER BY expression names: a position number, an output
/// column's name, or an expression written the same as a selected one.
pub(super) fn selected_column(s: &SelectStmt, expr: &Node) -> Option<usize> {
    if let Some(NodeEnum::AConst(c)) = expr.node.as_ref() {
        if let Some(a_const::Val::Ival(i)) = &c.val {
            return (i.ival >= 1 && (i.ival as usize) <= s.target_list.len())
                .then(|| i.ival as usize - 1);
        }
    }
    let bare_name = match expr.node.as_ref() {
        Some(NodeEnum::ColumnRef(c)) if c.fields.len() == 1 => match c.fields[0].node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
            _ => None,
        },
        _ => None,
    };
    s.target_list.iter().position(|t| {
        let Some(NodeEnum::ResTarget(r)) = t.node.as_ref() else {
            return false;
        };
        if bare_name.is_some_and(|n| n == r.name) {
            return true;
        }
        r.val.as_deref() == Some(expr)
            || (r.val.as_deref().map(strip_location) == Some(strip_location(expr)))
    })
}

/// An expression with its source positions cleared, so equal expressions written at different
/// places compare equal.
pub(super) fn strip_location(n: &Node) -> String {
    let s = format!("{n:?}");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find("location: ") {
        out.push_str(&rest[..i]);
        rest = &rest[i + "location: ".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}
