//! What a function's body says about recorded tables. A function runs on the one shard its
//! call reaches (or, as a trigger, on the shard of the row): a body that reads a sharded table
//! there sees that shard's rows only, and one that writes a duplicated table changes that
//! shard's copy only. Neither is an answer one PostgreSQL would give, so such functions are
//! refused when they are made.
//!
//! The body is read for names, not parsed: PL/pgSQL, other languages and dynamic SQL (`EXECUTE
//! 'SELECT … FROM t'`) name their tables in text that only the function's language reads, so
//! every word of it counts, inside string literals too. A name the body builds at run time
//! (`EXECUTE format('… %I', name)`) is not seen.

use super::scope::Scope;
use super::utility::strings;
use super::walk::walk;
use super::{unsupported, Plan};
use crate::catalog::{Table, TableKind};
use pg_query::protobuf::{CreateFunctionStmt, DoStmt, Node};
use pg_query::NodeEnum;

/// The refusal of a function whose body names a sharded table, or names a duplicated table and
/// may write (a data-modifying word anywhere in it).
pub(super) fn body_refusal(f: &CreateFunctionStmt, snapshot: &Scope) -> Option<Plan> {
    if snapshot.tables().is_empty() {
        return None;
    }
    let texts = body_texts(f);
    let words: Vec<String> = texts.iter().flat_map(|t| words(t)).collect();
    let named = |table: &Table| words.contains(&table.name);
    let what = if f.is_procedure {
        "procedure"
    } else {
        "function"
    };
    let name = strings(&f.funcname).join(".");
    if let Some(t) = snapshot
        .tables()
        .iter()
        .find(|t| t.kind != TableKind::Duplicated && named(t))
    {
        return Some(unsupported(format!(
            "{what} \"{name}\" names sharded table \"{}\" in its body: it would run on one shard \
             and see only that shard's rows; query the table in the statement that calls it \
             instead (shardwire routes those)",
            t.qualified_name()
        )));
    }
    const WRITES: [&str; 6] = ["insert", "update", "delete", "merge", "truncate", "copy"];
    let writes = words.iter().any(|w| WRITES.contains(&w.as_str()));
    let duplicated = snapshot
        .tables()
        .iter()
        .find(|t| t.kind == TableKind::Duplicated && named(t))?;
    writes.then(|| {
        unsupported(format!(
            "{what} \"{name}\" names duplicated table \"{}\" in a body that may write: it would \
             run on one shard and change only that shard's copy; write the table in a statement \
             of its own (shardwire writes every copy)",
            duplicated.qualified_name()
        ))
    })
}

/// The refusal of a `DO` block that names a recorded table: it runs on one shard.
pub(super) fn do_refusal(d: &DoStmt, snapshot: &Scope) -> Option<Plan> {
    let words: Vec<String> = as_strings(&d.args).iter().flat_map(|t| words(t)).collect();
    let table = snapshot.tables().iter().find(|t| words.contains(&t.name))?;
    Some(unsupported(format!(
        "a DO block that names table \"{}\", which shardwire shards or duplicates, is not \
         supported: it would run on one shard; send its statements through the proxy instead",
        table.qualified_name()
    )))
}

/// The strings of the `AS` options among `options` (a body, or a C function's file and symbol).
fn as_strings(options: &[Node]) -> Vec<String> {
    options
        .iter()
        .filter_map(|o| match o.node.as_ref()? {
            NodeEnum::DefElem(d) if d.defname == "as" => d.arg.as_deref(),
            _ => None,
        })
        .flat_map(|arg| match arg.node.as_ref() {
            Some(NodeEnum::List(l)) => strings(&l.items),
            Some(NodeEnum::String(s)) => vec![s.sval.as_str()],
            _ => Vec::new(),
        })
        .map(str::to_string)
        .collect()
}

/// The body as text: the `AS` strings, or the statements of a `BEGIN ATOMIC` body.
fn body_texts(f: &CreateFunctionStmt) -> Vec<String> {
    let mut texts = as_strings(&f.options);
    if let Some(body) = f.sql_body.as_deref() {
        walk(body, &mut |n| {
            if let Some(inner) = n.node.as_ref() {
                if is_statement(inner) {
                    texts.extend(inner.deparse(Default::default()).ok());
                }
            }
        });
    }
    texts
}

fn is_statement(n: &NodeEnum) -> bool {
    matches!(
        n,
        NodeEnum::SelectStmt(_)
            | NodeEnum::InsertStmt(_)
            | NodeEnum::UpdateStmt(_)
            | NodeEnum::DeleteStmt(_)
            | NodeEnum::MergeStmt(_)
            | NodeEnum::ReturnStmt(_)
    )
}

/// The identifiers of `text` as PostgreSQL resolves them: unquoted folded to lower case,
/// quoted as written. Quote marks of string literals are skipped, their words read.
fn words(text: &str) -> Vec<String> {
    let mut out = Vec::new();
    let mut chars = text.char_indices().peekable();
    while let Some((start, c)) = chars.next() {
        if c == '"' {
            let mut word = String::new();
            while let Some((_, c)) = chars.next() {
                if c == '"' {
                    if chars.peek().is_some_and(|&(_, n)| n == '"') {
                        chars.next();
                    } else {
                        break;
                    }
                }
                word.push(c);
            }
            out.push(word);
        } else if c.is_alphabetic() || c == '_' {
            let mut end = start + c.len_utf8();
            while let Some(&(i, n)) = chars.peek() {
                if !(n.is_alphanumeric() || n == '_' || n == '$') {
                    break;
                }
                end = i + n.len_utf8();
                chars.next();
            }
            out.push(text[start..end].to_lowercase());
        }
    }
    out
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn words_fold_unquoted_names_and_keep_quoted_ones() {
        assert_eq!(
            words("SELECT count(*) FROM Orders o, \"Line\"\"Items\" WHERE x='customers'"),
            [
                "select",
                "count",
                "from",
                "orders",
                "o",
                "Line\"Items",
                "where",
                "x",
                "customers"
            ]
        );
        assert_eq!(words("a$1 _b2 3c"), ["a$1", "_b2", "c"]);
    }
}
