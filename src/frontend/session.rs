//! The session loop after startup: client frames in, backend frames out, over raw sockets.
//!
//! Transaction pooling: a backend connection is taken from its shard's pool when the client sends
//! something, and goes back when the backend reports an idle transaction state, nothing is still
//! expected from it, and no extended-protocol batch is half-way (no Sync yet). Session state that
//! cannot move between connections pins the client to its connection (see `sql::classify`).

use super::cancel::CancelGuard;
use super::driver::Next;
use super::limits::Admitted;
use super::pipeline::{Disposition, Pipeline};
use super::socket::{self, ClientSocket};
use super::statements::StatementNames;
use super::FrontendError;
use crate::backend::{BackendError, Settings};
use crate::client_error::ClientError;
use crate::executor::gather;
use crate::executor::participants::Participants;
use crate::frontend::context::ServerCtx;
use crate::protocol::{self, Frame, FrameError, Severity, TxStatus};
use bytes::{Buf, BytesMut};
use fan_out::Portals;
use settings::settings_sql;
use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;

pub use crate::sql::quote::{quote_ident, quote_literal};

mod aggregate;
mod batch;
mod checkout;
mod combining;
mod commit;
mod copy;
mod cursor_list;
mod cursors;
mod declare_bind;
mod dest;
mod dispatch;
mod explain;
mod fan_out;
mod fence;
mod forward;
mod host;
mod insert_select;
mod local;
mod matview;
mod movement;
mod nested;
mod per_shard;
mod polling;
mod refuse;
mod routing;
mod row_ttl;
mod savepoints;
mod script;
mod search_path;
mod sequence;
mod settings;
mod shard_switch;
mod signal;
mod sql_prepared;
mod timeouts;
mod watch;

/// Past this much unsent data in one direction, stop reading from the other side.
const HIGH_WATER: usize = 1 << 20;

/// The room a long frame's first reads get; it doubles with what arrives.
const READ_CHUNK: usize = 64 << 10;

/// Turns of the session loop without a wait after which it yields to the other sessions: the
/// sockets' cheap paths (`socket`) skip tokio's cooperative budget, so the loop keeps its own.
const TURNS_BEFORE_YIELD: u32 = 64;

#[derive(Debug, thiserror::Error)]
pub enum SessionError {
    #[error("client connection: {0}")]
    Client(std::io::Error),
    #[error("client sent a malformed message: {0}")]
    ClientFrame(#[from] FrameError),
    #[error("{0}")]
    Backend(#[from] BackendError),
    #[error("{0:?} expired")]
    Expired(timeouts::Expiry),
}

impl From<gather::StreamError> for SessionError {
    fn from(e: gather::StreamError) -> SessionError {
        match e {
            gather::StreamError::Backend(e) => SessionError::Backend(e),
            gather::StreamError::Client(e) => SessionError::Client(e),
        }
    }
}

/// What woke the session loop.
enum Event {
    ClientRead(std::io::Result<usize>),
    ClientWrote(std::io::Result<usize>),
    BackendRead(std::io::Result<usize>),
    BackendWrote(std::io::Result<usize>),
    /// `pg_terminate_backend` of the session's pid.
    Terminated,
    /// A limit on the wait ran out (`limits.*_timeout_ms`).
    Expired(timeouts::Expiry),
}

#[derive(Debug, PartialEq, Eq)]
enum ClientSaid {
    More,
    Terminate,
}

/// Where handling client frames without an await stopped.
enum ClientStep {
    Said(ClientSaid),
    /// The next frame, this long, needs the general path.
    General(usize),
}

pub struct Session {
    ctx: Arc<ServerCtx>,
    /// The client's bytes not yet handled.
    input: ClientInput,
    cout: BytesMut,
    /// The backend connections the session holds.
    links: Participants,
    /// Turns of the loop since it last waited.
    turns: u32,
    /// The answers the client is owed, in the client's order: the current connection's and the
    /// ones the proxy composed itself between them. On the session, not on a link: the
    /// proxy's answers belong to no connection, and a link stops being the current one only
    /// once every answer owed from it is passed on (`drain_current`), so a parked one is owed
    /// none.
    pipeline: Pipeline,
    statements: StatementNames,
    /// Where the client's extended-protocol batch stands, where the proxy answers parts of it.
    batch: batch::BatchState,
    /// What the session routes with, and what it remembers of statements routed before.
    routing: routing::RoutingState,
    /// The client's settings, as its connections must carry them.
    settings: settings::ClientSettings,
    cancel: CancelGuard,
    /// Portals of Binds that ran on several shards, read by the client's Describe and Execute.
    portals: Portals,
    /// SQL cursors over recorded tables: where each lives.
    cursors: cursors::Cursors,
    /// Generated key values: those taken for the INSERT being routed, the last of each sequence.
    keys: sequence::KeyState,
    /// The session's tracing span, for the events of the session and its rare slow paths.
    span: tracing::Span,
    /// A COPY the proxy splits or gathers over shards, while the client's messages for it come.
    copy: Option<Box<copy::CopyState>>,
    /// How the client left, which decides what happens to a statement still running for it.
    client_left: ClientLeft,
    /// The proxy's time limits on the session's waits.
    timeouts: timeouts::Timeouts,
    /// Work of the proxy's own that is half done.
    under_way: UnderWay,
    /// What the session has in flight, as a chunk move's cutover reads it.
    flight: crate::growth::Flight,
    /// This session's place under the connection limits.
    _admitted: Admitted,
}

/// The client's bytes the session has read and not yet handled.
struct ClientInput {
    buf: BytesMut,
    /// Client bytes arrived since the last look, or frames were left for lack of room.
    unread: bool,
    /// `limits.max_message_bytes`.
    max_message: usize,
}

/// The proxy's own work on the session's connections that is half done, which decides what
/// becomes of them if the session ends now.
#[derive(Default)]
struct UnderWay {
    /// A step of the general path has begun and not ended: if the session ends now (cut short
    /// at a deadline, or its task dropped), the connections it holds are mid-statement, whatever
    /// their last ReadyForQuery said.
    general: bool,
    /// A query string's statements are running one by one (`script`).
    script: bool,
}

/// How a session's client went away.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum ClientLeft {
    /// With a Terminate message: PostgreSQL finishes what the client sent before it, and so
    /// does the shard.
    Terminate,
    /// Its socket closed or failed, or the session was ended by the proxy: a statement still
    /// running for it is canceled, as nobody will read its result.
    Vanished,
}

impl Session {
    pub fn new(
        ctx: Arc<ServerCtx>,
        read_buf: BytesMut,
        settings: Settings,
        cancel: CancelGuard,
        admitted: Admitted,
        span: tracing::Span,
    ) -> Session {
        let start_path = Session::startup_search_path(&ctx, &settings);
        Session {
            timeouts: timeouts::Timeouts::new(&ctx.config.limits),
            _admitted: admitted,
            input: ClientInput {
                buf: read_buf,
                unread: true,
                max_message: ctx.config.limits.max_message_bytes as usize,
            },
            under_way: UnderWay::default(),
            flight: ctx.fence.flight(),
            ctx,
            cout: BytesMut::with_capacity(8192),
            links: Participants {
                current: None,
                parked: Default::default(),
                spare_out: BytesMut::with_capacity(8192),
                pinned: false,
                block: Default::default(),
            },
            turns: 0,
            pipeline: Pipeline::default(),
            statements: StatementNames::default(),
            cancel,
            batch: Default::default(),
            keys: Default::default(),
            routing: routing::RoutingState::new(start_path),
            settings: settings::ClientSettings {
                startup: settings.clone(),
                current: settings,
                changed: false,
            },
            portals: Portals::default(),
            cursors: Default::default(),
            span,
            copy: None,
            client_left: ClientLeft::Vanished,
        }
    }

    /// Queues bytes for the client before the loop starts (the startup greeting).
    pub fn greet(&mut self, bytes: &[u8]) {
        self.cout.extend_from_slice(bytes);
    }

    /// Serves the client until it disconnects. The backend connection is given back or closed
    /// when the session drops (see `Drop`).
    pub async fn run<C: ClientSocket + Send>(mut self, mut client: C) -> Next {
        if let Err(e) = self.run_loop(&mut client).await {
            tracing::debug!(parent: &self.span, error = %e, "session ended with an error");
            let last_word = match e {
                // As PostgreSQL answers a message it cannot take: FATAL, then the end.
                SessionError::ClientFrame(e) => {
                    Some(FrontendError::ProtocolViolation(e.to_string()))
                }
                SessionError::Expired(expiry) => Some(expiry.error()),
                SessionError::Client(_) | SessionError::Backend(_) => None,
            };
            if let Some(e) = last_word {
                self.say_fatal(&e, &mut client);
            }
        }
        self.ctx.metrics.sessions_active.decrement(1.0);
        Next::Done
    }

    /// The session's last word. What the client has not read yet is lost anyway; the FATAL
    /// goes if the socket takes it now.
    fn say_fatal<C: ClientSocket>(&mut self, e: &FrontendError, client: &mut C) {
        protocol::error_response(
            &mut self.cout,
            Severity::Fatal,
            &e.sqlstate(),
            &e.client_message(),
        );
        let _ = self.write_now(client);
    }

    async fn run_loop<C: ClientSocket + Send>(
        &mut self,
        client: &mut C,
    ) -> Result<(), SessionError> {
        // Made when the session first takes the general path, which does not read the client.
        let mut hangup: Option<Option<socket::HangupWatch>> = None;
        loop {
            if self.input.unread {
                let said = match self.on_client_data_now()? {
                    ClientStep::Said(said) => said,
                    // Only here does the loop build the future of the general path: boxed and
                    // called through a pointer, so that its code and state stay out of the
                    // loop's own (a waiting checkout, an admin statement or sharding DDL are
                    // the rare case).
                    ClientStep::General(len) => {
                        let hangup = hangup.get_or_insert_with(|| client.hangup_watch());
                        let slot = self.cancel.slot.clone();
                        let ctx = self.ctx.clone();
                        let deadline = self.timeouts.step_deadline();
                        self.under_way.general = true;
                        let general: Pin<Box<dyn Future<Output = _> + Send + '_>> =
                            Box::pin(watch::to_the_end(
                                self.on_client_data(len, client),
                                hangup.as_ref(),
                                slot,
                                ctx,
                                deadline,
                            ));
                        let said = general.await;
                        // Cut short at its deadline, it left its connections mid-statement.
                        if !matches!(said, Err(SessionError::Expired(_))) {
                            self.under_way.general = false;
                        }
                        said?
                    }
                };
                if said == ClientSaid::Terminate {
                    self.client_left = ClientLeft::Terminate;
                    return Ok(());
                }
            }
            self.write_now(client)?;
            self.release_if_idle();
            self.settle_flight();

            let event = match self.wait_deadline() {
                None => std::future::poll_fn(|cx| self.poll_event(cx, client)).await,
                Some((at, expiry)) => {
                    let wait = std::future::poll_fn(|cx| self.poll_event(cx, client));
                    tokio::time::timeout_at(at.into(), wait)
                        .await
                        .unwrap_or(Event::Expired(expiry))
                }
            };
            match event {
                Event::ClientRead(r) => {
                    if r.map_err(SessionError::Client)? == 0 {
                        return Ok(());
                    }
                    self.input.unread = true;
                }
                Event::ClientWrote(r) => {
                    let n = r.map_err(SessionError::Client)?;
                    consume(&mut self.cout, n);
                    self.batch.deferred_parse_len = 0;
                }
                Event::BackendRead(r) => {
                    if r.map_err(|e| self.backend_lost(e))? == 0 {
                        return Err(self.backend_lost(std::io::ErrorKind::UnexpectedEof.into()));
                    }
                    self.on_backend_data()?;
                }
                Event::BackendWrote(r) => {
                    let n = r.map_err(|e| self.backend_lost(e))?;
                    if let Some(link) = self.links.current.as_mut() {
                        consume(&mut link.out, n);
                    }
                    // Frames left for lack of room may go now.
                    self.input.unread = true;
                }
                Event::Terminated => {
                    self.say_fatal(&FrontendError::TerminatedByAdministrator, client);
                    return Ok(());
                }
                Event::Expired(expiry) => return Err(SessionError::Expired(expiry)),
            }
        }
    }

    /// Handles the client frames from one `len` bytes long that needs the general path (a
    /// connection to wait for, a statement the proxy answers: [`Session::on_client_frame`]);
    /// those after it go the plain way again where they can.
    async fn on_client_data(
        &mut self,
        mut len: usize,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<ClientSaid, SessionError> {
        loop {
            let mut cin = std::mem::take(&mut self.input.buf);
            let handled = self
                .on_client_frame(Frame::borrowed(&cin[..len]), client)
                .await;
            let tag = cin[0];
            consume(&mut cin, len);
            self.input.buf = cin;
            handled?;
            if tag == b'S' {
                self.sync_not_sent();
            }
            len = match self.on_client_data_now()? {
                ClientStep::Said(said) => return Ok(said),
                ClientStep::General(len) => len,
            };
        }
    }

    /// Handles every complete client frame where it lies in the read buffer (no copy, no
    /// allocation per frame), as long as the backend side is not backed up and the frames go
    /// on without an await ([`Session::forward_now`]); stops at the first that does not.
    fn on_client_data_now(&mut self) -> Result<ClientStep, SessionError> {
        // Taken out meanwhile so the frames may borrow it while the session changes.
        let mut cin = std::mem::take(&mut self.input.buf);
        let mut pos = 0;
        self.input.unread = false;
        let result = loop {
            if self.current_out_len() >= HIGH_WATER {
                self.input.unread = true;
                break Ok(ClientStep::Said(ClientSaid::More));
            }
            let len = match protocol::frame_len_within(&cin[pos..], self.input.max_message) {
                Ok(Some(len)) => len,
                Ok(None) => break Ok(ClientStep::Said(ClientSaid::More)),
                Err(e) => break Err(e.into()),
            };
            let frame = Frame::borrowed(&cin[pos..pos + len]);
            if !protocol::is_frontend_tag(frame.tag) {
                break Err(FrameError::UnknownType(frame.tag).into());
            }
            if frame.tag == b'X' {
                break Ok(ClientStep::Said(ClientSaid::Terminate));
            }
            match self.forward_now(&frame) {
                Ok(true) => pos += len,
                Ok(false) => {
                    self.input.unread = true;
                    break Ok(ClientStep::General(len));
                }
                Err(e) => break Err(e),
            }
        };
        consume(&mut cin, pos);
        // Room for the rest of a long frame (COPY data), so it arrives in few reads: at most as
        // much again as has arrived, so that a length the client claims but does not send
        // costs no memory.
        if let Some(len) = cin.get(1..5) {
            let len = u32::from_be_bytes([len[0], len[1], len[2], len[3]]) as usize;
            cin.reserve(
                (len + 1)
                    .saturating_sub(cin.len())
                    .min(cin.len().max(READ_CHUNK))
                    .min(self.input.max_message),
            );
        }
        self.input.buf = cin;
        result
    }

    fn backend_lost(&mut self, e: std::io::Error) -> SessionError {
        if let Some(link) = self.links.current.as_mut() {
            link.conn.conn.broken = true;
        }
        SessionError::Backend(BackendError::Io(e))
    }

    /// Moves every complete backend frame to the client side, keeping the pipeline's accounts.
    /// Consecutive forwarded frames are copied as one piece, and when the whole buffer goes to
    /// a client with nothing else pending, the buffers are swapped instead of copied.
    fn on_backend_data(&mut self) -> Result<(), SessionError> {
        let Some(link) = self.links.current.as_mut() else {
            return Ok(());
        };
        let conn = &mut link.conn.conn;
        // Frames are looked at where they lie in the read buffer, which is taken out meanwhile
        // so the pipeline may update the connection.
        let mut buf = std::mem::take(&mut conn.read_buf);
        let mut pos = 0;
        // The frames from `run_start` to `pos` go to the client and are not copied yet.
        let mut run_start = 0;
        // The status of the last Sync answered, for the search_path changes it settles.
        let mut synced = None;
        let result = loop {
            let len = match protocol::complete_frame_len(&buf[pos..]) {
                Ok(Some(len)) => len,
                Ok(None) => break Ok(()),
                Err(e) => {
                    conn.broken = true;
                    break Err(SessionError::Backend(e.into()));
                }
            };
            let tag = buf[pos];
            if let Some(types) = &conn.types {
                if crate::backend::types::translated(tag, &conn.binary_arrays) {
                    types.translate(tag, &mut buf[pos + 5..pos + len], &mut conn.binary_arrays);
                }
            }
            if self.pipeline.passes_through(tag) {
                pos += len;
                continue;
            }
            let body = &buf[pos + 5..pos + len];
            match tag {
                b'Z' => {
                    link.tx_status = TxStatus::of_ready(body);
                    if self.pipeline.front_is_sync() {
                        synced = Some(link.tx_status);
                    }
                }
                b'S' => conn.note_parameter_status(body),
                b'E' => {
                    self.ctx.metrics.note_shard_error(body);
                    self.batch.paths.failed();
                }
                _ => {}
            }
            let disposition = self
                .pipeline
                .on_backend_frame(tag, conn, &mut self.statements);
            if tag == b'E' && self.pipeline.take_failed_batch() {
                // The backend skips the rest of the batch up to its Sync; so does the proxy,
                // or it would wait for answers that never come.
                self.batch.skip_until_sync = true;
            }
            if disposition == Disposition::Drop {
                self.cout.extend_from_slice(&buf[run_start..pos]);
                run_start = pos + len;
            }
            pos += len;
            if self.pipeline.composed_due() {
                self.cout.extend_from_slice(&buf[run_start..pos]);
                run_start = pos;
                self.pipeline.emit_composed(&mut self.cout);
            }
        };
        if run_start == 0 && pos == buf.len() && self.cout.is_empty() {
            std::mem::swap(&mut self.cout, &mut buf);
            buf.clear();
        } else {
            self.cout.extend_from_slice(&buf[run_start..pos]);
            consume(&mut buf, pos);
        }
        conn.read_buf = buf;
        if let Some(status) = synced {
            self.note_ready_path(status);
        }
        result
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.finish();
    }
}

/// Room for a read of useful size: a nearly full buffer would make many small reads.
fn reserve_for_read(buf: &mut BytesMut) {
    if buf.capacity() - buf.len() < 4096 {
        buf.reserve(8192);
    }
}

/// Drops the first `n` bytes of a buffer: they went out, or were handled. A buffer emptied
/// keeps its place at the front of its memory. `advance` alone would move the start on for
/// good (a consumed prefix is not given back by itself), so every transaction would read or
/// write a little further on, into cache lines not touched for many transactions, instead of
/// into the same few warm ones.
fn consume(buf: &mut BytesMut, n: usize) {
    if n == buf.len() {
        buf.clear();
    } else if n > 0 {
        buf.advance(n);
        // The rest (part of a frame, or of a write) moves to the front when it is no longer
        // than what was consumed before it: a short copy, never an allocation.
        let _ = buf.try_reclaim(buf.capacity() - buf.len() + 1);
    }
}
