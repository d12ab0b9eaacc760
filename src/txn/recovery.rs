//! In-doubt recovery: finishes prepared transactions whose coordinator went away (crashed,
//! lost its network, or was stopped) and clears the decision log behind them.
//!
//! A prepared transaction older than the grace period is committed when a `commit` record holds
//! its gid and rolled back otherwise, after recording `abort` so that its coordinator, should it
//! still be alive, can no longer record `commit`. Only gids of this cluster's exact form are
//! touched; other software's prepared transactions are left alone.

use std::future::Future;
use std::sync::Arc;

use super::control::{ConnectError, ControlPools, ShardPool};
use super::coordinator::finish_prepared;
use super::decision_log::{self, Decision, DecisionRecord};
use super::error::TxnError;
use super::gid::{ClusterTag, Gid};
use super::TxnSettings;
use crate::model::ShardId;
use futures::future::join_all;

/// What one pass did.
#[derive(Debug, Default)]
pub struct RecoveryReport {
    pub committed: Vec<(Gid, ShardId)>,
    pub rolled_back: Vec<(Gid, ShardId)>,
    /// Decision records deleted because every participant has finished.
    pub forgotten: Vec<Gid>,
    /// Shards that could not be listed or finished; the next pass tries again.
    pub errors: Vec<TxnError>,
}

/// A prepared transaction of ours on one shard.
struct Prepared {
    gid: Gid,
    past_grace: bool,
}

pub struct Recovery {
    pools: Arc<ControlPools>,
    settings: TxnSettings,
    cluster: ClusterTag,
}

impl Recovery {
    pub fn new(
        pools: Arc<ControlPools>,
        settings: TxnSettings,
        cluster: ClusterTag,
    ) -> Result<Recovery, TxnError> {
        settings.validate()?;
        Ok(Recovery {
            pools,
            settings,
            cluster,
        })
    }

    /// Runs passes every `recovery_interval` until `shutdown` completes. Run one pass with
    /// [`Recovery::run_once`] before accepting clients.
    pub async fn run_until(&self, shutdown: impl Future<Output = ()>) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.settings.recovery_interval) => {}
            }
            if let Err(e) = self.run_once().await {
                tracing::warn!(error = %e, "recovery pass failed");
            }
        }
    }

    /// One pass over every shard. Fails only when the catalog cannot be reached; a shard that
    /// cannot is reported in [`RecoveryReport::errors`].
    pub async fn run_once(&self) -> Result<RecoveryReport, TxnError> {
        let catalog_error = |e: ConnectError| TxnError::DecisionLog { source: e };
        let catalog = self.pools.catalog().get().await.map_err(catalog_error)?;
        // Read before listing the shards: a record seen here whose gid is then prepared nowhere
        // is finished everywhere.
        let records: Vec<DecisionRecord> =
            decision_log::list(&catalog, self.settings.abort_record_retention)
                .await
                .map_err(|e| catalog_error(e.into()))?
                .into_iter()
                .filter(|r| r.gid.cluster == self.cluster)
                .collect();

        let mut report = RecoveryReport::default();
        let listings = join_all(self.pools.shards().iter().map(|s| self.list_prepared(s))).await;
        let mut listings: Vec<Option<Vec<Prepared>>> = listings
            .into_iter()
            .map(|l| l.map_err(|e| report.errors.push(e)).ok())
            .collect();

        for gid in in_doubt(&listings) {
            let decision = decision_log::decide_abort_unless_decided(&catalog, &gid)
                .await
                .map_err(|e| catalog_error(e.into()))?;
            tracing::info!(%gid, ?decision, "finishing in-doubt transaction");
            for (shard, listing) in self.pools.shards().iter().zip(&mut listings) {
                let Some(listing) = listing else { continue };
                let Some(at) = listing.iter().position(|p| p.gid == gid && p.past_grace) else {
                    continue;
                };
                match finish_prepared(shard, &gid, decision).await {
                    Ok(()) => {
                        listing.remove(at);
                        let done = (gid.clone(), shard.label.id);
                        match decision {
                            Decision::Commit => report.committed.push(done),
                            Decision::Abort => report.rolled_back.push(done),
                        }
                    }
                    Err(e) => report.errors.push(TxnError::on_shard(&shard.label, e)),
                }
            }
        }

        for record in records {
            if self.finished_everywhere(&record, &listings) {
                decision_log::delete(&catalog, &record.gid)
                    .await
                    .map_err(|e| catalog_error(e.into()))?;
                report.forgotten.push(record.gid);
            }
        }
        Ok(report)
    }

    /// Whether the record can go: no participant still holds the gid prepared (every listing
    /// needed was read), and an `abort` record has outlived any coordinator that could still try
    /// to record `commit` for its gid.
    fn finished_everywhere(
        &self,
        record: &DecisionRecord,
        listings: &[Option<Vec<Prepared>>],
    ) -> bool {
        let shards: Option<Vec<ShardId>> = match record.decision {
            Decision::Commit => record
                .participants
                .iter()
                .map(|name| self.pools.shard_named(name).map(|s| s.label.id))
                .collect(),
            Decision::Abort if record.expired => {
                Some(self.pools.shards().iter().map(|s| s.label.id).collect())
            }
            Decision::Abort => None,
        };
        shards.is_some_and(|shards| {
            shards.iter().all(|id| {
                listings[id.index()]
                    .as_ref()
                    .is_some_and(|l| l.iter().all(|p| p.gid != record.gid))
            })
        })
    }

    async fn list_prepared(&self, shard: &ShardPool) -> Result<Vec<Prepared>, TxnError> {
        let on_shard = |e: ConnectError| TxnError::on_shard(&shard.label, e);
        let conn = shard.pool.get().await.map_err(on_shard)?;
        // Ages by the shard's own clock: nothing assumes the machines' clocks agree.
        let rows = conn
            .query(
                "SELECT gid, now() - prepared > make_interval(secs => $1) \
                 FROM pg_prepared_xacts \
                 WHERE database = current_database() AND gid LIKE $2",
                &[
                    &self.settings.recovery_grace.as_secs_f64(),
                    &format!("sw\\_{}\\_%", self.cluster),
                ],
            )
            .await
            .map_err(|e| on_shard(e.into()))?;
        Ok(rows
            .iter()
            .filter_map(|row| {
                let gid = Gid::parse(row.get(0)).ok()?;
                (gid.cluster == self.cluster).then(|| Prepared {
                    gid,
                    past_grace: row.get(1),
                })
            })
            .collect())
    }
}

/// Each gid prepared past the grace period on some shard, once.
fn in_doubt(listings: &[Option<Vec<Prepared>>]) -> Vec<Gid> {
    let mut gids: Vec<Gid> = Vec::new();
    for prepared in listings.iter().flatten().flatten() {
        if prepared.past_grace && !gids.contains(&prepared.gid) {
            gids.push(prepared.gid.clone());
        }
    }
    gids
}
