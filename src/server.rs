//! The accept loop, the runtime it runs on, and logging setup. What sessions share is
//! [`crate::frontend::context::ServerCtx`].

use std::future::Future;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Arc;

use tokio::net::TcpListener;
use tokio::runtime::RuntimeFlavor;
use tokio::task::JoinSet;

use crate::config::Config;
use crate::failpoint::FailPoints;
use crate::frontend::context::ServerCtx;
use crate::frontend::context::StartError;
use crate::frontend::driver::{Next, SessionDriver};

/// What a running proxy needs from its caller, passed explicitly so tests can run several
/// proxies in one process.
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
    /// What `SHARDWIRE_FAILPOINTS` armed (crash tests); [`FailPoints::none`] otherwise.
    pub failpoints: FailPoints,
}

/// Serves clients on `listener` until `shutdown` completes; then stops accepting and ends the
/// open sessions.
pub async fn run(
    listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    deps: Deps,
) -> Result<(), StartError> {
    let ctx = Arc::new(ServerCtx::start(deps.config, deps.failpoints).await?);
    // Background work ends with the accept loop.
    let stop = tokio_util::sync::CancellationToken::new();
    let catalog_watcher = ctx.catalog.spawn_watcher(stop.clone().cancelled_owned());
    let recovery = {
        let ctx = ctx.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let done = |report: &crate::txn::RecoveryReport| report.note_in(&ctx.metrics);
            ctx.recovery().run_until(stop.cancelled(), done).await
        })
    };
    let move_recovery = {
        let growth = ctx.growth();
        let stop = stop.clone();
        tokio::spawn(async move {
            crate::growth::run_recovery_until(growth, stop.cancelled_owned()).await
        })
    };
    let (holds_ready, ready) = tokio::sync::oneshot::channel();
    let hold_follower = {
        let growth = ctx.growth();
        let lease = ctx.lease();
        let (renewals, length) = (lease.renewals(), lease.length());
        let stop = stop.clone();
        tokio::spawn(async move {
            crate::growth::follow_holds(growth, renewals, length, holds_ready, stop.cancelled())
                .await
        })
    };
    // A cutover another proxy holds now holds this one's statements before the first client.
    let _ = ready.await;
    let lease_renewal = {
        let lease = ctx.lease().clone();
        let stop = stop.clone();
        tokio::spawn(async move { lease.renew_until(stop.cancelled()).await })
    };
    let pool_sweeper = {
        let ctx = ctx.clone();
        let stop = stop.clone();
        tokio::spawn(async move { ctx.pools.sweep_until(stop.cancelled()).await })
    };
    let ttl_purge = {
        let ctx = ctx.clone();
        let stop = stop.clone();
        tokio::spawn(async move {
            let purge = crate::executor::ttl_purge::Purge {
                catalog: &ctx.catalog,
                control: &ctx.control,
                config: &ctx.config.ttl,
                metrics: &ctx.metrics,
            };
            purge.run_until(stop.cancelled()).await
        })
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
    let _ = lease_renewal.await;
    let _ = move_recovery.await;
    let _ = hold_follower.await;
    let _ = ttl_purge.await;
    // Last: no session of ours is left to finish what is prepared, so others may at once.
    if let Err(e) = ctx.lease().release().await {
        tracing::warn!(error = %e, "cannot give up the lease; it expires by itself");
    }
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
    // Read here, once: the only place the environment decides anything about a proxy.
    let failpoints = FailPoints::from_env().map_err(|e| StartError::from(e).to_string())?;
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
        failpoints,
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

/// Logs to standard output, level from RUST_LOG (default info).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt()
        .with_env_filter(filter)
        .with_writer(|| LogOutput)
        .try_init();
}

/// Standard output for the log, where a failed write is dropped: once the reader of a pipe is
/// gone (`shardwire dev | tee log`, then Ctrl-C, which ends tee first), logging must not stop
/// the shutdown. tracing-subscriber reports a failed write with `eprintln!`, which panics when
/// standard error is that same closed pipe.
struct LogOutput;

impl std::io::Write for LogOutput {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        let _ = std::io::stdout().write_all(buf);
        Ok(buf.len())
    }

    fn flush(&mut self) -> std::io::Result<()> {
        let _ = std::io::stdout().flush();
        Ok(())
    }
}
