//! Backend connections to the shards: our own connection type ([`conn::BackendConn`]) pooled per
//! shard by bb8 through [`pool::ShardManager`].

pub mod conn;
pub mod pool;
pub mod prepared;
pub mod readiness;
pub mod stream;
pub mod types;

use crate::protocol::FrameError;
pub use conn::{BackendConn, CancelKey, Settings, SettingsRegistry};
pub use pool::{Pooled, Pools, ShardPool};
pub use prepared::StatementText;
pub use types::{ShardTypes, TypeOids};

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
    /// TLS to the shard failed or was refused, as the URL's `sslmode` required it.
    #[error("TLS to {endpoint}: {message}")]
    Tls { endpoint: String, message: String },
    #[error("connecting to {endpoint} timed out")]
    Timeout { endpoint: String },
    #[error("{endpoint} refused the proxy's login: {message}")]
    Auth { endpoint: String, message: String },
    #[error("backend connection failed: {0}")]
    Io(#[from] std::io::Error),
    #[error("backend sent a malformed message: {0}")]
    Frame(#[from] FrameError),
    #[error("backend closed the connection")]
    Closed,
    #[error("no connection to shard {shard} became free within {waited_ms} ms")]
    PoolTimeout { shard: String, waited_ms: u64 },
    /// A checkout waited while a new connection to the shard failed.
    #[error("cannot connect to shard \"{shard}\": {reason}")]
    Unreachable { shard: String, reason: String },
}

impl crate::client_error::ClientError for BackendError {
    fn sqlstate(&self) -> tokio_postgres::error::SqlState {
        use tokio_postgres::error::SqlState;
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::client_error::ClientError;
    use tokio_postgres::error::SqlState;

    #[test]
    fn pool_exhaustion_says_what_to_change() {
        let e = BackendError::PoolTimeout {
            shard: "s1".into(),
            waited_ms: 5000,
        };
        assert_eq!(e.sqlstate(), SqlState::TOO_MANY_CONNECTIONS);
        assert!(e.client_message().contains("[pool] size"));
    }
}
