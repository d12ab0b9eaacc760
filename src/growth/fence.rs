//! Holds this proxy's new statements while a chunk changes hands. A cutover is short (bounded
//! by `[moves] cutover_pause_ms`), and a statement held for it is sent afterwards to the
//! chunk's new shard, so no client statement fails for a move. Sessions test one atomic
//! before each frame; only while a cutover runs do they wait.
//!
//! Closing the fence is not enough: a statement routed just before may still be on its way to
//! the source, and would reach it after its partitions are gone (an UPDATE of 0 rows where the
//! row exists). Each session therefore shows whether it has work in flight ([`Flight`]): it
//! marks itself busy before it looks at the fence, and idle once every answer is in and no
//! transaction block, batch or COPY is open. The cutover closes the fence and then waits until
//! every session is idle ([`Fence::quiesce`]); from then on no frame passes the fence, as a
//! frame passes a closed fence only to continue a session's open block, batch or COPY. Both sides write before they
//! read, sequentially consistent, so either the session sees the fence closed or the cutover
//! sees the session busy.

use std::collections::HashMap;
use std::sync::atomic::{AtomicBool, AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use tokio::sync::Notify;

/// How often a cutover looks again at the sessions' flights while it waits for quiescence.
const QUIESCE_POLL: Duration = Duration::from_millis(1);

pub struct Fence {
    holds: AtomicUsize,
    opened: Notify,
    flights: Mutex<Flights>,
    /// Until when (milliseconds after `base`) this proxy's chunk map is known current: its
    /// lease was renewed, so a cutover elsewhere waits for this proxy to hold its statements.
    /// Past it (the process stood still, or the catalog was out of reach, for a lease's length),
    /// a cutover may have gone on without this proxy: statements wait until the lease is renewed
    /// and the catalog read again.
    fresh_until: AtomicU64,
    base: Instant,
}

impl Default for Fence {
    fn default() -> Fence {
        Fence {
            holds: AtomicUsize::new(0),
            opened: Notify::new(),
            flights: Mutex::default(),
            fresh_until: AtomicU64::new(u64::MAX),
            base: Instant::now(),
        }
    }
}

#[derive(Default)]
struct Flights {
    next: u64,
    by_session: HashMap<u64, Arc<AtomicBool>>,
}

/// A cutover's hold; the fence opens when the last one is dropped.
pub struct Hold<'a>(&'a Fence);

/// Whether one session has work in flight, as the cutover reads it. Unregistered when dropped.
pub struct Flight {
    fence: Arc<Fence>,
    key: u64,
    busy: Arc<AtomicBool>,
    /// What `busy` holds, as this session last wrote it.
    shown: bool,
}

impl Fence {
    pub fn is_closed(&self) -> bool {
        self.holds.load(Ordering::SeqCst) > 0
    }

    /// Whether a statement may be routed now: no cutover holds statements, and the chunk map
    /// is known current.
    fn is_open(&self) -> bool {
        !self.is_closed() && self.is_fresh()
    }

    pub fn is_fresh(&self) -> bool {
        let until = self.fresh_until.load(Ordering::SeqCst);
        until == u64::MAX || (self.base.elapsed().as_millis() as u64) < until
    }

    /// The chunk map is known current until `until` (the lease renewed, the catalog read).
    pub fn fresh_until(&self, until: Instant) {
        let ms = until.saturating_duration_since(self.base).as_millis() as u64;
        self.fresh_until
            .store(ms.min(u64::MAX - 1), Ordering::SeqCst);
        self.opened.notify_waiters();
    }

    pub fn close(&self) -> Hold<'_> {
        self.holds.fetch_add(1, Ordering::SeqCst);
        Hold(self)
    }

    /// Returns once no cutover holds statements and the chunk map is known current.
    pub async fn wait_open(&self) {
        loop {
            let opened = self.opened.notified();
            tokio::pin!(opened);
            // Registered before the test, so an opening between the two is not missed.
            opened.as_mut().enable();
            if self.is_open() {
                return;
            }
            opened.await;
        }
    }

    /// A session's flight, shown to cutovers until it is dropped.
    pub fn flight(self: &Arc<Self>) -> Flight {
        let busy = Arc::new(AtomicBool::new(false));
        let mut flights = self.flights.lock().expect("flights lock");
        let key = flights.next;
        flights.next += 1;
        flights.by_session.insert(key, busy.clone());
        Flight {
            fence: self.clone(),
            key,
            busy,
            shown: false,
        }
    }

    /// With the fence closed: waits until no session has work in flight; false when that did
    /// not come by `deadline`.
    pub async fn quiesce(&self, deadline: Instant) -> bool {
        debug_assert!(
            self.is_closed(),
            "quiescence means nothing with the fence open"
        );
        loop {
            if !self.any_busy() {
                return true;
            }
            if Instant::now() >= deadline {
                return false;
            }
            tokio::time::sleep(QUIESCE_POLL).await;
        }
    }

    fn any_busy(&self) -> bool {
        let flights = self.flights.lock().expect("flights lock");
        flights
            .by_session
            .values()
            .any(|busy| busy.load(Ordering::SeqCst))
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
    /// Before the session routes and sends a frame: shows it busy and answers whether the
    /// fence is open. A closed fence: the frame must not go unless it continues the session's
    /// open block, batch or COPY; otherwise the session finishes what it has in flight, then
    /// waits.
    pub fn open_for_frame(&mut self) -> bool {
        if !self.shown {
            self.busy.store(true, Ordering::SeqCst);
            self.shown = true;
        }
        self.fence.is_open()
    }

    /// Whether the session still has work in flight now that its frames are sent.
    pub fn settle(&mut self, in_flight: bool) {
        if self.shown != in_flight {
            self.busy.store(in_flight, Ordering::SeqCst);
            self.shown = in_flight;
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
    async fn a_cutover_waits_until_no_session_has_work_in_flight() {
        let fence = Arc::new(Fence::default());
        let mut first = fence.flight();
        let mut second = fence.flight();
        assert!(first.open_for_frame());
        assert!(second.open_for_frame());
        second.settle(false);
        let hold = fence.close();
        let soon = || Instant::now() + Duration::from_millis(20);
        assert!(!fence.quiesce(soon()).await);
        // Its answers in, the session settles idle; a new frame finds the fence closed and
        // shows the session busy until it settles again.
        first.settle(false);
        assert!(fence.quiesce(soon()).await);
        assert!(!second.open_for_frame());
        assert!(!fence.quiesce(soon()).await);
        second.settle(false);
        drop(first);
        assert!(fence.quiesce(soon()).await);
        drop(hold);
        assert!(second.open_for_frame());
        assert_eq!(fence.flights.lock().unwrap().by_session.len(), 1);
    }
}
