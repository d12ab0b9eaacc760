//! Runs every session of a current-thread runtime inside one tokio task.
//!
//! As its own tokio task, a session paid for each wake-up twice over: the task's state changes
//! and reference counts (four or five atomic instructions) and a turn of tokio's run queue, about
//! 550 instructions per transaction in all (`bench/profile.sh`). On one thread none of that is
//! needed: here a session's waker puts the session's slot number on a plain list, and the driver
//! task polls the listed sessions. The driver itself is woken through tokio once per batch of
//! events, not once per event.
//!
//! Wakers may be called from any thread (a blocking-pool thread finishing a DNS lookup, say), so
//! a wake from another thread goes through a mutex-guarded list and tokio's own waker of the
//! driver task; only wakes on the runtime's thread take the plain list. A waker's data is a
//! record that is never freed (one per slot number, reused by later sessions), so a waker that
//! outlives its session wakes whatever session has the slot then: a spurious poll, which every
//! future tolerates.

use std::cell::UnsafeCell;
use std::future::Future;
use std::panic::AssertUnwindSafe;
use std::pin::Pin;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Mutex, OnceLock};
use std::task::{Context, Poll, RawWaker, RawWakerVTable, Waker};

/// A session's future, or one stage of it.
pub type SessionFuture = Pin<Box<dyn Future<Output = Next> + Send>>;

/// What a session's future hands back when it completes: the end of the session, or the
/// future that carries it on. Client startup hands over to the session loop this way, so the
/// loop is polled directly on every wake-up rather than through the startup's future.
pub enum Next {
    Done,
    Continue(SessionFuture),
}

/// Starts and stops the sessions of the runtime it was created on.
pub struct SessionDriver {
    shared: &'static Shared,
    task: tokio::task::JoinHandle<()>,
}

impl SessionDriver {
    /// Starts the driver task. Only for a current-thread runtime: on a multi-threaded one the
    /// sessions would all be confined to the one thread the task happens to run on.
    pub fn start() -> SessionDriver {
        // Never freed: wakers anywhere may point into it for as long as the process lives. One
        // per proxy started, a few hundred bytes.
        let shared: &'static Shared = Box::leak(Box::new(Shared {
            owner: OnceLock::new(),
            driver_waker: OnceLock::new(),
            local: UnsafeCell::new(Local::default()),
            remote: Mutex::new(Remote::default()),
            remote_pending: AtomicBool::new(false),
            #[cfg(debug_assertions)]
            local_borrowed: AtomicBool::new(false),
        }));
        let task = tokio::spawn(Driver {
            shared,
            sessions: Vec::new(),
            wakers: Vec::new(),
            free: Vec::new(),
            batch: Vec::new(),
        });
        SessionDriver { shared, task }
    }

    /// Adds a session; it runs until it completes or the driver stops.
    pub fn spawn(&self, session: impl Future<Output = Next> + Send + 'static) {
        self.shared
            .send(|remote| remote.incoming.push(Box::pin(session)));
    }

    /// Drops every session (as aborting their tasks would) and waits for the driver to end.
    pub async fn stop(self) {
        self.shared.send(|remote| remote.stop = true);
        let _ = self.task.await;
    }
}

struct Shared {
    /// The thread the driver runs on (see [`thread_mark`]), known from its first poll.
    owner: OnceLock<usize>,
    /// The driver task's own waker, known from its first poll (a task's waker never changes).
    driver_waker: OnceLock<Waker>,
    /// Touched only on the owner thread, and never across a call that may wake a session.
    local: UnsafeCell<Local>,
    remote: Mutex<Remote>,
    /// Something waits in `remote`: lets the driver skip the mutex when nothing does.
    remote_pending: AtomicBool,
    /// `local` is borrowed: checks in debug builds that no two borrows overlap.
    #[cfg(debug_assertions)]
    local_borrowed: AtomicBool,
}

// SAFETY: `local` is only accessed on the owner thread (`wake` checks it; the driver task is
// what sets it and, on a current-thread runtime, never runs anywhere else), in short borrows
// that never overlap. Everything else is Sync on its own.
unsafe impl Sync for Shared {}

#[derive(Default)]
struct Local {
    /// Slot numbers of woken sessions, in wake order.
    ready: Vec<u32>,
    /// Whether a slot is on `ready` already, by slot number.
    queued: Vec<bool>,
    /// The driver is polling: a wake needs no wake of the driver.
    running: bool,
    /// The driver task has been woken and not polled since.
    notified: bool,
}

#[derive(Default)]
struct Remote {
    woken: Vec<u32>,
    incoming: Vec<SessionFuture>,
    stop: bool,
}

impl Shared {
    /// Runs `f` on `local`. Only on the owner thread, and never from inside another `f`: both
    /// are checked in debug builds.
    fn with_local<R>(&self, f: impl FnOnce(&mut Local) -> R) -> R {
        debug_assert_eq!(
            self.owner.get(),
            Some(&thread_mark()),
            "the driver's local state touched off its thread"
        );
        #[cfg(debug_assertions)]
        assert!(
            !self.local_borrowed.swap(true, Ordering::Relaxed),
            "overlapping borrows of the driver's local state"
        );
        // SAFETY: on the owner thread (see `Shared`), and the borrow ends when `f` returns: `f`
        // gets no way to reach `local` again (its result cannot borrow it), and what it does
        // with the lists wakes no session.
        let result = f(unsafe { &mut *self.local.get() });
        #[cfg(debug_assertions)]
        self.local_borrowed.store(false, Ordering::Relaxed);
        result
    }

    /// Hands something to the driver from any thread, and wakes it.
    fn send(&self, put: impl FnOnce(&mut Remote)) {
        put(&mut self.remote.lock().unwrap_or_else(|e| e.into_inner()));
        self.remote_pending.store(true, Ordering::Release);
        // Before its first poll there is no waker, and that poll looks at `remote` anyway.
        if let Some(waker) = self.driver_waker.get() {
            waker.wake_by_ref();
        }
    }

    fn wake(&self, slot: u32) {
        if self.owner.get() != Some(&thread_mark()) {
            return self.send(|remote| remote.woken.push(slot));
        }
        // No borrow of `local` is live here: the driver holds none while it polls a session,
        // which is the only time session code (and so this waker) runs on this thread during
        // the driver's poll.
        let wake_driver = self.with_local(|local| {
            local.queue(slot);
            let wake = !local.running && !local.notified;
            local.notified |= wake;
            wake
        });
        if wake_driver {
            if let Some(waker) = self.driver_waker.get() {
                waker.wake_by_ref();
            }
        }
    }
}

impl Local {
    /// `slot` exists: `queued` grows with the slots, before any waker for a new one is made.
    fn queue(&mut self, slot: u32) {
        let queued = &mut self.queued[slot as usize];
        if !*queued {
            *queued = true;
            self.ready.push(slot);
        }
    }
}

/// An address that differs between threads, read without an atomic instruction (unlike
/// `std::thread::current().id()`, which clones an `Arc`).
fn thread_mark() -> usize {
    thread_local! {
        static MARK: u8 = const { 0 };
    }
    MARK.with(|m| m as *const u8 as usize)
}

/// What a session's waker points to.
struct SlotWaker {
    shared: &'static Shared,
    slot: u32,
}

const VTABLE: RawWakerVTable = RawWakerVTable::new(clone_waker, wake_waker, wake_waker, drop_waker);

fn raw_waker(data: &'static SlotWaker) -> RawWaker {
    RawWaker::new(data as *const SlotWaker as *const (), &VTABLE)
}

unsafe fn clone_waker(data: *const ()) -> RawWaker {
    // SAFETY: `data` came from `raw_waker`, a `&'static SlotWaker`.
    raw_waker(unsafe { &*(data as *const SlotWaker) })
}

unsafe fn wake_waker(data: *const ()) {
    // SAFETY: as in `clone_waker`.
    let w = unsafe { &*(data as *const SlotWaker) };
    w.shared.wake(w.slot);
}

unsafe fn drop_waker(_: *const ()) {}

/// The driver task: owns the sessions by slot number.
struct Driver {
    shared: &'static Shared,
    sessions: Vec<Option<SessionFuture>>,
    /// One waker per slot number, made once.
    wakers: Vec<Waker>,
    free: Vec<u32>,
    /// The slots being polled this turn (kept for its allocation).
    batch: Vec<u32>,
}

impl Driver {
    fn insert(&mut self, session: SessionFuture) {
        let slot = match self.free.pop() {
            Some(slot) => {
                self.sessions[slot as usize] = Some(session);
                slot
            }
            None => {
                let slot = self.sessions.len() as u32;
                self.sessions.push(Some(session));
                self.shared.with_local(|local| local.queued.push(false));
                let data: &'static SlotWaker = Box::leak(Box::new(SlotWaker {
                    shared: self.shared,
                    slot,
                }));
                // SAFETY: the vtable's functions uphold the RawWaker contract for this data,
                // which is 'static and Sync.
                self.wakers
                    .push(unsafe { Waker::from_raw(raw_waker(data)) });
                slot
            }
        };
        self.shared.with_local(|local| local.queue(slot));
    }

    /// Takes what other threads handed over. Returns true when the driver is to stop.
    fn take_remote(&mut self) -> bool {
        // A plain load first: the swap is a locked instruction, and usually nothing is pending.
        self.shared.remote_pending.load(Ordering::Relaxed) && self.take_remote_now()
    }

    /// Kept out of the driver's poll, whose common case does not need it.
    #[cold]
    #[inline(never)]
    fn take_remote_now(&mut self) -> bool {
        if !self.shared.remote_pending.swap(false, Ordering::Acquire) {
            return false;
        }
        let (woken, incoming, stop) = {
            let mut remote = self.shared.remote.lock().unwrap_or_else(|e| e.into_inner());
            (
                std::mem::take(&mut remote.woken),
                std::mem::take(&mut remote.incoming),
                remote.stop,
            )
        };
        for slot in woken {
            self.shared.with_local(|local| local.queue(slot));
        }
        for session in incoming {
            self.insert(session);
        }
        stop
    }

    fn poll_slot(&mut self, slot: u32) {
        let Some(session) = self
            .sessions
            .get_mut(slot as usize)
            .and_then(Option::as_mut)
        else {
            // A waker that outlived its session.
            return;
        };
        let mut cx = Context::from_waker(&self.wakers[slot as usize]);
        loop {
            // Outside tokio's cooperative budget: as one task, all sessions would share one
            // budget per poll of the driver, and a socket poll refused for want of budget
            // returns Pending without registering the waker, which `socket::ReadArm` would
            // take for a registration (a session's own loop keeps its own budget instead).
            // A panicking session ends alone, as a panicking task would.
            let polled = std::panic::catch_unwind(AssertUnwindSafe(|| {
                Pin::new(&mut tokio::task::unconstrained(session.as_mut())).poll(&mut cx)
            }));
            match polled {
                Ok(Poll::Pending) => return,
                Ok(Poll::Ready(Next::Continue(next))) => *session = next,
                Ok(Poll::Ready(Next::Done)) => break,
                Err(_) => {
                    tracing::error!("a session panicked; its client is disconnected");
                    break;
                }
            }
        }
        self.sessions[slot as usize] = None;
        self.free.push(slot);
    }
}

impl Future for Driver {
    type Output = ();

    fn poll(self: Pin<&mut Self>, cx: &mut Context<'_>) -> Poll<()> {
        let this = self.get_mut();
        let shared = this.shared;
        if shared.owner.get().is_none() {
            let _ = shared.owner.set(thread_mark());
            let _ = shared.driver_waker.set(cx.waker().clone());
        }
        if this.take_remote() {
            // Dropping the sessions is how they end: each gives back or closes its backend
            // connection in its drop.
            this.sessions.clear();
            return Poll::Ready(());
        }
        let mut batch = std::mem::take(&mut this.batch);
        shared.with_local(|local| {
            local.notified = false;
            local.running = true;
            std::mem::swap(&mut batch, &mut local.ready);
            for &slot in &batch {
                local.queued[slot as usize] = false;
            }
        });
        for &slot in &batch {
            this.poll_slot(slot);
        }
        batch.clear();
        this.batch = batch;
        // Sessions woken meanwhile (one yielding its turn, one handed a connection by another)
        // wait for the next poll, so the runtime's other tasks and its I/O get their turn.
        let again = shared.with_local(|local| {
            local.running = false;
            let again = !local.ready.is_empty() || shared.remote_pending.load(Ordering::Acquire);
            local.notified |= again;
            again
        });
        if again {
            cx.waker().wake_by_ref();
        }
        Poll::Pending
    }
}

#[cfg(test)]
mod tests {
    use std::sync::atomic::{AtomicUsize, Ordering};
    use std::sync::Arc;
    use std::time::Duration;

    use super::{Next, SessionDriver};

    fn current_thread() -> tokio::runtime::Runtime {
        tokio::runtime::Builder::new_current_thread()
            .enable_all()
            .build()
            .unwrap()
    }

    #[test]
    fn sessions_woken_by_each_other_and_by_other_threads_complete() {
        current_thread().block_on(async {
            let driver = SessionDriver::start();
            let done = Arc::new(AtomicUsize::new(0));
            let (all_done_tx, all_done) = tokio::sync::oneshot::channel();
            let all_done_tx = Arc::new(std::sync::Mutex::new(Some(all_done_tx)));
            // A chain: each session waits for the previous one's message, the first for a
            // message from a plain thread.
            let (first_tx, mut rx) = tokio::sync::mpsc::channel::<u32>(1);
            for i in 0..50u32 {
                let (tx, next_rx) = tokio::sync::mpsc::channel::<u32>(1);
                let mut my_rx = std::mem::replace(&mut rx, next_rx);
                let done = done.clone();
                let all_done_tx = all_done_tx.clone();
                driver.spawn(async move {
                    let got = my_rx.recv().await.unwrap();
                    assert_eq!(got, i);
                    if tx.send(i + 1).await.is_err() {
                        // The last one: nobody listens.
                    }
                    if done.fetch_add(1, Ordering::SeqCst) + 1 == 50 {
                        let _ = all_done_tx.lock().unwrap().take().unwrap().send(());
                    }
                    Next::Done
                });
            }
            let _keep_last_receiver = rx;
            std::thread::spawn(move || {
                std::thread::sleep(Duration::from_millis(20));
                first_tx.blocking_send(0).unwrap();
            });
            tokio::time::timeout(Duration::from_secs(10), all_done)
                .await
                .expect("every session completed")
                .unwrap();
            driver.stop().await;
        });
    }

    #[test]
    fn a_panicking_session_ends_alone_and_stop_drops_the_rest() {
        struct Dropped(Arc<AtomicUsize>);
        impl Drop for Dropped {
            fn drop(&mut self) {
                self.0.fetch_add(1, Ordering::SeqCst);
            }
        }
        current_thread().block_on(async {
            let driver = SessionDriver::start();
            let dropped = Arc::new(AtomicUsize::new(0));
            driver.spawn(async { panic!("this session fails") });
            let (tx, rx) = tokio::sync::oneshot::channel();
            let guard = Dropped(dropped.clone());
            driver.spawn(async move {
                let _guard = guard;
                tokio::time::sleep(Duration::from_millis(50)).await;
                let _ = tx.send(());
                std::future::pending::<Next>().await
            });
            rx.await.expect("the other session went on after the panic");
            assert_eq!(dropped.load(Ordering::SeqCst), 0);
            driver.stop().await;
            assert_eq!(
                dropped.load(Ordering::SeqCst),
                1,
                "stop dropped the waiting session"
            );
        });
    }

    #[test]
    fn a_session_continues_with_the_future_it_hands_on() {
        current_thread().block_on(async {
            let driver = SessionDriver::start();
            let (tx, rx) = tokio::sync::oneshot::channel();
            driver.spawn(async move {
                tokio::task::yield_now().await;
                Next::Continue(Box::pin(async move {
                    tokio::time::sleep(Duration::from_millis(10)).await;
                    let _ = tx.send("second stage");
                    Next::Done
                }))
            });
            let said = tokio::time::timeout(Duration::from_secs(10), rx).await;
            assert_eq!(said.expect("in time").expect("sent"), "second stage");
            driver.stop().await;
        });
    }

    #[test]
    fn sessions_do_not_share_the_cooperative_budget() {
        const SESSIONS: usize = 300;
        current_thread().block_on(async {
            let driver = SessionDriver::start();
            let starved = Arc::new(AtomicUsize::new(0));
            let done = Arc::new(AtomicUsize::new(0));
            // All are polled in the driver's first turn: more than tokio's budget of 128 units
            // per task poll, if they shared it.
            for _ in 0..SESSIONS {
                let (starved, done) = (starved.clone(), done.clone());
                driver.spawn(async move {
                    tokio::task::consume_budget().await;
                    if !tokio::task::coop::has_budget_remaining() {
                        starved.fetch_add(1, Ordering::SeqCst);
                    }
                    done.fetch_add(1, Ordering::SeqCst);
                    Next::Done
                });
            }
            while done.load(Ordering::SeqCst) < SESSIONS {
                tokio::time::sleep(Duration::from_millis(5)).await;
            }
            assert_eq!(starved.load(Ordering::SeqCst), 0);
            driver.stop().await;
        });
    }
}
