//! A simple query run on several shards, answered to the client as one PostgreSQL would answer
//! it: one RowDescription, the rows concatenated or merged in ORDER BY order, LIMIT/OFFSET
//! applied, one CommandComplete with the total count, one ReadyForQuery.
//!
//! Every shard gets its statement before any answer is read, so the shards work in parallel;
//! their rows are kept until all have answered (a read bounded by LIMIT keeps at most
//! `limit + offset` rows per shard).

use std::cmp::Ordering;

use bytes::{Bytes, BytesMut};
use tokio::io::AsyncWriteExt;

use crate::backend::{BackendConn, BackendError};
use crate::protocol::{self, MessageBuilder};
use crate::router::plan::{Merge, SortKey, StatementKind};

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
}

/// Where the answers come from: the shards, in the order of the connections, and their control
/// pools (to ask a shard how its text columns sort).
pub struct Origin<'a> {
    pub shards: &'a [crate::catalog::ShardId],
    pub control: &'a crate::txn::ControlPools,
}

/// Text sorts by bytes in the proxy's merge: right for collations that order by code point.
fn bytewise(collation: &str) -> bool {
    matches!(
        collation.to_ascii_lowercase().as_str(),
        "c" | "posix" | "c.utf-8" | "c.utf8" | "ucs_basic"
    )
}

/// Refuses a merge that would order text by a collation the proxy does not reproduce (the
/// merge compares bytes): asks the shard that described the rows for each text sort column's
/// collation (its table column's, else the database's).
async fn check_text_order(
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
    let Some((i, d)) = answers
        .iter()
        .enumerate()
        .find_map(|(i, a)| a.description.as_ref().map(|d| (i, d)))
    else {
        return Ok(());
    };
    let fields = fields(d);
    for k in &merge.order {
        let Some(f) = fields.get(k.column) else {
            continue;
        };
        if !matches!(f.type_oid, 25 | 1043 | 1042 | 19) {
            continue;
        }
        let Some(&shard) = origin.shards.get(i) else {
            continue;
        };
        let client = origin
            .control
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
    status: u8,
}

/// Sends `sql[i]` to `conns[i]` and writes the combined answer to `out`, ending with
/// ReadyForQuery. Returns each connection's transaction status.
pub async fn run(
    conns: &mut [&mut BackendConn],
    sql: &[String],
    combine: &Combine,
    origin: &Origin<'_>,
    session_status: u8,
    out: &mut BytesMut,
) -> Result<Vec<u8>, BackendError> {
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
) -> Result<(Combined, Vec<u8>), BackendError> {
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
    let statuses: Vec<u8> = answers.iter().map(|a| a.status).collect();
    Ok((combined(&mut answers, combine, origin).await, statuses))
}

/// Sends `messages[i]` (an extended-protocol batch ending with Sync) to `conns[i]` and
/// combines the answers up to each ReadyForQuery; with each connection's transaction status.
pub async fn run_batches(
    conns: &mut [&mut BackendConn],
    messages: &[BytesMut],
    combine: &Combine,
    origin: &Origin<'_>,
) -> Result<(Combined, Vec<u8>), BackendError> {
    for (conn, msg) in conns.iter_mut().zip(messages) {
        // The messages parse into the backend's unnamed statement.
        conn.unnamed = None;
        conn.stream.write_all(msg).await?;
    }
    let mut answers = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        answers.push(read_answer(conn, Until::Ready).await?);
    }
    let statuses: Vec<u8> = answers.iter().map(|a| a.status).collect();
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
pub fn combined_status(statuses: &[u8], session: u8) -> u8 {
    if statuses.contains(&b'E') {
        b'E'
    } else if statuses.contains(&b'T') {
        b'T'
    } else {
        match session {
            b'T' | b'E' => session,
            _ => b'I',
        }
    }
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
        conn.stream.write_all(msg).await?;
    }
    let mut answers = Vec::with_capacity(conns.len());
    for conn in conns.iter_mut() {
        answers.push(read_answer(conn, Until::Executed).await?);
    }
    Ok(combined(&mut answers, combine, origin).await)
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
    for a in answers.iter() {
        for n in &a.notices {
            notices.extend_from_slice(n);
        }
    }
    if let Some(error) = answers.iter().find_map(|a| a.error.clone()) {
        return Combined::Failed { notices, error };
    }
    let rows = match check_text_order(answers, combine, origin).await {
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
enum Until {
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
                a.status = f.body().first().copied().unwrap_or(b'I');
                return Ok(a);
            }
            _ => {}
        }
    }
}

fn cstr(b: &[u8]) -> &[u8] {
    b.split(|&c| c == 0).next().unwrap_or(b)
}

/// The count at the end of a command tag (`INSERT 0 3`, `UPDATE 2`, `SELECT 5`).
fn tag_count(tag: &str) -> Option<u64> {
    tag.rsplit(' ').next()?.parse().ok()
}

fn combine_rows(answers: &mut [Answer], combine: &Combine) -> Result<Rows, String> {
    let (kind, merge, row_shards) = match combine {
        Combine::Copies => {
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
        sorted(answers, &merge.order, &layout)?
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

/// A RowDescription field, as far as the merge looks at it.
struct Field {
    table_oid: u32,
    column: i16,
    type_oid: u32,
}

fn fields(frame: &[u8]) -> Vec<Field> {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "RowDescription")
        .unwrap_or(0)
        .max(0);
    let mut out = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if protocol::take_cstr(&mut b, "RowDescription").is_err() || b.len() < 18 {
            break;
        }
        out.push(Field {
            table_oid: u32::from_be_bytes([b[0], b[1], b[2], b[3]]),
            column: i16::from_be_bytes([b[4], b[5]]),
            type_oid: u32::from_be_bytes([b[6], b[7], b[8], b[9]]),
        });
        b = &b[18..];
    }
    out
}

/// The type OID and format code (0 text, 1 binary) of each column of a RowDescription.
fn columns(frame: &[u8]) -> Vec<(u32, i16)> {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "RowDescription")
        .unwrap_or(0)
        .max(0);
    let mut types = Vec::with_capacity(n as usize);
    for _ in 0..n {
        if protocol::take_cstr(&mut b, "RowDescription").is_err() || b.len() < 18 {
            break;
        }
        types.push((
            u32::from_be_bytes([b[6], b[7], b[8], b[9]]),
            i16::from_be_bytes([b[16], b[17]]),
        ));
        b = &b[18..];
    }
    types
}

/// A RowDescription without its last `hidden` fields.
fn without_hidden_fields(frame: &[u8], hidden: usize) -> Bytes {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "RowDescription")
        .unwrap_or(0)
        .max(0) as usize;
    let keep = n.saturating_sub(hidden);
    let mut body = BytesMut::new();
    let mut rest = b;
    for _ in 0..keep {
        let start = rest;
        if protocol::take_cstr(&mut rest, "RowDescription").is_err() || rest.len() < 18 {
            break;
        }
        rest = &rest[18..];
        body.extend_from_slice(&start[..start.len() - rest.len()]);
    }
    let mut out = BytesMut::new();
    MessageBuilder::new(&mut out, b'T')
        .i16(keep as i16)
        .bytes(&body)
        .finish();
    out.freeze()
}

/// The column values of a DataRow (`None` for NULL).
pub fn values(frame: &[u8]) -> Vec<Option<&[u8]>> {
    let mut b = &frame[5..];
    let n = protocol::take_i16(&mut b, "DataRow").unwrap_or(0).max(0);
    let mut v = Vec::with_capacity(n as usize);
    for _ in 0..n {
        let Ok(len) = protocol::take_i32(&mut b, "DataRow") else {
            break;
        };
        if len < 0 {
            v.push(None);
        } else {
            let len = (len as usize).min(b.len());
            v.push(Some(&b[..len]));
            b = &b[len..];
        }
    }
    v
}

fn without_hidden_values(frame: &[u8], hidden: usize) -> Bytes {
    let vals = values(frame);
    let keep = vals.len().saturating_sub(hidden);
    let mut out = BytesMut::new();
    let mut m = MessageBuilder::new(&mut out, b'D');
    m.i16(keep as i16);
    for v in &vals[..keep] {
        match v {
            None => {
                m.i32(-1);
            }
            Some(v) => {
                m.i32(v.len() as i32).bytes(v);
            }
        }
    }
    m.finish();
    out.freeze()
}

/// How a sort column's values compare.
#[derive(Clone, Copy)]
enum Order {
    Integer,
    Float,
    Numeric,
    /// Byte order: text in the C collation, ISO dates and timestamps, uuids, booleans.
    Bytes,
    /// Binary format: big-endian two's complement (int2/4/8, date, timestamp).
    BinaryInteger,
    /// Binary format: IEEE float4/float8.
    BinaryFloat,
}

fn order_of(oid: u32, format: i16) -> Option<Order> {
    const INTEGERS: [u32; 4] = [20, 21, 23, 26];
    const FLOATS: [u32; 2] = [700, 701];
    // text, varchar, bpchar, name (C collation); uuid; bool (f < t, 0 < 1)
    const BYTES: [u32; 6] = [25, 1043, 1042, 19, 2950, 16];
    // date, timestamp: ISO text output sorts by bytes; binary is an integer
    const TIMES: [u32; 2] = [1082, 1114];
    Some(match (format, oid) {
        (0, o) if INTEGERS.contains(&o) => Order::Integer,
        (0, o) if FLOATS.contains(&o) => Order::Float,
        (0, 1700) => Order::Numeric,
        (0, o) if BYTES.contains(&o) || TIMES.contains(&o) => Order::Bytes,
        (1, o) if INTEGERS.contains(&o) || TIMES.contains(&o) => Order::BinaryInteger,
        (1, o) if FLOATS.contains(&o) => Order::BinaryFloat,
        (1, o) if BYTES.contains(&o) => Order::Bytes,
        _ => return None,
    })
}

fn sorted(
    answers: &mut [Answer],
    keys: &[SortKey],
    columns: &[(u32, i16)],
) -> Result<Vec<Bytes>, String> {
    let mut orders = Vec::with_capacity(keys.len());
    for k in keys {
        let (oid, format) = columns.get(k.column).copied().unwrap_or((0, 0));
        orders.push(order_of(oid, format).ok_or_else(|| {
            format!(
                "ORDER BY a column of type OID {oid} over several shards is not supported yet: \
                 add the full sharding key to the WHERE clause, or order by a number, text, \
                 date or timestamp column"
            )
        })?);
    }
    let mut rows: Vec<Bytes> = answers.iter_mut().flat_map(|a| a.rows.drain(..)).collect();
    let mut bad = None;
    // A stable sort of the concatenation equals a merge of the shards' sorted runs.
    rows.sort_by(|a, b| {
        let (va, vb) = (values(a), values(b));
        for (k, o) in keys.iter().zip(&orders) {
            let (x, y) = (
                va.get(k.column).copied().flatten(),
                vb.get(k.column).copied().flatten(),
            );
            let ord = match (x, y) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => {
                    if k.nulls_first {
                        Ordering::Less
                    } else {
                        Ordering::Greater
                    }
                }
                (Some(_), None) => {
                    if k.nulls_first {
                        Ordering::Greater
                    } else {
                        Ordering::Less
                    }
                }
                (Some(x), Some(y)) => {
                    let c = compare(*o, x, y).unwrap_or_else(|e| {
                        bad.get_or_insert(e);
                        Ordering::Equal
                    });
                    if k.descending {
                        c.reverse()
                    } else {
                        c
                    }
                }
            };
            if ord != Ordering::Equal {
                return ord;
            }
        }
        Ordering::Equal
    });
    match bad {
        Some(e) => Err(e),
        None => Ok(rows),
    }
}

fn compare(o: Order, x: &[u8], y: &[u8]) -> Result<Ordering, String> {
    fn text(b: &[u8]) -> Result<&str, String> {
        std::str::from_utf8(b).map_err(|_| "a sort value is not text".to_string())
    }
    Ok(match o {
        Order::Bytes => x.cmp(y),
        Order::BinaryInteger => {
            let p = |b: &[u8]| -> Result<i64, String> {
                Ok(match b.len() {
                    2 => i64::from(i16::from_be_bytes([b[0], b[1]])),
                    4 => i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                    8 => i64::from_be_bytes(b.try_into().map_err(|_| "bad integer")?),
                    n => return Err(format!("a binary integer of {n} bytes")),
                })
            };
            p(x)?.cmp(&p(y)?)
        }
        Order::BinaryFloat => {
            let p = |b: &[u8]| -> Result<f64, String> {
                Ok(match b.len() {
                    4 => f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                    8 => f64::from_be_bytes(b.try_into().map_err(|_| "bad float")?),
                    n => return Err(format!("a binary float of {n} bytes")),
                })
            };
            float_order(p(x)?, p(y)?)
        }
        Order::Integer => {
            let p = |b: &[u8]| text(b)?.parse::<i64>().map_err(|e| e.to_string());
            p(x)?.cmp(&p(y)?)
        }
        Order::Float => {
            // PostgreSQL sorts NaN above every other value.
            let p = |b: &[u8]| -> Result<f64, String> {
                match text(b)? {
                    "NaN" => Ok(f64::NAN),
                    "Infinity" => Ok(f64::INFINITY),
                    "-Infinity" => Ok(f64::NEG_INFINITY),
                    s => s.parse::<f64>().map_err(|e| e.to_string()),
                }
            };
            float_order(p(x)?, p(y)?)
        }
        Order::Numeric => compare_numeric(text(x)?, text(y)?),
    })
}

/// PostgreSQL's float order: NaN above every other value, equal to itself.
fn float_order(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Orders numeric output text exactly: `-Infinity` < numbers < `Infinity` < `NaN`.
fn compare_numeric(a: &str, b: &str) -> Ordering {
    fn rank(s: &str) -> i8 {
        match s {
            "-Infinity" => 0,
            "Infinity" => 2,
            "NaN" => 3,
            _ => 1,
        }
    }
    let (ra, rb) = (rank(a), rank(b));
    if ra != 1 || rb != 1 {
        return ra.cmp(&rb);
    }
    let neg = |s: &str| s.starts_with('-');
    let magnitude = |s: &str| {
        let s = s.trim_start_matches(['-', '+']);
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let int = int.trim_start_matches('0').to_string();
        let frac = frac.trim_end_matches('0').to_string();
        (int, frac)
    };
    let (ia, fa) = magnitude(a);
    let (ib, fb) = magnitude(b);
    let zero = |i: &str, f: &str| i.is_empty() && f.is_empty();
    let (na, nb) = (neg(a) && !zero(&ia, &fa), neg(b) && !zero(&ib, &fb));
    let mag = ia
        .len()
        .cmp(&ib.len())
        .then_with(|| ia.cmp(&ib))
        .then_with(|| fa.cmp(&fb));
    match (na, nb) {
        (false, false) => mag,
        (true, true) => mag.reverse(),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
    }
}

#[cfg(test)]
mod tests {
    use super::compare_numeric;
    use std::cmp::Ordering::*;

    #[test]
    fn numeric_text_orders_exactly() {
        let cases = [
            ("1", "2", Less),
            ("10", "9", Greater),
            ("-10", "-9", Less),
            ("1.50", "1.5", Equal),
            ("0.001", "0.01", Less),
            ("-0", "0", Equal),
            ("-1", "0.5", Less),
            ("NaN", "Infinity", Greater),
            ("-Infinity", "-1e9", Less),
            (
                "123456789012345678901234567890",
                "123456789012345678901234567889",
                Greater,
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_numeric(a, b), want, "{a} vs {b}");
        }
    }
}
