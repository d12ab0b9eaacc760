//! COMMIT of a transaction block that spans shards, over the session's own connections
//! (docs/architecture.md §7): participants that wrote nothing commit plainly; one writer commits
//! plainly after them; several writers PREPARE TRANSACTION in parallel, the decision record in the
//! catalog is the commit point, then COMMIT PREPARED. Any failure before the decision rolls every
//! participant back; recovery settles what a crash leaves prepared.

use super::{error_frame, Session, SessionError};
use crate::catalog::ShardId;
use crate::executor::gather;
use crate::failpoint::{fail_point, FailPoint};
use crate::frontend::pipeline::Pending;
use crate::frontend::statements::ClientFrame;
use crate::frontend::FrontendError;
use crate::protocol::{self, Frame, TxStatus};
use crate::sql::classify::{first_keyword, keyword};
use crate::txn::Gid;
use bytes::{Bytes, BytesMut};
use std::time::Instant;

mod failpoints;

/// How the block ended, for the client: the tag of its COMMIT, or the error that ended it.
pub(super) type Ended = Result<&'static str, Bytes>;

/// What the step that asked for PREPARE (and for the decision record) brought back.
pub(super) struct StepOutcome<'a> {
    /// Since when the participants were asked to prepare.
    pub started: Instant,
    /// The step's first error.
    pub error: Option<Bytes>,
    /// Per prepared participant, the error that kept it from preparing.
    pub prepared: &'a [Option<Bytes>],
    /// Whether the decision record's row went in.
    pub recorded: bool,
}

/// The participants at `at` whose PREPARE went through (`prepared`: each one's error).
fn prepared_ones(at: &[usize], prepared: &[Option<Bytes>]) -> Vec<usize> {
    at.iter()
        .zip(prepared)
        .filter(|(_, error)| error.is_none())
        .map(|(i, _)| *i)
        .collect()
}

/// The error of a commit whose PREPAREs took `took`, longer than recovery waits for.
fn too_slow(coordinator: &crate::txn::Coordinator, gid: &Gid, took: std::time::Duration) -> Bytes {
    error_frame(&crate::txn::TxnError::PrepareTooSlow {
        gid: gid.clone(),
        took,
        limit: coordinator.prepare_deadline(),
    })
}

/// Whether a block-ending statement commits (COMMIT, END; not ROLLBACK or ABORT).
fn commits(sql: &[u8]) -> bool {
    const COMMIT: u128 = keyword(b"commit");
    const END: u128 = keyword(b"end");
    matches!(first_keyword(sql), COMMIT | END)
}

impl Session {
    /// Commits a block spanning shards for the client's COMMIT (a simple query, or the Bind of
    /// one): true when the proxy answered it, false when the block has one participant and the
    /// COMMIT goes to it as it is.
    pub(super) async fn commit_across_shards(
        &mut self,
        frame: &Frame<&[u8]>,
        sql: &[u8],
    ) -> Result<bool, SessionError> {
        let participants = self.links.iter().filter(|l| l.tx_status.in_block()).count();
        if !commits(sql) || participants < 2 {
            return Ok(false);
        }
        self.drain_current().await?;
        self.park_current();
        let ended = if crate::sql::classify::leading_words::<4>(sql)
            .iter()
            .any(|w| w.eq_ignore_ascii_case(b"chain"))
        {
            self.end_every_participant("ROLLBACK").await?;
            Err(error_frame(&FrontendError::ChainAcrossShards))
        } else {
            self.commit_participants().await?
        };
        self.links.block.begin_sql = None;
        self.release_parked_if_idle();
        let mut out = BytesMut::new();
        match frame.tag {
            b'B' => {
                let portal = match ClientFrame::parse(frame)? {
                    ClientFrame::Bind { portal, .. } => Box::<[u8]>::from(portal),
                    _ => Box::default(),
                };
                match ended {
                    Ok(tag) => {
                        out.extend_from_slice(&protocol::empty_message(b'2'));
                        let completed = gather::Rows {
                            tag: Some(tag.into()),
                            ..Default::default()
                        };
                        self.portals.put_buffered(portal, completed);
                    }
                    Err(error) => {
                        out.extend_from_slice(&error);
                        self.batch.skip_until_sync = true;
                    }
                }
            }
            _ => {
                match ended {
                    Ok(tag) => protocol::command_complete(&mut out, tag),
                    Err(error) => out.extend_from_slice(&error),
                }
                let status = self.links.status();
                protocol::ready_for_query(&mut out, status);
            }
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(true)
    }

    /// At the client's Sync after a batch that is one transaction over several shards
    /// (`atomic_batch`): every shard's part is held open in a block by the Sync, then they
    /// commit together, or roll back together when any statement of the batch failed. A
    /// commit that fails is the batch's error. True when the Sync is answered.
    pub(super) async fn end_atomic_batch(&mut self) -> Result<bool, SessionError> {
        if !std::mem::take(&mut self.links.block.atomic_batch) {
            return Ok(false);
        }
        // The answers still owed may hold the batch's failure.
        self.drain_current().await?;
        self.park_current();
        self.sync_parked_then(super::shard_switch::AtSync::Hold)
            .await?;
        if self.links.block.begin_sql.is_some() {
            // The client opened a block in the batch: what ran before its BEGIN is part of
            // the block, as on PostgreSQL, and the Sync is answered as in any block.
            return Ok(false);
        }
        if std::mem::take(&mut self.batch.skip_until_sync) {
            self.end_every_participant("ROLLBACK").await?;
        } else if let Err(error) = self.commit_participants().await? {
            self.cout.extend_from_slice(&error);
        }
        self.batch.fail_block_at_sync = None;
        self.drop_portals().await?;
        self.release_parked_if_idle();
        let status = self.links.status();
        protocol::ready_for_query(&mut self.cout, status);
        Ok(true)
    }

    /// Opens a block on the parked connections at `at`, for a statement that must commit on
    /// all of them or none.
    pub(super) async fn begin_on(&mut self, at: &[usize]) -> Result<(), SessionError> {
        let bound_waits = self.bound_lock_waits();
        let begin = if at.len() > 1 && !bound_waits.is_empty() {
            self.links.block.waits_bounded = true;
            format!("BEGIN; {bound_waits}")
        } else {
            "BEGIN".into()
        };
        self.links.parked.ask(at, &begin).await?;
        Ok(())
    }

    /// Commits every parked participant of the block, atomically.
    pub(super) async fn commit_participants(&mut self) -> Result<Ended, SessionError> {
        let open: Vec<usize> = (0..self.links.parked.len())
            .filter(|&i| self.links.parked[i].tx_status.in_block())
            .collect();
        if open
            .iter()
            .any(|&i| self.links.parked[i].tx_status == TxStatus::Failed)
        {
            // A failed block rolls back, and its COMMIT says so, as PostgreSQL's does.
            self.end_every_participant("ROLLBACK").await?;
            return Ok(Ok("ROLLBACK"));
        }
        // A transaction that wrote has a transaction id; one that only read has none.
        let (mut writers, unknown): (Vec<usize>, Vec<usize>) =
            open.iter().partition(|&&i| self.links.parked[i].wrote);
        for &i in &open {
            self.links.parked[i].wrote = false;
        }
        let wrote = self
            .links
            .parked
            .ask(
                &unknown,
                "SELECT pg_current_xact_id_if_assigned() IS NOT NULL",
            )
            .await?;
        if let Some(error) = wrote.iter().find_map(|a| a.error.clone()) {
            self.end_every_participant("ROLLBACK").await?;
            return Ok(Err(error));
        }
        let mut readers = Vec::new();
        for (&i, answer) in unknown.iter().zip(&wrote) {
            if answer.value.as_deref() == Some(b"t") {
                writers.push(i);
            } else {
                readers.push(i);
            }
        }
        writers.sort_unstable();
        // Nothing a reader did can be lost: it commits first, plainly.
        self.links.parked.ask(&readers, "COMMIT").await?;
        if writers.len() <= 1 {
            let answers = self.links.parked.ask(&writers, "COMMIT").await?;
            return Ok(match answers.into_iter().find_map(|a| a.error) {
                Some(error) => Err(error),
                None => Ok("COMMIT"),
            });
        }
        self.two_phase_commit(&writers).await
    }

    async fn two_phase_commit(&mut self, writers: &[usize]) -> Result<Ended, SessionError> {
        if self.links.block.unpreparable && self.links.block.begin_sql.is_some() {
            self.end_every_participant("ROLLBACK").await?;
            return Ok(Err(error_frame(&FrontendError::UnpreparableAcrossShards)));
        }
        let shards: Vec<ShardId> = writers
            .iter()
            .map(|&i| self.links.parked[i].conn.shard)
            .collect();
        let gid = match self.new_gid(&shards) {
            Ok(gid) => gid,
            Err(error) => {
                self.end_every_participant("ROLLBACK").await?;
                return Ok(Err(error));
            }
        };
        let ctx = self.ctx.clone();
        let _in_flight = ctx.coordinator.register(&gid, &shards);
        let started = Instant::now();
        let control = ctx.control.clone();
        let prepare = |shard| control.shard(shard).prepare_transaction(&gid);
        let prepared = self
            .ask_split(writers, &prepare, FailPoint::CommitAfterFirstPrepare)
            .await?;
        let prepared: Vec<Option<Bytes>> = prepared.into_iter().map(|a| a.error).collect();
        self.settle_prepared(writers, &gid, &prepared, started)
            .await
    }

    /// A gid for a commit whose writers are on `shards`, once every one of them can PREPARE;
    /// otherwise the error for the client.
    pub(super) fn new_gid(&self, shards: &[ShardId]) -> Result<Gid, Bytes> {
        let coordinator = &self.ctx.coordinator;
        coordinator
            .ensure_can_prepare(shards)
            .map_err(|e| error_frame(&e))?;
        Ok(coordinator.gids().next_gid())
    }

    /// The rest of a two-phase commit once the writers were asked to PREPARE (since `started`):
    /// `prepared` holds, per writer, the error that kept it from preparing. The caller keeps
    /// the gid registered as in flight until this returns.
    pub(super) async fn settle_prepared(
        &mut self,
        writers: &[usize],
        gid: &Gid,
        prepared: &[Option<Bytes>],
        started: Instant,
    ) -> Result<Ended, SessionError> {
        let shards: Vec<ShardId> = writers
            .iter()
            .map(|&i| self.links.parked[i].conn.shard)
            .collect();
        let ctx = self.ctx.clone();
        let coordinator = &ctx.coordinator;
        let failed = prepared.iter().flatten().next().cloned();
        let took = started.elapsed();
        if failed.is_some() || took >= coordinator.prepare_deadline() {
            // A failed PREPARE rolled its own participant back; the others are undone here.
            self.finish_prepared(&prepared_ones(writers, prepared), gid, "ROLLBACK")
                .await?;
            self.ctx.metrics.distributed_rolled_back.increment(1);
            return Ok(Err(match failed {
                Some(error) => error,
                None => too_slow(coordinator, gid, took),
            }));
        }
        // The commit point.
        if let Err(e) = coordinator.decide(&shards, gid).await {
            let outcome = match e {
                crate::txn::TxnError::ResolutionUnknown { .. } => {
                    &self.ctx.metrics.distributed_unknown
                }
                _ => &self.ctx.metrics.distributed_rolled_back,
            };
            outcome.increment(1);
            return Ok(Err(error_frame(&e)));
        }
        self.finish_commit(writers, gid).await?;
        Ok(Ok("COMMIT"))
    }

    /// The rest of a two-phase commit whose decision record the participant on the catalog's
    /// shard (`decider`) inserted in its own transaction, while the others (at `others`) were
    /// asked to PREPARE: `prepared` holds, per other, the error that kept it from preparing,
    /// `error` the step's first error, `recorded` whether the record's row went in. The
    /// decider's COMMIT is the commit point; until it, any failure rolls every other back (the
    /// decider's block is the caller's to roll back).
    pub(super) async fn commit_with_record(
        &mut self,
        decider: ShardId,
        others: &[usize],
        gid: &Gid,
        step: StepOutcome<'_>,
    ) -> Result<Result<(), Bytes>, SessionError> {
        let ctx = self.ctx.clone();
        let coordinator = &ctx.coordinator;
        let took = step.started.elapsed();
        let refusal = if let Some(error) = step.error {
            Some(error)
        } else if took >= coordinator.prepare_deadline() {
            Some(too_slow(coordinator, gid, took))
        } else if !step.recorded {
            Some(error_frame(&coordinator.not_recorded(gid).await))
        } else {
            None
        };
        if let Some(error) = refusal {
            self.finish_prepared(&prepared_ones(others, step.prepared), gid, "ROLLBACK")
                .await?;
            self.ctx.metrics.distributed_rolled_back.increment(1);
            return Ok(Err(error));
        }
        let at = self.links.parked.positions(&[decider]);
        let committed = self.links.parked.ask_each(&at, "COMMIT").await.pop();
        match committed {
            Some(Ok(answer)) => {
                if let Some(error) = answer.error {
                    // The COMMIT itself failed (a deferred constraint, a serialization
                    // failure): the record went with the rest of that transaction.
                    self.finish_prepared(others, gid, "ROLLBACK").await?;
                    self.ctx.metrics.distributed_rolled_back.increment(1);
                    return Ok(Err(error));
                }
            }
            Some(Err(e)) => {
                self.ctx.metrics.distributed_unknown.increment(1);
                tracing::error!(parent: &self.span, %gid, error = %e, "commit decision outcome unknown; recovery will resolve it");
                let shard = ctx.control.shard(decider).label.clone();
                return Ok(Err(error_frame(&crate::txn::TxnError::DecisionUnknown {
                    gid: gid.clone(),
                    shard,
                    reason: e.to_string(),
                })));
            }
            None => unreachable!("one participant was asked"),
        }
        coordinator.recorded(gid);
        self.finish_commit(others, gid).await?;
        Ok(Ok(()))
    }

    /// After the commit point: COMMIT PREPARED on the prepared participants at `prepared`
    /// (those that do not confirm it are finished over control connections, or by recovery).
    pub(super) async fn finish_commit(
        &mut self,
        prepared: &[usize],
        gid: &Gid,
    ) -> Result<(), SessionError> {
        fail_point!(self.ctx.failpoints, FailPoint::CommitAfterDecision);
        self.ctx.metrics.distributed_committed.increment(1);
        let unconfirmed = self
            .finish_prepared_split(
                prepared,
                gid,
                "COMMIT",
                FailPoint::CommitBetweenCommitPrepared,
            )
            .await?;
        let left = self.ctx.coordinator.complete(&unconfirmed, gid).await;
        if !left.is_empty() {
            tracing::warn!(parent: &self.span, %gid, ?left, "COMMIT PREPARED not confirmed; recovery will finish it");
        }
        Ok(())
    }

    /// COMMIT or ROLLBACK PREPARED on the participants' own connections; the shards that did
    /// not confirm it.
    pub(super) async fn finish_prepared(
        &mut self,
        participants: &[usize],
        gid: &Gid,
        verb: &str,
    ) -> Result<Vec<ShardId>, SessionError> {
        let control = self.ctx.control.clone();
        let finish = |shard| {
            let name = control.shard(shard).prepared_name(gid);
            format!("{verb} PREPARED {}", crate::txn::gid::quoted(&name))
        };
        let answers = self.links.parked.ask_each_with(participants, &finish).await;
        let mut unconfirmed = Vec::new();
        for (&i, answer) in participants.iter().zip(answers) {
            let confirmed = match answer {
                Ok(a) => a.error.is_none(),
                Err(e) => {
                    // The prepared transaction is the coordinator's now, not the session's:
                    // it is finished over a control connection, and the lost one is dropped.
                    tracing::warn!(parent: &self.span, %gid, error = %e, "a participant's connection was lost during {verb} PREPARED");
                    self.links.parked[i].tx_status = TxStatus::Idle;
                    false
                }
            };
            if !confirmed {
                unconfirmed.push(self.links.parked[i].conn.shard);
            }
        }
        Ok(unconfirmed)
    }

    /// Ends every open participant's block with `sql` (ROLLBACK).
    pub(super) async fn end_every_participant(&mut self, sql: &str) -> Result<(), SessionError> {
        let open: Vec<usize> = (0..self.links.parked.len())
            .filter(|&i| self.links.parked[i].tx_status.in_block())
            .collect();
        self.links.parked.ask(&open, sql).await?;
        Ok(())
    }
}
