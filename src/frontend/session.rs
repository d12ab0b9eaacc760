//! The session loop after startup: client frames in, backend frames out, over raw sockets.
//!
//! Transaction pooling: a backend connection is taken from its shard's pool when the client sends
//! something, and goes back when the backend reports an idle transaction state, nothing is still
//! expected from it, and no extended-protocol batch is half-way (no Sync yet). Session state that
//! cannot move between connections pins the client to its connection (see `sql::classify`).

use std::future::Future;
use std::pin::Pin;
use std::sync::Arc;
use std::task::Poll;

use bytes::{Buf, BytesMut};
use tokio::io::AsyncWrite;
use tracing::Instrument;

use super::cancel::{CancelGuard, CancelSlot};
use super::driver::Next;
use super::limits::Admitted;
use super::pipeline::{Disposition, Pending, Pipeline};
use super::socket::{self, ClientSocket};
use super::statements::{self, ClientFrame, StatementNames};
use super::FrontendError;
use crate::admin;
use crate::backend::readiness::ReadArm;
use crate::backend::{BackendError, Pooled, Settings};
use crate::catalog::ShardId;
use crate::client_error::ClientError;
use crate::executor::ddl;
use crate::frontend::context::ServerCtx;
use crate::protocol::{self, Frame, FrameError, MessageBuilder, Severity, TxStatus};
use crate::router::route::Route;
use crate::sql::classify::{
    first_keyword, keyword, may_start_with, session_effect, LastEffect, SessionEffect,
};
pub use crate::sql::quote::{quote_ident, quote_literal};
use tokio_postgres::error::SqlState;

mod aggregate;
mod checkout;
mod combining;
mod commit;
mod copy;
mod dest;
mod explain;
mod forward;
mod general;
mod insert_select;
mod local;
mod movement;
mod multi;
mod multi_dest;
mod nested;
mod polling;
mod row_ttl;
mod savepoints;
mod script;
mod search_path;
mod sequence;
mod settings;
mod shard_switch;
mod signal;
mod timeouts;
mod watch;

use crate::executor::participants::{Participants, ShardLink};
use crate::router::normalize::Literals;
use dest::Dest;
use local::{local_candidate, local_kind, LocalKind, TextFacts};
use multi::{ClientSink, Portals};
use settings::settings_sql;

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
    cin: BytesMut,
    cout: BytesMut,
    /// The backend connections the session holds.
    links: Participants,
    /// Client bytes arrived since the last look, or frames were left for lack of room.
    client_unread: bool,
    /// Turns of the loop since it last waited.
    turns: u32,
    /// The answers the client is owed, in the client's order: the current connection's and the
    /// ones the proxy composed itself between them. On the session, not on a link: the
    /// proxy's answers belong to no connection, and a link stops being the current one only
    /// once every answer owed from it is passed on (`drain_current`), so a parked one is owed
    /// none.
    pipeline: Pipeline,
    statements: StatementNames,
    parse_effect: LastEffect,
    /// The last statement text found not to be one the proxy answers itself.
    not_local: Vec<u8>,
    /// The normalising buffer and last shared plan of the session's simple queries.
    simple_memo: crate::router::SimpleMemo,
    /// What the last normalised simple query's words say.
    simple_facts: local::FactsMemo,
    pinned: bool,
    /// The open block did something PostgreSQL cannot PREPARE (LISTEN, a temporary table, …):
    /// it may commit on one shard only.
    unpreparable_block: bool,
    /// Every participant of the open block already waits for locks at most `lock_timeout_ms`.
    waits_bounded: bool,
    /// After the proxy itself failed an extended-protocol message: drop input up to Sync.
    skip_until_sync: bool,
    /// The proxy refused an extended-protocol message: if a transaction block is open, it fails
    /// on its shards at the Sync (not before: the shards are in the middle of the batch).
    fail_block_at_sync: Option<String>,
    settings: Settings,
    /// The settings of the client's startup packet, which RESET goes back to.
    startup_settings: Settings,
    /// A SET or RESET ran on the current connection since the session's settings were last
    /// read from it: the session's other shards must take them on before they next serve it.
    settings_changed: bool,
    cancel: CancelGuard,
    /// The statement that opened the transaction block, replayed on shards that join it.
    begin_sql: Option<String>,
    /// The block's savepoints, oldest first, replayed after `begin_sql` on shards that join.
    savepoints: Vec<String>,
    /// The current extended-protocol batch, outside a transaction block, wrote on several
    /// shards (a multi-shard write, a row move) or ran statements on more than one: on
    /// PostgreSQL a batch is one transaction up to its Sync, so every shard's part turns into
    /// a block before the Sync reaches it, and the parts commit together (or roll back
    /// together, if the batch failed).
    atomic_batch: bool,
    /// Spreads reads of duplicated tables over their shards.
    round_robin: usize,
    /// Portals of Binds that ran on several shards, read by the client's Describe and Execute.
    portals: Portals,
    /// Generated key values taken for the INSERT being routed.
    pending_keys: Vec<i64>,
    /// The last value this session got from each key sequence, which `currval` answers.
    key_values: sequence::LastValues,
    /// The catalog snapshot last routed with (refreshed when the catalog's version moves).
    snapshot: Option<Arc<crate::catalog::Snapshot>>,
    /// How much of `cout` is the proxy's answers to held Parses and nothing else (0: none).
    deferred_parse_len: usize,
    /// The last prepared statement text planned.
    last_plan: dest::PlanMemo,
    /// The session's tracing span, for the events of the session and its rare slow paths.
    span: tracing::Span,
    /// A COPY the proxy splits or gathers over shards, while the client's messages for it come.
    copy: Option<Box<copy::CopyState>>,
    /// How the client left, which decides what happens to a statement still running for it.
    client_left: ClientLeft,
    /// `limits.max_message_bytes`.
    max_message: usize,
    /// The proxy's time limits on the session's waits.
    timeouts: timeouts::Timeouts,
    /// A step of the general path has begun and not ended: if the session ends now (cut short
    /// at a deadline, or its task dropped), the connections it holds are mid-statement, whatever
    /// their last ReadyForQuery said.
    general_under_way: bool,
    /// A query string's statements are running one by one (`script`).
    in_script: bool,
    /// The session's search_path as the router reads names with it (`search_path`); `None`: the
    /// proxy's default.
    search_path: Option<Arc<crate::router::SearchPath>>,
    /// The search_path the session's startup packet gave (`None`: none, the proxy's default).
    start_path: Option<Arc<crate::router::SearchPath>>,
    /// This session's place under the connection limits.
    _admitted: Admitted,
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
        let mut simple_memo = crate::router::SimpleMemo::default();
        simple_memo.set_search_path(start_path.clone());
        Session {
            search_path: start_path.clone(),
            start_path,
            max_message: ctx.config.limits.max_message_bytes as usize,
            timeouts: timeouts::Timeouts::new(&ctx.config.limits),
            general_under_way: false,
            in_script: false,
            _admitted: admitted,
            ctx,
            cin: read_buf,
            cout: BytesMut::with_capacity(8192),
            links: Participants {
                current: None,
                parked: Default::default(),
                spare_out: BytesMut::with_capacity(8192),
            },
            client_unread: true,
            turns: 0,
            pipeline: Pipeline::default(),
            statements: StatementNames::default(),
            parse_effect: LastEffect::default(),
            not_local: Vec::new(),
            simple_memo,
            simple_facts: Default::default(),
            pinned: false,
            unpreparable_block: false,
            waits_bounded: false,
            skip_until_sync: false,
            fail_block_at_sync: None,
            startup_settings: settings.clone(),
            settings,
            settings_changed: false,
            cancel,
            begin_sql: None,
            savepoints: Vec::new(),
            atomic_batch: false,
            round_robin: 0,
            portals: Portals::default(),
            pending_keys: Vec::new(),
            key_values: Default::default(),
            snapshot: None,
            deferred_parse_len: 0,
            last_plan: Default::default(),
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
            if self.client_unread {
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
                        self.general_under_way = true;
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
                            self.general_under_way = false;
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
                    self.client_unread = true;
                }
                Event::ClientWrote(r) => {
                    let n = r.map_err(SessionError::Client)?;
                    consume(&mut self.cout, n);
                    self.deferred_parse_len = 0;
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
                    self.client_unread = true;
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
            let mut cin = std::mem::take(&mut self.cin);
            let handled = self
                .on_client_frame(Frame::borrowed(&cin[..len]), client)
                .await;
            consume(&mut cin, len);
            self.cin = cin;
            handled?;
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
        let mut cin = std::mem::take(&mut self.cin);
        let mut pos = 0;
        self.client_unread = false;
        let result = loop {
            if self.current_out_len() >= HIGH_WATER {
                self.client_unread = true;
                break Ok(ClientStep::Said(ClientSaid::More));
            }
            let len = match protocol::frame_len_within(&cin[pos..], self.max_message) {
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
                    self.client_unread = true;
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
                    .min(self.max_message),
            );
        }
        self.cin = cin;
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
                b'Z' => link.tx_status = TxStatus::of_ready(body),
                b'S' => conn.note_parameter_status(body),
                b'E' => self.ctx.metrics.note_shard_error(body),
                _ => {}
            }
            let disposition = self
                .pipeline
                .on_backend_frame(tag, conn, &mut self.statements);
            if tag == b'E' && self.pipeline.take_failed_batch() {
                // The backend skips the rest of the batch up to its Sync; so does the proxy,
                // or it would wait for answers that never come.
                self.skip_until_sync = true;
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
        result
    }
}

impl Drop for Session {
    fn drop(&mut self) {
        self.finish();
    }
}

/// The proxy's own error as an ErrorResponse, for the paths that compose their answers.
fn error_frame(e: &impl ClientError) -> bytes::Bytes {
    let mut out = BytesMut::new();
    protocol::error_response(
        &mut out,
        Severity::Error,
        &e.sqlstate(),
        &e.client_message(),
    );
    out.freeze()
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
