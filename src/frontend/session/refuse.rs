//! Statements the proxy refuses itself, and the transaction block they fail: inside a block, a
//! refused statement fails the block on its shards as any error does on PostgreSQL, and a
//! block failed on one shard refuses what another shard would still run.

use super::{Session, SessionError};
use crate::frontend::statements::ClientFrame;
use crate::protocol::{Frame, TxStatus};
use tokio_postgres::error::SqlState;

impl Session {
    /// Fails the client's transaction block on its shards after an error the proxy found
    /// itself (a statement it refuses), as PostgreSQL's block fails after any error: until
    /// ROLLBACK (or ROLLBACK TO a savepoint) nothing more runs there, and COMMIT rolls back.
    /// The error is raised on one participant between statements; the others learn of it at
    /// the block's end, which rolls back everywhere once one participant failed.
    pub(super) async fn fail_block(&mut self, message: &str) -> Result<(), SessionError> {
        if self.links.status() != TxStatus::InBlock {
            return Ok(());
        }
        self.drain_current().await?;
        self.park_current();
        let Some(i) = (0..self.links.parked.len()).find(|&i| {
            self.links.parked[i].tx_status == TxStatus::InBlock && !self.links.parked[i].unsynced
        }) else {
            return Ok(());
        };
        let sql = format!(
            "DO $shardwire$BEGIN RAISE EXCEPTION USING MESSAGE = {}; END$shardwire$",
            crate::sql::quote::quote_literal(message)
        );
        self.links.parked.ask(&[i], &sql).await?;
        Ok(())
    }

    /// Whether the statement (a simple query, or a Parse or Bind) must be refused because the
    /// block failed: on one shard the shard itself refuses it, but a block spanning shards may
    /// have failed on another than the one the statement goes to. Only ending the block, or
    /// rolling back to a savepoint, is left, as on PostgreSQL.
    pub(super) fn fails_with_the_block(&self, frame: &Frame<&[u8]>) -> bool {
        if self.links.status() != TxStatus::Failed {
            return false;
        }
        let Ok(parsed) = ClientFrame::parse(frame) else {
            return false;
        };
        let text = match &parsed {
            ClientFrame::Parse { query, .. } => Some(*query),
            other => self.executed_text(other),
        };
        // No text: not a statement, or one that does not exist, which the shard answers for.
        let Some(text) = text else {
            return false;
        };
        !(super::shard_switch::ends_block(text)
            || matches!(
                super::savepoints::savepoint_op(text),
                Some(super::savepoints::SavepointOp::RollbackTo(_))
            ))
    }

    /// Answers a client message the proxy refuses, after what is still owed for earlier ones.
    /// Inside a transaction block the block fails as on PostgreSQL: at once for a simple
    /// query, at the batch's Sync for an extended-protocol message (see `Session::refuse`).
    pub(super) async fn refuse_query(
        &mut self,
        frame: &Frame<&[u8]>,
        code: &SqlState,
        message: &str,
    ) -> Result<(), SessionError> {
        self.drain_current().await?;
        if frame.tag == b'Q' {
            self.fail_block(message).await?;
        }
        self.refuse(frame, code, message);
        Ok(())
    }
}
