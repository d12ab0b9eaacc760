//! Holds this proxy's new statements while a chunk changes hands. A cutover is short (bounded
//! by `[moves] cutover_pause_ms`), and a statement held for it is sent afterwards to the
//! chunk's new shard, so no client statement fails for a move. Sessions test one atomic
//! before each frame; only while a cutover runs do they wait.

use std::sync::atomic::{AtomicUsize, Ordering};

use tokio::sync::Notify;

#[derive(Default)]
pub struct Fence {
    holds: AtomicUsize,
    opened: Notify,
}

/// A cutover's hold; the fence opens when the last one is dropped.
pub struct Hold<'a>(&'a Fence);

impl Fence {
    pub fn is_closed(&self) -> bool {
        self.holds.load(Ordering::Acquire) > 0
    }

    pub fn close(&self) -> Hold<'_> {
        self.holds.fetch_add(1, Ordering::AcqRel);
        Hold(self)
    }

    /// Returns once no cutover holds statements.
    pub async fn wait_open(&self) {
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            // Registered before the test, so an opening between the two is not missed.
            opened.as_mut().enable();
            if !self.is_closed() {
                return;
            }
            opened.await;
        }
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if self.0.holds.fetch_sub(1, Ordering::AcqRel) == 1 {
            self.0.opened.notify_waiters();
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::sync::Arc;

    #[tokio::test]
    async fn waiters_pass_once_every_hold_is_gone() {
        let fence = Arc::new(Fence::default());
        let first = fence.close();
        let second = fence.close();
        let waiter = tokio::spawn({
            let fence = fence.clone();
            async move { fence.wait_open().await }
        });
        drop(first);
        tokio::task::yield_now().await;
        assert!(!waiter.is_finished());
        drop(second);
        tokio::time::timeout(std::time::Duration::from_secs(5), waiter)
            .await
            .expect("the waiter passes")
            .unwrap();
        assert!(!fence.is_closed());
    }
}
