//! The session's side of the proxy's merge of a grouped read: the shards' statement on each
//! shard at once, their rows merged per group; the general path when a column's type rules
//! the merge out.

use super::combining::CombineJob;
use super::insert_select::Work;
use super::*;
use crate::executor::gather::{self, Combine, Combined};
use crate::executor::merge::aggregate::{self, Merged};
use crate::router::plan::{AggregateMerge, ColumnMerge, Merge, SortKey, StatementKind};

pub(super) struct AggregateJob {
    pub(super) merge: Arc<AggregateMerge>,
    pub(super) shards: Vec<ShardId>,
    pub(super) fallback: CombineJob,
}

impl Session {
    pub(super) async fn run_aggregate(
        &mut self,
        job: AggregateJob,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let sql = vec![job.merge.shard_sql.clone(); job.shards.len()];
        let select = Combine::Union {
            kind: StatementKind::Select,
            merge: Default::default(),
            rows: Vec::new(),
        };
        let rows = match self
            .run_on_shards(&job.shards, Work::Simple(&sql), &select)
            .await?
        {
            Combined::Rows(r) => r,
            failed @ Combined::Failed { .. } => return self.answer(&failed),
        };
        let Some(description) = rows.description.clone() else {
            return self.answer(&Combined::Rows(rows));
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
                self.answer(&Combined::Rows(merged))
            }
            Merged::Failed(error) => self.answer(&Combined::Failed {
                notices: rows.notices,
                error,
            }),
            Merged::Fallback(why) => {
                tracing::debug!(parent: &self.span, %why, "grouped read left to the general path");
                self.run_combining(job.fallback, client).await
            }
        }
    }
}
