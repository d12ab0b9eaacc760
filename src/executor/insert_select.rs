//! An INSERT … SELECT that cannot run on the shards as it is, in two steps: the SELECT
//! answered where its plan says (one shard, or gathered from several), then its rows, grouped
//! by the shard their target key belongs to, sent to each shard as batches of a parameterised
//! multi-row INSERT (values as text parameters, which the server reads with the target columns'
//! input functions, as it would the SELECT's own output); one combined answer for the client.

use crate::catalog::{Snapshot, Table};
use crate::client_error::ClientError;
use crate::executor::gather::{self, Combine, Combined};
use crate::executor::host::{run_on_shards, Host, Shared, Work};
use crate::model::ShardId;
use crate::protocol::{Extended, TxStatus, NO_PARAM_TYPES};
use crate::router::hash::KeyValue;
use crate::router::place;
use crate::router::plan::{InsertSelect, Plan, ShardedPlan, StatementKind};
use crate::router::route::{self as routing, Params};
use bytes::BufMut;
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;
use tokio_postgres::error::SqlState;

/// Why the proxy could not insert a row of the SELECT.
#[derive(Debug, thiserror::Error)]
pub enum InsertSelectError {
    #[error("a sharding-key value of the SELECT is not valid UTF-8")]
    KeyNotUtf8,
}

impl ClientError for InsertSelectError {
    fn sqlstate(&self) -> SqlState {
        match self {
            InsertSelectError::KeyNotUtf8 => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// Runs the INSERT … SELECT of `plan` over the session `host`: its answer (nothing for a plan
/// without one).
pub async fn run<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    plan: &ShardedPlan,
) -> Result<Option<Combined>, H::Error> {
    InsertSelectRun { host, shared }.run(plan).await
}

struct InsertSelectRun<'a, H: Host> {
    host: &'a mut H,
    shared: Shared<'a>,
}

impl<H: Host> InsertSelectRun<'_, H> {
    async fn run(&mut self, plan: &ShardedPlan) -> Result<Option<Combined>, H::Error> {
        let Some(job) = plan.insert_select.as_deref() else {
            return Ok(None);
        };
        let snapshot = self.shared.catalog.snapshot();
        // 1. The SELECT.
        let (shards, sql, merge) = match &*job.source {
            Plan::Sharded(sp) => {
                let routed = match routing::route(&snapshot, sp, &Params::default()) {
                    Ok(r) => r,
                    Err(e) => return Ok(Some(failed(e.error_frame()))),
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
                let shard = match self.host.links().current_shard() {
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
                let shard = self.host.links().current_shard().unwrap_or(ShardId(0));
                (vec![shard], job.select_sql.clone(), Default::default())
            }
        };
        let Some(target) = snapshot.table(plan.table) else {
            return Ok(None);
        };
        // Rows in no particular order, all of them: read a slice at a time through a cursor
        // and inserted as they come, so memory stays bounded. An order, a limit or RETURNING
        // rows need the whole result at once.
        let plain = merge.order.is_empty() && merge.limit.is_none() && merge.offset == 0;
        if plain && !plan.returning {
            return self
                .in_slices(job, &snapshot, target, &shards, &sql)
                .await
                .map(Some);
        }
        let select = Combine::Union {
            kind: StatementKind::Select,
            merge,
            rows: Vec::new(),
        };
        let sql = vec![sql; shards.len()];
        let rows = match run_on_shards(self.host, self.shared, &shards, Work::Simple(&sql), &select)
            .await?
        {
            Combined::Rows(r) => r.rows,
            failed @ Combined::Failed { .. } => return Ok(Some(failed)),
        };
        // 2. Each row to its shard.
        let by_shard = match by_shard(job, &snapshot, target, rows) {
            Ok(by_shard) => by_shard,
            Err(error) => return Ok(Some(failed(error))),
        };
        // 3. The batches.
        if by_shard.is_empty() {
            return Ok(Some(inserted_rows(0, BytesMut::new())));
        }
        self.insert_batches(job, &by_shard).await.map(Some)
    }

    /// INSERT … SELECT through a cursor on each source shard: FETCH a slice, insert its rows on
    /// their shards, and again until the cursor is spent. Outside a transaction block every shard
    /// taking part runs its share in a block of its own, committed once all rows are in (rolled
    /// back on any failure), as the statement is one; inside one, the shards join the block.
    async fn in_slices(
        &mut self,
        job: &InsertSelect,
        snapshot: &Snapshot,
        target: &Table,
        sources: &[ShardId],
        sql: &str,
    ) -> Result<Combined, H::Error> {
        let implicit = self.host.links().status() == TxStatus::Idle;
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
                let begun = run_on_shards(
                    self.host,
                    self.shared,
                    sources,
                    Work::Simple(&begin),
                    &select,
                )
                .await?;
                if let f @ Combined::Failed { .. } = begun {
                    break 'run Some(f);
                }
            }
            for &source in sources {
                let declare = [format!("DECLARE {CURSOR} NO SCROLL CURSOR FOR {sql}")];
                let fetch = [format!("FETCH {SLICE_ROWS} FROM {CURSOR}")];
                let declared = run_on_shards(
                    self.host,
                    self.shared,
                    &[source],
                    Work::Simple(&declare),
                    &select,
                )
                .await?;
                if let f @ Combined::Failed { .. } = declared {
                    break 'run Some(f);
                }
                loop {
                    let rows = match run_on_shards(
                        self.host,
                        self.shared,
                        &[source],
                        Work::Simple(&fetch),
                        &select,
                    )
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
                let closed = run_on_shards(
                    self.host,
                    self.shared,
                    &[source],
                    Work::Simple(&close),
                    &select,
                )
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
                self.host.links().end_open_blocks("ROLLBACK").await?;
            } else if let Err(error) = self.host.commit().commit_participants().await? {
                return Ok(failed(error));
            }
        }
        Ok(failure.unwrap_or_else(|| inserted_rows(total, notices)))
    }

    /// Inserts each shard's rows in batches on that shard.
    async fn insert_batches(
        &mut self,
        job: &InsertSelect,
        by_shard: &BTreeMap<ShardId, Vec<Bytes>>,
    ) -> Result<Combined, H::Error> {
        let shards: Vec<ShardId> = by_shard.keys().copied().collect();
        let messages: Vec<BytesMut> = by_shard.values().map(|rows| batches(job, rows)).collect();
        let insert = Combine::Union {
            kind: StatementKind::Insert,
            merge: Default::default(),
            rows: Vec::new(),
        };
        run_on_shards(
            self.host,
            self.shared,
            &shards,
            Work::Batches(&messages),
            &insert,
        )
        .await
    }
}

/// The answer `INSERT 0 n`, after the shards' notices.
fn inserted_rows(n: u64, notices: BytesMut) -> Combined {
    Combined::Rows(gather::Rows {
        notices,
        tag: Some(format!("INSERT 0 {n}")),
        ..Default::default()
    })
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
    target: &Table,
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
            return Err(InsertSelectError::KeyNotUtf8.error_frame());
        };
        let (key, set_key) = key.split_at(key_len.min(key.len()));
        let shard = place::shard_for(snapshot, target, key, set_key)
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

/// Parameters per statement at most (the protocol counts them in 16 bits).
const MAX_PARAMS: usize = 32_767;
/// Rows per INSERT at most, so one statement stays a reasonable size.
const MAX_ROWS: usize = 1000;

/// The messages that insert `rows` (DataRow frames in text format) on one shard: Parse, Bind,
/// Describe and Execute per batch, then Sync, so the shard's part commits (or fails) as one.
pub fn batches(job: &InsertSelect, rows: &[Bytes]) -> BytesMut {
    let width = job.insert_columns.len().max(1);
    let per_batch = (MAX_PARAMS / width).clamp(1, MAX_ROWS);
    let mut out = BytesMut::new();
    for batch in rows.chunks(per_batch) {
        let mut sql = job.insert_head.clone();
        sql.push_str("VALUES ");
        for (r, _) in batch.iter().enumerate() {
            if r > 0 {
                sql.push_str(", ");
            }
            sql.push('(');
            for c in 0..width {
                if c > 0 {
                    sql.push_str(", ");
                }
                sql.push_str(&format!("${}", r * width + c + 1));
            }
            sql.push(')');
        }
        sql.push_str(&job.insert_tail);
        // No parameter formats (all text), the values, no result formats.
        let mut bind = BytesMut::new();
        bind.put_i16(0);
        bind.put_i16((batch.len() * width) as i16);
        for row in batch {
            let values = super::gather::values(row);
            for c in 0..width {
                match values.get(c).copied().flatten() {
                    Some(v) => {
                        bind.put_i32(v.len() as i32);
                        bind.extend_from_slice(v);
                    }
                    None => bind.put_i32(-1),
                }
            }
        }
        bind.put_i16(0);
        Extended::new(&mut out)
            .parse(b"", sql.as_bytes(), NO_PARAM_TYPES)
            .bind(b"", &bind)
            .describe_portal()
            .execute();
    }
    Extended::new(&mut out).sync();
    out
}
