//! Leases: `shardwire_catalog.proxy_lease`, one row per running proxy incarnation (the cluster,
//! proxy id and epoch of its gids), with an expiry by the catalog's clock.
//!
//! A live lease tells other proxies' recovery that the incarnation may still be deciding its
//! prepared transactions, so they are left to it. The coordinator records `commit` only in the same
//! statement that finds its own lease unexpired: once a lease has lapsed, its holder can no longer
//! commit anything, and recovery may safely take over. Safety does not rest on clocks: the unique
//! decision record still settles any race (docs/architecture.md §7); the lease only keeps recovery
//! from aborting transactions whose coordinator is alive.

use std::future::Future;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tokio_postgres::Client;

use super::control::{ConnectError, ControlPools};
use super::error::TxnError;
use super::gid::{ClusterTag, Gid, ProxyId};

/// One proxy process's identity inside its gids.
#[derive(Debug, Clone, PartialEq, Eq, Hash)]
pub struct Incarnation {
    pub cluster: ClusterTag,
    pub proxy: ProxyId,
    pub epoch: u64,
}

impl Incarnation {
    /// The incarnation whose coordinator made `gid`.
    pub fn of(gid: &Gid) -> Incarnation {
        Incarnation {
            cluster: gid.cluster.clone(),
            proxy: gid.proxy.clone(),
            epoch: gid.epoch,
        }
    }

    pub fn made(&self, gid: &Gid) -> bool {
        gid.cluster == self.cluster && gid.proxy == self.proxy && gid.epoch == self.epoch
    }

    /// The epoch as the table stores it; `None` for one no shardwire proxy can have (a gid
    /// typed by hand), which therefore has no lease.
    fn epoch_sql(&self) -> Option<i64> {
        i64::try_from(self.epoch).ok()
    }
}

impl std::fmt::Display for Incarnation {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}_{}", self.proxy, self.epoch)
    }
}

/// The table, created with the decision log (same transaction, same lock).
pub(crate) const CREATE_TABLE: &str = "CREATE TABLE IF NOT EXISTS shardwire_catalog.proxy_lease (
         cluster text NOT NULL,
         proxy text NOT NULL,
         epoch bigint NOT NULL,
         expires_at timestamptz NOT NULL,
         PRIMARY KEY (cluster, proxy, epoch)
     );";

/// Takes the lease, or extends it, to `length` from the catalog's now. A row that another
/// proxy's recovery removed after it lapsed is written again: what lapsed meanwhile is settled
/// by the decision records, not by the lease.
async fn upsert(
    client: &Client,
    me: &Incarnation,
    epoch: i64,
    length: Duration,
) -> Result<(), tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO shardwire_catalog.proxy_lease (cluster, proxy, epoch, expires_at) \
             VALUES ($1, $2, $3, clock_timestamp() + make_interval(secs => $4)) \
             ON CONFLICT (cluster, proxy, epoch) DO UPDATE SET expires_at = EXCLUDED.expires_at",
            &[
                &me.cluster.as_str(),
                &me.proxy.as_str(),
                &epoch,
                &length.as_secs_f64(),
            ],
        )
        .await?;
    Ok(())
}

/// A lease row, as recovery and SHOW TRANSACTIONS read it.
#[derive(Debug, Clone)]
pub struct LeaseRecord {
    pub incarnation: Incarnation,
    /// Unexpired by the catalog's clock.
    pub live: bool,
}

/// Every lease of `cluster`, or of every cluster.
pub async fn list(
    client: &Client,
    cluster: Option<&ClusterTag>,
) -> Result<Vec<LeaseRecord>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT cluster, proxy, epoch, expires_at > clock_timestamp() \
             FROM shardwire_catalog.proxy_lease WHERE $1::text IS NULL OR cluster = $1",
            &[&cluster.map(ClusterTag::as_str)],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            Some(LeaseRecord {
                incarnation: Incarnation {
                    cluster: ClusterTag::new(row.get(0))?,
                    proxy: ProxyId::new(row.get(1))?,
                    epoch: u64::try_from(row.get::<_, i64>(2)).ok()?,
                },
                live: row.get(3),
            })
        })
        .collect())
}

/// Deletes `whose` lease if it is still expired (its holder may have renewed it meanwhile).
pub(crate) async fn delete_expired(
    client: &Client,
    whose: &Incarnation,
) -> Result<bool, tokio_postgres::Error> {
    let Some(epoch) = whose.epoch_sql() else {
        return Ok(false);
    };
    let deleted = client
        .execute(
            "DELETE FROM shardwire_catalog.proxy_lease \
             WHERE cluster = $1 AND proxy = $2 AND epoch = $3 AND expires_at <= clock_timestamp()",
            &[&whose.cluster.as_str(), &whose.proxy.as_str(), &epoch],
        )
        .await?;
    Ok(deleted == 1)
}

/// This process's lease.
pub struct Lease {
    pools: Arc<ControlPools>,
    me: Incarnation,
    length: Duration,
    /// When the last renewal that went through was sent: the lease holds until at least a
    /// lease's length after it.
    renewed: tokio::sync::watch::Sender<Option<Instant>>,
}

impl Lease {
    pub fn new(pools: Arc<ControlPools>, me: Incarnation, length: Duration) -> Lease {
        Lease {
            pools,
            me,
            length,
            renewed: tokio::sync::watch::Sender::new(None),
        }
    }

    pub fn incarnation(&self) -> &Incarnation {
        &self.me
    }

    pub fn length(&self) -> Duration {
        self.length
    }

    /// When each renewal that went through was sent.
    pub fn renewals(&self) -> tokio::sync::watch::Receiver<Option<Instant>> {
        self.renewed.subscribe()
    }

    /// Takes (or extends) the lease. Before the first client: without it, no commit can be
    /// decided.
    pub async fn take(&self) -> Result<(), TxnError> {
        let fail = |source: ConnectError| TxnError::Lease {
            incarnation: self.me.to_string(),
            source,
        };
        let epoch = self.epoch()?;
        let conn = self.pools.catalog().get().await.map_err(fail)?;
        upsert(&conn, &self.me, epoch, self.length)
            .await
            .map_err(|e| fail(e.into()))
    }

    fn epoch(&self) -> Result<i64, TxnError> {
        self.me.epoch_sql().ok_or_else(|| {
            TxnError::Settings(format!(
                "epoch {} does not fit in a bigint: no lease can hold it",
                self.me.epoch
            ))
        })
    }

    /// Renews the lease every third of its length until `shutdown` completes; the first renewal
    /// is at once. A failed renewal is retried at the next tick: two may fail before the lease
    /// lapses.
    pub async fn renew_until(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        let period = (self.length / 3).max(Duration::from_millis(1));
        let mut renewed_at = Instant::now();
        let mut lapsed = false;
        loop {
            let sent = Instant::now();
            match self.take().await {
                Ok(()) => {
                    self.renewed.send_replace(Some(sent));
                    if lapsed {
                        tracing::warn!(incarnation = %self.me, "lease renewed after it had lapsed; transactions decided meanwhile were rolled back");
                        lapsed = false;
                    }
                    renewed_at = Instant::now();
                }
                Err(e) => {
                    lapsed = renewed_at.elapsed() >= self.length;
                    tracing::warn!(incarnation = %self.me, lapsed, error = %e, "cannot renew the lease");
                }
            }
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(period) => {}
            }
        }
    }

    /// Gives the lease up, at a clean shutdown: what this process left prepared is then
    /// finished by any other proxy's recovery at once.
    pub async fn release(&self) -> Result<(), TxnError> {
        let fail = |source: ConnectError| TxnError::Lease {
            incarnation: self.me.to_string(),
            source,
        };
        let epoch = self.epoch()?;
        let conn = self.pools.catalog().get().await.map_err(fail)?;
        conn.execute(
            "DELETE FROM shardwire_catalog.proxy_lease \
             WHERE cluster = $1 AND proxy = $2 AND epoch = $3",
            &[&self.me.cluster.as_str(), &self.me.proxy.as_str(), &epoch],
        )
        .await
        .map_err(|e| fail(e.into()))?;
        Ok(())
    }
}
