//! Distributed transactions (docs/architecture.md §7): the two-phase-commit [`Coordinator`], the
//! decision log in the catalog database, and [`Recovery`] of in-doubt transactions.
//!
//! - [`control`]: control-plane pools (tokio-postgres via bb8), one per shard and one for the
//!   catalog, every session with a `lock_timeout`.
//! - [`gid`]: the `sw_<cluster>_<proxy>_<epoch>_<seq>` global transaction ids.
//! - [`decision_log`]: `shardwire_catalog.txn_decision`, where a commit decision becomes durable.
//! - [`lease`]: `shardwire_catalog.proxy_lease`, each running proxy's claim on its own gids.
//! - [`in_flight`]: the distributed transactions this proxy is committing right now.
//! - [`coordinator`]: one transaction over several shards, all or nothing.
//! - [`recovery`]: finishes prepared transactions whose coordinator went away.
//!
//! The protocol's invariant: a prepared transaction is committed only under a `commit` record
//! and rolled back only when no `commit` record can appear any more (an `abort` record holds its
//! gid, or the coordinator itself gave up before deciding).

pub mod control;
pub mod coordinator;
pub mod decision_log;
mod error;
pub mod gid;
pub mod in_flight;
pub mod lease;
pub mod recovery;

use std::time::Duration;

use crate::config::Config;

pub use control::{ControlPools, ShardLabel};
pub use coordinator::{Coordinator, Outcome, ShardResult};
pub use decision_log::{ensure_decision_log, Decision};
pub use error::TxnError;
pub use gid::{ClusterTag, Gid, GidGenerator, ProxyId};
pub use in_flight::{InFlight, InFlightGuard, Phase};
pub use lease::{Incarnation, Lease};
pub use recovery::{Recovery, RecoveryReport};

/// How long a control session waits for a lock before giving up.
pub const DEFAULT_LOCK_TIMEOUT: Duration = Duration::from_secs(5);

/// Timings and sizes of the transaction layer.
#[derive(Debug, Clone)]
pub struct TxnSettings {
    /// `lock_timeout` of every control session.
    pub lock_timeout: Duration,
    /// How long to wait for a control connection (and a connection attempt may take).
    pub connect_timeout: Duration,
    /// Most control sessions per shard, and to the catalog.
    pub pool_size: u32,
    /// The coordinator gives up (rolls back) instead of deciding commit when this much time has
    /// passed since it sent its first PREPARE. Below `recovery_grace`, so recovery never aborts a
    /// transaction that its coordinator may still commit.
    pub prepare_deadline: Duration,
    /// Recovery leaves a prepared transaction alone until it is this old (by the shard's clock),
    /// whoever made it: beside the lease, a guard against coordinators that hold none.
    pub recovery_grace: Duration,
    /// How long a proxy's lease lasts unrenewed; it is renewed every third of that.
    pub lease: Duration,
    /// Pause between recovery passes.
    pub recovery_interval: Duration,
    /// An `abort` record is kept this long (by the catalog's clock) so that a coordinator stalled
    /// past every deadline still finds it and cannot decide commit.
    pub abort_record_retention: Duration,
    /// Attempts at each COMMIT PREPARED before recovery is left to finish it.
    pub commit_attempts: u32,
    /// The pause before the second attempt; it doubles for each further one.
    pub commit_backoff: Duration,
}

impl Default for TxnSettings {
    fn default() -> Self {
        TxnSettings {
            lock_timeout: DEFAULT_LOCK_TIMEOUT,
            connect_timeout: Duration::from_secs(5),
            pool_size: 8,
            prepare_deadline: Duration::from_secs(20),
            recovery_grace: Duration::from_secs(60),
            recovery_interval: Duration::from_secs(30),
            lease: Duration::from_secs(30),
            abort_record_retention: Duration::from_secs(3600),
            commit_attempts: 5,
            commit_backoff: Duration::from_millis(100),
        }
    }
}

impl TxnSettings {
    /// The defaults, with the connect timeout of `[pool]` and the timings of `[transactions]`.
    pub fn from_config(config: &Config) -> TxnSettings {
        let t = &config.transactions;
        TxnSettings {
            connect_timeout: Duration::from_millis(config.pool.connect_timeout_ms),
            prepare_deadline: Duration::from_millis(t.prepare_deadline_ms),
            recovery_grace: Duration::from_millis(t.recovery_grace_ms),
            recovery_interval: Duration::from_millis(t.recovery_interval_ms),
            lease: Duration::from_millis(t.lease_ms),
            ..TxnSettings::default()
        }
    }

    pub fn validate(&self) -> Result<(), TxnError> {
        let bad = |m: &str| Err(TxnError::Settings(m.to_string()));
        if self.prepare_deadline >= self.recovery_grace {
            return bad("prepare_deadline must be shorter than recovery_grace");
        }
        if self.lease.as_millis() == 0 {
            return bad("lease must be at least 1 ms");
        }
        if self.lock_timeout.as_millis() == 0 {
            return bad("lock_timeout must be at least 1 ms (0 would wait for locks forever)");
        }
        if self.pool_size == 0 || self.commit_attempts == 0 {
            return bad("pool_size and commit_attempts must be at least 1");
        }
        Ok(())
    }
}
