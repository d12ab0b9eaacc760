//! Simple queries and statements the proxy may answer itself, told by their first word: the
//! cheap test every simple query passes through.

use crate::frontend::statements;
use crate::protocol::{Frame, FrameError};
use crate::sql::classify::{first_keyword, keyword, may_start_with, session_effect, SessionEffect};

/// Simple queries the proxy may answer itself, by their first word.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum LocalKind {
    /// `SHOW …`: an admin statement, or PostgreSQL's own SHOW.
    Show,
    /// `CREATE`/`ALTER`/`DROP`/`REINDEX …`: sharding DDL, or DDL PostgreSQL runs itself.
    Ddl,
    /// `SELECT pg_cancel_backend(…)` or `pg_terminate_backend(…)`: of a client session's pid,
    /// or a shard process's.
    Signal,
    /// `MOVE CHUNK …`, `SPLIT CHUNK …`, `CHECK PLACEMENT …`, `CANCEL MOVE …`, `REBALANCE …`
    /// (or a cursor's MOVE).
    Growth,
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
    if !may_start_with(
        sql,
        &[
            *b"show", *b"crea", *b"drop", *b"alte", *b"sele", *b"rein", *b"move", *b"chec",
            *b"canc", *b"reba", *b"spli",
        ],
    ) {
        return None;
    }
    const SHOW: u128 = keyword(b"show");
    const CREATE: u128 = keyword(b"create");
    const DROP: u128 = keyword(b"drop");
    const ALTER: u128 = keyword(b"alter");
    const SELECT: u128 = keyword(b"select");
    const REINDEX: u128 = keyword(b"reindex");
    const MOVE: u128 = keyword(b"move");
    const CHECK: u128 = keyword(b"check");
    const CANCEL: u128 = keyword(b"cancel");
    const REBALANCE: u128 = keyword(b"rebalance");
    const SPLIT: u128 = keyword(b"split");
    match first_keyword(sql) {
        SHOW => Some(LocalKind::Show),
        // ALTER TABLESPACE SET … ADD | REMOVE SHARD changes a set's shards, as growth does.
        ALTER if crate::sql::admin::parse_growth(sql).is_some() => Some(LocalKind::Growth),
        CREATE | DROP | ALTER | REINDEX => Some(LocalKind::Ddl),
        SELECT if crate::sql::signal::mentions_signal(sql) => Some(LocalKind::Signal),
        MOVE | CHECK | CANCEL | REBALANCE | SPLIT => Some(LocalKind::Growth),
        _ => None,
    }
}

/// What a simple query's words say before it is routed: whether the proxy may answer it
/// itself, and what it does to the backend session.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) struct TextFacts {
    pub local: Option<LocalKind>,
    pub effect: SessionEffect,
}

impl TextFacts {
    pub fn of(sql: &[u8]) -> TextFacts {
        TextFacts {
            local: local_kind(sql),
            effect: session_effect(sql),
        }
    }
}

/// The facts of the last normalised simple query text (literals replaced by markers). Both
/// read words outside literals only (keywords, function names, semicolons between
/// statements), so read from the normalised text they hold for every query that differs from
/// it in literals: a query repeated with other values finds them with one comparison.
#[derive(Default)]
pub(super) struct FactsMemo {
    key: Vec<u8>,
    facts: Option<TextFacts>,
}

impl FactsMemo {
    pub fn of_normalised(&mut self, key: &[u8]) -> TextFacts {
        match self.facts {
            Some(facts) if *self.key == *key => facts,
            _ => {
                let facts = TextFacts::of(key);
                self.key.clear();
                self.key.extend_from_slice(key);
                self.facts = Some(facts);
                facts
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::{local_kind, FactsMemo, LocalKind, TextFacts};
    use crate::router::normalize::normalize;

    #[test]
    fn local_kinds_by_first_word_in_any_case_and_after_comments() {
        let cases: [(&[u8], Option<LocalKind>); 14] = [
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
            (b"REINDEX INDEX CONCURRENTLY i", Some(LocalKind::Ddl)),
        ];
        for (sql, kind) in cases {
            assert_eq!(local_kind(sql), kind, "{}", String::from_utf8_lossy(sql));
        }
    }

    /// The facts read from a normalised text are those of every text it stands for: literals
    /// that spell keywords, function names or semicolons change nothing.
    #[test]
    fn facts_of_the_normalised_text_are_those_of_the_text() {
        let texts: [&[u8]; 10] = [
            b"SELECT v FROM t WHERE id = 7",
            b"SET search_path = 'a'",
            b"select pg_cancel_backend(42)",
            b"SELECT set_config('a', 'b', false) FROM t WHERE id = 1",
            b"SELECT pg_advisory_lock(5)",
            b"CREATE TEMP TABLE x (a int DEFAULT 3)",
            b"DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            b"SELECT 1; SET x = 2",
            b"show chunks",
            b"/* 1 */ drop table t",
        ];
        let mut memo = FactsMemo::default();
        for sql in texts {
            let key = normalize(sql).unwrap().key;
            assert_eq!(memo.of_normalised(&key), TextFacts::of(sql), "{sql:?}");
            assert_eq!(memo.of_normalised(&key), TextFacts::of(sql), "{sql:?}");
        }
        // Words inside literals are no function call or second statement.
        let inside: [&[u8]; 3] = [
            b"SELECT 'set_config' FROM t WHERE id = 1",
            b"SELECT 'pg_cancel_backend(1)'",
            b"SELECT 'a; SET x = 1'",
        ];
        for sql in inside {
            let key = normalize(sql).unwrap().key;
            let facts = memo.of_normalised(&key);
            assert_eq!(facts.local, None, "{sql:?}");
            assert!(!facts.effect.pins, "{sql:?}");
        }
    }
}
