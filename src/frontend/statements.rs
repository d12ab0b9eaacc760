//! Client messages as far as routing and statement mapping need them, and the mapping itself.
//!
//! A client's prepared statement must survive being served by any pooled backend connection. The
//! proxy keeps each client's statements by name; each backend connection keeps the statements it
//! has prepared by their text under names of its own (`shardwire:N`). A Parse for a statement the
//! connection already has is answered by the proxy; a Bind or Describe for one it lacks is
//! preceded by a Parse the client never sees the answer to.

use crate::protocol::Extended;
use std::sync::Arc;

use bytes::BytesMut;

use super::pipeline::{Pending, Pipeline, Undo};
use super::FrontendError;
use crate::backend::{BackendConn, ShardTypes, StatementText};
use crate::client_error::ClientError;
use crate::protocol::{self, take_cstr, Frame, FrameError, MessageBuilder};

/// The parts of a client message the proxy looks at. Read once per frame and handed to every
/// check the frame passes.
#[derive(Clone, Copy)]
pub enum ClientFrame<'a> {
    Query(&'a [u8]),
    Parse {
        name: &'a [u8],
        query: &'a [u8],
        /// Parameter type count and OIDs, as sent.
        types: &'a [u8],
    },
    Bind {
        portal: &'a [u8],
        statement: &'a [u8],
        /// Formats, parameter values and result formats, as sent.
        rest: &'a [u8],
    },
    Describe {
        kind: u8,
        name: &'a [u8],
    },
    Close {
        kind: u8,
        name: &'a [u8],
    },
    Execute,
    Sync,
    Flush,
    FunctionCall,
    CopyData,
    /// CopyDone or CopyFail.
    CopyEnd,
    Other,
}

impl<'a> ClientFrame<'a> {
    pub fn parse(frame: &Frame<&'a [u8]>) -> Result<ClientFrame<'a>, FrameError> {
        let mut body = &frame.raw[5..];
        Ok(match frame.tag {
            b'Q' => ClientFrame::Query(query_text(frame)?),
            b'P' => {
                let name = take_cstr(&mut body, "Parse")?;
                let query = take_cstr(&mut body, "Parse")?;
                ClientFrame::Parse {
                    name,
                    query,
                    types: body,
                }
            }
            b'B' => {
                let portal = take_cstr(&mut body, "Bind")?;
                let statement = take_cstr(&mut body, "Bind")?;
                ClientFrame::Bind {
                    portal,
                    statement,
                    rest: body,
                }
            }
            b'D' | b'C' => {
                let (&kind, mut rest) = body
                    .split_first()
                    .ok_or(FrameError::Malformed("Describe/Close"))?;
                let name = take_cstr(&mut rest, "Describe/Close")?;
                if frame.tag == b'D' {
                    ClientFrame::Describe { kind, name }
                } else {
                    ClientFrame::Close { kind, name }
                }
            }
            b'E' => ClientFrame::Execute,
            b'S' => ClientFrame::Sync,
            b'H' => ClientFrame::Flush,
            b'F' => ClientFrame::FunctionCall,
            b'd' => ClientFrame::CopyData,
            b'c' | b'f' => ClientFrame::CopyEnd,
            _ => ClientFrame::Other,
        })
    }
}

/// The text of a Query message: its whole body but the final NUL, found without a search.
/// (PostgreSQL rejects a Query with a NUL inside its text, so reading past one changes nothing.)
pub fn query_text<'a>(frame: &Frame<&'a [u8]>) -> Result<&'a [u8], FrameError> {
    match frame.raw[5..].split_last() {
        Some((0, sql)) => Ok(sql),
        _ => Err(FrameError::Malformed("Query")),
    }
}

/// The client refused a message itself; the session skips the rest of the batch.
pub struct Refused;

/// One client's prepared statements by the names it gave them.
#[derive(Default)]
pub struct StatementNames {
    by_name: foldhash::HashMap<Box<[u8]>, Arc<StatementText>>,
    unnamed: Option<Arc<StatementText>>,
}

impl StatementNames {
    pub fn forget_unnamed(&mut self) {
        self.unnamed = None;
    }

    /// Forgets `name` if it still means `statement` (its Parse failed or was skipped).
    pub fn forget_if(&mut self, name: &[u8], statement: &Arc<StatementText>) {
        if self.get(name).is_some_and(|s| Arc::ptr_eq(s, statement)) {
            if name.is_empty() {
                self.unnamed = None;
            } else {
                self.by_name.remove(name);
            }
        }
    }

    /// Puts back a statement whose Close was skipped.
    pub fn restore(&mut self, name: Box<[u8]>, statement: Arc<StatementText>) {
        if name.is_empty() {
            self.unnamed = Some(statement);
        } else {
            self.by_name.entry(name).or_insert(statement);
        }
    }

    /// Records a Parse without sending it anywhere: its destination depends on the Bind that
    /// will use it. The proxy answers ParseComplete in its turn; the statement is prepared on
    /// whichever connection the Bind goes to (a Parse error then surfaces at the Bind).
    pub fn hold(
        &mut self,
        name: &[u8],
        query: &[u8],
        types: &[u8],
        pipeline: &mut Pipeline,
        cout: &mut BytesMut,
    ) -> Result<(), Refused> {
        if !name.is_empty() && self.by_name.contains_key(name) {
            return Err(refuse_duplicate(name, pipeline, cout));
        }
        let statement = match &self.unnamed {
            // The same unnamed statement again, as drivers send it for every execution: it
            // stays where it is.
            Some(s) if name.is_empty() && s.is(query, types) => s.clone(),
            _ => {
                let statement = Arc::new(StatementText {
                    query: query.into(),
                    param_types: types.into(),
                });
                if name.is_empty() {
                    self.unnamed = Some(statement.clone());
                } else {
                    self.by_name.insert(name.into(), statement.clone());
                }
                statement
            }
        };
        pipeline.push(
            Pending::composed_undoing(
                protocol::empty_message(b'1'),
                Some(Undo::ForgetName(name.into(), statement)),
            ),
            cout,
        );
        Ok(())
    }

    /// The statement a client's name stands for.
    pub fn get(&self, name: &[u8]) -> Option<&Arc<StatementText>> {
        if name.is_empty() {
            self.unnamed.as_ref()
        } else {
            self.by_name.get(name)
        }
    }

    /// Sends one client message to `conn`, rewritten where statement names differ.
    pub fn forward(
        &mut self,
        msg: ClientFrame<'_>,
        frame: &Frame<&[u8]>,
        conn: &mut BackendConn,
        pipeline: &mut Pipeline,
        bout: &mut BytesMut,
        cout: &mut BytesMut,
    ) -> Result<(), Refused> {
        match msg {
            ClientFrame::Parse { name, query, types } => {
                if name.is_empty() {
                    let statement = self.unnamed_statement(query, types, conn);
                    match conn.types.as_deref().and_then(|t| t.from_first(types)) {
                        None => bout.extend_from_slice(frame.raw),
                        Some(_) => write_parse(bout, b"", &statement, conn.types.as_deref()),
                    }
                    pipeline.push(
                        Pending::Parse {
                            statement,
                            named: false,
                            hidden: false,
                            client_name: Some(Box::default()),
                        },
                        cout,
                    );
                    return Ok(());
                }
                let statement = Arc::new(StatementText {
                    query: query.into(),
                    param_types: types.into(),
                });
                return self.parse_named(name, statement, conn, pipeline, bout, cout);
            }
            ClientFrame::Bind {
                portal,
                statement,
                rest,
            } => {
                match self.backend_name(statement, conn, pipeline, bout, cout) {
                    None => bout.extend_from_slice(frame.raw),
                    Some(name) => {
                        MessageBuilder::new(bout, b'B')
                            .cstr(portal)
                            .cstr(name.as_bytes())
                            .bytes(rest)
                            .finish();
                    }
                }
                pipeline.push(Pending::Bind, cout);
            }
            ClientFrame::Describe { kind: b'S', name } => {
                match self.backend_name(name, conn, pipeline, bout, cout) {
                    None => bout.extend_from_slice(frame.raw),
                    Some(n) => MessageBuilder::new(bout, b'D')
                        .u8(b'S')
                        .cstr(n.as_bytes())
                        .finish(),
                }
                pipeline.push(Pending::Describe, cout);
            }
            ClientFrame::Close { kind: b'S', name } => {
                // Other clients may share the backend's copy; only the client's name goes.
                let closed = if name.is_empty() {
                    self.unnamed.take()
                } else {
                    self.by_name.remove(name)
                };
                pipeline.push(
                    Pending::composed_undoing(
                        protocol::empty_message(b'3'),
                        closed.map(|s| Undo::RestoreName(name.into(), s)),
                    ),
                    cout,
                );
            }
            ClientFrame::Query(_)
            | ClientFrame::FunctionCall
            | ClientFrame::Describe { .. }
            | ClientFrame::Close { .. }
            | ClientFrame::Execute
            | ClientFrame::Sync
            | ClientFrame::Flush
            | ClientFrame::CopyData
            | ClientFrame::CopyEnd
            | ClientFrame::Other => send_unchanged(frame.raw, pipeline, bout, cout),
        }
        Ok(())
    }

    /// The statement of an unnamed Parse of `query`. Clients often parse the same unnamed
    /// statement again and again: then the session and usually the connection hold it already,
    /// and only the pipeline entry takes a reference (reference counts are atomic, hence not
    /// free).
    #[inline]
    fn unnamed_statement(
        &mut self,
        query: &[u8],
        types: &[u8],
        conn: &mut BackendConn,
    ) -> Arc<StatementText> {
        let mut statement = match &self.unnamed {
            Some(s) if s.is(query, types) => s.clone(),
            _ => {
                let s = Arc::new(StatementText {
                    query: query.into(),
                    param_types: types.into(),
                });
                self.unnamed = Some(s.clone());
                s
            }
        };
        match &conn.unnamed {
            Some(held) if Arc::ptr_eq(held, &statement) => {}
            // An equal statement another client parsed. Both sides keep the copy at the lower
            // address, so all clients and connections of one text settle on one copy and
            // compare pointers from then on instead of reading each other's texts.
            Some(held) if **held == *statement => {
                if Arc::as_ptr(held) < Arc::as_ptr(&statement) {
                    statement = held.clone();
                    self.unnamed = Some(statement.clone());
                } else {
                    conn.unnamed = Some(statement.clone());
                }
            }
            _ => conn.unnamed = Some(statement.clone()),
        }
        statement
    }

    /// A Parse of the client's statement `name`: prepared on `conn` under the backend's name
    /// unless the connection holds it already (then the proxy answers ParseComplete itself).
    #[inline]
    fn parse_named(
        &mut self,
        name: &[u8],
        statement: Arc<StatementText>,
        conn: &mut BackendConn,
        pipeline: &mut Pipeline,
        bout: &mut BytesMut,
        cout: &mut BytesMut,
    ) -> Result<(), Refused> {
        if self.by_name.contains_key(name) {
            return Err(refuse_duplicate(name, pipeline, cout));
        }
        self.by_name.insert(name.into(), statement.clone());
        if conn.prepared.get(&statement).is_some() {
            pipeline.push(
                Pending::composed_undoing(
                    protocol::empty_message(b'1'),
                    Some(Undo::ForgetName(name.into(), statement)),
                ),
                cout,
            );
        } else {
            let backend_name = conn.prepared.insert(statement.clone());
            write_parse(
                bout,
                backend_name.as_bytes(),
                &statement,
                conn.types.as_deref(),
            );
            pipeline.push(
                Pending::Parse {
                    statement,
                    named: true,
                    hidden: false,
                    client_name: Some(name.into()),
                },
                cout,
            );
        }
        Ok(())
    }

    /// The name `conn` knows the client's statement by, preparing it there first if needed.
    /// `None`: send the client's message unchanged (the unnamed statement, or a name the client
    /// never prepared, which the backend then reports as missing).
    fn backend_name(
        &self,
        client_name: &[u8],
        conn: &mut BackendConn,
        pipeline: &mut Pipeline,
        bout: &mut BytesMut,
        cout: &mut BytesMut,
    ) -> Option<Arc<str>> {
        let statement = self.get(client_name)?;
        if client_name.is_empty() {
            if conn.unnamed.as_ref() != Some(statement) {
                write_parse(bout, b"", statement, conn.types.as_deref());
                conn.unnamed = Some(statement.clone());
                pipeline.push(
                    Pending::Parse {
                        statement: statement.clone(),
                        named: false,
                        hidden: true,
                        client_name: None,
                    },
                    cout,
                );
            }
            return None;
        }
        if let Some(name) = conn.prepared.get(statement) {
            return Some(name);
        }
        let name = conn.prepared.insert(statement.clone());
        write_parse(bout, name.as_bytes(), statement, conn.types.as_deref());
        pipeline.push(
            Pending::Parse {
                statement: statement.clone(),
                named: true,
                hidden: true,
                client_name: None,
            },
            cout,
        );
        Some(name)
    }
}

/// PostgreSQL's answer to a Parse of a name the client already uses, in its turn.
fn refuse_duplicate(name: &[u8], pipeline: &mut Pipeline, cout: &mut BytesMut) -> Refused {
    let e = FrontendError::DuplicateStatement {
        name: String::from_utf8_lossy(name).into_owned(),
    };
    pipeline.push(Pending::composed(e.error_frame()), cout);
    Refused
}

/// Whether the message goes on exactly as sent whatever the client's statements are, which its
/// first bytes tell: the session then sends it without parsing it.
pub fn goes_unchanged(raw: &[u8]) -> bool {
    match raw[0] {
        b'E' | b'S' | b'H' | b'd' | b'c' | b'f' | b'F' => true,
        // Of a portal, not a statement.
        b'D' | b'C' => raw.get(5) == Some(&b'P'),
        _ => false,
    }
}

/// Sends a message as the client sent it, expecting the answer its kind gets.
pub fn send_unchanged(
    raw: &[u8],
    pipeline: &mut Pipeline,
    bout: &mut BytesMut,
    cout: &mut BytesMut,
) {
    bout.extend_from_slice(raw);
    let expected = match raw[0] {
        b'Q' | b'F' => Pending::Query,
        b'D' => Pending::Describe,
        b'C' => Pending::Close,
        b'E' => Pending::Execute,
        b'S' => Pending::Sync,
        b'c' | b'f' => Pending::CopyEnd,
        // Flush, CopyData and messages PostgreSQL does not know get no answer of their own.
        _ => return,
    };
    pipeline.push(expected, cout);
}

/// A Parse of the client's statement, its parameter types the shard's own (`types`: the
/// shard's translation of the first shard's type OIDs).
fn write_parse(
    out: &mut BytesMut,
    name: &[u8],
    statement: &StatementText,
    types: Option<&ShardTypes>,
) {
    let translated = types.and_then(|t| t.from_first(&statement.param_types));
    Extended::new(out).parse(
        name,
        &statement.query,
        translated.as_deref().unwrap_or(&statement.param_types),
    );
}
