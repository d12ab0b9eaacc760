//! What a caller asks of the general path, each a way for the combining statement to end:
//! its answer to the client ([`answer`]), a holdable cursor over its rows
//! ([`declare_cursor`]), its rows stored on the combining shard ([`materialize`]), or every
//! step explained ([`explain_analyze`]).

use super::{failed, Answered, CombineError, CombineJob, GeneralPath, Keep, Mode, COMBINER};
use crate::backend::pool::Pooled;
use crate::client_error::ClientError;
use crate::executor::gather::{self, Combine, Combined};
use crate::executor::host::{run_on_shards, Host, Shared, Work};
use crate::model::ShardId;
use bytes::Bytes;

/// Answers `job` over the session `host`: its combined answer, or nothing when a simple
/// query's rows were streamed to the client.
pub async fn answer<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    job: &CombineJob,
) -> Result<Option<Combined>, H::Error> {
    shared.metrics.routed_multi.increment(1);
    let mut path = GeneralPath::new(host, shared);
    path.copy_out = job.plan.copy_out;
    let mut answered = Answered::Fallback;
    if let (Some(partial), false) = (&job.plan.partial, job.shards.is_empty()) {
        answered = path
            .combine(job, Mode::Partial(partial), &job.shards)
            .await?;
    }
    if let Answered::Fallback = answered {
        answered = path.combine_pulls(job).await?;
    }
    Ok(match answered {
        Answered::Streamed => None,
        Answered::Combined(c) => Some(c),
        // No cursor was asked for.
        Answered::Fallback | Answered::Declared => Some(failed(
            CombineError::Combine("no way to combine the rows".into()).error_frame(),
        )),
    })
}

/// Declares a cursor over `job`'s combined rows on the combining connection (`declare`: the
/// statement up to its query, `… WITH HOLD FOR`), which PostgreSQL materialises when the
/// combining transaction commits; returns that connection, which holds the cursor from then on
/// (`Ok(Err(frame))`: the ErrorResponse of a failure).
pub async fn declare_cursor<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    job: &CombineJob,
    declare: &str,
) -> Result<Result<Pooled, Bytes>, H::Error> {
    shared.metrics.routed_multi.increment(1);
    let mut path = GeneralPath::new(host, shared);
    path.keep = Some(Keep {
        before: declare,
        after: "",
        connection: true,
    });
    let answered = path.combine_pulls(job).await?;
    Ok(match (answered, path.kept.take()) {
        (Answered::Declared, Some(conn)) => Ok(conn),
        (Answered::Combined(Combined::Failed { error, .. }), _) => Err(error),
        _ => Err(CombineError::Combine("the cursor was not declared".into()).error_frame()),
    })
}

/// Stores `job`'s combined rows on the combining shard: `before` and `after` the combining
/// statement in one query string (`CREATE TABLE … AS`, then what reads that table), committed
/// there with the rows (`Ok(Err(frame))`: the ErrorResponse of a failure).
pub async fn materialize<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    job: &CombineJob,
    before: &str,
    after: &str,
) -> Result<Result<(), Bytes>, H::Error> {
    shared.metrics.routed_multi.increment(1);
    let mut path = GeneralPath::new(host, shared);
    path.keep = Some(Keep {
        before,
        after,
        connection: false,
    });
    Ok(match path.combine_pulls(job).await? {
        Answered::Declared => Ok(()),
        Answered::Combined(Combined::Failed { error, .. }) => Err(error),
        Answered::Combined(Combined::Rows(_)) | Answered::Streamed | Answered::Fallback => {
            Err(CombineError::Combine("the rows were not stored".into()).error_frame())
        }
    })
}

/// The shard where [`materialize`] stores the rows.
pub const MATERIALIZED_ON: ShardId = COMBINER;

/// EXPLAIN ANALYZE of `job`'s read (`options`: the client's, ANALYZE among them): each
/// table's pull explained on its shards, the rows loaded as for the read, the combining
/// statement explained where it runs, with the proxy's time for each step. The lines under the
/// proxy's own plan, or the ErrorResponse of a failure.
pub async fn explain_analyze<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    job: &CombineJob,
    options: &str,
) -> Result<Result<Vec<String>, Bytes>, H::Error> {
    let mut path = GeneralPath::new(host, shared);
    path.explain = Some(options);
    let snapshot = shared.catalog.snapshot();
    for pull in &job.plan.pulls {
        let shards = match path.pull_sources(&snapshot, &pull.route) {
            Ok(s) => s,
            Err(error) => return Ok(Err(error)),
        };
        let names = shards
            .iter()
            .map(|&s| {
                snapshot
                    .shard(s)
                    .map_or_else(|| s.to_string(), |s| s.name.clone())
            })
            .collect();
        let explain = vec![format!("EXPLAIN ({options}) {}", pull.select); shards.len()];
        let combine = Combine::Explain(gather::ExplainAnalyze {
            head: vec![format!("  Rows into {}:", pull.temp)],
            shards: names,
            writes: false,
            started: std::time::Instant::now(),
        });
        match run_on_shards(path.host, shared, &shards, Work::Simple(&explain), &combine).await? {
            Combined::Failed { error, .. } => return Ok(Err(error)),
            Combined::Rows(rows) => path.explained.extend(rows.rows.iter().filter_map(|r| {
                gather::values(r)
                    .first()
                    .copied()
                    .flatten()
                    .map(|v| String::from_utf8_lossy(v).into_owned())
            })),
        }
    }
    let started = std::time::Instant::now();
    let answered = path.combine_pulls(job).await?;
    let mut lines = std::mem::take(&mut path.explained);
    lines.push(format!(
        "  Proxy: rows loaded and combined in {:.3} ms",
        started.elapsed().as_secs_f64() * 1000.0
    ));
    Ok(match answered {
        Answered::Combined(Combined::Failed { error, .. }) => Err(error),
        Answered::Combined(Combined::Rows(_)) => Ok(lines),
        Answered::Streamed | Answered::Fallback | Answered::Declared => {
            Err(CombineError::Combine("the read was not explained".into()).error_frame())
        }
    })
}
