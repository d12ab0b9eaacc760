//! The session's side of the proxy's merge of a grouped read: the shards' statement on each
//! shard at once, their rows merged per group; the general path when a column's type rules
//! the merge out.

use super::{Session, SessionError};
use crate::catalog::ShardId;
use crate::executor::gather::{self, Combine, Combined};
use crate::executor::general::{BoundCombine, CombineJob};
use crate::executor::host::Work;
use crate::executor::merge::aggregate::{self, Merged};
use crate::frontend::pipeline::Pending;
use crate::frontend::socket::ClientSocket;
use crate::protocol::{self, Extended};
use crate::router::plan::{AggregateMerge, ColumnMerge, Merge, SortKey, StatementKind};
use crate::router::route as routing;
use bytes::BytesMut;
use std::sync::Arc;

pub(super) struct AggregateJob {
    pub(super) merge: Arc<AggregateMerge>,
    pub(super) shards: Vec<ShardId>,
    /// For a Bind: Parse, Bind (the parameters the shards' statement uses, the client's
    /// result formats), Describe, Execute and Sync of the shards' statement.
    pub(super) messages: Option<BytesMut>,
    /// The general path, with the client's Bind if there is one.
    pub(super) fallback: CombineJob,
}

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
    ) -> Option<super::aggregate::AggregateJob> {
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
        Some(super::aggregate::AggregateJob {
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

    pub(super) async fn run_aggregate(
        &mut self,
        job: AggregateJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let select = Combine::Union {
            kind: StatementKind::Select,
            merge: Default::default(),
            rows: Vec::new(),
        };
        let answered = match &job.messages {
            None => {
                let sql = vec![job.merge.shard_sql.clone(); job.shards.len()];
                self.run_on_shards(&job.shards, Work::Simple(&sql), &select)
                    .await?
            }
            Some(m) => {
                let messages = vec![m.clone(); job.shards.len()];
                self.run_on_shards(&job.shards, Work::Batches(&messages), &select)
                    .await?
            }
        };
        let portal = job.fallback.bound.as_ref().map(|b| b.portal.clone());
        let rows = match answered {
            Combined::Rows(r) => r,
            failed @ Combined::Failed { .. } => return self.answer_grouped(failed, portal),
        };
        let Some(description) = rows.description.clone() else {
            return self.answer_grouped(Combined::Rows(rows), portal);
        };
        // Text is compared (ORDER BY, min, max) only in a collation that orders by code point.
        let compared: Vec<SortKey> = job
            .merge
            .order
            .iter()
            .cloned()
            .chain(
                job.merge
                    .columns
                    .iter()
                    .enumerate()
                    .filter(|(_, c)| matches!(c, ColumnMerge::Min | ColumnMerge::Max))
                    .map(|(column, _)| SortKey {
                        column,
                        descending: false,
                        nulls_first: false,
                    }),
            )
            .collect();
        let check = Merge {
            order: compared,
            ..Merge::default()
        };
        let bytewise =
            gather::check_text_order(&description, job.shards[0], &check, &self.ctx.control).await;
        let merged = match bytewise {
            Ok(()) => aggregate::merge(&job.merge, &description, rows.rows),
            Err(why) => Merged::Fallback(why),
        };
        match merged {
            Merged::Rows(mut merged) => {
                merged.notices = rows.notices;
                self.answer_grouped(Combined::Rows(merged), portal)
            }
            Merged::Failed(error) => self.answer_grouped(
                Combined::Failed {
                    notices: rows.notices,
                    error,
                },
                portal,
            ),
            Merged::Fallback(why) => {
                tracing::debug!(parent: &self.span, %why, "grouped read left to the general path");
                self.run_combining(job.fallback, client).await
            }
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
