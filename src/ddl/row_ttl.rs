//! Oracle NoSQL's row time to live in DML: `INSERT … VALUES (…) SET TTL 5 DAYS` and
//! `UPDATE t SET a = 1, SET TTL 3 HOURS WHERE …` (also `SET TTL USING TABLE DEFAULT`, and
//! `SET TTL $1 HOURS` with a parameter). PostgreSQL has no such clause, and a NoSQL table's
//! name on the shards is a view without the expiry column ([`super::ttl`]), so the
//! statement is rewritten to write the table's data table with the expiry computed by the
//! shard: the INSERT gains the `$expires` column and a value in every row (and keeps it on ON
//! CONFLICT DO UPDATE), the UPDATE assigns it and skips expired rows as the view would. The
//! statement is then routed like any other: the catalog knows the data table's name.

use std::sync::Arc;

use pg_query::protobuf::{self, Node, ResTarget};
use pg_query::NodeEnum;

use tokio_postgres::error::SqlState;

use super::lexer::{tokenize, Token, TokenKind};
use super::model::QualifiedName;
use super::ttl;
use crate::client_error::ClientError;
use crate::model::{TableId, Ttl, TtlUnit};
use crate::sql::quote::quote_ident;

/// A NoSQL table a statement writes, as the rewrite needs it.
pub struct TtlTable {
    pub id: TableId,
    pub name: QualifiedName,
    /// The table's own TTL, for `SET TTL USING TABLE DEFAULT`.
    pub ttl: Option<Ttl>,
}

pub enum RowTtl {
    /// No SET TTL clause: the statement runs as written.
    Unchanged,
    Rewritten(String),
    /// The rewrite needs the table's columns (an INSERT without a column list, `RETURNING *`).
    NeedColumns(TableId),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RowTtlError {
    #[error("SET TTL needs a whole number of HOURS or DAYS (or USING TABLE DEFAULT), e.g. SET TTL 5 DAYS; found {0}")]
    Syntax(String),
    #[error("TTL unit \"{0}\" is not supported: write SET TTL n HOURS or SET TTL n DAYS")]
    Unit(String),
    #[error("SET TTL belongs to INSERT and UPDATE of a table made by an Oracle NoSQL CREATE TABLE; \"{0}\" is not one")]
    NotNoSql(String),
    #[error("SET TTL {0} is not supported yet: {1}")]
    Unsupported(&'static str, &'static str),
    #[error("cannot rewrite the statement's SET TTL: {0}")]
    Parse(String),
}

impl ClientError for RowTtlError {
    fn sqlstate(&self) -> SqlState {
        match self {
            RowTtlError::Syntax(_) | RowTtlError::Unit(_) | RowTtlError::Parse(_) => {
                SqlState::SYNTAX_ERROR
            }
            RowTtlError::NotNoSql(_) => SqlState::WRONG_OBJECT_TYPE,
            RowTtlError::Unsupported(..) => SqlState::FEATURE_NOT_SUPPORTED,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// What SET TTL asks for.
enum TtlValue {
    /// An integer literal or a parameter (`$n`), in a unit.
    Amount(String, TtlUnit),
    TableDefault,
}

struct Clause {
    /// Byte range of the clause in the statement, `SET` to the unit.
    start: usize,
    end: usize,
    /// Whether a comma before it joins it to other assignments (UPDATE).
    after_comma: Option<usize>,
    value: TtlValue,
}

/// Cheap test before any parsing: a statement without the word can have no clause.
fn may_have_clause(sql: &str) -> bool {
    sql.as_bytes()
        .windows(3)
        .any(|w| w.eq_ignore_ascii_case(b"ttl"))
}

/// Each statement's top-level `SET TTL …` clause, with the statement's byte range.
fn find_clauses(sql: &str) -> Result<Vec<(std::ops::Range<usize>, Clause)>, RowTtlError> {
    let Ok((tokens, _)) = tokenize(sql) else {
        return Ok(Vec::new());
    };
    let mut found: Vec<(std::ops::Range<usize>, Clause)> = Vec::new();
    let mut depth = 0i32;
    let mut statement_start = 0;
    let mut pending: Option<Clause> = None;
    for (i, t) in tokens.iter().enumerate() {
        match t.kind {
            TokenKind::LParen => depth += 1,
            TokenKind::RParen => depth -= 1,
            TokenKind::Semicolon if depth == 0 => {
                if let Some(clause) = pending.take() {
                    found.push((statement_start..t.start, clause));
                }
                statement_start = t.end;
            }
            _ => {}
        }
        let is_clause = depth == 0
            && t.is_keyword("set")
            && tokens.get(i + 1).is_some_and(|n| n.is_keyword("ttl"));
        // `SET ttl = …` assigns a column of that name.
        let assigns = tokens.get(i + 2).is_some_and(|n| {
            n.kind == TokenKind::Dot
                || (n.kind == TokenKind::Op && (n.value.starts_with('=') || n.value == "["))
        });
        if !is_clause || assigns {
            continue;
        }
        if pending.is_some() {
            return Err(RowTtlError::Syntax(
                "a second SET TTL in one statement".into(),
            ));
        }
        let after_comma = i
            .checked_sub(1)
            .and_then(|p| tokens.get(p))
            .filter(|p| p.kind == TokenKind::Comma)
            .map(|p| p.start);
        let (value, last) = clause_value(sql, &tokens[i + 2..])?;
        pending = Some(Clause {
            start: t.start,
            end: last.end,
            after_comma,
            value,
        });
    }
    if let Some(clause) = pending {
        found.push((statement_start..sql.len(), clause));
    }
    Ok(found)
}

fn clause_value<'t>(sql: &str, rest: &'t [Token]) -> Result<(TtlValue, &'t Token), RowTtlError> {
    let found = |t: Option<&Token>| {
        t.map_or_else(
            || "the end of the statement".to_owned(),
            |t| format!("\"{}\"", &sql[t.start..t.end]),
        )
    };
    let mut it = rest.iter();
    let first = it.next();
    if first.is_some_and(|t| t.is_keyword("using")) {
        let words = [it.next(), it.next()];
        return match words {
            [Some(a), Some(b)] if a.is_keyword("table") && b.is_keyword("default") => {
                Ok((TtlValue::TableDefault, b))
            }
            [a, _] => Err(RowTtlError::Syntax(found(a))),
        };
    }
    let amount = match first {
        Some(t) if t.kind == TokenKind::Number && t.value.bytes().all(|b| b.is_ascii_digit()) => {
            t.value.clone()
        }
        Some(t) if t.kind == TokenKind::Op && t.value == "$" => match it.next() {
            Some(n) if n.kind == TokenKind::Number && n.start == t.end => format!("${}", n.value),
            other => return Err(RowTtlError::Syntax(found(other))),
        },
        other => return Err(RowTtlError::Syntax(found(other))),
    };
    let unit_token = it.next();
    let unit = match unit_token {
        Some(u) if u.is_keyword("hours") || u.is_keyword("hour") => TtlUnit::Hours,
        Some(u) if u.is_keyword("days") || u.is_keyword("day") => TtlUnit::Days,
        Some(u) if u.kind == TokenKind::Word => {
            return Err(RowTtlError::Unit(sql[u.start..u.end].to_owned()))
        }
        other => return Err(RowTtlError::Syntax(found(other))),
    };
    Ok((
        TtlValue::Amount(amount, unit),
        unit_token.expect("matched above"),
    ))
}

/// Rewrites a statement with a SET TTL clause; `table` finds a NoSQL table by name (`None` for
/// any other), `columns` gives its columns once fetched.
pub fn rewrite_row_ttl(
    sql: &str,
    table: &dyn Fn(&str, &str) -> Option<TtlTable>,
    columns: &dyn Fn(TableId) -> Option<Arc<Vec<String>>>,
) -> Result<RowTtl, RowTtlError> {
    if !may_have_clause(sql) {
        return Ok(RowTtl::Unchanged);
    }
    let clauses = find_clauses(sql)?;
    if clauses.is_empty() {
        return Ok(RowTtl::Unchanged);
    }
    let mut out = String::with_capacity(sql.len() * 2);
    let mut copied = 0;
    for (range, clause) in clauses {
        let shifted = Clause {
            start: clause.start - range.start,
            end: clause.end - range.start,
            after_comma: clause.after_comma.map(|c| c - range.start),
            value: clause.value,
        };
        match rewrite_statement(&sql[range.clone()], &shifted, table, columns)? {
            Ok(rewritten) => {
                out.push_str(&sql[copied..range.start]);
                out.push_str(&rewritten);
                copied = range.end;
            }
            Err(id) => return Ok(RowTtl::NeedColumns(id)),
        }
    }
    out.push_str(&sql[copied..]);
    Ok(RowTtl::Rewritten(out))
}

/// One statement with its clause rewritten, or the table whose columns it needs.
fn rewrite_statement(
    sql: &str,
    clause: &Clause,
    table: &dyn Fn(&str, &str) -> Option<TtlTable>,
    columns: &dyn Fn(TableId) -> Option<Arc<Vec<String>>>,
) -> Result<Result<String, TableId>, RowTtlError> {
    // The text without the clause (an UPDATE keeps an assignment in its place) must be one
    // INSERT or UPDATE PostgreSQL can parse.
    let placeholder = format!("{} = NULL", quote_ident(ttl::EXPIRES));
    let text = match clause.after_comma {
        Some(comma) => format!("{}{}", &sql[..comma], &sql[clause.end..]),
        None => format!("{}{}", &sql[..clause.start], &sql[clause.end..]),
    };
    let mut tree = match pg_query::parse(&text, 0) {
        Ok(p) if p.protobuf.stmts.len() == 1 => p.protobuf,
        // An UPDATE whose only assignment was the clause reads `UPDATE t WHERE …` now.
        _ => {
            let text = format!(
                "{}SET {placeholder}{}",
                &sql[..clause.start],
                &sql[clause.end..]
            );
            match pg_query::parse(&text, 0) {
                Ok(p) if p.protobuf.stmts.len() == 1 => p.protobuf,
                Ok(_) => return Err(RowTtlError::Parse("not one statement".into())),
                Err(e) => return Err(RowTtlError::Parse(e.to_string())),
            }
        }
    };
    let node = tree
        .stmts
        .first_mut()
        .and_then(|raw| raw.stmt.as_mut())
        .and_then(|s| s.node.as_mut());
    let relation = match &node {
        Some(NodeEnum::InsertStmt(i)) => i.relation.as_ref(),
        Some(NodeEnum::UpdateStmt(u)) => u.relation.as_ref(),
        _ => {
            return Err(RowTtlError::Unsupported(
                "outside INSERT and UPDATE",
                "only an INSERT or an UPDATE sets a row's time to live",
            ))
        }
    };
    let relation = relation.ok_or_else(|| RowTtlError::Parse("no target table".into()))?;
    let schema = match relation.schemaname.as_str() {
        "" => "public",
        s => s,
    };
    let target = table(schema, &relation.relname)
        .ok_or_else(|| RowTtlError::NotNoSql(format!("{schema}.{}", relation.relname)))?;
    let expiry = match &clause.value {
        TtlValue::Amount(amount, unit) => ttl::expiry_sql(amount, *unit),
        TtlValue::TableDefault => {
            ttl::default_sql(target.ttl).unwrap_or_else(|| "NULL::timestamptz".to_owned())
        }
    };
    let expiry_node = select_targets(&format!("SELECT {expiry}"))?
        .into_iter()
        .next()
        .and_then(|t| match t.node {
            Some(NodeEnum::ResTarget(r)) => r.val,
            _ => None,
        })
        .ok_or_else(|| RowTtlError::Parse("the expiry expression".into()))?;
    let data = ttl::data_table(&target.name);
    let needs = match node {
        Some(NodeEnum::InsertStmt(insert)) => {
            rewrite_insert(insert, &target, &data, *expiry_node, columns)?
        }
        Some(NodeEnum::UpdateStmt(update)) => {
            rewrite_update(update, &target, &data, *expiry_node, columns)?
        }
        _ => unreachable!("checked above"),
    };
    if let Some(table) = needs {
        return Ok(Err(table));
    }
    pg_query::deparse(&tree, Default::default())
        .map(Ok)
        .map_err(|e| RowTtlError::Parse(e.to_string()))
}

/// The one statement of a snippet of SQL the rewrite builds, as a tree.
fn parse_one(sql: &str) -> Result<NodeEnum, RowTtlError> {
    let parsed = pg_query::parse(sql, 0).map_err(|e| RowTtlError::Parse(e.to_string()))?;
    parsed
        .protobuf
        .stmts
        .into_iter()
        .next()
        .and_then(|s| s.stmt)
        .and_then(|s| s.node)
        .ok_or_else(|| RowTtlError::Parse(sql.to_owned()))
}

fn select_targets(sql: &str) -> Result<Vec<Node>, RowTtlError> {
    match parse_one(sql)? {
        NodeEnum::SelectStmt(s) => Ok(s.target_list),
        _ => Err(RowTtlError::Parse(sql.to_owned())),
    }
}

fn node(n: NodeEnum) -> Node {
    Node { node: Some(n) }
}

fn column_target(name: &str) -> Node {
    node(NodeEnum::ResTarget(Box::new(ResTarget {
        name: name.to_owned(),
        indirection: Vec::new(),
        val: None,
        location: -1,
    })))
}

/// Points `relation` at the data table, keeping the name it was written with as its alias so
/// that `t.col` still means the same.
fn retarget(relation: &mut Option<protobuf::RangeVar>, data: &QualifiedName) {
    if let Some(r) = relation {
        if r.alias.is_none() {
            r.alias = Some(protobuf::Alias {
                aliasname: r.relname.clone(),
                colnames: Vec::new(),
            });
        }
        r.schemaname.clone_from(&data.schema);
        r.relname.clone_from(&data.name);
    }
}

/// `RETURNING *` over the data table would show `$expires`: it becomes the table's columns.
fn expand_returning_star(
    returning: Option<&mut protobuf::ReturningClause>,
    columns: &[String],
) -> Result<(), RowTtlError> {
    let Some(returning) = returning else {
        return Ok(());
    };
    if !returning.exprs.iter().any(is_star) {
        return Ok(());
    }
    let list: Vec<String> = columns.iter().map(|c| quote_ident(c)).collect();
    let expanded = select_targets(&format!("SELECT {}", list.join(", ")))?;
    let mut exprs = Vec::new();
    for e in std::mem::take(&mut returning.exprs) {
        if is_star(&e) {
            exprs.extend(expanded.iter().cloned());
        } else {
            exprs.push(e);
        }
    }
    returning.exprs = exprs;
    Ok(())
}

fn returns_star(returning: Option<&protobuf::ReturningClause>) -> bool {
    returning.is_some_and(|r| r.exprs.iter().any(is_star))
}

/// `*` or `t.*` in a target list.
fn is_star(t: &Node) -> bool {
    matches!(&t.node, Some(NodeEnum::ResTarget(r))
        if matches!(r.val.as_deref().and_then(|v| v.node.as_ref()),
            Some(NodeEnum::ColumnRef(c)) if c.fields.iter().any(|f|
                matches!(f.node, Some(NodeEnum::AStar(_))))))
}

fn rewrite_insert(
    insert: &mut protobuf::InsertStmt,
    target: &TtlTable,
    data: &QualifiedName,
    expiry: Node,
    columns: &dyn Fn(TableId) -> Option<Arc<Vec<String>>>,
) -> Result<Option<TableId>, RowTtlError> {
    let needs_columns = insert.cols.is_empty() || returns_star(insert.returning_clause.as_ref());
    let known = match needs_columns {
        true => match columns(target.id) {
            Some(c) => c,
            None => return Ok(Some(target.id)),
        },
        false => Arc::new(Vec::new()),
    };
    let select = insert
        .select_stmt
        .as_deref_mut()
        .and_then(|s| s.node.as_mut());
    let width = match &select {
        Some(NodeEnum::SelectStmt(s)) if !s.values_lists.is_empty() => s
            .values_lists
            .iter()
            .map(|row| match &row.node {
                Some(NodeEnum::List(l)) => l.items.len(),
                _ => 0,
            })
            .max()
            .unwrap_or(0),
        Some(NodeEnum::SelectStmt(s)) => s.target_list.len(),
        _ => 0,
    };
    if insert.cols.is_empty() {
        if width > known.len() {
            return Err(RowTtlError::Parse(format!(
                "INSERT has more expressions than table \"{}\" has columns",
                target.name.name
            )));
        }
        insert.cols = known[..width].iter().map(|c| column_target(c)).collect();
    }
    insert.cols.push(column_target(ttl::EXPIRES));
    match select {
        Some(NodeEnum::SelectStmt(s)) if !s.values_lists.is_empty() => {
            for row in &mut s.values_lists {
                if let Some(NodeEnum::List(l)) = &mut row.node {
                    l.items.push(expiry.clone());
                }
            }
        }
        Some(NodeEnum::SelectStmt(s)) if s.op == protobuf::SetOperation::SetopNone as i32 => {
            if s.target_list.iter().any(is_star) {
                return Err(RowTtlError::Unsupported(
                    "with INSERT … SELECT *",
                    "name the selected columns",
                ));
            }
            s.target_list
                .push(node(NodeEnum::ResTarget(Box::new(ResTarget {
                    name: String::new(),
                    indirection: Vec::new(),
                    val: Some(Box::new(expiry)),
                    location: -1,
                }))));
        }
        Some(_) => {
            return Err(RowTtlError::Unsupported(
                "with INSERT … SELECT … UNION/INTERSECT/EXCEPT",
                "insert the rows, then give them their TTL with UPDATE … SET TTL",
            ))
        }
        None => {
            let text = "INSERT INTO t VALUES (NULL)";
            let NodeEnum::InsertStmt(mut template) = parse_one(text)? else {
                return Err(RowTtlError::Parse(text.into()));
            };
            if let Some(NodeEnum::SelectStmt(s)) = template
                .select_stmt
                .as_deref_mut()
                .and_then(|s| s.node.as_mut())
            {
                for row in &mut s.values_lists {
                    if let Some(NodeEnum::List(l)) = &mut row.node {
                        l.items = vec![expiry.clone()];
                    }
                }
            }
            insert.select_stmt = template.select_stmt;
        }
    }
    if let Some(conflict) = insert.on_conflict_clause.as_deref_mut() {
        if conflict.action == protobuf::OnConflictAction::OnconflictUpdate as i32 {
            let expires = quote_ident(ttl::EXPIRES);
            let keep = format!("UPDATE t SET {expires} = excluded.{expires}");
            if let NodeEnum::UpdateStmt(u) = parse_one(&keep)? {
                conflict.target_list.extend(u.target_list);
            }
        }
    }
    expand_returning_star(insert.returning_clause.as_mut(), &known)?;
    retarget(&mut insert.relation, data);
    Ok(None)
}

fn rewrite_update(
    update: &mut protobuf::UpdateStmt,
    target: &TtlTable,
    data: &QualifiedName,
    expiry: Node,
    columns: &dyn Fn(TableId) -> Option<Arc<Vec<String>>>,
) -> Result<Option<TableId>, RowTtlError> {
    let known = match returns_star(update.returning_clause.as_ref()) {
        true if !update.from_clause.is_empty() => {
            return Err(RowTtlError::Unsupported(
                "with UPDATE … FROM … RETURNING *",
                "name the columns RETURNING gives",
            ))
        }
        true => match columns(target.id) {
            Some(c) => c,
            None => return Ok(Some(target.id)),
        },
        false => Arc::new(Vec::new()),
    };
    // The placeholder assignment (when the clause was the only one) gives way to the expiry.
    update
        .target_list
        .retain(|t| !matches!(&t.node, Some(NodeEnum::ResTarget(r)) if r.name == ttl::EXPIRES));
    update
        .target_list
        .push(node(NodeEnum::ResTarget(Box::new(ResTarget {
            name: ttl::EXPIRES.to_owned(),
            indirection: Vec::new(),
            val: Some(Box::new(expiry)),
            location: -1,
        }))));
    let alias = update
        .relation
        .as_ref()
        .and_then(|r| r.alias.as_ref().map(|a| a.aliasname.clone()))
        .or_else(|| update.relation.as_ref().map(|r| r.relname.clone()))
        .unwrap_or_default();
    let filter = select_where(&ttl::unexpired_sql(&alias))?;
    update.where_clause = Some(Box::new(match update.where_clause.take() {
        Some(w) => node(NodeEnum::BoolExpr(Box::new(protobuf::BoolExpr {
            xpr: None,
            boolop: protobuf::BoolExprType::AndExpr as i32,
            args: vec![*w, filter],
            location: -1,
        }))),
        None => filter,
    }));
    expand_returning_star(update.returning_clause.as_mut(), &known)?;
    retarget(&mut update.relation, data);
    Ok(None)
}

fn select_where(condition: &str) -> Result<Node, RowTtlError> {
    let sql = format!("SELECT 1 WHERE {condition}");
    match parse_one(&sql)? {
        NodeEnum::SelectStmt(s) => s.where_clause.map(|w| *w),
        _ => None,
    }
    .ok_or(RowTtlError::Parse(sql))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn tables(schema: &str, name: &str) -> Option<TtlTable> {
        (schema == "public" && name == "users").then(|| TtlTable {
            id: TableId(7),
            name: QualifiedName::new("public", "users"),
            ttl: Some(Ttl {
                amount: 5,
                unit: TtlUnit::Days,
            }),
        })
    }

    fn known(_: TableId) -> Option<Arc<Vec<String>>> {
        Some(Arc::new(vec!["id".into(), "name".into()]))
    }

    fn rewrite(sql: &str) -> Result<String, RowTtlError> {
        match rewrite_row_ttl(sql, &tables, &known)? {
            RowTtl::Rewritten(s) => Ok(s),
            RowTtl::Unchanged => Ok("unchanged".into()),
            RowTtl::NeedColumns(_) => Ok("columns".into()),
        }
    }

    #[test]
    fn insert_gains_the_expiry_in_every_row() {
        let out = rewrite("INSERT INTO users VALUES (1, 'a'), (2, 'b') SET TTL 3 HOURS").unwrap();
        assert!(out.starts_with(r#"INSERT INTO "public$rows".users AS users (id, name, "$expires") VALUES (1, 'a', CASE"#), "{out}");
        assert_eq!(out.matches("make_interval").count(), 2, "{out}");
        let out =
            rewrite("insert into users (id) values ($1) set ttl $2 days returning *").unwrap();
        assert!(out.contains("RETURNING id, name"), "{out}");
        assert!(out.contains("$2"), "{out}");
        assert_eq!(
            rewrite("INSERT INTO users VALUES (1, 'a')").unwrap(),
            "unchanged"
        );
        let out = rewrite(
            "INSERT INTO users VALUES (1, 'a'); INSERT INTO users VALUES (2, 'b') SET TTL 1 DAYS; \
             UPDATE users SET TTL 2 HOURS",
        )
        .unwrap();
        assert!(
            out.starts_with("INSERT INTO users VALUES (1, 'a');INSERT INTO \"public$rows\""),
            "{out}"
        );
        assert_eq!(out.matches("$rows").count(), 2, "{out}");
    }

    #[test]
    fn update_assigns_the_expiry_and_skips_expired_rows() {
        let out = rewrite("UPDATE users SET TTL USING TABLE DEFAULT WHERE id = 1").unwrap();
        assert!(
            out.contains(r#"UPDATE "public$rows".users users SET "$expires" = CASE"#),
            "{out}"
        );
        assert!(
            out.contains(r#"id = 1 AND (users."$expires" IS NULL"#),
            "{out}"
        );
        let out = rewrite("UPDATE users u SET name = 'x', SET TTL 0 DAYS WHERE u.id = 1").unwrap();
        assert!(
            out.contains(r#"SET name = 'x', "$expires" = CASE"#),
            "{out}"
        );
    }

    #[test]
    fn refuses_what_it_cannot_mean() {
        assert!(
            matches!(rewrite("UPDATE users SET TTL 5 WEEKS"), Err(RowTtlError::Unit(u)) if u == "WEEKS")
        );
        assert!(matches!(
            rewrite("UPDATE users SET TTL -1 DAYS"),
            Err(RowTtlError::Syntax(_))
        ));
        assert!(matches!(
            rewrite("UPDATE other SET TTL 1 DAYS"),
            Err(RowTtlError::NotNoSql(_))
        ));
        assert!(matches!(rewrite("SELECT 'ttl'"), Ok(s) if s == "unchanged"));
        assert!(matches!(rewrite("UPDATE users SET ttl = 5"), Ok(s) if s == "unchanged"));
    }
}
