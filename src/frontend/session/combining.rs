//! The session's side of the general path of a read over several shards
//! ([`crate::executor::general`]): the job made at routing, and its answer to the client.

use super::copy::CopyState;
use super::host::shared;
use super::{Session, SessionError};
use crate::catalog::ShardId;
use crate::executor::general::{self, BoundCombine, CombineJob};
use crate::frontend::socket::ClientSocket;
use crate::protocol::MessageBuilder;
use std::sync::Arc;

impl Session {
    /// Answers a read on the general path: a simple query's rows streamed to the client, or
    /// the combined rows as the answer or the Bind's portal.
    pub(super) async fn run_combining(
        &mut self,
        job: CombineJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        if job.plan.copy_out && job.bound.is_some() {
            // A COPY takes no parameters: its Execute runs it as a simple query would.
            self.drain_current().await?;
            MessageBuilder::new(&mut self.cout, b'2').finish();
            let job = CombineJob { bound: None, ..job };
            self.copy = Some(Box::new(CopyState::CombinedPortal(job)));
            return Ok(());
        }
        let ctx = self.ctx.clone();
        let answered = general::answer(&mut self.host(Some(client)), shared(&ctx), &job).await?;
        self.answer_combined(answered, job.bound.map(|b| b.portal))
    }

    /// The Execute of a COPY portal the general path answers: the COPY's data streamed to the
    /// client; the batch's Sync gets ReadyForQuery.
    pub(super) async fn run_combined_copy(
        &mut self,
        job: CombineJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let ctx = self.ctx.clone();
        general::answer(&mut self.host(Some(client)), shared(&ctx), &job).await?;
        self.end_copy(true, false);
        Ok(())
    }
}

/// A read the general path answers: at Bind or as a simple query; a Parse or Describe goes to
/// `describer`, which holds its tables.
pub(super) fn combining_dest(
    plan: &Arc<crate::router::plan::CombinePlan>,
    source: super::dest::Source<'_>,
    describer: ShardId,
    shards: Vec<ShardId>,
) -> super::dest::Dest {
    let bound = match source {
        super::dest::Source::Simple(_) => None,
        super::dest::Source::Bind {
            portal,
            statement,
            rest,
        } => Some(BoundCombine {
            portal: portal.into(),
            param_types: statement.param_types.to_vec(),
            rest: rest.to_vec(),
        }),
        super::dest::Source::Placement => return super::dest::Dest::Shard(describer),
    };
    super::dest::Dest::Combining(Box::new(CombineJob {
        plan: plan.clone(),
        bound,
        shards,
    }))
}
