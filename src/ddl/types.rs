//! Column types: Oracle and Oracle NoSQL names mapped to PostgreSQL types (docs/architecture.md
//! §2).
//!
//! | written                                   | PostgreSQL                      |
//! |-------------------------------------------|---------------------------------|
//! | `NUMBER`, `NUMBER(p)`, `NUMBER(p,s)`      | `numeric`, `numeric(p)`, `numeric(p,s)` (`NUMBER(*,s)` → `numeric(38,s)`) |
//! | `INTEGER`, `INT`, `SMALLINT`              | `integer`, `integer`, `smallint` |
//! | `LONG` (NoSQL 64-bit integer)             | `bigint`                        |
//! | `LONG RAW`, `RAW(n)`, `BLOB`, `BINARY(n)` | `bytea`                         |
//! | `VARCHAR2(n [BYTE\|CHAR])`, `NVARCHAR2(n)`, `VARCHAR(n)` | `varchar(n)` (PostgreSQL counts characters) |
//! | `CHAR(n)`, `NCHAR(n)`                     | `char(n)`                       |
//! | `DATE`                                    | `date`; `timestamp(0)` with [`TypeOptions::oracle_date`] (Oracle dates carry a time of day) |
//! | `TIMESTAMP(p)`                            | `timestamp(min(p, 6))`          |
//! | `TIMESTAMP WITH [LOCAL] TIME ZONE`        | `timestamptz`                   |
//! | `CLOB`, `NCLOB`, `STRING`                 | `text`                          |
//! | `JSON`                                    | `jsonb`                         |
//! | `BINARY_FLOAT`, `REAL`                    | `real`                          |
//! | `BINARY_DOUBLE`, `FLOAT(p)`, `DOUBLE`     | `double precision`              |
//! | `FLOAT`                                   | `real` in a NoSQL table (NoSQL's FLOAT has 32 bits), else `double precision` (PostgreSQL's and Oracle's) |
//! | `BOOLEAN`                                 | `boolean`                       |
//! | NoSQL `BINARY(n)`                         | `bytea` plus a CHECK that the value has exactly n bytes (NoSQL's fixed binary) |
//! | NoSQL `ARRAY(t)`, t a scalar              | `t[]` plus a CHECK that it has one dimension (and, for an ENUM, only its names) |
//! | NoSQL `RECORD(...)`, `MAP(t)`, `ARRAY(t)` of those, of `ARRAY` or `JSON` | `jsonb` plus a CHECK of the document's shape ([`JsonShape`]) |
//! | NoSQL `ENUM(a, b)`                        | `text` plus a CHECK that the value is one of the names (see [`PgType::Enum`]) |
//!
//! Any other name (`text`, `bigint`, `uuid`, `timestamptz`, `double precision`, `int[]`,
//! `schema.type`, …) is a PostgreSQL type and passes through as written.
//!
//! `DATE` is the one name whose meaning is a choice: PostgreSQL users (and the ORMs that read the
//! column's type) mean a calendar date, Oracle users a date and time of day. The parser keeps
//! [`PgType::Date`] and the rewrite applies the configured [`TypeOptions`], so the choice is made
//! once, from `[ddl] oracle_date`, and the parser needs no configuration.

use std::fmt;

use crate::sql::quote::{quote_ident, quote_literal};

/// A column type as the shards will see it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PgType {
    Numeric {
        precision: Option<u32>,
        scale: Option<i32>,
    },
    SmallInt,
    Integer,
    BigInt,
    Real,
    DoublePrecision,
    Boolean,
    Text,
    Bytea,
    Jsonb,
    Varchar(Option<u32>),
    Char(Option<u32>),
    Timestamp {
        precision: Option<u32>,
        with_time_zone: bool,
    },
    /// A NoSQL `ENUM(...)`: stored as `text`, and the rewrite adds
    /// `CHECK (column IN ('a', 'b'))` so only the declared names are accepted. A CHECK (rather
    /// than `CREATE TYPE ... AS ENUM`) keeps the table self-contained on every shard, and lets a
    /// later ALTER change the names without a type shared by every table that uses it.
    Enum(Vec<String>),
    /// Bare `FLOAT`: `real` in a NoSQL table, `double precision` elsewhere
    /// ([`PgType::in_nosql_table`]).
    Float,
    /// NoSQL `BINARY(n)`: `bytea` of exactly n bytes.
    FixedBinary(u32),
    /// NoSQL `ARRAY(t)` of a scalar: `t[]` of one dimension.
    NoSqlArray(Box<PgType>),
    /// NoSQL `RECORD`, `MAP`, or an `ARRAY` of documents: `jsonb` of this shape.
    Json(JsonShape),
    /// `DATE`, as written; [`PgType::with_options`] decides what it means.
    Date,
    /// A mapped type with array bounds after it (`DATE[]`, `NUMBER(5)[3]`), the bounds as written.
    Array {
        element: Box<PgType>,
        bounds: String,
    },
    /// A PostgreSQL type, as the user wrote it.
    Native(String),
}

/// How the names whose meaning differs between Oracle and PostgreSQL map (`[ddl]` in the
/// configuration).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct TypeOptions {
    /// `DATE` means Oracle's date and time of day, `timestamp(0)`, instead of PostgreSQL's `date`.
    pub oracle_date: bool,
}

impl PgType {
    /// The type the shards get under `options`.
    pub fn with_options(self, options: TypeOptions) -> PgType {
        match self {
            PgType::Date if options.oracle_date => PgType::Timestamp {
                precision: Some(0),
                with_time_zone: false,
            },
            PgType::Array { element, bounds } => PgType::Array {
                element: Box::new(element.with_options(options)),
                bounds,
            },
            other => other,
        }
    }

    /// The type with NoSQL's meaning of the names PostgreSQL reads differently (`FLOAT`).
    pub fn in_nosql_table(self) -> PgType {
        match self {
            PgType::Float => PgType::Real,
            PgType::NoSqlArray(element) => PgType::NoSqlArray(Box::new(element.in_nosql_table())),
            other => other,
        }
    }

    /// The CHECK expressions that hold a column of this type to what the declared type admits
    /// beyond what the PostgreSQL type does.
    pub fn checks(&self, column: &str) -> Vec<String> {
        let col = quote_ident(column);
        match self {
            PgType::Enum(values) => vec![format!("{col} IN ({})", literal_list(values))],
            PgType::FixedBinary(n) => vec![format!("octet_length({col}) = {n}")],
            PgType::NoSqlArray(element) => {
                let mut checks = vec![format!("array_ndims({col}) = 1")];
                if let PgType::Enum(values) = &**element {
                    checks.push(format!("{col} <@ ARRAY[{}]::text[]", literal_list(values)));
                }
                checks
            }
            PgType::Json(shape) => {
                let mut paths = Vec::new();
                shape.violations("$", &mut paths);
                paths
                    .iter()
                    .map(|p| format!("NOT ({col} @? {})", quote_literal(&format!("strict {p}"))))
                    .collect()
            }
            _ => Vec::new(),
        }
    }
}

fn literal_list(values: &[String]) -> String {
    let list: Vec<String> = values.iter().map(|v| quote_literal(v)).collect();
    list.join(", ")
}

/// What a NoSQL document column (`RECORD`, `MAP`, `ARRAY` of documents) may hold, checked by
/// jsonpath queries that find a violating item: each value has the JSON kind its declared type
/// is written as (numbers, strings for STRING, TIMESTAMP, BINARY and ENUM, booleans, objects,
/// arrays), integers are whole and in range, ENUM strings are among the names, a record has no
/// fields but its declared ones. JSON `null` is accepted anywhere, as NoSQL accepts a missing
/// or null field; a TIMESTAMP's text is not parsed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum JsonShape {
    /// `JSON`: anything.
    Any,
    /// `INTEGER` (32 bits) or `LONG` (64 bits): a whole number within the bound.
    Integer {
        max: i64,
    },
    /// `FLOAT`, `DOUBLE`, `NUMBER`.
    Number,
    /// `STRING`, `TIMESTAMP`, `BINARY`.
    String,
    Enum(Vec<String>),
    Boolean,
    Record(Vec<(String, JsonShape)>),
    Map(Box<JsonShape>),
    Array(Box<JsonShape>),
}

impl JsonShape {
    /// Appends the jsonpath queries (without their `strict` mode) that find a value at `path`
    /// that does not fit.
    fn violations(&self, path: &str, out: &mut Vec<String>) {
        let wrong_kind = match self {
            JsonShape::Any => return,
            JsonShape::Integer { max } => format!(
                "@.type() != \"number\" || @.floor() != @ || @ > {max} || @ < {}",
                -max - 1
            ),
            JsonShape::Number => "@.type() != \"number\"".to_owned(),
            JsonShape::String => "@.type() != \"string\"".to_owned(),
            JsonShape::Enum(values) => {
                let names: Vec<String> = values
                    .iter()
                    .map(|v| format!("@ != {}", jsonpath_string(v)))
                    .collect();
                format!("@.type() != \"string\" || ({})", names.join(" && "))
            }
            JsonShape::Boolean => "@.type() != \"boolean\"".to_owned(),
            JsonShape::Record(_) | JsonShape::Map(_) => "@.type() != \"object\"".to_owned(),
            JsonShape::Array(_) => "@.type() != \"array\"".to_owned(),
        };
        out.push(format!("{path} ? (@.type() != \"null\" && ({wrong_kind}))"));
        match self {
            JsonShape::Record(fields) => {
                let known: Vec<String> = fields
                    .iter()
                    .map(|(name, _)| format!("@.key != {}", jsonpath_string(name)))
                    .collect();
                out.push(format!("{path}.keyvalue() ? ({})", known.join(" && ")));
                for (name, shape) in fields {
                    shape.violations(&format!("{path}.{}", jsonpath_string(name)), out);
                }
            }
            JsonShape::Map(value) => value.violations(&format!("{path}.*"), out),
            JsonShape::Array(element) => element.violations(&format!("{path}[*]"), out),
            _ => {}
        }
    }
}

/// A jsonpath string literal: double quotes, with `"` and `\` escaped.
fn jsonpath_string(s: &str) -> String {
    format!("\"{}\"", s.replace('\\', "\\\\").replace('"', "\\\""))
}

impl fmt::Display for PgType {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        let with_len = |f: &mut fmt::Formatter<'_>, name: &str, len: &Option<u32>| match len {
            Some(n) => write!(f, "{name}({n})"),
            None => f.write_str(name),
        };
        match self {
            PgType::Numeric {
                precision: Some(p),
                scale: Some(s),
            } => write!(f, "numeric({p},{s})"),
            PgType::Numeric { precision, .. } => with_len(f, "numeric", precision),
            PgType::SmallInt => f.write_str("smallint"),
            PgType::Integer => f.write_str("integer"),
            PgType::BigInt => f.write_str("bigint"),
            PgType::Real => f.write_str("real"),
            PgType::DoublePrecision => f.write_str("double precision"),
            PgType::Boolean => f.write_str("boolean"),
            PgType::Text | PgType::Enum(_) => f.write_str("text"),
            PgType::Float => f.write_str("double precision"),
            PgType::Bytea | PgType::FixedBinary(_) => f.write_str("bytea"),
            PgType::Jsonb | PgType::Json(_) => f.write_str("jsonb"),
            PgType::NoSqlArray(element) => write!(f, "{element}[]"),
            PgType::Varchar(n) => with_len(f, "varchar", n),
            PgType::Char(n) => with_len(f, "char", n),
            PgType::Timestamp {
                precision,
                with_time_zone,
            } => {
                let name = if *with_time_zone {
                    "timestamptz"
                } else {
                    "timestamp"
                };
                with_len(f, name, precision)
            }
            PgType::Date => f.write_str("date"),
            PgType::Array { element, bounds } => write!(f, "{element}{bounds}"),
            PgType::Native(text) => f.write_str(text),
        }
    }
}

/// A column's type: what the user wrote and what PostgreSQL gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DataType {
    pub pg: PgType,
    /// The type as written, e.g. `VARCHAR2(50 BYTE)`.
    pub source: String,
    /// Whether PostgreSQL would reject the type as written (an Oracle or NoSQL name).
    pub foreign: bool,
    pub nosql: NoSqlName,
    /// Byte offset of the type in the statement.
    pub position: usize,
}

/// What a type name says about the Oracle NoSQL dialect (see [`crate::ddl`]'s classification).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum NoSqlName {
    /// A name only NoSQL has (`LONG`, `STRING`, `BINARY`, `ENUM`, `RECORD`, `ARRAY`, `MAP`): the
    /// statement is NoSQL.
    Marker,
    /// A NoSQL name other dialects share (`INTEGER`, `FLOAT`, `DOUBLE`, `NUMBER`, `BOOLEAN`,
    /// `TIMESTAMP(p)`, `JSON`).
    Shared,
    /// Not a NoSQL type: refused in a NoSQL table.
    Other,
}
