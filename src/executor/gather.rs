//! A simple query run on several shards, answered to the client as one PostgreSQL would answer
//! it: one RowDescription, the rows concatenated or merged in ORDER BY order, LIMIT/OFFSET
//! applied, one CommandComplete with the total count, one ReadyForQuery.
//!
//! Every shard gets its statement before any answer is read, so the shards work in parallel;
//! their rows are kept until all have answered (a read bounded by LIMIT keeps at most
//! `limit + offset` rows per shard).

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use crate::backend::{BackendConn, BackendError};
use crate::protocol;
use crate::protocol::TxStatus;
use crate::router::plan::{Merge, StatementKind};
use tokio_postgres::error::SqlState;

pub mod cursor;
pub(crate) mod frames;
pub mod live;
pub(crate) mod order;
mod replies;
mod stream;

pub use frames::values;
use frames::{columns, cstr, fields, tag_count, without_hidden_fields, without_hidden_values};
use order::RowOrder;
pub use replies::{run_batches_each, Replies, Reply};
pub use stream::{
    describe_portal, relay_simple, skip_to_end, stream_portal, stream_simple, Described, Sink,
    Spec, StreamError, Streamed,
};

/// How the shards' answers combine.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Combine {
    /// Rows of a sharded table: every shard's rows, counts added up. `rows` gives, for an
    /// INSERT with RETURNING, the shard index each VALUES row went to, so the returned rows come
    /// back in VALUES order.
    Union {
        kind: StatementKind,
        merge: Merge,
        rows: Vec<usize>,
    },
    /// Copies of a duplicated table: every copy is written alike, the client hears one.
    Copies,
    /// Maintenance (VACUUM, ANALYZE, …) each shard runs on its own: no write of the proxy's to
    /// make atomic; the client hears one answer.
    Each,
    /// EXPLAIN ANALYZE of a statement on several shards: the proxy's plan, then each shard's
    /// own EXPLAIN ANALYZE under its name, then the proxy's time.
    Explain(ExplainAnalyze),
}

/// How the answers of EXPLAIN ANALYZE on several shards are put together.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainAnalyze {
    /// The proxy's lines, as plain EXPLAIN shows them.
    pub head: Vec<String>,
    /// The shards' names, in the order of the connections.
    pub shards: Vec<String>,
    /// The explained statement writes (it runs as one distributed transaction).
    pub writes: bool,
    /// When the shards were sent the statement.
    pub started: std::time::Instant,
}

impl ExplainAnalyze {
    /// The answer's lines: each shard's plan indented under its name.
    fn lines(&self, answers: &[Answer]) -> Vec<String> {
        let mut lines = self.head.clone();
        for (answer, shard) in answers.iter().zip(&self.shards) {
            lines.push(format!("  On shard {shard}:"));
            for row in &answer.rows {
                let text = values(row)
                    .first()
                    .copied()
                    .flatten()
                    .map(String::from_utf8_lossy)
                    .unwrap_or_default();
                lines.push(format!("    {text}"));
            }
        }
        let elapsed = self.started.elapsed().as_secs_f64() * 1000.0;
        lines.push(format!(
            "  Proxy: all {} shards answered in {elapsed:.3} ms{}",
            self.shards.len(),
            if self.writes {
                " (then the distributed commit)"
            } else {
                ""
            }
        ));
        lines
    }
}

/// Where the answers come from: the shards, in the order of the connections, and their control
/// pools (to ask a shard how its text columns sort).
pub struct Origin<'a> {
    pub shards: &'a [crate::catalog::ShardId],
    pub control: &'a crate::txn::ControlPools,
}

/// The proxy's own ErrorResponse for rows it cannot merge.
pub(crate) fn own_error(message: &str) -> Bytes {
    let mut error = BytesMut::new();
    protocol::error_response(
        &mut error,
        protocol::Severity::Error,
        &SqlState::FEATURE_NOT_SUPPORTED,
        message,
    );
    error.freeze()
}

/// Text sorts by bytes in the proxy's merge: right for collations that order by code point.
fn bytewise(collation: &str) -> bool {
    matches!(
        collation.to_ascii_lowercase().as_str(),
        "c" | "posix" | "c.utf-8" | "c.utf8" | "ucs_basic"
    )
}

/// Refuses a merge that would order text by a collation the proxy does not reproduce (the
/// merge compares bytes): asks `shard`, which described the rows as `description`, for each
/// text sort column's collation (its table column's, else the database's).
pub(crate) async fn check_text_order(
    description: &[u8],
    shard: crate::catalog::ShardId,
    merge: &Merge,
    control: &crate::txn::ControlPools,
) -> Result<(), String> {
    let fields = fields(description);
    for k in &merge.order {
        let Some(f) = fields.get(k.column) else {
            continue;
        };
        if !matches!(f.type_oid, 25 | 1043 | 1042 | 19) {
            continue;
        }
        let client = control
            .shard(shard)
            .pool
            .get()
            .await
            .map_err(|e| format!("cannot ask the shard how the text column sorts: {e}"))?;
        let row = client
            .query_one(
                "SELECT CASE WHEN c.collname IS NULL OR c.collname = 'default' \
                        THEN d.datcollate::text ELSE c.collname::text END \
                 FROM pg_catalog.pg_database d \
                 LEFT JOIN pg_catalog.pg_attribute a ON a.attrelid = $1::bigint::oid AND a.attnum = $2 \
                 LEFT JOIN pg_catalog.pg_collation c ON c.oid = a.attcollation \
                 WHERE d.datname = current_database()",
                &[&i64::from(f.table_oid), &f.column],
            )
            .await
            .map_err(|e| format!("cannot ask the shard how the text column sorts: {e}"))?;
        let collation: String = row.get(0);
        if !bytewise(&collation) {
            return Err(format!(
                "ORDER BY a text column in collation \"{collation}\" over several shards is not \
                 supported yet: add the full sharding key to the WHERE clause, or sort with \
                 COLLATE \"C\""
            ));
        }
    }
    Ok(())
}

/// [`check_text_order`] for a merge of buffered answers, by the first that described its rows.
async fn check_answers_text_order(
    answers: &[Answer],
    combine: &Combine,
    origin: &Origin<'_>,
) -> Result<(), String> {
    let Combine::Union { merge, .. } = combine else {
        return Ok(());
    };
    if merge.order.is_empty() {
        return Ok(());
    }
    let described = answers
        .iter()
        .zip(origin.shards)
        .find_map(|(a, s)| a.description.as_ref().map(|d| (d, *s)));
    match described {
        Some((d, shard)) => check_text_order(d, shard, merge, origin.control).await,
        None => Ok(()),
    }
}

/// What one shard answered.
#[derive(Default)]
struct Answer {
    description: Option<Bytes>,
    rows: Vec<Bytes>,
    tag: Option<String>,
    /// The counts of every command tag, added up (several for batched INSERTs).
    count: u64,
    error: Option<Bytes>,
    notices: Vec<Bytes>,
    empty: bool,
    status: TxStatus,
}

/// Sends `sql[i]` to `conns[i]` and writes the combined answer to `out`, ending with
/// ReadyForQuery. Returns each connection's transaction status.
pub async fn run(
    conns: &mut [&mut BackendConn],
    sql: &[String],
    combine: &Combine,
    origin: &Origin<'_>,
    session_status: TxStatus,
    out: &mut BytesMut,
) -> Result<Vec<TxStatus>, BackendError> {
    let (combined, statuses) = run_simple(conns, sql, combine, origin).await?;
    write(&combined, out);
    protocol::ready_for_query(out, combined_status(&statuses, session_status));
    Ok(statuses)
}

/// Sends `sql[i]` to `conns[i]` and combines the answers; with each connection's transaction
/// status.
pub async fn run_simple(
    conns: &mut [&mut BackendConn],
    sql: &[String],
    combine: &Combine,
    origin: &Origin<'_>,
) -> Result<(Combined, Vec<TxStatus>), BackendError> {
    for (conn, sql) in conns.iter_mut().zip(sql) {
        // A simple query drops the backend's unnamed statement.
        conn.unnamed = None;
        let mut msg = BytesMut::new();
        protocol::query(&mut msg, sql);
        conn.stream.write_all(&msg).await?;
    }
    let mut answers = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        answers.push(read_answer(conn, Until::Ready).await?);
    }
    let statuses: Vec<TxStatus> = answers.iter().map(|a| a.status).collect();
    Ok((combined(&mut answers, combine, origin).await, statuses))
}

/// Sends `messages[i]` (an extended-protocol batch ending with Sync) to `conns[i]` and
/// combines the answers up to each ReadyForQuery; with each connection's transaction status.
pub async fn run_batches(
    conns: &mut [&mut BackendConn],
    messages: &[BytesMut],
    combine: &Combine,
    origin: &Origin<'_>,
) -> Result<(Combined, Vec<TxStatus>), BackendError> {
    for (conn, msg) in conns.iter_mut().zip(messages) {
        // The messages parse into the backend's unnamed statement.
        conn.unnamed = None;
        let msg = conn.with_own_types(msg);
        conn.stream.write_all(&msg).await?;
    }
    let mut answers = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        answers.push(read_answer(conn, Until::Ready).await?);
    }
    let statuses: Vec<TxStatus> = answers.iter().map(|a| a.status).collect();
    Ok((combined(&mut answers, combine, origin).await, statuses))
}

/// Writes a combined answer as a simple query's (without its ReadyForQuery).
pub fn write(combined: &Combined, out: &mut BytesMut) {
    match combined {
        Combined::Failed { notices, error } => {
            out.extend_from_slice(notices);
            out.extend_from_slice(error);
        }
        Combined::Rows(r) => {
            out.extend_from_slice(&r.notices);
            if r.empty {
                out.extend_from_slice(&protocol::empty_message(b'I'));
                return;
            }
            if let Some(d) = &r.description {
                out.extend_from_slice(d);
            }
            for row in &r.rows {
                out.extend_from_slice(row);
            }
            if let Some(tag) = &r.tag {
                protocol::command_complete(out, tag);
            }
        }
    }
}

/// The status the client sees: failed if any shard's transaction failed, in a block if any is.
pub fn combined_status(statuses: &[TxStatus], session: TxStatus) -> TxStatus {
    TxStatus::combined(statuses.iter().copied().chain([session]))
}

/// Runs one extended-protocol statement on every connection: `messages[i]` (Parse, Bind,
/// Describe portal, Execute, Flush) goes to `conns[i]`, whose answers are read up to the
/// Execute's completion. The batch stays open on every shard until the client's Sync.
pub async fn run_extended(
    conns: &mut [&mut BackendConn],
    messages: &[BytesMut],
    combine: &Combine,
    origin: &Origin<'_>,
) -> Result<Combined, BackendError> {
    for (conn, msg) in conns.iter_mut().zip(messages) {
        // The messages parse into the backend's unnamed statement.
        conn.unnamed = None;
        let msg = conn.with_own_types(msg);
        conn.stream.write_all(&msg).await?;
    }
    let mut answers = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        answers.push(read_answer(conn, Until::Executed).await?);
    }
    Ok(combined(&mut answers, combine, origin).await)
}

/// The rest of a portal's rows on every connection, read up to each Execute's end after
/// [`describe_portal`] read up to the description, combined.
pub async fn finish_portal(
    conns: &mut [&mut BackendConn],
    combine: &Combine,
    origin: &Origin<'_>,
    description: Option<(Bytes, usize)>,
) -> Result<Combined, BackendError> {
    let mut answers = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        answers.push(read_answer(conn, Until::Executed).await?);
    }
    if let Some((d, by)) = description {
        if let Some(a) = answers.get_mut(by) {
            a.description = Some(d);
        }
    }
    Ok(combined(&mut answers, combine, origin).await)
}

/// The RowDescription the client gets for shards' `description`: without the sort columns the
/// proxy added.
pub fn client_description(description: &Bytes, combine: &Combine) -> Bytes {
    match combine {
        Combine::Union { merge, .. } if merge.hidden > 0 => {
            without_hidden_fields(description, merge.hidden)
        }
        _ => description.clone(),
    }
}

/// The combined answer of several shards.
pub enum Combined {
    Rows(Rows),
    /// A shard refused: its ErrorResponse, as the client gets it.
    Failed {
        notices: BytesMut,
        error: Bytes,
    },
}

/// Rows and completion as one PostgreSQL would send them.
#[derive(Default)]
pub struct Rows {
    pub notices: BytesMut,
    pub description: Option<Bytes>,
    pub rows: std::collections::VecDeque<Bytes>,
    pub tag: Option<String>,
    /// Every shard answered EmptyQueryResponse.
    pub empty: bool,
}

async fn combined(answers: &mut [Answer], combine: &Combine, origin: &Origin<'_>) -> Combined {
    let mut notices = BytesMut::new();
    // Copies say alike what the client hears once: the first one's notices.
    let heard = match combine {
        Combine::Copies | Combine::Each => &answers[..answers.len().min(1)],
        Combine::Union { .. } | Combine::Explain(_) => &answers[..],
    };
    for a in heard {
        for n in &a.notices {
            notices.extend_from_slice(n);
        }
    }
    if let Some(error) = answers.iter().find_map(|a| a.error.clone()) {
        return Combined::Failed { notices, error };
    }
    let rows = match check_answers_text_order(answers, combine, origin).await {
        Ok(()) => combine_rows(answers, combine),
        Err(message) => Err(message),
    };
    match rows {
        Ok(mut rows) => {
            rows.notices = notices;
            Combined::Rows(rows)
        }
        Err(message) => {
            let mut error = BytesMut::new();
            protocol::error_response(
                &mut error,
                protocol::Severity::Error,
                &tokio_postgres::error::SqlState::FEATURE_NOT_SUPPORTED,
                &message,
            );
            Combined::Failed {
                notices,
                error: error.freeze(),
            }
        }
    }
}

/// Where a shard's answer ends.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(crate) enum Until {
    /// ReadyForQuery: a simple query.
    Ready,
    /// The Execute's completion (or the error that skips the rest of the batch).
    Executed,
}

async fn read_answer(conn: &mut BackendConn, until: Until) -> Result<Answer, BackendError> {
    let mut a = Answer::default();
    loop {
        let f = conn.read_frame().await?;
        match f.tag {
            b'T' if a.description.is_none() => a.description = Some(f.raw),
            b'D' => a.rows.push(f.raw),
            b'C' => {
                let tag = String::from_utf8_lossy(cstr(f.body())).into_owned();
                a.count += tag_count(&tag).unwrap_or(0);
                a.tag = Some(tag);
                if until == Until::Executed {
                    return Ok(a);
                }
            }
            b'E' => {
                if a.error.is_none() {
                    a.error = Some(f.raw);
                }
                if until == Until::Executed {
                    return Ok(a);
                }
            }
            b'N' => a.notices.push(f.raw),
            b'I' => {
                a.empty = true;
                if until == Until::Executed {
                    return Ok(a);
                }
            }
            b'S' => conn.note_parameter_status(f.body()),
            b'Z' => {
                a.status = TxStatus::of_ready(f.body());
                return Ok(a);
            }
            _ => {}
        }
    }
}

fn combine_rows(answers: &mut [Answer], combine: &Combine) -> Result<Rows, String> {
    let (kind, merge, row_shards) = match combine {
        Combine::Copies | Combine::Each => {
            let first = answers.first_mut().ok_or("no shard answered")?;
            return Ok(Rows {
                description: first.description.take(),
                rows: first.rows.drain(..).collect(),
                tag: first.tag.take(),
                empty: first.empty,
                ..Rows::default()
            });
        }
        Combine::Union { kind, merge, rows } => (*kind, merge, rows),
        Combine::Explain(explain) => {
            let lines = explain.lines(answers);
            let first = answers.first_mut().ok_or("no shard answered")?;
            let rows = lines
                .iter()
                .map(|line| {
                    let mut row = BytesMut::new();
                    protocol::MessageBuilder::new(&mut row, b'D')
                        .i16(1)
                        .i32(line.len() as i32)
                        .bytes(line.as_bytes())
                        .finish();
                    row.freeze()
                })
                .collect();
            return Ok(Rows {
                description: first.description.take(),
                rows,
                tag: first.tag.take(),
                ..Rows::default()
            });
        }
    };
    if answers.iter().all(|a| a.empty) {
        return Ok(Rows {
            empty: true,
            ..Rows::default()
        });
    }
    let description = answers.iter().find_map(|a| a.description.clone());
    let layout = description.as_deref().map(columns).unwrap_or_default();
    let mut rows: Vec<Bytes> = if !merge.order.is_empty() {
        let order = RowOrder::new(&merge.order, &layout)?;
        let mut rows: Vec<Bytes> = answers.iter_mut().flat_map(|a| a.rows.drain(..)).collect();
        order.sort(&mut rows)?;
        rows
    } else if !row_shards.is_empty() && kind == StatementKind::Insert {
        in_values_order(answers, row_shards)
    } else {
        answers.iter_mut().flat_map(|a| a.rows.drain(..)).collect()
    };
    if kind == StatementKind::Select {
        let skip = (merge.offset as usize).min(rows.len());
        rows.drain(..skip);
        if let Some(limit) = merge.limit {
            rows.truncate(limit as usize);
        }
    }
    let description = match description {
        Some(d) if merge.hidden > 0 => Some(without_hidden_fields(&d, merge.hidden)),
        d => d,
    };
    if merge.hidden > 0 {
        for r in rows.iter_mut() {
            *r = without_hidden_values(r, merge.hidden);
        }
    }
    let total: u64 = match kind {
        StatementKind::Select => rows.len() as u64,
        _ => answers.iter().map(|a| a.count).sum(),
    };
    let first_tag = answers
        .iter()
        .find_map(|a| a.tag.clone())
        .unwrap_or_default();
    let verb = first_tag.split(' ').next().unwrap_or("SELECT");
    let tag = match verb {
        "INSERT" => format!("INSERT 0 {total}"),
        "" => format!("SELECT {total}"),
        v => format!("{v} {total}"),
    };
    Ok(Rows {
        description,
        rows: rows.into(),
        tag: Some(tag),
        ..Rows::default()
    })
}

/// RETURNING rows of a split INSERT in the order of its VALUES rows; when a shard returned fewer
/// rows than it was given (ON CONFLICT DO NOTHING), in shard order.
fn in_values_order(answers: &mut [Answer], row_shards: &[usize]) -> Vec<Bytes> {
    let mut given = vec![0usize; answers.len()];
    for &s in row_shards {
        if let Some(g) = given.get_mut(s) {
            *g += 1;
        }
    }
    if answers.iter().zip(&given).any(|(a, g)| a.rows.len() != *g) {
        return answers.iter_mut().flat_map(|a| a.rows.drain(..)).collect();
    }
    let mut next = vec![0usize; answers.len()];
    row_shards
        .iter()
        .map(|&s| {
            let r = answers[s].rows[next[s]].clone();
            next[s] += 1;
            r
        })
        .collect()
}
