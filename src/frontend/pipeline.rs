//! What the session expects back from its backend connection, in order. Every message sent that
//! gets an answer leaves an entry here; answers the proxy composes itself (a ParseComplete for a
//! statement the backend already has, a CloseComplete for a statement closed only on the proxy)
//! wait in the same queue, so the client sees every answer in the order it asked.
//!
//! After an error the backend skips every extended-protocol message up to the next Sync; the
//! entries of the skipped messages are dropped with it, and whatever the proxy had recorded for
//! them (a statement name, a statement prepared on the connection) is undone, so the client's
//! view matches PostgreSQL's.

use std::collections::VecDeque;
use std::sync::Arc;

use bytes::{Bytes, BytesMut};

use super::statements::StatementNames;
use crate::backend::{BackendConn, StatementText};

#[derive(Debug)]
pub enum Pending {
    /// A simple Query or FunctionCall: everything up to its ReadyForQuery.
    Query,
    /// A query the proxy sent for itself (settings): its answer is not the client's.
    Internal,
    /// Parse: the statement was registered on the connection (and, unless `hidden`, under the
    /// client's name) when sent; an error undoes that.
    Parse {
        statement: Arc<StatementText>,
        named: bool,
        /// Injected by the proxy to re-prepare a statement: the client did not ask for it.
        hidden: bool,
        client_name: Option<Box<[u8]>>,
    },
    Bind,
    Describe,
    Execute,
    Close,
    Sync,
    /// An answer the proxy composed; emitted when it reaches the front. Boxed: the queue's
    /// entries are as large as the largest, and this one is rare.
    Composed(Box<Composed>),
    /// The client ended a COPY FROM STDIN (CopyDone or CopyFail).
    CopyEnd,
}

#[derive(Debug)]
pub struct Composed {
    reply: Bytes,
    /// If the backend skips the answer (an earlier message failed), what to revert of what the
    /// proxy recorded for it.
    undo: Option<Undo>,
}

// Four entries per cache line, so a pipelined batch's accounting touches few lines.
const _: () = assert!(std::mem::size_of::<Pending>() <= 32);

/// What to revert when a message the proxy answered itself turns out to be skipped.
#[derive(Debug)]
pub enum Undo {
    /// A Parse answered by the proxy: the client's name must not exist after all.
    ForgetName(Box<[u8]>, Arc<StatementText>),
    /// A Close answered by the proxy: the client's statement still exists.
    RestoreName(Box<[u8]>, Arc<StatementText>),
}

impl Pending {
    pub fn composed(reply: Bytes) -> Pending {
        Pending::composed_undoing(reply, None)
    }

    pub fn composed_undoing(reply: Bytes, undo: Option<Undo>) -> Pending {
        Pending::Composed(Box::new(Composed { reply, undo }))
    }

    fn skipped_after_error(&self) -> bool {
        !matches!(self, Pending::Query | Pending::Internal | Pending::Sync)
    }
}

#[derive(Default)]
pub struct Pipeline {
    queue: VecDeque<Pending>,
    /// A COPY FROM STDIN of the extended protocol is running and the client has not ended it:
    /// PostgreSQL ignores Sync meanwhile, so a Sync expects no answer.
    copy_in: bool,
    /// An extended-protocol message failed and the Sync that ends its batch was not sent yet:
    /// the backend skips everything up to it, so the session must not expect answers to what
    /// the client sends meanwhile (see [`Pipeline::take_failed_batch`]).
    failed_batch: bool,
}

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
        match p {
            Pending::Sync if self.copy_in => return,
            Pending::CopyEnd if self.copy_in => {
                self.copy_in = false;
                return;
            }
            _ => {}
        }
        // Composed answers never stay at the front: one is due now only if it is the front.
        let due = self.queue.is_empty();
        self.queue.push_back(p);
        if due && self.composed_due() {
            self.emit_composed(out);
        }
    }

    /// Accounts for one frame from the backend and says whether the client gets it (it does
    /// not when it answers the proxy's own message). Composed answers that became due wait for
    /// [`Pipeline::emit_composed`], to be sent after this frame.
    pub fn on_backend_frame(
        &mut self,
        tag: u8,
        conn: &mut BackendConn,
        names: &mut StatementNames,
    ) -> Disposition {
        match tag {
            b'E' => {
                let d = self.visibility();
                self.copy_in = false;
                let mut skipped = false;
                while self.queue.front().is_some_and(Pending::skipped_after_error) {
                    if let Some(p) = self.queue.pop_front() {
                        skipped = true;
                        undo(p, conn, names);
                    }
                }
                if skipped && self.queue.is_empty() {
                    self.failed_batch = true;
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
            b'G' => {
                self.start_copy_in();
                self.visibility()
            }
            // A notification is the client's whenever it comes; a setting's report or a notice
            // caused by the proxy's own settings query is not (the client was told the value
            // when it set it).
            b'A' => Disposition::Forward,
            _ => self.visibility(),
        }
    }

    /// Whether the next answer owed is a Sync's.
    pub fn front_is_sync(&self) -> bool {
        matches!(self.queue.front(), Some(Pending::Sync))
    }

    /// Whether a batch failed before its Sync was sent (once; the flag is cleared).
    pub fn take_failed_batch(&mut self) -> bool {
        std::mem::take(&mut self.failed_batch)
    }

    /// Whether a frame goes to the client and changes no account, so that
    /// [`Pipeline::on_backend_frame`] may be skipped for it: rows of any answer but one to the
    /// proxy's own query, and the row description and completion of a simple query.
    pub fn passes_through(&self, tag: u8) -> bool {
        match (tag, self.queue.front()) {
            (_, Some(Pending::Internal)) => false,
            (b'D', _) => true,
            (b'T' | b'C', Some(Pending::Query)) => true,
            _ => false,
        }
    }

    /// Whether [`Pipeline::emit_composed`] has anything to do.
    pub fn composed_due(&self) -> bool {
        matches!(
            self.queue.front(),
            Some(Pending::Composed(_) | Pending::CopyEnd)
        )
    }

    /// CopyInResponse to an Execute: the Syncs the client sent between that Execute and the end
    /// of its copy data get no answer.
    fn start_copy_in(&mut self) {
        if !matches!(self.queue.front(), Some(Pending::Execute)) {
            return;
        }
        let rest = self.queue.split_off(1);
        let mut ended = false;
        for p in rest {
            match p {
                Pending::Sync if !ended => {}
                Pending::CopyEnd if !ended => ended = true,
                p => self.queue.push_back(p),
            }
        }
        self.copy_in = !ended;
    }

    /// Frames answering the proxy's own queries are not the client's.
    fn visibility(&self) -> Disposition {
        match self.queue.front() {
            Some(Pending::Internal) => Disposition::Drop,
            _ => Disposition::Forward,
        }
    }

    #[cold]
    pub fn emit_composed(&mut self, out: &mut BytesMut) {
        loop {
            match self.queue.front() {
                Some(Pending::Composed(_)) => {
                    if let Some(Pending::Composed(composed)) = self.queue.pop_front() {
                        out.extend_from_slice(&composed.reply);
                    }
                }
                // A copy that never started (its Execute failed or answered otherwise).
                Some(Pending::CopyEnd) => {
                    self.queue.pop_front();
                }
                _ => return,
            }
        }
    }
}

/// A message the backend skipped or refused never took effect.
fn undo(p: Pending, conn: &mut BackendConn, names: &mut StatementNames) {
    match p {
        Pending::Parse {
            statement,
            named,
            client_name,
            ..
        } => {
            if named {
                conn.prepared.remove(&statement);
            } else if conn.unnamed.as_ref() == Some(&statement) {
                // By text: the connection may hold an equal statement of another client.
                conn.unnamed = None;
            }
            if let Some(name) = client_name {
                names.forget_if(&name, &statement);
            }
        }
        Pending::Composed(composed) => match composed.undo {
            Some(Undo::ForgetName(name, statement)) => names.forget_if(&name, &statement),
            Some(Undo::RestoreName(name, statement)) => names.restore(name, statement),
            None => {}
        },
        _ => {}
    }
}
