//! `ALTER TABLESPACE SET ts ADD | REMOVE SHARD s`: the shards a set deals chunks to. Nothing
//! moves: a shard added holds nothing until MOVE CHUNK or REBALANCE gives it chunks (the
//! families' tables are made there with the first), and a shard is removed only once it holds
//! no chunk of the set. A set that also places a composite table's partition set is refused:
//! those chunks are dealt over the set's shards at CREATE and do not move. (Duplicated tables
//! are on every configured shard, whatever their set.)

use super::{Growth, GrowthError};
use crate::catalog::Snapshot;
use crate::model::{ShardingMethod, TablespaceSetId};
use crate::sql::admin::MemberChange;

pub async fn change_members(
    g: &Growth,
    set: &str,
    shard: &str,
    change: MemberChange,
) -> Result<(), GrowthError> {
    let snapshot = g.catalog.snapshot();
    let (set_id, members) = new_members(&snapshot, set, shard, change)?;
    g.catalog
        .set_tablespace_set_members(set_id, &members)
        .await?;
    tracing::info!(set, shard, ?change, "tablespace set changed");
    Ok(())
}

/// The set, and its shards after the change by name, in dealing order (a shard added comes
/// last).
fn new_members(
    snapshot: &Snapshot,
    set: &str,
    shard: &str,
    change: MemberChange,
) -> Result<(TablespaceSetId, Vec<String>), GrowthError> {
    let found = snapshot
        .tablespace_set_by_name(set)
        .ok_or_else(|| GrowthError::NoSuchTablespaceSet(set.to_string()))?;
    let shard_id = snapshot
        .shard_by_name(shard)
        .ok_or_else(|| GrowthError::NoSuchShard(shard.to_string()))?
        .id;
    if let Some(user) = placed_by_members(snapshot, found.id) {
        return Err(GrowthError::SetPlacesCopies {
            set: set.to_string(),
            user,
        });
    }
    let mut members = found.shards.clone();
    match change {
        MemberChange::Add if members.contains(&shard_id) => {
            return Err(GrowthError::AlreadyMember {
                set: set.to_string(),
                shard: shard.to_string(),
            })
        }
        MemberChange::Add => members.push(shard_id),
        MemberChange::Remove => {
            if !members.contains(&shard_id) {
                return Err(GrowthError::NotMember {
                    set: set.to_string(),
                    shard: shard.to_string(),
                });
            }
            if members.len() == 1 {
                return Err(GrowthError::LastMember {
                    set: set.to_string(),
                    shard: shard.to_string(),
                });
            }
            let holding: Vec<String> = snapshot
                .tables()
                .iter()
                .filter(|t| t.tablespace_set == Some(found.id) && t.chunks.contains(&shard_id))
                .map(|t| t.qualified_name())
                .collect();
            if !holding.is_empty() {
                return Err(GrowthError::MemberHoldsChunks {
                    set: set.to_string(),
                    shard: shard.to_string(),
                    tables: holding.join(", "),
                });
            }
            members.retain(|s| *s != shard_id);
        }
    }
    let names = members
        .iter()
        .filter_map(|id| snapshot.shard(*id).map(|s| s.name.clone()))
        .collect();
    Ok((found.id, names))
}

/// A table of the set other than a consistent-hash family (a composite table's partition set),
/// by name: its placement is not by chunks MOVE CHUNK can move.
fn placed_by_members(snapshot: &Snapshot, set: TablespaceSetId) -> Option<String> {
    snapshot
        .tables()
        .iter()
        .find(|t| {
            let by_set = t.tablespace_set == Some(set)
                && t.is_root()
                && t.method != Some(ShardingMethod::ConsistentHash);
            by_set || t.partition_sets.iter().any(|p| p.tablespace_set == set)
        })
        .map(|t| t.qualified_name())
}
