//! The session's side of a two-step INSERT … SELECT: the SELECT answered where its plan says
//! (one shard, or gathered from several), its rows routed by the target's sharding key, each
//! shard's rows inserted in batches, one combined answer for the client.

use super::{Session, SessionError};
use crate::catalog::{ShardId, Snapshot};
use crate::client_error::ClientError;
use crate::executor::gather::{self, Combine, Combined};
use crate::executor::host::Work;
use crate::frontend::pipeline::Pending;
use crate::frontend::FrontendError;
use crate::protocol::{self, TxStatus};
use crate::router::hash::KeyValue;
use crate::router::plan::{InsertSelect, Plan, ShardedPlan, StatementKind};
use crate::router::route::{self as routing, Params};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use std::sync::Arc;

impl Session {
    pub(super) async fn run_insert_select(
        &mut self,
        plan: Arc<ShardedPlan>,
    ) -> Result<(), SessionError> {
        let Some(job) = plan.insert_select.as_deref() else {
            return Ok(());
        };
        let snapshot = self.ctx.catalog.snapshot();
        // 1. The SELECT.
        let (shards, sql, merge) = match &*job.source {
            Plan::Sharded(sp) => {
                let routed = match routing::route(&snapshot, sp, &Params::default()) {
                    Ok(r) => r,
                    Err(e) => return self.answer_error(&e),
                };
                let shards = routed.route.into_shards(&snapshot);
                let sql = sp
                    .merge
                    .shard_sql
                    .clone()
                    .unwrap_or_else(|| job.select_sql.clone());
                (shards, sql, sp.merge.clone())
            }
            Plan::Fixed(s) => (vec![*s], job.select_sql.clone(), Default::default()),
            Plan::AnyOf(s) => {
                let shard = match self.links.current_shard() {
                    Some(c) if s.contains(&c) => c,
                    _ => s[0],
                };
                (vec![shard], job.select_sql.clone(), Default::default())
            }
            Plan::Anywhere
            | Plan::Every(_)
            | Plan::Utility(_)
            | Plan::Script
            | Plan::Copy(_)
            | Plan::Refused(_)
            | Plan::Sequence(_)
            | Plan::Combine(_)
            | Plan::Explain(_) => {
                let shard = self.links.current_shard().unwrap_or(ShardId(0));
                (vec![shard], job.select_sql.clone(), Default::default())
            }
        };
        let Some(target) = snapshot.table(plan.table) else {
            return Ok(());
        };
        // Rows in no particular order, all of them: read a slice at a time through a cursor
        // and inserted as they come, so memory stays bounded. An order, a limit or RETURNING
        // rows need the whole result at once.
        let plain = merge.order.is_empty() && merge.limit.is_none() && merge.offset == 0;
        if plain && !plan.returning {
            return self
                .insert_select_in_slices(job, &snapshot, target, &shards, &sql)
                .await;
        }
        let select = Combine::Union {
            kind: StatementKind::Select,
            merge,
            rows: Vec::new(),
        };
        let sql = vec![sql; shards.len()];
        let rows = match self
            .run_on_shards(&shards, Work::Simple(&sql), &select)
            .await?
        {
            Combined::Rows(r) => r.rows,
            failed @ Combined::Failed { .. } => return self.answer(&failed),
        };
        // 2. Each row to its shard.
        let by_shard = match by_shard(job, &snapshot, target, rows) {
            Ok(by_shard) => by_shard,
            Err(error) => return self.answer(&failed(error)),
        };
        // 3. The batches.
        if by_shard.is_empty() {
            return self.answer_inserted(0, BytesMut::new());
        }
        let combined = self.insert_batches(job, &by_shard).await?;
        self.answer(&combined)
    }

    /// INSERT … SELECT through a cursor on each source shard: FETCH a slice, insert its rows on
    /// their shards, and again until the cursor is spent. Outside a transaction block every shard
    /// taking part runs its share in a block of its own, committed once all rows are in (rolled
    /// back on any failure), as the statement is one; inside one, the shards join the block.
    async fn insert_select_in_slices(
        &mut self,
        job: &InsertSelect,
        snapshot: &Snapshot,
        target: &crate::catalog::Table,
        sources: &[ShardId],
        sql: &str,
    ) -> Result<(), SessionError> {
        let implicit = self.links.status() == TxStatus::Idle;
        let select = Combine::Union {
            kind: StatementKind::Select,
            merge: Default::default(),
            rows: Vec::new(),
        };
        let sql = sql.trim().trim_end_matches(';');
        let mut notices = BytesMut::new();
        let mut total = 0u64;
        let failure = 'run: {
            if implicit {
                let begin = vec!["BEGIN".to_string(); sources.len()];
                let begun = self
                    .run_on_shards(sources, Work::Simple(&begin), &select)
                    .await?;
                if let f @ Combined::Failed { .. } = begun {
                    break 'run Some(f);
                }
            }
            for &source in sources {
                let declare = [format!("DECLARE {CURSOR} NO SCROLL CURSOR FOR {sql}")];
                let fetch = [format!("FETCH {SLICE_ROWS} FROM {CURSOR}")];
                let declared = self
                    .run_on_shards(&[source], Work::Simple(&declare), &select)
                    .await?;
                if let f @ Combined::Failed { .. } = declared {
                    break 'run Some(f);
                }
                loop {
                    let rows = match self
                        .run_on_shards(&[source], Work::Simple(&fetch), &select)
                        .await?
                    {
                        Combined::Rows(r) => {
                            notices.extend_from_slice(&r.notices);
                            r.rows
                        }
                        f @ Combined::Failed { .. } => break 'run Some(f),
                    };
                    if rows.is_empty() {
                        break;
                    }
                    let by_shard = match by_shard(job, snapshot, target, rows) {
                        Ok(by_shard) => by_shard,
                        Err(error) => break 'run Some(failed(error)),
                    };
                    match self.insert_batches(job, &by_shard).await? {
                        Combined::Rows(r) => {
                            notices.extend_from_slice(&r.notices);
                            total += r.tag.as_deref().and_then(inserted).unwrap_or(0);
                        }
                        f @ Combined::Failed { .. } => break 'run Some(f),
                    }
                }
                let close = [format!("CLOSE {CURSOR}")];
                let closed = self
                    .run_on_shards(&[source], Work::Simple(&close), &select)
                    .await?;
                if let f @ Combined::Failed { .. } = closed {
                    break 'run Some(f);
                }
            }
            None
        };
        if implicit {
            // Every shard's share commits together, by two-phase commit when several wrote.
            if failure.is_some() {
                self.end_every_participant("ROLLBACK").await?;
            } else if let Err(error) = self.commit_participants().await? {
                return self.answer(&failed(error));
            }
        }
        match failure {
            Some(f) => self.answer(&f),
            None => self.answer_inserted(total, notices),
        }
    }

    /// Inserts each shard's rows in batches on that shard.
    async fn insert_batches(
        &mut self,
        job: &InsertSelect,
        by_shard: &BTreeMap<ShardId, Vec<Bytes>>,
    ) -> Result<Combined, SessionError> {
        let shards: Vec<ShardId> = by_shard.keys().copied().collect();
        let messages: Vec<BytesMut> = by_shard
            .values()
            .map(|rows| crate::executor::insert_select::batches(job, rows))
            .collect();
        let insert = Combine::Union {
            kind: StatementKind::Insert,
            merge: Default::default(),
            rows: Vec::new(),
        };
        self.run_on_shards(&shards, Work::Batches(&messages), &insert)
            .await
    }

    /// Answers `INSERT 0 n` and ReadyForQuery.
    fn answer_inserted(&mut self, n: u64, mut out: BytesMut) -> Result<(), SessionError> {
        protocol::command_complete(&mut out, &format!("INSERT 0 {n}"));
        let status = self.links.status();
        protocol::ready_for_query(&mut out, status);
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    /// Answers the client's simple query with a combined result and ReadyForQuery.
    pub(super) fn answer(&mut self, combined: &Combined) -> Result<(), SessionError> {
        let mut out = BytesMut::new();
        gather::write(combined, &mut out);
        let status = self.links.status();
        protocol::ready_for_query(&mut out, status);
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    fn answer_error(&mut self, e: &impl ClientError) -> Result<(), SessionError> {
        let mut out = BytesMut::from(&e.error_frame()[..]);
        let status = self.links.status();
        protocol::ready_for_query(&mut out, status);
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }
}

/// Rows fetched from a source shard's cursor at a time.
const SLICE_ROWS: usize = 10_000;
/// The cursor's name on the source shards.
const CURSOR: &str = "shardwire_insert_select";

/// The rows of a SELECT grouped by the shard their target key belongs to; the failure to
/// answer if a key cannot be placed.
fn by_shard(
    job: &InsertSelect,
    snapshot: &Snapshot,
    target: &crate::catalog::Table,
    rows: impl IntoIterator<Item = Bytes>,
) -> Result<BTreeMap<ShardId, Vec<Bytes>>, Bytes> {
    let mut by_shard: BTreeMap<ShardId, Vec<Bytes>> = BTreeMap::new();
    let key_len = target.key_columns.len();
    for row in rows {
        let values = gather::values(&row);
        let key: Result<Vec<KeyValue<'_>>, _> = job
            .key_positions
            .iter()
            .map(|&p| match values.get(p).copied().flatten() {
                None => Ok(KeyValue::Null),
                Some(v) => std::str::from_utf8(v).map(KeyValue::Text),
            })
            .collect();
        let Ok(key) = key else {
            return Err(FrontendError::KeyNotUtf8.error_frame());
        };
        let (key, set_key) = key.split_at(key_len.min(key.len()));
        let shard = crate::router::place::shard_for(snapshot, target, key, set_key)
            .map_err(|e| routing::RouteError::Place(e).error_frame())?;
        drop(values);
        by_shard.entry(shard).or_default().push(row);
    }
    Ok(by_shard)
}

/// A failed answer of the proxy's own error.
fn failed(error: Bytes) -> Combined {
    Combined::Failed {
        notices: BytesMut::new(),
        error,
    }
}

/// The row count of an `INSERT 0 n` tag.
fn inserted(tag: &str) -> Option<u64> {
    tag.rsplit(' ').next()?.parse().ok()
}
