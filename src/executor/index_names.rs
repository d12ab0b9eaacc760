//! The names of the indexes `CREATE INDEX CONCURRENTLY` makes on the shards. PostgreSQL names
//! an index declared without a name after its table and columns, checking only its own
//! schema; every shard must give the index the same name, so the proxy works the name out
//! itself, by PostgreSQL's rules (ChooseIndexName, ChooseIndexColumnNames,
//! FigureIndexColname), and takes the first numbered variant free on every shard. A partition's
//! index is named the way PostgreSQL names the indexes it cascades to partitions.

use pg_query::protobuf::{AExprKind, IndexStmt, MinMaxOp, Node};
use pg_query::NodeEnum;

use crate::ddl::naming;

/// How surely a name describes an expression (FigureColnameInternal's strength): a type
/// cast's or CASE's own name gives way to a stronger one of what it holds.
#[derive(Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
enum Strength {
    None,
    Weak,
    Strong,
}

/// The columns' part of the index's generated names: the key columns and the INCLUDE
/// columns, each its column name or what PostgreSQL calls its expression (`expr` when
/// nothing), made distinct.
pub fn column_addition(index: &IndexStmt) -> String {
    let names: Vec<String> = index
        .index_params
        .iter()
        .chain(&index.index_including_params)
        .map(element_name)
        .collect();
    let refs: Vec<&str> = names.iter().map(String::as_str).collect();
    let distinct = naming::index_column_names(&refs);
    let refs: Vec<&str> = distinct.iter().map(String::as_str).collect();
    naming::name_addition(&refs)
}

/// The `pass`-th name PostgreSQL would try for an index on `relation` (`pass` 0 is the one it
/// takes when the name is free).
pub fn candidate(relation: &str, addition: &str, pass: u32) -> String {
    naming::object_name(relation, addition, &naming::numbered_label("idx", pass))
}

fn element_name(node: &Node) -> String {
    let Some(NodeEnum::IndexElem(e)) = node.node.as_ref() else {
        return "expr".to_owned();
    };
    if !e.indexcolname.is_empty() {
        return e.indexcolname.clone();
    }
    if !e.name.is_empty() {
        return e.name.clone();
    }
    e.expr
        .as_deref()
        .and_then(|x| figure(x).0)
        .unwrap_or_else(|| "expr".to_owned())
}

/// The last string among `nodes` (a dotted name's last part, ignoring `*` and subscripts).
fn last_string(nodes: &[Node]) -> Option<String> {
    nodes.iter().rev().find_map(|n| match n.node.as_ref()? {
        NodeEnum::String(s) => Some(s.sval.clone()),
        _ => None,
    })
}

/// FigureColnameInternal for the expressions an index can hold.
fn figure(node: &Node) -> (Option<String>, Strength) {
    let strong = |name: &str| (Some(name.to_owned()), Strength::Strong);
    let Some(node) = node.node.as_ref() else {
        return (None, Strength::None);
    };
    match node {
        NodeEnum::ColumnRef(c) => match last_string(&c.fields) {
            Some(name) => (Some(name), Strength::Strong),
            None => (None, Strength::None),
        },
        NodeEnum::AIndirection(i) => match last_string(&i.indirection) {
            Some(name) => (Some(name), Strength::Strong),
            None => i.arg.as_deref().map_or((None, Strength::None), figure),
        },
        NodeEnum::FuncCall(f) => match last_string(&f.funcname) {
            Some(name) => (Some(name), Strength::Strong),
            None => (None, Strength::None),
        },
        NodeEnum::AExpr(a) if a.kind == AExprKind::AexprNullif as i32 => strong("nullif"),
        NodeEnum::TypeCast(t) => {
            let inner = t.arg.as_deref().map_or((None, Strength::None), figure);
            if inner.1 > Strength::Weak {
                return inner;
            }
            match t.type_name.as_ref().and_then(|n| last_string(&n.names)) {
                Some(name) => (Some(name), Strength::Weak),
                None => inner,
            }
        }
        NodeEnum::CollateClause(c) => c.arg.as_deref().map_or((None, Strength::None), figure),
        NodeEnum::CaseExpr(c) => {
            let inner = c
                .defresult
                .as_deref()
                .map_or((None, Strength::None), figure);
            match inner.1 > Strength::Weak {
                true => inner,
                false => (Some("case".to_owned()), Strength::Weak),
            }
        }
        NodeEnum::AArrayExpr(_) => strong("array"),
        NodeEnum::RowExpr(_) => strong("row"),
        NodeEnum::CoalesceExpr(_) => strong("coalesce"),
        NodeEnum::MinMaxExpr(m) if m.op == MinMaxOp::IsGreatest as i32 => strong("greatest"),
        NodeEnum::MinMaxExpr(m) if m.op == MinMaxOp::IsLeast as i32 => strong("least"),
        _ => (None, Strength::None),
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn index(sql: &str) -> IndexStmt {
        let parsed = pg_query::parse(sql, 0).expect("parses");
        match parsed.protobuf.stmts[0]
            .stmt
            .as_ref()
            .unwrap()
            .node
            .as_ref()
        {
            Some(NodeEnum::IndexStmt(i)) => (**i).clone(),
            other => panic!("{other:?}"),
        }
    }

    /// Each name is the one PostgreSQL 15 gave the same statement without a name.
    #[test]
    fn default_names_are_postgresqls() {
        let cases = [
            (
                "CREATE INDEX ON t (lower(v), w) INCLUDE (id)",
                "t_lower_w_id_idx",
            ),
            ("CREATE UNIQUE INDEX ON t (id)", "t_id_idx"),
            (
                "CREATE INDEX ON t ((v || 'x'), (w::text), coalesce(w, 1))",
                "t_expr_w_coalesce_idx",
            ),
            ("CREATE INDEX ON t (id, id)", "t_id_id1_idx"),
            ("CREATE INDEX ON t (((v || 'x')::text))", "t_text_idx"),
            (
                "CREATE INDEX ON t (v COLLATE \"C\", (CASE WHEN w > 1 THEN v END), greatest(w, 1))",
                "t_v_case_greatest_idx",
            ),
            (
                "CREATE INDEX ON s.t USING hash (pg_catalog.upper(v))",
                "t_upper_idx",
            ),
        ];
        for (sql, expected) in cases {
            let i = index(sql);
            let relation = &i.relation.as_ref().unwrap().relname;
            assert_eq!(
                candidate(relation, &column_addition(&i), 0),
                expected,
                "{sql}"
            );
        }
        assert_eq!(candidate("t", "id", 2), "t_id_idx2");
    }
}
