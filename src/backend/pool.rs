//! Per-shard pools of backend connections: bb8 owns the connections (creation, the size limit,
//! health, idle timeout); in front of it sits a small stack of connections that clients just
//! gave back, so the common checkout (a connection freed a moment ago) is a mutex-guarded pop
//! instead of bb8's `get` with its timeout future, statistics and notifications. Measured with
//! `perf` under pgbench, bb8's get and put were about a fifth of the proxy's user time per
//! transaction (BENCHMARKS.md).
//!
//! A connection on the stack counts as checked out for bb8. So that this never starves anyone,
//! a connection goes onto the stack only while nobody waits inside bb8 for one, and a sweep
//! hands connections that sat on the stack for a while back to bb8, where its idle timeout and
//! `SHOW POOLS` see them as idle.

use std::collections::HashMap;
use std::sync::atomic::{AtomicU64, AtomicUsize, Ordering};
use std::sync::{Arc, Mutex, OnceLock};
use std::time::{Duration, Instant};

use super::{BackendConn, BackendError};
use crate::config::{Config, Endpoint};
use crate::model::ShardId;

/// A pooled connection whose idle time is short is trusted without a round trip; an older one
/// is checked with an empty query before a client gets it.
const TRUST_IDLE_FOR: Duration = Duration::from_secs(5);

/// The sweep's period: a connection waits on the stack of just-returned ones for one to two
/// periods before the sweep gives it back to bb8. Connections on the stack are younger than
/// `TRUST_IDLE_FOR`, so taking one needs no clock reading.
const SWEEP_EVERY: Duration = Duration::from_secs(1);

pub struct ShardManager {
    shard: ShardId,
    endpoint: Endpoint,
    connect_timeout: Duration,
    /// The ParameterStatus values of the first connection made to this shard.
    first_params: Arc<OnceLock<HashMap<String, String>>>,
    /// The shard's type OIDs as the first shard's (none for the first shard).
    types: Option<Arc<super::ShardTypes>>,
}

/// What the pool hands out: the connection and when it last went back to the pool.
pub struct PooledBackend {
    pub shard: ShardId,
    /// Boxed so that handing a connection around (pool, session, stack) moves a pointer.
    pub conn: Box<BackendConn>,
    pub returned_at: Instant,
    /// The sweep period in which the connection went onto the stack of just-returned ones.
    hot_since: u64,
    /// Given back through [`ShardPool::release`]. One dropped any other way (with the future
    /// of a statement cut short, say) is in an unknown state — a statement may still run on
    /// it, its results unread — so bb8 closes it rather than hand it to the next client.
    released: bool,
}

impl PooledBackend {
    /// Whether the server spoke or hung up while the connection sat idle in the pool. An idle
    /// connection is owed nothing, so either means it must not serve a client: its shard
    /// stopped or restarted, or an administrator ended the backend (which says FATAL first).
    fn spoke_while_idle(&self) -> bool {
        self.conn.stream.spoke()
    }

    /// A connection idle for long is asked an empty query before a client gets it.
    /// A server that does not answer within `limit` counts as gone.
    async fn check_if_stale(&mut self, limit: Duration) -> Result<(), BackendError> {
        if self.returned_at.elapsed() < TRUST_IDLE_FOR {
            return Ok(());
        }
        match tokio::time::timeout(limit, self.conn.run_internal("")).await {
            Ok(Ok(Ok(()))) => Ok(()),
            Ok(Err(e)) => Err(e),
            Ok(Ok(Err(_))) | Err(_) => Err(BackendError::Closed),
        }
    }
}

impl bb8::ManageConnection for ShardManager {
    type Connection = PooledBackend;
    type Error = BackendError;

    async fn connect(&self) -> Result<PooledBackend, BackendError> {
        // Functions are made on every shard, while the objects their bodies name may live on the
        // first shard only (unsharded tables): the first shard checks a body as PostgreSQL does,
        // the others take what it accepted.
        let check_bodies = self.shard == ShardId(0);
        let mut conn = Box::new(
            BackendConn::connect(&self.endpoint, check_bodies, self.connect_timeout).await?,
        );
        conn.types = self.types.clone();
        let _ = self.first_params.set(conn.params.clone());
        Ok(PooledBackend {
            shard: self.shard,
            conn,
            returned_at: Instant::now(),
            hot_since: 0,
            released: false,
        })
    }

    async fn is_valid(&self, c: &mut PooledBackend) -> Result<(), BackendError> {
        c.check_if_stale(self.connect_timeout).await
    }

    fn has_broken(&self, c: &mut PooledBackend) -> bool {
        c.conn.broken || !c.released
    }
}

/// What bb8 met connecting to a shard. bb8 gives a checkout that waits for a new connection
/// only a timeout, never the connection's own error; this passes the error on, so that a
/// checkout fails as soon as its shard is known unreachable, saying why.
#[derive(Debug, Clone)]
struct ConnectErrors(Arc<tokio::sync::watch::Sender<String>>);

impl bb8::ErrorSink<BackendError> for ConnectErrors {
    fn sink(&self, error: BackendError) {
        self.0.send_replace(error.to_string());
    }

    fn boxed_clone(&self) -> Box<dyn bb8::ErrorSink<BackendError>> {
        Box::new(self.clone())
    }
}

pub type Pool = bb8::Pool<ShardManager>;
pub type Pooled = bb8::PooledConnection<'static, ShardManager>;

pub struct ShardPool {
    pub id: ShardId,
    pub name: String,
    pub endpoint: Endpoint,
    pool: Pool,
    /// Connections clients gave back recently, most recent last.
    hot: Mutex<Vec<Pooled>>,
    /// Checkouts waiting inside bb8: while there are any, returned connections go to bb8.
    waiting: AtomicUsize,
    /// Counts sweeps, which mark the age of connections on the stack.
    sweeps: AtomicU64,
    first_params: Arc<OnceLock<HashMap<String, String>>>,
    wait: Duration,
    connect_errors: ConnectErrors,
    /// How many cancel requests to this shard's processes are on their way (see
    /// [`ShardPool::cancel_starts`]); read on every release, so kept apart from `fences`.
    cancels_in_flight: AtomicUsize,
    fences: Mutex<Fences>,
}

/// Connections a cancel request was sent for, kept from other clients until PostgreSQL has
/// processed it: a SIGINT that reaches the process after its statement ended would cancel
/// whatever it runs next, perhaps another client's statement.
#[derive(Default)]
struct Fences {
    /// Backend process id → cancel requests on their way to it.
    in_flight: HashMap<i32, usize>,
    /// Connections given back while a cancel for them was on its way.
    held: Vec<Pooled>,
}

/// Counts a checkout as waiting in bb8 for as long as it exists (a cancelled checkout too).
struct Waiting<'a>(&'a AtomicUsize);

impl<'a> Waiting<'a> {
    fn new(counter: &'a AtomicUsize) -> Self {
        counter.fetch_add(1, Ordering::SeqCst);
        Waiting(counter)
    }
}

impl Drop for Waiting<'_> {
    fn drop(&mut self) {
        self.0.fetch_sub(1, Ordering::SeqCst);
    }
}

/// Connections of one shard as `SHOW POOLS` reports them.
pub struct PoolState {
    pub connections: u32,
    pub idle: u32,
}

impl ShardPool {
    /// A connection for one client transaction (or statement). Give it back with
    /// [`ShardPool::release`]; dropping it instead hands it to bb8, which is right for a
    /// connection in an unknown state only if it is marked broken.
    ///
    /// The staleness check is ours rather than bb8's `test_on_check_out`: bb8's goes through
    /// an extra await on every checkout, which the common case (a connection just returned)
    /// does not need.
    pub async fn get(&self) -> Result<Pooled, BackendError> {
        match self.get_now() {
            Some(c) => Ok(c),
            // Boxed: the rare path's future is large, and the common path should not carry it.
            hot => {
                let mut c = Box::pin(self.get_checked(hot)).await?;
                c.released = false;
                Ok(c)
            }
        }
    }

    /// A connection that passed the staleness check, starting with `first` if there is one.
    async fn get_checked(&self, mut first: Option<Pooled>) -> Result<Pooled, BackendError> {
        loop {
            let mut c = match first.take() {
                Some(c) => c,
                None => self.get_from_bb8().await?,
            };
            if !self.still_quiet(&mut c) {
                continue;
            }
            match c.check_if_stale(self.wait).await {
                Ok(()) => return Ok(c),
                Err(e) => {
                    tracing::debug!(error = %e, "dropping a stale pooled connection");
                    c.conn.broken = true;
                }
            }
        }
    }

    async fn get_from_bb8(&self) -> Result<Pooled, BackendError> {
        let _waiting = Waiting::new(&self.waiting);
        // A connection pushed just before this checkout counted as waiting is on the stack now:
        // the push and this pop are ordered by the stack's mutex.
        if let Some(c) = self.get_now() {
            return Ok(c);
        }
        let mut failed_connects = self.connect_errors.0.subscribe();
        let got = tokio::select! {
            got = self.pool.get_owned() => got,
            _ = failed_connects.changed() => {
                return Err(BackendError::Unreachable {
                    shard: self.name.clone(),
                    reason: failed_connects.borrow().clone(),
                });
            }
        };
        match got {
            Ok(c) => Ok(c),
            Err(bb8::RunError::User(e)) => Err(e),
            Err(bb8::RunError::TimedOut) => Err(BackendError::PoolTimeout {
                shard: self.name.clone(),
                waited_ms: self.wait.as_millis() as u64,
            }),
        }
    }

    /// A connection a client gave back a moment ago, if there is one: no wait, no check.
    pub fn get_now(&self) -> Option<Pooled> {
        loop {
            let mut c = self.hot.lock().unwrap_or_else(|e| e.into_inner()).pop()?;
            if self.still_quiet(&mut c) {
                c.released = false;
                return Some(c);
            }
        }
    }

    /// Whether `c`, just taken from the pool, may serve a client; if its server spoke or hung
    /// up meanwhile, it is marked to be closed instead.
    fn still_quiet(&self, c: &mut Pooled) -> bool {
        if c.spoke_while_idle() {
            tracing::debug!(shard = %self.name, "dropping a pooled connection its server ended");
            c.conn.broken = true;
            return false;
        }
        true
    }

    /// Gives back a connection that is idle: no transaction open, nothing expected from it.
    /// A cancel request is about to be sent to backend process `pid`: a connection to it given
    /// back from now on waits for [`ShardPool::cancel_done`] before another client may take it.
    pub fn cancel_starts(&self, pid: i32) {
        let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
        *fences.in_flight.entry(pid).or_default() += 1;
        self.cancels_in_flight.fetch_add(1, Ordering::SeqCst);
    }

    /// PostgreSQL has processed the cancel request for `pid` (it closed the request's
    /// connection once the process was signalled), or it was not sent.
    pub fn cancel_done(&self, pid: i32) {
        let released = {
            let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
            self.cancels_in_flight.fetch_sub(1, Ordering::SeqCst);
            let left = fences.in_flight.get_mut(&pid).map(|n| {
                *n -= 1;
                *n
            });
            if left != Some(0) {
                return;
            }
            fences.in_flight.remove(&pid);
            let (mine, others) = std::mem::take(&mut fences.held)
                .into_iter()
                .partition(|c| c.conn.cancel.pid == pid);
            fences.held = others;
            mine
        };
        // The signal arrived: at an idle process PostgreSQL drops it as it reads the next
        // command.
        for c in released {
            self.release(c);
        }
    }

    pub fn release(&self, mut c: Pooled) {
        if c.conn.broken {
            return;
        }
        if self.cancels_in_flight.load(Ordering::SeqCst) > 0 {
            let mut fences = self.fences.lock().unwrap_or_else(|e| e.into_inner());
            if fences.in_flight.contains_key(&c.conn.cancel.pid) {
                fences.held.push(c);
                return;
            }
        }
        c.released = true;
        // A result ends before release (ReadyForQuery clears it); the next holder's results
        // must never be read by this one's description.
        c.conn.binary_arrays = None;
        let mut hot = self.hot.lock().unwrap_or_else(|e| e.into_inner());
        if self.waiting.load(Ordering::SeqCst) == 0 {
            c.hot_since = self.sweeps.load(Ordering::Relaxed);
            hot.push(c);
        } else {
            drop(hot);
            // bb8 hands it to a waiting checkout.
            c.returned_at = Instant::now();
        }
    }

    /// Hands connections that sat on the stack for a whole sweep period back to bb8.
    fn sweep(&self) {
        let now = self.sweeps.fetch_add(1, Ordering::Relaxed) + 1;
        let cold: Vec<Pooled> = {
            let mut hot = self.hot.lock().unwrap_or_else(|e| e.into_inner());
            // The stack is ordered by return time: the oldest are at the bottom.
            let fresh_from = hot
                .iter()
                .position(|c| c.hot_since + 1 >= now)
                .unwrap_or(hot.len());
            hot.drain(..fresh_from).collect()
        };
        // Idle for one to two periods: the earlier bound keeps the staleness check cautious.
        let returned_at = Instant::now()
            .checked_sub(SWEEP_EVERY * 2)
            .unwrap_or_else(Instant::now);
        for mut c in cold {
            c.returned_at = returned_at;
        }
    }

    pub fn state(&self) -> PoolState {
        let st = self.pool.state();
        let hot = self.hot.lock().unwrap_or_else(|e| e.into_inner()).len() as u32;
        PoolState {
            connections: st.connections,
            idle: st.idle_connections + hot,
        }
    }

    /// The server's startup parameters (server_version, DateStyle …), once a connection exists.
    pub fn server_params(&self) -> Option<&HashMap<String, String>> {
        self.first_params.get()
    }
}

/// One pool per configured shard, in configuration order.
pub struct Pools {
    shards: Vec<ShardPool>,
    types: super::TypeOids,
}

impl Pools {
    pub fn new(config: &Config) -> Pools {
        let wait = Duration::from_millis(config.pool.connect_timeout_ms);
        let types = super::TypeOids::new(config.shards.len());
        let shards = config
            .shards
            .iter()
            .enumerate()
            .map(|(i, s)| {
                let endpoint = config.shard_endpoint(i);
                let first_params = Arc::new(OnceLock::new());
                let id = ShardId(i as u32);
                let manager = ShardManager {
                    shard: id,
                    endpoint: endpoint.clone(),
                    connect_timeout: wait,
                    first_params: first_params.clone(),
                    types: types.of(id),
                };
                let connect_errors =
                    ConnectErrors(Arc::new(tokio::sync::watch::Sender::new(String::new())));
                let pool = bb8::Pool::builder()
                    .max_size(config.pool.size)
                    .min_idle(None)
                    .connection_timeout(wait)
                    .idle_timeout(Some(Duration::from_secs(config.pool.idle_timeout_s)))
                    .retry_connection(false)
                    .test_on_check_out(false)
                    .error_sink(Box::new(connect_errors.clone()))
                    .build_unchecked(manager);
                ShardPool {
                    id,
                    name: s.name.clone(),
                    endpoint,
                    pool,
                    hot: Mutex::new(Vec::new()),
                    waiting: AtomicUsize::new(0),
                    cancels_in_flight: AtomicUsize::new(0),
                    fences: Mutex::new(Fences::default()),
                    sweeps: AtomicU64::new(0),
                    first_params,
                    wait,
                    connect_errors,
                }
            })
            .collect();
        Pools { shards, types }
    }

    pub fn shard(&self, id: ShardId) -> &ShardPool {
        &self.shards[id.index()]
    }

    /// The shards' type OIDs as the first shard's.
    pub fn types(&self) -> &super::TypeOids {
        &self.types
    }

    pub fn all(&self) -> &[ShardPool] {
        &self.shards
    }

    /// Sweeps every shard's stack of returned connections until `stop` completes.
    pub async fn sweep_until(&self, stop: impl std::future::Future<Output = ()>) {
        tokio::pin!(stop);
        let mut tick = tokio::time::interval(SWEEP_EVERY);
        tick.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = tick.tick() => self.shards.iter().for_each(ShardPool::sweep),
            }
        }
    }
}
