//! Control-plane connections: one small bb8 pool of tokio-postgres sessions per shard and one for
//! the catalog database. Every session runs with a `lock_timeout`, because PostgreSQL cannot see
//! a deadlock whose wait spans two shards; the timeout breaks it.

use std::collections::HashMap;
use std::future::Future;
use std::pin::Pin;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use bb8::{CustomizeConnection, ErrorSink, Pool, PooledConnection};
use bb8_postgres::PostgresConnectionManager;
use tokio_postgres::error::{DbError, SqlState};
use tokio_postgres::{Client, Statement};

use super::{Gid, TxnSettings};
use crate::config::{Config, Endpoint};
use crate::model::ShardId;
use crate::tls::PostgresTls;

/// A checked-out control session.
pub type ControlConn<'a> = PooledConnection<'a, Manager>;

/// A control session, with the statements the proxy runs on it again and again prepared once:
/// `Client::execute` with a text parses and plans it on every call (the decision record's
/// INSERT, planned anew for every distributed commit, cost the catalog more than its execution).
pub struct ControlClient {
    client: Client,
    prepared: Mutex<HashMap<&'static str, Statement>>,
}

impl std::ops::Deref for ControlClient {
    type Target = Client;

    fn deref(&self) -> &Client {
        &self.client
    }
}

impl std::ops::DerefMut for ControlClient {
    fn deref_mut(&mut self) -> &mut Client {
        &mut self.client
    }
}

impl ControlClient {
    /// `sql` prepared on this session, the first time only.
    pub async fn prepared(&self, sql: &'static str) -> Result<Statement, tokio_postgres::Error> {
        if let Some(statement) = self.lock_prepared().get(sql) {
            return Ok(statement.clone());
        }
        let statement = self.client.prepare(sql).await?;
        self.lock_prepared().insert(sql, statement.clone());
        Ok(statement)
    }

    fn lock_prepared(&self) -> std::sync::MutexGuard<'_, HashMap<&'static str, Statement>> {
        // A panic while the map was held cannot leave it inconsistent: each operation is one
        // insert or lookup.
        self.prepared.lock().unwrap_or_else(|e| e.into_inner())
    }
}

/// bb8-postgres's manager, handing out [`ControlClient`]s.
pub struct Manager(PostgresConnectionManager<PostgresTls>);

impl bb8::ManageConnection for Manager {
    type Connection = ControlClient;
    type Error = tokio_postgres::Error;

    async fn connect(&self) -> Result<ControlClient, tokio_postgres::Error> {
        Ok(ControlClient {
            client: self.0.connect().await?,
            prepared: Mutex::default(),
        })
    }

    async fn is_valid(&self, conn: &mut ControlClient) -> Result<(), tokio_postgres::Error> {
        self.0.is_valid(&mut conn.client).await
    }

    fn has_broken(&self, conn: &mut ControlClient) -> bool {
        self.0.has_broken(&mut conn.client)
    }
}

/// A shard as errors and logs name it: its configured name, and its id.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardLabel {
    pub id: ShardId,
    pub name: String,
}

impl std::fmt::Display for ShardLabel {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "shard \"{}\"", self.name)
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ConnectError {
    #[error("no connection within {waited:?}{}", last_error_suffix(.last_error))]
    Checkout {
        waited: Duration,
        last_error: Option<String>,
    },
    #[error("{}", crate::client_error::with_causes(.0))]
    Postgres(#[from] tokio_postgres::Error),
}

fn last_error_suffix(last: &Option<String>) -> String {
    last.as_ref()
        .map(|e| format!(" (last attempt: {e})"))
        .unwrap_or_default()
}

impl ConnectError {
    pub fn db_error(&self) -> Option<&DbError> {
        match self {
            ConnectError::Checkout { .. } => None,
            ConnectError::Postgres(e) => e.as_db_error(),
        }
    }

    /// The SQLSTATE the server answered with, if it answered.
    pub fn code(&self) -> Option<&SqlState> {
        self.db_error().map(DbError::code)
    }
}

/// bb8 retries failed connects until its timeout and then reports only "timed out"; this keeps
/// the last real reason (connection refused, authentication failed, …) for the error message.
#[derive(Debug, Clone, Default)]
struct LastError(Arc<Mutex<Option<String>>>);

impl ErrorSink<tokio_postgres::Error> for LastError {
    fn sink(&self, error: tokio_postgres::Error) {
        tracing::debug!(%error, "control connection attempt failed");
        if let Ok(mut last) = self.0.lock() {
            *last = Some(crate::client_error::with_causes(&error));
        }
    }

    fn boxed_clone(&self) -> Box<dyn ErrorSink<tokio_postgres::Error>> {
        Box::new(self.clone())
    }
}

/// A shard's `max_prepared_transactions` as last read: at start, and on every control
/// connection made to it, so a shard that was down at start, or was reconfigured and restarted,
/// is seen as it is now without restarting the proxy.
#[derive(Debug)]
pub struct PreparedCapacity(AtomicI64);

const CAPACITY_UNKNOWN: i64 = -1;

impl Default for PreparedCapacity {
    fn default() -> Self {
        PreparedCapacity(AtomicI64::new(CAPACITY_UNKNOWN))
    }
}

impl PreparedCapacity {
    pub fn get(&self) -> Option<i32> {
        i32::try_from(self.0.load(Ordering::Relaxed)).ok()
    }

    /// Stores `now`; the value it replaces.
    pub fn set(&self, now: Option<i32>) -> Option<i32> {
        let stored = now.map_or(CAPACITY_UNKNOWN, i64::from);
        i32::try_from(self.0.swap(stored, Ordering::Relaxed)).ok()
    }

    /// Reads the setting on `conn` and stores it; `None` (and nothing stored) when the query
    /// fails.
    pub(crate) async fn read(
        &self,
        shard: &str,
        conn: &Client,
    ) -> Result<i32, tokio_postgres::Error> {
        let row = conn
            .query_one(
                "SELECT current_setting('max_prepared_transactions')::int4",
                &[],
            )
            .await?;
        let now: i32 = row.get(0);
        match self.set(Some(now)) {
            before if before == Some(now) => {}
            _ if now == 0 => tracing::warn!(
                shard,
                "max_prepared_transactions = 0: multi-shard writes involving this shard will fail"
            ),
            Some(0) => tracing::info!(shard, now, "max_prepared_transactions is now enabled"),
            _ => {}
        }
        Ok(now)
    }
}

/// Reads `max_prepared_transactions` on each new control connection to a shard.
#[derive(Debug)]
struct ReadCapacity {
    shard: String,
    capacity: Arc<PreparedCapacity>,
}

impl CustomizeConnection<ControlClient, tokio_postgres::Error> for ReadCapacity {
    fn on_acquire<'a>(
        &'a self,
        conn: &'a mut ControlClient,
    ) -> Pin<Box<dyn Future<Output = Result<(), tokio_postgres::Error>> + Send + 'a>> {
        Box::pin(async move {
            // A failure here is the connection's, and shows on its first use; the connection
            // is not refused for it.
            if let Err(e) = self.capacity.read(&self.shard, conn).await {
                tracing::debug!(shard = %self.shard, error = %e, "cannot read max_prepared_transactions");
            }
            Ok(())
        })
    }
}

/// One database's control pool.
pub struct ControlPool {
    pool: Pool<Manager>,
    last_error: LastError,
    connect_timeout: Duration,
}

impl ControlPool {
    fn new(
        endpoint: &Endpoint,
        settings: &TxnSettings,
        extra_options: &str,
        customizer: Option<Box<dyn CustomizeConnection<ControlClient, tokio_postgres::Error>>>,
    ) -> ControlPool {
        let mut pg = endpoint.pg_config();
        pg.connect_timeout(settings.connect_timeout)
            .options(format!(
                "-c lock_timeout={}{extra_options}",
                settings.lock_timeout.as_millis()
            ));
        let last_error = LastError::default();
        // Built lazily: a shard that is down at start must not keep the proxy from starting.
        let mut builder = Pool::builder()
            .max_size(settings.pool_size)
            .min_idle(None)
            .connection_timeout(settings.connect_timeout)
            .error_sink(Box::new(last_error.clone()));
        if let Some(customizer) = customizer {
            builder = builder.connection_customizer(customizer);
        }
        let pool = builder.build_unchecked(Manager(PostgresConnectionManager::new(
            pg,
            endpoint.postgres_tls(),
        )));
        ControlPool {
            pool,
            last_error,
            connect_timeout: settings.connect_timeout,
        }
    }

    /// Runs `sql` (simple protocol) on a session of its own.
    pub async fn batch_execute(&self, sql: &str) -> Result<(), ConnectError> {
        Ok(self.get().await?.batch_execute(sql).await?)
    }

    pub async fn get(&self) -> Result<ControlConn<'_>, ConnectError> {
        self.pool.get().await.map_err(|e| match e {
            bb8::RunError::User(e) => ConnectError::Postgres(e),
            bb8::RunError::TimedOut => ConnectError::Checkout {
                waited: self.connect_timeout,
                last_error: self.last_error.0.lock().ok().and_then(|l| l.clone()),
            },
        })
    }
}

/// A shard's control pool with the shard's label.
pub struct ShardPool {
    pub label: ShardLabel,
    pub pool: ControlPool,
    pub prepared_capacity: Arc<PreparedCapacity>,
    /// Another configured shard is a database of the same server (host and port): the
    /// shard's prepared transactions need names of their own there.
    pub shares_server: bool,
}

impl ShardPool {
    /// The name `gid` is prepared under on this shard.
    pub fn prepared_name(&self, gid: &Gid) -> String {
        gid.prepared_name(self.label.id, self.shares_server)
    }

    /// `PREPARE TRANSACTION` of `gid` on this shard.
    pub fn prepare_transaction(&self, gid: &Gid) -> String {
        format!(
            "PREPARE TRANSACTION {}",
            super::gid::quoted(&self.prepared_name(gid))
        )
    }
}

/// The control pools of every configured shard and of the catalog.
pub struct ControlPools {
    shards: Vec<ShardPool>,
    catalog: ControlPool,
    /// The shard whose database, reached as the same user, is the catalog's (by default the
    /// first): its sessions can write a decision record in their own transactions.
    catalog_shard: Option<ShardId>,
}

impl ControlPools {
    /// Makes no connection yet; sessions are opened on first use.
    pub fn new(config: &Config, settings: &TxnSettings) -> ControlPools {
        let shards = config
            .shards
            .iter()
            .enumerate()
            .map(|(i, shard)| {
                let capacity = Arc::new(PreparedCapacity::default());
                let read = ReadCapacity {
                    shard: shard.name.clone(),
                    capacity: capacity.clone(),
                };
                ShardPool {
                    label: ShardLabel {
                        id: ShardId(i as u32),
                        name: shard.name.clone(),
                    },
                    pool: ControlPool::new(
                        &config.shard_endpoint(i),
                        settings,
                        "",
                        Some(Box::new(read)),
                    ),
                    prepared_capacity: capacity,
                    shares_server: (0..config.shards.len()).any(|j| {
                        let (a, b) = (config.shard_endpoint(i), config.shard_endpoint(j));
                        j != i && a.host.eq_ignore_ascii_case(&b.host) && a.port == b.port
                    }),
                }
            })
            .collect();
        let catalog = config.catalog_endpoint();
        let catalog_shard = (0..config.shards.len())
            .find(|&i| {
                let shard = config.shard_endpoint(i);
                (&shard.host, shard.port, &shard.dbname, &shard.user)
                    == (&catalog.host, catalog.port, &catalog.dbname, &catalog.user)
            })
            .map(|i| ShardId(i as u32));
        ControlPools {
            shards,
            catalog_shard,
            // A commit decision must survive a crash of the catalog server even where that
            // server commits asynchronously by default.
            catalog: ControlPool::new(&catalog, settings, " -c synchronous_commit=on", None),
        }
    }

    /// Panics on an id that is not in the configuration: ids come from the catalog, which is
    /// built from the same configuration.
    pub fn shard(&self, id: ShardId) -> &ShardPool {
        &self.shards[id.index()]
    }

    pub fn shards(&self) -> &[ShardPool] {
        &self.shards
    }

    /// The shard with this configured name.
    pub fn shard_named(&self, name: &str) -> Option<&ShardPool> {
        self.shards.iter().find(|s| s.label.name == name)
    }

    pub fn catalog(&self) -> &ControlPool {
        &self.catalog
    }

    pub fn catalog_shard(&self) -> Option<ShardId> {
        self.catalog_shard
    }
}
