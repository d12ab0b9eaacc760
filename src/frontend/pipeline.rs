//! What the session expects back from its backend connection, in order. Every message sent that
//! gets an answer leaves an entry here; answers the proxy composes itself (a ParseComplete for a
//! statement the backend already has, a CloseComplete for a statement closed only on the proxy)
//! wait in the same queue, so the client sees every answer in the order it asked.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use crate::backend::{BackendConn, StatementText};

#[derive(Debug)]
pub enum Pending {
    /// A simple Query or FunctionCall: everything up to its ReadyForQuery.
    Query,
    /// A query the proxy sent for itself (settings): its answer is not the client's.
    Internal,
    /// Parse: the statement was registered on the connection when sent; an error undoes that.
    Parse {
        statement: Arc<StatementText>,
        named: bool,
        /// Injected by the proxy to re-prepare a statement: the client did not ask for it.
        hidden: bool,
    },
    Bind,
    Describe,
    Execute,
    Close,
    Sync,
    /// An answer the proxy composed; emitted when it reaches the front.
    Composed(Bytes),
}

impl Pending {
    fn ends_on_error(&self) -> bool {
        !matches!(self, Pending::Query | Pending::Internal | Pending::Sync)
    }
}

#[derive(Default)]
pub struct Pipeline {
    queue: VecDeque<Pending>,
}

/// What to do with one backend frame.
#[derive(Debug, PartialEq, Eq)]
pub enum Disposition {
    Forward,
    Drop,
}

impl Pipeline {
    pub fn is_empty(&self) -> bool {
        self.queue.is_empty()
    }

    pub fn push(&mut self, p: Pending, out: &mut BytesMut) {
        self.queue.push_back(p);
        self.emit_composed(out);
    }

    /// Accounts for one frame from the backend; composed answers that become due are appended
    /// to `out` after the frame is (or is not) forwarded by the caller, so the caller passes the
    /// frame's disposition back through `out` ordering: see [`Pipeline::on_backend_frame`].
    pub fn on_backend_frame(
        &mut self,
        tag: u8,
        conn: &mut BackendConn,
        raw: &[u8],
        out: &mut BytesMut,
    ) {
        let disposition = match tag {
            b'E' => {
                let d = self.visibility();
                if self.queue.front().is_some_and(Pending::ends_on_error) {
                    // The backend skips everything up to the next Sync after an error.
                    while let Some(p) = self.queue.front() {
                        if !p.ends_on_error() {
                            break;
                        }
                        if let Some(p) = self.queue.pop_front() {
                            undo_registration(p, conn);
                        }
                    }
                }
                d
            }
            b'Z' => {
                let d = self.visibility();
                self.queue.pop_front();
                d
            }
            b'1' => match self.queue.pop_front() {
                Some(Pending::Parse { hidden: true, .. }) => Disposition::Drop,
                _ => Disposition::Forward,
            },
            b'2' | b'3' => {
                self.queue.pop_front();
                Disposition::Forward
            }
            b'T' | b'n' => {
                if matches!(self.queue.front(), Some(Pending::Describe)) {
                    self.queue.pop_front();
                }
                self.visibility()
            }
            b'C' | b'I' | b's' => {
                if matches!(self.queue.front(), Some(Pending::Execute)) {
                    self.queue.pop_front();
                }
                self.visibility()
            }
            b'S' | b'N' | b'A' => Disposition::Forward,
            _ => self.visibility(),
        };
        if disposition == Disposition::Forward {
            out.extend_from_slice(raw);
        }
        self.emit_composed(out);
    }

    /// Frames answering the proxy's own queries are not the client's.
    fn visibility(&self) -> Disposition {
        match self.queue.front() {
            Some(Pending::Internal) => Disposition::Drop,
            _ => Disposition::Forward,
        }
    }

    fn emit_composed(&mut self, out: &mut BytesMut) {
        while let Some(Pending::Composed(_)) = self.queue.front() {
            if let Some(Pending::Composed(b)) = self.queue.pop_front() {
                out.extend_from_slice(&b);
            }
        }
    }
}

/// A Parse the backend skipped or refused never created its statement.
fn undo_registration(p: Pending, conn: &mut BackendConn) {
    if let Pending::Parse {
        statement, named, ..
    } = p
    {
        if named {
            conn.prepared.remove(&statement);
        } else if conn
            .unnamed
            .as_ref()
            .is_some_and(|u| Arc::ptr_eq(u, &statement))
        {
            conn.unnamed = None;
        }
    }
}
