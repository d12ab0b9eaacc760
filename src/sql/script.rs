//! A query string with several statements, cut into its statements as PostgreSQL's parser cuts
//! it, each with what it does to the transaction (the session runs such a string statement by
//! statement when they go to different shards).

use pg_query::protobuf::TransactionStmtKind as Kind;
use pg_query::NodeEnum;

/// One statement of a query string.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Statement<'a> {
    pub text: &'a str,
    pub control: Option<Control>,
}

/// A transaction-control statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Control {
    /// BEGIN or START TRANSACTION; `modes`: with an isolation level or access mode.
    Begin { modes: bool },
    /// COMMIT or END (`chain`: AND CHAIN).
    Commit { chain: bool },
    /// ROLLBACK or ABORT (`chain`: AND CHAIN).
    Rollback { chain: bool },
    /// SAVEPOINT, RELEASE or ROLLBACK TO (the command as PostgreSQL's messages name it): only
    /// inside a transaction block.
    Savepoint(&'static str),
    /// PREPARE TRANSACTION, COMMIT PREPARED, ROLLBACK PREPARED.
    TwoPhase,
}

/// The statements of `sql`, in order; `None` when PostgreSQL's parser cannot read it.
pub fn split(sql: &str) -> Option<Vec<Statement<'_>>> {
    let parsed = pg_query::parse(sql, 0).ok()?;
    parsed
        .protobuf
        .stmts
        .iter()
        .map(|raw| {
            let text = statement_text(sql, raw)?;
            let control = match raw.stmt.as_ref()?.node.as_ref()? {
                NodeEnum::TransactionStmt(t) => control(t),
                _ => None,
            };
            Some(Statement { text, control })
        })
        .collect()
}

/// The text of one statement PostgreSQL's parser found in `sql`.
pub fn statement_text<'a>(sql: &'a str, raw: &pg_query::protobuf::RawStmt) -> Option<&'a str> {
    let start = usize::try_from(raw.stmt_location).ok()?;
    let end = match raw.stmt_len {
        0 => sql.len(),
        len => start + usize::try_from(len).ok()?,
    };
    sql.get(start..end)
}

fn control(t: &pg_query::protobuf::TransactionStmt) -> Option<Control> {
    Some(match Kind::try_from(t.kind).ok()? {
        Kind::TransStmtBegin | Kind::TransStmtStart => Control::Begin {
            modes: !t.options.is_empty(),
        },
        Kind::TransStmtCommit => Control::Commit { chain: t.chain },
        Kind::TransStmtRollback => Control::Rollback { chain: t.chain },
        Kind::TransStmtSavepoint => Control::Savepoint("SAVEPOINT"),
        Kind::TransStmtRelease => Control::Savepoint("RELEASE SAVEPOINT"),
        Kind::TransStmtRollbackTo => Control::Savepoint("ROLLBACK TO SAVEPOINT"),
        Kind::TransStmtPrepare
        | Kind::TransStmtCommitPrepared
        | Kind::TransStmtRollbackPrepared => Control::TwoPhase,
        Kind::Undefined => return None,
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statements_are_cut_where_postgres_cuts_them() {
        let sql =
            "BEGIN; INSERT INTO t VALUES (1, 'a;b') ;\n/* c */ SELECT $$;$$;COMMIT AND CHAIN;\
                   START TRANSACTION ISOLATION LEVEL SERIALIZABLE; SAVEPOINT s; ROLLBACK TO s; END";
        let got = split(sql).expect("parsed");
        let texts: Vec<&str> = got.iter().map(|s| s.text.trim()).collect();
        assert_eq!(
            texts,
            [
                "BEGIN",
                "INSERT INTO t VALUES (1, 'a;b')",
                "SELECT $$;$$",
                "COMMIT AND CHAIN",
                "START TRANSACTION ISOLATION LEVEL SERIALIZABLE",
                "SAVEPOINT s",
                "ROLLBACK TO s",
                "END",
            ]
        );
        let controls: Vec<Option<Control>> = got.iter().map(|s| s.control).collect();
        assert_eq!(
            controls,
            [
                Some(Control::Begin { modes: false }),
                None,
                None,
                Some(Control::Commit { chain: true }),
                Some(Control::Begin { modes: true }),
                Some(Control::Savepoint("SAVEPOINT")),
                Some(Control::Savepoint("ROLLBACK TO SAVEPOINT")),
                Some(Control::Commit { chain: false }),
            ]
        );
        assert_eq!(split("SELECT 1;; ;SELECT 2").map(|s| s.len()), Some(2));
        assert_eq!(split("SELEC 1; SELECT 2"), None);
        // Offsets are bytes, whatever the characters before.
        let got = split("SELECT 'żółw'; SELECT 'ß'").expect("parsed");
        assert_eq!(got[1].text.trim(), "SELECT 'ß'");
    }
}
