//! The one mapping from the proxy's errors to what a client sees: a SQLSTATE and a message that
//! says what to change. Each layer has its own error type; this match over them is exhaustive on
//! purpose, so a new error variant cannot reach a client without a deliberate code.

use tokio_postgres::error::SqlState;

use crate::backend::BackendError;

/// An error with the errors that caused it, `outer: inner: …`. tokio-postgres's errors say
/// only their kind ("error performing TLS handshake") and keep the reason as their source.
pub fn with_causes(error: &dyn std::error::Error) -> String {
    let mut text = error.to_string();
    let mut cause = error.source();
    while let Some(e) = cause {
        let part = e.to_string();
        if !text.ends_with(&part) {
            text.push_str(": ");
            text.push_str(&part);
        }
        cause = e.source();
    }
    text
}

/// An error as a client sees it.
pub trait ClientError {
    fn sqlstate(&self) -> SqlState;
    /// Text safe to show a client: no passwords, no internal addresses beyond the shard's.
    fn client_message(&self) -> String;
}

impl ClientError for BackendError {
    fn sqlstate(&self) -> SqlState {
        match self {
            BackendError::Connect { .. }
            | BackendError::Tls { .. }
            | BackendError::Timeout { .. }
            | BackendError::Unreachable { .. } => {
                SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION
            }
            BackendError::Auth { .. } => {
                SqlState::SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION
            }
            BackendError::Io(_) | BackendError::Frame(_) | BackendError::Closed => {
                SqlState::CONNECTION_FAILURE
            }
            BackendError::PoolTimeout { .. } => SqlState::TOO_MANY_CONNECTIONS,
        }
    }

    fn client_message(&self) -> String {
        match self {
            BackendError::PoolTimeout { shard, waited_ms } => format!(
                "all connections to shard \"{shard}\" stayed busy for {waited_ms} ms; \
                 raise [pool] size or connect_timeout_ms, or shorten transactions"
            ),
            BackendError::Unreachable { .. } => self.to_string(),
            BackendError::Connect { .. }
            | BackendError::Tls { .. }
            | BackendError::Timeout { .. }
            | BackendError::Auth { .. }
            | BackendError::Io(_)
            | BackendError::Frame(_)
            | BackendError::Closed => format!("shard unavailable: {self}"),
        }
    }
}

/// Errors that stop the proxy from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("metrics: {0}")]
    Metrics(String),
    #[error("catalog: {0}")]
    Catalog(#[from] crate::catalog::CatalogError),
    #[error("transaction layer: {0}")]
    Txn(#[from] crate::txn::TxnError),
    #[error("{0}")]
    FailPoints(#[from] crate::failpoint::FailPointError),
}

impl ClientError for crate::router::hash::HashError {
    fn sqlstate(&self) -> SqlState {
        use crate::model::KeyTypeError;
        use crate::router::hash::HashError as H;
        match self {
            H::KeyType(KeyTypeError::UnsupportedType { .. })
            | H::KeyType(KeyTypeError::InvalidTypeModifier { .. }) => {
                SqlState::FEATURE_NOT_SUPPORTED
            }
            H::InvalidInput { .. } => SqlState::INVALID_TEXT_REPRESENTATION,
            H::OutOfRange { .. } | H::NumericFieldOverflow { .. } => {
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE
            }
            H::ValueTooLong { .. } => SqlState::STRING_DATA_RIGHT_TRUNCATION,
            H::InvalidBinary { .. } | H::BinaryLength { .. } => {
                SqlState::INVALID_BINARY_REPRESENTATION
            }
            H::AmbiguousTimeZone { .. } | H::NeedsServer { .. } => SqlState::FEATURE_NOT_SUPPORTED,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

impl ClientError for crate::router::route::RouteError {
    fn sqlstate(&self) -> SqlState {
        use crate::router::place::PlaceError;
        use crate::router::route::RouteError as R;
        match self {
            R::Place(PlaceError::Hash(h)) => h.sqlstate(),
            R::Place(PlaceError::NoPartition { .. }) => SqlState::CHECK_VIOLATION,
            R::Place(PlaceError::Undecidable { .. }) => SqlState::FEATURE_NOT_SUPPORTED,
            R::MissingParameter(_) => SqlState::PROTOCOL_VIOLATION,
            R::BadParameter(_) => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            R::NegativeLimit => SqlState::INVALID_ROW_COUNT_IN_LIMIT_CLAUSE,
            R::NegativeOffset => SqlState::INVALID_ROW_COUNT_IN_RESULT_OFFSET_CLAUSE,
            R::BoundSyntax { .. } => SqlState::INVALID_TEXT_REPRESENTATION,
            R::BoundBinary(_) => SqlState::INVALID_BINARY_REPRESENTATION,
            R::BoundRange => SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

impl ClientError for crate::movement::MoveError {
    fn sqlstate(&self) -> SqlState {
        use crate::movement::MoveError as M;
        match self {
            M::RowMovementDisabled { .. } => SqlState::CHECK_VIOLATION,
            M::Place(e) => e.sqlstate(),
            M::RowsChanged { .. } => SqlState::T_R_SERIALIZATION_FAILURE,
            M::Malformed { .. } => SqlState::INTERNAL_ERROR,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

impl ClientError for crate::router::plan::Refusal {
    fn sqlstate(&self) -> SqlState {
        use crate::router::plan::Refusal as R;
        match self {
            R::Unsupported(_) | R::Ambiguous { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            R::GeneratedAlways(_) => SqlState::GENERATED_ALWAYS,
            R::NotActive { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

impl ClientError for crate::executor::copy::CopyError {
    fn sqlstate(&self) -> SqlState {
        use crate::executor::copy::CopyError as C;
        use crate::router::place::PlaceError;
        match self {
            C::BadOption(_) => SqlState::INVALID_PARAMETER_VALUE,
            C::MissingData { .. } | C::UnterminatedCsv { .. } | C::Binary(_) => {
                SqlState::BAD_COPY_FILE_FORMAT
            }
            C::NotUtf8 { .. } => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            C::Place { source, .. } => match source {
                PlaceError::Hash(h) => h.sqlstate(),
                PlaceError::NoPartition { .. } => SqlState::CHECK_VIOLATION,
                PlaceError::Undecidable { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            },
            C::ColumnCount { .. } => SqlState::FEATURE_NOT_SUPPORTED,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

impl ClientError for crate::txn::TxnError {
    fn sqlstate(&self) -> SqlState {
        crate::txn::TxnError::sqlstate(self)
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

impl ClientError for crate::frontend::FrontendError {
    fn sqlstate(&self) -> SqlState {
        use crate::frontend::FrontendError as F;
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
            | F::CopyNotStarted
            | F::CopyUnexpectedMessage(_)
            | F::ProtocolViolation(_)
            | F::UnencryptedAfterRequest { .. } => SqlState::PROTOCOL_VIOLATION,
            F::TooManyClients | F::TooManyForUser { .. } => SqlState::TOO_MANY_CONNECTIONS,
            F::IdleInTransactionTimeout => SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT,
            F::QueryTimeout { .. } => SqlState::QUERY_CANCELED,
            F::StartupSetting { code, .. } => code.clone(),
            F::SignalNotPermitted { .. } => SqlState::INSUFFICIENT_PRIVILEGE,
            F::TerminatedByAdministrator => SqlState::ADMIN_SHUTDOWN,
            F::ShardUnreachable { .. }
            | F::ColumnsUnreadable(_)
            | F::CopyNoConnection
            | F::CopyBegin(_) => SqlState::CONNECTION_FAILURE,
            F::DuplicateStatement { .. } => SqlState::DUPLICATE_PSTATEMENT,
            F::KeyNotUtf8 => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            F::KeysMissing => SqlState::INTERNAL_ERROR,
            F::CurrvalUndefined(_) => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            F::DdlInTransaction => SqlState::ACTIVE_SQL_TRANSACTION,
            F::BlockFailed => SqlState::IN_FAILED_SQL_TRANSACTION,
            F::ChainAcrossShards => SqlState::FEATURE_NOT_SUPPORTED,
            F::CombineRowLimit { .. } => SqlState::PROGRAM_LIMIT_EXCEEDED,
            F::CombineUnrecordedInBlock => SqlState::FEATURE_NOT_SUPPORTED,
            F::Combine(_) => SqlState::INTERNAL_ERROR,
            F::UnpreparableAcrossShards => SqlState::FEATURE_NOT_SUPPORTED,
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
    fn pool_exhaustion_says_what_to_change() {
        let e = BackendError::PoolTimeout {
            shard: "s1".into(),
            waited_ms: 5000,
        };
        assert_eq!(e.sqlstate(), SqlState::TOO_MANY_CONNECTIONS);
        assert!(e.client_message().contains("[pool] size"));
    }

    #[test]
    fn frontend_refusals_keep_their_texts() {
        use crate::frontend::FrontendError as F;
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

    /// tokio-postgres's own text is its error's kind alone; the proxy's errors that carry one
    /// say why, as an operator needs in a log or a client in a message.
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
