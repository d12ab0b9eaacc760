//! Column types: Oracle and Oracle NoSQL names mapped to PostgreSQL types (DESIGN.md §2).
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
//! | `BINARY_DOUBLE`, `FLOAT[(p)]`, `DOUBLE`   | `double precision`              |
//! | `BOOLEAN`                                 | `boolean`                       |
//! | NoSQL `RECORD(...)`, `ARRAY(t)`, `MAP(t)` | `jsonb`: these are JSON documents in NoSQL too; their field types are checked for syntax but not enforced |
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
    /// than `CREATE TYPE ... AS ENUM`) keeps the table self-contained on every shard.
    Enum(Vec<String>),
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
            PgType::Bytea => f.write_str("bytea"),
            PgType::Jsonb => f.write_str("jsonb"),
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
}
