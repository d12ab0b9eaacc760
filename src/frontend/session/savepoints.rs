//! Savepoints of a transaction block over several shards. SAVEPOINT, RELEASE and ROLLBACK TO
//! reach every shard of the block, and a shard that joins the block later gets the block's
//! savepoints right after its BEGIN, so `ROLLBACK TO s` undoes the same work everywhere: on a
//! shard that joined after `s`, all of it.

use super::{Session, SessionError};
use crate::frontend::statements::ClientFrame;
use crate::protocol::TxStatus;
use crate::sql::classify::{leading_words_and_rest, may_start_with};
use crate::sql::quote::quote_ident;

/// A savepoint statement, with the savepoint's name as PostgreSQL folds it.
#[derive(Debug, PartialEq, Eq)]
pub(super) enum SavepointOp {
    Define(String),
    Release(String),
    RollbackTo(String),
}

/// The next word (folded to lower case) or quoted identifier (kept) of `s`, and what follows.
fn token(s: &[u8]) -> Option<(String, &[u8])> {
    let ([word], rest) = leading_words_and_rest::<1>(s);
    if !word.is_empty() {
        return Some((String::from_utf8_lossy(word).to_ascii_lowercase(), rest));
    }
    let body = rest.strip_prefix(b"\"")?;
    let mut name = Vec::new();
    let mut i = 0;
    while i < body.len() {
        if body[i] == b'"' {
            // `""` inside a quoted identifier stands for one quote.
            if body.get(i + 1) == Some(&b'"') {
                name.push(b'"');
                i += 2;
                continue;
            }
            return Some((String::from_utf8_lossy(&name).into_owned(), &body[i + 1..]));
        }
        name.push(body[i]);
        i += 1;
    }
    None
}

/// `SAVEPOINT n`, `RELEASE [SAVEPOINT] n`, `ROLLBACK [WORK | TRANSACTION] TO [SAVEPOINT] n`.
pub(super) fn savepoint_op(sql: &[u8]) -> Option<SavepointOp> {
    let (first, rest) = token(sql)?;
    match first.as_str() {
        "savepoint" => Some(SavepointOp::Define(token(rest)?.0)),
        "release" => {
            let (t, r) = token(rest)?;
            let name = if t == "savepoint" { token(r)?.0 } else { t };
            Some(SavepointOp::Release(name))
        }
        "rollback" => {
            let (mut t, mut r) = token(rest)?;
            if t == "work" || t == "transaction" {
                (t, r) = token(r)?;
            }
            if t != "to" {
                return None;
            }
            let (t, r) = token(r)?;
            let name = if t == "savepoint" { token(r)?.0 } else { t };
            Some(SavepointOp::RollbackTo(name))
        }
        _ => None,
    }
}

impl Session {
    /// The savepoint statement a frame runs: a simple query's, or (inside a block) a Bind's.
    pub(super) fn savepoint_of(&self, parsed: ClientFrame<'_>) -> Option<(SavepointOp, Vec<u8>)> {
        let text: &[u8] = match parsed {
            ClientFrame::Query(sql) => sql,
            ClientFrame::Bind { statement, .. } if self.links.status().in_block() => {
                &self.statements.get(statement)?.query
            }
            _ => return None,
        };
        if !may_start_with(text, &[*b"sav", *b"rel", *b"rol"]) {
            return None;
        }
        savepoint_op(text).map(|op| (op, text.to_vec()))
    }

    /// Keeps the block's savepoints as PostgreSQL does: RELEASE drops the named one and those
    /// after it, ROLLBACK TO those after it (the latest of a repeated name counts).
    pub(super) fn note_savepoint(&mut self, op: &SavepointOp) {
        let find = |name: &str, list: &[String]| list.iter().rposition(|n| n == name);
        match op {
            SavepointOp::Define(name) => self.links.block.savepoints.push(name.clone()),
            SavepointOp::Release(name) => {
                if let Some(i) = find(name, &self.links.block.savepoints) {
                    self.links.block.savepoints.truncate(i);
                }
            }
            SavepointOp::RollbackTo(name) => {
                if let Some(i) = find(name, &self.links.block.savepoints) {
                    self.links.block.savepoints.truncate(i + 1);
                }
            }
        }
    }

    /// Before the client's savepoint statement reaches the current shard: every other shard of
    /// the block runs it too. A shard that fails it (ROLLBACK TO a name it never had cannot
    /// happen: joining shards replay the savepoints) keeps its failed state for the client's
    /// next COMMIT to find.
    pub(super) async fn savepoint_everywhere(&mut self, sql: &[u8]) -> Result<(), SessionError> {
        if self
            .links
            .parked
            .iter()
            .all(|p| p.tx_status == TxStatus::Idle)
        {
            return Ok(());
        }
        self.drain_current().await?;
        let text = String::from_utf8_lossy(sql).into_owned();
        for p in self
            .links
            .parked
            .iter_mut()
            .filter(|p| p.tx_status.in_block())
        {
            match p.conn.conn.run_internal(&text).await {
                Ok(Ok(())) => p.tx_status = TxStatus::InBlock,
                Ok(Err(_)) => p.tx_status = TxStatus::Failed,
                Err(e) => {
                    p.conn.conn.broken = true;
                    return Err(e.into());
                }
            }
        }
        Ok(())
    }

    /// The statements a shard joining the block runs after its BEGIN: the block's savepoints.
    pub(super) fn savepoint_replay(&self) -> impl Iterator<Item = String> + '_ {
        self.links
            .block
            .savepoints
            .iter()
            .map(|name| format!("SAVEPOINT {}", quote_ident(name)))
    }
}

#[cfg(test)]
mod tests {
    use super::{savepoint_op, SavepointOp::*};

    #[test]
    fn savepoint_statements_and_their_names() {
        let cases: [(&[u8], _); 9] = [
            (b"SAVEPOINT s1", Some(Define("s1".into()))),
            (
                b"  savepoint \"Mixed \"\"q\"\"\";",
                Some(Define("Mixed \"q\"".into())),
            ),
            (b"RELEASE SAVEPOINT S1", Some(Release("s1".into()))),
            (b"release s1", Some(Release("s1".into()))),
            (b"ROLLBACK TO SAVEPOINT s1", Some(RollbackTo("s1".into()))),
            (b"rollback work to s1", Some(RollbackTo("s1".into()))),
            (
                b"/* c */ ROLLBACK TRANSACTION TO \"S\"",
                Some(RollbackTo("S".into())),
            ),
            (b"ROLLBACK", None),
            (b"ROLLBACK PREPARED 'x'", None),
        ];
        for (sql, want) in cases {
            assert_eq!(savepoint_op(sql), want, "{}", String::from_utf8_lossy(sql));
        }
    }
}
