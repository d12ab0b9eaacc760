//! A simple query whose statements go to different shards, run statement by statement as
//! PostgreSQL runs a query string: one implicit transaction unless the string's own BEGIN,
//! COMMIT or ROLLBACK say otherwise, the rest skipped after an error, one ReadyForQuery at the
//! end (the session's).
//!
//! This module holds the string's transaction: when the implicit one opens, what transaction
//! control means inside it, how it ends. Each statement runs through the session
//! ([`Statements`]) as a query of its own — routed, gathered, refused or answered by the proxy
//! as it would be alone — and its answer reaches the client without its ReadyForQuery. The
//! implicit transaction is a block opened with a BEGIN of the proxy's own before the first
//! statement that is not transaction control, and committed (two-phase when several shards
//! wrote) after the last, or rolled back after an error: its answers never reach the client, a
//! failed commit's error does.

use crate::client_error::ClientError;
use crate::protocol::TxStatus;
use crate::sql::script::{Control, Statement};
use std::future::Future;
use std::pin::Pin;
use tokio_postgres::error::SqlState;

/// What the client heard of one statement.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Heard {
    Done,
    Failed,
}

/// One statement's run. Boxed: a statement runs through the session's dispatch, which is
/// where the string itself came from, so its future's type would contain itself.
pub type Running<'a, E> = Pin<Box<dyn Future<Output = Result<Heard, E>> + Send + 'a>>;

/// The session, as it runs a query string's statements one by one.
pub trait Statements: Send {
    type Error: Send;

    /// Runs one statement as a query of its own; its answer goes to the client without the
    /// ReadyForQuery.
    fn run<'a>(&'a mut self, text: &'a str) -> Running<'a, Self::Error>;

    /// Runs a statement of the proxy's own, its answer kept from the client unless it failed.
    fn quietly<'a>(&'a mut self, text: &'a str) -> Running<'a, Self::Error>;

    /// A statement the proxy refuses inside the string: the block fails with it.
    fn refuse<'a>(&'a mut self, e: &'a ScriptRefusal) -> Running<'a, Self::Error>;

    /// Answers a statement the proxy completes itself with its tag.
    fn complete(&mut self, tag: &str);

    /// PostgreSQL's warning for COMMIT or ROLLBACK with no block open.
    fn warn_no_transaction(&mut self);

    /// The transaction status the client sees now.
    fn status(&mut self) -> TxStatus;
}

/// Transaction control a query string over several shards cannot take where it stands.
#[derive(Debug, thiserror::Error)]
pub enum ScriptRefusal {
    #[error(
        "BEGIN with transaction modes after other statements of a query string whose \
         statements go to several shards: put it first"
    )]
    ModesAfterStatements,
    #[error(
        "PREPARE TRANSACTION, COMMIT PREPARED and ROLLBACK PREPARED in a query string whose \
         statements go to several shards are not supported: send them as queries of their own"
    )]
    TwoPhase,
    /// PostgreSQL's own refusal outside a block the client began (the command).
    #[error("{0} can only be used in transaction blocks")]
    OnlyInBlocks(&'static str),
}

impl ClientError for ScriptRefusal {
    fn sqlstate(&self) -> SqlState {
        match self {
            ScriptRefusal::ModesAfterStatements | ScriptRefusal::TwoPhase => {
                SqlState::FEATURE_NOT_SUPPORTED
            }
            ScriptRefusal::OnlyInBlocks(_) => SqlState::NO_ACTIVE_SQL_TRANSACTION,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// Where the string's transaction stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum Block {
    /// None open: the next statement that is not transaction control opens the implicit one.
    Idle,
    /// The proxy's BEGIN opened it: committed after the last statement.
    Implicit,
    /// The client's own block, open when the query came or begun by it.
    Client,
}

impl Block {
    /// The string's transaction as the client's status shows it after a statement that may
    /// have ended or begun one.
    fn of(status: TxStatus) -> Block {
        match status {
            TxStatus::Idle => Block::Idle,
            TxStatus::InBlock | TxStatus::Failed => Block::Client,
        }
    }
}

/// Runs `statements` one by one through `session`, in the string's transaction.
pub async fn run<S: Statements>(
    session: &mut S,
    statements: &[Statement<'_>],
) -> Result<(), S::Error> {
    let mut block = Block::of(session.status());
    let mut failed = false;
    for statement in statements {
        let heard = match (statement.control, block) {
            (Some(Control::TwoPhase), _) => session.refuse(&ScriptRefusal::TwoPhase).await?,
            (None, Block::Idle) => match session.quietly("BEGIN").await? {
                Heard::Done => {
                    block = Block::Implicit;
                    session.run(statement.text).await?
                }
                Heard::Failed => Heard::Failed,
            },
            (Some(control), Block::Implicit) => {
                let heard = control_in_implicit(session, control, statement.text).await?;
                if matches!(control, Control::Begin { .. }) && heard == Heard::Done {
                    block = Block::Client;
                } else if matches!(control, Control::Commit { .. } | Control::Rollback { .. }) {
                    block = Block::of(session.status());
                }
                heard
            }
            (None, Block::Implicit | Block::Client) => session.run(statement.text).await?,
            (Some(_), Block::Idle | Block::Client) => {
                let heard = session.run(statement.text).await?;
                block = Block::of(session.status());
                heard
            }
        };
        if heard == Heard::Failed {
            failed = true;
            break;
        }
    }
    if block == Block::Implicit {
        // Only a failed COMMIT's error reaches the client.
        session
            .quietly(if failed { "ROLLBACK" } else { "COMMIT" })
            .await?;
    }
    Ok(())
}

/// Transaction control met inside the implicit transaction, as PostgreSQL treats it there:
/// BEGIN makes it the client's block, COMMIT and ROLLBACK end it with a warning, the rest needs
/// a block the client began.
async fn control_in_implicit<S: Statements>(
    session: &mut S,
    control: Control,
    text: &str,
) -> Result<Heard, S::Error> {
    match control {
        Control::Begin { modes: false } => {
            session.complete("BEGIN");
            Ok(Heard::Done)
        }
        Control::Begin { modes: true } => {
            session.refuse(&ScriptRefusal::ModesAfterStatements).await
        }
        Control::Commit { chain: false } | Control::Rollback { chain: false } => {
            session.warn_no_transaction();
            session.run(text).await
        }
        Control::Commit { chain: true } => {
            session
                .refuse(&ScriptRefusal::OnlyInBlocks("COMMIT AND CHAIN"))
                .await
        }
        Control::Rollback { chain: true } => {
            session
                .refuse(&ScriptRefusal::OnlyInBlocks("ROLLBACK AND CHAIN"))
                .await
        }
        Control::Savepoint(command) => session.refuse(&ScriptRefusal::OnlyInBlocks(command)).await,
        Control::TwoPhase => session.refuse(&ScriptRefusal::TwoPhase).await,
    }
}
