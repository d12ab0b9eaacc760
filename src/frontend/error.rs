//! What the frontend itself refuses or reports to a client, as opposed to what the shards,
//! the router or the DDL executor report. Its [`ClientError`] maps each variant to its SQLSTATE
//! in one exhaustive match, so a new refusal cannot reach a client without a deliberate code; the
//! texts are what clients and tests see, so they do not change lightly.

use tokio_postgres::error::SqlState;

use crate::client_error::ClientError;

/// A refusal or failure the frontend reports in an ErrorResponse of its own.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum FrontendError {
    // Startup and authentication.
    #[error("unsupported frontend protocol {major}.{minor}: server supports 3.0 to 3.0")]
    UnsupportedProtocol { major: u16, minor: u16 },
    /// Bytes that came with an SSLRequest or GSSENCRequest, ahead of its answer.
    #[error("received unencrypted data after {request} request")]
    UnencryptedAfterRequest { request: &'static str },
    #[error("no PostgreSQL user name specified in startup packet")]
    NoUserName,
    #[error("database \"{database}\" does not exist")]
    UnknownDatabase { database: String },
    #[error("expected a startup or password message")]
    ExpectedStartup,
    #[error("password authentication failed for user \"{user}\"")]
    WrongPassword { user: String },
    #[error("role \"{user}\" does not exist")]
    UnknownRole { user: String },
    /// The authentication exchange broke off (pgwire's text).
    #[error("{0}")]
    AuthExchange(String),
    /// A run-time parameter of the startup packet that PostgreSQL refuses (the first shard's
    /// SQLSTATE and text).
    #[error("{message}")]
    StartupSetting {
        code: tokio_postgres::error::SqlState,
        message: String,
    },
    /// `pg_cancel_backend`/`pg_terminate_backend` of another user's session (PostgreSQL 15's
    /// texts).
    #[error(
        "must be a member of the role whose {} or member of pg_signal_backend",
        if *terminate { "process is being terminated" } else { "query is being canceled" }
    )]
    SignalNotPermitted { terminate: bool },
    /// The session's pid was given to `pg_terminate_backend`.
    #[error("terminating connection due to administrator command")]
    TerminatedByAdministrator,
    #[error("terminating connection due to idle-in-transaction timeout")]
    IdleInTransactionTimeout,
    #[error(
        "terminating connection: its statement ran longer than limits.query_timeout_ms \
         ({limit_ms} ms) at the proxy, and was canceled"
    )]
    QueryTimeout { limit_ms: u64 },
    #[error("sorry, too many clients already")]
    TooManyClients,
    #[error("too many connections for role \"{user}\"")]
    TooManyForUser { user: String },
    /// A message the protocol does not allow (the framer's text).
    #[error("{0}")]
    ProtocolViolation(String),
    /// The first shard, which tells clients the server's parameters, cannot be reached.
    #[error("shard \"{shard}\" is unreachable: {reason}")]
    ShardUnreachable { shard: String, reason: String },

    // Statements and routing.
    #[error("prepared statement \"{name}\" already exists")]
    DuplicateStatement { name: String },
    #[error(
        "an INSERT … SELECT that moves rows between shards is not supported as a \
         prepared statement yet: send it as a simple query"
    )]
    PreparedInsertSelect,
    /// The planner's reason a statement cannot run across shards yet.
    #[error("{0}")]
    NotAcrossShards(String),
    #[error("cannot split the INSERT by shard: {0}")]
    SplitInsert(String),
    #[error("cannot add the generated key to the INSERT: {0}")]
    GeneratedKey(String),
    #[error("cannot read the columns of the table to route the INSERT: {0}")]
    ColumnsUnreadable(String),
    #[error("cannot read the columns of the table: name the columns of the INSERT")]
    ColumnsUnknown,
    #[error("generated key values went missing while routing the INSERT")]
    KeysMissing,
    /// `currval` of a key sequence before this session's first value of it (PostgreSQL's text).
    #[error("currval of sequence \"{0}\" is not yet defined in this session")]
    CurrvalUndefined(String),
    /// A statement in a block that failed on another shard (PostgreSQL's text).
    #[error("current transaction is aborted, commands ignored until end of transaction block")]
    BlockFailed,
    #[error(
        "sharding DDL cannot run inside a transaction block: \
         send it outside BEGIN … COMMIT (it commits on its own)"
    )]
    DdlInTransaction,
    /// A CONCURRENTLY form the proxy runs itself, in a block (PostgreSQL's text).
    #[error("{0} cannot run inside a transaction block")]
    ConcurrentlyInTransaction(&'static str),
    #[error(
        "COMMIT AND CHAIN of a transaction over several shards is not supported yet; the \
         transaction was rolled back: send COMMIT, then BEGIN"
    )]
    ChainAcrossShards,

    // COPY over several shards.
    #[error(
        "COPY (SELECT …) over several shards whose rows shardwire combines (ORDER BY, \
         LIMIT, aggregates, joins) runs in a simple query only, not through the extended \
         protocol: send it as a simple query, or give the full sharding key"
    )]
    CopyOrdered,
    #[error("COPY from stdin failed: {0}")]
    CopyFailed(String),
    #[error("unexpected message type 0x{0:02X} during COPY from stdin")]
    CopyUnexpectedMessage(u8),
}

impl ClientError for FrontendError {
    fn sqlstate(&self) -> SqlState {
        use FrontendError as F;
        match self {
            F::UnsupportedProtocol { .. }
            | F::PreparedInsertSelect
            | F::NotAcrossShards(_)
            | F::SplitInsert(_)
            | F::GeneratedKey(_)
            | F::ColumnsUnknown
            | F::CopyOrdered => SqlState::FEATURE_NOT_SUPPORTED,
            F::NoUserName | F::UnknownRole { .. } => SqlState::INVALID_AUTHORIZATION_SPECIFICATION,
            F::UnknownDatabase { .. } => SqlState::UNDEFINED_DATABASE,
            F::WrongPassword { .. } => SqlState::INVALID_PASSWORD,
            F::ExpectedStartup
            | F::AuthExchange(_)
            | F::CopyUnexpectedMessage(_)
            | F::ProtocolViolation(_)
            | F::UnencryptedAfterRequest { .. } => SqlState::PROTOCOL_VIOLATION,
            F::TooManyClients | F::TooManyForUser { .. } => SqlState::TOO_MANY_CONNECTIONS,
            F::IdleInTransactionTimeout => SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
            F::QueryTimeout { .. } => SqlState::QUERY_CANCELED,
            F::StartupSetting { code, .. } => code.clone(),
            F::SignalNotPermitted { .. } => SqlState::INSUFFICIENT_PRIVILEGE,
            F::TerminatedByAdministrator => SqlState::ADMIN_SHUTDOWN,
            F::ShardUnreachable { .. } | F::ColumnsUnreadable(_) => SqlState::CONNECTION_FAILURE,
            F::DuplicateStatement { .. } => SqlState::DUPLICATE_PSTATEMENT,
            F::KeysMissing => SqlState::INTERNAL_ERROR,
            F::CurrvalUndefined(_) => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            F::DdlInTransaction | F::ConcurrentlyInTransaction(_) => {
                SqlState::ACTIVE_SQL_TRANSACTION
            }
            F::BlockFailed => SqlState::IN_FAILED_SQL_TRANSACTION,
            F::ChainAcrossShards => SqlState::FEATURE_NOT_SUPPORTED,
            F::CopyFailed(_) => SqlState::QUERY_CANCELED,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frontend_refusals_keep_their_texts() {
        use FrontendError as F;
        let e = F::UnsupportedProtocol { major: 2, minor: 0 };
        assert_eq!(e.sqlstate(), SqlState::FEATURE_NOT_SUPPORTED);
        assert_eq!(
            e.client_message(),
            "unsupported frontend protocol 2.0: server supports 3.0 to 3.0"
        );
        let e = F::CopyUnexpectedMessage(b'Q');
        assert_eq!(e.sqlstate(), SqlState::PROTOCOL_VIOLATION);
        assert_eq!(
            e.client_message(),
            "unexpected message type 0x51 during COPY from stdin"
        );
        assert_eq!(
            F::DdlInTransaction.client_message(),
            "sharding DDL cannot run inside a transaction block: send it outside \
             BEGIN … COMMIT (it commits on its own)"
        );
    }
}
