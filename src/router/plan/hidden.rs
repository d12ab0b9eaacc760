//! What a statement can hide from the router's walk of the tables it names: a data-modifying
//! statement nested in another, and an unqualified name that the session's `search_path` may
//! resolve to a recorded table outside schema `public`. Either would route the statement by
//! the wrong table; both are refused.

use super::scope::{resolve, Scope};
use super::walk::walk;
use super::{write_target, Plan, Refusal};
use crate::catalog::Table;
use pg_query::protobuf::Node;
use pg_query::NodeEnum;

/// A recorded table outside schema `public` whose name the statement uses unqualified (not as
/// a CTE's name), when the router reads unqualified names as `public`'s: the session's
/// `search_path` decides what the name means, and the statement could be routed to the wrong
/// shards. The router reads them so when it does not know the session's `search_path`, and in
/// the DDL the proxy runs itself, which names tables in `public` whatever the path.
pub(super) fn unqualified_elsewhere<'s>(stmt: &Node, snapshot: &'s Scope) -> Option<&'s Table> {
    if snapshot.tables().iter().all(|t| t.schema == "public") {
        return None;
    }
    let proxy_ddl = matches!(
        stmt.node,
        Some(
            NodeEnum::IndexStmt(_)
                | NodeEnum::AlterTableStmt(_)
                | NodeEnum::DropStmt(_)
                | NodeEnum::RenameStmt(_)
                | NodeEnum::AlterObjectSchemaStmt(_)
                | NodeEnum::CreateStmt(_)
        )
    );
    if snapshot.search_path.is_some() && !proxy_ddl {
        return None;
    }
    let mut ctes: Vec<&str> = Vec::new();
    walk(stmt, &mut |n| {
        if let Some(NodeEnum::CommonTableExpr(c)) = n.node.as_ref() {
            ctes.push(c.ctename.as_str());
        }
    });
    // Every table reference, wherever the node kind holds it (the planner's walk knows only
    // the kinds it routes): an object with a `relname` is one.
    let tree = serde_json::to_value(stmt).ok()?;
    let mut pending = vec![&tree];
    while let Some(v) = pending.pop() {
        match v {
            serde_json::Value::Object(map) => {
                let unqualified = map
                    .get("schemaname")
                    .and_then(serde_json::Value::as_str)
                    .is_none_or(str::is_empty);
                if let Some(name) = map.get("relname").and_then(serde_json::Value::as_str) {
                    if unqualified && !ctes.contains(&name) {
                        if let Some(t) = snapshot.named_outside_public(name) {
                            return Some(t);
                        }
                    }
                }
                pending.extend(map.values());
            }
            serde_json::Value::Array(items) => pending.extend(items),
            _ => {}
        }
    }
    None
}

/// The refusal of an unqualified name that a recorded table outside `public` has.
pub(super) fn ambiguous(t: &Table) -> Plan {
    Plan::Refused(Refusal::Ambiguous {
        name: t.name.clone(),
        table: t.qualified_name(),
    })
}

/// The recorded table that a data-modifying statement nested in `stmt` (not `stmt` itself)
/// writes, if any.
pub(super) fn nested_write_target<'s>(stmt: &Node, snapshot: &'s Scope) -> Option<&'s Table> {
    let mut found = None;
    walk(stmt, &mut |n| {
        if found.is_some() || std::ptr::eq(n, stmt) {
            return;
        }
        let target = match n.node.as_ref() {
            Some(NodeEnum::MergeStmt(m)) => m.relation.as_ref(),
            Some(other) => write_target(other),
            None => None,
        };
        found = target.and_then(|r| resolve(snapshot, r));
    });
    found
}
