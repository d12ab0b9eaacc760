//! Walking PostgreSQL's parse tree: every table a statement names, at any depth.

use super::write_target;
use pg_query::protobuf::{Node, RangeVar, SelectStmt};
use pg_query::NodeEnum;

pub(super) fn collect_range_vars<'a>(node: &'a Node, out: &mut Vec<&'a RangeVar>) {
    // DML targets and COPY's table are RangeVars held directly, not as nodes.
    match node.node.as_ref() {
        Some(NodeEnum::CopyStmt(c)) => out.extend(c.relation.as_ref()),
        Some(n) => out.extend(write_target(n)),
        None => {}
    }
    walk(node, &mut |n| {
        if let Some(NodeEnum::RangeVar(r)) = n.node.as_ref() {
            out.push(r);
        }
    });
}

/// Calls `f` on `node` and every node below it.
pub(super) fn walk<'a>(node: &'a Node, f: &mut dyn FnMut(&'a Node)) {
    f(node);
    if let Some(inner) = node.node.as_ref() {
        for child in children(inner) {
            walk(child, f);
        }
    }
}

/// The direct child nodes of the node kinds that can contain table references or conditions.
pub(super) fn children(n: &NodeEnum) -> Vec<&Node> {
    let mut v: Vec<&Node> = Vec::new();
    macro_rules! push_opt {
        ($e:expr) => {
            if let Some(x) = $e.as_deref() {
                v.push(x);
            }
        };
    }
    match n {
        NodeEnum::SelectStmt(s) => select_children(s, &mut v),
        NodeEnum::InsertStmt(i) => {
            push_opt!(i.select_stmt);
            if let Some(w) = &i.with_clause {
                v.extend(w.ctes.iter());
            }
            if let Some(r) = &i.returning_clause {
                v.extend(r.exprs.iter());
            }
            if let Some(oc) = &i.on_conflict_clause {
                v.extend(oc.target_list.iter());
                push_opt!(oc.where_clause);
            }
        }
        NodeEnum::UpdateStmt(u) => {
            v.extend(u.target_list.iter());
            push_opt!(u.where_clause);
            v.extend(u.from_clause.iter());
            if let Some(w) = &u.with_clause {
                v.extend(w.ctes.iter());
            }
            if let Some(r) = &u.returning_clause {
                v.extend(r.exprs.iter());
            }
        }
        NodeEnum::DeleteStmt(d) => {
            push_opt!(d.where_clause);
            v.extend(d.using_clause.iter());
            if let Some(w) = &d.with_clause {
                v.extend(w.ctes.iter());
            }
            if let Some(r) = &d.returning_clause {
                v.extend(r.exprs.iter());
            }
        }
        NodeEnum::CopyStmt(c) => push_opt!(c.query),
        NodeEnum::ExplainStmt(e) => push_opt!(e.query),
        NodeEnum::CommonTableExpr(c) => push_opt!(c.ctequery),
        NodeEnum::RangeSubselect(r) => push_opt!(r.subquery),
        NodeEnum::SubLink(s) => {
            push_opt!(s.testexpr);
            push_opt!(s.subselect);
        }
        NodeEnum::JoinExpr(j) => {
            push_opt!(j.larg);
            push_opt!(j.rarg);
            push_opt!(j.quals);
        }
        NodeEnum::AExpr(a) => {
            push_opt!(a.lexpr);
            push_opt!(a.rexpr);
        }
        NodeEnum::BoolExpr(b) => v.extend(b.args.iter()),
        NodeEnum::ResTarget(r) => push_opt!(r.val),
        NodeEnum::FuncCall(f) => {
            v.extend(f.args.iter());
            v.extend(f.agg_order.iter());
            push_opt!(f.agg_filter);
            if let Some(w) = &f.over {
                v.extend(w.partition_clause.iter());
                v.extend(w.order_clause.iter());
            }
        }
        NodeEnum::TypeCast(t) => push_opt!(t.arg),
        NodeEnum::List(l) => v.extend(l.items.iter()),
        NodeEnum::NullTest(t) => push_opt!(t.arg),
        NodeEnum::BooleanTest(t) => push_opt!(t.arg),
        NodeEnum::MinMaxExpr(m) => v.extend(m.args.iter()),
        NodeEnum::CollateClause(c) => push_opt!(c.arg),
        NodeEnum::NamedArgExpr(a) => push_opt!(a.arg),
        NodeEnum::AIndirection(a) => {
            push_opt!(a.arg);
            v.extend(a.indirection.iter());
        }
        NodeEnum::AIndices(i) => {
            push_opt!(i.lidx);
            push_opt!(i.uidx);
        }
        NodeEnum::GroupingSet(g) => v.extend(g.content.iter()),
        NodeEnum::CaseExpr(c) => {
            push_opt!(c.arg);
            v.extend(c.args.iter());
            push_opt!(c.defresult);
        }
        NodeEnum::CaseWhen(w) => {
            push_opt!(w.expr);
            push_opt!(w.result);
        }
        NodeEnum::CoalesceExpr(c) => v.extend(c.args.iter()),
        NodeEnum::SortBy(s) => push_opt!(s.node),
        NodeEnum::RowExpr(r) => v.extend(r.args.iter()),
        NodeEnum::AArrayExpr(a) => v.extend(a.elements.iter()),
        NodeEnum::RangeFunction(r) => v.extend(r.functions.iter()),
        _ => {}
    }
    v
}

pub(super) fn select_children<'a>(s: &'a SelectStmt, v: &mut Vec<&'a Node>) {
    v.extend(s.target_list.iter());
    v.extend(s.from_clause.iter());
    if let Some(w) = s.where_clause.as_deref() {
        v.push(w);
    }
    v.extend(s.group_clause.iter());
    if let Some(h) = s.having_clause.as_deref() {
        v.push(h);
    }
    v.extend(s.sort_clause.iter());
    v.extend(s.values_lists.iter());
    if let Some(w) = &s.with_clause {
        v.extend(w.ctes.iter());
    }
    // The arms of a set operation are statements of their own; walked as nodes.
    for arm in [&s.larg, &s.rarg].into_iter().flatten() {
        select_children(arm, v);
    }
}
