//! The session's side of a sharding-key UPDATE whose rows may move between shards: the steps
//! of `crate::movement` on the session's own connections, inside the client's transaction
//! block or, outside one, a block of the statement's own committed (by two-phase commit when
//! several shards wrote) before the client hears the answer.
//!
//! Order: every source shard's rows are read and locked first, so a refusal (row movement
//! disabled) changes nothing; then the moving rows (and their descendants, deepest first) are
//! deleted and the staying rows updated on their shards; last the moved rows are inserted where
//! their new keys live (root first), so no statement of the move sees a row twice.

use super::insert_select::Work;
use super::*;
use crate::catalog::{RowMovement, Snapshot};
use crate::error::ClientError;
use crate::executor::gather::{self, Combine, Combined};
use crate::movement::{self, ClientBind, Locked, MoveError, Moving};
use crate::router::hash::KeyValue;
use crate::router::plan::{KeyUpdate, ShardedPlan, StatementKind};
use bytes::Bytes;
use std::collections::{BTreeMap, HashSet};

/// A sharding-key UPDATE to run: its plan, the shards its rows are on, and for the extended
/// protocol the client's portal and Bind.
pub(super) struct KeyUpdateJob {
    pub(super) plan: Arc<ShardedPlan>,
    pub(super) sources: Vec<ShardId>,
    pub(super) bound: Option<(Box<[u8]>, ClientBind)>,
}

/// Why the move stopped: the ErrorResponse for the client, and whether a shard raised it (its
/// block has failed already) or the proxy did.
struct Failure {
    notices: BytesMut,
    error: Bytes,
    from_shard: bool,
}

impl Failure {
    fn proxy(e: &impl ClientError) -> Failure {
        Failure {
            notices: BytesMut::new(),
            error: error_frame(e),
            from_shard: false,
        }
    }
}

/// The rows one source shard locked, each with where it goes.
struct SourceRows {
    shard: ShardId,
    rows: Vec<Locked>,
    /// Per row: `Some(target)` when it moves (the target may be the source itself, for a
    /// family whose key changed), `None` when the client's UPDATE changes it in place.
    moves: Vec<Option<ShardId>>,
}

impl Session {
    pub(super) async fn run_key_update(&mut self, job: KeyUpdateJob) -> Result<(), SessionError> {
        let implicit = self.session_status() == b'I';
        let moved = self.move_rows(&job, implicit).await?;
        let answer = match moved {
            Ok(rows) if implicit => match self.commit_participants().await? {
                Ok(_) => Ok(rows),
                Err(error) => Err((BytesMut::new(), error)),
            },
            Ok(rows) => Ok(rows),
            Err(f) => {
                if implicit {
                    self.end_every_participant("ROLLBACK").await?;
                } else if !f.from_shard {
                    self.fail_block(&error_message(&f.error)).await?;
                }
                Err((f.notices, f.error))
            }
        };
        if implicit {
            self.release_parked_if_idle();
        }
        let mut out = BytesMut::new();
        let simple = job.bound.is_none();
        match (job.bound, answer) {
            (None, Ok(rows)) => gather::write(&Combined::Rows(rows), &mut out),
            (Some((portal, _)), Ok(rows)) => {
                out.extend_from_slice(&rows.notices);
                out.extend_from_slice(&protocol::empty_message(b'2'));
                let rows = gather::Rows {
                    notices: BytesMut::new(),
                    ..rows
                };
                self.portals.put_buffered(portal, rows);
            }
            (bound, Err((notices, error))) => {
                out.extend_from_slice(&notices);
                out.extend_from_slice(&error);
                if bound.is_some() {
                    self.skip_until_sync = true;
                }
            }
        }
        if simple {
            let status = self.session_status();
            protocol::ready_for_query(&mut out, status);
        }
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    /// Every step of the move; the rows and tag for the client, or why it failed.
    async fn move_rows(
        &mut self,
        job: &KeyUpdateJob,
        implicit: bool,
    ) -> Result<Result<gather::Rows, Failure>, SessionError> {
        let Some(plan) = job.plan.key_update.as_deref() else {
            return Ok(Ok(gather::Rows::default()));
        };
        let snapshot = self.ctx.catalog.snapshot();
        let Some(table) = snapshot.table(plan.table) else {
            return Ok(Err(Failure::proxy(&MoveError::Malformed {
                table: String::new(),
            })));
        };
        let name = table.qualified_name();
        let bind = job.bound.as_ref().map(|(_, b)| b);
        let mut notices = BytesMut::new();
        macro_rules! step {
            ($shard:expr, $messages:expr, $kind:expr) => {
                match self.on_shard($shard, $messages, $kind, implicit).await? {
                    Combined::Rows(r) => {
                        notices.extend_from_slice(&r.notices);
                        r
                    }
                    Combined::Failed { notices: n, error } => {
                        notices.extend_from_slice(&n);
                        return Ok(Err(Failure {
                            notices,
                            error,
                            from_shard: true,
                        }));
                    }
                }
            };
        }

        // 1. Read and lock every row the statement touches, with its new values.
        let mut sources = Vec::with_capacity(job.sources.len());
        for &shard in &job.sources {
            let read = step!(
                shard,
                movement::select_root(plan, bind),
                StatementKind::Select
            );
            let mut seen = HashSet::new();
            let mut rows = Vec::with_capacity(read.rows.len());
            for row in read.rows {
                let Some(locked) = Locked::read(row) else {
                    return Ok(Err(Failure::proxy(&MoveError::Malformed { table: name })));
                };
                // UPDATE … FROM updates a row once however many rows it joins.
                if seen.insert((locked.partition.clone(), locked.ctid.clone())) {
                    rows.push(locked);
                }
            }
            sources.push(SourceRows {
                shard,
                rows,
                moves: Vec::new(),
            });
        }
        // 2. Where each row goes.
        let has_family = !plan.descendants.is_empty();
        for source in &mut sources {
            for row in &source.rows {
                let (old, new) = keys(plan, row);
                let target = match target_shard(&snapshot, table, &new) {
                    Ok(t) => t,
                    Err(e) => return Ok(Err(Failure::proxy(&e))),
                };
                let moves = if has_family {
                    old != new
                } else {
                    target != source.shard
                };
                if moves && target != source.shard && plan.movement == RowMovement::Disabled {
                    self.ctx.metrics.key_updates_refused.increment(1);
                    return Ok(Err(Failure::proxy(&MoveError::RowMovementDisabled {
                        table: name,
                    })));
                }
                source.moves.push(moves.then_some(target));
            }
        }

        // 3. On each source: the descendants of moving rows, then the deletes (deepest table
        //    first) and the update of the rows that stay.
        let mut count = 0u64;
        let mut moved_rows = 0u64;
        let mut answer = gather::Rows::default();
        // Per target shard, per table (0: the root, then each descendant): the rows to insert.
        let mut inserts: BTreeMap<ShardId, Vec<Vec<Bytes>>> = BTreeMap::new();
        let levels = 1 + plan.descendants.len();
        for source in &sources {
            let moving: Vec<usize> = (0..source.rows.len())
                .filter(|&i| source.moves[i].is_some())
                .collect();
            let staying: Vec<&Locked> = (0..source.rows.len())
                .filter(|&i| source.moves[i].is_none())
                .map(|i| &source.rows[i])
                .collect();
            if !moving.is_empty() {
                let movers: Vec<Moving<'_>> = moving
                    .iter()
                    .map(|&i| {
                        let (old_key, new_key) = keys(plan, &source.rows[i]);
                        Moving {
                            index: i,
                            old_key,
                            new_key,
                        }
                    })
                    .collect();
                let mut family_rows: Vec<Vec<Locked>> = Vec::new();
                for d in &plan.descendants {
                    let read = step!(
                        source.shard,
                        movement::select_descendant(d, &plan.key_types, &movers),
                        StatementKind::Select
                    );
                    let mut rows = Vec::with_capacity(read.rows.len());
                    for row in read.rows {
                        let Some(locked) = Locked::read(row) else {
                            return Ok(Err(Failure::proxy(&MoveError::Malformed { table: name })));
                        };
                        rows.push(locked);
                    }
                    family_rows.push(rows);
                }
                // Children before their parents, so no foreign key is left dangling.
                for rows in family_rows.iter().rev() {
                    if rows.is_empty() {
                        continue;
                    }
                    let refs: Vec<&Locked> = rows.iter().collect();
                    let deleted =
                        step!(source.shard, movement::delete(&refs), StatementKind::Delete);
                    if let Some(f) = check_deleted(&name, rows.len(), &deleted) {
                        return Ok(Err(f));
                    }
                    moved_rows += rows.len() as u64;
                }
                let roots: Vec<&Locked> = moving.iter().map(|&i| &source.rows[i]).collect();
                let deleted = step!(
                    source.shard,
                    movement::delete(&roots),
                    StatementKind::Delete
                );
                if let Some(f) = check_deleted(&name, roots.len(), &deleted) {
                    return Ok(Err(f));
                }
                count += roots.len() as u64;
                moved_rows += roots.len() as u64;
                for &i in &moving {
                    let target = source.moves[i].unwrap_or(source.shard);
                    inserts
                        .entry(target)
                        .or_insert_with(|| vec![Vec::new(); levels])[0]
                        .push(source.rows[i].row.clone());
                }
                for (level, rows) in family_rows.into_iter().enumerate() {
                    for locked in rows {
                        let Some(target) = root_index(&locked)
                            .and_then(|i| source.moves.get(i).copied().flatten())
                        else {
                            return Ok(Err(Failure::proxy(&MoveError::Malformed { table: name })));
                        };
                        inserts
                            .entry(target)
                            .or_insert_with(|| vec![Vec::new(); levels])[level + 1]
                            .push(locked.row);
                    }
                }
            }
            if !staying.is_empty() {
                let updated = step!(
                    source.shard,
                    movement::update_staying(plan, bind, &staying),
                    StatementKind::Update
                );
                count += updated.tag.as_deref().map_or(0, movement::tag_count);
                add_returned(&mut answer, updated);
            }
        }

        // Deleted at their old place, not yet inserted at the new one: the transaction holds
        // the only copy, and a crash here must lose nothing.
        if !inserts.is_empty() {
            crate::failpoint::fail_point!(
                self.ctx.failpoints,
                crate::failpoint::FailPoint::MoveMidFamily
            );
        }

        // 4. The moved rows on their new shards, each table after its parent.
        let result_formats = bind.map(|b| b.result_formats.as_slice()).unwrap_or(&[]);
        for (&target, tables) in &inserts {
            for (level, rows) in tables.iter().enumerate() {
                if rows.is_empty() {
                    continue;
                }
                // Root rows carry their old key after the new row; descendants their root's
                // index before it.
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
                let inserted = step!(
                    target,
                    movement::insert(&into, &values),
                    StatementKind::Insert
                );
                if level == 0 {
                    add_returned(&mut answer, inserted);
                }
            }
        }

        // RETURNING describes its rows even when there are none.
        if !plan.returning.is_empty() && answer.description.is_none() {
            if let Some(&first) = job.sources.first() {
                let described = step!(
                    first,
                    movement::update_staying(plan, bind, &[]),
                    StatementKind::Update
                );
                answer.description = described.description;
            }
        }
        answer.notices = notices;
        answer.tag = Some(format!("UPDATE {count}"));
        let metrics = &self.ctx.metrics;
        if moved_rows > 0 {
            metrics.key_updates_moved.increment(1);
            metrics.rows_moved.increment(moved_rows);
        } else {
            metrics.key_updates_in_place.increment(1);
        }
        Ok(Ok(answer))
    }

    /// Runs one step on `shard`'s connection, joining it to the statement's block.
    async fn on_shard(
        &mut self,
        shard: ShardId,
        messages: BytesMut,
        kind: StatementKind,
        implicit: bool,
    ) -> Result<Combined, SessionError> {
        let at = self.connections_for(&[shard]).await?;
        let mut messages = messages;
        if implicit && at.iter().any(|&i| self.parked[i].tx_status == b'I') {
            // The statement's own block, opened in the same round trip; its lock waits are
            // bounded from the start, as it may span shards.
            let mut begun = super::multi::begin_messages();
            let bound_waits = self.bound_lock_waits();
            if !bound_waits.is_empty() {
                begun.extend_from_slice(&super::multi::unnamed_statement(&bound_waits));
                self.waits_bounded = true;
            }
            begun.extend_from_slice(&messages);
            messages = begun;
        }
        let combine = Combine::Union {
            kind,
            merge: Default::default(),
            rows: Vec::new(),
        };
        let combined = self
            .run_on_shards(&[shard], Work::Batches(&[messages]), &combine)
            .await?;
        let changed = matches!(&combined, Combined::Rows(r) if r.tag.as_deref().is_some_and(|t| movement::tag_count(t) > 0));
        if kind.writes() && changed {
            for i in self.parked.positions(&[shard]) {
                self.parked[i].wrote = true;
            }
        }
        Ok(combined)
    }
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
    table: &crate::catalog::Table,
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

/// A failure when a DELETE removed fewer rows than were locked.
fn check_deleted(table: &str, locked: usize, deleted: &gather::Rows) -> Option<Failure> {
    let n = deleted.tag.as_deref().map_or(0, movement::tag_count);
    (n != locked as u64).then(|| {
        Failure::proxy(&MoveError::RowsChanged {
            table: table.to_string(),
            locked: locked as u64,
            deleted: n,
        })
    })
}

/// Adds a step's RETURNING rows (and its description, the first time) to the answer.
fn add_returned(answer: &mut gather::Rows, step: gather::Rows) {
    if answer.description.is_none() {
        answer.description = step.description;
    }
    answer.rows.extend(step.rows);
}

/// The message of an ErrorResponse frame.
pub(super) fn error_message(frame: &[u8]) -> String {
    let mut b = frame.get(5..).unwrap_or_default();
    while let Some((&field, rest)) = b.split_first() {
        let end = rest.iter().position(|&c| c == 0).unwrap_or(rest.len());
        if field == b'M' {
            return String::from_utf8_lossy(&rest[..end]).into_owned();
        }
        b = rest.get(end + 1..).unwrap_or_default();
    }
    String::new()
}
