//! Cancel requests. Each client gets its own (pid, secret); while one of its statements runs, its
//! slot names the backend connection running it, so a CancelRequest reaches exactly that one.

use std::sync::{Arc, Mutex};

use dashmap::DashMap;
use rand::Rng;

use crate::backend::conn::{send_cancel, CancelKey};

#[derive(Default)]
pub struct CancelSlot {
    pub secret: i32,
    running_on: Mutex<Option<Arc<CancelKey>>>,
}

impl CancelSlot {
    pub fn set(&self, key: Option<Arc<CancelKey>>) {
        *self.running_on.lock().expect("cancel slot lock") = key;
    }
}

/// The proxy's sessions by the pid it gave them.
#[derive(Default)]
pub struct CancelRegistry {
    slots: DashMap<i32, Arc<CancelSlot>>,
}

impl CancelRegistry {
    /// Registers a new session under a fresh pid; the guard removes it again.
    pub fn register(self: &Arc<Self>) -> (i32, CancelGuard) {
        let mut rng = rand::thread_rng();
        let secret: i32 = rng.gen();
        let slot = Arc::new(CancelSlot {
            secret,
            running_on: Mutex::new(None),
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

    /// Forwards a cancel to the backend running the session's statement, if the secret matches.
    pub async fn cancel(&self, pid: i32, secret: i32) {
        let key = self
            .slots
            .get(&pid)
            .filter(|s| s.secret == secret)
            .and_then(|s| s.running_on.lock().expect("cancel slot lock").clone());
        match key {
            Some(key) => {
                if let Err(e) = send_cancel(&key).await {
                    tracing::warn!(error = %e, "forwarding a cancel request failed");
                }
            }
            None => tracing::debug!(pid, "cancel request for no running statement"),
        }
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
