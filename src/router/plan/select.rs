//! Reads over several shards: what the streaming merge needs (ORDER BY keys, hidden sort
//! columns, LIMIT/OFFSET) and what it cannot do yet.

use super::*;

pub(super) fn plan_select(
    s: &SelectStmt,
    snapshot: &Snapshot,
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
        match merge_of(s) {
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

/// How a read's rows from several shards are merged, or why they cannot be yet.
pub(super) fn merge_of(s: &SelectStmt) -> Result<Merge, String> {
    if let Some(what) = needs_combining(s) {
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
    let constant = |n: &Option<Box<Node>>| -> Result<Option<u64>, String> {
        let Some(n) = n.as_deref() else {
            return Ok(None);
        };
        match n.node.as_ref() {
            Some(NodeEnum::AConst(c)) if c.isnull => Ok(None),
            Some(NodeEnum::AConst(c)) => match &c.val {
                Some(a_const::Val::Ival(i)) if i.ival >= 0 => Ok(Some(i.ival as u64)),
                Some(a_const::Val::Fval(f)) => f
                    .fval
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| "LIMIT and OFFSET over several shards take integers".into()),
                _ => Err("LIMIT and OFFSET over several shards take non-negative integers".into()),
            },
            _ => Err(
                "LIMIT and OFFSET over several shards must be constants for now (not parameters \
                 or expressions)"
                    .into(),
            ),
        }
    };
    let limit = constant(&s.limit_count)?;
    let offset = constant(&s.limit_offset)?.unwrap_or(0);

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
    let rewritten = hidden > 0 || (limit.is_some() && offset > 0) || s.limit_offset.is_some();
    if rewritten {
        stmt.limit_offset = None;
        if let Some(n) = limit {
            stmt.limit_count = Some(Box::new(int_const(n + offset)));
        }
    }
    let shard_sql = if rewritten {
        let tree = pg_query::protobuf::ParseResult {
            // The deparser reads only the statements.
            version: 0,
            stmts: vec![pg_query::protobuf::RawStmt {
                stmt: Some(Box::new(Node {
                    node: Some(NodeEnum::SelectStmt(Box::new(stmt))),
                })),
                stmt_location: 0,
                stmt_len: 0,
            }],
        };
        Some(
            pg_query::deparse(&tree, Default::default())
                .map_err(|e| format!("cannot rewrite the query for the shards: {e}"))?,
        )
    } else {
        None
    };
    Ok(Merge {
        order,
        hidden,
        visible,
        limit,
        offset,
        shard_sql,
    })
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
