//! SQL-level cursors as the proxy reads them: `DECLARE`, `FETCH`, `MOVE` and `CLOSE`, alone in
//! a simple query.

use pg_query::protobuf::{FetchDirection, Token};
use pg_query::NodeEnum;

/// PostgreSQL's cursor option bits (parsenodes.h).
const CURSOR_OPT_BINARY: i32 = 0x0001;
const CURSOR_OPT_SCROLL: i32 = 0x0002;
const CURSOR_OPT_NO_SCROLL: i32 = 0x0004;
const CURSOR_OPT_HOLD: i32 = 0x0020;
/// FETCH ALL's count as the parser gives it (LONG_MAX).
const FETCH_ALL: i64 = i64::MAX;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CursorStatement {
    Declare(Declare),
    Fetch {
        name: String,
        direction: Direction,
        /// MOVE: positioned, no rows returned.
        moves: bool,
    },
    /// `CLOSE name`; `None`: `CLOSE ALL`.
    Close(Option<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Declare {
    pub name: String,
    /// The cursor's query, as written.
    pub query: String,
    pub binary: bool,
    pub scroll: bool,
    /// `NO SCROLL` written (neither: PostgreSQL decides by the plan).
    pub no_scroll: bool,
    pub hold: bool,
}

/// Where a FETCH or MOVE goes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Direction {
    /// The next `n` rows; `None`: all the rest.
    Forward(Option<u64>),
    /// Backward by `n` rows (`None`: all): only a SCROLL cursor may.
    Backward(Option<u64>),
    /// `ABSOLUTE n`.
    Absolute(i64),
    /// `RELATIVE n`.
    Relative(i64),
}

/// Whether `sql` may be one of these, by its first word (cheap).
pub fn may_be(sql: &[u8]) -> bool {
    use crate::sql::classify::{first_keyword, keyword};
    const DECLARE: u128 = keyword(b"declare");
    const FETCH: u128 = keyword(b"fetch");
    const MOVE: u128 = keyword(b"move");
    const CLOSE: u128 = keyword(b"close");
    matches!(first_keyword(sql), DECLARE | FETCH | MOVE | CLOSE)
}

/// `sql` read as one of these statements, alone in its text.
pub fn read(sql: &str) -> Option<CursorStatement> {
    let parsed = pg_query::parse(sql, 0).ok()?;
    let [raw] = parsed.protobuf.stmts.as_slice() else {
        return None;
    };
    let start = raw.stmt_location as usize;
    let text = match raw.stmt_len as usize {
        0 => sql.get(start..)?,
        len => sql.get(start..start + len)?,
    };
    match raw.stmt.as_ref()?.node.as_ref()? {
        NodeEnum::DeclareCursorStmt(d) => {
            let tokens = pg_query::scan_tokens(text).ok()?;
            let query_at = tokens
                .iter()
                .position(|t| t.token == Token::For as i32)
                .and_then(|i| tokens.get(i + 1))?
                .start as usize;
            Some(CursorStatement::Declare(Declare {
                name: d.portalname.clone(),
                query: text[query_at..]
                    .trim_end()
                    .trim_end_matches(';')
                    .to_string(),
                binary: d.options & CURSOR_OPT_BINARY != 0,
                scroll: d.options & CURSOR_OPT_SCROLL != 0,
                no_scroll: d.options & CURSOR_OPT_NO_SCROLL != 0,
                hold: d.options & CURSOR_OPT_HOLD != 0,
            }))
        }
        NodeEnum::FetchStmt(f) => {
            let count = |n: i64| (n != FETCH_ALL).then_some(n.max(0) as u64);
            let direction = match FetchDirection::try_from(f.direction).ok()? {
                FetchDirection::FetchForward => Direction::Forward(count(f.how_many)),
                FetchDirection::FetchBackward => Direction::Backward(count(f.how_many)),
                FetchDirection::FetchAbsolute => Direction::Absolute(f.how_many),
                FetchDirection::FetchRelative => Direction::Relative(f.how_many),
                FetchDirection::Undefined => return None,
            };
            Some(CursorStatement::Fetch {
                name: f.portalname.clone(),
                direction,
                moves: f.ismove,
            })
        }
        NodeEnum::ClosePortalStmt(c) => Some(CursorStatement::Close(
            (!c.portalname.is_empty()).then(|| c.portalname.clone()),
        )),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn cursor_statements_are_read() {
        let declared = read(
            "DECLARE \"C1\" BINARY NO SCROLL CURSOR WITH HOLD FOR SELECT * FROM t ORDER BY id;",
        );
        assert_eq!(
            declared,
            Some(CursorStatement::Declare(Declare {
                name: "C1".into(),
                query: "SELECT * FROM t ORDER BY id".into(),
                binary: true,
                scroll: false,
                no_scroll: true,
                hold: true,
            }))
        );
        let fetch = |sql: &str| match read(sql) {
            Some(CursorStatement::Fetch {
                direction, moves, ..
            }) => (direction, moves),
            other => panic!("{sql}: {other:?}"),
        };
        assert_eq!(fetch("FETCH c"), (Direction::Forward(Some(1)), false));
        assert_eq!(
            fetch("fetch forward 2000 from c"),
            (Direction::Forward(Some(2000)), false)
        );
        assert_eq!(fetch("FETCH ALL IN c"), (Direction::Forward(None), false));
        assert_eq!(
            fetch("MOVE FORWARD ALL c"),
            (Direction::Forward(None), true)
        );
        assert_eq!(
            fetch("FETCH PRIOR c"),
            (Direction::Backward(Some(1)), false)
        );
        assert_eq!(fetch("FETCH ABSOLUTE 5 c"), (Direction::Absolute(5), false));
        assert_eq!(fetch("MOVE RELATIVE -2 c"), (Direction::Relative(-2), true));
        assert_eq!(fetch("FETCH LAST c"), (Direction::Absolute(-1), false));
        assert_eq!(read("CLOSE ALL"), Some(CursorStatement::Close(None)));
        assert_eq!(
            read("close c"),
            Some(CursorStatement::Close(Some("c".into())))
        );
        assert!(may_be(b"declare c cursor for select 1") && !may_be(b"select 1"));
    }
}
