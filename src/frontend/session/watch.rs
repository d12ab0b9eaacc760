//! The general path runs to its end even when its client hangs up or the session is
//! terminated, since a distributed commit cut off half-way would hold its shards' locks until
//! recovery; but what it runs on the shards is canceled then, as nobody waits for its result.

use std::time::Duration;

use super::socket::HangupWatch;
use super::*;

/// How often a session whose client is gone cancels again what runs for it: the general path
/// may start another statement after a cancel took effect (or after a wait for a connection).
const CANCEL_AGAIN: Duration = Duration::from_millis(100);

/// Runs `work` to its end; once the client has hung up (seen by `hangup`) or the session has
/// been terminated, what the session runs on its shards is canceled until `work` ends.
pub(super) async fn to_the_end<F: Future>(
    work: F,
    hangup: Option<&HangupWatch>,
    slot: Arc<CancelSlot>,
    ctx: Arc<ServerCtx>,
) -> F::Output {
    let mut work = std::pin::pin!(work);
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
        _ = abandoned => {}
    }
    tracing::debug!("client gone or session terminated mid-statement: canceling it on the shards");
    let mut every = tokio::time::interval(CANCEL_AGAIN);
    loop {
        tokio::select! {
            biased;
            done = &mut work => return done,
            _ = every.tick() => signal::cancel_running(&ctx, slot.running_everywhere()),
        }
    }
}
