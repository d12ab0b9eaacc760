//! Every metric the proxy exports, in one place: name (prefixed `shardwire_`), unit suffix and
//! bounded labels (`shard`, bounded by the configuration; `route`: single or multi). Call sites use the
//! handles in [`Metrics`], never metric names, and the handles are made once per proxy, so the
//! per-statement cost is an atomic add.

use std::net::SocketAddr;

use metrics::{
    counter, describe_counter, describe_gauge, describe_histogram, gauge, histogram, Counter,
    Gauge, Histogram, Unit,
};

pub const SESSIONS_TOTAL: &str = "shardwire_client_sessions_total";
pub const SESSIONS_ACTIVE: &str = "shardwire_client_sessions_active";
pub const AUTH_FAILURES_TOTAL: &str = "shardwire_auth_failures_total";
pub const TRANSACTIONS_TOTAL: &str = "shardwire_backend_transactions_total";
pub const PINNED_SESSIONS_TOTAL: &str = "shardwire_pinned_sessions_total";
pub const BACKEND_ERRORS_TOTAL: &str = "shardwire_backend_errors_total";
pub const CANCELS_TOTAL: &str = "shardwire_cancel_requests_total";
pub const STATEMENT_PARSES_TOTAL: &str = "shardwire_statement_parses_total";
pub const ROUTED_STATEMENTS_TOTAL: &str = "shardwire_routed_statements_total";
pub const DISTRIBUTED_COMMITS_TOTAL: &str = "shardwire_distributed_commits_total";
pub const ROW_MOVEMENT_STATEMENTS_TOTAL: &str = "shardwire_row_movement_statements_total";
pub const ROW_MOVEMENT_ROWS_TOTAL: &str = "shardwire_row_movement_rows_total";
pub const LOCK_TIMEOUTS_TOTAL: &str = "shardwire_lock_timeouts_total";
pub const RECOVERED_TOTAL: &str = "shardwire_recovered_transactions_total";
pub const IN_DOUBT: &str = "shardwire_in_doubt_transactions";
pub const TTL_PURGED_ROWS_TOTAL: &str = "shardwire_ttl_purged_rows_total";
pub const CHUNK_MOVES_TOTAL: &str = "shardwire_chunk_moves_total";
pub const CHUNK_MOVES_RUNNING: &str = "shardwire_chunk_moves_running";
pub const CHUNK_MOVE_ROWS_TOTAL: &str = "shardwire_chunk_move_rows_total";
pub const CHUNK_MOVE_BYTES_TOTAL: &str = "shardwire_chunk_move_bytes_total";
pub const CUTOVER_PAUSE_SECONDS: &str = "shardwire_chunk_move_cutover_pause_seconds";
/// How far the target of the move last looked at is behind its source: WAL bytes the target has
/// not confirmed (0 when no move runs).
pub const CHUNK_MOVE_LAG_BYTES: &str = "shardwire_chunk_move_lag_bytes";
pub const STATEMENTS_HELD_TOTAL: &str = "shardwire_statements_held_total";

/// Every metric name above; the Grafana dashboard (grafana/shardwire.json) has a panel for each,
/// which tests/grafana.rs checks.
pub const ALL: &[&str] = &[
    SESSIONS_TOTAL,
    SESSIONS_ACTIVE,
    AUTH_FAILURES_TOTAL,
    TRANSACTIONS_TOTAL,
    PINNED_SESSIONS_TOTAL,
    BACKEND_ERRORS_TOTAL,
    CANCELS_TOTAL,
    STATEMENT_PARSES_TOTAL,
    ROUTED_STATEMENTS_TOTAL,
    DISTRIBUTED_COMMITS_TOTAL,
    ROW_MOVEMENT_STATEMENTS_TOTAL,
    ROW_MOVEMENT_ROWS_TOTAL,
    LOCK_TIMEOUTS_TOTAL,
    RECOVERED_TOTAL,
    IN_DOUBT,
    TTL_PURGED_ROWS_TOTAL,
    CHUNK_MOVES_TOTAL,
    CHUNK_MOVES_RUNNING,
    CHUNK_MOVE_ROWS_TOTAL,
    CHUNK_MOVE_BYTES_TOTAL,
    CUTOVER_PAUSE_SECONDS,
    CHUNK_MOVE_LAG_BYTES,
    STATEMENTS_HELD_TOTAL,
];

/// The buckets of the cutover pause, in seconds: the aim is under one second.
const CUTOVER_PAUSE_BUCKETS: &[f64] = &[0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 5.0];

/// Installs the Prometheus recorder and its HTTP listener (`/metrics`). The recorder is
/// process-wide by the metrics crate's design; the proxy installs it once, in `serve`, before
/// any [`Metrics`] is made.
pub fn install(addr: SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
        .set_buckets_for_metric(
            metrics_exporter_prometheus::Matcher::Full(CUTOVER_PAUSE_SECONDS.into()),
            CUTOVER_PAUSE_BUCKETS,
        )
        .map_err(|e| format!("metrics buckets: {e}"))?
        .install()
        .map_err(|e| format!("cannot serve metrics on {addr}: {e}"))?;
    describe_counter!(
        SESSIONS_TOTAL,
        Unit::Count,
        "Client sessions authenticated."
    );
    describe_gauge!(SESSIONS_ACTIVE, Unit::Count, "Client sessions open now.");
    describe_counter!(
        AUTH_FAILURES_TOTAL,
        Unit::Count,
        "Client logins refused (wrong password, unknown user or database, protocol errors)."
    );
    describe_counter!(
        TRANSACTIONS_TOTAL,
        Unit::Count,
        "Times a backend connection was taken for a client transaction or statement."
    );
    describe_counter!(
        PINNED_SESSIONS_TOTAL,
        Unit::Count,
        "Client sessions pinned to one backend connection by session state (SET, LISTEN, …)."
    );
    describe_counter!(
        BACKEND_ERRORS_TOTAL,
        Unit::Count,
        "Failures to get or keep a backend connection, by shard."
    );
    describe_counter!(CANCELS_TOTAL, Unit::Count, "Cancel requests received.");
    describe_counter!(
        STATEMENT_PARSES_TOTAL,
        Unit::Count,
        "Statements the router parsed with PostgreSQL's parser (plan cache misses)."
    );
    describe_counter!(
        ROUTED_STATEMENTS_TOTAL,
        Unit::Count,
        "Statements over sharded or duplicated tables, by route (single: one shard, multi: several)."
    );
    describe_counter!(
        DISTRIBUTED_COMMITS_TOTAL,
        Unit::Count,
        "Client transactions that wrote on several shards, by outcome of their two-phase commit \
         (committed, rolled_back, unknown: recovery decides)."
    );
    describe_counter!(
        ROW_MOVEMENT_STATEMENTS_TOTAL,
        Unit::Count,
        "UPDATEs of a sharding key that the proxy ran itself, by case (moved: rows changed \
         shard or carried their family along, in_place: every row stayed on its shard, refused: \
         row movement disabled)."
    );
    describe_counter!(
        ROW_MOVEMENT_ROWS_TOTAL,
        Unit::Count,
        "Rows deleted on one shard and inserted on another (or re-keyed with their family) by \
         sharding-key UPDATEs, descendants included."
    );
    describe_counter!(
        LOCK_TIMEOUTS_TOTAL,
        Unit::Count,
        "Statements a shard ended for waiting on a lock past lock_timeout (55P03), as the \
         sessions relayed them: transactions spanning shards wait at most \
         [transactions] lock_timeout_ms."
    );
    describe_counter!(
        RECOVERED_TOTAL,
        Unit::Count,
        "Prepared transactions (one per participant shard) that in-doubt recovery finished, by \
         outcome (committed, rolled_back)."
    );
    describe_gauge!(
        IN_DOUBT,
        Unit::Count,
        "Prepared transactions past the grace period that the last recovery pass left to their \
         coordinator (in flight, or another proxy's with a live lease) or could not finish."
    );
    describe_counter!(
        TTL_PURGED_ROWS_TOTAL,
        Unit::Count,
        "Expired rows of Oracle NoSQL tables the background purge deleted, by shard."
    );
    describe_counter!(
        CHUNK_MOVES_TOTAL,
        Unit::Count,
        "Chunk moves this proxy ended, by outcome (done, failed, canceled, rolled_back: a move \
         whose proxy stopped, settled here)."
    );
    describe_gauge!(
        CHUNK_MOVES_RUNNING,
        Unit::Count,
        "Chunk moves running on this proxy now."
    );
    describe_counter!(
        CHUNK_MOVE_ROWS_TOTAL,
        Unit::Count,
        "Rows of the chunks this proxy moved (every table of the family)."
    );
    describe_counter!(
        CHUNK_MOVE_BYTES_TOTAL,
        Unit::Bytes,
        "Bytes (tables and indexes, as the target holds them) of the chunks this proxy moved."
    );
    describe_histogram!(
        CUTOVER_PAUSE_SECONDS,
        Unit::Seconds,
        "How long a chunk move's successful cutover held this proxy's statements."
    );
    describe_counter!(
        STATEMENTS_HELD_TOTAL,
        Unit::Count,
        "Client messages that waited for a chunk move's cutover before going on."
    );
    Ok(())
}

/// Handles to every metric, made once per proxy.
pub struct Metrics {
    pub sessions_total: Counter,
    pub sessions_active: Gauge,
    pub auth_failures: Counter,
    pub transactions: Counter,
    pub pinned_sessions: Counter,
    pub cancels: Counter,
    pub statement_parses: Counter,
    pub routed_single: Counter,
    pub routed_multi: Counter,
    pub distributed_committed: Counter,
    pub distributed_rolled_back: Counter,
    pub distributed_unknown: Counter,
    pub key_updates_moved: Counter,
    pub key_updates_in_place: Counter,
    pub key_updates_refused: Counter,
    pub rows_moved: Counter,
    pub lock_timeouts: Counter,
    pub recovered_committed: Counter,
    pub recovered_rolled_back: Counter,
    pub in_doubt: Gauge,
    pub statements_held: Counter,
    pub moves: MoveMetrics,
    backend_errors: Vec<Counter>,
    ttl_purged: Vec<Counter>,
}

/// The chunk moves' handles, which the growth layer keeps (moves run on tasks of their own).
#[derive(Clone)]
pub struct MoveMetrics {
    pub done: Counter,
    pub failed: Counter,
    pub canceled: Counter,
    pub rolled_back: Counter,
    pub running: Gauge,
    pub rows: Counter,
    pub bytes: Counter,
    pub cutover_pause: Histogram,
    pub lag: Gauge,
}

impl MoveMetrics {
    fn new() -> MoveMetrics {
        MoveMetrics {
            done: counter!(CHUNK_MOVES_TOTAL, "outcome" => "done"),
            failed: counter!(CHUNK_MOVES_TOTAL, "outcome" => "failed"),
            canceled: counter!(CHUNK_MOVES_TOTAL, "outcome" => "canceled"),
            rolled_back: counter!(CHUNK_MOVES_TOTAL, "outcome" => "rolled_back"),
            running: gauge!(CHUNK_MOVES_RUNNING),
            rows: counter!(CHUNK_MOVE_ROWS_TOTAL),
            bytes: counter!(CHUNK_MOVE_BYTES_TOTAL),
            cutover_pause: histogram!(CUTOVER_PAUSE_SECONDS),
            lag: gauge!(CHUNK_MOVE_LAG_BYTES),
        }
    }
}

impl Metrics {
    pub fn new(shard_names: &[String]) -> Metrics {
        Metrics {
            sessions_total: counter!(SESSIONS_TOTAL),
            sessions_active: gauge!(SESSIONS_ACTIVE),
            auth_failures: counter!(AUTH_FAILURES_TOTAL),
            transactions: counter!(TRANSACTIONS_TOTAL),
            pinned_sessions: counter!(PINNED_SESSIONS_TOTAL),
            cancels: counter!(CANCELS_TOTAL),
            statement_parses: counter!(STATEMENT_PARSES_TOTAL),
            routed_single: counter!(ROUTED_STATEMENTS_TOTAL, "route" => "single"),
            routed_multi: counter!(ROUTED_STATEMENTS_TOTAL, "route" => "multi"),
            distributed_committed: counter!(DISTRIBUTED_COMMITS_TOTAL, "outcome" => "committed"),
            distributed_rolled_back: counter!(DISTRIBUTED_COMMITS_TOTAL, "outcome" => "rolled_back"),
            distributed_unknown: counter!(DISTRIBUTED_COMMITS_TOTAL, "outcome" => "unknown"),
            key_updates_moved: counter!(ROW_MOVEMENT_STATEMENTS_TOTAL, "case" => "moved"),
            key_updates_in_place: counter!(ROW_MOVEMENT_STATEMENTS_TOTAL, "case" => "in_place"),
            key_updates_refused: counter!(ROW_MOVEMENT_STATEMENTS_TOTAL, "case" => "refused"),
            rows_moved: counter!(ROW_MOVEMENT_ROWS_TOTAL),
            lock_timeouts: counter!(LOCK_TIMEOUTS_TOTAL),
            recovered_committed: counter!(RECOVERED_TOTAL, "outcome" => "committed"),
            recovered_rolled_back: counter!(RECOVERED_TOTAL, "outcome" => "rolled_back"),
            in_doubt: gauge!(IN_DOUBT),
            statements_held: counter!(STATEMENTS_HELD_TOTAL),
            moves: MoveMetrics::new(),
            backend_errors: shard_names
                .iter()
                .map(|s| counter!(BACKEND_ERRORS_TOTAL, "shard" => s.clone()))
                .collect(),
            ttl_purged: shard_names
                .iter()
                .map(|s| counter!(TTL_PURGED_ROWS_TOTAL, "shard" => s.clone()))
                .collect(),
        }
    }

    /// Counts what an ErrorResponse from a shard (its body) says, where a metric follows it.
    pub fn note_shard_error(&self, body: &[u8]) {
        let lock_not_available = tokio_postgres::error::SqlState::LOCK_NOT_AVAILABLE;
        if crate::protocol::error_code(body) == Some(lock_not_available.code().as_bytes()) {
            self.lock_timeouts.increment(1);
        }
    }

    /// Records what a pass of in-doubt recovery did: prepared transactions it committed and
    /// rolled back, and how many it left in doubt.
    pub fn note_recovery(&self, committed: usize, rolled_back: usize, in_doubt: usize) {
        self.recovered_committed.increment(committed as u64);
        self.recovered_rolled_back.increment(rolled_back as u64);
        self.in_doubt.set(in_doubt as f64);
    }

    pub fn ttl_purged(&self, shard: crate::model::ShardId, rows: u64) {
        if let Some(c) = self.ttl_purged.get(shard.index()) {
            c.increment(rows);
        }
    }

    pub fn backend_error(&self, shard: crate::model::ShardId) {
        if let Some(c) = self.backend_errors.get(shard.index()) {
            c.increment(1);
        }
    }
}
