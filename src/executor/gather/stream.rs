//! A read over several shards streamed to the client as the rows arrive, in bounded memory:
//! the shards' rows one shard after the other, or merged k-way by the ORDER BY each shard
//! already applied, holding one row per shard. OFFSET and LIMIT count the rows as they pass;
//! once the limit is reached the rest is read and dropped (each shard's LIMIT bounds it).
//!
//! Rows go out before every shard has finished, so a shard that fails late (a division by
//! zero in its tenth row) fails the statement after rows were sent — as one PostgreSQL does
//! when its executor fails part-way.

use std::cmp::Ordering;
use std::future::Future;

use bytes::{Bytes, BytesMut};

use super::frames::{columns, cstr, tag_count, without_hidden_fields, without_hidden_values};
use super::order::RowOrder;
use super::{check_text_order, Origin, Until};
use crate::backend::{BackendConn, BackendError};
use crate::protocol;
use crate::protocol::TxStatus;
use crate::router::plan::{Merge, StatementKind};

/// Where streamed answers go: the client's output buffer, written out as it fills.
pub trait Sink: Send {
    fn out(&mut self) -> &mut BytesMut;
    /// Called after output was added: writes it to the client once enough has gathered.
    fn written(&mut self) -> impl Future<Output = std::io::Result<()>> + Send;
    /// Called before waiting for a shard: writes what the client takes now, without waiting,
    /// so rows already here do not wait for a slow shard.
    fn waiting(&mut self) -> std::io::Result<()>;
}

/// A buffer that keeps everything (the caller writes it out).
impl Sink for BytesMut {
    fn out(&mut self) -> &mut BytesMut {
        self
    }

    async fn written(&mut self) -> std::io::Result<()> {
        Ok(())
    }

    fn waiting(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[derive(Debug, thiserror::Error)]
pub enum StreamError {
    #[error("{0}")]
    Backend(#[from] BackendError),
    #[error("client connection: {0}")]
    Client(std::io::Error),
}

/// What a streamed statement is and how its answer is written.
pub struct Spec<'a> {
    pub kind: StatementKind,
    pub merge: &'a Merge,
    /// A simple query's answer carries its RowDescription; an Execute's does not (the client's
    /// Describe was answered before).
    pub describe: bool,
    /// The RowDescription read already (an extended-protocol portal's, at its Bind), and the
    /// index of the connection that sent it.
    pub description: Option<(Bytes, usize)>,
}

/// How a streamed statement ended.
#[derive(Debug, Default)]
pub struct Streamed {
    /// Each connection's transaction status, for a simple query (read up to ReadyForQuery).
    pub statuses: Vec<TxStatus>,
    /// A shard (or the proxy's merge) failed the statement; its ErrorResponse was written.
    pub failed: bool,
    /// The CommandComplete tag written (empty when the statement failed or was empty).
    pub tag: String,
}

/// The state of one streamed statement across its shards.
struct Run<'s, 'm, S: Sink> {
    sink: &'s mut S,
    spec: &'s Spec<'m>,
    until: Until,
    description: Option<Bytes>,
    /// Which connection sent `description`: its table OIDs are that shard's.
    described_by: Option<usize>,
    described: bool,
    error: Option<Bytes>,
    skipped: u64,
    sent: u64,
    count: u64,
    first_tag: Option<String>,
    empty: usize,
}

/// Sends `sql[i]` to `conns[i]` as simple queries and streams the combined answer into the
/// sink, without its ReadyForQuery.
pub async fn stream_simple<S: Sink>(
    conns: &mut [&mut BackendConn],
    sql: &[String],
    spec: &Spec<'_>,
    origin: &Origin<'_>,
    sink: &mut S,
) -> Result<Streamed, StreamError> {
    let mut query = BytesMut::new();
    for (conn, sql) in conns.iter_mut().zip(sql) {
        // A simple query drops the backend's unnamed statement.
        conn.unnamed = None;
        query.clear();
        protocol::query(&mut query, sql);
        tokio::io::AsyncWriteExt::write_all(&mut conn.stream, &query)
            .await
            .map_err(BackendError::Io)?;
    }
    stream(conns, spec, Until::Ready, origin, sink).await
}

/// Streams an Execute's rows from every connection, which each have answered up to the
/// portal's description already ([`describe_portal`]).
pub async fn stream_portal<S: Sink>(
    conns: &mut [&mut BackendConn],
    spec: &Spec<'_>,
    origin: &Origin<'_>,
    sink: &mut S,
) -> Result<Streamed, StreamError> {
    stream(conns, spec, Until::Executed, origin, sink).await
}

/// What the shards answered before a portal's rows: its description, or the first error.
pub struct Described {
    /// The first RowDescription, and the index of the connection that sent it.
    pub description: Option<(Bytes, usize)>,
    pub notices: BytesMut,
    /// A shard's ErrorResponse; every shard was then read up to its Execute's end.
    pub error: Option<Bytes>,
}

/// Sends `messages[i]` (Parse, Bind, Describe portal, Execute, Flush) to `conns[i]` and reads
/// each shard's answers up to the portal's RowDescription or NoData; the rows stay unread until
/// the client's Execute asks for them ([`stream_portal`]).
pub async fn describe_portal(
    conns: &mut [&mut BackendConn],
    messages: &[BytesMut],
) -> Result<Described, BackendError> {
    for (conn, msg) in conns.iter_mut().zip(messages) {
        // The messages parse into the backend's unnamed statement.
        conn.unnamed = None;
        let msg = conn.with_own_types(msg);
        tokio::io::AsyncWriteExt::write_all(&mut conn.stream, &msg).await?;
    }
    let mut d = Described {
        description: None,
        notices: BytesMut::new(),
        error: None,
    };
    let mut failed = vec![false; conns.len()];
    for (i, conn) in conns.iter_mut().enumerate() {
        loop {
            let f = conn.read_frame().await?;
            match f.tag {
                b'T' => {
                    d.description.get_or_insert((f.raw, i));
                    break;
                }
                b'n' => break,
                b'E' => {
                    d.error.get_or_insert(f.raw);
                    failed[i] = true;
                    break;
                }
                b'N' => d.notices.extend_from_slice(&f.raw),
                b'S' => conn.note_parameter_status(f.body()),
                _ => {}
            }
        }
    }
    if d.error.is_some() {
        // The statement failed: the other shards' rows are not wanted.
        for (conn, failed) in conns.iter_mut().zip(failed) {
            if !failed {
                skip_to_end(conn).await?;
            }
        }
    }
    Ok(d)
}

/// Reads and drops a shard's answers up to its Execute's end.
pub async fn skip_to_end(conn: &mut BackendConn) -> Result<(), BackendError> {
    loop {
        let f = conn.read_frame().await?;
        match f.tag {
            b'C' | b'E' | b'I' => return Ok(()),
            b'S' => conn.note_parameter_status(f.body()),
            _ => {}
        }
    }
}

async fn stream<S: Sink>(
    conns: &mut [&mut BackendConn],
    spec: &Spec<'_>,
    until: Until,
    origin: &Origin<'_>,
    sink: &mut S,
) -> Result<Streamed, StreamError> {
    let mut run = Run {
        sink,
        spec,
        until,
        description: spec.description.as_ref().map(|(d, _)| d.clone()),
        described_by: spec.description.as_ref().map(|(_, by)| *by),
        described: !spec.describe,
        error: None,
        skipped: 0,
        sent: 0,
        count: 0,
        first_tag: None,
        empty: 0,
    };
    let mut statuses = vec![TxStatus::Idle; conns.len()];
    if spec.merge.order.is_empty() {
        for (i, (conn, status)) in conns.iter_mut().zip(statuses.iter_mut()).enumerate() {
            while let Some(row) = run.next_row(i, conn, status).await? {
                run.emit(&row).await?;
            }
        }
    } else {
        run.merge(conns, &mut statuses, origin).await?;
    }
    let tag = run.finish(conns.len());
    let failed = tag.is_none();
    run.sink.written().await.map_err(StreamError::Client)?;
    Ok(Streamed {
        tag: tag.unwrap_or_default(),
        statuses: if until == Until::Ready {
            statuses
        } else {
            Vec::new()
        },
        failed,
    })
}

impl<'m, S: Sink> Run<'_, 'm, S> {
    /// The shard's next row, or `None` once its answer has ended. Notices go to the client as
    /// they come, as PostgreSQL sends them.
    async fn next_row(
        &mut self,
        i: usize,
        conn: &mut BackendConn,
        status: &mut TxStatus,
    ) -> Result<Option<Bytes>, StreamError> {
        loop {
            if !matches!(protocol::complete_frame_len(&conn.read_buf), Ok(Some(_))) {
                self.sink.waiting().map_err(StreamError::Client)?;
            }
            let f = conn.read_frame().await?;
            let ends_execute = self.until == Until::Executed;
            match f.tag {
                b'D' => return Ok(Some(f.raw)),
                b'T' if self.description.is_none() => {
                    self.description = Some(f.raw);
                    self.described_by = Some(i);
                }
                b'C' => {
                    let tag = String::from_utf8_lossy(cstr(f.body())).into_owned();
                    self.count += tag_count(&tag).unwrap_or(0);
                    self.first_tag.get_or_insert(tag);
                    if ends_execute {
                        return Ok(None);
                    }
                }
                b'E' => {
                    self.error.get_or_insert(f.raw);
                    if ends_execute {
                        return Ok(None);
                    }
                }
                b'I' => {
                    self.empty += 1;
                    if ends_execute {
                        return Ok(None);
                    }
                }
                b'N' => self.sink.out().extend_from_slice(&f.raw),
                b'S' => conn.note_parameter_status(f.body()),
                b'Z' => {
                    *status = TxStatus::of_ready(f.body());
                    return Ok(None);
                }
                _ => {}
            }
        }
    }

    /// Passes one row on, unless OFFSET skips it, LIMIT is reached or the statement failed.
    async fn emit(&mut self, row: &[u8]) -> Result<(), StreamError> {
        if self.error.is_some() {
            return Ok(());
        }
        let merge = self.spec.merge;
        let is_select = self.spec.kind == StatementKind::Select;
        if is_select && self.skipped < merge.offset {
            self.skipped += 1;
            return Ok(());
        }
        if is_select && merge.limit.is_some_and(|l| self.sent >= l) {
            return Ok(());
        }
        self.describe();
        let out = self.sink.out();
        if merge.hidden > 0 {
            out.extend_from_slice(&without_hidden_values(row, merge.hidden));
        } else {
            out.extend_from_slice(row);
        }
        self.sent += 1;
        self.sink.written().await.map_err(StreamError::Client)
    }

    /// The RowDescription, once, before the first row (without the hidden sort columns).
    fn describe(&mut self) {
        if self.described {
            return;
        }
        self.described = true;
        if let Some(d) = &self.description {
            let hidden = self.spec.merge.hidden;
            let d = if hidden > 0 {
                without_hidden_fields(d, hidden)
            } else {
                d.clone()
            };
            self.sink.out().extend_from_slice(&d);
        }
    }

    /// Merges the shards' sorted rows: holds each shard's next row, passes on the least.
    async fn merge(
        &mut self,
        conns: &mut [&mut BackendConn],
        statuses: &mut [TxStatus],
        origin: &Origin<'_>,
    ) -> Result<(), StreamError> {
        let mut heads = Vec::with_capacity(conns.len());
        for (i, (conn, status)) in conns.iter_mut().zip(statuses.iter_mut()).enumerate() {
            heads.push(self.next_row(i, conn, status).await?);
        }
        let merge: &'m Merge = self.spec.merge;
        let described = self.description.clone().zip(self.described_by);
        let order = match order_for(merge, described, origin).await {
            Ok(order) => order,
            Err(message) => {
                self.refuse(&message);
                None
            }
        };
        loop {
            let mut least: Option<usize> = None;
            for (i, head) in heads.iter().enumerate() {
                let Some(row) = head else { continue };
                least = match (least, &order) {
                    (None, _) => Some(i),
                    (Some(l), Some(order)) => {
                        let current = heads[l].as_deref().unwrap_or_default();
                        match order.compare(row, current) {
                            // Ties keep shard order, as the buffered merge's stable sort does.
                            Ok(Ordering::Less) => Some(i),
                            Ok(_) => Some(l),
                            Err(message) => {
                                self.refuse(&message);
                                Some(l)
                            }
                        }
                    }
                    (Some(l), None) => Some(l),
                };
            }
            let Some(i) = least else { break };
            if let Some(row) = heads[i].take() {
                self.emit(&row).await?;
            }
            heads[i] = self.next_row(i, conns[i], &mut statuses[i]).await?;
        }
        Ok(())
    }

    /// Fails the statement with the proxy's own error: nothing more is sent but that error.
    fn refuse(&mut self, message: &str) {
        if self.error.is_some() {
            return;
        }
        let mut error = BytesMut::new();
        protocol::error_response(
            &mut error,
            protocol::Severity::Error,
            &tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED,
            message,
        );
        self.error = Some(error.freeze());
    }

    /// Ends the answer: the error, EmptyQueryResponse, or the description (if no row carried it)
    /// and one CommandComplete with the total count. The tag, or `None` if the statement failed.
    fn finish(&mut self, shards: usize) -> Option<String> {
        if let Some(error) = self.error.take() {
            self.sink.out().extend_from_slice(&error);
            return None;
        }
        if shards > 0 && self.empty == shards {
            self.sink
                .out()
                .extend_from_slice(&protocol::empty_message(b'I'));
            return Some(String::new());
        }
        self.describe();
        let total = match self.spec.kind {
            StatementKind::Select => self.sent,
            _ => self.count,
        };
        let first_tag = self.first_tag.clone().unwrap_or_default();
        let tag = match first_tag.split(' ').next().unwrap_or("SELECT") {
            "INSERT" => format!("INSERT 0 {total}"),
            "" => format!("SELECT {total}"),
            verb => format!("{verb} {total}"),
        };
        protocol::command_complete(self.sink.out(), &tag);
        Some(tag)
    }
}

/// The merge's order over the described columns, refused for text in a collation the proxy
/// does not reproduce (`None`: no shard described rows, so none come).
async fn order_for<'m>(
    merge: &'m Merge,
    described: Option<(Bytes, usize)>,
    origin: &Origin<'_>,
) -> Result<Option<RowOrder<'m>>, String> {
    let Some((description, by)) = described else {
        return Ok(None);
    };
    if let Some(&shard) = origin.shards.get(by) {
        check_text_order(&description, shard, merge, origin.control).await?;
    }
    RowOrder::new(&merge.order, &columns(&description)).map(Some)
}

/// Runs `sql` on one connection and passes its answer to the client as PostgreSQL sends it,
/// without the ReadyForQuery: a COPY TO STDOUT the general path's combining step runs, or a
/// FETCH of a cursor the combining step holds.
pub async fn relay_simple<S: Sink>(
    conn: &mut BackendConn,
    sql: &str,
    sink: &mut S,
) -> Result<(), StreamError> {
    let mut query = BytesMut::new();
    protocol::query(&mut query, sql);
    conn.unnamed = None;
    tokio::io::AsyncWriteExt::write_all(&mut conn.stream, &query)
        .await
        .map_err(BackendError::Io)?;
    loop {
        let f = conn.read_frame().await?;
        match f.tag {
            b'Z' => return Ok(()),
            b'S' => conn.note_parameter_status(f.body()),
            b'd' | b'D' => {
                sink.out().extend_from_slice(&f.raw);
                sink.written().await.map_err(StreamError::Client)?;
            }
            _ => sink.out().extend_from_slice(&f.raw),
        }
    }
}
