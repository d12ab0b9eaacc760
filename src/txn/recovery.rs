//! In-doubt recovery: finishes prepared transactions whose coordinator went away (crashed,
//! lost its network, or was stopped) and clears the decision log and the leases behind them.
//!
//! A prepared transaction with a gid of this cluster is finished when all of these hold:
//! - it is older than `recovery_grace` by its shard's clock — a guard kept beside the lease for
//!   coordinators that hold none, and below which `prepare_deadline` keeps every coordinator;
//! - it is not in this proxy's in-flight registry (no session of ours is still finishing it);
//! - it was made by this very process (proxy id and epoch), or no unexpired lease exists for
//!   the proxy id and epoch that made it. A transaction of another live proxy is its own to
//!   finish, however old.
//!
//! Finishing means committing when a `commit` record holds its gid, and otherwise recording
//! `abort` first (ON CONFLICT DO NOTHING) and obeying whichever record won, so that a coordinator
//! still alive after all can no longer record `commit`. Only gids of this cluster's exact form are
//! touched; other software's prepared transactions are left alone. A lease that has expired is
//! deleted once no shard holds a transaction of its incarnation prepared.

use std::future::Future;
use std::sync::Arc;

use super::control::{ConnectError, ControlPools, ShardPool};
use super::coordinator::finish_prepared;
use super::coordinator::Coordinator;
use super::decision_log::{self, Decision, DecisionRecord};
use super::error::TxnError;
use super::gid::{ClusterTag, Gid};
use super::in_flight::InFlight;
use super::lease::{self, Incarnation};
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
    /// Past the grace period but left to their coordinator: in flight here, or made by another
    /// proxy whose lease is live.
    pub left_to_coordinator: Vec<Gid>,
    /// Expired leases deleted, no transaction of theirs being prepared anywhere.
    pub leases_removed: Vec<Incarnation>,
    /// Shards that could not be listed or finished; the next pass tries again.
    pub errors: Vec<TxnError>,
    /// Tables returned from UPDATING to ACTIVE because the proxy running their ALTER went
    /// away.
    pub tables_released: Vec<String>,
}

impl RecoveryReport {
    /// Counts the pass in the proxy's metrics.
    pub fn note_in(&self, metrics: &crate::metrics::Metrics) {
        metrics.note_recovery(
            self.committed.len(),
            self.rolled_back.len(),
            self.left_to_coordinator.len() + self.errors.len(),
        );
    }
}

/// A prepared transaction of ours on one shard.
struct Prepared {
    gid: Gid,
    /// The name it is prepared under ([`Gid::prepared_name`]).
    name: String,
    past_grace: bool,
}

pub struct Recovery {
    pools: Arc<ControlPools>,
    settings: TxnSettings,
    cluster: ClusterTag,
    /// The process this recovery runs in, and what it is committing now.
    me: Incarnation,
    in_flight: Arc<InFlight>,
    /// The catalog's tables are in the catalog database: UPDATING states left by dead proxies
    /// are released too.
    table_states: bool,
}

impl Recovery {
    /// The recovery of the proxy process that `coordinator` commits for.
    pub fn new(
        pools: Arc<ControlPools>,
        settings: TxnSettings,
        coordinator: &Coordinator,
    ) -> Result<Recovery, TxnError> {
        settings.validate()?;
        let me = coordinator.incarnation();
        Ok(Recovery {
            pools,
            settings,
            cluster: me.cluster.clone(),
            me,
            in_flight: coordinator.in_flight().clone(),
            table_states: false,
        })
    }

    /// Each pass also returns to ACTIVE the tables whose ALTER TABLE or CREATE INDEX died with
    /// its proxy (see [`crate::catalog::release_abandoned_updates`]).
    pub fn releasing_table_states(mut self) -> Recovery {
        self.table_states = true;
        self
    }

    /// Runs passes every `recovery_interval` until `shutdown` completes, handing each pass's
    /// report to `done` (metrics). Run one pass with [`Recovery::run_once`] before accepting
    /// clients.
    pub async fn run_until(
        &self,
        shutdown: impl Future<Output = ()>,
        done: impl Fn(&RecoveryReport),
    ) {
        tokio::pin!(shutdown);
        loop {
            tokio::select! {
                _ = &mut shutdown => return,
                _ = tokio::time::sleep(self.settings.recovery_interval) => {}
            }
            match self.run_once().await {
                Ok(report) => done(&report),
                Err(e) => tracing::warn!(error = %e, "recovery pass failed"),
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

        // Read after the listings: a gid listed there was made after its proxy took its lease.
        let live: Vec<Incarnation> = lease::list(&catalog, Some(&self.cluster))
            .await
            .map_err(|e| catalog_error(e.into()))?
            .into_iter()
            .filter(|l| l.live)
            .map(|l| l.incarnation)
            .collect();

        for gid in in_doubt(&listings) {
            if !self.may_finish(&gid, &live) {
                report.left_to_coordinator.push(gid);
                continue;
            }
            let decision = decision_log::decide_abort_unless_decided(&catalog, &gid)
                .await
                .map_err(|e| catalog_error(e.into()))?;
            tracing::info!(%gid, ?decision, "finishing in-doubt transaction");
            for (shard, listing) in self.pools.shards().iter().zip(&mut listings) {
                let Some(listing) = listing else { continue };
                let Some(at) = listing.iter().position(|p| p.gid == gid && p.past_grace) else {
                    continue;
                };
                match finish_prepared(shard, &listing[at].name, decision).await {
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
                decision_log::delete(&catalog, std::slice::from_ref(&record.gid))
                    .await
                    .map_err(|e| catalog_error(e.into()))?;
                report.forgotten.push(record.gid);
            }
        }
        self.remove_expired_leases(&catalog, &listings, &mut report)
            .await
            .map_err(|e| catalog_error(e.into()))?;
        if self.table_states {
            match crate::catalog::release_abandoned_updates(&**catalog).await {
                Ok(tables) => {
                    for table in &tables {
                        tracing::info!(%table, "table left UPDATING by a proxy that went away is ACTIVE again");
                    }
                    report.tables_released = tables;
                }
                Err(e) => tracing::warn!(error = %e, "cannot release tables left UPDATING"),
            }
        }
        Ok(report)
    }

    /// The rule of this module's comment, past the grace period.
    fn may_finish(&self, gid: &Gid, live: &[Incarnation]) -> bool {
        if self.in_flight.contains(gid) {
            return false;
        }
        self.me.made(gid) || !live.contains(&Incarnation::of(gid))
    }

    /// Deletes the expired leases of this cluster that no prepared transaction refers to any
    /// more; only when every shard could be listed, since an unlisted shard may hold one.
    async fn remove_expired_leases(
        &self,
        catalog: &tokio_postgres::Client,
        listings: &[Option<Vec<Prepared>>],
        report: &mut RecoveryReport,
    ) -> Result<(), tokio_postgres::Error> {
        if listings.iter().any(Option::is_none) {
            return Ok(());
        }
        for record in lease::list(catalog, Some(&self.cluster)).await? {
            let whose = record.incarnation;
            let referred = listings
                .iter()
                .flatten()
                .flatten()
                .any(|p| whose.made(&p.gid));
            if record.live || whose == self.me || referred {
                continue;
            }
            if lease::delete_expired(catalog, &whose).await? {
                tracing::info!(incarnation = %whose, "expired lease removed");
                report.leases_removed.push(whose);
            }
        }
        Ok(())
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
                let name: String = row.get(0);
                let gid = Gid::of_prepared(&name).ok()?;
                (gid.cluster == self.cluster).then(|| Prepared {
                    gid,
                    name,
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
