//! Keeps a proxy's snapshot current with writes made by other proxies: LISTEN for the
//! notification every write sends, and poll `catalog_version` as well, because notifications
//! sent while the listening connection is down are never delivered.

use std::convert::Infallible;
use std::future::Future;
use std::sync::Arc;
use std::time::Duration;

use futures::future::poll_fn;
use tokio::sync::Notify;
use tokio::time::MissedTickBehavior;
use tokio_postgres::AsyncMessage;

use super::{store, Catalog, CatalogError, NOTIFY_CHANNEL};

/// How often the version is compared even without a notification.
const POLL_INTERVAL: Duration = Duration::from_millis(500);
/// How long to wait before listening again after the connection was lost.
const RECONNECT_DELAY: Duration = Duration::from_secs(1);

pub(super) async fn run(catalog: Arc<Catalog>, shutdown: impl Future<Output = ()>) {
    tokio::pin!(shutdown);
    loop {
        tokio::select! {
            _ = &mut shutdown => return,
            result = watch(&catalog) => {
                let Err(e) = result;
                tracing::warn!(error = %e, "catalog watcher lost its connection; reconnecting");
            }
        }
        tokio::select! {
            _ = &mut shutdown => return,
            _ = tokio::time::sleep(RECONNECT_DELAY) => {}
        }
    }
}

/// Listens and polls on one connection until it fails.
async fn watch(catalog: &Catalog) -> Result<Infallible, CatalogError> {
    let mut config = catalog.endpoint.pg_config();
    config.connect_timeout(catalog.connect_timeout);
    let (client, mut connection) = config
        .connect(catalog.endpoint.postgres_tls())
        .await
        .map_err(|source| CatalogError::Connect {
            endpoint: catalog.endpoint.to_string(),
            source,
        })?;
    let changed = Arc::new(Notify::new());
    let notifier = changed.clone();
    // Ends with the connection: on error, or when `client` is dropped.
    tokio::spawn(async move {
        while let Some(message) = poll_fn(|cx| connection.poll_message(cx)).await {
            match message {
                Ok(AsyncMessage::Notification(_)) => notifier.notify_one(),
                Ok(_) => {}
                Err(e) => {
                    tracing::debug!(error = %e, "catalog watcher connection ended");
                    break;
                }
            }
        }
    });
    client
        .batch_execute(&format!("LISTEN \"{NOTIFY_CHANNEL}\""))
        .await?;
    let mut poll = tokio::time::interval(POLL_INTERVAL);
    poll.set_missed_tick_behavior(MissedTickBehavior::Delay);
    // The version a reload last failed at, so a lasting problem is logged once, not every tick.
    let mut failed_at = None;
    loop {
        // The first tick is immediate: anything written before LISTEN took effect is caught.
        tokio::select! {
            _ = changed.notified() => {}
            _ = poll.tick() => {}
        }
        let version = store::version(&client).await?;
        if version == catalog.snapshot().version() {
            continue;
        }
        match catalog.reload().await {
            Ok(snapshot) => {
                failed_at = None;
                tracing::info!(version = snapshot.version(), "catalog changed; reloaded");
            }
            Err(e) if failed_at != Some(version) => {
                failed_at = Some(version);
                tracing::warn!(version, error = %e, "cannot reload the catalog; keeping the last snapshot");
            }
            Err(_) => {}
        }
    }
}
