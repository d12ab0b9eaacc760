//! What every session shares: the configuration, the catalog, the pools, the transaction layer,
//! and how they are readied before the first client is accepted. Layers below the frontend take
//! only the pieces they use, so they can be driven without a whole proxy.

use std::sync::Arc;
use std::time::Duration;

use pgwire::api::auth::mechanism::AuthMechanismFactory;

use super::auth::Users;
use super::cancel::CancelRegistry;
use crate::backend::types::{ListedType, LIST_TYPES_SQL};
use crate::backend::{Pools, SettingsRegistry};
use crate::catalog::Catalog;
use crate::config::{Config, TlsConfig};
use crate::executor::ddl::DdlCtx;
use crate::failpoint::FailPoints;
use crate::metrics::Metrics;
use crate::model::ShardId;
use crate::router::SearchPath;
use crate::sql::search_path::split_setting;
use crate::txn::{
    ensure_decision_log, ClusterTag, ControlPools, Coordinator, GidGenerator, Lease, Recovery,
    TxnSettings,
};

/// Errors that stop the proxy from starting.
#[derive(Debug, thiserror::Error)]
pub enum StartError {
    #[error("cannot listen on {addr}: {source}")]
    Listen {
        addr: String,
        source: std::io::Error,
    },
    #[error("TLS: {0}")]
    Tls(String),
    #[error("metrics: {0}")]
    Metrics(String),
    #[error("catalog: {0}")]
    Catalog(#[from] crate::catalog::CatalogError),
    #[error("transaction layer: {0}")]
    Txn(#[from] crate::txn::TxnError),
    #[error("{0}")]
    FailPoints(#[from] crate::failpoint::FailPointError),
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
    pub limits: Arc<super::limits::ConnectionLimits>,
    /// Clients' startup settings, one shared copy per distinct set.
    pub settings: SettingsRegistry,
    /// Clients' startup settings as the server shows them.
    pub reported: super::reported::ReportedSettings,
    pub metrics: Metrics,
    /// Routing plans by statement text.
    pub plans: crate::router::PlanCache,
    /// Blocks of generated sharding-key values.
    pub keys: crate::catalog::keys::KeyBlocks,
    /// Where crash tests stop or kill the proxy (nothing without the `failpoints` feature).
    pub failpoints: FailPoints,
    /// Held while a chunk move's cutover runs: sessions wait before their next frame.
    pub fence: Arc<crate::growth::Fence>,
    recovery: Arc<Recovery>,
    lease: Arc<Lease>,
}

impl ServerCtx {
    /// Opens the catalog (creating or migrating it), readies the transaction layer, takes this
    /// process's lease and finishes in-doubt transactions left by an earlier run, before any
    /// client is accepted.
    pub async fn start(
        config: Arc<Config>,
        failpoints: FailPoints,
    ) -> Result<ServerCtx, StartError> {
        let catalog = Catalog::open(&config).await?;
        let settings = TxnSettings::from_config(&config);
        let control = Arc::new(ControlPools::new(&config, &settings));
        ensure_decision_log(&control).await?;
        let default_path = default_search_path(&control, &config).await;
        let cluster = ClusterTag::from_catalog(&config.catalog_endpoint());
        let coordinator = Coordinator::new(
            control.clone(),
            settings.clone(),
            GidGenerator::new(cluster),
        )?
        .with_failpoints(failpoints.clone());
        let lease = Lease::new(control.clone(), coordinator.incarnation(), settings.lease);
        lease.take().await?;
        for problem in coordinator.check_shards().await {
            tracing::warn!(error = %problem, "multi-shard writes will fail on this shard");
        }
        let recovery =
            Recovery::new(control.clone(), settings, &coordinator)?.releasing_table_states();
        let report = match recovery.run_once().await {
            Ok(report) => {
                tracing::info!(?report, "recovery of in-doubt transactions done");
                Some(report)
            }
            Err(e) => {
                tracing::warn!(error = %e, "recovery of in-doubt transactions failed");
                None
            }
        };
        let mut ctx = Self::assemble(
            config,
            catalog,
            control,
            coordinator,
            recovery,
            lease,
            failpoints,
        )?;
        ctx.plans.set_default_path(default_path.as_ref());
        ctx.refresh_type_oids().await;
        if let Some(report) = report {
            report.note_in(&ctx.metrics);
        }
        Ok(ctx)
    }

    /// Reads every shard's run-time types again when they may have changed
    /// ([`crate::backend::types`]); a shard that cannot be read leaves the maps stale, to be
    /// read again before the next statement that needs them.
    pub async fn refresh_type_oids(&self) {
        let types = self.pools.types();
        let Some(refresh) = types.begin_refresh().await else {
            return;
        };
        let read = async {
            let mut listed = Vec::with_capacity(self.config.shards.len());
            for i in 0..self.config.shards.len() {
                let conn = self
                    .control
                    .shard(ShardId(i as u32))
                    .pool
                    .get()
                    .await
                    .ok()?;
                let rows = conn.query(LIST_TYPES_SQL, &[]).await.ok()?;
                listed.push(
                    rows.iter()
                        .map(|r| ListedType {
                            oid: r.get::<_, i64>(0) as u32,
                            schema: r.get(1),
                            name: r.get(2),
                            element: r.get::<_, Option<i64>>(3).map(|e| e as u32),
                        })
                        .collect(),
                );
            }
            Some(listed)
        };
        match tokio::time::timeout(Duration::from_secs(2), read).await {
            Ok(Some(listed)) => types.install(refresh, &listed),
            _ => tracing::warn!("the shards' types could not be read: their OIDs pass unchanged"),
        }
    }

    /// The periodic pass over in-doubt transactions, which the accept loop runs beside the
    /// sessions; sessions themselves never need it.
    pub(crate) fn recovery(&self) -> &Arc<Recovery> {
        &self.recovery
    }

    /// This process's lease, which the accept loop renews beside the sessions and gives up when
    /// it stops.
    pub(crate) fn lease(&self) -> &Arc<Lease> {
        &self.lease
    }

    /// What the DDL executor works with.
    pub fn ddl(&self) -> DdlCtx<'_> {
        DdlCtx {
            catalog: &self.catalog,
            config: &self.config,
            control: &self.control,
            coordinator: &self.coordinator,
        }
    }

    pub fn growth(&self) -> crate::growth::Growth {
        crate::growth::Growth {
            catalog: self.catalog.clone(),
            control: self.control.clone(),
            config: self.config.clone(),
            fence: self.fence.clone(),
            me: self.lease.incarnation().clone(),
            failpoints: self.failpoints.clone(),
            metrics: self.metrics.moves.clone(),
        }
    }

    fn assemble(
        config: Arc<Config>,
        catalog: Arc<Catalog>,
        control: Arc<ControlPools>,
        coordinator: Coordinator,
        recovery: Recovery,
        lease: Lease,
        failpoints: FailPoints,
    ) -> Result<ServerCtx, StartError> {
        let users = Arc::new(Users::new(&config));
        let tls = config.tls.as_ref().map(tls_acceptor).transpose()?;
        let shard_names: Vec<String> = config.shards.iter().map(|s| s.name.clone()).collect();
        Ok(ServerCtx {
            catalog,
            control,
            coordinator,
            recovery: Arc::new(recovery),
            lease: Arc::new(lease),
            pools: Pools::new(&config),
            auth_mechanism: users.mechanism(),
            users,
            tls,
            cancels: Arc::new(CancelRegistry::default()),
            limits: Arc::new(super::limits::ConnectionLimits::new(&config.limits)),
            settings: SettingsRegistry::default(),
            reported: Default::default(),
            metrics: Metrics::new(&shard_names),
            plans: crate::router::PlanCache::new(config.proxy.plan_cache_size),
            keys: Default::default(),
            failpoints,
            fence: Default::default(),
            config,
        })
    }
}

/// The `search_path` the proxy's connections to the shards start with — the server's, the
/// database's or the role's default for the user it connects as — read from the first shard;
/// `None` when it cannot be read (unqualified names then mean `public`, with the ambiguous ones
/// refused, until a session sets a path).
async fn default_search_path(control: &ControlPools, config: &Config) -> Option<SearchPath> {
    let read = async {
        let conn = control.shard(ShardId(0)).pool.get().await.ok()?;
        let row = conn
            .query_one("SELECT pg_catalog.current_setting('search_path')", &[])
            .await
            .ok()?;
        Some(row.get::<_, String>(0))
    };
    let value = tokio::time::timeout(Duration::from_secs(5), read)
        .await
        .ok()
        .flatten();
    let Some(schemas) = value.as_deref().and_then(split_setting) else {
        tracing::warn!("the shards' search_path could not be read: unqualified names mean public");
        return None;
    };
    Some(SearchPath::known(schemas, &config.shard_endpoint(0).user))
}

fn tls_acceptor(tls: &TlsConfig) -> Result<pgwire::tokio::TlsAcceptor, StartError> {
    let certs = crate::tls::load_certs(&tls.cert).map_err(StartError::Tls)?;
    let key = crate::tls::load_key(&tls.key).map_err(StartError::Tls)?;
    let config = tokio_rustls::rustls::ServerConfig::builder_with_provider(crate::tls::provider())
        .with_safe_default_protocol_versions()
        .map_err(|e| StartError::Tls(e.to_string()))?
        .with_no_client_auth()
        .with_single_cert(certs, key)
        .map_err(|e| StartError::Tls(e.to_string()))?;
    Ok(pgwire::tokio::TlsAcceptor::from(Arc::new(config)))
}
