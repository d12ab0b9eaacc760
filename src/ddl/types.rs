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

use super::lexer::TokenKind;
use super::parser::Parser;
use super::DdlError;

/// Oracle's `NUMBER(*, s)` means the maximum precision.
const ORACLE_MAX_NUMBER_PRECISION: u32 = 38;
/// PostgreSQL's timestamps keep at most microseconds.
const PG_MAX_TIMESTAMP_PRECISION: u32 = 6;

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

impl Parser<'_> {
    /// Parses a column type and maps it to PostgreSQL.
    pub(super) fn data_type(&mut self) -> Result<DataType, DdlError> {
        let start = self.peek_start();
        let (mut pg, foreign) = self.type_body()?;
        // Array bounds after a mapped name make an array of the mapped type.
        let bounds_start = self.prev_end();
        self.array_bounds()?;
        if self.prev_end() > bounds_start {
            let bounds = self.src[bounds_start..self.prev_end()].to_string();
            pg = match pg {
                // A PostgreSQL name keeps its bounds as written; nothing in it can change.
                PgType::Native(name) => PgType::Native(format!("{name}{bounds}")),
                element => PgType::Array {
                    element: Box::new(element),
                    bounds,
                },
            };
        }
        let source = self.src[start..self.prev_end()].to_string();
        if foreign {
            self.non_postgres_syntax = true;
        }
        Ok(DataType {
            pg,
            source,
            foreign,
        })
    }

    fn type_body(&mut self) -> Result<(PgType, bool), DdlError> {
        let first = self.peek_required()?;
        let name = match first.kind {
            TokenKind::Word => first.value.clone(),
            // A quoted name is a user-defined PostgreSQL type.
            TokenKind::QuotedIdent => return self.native_type(),
            _ => return Err(self.unexpected()),
        };
        if self.peek_nth(1).is_some_and(|t| t.kind == TokenKind::Dot) {
            return self.native_type();
        }
        self.advance();
        let mapped = match name.as_str() {
            "number" => {
                let (precision, scale) = self.numeric_modifiers(true)?;
                (PgType::Numeric { precision, scale }, true)
            }
            "numeric" | "decimal" | "dec" => {
                let (precision, scale) = self.numeric_modifiers(false)?;
                (PgType::Numeric { precision, scale }, false)
            }
            "integer" | "int" => (PgType::Integer, false),
            "smallint" => (PgType::SmallInt, false),
            "bigint" => (PgType::BigInt, false),
            "long" if self.eat_kw("raw") => (PgType::Bytea, true),
            "long" => (PgType::BigInt, true),
            "varchar2" | "nvarchar2" => {
                let (len, _) = self.length_modifier()?;
                (PgType::Varchar(len), true)
            }
            "varchar" => {
                let (len, oracle_unit) = self.length_modifier()?;
                (PgType::Varchar(len), oracle_unit)
            }
            "national" => {
                if !self.eat_kw("character") {
                    self.expect_kw("char")?;
                }
                self.character_type()?
            }
            "char" | "character" | "nchar" => self.character_type()?,
            "date" => (PgType::Date, false),
            "timestamp" => self.timestamp_type()?,
            "raw" => {
                self.length_modifier()?;
                (PgType::Bytea, true)
            }
            "binary" => {
                self.length_modifier()?;
                (PgType::Bytea, true)
            }
            "blob" => (PgType::Bytea, true),
            "clob" | "nclob" | "string" => (PgType::Text, true),
            "json" => (PgType::Jsonb, false),
            "binary_float" => (PgType::Real, true),
            "binary_double" => (PgType::DoublePrecision, true),
            "float" => {
                let (precision, _) = self.length_modifier()?;
                // Oracle's FLOAT(p) counts binary digits up to 126; PostgreSQL's stops at 53.
                (PgType::DoublePrecision, precision.is_some())
            }
            "double" => {
                let precision = self.eat_kw("precision");
                (PgType::DoublePrecision, !precision)
            }
            "real" => (PgType::Real, false),
            "boolean" | "bool" => (PgType::Boolean, false),
            "record" => {
                self.record_fields()?;
                (PgType::Jsonb, true)
            }
            "array" | "map" => {
                self.expect(TokenKind::LParen)?;
                self.type_body()?;
                self.expect(TokenKind::RParen)?;
                (PgType::Jsonb, true)
            }
            "enum" => (PgType::Enum(self.enum_values()?), true),
            _ => {
                self.pos -= 1;
                return self.native_type();
            }
        };
        Ok(mapped)
    }

    /// `CHAR[ACTER] [VARYING] [(n [BYTE|CHAR])]`.
    fn character_type(&mut self) -> Result<(PgType, bool), DdlError> {
        let varying = self.eat_kw("varying");
        let (len, oracle_unit) = self.length_modifier()?;
        let pg = if varying {
            PgType::Varchar(len)
        } else {
            PgType::Char(len)
        };
        Ok((pg, oracle_unit))
    }

    /// `TIMESTAMP [(p)] [WITH [LOCAL] TIME ZONE | WITHOUT TIME ZONE]`.
    fn timestamp_type(&mut self) -> Result<(PgType, bool), DdlError> {
        let (precision, _) = self.length_modifier()?;
        let mut foreign = precision.is_some_and(|p| p > PG_MAX_TIMESTAMP_PRECISION);
        let with_time_zone = if self.eat_kw("with") {
            foreign |= self.eat_kw("local");
            self.expect_kw("time")?;
            self.expect_kw("zone")?;
            true
        } else {
            if self.eat_kw("without") {
                self.expect_kw("time")?;
                self.expect_kw("zone")?;
            }
            false
        };
        let pg = PgType::Timestamp {
            precision: precision.map(|p| p.min(PG_MAX_TIMESTAMP_PRECISION)),
            with_time_zone,
        };
        Ok((pg, foreign))
    }

    /// `[(p [, s])]`, with Oracle's `*` for the maximum precision when `oracle` is set.
    fn numeric_modifiers(&mut self, oracle: bool) -> Result<(Option<u32>, Option<i32>), DdlError> {
        if !self.eat(TokenKind::LParen) {
            return Ok((None, None));
        }
        let precision = if oracle && self.peek().is_some_and(|t| t.value == "*") {
            self.advance();
            ORACLE_MAX_NUMBER_PRECISION
        } else {
            self.number_u32()?
        };
        let scale = if self.eat(TokenKind::Comma) {
            Some(self.signed_i32()?)
        } else {
            None
        };
        self.expect(TokenKind::RParen)?;
        Ok((Some(precision), scale))
    }

    /// `[(n [BYTE|CHAR])]`; the flag tells whether Oracle's length unit was given.
    fn length_modifier(&mut self) -> Result<(Option<u32>, bool), DdlError> {
        if !self.eat(TokenKind::LParen) {
            return Ok((None, false));
        }
        let n = self.number_u32()?;
        // PostgreSQL lengths count characters, which is what CHAR semantics ask for and at least
        // as much room as BYTE semantics give.
        let unit = self.eat_kw("byte") || self.eat_kw("char");
        self.expect(TokenKind::RParen)?;
        Ok((Some(n), unit))
    }

    /// NoSQL `RECORD(name type, ...)`.
    fn record_fields(&mut self) -> Result<(), DdlError> {
        self.expect(TokenKind::LParen)?;
        loop {
            self.ident()?;
            self.type_body()?;
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen)?;
        Ok(())
    }

    /// NoSQL `ENUM(a, b, c)`: the names keep their case, as NoSQL compares them exactly.
    fn enum_values(&mut self) -> Result<Vec<String>, DdlError> {
        self.expect(TokenKind::LParen)?;
        let mut values = Vec::new();
        loop {
            let tok = self.peek_required()?;
            let value = match tok.kind {
                TokenKind::Word => self.src[tok.start..tok.end].to_string(),
                TokenKind::QuotedIdent | TokenKind::String => tok.value.clone(),
                _ => return Err(self.unexpected()),
            };
            self.advance();
            values.push(value);
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen)?;
        Ok(values)
    }

    /// A PostgreSQL type passed through as written: a possibly qualified name, trailing words
    /// that belong to PostgreSQL's multi-word types, modifiers and array bounds.
    fn native_type(&mut self) -> Result<(PgType, bool), DdlError> {
        let start = self.peek_start();
        self.object_name()?;
        loop {
            if self.at(TokenKind::LParen) {
                self.skip_parenthesized()?;
                continue;
            }
            let continues = self.peek().is_some_and(|t| {
                t.kind == TokenKind::Word
                    && matches!(
                        t.value.as_str(),
                        "varying"
                            | "precision"
                            | "with"
                            | "without"
                            | "time"
                            | "zone"
                            | "year"
                            | "month"
                            | "day"
                            | "hour"
                            | "minute"
                            | "second"
                            | "to"
                    )
            });
            if !continues {
                break;
            }
            self.advance();
        }
        self.array_bounds()?;
        Ok((
            PgType::Native(self.src[start..self.prev_end()].to_string()),
            false,
        ))
    }

    /// `[]`, `[n]` (repeated) or `ARRAY[n]` after a PostgreSQL type.
    fn array_bounds(&mut self) -> Result<(), DdlError> {
        let is_open = |p: &Self| p.peek().is_some_and(|t| t.value == "[");
        if self.eat_kw("array") && !is_open(self) {
            return Ok(());
        }
        while is_open(self) {
            self.advance();
            if self.at(TokenKind::Number) {
                self.advance();
            }
            if self.peek().is_none_or(|t| t.value != "]") {
                return Err(self.unexpected());
            }
            self.advance();
        }
        Ok(())
    }
}
