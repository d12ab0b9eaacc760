//! What a chunk move moves: the family's tables and their partitions for the chunk, from which
//! shard to which, checked against the catalog before anything is made.

use super::chunk_move::MoveRequest;
use super::GrowthError;
use crate::catalog::{MoveRecord, Snapshot, Table};
use crate::ddl::naming::{chunk_suffix, partition_relation};
use crate::model::{Chunk, ChunkId, ShardId, ShardingMethod, TableId};
use crate::sql::quote::quote_ident;

/// One table of the family: its partition for the chunk.
pub(super) struct Level {
    /// The table's schema, quoted.
    pub schema: String,
    /// The partitioned table, quoted and qualified.
    pub parent: String,
    /// Its partition for the chunk, quoted and qualified.
    pub part: String,
}

/// A checked request: what moves from where to where.
pub(super) struct Plan {
    pub root: TableId,
    pub display: String,
    pub chunk: ChunkId,
    pub modulus: u32,
    pub source: ShardId,
    pub target: ShardId,
    pub source_name: String,
    pub target_name: String,
    /// Root first, every parent before its children.
    pub levels: Vec<Level>,
    pub family_at_target: FamilyAtTarget,
}

/// Whether the target held the family's tables when the move was planned.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum FamilyAtTarget {
    /// It held a chunk: the tables are there, and DDL reaches them.
    Present,
    /// It held none: the move makes the tables there, which DDL does not reach until the
    /// chunk is handed over.
    Made,
}

impl Plan {
    pub fn new(snapshot: &Snapshot, req: &MoveRequest) -> Result<Plan, GrowthError> {
        let display = format!("{}.{}", req.schema, req.table);
        let table = snapshot
            .table_by_name(&req.schema, &req.table)
            .ok_or_else(|| GrowthError::NoSuchTable(display.clone()))?;
        check_movable(table, &display)?;
        let Chunk {
            id: chunk,
            modulus,
            shard: source,
        } = table
            .chunks
            .chunk(ChunkId(req.chunk))
            .ok_or(GrowthError::NoSuchChunk {
                table: display.clone(),
                chunk: req.chunk,
            })?;
        let target = snapshot
            .shard_by_name(&req.target)
            .ok_or_else(|| GrowthError::NoSuchShard(req.target.clone()))?
            .id;
        if target == source {
            return Err(GrowthError::AlreadyThere {
                table: display,
                chunk: req.chunk,
                shard: req.target.clone(),
            });
        }
        if let Some(set) = table
            .tablespace_set
            .and_then(|id| snapshot.tablespace_set(id))
        {
            if !set.shards.contains(&target) {
                return Err(GrowthError::NotInSet {
                    table: display,
                    shard: req.target.clone(),
                    set: set.name.clone(),
                });
            }
        }
        let shard_name = |id: ShardId| {
            snapshot
                .shard(id)
                .map(|s| s.name.clone())
                .unwrap_or_default()
        };
        // A family's tables are made on a shard new to it and dropped from a shard left
        // without a chunk of it; views over the family would not follow.
        let family_at_target = if table.chunks.contains(&target) {
            FamilyAtTarget::Present
        } else {
            FamilyAtTarget::Made
        };
        let why = if family_at_target == FamilyAtTarget::Made {
            Some("makes the family's tables on a shard new to it")
        } else if table.chunks.chunks_on(source).count() == 1 {
            Some("drops them from the shard that gives its last chunk away")
        } else {
            None
        };
        if let Some(why) = why {
            let views = views_over_family(snapshot, table.id);
            if !views.is_empty() {
                return Err(GrowthError::FamilyHasViews {
                    table: display,
                    chunk: req.chunk,
                    views: views.join(", "),
                    why,
                });
            }
        }
        let levels = levels(snapshot, table.id, req.chunk);
        Ok(Plan {
            root: table.id,
            display,
            chunk,
            modulus,
            source,
            target,
            source_name: shard_name(source),
            target_name: shard_name(target),
            levels,
            family_at_target,
        })
    }

    /// The plan of a recorded move, as it was made: its shards from the record, not from the
    /// chunk map (which may already name the target).
    pub fn of_record(snapshot: &Snapshot, m: &MoveRecord) -> Result<Plan, GrowthError> {
        let table = snapshot
            .table(m.table)
            .ok_or_else(|| GrowthError::NoSuchTable(m.table.to_string()))?;
        let shard = |name: &str| {
            snapshot
                .shard_by_name(name)
                .map(|s| s.id)
                .ok_or_else(|| GrowthError::NoSuchShard(name.to_string()))
        };
        // A family with an unfinished move is not split, so the chunk is as the move found it.
        let modulus = table
            .chunks
            .chunk(m.chunk)
            .ok_or(GrowthError::NoSuchChunk {
                table: table.qualified_name(),
                chunk: m.chunk.0,
            })?
            .modulus;
        Ok(Plan {
            root: table.id,
            display: table.qualified_name(),
            chunk: m.chunk,
            modulus,
            source: shard(&m.source)?,
            target: shard(&m.target)?,
            source_name: m.source.clone(),
            target_name: m.target.clone(),
            levels: levels(snapshot, table.id, m.chunk.0),
            // A recorded move is settled, never cut over again.
            family_at_target: FamilyAtTarget::Present,
        })
    }

    /// The chunk as it stands before the move.
    pub fn moving(&self) -> Chunk {
        Chunk {
            id: self.chunk,
            modulus: self.modulus,
            shard: self.source,
        }
    }

    pub fn parts(&self) -> Vec<String> {
        self.levels.iter().map(|l| l.part.clone()).collect()
    }

    pub fn bound(&self) -> String {
        self.moving().bound()
    }
}

pub(super) fn check_movable(table: &Table, display: &str) -> Result<(), GrowthError> {
    if !table.is_root() {
        return Err(GrowthError::NotMovable(format!(
            "{display} is a child in a family: move the chunk of its root table, which moves \
             the whole family's chunk"
        )));
    }
    if table.method != Some(ShardingMethod::ConsistentHash) || table.chunks.is_empty() {
        return Err(GrowthError::NotMovable(format!(
            "{display} is not sharded by consistent hash: only the chunks of such a family move \
             (list, range and composite partitions, duplicated and unsharded tables do not)"
        )));
    }
    Ok(())
}

/// The family's tables with their partitions for `chunk`, root first.
pub(super) fn levels(snapshot: &Snapshot, root: TableId, chunk: u32) -> Vec<Level> {
    snapshot
        .family(root)
        .into_iter()
        .map(|t| Level {
            schema: quote_ident(&t.schema),
            parent: qualified(&t.schema, &t.name),
            part: qualified(
                &t.schema,
                &partition_relation(&t.name, &chunk_suffix(chunk)),
            ),
        })
        .collect()
}

fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// The columns of `pg_get_partkeydef`'s `HASH (a, b)`, as PostgreSQL quotes them.
pub(super) fn hash_key_columns(key: &str) -> &str {
    key.strip_prefix("HASH (")
        .and_then(|k| k.strip_suffix(')'))
        .unwrap_or(key)
}

/// The views that read the family's tables, directly or through other views, by name.
fn views_over_family(snapshot: &Snapshot, root: TableId) -> Vec<String> {
    let mut over: Vec<TableId> = snapshot.family(root).iter().map(|t| t.id).collect();
    let mut names = Vec::new();
    loop {
        let found: Vec<&crate::catalog::View> = snapshot
            .views()
            .iter()
            .filter(|v| {
                !over.contains(&v.entry.id) && v.entry.reads.iter().any(|r| over.contains(r))
            })
            .collect();
        if found.is_empty() {
            return names;
        }
        for view in found {
            over.push(view.entry.id);
            names.push(qualified(&view.entry.schema, &view.entry.name));
        }
    }
}
