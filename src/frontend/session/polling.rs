//! The session loop's waits: which socket can make progress, in a fixed order, and the writes
//! made without a wait.

use super::{
    consume, reserve_for_read, Event, Session, SessionError, HIGH_WATER, TURNS_BEFORE_YIELD,
};
use crate::frontend::socket::ClientSocket;
use std::pin::Pin;
use std::task::Poll;
use tokio::io::AsyncWrite;

impl Session {
    /// Whether the client should be sent what is queued for it now. The proxy's own
    /// ParseComplete for a held Parse waits for the backend's answers to the rest of the batch,
    /// so the client gets them in one write, as PostgreSQL sends a batch's answers (it flushes
    /// at Sync): an extra write and wake-up per transaction would cost more than routing.
    fn client_output_due(&self) -> bool {
        let only_held_parses = self.cout.len() == self.batch.deferred_parse_len
            && self.links.current.is_some()
            && !self.pipeline.is_empty();
        !self.cout.is_empty() && !only_held_parses
    }

    /// Waits for the first socket that can make progress. Fixed order: writes first, so data
    /// never waits behind a read. Written by hand rather than with `select!`, which builds and
    /// drops a future per branch on every turn of the loop.
    pub(super) fn poll_event<C: ClientSocket>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        client: &mut C,
    ) -> Poll<Event> {
        if self.turns >= TURNS_BEFORE_YIELD {
            self.turns = 0;
            cx.waker().wake_by_ref();
            return Poll::Pending;
        }
        let event = self.poll_sockets(cx, client);
        match event {
            Poll::Ready(_) => self.turns += 1,
            Poll::Pending => self.turns = 0,
        }
        event
    }

    fn poll_sockets<C: ClientSocket>(
        &mut self,
        cx: &mut std::task::Context<'_>,
        client: &mut C,
    ) -> Poll<Event> {
        if self.cancel.slot.is_terminated() {
            return Poll::Ready(Event::Terminated);
        }
        if self.client_output_due() {
            if let Poll::Ready(r) = client.poll_write(cx, &self.cout) {
                return Poll::Ready(Event::ClientWrote(r));
            }
        }
        if let Some(link) = self.links.current.as_mut() {
            let conn = &mut link.conn.conn;
            if !link.out.is_empty() {
                if let Poll::Ready(r) = Pin::new(&mut conn.stream).poll_write(cx, &link.out) {
                    return Poll::Ready(Event::BackendWrote(r));
                }
            }
            if self.cout.len() < HIGH_WATER {
                reserve_for_read(&mut conn.read_buf);
                let read = link
                    .arm
                    .poll_read_shard(&mut conn.stream, cx, &mut conn.read_buf);
                if let Poll::Ready(r) = read {
                    return Poll::Ready(Event::BackendRead(r));
                }
            }
        }
        if self.current_out_len() < HIGH_WATER {
            reserve_for_read(&mut self.input.buf);
            if let Poll::Ready(r) = client.poll_read(cx, &mut self.input.buf) {
                return Poll::Ready(Event::ClientRead(r));
            }
        }
        // Looked at only when nothing else is ready: a terminated session that is still busy
        // has had its statement canceled, and comes here soon.
        if self.cancel.slot.poll_terminated(cx) {
            return Poll::Ready(Event::Terminated);
        }
        Poll::Pending
    }

    /// Writes what is pending in both directions while the sockets take it, so the common
    /// case (a request out, an answer back) needs no extra turn of the loop per write; whatever
    /// is left waits for `poll_event`.
    pub(super) fn write_now<C: ClientSocket>(
        &mut self,
        client: &mut C,
    ) -> Result<(), SessionError> {
        if let Some(link) = self.links.current.as_mut() {
            if !link.out.is_empty() {
                match link.conn.conn.stream.write_now(&link.out) {
                    Ok(n) => consume(&mut link.out, n),
                    Err(e) => return Err(self.backend_lost(e)),
                }
            }
        }
        if self.client_output_due() {
            let n = client.write_now(&self.cout).map_err(SessionError::Client)?;
            consume(&mut self.cout, n);
            self.batch.deferred_parse_len = 0;
        }
        Ok(())
    }

    /// How much waits to go to the current connection (none without one).
    pub(super) fn current_out_len(&self) -> usize {
        self.links.current.as_ref().map_or(0, |link| link.out.len())
    }
}
