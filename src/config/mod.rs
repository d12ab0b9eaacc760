//! Configuration: the TOML file of docs/architecture.md §1, parsed with unknown keys refused, then
//! validated so every problem names the file and the key that holds it.

mod validate;

use std::fmt;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};

use serde::{Deserialize, Serialize};

use crate::tls::SslMode;

pub use validate::ConfigError;

/// The whole configuration file.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct Config {
    pub proxy: ProxyConfig,
    #[serde(default)]
    pub users: Vec<UserConfig>,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub catalog: Option<CatalogConfig>,
    #[serde(default)]
    pub shards: Vec<ShardConfig>,
    #[serde(default)]
    pub tablespace_sets: Vec<TablespaceSetConfig>,
    #[serde(default)]
    pub tablespaces: Vec<TablespaceConfig>,
    #[serde(default)]
    pub pool: PoolConfig,
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub tls: Option<TlsConfig>,
    #[serde(default)]
    pub ddl: DdlConfig,
    #[serde(default)]
    pub transactions: TransactionsConfig,
    #[serde(default)]
    pub queries: QueriesConfig,
    #[serde(default)]
    pub ttl: TtlConfig,
    #[serde(default)]
    pub limits: LimitsConfig,
    #[serde(default)]
    pub moves: MovesConfig,
}

/// Chunk moves (MOVE CHUNK, REBALANCE).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct MovesConfig {
    /// The longest a cutover may hold statements on the moving chunk; past it the cutover
    /// backs off (nothing changed) and tries again, so no client statement fails for it.
    #[serde(default = "default_cutover_pause_ms")]
    pub cutover_pause_ms: u64,
    /// How many times a cutover is tried before the move gives up (and is rolled back).
    #[serde(default = "default_cutover_attempts")]
    pub cutover_attempts: u32,
    /// How often each proxy looks for moves whose proxy stopped, to finish or roll them back.
    #[serde(default = "default_move_recovery_interval_ms")]
    pub recovery_interval_ms: u64,
    /// How long a moved chunk's tables stay on the source after the cutover (detached and
    /// renamed `shardwire_kept_…`), for an operator to recover from by hand; 0 drops them at the
    /// cutover.
    #[serde(default)]
    pub keep_source_ms: u64,
    /// How many families REBALANCE moves at once (each family's chunks one after another).
    #[serde(default = "default_rebalance_parallel")]
    pub rebalance_parallel: u32,
}

fn default_rebalance_parallel() -> u32 {
    1
}

fn default_move_recovery_interval_ms() -> u64 {
    10_000
}

fn default_cutover_pause_ms() -> u64 {
    2_000
}

fn default_cutover_attempts() -> u32 {
    20
}

impl Default for MovesConfig {
    fn default() -> Self {
        MovesConfig {
            cutover_pause_ms: default_cutover_pause_ms(),
            cutover_attempts: default_cutover_attempts(),
            recovery_interval_ms: default_move_recovery_interval_ms(),
            keep_source_ms: 0,
            rebalance_parallel: default_rebalance_parallel(),
        }
    }
}

/// What one client may take of the proxy. A timeout of 0 is off.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct LimitsConfig {
    /// The longest protocol message a client may send (its length field, which counts itself);
    /// a longer one ends the session with FATAL 08P01 before any of it is buffered.
    #[serde(default = "default_max_message_bytes")]
    pub max_message_bytes: u32,
    /// Client sessions the proxy serves at once; one more is refused with 53300.
    #[serde(default = "default_max_client_connections")]
    pub max_client_connections: u32,
    /// Client sessions one proxy user may hold at once; 0: no limit but the one above.
    #[serde(default)]
    pub max_connections_per_user: u32,
    /// How long a client may take from connecting to logged in.
    #[serde(default = "default_login_timeout_ms")]
    pub login_timeout_ms: u64,
    /// How long a client may hold a transaction block open without sending anything; 0: off.
    #[serde(default)]
    pub idle_in_transaction_timeout_ms: u64,
    /// How long a client may wait for the answers to what it sent; 0: off.
    #[serde(default)]
    pub query_timeout_ms: u64,
}

/// PostgreSQL's own limit for a message (MaxAllocSize - 1).
pub const POSTGRESQL_MAX_MESSAGE: u32 = 0x3fff_ffff;

fn default_max_message_bytes() -> u32 {
    POSTGRESQL_MAX_MESSAGE
}
fn default_max_client_connections() -> u32 {
    10_000
}
fn default_login_timeout_ms() -> u64 {
    // PostgreSQL's authentication_timeout.
    60_000
}

impl Default for LimitsConfig {
    fn default() -> Self {
        LimitsConfig {
            max_message_bytes: default_max_message_bytes(),
            max_client_connections: default_max_client_connections(),
            max_connections_per_user: 0,
            login_timeout_ms: default_login_timeout_ms(),
            idle_in_transaction_timeout_ms: 0,
            query_timeout_ms: 0,
        }
    }
}

/// The purge of expired rows of Oracle NoSQL tables (their time to live).
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TtlConfig {
    /// How often each proxy looks for expired rows on every shard.
    #[serde(default = "default_purge_interval_ms")]
    pub purge_interval_ms: u64,
    /// The most rows one DELETE of the purge removes; a table's shard is purged batch after
    /// batch until a batch comes back short.
    #[serde(default = "default_purge_batch_rows")]
    pub purge_batch_rows: u32,
}

fn default_purge_interval_ms() -> u64 {
    60_000
}

fn default_purge_batch_rows() -> u32 {
    1_000
}

impl Default for TtlConfig {
    fn default() -> Self {
        TtlConfig {
            purge_interval_ms: default_purge_interval_ms(),
            purge_batch_rows: default_purge_batch_rows(),
        }
    }
}

/// Reads over several shards.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct QueriesConfig {
    /// The most rows the general path reads from the shards into its combining step for one
    /// statement; past it the statement fails with SQLSTATE 54000.
    #[serde(default = "default_combine_row_limit")]
    pub combine_row_limit: u64,
}

fn default_combine_row_limit() -> u64 {
    1_000_000
}

impl Default for QueriesConfig {
    fn default() -> Self {
        QueriesConfig {
            combine_row_limit: default_combine_row_limit(),
        }
    }
}

/// Distributed transactions: two-phase commit, in-doubt recovery, lock waits.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TransactionsConfig {
    /// Pause between in-doubt recovery passes (one more runs before clients are accepted).
    #[serde(default = "default_recovery_interval_ms")]
    pub recovery_interval_ms: u64,
    /// Recovery leaves a prepared transaction alone until it is this old by its shard's clock;
    /// past it, one of another proxy stays alone while that proxy's lease is live.
    #[serde(default = "default_recovery_grace_ms")]
    pub recovery_grace_ms: u64,
    /// A coordinator that has not prepared every participant within this time rolls back
    /// instead of deciding commit; shorter than `recovery_grace_ms`.
    #[serde(default = "default_prepare_deadline_ms")]
    pub prepare_deadline_ms: u64,
    /// How long a proxy's lease in the catalog protects its live transactions from other
    /// proxies' recovery; renewed every third of it.
    #[serde(default = "default_lease_ms")]
    pub lease_ms: u64,
    /// `lock_timeout` of the shard sessions of transactions that span shards and of row
    /// movement: PostgreSQL cannot see a deadlock whose waits are on different shards. 0 turns
    /// it off.
    #[serde(default = "default_lock_timeout_ms")]
    pub lock_timeout_ms: u64,
}

fn default_recovery_interval_ms() -> u64 {
    30_000
}
fn default_recovery_grace_ms() -> u64 {
    60_000
}
fn default_prepare_deadline_ms() -> u64 {
    20_000
}
fn default_lease_ms() -> u64 {
    30_000
}
fn default_lock_timeout_ms() -> u64 {
    10_000
}

impl Default for TransactionsConfig {
    fn default() -> Self {
        TransactionsConfig {
            recovery_interval_ms: default_recovery_interval_ms(),
            recovery_grace_ms: default_recovery_grace_ms(),
            prepare_deadline_ms: default_prepare_deadline_ms(),
            lease_ms: default_lease_ms(),
            lock_timeout_ms: default_lock_timeout_ms(),
        }
    }
}

/// How sharding DDL is read.
#[derive(Debug, Clone, Default, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct DdlConfig {
    /// `DATE` means Oracle's date and time of day (`timestamp(0)`) rather than PostgreSQL's
    /// `date`, in the statements the proxy rewrites.
    #[serde(default)]
    pub oracle_date: bool,
    /// The tablespace set an Oracle NoSQL `CREATE TABLE` without a TABLESPACE SET clause is
    /// placed on; absent: every shard.
    #[serde(default)]
    pub default_tablespace_set: Option<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ProxyConfig {
    /// Address of the PostgreSQL-protocol listener.
    pub listen: String,
    /// Address of the Prometheus endpoint; absent means no metrics listener.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub metrics_listen: Option<String>,
    /// The one logical database clients connect to.
    pub database: String,
    /// What `PARTITIONS AUTO` means: chunks per shard of the tablespace set.
    #[serde(default = "default_chunks_per_shard")]
    pub chunks_per_shard: u32,
    /// How clients authenticate to the proxy.
    #[serde(default)]
    pub auth_method: AuthMethod,
    /// Threads serving clients; absent means one.
    #[serde(default, skip_serializing_if = "Option::is_none")]
    pub workers: Option<usize>,
    /// Routing plans kept per proxy (by statement text); least recently used ones go first.
    #[serde(default = "default_plan_cache_size")]
    pub plan_cache_size: usize,
}

fn default_chunks_per_shard() -> u32 {
    8
}

fn default_plan_cache_size() -> usize {
    10_000
}

#[derive(Debug, Clone, Copy, Default, PartialEq, Eq, Deserialize, Serialize)]
pub enum AuthMethod {
    #[default]
    #[serde(rename = "scram-sha-256")]
    ScramSha256,
    #[serde(rename = "md5")]
    Md5,
}

#[derive(Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct UserConfig {
    pub name: String,
    pub password: String,
}

impl fmt::Debug for UserConfig {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        f.debug_struct("UserConfig")
            .field("name", &self.name)
            .field("password", &"********")
            .finish()
    }
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct CatalogConfig {
    pub url: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct ShardConfig {
    pub name: String,
    pub url: String,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TablespaceSetConfig {
    pub name: String,
    pub shards: Vec<String>,
}

#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TablespaceConfig {
    pub name: String,
    pub shard: String,
}

/// Backend connection pools, one per shard.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct PoolConfig {
    /// Most backend connections per shard.
    #[serde(default = "default_pool_size")]
    pub size: u32,
    /// How long a client waits for a backend connection (and a connection attempt may take).
    #[serde(default = "default_connect_timeout_ms")]
    pub connect_timeout_ms: u64,
    /// Idle backend connections are closed after this many seconds.
    #[serde(default = "default_idle_timeout_s")]
    pub idle_timeout_s: u64,
}

fn default_pool_size() -> u32 {
    20
}
fn default_connect_timeout_ms() -> u64 {
    5_000
}
fn default_idle_timeout_s() -> u64 {
    600
}

impl Default for PoolConfig {
    fn default() -> Self {
        PoolConfig {
            size: default_pool_size(),
            connect_timeout_ms: default_connect_timeout_ms(),
            idle_timeout_s: default_idle_timeout_s(),
        }
    }
}

/// Client-facing TLS: offered when both files are given.
#[derive(Debug, Clone, Deserialize, Serialize)]
#[serde(deny_unknown_fields)]
pub struct TlsConfig {
    pub cert: PathBuf,
    pub key: PathBuf,
}

/// Where and as whom to connect to one PostgreSQL server, resolved from a `postgres://` URL.
#[derive(Clone, PartialEq, Eq)]
pub struct Endpoint {
    pub host: String,
    pub port: u16,
    pub user: String,
    pub password: Option<String>,
    pub dbname: String,
    /// TLS as the URL's `sslmode` asks for it; None for plaintext.
    pub tls: Option<crate::tls::ShardTls>,
}

impl fmt::Debug for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "postgres://{}", self.user)?;
        if self.password.is_some() {
            write!(f, ":********")?;
        }
        write!(f, "@{}:{}/{}", self.host, self.port, self.dbname)?;
        if let Some(tls) = &self.tls {
            write!(f, "?sslmode={}", tls.mode().as_str())?;
        }
        Ok(())
    }
}

impl fmt::Display for Endpoint {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        fmt::Debug::fmt(self, f)
    }
}

impl Endpoint {
    /// A libpq connection string for this endpoint, as one shard uses to reach another (a
    /// subscription of a chunk move). It holds the password: never log it.
    pub fn conninfo(&self) -> String {
        fn value(v: &str) -> String {
            format!("'{}'", v.replace('\\', "\\\\").replace('\'', "\\'"))
        }
        let mut parts = vec![
            format!("host={}", value(&self.host)),
            format!("port={}", self.port),
            format!("user={}", value(&self.user)),
            format!("dbname={}", value(&self.dbname)),
        ];
        if let Some(password) = &self.password {
            parts.push(format!("password={}", value(password)));
        }
        if let Some(tls) = &self.tls {
            parts.push(format!("sslmode={}", tls.mode().as_str()));
        }
        parts.join(" ")
    }

    /// A tokio-postgres configuration for control-plane work on this endpoint.
    pub fn pg_config(&self) -> tokio_postgres::Config {
        let mut c = tokio_postgres::Config::new();
        c.host(&self.host)
            .port(self.port)
            .user(&self.user)
            .dbname(&self.dbname)
            .application_name("shardwire");
        if let Some(p) = &self.password {
            c.password(p);
        }
        use tokio_postgres::config::SslMode as PgSslMode;
        c.ssl_mode(match self.tls.as_ref().map(crate::tls::ShardTls::mode) {
            None | Some(SslMode::Disable) => PgSslMode::Disable,
            Some(SslMode::Prefer) => PgSslMode::Prefer,
            Some(SslMode::Require | SslMode::VerifyCa | SslMode::VerifyFull) => PgSslMode::Require,
        });
        c
    }

    /// The TLS connector for [`Endpoint::pg_config`]'s connections.
    pub fn postgres_tls(&self) -> crate::tls::PostgresTls {
        crate::tls::PostgresTls(self.tls.clone())
    }
}

impl Config {
    /// Reads, parses and validates a configuration file.
    pub fn load(path: &Path) -> Result<Config, ConfigError> {
        let text = std::fs::read_to_string(path).map_err(|e| ConfigError::Read {
            file: path.display().to_string(),
            source: e,
        })?;
        Config::parse(&text, &path.display().to_string())
    }

    /// Parses and validates configuration text; `origin` names it in errors.
    pub fn parse(text: &str, origin: &str) -> Result<Config, ConfigError> {
        let config: Config = toml::from_str(text).map_err(|e| ConfigError::Syntax {
            file: origin.to_string(),
            message: e.to_string(),
        })?;
        validate::validate(&config, origin)?;
        Ok(config)
    }

    pub fn listen_addr(&self) -> SocketAddr {
        self.proxy
            .listen
            .parse()
            .expect("proxy.listen was validated")
    }

    pub fn metrics_addr(&self) -> Option<SocketAddr> {
        self.proxy
            .metrics_listen
            .as_ref()
            .map(|a| a.parse().expect("proxy.metrics_listen was validated"))
    }

    /// The endpoint of shard `index`.
    pub fn shard_endpoint(&self, index: usize) -> Endpoint {
        validate::parse_url(&self.shards[index].url).expect("shards[].url was validated")
    }

    /// The catalog database: `[catalog] url`, or the first shard.
    pub fn catalog_endpoint(&self) -> Endpoint {
        match &self.catalog {
            Some(c) => validate::parse_url(&c.url).expect("catalog.url was validated"),
            None => self.shard_endpoint(0),
        }
    }

    /// The configuration as TOML with every password replaced by `********`.
    pub fn to_masked_toml(&self) -> String {
        let mut masked = self.clone();
        for u in &mut masked.users {
            u.password = "********".into();
        }
        for s in &mut masked.shards {
            s.url = validate::mask_url_password(&s.url);
        }
        if let Some(c) = &mut masked.catalog {
            c.url = validate::mask_url_password(&c.url);
        }
        toml::to_string_pretty(&masked).expect("config serializes")
    }
}
