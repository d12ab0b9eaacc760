//! Which CREATE / DROP / ALTER statements the proxy runs itself. This runs for every simple query
//! that starts with one of those words, so it looks at the leading words first and parses only
//! statements that can concern it: shardwire's own parser for sharding DDL and `CREATE TABLE`,
//! PostgreSQL's (pg_query) for `DROP TABLE`, `ALTER TABLE`, `CREATE [UNIQUE] INDEX`,
//! `DROP INDEX` and `REINDEX INDEX … CONCURRENTLY`, and those only while the catalog holds a
//! table.

use pg_query::protobuf::{AlterTableType, ObjectType, RangeVar, ReindexObjectType, ReindexStmt};
use pg_query::NodeEnum;
use tokio_postgres::error::SqlState;

use super::ddl::{ExecError, ProxyDdl};
use super::layout::DEFAULT_SCHEMA;
use crate::catalog::Snapshot;
use crate::ddl::lexer::{statement_texts, tokenize, TokenKind};
use crate::ddl::model::QualifiedName;
use crate::ddl::{self, CreateTable, Statement, TableKind};
use crate::sql::classify::{keyword, leading_keywords};

/// Whether the proxy must execute `sql` itself; `None` sends it to PostgreSQL unchanged.
pub fn recognise(sql: &[u8], snapshot: &Snapshot) -> Option<ProxyDdl> {
    const CREATE: u128 = keyword(b"create");
    const DROP: u128 = keyword(b"drop");
    const ALTER: u128 = keyword(b"alter");
    const TABLE: u128 = keyword(b"table");
    const TABLESPACE: u128 = keyword(b"tablespace");
    const INDEX: u128 = keyword(b"index");
    const UNIQUE: u128 = keyword(b"unique");
    const REINDEX: u128 = keyword(b"reindex");
    const VIEW: u128 = keyword(b"view");
    const OR: u128 = keyword(b"or");
    const TEMP: u128 = keyword(b"temp");
    const TEMPORARY: u128 = keyword(b"temporary");
    const RECURSIVE: u128 = keyword(b"recursive");
    const MATERIALIZED: u128 = keyword(b"materialized");
    let words = leading_keywords::<3>(sql);
    let text = std::str::from_utf8(sql).ok()?;
    if ddl::is_sharding_ddl(text) {
        return Some(sharding_statement(text));
    }
    match words {
        [CREATE, TABLE, _] => return create_table(text, snapshot),
        [DROP, TABLESPACE, _] => return drop_tablespace(text, snapshot),
        _ => {}
    }
    let postgres_form = matches!(
        words,
        [DROP, TABLE | INDEX, _]
            | [ALTER, TABLE, _]
            | [CREATE, INDEX, _]
            | [CREATE, UNIQUE, INDEX]
            | [REINDEX, _, _]
            | [CREATE | DROP | ALTER, VIEW, _]
            | [CREATE, OR | TEMP | TEMPORARY | RECURSIVE, _]
            | [DROP | ALTER, MATERIALIZED, VIEW]
    );
    if !postgres_form || snapshot.tables().is_empty() {
        return None;
    }
    postgres_statement(text, snapshot)
}

fn sharding_statement(text: &str) -> ProxyDdl {
    if statement_texts(text).is_some_and(|s| s.len() > 1) {
        return ProxyDdl::Refused(ExecError::MultiStatement);
    }
    match ddl::parse(text) {
        Ok(statement) => ProxyDdl::Sharding(Box::new(statement)),
        Err(e) => ProxyDdl::Refused(ExecError::parse(e, text)),
    }
}

/// A plain `CREATE TABLE` is the proxy's when PostgreSQL could not run it as written (Oracle
/// NoSQL syntax), when it declares a NoSQL shard key, when it is written `parent.child` with
/// `parent` a recorded table (a NoSQL child), or when a foreign key names a recorded table (the
/// sharding rules decide whether that is allowed). Anything else goes to PostgreSQL unchanged,
/// including text this parser cannot read.
fn create_table(text: &str, snapshot: &Snapshot) -> Option<ProxyDdl> {
    let statements = match ddl::parse_script(text) {
        Ok(statements) => statements,
        // Past the syntax, the parser only finds what breaks a rule of the dialects it owns
        // (a NoSQL type or TTL unit, a shard key out of place): PostgreSQL would only say it
        // cannot read the text.
        Err(e) if e.sqlstate() != SqlState::SYNTAX_ERROR => {
            return Some(ProxyDdl::Refused(ExecError::parse(e, text)))
        }
        Err(_) => return None,
    };
    let ours = |s: &Statement| match s {
        Statement::CreateTable(t) => is_ours(t, snapshot),
        Statement::CreateTablespaceSet(_)
        | Statement::DropTablespaceSet(_)
        | Statement::CreateTablespace(_)
        | Statement::DropTablespace(_)
        | Statement::AlterRowMovement(_)
        | Statement::AlterTtl(_) => true,
    };
    match statements.as_slice() {
        [only] if ours(only) => Some(ProxyDdl::Sharding(Box::new(only.clone()))),
        many if many.len() > 1 && many.iter().any(ours) => {
            Some(ProxyDdl::Refused(ExecError::MultiStatement))
        }
        _ => None,
    }
}

/// `DROP TABLESPACE name` is ours when the catalog records `name`; any other tablespace is
/// PostgreSQL's, which also reports a missing one (42704, or a notice under IF EXISTS) as a
/// dropped shardwire tablespace would be reported.
fn drop_tablespace(text: &str, snapshot: &Snapshot) -> Option<ProxyDdl> {
    let (tokens, _) = tokenize(text).ok()?;
    let mut words = tokens.iter().skip(2).peekable();
    if words.peek().is_some_and(|t| t.is_keyword("if")) {
        words.next();
        words.next();
    }
    let name = words
        .next()
        .filter(|t| matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent))?;
    snapshot
        .tablespace(&name.value)
        .map(|_| sharding_statement(text))
}

fn is_ours(t: &CreateTable, snapshot: &Snapshot) -> bool {
    let held = |name: &ddl::ObjectName| match name.parts.as_slice() {
        [table] => snapshot
            .table_by_name(DEFAULT_SCHEMA, &table.value)
            .is_some(),
        [schema, table] => snapshot
            .table_by_name(&schema.value, &table.value)
            .is_some(),
        _ => false,
    };
    let parts: Vec<&str> = t.name.parts.iter().map(|p| p.value.as_str()).collect();
    // A deeper name is a NoSQL child or nothing PostgreSQL can create; ours either way, so a
    // missing parent gets the proxy's message.
    let nosql_child = parts.len() > 2
        || ddl::naming::nosql_child(&parts, DEFAULT_SCHEMA).is_some_and(|(parent, _)| {
            snapshot
                .table_by_name(&parent.schema, &parent.name)
                .is_some_and(|p| p.nosql)
        });
    let references_held = t.constraints.iter().any(|c| match &c.body {
        ddl::ConstraintBody::ForeignKey { target, .. } => held(&target.table),
        _ => false,
    });
    t.non_postgres_syntax || t.kind != TableKind::Plain || nosql_child || references_held
}

/// A table's name as the proxy's DDL reads it: unqualified means `public`, whatever the
/// session's `search_path`, so an unqualified name that a recorded table in another schema has
/// is refused rather than read as `public`'s (the path may make it mean the other table).
fn table_name(snapshot: &Snapshot, schema: &str, name: &str) -> Result<QualifiedName, ExecError> {
    if !schema.is_empty() {
        return Ok(QualifiedName::new(schema, name));
    }
    match snapshot.named_outside_public(name) {
        Some(t) => Err(ExecError::Ambiguous {
            name: name.to_string(),
            table: t.qualified_name(),
        }),
        None => Ok(QualifiedName::new(DEFAULT_SCHEMA, name)),
    }
}

fn range_var_name(snapshot: &Snapshot, r: &RangeVar) -> Result<QualifiedName, ExecError> {
    table_name(snapshot, &r.schemaname, &r.relname)
}

/// The names a DROP lists, as written (schema empty when unqualified).
pub(super) fn dropped_names(objects: &[pg_query::Node]) -> Vec<(&str, &str)> {
    objects
        .iter()
        .filter_map(|o| match o.node.as_ref()? {
            NodeEnum::List(list) => {
                let parts: Vec<&str> = list
                    .items
                    .iter()
                    .filter_map(|i| match i.node.as_ref()? {
                        NodeEnum::String(s) => Some(s.sval.as_str()),
                        _ => None,
                    })
                    .collect();
                match parts.as_slice() {
                    [name] => Some(("", *name)),
                    [.., schema, name] => Some((*schema, *name)),
                    [] => None,
                }
            }
            _ => None,
        })
        .collect()
}

fn postgres_statement(text: &str, snapshot: &Snapshot) -> Option<ProxyDdl> {
    let parsed = pg_query::parse(text, 0).ok()?;
    let stmts = &parsed.protobuf.stmts;
    let mut ours = stmts
        .iter()
        .filter_map(|raw| classify(raw.stmt.as_ref()?.node.as_ref()?, text, snapshot));
    let first = ours.next()?;
    if stmts.len() > 1 {
        return Some(ProxyDdl::Refused(ExecError::MultiStatement));
    }
    Some(first)
}

fn held(snapshot: &Snapshot, name: &QualifiedName) -> bool {
    snapshot.table_by_name(&name.schema, &name.name).is_some()
}

fn unsupported(table: &QualifiedName, what: &'static str) -> Option<ProxyDdl> {
    Some(ProxyDdl::Refused(ExecError::Unsupported {
        table: table.to_string(),
        what,
    }))
}

/// An index name as written: unqualified means `public`, as for the proxy's other DDL.
fn index_name(schema: &str, name: &str) -> QualifiedName {
    match schema {
        "" => QualifiedName::new(DEFAULT_SCHEMA, name),
        schema => QualifiedName::new(schema, name),
    }
}

/// `REINDEX INDEX … CONCURRENTLY` runs wherever the index exists, outside any transaction.
/// `REINDEX TABLE` is routed by its table (`router::plan::utility`); the other forms, and
/// REINDEX INDEX without CONCURRENTLY, which may run inside a block, go where PostgreSQL
/// statements naming no recorded table go.
fn reindex_concurrently(r: &ReindexStmt, text: &str) -> Option<ProxyDdl> {
    let concurrently = r.params.iter().any(
        |p| matches!(p.node.as_ref(), Some(NodeEnum::DefElem(d)) if d.defname == "concurrently"),
    );
    if r.kind != ReindexObjectType::ReindexObjectIndex as i32 || !concurrently {
        return None;
    }
    let relation = r.relation.as_ref()?;
    Some(ProxyDdl::ReindexConcurrently {
        index: index_name(&relation.schemaname, &relation.relname),
        sql: text.to_owned(),
    })
}

/// The proxy's part in one PostgreSQL statement, if it has one.
fn classify(node: &NodeEnum, text: &str, snapshot: &Snapshot) -> Option<ProxyDdl> {
    let on_table = |table: QualifiedName, tag: &'static str| {
        Some(ProxyDdl::OnTable {
            table,
            sql: text.to_owned(),
            tag,
        })
    };
    let refused = |e: ExecError| Some(ProxyDdl::Refused(e));
    macro_rules! named {
        ($name:expr) => {
            match $name {
                Ok(name) => name,
                Err(e) => return refused(e),
            }
        };
    }
    if let Some(view) = super::view_ddl::recognise_view(node, text, snapshot) {
        return Some(view);
    }
    match node {
        NodeEnum::DropStmt(d) if d.remove_type == ObjectType::ObjectTable as i32 => {
            let names: Result<Vec<_>, _> = dropped_names(&d.objects)
                .into_iter()
                .map(|(schema, name)| table_name(snapshot, schema, name))
                .collect();
            let names = named!(names);
            let (tables, others): (Vec<_>, Vec<_>) =
                names.into_iter().partition(|n| held(snapshot, n));
            match (tables.is_empty(), others.is_empty()) {
                (true, _) => None,
                (false, true) => Some(ProxyDdl::DropTables { tables }),
                (false, false) => Some(ProxyDdl::Refused(ExecError::MixedDrop {
                    held: tables.iter().map(ToString::to_string).collect(),
                    others: others.iter().map(ToString::to_string).collect(),
                })),
            }
        }
        // An index does not say its table; it is dropped wherever it exists.
        NodeEnum::DropStmt(d) if d.remove_type == ObjectType::ObjectIndex as i32 => {
            let indexes: Vec<QualifiedName> = dropped_names(&d.objects)
                .into_iter()
                .map(|(schema, name)| index_name(schema, name))
                .collect();
            match (d.concurrent, indexes.first()) {
                // PostgreSQL refuses several names with CONCURRENTLY; a shard says so.
                (true, Some(index)) => Some(ProxyDdl::DropIndexConcurrently {
                    index: index.clone(),
                    sql: text.to_owned(),
                }),
                _ => Some(ProxyDdl::DropIndex {
                    indexes,
                    sql: text.to_owned(),
                }),
            }
        }
        NodeEnum::ReindexStmt(r) => reindex_concurrently(r, text),
        NodeEnum::AlterTableStmt(a) if a.objtype == ObjectType::ObjectTable as i32 => {
            let table = named!(range_var_name(snapshot, a.relation.as_ref()?));
            if !held(snapshot, &table) {
                return None;
            }
            let partitions_change = a.cmds.iter().any(|c| {
                matches!(c.node.as_ref(), Some(NodeEnum::AlterTableCmd(cmd))
                    if cmd.subtype == AlterTableType::AtAttachPartition as i32
                        || cmd.subtype == AlterTableType::AtDetachPartition as i32)
            });
            if partitions_change {
                return unsupported(&table, "attaching or detaching partitions");
            }
            on_table(table, "ALTER TABLE")
        }
        NodeEnum::RenameStmt(r) => {
            let table = named!(range_var_name(snapshot, r.relation.as_ref()?));
            let entry = snapshot.table_by_name(&table.schema, &table.name)?;
            if r.rename_type == ObjectType::ObjectTable as i32 {
                return unsupported(&table, "renaming it");
            }
            let key_column = entry.sharding_columns().any(|c| c.name == r.subname);
            if r.rename_type == ObjectType::ObjectColumn as i32 && key_column {
                return unsupported(&table, "renaming a sharding key column");
            }
            on_table(table, "ALTER TABLE")
        }
        NodeEnum::AlterObjectSchemaStmt(a) if a.object_type == ObjectType::ObjectTable as i32 => {
            let table = named!(range_var_name(snapshot, a.relation.as_ref()?));
            if !held(snapshot, &table) {
                return None;
            }
            unsupported(&table, "moving it to another schema")
        }
        NodeEnum::IndexStmt(i) => {
            let table = named!(range_var_name(snapshot, i.relation.as_ref()?));
            if !held(snapshot, &table) {
                return None;
            }
            if i.concurrent {
                // CONCURRENTLY cannot run inside the transaction that makes other DDL
                // all-or-nothing: it has a protocol of its own.
                return Some(ProxyDdl::CreateIndexConcurrently {
                    table,
                    index: Box::new(i.as_ref().clone()),
                });
            }
            on_table(table, "CREATE INDEX")
        }
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn recognised(sql: &str) -> Option<ProxyDdl> {
        recognise(sql.as_bytes(), &Snapshot::default())
    }

    #[test]
    fn takes_sharding_ddl_and_nosql_create_table_only() {
        let sharded =
            "create sharded table t (id int primary key) partition by consistent hash (id)";
        assert!(matches!(recognised(sharded), Some(ProxyDdl::Sharding(_))));
        let nosql = "CREATE TABLE p (name STRING, PRIMARY KEY (name))";
        assert!(matches!(recognised(nosql), Some(ProxyDdl::Sharding(_))));
        let shard_key = "CREATE TABLE p (a INTEGER, b INTEGER, PRIMARY KEY (SHARD(a), b))";
        assert!(matches!(recognised(shard_key), Some(ProxyDdl::Sharding(_))));
        assert!(recognised("CREATE TABLE p (id int PRIMARY KEY, v text)").is_none());
        assert!(recognised("CREATE TABLE p AS SELECT 1").is_none());
        // Without recorded tables, PostgreSQL DDL is PostgreSQL's.
        assert!(recognised("DROP TABLE p").is_none());
        assert!(recognised("CREATE INDEX i ON p (v)").is_none());
    }

    #[test]
    fn tablespaces_are_ours_only_on_shard_or_when_recorded() {
        let create = "CREATE TABLESPACE tbs ON SHARD s1";
        assert!(matches!(
            recognised(create),
            Some(ProxyDdl::Sharding(s)) if matches!(*s, Statement::CreateTablespace(_))
        ));
        assert!(recognised("CREATE TABLESPACE tbs LOCATION '/srv/pg'").is_none());
        // Not in the catalog: PostgreSQL's tablespace, and PostgreSQL's error when missing.
        assert!(recognised("DROP TABLESPACE tbs").is_none());
        assert!(recognised("DROP TABLESPACE IF EXISTS tbs").is_none());
    }

    #[test]
    fn refuses_mixed_texts_and_reports_syntax_errors_with_their_position() {
        let mixed = "CREATE SHARDED TABLE t (id int PRIMARY KEY); SELECT 1";
        assert!(matches!(
            recognised(mixed),
            Some(ProxyDdl::Refused(ExecError::MultiStatement))
        ));
        let broken = "CREATE SHARDED TABLE t (id int PRIMARY KEY) PARTITION BY HASH (id)";
        match recognised(broken) {
            Some(ProxyDdl::Refused(e @ ExecError::Parse { .. })) => {
                assert_eq!(e.position(), Some(broken.find("HASH").unwrap() as u32 + 1));
            }
            other => panic!("{other:?}"),
        }
    }

    /// A snapshot recording one sharded table, `public.t`.
    fn with_table() -> Snapshot {
        use crate::catalog::{KeyColumn, Shard, Table};
        use crate::model::{RowMovement, ShardId, ShardingMethod, TableId, TableKind, TableState};
        let table = Table {
            id: TableId(1),
            schema: "public".into(),
            name: "t".into(),
            kind: TableKind::Sharded,
            method: Some(ShardingMethod::ConsistentHash),
            key_columns: vec![KeyColumn::new("id", "bigint")],
            partition_set_columns: Vec::new(),
            primary_key: Vec::new(),
            root: TableId(1),
            parent: None,
            row_movement: RowMovement::Disabled,
            state: TableState::Active,
            tablespace_set: None,
            chunks: vec![ShardId(0), ShardId(1)].into(),
            partition_sets: Vec::new(),
            partitions: Vec::new(),
            generated: Vec::new(),
            nosql: false,
            ttl: None,
        };
        let shards = (0..2)
            .map(|i| Shard {
                id: ShardId(i),
                name: format!("s{}", i + 1),
            })
            .collect();
        Snapshot::new(1, shards, Vec::new(), Vec::new(), vec![table])
    }

    #[test]
    fn concurrently_forms_are_ours_on_recorded_tables() {
        let snapshot = with_table();
        let ours = |sql: &str| recognise(sql.as_bytes(), &snapshot);
        match ours("CREATE UNIQUE INDEX CONCURRENTLY ON t (id) INCLUDE (v)") {
            Some(d @ ProxyDdl::CreateIndexConcurrently { .. }) => {
                assert_eq!(d.concurrently(), Some("CREATE INDEX CONCURRENTLY"));
                let ProxyDdl::CreateIndexConcurrently { table, index } = d else {
                    unreachable!()
                };
                assert_eq!(table, QualifiedName::new("public", "t"));
                assert!(index.unique && index.concurrent);
            }
            other => panic!("{other:?}"),
        }
        // Not a recorded table: PostgreSQL's.
        assert!(ours("CREATE INDEX CONCURRENTLY ON other (v)").is_none());
        match ours("DROP INDEX CONCURRENTLY IF EXISTS s.i") {
            Some(ProxyDdl::DropIndexConcurrently { index, .. }) => {
                assert_eq!(index, QualifiedName::new("s", "i"));
            }
            other => panic!("{other:?}"),
        }
        assert!(matches!(
            ours("DROP INDEX i"),
            Some(ProxyDdl::DropIndex { .. })
        ));
        for sql in [
            "REINDEX INDEX CONCURRENTLY i",
            "REINDEX (VERBOSE) INDEX CONCURRENTLY public.i",
        ] {
            match ours(sql) {
                Some(d @ ProxyDdl::ReindexConcurrently { .. }) => {
                    assert_eq!(d.concurrently(), Some("REINDEX CONCURRENTLY"));
                }
                other => panic!("{sql}: {other:?}"),
            }
        }
        // Routed by their table, or PostgreSQL's (and allowed in a block).
        assert!(ours("REINDEX INDEX i").is_none());
        assert!(ours("REINDEX TABLE CONCURRENTLY t").is_none());
    }
}
