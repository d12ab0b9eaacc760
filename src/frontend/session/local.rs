//! Simple queries and statements the proxy may answer itself, told by their first word: the
//! cheap test every simple query passes through.

use super::statements;
use crate::protocol::{Frame, FrameError};
use crate::sql::classify::{first_keyword, keyword, may_start_with};

/// Simple queries the proxy may answer itself, by their first word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LocalKind {
    /// `SHOW …`: an admin statement, or PostgreSQL's own SHOW.
    Show,
    /// `CREATE`/`ALTER`/`DROP …`: sharding DDL, or DDL PostgreSQL runs itself.
    Ddl,
    /// `SELECT pg_cancel_backend(…)` or `pg_terminate_backend(…)`: of a client session's pid,
    /// or a shard process's.
    Signal,
}

/// A simple query the proxy may answer itself, with its text.
pub(super) fn local_candidate<'a>(
    frame: &Frame<&'a [u8]>,
) -> Result<Option<(&'a [u8], LocalKind)>, FrameError> {
    if frame.tag != b'Q' {
        return Ok(None);
    }
    let sql = statements::query_text(frame)?;
    Ok(local_kind(sql).map(|kind| (sql, kind)))
}

pub(super) fn local_kind(sql: &[u8]) -> Option<LocalKind> {
    // Most queries are none of these, which their first four letters tell.
    if !may_start_with(sql, &[*b"show", *b"crea", *b"drop", *b"alte", *b"sele"]) {
        return None;
    }
    const SHOW: u128 = keyword(b"show");
    const CREATE: u128 = keyword(b"create");
    const DROP: u128 = keyword(b"drop");
    const ALTER: u128 = keyword(b"alter");
    const SELECT: u128 = keyword(b"select");
    match first_keyword(sql) {
        SHOW => Some(LocalKind::Show),
        CREATE | DROP | ALTER => Some(LocalKind::Ddl),
        SELECT if crate::sql::signal::mentions_signal(sql) => Some(LocalKind::Signal),
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::{local_kind, LocalKind};

    #[test]
    fn local_kinds_by_first_word_in_any_case_and_after_comments() {
        let cases: [(&[u8], Option<LocalKind>); 13] = [
            (b"SELECT 1", None),
            (b"select * from show", None),
            (b"END", None),
            (b"SHOWING", None),
            (b"dropped", None),
            (b"show pools", Some(LocalKind::Show)),
            (b"ShOw TRANSACTIONS", Some(LocalKind::Show)),
            (b"CREATE SHARDED TABLE t (a int)", Some(LocalKind::Ddl)),
            (b"drop table t", Some(LocalKind::Ddl)),
            (b"Alter TABLE t ADD b int", Some(LocalKind::Ddl)),
            (b"  \n drop table t", Some(LocalKind::Ddl)),
            (b"/* why */ ALTER TABLE t ADD b int", Some(LocalKind::Ddl)),
            (b"select PG_CANCEL_BACKEND(1)", Some(LocalKind::Signal)),
        ];
        for (sql, kind) in cases {
            assert_eq!(local_kind(sql), kind, "{}", String::from_utf8_lossy(sql));
        }
    }
}
