//! How a statement's table names are read: qualified ones as written, unqualified ones along the
//! session's `search_path` when the proxy knows it, else in schema `public`.

use super::walk::children;
use crate::catalog::{Snapshot, Table};
use pg_query::protobuf::{Node, RangeVar, RawStmt};
use pg_query::NodeEnum;

/// The catalog as one statement's names see it: an unqualified name is looked up along the
/// session's `search_path` when the proxy knows it, else in schema `public`.
///
/// It dereferences to the snapshot; a text planned inside another's plan goes through
/// `plan_scoped` with the scope, not [`super::plan`] with the snapshot, which would lose
/// the path.
pub struct Scope<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) search_path: Option<&'a [String]>,
    /// The positions in the statement text of the names that mean a WITH query of the
    /// statement, not a table ([`cte_references`]).
    pub(super) cte_refs: Vec<i32>,
}

impl<'a> Scope<'a> {
    /// The scope of one parsed text: its WITH queries' names.
    pub(super) fn of_text(&self, stmts: &[RawStmt]) -> Scope<'a> {
        let mut cte_refs = Vec::new();
        for stmt in stmts.iter().filter_map(|r| r.stmt.as_deref()) {
            cte_references(stmt, &mut Vec::new(), &mut cte_refs);
        }
        Scope {
            snapshot: self.snapshot,
            search_path: self.search_path,
            cte_refs,
        }
    }

    /// Whether the unqualified name at `location` of the text means a WITH query.
    pub(super) fn is_cte_ref(&self, location: i32) -> bool {
        self.cte_refs.contains(&location)
    }
}

impl std::ops::Deref for Scope<'_> {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        self.snapshot
    }
}

/// The catalog's table (or view, read as a table) for a name; an unqualified one is looked up along the session's
/// `search_path` when the proxy knows it, else in `public`. Only recorded tables are seen: a
/// plain table of the same name earlier on the path would hide the recorded one from
/// PostgreSQL, not from the router.
/// A name that means a WITH query is no table.
pub(super) fn resolve<'s>(snapshot: &'s Scope, r: &RangeVar) -> Option<&'s Table> {
    if r.schemaname.is_empty() && snapshot.is_cte_ref(r.location) {
        return None;
    }
    resolve_name(snapshot, &r.schemaname, &r.relname)
}

/// [`resolve`] of a name given as its parts (`schema` empty when unqualified).
pub(super) fn resolve_name<'s>(snapshot: &'s Scope, schema: &str, name: &str) -> Option<&'s Table> {
    match (schema, snapshot.search_path) {
        ("", Some(path)) => snapshot.resolve_relation(path, name),
        ("", None) => snapshot.relation_by_name("public", name),
        (schema, _) => snapshot.relation_by_name(schema, name),
    }
}

/// The positions of the unqualified names below `node` that mean a WITH query, as PostgreSQL
/// scopes them: a WITH clause's queries are seen by the statement it belongs to (every arm of
/// a set operation, every subquery) and by the WITH queries after them — by all of them, and
/// by themselves, in `WITH RECURSIVE`; an inner WITH query hides an outer one or a table of
/// the same name. `visible`: the WITH queries' names in scope, innermost last.
fn cte_references(node: &Node, visible: &mut Vec<String>, out: &mut Vec<i32>) {
    let Some(inner) = node.node.as_ref() else {
        return;
    };
    if let NodeEnum::RangeVar(r) = inner {
        if r.schemaname.is_empty() && visible.contains(&r.relname) {
            out.push(r.location);
        }
        return;
    }
    let with = match inner {
        NodeEnum::SelectStmt(s) => s.with_clause.as_ref(),
        NodeEnum::InsertStmt(s) => s.with_clause.as_ref(),
        NodeEnum::UpdateStmt(s) => s.with_clause.as_ref(),
        NodeEnum::DeleteStmt(s) => s.with_clause.as_ref(),
        NodeEnum::MergeStmt(s) => s.with_clause.as_ref(),
        _ => None,
    };
    let outer = visible.len();
    let mut own: Vec<&Node> = Vec::new();
    if let Some(w) = with {
        let name = |c: &Node| match c.node.as_ref() {
            Some(NodeEnum::CommonTableExpr(c)) => Some(c.ctename.clone()),
            _ => None,
        };
        if w.recursive {
            visible.extend(w.ctes.iter().filter_map(name));
        }
        for c in &w.ctes {
            own.push(c);
            if let Some(NodeEnum::CommonTableExpr(e)) = c.node.as_ref() {
                if let Some(q) = e.ctequery.as_deref() {
                    cte_references(q, visible, out);
                }
            }
            if !w.recursive {
                visible.extend(name(c));
            }
        }
    }
    for child in children(inner) {
        // A WITH query's own body was read above, with the names it sees.
        if !own.iter().any(|c| std::ptr::eq(*c, child)) {
            cte_references(child, visible, out);
        }
    }
    visible.truncate(outer);
}
