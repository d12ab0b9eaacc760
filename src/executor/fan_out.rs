//! A simple query run on several shards at once (a write, or a read the streaming merge
//! answers), its answer combined as one PostgreSQL's. Outside a transaction block a write is one
//! transaction, as on PostgreSQL: each shard runs it in a block, committed together (or rolled
//! back) after, and its answer waits for the commit, which may still fail.

use crate::executor::gather::{self, Combine, Sink};
use crate::executor::host::{Host, Shared};
use crate::executor::participants::bound_lock_waits;
use crate::model::ShardId;
use crate::protocol::TxStatus;

/// A simple query that runs on several shards.
pub struct Multi {
    pub shards: Vec<ShardId>,
    /// Per shard, the SQL it runs.
    pub sql: Vec<String>,
    pub combine: Combine,
}

/// Whether the statements of `combine` write.
pub fn writes(combine: &Combine) -> bool {
    match combine {
        Combine::Union { kind, .. } => kind.writes(),
        Combine::Copies => true,
        Combine::Each => false,
        Combine::Explain(explain) => explain.writes,
    }
}

/// Runs `multi` over the session `host`, its answer written to the host's sink (streamed as the
/// rows arrive where it is a union of the shards' rows); the transaction status for the
/// ReadyForQuery that ends it. A lost shard breaks every connection of the statement.
pub async fn run<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    multi: &Multi,
) -> Result<TxStatus, H::Error> {
    let order = host.join(&multi.shards).await?;
    let session_status = host.links().status();
    let atomic = session_status == TxStatus::Idle && writes(&multi.combine);
    if atomic {
        let bound_waits = bound_lock_waits(shared.config);
        host.links().begin_on(&order, &bound_waits).await?;
    }
    host.cancel_reaches_parked();
    let origin = gather::Origin {
        shards: &multi.shards,
        control: shared.control,
    };
    let mut held = bytes::BytesMut::new();
    let result = match &multi.combine {
        Combine::Union { kind, merge, rows } if rows.is_empty() && !atomic => {
            let spec = gather::Spec {
                kind: *kind,
                merge,
                describe: true,
                description: None,
            };
            let (links, mut sink) = host.links_and_sink();
            let mut conns = links.parked.conns_at(&order);
            gather::stream_simple(&mut conns, &multi.sql, &spec, &origin, &mut sink)
                .await
                .map(|streamed| streamed.statuses)
        }
        // Rows returned in VALUES order, or one copy's answer of a duplicated table: small,
        // and combined once every shard has answered.
        combine => {
            let (links, mut sink) = host.links_and_sink();
            let mut conns = links.parked.conns_at(&order);
            gather::run_simple(&mut conns, &multi.sql, combine, &origin)
                .await
                .map(|(combined, statuses)| {
                    let out = if atomic { &mut held } else { sink.out() };
                    gather::write(&combined, out);
                    statuses
                })
                .map_err(gather::StreamError::Backend)
        }
    };
    host.cancel_reaches(Vec::new());
    let statuses = match result {
        Ok(statuses) => statuses,
        Err(e) => {
            host.links().parked.mark_broken(&order);
            return Err(e.into());
        }
    };
    host.links().parked.set_statuses(&order, &statuses);
    if !atomic {
        return Ok(gather::combined_status(&statuses, session_status));
    }
    // A failed statement rolls back everywhere and its error is the answer.
    let ended = host.commit().commit_participants().await?;
    let (links, mut sink) = host.links_and_sink();
    match ended {
        Ok(_) => sink.out().extend_from_slice(&held),
        Err(error) => sink.out().extend_from_slice(&error),
    }
    Ok(links.status())
}
