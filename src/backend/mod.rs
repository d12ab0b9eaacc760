//! Backend connections to the shards: our own connection type ([`conn::BackendConn`]) pooled per
//! shard by bb8 through [`pool::ShardManager`].

pub mod conn;
pub mod pool;
pub mod prepared;
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
