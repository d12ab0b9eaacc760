//! Partial aggregation for the general path: each shard groups and aggregates its own rows
//! (count, sum, min, max, the parts of avg, the distinct values of DISTINCT aggregates), and
//! the combining step aggregates those partial rows again, then applies HAVING, DISTINCT,
//! ORDER BY and LIMIT. The combining PostgreSQL computes every final value, so types, numeric
//! scale and collation are its own; the shards send one row per group instead of every row.
//!
//! Why each combination is the aggregate of all rows: counts add up (`sum(count)::int8`); sums
//! add up in their own type (`CAST(sum(sum) AS <the partial's type>)`); min of mins, max of
//! maxes, and of and/or; avg is `numeric_div(sum, count)` in PostgreSQL for integer and numeric
//! input — `sum(sums)::numeric / sum(counts)::numeric` is the same call on the same values;
//! a DISTINCT aggregate sees the distinct values, which the shards group by.

use super::select::{strip_location, AGGREGATES};
use super::walk::walk;
use crate::sql::deparse::deparse;
use pg_query::protobuf::{
    a_const, LimitOption, Node, RangeVar, ResTarget, SelectStmt, SetOperation,
};
use pg_query::NodeEnum;

/// The combining statement reads the partial rows from this table.
pub const PARTIAL_TABLE: &str = "pg_temp.shardwire_partial";

/// A grouped read whose shards aggregate their own rows first.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartialPlan {
    /// What each shard runs: group keys `g1…`, DISTINCT arguments `d1…`, partial aggregates
    /// `p1…`; its parameters renumbered `$1…` in the order of `params`.
    pub select: String,
    /// The client's parameters (0-based) the shards' query uses.
    pub params: Vec<usize>,
    /// The combining statement over [`PARTIAL_TABLE`], with the client's parameters; each
    /// `typed` placeholder is replaced by its partial column's type at execution.
    pub combine: String,
    /// `(placeholder, partial column index)`: a sum is cast back to its partial's type.
    pub typed: Vec<(String, usize)>,
    /// Partial columns (sums of avg) that must be of type bigint or numeric for the combined
    /// avg to be PostgreSQL's; others (float, interval) fall back to reading every row.
    pub exact_sums: Vec<usize>,
}

/// Plans partial aggregation for `s`, or `None` when some part of it does not decompose
/// (the general path then reads every row).
pub(super) fn plan_partial(s: &SelectStmt) -> Option<PartialPlan> {
    let plain_distinct = decomposable_shape(s)?;
    let mut b = Builder::default();
    let targets: Vec<&ResTarget> = s
        .target_list
        .iter()
        .map(|t| match t.node.as_ref() {
            Some(NodeEnum::ResTarget(r)) if r.val.is_some() => Some(&**r),
            _ => None,
        })
        .collect::<Option<_>>()?;
    let has_aggregates = targets.iter().any(|t| contains_aggregate(t.val.as_deref()))
        || s.having_clause
            .as_deref()
            .is_some_and(|h| contains_aggregate(Some(h)));
    collect_group_keys(&mut b, s, &targets, plain_distinct, has_aggregates)?;

    // The combining statement's select list, HAVING and ORDER BY over the partial columns.
    let combine_targets = combine_targets(&mut b, &targets)?;
    let having = match s.having_clause.as_deref() {
        Some(h) => Some(Box::new(b.rewrite(h)?)),
        None => None,
    };
    let sort = combine_sort(&mut b, s, &combine_targets)?;
    if b.failed {
        return None;
    }

    let (select, params) = shard_statement(&b, s)?;
    let combine = combine_statement(&b, s, has_aggregates, combine_targets, having, sort)?;
    let first_partial = b.groups.len() + b.distinct.len();
    Some(PartialPlan {
        select,
        params,
        combine,
        typed: b
            .typed
            .iter()
            .map(|&p| (placeholder(p), first_partial + p))
            .collect(),
        exact_sums: b.exact_sums.iter().map(|&p| first_partial + p).collect(),
    })
}

/// Refuses the clauses whose result the combining step could not compute from per-shard
/// groups; `Some(true)` for a plain DISTINCT, which becomes grouping by the outputs.
fn decomposable_shape(s: &SelectStmt) -> Option<bool> {
    if s.op != SetOperation::SetopNone as i32 && s.op != SetOperation::Undefined as i32 {
        return None;
    }
    if !s.window_clause.is_empty()
        || s.into_clause.is_some()
        || !s.locking_clause.is_empty()
        || s.with_clause.is_some()
        || !s.values_lists.is_empty()
        || s.limit_option == LimitOption::WithTies as i32
    {
        return None;
    }
    // DISTINCT ON keeps the first row of each group by ORDER BY: not decomposed here.
    match s.distinct_clause.as_slice() {
        [] => Some(false),
        [one] if one.node.is_none() => Some(true),
        _ => None,
    }
}

/// Adds the group keys to `b`, which each shard groups by so that it sends one row per group:
/// GROUP BY items, or for a DISTINCT without grouping, the selected expressions.
fn collect_group_keys(
    b: &mut Builder,
    s: &SelectStmt,
    targets: &[&ResTarget],
    plain_distinct: bool,
    has_aggregates: bool,
) -> Option<()> {
    if s.group_clause.is_empty() && !has_aggregates {
        if !plain_distinct {
            return None;
        }
        for t in targets {
            b.group_key(t.val.as_deref()?);
        }
    }
    for item in &s.group_clause {
        let expr = group_by_expr(item, targets)?;
        if contains_aggregate(Some(expr)) {
            return None;
        }
        b.group_key(expr);
    }
    Some(())
}

/// The expression a GROUP BY item stands for (a position means that output's expression), or
/// `None` for what is not decomposed: grouping sets, a name that may be an input column.
fn group_by_expr<'a>(item: &'a Node, targets: &[&'a ResTarget]) -> Option<&'a Node> {
    match item.node.as_ref() {
        Some(NodeEnum::AConst(c)) => match &c.val {
            Some(a_const::Val::Ival(i)) if i.ival >= 1 => {
                targets.get(i.ival as usize - 1)?.val.as_deref()
            }
            _ => None,
        },
        Some(NodeEnum::ColumnRef(_))
            if bare_name(item).is_some_and(|n| targets.iter().any(|t| t.name == n)) =>
        {
            // PostgreSQL reads a GROUP BY name as an input column first: which it is
            // here depends on the tables' columns.
            None
        }
        Some(NodeEnum::GroupingSet(_)) => None,
        Some(_) => Some(item),
        None => None,
    }
}

/// The combining statement's select list over the partial columns, each output named as the
/// client's statement names it, so the client sees the column names it would without shards.
fn combine_targets(b: &mut Builder, targets: &[&ResTarget]) -> Option<Vec<Node>> {
    let mut combine_targets = Vec::with_capacity(targets.len());
    for t in targets {
        let val = t.val.as_deref()?;
        let name = if t.name.is_empty() {
            figure_name(val)?
        } else {
            t.name.clone()
        };
        let rewritten = b.rewrite(val)?;
        combine_targets.push(res_target(&name, rewritten));
    }
    Some(combine_targets)
}

/// The combining statement's ORDER BY: a position or an output name refers to the combining
/// statement's own outputs and stays as written; other expressions are rewritten.
fn combine_sort(b: &mut Builder, s: &SelectStmt, combine_targets: &[Node]) -> Option<Vec<Node>> {
    let output_names: Vec<String> = combine_targets
        .iter()
        .filter_map(|t| match t.node.as_ref() {
            Some(NodeEnum::ResTarget(r)) => Some(r.name.clone()),
            _ => None,
        })
        .collect();
    let mut sort = Vec::with_capacity(s.sort_clause.len());
    for item in &s.sort_clause {
        let Some(NodeEnum::SortBy(sb)) = item.node.as_ref() else {
            return None;
        };
        let expr = sb.node.as_deref()?;
        let keep = matches!(expr.node.as_ref(), Some(NodeEnum::AConst(_)))
            || bare_name(expr).is_some_and(|n| output_names.iter().any(|o| *o == n));
        let node = if keep { expr.clone() } else { b.rewrite(expr)? };
        let mut sb = (**sb).clone();
        sb.node = Some(Box::new(node));
        sort.push(Node {
            node: Some(NodeEnum::SortBy(Box::new(sb))),
        });
    }
    Some(sort)
}

/// The shards' statement and the client's parameters it uses: grouped by the group keys and
/// DISTINCT arguments, so each shard sends one row per group with its partial aggregates.
fn shard_statement(b: &Builder, s: &SelectStmt) -> Option<(String, Vec<usize>)> {
    let mut shard_targets = Vec::new();
    for (i, g) in b.groups.iter().enumerate() {
        shard_targets.push(res_target(&format!("g{}", i + 1), g.clone()));
    }
    for (i, d) in b.distinct.iter().enumerate() {
        shard_targets.push(res_target(&format!("d{}", i + 1), d.clone()));
    }
    for (i, p) in b.partials.iter().enumerate() {
        shard_targets.push(res_target(&format!("p{}", i + 1), p.clone()));
    }
    let mut shard_groups: Vec<Node> = b.groups.clone();
    shard_groups.extend(b.distinct.iter().cloned());
    let shard = SelectStmt {
        target_list: shard_targets,
        from_clause: s.from_clause.clone(),
        where_clause: s.where_clause.clone(),
        group_clause: shard_groups,
        limit_option: LimitOption::Default as i32,
        op: SetOperation::SetopNone as i32,
        ..Default::default()
    };
    crate::sql::params::renumber(&deparse_select(shard)?).ok()
}

/// The combining statement over [`PARTIAL_TABLE`], grouped by the group keys again: the
/// shards' rows of one group become one, to which the client's later clauses apply.
fn combine_statement(
    b: &Builder,
    s: &SelectStmt,
    has_aggregates: bool,
    target_list: Vec<Node>,
    having_clause: Option<Box<Node>>,
    sort_clause: Vec<Node>,
) -> Option<String> {
    let combine_groups: Vec<Node> = (1..=b.groups.len())
        .map(|i| column(&format!("g{i}")))
        .collect();
    let combine = SelectStmt {
        target_list,
        from_clause: vec![Node {
            node: Some(NodeEnum::RangeVar(RangeVar {
                schemaname: "pg_temp".into(),
                relname: PARTIAL_TABLE.trim_start_matches("pg_temp.").into(),
                inh: true,
                relpersistence: "p".into(),
                location: -1,
                ..Default::default()
            })),
        }],
        group_clause: if s.group_clause.is_empty() && has_aggregates {
            Vec::new()
        } else {
            combine_groups
        },
        having_clause,
        sort_clause,
        limit_count: s.limit_count.clone(),
        limit_offset: s.limit_offset.clone(),
        limit_option: s.limit_option,
        distinct_clause: s.distinct_clause.clone(),
        op: SetOperation::SetopNone as i32,
        ..Default::default()
    };
    deparse_select(combine)
}

/// What the rewrite of the client's expressions collects.
#[derive(Default)]
struct Builder {
    groups: Vec<Node>,
    distinct: Vec<Node>,
    partials: Vec<Node>,
    /// Partials (by index) whose combined sum is cast back to their type.
    typed: Vec<usize>,
    exact_sums: Vec<usize>,
    failed: bool,
}

impl Builder {
    fn group_key(&mut self, expr: &Node) {
        if self.find(&self.groups, expr).is_none() {
            self.groups.push(expr.clone());
        }
    }

    fn find(&self, list: &[Node], expr: &Node) -> Option<usize> {
        let key = strip_location(expr);
        list.iter().position(|n| strip_location(n) == key)
    }

    fn partial(&mut self, agg: Node) -> String {
        let i = match self.find(&self.partials, &agg) {
            Some(i) => i,
            None => {
                self.partials.push(agg);
                self.partials.len() - 1
            }
        };
        format!("p{}", i + 1)
    }

    /// The expression over the partial columns that computes `expr` of the client's.
    fn rewrite(&mut self, expr: &Node) -> Option<Node> {
        if let Some(i) = self.find(&self.groups, expr) {
            return Some(column(&format!("g{}", i + 1)));
        }
        let mut out = expr.clone();
        match out.node.as_mut()? {
            NodeEnum::FuncCall(f) if is_aggregate(f) => return self.aggregate(f),
            NodeEnum::FuncCall(f) => {
                if f.over.is_some() || f.agg_filter.is_some() || !f.agg_order.is_empty() {
                    return None;
                }
                for a in f.args.iter_mut() {
                    *a = self.rewrite(a)?;
                }
            }
            NodeEnum::AConst(_) | NodeEnum::ParamRef(_) | NodeEnum::SqlvalueFunction(_) => {}
            NodeEnum::AExpr(a) => {
                for side in [&mut a.lexpr, &mut a.rexpr].into_iter().flatten() {
                    **side = self.rewrite(side)?;
                }
            }
            NodeEnum::BoolExpr(b) => {
                for a in b.args.iter_mut() {
                    *a = self.rewrite(a)?;
                }
            }
            NodeEnum::TypeCast(t) => {
                let arg = t.arg.as_deref_mut()?;
                *arg = self.rewrite(arg)?;
            }
            NodeEnum::NullTest(t) => {
                let arg = t.arg.as_deref_mut()?;
                *arg = self.rewrite(arg)?;
            }
            NodeEnum::BooleanTest(t) => {
                let arg = t.arg.as_deref_mut()?;
                *arg = self.rewrite(arg)?;
            }
            NodeEnum::CollateClause(c) => {
                let arg = c.arg.as_deref_mut()?;
                *arg = self.rewrite(arg)?;
            }
            NodeEnum::CaseExpr(c) => {
                if let Some(arg) = c.arg.as_deref_mut() {
                    *arg = self.rewrite(arg)?;
                }
                for w in c.args.iter_mut() {
                    *w = self.rewrite(w)?;
                }
                if let Some(d) = c.defresult.as_deref_mut() {
                    *d = self.rewrite(d)?;
                }
            }
            NodeEnum::CaseWhen(w) => {
                for part in [&mut w.expr, &mut w.result].into_iter().flatten() {
                    **part = self.rewrite(part)?;
                }
            }
            NodeEnum::CoalesceExpr(c) => {
                for a in c.args.iter_mut() {
                    *a = self.rewrite(a)?;
                }
            }
            NodeEnum::MinMaxExpr(m) => {
                for a in m.args.iter_mut() {
                    *a = self.rewrite(a)?;
                }
            }
            NodeEnum::List(l) => {
                for a in l.items.iter_mut() {
                    *a = self.rewrite(a)?;
                }
            }
            NodeEnum::RowExpr(r) => {
                for a in r.args.iter_mut() {
                    *a = self.rewrite(a)?;
                }
            }
            NodeEnum::AArrayExpr(a) => {
                for e in a.elements.iter_mut() {
                    *e = self.rewrite(e)?;
                }
            }
            // A column that is not a group key, a subquery, anything else: not decomposed.
            _ => return None,
        }
        Some(out)
    }

    /// The combining expression of one aggregate call, its partials added.
    fn aggregate(&mut self, f: &pg_query::protobuf::FuncCall) -> Option<Node> {
        if f.over.is_some() || f.agg_within_group || !f.agg_order.is_empty() || f.func_variadic {
            return None;
        }
        let name = func_name(f)?;
        if f.agg_distinct {
            // The shards group by the argument: the combining step sees each value once per
            // shard and applies the aggregate itself, DISTINCT and all.
            let [arg] = f.args.as_slice() else {
                return None;
            };
            // A row value has no column type the partial rows' table could hold.
            if f.agg_filter.is_some()
                || contains_aggregate(Some(arg))
                || matches!(arg.node, Some(NodeEnum::RowExpr(_)))
            {
                return None;
            }
            let i = match self.find(&self.distinct, arg) {
                Some(i) => i,
                None => {
                    self.distinct.push(arg.clone());
                    self.distinct.len() - 1
                }
            };
            let mut combined = f.clone();
            combined.args = vec![column(&format!("d{}", i + 1))];
            combined.location = -1;
            return Some(Node {
                node: Some(NodeEnum::FuncCall(Box::new(combined))),
            });
        }
        if f.args.iter().any(|a| contains_aggregate(Some(a))) {
            return None;
        }
        let own = Node {
            node: Some(NodeEnum::FuncCall(Box::new(f.clone()))),
        };
        let sql = match name.as_str() {
            // No partial rows at all (the shards grouped by a DISTINCT aggregate's argument and
            // found no row): a count over nothing is 0, where sum gives NULL.
            "count" => format!("COALESCE(sum({}), 0)::pg_catalog.int8", self.partial(own)),
            "sum" => {
                let p = self.partial(own);
                let i = p[1..].parse::<usize>().ok()? - 1;
                if !self.typed.contains(&i) {
                    self.typed.push(i);
                }
                format!("CAST(sum({p}) AS {})", placeholder(i))
            }
            "avg" => {
                let [_] = f.args.as_slice() else {
                    return None;
                };
                let mut sum = f.clone();
                sum.funcname = vec![string_node("sum")];
                let mut count = f.clone();
                count.funcname = vec![string_node("count")];
                let s = self.partial(Node {
                    node: Some(NodeEnum::FuncCall(Box::new(sum))),
                });
                let c = self.partial(Node {
                    node: Some(NodeEnum::FuncCall(Box::new(count))),
                });
                let i = s[1..].parse::<usize>().ok()? - 1;
                self.exact_sums.push(i);
                format!("(sum({s})::pg_catalog.numeric / sum({c})::pg_catalog.numeric)")
            }
            "min" | "max" | "bool_and" | "bool_or" | "bit_and" | "bit_or" | "bit_xor" => {
                format!("{name}({})", self.partial(own))
            }
            "every" => format!("bool_and({})", self.partial(own)),
            _ => return None,
        };
        parse_expr(&sql)
    }
}

fn placeholder(partial: usize) -> String {
    format!("\"shardwire partial type {}\"", partial + 1)
}

fn func_name(f: &pg_query::protobuf::FuncCall) -> Option<String> {
    let names: Vec<&str> = f
        .funcname
        .iter()
        .map(|n| match n.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect::<Option<_>>()?;
    match names.as_slice() {
        [name] | ["pg_catalog", name] => Some(name.to_string()),
        _ => None,
    }
}

fn is_aggregate(f: &pg_query::protobuf::FuncCall) -> bool {
    f.over.is_none()
        && (f.agg_star
            || f.agg_distinct
            || f.agg_filter.is_some()
            || func_name(f).is_some_and(|n| AGGREGATES.contains(&n.as_str())))
}

fn contains_aggregate(node: Option<&Node>) -> bool {
    let Some(node) = node else {
        return false;
    };
    let mut found = false;
    walk(node, &mut |n| {
        if let Some(NodeEnum::FuncCall(f)) = n.node.as_ref() {
            found |= is_aggregate(f);
        }
    });
    found
}

fn bare_name(node: &Node) -> Option<&str> {
    match node.node.as_ref() {
        Some(NodeEnum::ColumnRef(c)) if c.fields.len() == 1 => match c.fields[0].node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
            _ => None,
        },
        _ => None,
    }
}

/// The name PostgreSQL gives an unnamed output column (FigureColname), `None` for the few
/// expressions whose name is not worked out here (XML functions).
fn figure_name(node: &Node) -> Option<String> {
    let (strength, name) = figure(node)?;
    Some(if strength == 0 {
        "?column?".into()
    } else {
        name
    })
}

/// PostgreSQL's FigureColnameInternal: a name and how strongly the expression gives it (2: a
/// column's or function's name; 1: a type's, or `case`; 0: none).
fn figure(node: &Node) -> Option<(u8, String)> {
    use pg_query::protobuf::{AExprKind, SqlValueFunctionOp as Op, SubLinkType};
    let last_string = |fields: &[Node]| {
        fields.iter().rev().find_map(|f| match f.node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.clone()),
            _ => None,
        })
    };
    let none = (0, String::new());
    Some(match node.node.as_ref()? {
        NodeEnum::ColumnRef(c) => last_string(&c.fields).map_or(none, |n| (2, n)),
        NodeEnum::AIndirection(a) => match last_string(&a.indirection) {
            Some(n) => (2, n),
            None => figure(a.arg.as_deref()?)?,
        },
        NodeEnum::FuncCall(f) => (2, last_string(&f.funcname)?),
        NodeEnum::AExpr(e) if e.kind == AExprKind::AexprNullif as i32 => (2, "nullif".into()),
        NodeEnum::TypeCast(t) => {
            let inner = match t.arg.as_deref() {
                Some(arg) => figure(arg)?,
                None => none,
            };
            match (inner.0, t.type_name.as_ref()) {
                (0 | 1, Some(tn)) => (1, last_string(&tn.names)?),
                _ => inner,
            }
        }
        NodeEnum::CollateClause(c) => figure(c.arg.as_deref()?)?,
        NodeEnum::GroupingFunc(_) => (2, "grouping".into()),
        NodeEnum::SubLink(l) => match SubLinkType::try_from(l.sub_link_type) {
            Ok(SubLinkType::ExistsSublink) => (2, "exists".into()),
            Ok(SubLinkType::ArraySublink) => (2, "array".into()),
            // The subquery's one output column's name.
            Ok(SubLinkType::ExprSublink) => match l.subselect.as_deref()?.node.as_ref()? {
                NodeEnum::SelectStmt(q) if q.op == SetOperation::SetopNone as i32 => {
                    match q.target_list.first()?.node.as_ref()? {
                        NodeEnum::ResTarget(r) if !r.name.is_empty() => (2, r.name.clone()),
                        NodeEnum::ResTarget(r) => (2, figure_name(r.val.as_deref()?)?),
                        _ => return None,
                    }
                }
                _ => return None,
            },
            _ => none,
        },
        NodeEnum::CaseExpr(c) => {
            let otherwise = match c.defresult.as_deref() {
                Some(d) => figure(d)?,
                None => none,
            };
            if otherwise.0 <= 1 {
                (1, "case".into())
            } else {
                otherwise
            }
        }
        NodeEnum::AArrayExpr(_) => (2, "array".into()),
        NodeEnum::RowExpr(_) => (2, "row".into()),
        NodeEnum::CoalesceExpr(_) => (2, "coalesce".into()),
        NodeEnum::MinMaxExpr(m) => {
            if m.op == pg_query::protobuf::MinMaxOp::IsGreatest as i32 {
                (2, "greatest".into())
            } else {
                (2, "least".into())
            }
        }
        NodeEnum::SqlvalueFunction(f) => {
            let name = match Op::try_from(f.op).ok()? {
                Op::SvfopCurrentDate => "current_date",
                Op::SvfopCurrentTime | Op::SvfopCurrentTimeN => "current_time",
                Op::SvfopCurrentTimestamp | Op::SvfopCurrentTimestampN => "current_timestamp",
                Op::SvfopLocaltime | Op::SvfopLocaltimeN => "localtime",
                Op::SvfopLocaltimestamp | Op::SvfopLocaltimestampN => "localtimestamp",
                Op::SvfopCurrentRole => "current_role",
                Op::SvfopCurrentUser => "current_user",
                Op::SvfopUser => "user",
                Op::SvfopSessionUser => "session_user",
                Op::SvfopCurrentCatalog => "current_catalog",
                Op::SvfopCurrentSchema => "current_schema",
                Op::SqlvalueFunctionOpUndefined => return None,
            };
            (2, name.into())
        }
        NodeEnum::XmlExpr(_) | NodeEnum::XmlSerialize(_) => return None,
        _ => none,
    })
}

fn column(name: &str) -> Node {
    Node {
        node: Some(NodeEnum::ColumnRef(pg_query::protobuf::ColumnRef {
            fields: vec![string_node(name)],
            location: -1,
        })),
    }
}

fn string_node(s: &str) -> Node {
    Node {
        node: Some(NodeEnum::String(pg_query::protobuf::String {
            sval: s.into(),
        })),
    }
}

fn res_target(name: &str, val: Node) -> Node {
    Node {
        node: Some(NodeEnum::ResTarget(Box::new(
            pg_query::protobuf::ResTarget {
                name: name.into(),
                indirection: Vec::new(),
                val: Some(Box::new(val)),
                location: -1,
            },
        ))),
    }
}

/// The expression of `SELECT <sql>`.
fn parse_expr(sql: &str) -> Option<Node> {
    let parsed = pg_query::parse(&format!("SELECT {sql}"), 0).ok()?;
    let stmt = parsed.protobuf.stmts.into_iter().next()?.stmt?;
    let NodeEnum::SelectStmt(s) = stmt.node? else {
        return None;
    };
    let target = s.target_list.into_iter().next()?;
    let NodeEnum::ResTarget(r) = target.node? else {
        return None;
    };
    r.val.map(|v| *v)
}

fn deparse_select(s: SelectStmt) -> Option<String> {
    deparse(NodeEnum::SelectStmt(Box::new(s))).ok()
}
