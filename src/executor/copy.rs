//! COPY FROM STDIN into a sharded table, the parts without I/O: the options as PostgreSQL reads
//! them (`format`), the client's byte stream cut into rows (rows may span CopyData messages, and CSV rows
//! may hold newlines inside quotes; the binary format's tuples are cut in `binary`), and each
//! row's sharding-key fields decoded as PostgreSQL's COPY would decode them, so the row can be
//! placed before it is sent on, unchanged.

use std::borrow::Cow;
use std::sync::Arc;

use tokio_postgres::error::SqlState;

use crate::client_error::ClientError;

use crate::catalog::{ShardId, Snapshot, TableId};
use crate::router::hash::KeyValue;
use crate::router::place::{self, PlaceError};

mod binary;
pub mod copy_in;
pub mod copy_out;
mod format;
pub mod shards;

pub use binary::{BinaryError, BinarySplitter};
pub use format::{CopyFormat, Forced, Header};

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum CopyError {
    #[error("{0}")]
    BadOption(String),
    #[error("COPY {table}, line {line}: missing data for column \"{column}\"")]
    MissingData {
        table: String,
        line: u64,
        column: String,
    },
    #[error("COPY {table}, line {line}: unterminated CSV quoted field")]
    UnterminatedCsv { table: String, line: u64 },
    #[error(transparent)]
    Binary(#[from] BinaryError),
    #[error("COPY {table}, line {line}, column {column}: the value is not valid UTF-8")]
    NotUtf8 {
        table: String,
        line: u64,
        column: String,
    },
    #[error("COPY {table}, line {line}, column {column}: {source}")]
    Place {
        table: String,
        line: u64,
        column: String,
        source: PlaceError,
    },
    /// The table has columns COPY skips (generated columns), so the key's position in a row
    /// cannot be read from the table's column order.
    #[error(
        "COPY into \"{table}\" without a column list: the table has columns COPY does not read \
         (generated columns); name the columns, e.g. COPY {table} (a, b, …) FROM STDIN"
    )]
    ColumnCount { table: String },
    #[error("no connection to the shard for the COPY")]
    NoConnection,
    /// A shard refused the BEGIN that holds its part of the COPY (the shard's text).
    #[error("{0}")]
    Begin(String),
    #[error("the shard did not start the COPY")]
    NotStarted,
}

/// Cuts a stream of COPY data into rows. A row ends at a newline that is not escaped by a
/// backslash (text) or inside quotes (CSV); the row is passed on with its line ending.
#[derive(Debug)]
pub struct RowSplitter {
    csv: bool,
    quote: u8,
    escape: u8,
    /// The start of a row whose end has not arrived yet.
    carry: Vec<u8>,
    in_quote: bool,
    /// The previous byte escapes this one.
    escaped: bool,
}

impl RowSplitter {
    pub fn new(format: &CopyFormat) -> RowSplitter {
        RowSplitter {
            csv: format.csv,
            quote: format.quote,
            escape: format.escape,
            carry: Vec::new(),
            in_quote: false,
            escaped: false,
        }
    }

    /// Where the current row ends in `data` (the index just past its newline), carrying the
    /// quoting state over from earlier data.
    fn row_end(&mut self, data: &[u8]) -> Option<usize> {
        for (i, &c) in data.iter().enumerate() {
            if self.escaped {
                self.escaped = false;
                continue;
            }
            if self.csv {
                if self.in_quote {
                    // An escape different from the quote escapes the byte after it; when they
                    // are the same byte, a doubled quote leaves and re-enters the quotes,
                    // which comes to the same thing.
                    if c == self.escape && self.escape != self.quote {
                        self.escaped = true;
                    } else if c == self.quote {
                        self.in_quote = false;
                    }
                    continue;
                }
                if c == self.quote {
                    self.in_quote = true;
                    continue;
                }
            } else if c == b'\\' {
                self.escaped = true;
                continue;
            }
            if c == b'\n' {
                return Some(i + 1);
            }
        }
        None
    }

    /// Calls `row` with each row that `data` completes. Rows lying wholly in `data` are passed
    /// where they lie; only a row cut by the end of `data` is copied, to wait for its end.
    pub fn feed<E>(
        &mut self,
        mut data: &[u8],
        mut row: impl FnMut(&[u8]) -> Result<(), E>,
    ) -> Result<(), E> {
        if !self.carry.is_empty() {
            match self.row_end(data) {
                Some(end) => {
                    self.carry.extend_from_slice(&data[..end]);
                    data = &data[end..];
                    let whole = std::mem::take(&mut self.carry);
                    let r = row(&whole);
                    self.carry = whole;
                    self.carry.clear();
                    r?;
                }
                None => {
                    self.carry.extend_from_slice(data);
                    return Ok(());
                }
            }
        }
        while !data.is_empty() {
            match self.row_end(data) {
                Some(end) => {
                    row(&data[..end])?;
                    data = &data[end..];
                }
                None => {
                    self.carry.extend_from_slice(data);
                    break;
                }
            }
        }
        Ok(())
    }

    /// At the end of the data: the last row when it has no newline, and whether a CSV quoted
    /// field was left open.
    pub fn finish(&mut self) -> (Option<Vec<u8>>, bool) {
        let last = (!self.carry.is_empty()).then(|| std::mem::take(&mut self.carry));
        (last, self.csv && self.in_quote)
    }
}

/// Cuts a COPY's data into rows by its format.
#[derive(Debug)]
pub enum Splitter {
    Rows(RowSplitter),
    Binary(BinarySplitter),
}

impl Splitter {
    pub fn new(format: &CopyFormat) -> Splitter {
        if format.binary {
            Splitter::Binary(BinarySplitter::default())
        } else {
            Splitter::Rows(RowSplitter::new(format))
        }
    }

    /// Calls `row` with each row that `data` completes: a text or CSV row with its line
    /// ending, or the binary header and then each binary tuple.
    pub fn feed(
        &mut self,
        data: &[u8],
        row: impl FnMut(&[u8]) -> Result<(), CopyError>,
    ) -> Result<(), CopyError> {
        match self {
            Splitter::Rows(s) => s.feed(data, row),
            Splitter::Binary(s) => s.feed(data, row),
        }
    }

    /// At the end of the data: the last text row when it has no newline, or why the data
    /// cannot end here (`table` and `line` name where, for messages).
    pub fn finish(&mut self, table: &str, line: u64) -> Result<Option<Vec<u8>>, CopyError> {
        match self {
            Splitter::Rows(s) => match s.finish() {
                (_, true) => Err(CopyError::UnterminatedCsv {
                    table: table.to_string(),
                    line,
                }),
                (last, false) => Ok(last),
            },
            Splitter::Binary(s) => match s.finish() {
                true => Err(BinaryError::UnexpectedEof.into()),
                false => Ok(None),
            },
        }
    }
}

/// A row without its line ending (`\n` or `\r\n`).
pub fn line_content(row: &[u8]) -> &[u8] {
    let row = row.strip_suffix(b"\n").unwrap_or(row);
    row.strip_suffix(b"\r").unwrap_or(row)
}

/// Whether the row is the end-of-data marker `\.`, after which PostgreSQL reads nothing.
pub fn is_end_marker(row: &[u8]) -> bool {
    line_content(row) == b"\\."
}

/// One field of a row, decoded.
#[derive(Debug, PartialEq, Eq)]
pub enum Field<'a> {
    Null,
    Value(Cow<'a, [u8]>),
}

/// The fields of a text-format row up to index `upto` (inclusive), raw (still escaped).
fn text_fields(line: &[u8], delimiter: u8, upto: usize) -> Vec<&[u8]> {
    let mut fields = Vec::with_capacity(upto + 1);
    let mut start = 0;
    let mut i = 0;
    while i < line.len() && fields.len() <= upto {
        match line[i] {
            b'\\' => i += 2,
            c if c == delimiter => {
                fields.push(&line[start..i]);
                i += 1;
                start = i;
            }
            _ => i += 1,
        }
    }
    if fields.len() <= upto {
        fields.push(&line[start.min(line.len())..]);
    }
    fields
}

/// A text-format field's value, its backslash escapes resolved as COPY resolves them.
pub fn text_unescape(raw: &[u8]) -> Cow<'_, [u8]> {
    if !raw.contains(&b'\\') {
        return Cow::Borrowed(raw);
    }
    let mut out = Vec::with_capacity(raw.len());
    let mut i = 0;
    while i < raw.len() {
        let c = raw[i];
        i += 1;
        if c != b'\\' || i == raw.len() {
            out.push(c);
            continue;
        }
        let e = raw[i];
        i += 1;
        match e {
            b'0'..=b'7' => {
                let mut v = u32::from(e - b'0');
                for _ in 0..2 {
                    match raw.get(i) {
                        Some(d @ b'0'..=b'7') => {
                            v = v * 8 + u32::from(d - b'0');
                            i += 1;
                        }
                        _ => break,
                    }
                }
                out.push((v & 0xff) as u8);
            }
            b'x' => {
                let hex = |b: Option<&u8>| b.and_then(|b| (*b as char).to_digit(16));
                match hex(raw.get(i)) {
                    Some(h) => {
                        i += 1;
                        let mut v = h;
                        if let Some(l) = hex(raw.get(i)) {
                            v = v * 16 + l;
                            i += 1;
                        }
                        out.push(v as u8);
                    }
                    None => out.push(b'x'),
                }
            }
            b'b' => out.push(8),
            b'f' => out.push(12),
            b'n' => out.push(b'\n'),
            b'r' => out.push(b'\r'),
            b't' => out.push(b'\t'),
            b'v' => out.push(11),
            other => out.push(other),
        }
    }
    Cow::Owned(out)
}

/// One CSV field as read: its value with quotes and escapes resolved, and whether any part of
/// it was quoted (a quoted field never matches the NULL string unless FORCE_NULL says so).
#[derive(Debug, PartialEq, Eq)]
pub struct CsvField<'a> {
    pub value: Cow<'a, [u8]>,
    pub quoted: bool,
}

/// A CSV quoted field that is not closed.
#[derive(Debug, PartialEq, Eq)]
pub struct OpenQuote;

/// The fields of a CSV row (without its line ending) up to index `upto` (inclusive).
pub fn csv_fields<'a>(
    line: &'a [u8],
    format: &CopyFormat,
    upto: usize,
) -> Result<Vec<CsvField<'a>>, OpenQuote> {
    let (delimiter, quote, escape) = (format.delimiter, format.quote, format.escape);
    let mut fields = Vec::with_capacity(upto + 1);
    let mut i = 0;
    loop {
        let start = i;
        let mut quoted = false;
        // Borrowed while the field has no quotes; copied as soon as it has.
        let mut owned: Option<Vec<u8>> = None;
        let mut end = i;
        while let Some(&c) = line.get(i) {
            if c == delimiter {
                break;
            }
            if c == quote {
                quoted = true;
                let buf = owned.get_or_insert_with(|| line[start..i].to_vec());
                i += 1;
                loop {
                    let Some(&q) = line.get(i) else {
                        return Err(OpenQuote);
                    };
                    if q == escape
                        && matches!(line.get(i + 1), Some(&n) if n == quote || n == escape)
                    {
                        buf.push(line[i + 1]);
                        i += 2;
                    } else if q == quote {
                        i += 1;
                        break;
                    } else {
                        buf.push(q);
                        i += 1;
                    }
                }
                continue;
            }
            if let Some(buf) = owned.as_mut() {
                buf.push(c);
            }
            i += 1;
            end = i;
        }
        let value = match owned {
            Some(v) => Cow::Owned(v),
            None => Cow::Borrowed(&line[start..end.max(start)]),
        };
        fields.push(CsvField { value, quoted });
        if fields.len() > upto || i >= line.len() {
            return Ok(fields);
        }
        // Past the delimiter.
        i += 1;
        if i == line.len() {
            fields.push(CsvField {
                value: Cow::Borrowed(&[]),
                quoted: false,
            });
            return Ok(fields);
        }
    }
}

/// What one row of the client's data is to a COPY FROM.
#[derive(Debug, PartialEq, Eq)]
pub enum Taken {
    /// A row no shard is sent: a skipped header line, the end marker `\.` or what follows it.
    Skipped,
    /// A header every shard's COPY must see first (HEADER MATCH, the binary format's header).
    Header,
    /// A row for this shard.
    Row(ShardId),
}

/// Reads the rows of one COPY FROM in order, as PostgreSQL's COPY does: a header first, when
/// there is one; nothing after the end marker `\.`; every other row placed on its shard.
pub struct RowReader {
    router: RowRouter,
    header: Header,
    header_seen: bool,
    ended: bool,
    /// Rows read so far, the header included, for messages.
    line: u64,
}

impl RowReader {
    pub fn new(router: RowRouter) -> RowReader {
        let header = match router.format.binary {
            true => Header::Match,
            false => router.format.header,
        };
        RowReader {
            router,
            header,
            header_seen: false,
            ended: false,
            line: 0,
        }
    }

    pub fn take(&mut self, row: &[u8]) -> Result<Taken, CopyError> {
        self.line += 1;
        if self.ended {
            return Ok(Taken::Skipped);
        }
        if self.header != Header::None && !self.header_seen {
            self.header_seen = true;
            return Ok(match self.header {
                Header::Match => Taken::Header,
                Header::Skip | Header::None => Taken::Skipped,
            });
        }
        // A binary tuple is never the end marker: its field count alone would ask for more.
        if !self.router.format.binary && is_end_marker(row) {
            self.ended = true;
            return Ok(Taken::Skipped);
        }
        self.router.shard_of(row, self.line).map(Taken::Row)
    }

    /// Whether the end marker came: the rest of the data is not read.
    pub fn ended(&self) -> bool {
        self.ended
    }

    /// The line number of the next row, for messages.
    pub fn next_line(&self) -> u64 {
        self.line + 1
    }
}

/// Where each row of one COPY FROM goes: the table, the positions of its sharding-key columns
/// in the rows, and the format to read them in.
pub struct RowRouter {
    snapshot: Arc<Snapshot>,
    table: TableId,
    table_name: String,
    format: CopyFormat,
    /// Per key column (the root's key order, then the partition-set key): its position in a
    /// row, its name, and whether FORCE_NULL / FORCE_NOT_NULL name it.
    keys: Vec<KeyField>,
    /// How many of `keys` are the sharding key; the rest are the partition-set key.
    root_key: usize,
    upto: usize,
}

struct KeyField {
    position: usize,
    name: String,
    force_null: bool,
    force_not_null: bool,
}

impl RowRouter {
    /// `columns`: the names of a row's fields in order. `key_positions`: where in them each
    /// sharding-key column is (then each partition-set column); `root_key`: how many of those
    /// are the sharding key.
    pub fn new(
        snapshot: Arc<Snapshot>,
        table: TableId,
        format: CopyFormat,
        columns: &[String],
        key_positions: &[usize],
        root_key: usize,
    ) -> RowRouter {
        let table_name = snapshot
            .table(table)
            .map(|t| t.name.clone())
            .unwrap_or_default();
        let keys: Vec<KeyField> = key_positions
            .iter()
            .map(|&p| {
                let name = columns.get(p).cloned().unwrap_or_default();
                KeyField {
                    position: p,
                    force_null: format.csv && format.force_null.covers(&name),
                    force_not_null: format.csv && format.force_not_null.covers(&name),
                    name,
                }
            })
            .collect();
        let upto = keys.iter().map(|k| k.position).max().unwrap_or(0);
        RowRouter {
            snapshot,
            table,
            table_name,
            format,
            keys,
            root_key,
            upto,
        }
    }

    /// The sharding-key fields of `row` (a whole row with its line ending), decoded; `line`
    /// is its line number in the client's data, for messages.
    pub fn key_fields<'r>(&self, row: &'r [u8], line: u64) -> Result<Vec<Field<'r>>, CopyError> {
        let content = line_content(row);
        let missing = |k: &KeyField| CopyError::MissingData {
            table: self.table_name.clone(),
            line,
            column: k.name.clone(),
        };
        let mut out = Vec::with_capacity(self.keys.len());
        if self.format.binary {
            let fields = binary::fields(row, self.upto);
            for k in &self.keys {
                let field = *fields.get(k.position).ok_or_else(|| missing(k))?;
                out.push(field.map_or(Field::Null, |v| Field::Value(Cow::Borrowed(v))));
            }
        } else if self.format.csv {
            let mut fields = csv_fields(content, &self.format, self.upto).map_err(|OpenQuote| {
                CopyError::UnterminatedCsv {
                    table: self.table_name.clone(),
                    line,
                }
            })?;
            for k in &self.keys {
                let f = fields.get_mut(k.position).ok_or_else(|| missing(k))?;
                let matches_null = *f.value == *self.format.null;
                let null = matches_null
                    && ((!f.quoted && !k.force_not_null) || (f.quoted && k.force_null));
                out.push(if null {
                    Field::Null
                } else {
                    Field::Value(std::mem::take(&mut f.value))
                });
            }
        } else {
            let fields = text_fields(content, self.format.delimiter, self.upto);
            for k in &self.keys {
                let raw = *fields.get(k.position).ok_or_else(|| missing(k))?;
                out.push(if raw == self.format.null.as_slice() {
                    Field::Null
                } else {
                    Field::Value(text_unescape(raw))
                });
            }
        }
        Ok(out)
    }

    /// The shard that takes `row`.
    pub fn shard_of(&self, row: &[u8], line: u64) -> Result<ShardId, CopyError> {
        // The binary header counts among the lines; PostgreSQL numbers binary tuples from 1.
        let line = if self.format.binary {
            line.saturating_sub(1)
        } else {
            line
        };
        let fields = self.key_fields(row, line)?;
        let mut values = Vec::with_capacity(fields.len());
        for (f, k) in fields.iter().zip(&self.keys) {
            values.push(match f {
                Field::Null => KeyValue::Null,
                // A binary field is the column type's `*send` encoding, as a binary parameter.
                Field::Value(v) if self.format.binary => KeyValue::Binary(v),
                Field::Value(v) => {
                    KeyValue::Text(std::str::from_utf8(v).map_err(|_| CopyError::NotUtf8 {
                        table: self.table_name.clone(),
                        line,
                        column: k.name.clone(),
                    })?)
                }
            });
        }
        let Some(table) = self.snapshot.table(self.table) else {
            return Ok(ShardId(0));
        };
        let (key, set_key) = values.split_at(self.root_key.min(values.len()));
        place::shard_for(&self.snapshot, table, key, set_key).map_err(|source| {
            // The column PostgreSQL would name: the first key column, as the value that failed
            // cannot be told apart here.
            CopyError::Place {
                table: self.table_name.clone(),
                line,
                column: self
                    .keys
                    .first()
                    .map(|k| k.name.clone())
                    .unwrap_or_default(),
                source,
            }
        })
    }
}

impl ClientError for CopyError {
    fn sqlstate(&self) -> SqlState {
        use CopyError as C;
        match self {
            C::BadOption(_) => SqlState::INVALID_PARAMETER_VALUE,
            C::MissingData { .. } | C::UnterminatedCsv { .. } | C::Binary(_) => {
                SqlState::BAD_COPY_FILE_FORMAT
            }
            C::NotUtf8 { .. } => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            C::Place { source, .. } => source.sqlstate(),
            C::ColumnCount { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            C::NoConnection | C::Begin(_) => SqlState::CONNECTION_FAILURE,
            C::NotStarted => SqlState::PROTOCOL_VIOLATION,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

#[cfg(test)]
mod tests;
