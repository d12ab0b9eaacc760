//! The transaction layer's one error type and its SQLSTATEs.

use std::time::Duration;

use tokio_postgres::error::{DbError, Severity, SqlState};

use super::control::{ConnectError, ShardLabel};
use super::gid::Gid;
use crate::client_error::{with_causes, ClientError};

#[derive(Debug, thiserror::Error)]
pub enum TxnError {
    /// A shard refused a statement (or PREPARE, or COMMIT); its own SQLSTATE and text are kept.
    #[error("{shard}: {}", .error.message())]
    Statement {
        shard: ShardLabel,
        error: Box<DbError>,
    },
    /// No connection to the shard, or it broke (the server stopped, crashed or was terminated).
    #[error("{shard} is unavailable: {source}")]
    ShardUnavailable {
        shard: ShardLabel,
        #[source]
        source: ConnectError,
    },
    #[error(
        "{shard} has max_prepared_transactions = 0, so it cannot take part in multi-shard writes \
         (two-phase commit); set max_prepared_transactions to at least max_connections in its \
         postgresql.conf and restart it"
    )]
    PreparedTransactionsDisabled { shard: ShardLabel },
    /// The catalog's decision log could not be read or written.
    #[error("the transaction decision log in the catalog database failed: {source}")]
    DecisionLog {
        #[source]
        source: ConnectError,
    },
    /// Whether the commit decision was recorded is unknown: the transaction may yet commit or
    /// roll back, and recovery will settle it.
    #[error(
        "the outcome of distributed transaction {gid} is unknown: the catalog connection failed \
         while its commit decision was being recorded ({}); recovery will finish it, check \
         SHOW TRANSACTIONS",
        with_causes(source)
    )]
    ResolutionUnknown {
        gid: Gid,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection to the only participant broke during COMMIT.
    #[error(
        "the outcome of the transaction on {shard} is unknown: the connection failed during \
         COMMIT ({})",
        with_causes(source)
    )]
    CommitUnknown {
        shard: ShardLabel,
        #[source]
        source: tokio_postgres::Error,
    },
    /// The connection to the participant whose COMMIT records the decision (the catalog's own
    /// shard) failed during that COMMIT.
    #[error(
        "the outcome of distributed transaction {gid} is unknown: the connection to {shard}, \
         whose COMMIT records the commit decision, failed during it ({reason}); recovery will \
         finish it, check SHOW TRANSACTIONS"
    )]
    DecisionUnknown {
        gid: Gid,
        shard: ShardLabel,
        reason: String,
    },
    /// Recovery decided abort before the coordinator could decide commit.
    #[error(
        "distributed transaction {gid} was rolled back: recovery found it prepared for too long \
         and aborted it; retry the transaction"
    )]
    AbortedByRecovery { gid: Gid },
    /// The coordinator's lease had expired when it came to decide: another proxy's recovery may
    /// be finishing its transactions, so it rolled back instead of committing.
    #[error(
        "distributed transaction {gid} was rolled back: this proxy's lease in the catalog had \
         expired (it could not be renewed in time), so other proxies may be finishing its \
         transactions; retry the transaction"
    )]
    LeaseExpired { gid: Gid },
    /// The lease could not be taken, renewed or given up.
    #[error("the lease of proxy {incarnation} in the catalog database failed: {source}")]
    Lease {
        incarnation: String,
        #[source]
        source: ConnectError,
    },
    /// Preparing took so long that recovery might already be aborting the transaction.
    #[error(
        "distributed transaction {gid} was rolled back: preparing it on every shard took {:?}, \
         longer than the {:?} allowed; retry the transaction", .took, .limit
    )]
    PrepareTooSlow {
        gid: Gid,
        took: Duration,
        limit: Duration,
    },
    #[error("transaction settings: {0}")]
    Settings(String),
}

impl ClientError for TxnError {
    fn sqlstate(&self) -> SqlState {
        match self {
            TxnError::Statement { error, .. } => error.code().clone(),
            TxnError::ShardUnavailable { .. } => SqlState::CONNECTION_FAILURE,
            TxnError::PreparedTransactionsDisabled { .. } => {
                SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
            }
            TxnError::DecisionLog { source } | TxnError::Lease { source, .. } => {
                match source.db_error() {
                    Some(db) => db.code().clone(),
                    None => SqlState::CONNECTION_FAILURE,
                }
            }
            TxnError::ResolutionUnknown { .. }
            | TxnError::CommitUnknown { .. }
            | TxnError::DecisionUnknown { .. } => SqlState::TRANSACTION_RESOLUTION_UNKNOWN,
            TxnError::AbortedByRecovery { .. }
            | TxnError::LeaseExpired { .. }
            | TxnError::PrepareTooSlow { .. } => SqlState::TRANSACTION_ROLLBACK,
            TxnError::Settings(_) => SqlState::CONFIG_FILE_ERROR,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

impl TxnError {
    /// The shard the error is about, if it is about one.
    pub fn shard(&self) -> Option<&ShardLabel> {
        match self {
            TxnError::Statement { shard, .. }
            | TxnError::ShardUnavailable { shard, .. }
            | TxnError::PreparedTransactionsDisabled { shard }
            | TxnError::CommitUnknown { shard, .. }
            | TxnError::DecisionUnknown { shard, .. } => Some(shard),
            TxnError::DecisionLog { .. }
            | TxnError::ResolutionUnknown { .. }
            | TxnError::AbortedByRecovery { .. }
            | TxnError::LeaseExpired { .. }
            | TxnError::Lease { .. }
            | TxnError::PrepareTooSlow { .. }
            | TxnError::Settings(_) => None,
        }
    }

    /// Classifies a failure on a shard session: an error the server reported while the session
    /// lives on keeps the shard's SQLSTATE; a lost connection, or a FATAL error that ends the
    /// session (shutdown, crash, termination), means the shard is unavailable.
    pub(crate) fn on_shard(shard: &ShardLabel, error: ConnectError) -> TxnError {
        if let Some(db) = error.db_error() {
            let ends_session = matches!(
                db.parsed_severity(),
                Some(Severity::Fatal | Severity::Panic)
            );
            if !ends_session {
                return TxnError::Statement {
                    shard: shard.clone(),
                    error: Box::new(db.clone()),
                };
            }
        }
        TxnError::ShardUnavailable {
            shard: shard.clone(),
            source: error,
        }
    }
}

#[cfg(test)]
mod tests {
    /// The catalog's and the transaction layer's errors that carry a tokio-postgres error say
    /// its cause, not only its kind (`client_error::with_causes`).
    #[tokio::test]
    async fn errors_carrying_a_postgres_error_say_its_cause() {
        let closed = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let port = closed.local_addr().unwrap().port();
        drop(closed);
        let conf = format!("host=127.0.0.1 port={port} user=x connect_timeout=5");
        let error = || async {
            tokio_postgres::connect(&conf, tokio_postgres::NoTls)
                .await
                .err()
                .expect("nothing listens on the port")
        };
        assert_eq!(error().await.to_string(), "error connecting to server");
        let reason = |text: String| {
            assert!(
                text.contains("refused"),
                "the cause is missing from {text:?}"
            );
        };
        reason(crate::catalog::CatalogError::Query(error().await).to_string());
        reason(crate::txn::control::ConnectError::Postgres(error().await).to_string());
    }
}
