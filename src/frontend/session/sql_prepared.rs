//! SQL-level `PREPARE`, `EXECUTE` and `DEALLOCATE` held by the proxy while the catalog records
//! tables (`sql::prepare`): a statement over sharded tables cannot be prepared on one shard,
//! so the proxy keeps its text and runs each EXECUTE as the statement with its arguments in
//! place, routed and planned as that statement. Held here, such a statement pins nothing.

use super::{Session, SessionError};
use crate::client_error::ClientError;
use crate::frontend::pipeline::Pending;
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements;
use crate::protocol::{self, Frame, TxStatus};
use crate::sql::prepare::{self, PrepareError, Prepared, SqlPrepared};
use bytes::BytesMut;
use std::collections::HashMap;

/// The session's statements prepared with SQL PREPARE, by name.
#[derive(Default)]
pub(super) struct SqlStatements {
    by_name: HashMap<String, Prepared>,
}

impl SqlStatements {
    pub fn is_empty(&self) -> bool {
        self.by_name.is_empty()
    }

    /// DISCARD ALL or DEALLOCATE ALL.
    pub fn clear(&mut self) {
        self.by_name.clear();
    }
}

/// What became of a simple query that may be one of these statements.
enum Step {
    /// Not one the proxy holds: it goes on as sent.
    Unchanged,
    /// Answered here: the reply, ReadyForQuery included.
    Answered(BytesMut),
    /// An EXECUTE: the statement it runs, as a query message.
    Runs(Vec<u8>),
}

impl Session {
    /// Whether a simple query must leave the fast path to be looked at here.
    pub(super) fn may_be_sql_prepared(&self, sql: &[u8]) -> bool {
        (self.ctx.catalog.has_tables() || !self.routing.sql_prepared.is_empty())
            && (prepare::may_be(sql) || prepare::may_contain(sql))
    }

    /// Answers or rewrites a simple-query PREPARE, EXECUTE or DEALLOCATE the proxy holds.
    /// `true`: the frame was handled.
    pub(super) async fn on_sql_prepared(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        if frame.tag != b'Q' {
            return Ok(false);
        }
        let sql = statements::query_text(frame)?;
        if !self.may_be_sql_prepared(sql) {
            return Ok(false);
        }
        if prepare::may_contain(sql) {
            // A string of statements with one of these among them: each statement is run
            // as a query of its own, and so comes here alone.
            let text = std::str::from_utf8(sql).ok();
            let statements = text.and_then(crate::sql::script::split).unwrap_or_default();
            if statements.len() > 1
                && statements
                    .iter()
                    .any(|s| prepare::may_be(s.text.as_bytes()))
            {
                self.run_script(sql, client).await?;
                return Ok(true);
            }
        }
        match self.sql_prepared_step(sql) {
            Ok(Step::Unchanged) => Ok(false),
            Ok(Step::Answered(reply)) => {
                self.pipeline
                    .push(Pending::composed(reply.freeze()), &mut self.cout);
                Ok(true)
            }
            Ok(Step::Runs(query)) => {
                Box::pin(self.on_client_frame(Frame::borrowed(&query), client)).await?;
                Ok(true)
            }
            Err(e) => {
                self.refuse_query(frame, &e.sqlstate(), &e.client_message())
                    .await?;
                Ok(true)
            }
        }
    }

    fn sql_prepared_step(&mut self, sql: &[u8]) -> Result<Step, PrepareError> {
        let Some(statement) = std::str::from_utf8(sql)
            .ok()
            .map(prepare::read)
            .transpose()?
            .flatten()
        else {
            return Ok(Step::Unchanged);
        };
        let held = &mut self.routing.sql_prepared.by_name;
        let failed = self.links.status() == TxStatus::Failed;
        let tag = match statement {
            SqlPrepared::Prepare { name, prepared } => {
                if !self.ctx.catalog.has_tables() {
                    // PostgreSQL's own, on the shard (the session is pinned to it).
                    return Ok(Step::Unchanged);
                }
                if failed {
                    return Err(PrepareError::InFailedBlock);
                }
                if held.contains_key(&name) {
                    return Err(PrepareError::Exists(name));
                }
                held.insert(name, prepared);
                "PREPARE"
            }
            SqlPrepared::Execute { name, args } => {
                let Some(prepared) = held.get(&name) else {
                    return Ok(Step::Unchanged);
                };
                let query = prepare::substitute(&name, prepared, &args)?;
                let mut frame = BytesMut::new();
                protocol::query(&mut frame, &query);
                return Ok(Step::Runs(frame.to_vec()));
            }
            SqlPrepared::Deallocate(name) => {
                if !held.contains_key(&name) {
                    return Ok(Step::Unchanged);
                }
                if failed {
                    return Err(PrepareError::InFailedBlock);
                }
                held.remove(&name);
                "DEALLOCATE"
            }
            SqlPrepared::DeallocateAll => {
                if failed {
                    return Err(PrepareError::InFailedBlock);
                }
                held.clear();
                // On to the shard too, for the statements prepared there.
                return Ok(Step::Unchanged);
            }
        };
        let mut reply = BytesMut::new();
        protocol::command_complete(&mut reply, tag);
        protocol::ready_for_query(&mut reply, self.links.status());
        Ok(Step::Answered(reply))
    }
}
