//! The exact general path of a multi-shard read: each table the statement names is read from
//! its shards (with the WHERE conditions that concern only it) into a temporary table on one
//! PostgreSQL, which then runs the client's statement over those tables. PostgreSQL itself
//! evaluates every expression, aggregate, join, sort and set operation, so the answer is the
//! one a single PostgreSQL holding all the rows would give.

use super::conditions::conjuncts;
use super::row_origin::preserved_range_vars;
use super::scope::{resolve, resolve_name, Scope};
use super::{plan_scoped, ColumnSource, Plan, Planned, Refusal};
use crate::catalog::{Table, TableId};
use crate::sql::deparse::deparse;
use crate::sql::quote::quote_ident;
use pg_query::protobuf::{LimitOption, Node, SelectStmt, SetOperation};
use pg_query::NodeEnum;
use serde_json::Value as Json;
use std::collections::HashMap;

/// A read the proxy answers by letting one PostgreSQL combine the shards' rows.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CombinePlan {
    /// Each recorded table the statement names, once.
    pub pulls: Vec<Pull>,
    /// The client's statement with each pulled table replaced by its temporary table (aliased
    /// with the name the statement gave it); its `$n` parameters as the client wrote them.
    pub sql: String,
    /// The statement also names tables the catalog does not record: the combining step reads
    /// them where they live, on the first shard.
    pub reads_unrecorded: bool,
    /// A grouped read over one family whose shards can aggregate their own rows first; the
    /// pulls above are the fallback when a partial's type rules it out at execution.
    pub partial: Option<super::PartialPlan>,
    /// `sql` is a `COPY (SELECT …) TO STDOUT`: the combining step writes the COPY's data.
    pub copy_out: bool,
}

/// One table's rows, read from its shards into a temporary table of the combining step.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Pull {
    pub table: TableId,
    /// `CREATE TEMP TABLE … ON COMMIT DROP` with the table's columns and types.
    pub create: String,
    /// The temporary table, schema-qualified.
    pub temp: String,
    /// What each shard runs: every column of the table, with the conditions pushed down.
    pub select: String,
    /// Where `select` goes: planned as any read of the table is (its key conditions prune).
    pub route: Plan,
}

/// The schema the combining step's tables live in, and the prefix of their names.
pub const TEMP_PREFIX: &str = "shardwire_rows_";

/// A table reference anywhere in the statement, as the parser saw it.
#[derive(Debug)]
struct TableRef {
    schema: String,
    name: String,
    alias: Option<String>,
    /// Byte offset of the name in the statement text.
    location: usize,
}

/// Why the general path cannot answer a statement (0A000), or the columns it needs first.
pub(super) enum NotCombinable {
    Refused(String),
    NeedColumns(TableId),
}

/// Plans the general path for the read `stmt`, whose text is `sql`.
pub(super) fn plan_combine(
    sql: &str,
    stmt: &Node,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Result<CombinePlan, NotCombinable> {
    let refuse = |why: &str| Err(NotCombinable::Refused(why.to_string()));
    let Some(NodeEnum::SelectStmt(select)) = stmt.node.as_ref() else {
        return refuse("only SELECT can combine rows of several shards");
    };
    let tree = serde_json::to_value(stmt)
        .map_err(|e| NotCombinable::Refused(format!("cannot read the statement: {e}")))?;
    let mut found = Found::default();
    found.visit(&tree);
    if let Some(what) = found.refused {
        return refuse(what);
    }
    if select.into_clause.is_some() {
        return refuse("SELECT INTO over several shards is not supported: use CREATE TABLE … AS on one shard, or INSERT … SELECT");
    }

    let (pulled, reads_unrecorded) = recorded_tables(&found, snapshot)?;
    let pushed = pushed_conditions(select, snapshot, &pulled);
    let mut pulls = Vec::with_capacity(pulled.len());
    let mut temp_of: HashMap<TableId, String> = HashMap::new();
    for (i, (t, refs)) in pulled.iter().enumerate() {
        let conds = pushed.get(&t.id).map_or(&[][..], Vec::as_slice);
        let pull = plan_pull(i, t, refs, conds, snapshot, columns)?;
        temp_of.insert(t.id, pull.temp.clone());
        pulls.push(pull);
    }

    let sql = rewrite(sql, &found.tables, |r| {
        if r.schema.is_empty() && snapshot.is_cte_ref(r.location as i32) {
            return None;
        }
        resolve_name(snapshot, &r.schema, &r.name).and_then(|t| temp_of.get(&t.id).cloned())
    })
    .map_err(NotCombinable::Refused)?;
    check_rewrite(&sql, snapshot, &found.ctes).map_err(NotCombinable::Refused)?;
    Ok(CombinePlan {
        pulls,
        sql,
        reads_unrecorded,
        partial: None,
        copy_out: false,
    })
}

/// Each recorded table the statement names, with its references.
type Pulled<'a> = Vec<(&'a Table, Vec<&'a TableRef>)>;

/// Groups the references of each recorded table, since each is pulled once however often it is
/// named; and tells whether the statement also reads tables the catalog does not record.
fn recorded_tables<'a>(
    found: &'a Found,
    snapshot: &'a Scope,
) -> Result<(Pulled<'a>, bool), NotCombinable> {
    let mut pulled: Pulled<'a> = Vec::new();
    let mut reads_unrecorded = false;
    for r in &found.tables {
        // CTE names shadow tables.
        if r.schema.is_empty() && snapshot.is_cte_ref(r.location as i32) {
            continue;
        }
        // A name the router's walk did not place in a WITH query's scope.
        if r.schema.is_empty() && found.ctes.contains(&r.name) {
            if resolve_name(snapshot, &r.schema, &r.name).is_some() {
                return Err(NotCombinable::Refused(format!(
                    "a CTE named like the table \"{}\" in a query over several shards is not \
                     supported: rename the CTE",
                    r.name
                )));
            }
            continue;
        }
        match resolve_name(snapshot, &r.schema, &r.name) {
            None => reads_unrecorded = true,
            Some(t) if !t.state.takes_statements() => {
                return Err(NotCombinable::Refused(
                    Refusal::NotActive {
                        table: t.qualified_name(),
                        state: t.state,
                    }
                    .to_string(),
                ))
            }
            Some(t) => match pulled.iter_mut().find(|(p, _)| p.id == t.id) {
                Some((_, refs)) => refs.push(r),
                None => pulled.push((t, vec![r])),
            },
        }
    }
    Ok((pulled, reads_unrecorded))
}

/// The WHERE conditions each shard's read applies, so that fewer rows are pulled: those that
/// concern one table referenced once, in a position where filtering its rows first cannot
/// change the result (not the nullable side of an outer join).
fn pushed_conditions<'q>(
    select: &'q SelectStmt,
    snapshot: &Scope,
    pulled: &Pulled<'_>,
) -> HashMap<TableId, Vec<&'q Node>> {
    let mut pushed = HashMap::new();
    if select.op != SetOperation::SetopNone as i32 && select.op != SetOperation::Undefined as i32 {
        return pushed;
    }
    let mut inner = Vec::new();
    preserved_range_vars(&select.from_clause, &mut inner);
    let single = select.from_clause.len() == 1
        && matches!(
            select.from_clause[0].node.as_ref(),
            Some(NodeEnum::RangeVar(_))
        );
    let mut conds = Vec::new();
    if let Some(w) = select.where_clause.as_deref() {
        conjuncts(w, &mut conds);
    }
    for rv in inner {
        let Some(t) = resolve(snapshot, rv) else {
            continue;
        };
        let Some((_, refs)) = pulled.iter().find(|(p, _)| p.id == t.id) else {
            continue;
        };
        if refs.len() != 1 {
            continue;
        }
        let qualifier = rv
            .alias
            .as_ref()
            .map_or(rv.relname.as_str(), |a| a.aliasname.as_str());
        let mine: Vec<&Node> = conds
            .iter()
            .copied()
            .filter(|c| concerns_only(c, qualifier, single))
            .collect();
        if !mine.is_empty() {
            pushed.insert(t.id, mine);
        }
    }
    pushed
}

/// The `i`th pull, of table `t`: its temporary table, and the shards' read of it with `conds`
/// pushed down, routed as any read of the table is so that its key conditions prune.
fn plan_pull(
    i: usize,
    t: &Table,
    refs: &[&TableRef],
    conds: &[&Node],
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Result<Pull, NotCombinable> {
    let Some(defs) = columns.column_defs(t.id) else {
        return Err(NotCombinable::NeedColumns(t.id));
    };
    let temp = format!("pg_temp.{TEMP_PREFIX}{}", i + 1);
    let cols: Vec<String> = defs
        .iter()
        .map(|c| match &c.collation {
            Some(coll) => format!("{} {} COLLATE {coll}", quote_ident(&c.name), c.type_sql),
            None => format!("{} {}", quote_ident(&c.name), c.type_sql),
        })
        .collect();
    let create = format!(
        "CREATE TEMP TABLE {temp} ({}) ON COMMIT DROP",
        cols.join(", ")
    );
    // The reference as written (its alias qualifies the pushed conditions' columns).
    let alias = if conds.is_empty() {
        None
    } else {
        refs[0].alias.clone().or_else(|| Some(t.name.clone()))
    };
    let select = pull_select(t, alias.as_deref(), conds)
        .map_err(|e| NotCombinable::Refused(format!("cannot build the shards' query: {e}")))?;
    let route = match plan_scoped(&select, snapshot, columns) {
        Planned::Plan(p) => p,
        Planned::NeedColumns(id) => return Err(NotCombinable::NeedColumns(id)),
    };
    if let Plan::Refused(r) = &route {
        return Err(NotCombinable::Refused(r.to_string()));
    }
    Ok(Pull {
        table: t.id,
        create,
        temp,
        select,
        route,
    })
}

/// Every table reference in `stmt` held as a node, found by a walk of every field of the parse
/// tree (the planner's own walk descends only into the node kinds it knows): schema, name and
/// position in the text.
pub(super) fn named_tables(stmt: &Node) -> Vec<(String, String, i32)> {
    let Ok(tree) = serde_json::to_value(stmt) else {
        return Vec::new();
    };
    let mut found = Found::default();
    found.visit(&tree);
    found
        .tables
        .into_iter()
        .map(|r| (r.schema, r.name, r.location as i32))
        .collect()
}

/// What a walk of the whole parse tree (as JSON: every field of every node, whatever its
/// kind) found.
#[derive(Default)]
struct Found {
    tables: Vec<TableRef>,
    ctes: Vec<String>,
    refused: Option<&'static str>,
}

impl Found {
    fn visit(&mut self, v: &Json) {
        match v {
            Json::Object(map) => {
                for (key, value) in map {
                    match key.as_str() {
                        "RangeVar" => self.note_range_var(value),
                        "CommonTableExpr" => {
                            if let Some(name) = value.get("ctename").and_then(Json::as_str) {
                                self.ctes.push(name.to_string());
                            }
                        }
                        "InsertStmt" | "UpdateStmt" | "DeleteStmt" | "MergeStmt" => {
                            self.refused.get_or_insert(
                                "a data-modifying statement inside a query over several shards \
                                 is not supported: run the write on its own",
                            );
                        }
                        "LockingClause" => {
                            self.refused.get_or_insert(
                                "FOR UPDATE / FOR SHARE in a query that combines several shards' \
                                 rows is not supported: lock the rows with a query that names \
                                 the full sharding key, or one table",
                            );
                        }
                        _ => {}
                    }
                    self.visit(value);
                }
            }
            Json::Array(items) => items.iter().for_each(|i| self.visit(i)),
            _ => {}
        }
    }

    fn note_range_var(&mut self, v: &Json) {
        let text = |k: &str| v.get(k).and_then(Json::as_str).unwrap_or("").to_string();
        let alias = v
            .get("alias")
            .and_then(|a| a.get("aliasname"))
            .and_then(Json::as_str)
            .map(str::to_string);
        let location = v.get("location").and_then(Json::as_i64).unwrap_or(-1);
        if location < 0 {
            self.refused
                .get_or_insert("a table reference without a position in the text");
            return;
        }
        self.tables.push(TableRef {
            schema: text("schemaname"),
            name: text("relname"),
            alias,
            location: location as usize,
        });
    }
}

/// Node kinds a pushed-down condition may contain: operators, constants, casts, plain
/// functions and the like. No subqueries (they would read the shard's rows only), no
/// parameters (the shards' queries take none), no whole-row references.
const PUSHABLE: &[&str] = &[
    "AExpr",
    "BoolExpr",
    "ColumnRef",
    "String",
    "AConst",
    // The value kinds of a constant.
    "Ival",
    "Fval",
    "Boolval",
    "Sval",
    "Bsval",
    "Integer",
    "Float",
    "Boolean",
    "BitString",
    "TypeCast",
    "TypeName",
    "NullTest",
    "BooleanTest",
    "List",
    "CaseExpr",
    "CaseWhen",
    "CoalesceExpr",
    "MinMaxExpr",
    "FuncCall",
    "AArrayExpr",
    "RowExpr",
    "CollateClause",
    "Node",
];

/// Whether every column `cond` reads belongs to the table referenced as `qualifier` (an
/// unqualified column counts when the statement reads only that table), and it is built only
/// of [`PUSHABLE`] nodes.
fn concerns_only(cond: &Node, qualifier: &str, single: bool) -> bool {
    let Ok(tree) = serde_json::to_value(cond) else {
        return false;
    };
    let mut ok = true;
    let mut columns = 0;
    check_pushable(&tree, qualifier, single, &mut ok, &mut columns);
    ok && columns > 0
}

fn check_pushable(v: &Json, qualifier: &str, single: bool, ok: &mut bool, columns: &mut usize) {
    match v {
        Json::Object(map) => {
            for (key, value) in map {
                let node_kind = key.starts_with(|c: char| c.is_ascii_uppercase());
                if node_kind && !PUSHABLE.contains(&key.as_str()) {
                    *ok = false;
                    return;
                }
                if key == "FuncCall"
                    && (value.get("over").is_some_and(|o| !o.is_null())
                        || value.get("agg_star").and_then(Json::as_bool) == Some(true))
                {
                    *ok = false;
                    return;
                }
                if key == "ColumnRef" {
                    *columns += 1;
                    let names: Vec<Option<&str>> = value
                        .get("fields")
                        .and_then(Json::as_array)
                        .map(|f| {
                            f.iter()
                                .map(|n| {
                                    n.get("node")
                                        .unwrap_or(n)
                                        .get("String")
                                        .and_then(|s| s.get("sval"))
                                        .and_then(Json::as_str)
                                })
                                .collect()
                        })
                        .unwrap_or_default();
                    let mine = match names.as_slice() {
                        [Some(q), Some(_)] => *q == qualifier,
                        [Some(_)] => single,
                        _ => false,
                    };
                    if !mine {
                        *ok = false;
                        return;
                    }
                }
                check_pushable(value, qualifier, single, ok, columns);
            }
        }
        Json::Array(items) => {
            for i in items {
                check_pushable(i, qualifier, single, ok, columns);
            }
        }
        _ => {}
    }
}

/// `SELECT * FROM <table> [AS alias] [WHERE conditions]` for the shards.
fn pull_select(t: &Table, alias: Option<&str>, conds: &[&Node]) -> Result<String, String> {
    let mut from = format!("{}.{}", quote_ident(&t.schema), quote_ident(&t.name));
    if let Some(a) = alias {
        from.push_str(" AS ");
        from.push_str(&quote_ident(a));
    }
    let mut sql = format!("SELECT * FROM {from}");
    for (i, c) in conds.iter().enumerate() {
        sql.push_str(if i == 0 { " WHERE " } else { " AND " });
        sql.push('(');
        sql.push_str(&deparse_expr(c)?);
        sql.push(')');
    }
    Ok(sql)
}

/// The text of an expression, by deparsing `SELECT <expr>`.
fn deparse_expr(expr: &Node) -> Result<String, String> {
    let stmt = SelectStmt {
        target_list: vec![Node {
            node: Some(NodeEnum::ResTarget(Box::new(
                pg_query::protobuf::ResTarget {
                    name: String::new(),
                    indirection: Vec::new(),
                    val: Some(Box::new(expr.clone())),
                    location: -1,
                },
            ))),
        }],
        limit_option: LimitOption::Default as i32,
        op: SetOperation::SetopNone as i32,
        ..Default::default()
    };
    let text = deparse(NodeEnum::SelectStmt(Box::new(stmt)))?;
    text.strip_prefix("SELECT ")
        .map(str::to_string)
        .ok_or_else(|| format!("unexpected deparse: {text}"))
}

/// `sql` with each table reference `replace` names a temporary table for rewritten in place:
/// the temporary table, aliased as the statement named the table so its column references
/// still resolve.
fn rewrite(
    sql: &str,
    refs: &[TableRef],
    replace: impl Fn(&TableRef) -> Option<String>,
) -> Result<String, String> {
    let mut edits: Vec<(usize, usize, String)> = Vec::new();
    for r in refs {
        let Some(temp) = replace(r) else {
            continue;
        };
        let len = name_len(&sql.as_bytes()[r.location.min(sql.len())..]);
        if len == 0 {
            return Err(format!(
                "cannot find table \"{}\" in the statement text",
                r.name
            ));
        }
        // `TABLE t` takes no alias; its columns are the temporary table's, named alike.
        let text = match &r.alias {
            None if !after_table_keyword(&sql[..r.location.min(sql.len())]) => {
                format!("{temp} AS {}", quote_ident(&r.name))
            }
            _ => temp,
        };
        edits.push((r.location, len, text));
    }
    edits.sort_by_key(|e| e.0);
    let mut out = String::with_capacity(sql.len() + 32 * edits.len());
    let mut at = 0;
    for (start, len, text) in edits {
        if start < at {
            return Err("overlapping table references".into());
        }
        out.push_str(&sql[at..start]);
        out.push_str(&text);
        at = start + len;
    }
    out.push_str(&sql[at..]);
    Ok(out)
}

/// Whether `before` ends with the keyword TABLE (and blanks): a name after it is the
/// `TABLE t` command, which is `SELECT * FROM t`.
fn after_table_keyword(before: &str) -> bool {
    let word = before.trim_end();
    let Some(start) = word.len().checked_sub(5) else {
        return false;
    };
    let Some(keyword) = word.get(start..) else {
        return false;
    };
    let boundary = word[..start]
        .chars()
        .next_back()
        .is_none_or(|c| !(c.is_alphanumeric() || c == '_' || c == '$' || c == '"'));
    keyword.eq_ignore_ascii_case("table") && boundary
}

/// The length of a possibly qualified, possibly quoted name at the start of `text`.
fn name_len(text: &[u8]) -> usize {
    let mut i = 0;
    loop {
        match text.get(i) {
            Some(b'"') => {
                i += 1;
                loop {
                    match text.get(i) {
                        Some(b'"') if text.get(i + 1) == Some(&b'"') => i += 2,
                        Some(b'"') => {
                            i += 1;
                            break;
                        }
                        Some(_) => i += 1,
                        None => return 0,
                    }
                }
            }
            Some(c) if c.is_ascii_alphabetic() || *c == b'_' || *c >= 0x80 => {
                while text.get(i).is_some_and(|c| {
                    c.is_ascii_alphanumeric() || *c == b'_' || *c == b'$' || *c >= 0x80
                }) {
                    i += 1;
                }
            }
            _ => return 0,
        }
        // Whitespace may surround the dot of a qualified name.
        let mut j = i;
        while text.get(j).is_some_and(u8::is_ascii_whitespace) {
            j += 1;
        }
        if text.get(j) != Some(&b'.') {
            return i;
        }
        j += 1;
        while text.get(j).is_some_and(u8::is_ascii_whitespace) {
            j += 1;
        }
        i = j;
    }
}

/// The rewritten statement must parse, and every table it names must be a temporary table of
/// the combining step, a CTE, or a table the catalog does not record: a recorded table left
/// in place would be read from one shard only.
fn check_rewrite(sql: &str, snapshot: &Scope, ctes: &[String]) -> Result<(), String> {
    let parsed = pg_query::parse(sql, 0)
        .map_err(|e| format!("the statement could not be rewritten for the combining step: {e}"))?;
    let tree = serde_json::to_value(&parsed.protobuf)
        .map_err(|e| format!("cannot read the rewritten statement: {e}"))?;
    let mut found = Found::default();
    found.visit(&tree);
    for r in &found.tables {
        let ours = r.schema == "pg_temp" && r.name.starts_with(TEMP_PREFIX);
        let cte = r.schema.is_empty() && ctes.contains(&r.name);
        if !ours && !cte && resolve_name(snapshot, &r.schema, &r.name).is_some() {
            return Err(format!(
                "table \"{}\" could not be rewritten for the combining step (write it without \
                 parentheses or inheritance markers)",
                r.name
            ));
        }
    }
    Ok(())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_table_command_is_told_from_a_name() {
        assert!(after_table_keyword("VALUES (1) UNION ALL TABLE "));
        assert!(after_table_keyword("(table\n\t"));
        assert!(!after_table_keyword("SELECT * FROM "));
        assert!(!after_table_keyword("SELECT * FROM my_table "));
        assert!(!after_table_keyword(""));
    }

    #[test]
    fn names_with_quotes_dots_and_spaces() {
        assert_eq!(name_len(b"customers WHERE"), 9);
        assert_eq!(name_len(b"public.customers c"), 16);
        assert_eq!(name_len(b"\"My \"\"T\"\"\" x"), 10);
        assert_eq!(name_len(b"s . t,"), 5);
        assert_eq!(name_len(b"(t)"), 0);
    }

    #[test]
    fn rewrite_keeps_aliases_and_adds_missing_ones() {
        let sql = "SELECT c.id FROM public.customers c JOIN orders ON true";
        let refs = vec![
            TableRef {
                schema: "public".into(),
                name: "customers".into(),
                alias: Some("c".into()),
                location: 17,
            },
            TableRef {
                schema: String::new(),
                name: "orders".into(),
                alias: None,
                location: 41,
            },
        ];
        let out = rewrite(sql, &refs, |r| Some(format!("pg_temp.x_{}", r.name))).unwrap();
        assert_eq!(
            out,
            "SELECT c.id FROM pg_temp.x_customers c JOIN pg_temp.x_orders AS \"orders\" ON true"
        );
    }
}
