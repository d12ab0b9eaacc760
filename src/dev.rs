//! `shardwire dev`: local PostgreSQL shards plus the proxy in front of them, in one command.
//!
//! DIR holds one cluster per shard (`s1`, `s2`, …) and the `shardwire.toml` that points the proxy
//! at them. A second run reads that file back, so the clusters keep their ports. Whatever happens —
//! Ctrl-C, SIGTERM, a closed terminal (SIGHUP), a failure half-way through startup — the clusters
//! started by this run are stopped before it exits.

use std::collections::BTreeSet;
use std::fmt::Write as _;
use std::fs::File;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use tokio::signal::unix::{signal, SignalKind};
use tracing::{info, warn};

use crate::config::{Config, ConfigError};
use crate::pgcluster::{
    free_port, ClusterError, ClusterOptions, LocalCluster, PgBinaries, StopMode,
};
use crate::server;

pub const DEFAULT_SHARDS: u32 = 4;
pub const DEFAULT_PORT: u16 = 6432;
pub const DEFAULT_DIR: &str = ".shardwire/dev";
/// The database, user and password of the dev setup.
pub const APP: &str = "app";
/// The metrics port when free; otherwise any free port (logged), so two dev setups can run.
const METRICS_PORT: u16 = 9930;
/// Fresh clusters take 55431, 55432, … when free, matching config/shardwire.toml.
const FIRST_SHARD_PORT: u16 = 55431;

#[derive(Debug, Clone)]
pub struct DevOptions {
    /// None: as many as DIR already has, or [`DEFAULT_SHARDS`].
    pub shards: Option<u32>,
    /// None: the port DIR's configuration has, or [`DEFAULT_PORT`].
    pub port: Option<u16>,
    pub dir: PathBuf,
}

#[derive(Debug, thiserror::Error)]
pub enum DevError {
    #[error(transparent)]
    Cluster(#[from] ClusterError),
    #[error(transparent)]
    Config(#[from] ConfigError),
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[error(
        "{dir} holds {existing} shards; run with --shards {existing}, or remove {dir} to start over"
    )]
    ShardCount { dir: String, existing: usize },
    #[error("another `shardwire dev` is running on {0}")]
    Busy(String),
    #[error("interrupted during startup; the clusters started so far were stopped")]
    Interrupted,
    #[error("{0}")]
    Serve(String),
}

fn io_err(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> DevError {
    let path = path.to_path_buf();
    move |source| DevError::Io {
        path,
        action,
        source,
    }
}

/// Starts the clusters, serves until Ctrl-C, SIGTERM or SIGHUP, then stops the proxy and the
/// clusters.
pub async fn run(opts: DevOptions) -> Result<(), DevError> {
    // Registered before anything starts, so a signal during startup cannot kill us half-way.
    let mut sigint =
        signal(SignalKind::interrupt()).map_err(io_err(Path::new("SIGINT"), "trap"))?;
    let mut sigterm =
        signal(SignalKind::terminate()).map_err(io_err(Path::new("SIGTERM"), "trap"))?;
    // Closing the terminal: the clusters must not outlive it.
    let mut sighup = signal(SignalKind::hangup()).map_err(io_err(Path::new("SIGHUP"), "trap"))?;
    let cancel = Arc::new(AtomicBool::new(false));
    let startup = tokio::task::spawn_blocking({
        let cancel = cancel.clone();
        move || start(&opts, &cancel)
    });
    tokio::pin!(startup);
    let env = loop {
        tokio::select! {
            r = &mut startup => break r.expect("startup thread panicked")?,
            _ = sigint.recv() => cancel.store(true, Ordering::SeqCst),
            _ = sigterm.recv() => cancel.store(true, Ordering::SeqCst),
            _ = sighup.recv() => cancel.store(true, Ordering::SeqCst),
        }
        info!("interrupted; finishing the current step, then stopping the clusters");
    };
    if cancel.load(Ordering::SeqCst) {
        tokio::task::spawn_blocking(move || drop(env))
            .await
            .expect("stopping clusters panicked");
        return Err(DevError::Interrupted);
    }

    let listen = env.config.proxy.listen.clone();
    info!(
        "starting the proxy; connect with: psql \"host={} port={} user={APP} password={APP} dbname={APP}\" (Ctrl-C stops everything)",
        env.config.listen_addr().ip(),
        env.config.listen_addr().port()
    );
    // serve() ends on Ctrl-C only once it accepts clients; a SIGINT while it is still starting
    // reaches the handler registered above, so both signals end it here.
    let result = tokio::select! {
        r = server::serve(env.config.clone()) => r.map_err(|e| DevError::Serve(format!("proxy on {listen}: {e}"))),
        _ = sigterm.recv() => Ok(()),
        _ = sigint.recv() => Ok(()),
        _ = sighup.recv() => Ok(()),
    };
    info!("proxy stopped");
    tokio::task::spawn_blocking(move || drop(env))
        .await
        .expect("stopping clusters panicked");
    result
}

/// What a successful startup leaves running; dropping it stops the clusters.
struct DevEnv {
    config: Config,
    // Field order: clusters stop before the lock is released.
    _clusters: Clusters,
    _lock: File,
}

/// The clusters this run has touched; each is stopped on drop (a no-op if it never started).
struct Clusters(Vec<(String, LocalCluster)>);

impl Drop for Clusters {
    fn drop(&mut self) {
        for (name, cluster) in self.0.iter().rev() {
            if !cluster.has_server() {
                continue;
            }
            info!(shard = %name, "stopping cluster");
            if let Err(e) = cluster.stop(StopMode::Fast) {
                warn!(shard = %name, "{e}");
            }
        }
    }
}

fn start(opts: &DevOptions, cancel: &AtomicBool) -> Result<DevEnv, DevError> {
    std::fs::create_dir_all(&opts.dir).map_err(io_err(&opts.dir, "cannot create directory"))?;
    let dir = std::fs::canonicalize(&opts.dir).map_err(io_err(&opts.dir, "cannot resolve"))?;
    let shown = opts.dir.display().to_string();
    let lock_path = dir.join("dev.lock");
    let lock = File::create(&lock_path).map_err(io_err(&lock_path, "cannot create"))?;
    lock.try_lock().map_err(|_| DevError::Busy(shown.clone()))?;

    let config_path = dir.join("shardwire.toml");
    let previous = if config_path.exists() {
        Some(Config::load(&config_path)?)
    } else {
        None
    };
    let count = match (&previous, opts.shards) {
        (Some(p), Some(n)) if p.shards.len() != n as usize => {
            return Err(DevError::ShardCount {
                dir: shown,
                existing: p.shards.len(),
            })
        }
        (Some(p), None) => p.shards.len(),
        (_, n) => n.unwrap_or(DEFAULT_SHARDS) as usize,
    };
    let ports = match &previous {
        Some(p) => (0..count).map(|i| p.shard_endpoint(i).port).collect(),
        None => pick_ports(count).map_err(io_err(Path::new("127.0.0.1"), "no free port"))?,
    };
    let proxy_port = opts
        .port
        .or(previous.as_ref().map(|p| p.listen_addr().port()))
        .unwrap_or(DEFAULT_PORT);

    let bins = PgBinaries::locate()?;
    let mut clusters = Clusters(Vec::with_capacity(count));
    for (i, port) in ports.into_iter().enumerate() {
        if cancel.load(Ordering::SeqCst) {
            return Err(DevError::Interrupted);
        }
        let name = format!("s{}", i + 1);
        let cluster_dir = dir.join(&name);
        let verb = if cluster_dir.join("PG_VERSION").exists() {
            "reusing"
        } else {
            "creating"
        };
        info!(shard = %name, port, dir = %cluster_dir.display(), "{verb} cluster");
        let cluster =
            LocalCluster::init(bins.clone(), &cluster_dir, port, ClusterOptions::default())?;
        // Registered before start, so a failed or interrupted start is still cleaned up.
        clusters.0.push((name.clone(), cluster));
        let (_, cluster) = clusters.0.last().expect("just pushed");
        if cancel.load(Ordering::SeqCst) {
            return Err(DevError::Interrupted);
        }
        info!(shard = %name, port, "starting cluster");
        cluster.start()?;
        cluster.create_database(APP)?;
    }

    let urls: Vec<String> = clusters.0.iter().map(|(_, c)| c.url(APP)).collect();
    let metrics_port = if std::net::TcpListener::bind(("127.0.0.1", METRICS_PORT)).is_ok() {
        METRICS_PORT
    } else {
        free_port().map_err(io_err(&config_path, "cannot find a free metrics port for"))?
    };
    let text = config_text(proxy_port, metrics_port, &urls);
    let config = Config::parse(&text, &config_path.display().to_string())?;
    std::fs::write(&config_path, &text).map_err(io_err(&config_path, "cannot write"))?;
    info!(config = %config_path.display(), metrics = %format!("http://127.0.0.1:{metrics_port}/metrics"), "wrote configuration");
    Ok(DevEnv {
        config,
        _clusters: clusters,
        _lock: lock,
    })
}

/// Distinct ports for fresh clusters: the conventional ones when free, else any free one.
fn pick_ports(count: usize) -> std::io::Result<Vec<u16>> {
    let mut taken = BTreeSet::new();
    let mut ports = Vec::with_capacity(count);
    for i in 0..count {
        let preferred = u16::try_from(i)
            .ok()
            .and_then(|i| FIRST_SHARD_PORT.checked_add(i))
            .filter(|p| std::net::TcpListener::bind(("127.0.0.1", *p)).is_ok());
        let mut port = match preferred {
            Some(p) => p,
            None => free_port()?,
        };
        while taken.contains(&port) {
            port = free_port()?;
        }
        taken.insert(port);
        ports.push(port);
    }
    Ok(ports)
}

fn config_text(proxy_port: u16, metrics_port: u16, shard_urls: &[String]) -> String {
    let mut text = format!(
        "# Written by `shardwire dev` on every run; copy it elsewhere to customise.\n\
         # The shards below are the local clusters in this directory.\n\n\
         [proxy]\n\
         listen = \"127.0.0.1:{proxy_port}\"\n\
         metrics_listen = \"127.0.0.1:{metrics_port}\"\n\
         database = \"{APP}\"\n\n\
         [[users]]\n\
         name = \"{APP}\"\n\
         password = \"{APP}\"\n"
    );
    for (i, url) in shard_urls.iter().enumerate() {
        let _ = write!(
            text,
            "\n[[shards]]\nname = \"s{}\"\nurl = \"{url}\"\n",
            i + 1
        );
    }
    text
}
