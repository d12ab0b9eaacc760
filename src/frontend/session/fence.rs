//! The session's side of a chunk move's cutover (`growth::Fence`): whether it shows the cutover
//! work in flight, and where it waits while the fence is closed. It waits only between
//! transactions: a frame that continues what was begun (a transaction block, the rest of an
//! extended-protocol batch, COPY data) goes on, routed by the chunk map the work began with,
//! which stands until the cutover has waited for the work to end.

use super::{Session, SessionError};
use crate::protocol::Frame;

impl Session {
    /// Whether the frame continues work already under way on the session's connections, which
    /// a closed fence does not hold: a transaction block (held, it would keep its locks, which
    /// the cutover waits for), an extended-protocol batch not yet synced, a COPY.
    pub(super) fn continues_work(&self, frame: &Frame<&[u8]>) -> bool {
        matches!(frame.tag, b'd' | b'c' | b'f') || self.work_under_way()
    }

    fn work_under_way(&self) -> bool {
        self.copy.is_some()
            || self
                .links
                .iter()
                .any(|link| link.unsynced || link.tx_status.in_block())
    }

    /// Shows the cutover whether the session has work in flight after a turn of its loop:
    /// answers still owed, or a block, batch or COPY open.
    pub(super) fn settle_flight(&mut self) {
        let in_flight = !self.pipeline.is_empty() || self.work_under_way();
        self.flight.settle(in_flight);
    }

    /// On the general path, before a frame is routed: passes a closed fence only with work
    /// under way; otherwise finishes what is in flight (the cutover waits for it) and waits
    /// for the fence to open, then routes by the catalog the cutover left.
    pub(super) async fn pass_fence(&mut self, frame: &Frame<&[u8]>) -> Result<(), SessionError> {
        while !self.flight.open_for_frame() && !self.continues_work(frame) {
            self.ctx.metrics.statements_held.increment(1);
            self.drain_current().await?;
            self.settle_flight();
            let fence = self.ctx.fence.clone();
            fence.wait_open().await;
        }
        Ok(())
    }
}
