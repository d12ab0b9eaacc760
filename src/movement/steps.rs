//! The steps of a move: each shard's statements in a step, what each one's reply means, the
//! step sent to all its shards at once, and the end of the statement's own block sent along
//! with the last one.

use super::run::{add_returned, Failure, Mover};
use crate::catalog::ShardId;
use crate::executor::commit::new_gid;
use crate::executor::gather::{self, Replies};
use crate::executor::host::Host;
use crate::executor::participants::bound_lock_waits;
use crate::movement::{self, MoveError};
use crate::protocol::{Extended, TxStatus};
use crate::txn::{decision_log, Gid, InFlightGuard};
use bytes::{Bytes, BytesMut};
use std::collections::BTreeMap;

/// What a statement of a step's batch is, so its reply is read for what it means.
pub(super) enum Expect {
    /// A SET of the proxy's own.
    Setting,
    /// Rows read and locked.
    Locked,
    /// DELETEs of `locked` rows of one table, over `statements` statements (one per partition).
    Deleted { statements: usize, locked: usize },
    /// The client's UPDATE of the rows that stay: counted, its RETURNING rows answered.
    Stayed,
    /// INSERTs of moved rows; a root table's RETURNING rows are answered.
    Inserted { statements: usize, root: bool },
    /// The RETURNING description, when no row was touched.
    Described,
    /// COMMIT or PREPARE TRANSACTION of the statement's own block.
    Ends,
    /// The decision record's INSERT, in the transaction of the catalog's own shard.
    Decided,
}

impl Expect {
    /// How many statements it stands for.
    fn statements(&self) -> usize {
        match self {
            Expect::Deleted { statements, .. } | Expect::Inserted { statements, .. } => *statements,
            Expect::Setting
            | Expect::Locked
            | Expect::Stayed
            | Expect::Described
            | Expect::Ends
            | Expect::Decided => 1,
        }
    }
}

/// One shard's statements in a step, and what each one is.
#[derive(Default)]
pub(super) struct Batch {
    pub(super) statements: movement::Statements,
    pub(super) expect: Vec<Expect>,
}

impl Batch {
    pub(super) fn writes(&self) -> bool {
        self.expect.iter().any(|e| {
            matches!(
                e,
                Expect::Deleted { .. } | Expect::Stayed | Expect::Inserted { .. }
            )
        })
    }

    pub(super) fn set(&mut self, sql: &str) {
        self.statements.plain(sql);
        self.expect.push(Expect::Setting);
    }

    pub(super) fn end_with(&mut self, sql: &str) {
        self.statements.plain(sql);
        self.expect.push(Expect::Ends);
    }
}

/// A step's batches, shard by shard.
pub(super) type Step = BTreeMap<ShardId, Batch>;

/// How the statement's own block ends in the move's last step, when it can end there.
pub(super) enum Tail {
    /// The block stays open for the usual commit.
    None,
    /// COMMIT on every participant: at most one wrote, and nothing is left to check.
    Commit,
    /// PREPARE TRANSACTION on the writers under `gid` (registered as in flight while the
    /// guard lives), COMMIT on the participants that only read. A writer on the catalog's own
    /// shard (`decider`) inserts the decision record instead of preparing, and its COMMIT
    /// after the others prepared is the commit point: one PREPARE, one COMMIT PREPARED and the
    /// catalog's own round trip fewer.
    Prepare {
        gid: Gid,
        decider: Option<ShardId>,
        _in_flight: InFlightGuard,
    },
}

impl<H: Host> Mover<'_, H> {
    /// Ends the statement's own block in the last step where nothing is left to check after
    /// it: with PREPARE TRANSACTION on the writers when several write (the decision and COMMIT
    /// PREPARED follow), with COMMIT when one writes and deletes nothing (a delete's count is
    /// checked before its block may commit) or none does; the participants that only read
    /// COMMIT alongside. Otherwise the block stays open for the usual commit.
    pub(super) fn add_tail(&mut self, last: &mut Step, writers: &[ShardId]) -> Result<Tail, Bytes> {
        let readers: Vec<ShardId> = self
            .host
            .links()
            .parked
            .iter()
            .filter(|p| p.tx_status.in_block() && !writers.contains(&p.conn.shard))
            .map(|p| p.conn.shard)
            .collect();
        let tail = match writers {
            [] => Tail::Commit,
            [one]
                if last.get(one).is_some_and(|b| {
                    !b.expect.iter().any(|e| matches!(e, Expect::Deleted { .. }))
                }) =>
            {
                if let Some(batch) = last.get_mut(one) {
                    batch.end_with("COMMIT");
                }
                Tail::Commit
            }
            [_] => return Ok(Tail::None),
            _ => {
                let gid = new_gid(self.shared.coordinator, writers)?;
                let coordinator = self.shared.coordinator;
                let record = coordinator
                    .catalog_shard()
                    .filter(|c| writers.contains(c))
                    .zip(coordinator.commit_record(&gid, writers));
                for w in writers {
                    let Some(batch) = last.get_mut(w) else {
                        continue;
                    };
                    match &record {
                        Some((decider, params)) if decider == w => {
                            // The commit point must survive a crash of that server, whatever
                            // the session's synchronous_commit.
                            batch.set("SET LOCAL synchronous_commit = on");
                            let params: Vec<movement::Param<'_>> =
                                params.iter().map(|p| (0, Some(p.as_bytes()))).collect();
                            batch.statements.prepared(
                                decision_log::COMMIT_RECORD,
                                &[],
                                &params,
                                &[],
                                false,
                            );
                            batch.expect.push(Expect::Decided);
                        }
                        _ => {
                            batch.end_with(&self.shared.control.shard(*w).prepare_transaction(&gid))
                        }
                    }
                }
                let _in_flight = coordinator.register(&gid, writers);
                Tail::Prepare {
                    gid,
                    decider: record.map(|(d, _)| d),
                    _in_flight,
                }
            }
        };
        for r in readers {
            last.entry(r).or_default().end_with("COMMIT");
        }
        Ok(tail)
    }

    /// Sends a step's batches to their shards at once.
    pub(super) async fn send_step(
        &mut self,
        step: Step,
        implicit: bool,
    ) -> Result<Answers, H::Error> {
        let mut batches = Vec::with_capacity(step.len());
        let mut expects = Vec::with_capacity(step.len());
        for (shard, batch) in step {
            batches.push((shard, batch.statements));
            expects.push((shard, batch.expect));
        }
        let replies = self.on_shards(batches, implicit).await?;
        Ok(expects
            .into_iter()
            .zip(replies)
            .map(|((shard, expect), replies)| (shard, expect, replies))
            .collect())
    }

    /// Runs each shard's statements on its connection, ending with one Sync, all at once,
    /// joining each shard to the statement's own block (opened in the same round trip, its
    /// lock waits bounded from the start, as it may span shards); each shard's replies in
    /// `batches`' order, without those of the block's opening.
    pub(super) async fn on_shards(
        &mut self,
        batches: Vec<(ShardId, movement::Statements)>,
        implicit: bool,
    ) -> Result<Vec<Replies>, H::Error> {
        let shards: Vec<ShardId> = batches.iter().map(|(s, _)| *s).collect();
        let at = self.host.join(&shards).await?;
        debug_assert_eq!(at.len(), shards.len(), "one connection per shard of a step");
        let bound_waits = bound_lock_waits(self.shared.config);
        let mut opening = Vec::with_capacity(at.len());
        let mut fresh = Vec::with_capacity(at.len());
        let mut messages = Vec::with_capacity(at.len());
        for (&i, (_, statements)) in at.iter().zip(batches) {
            let mut out = BytesMut::new();
            let mut opened = 0;
            if implicit && self.host.links().parked[i].tx_status == TxStatus::Idle {
                Extended::new(&mut out).unnamed(b"BEGIN");
                opened = 1;
                if !bound_waits.is_empty() {
                    Extended::new(&mut out).unnamed(bound_waits.as_bytes());
                    self.host.links().block.waits_bounded = true;
                    opened += 1;
                }
            }
            let mut parsed = Vec::new();
            statements.assemble(
                &mut self.host.links().parked[i].conn.conn,
                &mut out,
                &mut parsed,
            );
            movement::sync(&mut out);
            messages.push(out);
            opening.push(opened);
            fresh.push(parsed);
        }
        self.host.cancel_reaches_parked();
        let result = self.host.links().parked.exchange(&at, &messages).await;
        self.host.cancel_reaches(Vec::new());
        let mut replies = result?;
        for (((&i, r), opened), parsed) in at.iter().zip(replies.iter_mut()).zip(opening).zip(fresh)
        {
            r.statements.drain(..opened.min(r.statements.len()));
            if r.error.is_some() {
                // Their Parse may have been skipped after the error.
                for text in parsed {
                    self.host.links().parked[i].conn.conn.prepared.remove(&text);
                }
            }
        }
        Ok(replies)
    }
}

/// A step's answers: per shard, what its statements were and what it replied.
pub(super) type Answers = Vec<(ShardId, Vec<Expect>, Replies)>;

/// The first error of a step, with every shard's notices collected. A block that only ended
/// after reading loses nothing of the statement's if its COMMIT fails, so its error is not one.
pub(super) fn step_error(answers: &Answers, notices: &mut BytesMut) -> Option<Bytes> {
    let mut first = None;
    for (_, expect, replies) in answers {
        notices.extend_from_slice(&replies.notices);
        let only_ends = expect.iter().all(|e| matches!(e, Expect::Ends));
        if first.is_none() && !only_ends {
            first = replies.error.clone();
        }
    }
    first
}

/// Reads a step that ran without error as its statements expect: the RETURNING rows into
/// `answer`, the staying rows into `count`; a failure when a DELETE removed other than the
/// rows locked.
pub(super) fn read_step(
    table: &str,
    answers: Answers,
    answer: &mut gather::Rows,
    count: &mut u64,
) -> Option<Failure> {
    for (_, expect, replies) in answers {
        let mut replies = replies.statements.into_iter();
        for e in expect {
            match e {
                Expect::Deleted { statements, locked } => {
                    let deleted: u64 = replies.by_ref().take(statements).map(|r| r.count()).sum();
                    if deleted != locked as u64 {
                        return Some(Failure::proxy(&MoveError::RowsChanged {
                            table: table.to_string(),
                            locked: locked as u64,
                            deleted,
                        }));
                    }
                }
                Expect::Stayed => {
                    if let Some(r) = replies.next() {
                        *count += r.count();
                        add_returned(answer, r);
                    }
                }
                Expect::Inserted { statements, root } => {
                    for r in replies.by_ref().take(statements) {
                        if root {
                            add_returned(answer, r);
                        }
                    }
                }
                Expect::Described => {
                    if let Some(r) = replies.next() {
                        answer.description = r.description;
                    }
                }
                Expect::Setting | Expect::Locked | Expect::Ends | Expect::Decided => {
                    replies.next();
                }
            }
        }
    }
    None
}

/// Whether the decision record's INSERT in `decider`'s batch inserted its row.
pub(super) fn recorded(answers: &Answers, decider: ShardId) -> bool {
    let Some((_, expect, replies)) = answers.iter().find(|(s, ..)| *s == decider) else {
        return false;
    };
    let at = expect
        .iter()
        .take_while(|e| !matches!(e, Expect::Decided))
        .map(Expect::statements)
        .sum::<usize>();
    expect.iter().any(|e| matches!(e, Expect::Decided))
        && replies.statements.get(at).is_some_and(|r| r.count() == 1)
}

/// The rows of each locking read of a shard's batch, in order.
pub(super) fn locked_rows(expect: &[Expect], replies: Replies) -> Vec<Vec<Bytes>> {
    expect
        .iter()
        .zip(replies.statements)
        .filter(|(e, _)| matches!(e, Expect::Locked))
        .map(|(_, r)| r.rows)
        .collect()
}
