//! `REBALANCE TABLESPACE SET ts`: the chunk moves that leave every shard of the set holding a
//! family within one chunk of the others, for every consistent-hash family in the set, run one
//! at a time.

use std::collections::BTreeMap;

use super::chunk_move::{move_chunk, MoveRequest};
use super::{Growth, GrowthError};
use crate::catalog::{Snapshot, Table};
use crate::model::{ChunkMap, ShardId, ShardingMethod, TableState};

/// One planned move: chunk `chunk` of `table` to `target`.
#[derive(Debug, Clone, PartialEq, Eq)]
struct Planned {
    schema: String,
    table: String,
    chunk: u32,
    target: String,
}

/// Moves chunks until every family of set `set` is balanced over its shards; the number of
/// moves made.
pub async fn rebalance(g: &Growth, set: &str) -> Result<usize, GrowthError> {
    let planned = plan(&g.catalog.snapshot(), set)?;
    for (done, m) in planned.iter().enumerate() {
        tracing::info!(table = %m.table, chunk = m.chunk, target = %m.target,
            step = done + 1, of = planned.len(), "rebalance: moving a chunk");
        let request = MoveRequest {
            schema: m.schema.clone(),
            table: m.table.clone(),
            chunk: m.chunk,
            target: m.target.clone(),
        };
        move_chunk(g, &request).await?;
    }
    Ok(planned.len())
}

fn plan(snapshot: &Snapshot, set: &str) -> Result<Vec<Planned>, GrowthError> {
    let set = snapshot
        .tablespace_set_by_name(set)
        .ok_or_else(|| GrowthError::NoSuchTablespaceSet(set.to_string()))?;
    let families: Vec<&Table> = snapshot
        .tables()
        .iter()
        .filter(|t| {
            t.is_root()
                && t.method == Some(ShardingMethod::ConsistentHash)
                && t.tablespace_set == Some(set.id)
                && t.state == TableState::Active
        })
        .collect();
    let name = |id: ShardId| {
        snapshot
            .shard(id)
            .map(|s| s.name.clone())
            .unwrap_or_default()
    };
    let mut out = Vec::new();
    for family in families {
        // Over every shard of the set: a shard new to the family gets its tables with its
        // first chunk (see MOVE CHUNK).
        for (chunk, target) in balancing_moves(&family.chunks, &set.shards) {
            out.push(Planned {
                schema: family.schema.clone(),
                table: family.name.clone(),
                chunk,
                target: name(target),
            });
        }
    }
    Ok(out)
}

/// The moves (chunk, target) that leave each of `shards` within one chunk of the others, from
/// the chunk map `chunks`: each takes a chunk of a fullest shard to an emptiest one. Chunks
/// count alike whatever their modulus (a split chunk's halves are two chunks).
fn balancing_moves(chunks: &ChunkMap, shards: &[ShardId]) -> Vec<(u32, ShardId)> {
    if shards.is_empty() {
        return Vec::new();
    }
    let mut owned: BTreeMap<ShardId, Vec<u32>> = shards.iter().map(|s| (*s, Vec::new())).collect();
    for chunk in chunks.chunks() {
        owned.entry(chunk.shard).or_default().push(chunk.id.0);
    }
    let mut moves = Vec::new();
    loop {
        // A shard outside the set empties first; then the fullest of the set.
        let fullest = owned
            .iter()
            .filter(|(_, c)| !c.is_empty())
            .max_by_key(|(s, c)| (!shards.contains(s), c.len(), std::cmp::Reverse(**s)))
            .map(|(s, _)| *s);
        let emptiest = shards
            .iter()
            .min_by_key(|s| (owned.get(s).map_or(0, Vec::len), **s))
            .copied();
        let (Some(from), Some(to)) = (fullest, emptiest) else {
            return moves;
        };
        let (from_len, to_len) = (owned[&from].len(), owned[&to].len());
        if shards.contains(&from) && from_len <= to_len + 1 {
            return moves;
        }
        let chunk = owned.get_mut(&from).and_then(Vec::pop).expect("a chunk");
        owned.entry(to).or_default().push(chunk);
        moves.push((chunk, to));
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn s(i: u32) -> ShardId {
        ShardId(i)
    }

    #[test]
    fn moves_only_what_balance_needs() {
        // All on s0: half go to s1.
        let moves = balancing_moves(
            &ChunkMap::from([s(0), s(0), s(0), s(0)].to_vec()),
            &[s(0), s(1)],
        );
        assert_eq!(moves.len(), 2);
        assert!(moves.iter().all(|(_, to)| *to == s(1)));
        // Already within one chunk: nothing.
        assert!(
            balancing_moves(&ChunkMap::from([s(0), s(1), s(0)].to_vec()), &[s(0), s(1)]).is_empty()
        );
        // A new empty shard gets its share: 6 chunks over 3 shards.
        let moves = balancing_moves(
            &ChunkMap::from([s(0), s(1), s(0), s(1), s(0), s(1)].to_vec()),
            &[s(0), s(1), s(2)],
        );
        assert_eq!(moves.len(), 2);
        assert!(moves.iter().all(|(_, to)| *to == s(2)));
        // A shard that left the set gives up all its chunks.
        let moves = balancing_moves(
            &ChunkMap::from([s(2), s(2), s(0), s(1)].to_vec()),
            &[s(0), s(1)],
        );
        assert_eq!(moves.len(), 2);
        assert!(moves.iter().all(|(_, to)| *to != s(2)));
    }
}
