//! Cancel requests. Each client gets its own (pid, secret); while one of its statements runs, its
//! slot names the shard and backend process running it, so a CancelRequest reaches exactly that
//! one. The slot is two atomics because it changes twice per transaction.

use std::sync::atomic::{AtomicBool, AtomicU32, AtomicU64, Ordering};
use std::sync::Arc;

use dashmap::DashMap;
use futures::task::AtomicWaker;
use rand::Rng;

use crate::backend::CancelKey;
use crate::catalog::ShardId;

const NOT_RUNNING: u32 = u32::MAX;

pub struct CancelSlot {
    pub secret: i32,
    /// The proxy user the session logged in as: who may signal it.
    pub user: String,
    shard: AtomicU32,
    key: AtomicU64,
    /// The other shards' processes while a statement runs on several shards (rare, hence a
    /// mutex rather than atomics).
    others: std::sync::Mutex<Vec<(ShardId, CancelKey)>>,
    /// `pg_terminate_backend` of the session's pid was called; the session loop's waker.
    terminated: AtomicBool,
    wake_on_terminate: AtomicWaker,
}

impl CancelSlot {
    /// Asks the session to end, as `pg_terminate_backend` does.
    pub fn terminate(&self) {
        self.terminated.store(true, Ordering::Release);
        self.wake_on_terminate.wake();
    }

    pub fn is_terminated(&self) -> bool {
        self.terminated.load(Ordering::Acquire)
    }

    /// Whether the session was asked to end; otherwise the task of `cx` is woken when it is.
    pub fn poll_terminated(&self, cx: &std::task::Context<'_>) -> bool {
        if self.terminated.load(Ordering::Acquire) {
            return true;
        }
        self.wake_on_terminate.register(cx.waker());
        self.terminated.load(Ordering::Acquire)
    }

    pub fn set(&self, running: Option<(ShardId, CancelKey)>) {
        match running {
            Some((shard, key)) => {
                let packed = ((key.pid as u32 as u64) << 32) | key.secret as u32 as u64;
                self.key.store(packed, Ordering::Relaxed);
                self.shard.store(shard.0, Ordering::SeqCst);
            }
            // Sequentially consistent with a canceller's look at the slot after it fenced the
            // connection (`send_fenced`): either it sees the statement still running, or the
            // session sees the fence when it gives the connection back.
            None => self.shard.store(NOT_RUNNING, Ordering::SeqCst),
        }
    }

    /// Names every shard process running the session's multi-shard statement; cleared with
    /// an empty list once it has finished.
    pub fn set_others(&self, running: Vec<(ShardId, CancelKey)>) {
        *self.others.lock().unwrap_or_else(|e| e.into_inner()) = running;
    }

    fn running(&self) -> Option<(ShardId, CancelKey)> {
        let shard = self.shard.load(Ordering::SeqCst);
        if shard == NOT_RUNNING {
            return None;
        }
        let packed = self.key.load(Ordering::Relaxed);
        Some((
            ShardId(shard),
            CancelKey {
                pid: (packed >> 32) as u32 as i32,
                secret: packed as u32 as i32,
            },
        ))
    }
}

/// The proxy's sessions by the pid it gave them.
#[derive(Default)]
pub struct CancelRegistry {
    slots: DashMap<i32, Arc<CancelSlot>>,
}

impl CancelRegistry {
    /// Registers a new session under a fresh pid; the guard removes it again.
    pub fn register(self: &Arc<Self>, user: &str) -> (i32, CancelGuard) {
        let mut rng = rand::thread_rng();
        let slot = Arc::new(CancelSlot {
            secret: rng.gen(),
            user: user.to_owned(),
            shard: AtomicU32::new(NOT_RUNNING),
            key: AtomicU64::new(0),
            others: Default::default(),
            terminated: AtomicBool::new(false),
            wake_on_terminate: AtomicWaker::new(),
        });
        loop {
            let pid: i32 = rng.gen_range(1..i32::MAX);
            if let dashmap::Entry::Vacant(e) = self.slots.entry(pid) {
                e.insert(slot.clone());
                return (
                    pid,
                    CancelGuard {
                        registry: self.clone(),
                        pid,
                        slot,
                    },
                );
            }
        }
    }

    /// The shard and backend process running the session's statement, if the secret matches
    /// and a statement is running.
    pub fn target(&self, pid: i32, secret: i32) -> Option<(ShardId, CancelKey)> {
        self.slots
            .get(&pid)
            .filter(|s| s.secret == secret)
            .and_then(|s| s.running())
    }

    /// The session the proxy gave `pid`, for the signal functions (no secret: SQL does not
    /// carry one; who may signal is checked by user instead).
    pub fn session(&self, pid: i32) -> Option<Arc<CancelSlot>> {
        self.slots.get(&pid).map(|s| s.clone())
    }

    /// The session the proxy gave `pid`, if `secret` is its (a CancelRequest's).
    pub fn session_with_secret(&self, pid: i32, secret: i32) -> Option<Arc<CancelSlot>> {
        self.slots
            .get(&pid)
            .filter(|s| s.secret == secret)
            .map(|s| s.clone())
    }
}

/// Cancels the statement `slot`'s session runs, on every shard process running it. Each
/// connection is fenced first (its pool keeps it from other clients until PostgreSQL has
/// processed the request), and the request goes only if the session still runs its statement
/// there after that: else the connection may already serve another client.
pub async fn send_fenced(pools: &crate::backend::pool::Pools, slot: &CancelSlot) {
    let targets = slot.running_everywhere();
    for &(shard, key) in &targets {
        pools.shard(shard).cancel_starts(key.pid);
    }
    let still = slot.running_everywhere();
    for (shard, key) in targets {
        let pool = pools.shard(shard);
        if still.contains(&(shard, key)) {
            if let Err(e) = crate::backend::conn::send_cancel(&pool.endpoint, key).await {
                tracing::warn!(error = %e, "forwarding a cancel request failed");
            }
        }
        pool.cancel_done(key.pid);
    }
}

impl CancelSlot {
    /// Every shard process running the session's statement, each once.
    pub fn running_everywhere(&self) -> Vec<(ShardId, CancelKey)> {
        let mut all: Vec<(ShardId, CancelKey)> = self.running().into_iter().collect();
        for other in self.others.lock().unwrap_or_else(|e| e.into_inner()).iter() {
            if !all.contains(other) {
                all.push(*other);
            }
        }
        all
    }
}

pub struct CancelGuard {
    registry: Arc<CancelRegistry>,
    pid: i32,
    pub slot: Arc<CancelSlot>,
}

impl Drop for CancelGuard {
    fn drop(&mut self) {
        self.registry.slots.remove(&self.pid);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn slot_round_trips_negative_keys() {
        let registry = Arc::new(CancelRegistry::default());
        let (pid, guard) = registry.register("app");
        let secret = guard.slot.secret;
        assert_eq!(registry.target(pid, secret), None);
        let key = CancelKey {
            pid: 4242,
            secret: -7,
        };
        guard.slot.set(Some((ShardId(3), key)));
        assert_eq!(registry.target(pid, secret), Some((ShardId(3), key)));
        assert_eq!(registry.target(pid, secret.wrapping_add(1)), None);
        guard.slot.set(None);
        assert_eq!(registry.target(pid, secret), None);
        drop(guard);
        assert_eq!(registry.target(pid, secret), None);
    }
}
