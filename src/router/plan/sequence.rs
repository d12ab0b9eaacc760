//! Calls of a generated sharding key's sequence: `nextval('t_id_seq')`, `currval`, `setval`.
//!
//! The proxy gives a generated key its values from the cluster-wide sequence in the catalog, so
//! the shards' own copies of the sequence never advance: a call of one must be answered by the
//! proxy (a statement of its own) or refused, never sent to a shard.

use super::scope::{resolve, Scope};
use super::walk::walk;
use super::{unsupported, ColumnSource, Plan, Planned};
use crate::catalog::{Table, TableId, TableKind};
use pg_query::protobuf::{a_const, Node, SelectStmt, SetOperation};
use pg_query::NodeEnum;

/// What a sequence call asks for, among those the proxy answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SequenceFunction {
    Nextval,
    Currval,
}

/// `SELECT nextval('<key sequence>')` or `SELECT currval(…)` on its own, which the proxy
/// answers from the cluster-wide sequence of `table`'s key column `column`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SequenceCall {
    pub function: SequenceFunction,
    pub table: TableId,
    pub column: String,
    /// The sequence's name as PostgreSQL's messages print it (unqualified).
    pub sequence: String,
    /// The result column's name: the function's, or the alias.
    pub result_name: String,
}

/// A call of a sequence function whose argument is a constant naming a key sequence.
struct KeyCall<'a> {
    node: &'a Node,
    function: &'static str,
    table: &'a Table,
    column: &'a str,
    sequence: String,
}

/// PostgreSQL's identifiers are at most this many bytes (NAMEDATALEN - 1).
const MAX_IDENTIFIER: usize = 63;

/// The name PostgreSQL gives the sequence of a serial or identity column: `<table>_<column>_seq`,
/// the longer of the two names shortened first when it would pass 63 bytes (makeObjectName).
/// A name taken already gets a number appended on the shard, which this does not follow.
pub fn serial_sequence_name(table: &str, column: &str) -> String {
    let avail = MAX_IDENTIFIER - "_".len() - "_seq".len();
    let (mut t, mut c) = (table.len(), column.len());
    while t + c > avail {
        if t > c {
            t -= 1;
        } else {
            c -= 1;
        }
    }
    format!("{}_{}_seq", clip(table, t), clip(column, c))
}

/// The longest prefix of `s` of at most `len` bytes that ends on a character boundary.
fn clip(s: &str, mut len: usize) -> &str {
    while !s.is_char_boundary(len) {
        len -= 1;
    }
    &s[..len]
}

/// A `regclass` text as its input function reads it (`"My Seq"`, `public.t_id_seq`): the
/// schema if given, and the relation name, unquoted parts folded to lower case.
fn regclass_name(text: &str) -> Option<(Option<String>, String)> {
    let mut parts: Vec<String> = Vec::new();
    let mut chars = text.trim().chars().peekable();
    loop {
        let mut part = String::new();
        if chars.peek() == Some(&'"') {
            chars.next();
            loop {
                match chars.next()? {
                    '"' if chars.peek() == Some(&'"') => {
                        chars.next();
                        part.push('"');
                    }
                    '"' => break,
                    ch => part.push(ch),
                }
            }
        } else {
            while let Some(&ch) = chars.peek() {
                if ch == '.' || ch.is_whitespace() {
                    break;
                }
                part.push(ch.to_ascii_lowercase());
                chars.next();
            }
        }
        if part.is_empty() {
            return None;
        }
        let len = clip(&part, MAX_IDENTIFIER).len();
        part.truncate(len);
        parts.push(part);
        while chars.peek().is_some_and(|c| c.is_whitespace()) {
            chars.next();
        }
        match chars.next() {
            None => break,
            Some('.') => {
                while chars.peek().is_some_and(|c| c.is_whitespace()) {
                    chars.next();
                }
            }
            Some(_) => return None,
        }
    }
    let name = parts.pop()?;
    match parts.len() {
        0 => Some((None, name)),
        // A database name before the schema must be the current one; the shard checks.
        1 | 2 => Some((parts.pop(), name)),
        _ => None,
    }
}

/// The function and the constant argument of `nextval('…')`, `currval('…')`, `setval('…', …)`,
/// also written `'…'::regclass` or `pg_catalog.nextval`.
fn sequence_function_call(node: &Node) -> Option<(&'static str, &str)> {
    let Some(NodeEnum::FuncCall(f)) = node.node.as_ref() else {
        return None;
    };
    let function = match crate::sql::func::builtin_name(f)? {
        "nextval" => "nextval",
        "currval" => "currval",
        "setval" => "setval",
        _ => return None,
    };
    let mut arg = f.args.first()?;
    if let Some(NodeEnum::TypeCast(t)) = arg.node.as_ref() {
        arg = t.arg.as_deref()?;
    }
    match arg.node.as_ref()? {
        NodeEnum::AConst(c) => match c.val.as_ref()? {
            a_const::Val::Sval(s) => Some((function, s.sval.as_str())),
            _ => None,
        },
        _ => None,
    }
}

/// The sharded table and generated key column whose sequence `text` names, if any; unqualified
/// names mean `public`, as table names do here.
fn key_sequence<'s>(snapshot: &'s Scope, text: &str) -> Option<(&'s Table, &'s str, String)> {
    let (schema, name) = regclass_name(text)?;
    let schema = schema.unwrap_or_else(|| "public".into());
    snapshot
        .tables()
        .iter()
        .filter(|t| t.kind == TableKind::Sharded && t.schema == schema)
        .find_map(|t| {
            t.generated
                .iter()
                .find(|g| serial_sequence_name(&t.name, &g.column) == name)
                .map(|g| (t, g.column.as_str(), name.clone()))
        })
}

fn key_call<'a>(node: &'a Node, snapshot: &'a Scope) -> Option<KeyCall<'a>> {
    let (function, text) = sequence_function_call(node)?;
    let (table, column, sequence) = key_sequence(snapshot, text)?;
    Some(KeyCall {
        node,
        function,
        table,
        column,
        sequence,
    })
}

/// Whether `expr` is `nextval` of the sequence of `table`'s generated key column `column`: an
/// INSERT that writes it in the key's place asks for a generated value as DEFAULT does.
pub(super) fn is_own_nextval(expr: &Node, table: &Table, column: &str) -> bool {
    let Some(("nextval", text)) = sequence_function_call(expr) else {
        return false;
    };
    regclass_name(text).is_some_and(|(schema, name)| {
        schema.as_deref().unwrap_or("public") == table.schema
            && name == serial_sequence_name(&table.name, column)
    })
}

/// Whether the text may call a sequence function, which makes its literals part of what the
/// plan depends on (the sequence's name is one).
pub(super) fn mentions_sequence_function(text: &[u8]) -> bool {
    text.windows(6).any(|w| {
        w.eq_ignore_ascii_case(b"nextva")
            || w.eq_ignore_ascii_case(b"currva")
            || w.eq_ignore_ascii_case(b"setval")
    })
}

/// The plan of a statement that calls a key sequence's functions, `None` when it calls none or
/// only as an INSERT's key values (which [`super::insert`] routes as generated keys).
pub(super) fn plan_sequence_calls(
    stmt: &Node,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Option<Planned> {
    if snapshot.tables().iter().all(|t| t.generated.is_empty()) {
        return None;
    }
    let mut calls = Vec::new();
    walk(stmt, &mut |n| calls.extend(key_call(n, snapshot)));
    if calls.is_empty() {
        return None;
    }
    let node = stmt.node.as_ref()?;
    if let (NodeEnum::SelectStmt(s), [call]) = (node, calls.as_slice()) {
        if let Some(result_name) = lone_call(s, call.node) {
            let function = match call.function {
                "nextval" => SequenceFunction::Nextval,
                "currval" => SequenceFunction::Currval,
                _ => return Some(Planned::Plan(refusal(call, false))),
            };
            return Some(Planned::Plan(Plan::Sequence(SequenceCall {
                function,
                table: call.table.id,
                column: call.column.to_string(),
                sequence: call.sequence.clone(),
                result_name,
            })));
        }
    }
    let mut keys_of_insert: Vec<&Node> = Vec::new();
    if let NodeEnum::InsertStmt(i) = node {
        match insert_key_values(i, snapshot, columns) {
            Ok(nodes) => keys_of_insert = nodes,
            Err(table) => return Some(Planned::NeedColumns(table)),
        }
    }
    let is_insert = matches!(node, NodeEnum::InsertStmt(_));
    calls
        .iter()
        .find(|c| !keys_of_insert.iter().any(|k| std::ptr::eq(*k, c.node)))
        .map(|c| Planned::Plan(refusal(c, is_insert)))
}

/// The result column's name when `s` is `SELECT <call> [AS name]` and nothing else.
fn lone_call(s: &SelectStmt, call: &Node) -> Option<String> {
    let bare = s.from_clause.is_empty()
        && s.where_clause.is_none()
        && s.group_clause.is_empty()
        && s.having_clause.is_none()
        && s.sort_clause.is_empty()
        && s.limit_count.is_none()
        && s.limit_offset.is_none()
        && s.values_lists.is_empty()
        && s.with_clause.is_none()
        && s.distinct_clause.is_empty()
        && s.into_clause.is_none()
        && s.locking_clause.is_empty()
        && s.window_clause.is_empty()
        && (s.op == SetOperation::SetopNone as i32 || s.op == SetOperation::Undefined as i32);
    let [target] = s.target_list.as_slice() else {
        return None;
    };
    let Some(NodeEnum::ResTarget(r)) = target.node.as_ref() else {
        return None;
    };
    let is_call = r.val.as_deref().is_some_and(|v| std::ptr::eq(v, call));
    let Some(NodeEnum::FuncCall(f)) = call.node.as_ref() else {
        return None;
    };
    let plain = f.agg_filter.is_none() && f.over.is_none() && f.args.len() == 1;
    (bare && is_call && plain).then(|| {
        if r.name.is_empty() {
            sequence_function_call(call).map_or_else(String::new, |(f, _)| f.to_string())
        } else {
            r.name.clone()
        }
    })
}

/// The VALUES items of an INSERT that are `nextval` of the sequence of the column they fill,
/// the target's generated key: those are routed as generated keys. `Err`: the table's columns
/// are needed first.
fn insert_key_values<'a>(
    i: &'a pg_query::protobuf::InsertStmt,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Result<Vec<&'a Node>, TableId> {
    let Some(target) = i.relation.as_ref().and_then(|r| resolve(snapshot, r)) else {
        return Ok(Vec::new());
    };
    let Some(NodeEnum::SelectStmt(select)) = i.select_stmt.as_deref().and_then(|s| s.node.as_ref())
    else {
        return Ok(Vec::new());
    };
    let names: Vec<String> = if i.cols.is_empty() {
        columns
            .columns(target.id)
            .ok_or(target.id)?
            .as_ref()
            .clone()
    } else {
        i.cols
            .iter()
            .filter_map(|c| match c.node.as_ref()? {
                NodeEnum::ResTarget(r) => Some(r.name.clone()),
                _ => None,
            })
            .collect()
    };
    let mut out = Vec::new();
    for row in &select.values_lists {
        let Some(NodeEnum::List(list)) = row.node.as_ref() else {
            continue;
        };
        for (item, name) in list.items.iter().zip(&names) {
            let is_key = target.key_columns.iter().any(|k| k.name == *name)
                || target.partition_set_columns.iter().any(|k| k.name == *name);
            if is_key && is_own_nextval(item, target, name) {
                out.push(item);
            }
        }
    }
    Ok(out)
}

fn refusal(call: &KeyCall<'_>, in_insert: bool) -> Plan {
    let what = format!(
        "{}('{}') of generated sharding key {}.\"{}\"",
        call.function,
        call.sequence,
        call.table.qualified_name(),
        call.column
    );
    let instead = match call.function {
        "setval" => "its values come from shardwire's cluster-wide sequence, which cannot be \
                     set through SQL yet"
            .to_string(),
        f if in_insert => format!(
            "shardwire answers it only as a statement of its own or as the key's value in \
             VALUES: leave the column out of the INSERT (or write DEFAULT), or run \
             SELECT {f}('{}') first and insert its value",
            call.sequence
        ),
        f => format!(
            "shardwire answers it only as a statement of its own: run SELECT {f}('{}') by \
             itself and use its value",
            call.sequence
        ),
    };
    unsupported(format!("{what} is not supported here: {instead}"))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn sequence_names_follow_postgresql() {
        assert_eq!(serial_sequence_name("t", "id"), "t_id_seq");
        let long = "a".repeat(70);
        let name = serial_sequence_name(&long, "id");
        assert_eq!(name.len(), 63);
        assert_eq!(name, format!("{}_id_seq", "a".repeat(56)));
        let name = serial_sequence_name(&"t".repeat(40), &"c".repeat(40));
        assert_eq!(name, format!("{}_{}_seq", "t".repeat(29), "c".repeat(29)));
    }

    #[test]
    fn regclass_text_is_read_as_postgresql_reads_it() {
        assert_eq!(regclass_name("T_Id_Seq"), Some((None, "t_id_seq".into())));
        assert_eq!(
            regclass_name("Public . \"My.Seq\""),
            Some((Some("public".into()), "My.Seq".into()))
        );
        assert_eq!(regclass_name("\"a\"\"b\""), Some((None, "a\"b".into())));
        assert_eq!(regclass_name("a b"), None);
        assert_eq!(regclass_name(""), None);
        assert_eq!(regclass_name("a..b"), None);
    }

    #[test]
    fn calls_are_recognised_in_their_spellings() {
        for sql in [
            "SELECT nextval('s')",
            "SELECT NEXTVAL('s'::regclass)",
            "SELECT pg_catalog.nextval('s')",
        ] {
            let tree = pg_query::parse(sql, 0).unwrap();
            let mut found = None;
            for raw in &tree.protobuf.stmts {
                walk(raw.stmt.as_deref().unwrap(), &mut |n| {
                    if let Some((f, arg)) = sequence_function_call(n) {
                        found = Some((f, arg.to_string()));
                    }
                });
            }
            assert_eq!(found, Some(("nextval", "s".to_string())), "{sql}");
        }
    }
}
