//! What a session holds per backend connection, and the small map of the connections it holds
//! on shards it is not talking to now.

use crate::backend::Pooled;
use crate::catalog::ShardId;

/// One backend connection the session holds on a shard. At most one per shard: a session's
/// work on a shard is in one transaction block or batch there.
pub(super) struct ShardLink {
    pub conn: Pooled,
    /// Transaction status from the connection's last ReadyForQuery.
    pub tx_status: u8,
    /// An extended-protocol message went to the connection and its Sync has not yet.
    pub unsynced: bool,
}

impl ShardLink {
    pub fn shard(&self) -> ShardId {
        self.conn.shard
    }
}

/// The links on shards other than the current one, keyed by shard.
///
/// A Vec searched by shard rather than a hash map: a session spans few shards (a handful, at
/// most the cluster's), so a linear look-up over a few pointers beats hashing, and positions
/// stay valid for the multi-shard paths that address several links at once, as long as none is
/// added or taken meanwhile.
#[derive(Default)]
pub(super) struct ParkedLinks {
    links: Vec<ShardLink>,
}

impl ParkedLinks {
    pub fn is_empty(&self) -> bool {
        self.links.is_empty()
    }

    pub fn len(&self) -> usize {
        self.links.len()
    }

    pub fn iter(&self) -> std::slice::Iter<'_, ShardLink> {
        self.links.iter()
    }

    pub fn iter_mut(&mut self) -> std::slice::IterMut<'_, ShardLink> {
        self.links.iter_mut()
    }

    pub fn position(&self, shard: ShardId) -> Option<usize> {
        self.links.iter().position(|l| l.shard() == shard)
    }

    pub fn get_mut(&mut self, shard: ShardId) -> Option<&mut ShardLink> {
        self.links.iter_mut().find(|l| l.shard() == shard)
    }

    /// The positions of the links on `shards`, in that order (shards without one left out).
    pub fn positions(&self, shards: &[ShardId]) -> Vec<usize> {
        shards.iter().filter_map(|&s| self.position(s)).collect()
    }

    /// Keeps a link that is not the current one. The session never holds two on one shard: a
    /// link is taken out of the map before it becomes current.
    pub fn put(&mut self, link: ShardLink) {
        debug_assert!(self.position(link.shard()).is_none());
        self.links.push(link);
    }

    /// Takes the link at `i` out of the map; the last one takes its position.
    pub fn take_at(&mut self, i: usize) -> ShardLink {
        self.links.swap_remove(i)
    }

    pub fn take(&mut self, shard: ShardId) -> Option<ShardLink> {
        self.position(shard).map(|i| self.take_at(i))
    }

    /// Takes out the links `take` picks.
    pub fn take_where(&mut self, mut take: impl FnMut(&ShardLink) -> bool) -> Vec<ShardLink> {
        let mut taken = Vec::new();
        let mut i = 0;
        while i < self.links.len() {
            if take(&self.links[i]) {
                taken.push(self.links.swap_remove(i));
            } else {
                i += 1;
            }
        }
        taken
    }

    pub fn drain(&mut self) -> std::vec::Drain<'_, ShardLink> {
        self.links.drain(..)
    }

    /// The connections of the links at `order`'s positions, in that order, borrowed at once.
    pub fn conns_at(&mut self, order: &[usize]) -> Vec<&mut crate::backend::BackendConn> {
        let mut slots: Vec<Option<&mut ShardLink>> = self.links.iter_mut().map(Some).collect();
        order
            .iter()
            .filter_map(|&i| slots.get_mut(i).and_then(Option::take))
            .map(|l| &mut *l.conn.conn)
            .collect()
    }
}

impl std::ops::Index<usize> for ParkedLinks {
    type Output = ShardLink;

    fn index(&self, i: usize) -> &ShardLink {
        &self.links[i]
    }
}

impl std::ops::IndexMut<usize> for ParkedLinks {
    fn index_mut(&mut self, i: usize) -> &mut ShardLink {
        &mut self.links[i]
    }
}
