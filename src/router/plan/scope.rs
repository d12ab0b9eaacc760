//! How a statement's table names are read: qualified ones as written, unqualified ones along the
//! session's `search_path` when the proxy knows it, else in schema `public`.

use pg_query::protobuf::RangeVar;

use crate::catalog::{Snapshot, Table};

/// The catalog as one statement's names see it: an unqualified name is looked up along the
/// session's `search_path` when the proxy knows it, else in schema `public`.
///
/// It dereferences to the snapshot; a text planned inside another's plan goes through
/// [`super::plan_scoped`] with the scope, not [`super::plan`] with the snapshot, which would lose
/// the path.
pub struct Scope<'a> {
    pub(super) snapshot: &'a Snapshot,
    pub(super) search_path: Option<&'a [String]>,
}

impl std::ops::Deref for Scope<'_> {
    type Target = Snapshot;

    fn deref(&self) -> &Snapshot {
        self.snapshot
    }
}

/// The catalog's table for a name; an unqualified one is looked up along the session's
/// `search_path` when the proxy knows it, else in `public`. Only recorded tables are seen: a
/// plain table of the same name earlier on the path would hide the recorded one from
/// PostgreSQL, not from the router.
pub(super) fn resolve<'s>(snapshot: &'s Scope, r: &RangeVar) -> Option<&'s Table> {
    resolve_name(snapshot, &r.schemaname, &r.relname)
}

/// [`resolve`] of a name given as its parts (`schema` empty when unqualified).
pub(super) fn resolve_name<'s>(snapshot: &'s Scope, schema: &str, name: &str) -> Option<&'s Table> {
    match (schema, snapshot.search_path) {
        ("", Some(path)) => snapshot.resolve_table(path, name),
        ("", None) => snapshot.table_by_name("public", name),
        (schema, _) => snapshot.table_by_name(schema, name),
    }
}
