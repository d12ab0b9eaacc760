//! COMMIT of a transaction block that spans shards, over the session's own connections
//! (docs/architecture.md §7): participants that wrote nothing commit plainly; one writer commits
//! plainly after them; several writers PREPARE TRANSACTION in parallel, the decision record in the
//! catalog is the commit point, then COMMIT PREPARED. Any failure before the decision rolls every
//! participant back; recovery settles what a crash leaves prepared.

use crate::backend::BackendError;
use crate::client_error::ClientError;
use crate::executor::participants::{Answer, Participants};
use crate::failpoint::{fail_point, FailPoint, FailPoints};
use crate::metrics::Metrics;
use crate::model::ShardId;
use crate::protocol::TxStatus;
use crate::txn::{ControlPools, Coordinator, Gid, TxnError};
use bytes::Bytes;
use std::time::{Duration, Instant};
use tokio_postgres::error::SqlState;

mod failpoints;

/// How the block ended, for the client: the tag of its COMMIT, or the error that ended it.
pub type Ended = Result<&'static str, Bytes>;

/// Why a commit over several shards was refused before it began.
#[derive(Debug, thiserror::Error)]
pub enum CommitError {
    #[error(
        "this transaction wrote on several shards but also ran LISTEN, UNLISTEN or NOTIFY, \
         created a temporary table or a WITH HOLD cursor, which two-phase commit cannot carry; \
         it was rolled back on every shard: do that in a transaction of its own"
    )]
    UnpreparableAcrossShards,
}

impl ClientError for CommitError {
    fn sqlstate(&self) -> SqlState {
        match self {
            CommitError::UnpreparableAcrossShards => SqlState::FEATURE_NOT_SUPPORTED,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// What the step that asked for PREPARE (and for the decision record) brought back.
pub struct StepOutcome<'a> {
    /// Since when the participants were asked to prepare.
    pub started: Instant,
    /// The step's first error.
    pub error: Option<Bytes>,
    /// Per prepared participant, the error that kept it from preparing.
    pub prepared: &'a [Option<Bytes>],
    /// Whether the decision record's row went in.
    pub recorded: bool,
}

/// A commit over the parked connections of one session's block, with what it needs of the
/// server: the coordinator and its control connections, the metrics, the fail points, and the
/// session's span for what it logs.
pub struct Commit<'a> {
    pub links: &'a mut Participants,
    pub coordinator: &'a Coordinator,
    pub control: &'a ControlPools,
    pub metrics: &'a Metrics,
    pub failpoints: &'a FailPoints,
    pub span: &'a tracing::Span,
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
fn too_slow(coordinator: &Coordinator, gid: &Gid, took: Duration) -> Bytes {
    TxnError::PrepareTooSlow {
        gid: gid.clone(),
        took,
        limit: coordinator.prepare_deadline(),
    }
    .error_frame()
}

/// A gid for a commit whose writers are on `shards`, once every one of them can PREPARE;
/// otherwise the error for the client.
pub fn new_gid(coordinator: &Coordinator, shards: &[ShardId]) -> Result<Gid, Bytes> {
    coordinator
        .ensure_can_prepare(shards)
        .map_err(|e| e.error_frame())?;
    Ok(coordinator.gids().next_gid())
}

impl Commit<'_> {
    /// Commits every parked participant of the block, atomically.
    pub async fn commit_participants(&mut self) -> Result<Ended, BackendError> {
        let open = self.links.parked.open_blocks();
        if open
            .iter()
            .any(|&i| self.links.parked[i].tx_status == TxStatus::Failed)
        {
            // A failed block rolls back, and its COMMIT says so, as PostgreSQL's does.
            self.links.end_open_blocks("ROLLBACK").await?;
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
            self.links.end_open_blocks("ROLLBACK").await?;
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

    async fn two_phase_commit(&mut self, writers: &[usize]) -> Result<Ended, BackendError> {
        if self.links.block.unpreparable && self.links.block.begin_sql.is_some() {
            self.links.end_open_blocks("ROLLBACK").await?;
            return Ok(Err(CommitError::UnpreparableAcrossShards.error_frame()));
        }
        let shards = self.shards_at(writers);
        let gid = match new_gid(self.coordinator, &shards) {
            Ok(gid) => gid,
            Err(error) => {
                self.links.end_open_blocks("ROLLBACK").await?;
                return Ok(Err(error));
            }
        };
        let _in_flight = self.coordinator.register(&gid, &shards);
        let started = Instant::now();
        let control = self.control;
        let prepare = |shard| control.shard(shard).prepare_transaction(&gid);
        let prepared = self
            .ask_split(writers, &prepare, FailPoint::CommitAfterFirstPrepare)
            .await?;
        let prepared: Vec<Option<Bytes>> = prepared.into_iter().map(|a| a.error).collect();
        self.settle_prepared(writers, &gid, &prepared, started)
            .await
    }

    fn shards_at(&self, at: &[usize]) -> Vec<ShardId> {
        at.iter()
            .map(|&i| self.links.parked[i].conn.shard)
            .collect()
    }

    /// The rest of a two-phase commit once the writers were asked to PREPARE (since `started`):
    /// `prepared` holds, per writer, the error that kept it from preparing. The caller keeps
    /// the gid registered as in flight until this returns.
    pub async fn settle_prepared(
        &mut self,
        writers: &[usize],
        gid: &Gid,
        prepared: &[Option<Bytes>],
        started: Instant,
    ) -> Result<Ended, BackendError> {
        let shards = self.shards_at(writers);
        let coordinator = self.coordinator;
        let failed = prepared.iter().flatten().next().cloned();
        let took = started.elapsed();
        if failed.is_some() || took >= coordinator.prepare_deadline() {
            // A failed PREPARE rolled its own participant back; the others are undone here.
            self.finish_prepared(&prepared_ones(writers, prepared), gid, "ROLLBACK")
                .await?;
            self.metrics.distributed_rolled_back.increment(1);
            return Ok(Err(match failed {
                Some(error) => error,
                None => too_slow(coordinator, gid, took),
            }));
        }
        // The commit point.
        if let Err(e) = coordinator.decide(&shards, gid).await {
            let outcome = match e {
                TxnError::ResolutionUnknown { .. } => &self.metrics.distributed_unknown,
                _ => &self.metrics.distributed_rolled_back,
            };
            outcome.increment(1);
            return Ok(Err(e.error_frame()));
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
    pub async fn commit_with_record(
        &mut self,
        decider: ShardId,
        others: &[usize],
        gid: &Gid,
        step: StepOutcome<'_>,
    ) -> Result<Result<(), Bytes>, BackendError> {
        let coordinator = self.coordinator;
        let took = step.started.elapsed();
        let refusal = if let Some(error) = step.error {
            Some(error)
        } else if took >= coordinator.prepare_deadline() {
            Some(too_slow(coordinator, gid, took))
        } else if !step.recorded {
            Some(coordinator.not_recorded(gid).await.error_frame())
        } else {
            None
        };
        if let Some(error) = refusal {
            self.finish_prepared(&prepared_ones(others, step.prepared), gid, "ROLLBACK")
                .await?;
            self.metrics.distributed_rolled_back.increment(1);
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
                    self.metrics.distributed_rolled_back.increment(1);
                    return Ok(Err(error));
                }
            }
            Some(Err(e)) => {
                self.metrics.distributed_unknown.increment(1);
                tracing::error!(parent: self.span, %gid, error = %e, "commit decision outcome unknown; recovery will resolve it");
                let shard = self.control.shard(decider).label.clone();
                return Ok(Err(TxnError::DecisionUnknown {
                    gid: gid.clone(),
                    shard,
                    reason: e.to_string(),
                }
                .error_frame()));
            }
            None => unreachable!("one participant was asked"),
        }
        coordinator.recorded(gid);
        self.finish_commit(others, gid).await?;
        Ok(Ok(()))
    }

    /// After the commit point: COMMIT PREPARED on the prepared participants at `prepared`
    /// (those that do not confirm it are finished over control connections, or by recovery).
    pub async fn finish_commit(
        &mut self,
        prepared: &[usize],
        gid: &Gid,
    ) -> Result<(), BackendError> {
        fail_point!(self.failpoints, FailPoint::CommitAfterDecision);
        self.metrics.distributed_committed.increment(1);
        let unconfirmed = self
            .finish_prepared_split(
                prepared,
                gid,
                "COMMIT",
                FailPoint::CommitBetweenCommitPrepared,
            )
            .await?;
        let left = self.coordinator.complete(&unconfirmed, gid).await;
        if !left.is_empty() {
            tracing::warn!(parent: self.span, %gid, ?left, "COMMIT PREPARED not confirmed; recovery will finish it");
        }
        Ok(())
    }

    /// COMMIT or ROLLBACK PREPARED on the participants' own connections; the shards that did
    /// not confirm it.
    pub async fn finish_prepared(
        &mut self,
        participants: &[usize],
        gid: &Gid,
        verb: &str,
    ) -> Result<Vec<ShardId>, BackendError> {
        let control = self.control;
        let finish = |shard| {
            let name = control.shard(shard).prepared_name(gid);
            format!("{verb} PREPARED {}", crate::txn::gid::quoted(&name))
        };
        let answers = self.links.parked.ask_each_with(participants, &finish).await;
        let mut unconfirmed = Vec::new();
        for (&i, answer) in participants.iter().zip(answers) {
            let confirmed = match answer {
                Ok(Answer { error, .. }) => error.is_none(),
                Err(e) => {
                    // The prepared transaction is the coordinator's now, not the session's:
                    // it is finished over a control connection, and the lost one is dropped.
                    tracing::warn!(parent: self.span, %gid, error = %e, "a participant's connection was lost during {verb} PREPARED");
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
}
