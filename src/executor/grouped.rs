//! A grouped read over several shards merged by the proxy: the shards' statement on each shard
//! at once, their rows merged per group (`merge::aggregate`); the general path when a column's
//! type or collation rules the merge out.

use crate::executor::gather::{self, Combine, Combined};
use crate::executor::general::{self, CombineJob};
use crate::executor::host::{run_on_shards, Host, Shared, Work};
use crate::executor::merge::aggregate::{self, Merged};
use crate::model::ShardId;
use crate::router::plan::{AggregateMerge, ColumnMerge, Merge, SortKey, StatementKind};
use bytes::BytesMut;
use std::sync::Arc;

/// A grouped read the proxy merges.
pub struct AggregateJob {
    pub merge: Arc<AggregateMerge>,
    pub shards: Vec<ShardId>,
    /// For a Bind: Parse, Bind (the parameters the shards' statement uses, the client's
    /// result formats), Describe, Execute and Sync of the shards' statement.
    pub messages: Option<BytesMut>,
    /// The general path, with the client's Bind if there is one.
    pub fallback: CombineJob,
}

/// Answers `job` over the session `host`: the merged rows, or nothing when the general path
/// streamed them to the client.
pub async fn answer<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    job: &AggregateJob,
) -> Result<Option<Combined>, H::Error> {
    let select = Combine::Union {
        kind: StatementKind::Select,
        merge: Default::default(),
        rows: Vec::new(),
    };
    let answered = match &job.messages {
        None => {
            let sql = vec![job.merge.shard_sql.clone(); job.shards.len()];
            run_on_shards(host, shared, &job.shards, Work::Simple(&sql), &select).await?
        }
        Some(m) => {
            let messages = vec![m.clone(); job.shards.len()];
            run_on_shards(host, shared, &job.shards, Work::Batches(&messages), &select).await?
        }
    };
    let rows = match answered {
        Combined::Rows(r) => r,
        failed @ Combined::Failed { .. } => return Ok(Some(failed)),
    };
    let Some(description) = rows.description.clone() else {
        return Ok(Some(Combined::Rows(rows)));
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
        gather::check_text_order(&description, job.shards[0], &check, shared.control).await;
    let merged = match bytewise {
        Ok(()) => aggregate::merge(&job.merge, &description, rows.rows),
        Err(why) => Merged::Fallback(why),
    };
    match merged {
        Merged::Rows(mut merged) => {
            merged.notices = rows.notices;
            Ok(Some(Combined::Rows(merged)))
        }
        Merged::Failed(error) => Ok(Some(Combined::Failed {
            notices: rows.notices,
            error,
        })),
        Merged::Fallback(why) => {
            tracing::debug!(parent: host.span(), %why, "grouped read left to the general path");
            general::answer(host, shared, &job.fallback).await
        }
    }
}
