//! PostgreSQL-compatible hash partitioning: which `PARTITION BY HASH` partition PostgreSQL puts
//! a row in, computed locally so the router can send a statement straight to the chunk (and so
//! the shard) that holds its sharding key.
//!
//! The rule (PostgreSQL's `compute_partition_hash_value`): start from 0; for each key column in
//! order, skip NULLs, hash the value with its type's extended hash function seeded with
//! [`HASH_PARTITION_SEED`], and fold it in with `hash_combine64`. The row's partition is the
//! hash modulo the modulus.
//!
//! The column's declared type decides the hash, never the type of the literal: 42 in a numeric
//! column hashes as numeric. Values arrive as the router sees them: SQL literal text or Bind
//! parameters in text or binary format; they are parsed the way PostgreSQL 15's input functions
//! parse them, including the column typmod's rounding (`numeric(10,2)`, `timestamp(0)`).

mod datetime;
mod jenkins;
mod numeric;
mod scalar;

impl ClientError for HashError {
    fn sqlstate(&self) -> SqlState {
        use crate::model::KeyTypeError;
        use HashError as H;
        match self {
            H::KeyType(KeyTypeError::UnsupportedType { .. })
            | H::KeyType(KeyTypeError::InvalidTypeModifier { .. }) => {
                SqlState::FEATURE_NOT_SUPPORTED
            }
            H::InvalidInput { .. } => SqlState::INVALID_TEXT_REPRESENTATION,
            H::OutOfRange { .. } | H::NumericFieldOverflow { .. } => {
                SqlState::NUMERIC_VALUE_OUT_OF_RANGE
            }
            H::ValueTooLong { .. } => SqlState::STRING_DATA_RIGHT_TRUNCATION,
            H::InvalidBinary { .. } | H::BinaryLength { .. } => {
                SqlState::INVALID_BINARY_REPRESENTATION
            }
            H::AmbiguousTimeZone { .. } | H::NeedsServer { .. } => SqlState::FEATURE_NOT_SUPPORTED,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

#[cfg(test)]
mod tests;

use std::borrow::Cow;

use tokio_postgres::error::SqlState;

use crate::client_error::ClientError;

pub use jenkins::HASH_PARTITION_SEED;
pub use numeric::NumericKey;

pub use crate::model::{KeyType, KeyTypeError, NumericTypmod};

/// One sharding-key value as the router received it.
#[derive(Debug, Clone, Copy, PartialEq)]
pub enum KeyValue<'a> {
    Null,
    /// PostgreSQL text input: an SQL literal's content or a text-format Bind parameter.
    Text(&'a str),
    /// A binary-format Bind parameter, encoded as the column type's `*send` function does.
    Binary(&'a [u8]),
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum HashError {
    #[error(transparent)]
    KeyType(#[from] KeyTypeError),
    #[error("invalid input syntax for type {ty}: \"{input}\"; write it as PostgreSQL accepts it")]
    InvalidInput { ty: KeyType, input: String },
    #[error("value \"{input}\" is out of range for type {ty}; use a value the column can hold")]
    OutOfRange { ty: KeyType, input: String },
    #[error(
        "numeric field overflow: \"{input}\" does not fit numeric({precision},{scale}); use a value \
         with at most {} digits before the decimal point",
        precision - scale
    )]
    NumericFieldOverflow {
        input: String,
        precision: i32,
        scale: i32,
    },
    #[error("value too long for type {ty}: \"{input}\"; shorten it")]
    ValueTooLong { ty: KeyType, input: String },
    #[error(
        "invalid binary value for type {ty}: {reason}; send the parameter in the column's type"
    )]
    InvalidBinary { ty: KeyType, reason: &'static str },
    #[error(
        "binary value for type {ty} must be {expected} bytes, got {got}; declare the parameter \
         with the column's type"
    )]
    BinaryLength {
        ty: KeyType,
        expected: usize,
        got: usize,
    },
    #[error(
        "timestamp with time zone \"{input}\" has no UTC offset, so its instant depends on the \
         session TimeZone; add an offset such as +00, +05:30 or Z"
    )]
    AmbiguousTimeZone { input: String },
    #[error("cannot hash {ty} value \"{input}\" locally: {reason}; ask the server")]
    NeedsServer {
        ty: KeyType,
        input: String,
        reason: &'static str,
    },
}

impl HashError {
    /// The value is valid PostgreSQL input whose meaning depends on the session or clock (the
    /// router should let PostgreSQL evaluate it); any other error PostgreSQL would raise too.
    pub fn needs_server(&self) -> bool {
        matches!(
            self,
            HashError::AmbiguousTimeZone { .. } | HashError::NeedsServer { .. }
        )
    }
}

/// A decoded value, reduced to what its type's hash function looks at.
enum Datum<'a> {
    /// int2/int4/int8, date, timestamp(tz), bool and "char": PostgreSQL's int8 hash agrees with
    /// the int4 hash on every int4 value, so one hash covers them all.
    Int(i64),
    Float(f64),
    Numeric(numeric::Numeric),
    Bytes(Cow<'a, [u8]>),
}

fn fixed<const N: usize>(ty: KeyType, bytes: &[u8]) -> Result<[u8; N], HashError> {
    bytes.try_into().map_err(|_| HashError::BinaryLength {
        ty,
        expected: N,
        got: bytes.len(),
    })
}

/// Trailing spaces are insignificant in `char(n)`, so its hash skips them.
fn bpchar_bytes(s: &str) -> &[u8] {
    s.trim_end_matches(' ').as_bytes()
}

fn decode_text(ty: KeyType, s: &str) -> Result<Datum<'_>, HashError> {
    if s.contains('\0') {
        return Err(HashError::InvalidInput {
            ty,
            input: s.replace('\0', "\\0"),
        });
    }
    Ok(match ty {
        KeyType::Int2 | KeyType::Int4 | KeyType::Int8 => Datum::Int(scalar::parse_int(ty, s)?),
        KeyType::Numeric(typmod) => {
            let v = numeric::parse_text(s)?;
            Datum::Numeric(match typmod {
                Some(t) => numeric::apply_typmod(v, t, s)?,
                None => v,
            })
        }
        KeyType::Text => Datum::Bytes(Cow::Borrowed(s.as_bytes())),
        KeyType::Varchar(n) => {
            Datum::Bytes(Cow::Borrowed(scalar::fit_length(ty, s, n)?.as_bytes()))
        }
        KeyType::Bpchar(n) => {
            Datum::Bytes(Cow::Borrowed(bpchar_bytes(scalar::fit_length(ty, s, n)?)))
        }
        KeyType::Bytea => Datum::Bytes(Cow::Owned(scalar::parse_bytea(s)?)),
        KeyType::Bool => Datum::Int(i64::from(scalar::parse_bool(s)?)),
        KeyType::Char => Datum::Int(i64::from(scalar::parse_char(s))),
        KeyType::Date => Datum::Int(i64::from(datetime::parse_date(s)?)),
        KeyType::Timestamp(p) | KeyType::Timestamptz(p) => Datum::Int(
            datetime::round_to_precision(datetime::parse_timestamp(ty, s)?, p),
        ),
        KeyType::Uuid => Datum::Bytes(Cow::Owned(scalar::parse_uuid(s)?.to_vec())),
        KeyType::Float4 | KeyType::Float8 => Datum::Float(scalar::parse_float(ty, s)?),
    })
}

fn decode_binary(ty: KeyType, b: &[u8]) -> Result<Datum<'_>, HashError> {
    Ok(match ty {
        KeyType::Int2 => Datum::Int(i64::from(i16::from_be_bytes(fixed(ty, b)?))),
        KeyType::Int4 => Datum::Int(i64::from(i32::from_be_bytes(fixed(ty, b)?))),
        KeyType::Int8 => Datum::Int(i64::from_be_bytes(fixed(ty, b)?)),
        KeyType::Numeric(typmod) => {
            let v = numeric::parse_binary(b)?;
            Datum::Numeric(match typmod {
                Some(t) => numeric::apply_typmod(v, t, "<binary numeric>")?,
                None => v,
            })
        }
        KeyType::Text => Datum::Bytes(Cow::Borrowed(scalar::check_text(ty, b)?.as_bytes())),
        KeyType::Varchar(n) => {
            let s = scalar::fit_length(ty, scalar::check_text(ty, b)?, n)?;
            Datum::Bytes(Cow::Borrowed(s.as_bytes()))
        }
        KeyType::Bpchar(n) => {
            let s = scalar::fit_length(ty, scalar::check_text(ty, b)?, n)?;
            Datum::Bytes(Cow::Borrowed(bpchar_bytes(s)))
        }
        KeyType::Bytea => Datum::Bytes(Cow::Borrowed(b)),
        // boolrecv: any non-zero byte is true.
        KeyType::Bool => Datum::Int(i64::from(fixed::<1>(ty, b)?[0] != 0)),
        KeyType::Char => Datum::Int(i64::from(fixed::<1>(ty, b)?[0] as i8)),
        KeyType::Date => Datum::Int(i64::from(datetime::check_date(i32::from_be_bytes(fixed(
            ty, b,
        )?))?)),
        KeyType::Timestamp(p) | KeyType::Timestamptz(p) => {
            let ts = datetime::check_timestamp(ty, i64::from_be_bytes(fixed(ty, b)?))?;
            Datum::Int(datetime::round_to_precision(ts, p))
        }
        KeyType::Uuid => {
            fixed::<16>(ty, b)?;
            Datum::Bytes(Cow::Borrowed(b))
        }
        KeyType::Float4 => Datum::Float(f64::from(f32::from_be_bytes(fixed(ty, b)?))),
        KeyType::Float8 => Datum::Float(f64::from_be_bytes(fixed(ty, b)?)),
    })
}

/// The 64-bit hash PostgreSQL's hash-partitioning support function of `ty` gives `value` under
/// [`HASH_PARTITION_SEED`]; `None` for NULL, which partitioning skips.
pub fn hash_value(ty: KeyType, value: &KeyValue<'_>) -> Result<Option<u64>, HashError> {
    match plain_integer(ty, value) {
        Some(v) => Ok(Some(jenkins::hash_int8(v, HASH_PARTITION_SEED))),
        None => hash_decoded(ty, value),
    }
}

/// An integer key in its plainest spelling (digits with an optional minus, short enough that
/// it cannot overflow the type) or in binary of its type's width, read without the general
/// decoder: routing hashes one for nearly every statement, and the general path's code, large
/// for all the types it reads, would have to come into the cache each time. Every other
/// spelling, errors included, goes the general way.
#[inline]
fn plain_integer(ty: KeyType, value: &KeyValue<'_>) -> Option<i64> {
    let (max_digits, width) = match ty {
        KeyType::Int2 => (4, 2),
        KeyType::Int4 => (9, 4),
        KeyType::Int8 => (18, 8),
        _ => return None,
    };
    match *value {
        KeyValue::Text(s) => {
            let (negative, digits) = match s.as_bytes() {
                [b'-', rest @ ..] => (true, rest),
                all => (false, all),
            };
            if digits.is_empty() || digits.len() > max_digits {
                return None;
            }
            let mut v = 0i64;
            for &d in digits {
                let d = d.wrapping_sub(b'0');
                if d > 9 {
                    return None;
                }
                v = v * 10 + i64::from(d);
            }
            Some(if negative { -v } else { v })
        }
        KeyValue::Binary(b) if b.len() == width => Some(match *b {
            [h, l] => i64::from(i16::from_be_bytes([h, l])),
            [a, b, c, d] => i64::from(i32::from_be_bytes([a, b, c, d])),
            _ => i64::from_be_bytes(b.try_into().ok()?),
        }),
        KeyValue::Binary(_) | KeyValue::Null => None,
    }
}

#[inline(never)]
fn hash_decoded(ty: KeyType, value: &KeyValue<'_>) -> Result<Option<u64>, HashError> {
    let datum = match *value {
        KeyValue::Null => return Ok(None),
        KeyValue::Text(s) => decode_text(ty, s)?,
        KeyValue::Binary(b) => decode_binary(ty, b)?,
    };
    let seed = HASH_PARTITION_SEED;
    Ok(Some(match datum {
        Datum::Int(v) => jenkins::hash_int8(v, seed),
        Datum::Float(v) => jenkins::hash_float8(v, seed),
        Datum::Numeric(n) => numeric::hash(&n, seed),
        Datum::Bytes(b) => jenkins::hash_bytes_extended(&b, seed),
    }))
}

/// The row hash of a partition key, columns in key order.
pub fn partition_hash(columns: &[(KeyType, KeyValue<'_>)]) -> Result<u64, HashError> {
    columns.iter().try_fold(0u64, |row, (ty, value)| {
        Ok(match hash_value(*ty, value)? {
            Some(h) => jenkins::hash_combine64(row, h),
            None => row,
        })
    })
}

/// The partition (chunk) remainder of a row hash for `modulus` partitions.
///
/// # Panics
/// If `modulus` is 0; a table always has at least one partition.
pub fn remainder(hash: u64, modulus: u64) -> u64 {
    hash % modulus
}

/// PostgreSQL's `isspace` in the C locale, which its input functions use to trim values.
fn is_pg_space(c: char) -> bool {
    matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
}

/// A key value reduced to what list and range bounds compare: PostgreSQL's order for numbers,
/// dates and times, and byte equality for strings (their order depends on the collation).
#[derive(Debug, Clone, PartialEq)]
pub enum Comparable {
    Int(i64),
    Float(f64),
    Numeric(numeric::NumericKey),
    Bytes(Vec<u8>),
}

/// `value` as list and range bounds compare it; `None` for NULL.
pub fn comparable(ty: KeyType, value: &KeyValue<'_>) -> Result<Option<Comparable>, HashError> {
    let datum = match *value {
        KeyValue::Null => return Ok(None),
        KeyValue::Text(s) => decode_text(ty, s)?,
        KeyValue::Binary(b) => decode_binary(ty, b)?,
    };
    Ok(Some(match datum {
        Datum::Int(v) => Comparable::Int(v),
        Datum::Float(v) => Comparable::Float(v),
        Datum::Bytes(b) => Comparable::Bytes(b.into_owned()),
        Datum::Numeric(n) => {
            let negative = match *value {
                KeyValue::Text(s) => numeric::is_negative_text(s),
                KeyValue::Binary(b) => numeric::is_negative_binary(b),
                KeyValue::Null => false,
            };
            Comparable::Numeric(numeric::order_key(&n, negative))
        }
    }))
}

impl Comparable {
    /// The order of two values of one column type; `None` where the proxy cannot tell it
    /// (strings, whose order is the collation's).
    pub fn order(&self, other: &Comparable) -> Option<std::cmp::Ordering> {
        match (self, other) {
            (Comparable::Int(a), Comparable::Int(b)) => Some(a.cmp(b)),
            (Comparable::Float(a), Comparable::Float(b)) => a.partial_cmp(b),
            (Comparable::Numeric(a), Comparable::Numeric(b)) => Some(a.order(b)),
            _ => None,
        }
    }
}
