//! The distributed transactions this proxy is working on right now, from just before their first
//! PREPARE until they are committed everywhere, rolled back, or left to recovery.
//!
//! This process's own recovery consults it: a prepared transaction of this incarnation that is
//! not here has no coordinator any more (the session that ran it ended, or gave it up), while one
//! that is here must be left to the session finishing it. SHOW TRANSACTIONS lists it.

use std::collections::HashMap;
use std::sync::{Arc, Mutex, MutexGuard};
use std::time::{Duration, Instant};

use super::gid::Gid;

/// Where a transaction is in the protocol.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Phase {
    /// PREPARE TRANSACTION sent (or about to be) to the participants.
    Preparing,
    /// Every participant prepared; the decision record is being written.
    Deciding,
    /// Commit is decided; COMMIT PREPARED is under way.
    Committing,
    /// ROLLBACK PREPARED is under way.
    RollingBack,
}

impl Phase {
    pub fn as_str(self) -> &'static str {
        match self {
            Phase::Preparing => "preparing",
            Phase::Deciding => "deciding",
            Phase::Committing => "committing",
            Phase::RollingBack => "rolling back",
        }
    }
}

/// One registered transaction, as listings show it.
#[derive(Debug, Clone)]
pub struct InFlightTxn {
    pub gid: Gid,
    /// Shard names.
    pub participants: Vec<String>,
    pub phase: Phase,
    pub age: Duration,
}

struct Entry {
    participants: Vec<String>,
    phase: Phase,
    since: Instant,
}

/// Shared by the coordinator, every session and recovery (by `Arc`).
#[derive(Default)]
pub struct InFlight {
    entries: Mutex<HashMap<Gid, Entry>>,
}

impl InFlight {
    /// Registers `gid` until the returned guard is dropped. Call it before the first PREPARE.
    pub fn register(self: &Arc<Self>, gid: &Gid, participants: Vec<String>) -> InFlightGuard {
        self.lock().insert(
            gid.clone(),
            Entry {
                participants,
                phase: Phase::Preparing,
                since: Instant::now(),
            },
        );
        InFlightGuard {
            registry: self.clone(),
            gid: gid.clone(),
        }
    }

    /// Notes a registered transaction's progress; nothing for one not registered.
    pub fn set_phase(&self, gid: &Gid, phase: Phase) {
        if let Some(entry) = self.lock().get_mut(gid) {
            entry.phase = phase;
        }
    }

    pub fn contains(&self, gid: &Gid) -> bool {
        self.lock().contains_key(gid)
    }

    /// Every registered transaction, oldest first.
    pub fn list(&self) -> Vec<InFlightTxn> {
        let now = Instant::now();
        let mut all: Vec<InFlightTxn> = self
            .lock()
            .iter()
            .map(|(gid, e)| InFlightTxn {
                gid: gid.clone(),
                participants: e.participants.clone(),
                phase: e.phase,
                age: now.saturating_duration_since(e.since),
            })
            .collect();
        all.sort_by(|a, b| b.age.cmp(&a.age).then(a.gid.seq.cmp(&b.gid.seq)));
        all
    }

    fn lock(&self) -> MutexGuard<'_, HashMap<Gid, Entry>> {
        // The map stays consistent whatever panicked while it was held: every change is one call.
        self.entries.lock().unwrap_or_else(|p| p.into_inner())
    }
}

/// Keeps a transaction registered; dropping it (however the commit ends, a cancelled session
/// included) unregisters it.
#[must_use = "the transaction is unregistered when the guard is dropped"]
pub struct InFlightGuard {
    registry: Arc<InFlight>,
    gid: Gid,
}

impl InFlightGuard {
    pub fn gid(&self) -> &Gid {
        &self.gid
    }
}

impl Drop for InFlightGuard {
    fn drop(&mut self) {
        self.registry.lock().remove(&self.gid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::txn::{ClusterTag, GidGenerator};

    #[test]
    fn a_transaction_is_listed_while_its_guard_lives() {
        let registry = Arc::new(InFlight::default());
        let gids = GidGenerator::new(ClusterTag::new("c1").unwrap());
        let (a, b) = (gids.next_gid(), gids.next_gid());
        let guard_a = registry.register(&a, vec!["s1".into(), "s2".into()]);
        let guard_b = registry.register(&b, vec!["s2".into()]);
        registry.set_phase(&b, Phase::Deciding);
        let listed = registry.list();
        assert_eq!(listed.len(), 2);
        assert_eq!(listed[0].gid, a);
        assert_eq!(listed[0].phase, Phase::Preparing);
        assert_eq!(listed[0].participants, ["s1", "s2"]);
        assert_eq!(listed[1].phase, Phase::Deciding);
        drop(guard_a);
        assert!(!registry.contains(&a) && registry.contains(guard_b.gid()));
        drop(guard_b);
        assert!(registry.list().is_empty());
        registry.set_phase(&b, Phase::Committing);
        assert!(!registry.contains(&b));
    }
}
