//! SQL-level `PREPARE`, `EXECUTE` and `DEALLOCATE` as the proxy holds them: a statement
//! prepared by name is kept as its text, and `EXECUTE name(args)` becomes that text with each
//! `$n` replaced by its argument, cast to the parameter's declared type. The result is an
//! ordinary statement, routed and planned (and its plan cached) as any other; the arguments
//! take part in routing as literals do.

use crate::client_error::ClientError;
use pg_query::protobuf::{ScanToken, Token};
use pg_query::NodeEnum;
use tokio_postgres::error::SqlState;

/// A statement prepared with SQL `PREPARE`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Prepared {
    /// The statement's text, after `AS`.
    pub query: String,
    /// The declared parameter types, as written.
    pub types: Vec<String>,
    /// Where each parameter reference lies in `query`, and its number.
    params: Vec<(std::ops::Range<usize>, usize)>,
}

impl Prepared {
    /// `query` with `$n` parameters of the declared `types` (as written; fewer than the
    /// parameters, or none, leave the rest to PostgreSQL), to be filled by [`substitute`].
    pub fn of(query: &str, types: Vec<String>) -> Result<Prepared, PrepareError> {
        let params = scan(query)?
            .iter()
            .filter(|t| is(t, Token::Param))
            .map(|t| {
                let range = t.start as usize..t.end as usize;
                let number = query[range.start + 1..range.end]
                    .parse::<usize>()
                    .ok()
                    .filter(|&n| n >= 1)
                    .ok_or(PrepareError::Unreadable("a parameter"))?;
                Ok((range, number))
            })
            .collect::<Result<_, _>>()?;
        Ok(Prepared {
            query: query.to_string(),
            types,
            params,
        })
    }

    /// How many arguments an EXECUTE must pass: the declared types, and any parameter numbered
    /// beyond them (PostgreSQL infers its type).
    pub fn arity(&self) -> usize {
        let used = self.params.iter().map(|(_, n)| *n).max().unwrap_or(0);
        used.max(self.types.len())
    }
}

/// One of the statements this module reads, as sent in a simple query.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum SqlPrepared {
    Prepare {
        name: String,
        prepared: Prepared,
    },
    Execute {
        name: String,
        args: Vec<Argument>,
    },
    /// `DEALLOCATE name`.
    Deallocate(String),
    /// `DEALLOCATE ALL`.
    DeallocateAll,
}

/// An argument of EXECUTE.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Argument {
    pub text: String,
    /// A literal (perhaps cast or negated): the same value however often it is written out.
    pub constant: bool,
}

#[derive(Debug, thiserror::Error, PartialEq, Eq)]
pub enum PrepareError {
    #[error("prepared statement \"{0}\" does not exist")]
    Unknown(String),
    #[error("prepared statement \"{0}\" already exists")]
    Exists(String),
    #[error(
        "wrong number of parameters for prepared statement \"{name}\": expected {expected} \
         parameters but got {got}"
    )]
    Arity {
        name: String,
        expected: usize,
        got: usize,
    },
    #[error(
        "EXECUTE {name} passes an argument that is not a constant for ${number}, which the \
         statement uses more than once: shardwire writes the argument out where the parameter \
         stands, so pass a constant (or compute the value in the statement)"
    )]
    VolatileRepeated { name: String, number: usize },
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    InFailedBlock,
    #[error("{0}: shardwire cannot read this statement's parts")]
    Unreadable(&'static str),
}

impl ClientError for PrepareError {
    fn sqlstate(&self) -> SqlState {
        match self {
            PrepareError::Unknown(_) => SqlState::INVALID_SQL_STATEMENT_NAME,
            PrepareError::Exists(_) => SqlState::DUPLICATE_PSTATEMENT,
            PrepareError::Arity { .. } => SqlState::SYNTAX_ERROR,
            PrepareError::InFailedBlock => SqlState::IN_FAILED_SQL_TRANSACTION,
            PrepareError::VolatileRepeated { .. } | PrepareError::Unreadable(_) => {
                SqlState::FEATURE_NOT_SUPPORTED
            }
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// Whether `sql` may be one of these statements, by its first letters (cheap; false for
/// everything else).
pub fn may_be(sql: &[u8]) -> bool {
    use crate::sql::classify::{first_keyword, keyword, leading_keywords};
    const PREPARE: u128 = keyword(b"prepare");
    const TRANSACTION: u128 = keyword(b"transaction");
    const EXECUTE: u128 = keyword(b"execute");
    const DEALLOCATE: u128 = keyword(b"deallocate");
    match first_keyword(sql) {
        PREPARE => leading_keywords::<2>(sql)[1] != TRANSACTION,
        EXECUTE | DEALLOCATE => true,
        _ => false,
    }
}

/// Whether a string of several statements may have one of these among them (cheap; false for
/// one statement alone).
pub fn may_contain(sql: &[u8]) -> bool {
    // Semicolons at the end only (drivers end a statement so): one statement.
    let end = sql
        .iter()
        .rposition(|&c| !c.is_ascii_whitespace() && c != b';')
        .map_or(0, |p| p + 1);
    memchr::memchr(b';', &sql[..end]).is_some()
        && sql.windows(7).any(|w| {
            w.eq_ignore_ascii_case(b"execute")
                || w.eq_ignore_ascii_case(b"prepare")
                || w.eq_ignore_ascii_case(b"dealloc")
        })
}

/// `sql` read as PREPARE, EXECUTE or DEALLOCATE, alone in its text (`None`: not one of them,
/// or not alone). `PREPARE TRANSACTION` is not one of them.
pub fn read(sql: &str) -> Result<Option<SqlPrepared>, PrepareError> {
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return Ok(None);
    };
    let [raw] = parsed.protobuf.stmts.as_slice() else {
        return Ok(None);
    };
    let (start, len) = (raw.stmt_location as usize, raw.stmt_len as usize);
    let text = match len {
        0 => sql.get(start..),
        len => sql.get(start..start + len),
    }
    .ok_or(PrepareError::Unreadable("a statement"))?;
    let node = raw.stmt.as_ref().and_then(|s| s.node.as_ref());
    Ok(Some(match node {
        Some(NodeEnum::PrepareStmt(p)) => SqlPrepared::Prepare {
            name: p.name.clone(),
            prepared: read_prepare(text)?,
        },
        Some(NodeEnum::ExecuteStmt(e)) => SqlPrepared::Execute {
            name: e.name.clone(),
            args: read_arguments(text, &e.params)?,
        },
        Some(NodeEnum::DeallocateStmt(d)) if d.isall || d.name.is_empty() => {
            SqlPrepared::DeallocateAll
        }
        Some(NodeEnum::DeallocateStmt(d)) => SqlPrepared::Deallocate(d.name.clone()),
        _ => return Ok(None),
    }))
}

/// The statement `name` runs with `args`: its text with every parameter replaced.
pub fn substitute(
    name: &str,
    prepared: &Prepared,
    args: &[Argument],
) -> Result<String, PrepareError> {
    if args.len() != prepared.arity() {
        return Err(PrepareError::Arity {
            name: name.to_string(),
            expected: prepared.arity(),
            got: args.len(),
        });
    }
    let mut out = String::with_capacity(prepared.query.len() + 16 * args.len());
    let mut at = 0;
    for (range, number) in &prepared.params {
        let arg = &args[number - 1];
        let uses = prepared.params.iter().filter(|(_, n)| n == number).count();
        if uses > 1 && !arg.constant {
            return Err(PrepareError::VolatileRepeated {
                name: name.to_string(),
                number: *number,
            });
        }
        out.push_str(&prepared.query[at..range.start]);
        match prepared.types.get(number - 1).filter(|ty| !ty.is_empty()) {
            // EXECUTE coerces each argument to the parameter's type.
            Some(ty) => out.push_str(&format!("(({})::{})", arg.text, ty)),
            None => out.push_str(&format!("({})", arg.text)),
        }
        at = range.end;
    }
    out.push_str(&prepared.query[at..]);
    Ok(out)
}

fn scan(text: &str) -> Result<Vec<ScanToken>, PrepareError> {
    pg_query::scan_tokens(text).map_err(|_| PrepareError::Unreadable("a statement"))
}

fn is(t: &ScanToken, token: Token) -> bool {
    t.token == token as i32
}

/// The comma-separated items inside the parentheses that open at `tokens[open]`, as text
/// ranges; and the index of the closing token.
fn parenthesised(
    tokens: &[ScanToken],
    open: usize,
) -> Option<(Vec<std::ops::Range<usize>>, usize)> {
    let mut depth = 0;
    let mut items = Vec::new();
    let mut item_start = None;
    for (i, t) in tokens.iter().enumerate().skip(open) {
        if is(t, Token::Ascii40) || is(t, Token::Ascii91) {
            depth += 1;
            if depth == 1 {
                continue;
            }
        } else if is(t, Token::Ascii41) || is(t, Token::Ascii93) {
            depth -= 1;
            if depth == 0 {
                if let Some(start) = item_start {
                    items.push(start..tokens[i - 1].end as usize);
                }
                return Some((items, i));
            }
        } else if depth == 1 && is(t, Token::Ascii44) {
            items.push(item_start.take()?..tokens[i - 1].end as usize);
            continue;
        }
        item_start.get_or_insert(t.start as usize);
    }
    None
}

/// PREPARE name [(types)] AS query.
fn read_prepare(text: &str) -> Result<Prepared, PrepareError> {
    let tokens = scan(text)?;
    let as_at = tokens
        .iter()
        .position(|t| is(t, Token::As))
        .ok_or(PrepareError::Unreadable("PREPARE"))?;
    let open = tokens[..as_at].iter().position(|t| is(t, Token::Ascii40));
    let types = match open {
        Some(open) => {
            let (items, _) = parenthesised(&tokens, open)
                .ok_or(PrepareError::Unreadable("PREPARE's parameter types"))?;
            items.into_iter().map(|r| text[r].to_string()).collect()
        }
        None => Vec::new(),
    };
    let query_start = tokens
        .get(as_at + 1)
        .ok_or(PrepareError::Unreadable("PREPARE"))?
        .start as usize;
    let query = text[query_start..].trim_end().trim_end_matches(';');
    Prepared::of(query, types)
}

/// EXECUTE name [(args)]: each argument's text, and whether it is a constant.
fn read_arguments(
    text: &str,
    params: &[pg_query::protobuf::Node],
) -> Result<Vec<Argument>, PrepareError> {
    if params.is_empty() {
        return Ok(Vec::new());
    }
    let tokens = scan(text)?;
    let open = tokens
        .iter()
        .position(|t| is(t, Token::Ascii40))
        .ok_or(PrepareError::Unreadable("EXECUTE's arguments"))?;
    let (items, _) =
        parenthesised(&tokens, open).ok_or(PrepareError::Unreadable("EXECUTE's arguments"))?;
    if items.len() != params.len() {
        return Err(PrepareError::Unreadable("EXECUTE's arguments"));
    }
    Ok(items
        .into_iter()
        .zip(params)
        .map(|(range, node)| Argument {
            text: text[range].to_string(),
            constant: is_constant(node.node.as_ref()),
        })
        .collect())
}

/// A literal, perhaps cast or negated.
fn is_constant(node: Option<&NodeEnum>) -> bool {
    match node {
        Some(NodeEnum::AConst(_)) => true,
        Some(NodeEnum::TypeCast(c)) => is_constant(c.arg.as_ref().and_then(|a| a.node.as_ref())),
        Some(NodeEnum::AExpr(e)) if e.lexpr.is_none() => {
            is_constant(e.rexpr.as_ref().and_then(|a| a.node.as_ref()))
        }
        _ => false,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn prepare(sql: &str) -> (String, Prepared) {
        match read(sql).unwrap().unwrap() {
            SqlPrepared::Prepare { name, prepared } => (name, prepared),
            other => panic!("{other:?}"),
        }
    }

    fn execute(sql: &str) -> (String, Vec<Argument>) {
        match read(sql).unwrap().unwrap() {
            SqlPrepared::Execute { name, args } => (name, args),
            other => panic!("{other:?}"),
        }
    }

    #[test]
    fn prepare_execute_and_deallocate_are_read() {
        let (name, p) =
            prepare("PREPARE Get_One (bigint, text[]) AS SELECT * FROM t WHERE id = $1;");
        assert_eq!(name, "get_one");
        assert_eq!(p.types, ["bigint", "text[]"]);
        assert_eq!(p.query, "SELECT * FROM t WHERE id = $1");
        assert_eq!(p.arity(), 2);
        let (_, p) = prepare("prepare q as update t set v = $2 where id = $1");
        assert!(p.types.is_empty());
        assert_eq!(p.arity(), 2);
        let (name, args) = execute("EXECUTE get_one(-7, ARRAY['a', 'b,c'])");
        assert_eq!(name, "get_one");
        assert_eq!(args[0].text, "-7");
        assert!(args[0].constant);
        assert_eq!(args[1].text, "ARRAY['a', 'b,c']");
        assert!(!args[1].constant);
        assert_eq!(execute("execute q").1, []);
        assert_eq!(
            read("DEALLOCATE PREPARE q").unwrap(),
            Some(SqlPrepared::Deallocate("q".into()))
        );
        assert_eq!(
            read("deallocate all").unwrap(),
            Some(SqlPrepared::DeallocateAll)
        );
        assert_eq!(read("PREPARE TRANSACTION 'x'").unwrap(), None);
        assert!(!may_be(b"prepare transaction 'x'"));
        assert!(may_contain(b"SELECT 1; EXECUTE q(1)") && !may_contain(b"EXECUTE q(1);\n"));
        assert!(!may_contain(b"SELECT abalance FROM t WHERE aid = 1;"));
        assert!(
            may_be(b"PREPARE q AS SELECT 1") && may_be(b"execute q") && may_be(b"DEALLOCATE q")
        );
        assert_eq!(read("SELECT 1").unwrap(), None);
        assert_eq!(read("PREPARE a AS SELECT 1; SELECT 2").unwrap(), None);
    }

    #[test]
    fn arguments_replace_parameters_cast_to_their_types() {
        let (_, p) =
            prepare("PREPARE p (bigint) AS SELECT '$1', $1, $2 /* $1 */ FROM t WHERE a = $1::int");
        let (_, args) = execute("EXECUTE p('7', 'x')");
        assert_eq!(
            substitute("p", &p, &args).unwrap(),
            "SELECT '$1', (('7')::bigint), ('x') /* $1 */ FROM t WHERE a = (('7')::bigint)::int"
        );
        let (_, args) = execute("EXECUTE p(1)");
        assert!(matches!(
            substitute("p", &p, &args),
            Err(PrepareError::Arity {
                expected: 2,
                got: 1,
                ..
            })
        ));
        let (_, args) = execute("EXECUTE p(random()::bigint, 1)");
        assert!(matches!(
            substitute("p", &p, &args),
            Err(PrepareError::VolatileRepeated { number: 1, .. })
        ));
        let (_, once) = prepare("PREPARE o AS SELECT $1");
        let (_, args) = execute("EXECUTE o(now())");
        assert_eq!(substitute("o", &once, &args).unwrap(), "SELECT (now())");
    }
}
