//! Every metric the proxy exports, in one place: name (prefixed `shardwire_`), unit suffix and
//! bounded labels. Call sites use these functions, never metric names.

use std::net::SocketAddr;

use metrics::{counter, describe_counter, describe_gauge, gauge, Unit};

pub const SESSIONS_TOTAL: &str = "shardwire_client_sessions_total";
pub const SESSIONS_ACTIVE: &str = "shardwire_client_sessions_active";
pub const AUTH_FAILURES_TOTAL: &str = "shardwire_auth_failures_total";

/// Installs the Prometheus recorder and its HTTP listener (`/metrics`). The recorder is
/// process-wide by the metrics crate's design; the proxy installs it once, in `serve`.
pub fn install(addr: SocketAddr) -> Result<(), String> {
    metrics_exporter_prometheus::PrometheusBuilder::new()
        .with_http_listener(addr)
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
        "Client logins refused (wrong password, unknown user, protocol errors)."
    );
    Ok(())
}

pub fn session_started() {
    counter!(SESSIONS_TOTAL).increment(1);
    gauge!(SESSIONS_ACTIVE).increment(1.0);
}

pub fn session_ended() {
    gauge!(SESSIONS_ACTIVE).decrement(1.0);
}

pub fn auth_failure() {
    counter!(AUTH_FAILURES_TOTAL).increment(1);
}
