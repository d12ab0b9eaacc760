//! Moves whose proxy is gone: any proxy takes over an unfinished move whose owner's lease has
//! lapsed and settles it — finished when the catalog had given the chunk to the target, rolled
//! back otherwise — at start and then periodically, so no move is left holding a replication
//! slot or a prepared half. And CANCEL MOVE, which asks a running move to stop.

use std::future::Future;
use std::time::Duration;

use super::plan::Plan;
use super::{owner_of, settle, Growth, GrowthError};
use crate::catalog::MoveOwner;
use crate::model::{MoveId, MoveState};

/// How long CANCEL MOVE waits for the move to stop.
const CANCEL_WAIT: Duration = Duration::from_secs(30);
const CANCEL_POLL: Duration = Duration::from_millis(100);

/// The proxies (other than this one) whose leases on the catalog are live.
pub(super) async fn live_proxies(g: &Growth) -> Result<Vec<MoveOwner>, GrowthError> {
    let catalog = "the catalog database";
    let conn = g
        .control
        .catalog()
        .get()
        .await
        .map_err(|source| GrowthError::Connect {
            shard: catalog.into(),
            source,
        })?;
    let leases = crate::txn::lease::list(&conn, Some(&g.me.cluster))
        .await
        .map_err(|source| GrowthError::Shard {
            shard: catalog.into(),
            source,
        })?;
    let me = g.owner();
    Ok(leases
        .iter()
        .filter(|l| l.live)
        .map(|l| owner_of(&l.incarnation))
        .filter(|o| *o != me)
        .collect())
}

/// Settles every unfinished move and split whose owner holds no live lease; how many it
/// settled.
pub async fn recover_moves(g: &Growth) -> Result<usize, GrowthError> {
    let unfinished: Vec<_> = g
        .catalog
        .moves()
        .await?
        .into_iter()
        .filter(|m| !m.state.is_finished())
        .collect();
    let live = live_proxies(g).await?;
    let mut settled = super::split::settle_orphans(g, &live).await?;
    let me = g.owner();
    for m in unfinished {
        // Finished but for its kept source tables: dropped when due, by whoever sees it first.
        if m.keep_until.is_some() {
            if m.keep_due {
                settle::drop_kept(g, &m).await?;
                settled += 1;
            }
            continue;
        }
        let alive = m.owner == me || live.contains(&m.owner);
        if alive || !g.catalog.claim_move(m.id, m.state, &m.owner, &me).await? {
            continue;
        }
        tracing::info!(move_id = %m.id, state = %m.state, "taking over a chunk move whose proxy stopped");
        let plan = Plan::of_record(&g.catalog.snapshot(), &m)?;
        let note = format!(
            "its proxy {}_{} stopped; settled by {}_{}",
            m.owner.proxy, m.owner.epoch, me.proxy, me.epoch
        );
        if settle::settle(g, &plan, m.id, MoveState::RolledBack, Some(&note))
            .await
            .is_some()
        {
            settled += 1;
        }
    }
    Ok(settled)
}

/// Recovers moves now, then every `[moves] recovery_interval_ms`, until `stop`.
pub async fn run_recovery_until(g: Growth, stop: impl Future<Output = ()>) {
    tokio::pin!(stop);
    let interval = Duration::from_millis(g.config.moves.recovery_interval_ms.max(1));
    loop {
        if let Err(e) = recover_moves(&g).await {
            tracing::warn!(error = %e, "chunk move recovery failed; it runs again later");
        }
        tokio::select! {
            _ = &mut stop => return,
            _ = tokio::time::sleep(interval) => {}
        }
    }
}

/// CANCEL MOVE: asks move `id` to stop before its cutover, and waits (a while) for it to stop.
/// A move that had cut over already, or finished, cannot be canceled.
pub async fn cancel_move(g: &Growth, id: MoveId) -> Result<(), GrowthError> {
    match g.catalog.request_move_cancel(id).await? {
        None => return Err(GrowthError::NoSuchMove(id)),
        Some(
            state @ (MoveState::CleaningUp
            | MoveState::Done
            | MoveState::Failed
            | MoveState::RolledBack
            | MoveState::Canceled),
        ) => return Err(GrowthError::NotCancelable { id, state }),
        Some(
            MoveState::Planned
            | MoveState::Copying
            | MoveState::CatchingUp
            | MoveState::CuttingOver,
        ) => {}
    }
    let deadline = tokio::time::Instant::now() + CANCEL_WAIT;
    while tokio::time::Instant::now() < deadline {
        match g.catalog.move_record(id).await? {
            // A cutover under way when the request came may still have handed the chunk over.
            Some(m) if m.state == MoveState::Done || m.state == MoveState::CleaningUp => {
                return Err(GrowthError::NotCancelable { id, state: m.state })
            }
            Some(m) if m.state.is_finished() => return Ok(()),
            _ => tokio::time::sleep(CANCEL_POLL).await,
        }
    }
    // Still running (its proxy may be gone: recovery settles it): the request stands.
    Ok(())
}
