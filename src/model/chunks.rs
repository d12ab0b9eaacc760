//! A consistent-hash family's chunks and the map the router reads them through.
//!
//! A chunk is one PostgreSQL hash partition, `(MODULUS m, REMAINDER r)`, and its number is its
//! remainder. Until SPLIT CHUNK every chunk has the same modulus. A split gives chunk r of
//! modulus m two halves, `(2m, r)` and `(2m, r + m)`, so moduli mix; PostgreSQL allows that as
//! long as every modulus divides the next larger one, which halving keeps true.
//!
//! The router does not look chunks up: it reads `slots`, one shard per remainder of the largest
//! modulus L. A row whose hash h leaves remainder `h mod L` lies in the chunk `(m, r)` with
//! `h mod m = r`, and as m divides L that is `(h mod L) mod m = r`: the slot's chunk. So a key is
//! routed with one remainder and one index, split or not. Chunk numbers stay unique across
//! moduli, because chunk `(m, r)` holds hash value r itself and chunks do not overlap.

use std::ops::Deref;

use super::{ChunkId, ShardId};

/// One chunk of a family: its partition `(MODULUS modulus, REMAINDER id)` on `shard`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Chunk {
    pub id: ChunkId,
    pub modulus: u32,
    pub shard: ShardId,
}

impl Chunk {
    /// The partition bound, as `PARTITION OF` and `ATTACH PARTITION` take it.
    pub fn bound(&self) -> String {
        format!(
            "FOR VALUES WITH (MODULUS {}, REMAINDER {})",
            self.modulus, self.id.0
        )
    }
}

/// Where each chunk of a hash level lives. Derefs to the routing slots: `slots[h mod L]` is the
/// shard of the row whose key hashes to h, L being the slot count.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct ChunkMap {
    slots: Vec<ShardId>,
    /// The modulus of the chunk each slot belongs to; empty while every chunk's modulus is the
    /// slot count (no chunk was split).
    moduli: Vec<u32>,
}

/// Why a set of chunks does not make a map.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum ChunkMapError {
    #[error("chunk {chunk} has modulus {modulus}, which does not divide {largest}")]
    ModulusMismatch {
        chunk: u32,
        modulus: u32,
        largest: u32,
    },
    #[error("chunk {chunk} is not below its modulus {modulus}")]
    RemainderTooLarge { chunk: u32, modulus: u32 },
    #[error("chunks overlap at hash remainder {slot} of {largest}")]
    Overlap { slot: u32, largest: u32 },
    #[error("no chunk holds hash remainder {slot} of {largest}")]
    Gap { slot: u32, largest: u32 },
}

impl ChunkMap {
    /// No chunks: a table placed otherwise.
    pub const fn empty() -> ChunkMap {
        ChunkMap {
            slots: Vec::new(),
            moduli: Vec::new(),
        }
    }

    /// M chunks of modulus M spread over `shards` round-robin: chunk k → `shards[k mod S]`.
    pub fn spread(modulus: u32, shards: &[ShardId]) -> ChunkMap {
        ChunkMap::uniform(
            (0..modulus as usize)
                .map(|k| shards[k % shards.len()])
                .collect(),
        )
    }

    /// Chunk k on `shards[k]`, every one of modulus `shards.len()`.
    pub fn uniform(shards: Vec<ShardId>) -> ChunkMap {
        ChunkMap {
            slots: shards,
            moduli: Vec::new(),
        }
    }

    /// The map of `chunks`, which must cover every hash remainder exactly once.
    pub fn from_chunks(chunks: &[Chunk]) -> Result<ChunkMap, ChunkMapError> {
        let largest = chunks.iter().map(|c| c.modulus).max().unwrap_or(0);
        let mut slots = vec![None; largest as usize];
        let mut moduli = vec![0; largest as usize];
        for c in chunks {
            if c.modulus == 0 || largest % c.modulus != 0 {
                return Err(ChunkMapError::ModulusMismatch {
                    chunk: c.id.0,
                    modulus: c.modulus,
                    largest,
                });
            }
            if c.id.0 >= c.modulus {
                return Err(ChunkMapError::RemainderTooLarge {
                    chunk: c.id.0,
                    modulus: c.modulus,
                });
            }
            for slot in (c.id.0..largest).step_by(c.modulus as usize) {
                if slots[slot as usize].replace(c.shard).is_some() {
                    return Err(ChunkMapError::Overlap { slot, largest });
                }
                moduli[slot as usize] = c.modulus;
            }
        }
        let slots = slots
            .into_iter()
            .zip(0u32..)
            .map(|(s, slot)| s.ok_or(ChunkMapError::Gap { slot, largest }))
            .collect::<Result<Vec<_>, _>>()?;
        Ok(ChunkMap::normalized(slots, moduli))
    }

    fn normalized(slots: Vec<ShardId>, moduli: Vec<u32>) -> ChunkMap {
        let largest = slots.len() as u32;
        let moduli = if moduli.iter().all(|m| *m == largest) {
            Vec::new()
        } else {
            moduli
        };
        ChunkMap { slots, moduli }
    }

    /// The modulus of the chunk that holds `slot`.
    fn modulus_at(&self, slot: usize) -> u32 {
        self.moduli
            .get(slot)
            .copied()
            .unwrap_or(self.slots.len() as u32)
    }

    /// The chunks, by number.
    pub fn chunks(&self) -> impl Iterator<Item = Chunk> + '_ {
        (0..self.slots.len()).filter_map(|slot| self.chunk(ChunkId(slot as u32)))
    }

    /// Chunk `id`, if the map has one of that number.
    pub fn chunk(&self, id: ChunkId) -> Option<Chunk> {
        let slot = id.0 as usize;
        let shard = *self.slots.get(slot)?;
        let modulus = self.modulus_at(slot);
        (id.0 < modulus).then_some(Chunk { id, modulus, shard })
    }

    /// The chunks `shard` owns, by number.
    pub fn chunks_on(&self, shard: ShardId) -> impl Iterator<Item = Chunk> + '_ {
        self.chunks().filter(move |c| c.shard == shard)
    }

    pub fn chunk_count(&self) -> usize {
        self.chunks().count()
    }

    /// Whether no chunk was split: every chunk's modulus is the chunk count.
    pub fn is_uniform(&self) -> bool {
        self.moduli.is_empty()
    }

    /// The map with chunk `id` on `shard`.
    pub fn with_shard(&self, id: ChunkId, shard: ShardId) -> Option<ChunkMap> {
        let chunk = self.chunk(id)?;
        let mut next = self.clone();
        for slot in (id.0 as usize..next.slots.len()).step_by(chunk.modulus as usize) {
            next.slots[slot] = shard;
        }
        Some(next)
    }

    /// The map with chunk `id` split in two halves on its shard: `(2m, id)` and `(2m, id + m)`.
    pub fn split(&self, id: ChunkId) -> Option<ChunkMap> {
        let chunk = self.chunk(id)?;
        let halved = chunk.modulus.checked_mul(2)?;
        let mut slots = self.slots.clone();
        let mut moduli: Vec<u32> = (0..slots.len()).map(|s| self.modulus_at(s)).collect();
        if halved as usize > slots.len() {
            // Each slot's remainder of the old L stands for two of 2L, with the same chunk.
            slots = slots.iter().chain(&self.slots).copied().collect();
            moduli = moduli.iter().chain(&moduli.clone()).copied().collect();
        }
        for slot in (id.0 as usize..slots.len()).step_by(chunk.modulus as usize) {
            moduli[slot] = halved;
        }
        Some(ChunkMap::normalized(slots, moduli))
    }
}

impl Deref for ChunkMap {
    type Target = [ShardId];

    fn deref(&self) -> &[ShardId] {
        &self.slots
    }
}

impl From<Vec<ShardId>> for ChunkMap {
    fn from(shards: Vec<ShardId>) -> ChunkMap {
        ChunkMap::uniform(shards)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn chunk(id: u32, modulus: u32, shard: u32) -> Chunk {
        Chunk {
            id: ChunkId(id),
            modulus,
            shard: ShardId(shard),
        }
    }

    #[test]
    fn a_split_keeps_every_hash_on_its_shard_and_numbers_the_halves_by_remainder() {
        let map = ChunkMap::spread(4, &[ShardId(0), ShardId(1)]);
        let split = map.split(ChunkId(1)).unwrap();
        assert_eq!(split.len(), 8);
        assert_eq!(
            split.chunks().collect::<Vec<_>>(),
            vec![
                chunk(0, 4, 0),
                chunk(1, 8, 1),
                chunk(2, 4, 0),
                chunk(3, 4, 1),
                chunk(5, 8, 1)
            ]
        );
        for h in 0..64usize {
            assert_eq!(split[h % 8], map[h % 4], "hash {h}");
        }
        // Splitting a half again goes to modulus 16; the other chunks keep theirs.
        let again = split.split(ChunkId(5)).unwrap();
        assert_eq!(again.chunk(ChunkId(5)), Some(chunk(5, 16, 1)));
        assert_eq!(again.chunk(ChunkId(13)), Some(chunk(13, 16, 1)));
        assert_eq!(again.chunk(ChunkId(1)), Some(chunk(1, 8, 1)));
        assert_eq!(again.chunk(ChunkId(9)), None, "9 is part of chunk 1");
        assert_eq!(again.chunk_count(), 6);
        let rebuilt = ChunkMap::from_chunks(&again.chunks().collect::<Vec<_>>()).unwrap();
        assert_eq!(rebuilt, again);
    }

    #[test]
    fn a_move_takes_every_slot_of_its_chunk() {
        let split = ChunkMap::spread(2, &[ShardId(0), ShardId(1)])
            .split(ChunkId(0))
            .unwrap();
        let moved = split.with_shard(ChunkId(2), ShardId(7)).unwrap();
        assert_eq!(
            &moved[..],
            &[ShardId(0), ShardId(1), ShardId(7), ShardId(1)]
        );
        assert_eq!(moved.chunks_on(ShardId(1)).count(), 1);
        assert!(moved.with_shard(ChunkId(3), ShardId(7)).is_none());
    }

    #[test]
    fn chunks_that_do_not_tile_the_remainders_are_refused() {
        let overlap = [chunk(0, 2, 0), chunk(1, 2, 0), chunk(1, 4, 0)];
        assert!(matches!(
            ChunkMap::from_chunks(&overlap),
            Err(ChunkMapError::Overlap { .. })
        ));
        let gap = [chunk(0, 2, 0), chunk(1, 4, 0)];
        assert!(matches!(
            ChunkMap::from_chunks(&gap),
            Err(ChunkMapError::Gap { slot: 3, .. })
        ));
        let odd = [
            chunk(0, 3, 0),
            chunk(1, 3, 0),
            chunk(2, 3, 0),
            chunk(1, 2, 0),
        ];
        assert!(ChunkMap::from_chunks(&odd).is_err());
        let uniform = [chunk(0, 2, 0), chunk(1, 2, 1)];
        assert!(ChunkMap::from_chunks(&uniform).unwrap().is_uniform());
    }
}
