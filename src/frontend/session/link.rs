//! What a session holds per backend connection, and the small map of the connections it holds
//! on shards it is not talking to now.

use super::*;
use crate::backend::Pools;

/// One backend connection the session holds on a shard. At most one per shard: a session's
/// work on a shard is in one transaction block or batch there.
pub(super) struct ShardLink {
    pub conn: Pooled,
    /// The read side of the connection's socket, for this session's task.
    pub arm: ReadArm,
    /// What the session has for the connection and has not written yet. Kept with the
    /// connection, so that bytes meant for one shard can never reach another whichever link is
    /// current.
    pub out: BytesMut,
    /// Transaction status from the connection's last ReadyForQuery.
    pub tx_status: TxStatus,
    /// An extended-protocol message went to the connection and its Sync has not yet (or the
    /// session holds a Parse that will).
    pub unsynced: bool,
    /// Of those, one the backend has received: it is in the middle of a batch.
    pub batch_sent: bool,
    /// The proxy saw its own statement change rows in the connection's open transaction, so
    /// its commit need not ask whether it wrote. (Left over from an earlier transaction it only
    /// makes a reader prepare, which PostgreSQL allows.)
    pub wrote: bool,
}

impl ShardLink {
    fn new(conn: Pooled, out: BytesMut) -> ShardLink {
        ShardLink {
            conn,
            arm: ReadArm::default(),
            out,
            tx_status: TxStatus::Idle,
            unsynced: false,
            batch_sent: false,
            wrote: false,
        }
    }

    pub fn shard(&self) -> ShardId {
        self.conn.shard
    }

    /// Neither in a transaction block nor in a batch before its Sync.
    pub fn idle(&self) -> bool {
        self.tx_status == TxStatus::Idle && !self.unsynced
    }

    /// Gives the connection back to its pool, to be closed there unless `clean`.
    fn release(mut self, pools: &Pools, clean: bool) {
        if !clean {
            self.conn.conn.broken = true;
        }
        pools.shard(self.conn.shard).release(self.conn);
    }
}

/// The links on shards other than the current one, keyed by shard.
///
/// A Vec searched by shard rather than a hash map: a session spans few shards (a handful, at
/// most the cluster's), so a linear look-up over a few links beats hashing, and positions
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

impl Session {
    pub(super) fn current_shard(&self) -> Option<ShardId> {
        self.current.as_ref().map(ShardLink::shard)
    }

    /// Where a statement that names no recorded table runs ([`Dest::Here`]): on the current
    /// connection while a transaction block or batch is open on it, else on the first shard —
    /// where plain tables live and where session state (SET, LISTEN, temporary tables) must
    /// be kept, also when a pinned session still holds another shard's connection, or a
    /// statement over several shards left the block's connections all parked.
    pub(super) fn unrouted_shard(&self) -> ShardId {
        match &self.current {
            Some(link) if link.shard() == ShardId(0) || !link.idle() => link.shard(),
            _ => ShardId(0),
        }
    }

    /// The current connection's transaction status; without one, the session is in none (a
    /// connection in a block is parked, never dropped).
    pub(super) fn tx_status(&self) -> TxStatus {
        self.current
            .as_ref()
            .map_or(TxStatus::Idle, |link| link.tx_status)
    }

    /// Makes a connection from the pool the session's own for a transaction.
    pub(super) fn adopt(&mut self, b: Pooled) {
        debug_assert!(self.current.is_none());
        let shard = b.shard;
        self.ctx.metrics.transactions.increment(1);
        // The first link of a checkout writes into the buffer the last one left; a second one
        // at once (a session over several shards, the rare case) starts with none.
        let mut link = ShardLink::new(b, std::mem::take(&mut self.spare_out));
        let conn = &mut link.conn.conn;
        // Usually the connection last served a client with the same settings (or this one) and
        // has no statements to drop.
        if !Arc::ptr_eq(&conn.applied, &self.settings) || conn.prepared.has_excess() {
            let set = settings_sql(conn, &self.settings);
            if !set.is_empty() {
                // A simple query replaces the unnamed statement.
                conn.unnamed = None;
                protocol::query(&mut link.out, &set);
                self.pipeline.push(Pending::Internal, &mut self.cout);
            }
        }
        self.cancel.slot.set(Some((shard, conn.cancel)));
        self.current = Some(link);
    }

    /// Makes a parked link the current one again, with the session's settings as they are now.
    pub(super) fn make_current(&mut self, mut link: ShardLink) {
        debug_assert!(self.current.is_none());
        let conn = &mut link.conn.conn;
        if conn.applied != self.settings {
            let set = super::settings_sql(conn, &self.settings);
            if !set.is_empty() {
                conn.unnamed = None;
                protocol::query(&mut link.out, &set);
                self.pipeline.push(Pending::Internal, &mut self.cout);
            }
        }
        self.cancel
            .slot
            .set(Some((link.shard(), link.conn.conn.cancel)));
        // While parked its socket was read by awaits, which register the task's waker their
        // own way: what the arm knew of the registration no longer holds.
        link.arm = ReadArm::default();
        self.current = Some(link);
    }

    pub(super) fn park_current(&mut self) {
        if let Some(link) = self.current.take() {
            self.cancel.slot.set(None);
            self.parked.put(link);
        }
    }

    /// Whether the current connection (if any) could go back to its pool now.
    pub(super) fn current_is_idle(&self) -> bool {
        !self.pinned
            && self.pipeline.is_empty()
            && self
                .current
                .as_ref()
                .is_none_or(|link| link.idle() && link.out.is_empty())
    }

    pub(super) fn release_current(&mut self) {
        self.cancel.slot.set(None);
        if let Some(mut link) = self.current.take() {
            // Its output buffer is empty (the link was idle) and serves the next checkout.
            if self.spare_out.capacity() == 0 {
                self.spare_out = std::mem::take(&mut link.out);
            }
            link.release(&self.ctx.pools, true);
        }
    }

    pub(super) fn release_if_idle(&mut self) {
        if self.current.is_some() {
            if !self.current_is_idle() {
                return;
            }
            self.release_current();
        }
        if !self.parked.is_empty() {
            self.release_parked_if_idle();
        }
    }

    /// Parked connections go back to their pools once no block or batch holds them.
    pub(super) fn release_parked_if_idle(&mut self) {
        if self.pinned || self.parked.is_empty() {
            return;
        }
        if self.current.is_some() && !self.current_is_idle() {
            return;
        }
        for link in self.parked.take_where(ShardLink::idle) {
            link.release(&self.ctx.pools, true);
        }
    }

    /// On disconnect, or when the session's task is aborted: every connection goes back to its
    /// pool, but only one that is idle and unpinned is kept there; any other is closed, since
    /// its state is the departed client's.
    pub(super) fn finish(&mut self) {
        self.cancel.slot.set(None);
        let pools = &self.ctx.pools;
        let settled = !self.pinned && !self.general_under_way;
        let clean = |link: &ShardLink| settled && link.idle() && link.conn.conn.read_buf.is_empty();
        // A connection that is not clean is closed; a statement it may still run for a client
        // that vanished is canceled too, or the shard would run it to the end for nobody (it
        // notices the closed socket only when it writes).
        let mut running = Vec::new();
        let mut note = |link: &ShardLink, clean: bool| {
            if !clean && self.client_left == ClientLeft::Vanished {
                running.push((link.shard(), link.conn.conn.cancel));
            }
        };
        if let Some(link) = self.current.take() {
            let clean = clean(&link) && self.pipeline.is_empty();
            note(&link, clean);
            link.release(pools, clean);
        }
        for link in self.parked.drain() {
            let clean = clean(&link);
            note(&link, clean);
            link.release(pools, clean);
        }
        if !running.is_empty() {
            super::signal::cancel_running(&self.ctx, running);
        }
    }
}
