//! The accept loop.
use std::future::Future;
use std::sync::Arc;

use tokio::net::TcpListener;

use crate::config::Config;

/// What a running proxy needs, passed explicitly so tests can run several in one process.
#[derive(Clone)]
pub struct Deps {
    pub config: Arc<Config>,
}

/// Serves clients on `listener` until `shutdown` completes.
pub async fn run(
    _listener: TcpListener,
    shutdown: impl Future<Output = ()> + Send,
    _deps: Deps,
) -> Result<(), String> {
    shutdown.await;
    Ok(())
}

/// Binds the configured addresses and serves until Ctrl-C.
pub async fn serve(config: Config) -> Result<(), String> {
    let listener = TcpListener::bind(config.listen_addr())
        .await
        .map_err(|e| format!("cannot listen on {}: {e}", config.proxy.listen))?;
    let deps = Deps {
        config: Arc::new(config),
    };
    run(
        listener,
        async {
            let _ = tokio::signal::ctrl_c().await;
        },
        deps,
    )
    .await
}

/// Logs to stderr, level from RUST_LOG (default info).
pub fn init_tracing() {
    let filter = tracing_subscriber::EnvFilter::try_from_default_env()
        .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info"));
    let _ = tracing_subscriber::fmt().with_env_filter(filter).try_init();
}
