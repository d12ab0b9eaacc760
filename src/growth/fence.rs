//! Holds this proxy's new statements while a chunk changes hands. A cutover is short (bounded
//! by `[moves] cutover_pause_ms`), and a statement held for it is sent afterwards to the
//! chunk's new shard, so no client statement fails for a move. Sessions test one atomic
//! before each frame; only while a cutover runs do they wait.
//!
//! Closing the fence is not enough: a statement routed just before may still be on its way to
//! the source, and would reach it after its partitions are gone (an UPDATE of 0 rows where the
//! row exists). Each session therefore shows what it has in flight ([`Flight`]): it marks
//! itself busy before it looks at the fence, and names the shard once its frames are sent.
//! The cutover closes the fence first and then waits until no session is busy or has
//! statements in flight on the source ([`Fence::quiesce`]). Both sides write before they read,
//! sequentially consistent, so either the session sees the fence closed or the cutover sees the
//! session's mark.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

use crate::model::ShardId;

/// How often a cutover looks again at the sessions' flights while it waits for quiescence.
const QUIESCE_POLL: Duration = Duration::from_millis(1);

#[derive(Default)]
pub struct Fence {
    holds: AtomicUsize,
    opened: Notify,
    flights: Mutex<Flights>,
}

#[derive(Default)]
struct Flights {
    next: u64,
    by_session: HashMap<u64, Arc<AtomicU64>>,
}

/// A cutover's hold; the fence opens when the last one is dropped.
pub struct Hold<'a>(&'a Fence);

/// What one session has in flight, as the cutover reads it: nothing, statements on one
/// shard, or something it is still deciding (busy). Unregistered when dropped.
pub struct Flight {
    fence: Arc<Fence>,
    key: u64,
    mark: Arc<AtomicU64>,
    /// The mark is `BUSY` (set since the session last settled it).
    busy: bool,
}

const IDLE: u64 = 0;
const BUSY: u64 = u64::MAX;

fn shard_mark(shard: ShardId) -> u64 {
    u64::from(shard.0) + 1
}

impl Fence {
    pub fn is_closed(&self) -> bool {
        self.holds.load(Ordering::SeqCst) > 0
    }

    pub fn close(&self) -> Hold<'_> {
        self.holds.fetch_add(1, Ordering::SeqCst);
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

    /// A session's flight, shown to cutovers until it is dropped.
    pub fn flight(self: &Arc<Self>) -> Flight {
        let mark = Arc::new(AtomicU64::new(IDLE));
        let mut flights = self.flights.lock().expect("flights lock");
        let key = flights.next;
        flights.next += 1;
        flights.by_session.insert(key, mark.clone());
        Flight {
            fence: self.clone(),
            key,
            mark,
            busy: false,
        }
    }

    /// With the fence closed: waits until no session is busy or has statements in flight on
    /// `source`; false when that did not come by `deadline`.
    pub async fn quiesce(&self, source: ShardId, deadline: Instant) -> bool {
        debug_assert!(
            self.is_closed(),
            "quiescence means nothing with the fence open"
        );
        loop {
            if !self.any_in_flight(source) {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(QUIESCE_POLL).await;
        }
    }

    fn any_in_flight(&self, source: ShardId) -> bool {
        let flights = self.flights.lock().expect("flights lock");
        flights.by_session.values().any(|mark| {
            let mark = mark.load(Ordering::SeqCst);
            mark == BUSY || mark == shard_mark(source)
        })
    }
}

impl Drop for Hold<'_> {
    fn drop(&mut self) {
        if self.0.holds.fetch_sub(1, Ordering::SeqCst) == 1 {
            self.0.opened.notify_waiters();
        }
    }
}

impl Flight {
    /// Before the session routes and sends a frame: marks it busy (once until the next
    /// [`Flight::settle`]) and answers whether the fence is open. A closed fence: the frame
    /// must not go; the session finishes what it has in flight, then waits.
    pub fn open_for_frame(&mut self) -> bool {
        if !self.busy {
            self.mark.store(BUSY, Ordering::SeqCst);
            self.busy = true;
        }
        !self.fence.is_closed()
    }

    /// What the session has in flight now that its frames are sent: statements on `shard`
    /// (`None`: on a shard it cannot name yet, which counts as busy), or nothing.
    pub fn settle(&mut self, in_flight: Option<Option<ShardId>>) {
        let mark = match in_flight {
            None => IDLE,
            Some(Some(shard)) => shard_mark(shard),
            Some(None) => BUSY,
        };
        self.busy = mark == BUSY;
        if self.mark.load(Ordering::Relaxed) != mark {
            self.mark.store(mark, Ordering::SeqCst);
        }
    }
}

impl Drop for Flight {
    fn drop(&mut self) {
        let mut flights = self.fence.flights.lock().expect("flights lock");
        flights.by_session.remove(&self.key);
    }
}

#[cfg(test)]
mod tests {
    use super::*;

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
        tokio::time::timeout(Duration::from_secs(5), waiter)
            .await
            .expect("the waiter passes")
            .unwrap();
        assert!(!fence.is_closed());
    }

    #[tokio::test]
    async fn a_cutover_waits_for_statements_in_flight_on_its_source_only() {
        let fence = Arc::new(Fence::default());
        let source = ShardId(1);
        let mut on_source = fence.flight();
        let mut elsewhere = fence.flight();
        assert!(on_source.open_for_frame());
        on_source.settle(Some(Some(source)));
        assert!(elsewhere.open_for_frame());
        elsewhere.settle(Some(Some(ShardId(2))));
        let hold = fence.close();
        let soon = || Instant::now() + Duration::from_millis(20);
        assert!(!fence.quiesce(source, soon()).await);
        // Its statement answered, the session settles idle; a new frame finds the fence closed.
        on_source.settle(None);
        assert!(fence.quiesce(source, soon()).await);
        assert!(!elsewhere.open_for_frame());
        // Busy while it decides: the cutover cannot tell where the frame goes.
        assert!(!fence.quiesce(source, soon()).await);
        elsewhere.settle(None);
        drop(on_source);
        assert!(fence.quiesce(source, soon()).await);
        drop(hold);
        assert!(elsewhere.open_for_frame());
        assert_eq!(fence.flights.lock().unwrap().by_session.len(), 1);
    }
}
