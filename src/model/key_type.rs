//! The sharding-key column types the router can hash, named as PostgreSQL names them. The DDL
//! rules check key types with the same reading the router hashes with, so it lives here, below
//! both.

use std::fmt;

/// A type name that is no sharding-key type.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum KeyTypeError {
    #[error(
        "sharding key type \"{name}\" is not supported: use smallint, integer, bigint, numeric, \
         text, varchar, char(n), bytea, boolean, \"char\", date, timestamp, timestamptz, uuid, \
         real or double precision"
    )]
    UnsupportedType { name: String },
    #[error("invalid type modifier in \"{name}\": {reason}")]
    InvalidTypeModifier { name: String, reason: &'static str },
}

/// A column typmod such as `numeric(10,2)`: assignment rounds to `scale` and rejects values with
/// more than `precision - scale` digits before the point.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub struct NumericTypmod {
    pub precision: i32,
    pub scale: i32,
}

/// A partition-key column's type, with the typmod where it changes the stored value
/// (numeric rounding, varchar/char length checks, timestamp precision).
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
pub enum KeyType {
    Int2,
    Int4,
    Int8,
    Numeric(Option<NumericTypmod>),
    Text,
    /// `varchar(n)`: at most n characters.
    Varchar(Option<u32>),
    /// `char(n)`; a bare `char`/`character` column is `char(1)`, `bpchar` is unbounded.
    Bpchar(Option<u32>),
    Bytea,
    Bool,
    /// The single-byte type `"char"`.
    Char,
    Date,
    /// `timestamp(p)`: fractional digits kept.
    Timestamp(Option<u8>),
    Timestamptz(Option<u8>),
    Uuid,
    Float4,
    Float8,
}

/// PostgreSQL's limits on type modifiers.
const NUMERIC_MAX_PRECISION: i32 = 1000;
const NUMERIC_MIN_SCALE: i32 = -1000;
const NUMERIC_MAX_SCALE: i32 = 1000;
const MAX_CHAR_LENGTH: u32 = 10 * 1024 * 1024;
const MAX_TIMESTAMP_PRECISION: u8 = 6;

impl KeyType {
    /// Reads a type name as written in DDL or printed by `format_type()`: aliases (`int`,
    /// `decimal`, `character varying`, `timestamp with time zone` …), any case, an optional
    /// `pg_catalog.` prefix, and typmods such as `numeric(10,2)` or `timestamp(3) with time zone`.
    pub fn from_pg_type_name(name: &str) -> Result<KeyType, KeyTypeError> {
        let unsupported = || KeyTypeError::UnsupportedType {
            name: name.to_owned(),
        };
        let bad_modifier = |reason: &'static str| KeyTypeError::InvalidTypeModifier {
            name: name.to_owned(),
            reason,
        };
        let lower = name.trim().to_ascii_lowercase();
        let lower = lower.strip_prefix("pg_catalog.").unwrap_or(&lower);
        // Pull out "(…)" wherever it stands; "timestamp(3) with time zone" puts it mid-name.
        let (base, modifiers) = match (lower.find('('), lower.find(')')) {
            (Some(open), Some(close)) if open < close => {
                let base = format!("{} {}", &lower[..open], &lower[close + 1..]);
                let args: Result<Vec<i64>, _> = lower[open + 1..close]
                    .split(',')
                    .map(|a| a.trim().parse::<i64>())
                    .collect();
                (
                    base,
                    Some(args.map_err(|_| bad_modifier("modifiers must be integers"))?),
                )
            }
            (None, None) => (lower.to_owned(), None),
            _ => return Err(bad_modifier("unbalanced parentheses")),
        };
        let base: Vec<&str> = base.split_whitespace().collect();
        let base = base.join(" ");
        let args = modifiers.as_deref().unwrap_or(&[]);
        let no_modifiers = |ty: KeyType| match modifiers {
            None => Ok(ty),
            Some(_) => Err(bad_modifier("this type takes no modifier")),
        };
        let one_arg = || match args {
            [] => Ok(None),
            [n] => Ok(Some(*n)),
            _ => Err(bad_modifier("this type takes one modifier")),
        };
        let length = || -> Result<Option<u32>, KeyTypeError> {
            match one_arg()? {
                None => Ok(None),
                Some(n) if (1..=i64::from(MAX_CHAR_LENGTH)).contains(&n) => Ok(Some(n as u32)),
                Some(_) => Err(bad_modifier("length must be between 1 and 10485760")),
            }
        };
        let precision = || -> Result<Option<u8>, KeyTypeError> {
            match one_arg()? {
                None => Ok(None),
                // PostgreSQL reduces a precision above 6 to 6 (with a warning).
                Some(p) if p >= 0 => Ok(Some(p.min(i64::from(MAX_TIMESTAMP_PRECISION)) as u8)),
                Some(_) => Err(bad_modifier("precision must not be negative")),
            }
        };
        match base.as_str() {
            "smallint" | "int2" | "smallserial" | "serial2" => no_modifiers(KeyType::Int2),
            "integer" | "int" | "int4" | "serial" | "serial4" => no_modifiers(KeyType::Int4),
            "bigint" | "int8" | "bigserial" | "serial8" => no_modifiers(KeyType::Int8),
            "numeric" | "decimal" => {
                let (precision, scale) = match args {
                    [] => return Ok(KeyType::Numeric(None)),
                    [p] => (*p, 0),
                    [p, s] => (*p, *s),
                    _ => return Err(bad_modifier("numeric takes precision and scale")),
                };
                if !(1..=i64::from(NUMERIC_MAX_PRECISION)).contains(&precision) {
                    return Err(bad_modifier("precision must be between 1 and 1000"));
                }
                if !(i64::from(NUMERIC_MIN_SCALE)..=i64::from(NUMERIC_MAX_SCALE)).contains(&scale) {
                    return Err(bad_modifier("scale must be between -1000 and 1000"));
                }
                Ok(KeyType::Numeric(Some(NumericTypmod {
                    precision: precision as i32,
                    scale: scale as i32,
                })))
            }
            "text" => no_modifiers(KeyType::Text),
            "varchar" | "character varying" | "char varying" => Ok(KeyType::Varchar(length()?)),
            "character" | "char" => Ok(KeyType::Bpchar(Some(length()?.unwrap_or(1)))),
            "bpchar" => Ok(KeyType::Bpchar(length()?)),
            "bytea" => no_modifiers(KeyType::Bytea),
            "boolean" | "bool" => no_modifiers(KeyType::Bool),
            "\"char\"" => no_modifiers(KeyType::Char),
            "date" => no_modifiers(KeyType::Date),
            "timestamp" | "timestamp without time zone" => Ok(KeyType::Timestamp(precision()?)),
            "timestamptz" | "timestamp with time zone" => Ok(KeyType::Timestamptz(precision()?)),
            "uuid" => no_modifiers(KeyType::Uuid),
            "real" | "float4" => no_modifiers(KeyType::Float4),
            "double precision" | "float8" => no_modifiers(KeyType::Float8),
            // float(p) is real up to 24 bits of mantissa, double precision above.
            "float" => match one_arg()? {
                None => Ok(KeyType::Float8),
                Some(1..=24) => Ok(KeyType::Float4),
                Some(25..=53) => Ok(KeyType::Float8),
                Some(_) => Err(bad_modifier("float precision must be between 1 and 53")),
            },
            _ => Err(unsupported()),
        }
    }

    /// The type this one hash-partitions like: two key types with the same class place every
    /// value both can hold in the same partition.
    pub fn hash_class(self) -> KeyType {
        match self {
            KeyType::Int2 | KeyType::Int4 | KeyType::Int8 => KeyType::Int8,
            KeyType::Numeric(_) => KeyType::Numeric(None),
            KeyType::Varchar(_) | KeyType::Text => KeyType::Text,
            KeyType::Bpchar(_) => KeyType::Bpchar(None),
            KeyType::Timestamp(_) => KeyType::Timestamp(None),
            KeyType::Timestamptz(_) => KeyType::Timestamptz(None),
            other => other,
        }
    }
}

impl fmt::Display for KeyType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let (name, modifier) = match *self {
            KeyType::Int2 => ("smallint", None),
            KeyType::Int4 => ("integer", None),
            KeyType::Int8 => ("bigint", None),
            KeyType::Numeric(t) => (
                "numeric",
                t.map(|t| format!("({},{})", t.precision, t.scale)),
            ),
            KeyType::Text => ("text", None),
            KeyType::Varchar(n) => ("character varying", n.map(|n| format!("({n})"))),
            // An unbounded bpchar has no SQL spelling other than its internal name.
            KeyType::Bpchar(None) => ("bpchar", None),
            KeyType::Bpchar(Some(n)) => ("character", Some(format!("({n})"))),
            KeyType::Bytea => ("bytea", None),
            KeyType::Bool => ("boolean", None),
            KeyType::Char => ("\"char\"", None),
            KeyType::Date => ("date", None),
            KeyType::Timestamp(p) => ("timestamp without time zone", p.map(|p| format!("({p})"))),
            KeyType::Timestamptz(p) => ("timestamp with time zone", p.map(|p| format!("({p})"))),
            KeyType::Uuid => ("uuid", None),
            KeyType::Float4 => ("real", None),
            KeyType::Float8 => ("double precision", None),
        };
        match (modifier, name.split_once(' ')) {
            // PostgreSQL prints the modifier right after "timestamp".
            (Some(m), Some(("timestamp", zone))) => write!(f, "timestamp{m} {zone}"),
            (Some(m), _) => write!(f, "{name}{m}"),
            (None, _) => f.write_str(name),
        }
    }
}
