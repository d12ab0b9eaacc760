//! The two-phase-commit coordinator: one unit of work over several shards, committed on all of
//! them or on none (docs/architecture.md §7).

use std::sync::{Arc, OnceLock};
use std::time::Instant;

use futures::future::join_all;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, SimpleQueryMessage};

use super::control::{ConnectError, ControlPools, ShardPool};
use super::decision_log::{self, CommitRecord, Decision};
use super::error::TxnError;
use super::gid::{Gid, GidGenerator};
use super::in_flight::{InFlight, InFlightGuard, Phase};
use super::lease::Incarnation;
use super::TxnSettings;
use crate::failpoint::{fail_point, FailPoint, FailPoints};
use crate::model::ShardId;

/// What one shard did: the row count of every command, in order (0 for commands without one).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardResult {
    pub shard: ShardId,
    pub rows_affected: Vec<u64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Commit {
    /// A single participant committed with a plain COMMIT.
    OnePhase,
    /// Committed by two-phase commit. `unconfirmed` shards did not acknowledge COMMIT PREPARED
    /// within the retries; the decision is durable, and recovery commits them later.
    TwoPhase { gid: Gid, unconfirmed: Vec<ShardId> },
}

/// A committed unit of work.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Outcome {
    /// One entry per participant, in the order the work named them.
    pub results: Vec<ShardResult>,
    pub commit: Commit,
}

/// How a participant's PREPARE phase failed.
struct PrepareFailure {
    error: TxnError,
    /// The connection broke while PREPARE was in flight: the transaction may be prepared.
    maybe_prepared: bool,
}

pub struct Coordinator {
    pools: Arc<ControlPools>,
    settings: TxnSettings,
    gids: GidGenerator,
    failpoints: FailPoints,
    in_flight: Arc<InFlight>,
    /// Decision records to delete, handed to one task that deletes them a batch at a time
    /// (started by the first commit, on its runtime).
    forgets: OnceLock<tokio::sync::mpsc::UnboundedSender<Gid>>,
}

/// Decision records deleted by one statement at most.
const FORGET_BATCH: usize = 256;

impl Coordinator {
    pub fn new(
        pools: Arc<ControlPools>,
        settings: TxnSettings,
        gids: GidGenerator,
    ) -> Result<Coordinator, TxnError> {
        settings.validate()?;
        Ok(Coordinator {
            pools,
            settings,
            gids,
            failpoints: FailPoints::none(),
            in_flight: Arc::default(),
            forgets: OnceLock::new(),
        })
    }

    /// Arms the fail points of [`crate::failpoint`] in this coordinator's transactions.
    pub fn with_failpoints(mut self, failpoints: FailPoints) -> Coordinator {
        self.failpoints = failpoints;
        self
    }

    pub fn failpoints(&self) -> &FailPoints {
        &self.failpoints
    }

    /// The shard whose sessions can record a commit decision in their own transaction (see
    /// `decision_log::COMMIT_RECORD`).
    pub fn catalog_shard(&self) -> Option<ShardId> {
        self.pools.catalog_shard()
    }

    /// The decision record's statement and its parameters (text) for `gid` over `shards`,
    /// for a participant on the catalog's shard to run in its own transaction, whose COMMIT
    /// is then the commit point; None where the gid cannot be recorded.
    pub fn commit_record(&self, gid: &Gid, shards: &[ShardId]) -> Option<Vec<String>> {
        let names: Vec<String> = shards
            .iter()
            .map(|s| self.pools.shard(*s).label.name.clone())
            .collect();
        decision_log::commit_record_params(gid, &names)
    }

    /// A commit recorded by a participant's own COMMIT: what is left is COMMIT PREPARED.
    pub fn recorded(&self, gid: &Gid) {
        self.in_flight.set_phase(gid, Phase::Committing);
    }

    /// Why a commit record could not be inserted for `gid`: recovery's abort, or this proxy's
    /// lease gone.
    pub async fn not_recorded(&self, gid: &Gid) -> TxnError {
        let found = match self.pools.catalog().get().await {
            Ok(conn) => decision_log::lookup(&conn, gid).await.ok().flatten(),
            Err(_) => None,
        };
        match found {
            Some(_) => TxnError::AbortedByRecovery { gid: gid.clone() },
            None => TxnError::LeaseExpired { gid: gid.clone() },
        }
    }

    pub fn gids(&self) -> &GidGenerator {
        &self.gids
    }

    /// The proxy process whose gids this coordinator hands out.
    pub fn incarnation(&self) -> Incarnation {
        self.gids.incarnation()
    }

    /// The transactions this coordinator's proxy is committing now.
    pub fn in_flight(&self) -> &Arc<InFlight> {
        &self.in_flight
    }

    /// Registers a distributed transaction over `shards` as in flight until the guard is
    /// dropped; every two-phase commit holds one from before its first PREPARE until it is
    /// finished or left to recovery, so that this proxy's recovery keeps its hands off it.
    pub fn register(&self, gid: &Gid, shards: &[ShardId]) -> InFlightGuard {
        let names = shards
            .iter()
            .map(|s| self.pools.shard(*s).label.name.clone())
            .collect();
        self.in_flight.register(gid, names)
    }

    /// Reads `max_prepared_transactions` on every shard (the control pools read it again on
    /// every connection they make): a shard with 0 makes multi-shard work fail at once, with an
    /// error naming it. Returns the problems found (also logged); a shard that cannot be
    /// reached is read when a control connection to it is next made.
    pub async fn check_shards(&self) -> Vec<TxnError> {
        let checks = join_all(self.pools.shards().iter().map(|shard| async move {
            let conn = shard.pool.get().await?;
            let n = shard
                .prepared_capacity
                .read(&shard.label.name, &conn)
                .await?;
            Ok::<i32, ConnectError>(n)
        }))
        .await;
        let mut problems = Vec::new();
        for (shard, check) in self.pools.shards().iter().zip(checks) {
            match check {
                Ok(0) => problems.push(TxnError::PreparedTransactionsDisabled {
                    shard: shard.label.clone(),
                }),
                Ok(_) => {}
                Err(e) => problems.push(TxnError::on_shard(&shard.label, e)),
            }
        }
        for problem in &problems {
            tracing::error!(error = %problem, "shard check failed");
        }
        problems
    }

    /// Runs each participant's statements in one transaction on its shard, and commits them all
    /// or none: plainly for one participant, by two-phase commit for several. Statements of a
    /// shard named twice run in the order given. The SQL is sent as is (simple protocol).
    pub async fn run(&self, work: Vec<(ShardId, Vec<String>)>) -> Result<Outcome, TxnError> {
        let work = merge_by_shard(work);
        match work.len() {
            0 => Ok(Outcome {
                results: Vec::new(),
                commit: Commit::OnePhase,
            }),
            1 => {
                let (shard, statements) = &work[0];
                self.run_one_phase(self.pools.shard(*shard), statements)
                    .await
            }
            _ => self.run_two_phase(&work).await,
        }
    }

    async fn run_one_phase(
        &self,
        shard: &ShardPool,
        statements: &[String],
    ) -> Result<Outcome, TxnError> {
        let on_shard = |e: ConnectError| TxnError::on_shard(&shard.label, e);
        let conn = shard.pool.get().await.map_err(on_shard)?;
        let rows_affected = run_in_transaction(&conn, statements)
            .await
            .map_err(on_shard)?;
        if let Err(e) = conn.batch_execute("COMMIT").await {
            if e.as_db_error().is_none() {
                return Err(TxnError::CommitUnknown {
                    shard: shard.label.clone(),
                    source: e,
                });
            }
            return Err(on_shard(e.into()));
        }
        Ok(Outcome {
            results: vec![ShardResult {
                shard: shard.label.id,
                rows_affected,
            }],
            commit: Commit::OnePhase,
        })
    }

    async fn run_two_phase(&self, work: &[(ShardId, Vec<String>)]) -> Result<Outcome, TxnError> {
        let participants: Vec<ShardId> = work.iter().map(|(s, _)| *s).collect();
        self.ensure_can_prepare(&participants)?;
        let gid = self.gids.next_gid();
        let _in_flight = self.register(&gid, &participants);
        let shards: Vec<&ShardPool> = work.iter().map(|(s, _)| self.pools.shard(*s)).collect();

        let prepared = self
            .failpoints
            .join_all(
                FailPoint::DdlAfterFirstPrepare,
                shards
                    .iter()
                    .zip(work)
                    .map(|(shard, (_, statements))| prepare(shard, statements, &gid)),
            )
            .await;
        if prepared.iter().any(Result::is_err) {
            let mut first_error = None;
            let mut to_roll_back = Vec::new();
            for (shard, result) in shards.iter().zip(prepared) {
                match result {
                    Ok(_) => to_roll_back.push(*shard),
                    Err(failure) => {
                        if failure.maybe_prepared {
                            to_roll_back.push(*shard);
                        }
                        first_error.get_or_insert(failure.error);
                    }
                }
            }
            self.roll_back_prepared(&to_roll_back, &gid).await;
            return Err(first_error.expect("a participant failed"));
        }
        let prepared: Vec<(Vec<u64>, Instant)> = prepared.into_iter().flatten().collect();

        // Past the deadline, recovery may be aborting this gid on some shard already.
        let first_prepare = prepared
            .iter()
            .map(|(_, at)| *at)
            .min()
            .expect("participants");
        let took = first_prepare.elapsed();
        if took >= self.settings.prepare_deadline {
            self.roll_back_prepared(&shards, &gid).await;
            return Err(TxnError::PrepareTooSlow {
                gid,
                took,
                limit: self.settings.prepare_deadline,
            });
        }

        self.decide_commit(&shards, &gid).await?;
        fail_point!(self.failpoints, FailPoint::DdlAfterDecision);

        let confirmed = self
            .failpoints
            .join_all(
                FailPoint::DdlBetweenCommitPrepared,
                shards.iter().map(|s| self.commit_prepared(s, &gid)),
            )
            .await;
        let unconfirmed: Vec<ShardId> = shards
            .iter()
            .zip(&confirmed)
            .filter(|(_, ok)| !**ok)
            .map(|(s, _)| s.label.id)
            .collect();
        if unconfirmed.is_empty() {
            forget(&self.pools, &gid).await;
        }
        Ok(Outcome {
            results: shards
                .iter()
                .zip(prepared)
                .map(|(s, (rows_affected, _))| ShardResult {
                    shard: s.label.id,
                    rows_affected,
                })
                .collect(),
            commit: Commit::TwoPhase { gid, unconfirmed },
        })
    }

    /// Refuses a two-phase commit over `shards` at once when one of them cannot prepare
    /// transactions (as last checked).
    pub fn ensure_can_prepare(&self, shards: &[ShardId]) -> Result<(), TxnError> {
        let disabled = |s: &&ShardId| self.pools.shard(**s).prepared_capacity.get() == Some(0);
        match shards.iter().find(disabled) {
            Some(shard) => Err(TxnError::PreparedTransactionsDisabled {
                shard: self.pools.shard(*shard).label.clone(),
            }),
            None => Ok(()),
        }
    }

    /// How long preparing every participant may take before recovery may abort the gid.
    pub fn prepare_deadline(&self) -> std::time::Duration {
        self.settings.prepare_deadline
    }

    /// Records the commit decision for a transaction some other party prepared on `shards` (a
    /// client session's own connections). As [`Coordinator::run`]'s decision point: on any
    /// error but `ResolutionUnknown` the prepared transactions are rolled back.
    pub async fn decide(&self, shards: &[ShardId], gid: &Gid) -> Result<(), TxnError> {
        let pools: Vec<&ShardPool> = shards.iter().map(|s| self.pools.shard(*s)).collect();
        self.decide_commit(&pools, gid).await
    }

    /// After a recorded commit: COMMIT PREPARED (with retries) on `unconfirmed`, the
    /// participants that did not confirm it on the client's own connections; the decision
    /// record goes once every participant has. Returns the shards still unconfirmed (recovery
    /// finishes them).
    pub async fn complete(&self, unconfirmed: &[ShardId], gid: &Gid) -> Vec<ShardId> {
        if unconfirmed.is_empty() {
            // Every participant committed: the record is garbage now, and the client need not
            // wait for its deletion (recovery deletes it if this does not).
            self.forget_later(gid.clone());
            return Vec::new();
        }
        let pools: Vec<&ShardPool> = unconfirmed.iter().map(|s| self.pools.shard(*s)).collect();
        let confirmed = join_all(pools.iter().map(|s| self.commit_prepared(s, gid))).await;
        let left: Vec<ShardId> = unconfirmed
            .iter()
            .zip(confirmed)
            .filter(|(_, ok)| !ok)
            .map(|(s, _)| *s)
            .collect();
        if left.is_empty() {
            forget(&self.pools, gid).await;
        }
        left
    }

    /// Queues a finished transaction's decision record for deletion. One task deletes what has
    /// queued up in one statement, so under load a commit no longer costs the catalog a round
    /// trip of its own: the records that come in while one DELETE runs go with the next.
    fn forget_later(&self, gid: Gid) {
        let queue = self.forgets.get_or_init(|| {
            let (queue, mut finished) = tokio::sync::mpsc::unbounded_channel();
            let pools = self.pools.clone();
            tokio::spawn(async move {
                let mut batch = Vec::with_capacity(FORGET_BATCH);
                while finished.recv_many(&mut batch, FORGET_BATCH).await > 0 {
                    forget_all(&pools, &batch).await;
                    batch.clear();
                }
            });
            queue
        });
        if let Err(unsent) = queue.send(gid) {
            // The task is gone with its runtime (shutdown): recovery deletes the record.
            tracing::debug!(gid = %unsent.0, "decision record left for recovery");
        }
    }

    /// ROLLBACK PREPARED on `shards` over the control pools (best effort: recovery rolls back
    /// what is left, as it has no commit record).
    pub async fn roll_back(&self, shards: &[ShardId], gid: &Gid) {
        let pools: Vec<&ShardPool> = shards.iter().map(|s| self.pools.shard(*s)).collect();
        self.roll_back_prepared(&pools, gid).await;
    }

    /// The decision point. Ok means commit is recorded durably; any error means the transaction
    /// is rolled back, except `ResolutionUnknown`, where nothing may be touched.
    async fn decide_commit(&self, shards: &[&ShardPool], gid: &Gid) -> Result<(), TxnError> {
        let participants: Vec<String> = shards.iter().map(|s| s.label.name.clone()).collect();
        self.in_flight.set_phase(gid, Phase::Deciding);
        let recorded = match self.pools.catalog().get().await {
            Ok(conn) => decision_log::record_commit(&conn, gid, &participants).await,
            Err(e) => {
                // Nothing was sent, so nothing was recorded.
                self.roll_back_prepared(shards, gid).await;
                return Err(TxnError::DecisionLog { source: e });
            }
        };
        match recorded {
            Ok(CommitRecord::Recorded) => {
                self.in_flight.set_phase(gid, Phase::Committing);
                Ok(())
            }
            Ok(CommitRecord::AlreadyDecided) => {
                self.roll_back_prepared(shards, gid).await;
                Err(TxnError::AbortedByRecovery { gid: gid.clone() })
            }
            Ok(CommitRecord::LeaseExpired) => {
                tracing::warn!(%gid, "lease expired before the commit decision; rolling back");
                self.roll_back_prepared(shards, gid).await;
                Err(TxnError::LeaseExpired { gid: gid.clone() })
            }
            // The server answered with an error: the autocommit INSERT did not commit.
            Err(e) if e.as_db_error().is_some() => {
                self.roll_back_prepared(shards, gid).await;
                Err(TxnError::DecisionLog { source: e.into() })
            }
            Err(e) => {
                tracing::error!(%gid, error = %e, "commit decision outcome unknown; recovery will resolve it");
                Err(TxnError::ResolutionUnknown {
                    gid: gid.clone(),
                    source: e,
                })
            }
        }
    }

    /// COMMIT PREPARED with bounded retries; true once the shard confirmed.
    async fn commit_prepared(&self, shard: &ShardPool, gid: &Gid) -> bool {
        let mut pause = self.settings.commit_backoff;
        for attempt in 1..=self.settings.commit_attempts {
            // A gid already gone was committed by recovery: under a commit record nobody rolls
            // back.
            match finish_prepared(shard, &shard.prepared_name(gid), Decision::Commit).await {
                Ok(()) => return true,
                Err(e) => {
                    tracing::warn!(%gid, shard = %shard.label, attempt, error = %e, "COMMIT PREPARED failed")
                }
            }
            if attempt < self.settings.commit_attempts {
                tokio::time::sleep(pause).await;
                pause *= 2;
            }
        }
        tracing::error!(%gid, shard = %shard.label, "COMMIT PREPARED not confirmed; recovery will finish it");
        false
    }

    /// Best effort: a prepared transaction left behind has no commit record, so recovery rolls
    /// it back.
    async fn roll_back_prepared(&self, shards: &[&ShardPool], gid: &Gid) {
        self.in_flight.set_phase(gid, Phase::RollingBack);
        join_all(shards.iter().map(|shard| async move {
            if let Err(e) = finish_prepared(shard, &shard.prepared_name(gid), Decision::Abort).await {
                tracing::warn!(%gid, shard = %shard.label, error = %e, "ROLLBACK PREPARED failed; recovery will finish it");
            }
        }))
        .await;
    }
}

/// Deletes a decision record whose every participant has finished.
async fn forget(pools: &ControlPools, gid: &Gid) {
    forget_all(pools, std::slice::from_ref(gid)).await
}

/// Deletes decision records whose every participant has finished.
async fn forget_all(pools: &ControlPools, gids: &[Gid]) {
    let result = match pools.catalog().get().await {
        Ok(conn) => decision_log::delete(&conn, gids)
            .await
            .map_err(ConnectError::from),
        Err(e) => Err(e),
    };
    if let Err(e) = result {
        tracing::warn!(records = gids.len(), error = %e, "cannot delete decision records; recovery will");
    }
}

/// COMMIT or ROLLBACK PREPARED of the transaction prepared as `name`, on a session of its own.
/// A name that is not (or no longer) prepared counts as done: someone else finished it, or it
/// never got prepared.
pub(crate) async fn finish_prepared(
    shard: &ShardPool,
    name: &str,
    decision: Decision,
) -> Result<(), ConnectError> {
    let verb = match decision {
        Decision::Commit => "COMMIT",
        Decision::Abort => "ROLLBACK",
    };
    let sql = format!("{verb} PREPARED {}", super::gid::quoted(name));
    match shard.pool.batch_execute(&sql).await {
        Err(e) if e.code() != Some(&SqlState::UNDEFINED_OBJECT) => Err(e),
        _ => Ok(()),
    }
}

/// BEGIN, the statements and PREPARE TRANSACTION on one shard. Returns the row counts and when
/// PREPARE was sent (no later than the shard's own `prepared` timestamp).
async fn prepare(
    shard: &ShardPool,
    statements: &[String],
    gid: &Gid,
) -> Result<(Vec<u64>, Instant), PrepareFailure> {
    let fail = |e: ConnectError, maybe_prepared| PrepareFailure {
        error: TxnError::on_shard(&shard.label, e),
        maybe_prepared,
    };
    let conn = shard.pool.get().await.map_err(|e| fail(e, false))?;
    let rows = run_in_transaction(&conn, statements)
        .await
        .map_err(|e| fail(e, false))?;
    let sent_at = Instant::now();
    match conn.batch_execute(&shard.prepare_transaction(gid)).await {
        Ok(()) => Ok((rows, sent_at)),
        Err(e) => {
            let answered = e.as_db_error().is_some();
            if answered {
                // A failed PREPARE already rolled back; this only clears a parse-level failure.
                let _ = conn.batch_execute("ROLLBACK").await;
            }
            let disabled = e
                .as_db_error()
                .is_some_and(|d| d.code() == &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
            if disabled {
                return Err(PrepareFailure {
                    error: TxnError::PreparedTransactionsDisabled {
                        shard: shard.label.clone(),
                    },
                    maybe_prepared: false,
                });
            }
            Err(fail(e.into(), !answered))
        }
    }
}

/// BEGIN and the statements, leaving the transaction open; on failure the session is rolled back
/// so it goes back to the pool clean.
async fn run_in_transaction(
    conn: &Client,
    statements: &[String],
) -> Result<Vec<u64>, ConnectError> {
    conn.batch_execute("BEGIN").await?;
    let mut rows = Vec::new();
    for statement in statements {
        match conn.simple_query(statement).await {
            Ok(messages) => rows.extend(messages.iter().filter_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            })),
            Err(e) => {
                let _ = conn.batch_execute("ROLLBACK").await;
                return Err(e.into());
            }
        }
    }
    Ok(rows)
}

fn merge_by_shard(work: Vec<(ShardId, Vec<String>)>) -> Vec<(ShardId, Vec<String>)> {
    let mut merged: Vec<(ShardId, Vec<String>)> = Vec::with_capacity(work.len());
    for (shard, statements) in work {
        match merged.iter_mut().find(|(s, _)| *s == shard) {
            Some((_, existing)) => existing.extend(statements),
            None => merged.push((shard, statements)),
        }
    }
    merged
}
