//! Views over recorded tables: what a view's definition is to the router ([`classify`]), and
//! a statement over views that are planned through their definitions ([`expand_views`]).
//!
//! A view whose definition the shards can answer shard by shard with disjoint rows (one family
//! joined on its key, with duplicated tables) is read like a table of that family: its copy on
//! each shard gives that shard's rows, a keyed read goes to one shard, and a write through it
//! is routed like a write to its table. A view over duplicated tables only is read like one.
//! Any other view is *expanded*: each reference to it becomes its definition as a subquery, and
//! the statement is planned (and sent) as written that way, as PostgreSQL's rewriter does.

use super::conditions::{top_level_uses, using_columns, Slots};
use super::scope::{resolve, Scope};
use super::walk::{collect_range_vars, walk};
use super::{
    plan_scoped, unsupported, ColumnSource, Merge, Plan, Planned, Refusal, ShardAnswers,
    StatementKind,
};
use crate::catalog::{Snapshot, Table, TableId, TableKind};
use crate::model::ViewShape;
use pg_query::protobuf::{Node, RangeVar};
use pg_query::NodeEnum;

/// What a view's definition is to the router.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ViewPlan {
    pub shape: ViewShape,
    /// Family: its root; duplicated: a duplicated table it reads.
    pub placed_like: Option<TableId>,
    /// Family: per root key column, then partition-set column, the view's column holding it.
    pub key_columns: Vec<Option<String>>,
    /// The recorded tables and views the definition names.
    pub reads: Vec<TableId>,
}

/// The outcome of [`classify`].
#[derive(Debug)]
pub enum Classified {
    View(ViewPlan),
    /// Names no recorded table or view: PostgreSQL's alone (the first shard's).
    NotRecorded,
    NeedColumns(TableId),
    /// A query over it would be refused; so is the view.
    Refused(Refusal),
}

/// What the view whose definition is `definition` (one SELECT, names qualified as
/// `pg_get_viewdef` writes them, its result columns named `column_names`) is to the router.
pub fn classify(
    definition: &str,
    column_names: &[String],
    snapshot: &Snapshot,
    columns: &dyn ColumnSource,
) -> Classified {
    let scope = Scope {
        snapshot,
        search_path: None,
        cte_refs: Vec::new(),
    };
    let Ok(parsed) = pg_query::parse(definition, 0) else {
        return Classified::NotRecorded;
    };
    let scope = scope.of_text(&parsed.protobuf.stmts);
    let Some(stmt) = parsed
        .protobuf
        .stmts
        .first()
        .and_then(|r| r.stmt.as_deref())
    else {
        return Classified::NotRecorded;
    };
    let mut reads: Vec<TableId> = recorded_names(stmt, &scope);
    reads.sort();
    reads.dedup();
    if reads.is_empty() {
        return Classified::NotRecorded;
    }
    let expanded = expand_views(definition, snapshot, None);
    let planned = plan_scoped(expanded.as_deref().unwrap_or(definition), &scope, columns);
    let plan = match planned {
        Planned::NeedColumns(t) => return Classified::NeedColumns(t),
        Planned::Plan(Plan::Refused(r)) => return Classified::Refused(r),
        Planned::Plan(p) => p,
    };
    let expanded_plan = |reads| {
        Classified::View(ViewPlan {
            shape: ViewShape::Expanded,
            placed_like: None,
            key_columns: Vec::new(),
            reads,
        })
    };
    match plan {
        Plan::Sharded(p)
            if expanded.is_none()
                && p.kind == StatementKind::Select
                && p.multi_shard_refusal.is_none()
                && p.answers == ShardAnswers::Disjoint
                && p.combine.is_none()
                && p.aggregate.is_none()
                && merges_nothing(&p.merge) =>
        {
            let Some(root) = snapshot.root_of(p.table) else {
                return expanded_plan(reads);
            };
            let Some(NodeEnum::SelectStmt(s)) = stmt.node.as_ref() else {
                return expanded_plan(reads);
            };
            let mut uses = Vec::new();
            top_level_uses(&s.from_clause, &scope, &mut uses);
            let mut merged = Vec::new();
            using_columns(&s.from_clause, &mut merged);
            let slots = Slots {
                uses,
                root_key: root.key_columns.len(),
                merged,
            };
            let width = root.key_columns.len() + root.partition_set_columns.len();
            let mut key_columns = vec![None; width];
            for (target, name) in s.target_list.iter().zip(column_names) {
                let Some(NodeEnum::ResTarget(t)) = target.node.as_ref() else {
                    continue;
                };
                let Some(NodeEnum::ColumnRef(c)) = t.val.as_deref().and_then(|v| v.node.as_ref())
                else {
                    continue;
                };
                // A padded side of an outer join shows NULL where the row's key is not.
                if let Some((u, p)) = slots.slot(&c.fields) {
                    if !slots.uses[u].null_extended && key_columns[p].is_none() {
                        key_columns[p] = Some(name.clone());
                    }
                }
            }
            Classified::View(ViewPlan {
                shape: ViewShape::Family,
                placed_like: Some(root.id),
                key_columns,
                reads,
            })
        }
        Plan::AnyOf(shards) if expanded.is_none() => {
            // Where a duplicated table it reads is, the view is: the copies of every table it
            // reads must be on exactly those shards.
            let like = reads.iter().find_map(|&id| {
                let t = snapshot.table(id)?;
                let table = match snapshot.view(id) {
                    Some(v) => snapshot.table(v.entry.placed_like?)?,
                    None => t,
                };
                (table.kind == TableKind::Duplicated && snapshot.shards_of(table.id) == shards)
                    .then_some(table.id)
            });
            match like {
                Some(like) => Classified::View(ViewPlan {
                    shape: ViewShape::Duplicated,
                    placed_like: Some(like),
                    key_columns: Vec::new(),
                    reads,
                }),
                None => expanded_plan(reads),
            }
        }
        _ => expanded_plan(reads),
    }
}

/// A view left in a statement after its expansion (an expanded view written to, or named
/// where its definition cannot stand), or the sharding key updated through a view.
pub(super) fn view_refusal(
    node: &NodeEnum,
    snapshot: &Scope,
    resolved: &[Option<&Table>],
) -> Option<Plan> {
    let views = || {
        resolved
            .iter()
            .flatten()
            .filter_map(|t| snapshot.view(t.id))
    };
    if let Some(v) = views().find(|v| v.is_expanded()) {
        return Some(unsupported(format!(
            "view \"{}\" cannot be written to or named here through shardwire: its rows come \
             from its definition over several shards (tables of several families, an aggregate, \
             a limit, …), which the proxy answers only where the view is read; write to its \
             tables instead",
            v.qualified_name()
        )));
    }
    if let NodeEnum::UpdateStmt(u) = node {
        let target = u.relation.as_ref().and_then(|r| resolve(snapshot, r));
        if let Some(v) = target.and_then(|t| snapshot.view(t.id)) {
            let sets_key = u.target_list.iter().any(|n| match n.node.as_ref() {
                Some(NodeEnum::ResTarget(r)) => {
                    v.as_table.sharding_columns().any(|c| c.name == r.name)
                }
                _ => false,
            });
            if sets_key {
                return Some(unsupported(format!(
                    "an UPDATE of the sharding key through view \"{}\" is not supported: \
                     update its table, whose rows shardwire moves between shards",
                    v.qualified_name()
                )));
            }
        }
    }
    None
}

/// Whether the shards' rows are the answer as they come: no order, no limit, no hidden
/// columns.
fn merges_nothing(m: &Merge) -> bool {
    m.order.is_empty() && m.hidden == 0 && !m.bounds_rows() && m.shard_sql.is_none()
}

/// The ids of the recorded tables and views a statement names (unqualified names in
/// `public`), in order; empty when it names none or cannot be parsed.
pub fn recorded_relations(sql: &str, snapshot: &Snapshot) -> Vec<TableId> {
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return Vec::new();
    };
    let scope = Scope {
        snapshot,
        search_path: None,
        cte_refs: Vec::new(),
    };
    let scope = scope.of_text(&parsed.protobuf.stmts);
    let mut out: Vec<TableId> = parsed
        .protobuf
        .stmts
        .iter()
        .filter_map(|r| r.stmt.as_deref())
        .flat_map(|s| recorded_names(s, &scope))
        .collect();
    out.sort();
    out.dedup();
    out
}

/// The ids of the recorded tables and views `stmt` names.
fn recorded_names(stmt: &Node, scope: &Scope) -> Vec<TableId> {
    let mut all = Vec::new();
    collect_range_vars(stmt, &mut all);
    let mut out: Vec<TableId> = all
        .iter()
        .filter_map(|r| resolve(scope, r))
        .map(|t| t.id)
        .collect();
    for (schema, name, location) in super::combine::named_tables(stmt) {
        if schema.is_empty() && scope.is_cte_ref(location) {
            continue;
        }
        out.extend(super::scope::resolve_name(scope, &schema, &name).map(|t| t.id));
    }
    out
}

/// `sql` with every reference to an expanded view replaced by its definition as a subquery
/// (aliased by the view's name unless the reference has an alias of its own), repeatedly, as
/// views over views need; `None` when it names none. A view written to is not replaced: the
/// router refuses that write.
pub fn expand_views(
    sql: &str,
    snapshot: &Snapshot,
    search_path: Option<&[String]>,
) -> Option<String> {
    if !snapshot.has_expanded_views() || !may_name_expanded_view(sql, snapshot) {
        return None;
    }
    let mut current: Option<String> = None;
    // A view reads only views made before it: the depth is bounded by the number of views.
    for _ in 0..=snapshot.views().len() {
        let text = current.as_deref().unwrap_or(sql);
        match expand_once(text, snapshot, search_path) {
            Some(next) => current = Some(next),
            None => return current,
        }
    }
    current
}

/// Whether `sql` holds an expanded view's name anywhere (ASCII case ignored): without one it
/// cannot name such a view, and is not parsed.
fn may_name_expanded_view(sql: &str, snapshot: &Snapshot) -> bool {
    let text = sql.as_bytes();
    snapshot
        .views()
        .iter()
        .filter(|v| v.is_expanded())
        .any(|v| {
            let name = v.entry.name.as_bytes();
            !name.is_empty()
                && text
                    .windows(name.len())
                    .any(|w| w.eq_ignore_ascii_case(name))
        })
}

fn expand_once(sql: &str, snapshot: &Snapshot, search_path: Option<&[String]>) -> Option<String> {
    splice_reads(sql, snapshot, search_path, |scope, r| {
        let table = resolve(scope, r)?;
        let view = snapshot.view(table.id).filter(|v| v.is_expanded())?;
        let body = view
            .entry
            .definition
            .trim()
            .trim_end_matches(';')
            .trim_end();
        Some((body.to_string(), view.entry.name.clone()))
    })
}

/// `sql` with every read of PostgreSQL's own view `pg_catalog.<name>` (so qualified, or
/// unqualified: PostgreSQL searches pg_catalog first) replaced by `query`, a query with that
/// view's columns; `None` when it reads none.
pub fn replace_catalog_view(
    sql: &str,
    snapshot: &Snapshot,
    name: &str,
    query: &str,
) -> Option<String> {
    let named = sql
        .as_bytes()
        .windows(name.len())
        .any(|w| w.eq_ignore_ascii_case(name.as_bytes()));
    if !named {
        return None;
    }
    splice_reads(sql, snapshot, None, |scope, r| {
        let catalog = r.schemaname.is_empty() || r.schemaname == "pg_catalog";
        let is_cte = r.schemaname.is_empty() && scope.is_cte_ref(r.location);
        (r.catalogname.is_empty() && catalog && !is_cte && r.relname == name)
            .then(|| (query.to_string(), name.to_string()))
    })
}

/// `sql` with each relation that rows are read from and that `replace` gives a query and a
/// name for replaced by that query as a subquery (named so unless the client gave an alias);
/// `None` when `replace` gives none.
fn splice_reads(
    sql: &str,
    snapshot: &Snapshot,
    search_path: Option<&[String]>,
    mut replace: impl FnMut(&Scope, &RangeVar) -> Option<(String, String)>,
) -> Option<String> {
    let parsed = pg_query::parse(sql, 0).ok()?;
    let scope = Scope {
        snapshot,
        search_path,
        cte_refs: Vec::new(),
    };
    let scope = scope.of_text(&parsed.protobuf.stmts);
    // (start, end, replacement), by position.
    let mut splices: Vec<(usize, usize, String)> = Vec::new();
    for raw in &parsed.protobuf.stmts {
        let Some(stmt) = raw.stmt.as_deref() else {
            continue;
        };
        for r in read_references(stmt) {
            let Some((body, name)) = replace(&scope, r) else {
                continue;
            };
            let start = usize::try_from(r.location).ok()?;
            let end = name_end(sql, start)?;
            let replacement = match r.alias {
                Some(_) => format!("({body})"),
                None => format!("({body}) AS {}", crate::sql::quote::quote_ident(&name)),
            };
            splices.push((start, end, replacement));
        }
    }
    if splices.is_empty() {
        return None;
    }
    splices.sort_by_key(|s| s.0);
    let mut out = String::with_capacity(sql.len());
    let mut at = 0;
    for (start, end, replacement) in splices {
        out.push_str(sql.get(at..start)?);
        out.push_str(&replacement);
        at = end;
    }
    out.push_str(&sql[at..]);
    Some(out)
}

/// The table references of a statement that read rows: not the target of a write or of COPY
/// (a view there is refused, not expanded). Cursors and prepared statements are read through.
fn read_references(stmt: &Node) -> Vec<&RangeVar> {
    let inner = match stmt.node.as_ref() {
        Some(NodeEnum::DeclareCursorStmt(d)) => d.query.as_deref(),
        Some(NodeEnum::PrepareStmt(p)) => p.query.as_deref(),
        Some(
            NodeEnum::SelectStmt(_)
            | NodeEnum::InsertStmt(_)
            | NodeEnum::UpdateStmt(_)
            | NodeEnum::DeleteStmt(_)
            | NodeEnum::MergeStmt(_)
            | NodeEnum::CopyStmt(_)
            | NodeEnum::ExplainStmt(_),
        ) => Some(stmt),
        _ => None,
    };
    let mut out = Vec::new();
    if let Some(inner) = inner {
        let target = match inner.node.as_ref() {
            Some(NodeEnum::ExplainStmt(e)) => e.query.as_deref().and_then(|q| q.node.as_ref()),
            other => other,
        }
        .and_then(write_or_copy_target)
        .map(|r| r.location);
        walk(inner, &mut |n| {
            if let Some(NodeEnum::RangeVar(r)) = n.node.as_ref() {
                if Some(r.location) != target {
                    out.push(r);
                }
            }
        });
        if let Some(NodeEnum::MergeStmt(m)) = inner.node.as_ref() {
            if let Some(source) = m.source_relation.as_deref() {
                walk(source, &mut |n| {
                    if let Some(NodeEnum::RangeVar(r)) = n.node.as_ref() {
                        out.push(r);
                    }
                });
            }
        }
    }
    out
}

fn write_or_copy_target(node: &NodeEnum) -> Option<&RangeVar> {
    match node {
        NodeEnum::CopyStmt(c) => c.relation.as_ref(),
        NodeEnum::MergeStmt(m) => m.relation.as_ref(),
        other => super::write_target(other),
    }
}

/// The byte offset just past the (possibly qualified) name starting at `start`.
fn name_end(sql: &str, start: usize) -> Option<usize> {
    let bytes = sql.as_bytes();
    let ident_end = |mut i: usize| -> Option<usize> {
        if bytes.get(i) == Some(&b'"') {
            i += 1;
            loop {
                match bytes.get(i)? {
                    b'"' if bytes.get(i + 1) == Some(&b'"') => i += 2,
                    b'"' => return Some(i + 1),
                    _ => i += 1,
                }
            }
        }
        let from = i;
        while bytes
            .get(i)
            .is_some_and(|b| b.is_ascii_alphanumeric() || *b == b'_' || *b == b'$' || *b >= 0x80)
        {
            i += 1;
        }
        (i > from).then_some(i)
    };
    let skip_space = |mut i: usize| {
        while bytes.get(i).is_some_and(u8::is_ascii_whitespace) {
            i += 1;
        }
        i
    };
    let mut end = ident_end(start)?;
    loop {
        let dot = skip_space(end);
        if bytes.get(dot) != Some(&b'.') {
            return Some(end);
        }
        end = ident_end(skip_space(dot + 1))?;
    }
}

#[cfg(test)]
mod tests {
    use super::name_end;

    #[test]
    fn a_name_ends_after_its_last_part() {
        let sql = r#"SELECT * FROM public . "my ""v""" x WHERE 1 = 1"#;
        let start = sql.find("public").unwrap();
        assert_eq!(
            &sql[start..name_end(sql, start).unwrap()],
            r#"public . "my ""v""""#
        );
        let sql = "SELECT * FROM v;";
        assert_eq!(name_end(sql, 14), Some(15));
    }
}
