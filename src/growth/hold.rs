//! A cutover's hold on every proxy sharing the catalog. The proxy cutting a chunk over records
//! the hold in the catalog (`hold_everywhere`) and goes on only once every proxy with a live
//! lease has acknowledged it; each proxy (`follow_holds`) closes its own fence when it sees a
//! hold, waits until none of its sessions has work in flight, acknowledges, and opens again
//! when the hold is gone, which is after the chunk map has changed and the chunk is attached
//! on its new shard. A hold past its time is let go only if the chunk was not handed over
//! under it (no hand-over can come after); one whose chunk was handed over stands until its
//! move is finished, by its proxy or by recovery.
//!
//! A proxy that cannot take part (stopped, or cut off from the catalog) loses its lease and is
//! not waited for; it must then not route by its old map. Where another proxy's lease was live
//! at its last renewal, its fence stays shut once a lease's length has passed since the last
//! renewal that went through (`Fence::is_fresh`), until the lease is renewed, the catalog read
//! again and any hold in it applied. A proxy that knows of no other keeps serving while the
//! catalog is out of reach, and reads it again only after standing still a lease's length.

use std::time::{Duration, Instant};

use tokio::sync::watch;

use super::fence::Hold;
use super::recovery::live_proxies;
use super::{Growth, GrowthError};
use crate::catalog::CutoverHold;
use crate::model::MoveId;

/// How often acknowledgements are looked for.
const ACK_POLL: Duration = Duration::from_millis(5);
/// How often a follower looks again without being woken.
const FOLLOW_TICK: Duration = Duration::from_millis(50);

/// How long a hold stands at most by the catalog's clock: the cutover's pause, and as long
/// again for the prepares and the hand-over after it.
pub(super) fn validity(pause: Duration) -> Duration {
    pause * 2 + Duration::from_secs(1)
}

/// Records attempt `attempt` of move `id` as held and waits, until `deadline`, for every other
/// proxy with a live lease to acknowledge it; `false` when one did not in time (the caller
/// backs off and releases the hold).
pub(super) async fn hold_everywhere(
    g: &Growth,
    id: MoveId,
    attempt: i32,
    pause: Duration,
    deadline: Instant,
) -> Result<bool, GrowthError> {
    g.catalog.hold_cutover(id, attempt, validity(pause)).await?;
    // Listed after the hold is recorded: a proxy whose lease is renewed later reads the hold
    // before it routes again.
    let others = live_proxies(g).await?;
    loop {
        if others.is_empty() {
            return Ok(true);
        }
        let acked = g.catalog.hold_acknowledgements(id, attempt).await?;
        let missing: Vec<_> = others.iter().filter(|o| !acked.contains(o)).collect();
        if missing.is_empty() {
            return Ok(true);
        }
        if Instant::now() >= deadline {
            tracing::info!(move_id = %id, attempt, missing = ?missing,
                "chunk move: other proxies did not hold their statements in time");
            return Ok(false);
        }
        tokio::time::sleep(ACK_POLL).await;
    }
}

/// One hold this proxy keeps for another proxy's cutover.
struct Kept<'f> {
    id: MoveId,
    attempt: i32,
    since: Instant,
    _hold: Hold<'f>,
}

/// Follows other proxies' cutover holds and this proxy's lease renewals until `stop`. `ready`
/// is sent once the holds standing at start are applied: clients are accepted after it.
pub async fn follow_holds(
    g: Growth,
    mut renewals: watch::Receiver<Option<Instant>>,
    lease: Duration,
    ready: tokio::sync::oneshot::Sender<()>,
    stop: impl std::future::Future<Output = ()>,
) {
    tokio::pin!(stop);
    let fence = g.fence.clone();
    let me = g.owner();
    let pause = Duration::from_millis(g.config.moves.cutover_pause_ms.max(1));
    let mut kept: Vec<Kept<'_>> = Vec::new();
    let mut ready = Some(ready);
    let mut renewed: Option<Instant> = None;
    let mut caught_up: Option<Instant> = None;
    // Whether another proxy's lease was live at the last renewal: only then can a cutover go
    // on without this proxy, once its own lease lapses.
    let mut shared = false;
    loop {
        let reloaded = g.catalog.reloaded().notified();
        tokio::pin!(reloaded);
        reloaded.as_mut().enable();
        let snapshot = g.catalog.snapshot();
        let standing: Vec<&CutoverHold> = snapshot
            .holds()
            .iter()
            .filter(|h| h.owner != me && (!h.lapsed || h.handed_over))
            .collect();
        kept.retain(|k| {
            standing
                .iter()
                .any(|h| h.id == k.id && h.attempt == k.attempt)
        });
        for h in &standing {
            if kept.iter().any(|k| k.id == h.id && k.attempt == h.attempt) {
                continue;
            }
            let since = Instant::now();
            let hold = fence.close();
            if fence.quiesce(since + pause).await {
                if let Err(e) = g.catalog.acknowledge_hold(h.id, h.attempt, &me).await {
                    tracing::warn!(move_id = %h.id, error = %e, "cannot acknowledge a cutover's hold");
                }
            }
            kept.push(Kept {
                id: h.id,
                attempt: h.attempt,
                since,
                _hold: hold,
            });
        }
        // The catalog read again after a renewal, and its holds applied: the map is current.
        if let Some(sent) = renewed.take() {
            fence.fresh_until(sent + lease);
        }
        // A proxy that knows of no other keeps its map current by the clock, so a catalog out
        // of reach does not stop it; only having stood still a lease's length (no cutover
        // waited for it meanwhile) makes it read the catalog again first.
        if !shared {
            if fence.is_fresh() {
                fence.fresh_until(Instant::now() + lease);
            } else if let Some(read) = caught_up.take() {
                fence.fresh_until(read + lease);
            } else {
                let read = Instant::now();
                match g.catalog.reload().await {
                    Ok(_) => {
                        caught_up = Some(read);
                        continue;
                    }
                    Err(e) => {
                        tracing::warn!(error = %e, "cannot read the catalog after standing still")
                    }
                }
            }
        }
        if let Some(ready) = ready.take() {
            let _ = ready.send(());
        }
        // A hold kept past its validity is read again from the catalog, whose clock decides.
        let overdue = kept.iter().any(|k| k.since.elapsed() > validity(pause));
        tokio::select! {
            _ = &mut stop => return,
            _ = reloaded => {}
            changed = renewals.changed() => {
                if changed.is_err() {
                    return;
                }
                let sent = *renewals.borrow_and_update();
                match live_proxies(&g).await {
                    Ok(others) => shared = !others.is_empty(),
                    Err(e) => tracing::debug!(error = %e, "cannot list the other proxies"),
                }
                if let Some(sent) = sent {
                    if !fence.is_fresh() {
                        if let Err(e) = g.catalog.reload().await {
                            tracing::warn!(error = %e, "cannot read the catalog after the lease lapsed");
                            continue;
                        }
                    }
                    renewed = Some(sent);
                }
            }
            _ = tokio::time::sleep(FOLLOW_TICK) => {
                if overdue {
                    if let Err(e) = g.catalog.reload().await {
                        tracing::warn!(error = %e, "cannot read the catalog for a cutover's hold");
                    }
                }
            }
        }
    }
}
