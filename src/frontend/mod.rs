//! The client side: startup and authentication through pgwire, then our own session loop over
//! the raw socket.

pub mod auth;
pub mod cancel;
pub mod context;
pub mod driver;
mod error;
pub mod limits;
pub mod pipeline;
pub mod reported;
pub mod session;
pub mod socket;
pub mod startup;
pub mod statements;

pub use error::FrontendError;

use std::sync::Arc;

use bytes::BytesMut;
use pgwire::tokio::server::MaybeTls;
use socket2::SockRef;
use tokio::net::TcpStream;
use tracing::Instrument;

use crate::catalog::ShardId;
use crate::client_error::ClientError;
use crate::frontend::context::ServerCtx;
use crate::protocol::{self, Severity};
use driver::{Next, SessionFuture};
use session::Session;
use socket::{PlainClient, StreamClient};
use startup::{ClientStart, Startup};

/// Serves one client connection: startup and authentication, then (for a session) hands on the
/// session loop as the future to run next ([`Next::Continue`]).
///
/// The session's span is entered for startup, and after that only where the session logs (its
/// events name it as their parent): entering and leaving a span on every poll of the data path
/// costs about 450 instructions per transaction when the span is enabled, as it is at the
/// default log level (`bench/instructions.sh` with `RUST_LOG=info`).
pub async fn handle_client(tcp: TcpStream, ctx: Arc<ServerCtx>, session_id: u64) -> Next {
    let span = tracing::info_span!("session", id = session_id);
    let started = startup::startup(tcp, &ctx).instrument(span.clone()).await;
    match started {
        Ok(Startup::Session(start)) => {
            ctx.metrics.sessions_total.increment(1);
            ctx.metrics.sessions_active.increment(1.0);
            match start_session(ctx.clone(), *start, span).await {
                Some(session_loop) => return Next::Continue(session_loop),
                None => ctx.metrics.sessions_active.decrement(1.0),
            }
        }
        Ok(Startup::Cancel { pid, secret }) => {
            forward_cancel(&ctx, pid, secret).instrument(span).await
        }
        Ok(Startup::Ended) => {}
        Err(e) => tracing::debug!(parent: &span, error = %e, "client startup failed"),
    }
    Next::Done
}

async fn forward_cancel(ctx: &ServerCtx, pid: i32, secret: i32) {
    ctx.metrics.cancels.increment(1);
    match ctx.cancels.session_with_secret(pid, secret) {
        Some(slot) => cancel::send_fenced(&ctx.pools, &slot).await,
        None => tracing::debug!(pid, "cancel request for no session"),
    }
}

/// Greets an authenticated client and returns the session's loop, or None when the client was
/// told it cannot be served.
async fn start_session(
    ctx: Arc<ServerCtx>,
    start: ClientStart,
    span: tracing::Span,
) -> Option<SessionFuture> {
    tracing::debug!(parent: &span, user = %start.user, addr = %start.addr, "client authenticated");
    let admitted = match ctx.limits.admit(&start.user) {
        Ok(admitted) => admitted,
        Err(e) => {
            tracing::info!(parent: &span, user = %start.user, "{e}");
            let mut refusal = BytesMut::new();
            protocol::error_response(
                &mut refusal,
                Severity::Fatal,
                &e.sqlstate(),
                &e.client_message(),
            );
            let _ = write_all(start.io, &refusal).await;
            return None;
        }
    };
    let (pid, cancel) = ctx.cancels.register(&start.user);
    let mut settings: Vec<(String, String)> = start.params.into_iter().collect();
    if !settings.iter().any(|(k, _)| k == "application_name") {
        settings.push(("application_name".into(), String::new()));
    }
    let mut greeting = BytesMut::new();
    protocol::authentication_ok(&mut greeting);
    let told = async {
        let mut params = server_params(&ctx).await?;
        // Only what the server reports is reported, under the server's spelling of its name.
        for (name, value) in reported::shown(&ctx, &settings).await?.iter() {
            let reported = params
                .keys()
                .find(|k| k.eq_ignore_ascii_case(name))
                .cloned();
            if let Some(key) = reported {
                params.insert(key, value.clone());
            }
        }
        Ok::<_, FrontendError>(params)
    };
    match told.instrument(span.clone()).await {
        Ok(params) => {
            for (k, v) in &params {
                protocol::parameter_status(&mut greeting, k, v);
            }
        }
        Err(e) => {
            protocol::error_response(
                &mut greeting,
                Severity::Fatal,
                &e.sqlstate(),
                &e.client_message(),
            );
            let _ = write_all(start.io, &greeting).await;
            return None;
        }
    }
    protocol::backend_key_data(&mut greeting, pid, cancel.slot.secret);
    protocol::ready_for_query(&mut greeting, protocol::TxStatus::Idle);

    settings.sort();
    let settings = ctx.settings.intern(settings);
    let mut session = Session::new(ctx, start.read_buf, settings, cancel, admitted, span);
    session.greet(&greeting);
    // The session loop as a future of its own, which the caller runs in place of the startup's
    // (see [`Next`]): polled without going through the startup's future on every wake-up, its
    // code laid out together rather than scattered through the startup's.
    Some(match start.io {
        MaybeTls::Plain(tcp) => Box::pin(session.run(PlainClient::new(tcp))),
        other => {
            let tcp = match &other {
                MaybeTls::Tls(tls) => SockRef::from(tls.get_ref().0).try_clone().ok(),
                _ => None,
            };
            let (r, w) = tokio::io::split(other);
            Box::pin(session.run(StreamClient::new(r, w, tcp)))
        }
    })
}

/// What the client is told about the server at startup: the first shard's own values.
async fn server_params(
    ctx: &ServerCtx,
) -> Result<std::collections::BTreeMap<String, String>, FrontendError> {
    let pool = ctx.pools.shard(ShardId(0));
    if pool.server_params().is_none() {
        // The first client after start: one connection tells us what the server says.
        pool.get()
            .await
            .map_err(|e| FrontendError::ShardUnreachable {
                shard: pool.name.clone(),
                reason: e.to_string(),
            })?;
    }
    Ok(pool
        .server_params()
        .map(|p| p.iter().map(|(k, v)| (k.clone(), v.clone())).collect())
        .unwrap_or_default())
}

async fn write_all(mut io: MaybeTls, bytes: &[u8]) -> std::io::Result<()> {
    use tokio::io::AsyncWriteExt;
    io.write_all(bytes).await?;
    io.shutdown().await
}
