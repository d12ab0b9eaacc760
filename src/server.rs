//! The accept loop, and the shared state every session gets.

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use pgwire::api::auth::mechanism::AuthMechanismFactory;
use tokio::net::TcpListener;
use tokio::runtime::RuntimeFlavor;
use tokio::task::JoinSet;

use crate::backend::{Pools, SettingsRegistry};
use crate::catalog::Catalog;
use crate::config::{Config, TlsConfig};
use crate::error::StartError;
use crate::frontend::auth::Users;
use crate::frontend::cancel::CancelRegistry;
use crate::frontend::driver::{Next, SessionDriver};
use crate::metrics::Metrics;
use crate::txn::{
    ensure_decision_log, ClusterTag, ControlPools, Coordinator, GidGenerator, Recovery, TxnSettings,
};

/// What a running proxy needs from its caller, passed explicitly so tests can run several
/// proxies in one process.
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
}

/// Everything sessions share.
pub struct ServerCtx {
    pub config: Arc<Config>,
    pub catalog: Arc<Catalog>,
    /// tokio-postgres pools for control work (DDL fan-out, two-phase commit, recovery).
    pub control: Arc<ControlPools>,
    pub coordinator: Coordinator,
    pub pools: Pools,
    pub users: Arc<Users>,
    pub auth_mechanism: Arc<dyn AuthMechanismFactory>,
    pub tls: Option<pgwire::tokio::TlsAcceptor>,
    pub cancels: Arc<CancelRegistry>,
    /// Clients' startup settings, one shared copy per distinct set.
    pub settings: SettingsRegistry,
    pub metrics: Metrics,
    /// Routing plans by statement text.
    pub plans: crate::router::PlanCache,
    /// Blocks of generated sharding-key values.
    pub keys: crate::catalog::keys::KeyBlocks,
    recovery: Arc<Recovery>,
}

impl ServerCtx {
    /// Opens the catalog (creating or migrating it), readies the transaction layer and finishes
    /// in-doubt transactions left by an earlier run, before any client is accepted.
    pub async fn start(config: Arc<Config>) -> Result<ServerCtx, StartError> {
        let catalog = Catalog::open(&config).await?;
        let settings = TxnSettings::from_config(&config);
        let control = Arc::new(ControlPools::new(&config, &settings));
        ensure_decision_log(&control).await?;
        let cluster = ClusterTag::from_catalog(&config.catalog_endpoint());
        let coordinator = Coordinator::new(
            control.clone(),
            settings.clone(),
            GidGenerator::new(cluster.clone()),
        )?;
        for problem in coordinator.check_shards().await {
            tracing::warn!(error = %problem, "multi-shard writes will fail on this shard");
        }
        let recovery = Recovery::new(control.clone(), settings, cluster)?;
        match recovery.run_once().await {
            Ok(report) => tracing::info!(?report, "recovery of in-doubt transactions done"),
            Err(e) => tracing::warn!(error = %e, "recovery of in-doubt transactions failed"),
        }
        Self::assemble(config, catalog, control, coordinator, recovery)
    }

    fn assemble(
        config: Arc<Config>,
        catalog: Arc<Catalog>,
        control: Arc<ControlPools>,
        coordinator: Coordinator,
        recovery: Recovery,
    ) -> Result<ServerCtx, StartError> {
        let users = Arc::new(Users::new(&config));
        let tls = config.tls.as_ref().map(tls_acceptor).transpose()?;
        let shard_names: Vec<String> = config.shards.iter().map(|s| s.name.clone()).collect();
        Ok(ServerCtx {
            catalog,
            control,
            coordinator,
            recovery: Arc::new(recovery),
            pools: Pools::new(&config),
            auth_mechanism: users.mechanism(),
            users,
            tls,
            cancels: Arc::new(CancelRegistry::default()),
            settings: SettingsRegistry::default(),
            metrics: Metrics::new(&shard_names),
            plans: crate::router::PlanCache::new(config.proxy.plan_cache_size),
            keys: Default::default(),
            config,
        })
    }
}

/// Serves clients on `listener` until `shutdown` completes; then stops accepting and ends the
/// open sessions.
pub async fn run(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    deps: Deps,
) -> Result<(), StartError> {
    let ctx = Arc::new(ServerCtx::start(deps.config).await?);
    // Background work ends with the accept loop.
    let stop = tokio_util::sync::CancellationToken::new();
    let catalog_watcher = ctx.catalog.spawn_watcher(stop.clone().cancelled_owned());
    let recovery = {
        let recovery = ctx.recovery.clone();
        let stop = stop.clone();
        tokio::spawn(async move { recovery.run_until(stop.cancelled()).await })
    };
    let pool_sweeper = {
        let ctx = ctx.clone();
        let stop = stop.clone();
        tokio::spawn(async move { ctx.pools.sweep_until(stop.cancelled()).await })
    };
    let next_session = AtomicU64::new(1);
    let mut sessions = Sessions::new();
    tokio::pin!(shutdown);
    tracing::info!(addr = ?listener.local_addr().ok(), "shardwire is accepting clients");
    loop {
        tokio::select! {
            _ = &mut shutdown => break,
            accepted = listener.accept() => match accepted {
                Ok((tcp, _)) => {
                    let _ = tcp.set_nodelay(true);
                    let id = next_session.fetch_add(1, Ordering::Relaxed);
                    sessions.spawn(crate::frontend::handle_client(tcp, ctx.clone(), id));
                }
                Err(e) => {
                    // Out of file descriptors and the like: wait a little rather than spin.
                    tracing::warn!(error = %e, "accept failed");
                    tokio::time::sleep(std::time::Duration::from_millis(50)).await;
                }
            },
            _ = sessions.reap() => {}
        }
    }
    sessions.stop().await;
    stop.cancel();
    let _ = catalog_watcher.await;
    let _ = recovery.await;
    let _ = pool_sweeper.await;
    tracing::info!("shardwire stopped");
    Ok(())
}

/// The running sessions: on a current-thread runtime all in one task ([`SessionDriver`]), on a
/// multi-threaded one each its own task, so the scheduler spreads them over the threads.
enum Sessions {
    Driven(SessionDriver),
    Tasks(JoinSet<()>),
}

impl Sessions {
    fn new() -> Sessions {
        match tokio::runtime::Handle::current().runtime_flavor() {
            RuntimeFlavor::CurrentThread => Sessions::Driven(SessionDriver::start()),
            _ => Sessions::Tasks(JoinSet::new()),
        }
    }

    fn spawn(&mut self, session: impl Future<Output = Next> + Send + 'static) {
        match self {
            Sessions::Driven(driver) => driver.spawn(session),
            Sessions::Tasks(tasks) => {
                // Unconstrained by tokio's budget, as driven sessions are (see
                // `frontend::socket::ReadArm`): the session loop keeps its own.
                tasks.spawn(tokio::task::unconstrained(async move {
                    let mut next = session.await;
                    while let Next::Continue(stage) = next {
                        next = stage.await;
                    }
                }));
            }
        }
    }

    /// Completes when a finished session task was cleaned up; never for driven sessions, which
    /// the driver cleans up itself.
    async fn reap(&mut self) {
        match self {
            Sessions::Tasks(tasks) if !tasks.is_empty() => {
                tasks.join_next().await;
            }
            _ => std::future::pending().await,
        }
    }

    /// Ends every session, as a client disconnect would on the proxy's side.
    async fn stop(self) {
        match self {
            Sessions::Driven(driver) => driver.stop().await,
            Sessions::Tasks(mut tasks) => {
                tasks.abort_all();
                while tasks.join_next().await.is_some() {}
            }
        }
    }
}

/// The runtime `[proxy] workers` asks for: one worker (the default) runs everything on one
/// thread, with none of the cross-thread wake-ups a multi-threaded scheduler needs: PgBouncer's
/// model, and measured cheaper per transaction when the proxy shares a small machine with its
/// clients or servers (BENCHMARKS.md). More workers share the clients among threads.
pub fn runtime(workers: Option<usize>) -> std::io::Result<tokio::runtime::Runtime> {
    let mut builder = match workers.unwrap_or(1) {
        1 => tokio::runtime::Builder::new_current_thread(),
        n => {
            let mut b = tokio::runtime::Builder::new_multi_thread();
            b.worker_threads(n);
            b
        }
    };
    builder.enable_all().build()
}

/// Binds the configured addresses and serves until Ctrl-C or SIGTERM.
pub async fn serve(config: Config) -> Result<(), String> {
    let listener = TcpListener::bind(config.listen_addr()).await.map_err(|e| {
        StartError::Listen {
            addr: config.proxy.listen.clone(),
            source: e,
        }
        .to_string()
    })?;
    if let Some(addr) = config.metrics_addr() {
        crate::metrics::install(addr)?;
    }
    let deps = Deps {
        config: Arc::new(config),
    };
    run(listener, shutdown_signal(), deps)
        .await
        .map_err(|e| e.to_string())
}

/// Completes on Ctrl-C or SIGTERM.
pub async fn shutdown_signal() {
    let mut term = tokio::signal::unix::signal(tokio::signal::unix::SignalKind::terminate())
        .expect("SIGTERM handler");
    tokio::select! {
        _ = tokio::signal::ctrl_c() => {}
        _ = term.recv() => {}
    }
}

fn tls_acceptor(tls: &TlsConfig) -> Result<pgwire::tokio::TlsAcceptor, StartError> {
    use std::io::BufReader;
    use tokio_rustls::rustls;
    let open = |p: &std::path::Path| {
        std::fs::File::open(p)
            .map(BufReader::new)
            .map_err(|e| StartError::Tls(format!("{}: {e}", p.display())))
    };
    let certs = rustls_pemfile::certs(&mut open(&tls.cert)?)
        .collect::<Result<Vec<_>, _>>()
        .map_err(|e| StartError::Tls(format!("{}: {e}", tls.cert.display())))?;
    let key = rustls_pemfile::private_key(&mut open(&tls.key)?)
        .map_err(|e| StartError::Tls(format!("{}: {e}", tls.key.display())))?
        .ok_or_else(|| StartError::Tls(format!("{}: no private key found", tls.key.display())))?;
    let provider = Arc::new(rustls::crypto::ring::default_provider());
    let config = rustls::ServerConfig::builder_with_provider(provider)
        .with_safe_default_protocol_versions()
        .map_err(|e| StartError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| StartError::Tls(e.to_string()))?;
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
}

/// Logs to stderr, level from RUST_LOG (default info).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}
