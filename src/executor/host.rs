//! What a statement over several shards needs of the client's session, and nothing more: the
//! session's connections to a set of shards, joined to its block or batch ([`Host::join`]),
//! the [`Participants`] that hold them, the reach of the client's cancel, and the client's
//! output ([`gather::Sink`]). The multi-shard kinds in this layer work on a [`Host`]; the
//! session implements it, and keeps the socket loop, statement names, settings and dispatch.

use crate::backend::{BackendError, CancelKey, Pools};
use crate::catalog::Catalog;
use crate::config::Config;
use crate::executor::commit::Commit;
use crate::executor::gather::{self, Combine, Combined, StreamError};
use crate::executor::participants::Participants;
use crate::failpoint::FailPoints;
use crate::metrics::Metrics;
use crate::model::ShardId;
use crate::txn::{ControlPools, Coordinator};
use bytes::BytesMut;
use std::future::Future;

/// The client's session, as a multi-shard statement uses it.
pub trait Host: Send {
    /// The session's own failure: it ends the session, where a statement's failure is an
    /// answer.
    type Error: HostError;

    /// The session's connections to `shards`, each with the client's settings and joined to
    /// its transaction block or batch, parked; their positions among the parked links.
    fn join(
        &mut self,
        shards: &[ShardId],
    ) -> impl Future<Output = Result<Vec<usize>, Self::Error>> + Send;

    fn links(&mut self) -> &mut Participants;

    /// The commit of the session's block over its parked connections.
    fn commit(&mut self) -> Commit<'_>;

    /// A CancelRequest from the client reaches `running` too (nothing: no longer).
    fn cancel_reaches(&mut self, running: Vec<(ShardId, CancelKey)>);

    /// A CancelRequest from the client reaches every parked connection, while a statement runs
    /// on them (an idle one ignores it).
    fn cancel_reaches_parked(&mut self) {
        let running = self.links().parked.cancel_keys();
        self.cancel_reaches(running);
    }

    /// The session's span, for what a statement logs.
    fn span(&self) -> &tracing::Span;

    /// The session's connections and the client's output, for an answer streamed from the
    /// one to the other as it arrives.
    fn links_and_sink(&mut self) -> (&mut Participants, impl gather::Sink + '_);
}

/// The session's own failure, which ends it: a lost client or shard, a limit run out.
pub trait HostError: From<BackendError> + From<StreamError> + Send + Sized {
    /// The shard's failure this is, if it is one (a statement may answer it instead), or
    /// itself.
    fn into_backend(self) -> Result<BackendError, Self>;
}

/// The server's parts a multi-shard statement uses.
#[derive(Clone, Copy)]
pub struct Shared<'a> {
    pub config: &'a Config,
    pub catalog: &'a Catalog,
    pub pools: &'a Pools,
    pub control: &'a ControlPools,
    pub coordinator: &'a Coordinator,
    pub metrics: &'a Metrics,
    pub failpoints: &'a FailPoints,
}

/// What [`run_on_shards`] sends each shard.
pub enum Work<'a> {
    Simple(&'a [String]),
    Batches(&'a [BytesMut]),
}

/// Runs work on the session's connections to `shards` (joining them to its block or batch),
/// combining their answers as `combine` says and noting each one's transaction status after.
/// A lost shard breaks every connection of the statement: their answers are out of step now.
pub async fn run_on_shards<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    shards: &[ShardId],
    work: Work<'_>,
    combine: &Combine,
) -> Result<Combined, H::Error> {
    let order = host.join(shards).await?;
    host.cancel_reaches_parked();
    let links = host.links();
    let mut conns = links.parked.conns_at(&order);
    let origin = gather::Origin {
        shards,
        control: shared.control,
    };
    let result = match work {
        Work::Simple(sql) => gather::run_simple(&mut conns, sql, combine, &origin).await,
        Work::Batches(m) => gather::run_batches(&mut conns, m, combine, &origin).await,
    };
    drop(conns);
    host.cancel_reaches(Vec::new());
    let links = host.links();
    match result {
        Ok((combined, statuses)) => {
            links.parked.set_statuses(&order, &statuses);
            Ok(combined)
        }
        Err(e) => {
            links.parked.mark_broken(&order);
            Err(e.into())
        }
    }
}
