//! A SQL cursor over several shards (`DECLARE c CURSOR FOR …` whose query the streaming merge
//! answers): a cursor of the same name on each shard, over the session's own connections (so it
//! lives in the client's block, or with HOLD beyond it), read a batch at a time as the client's
//! FETCH and MOVE need rows, merged in ORDER BY order ([`gather::cursor::Merging`]).

use crate::executor::gather::cursor::{Merging, Progress};
use crate::executor::gather::{self, own_error, Combine, Combined, Sink};
use crate::executor::host::{run_on_shards, Host, Shared, Work};
use crate::model::ShardId;
use crate::protocol;
use crate::router::plan::Merge;
use crate::sql::quote::quote_ident;
use bytes::{Bytes, BytesMut};

/// Rows read from each shard's cursor per round trip.
const BATCH: usize = 1_000;
/// Output gathered before it is written to the client.
const WRITE_AT: usize = 1 << 20;

/// What a FETCH of a merged cursor answers.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Fetch {
    /// FETCH: the rows.
    Rows,
    /// MOVE: the count only.
    Move,
    /// Passing over rows on the way to the one asked for (ABSOLUTE, RELATIVE): no answer.
    Pass,
}

pub struct ShardCursor {
    pub name: String,
    pub shards: Vec<ShardId>,
    pub hold: bool,
    merging: Merging,
    /// The collation of text sort columns was checked (once the description came).
    order_checked: bool,
    /// Rows the client has fetched or moved past: its position.
    pub position: u64,
}

/// How a cursor is declared on each shard.
pub struct Declared<'a> {
    pub name: &'a str,
    pub binary: bool,
    pub hold: bool,
    /// What each shard runs (the streaming merge's shard SQL, sort columns added).
    pub shard_sql: &'a [String],
    pub merge: Merge,
}

impl ShardCursor {
    /// Declares the cursor on every shard; `Ok(Err(frame))`: a shard refused (the ErrorResponse).
    pub async fn open<H: Host>(
        host: &mut H,
        shared: Shared<'_>,
        shards: &[ShardId],
        d: Declared<'_>,
    ) -> Result<Result<ShardCursor, Bytes>, H::Error> {
        let declares: Vec<String> = d
            .shard_sql
            .iter()
            .map(|sql| {
                format!(
                    "DECLARE {} {}NO SCROLL CURSOR {}FOR {sql}",
                    quote_ident(d.name),
                    if d.binary { "BINARY " } else { "" },
                    if d.hold { "WITH HOLD " } else { "" },
                )
            })
            .collect();
        match run_on_shards(
            host,
            shared,
            shards,
            Work::Simple(&declares),
            &Combine::Each,
        )
        .await?
        {
            Combined::Failed { error, .. } => Ok(Err(error)),
            Combined::Rows(_) => Ok(Ok(ShardCursor {
                name: d.name.to_string(),
                shards: shards.to_vec(),
                hold: d.hold,
                merging: Merging::new(d.merge, shards.len()),
                order_checked: false,
                position: 0,
            })),
        }
    }

    /// The next `count` rows (`None`: all the rest), or past them: the answer written to the
    /// client's sink as PostgreSQL writes a FETCH's or MOVE's (without ReadyForQuery), or, for
    /// [`Fetch::Pass`], nothing but an error. Whether it failed.
    pub async fn fetch<H: Host>(
        &mut self,
        host: &mut H,
        shared: Shared<'_>,
        count: Option<u64>,
        how: Fetch,
    ) -> Result<bool, H::Error> {
        let mut out = BytesMut::new();
        let rows_wanted = how == Fetch::Rows;
        let mut described = !rows_wanted;
        let mut taken = 0u64;
        loop {
            let mut rows = BytesMut::new();
            let progress = self.merging.take(count, &mut taken, &mut |row| {
                if rows_wanted {
                    rows.extend_from_slice(&row);
                }
            });
            if !described {
                if let Some(d) = self.merging.description() {
                    out.extend_from_slice(&d);
                    described = true;
                }
            }
            out.extend_from_slice(&rows);
            let dry = match progress {
                Ok(Progress::Done | Progress::End) => break,
                Ok(Progress::NeedRows(dry)) => dry,
                Err(message) => return self.fail(host, &own_error(&message)).await,
            };
            if let Some(error) = self.refill(host, shared, &dry).await? {
                self.position += taken;
                return self.fail(host, &error).await;
            }
            if out.len() >= WRITE_AT {
                let (_, mut sink) = host.links_and_sink();
                sink.out().extend_from_slice(&out);
                out.clear();
                sink.written().await.map_err(gather::StreamError::Client)?;
            }
        }
        self.position += taken;
        let tag = match how {
            Fetch::Rows => "FETCH",
            Fetch::Move => "MOVE",
            Fetch::Pass => return Ok(false),
        };
        protocol::command_complete(&mut out, &format!("{tag} {taken}"));
        let (_, mut sink) = host.links_and_sink();
        sink.out().extend_from_slice(&out);
        sink.written().await.map_err(gather::StreamError::Client)?;
        Ok(false)
    }

    /// The cursor's RowDescription as the client sees it (a protocol-level Describe of the
    /// portal the cursor is): read from the shards' first batches if no FETCH has yet.
    /// `Ok(Err(frame))`: a shard refused.
    pub async fn describe<H: Host>(
        &mut self,
        host: &mut H,
        shared: Shared<'_>,
    ) -> Result<Result<Option<Bytes>, Bytes>, H::Error> {
        if self.merging.description().is_none() {
            let dry = self.merging.dry();
            if let Some(error) = self.refill(host, shared, &dry).await? {
                return Ok(Err(error));
            }
        }
        Ok(Ok(self.merging.description()))
    }

    /// Reads the next batch of each of `dry` (shard positions) into the merge; the first shard
    /// error, if one refused.
    async fn refill<H: Host>(
        &mut self,
        host: &mut H,
        shared: Shared<'_>,
        dry: &[usize],
    ) -> Result<Option<Bytes>, H::Error> {
        let shards: Vec<ShardId> = dry.iter().map(|&i| self.shards[i]).collect();
        let fetch = format!("FETCH FORWARD {BATCH} FROM {}", quote_ident(&self.name));
        let fetches = vec![fetch; shards.len()];
        // One shard at a time through `Combine::Each`, whose answer is one shard's rows.
        for (&i, shard) in dry.iter().zip(&shards) {
            let one = std::slice::from_ref(shard);
            match run_on_shards(
                host,
                shared,
                one,
                Work::Simple(&fetches[..1]),
                &Combine::Each,
            )
            .await?
            {
                Combined::Failed { error, .. } => return Ok(Some(error)),
                Combined::Rows(r) => {
                    let last = r.rows.len() < BATCH;
                    self.merging.fill(i, r.description, r.rows, last);
                }
            }
        }
        if !self.order_checked && !self.merging.merge().order.is_empty() {
            if let Some((description, i)) = self.merging.shard_description() {
                let description = description.clone();
                self.order_checked = true;
                let shard = self.shards[i];
                let checked = gather::check_text_order(
                    &description,
                    shard,
                    self.merging.merge(),
                    shared.control,
                )
                .await;
                if let Err(message) = checked {
                    return Ok(Some(own_error(&message)));
                }
            }
        }
        Ok(None)
    }

    /// Ends a FETCH with an error (the cursor stays as far as it got).
    async fn fail<H: Host>(&mut self, host: &mut H, error: &[u8]) -> Result<bool, H::Error> {
        let (_, mut sink) = host.links_and_sink();
        sink.out().extend_from_slice(error);
        sink.written().await.map_err(gather::StreamError::Client)?;
        Ok(true)
    }

    /// Closes the cursor on its shards; the first shard error, if one refused.
    pub async fn close<H: Host>(
        &self,
        host: &mut H,
        shared: Shared<'_>,
    ) -> Result<Option<Bytes>, H::Error> {
        let close = vec![format!("CLOSE {}", quote_ident(&self.name)); self.shards.len()];
        match run_on_shards(
            host,
            shared,
            &self.shards,
            Work::Simple(&close),
            &Combine::Each,
        )
        .await?
        {
            Combined::Failed { error, .. } => Ok(Some(error)),
            Combined::Rows(_) => Ok(None),
        }
    }
}
