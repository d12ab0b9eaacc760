//! The session's side of a grouped read the proxy merges ([`crate::executor::grouped`]): the
//! job made at routing, and the answer of a read over several shards to the client.

use super::host::shared;
use super::{Session, SessionError};
use crate::catalog::ShardId;
use crate::executor::gather::Combined;
use crate::executor::general::{BoundCombine, CombineJob};
use crate::executor::grouped::{self, AggregateJob};
use crate::frontend::pipeline::Pending;
use crate::frontend::socket::ClientSocket;
use crate::protocol::{self, Extended};
use crate::router::route as routing;
use bytes::BytesMut;
use std::sync::Arc;

impl Session {
    /// The proxy's merge of a grouped read: as a simple query, or at a Bind when none of the
    /// shards is in the middle of the client's batch (the shards' part then ends with a Sync
    /// of its own, so the general path can still take over).
    pub(super) fn aggregate_job(
        &self,
        merge: &Arc<crate::router::plan::AggregateMerge>,
        combine: &Arc<crate::router::plan::CombinePlan>,
        source: &super::dest::Source<'_>,
        shards: &[ShardId],
    ) -> Option<AggregateJob> {
        let (bound, messages) = match source {
            super::dest::Source::Simple(_) => (None, None),
            super::dest::Source::Placement => return None,
            super::dest::Source::Bind {
                portal,
                statement,
                rest,
            } => {
                let mid_batch = self
                    .links
                    .parked
                    .iter()
                    .chain(self.links.current.as_ref())
                    .any(|l| l.batch_sent && shards.contains(&l.shard()));
                if mid_batch {
                    return None;
                }
                let values = routing::select_params(rest, &merge.params).ok()?;
                let types = routing::select_param_types(&statement.param_types, &merge.params);
                let mut m = BytesMut::new();
                Extended::new(&mut m)
                    .parse(b"", merge.shard_sql.as_bytes(), &types)
                    .bind(b"", &values)
                    .describe_portal()
                    .execute()
                    .sync();
                let bound = BoundCombine {
                    portal: (*portal).into(),
                    param_types: statement.param_types.to_vec(),
                    rest: rest.to_vec(),
                };
                (Some(bound), Some(m))
            }
        };
        Some(AggregateJob {
            merge: merge.clone(),
            shards: shards.to_vec(),
            messages,
            fallback: CombineJob {
                plan: combine.clone(),
                bound,
                shards: shards.to_vec(),
            },
        })
    }

    /// Answers a grouped read the proxy merges.
    pub(super) async fn run_aggregate(
        &mut self,
        job: AggregateJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let ctx = self.ctx.clone();
        let answered = grouped::answer(&mut self.host(Some(client)), shared(&ctx), &job).await?;
        self.answer_combined(answered, job.fallback.bound.map(|b| b.portal))
    }

    /// Answers a read over several shards: ReadyForQuery after rows streamed to the client
    /// (`None`), or the combined rows as the answer or the Bind's portal.
    pub(super) fn answer_combined(
        &mut self,
        answered: Option<Combined>,
        portal: Option<Box<[u8]>>,
    ) -> Result<(), SessionError> {
        match answered {
            None => {
                let status = self.links.status();
                protocol::ready_for_query(&mut self.cout, status);
                Ok(())
            }
            Some(combined) => self.answer_grouped(combined, portal),
        }
    }

    /// Answers a simple query with combined rows, or makes them the Bind's portal.
    pub(super) fn answer_grouped(
        &mut self,
        combined: Combined,
        portal: Option<Box<[u8]>>,
    ) -> Result<(), SessionError> {
        let Some(portal) = portal else {
            return self.answer(&combined);
        };
        match combined {
            Combined::Rows(rows) => {
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portals.put_buffered(portal, rows);
            }
            Combined::Failed { mut notices, error } => {
                notices.extend_from_slice(&error);
                self.pipeline
                    .push(Pending::composed(notices.freeze()), &mut self.cout);
                self.batch.skip_until_sync = true;
            }
        }
        Ok(())
    }
}
