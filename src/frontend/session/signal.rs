//! `pg_cancel_backend(pid)` / `pg_terminate_backend(pid)` of a pid the proxy gave a client:
//! the proxy cancels that session's running statement on its shards, or ends the session with
//! PostgreSQL's FATAL, as the functions do to a backend on one PostgreSQL. Other pids are the
//! shards' processes, and the call goes to a shard like any statement.

use super::Session;
use crate::catalog::ShardId;
use crate::client_error::ClientError;
use crate::frontend::cancel::CancelSlot;
use crate::frontend::context::ServerCtx;
use crate::frontend::FrontendError;
use crate::protocol::{self, MessageBuilder};
use crate::router::route::BindParts;
use crate::sql::signal::{signal_call, Pid, Signal, SignalCall};
use bytes::BytesMut;
use std::sync::Arc;

/// PostgreSQL's type OID of the functions' result, bool.
const BOOL_OID: i32 = 16;

/// The RowDescription of the call's one bool column.
pub(super) fn description(name: &str) -> bytes::Bytes {
    protocol::one_column_description(name, BOOL_OID, 1, false)
}

/// Asks each shard process running a session's statement to cancel it.
pub(super) fn cancel_running(ctx: &ServerCtx, running: Vec<(ShardId, crate::backend::CancelKey)>) {
    for (shard, key) in running {
        let endpoint = ctx.pools.shard(shard).endpoint.clone();
        tokio::spawn(async move {
            if let Err(e) = crate::backend::conn::send_cancel(&endpoint, key).await {
                tracing::warn!(error = %e, "sending a cancel request to a shard failed");
            }
        });
    }
}

impl Session {
    /// The call, when `sql` is one of a pid this proxy gave a session that still runs.
    pub(super) fn proxy_signal(&self, sql: &[u8]) -> Option<(SignalCall, Arc<CancelSlot>)> {
        let call = signal_call(std::str::from_utf8(sql).ok()?)?;
        let Pid::Given(pid) = call.pid else {
            return None;
        };
        let target = self.ctx.cancels.session(pid)?;
        Some((call, target))
    }

    /// The call of a Bind (`rest`: its parameters and result formats) of `sql`, its pid given
    /// in the text or by the Bind's parameter, when it is one this proxy gave a session that
    /// still runs.
    pub(super) fn proxy_signal_at_bind(
        &self,
        sql: &[u8],
        rest: &[u8],
    ) -> Option<(SignalCall, Arc<CancelSlot>)> {
        let mut call = signal_call(std::str::from_utf8(sql).ok()?)?;
        let pid = match call.pid {
            Pid::Given(pid) => pid,
            Pid::Param(i) => {
                let parts = BindParts::read(rest).ok()?;
                let value = parts.values.get(i).copied().flatten()?;
                match parts.formats.get(i) {
                    Some(1) => binary_integer(value)?,
                    _ => std::str::from_utf8(value).ok()?.trim().parse().ok()?,
                }
            }
        };
        call.pid = Pid::Given(pid);
        let target = self.ctx.cancels.session(pid)?;
        Some((call, target))
    }

    /// Answers a signal call of a proxy pid as a simple query's reply; `None` leaves the call
    /// to the shards.
    pub(super) fn answer_signal(&mut self, sql: &[u8]) -> Option<BytesMut> {
        let (call, _) = self.proxy_signal(sql)?;
        self.answer_signal_call(call)
    }

    /// Answers a call of a pid the proxy gave (`Pid::Given`) as a simple query's reply; `None`
    /// when no session of it runs any more, which leaves the call to the shards.
    pub(super) fn answer_signal_call(&mut self, call: SignalCall) -> Option<BytesMut> {
        let Pid::Given(pid) = call.pid else {
            return None;
        };
        let target = self.ctx.cancels.session(pid)?;
        let mut out = BytesMut::new();
        // As PostgreSQL's role check: a session may signal the sessions of its own user.
        if target.user != self.cancel.slot.user {
            let e = FrontendError::SignalNotPermitted {
                terminate: call.signal == Signal::Terminate,
            };
            out.extend_from_slice(&e.error_frame());
            protocol::ready_for_query(&mut out, self.links.status());
            return Some(out);
        }
        match call.signal {
            Signal::Cancel => {
                let ctx = self.ctx.clone();
                tokio::spawn(async move {
                    crate::frontend::cancel::send_fenced(&ctx.pools, &target).await
                });
            }
            // The session sees it at its next turn, tells its client, and cancels what still
            // runs for it as it ends.
            Signal::Terminate => {
                tracing::info!(parent: &self.span, pid, "pg_terminate_backend of a client session");
                target.terminate();
                if Arc::ptr_eq(&target, &self.cancel.slot) {
                    // Its own end: the FATAL comes instead of a result, as on PostgreSQL.
                    return Some(out);
                }
            }
        }
        out.extend_from_slice(&description(&call.result_name));
        MessageBuilder::new(&mut out, b'D')
            .i16(1)
            .i32(1)
            .bytes(b"t")
            .finish();
        protocol::command_complete(&mut out, "SELECT 1");
        protocol::ready_for_query(&mut out, self.links.status());
        Some(out)
    }
}

/// An integer parameter in binary format: int2, int4 or int8 by its length.
fn binary_integer(value: &[u8]) -> Option<i32> {
    match value.len() {
        2 => Some(i32::from(i16::from_be_bytes(value.try_into().ok()?))),
        4 => Some(i32::from_be_bytes(value.try_into().ok()?)),
        8 => i32::try_from(i64::from_be_bytes(value.try_into().ok()?)).ok(),
        _ => None,
    }
}
