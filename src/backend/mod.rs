//! Backend connections to the shards: our own connection type ([`conn::BackendConn`]) pooled per
//! shard by bb8 through [`ShardManager`].

pub mod conn;
pub mod prepared;

use std::collections::HashMap;
use std::sync::{Arc, OnceLock};
use std::time::{Duration, Instant};

use crate::catalog::ShardId;
use crate::config::{Config, Endpoint};
use crate::protocol::FrameError;
pub use conn::{BackendConn, CancelKey};
pub use prepared::StatementText;

#[derive(Debug, thiserror::Error)]
pub enum BackendError {
    #[error("cannot connect to {endpoint}: {source}")]
    Connect {
        endpoint: String,
        source: std::io::Error,
    },
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
}

/// A pooled connection whose idle time is short is trusted without a round trip; an older one
/// is checked with an empty query before a client gets it.
const TRUST_IDLE_FOR: Duration = Duration::from_secs(5);

pub struct ShardManager {
    endpoint: Endpoint,
    connect_timeout: Duration,
    /// The ParameterStatus values of the first connection made to this shard.
    first_params: Arc<OnceLock<HashMap<String, String>>>,
}

/// What the pool hands out: the connection and when it last went back to the pool.
pub struct PooledBackend {
    pub conn: BackendConn,
    pub returned_at: Instant,
}

impl PooledBackend {
    /// A connection idle for long is asked an empty query before a client gets it.
    /// A server that does not answer within `limit` counts as gone.
    async fn check_if_stale(&mut self, limit: Duration) -> Result<(), BackendError> {
        if self.returned_at.elapsed() < TRUST_IDLE_FOR {
            return Ok(());
        }
        match tokio::time::timeout(limit, self.conn.run_internal("")).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Err(e)) => Err(e),
            Ok(Ok(Err(_))) | Err(_) => Err(BackendError::Closed),
        }
    }
}

impl bb8::ManageConnection for ShardManager {
    type Connection = PooledBackend;
    type Error = BackendError;

    async fn connect(&self) -> Result<PooledBackend, BackendError> {
        let conn = BackendConn::connect(&self.endpoint, self.connect_timeout).await?;
        let _ = self.first_params.set(conn.params.clone());
        Ok(PooledBackend {
            conn,
            returned_at: Instant::now(),
        })
    }

    async fn is_valid(&self, c: &mut PooledBackend) -> Result<(), BackendError> {
        c.check_if_stale(self.connect_timeout).await
    }

    fn has_broken(&self, c: &mut PooledBackend) -> bool {
        c.conn.broken
    }
}

pub type Pool = bb8::Pool<ShardManager>;
pub type Pooled = bb8::PooledConnection<'static, ShardManager>;

pub struct ShardPool {
    pub id: ShardId,
    pub name: String,
    pub endpoint: Endpoint,
    pub pool: Pool,
    first_params: Arc<OnceLock<HashMap<String, String>>>,
    wait: Duration,
}

impl ShardPool {
    /// A connection for one client transaction (or statement).
    ///
    /// The staleness check is ours rather than bb8's `test_on_check_out`: bb8's goes through
    /// an extra await on every checkout, which the common case (a connection just returned)
    /// does not need.
    pub async fn get(&self) -> Result<Pooled, BackendError> {
        loop {
            let mut c = match self.pool.get_owned().await {
                Ok(c) => c,
                Err(bb8::RunError::User(e)) => return Err(e),
                Err(bb8::RunError::TimedOut) => {
                    return Err(BackendError::PoolTimeout {
                        shard: self.name.clone(),
                        waited_ms: self.wait.as_millis() as u64,
                    })
                }
            };
            match c.check_if_stale(self.wait).await {
                Ok(()) => return Ok(c),
                Err(e) => {
                    tracing::debug!(error = %e, "dropping a stale pooled connection");
                    c.conn.broken = true;
                }
            }
        }
    }

    /// The server's startup parameters (server_version, DateStyle …), once a connection exists.
    pub fn server_params(&self) -> Option<&HashMap<String, String>> {
        self.first_params.get()
    }
}

/// One pool per configured shard, in configuration order.
pub struct Pools {
    shards: Vec<ShardPool>,
}

impl Pools {
    pub fn new(config: &Config) -> Pools {
        let wait = Duration::from_millis(config.pool.connect_timeout_ms);
        let shards = config
            .shards
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let endpoint = config.shard_endpoint(i);
                let first_params = Arc::new(OnceLock::new());
                let manager = ShardManager {
                    endpoint: endpoint.clone(),
                    connect_timeout: wait,
                    first_params: first_params.clone(),
                };
                let pool = bb8::Pool::builder()
                    .max_size(config.pool.size)
                    .min_idle(None)
                    .connection_timeout(wait)
                    .idle_timeout(Some(Duration::from_secs(config.pool.idle_timeout_s)))
                    .retry_connection(false)
                    .test_on_check_out(false)
                    .build_unchecked(manager);
                ShardPool {
                    id: ShardId(i as u32),
                    name: s.name.clone(),
                    endpoint,
                    pool,
                    first_params,
                    wait,
                }
            })
            .collect();
        Pools { shards }
    }

    pub fn shard(&self, id: ShardId) -> &ShardPool {
        &self.shards[id.index()]
    }

    pub fn all(&self) -> &[ShardPool] {
        &self.shards
    }
}
