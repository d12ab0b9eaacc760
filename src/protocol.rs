//! Frames of the PostgreSQL protocol (1-byte type, 4-byte length including itself) and the few
//! messages the proxy composes itself. The data path moves frames as bytes; only what routing and
//! statement mapping need is ever looked at.

use bytes::{Buf, BufMut, Bytes, BytesMut};
use tokio_postgres::error::SqlState;

/// Longest frame accepted from either side: PostgreSQL's own limit for a message is 1 GB.
pub const MAX_FRAME_LEN: usize = 1 << 30;

/// One complete message: its type byte and the whole frame as received (type, length, body).
/// Owned (`Bytes`) where frames are kept, borrowed where they are looked at in the read buffer.
#[derive(Debug, Clone)]
pub struct Frame<B = Bytes> {
    pub tag: u8,
    pub raw: B,
}

impl<B: AsRef<[u8]>> Frame<B> {
    /// The message body, without type and length.
    pub fn body(&self) -> &[u8] {
        &self.raw.as_ref()[5..]
    }
}

impl<'a> Frame<&'a [u8]> {
    /// The frame at the front of `buf`, which holds exactly one complete frame.
    pub fn borrowed(buf: &'a [u8]) -> Self {
        Frame {
            tag: buf[0],
            raw: buf,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum FrameError {
    #[error("invalid message length {0}")]
    BadLength(usize),
    #[error(
        "invalid message length {len}: a message may be at most {max} bytes long \
         (limits.max_message_bytes)"
    )]
    TooLong { len: usize, max: usize },
    #[error("invalid frontend message type {0}")]
    UnknownType(u8),
    #[error("malformed {0} message")]
    Malformed(&'static str),
}

/// The length (type byte included) of the complete frame starting at `buf[0]`, if it is complete.
pub fn complete_frame_len(buf: &[u8]) -> Result<Option<usize>, FrameError> {
    frame_len_within(buf, MAX_FRAME_LEN)
}

/// As [`complete_frame_len`], refusing a frame longer than `max` as soon as its header is there.
pub fn frame_len_within(buf: &[u8], max: usize) -> Result<Option<usize>, FrameError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if len < 4 {
        return Err(FrameError::BadLength(len));
    }
    if len > max {
        return Err(FrameError::TooLong { len, max });
    }
    Ok((buf.len() > len).then_some(len + 1))
}

/// Whether a client may send a message of type `tag` once it has logged in.
pub fn is_frontend_tag(tag: u8) -> bool {
    matches!(
        tag,
        b'B' | b'C' | b'c' | b'd' | b'D' | b'E' | b'f' | b'F' | b'H' | b'P' | b'Q' | b'S' | b'X'
    )
}

/// Takes one complete frame off the front of `buf`, if there is one.
pub fn split_frame(buf: &mut BytesMut) -> Result<Option<Frame>, FrameError> {
    if buf.len() < 5 {
        return Ok(None);
    }
    let len = u32::from_be_bytes([buf[1], buf[2], buf[3], buf[4]]) as usize;
    if !(4..=MAX_FRAME_LEN).contains(&len) {
        return Err(FrameError::BadLength(len));
    }
    if buf.len() < len + 1 {
        buf.reserve(len + 1 - buf.len());
        return Ok(None);
    }
    let raw = buf.split_to(len + 1).freeze();
    Ok(Some(Frame { tag: raw[0], raw }))
}

/// Reads the NUL-terminated string at the front of `buf` and advances past it.
/// The SQLSTATE of an ErrorResponse or NoticeResponse body (its `C` field).
pub fn error_code(body: &[u8]) -> Option<&[u8]> {
    let mut b = body;
    while let Some((&field, rest)) = b.split_first() {
        if field == 0 {
            return None;
        }
        let end = rest.iter().position(|&c| c == 0)?;
        if field == b'C' {
            return Some(&rest[..end]);
        }
        b = &rest[end + 1..];
    }
    None
}

pub fn take_cstr<'a>(buf: &mut &'a [u8], what: &'static str) -> Result<&'a [u8], FrameError> {
    // Names are mostly empty (the unnamed statement and portal): no search for those.
    let end = if buf.first() == Some(&0) {
        0
    } else {
        memchr::memchr(0, buf).ok_or(FrameError::Malformed(what))?
    };
    let s = &buf[..end];
    *buf = &buf[end + 1..];
    Ok(s)
}

/// A frame under construction: type byte, length patched in by [`MessageBuilder::finish`].
pub struct MessageBuilder<'a> {
    out: &'a mut BytesMut,
    start: usize,
}

impl<'a> MessageBuilder<'a> {
    pub fn new(out: &'a mut BytesMut, tag: u8) -> Self {
        let start = out.len();
        out.put_u8(tag);
        out.put_u32(0);
        MessageBuilder { out, start }
    }
    pub fn cstr(&mut self, s: &[u8]) -> &mut Self {
        self.out.put_slice(s);
        self.out.put_u8(0);
        self
    }
    pub fn bytes(&mut self, b: &[u8]) -> &mut Self {
        self.out.put_slice(b);
        self
    }
    pub fn u8(&mut self, v: u8) -> &mut Self {
        self.out.put_u8(v);
        self
    }
    pub fn i16(&mut self, v: i16) -> &mut Self {
        self.out.put_i16(v);
        self
    }
    pub fn i32(&mut self, v: i32) -> &mut Self {
        self.out.put_i32(v);
        self
    }
    pub fn finish(&mut self) {
        let len = (self.out.len() - self.start - 1) as u32;
        self.out[self.start + 1..self.start + 5].copy_from_slice(&len.to_be_bytes());
    }
}

/// Severity of an ErrorResponse the proxy composes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Severity {
    Error,
    Fatal,
}

impl Severity {
    fn as_str(self) -> &'static str {
        match self {
            Severity::Error => "ERROR",
            Severity::Fatal => "FATAL",
        }
    }
}

pub fn error_response(out: &mut BytesMut, severity: Severity, code: &SqlState, message: &str) {
    error_response_at(out, severity, code, message, None);
}

/// An ErrorResponse that points at a 1-based character `position` of the statement, as
/// PostgreSQL's syntax errors do (psql draws its `^` under it).
pub fn error_response_at(
    out: &mut BytesMut,
    severity: Severity,
    code: &SqlState,
    message: &str,
    position: Option<u32>,
) {
    let mut m = MessageBuilder::new(out, b'E');
    m.u8(b'S').cstr(severity.as_str().as_bytes());
    m.u8(b'V').cstr(severity.as_str().as_bytes());
    m.u8(b'C').cstr(code.code().as_bytes());
    m.u8(b'M').cstr(message.as_bytes());
    if let Some(p) = position {
        m.u8(b'P').cstr(p.to_string().as_bytes());
    }
    m.u8(0);
    m.finish();
}

/// A RowDescription of one column computed by the statement (no table), of type `type_oid`
/// with length `type_len`, in text or binary.
pub fn one_column_description(name: &str, type_oid: i32, type_len: i16, binary: bool) -> Bytes {
    let mut out = BytesMut::new();
    MessageBuilder::new(&mut out, b'T')
        .i16(1)
        .cstr(name.as_bytes())
        .i32(0)
        .i16(0)
        .i32(type_oid)
        .i16(type_len)
        .i32(-1)
        .i16(i16::from(binary))
        .finish();
    out.freeze()
}

/// A transaction status, as ReadyForQuery reports it.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
#[repr(u8)]
pub enum TxStatus {
    /// Not in a transaction block.
    #[default]
    Idle = b'I',
    /// In a transaction block.
    InBlock = b'T',
    /// In a failed transaction block: statements are refused until it ends.
    Failed = b'E',
}

impl TxStatus {
    /// The status a ReadyForQuery's body reports (PostgreSQL sends only these three; anything
    /// else reads as idle, as a body without one does).
    pub fn of_ready(body: &[u8]) -> TxStatus {
        match body.first() {
            Some(b'T') => TxStatus::InBlock,
            Some(b'E') => TxStatus::Failed,
            _ => TxStatus::Idle,
        }
    }

    /// The status of several shards' parts of one transaction as one PostgreSQL would report
    /// it: failed if any part failed, else in a block if any part is.
    pub fn combined(statuses: impl IntoIterator<Item = TxStatus>) -> TxStatus {
        statuses.into_iter().fold(TxStatus::Idle, TxStatus::max)
    }

    /// `self` or `other`, whichever is further along Idle → InBlock → Failed.
    fn max(self, other: TxStatus) -> TxStatus {
        match (self, other) {
            (TxStatus::Failed, _) | (_, TxStatus::Failed) => TxStatus::Failed,
            (TxStatus::InBlock, _) | (_, TxStatus::InBlock) => TxStatus::InBlock,
            (TxStatus::Idle, TxStatus::Idle) => TxStatus::Idle,
        }
    }

    pub fn in_block(self) -> bool {
        self != TxStatus::Idle
    }
}

pub fn ready_for_query(out: &mut BytesMut, status: TxStatus) {
    MessageBuilder::new(out, b'Z').u8(status as u8).finish();
}

pub fn parameter_status(out: &mut BytesMut, name: &str, value: &str) {
    MessageBuilder::new(out, b'S')
        .cstr(name.as_bytes())
        .cstr(value.as_bytes())
        .finish();
}

pub fn backend_key_data(out: &mut BytesMut, pid: i32, secret: i32) {
    MessageBuilder::new(out, b'K').i32(pid).i32(secret).finish();
}

pub fn authentication_ok(out: &mut BytesMut) {
    MessageBuilder::new(out, b'R').i32(0).finish();
}

/// ParseComplete, BindComplete, CloseComplete, NoData … : a type byte and an empty body.
pub fn empty_message(tag: u8) -> Bytes {
    // From a table of every tag, so the proxy's own ParseComplete for each held Parse (one per
    // routed extended-protocol statement) costs no allocation.
    static EMPTY_MESSAGES: [[u8; 5]; 256] = {
        let mut all = [[0, 0, 0, 0, 4]; 256];
        let mut tag = 0;
        while tag < 256 {
            all[tag][0] = tag as u8;
            tag += 1;
        }
        all
    };
    Bytes::from_static(&EMPTY_MESSAGES[tag as usize])
}

/// The extended-protocol messages the proxy sends a shard, appended to one buffer. Statement
/// names are given ("" for the unnamed statement); the portal is always the unnamed one.
pub struct Extended<'a>(&'a mut BytesMut);

/// A Parse's tail that declares no parameter types.
pub const NO_PARAM_TYPES: &[u8] = &[0, 0];
/// A Bind's tail with no parameters and no result formats (all results in text).
pub const BIND_NOTHING: &[u8] = &[0, 0, 0, 0, 0, 0];

impl<'a> Extended<'a> {
    pub fn new(out: &'a mut BytesMut) -> Extended<'a> {
        Extended(out)
    }

    /// Parse of `sql` as `statement`; `param_types` is the message's tail: a count, then that
    /// many type OIDs.
    pub fn parse(&mut self, statement: &[u8], sql: &[u8], param_types: &[u8]) -> &mut Self {
        MessageBuilder::new(self.0, b'P')
            .cstr(statement)
            .cstr(sql)
            .bytes(param_types)
            .finish();
        self
    }

    /// Parse, Bind and Execute of `sql` through the unnamed statement and portal, without
    /// parameters, results in text: a statement of the proxy's own ahead of a batch.
    pub fn unnamed(&mut self, sql: &[u8]) -> &mut Self {
        self.parse(b"", sql, NO_PARAM_TYPES)
            .bind(b"", BIND_NOTHING)
            .execute()
    }

    /// Bind of `statement` to the unnamed portal; `tail` is the message's tail: parameter
    /// formats, values and result formats as a Bind carries them.
    pub fn bind(&mut self, statement: &[u8], tail: &[u8]) -> &mut Self {
        MessageBuilder::new(self.0, b'B')
            .cstr(b"")
            .cstr(statement)
            .bytes(tail)
            .finish();
        self
    }

    /// Describe of the unnamed portal.
    pub fn describe_portal(&mut self) -> &mut Self {
        MessageBuilder::new(self.0, b'D')
            .u8(b'P')
            .cstr(b"")
            .finish();
        self
    }

    /// Execute of the unnamed portal, all its rows.
    pub fn execute(&mut self) -> &mut Self {
        MessageBuilder::new(self.0, b'E').cstr(b"").i32(0).finish();
        self
    }

    pub fn flush(&mut self) -> &mut Self {
        flush(self.0);
        self
    }

    pub fn sync(&mut self) -> &mut Self {
        MessageBuilder::new(self.0, b'S').finish();
        self
    }
}

/// Flush: the backend sends what it has buffered, mid-batch.
pub fn flush(out: &mut BytesMut) {
    MessageBuilder::new(out, b'H').finish();
}

pub fn query(out: &mut BytesMut, sql: &str) {
    MessageBuilder::new(out, b'Q').cstr(sql.as_bytes()).finish();
}

/// The fields of an ErrorResponse or NoticeResponse body, for logs and tests.
pub fn error_fields(body: &[u8]) -> Vec<(u8, String)> {
    let mut fields = Vec::new();
    let mut rest = body;
    while let Some((&code, tail)) = rest.split_first() {
        if code == 0 {
            break;
        }
        rest = tail;
        match take_cstr(&mut rest, "ErrorResponse") {
            Ok(v) => fields.push((code, String::from_utf8_lossy(v).into_owned())),
            Err(_) => break,
        }
    }
    fields
}

/// The message of an ErrorResponse frame (its `M` field).
pub fn error_message(frame: &[u8]) -> String {
    let fields = error_fields(frame.get(5..).unwrap_or_default());
    fields
        .into_iter()
        .find_map(|(code, text)| (code == b'M').then_some(text))
        .unwrap_or_default()
}

/// Reads a big-endian i32 from the front of `buf`.
pub fn take_i32(buf: &mut &[u8], what: &'static str) -> Result<i32, FrameError> {
    if buf.len() < 4 {
        return Err(FrameError::Malformed(what));
    }
    Ok(buf.get_i32())
}

/// Reads a big-endian i16 from the front of `buf`.
pub fn take_i16(buf: &mut &[u8], what: &'static str) -> Result<i16, FrameError> {
    if buf.len() < 2 {
        return Err(FrameError::Malformed(what));
    }
    Ok(buf.get_i16())
}

/// The PostgreSQL type of a column in a result set the proxy composes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ColumnType {
    Text,
    Int8,
    Bool,
}

impl ColumnType {
    fn oid_and_len(self) -> (i32, i16) {
        match self {
            ColumnType::Text => (25, -1),
            ColumnType::Int8 => (20, 8),
            ColumnType::Bool => (16, 1),
        }
    }
}

/// A result set in text format, as the proxy answers its own statements (SHOW SHARDS …).
#[derive(Debug, Clone, Default)]
pub struct ResultSet {
    pub columns: Vec<(String, ColumnType)>,
    pub rows: Vec<Vec<Option<String>>>,
}

impl ResultSet {
    pub fn new(columns: &[(&str, ColumnType)]) -> ResultSet {
        ResultSet {
            columns: columns.iter().map(|(n, t)| (n.to_string(), *t)).collect(),
            rows: Vec::new(),
        }
    }

    pub fn push(&mut self, row: Vec<Option<String>>) {
        debug_assert_eq!(row.len(), self.columns.len());
        self.rows.push(row);
    }

    /// RowDescription, DataRows and CommandComplete with `tag`.
    pub fn encode(&self, tag: &str, out: &mut BytesMut) {
        let mut m = MessageBuilder::new(out, b'T');
        m.i16(self.columns.len() as i16);
        for (name, ty) in &self.columns {
            let (oid, len) = ty.oid_and_len();
            m.cstr(name.as_bytes())
                .i32(0)
                .i16(0)
                .i32(oid)
                .i16(len)
                .i32(-1)
                .i16(0);
        }
        m.finish();
        for row in &self.rows {
            let mut m = MessageBuilder::new(out, b'D');
            m.i16(row.len() as i16);
            for v in row {
                match v {
                    Some(v) => m.i32(v.len() as i32).bytes(v.as_bytes()),
                    None => m.i32(-1),
                };
            }
            m.finish();
        }
        command_complete(out, tag);
    }
}

pub fn command_complete(out: &mut BytesMut, tag: &str) {
    MessageBuilder::new(out, b'C').cstr(tag.as_bytes()).finish();
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn frames_split_only_when_complete() {
        let mut out = BytesMut::new();
        query(&mut out, "select 1");
        ready_for_query(&mut out, TxStatus::Idle);
        let total = out.len();
        let mut partial = BytesMut::from(&out[..total - 2]);
        let f = split_frame(&mut partial).unwrap().unwrap();
        assert_eq!(f.tag, b'Q');
        assert_eq!(f.body(), b"select 1\0");
        assert!(split_frame(&mut partial).unwrap().is_none());
        partial.extend_from_slice(&out[total - 2..]);
        let z = split_frame(&mut partial).unwrap().unwrap();
        assert_eq!((z.tag, z.body()), (b'Z', &b"I"[..]));
    }

    #[test]
    fn bad_length_is_an_error() {
        let mut buf = BytesMut::from(&[b'Q', 0, 0, 0, 2][..]);
        assert!(matches!(
            split_frame(&mut buf),
            Err(FrameError::BadLength(2))
        ));
    }

    #[test]
    fn error_response_round_trips() {
        let mut out = BytesMut::new();
        error_response(&mut out, Severity::Fatal, &SqlState::INVALID_PASSWORD, "no");
        let f = split_frame(&mut out).unwrap().unwrap();
        let fields = error_fields(f.body());
        assert!(fields.contains(&(b'C', "28P01".into())));
        assert!(fields.contains(&(b'S', "FATAL".into())));
    }
}
