//! The general path runs to its end even when its client hangs up or the session is
//! terminated, since a distributed commit cut off half-way would hold its shards' locks until
//! recovery; but what it runs on the shards is canceled then, as nobody waits for its result.
//! Only the session's query timeout cuts it short: the shards may not answer at all.

use super::socket::HangupWatch;
use super::timeouts::Expiry;
use super::{signal, ClientSaid, SessionError};
use crate::frontend::cancel::CancelSlot;
use crate::frontend::context::ServerCtx;
use std::future::Future;
use std::sync::Arc;
use std::task::Poll;
use std::time::{Duration, Instant};

/// How often a session whose client is gone cancels again what runs for it: the general path
/// may start another statement after a cancel took effect (or after a wait for a connection).
const CANCEL_AGAIN: Duration = Duration::from_millis(100);

/// Runs `work` to its end, or to `deadline`; once the client has hung up (seen by `hangup`)
/// or the session has been terminated, what the session runs on its shards is canceled until
/// `work` ends. At the deadline `work` is dropped where it stands and the session ends: its
/// connections are closed and canceled, and recovery settles a two-phase commit left half-way,
/// as when a proxy dies.
pub(super) async fn to_the_end<F: Future<Output = Result<ClientSaid, SessionError>>>(
    work: F,
    hangup: Option<&HangupWatch>,
    slot: Arc<CancelSlot>,
    ctx: Arc<ServerCtx>,
    deadline: Option<(Instant, Expiry)>,
) -> F::Output {
    let mut work = std::pin::pin!(work);
    let expired = async {
        match deadline {
            Some((at, expiry)) => {
                tokio::time::sleep_until(at.into()).await;
                expiry
            }
            None => std::future::pending().await,
        }
    };
    let mut expired = std::pin::pin!(expired);
    let abandoned = async {
        let terminated = std::future::poll_fn(|cx| {
            if slot.poll_terminated(cx) {
                Poll::Ready(())
            } else {
                Poll::Pending
            }
        });
        match hangup {
            Some(hangup) => tokio::select! {
                _ = hangup.hung_up() => {}
                _ = terminated => {}
            },
            None => terminated.await,
        }
    };
    tokio::select! {
        biased;
        done = &mut work => return done,
        expiry = &mut expired => return give_up(expiry, &ctx, &slot),
        _ = abandoned => {}
    }
    tracing::debug!("client gone or session terminated mid-statement: canceling it on the shards");
    let mut every = tokio::time::interval(CANCEL_AGAIN);
    loop {
        tokio::select! {
            biased;
            done = &mut work => return done,
            expiry = &mut expired => return give_up(expiry, &ctx, &slot),
            _ = every.tick() => signal::cancel_running(&ctx, slot.running_everywhere()),
        }
    }
}

/// Past the deadline: what runs for the session is canceled on every shard (the connections
/// that `work` holds are dropped with it, and a shard runs a statement to its end for a closed
/// connection until it writes), and the session ends.
fn give_up(expiry: Expiry, ctx: &ServerCtx, slot: &CancelSlot) -> Result<ClientSaid, SessionError> {
    signal::cancel_running(ctx, slot.running_everywhere());
    Err(SessionError::Expired(expiry))
}
