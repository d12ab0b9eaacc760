//! `REBALANCE TABLESPACE SET ts`: the chunk moves that leave every shard of the set holding a
//! family within one chunk of the others, for every consistent-hash family in the set. A
//! family's moves run one after another; up to `[moves] rebalance_parallel` families move at
//! once (two moves of one family would contend for its tables' locks on a shard, and both
//! make its tables on a shard new to it).

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
/// moves made. When a move fails, the families already moving finish their current move and
/// stop; the first failure is returned.
pub async fn rebalance(g: &Growth, set: &str) -> Result<usize, GrowthError> {
    let planned = plan(&g.catalog.snapshot(), set)?;
    let total = planned.len();
    let mut families: Vec<Vec<Planned>> = Vec::new();
    for m in planned {
        match families.last_mut() {
            Some(family) if family[0].table == m.table && family[0].schema == m.schema => {
                family.push(m)
            }
            _ => families.push(vec![m]),
        }
    }
    let failed = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
    let mut queue = families.into_iter();
    let mut running = tokio::task::JoinSet::new();
    let parallel = g.config.moves.rebalance_parallel.max(1) as usize;
    let (mut moved, mut first_error) = (0, None);
    loop {
        while running.len() < parallel && !failed.load(std::sync::atomic::Ordering::SeqCst) {
            let Some(family) = queue.next() else { break };
            let (g, failed) = (g.clone(), failed.clone());
            running.spawn(async move { move_family(&g, family, total, &failed).await });
        }
        let Some(joined) = running.join_next().await else {
            break;
        };
        match joined {
            Ok((n, outcome)) => {
                moved += n;
                if let Err(e) = outcome {
                    failed.store(true, std::sync::atomic::Ordering::SeqCst);
                    first_error.get_or_insert(e);
                }
            }
            Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
            Err(_) => {
                failed.store(true, std::sync::atomic::Ordering::SeqCst);
                first_error.get_or_insert(GrowthError::Interrupted);
            }
        }
    }
    match first_error {
        Some(e) => Err(e),
        None => Ok(moved),
    }
}

/// One family's moves in order, until one fails or another family's did; how many were made.
async fn move_family(
    g: &Growth,
    family: Vec<Planned>,
    total: usize,
    failed: &std::sync::atomic::AtomicBool,
) -> (usize, Result<(), GrowthError>) {
    let mut moved = 0;
    for m in family {
        if failed.load(std::sync::atomic::Ordering::SeqCst) {
            break;
        }
        tracing::info!(table = %m.table, chunk = m.chunk, target = %m.target, of = total,
            "rebalance: moving a chunk");
        let request = MoveRequest {
            schema: m.schema,
            table: m.table,
            chunk: m.chunk,
            target: m.target,
        };
        if let Err(e) = move_chunk(g, &request).await {
            return (moved, Err(e));
        }
        moved += 1;
    }
    (moved, Ok(()))
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
