//! Checkout and release: a connection from the pool becomes the session's current one with the
//! client's settings, is parked and made current again, and goes back to its pool once no
//! block, batch or pin holds it (the connections themselves: `executor::participants`).

use super::settings::settings_sql;
use super::{ClientLeft, Session};
use crate::backend::readiness::ReadArm;
use crate::backend::Pooled;
use crate::catalog::ShardId;
use crate::executor::participants::ShardLink;
use crate::frontend::pipeline::Pending;
use crate::protocol::{self, TxStatus};
use std::sync::Arc;

impl Session {
    /// Where a statement that names no recorded table runs ([`Dest::Here`]): on the current
    /// connection while a transaction block or batch is open on it, else on the first shard —
    /// where plain tables live and where session state (SET, LISTEN, temporary tables) must
    /// be kept, also when a pinned session still holds another shard's connection, or a
    /// statement over several shards left the block's connections all parked.
    pub(super) fn unrouted_shard(&self) -> ShardId {
        match &self.links.current {
            Some(link) if link.shard() == ShardId(0) || !link.idle() => link.shard(),
            _ => ShardId(0),
        }
    }

    /// Makes a connection from the pool the session's own for a transaction.
    pub(super) fn adopt(&mut self, b: Pooled) {
        debug_assert!(self.links.current.is_none());
        let shard = b.shard;
        self.ctx.metrics.transactions.increment(1);
        // The first link of a checkout writes into the buffer the last one left; a second one
        // at once (a session over several shards, the rare case) starts with none.
        let mut link = ShardLink::new(b, std::mem::take(&mut self.links.spare_out));
        let conn = &mut link.conn.conn;
        // Usually the connection last served a client with the same settings (or this one) and
        // has no statements to drop.
        if !Arc::ptr_eq(&conn.applied, &self.settings.current) || conn.prepared.has_excess() {
            let set = settings_sql(conn, &self.settings.current);
            if !set.is_empty() {
                // A simple query replaces the unnamed statement.
                conn.unnamed = None;
                protocol::query(&mut link.out, &set);
                self.pipeline.push(Pending::Internal, &mut self.cout);
            }
        }
        self.cancel.slot.set(Some((shard, conn.cancel)));
        self.links.current = Some(link);
    }

    /// Makes a parked link the current one again, with the session's settings as they are now.
    pub(super) fn make_current(&mut self, mut link: ShardLink) {
        debug_assert!(self.links.current.is_none());
        let conn = &mut link.conn.conn;
        if conn.applied != self.settings.current {
            let set = super::settings_sql(conn, &self.settings.current);
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
        self.links.current = Some(link);
    }

    pub(super) fn park_current(&mut self) {
        if let Some(link) = self.links.current.take() {
            self.cancel.slot.set(None);
            self.links.parked.put(link);
        }
    }

    /// Whether the current connection (if any) could go back to its pool now.
    pub(super) fn current_is_idle(&self) -> bool {
        !self.links.pinned
            && self.pipeline.is_empty()
            && self
                .links
                .current
                .as_ref()
                .is_none_or(|link| link.idle() && link.out.is_empty())
    }

    pub(super) fn release_current(&mut self) {
        self.cancel.slot.set(None);
        self.links.release_current(&self.ctx.pools);
    }

    pub(super) fn release_if_idle(&mut self) {
        if self.links.current.is_some() {
            if !self.current_is_idle() {
                return;
            }
            self.release_current();
        }
        if !self.links.parked.is_empty() {
            self.release_parked_if_idle();
        }
    }

    /// After a statement over parked connections: a failed block is answered from the shard
    /// that failed it (its connection becomes the current one), and the connections no block
    /// or batch holds go back.
    pub(super) fn settle_after_shards(&mut self) {
        if let Some(i) = self
            .links
            .parked
            .iter()
            .position(|p| p.tx_status == TxStatus::Failed)
        {
            let link = self.links.parked.take_at(i);
            self.make_current(link);
        }
        self.release_parked_if_idle();
    }

    /// Parked connections go back to their pools once no block or batch holds them.
    pub(super) fn release_parked_if_idle(&mut self) {
        if self.links.pinned || self.links.parked.is_empty() {
            return;
        }
        if self.links.current.is_some() && !self.current_is_idle() {
            return;
        }
        self.links.release_idle_parked(&self.ctx.pools);
    }

    /// On disconnect, or when the session's task is aborted: every connection goes back to its
    /// pool, but only one that is idle and unpinned is kept there; any other is closed, since
    /// its state is the departed client's.
    pub(super) fn finish(&mut self) {
        self.cancel.slot.set(None);
        self.end_all_cursors();
        let pools = &self.ctx.pools;
        let settled = !self.links.pinned && !self.under_way.general;
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
        if let Some(link) = self.links.current.take() {
            let clean = clean(&link) && self.pipeline.is_empty();
            note(&link, clean);
            link.release(pools, clean);
        }
        for link in self.links.parked.drain() {
            let clean = clean(&link);
            note(&link, clean);
            link.release(pools, clean);
        }
        if !running.is_empty() {
            super::signal::cancel_running(&self.ctx, running);
        }
    }
}
