//! A sharding-key UPDATE whose rows may move between shards, run over the session's own
//! connections ([`Host`]): inside the client's transaction block or, outside one, a block of the
//! statement's own committed (by two-phase commit when several shards wrote) before the client
//! hears the answer.
//!
//! Order: every source shard's rows are read and locked first, so a refusal (row movement
//! disabled) changes nothing; then, in one batch per shard, the moving rows (and their
//! descendants, deepest first) are deleted and the staying rows updated, and after them the
//! moved rows inserted where their new keys live (root first), so no statement of the move sees
//! a row twice. Each step goes to all its shards at once (`steps`).

use super::steps::{locked_rows, read_step, recorded, step_error, Answers, Expect, Step, Tail};
use crate::catalog::{RowMovement, ShardId, Snapshot, Table};
use crate::client_error::ClientError;
use crate::executor::commit::StepOutcome;
use crate::executor::gather::{self, Reply};
use crate::executor::host::{Host, Shared};
use crate::failpoint::FailPoint;
use crate::movement::{self, ClientBind, Locked, MoveError, Moving};
use crate::router::hash::KeyValue;
use crate::router::plan::{KeyUpdate, ShardedPlan};
use crate::txn::Gid;
use bytes::{Bytes, BytesMut};
use std::collections::{BTreeMap, BTreeSet, HashSet};
use std::sync::Arc;
use std::time::Instant;

/// A sharding-key UPDATE to run: its plan, the shards its rows are on, and for the extended
/// protocol the client's portal and Bind.
pub struct KeyUpdateJob {
    pub plan: Arc<ShardedPlan>,
    pub sources: Vec<ShardId>,
    pub bound: Option<(Box<[u8]>, ClientBind)>,
}

/// Why the move stopped: the ErrorResponse for the client, and whether a shard raised it (its
/// block has failed already) or the proxy did.
pub struct Failure {
    pub notices: BytesMut,
    pub error: Bytes,
    pub from_shard: bool,
}

impl Failure {
    /// A shard's error, with the notices gathered so far.
    pub(super) fn shard(notices: &mut BytesMut, error: Bytes) -> Failure {
        Failure {
            notices: std::mem::take(notices),
            error,
            from_shard: true,
        }
    }

    pub(super) fn proxy(e: &impl ClientError) -> Failure {
        Failure {
            notices: BytesMut::new(),
            error: e.error_frame(),
            from_shard: false,
        }
    }

    /// A shard's answer the move cannot read.
    fn malformed(table: &str) -> Failure {
        Failure::proxy(&MoveError::Malformed {
            table: table.to_owned(),
        })
    }
}

/// What the last step of a move brought back.
struct LastStep {
    answers: Answers,
    /// The step's first error.
    error: Option<Bytes>,
    /// When the step was sent.
    started: Instant,
}

/// Step 4, planned: on each source the deletes (deepest table first) and the update of the
/// rows that stay; on each target the moved rows, each table after its parent. A shard that is
/// both deletes before it inserts, so no statement of the move sees a row twice.
struct Writes {
    sources: Step,
    targets: Step,
    /// The rows the client's UPDATE counts: the roots moved and updated in place.
    count: u64,
    /// Every row moved, descendants included (for the metrics).
    moved_rows: u64,
}

/// Per target shard, per table (0: the root, then each descendant): the rows to insert.
type Inserts = BTreeMap<ShardId, Vec<Vec<Bytes>>>;

/// The writes of step 4; `Err` when a descendant row names no root of its source.
fn plan_writes(job: &KeyUpdateJob, plan: &KeyUpdate, sources: &[SourceRows]) -> Result<Writes, ()> {
    let bind = job.bound.as_ref().map(|(_, b)| b);
    let mut writes = Writes {
        sources: Step::new(),
        targets: Step::new(),
        count: 0,
        moved_rows: 0,
    };
    let mut inserts = Inserts::new();
    for source in sources {
        plan_source(&mut writes, &mut inserts, plan, bind, source)?;
    }
    // RETURNING describes its rows even when there are none.
    if !plan.returning.is_empty() && writes.sources.is_empty() {
        if let Some(&first) = job.sources.first() {
            let batch = writes.sources.entry(first).or_default();
            movement::update_staying(&mut batch.statements, plan, bind, &[]);
            batch.expect.push(Expect::Described);
        }
    }
    writes.targets = plan_inserts(plan, bind, &inserts);
    Ok(writes)
}

/// One source's part of step 4: its moving rows' families and roots deleted (children before
/// their parents, so no foreign key is left dangling) and noted in `inserts` for their targets,
/// its staying rows updated in place.
fn plan_source(
    writes: &mut Writes,
    inserts: &mut Inserts,
    plan: &KeyUpdate,
    bind: Option<&ClientBind>,
    source: &SourceRows,
) -> Result<(), ()> {
    let levels = 1 + plan.descendants.len();
    let moving: Vec<usize> = (0..source.rows.len())
        .filter(|&i| source.moves[i].is_some())
        .collect();
    let staying: Vec<&Locked> = (0..source.rows.len())
        .filter(|&i| source.moves[i].is_none())
        .map(|i| &source.rows[i])
        .collect();
    if moving.is_empty() && staying.is_empty() {
        return Ok(());
    }
    let batch = writes.sources.entry(source.shard).or_default();
    if !moving.is_empty() {
        for rows in source.family.iter().rev().filter(|r| !r.is_empty()) {
            let refs: Vec<&Locked> = rows.iter().collect();
            let statements = movement::delete(&mut batch.statements, &refs);
            batch.expect.push(Expect::Deleted {
                statements,
                locked: rows.len(),
            });
            writes.moved_rows += rows.len() as u64;
        }
        let roots: Vec<&Locked> = moving.iter().map(|&i| &source.rows[i]).collect();
        let statements = movement::delete(&mut batch.statements, &roots);
        batch.expect.push(Expect::Deleted {
            statements,
            locked: roots.len(),
        });
        writes.count += roots.len() as u64;
        writes.moved_rows += roots.len() as u64;
        for &i in &moving {
            let target = source.moves[i].unwrap_or(source.shard);
            inserts
                .entry(target)
                .or_insert_with(|| vec![Vec::new(); levels])[0]
                .push(source.rows[i].row.clone());
        }
        for (level, rows) in source.family.iter().enumerate() {
            for locked in rows {
                let target = root_index(locked)
                    .and_then(|i| source.moves.get(i).copied().flatten())
                    .ok_or(())?;
                inserts
                    .entry(target)
                    .or_insert_with(|| vec![Vec::new(); levels])[level + 1]
                    .push(locked.row.clone());
            }
        }
    }
    if !staying.is_empty() {
        movement::update_staying(&mut batch.statements, plan, bind, &staying);
        batch.expect.push(Expect::Stayed);
    }
    Ok(())
}

/// The targets' part of step 4: on each target the moved rows inserted, each table after its
/// parent. Root rows carry their old key after the new row; descendants their root's index
/// before it.
fn plan_inserts(plan: &KeyUpdate, bind: Option<&ClientBind>, inserts: &Inserts) -> Step {
    let result_formats = bind.map(|b| b.result_formats.as_slice()).unwrap_or(&[]);
    let mut targets = Step::new();
    for (&target, tables) in inserts {
        let batch = targets.entry(target).or_default();
        for (level, rows) in tables.iter().enumerate().filter(|(_, r)| !r.is_empty()) {
            let (into, skip) = match level {
                0 => (
                    movement::Target {
                        relation: &plan.relation,
                        qualifier: Some(&plan.qualifier),
                        columns: &plan.columns,
                        types: &plan.column_types,
                        returning: &plan.returning,
                        result_formats,
                    },
                    2,
                ),
                _ => {
                    let d = &plan.descendants[level - 1];
                    (
                        movement::Target {
                            relation: &d.relation,
                            qualifier: None,
                            columns: &d.columns,
                            types: &d.column_types,
                            returning: "",
                            result_formats: &[],
                        },
                        3,
                    )
                }
            };
            let values: Vec<Vec<Option<&[u8]>>> = rows
                .iter()
                .map(|r| {
                    let mut v = gather::values(r);
                    v.drain(..skip.min(v.len()));
                    v.truncate(into.columns.len());
                    v
                })
                .collect();
            let statements = movement::insert(&mut batch.statements, &into, &values);
            batch.expect.push(Expect::Inserted {
                statements,
                root: level == 0,
            });
        }
    }
    targets
}

/// The shards step 4 writes on.
fn writers_of(sources: &Step, targets: &Step) -> Vec<ShardId> {
    sources
        .iter()
        .chain(targets)
        .filter(|(_, b)| b.writes())
        .map(|(s, _)| *s)
        .collect::<BTreeSet<_>>()
        .into_iter()
        .collect()
}

/// The deletes and the inserts as one step: a shard that is both deletes first.
fn joined(mut sources: Step, targets: Step) -> Step {
    for (shard, part) in targets {
        let batch = sources.entry(shard).or_default();
        batch.statements.append(part.statements);
        batch.expect.extend(part.expect);
    }
    sources
}

/// The rows one source shard locked, each with where it goes.
struct SourceRows {
    shard: ShardId,
    rows: Vec<Locked>,
    /// Per row: `Some(target)` when it moves (the target may be the source itself, for a
    /// family whose key changed), `None` when the client's UPDATE changes it in place.
    moves: Vec<Option<ShardId>>,
    /// Per descendant table, the rows of moving roots' families, locked.
    family: Vec<Vec<Locked>>,
}

/// How the statement's block stands after a move.
pub enum Ending {
    /// Open: the client's block goes on, or the statement's own block is committed by the
    /// caller.
    Open,
    /// The move's last step committed the statement's own block (with two-phase commit when
    /// several shards wrote).
    Committed,
}

/// Moves the rows of `job` over the session `host`: every step of the move, each on all its
/// shards at once; the rows and tag for the client and how the block stands, or why the move
/// failed (`implicit`: outside a client's block, in one of the statement's own).
pub async fn move_rows<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    job: &KeyUpdateJob,
    implicit: bool,
) -> Result<Result<(gather::Rows, Ending), Failure>, H::Error> {
    Mover { host, shared }.move_rows(job, implicit).await
}

/// A move over the session's connections.
pub(super) struct Mover<'a, H: Host> {
    pub(super) host: &'a mut H,
    pub(super) shared: Shared<'a>,
}

impl<H: Host> Mover<'_, H> {
    /// Every step of the move, each on all its shards at once; the rows and tag for the client
    /// and how the block stands, or why the move failed. For a simple query outside a client's
    /// block the last step also ends the statement's own block where it can (PREPARE
    /// TRANSACTION or COMMIT sent with each shard's last statements), which spares every shard
    /// a round trip; a bound statement's block ends with its batch.
    async fn move_rows(
        &mut self,
        job: &KeyUpdateJob,
        implicit: bool,
    ) -> Result<Result<(gather::Rows, Ending), Failure>, H::Error> {
        let Some(plan) = job.plan.key_update.as_deref() else {
            return Ok(Ok((gather::Rows::default(), Ending::Open)));
        };
        let snapshot = self.shared.catalog.snapshot();
        let Some(table) = snapshot.table(plan.table) else {
            return Ok(Err(Failure::proxy(&MoveError::Malformed {
                table: String::new(),
            })));
        };
        let name = table.qualified_name();
        let mut notices = BytesMut::new();
        let mut sources = match self
            .lock_rows(job, plan, &name, implicit, &mut notices)
            .await?
        {
            Ok(sources) => sources,
            Err(f) => return Ok(Err(f)),
        };
        if let Err(f) = self.place_rows(plan, &snapshot, table, &mut sources) {
            return Ok(Err(f));
        }
        if !plan.descendants.is_empty() {
            let locked = self
                .lock_family(plan, &name, &mut sources, implicit, &mut notices)
                .await?;
            if let Err(f) = locked {
                return Ok(Err(f));
            }
        }
        let writes = match plan_writes(job, plan, &sources) {
            Ok(writes) => writes,
            Err(()) => return Ok(Err(Failure::malformed(&name))),
        };
        let moved_rows = writes.moved_rows;
        let (mut answer, ending) = match self
            .write_rows(job, &name, writes, implicit, &mut notices)
            .await?
        {
            Ok(written) => written,
            Err(f) => return Ok(Err(f)),
        };
        answer.notices = notices;
        let metrics = &self.shared.metrics;
        if moved_rows > 0 {
            metrics.key_updates_moved.increment(1);
            metrics.rows_moved.increment(moved_rows);
        } else {
            metrics.key_updates_in_place.increment(1);
        }
        Ok(Ok((answer, ending)))
    }

    /// Step 4 sent and step 5: the writes on every shard at once (the deletes first, alone,
    /// when a fail point sits between them and the inserts), and with the last step the
    /// block's end where it can be sent along. The answer carries the UPDATE's tag.
    async fn write_rows(
        &mut self,
        job: &KeyUpdateJob,
        name: &str,
        writes: Writes,
        implicit: bool,
        notices: &mut BytesMut,
    ) -> Result<Result<(gather::Rows, Ending), Failure>, H::Error> {
        let Writes {
            sources: sources_step,
            targets: targets_step,
            mut count,
            ..
        } = writes;
        let mut answer = gather::Rows::default();
        let writers = writers_of(&sources_step, &targets_step);
        let split =
            !targets_step.is_empty() && self.shared.failpoints.is_armed(FailPoint::MoveMidFamily);
        let mut last = if split {
            let deleted = self
                .deletes_alone(
                    sources_step,
                    name,
                    implicit,
                    &mut answer,
                    &mut count,
                    notices,
                )
                .await?;
            if let Err(f) = deleted {
                return Ok(Err(f));
            }
            targets_step
        } else {
            joined(sources_step, targets_step)
        };
        let tail = match self.tail_for(job, implicit, split, &mut last, &writers, notices) {
            Ok(tail) => tail,
            Err(f) => return Ok(Err(f)),
        };

        // 5. The last step, and with it the block's end where it could be sent along.
        let started = Instant::now();
        let answers = self.send_step(last, implicit).await?;
        let error = step_error(&answers, notices);
        let ending = match tail {
            Tail::Prepare {
                gid,
                decider,
                _in_flight,
            } => {
                let last = LastStep {
                    answers,
                    error,
                    started,
                };
                let settled = self
                    .settle_move(
                        name,
                        &gid,
                        decider,
                        &writers,
                        last,
                        &mut answer,
                        &mut count,
                        notices,
                    )
                    .await?;
                match settled {
                    Ok(()) => Ending::Committed,
                    Err(f) => return Ok(Err(f)),
                }
            }
            tail @ (Tail::Commit | Tail::None) => {
                if let Some(error) = error {
                    return Ok(Err(Failure::shard(notices, error)));
                }
                if let Some(f) = read_step(name, answers, &mut answer, &mut count) {
                    return Ok(Err(f));
                }
                match tail {
                    Tail::Commit => Ending::Committed,
                    _ => Ending::Open,
                }
            }
        };
        for p in self.host.links().parked.iter_mut() {
            match ending {
                Ending::Committed => p.wrote = false,
                Ending::Open => p.wrote |= writers.contains(&p.conn.shard),
            }
        }
        answer.tag = Some(format!("UPDATE {count}"));
        Ok(Ok((answer, ending)))
    }

    /// The deletes of step 4 alone, then the fail point between them and the inserts: deleted
    /// at their old place, not yet inserted at the new one, the transaction holds the only
    /// copy, and a crash here must lose nothing.
    async fn deletes_alone(
        &mut self,
        deletes: Step,
        name: &str,
        implicit: bool,
        answer: &mut gather::Rows,
        count: &mut u64,
        notices: &mut BytesMut,
    ) -> Result<Result<(), Failure>, H::Error> {
        let answers = self.send_step(deletes, implicit).await?;
        if let Some(error) = step_error(&answers, notices) {
            return Ok(Err(Failure::shard(notices, error)));
        }
        if let Some(f) = read_step(name, answers, answer, count) {
            return Ok(Err(f));
        }
        crate::failpoint::fail_point!(self.shared.failpoints, FailPoint::MoveMidFamily);
        Ok(Ok(()))
    }

    /// How the statement's own block ends in the last step: sent along with it for a simple
    /// query outside a client's block ([`Mover::add_tail`]), else left open. A fail point
    /// between two of the commit's steps needs them apart: the usual commit.
    fn tail_for(
        &mut self,
        job: &KeyUpdateJob,
        implicit: bool,
        split: bool,
        last: &mut Step,
        writers: &[ShardId],
        notices: &mut BytesMut,
    ) -> Result<Tail, Failure> {
        let commits_along = implicit
            && job.bound.is_none()
            && !split
            && !self
                .shared
                .failpoints
                .is_armed(FailPoint::CommitAfterFirstPrepare);
        if !commits_along {
            return Ok(Tail::None);
        }
        self.add_tail(last, writers).map_err(|error| Failure {
            notices: std::mem::take(notices),
            error,
            from_shard: false,
        })
    }

    /// The end of a move whose last step prepared its writers: decided by the record on the
    /// catalog's shard (`decider`) or by the coordinator, then finished everywhere. An answer
    /// the move cannot read undoes every PREPARE, since nothing is decided yet.
    #[allow(clippy::too_many_arguments)]
    async fn settle_move(
        &mut self,
        name: &str,
        gid: &Gid,
        decider: Option<ShardId>,
        writers: &[ShardId],
        last: LastStep,
        answer: &mut gather::Rows,
        count: &mut u64,
        notices: &mut BytesMut,
    ) -> Result<Result<(), Failure>, H::Error> {
        let LastStep {
            answers,
            error,
            started,
        } = last;
        let preparing: Vec<ShardId> = writers
            .iter()
            .copied()
            .filter(|w| Some(*w) != decider)
            .collect();
        let at = self.host.links().parked.positions(&preparing);
        let prepared: Vec<Option<Bytes>> = preparing
            .iter()
            .map(|w| {
                answers
                    .iter()
                    .find(|(s, ..)| s == w)
                    .and_then(|(.., r)| r.error.clone())
            })
            .collect();
        let recorded = decider.is_some_and(|d| recorded(&answers, d));
        if error.is_none() {
            if let Some(f) = read_step(name, answers, answer, count) {
                // Nothing is decided yet: every writer's PREPARE is undone.
                self.host
                    .commit()
                    .finish_prepared(&at, gid, "ROLLBACK")
                    .await?;
                self.shared.metrics.distributed_rolled_back.increment(1);
                return Ok(Err(f));
            }
        }
        let settled = match decider {
            Some(d) => {
                let step = StepOutcome {
                    started,
                    error,
                    prepared: &prepared,
                    recorded,
                };
                self.host
                    .commit()
                    .commit_with_record(d, &at, gid, step)
                    .await?
            }
            None => self
                .host
                .commit()
                .settle_prepared(&at, gid, &prepared, started)
                .await?
                .map(drop),
        };
        Ok(settled.map_err(|error| Failure::shard(notices, error)))
    }

    /// Step 1: reads and locks every row the statement touches, with its new values, on each
    /// source shard. In the statement's own block the read is planned once per connection,
    /// generically: a setting of that block alone, which no statement of the client's sees.
    async fn lock_rows(
        &mut self,
        job: &KeyUpdateJob,
        plan: &KeyUpdate,
        name: &str,
        implicit: bool,
        notices: &mut BytesMut,
    ) -> Result<Result<Vec<SourceRows>, Failure>, H::Error> {
        let bind = job.bound.as_ref().map(|(_, b)| b);
        let mut step = Step::new();
        for &shard in &job.sources {
            let batch = step.entry(shard).or_default();
            if implicit {
                batch.set("SET LOCAL plan_cache_mode = force_generic_plan");
            }
            movement::select_root(&mut batch.statements, plan, bind);
            batch.expect.push(Expect::Locked);
            if implicit {
                batch.set("SET LOCAL plan_cache_mode TO DEFAULT");
            }
        }
        let reads = self.send_step(step, implicit).await?;
        if let Some(error) = step_error(&reads, notices) {
            return Ok(Err(Failure::shard(notices, error)));
        }
        let mut sources = Vec::with_capacity(job.sources.len());
        for (shard, expect, replies) in reads {
            let rows = locked_rows(&expect, replies).into_iter().flatten();
            let mut seen = HashSet::new();
            let mut kept = Vec::new();
            for row in rows {
                let Some(locked) = Locked::read(row) else {
                    return Ok(Err(Failure::malformed(name)));
                };
                // UPDATE … FROM updates a row once however many rows it joins.
                if seen.insert((locked.partition.clone(), locked.ctid.clone())) {
                    kept.push(locked);
                }
            }
            sources.push(SourceRows {
                shard,
                rows: kept,
                moves: Vec::new(),
                family: Vec::new(),
            });
        }
        Ok(Ok(sources))
    }

    /// Step 2: where each row goes; a row that would leave its shard while the table's row
    /// movement is disabled refuses the statement.
    fn place_rows(
        &self,
        plan: &KeyUpdate,
        snapshot: &Snapshot,
        table: &Table,
        sources: &mut [SourceRows],
    ) -> Result<(), Failure> {
        let has_family = !plan.descendants.is_empty();
        for source in sources {
            for row in &source.rows {
                let (old, new) = keys(plan, row);
                let target = target_shard(snapshot, table, &new).map_err(|e| Failure::proxy(&e))?;
                let moves = if has_family {
                    old != new
                } else {
                    target != source.shard
                };
                if moves && target != source.shard && plan.movement == RowMovement::Disabled {
                    self.shared.metrics.key_updates_refused.increment(1);
                    return Err(Failure::proxy(&MoveError::RowMovementDisabled {
                        table: table.qualified_name(),
                    }));
                }
                source.moves.push(moves.then_some(target));
            }
        }
        Ok(())
    }

    /// Step 3: the descendants of the moving rows, every level in one batch per source: each
    /// level is found by the roots' keys, not by its parent level's rows.
    async fn lock_family(
        &mut self,
        plan: &KeyUpdate,
        name: &str,
        sources: &mut [SourceRows],
        implicit: bool,
        notices: &mut BytesMut,
    ) -> Result<Result<(), Failure>, H::Error> {
        let mut step = Step::new();
        for source in sources.iter() {
            let movers = movers(plan, source);
            if movers.is_empty() {
                continue;
            }
            let batch = step.entry(source.shard).or_default();
            for d in &plan.descendants {
                movement::select_descendant(&mut batch.statements, d, &plan.key_types, &movers);
                batch.expect.push(Expect::Locked);
            }
        }
        let read = self.send_step(step, implicit).await?;
        if let Some(error) = step_error(&read, notices) {
            return Ok(Err(Failure::shard(notices, error)));
        }
        for (shard, expect, replies) in read {
            let Some(source) = sources.iter_mut().find(|s| s.shard == shard) else {
                continue;
            };
            for level in locked_rows(&expect, replies) {
                let rows: Option<Vec<Locked>> = level.into_iter().map(Locked::read).collect();
                let Some(rows) = rows else {
                    return Ok(Err(Failure::malformed(name)));
                };
                source.family.push(rows);
            }
            if source.family.len() != plan.descendants.len() {
                return Ok(Err(Failure::malformed(name)));
            }
        }
        Ok(Ok(()))
    }
}

/// A source's moving root rows with their old and new keys.
fn movers<'r>(plan: &KeyUpdate, source: &'r SourceRows) -> Vec<Moving<'r>> {
    (0..source.rows.len())
        .filter(|&i| source.moves[i].is_some())
        .map(|i| {
            let (old_key, new_key) = keys(plan, &source.rows[i]);
            Moving {
                index: i,
                old_key,
                new_key,
            }
        })
        .collect()
}

/// A key's values as a row holds them (binary; `None`: NULL).
type Key<'r> = Vec<Option<&'r [u8]>>;

/// The old and the new key of a locked root row (root key, then partition-set key).
fn keys<'r>(plan: &KeyUpdate, row: &'r Locked) -> (Key<'r>, Key<'r>) {
    let width = plan.columns.len();
    let old = (0..plan.key_positions.len())
        .map(|k| row.value(width + k))
        .collect();
    let new = plan.key_positions.iter().map(|&p| row.value(p)).collect();
    (old, new)
}

/// The shard that owns a new key (binary values of the key columns' types).
fn target_shard(
    snapshot: &Snapshot,
    table: &Table,
    key: &[Option<&[u8]>],
) -> Result<ShardId, MoveError> {
    let values: Vec<KeyValue<'_>> = key
        .iter()
        .map(|v| v.map_or(KeyValue::Null, KeyValue::Binary))
        .collect();
    let (key, set_key) = values.split_at(table.key_columns.len().min(values.len()));
    crate::router::place::shard_for(snapshot, table, key, set_key)
        .map_err(|e| MoveError::Place(crate::router::route::RouteError::Place(e)))
}

/// The index of a descendant row's root row, which its lookup returned after the ctid.
fn root_index(row: &Locked) -> Option<usize> {
    std::str::from_utf8(row.value(0)?).ok()?.parse().ok()
}

/// Adds a statement's RETURNING rows (and its description, the first time) to the answer.
pub(super) fn add_returned(answer: &mut gather::Rows, reply: Reply) {
    if answer.description.is_none() {
        answer.description = reply.description;
    }
    answer.rows.extend(reply.rows);
}
