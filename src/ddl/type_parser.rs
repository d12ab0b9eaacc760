//! Reading column types, with the Oracle and NoSQL names mapped as [`super::types`] lists.

use super::error::DdlError;
use super::lexer::TokenKind;
use super::parser::Parser;
use super::types::{DataType, JsonShape, NoSqlName, PgType};

/// Oracle's `NUMBER(*, s)` means the maximum precision.
const ORACLE_MAX_NUMBER_PRECISION: u32 = 38;
/// PostgreSQL's timestamps keep at most microseconds.
const PG_MAX_TIMESTAMP_PRECISION: u32 = 6;

impl Parser<'_> {
    /// Parses a column type and maps it to PostgreSQL.
    pub(super) fn data_type(&mut self) -> Result<DataType, DdlError> {
        let start = self.peek_start();
        let (mut pg, foreign, nosql) = self.type_body()?;
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
        // Array bounds are PostgreSQL's syntax, never NoSQL's.
        let nosql = match pg {
            PgType::Array { .. } => NoSqlName::Other,
            _ => nosql,
        };
        if nosql == NoSqlName::Marker {
            self.nosql_syntax = true;
        }
        Ok(DataType {
            pg,
            source,
            foreign,
            nosql,
            position: start,
        })
    }

    fn type_body(&mut self) -> Result<(PgType, bool, NoSqlName), DdlError> {
        fn other((pg, foreign): (PgType, bool)) -> (PgType, bool, NoSqlName) {
            (pg, foreign, NoSqlName::Other)
        }
        let first = self.peek_required()?;
        let name = match first.kind {
            TokenKind::Word => first.value.clone(),
            // A quoted name is a user-defined PostgreSQL type.
            TokenKind::QuotedIdent => return Ok(other(self.native_type()?)),
            _ => return Err(self.unexpected()),
        };
        if self.peek_nth(1).is_some_and(|t| t.kind == TokenKind::Dot) {
            return Ok(other(self.native_type()?));
        }
        self.advance();
        let shared = |(pg, foreign)| (pg, foreign, NoSqlName::Shared);
        let marker = |pg| (pg, true, NoSqlName::Marker);
        let mapped = match name.as_str() {
            // NoSQL's NUMBER has no precision; with one it is Oracle's.
            "number" if !self.at(TokenKind::LParen) => shared((
                PgType::Numeric {
                    precision: None,
                    scale: None,
                },
                true,
            )),
            "integer" => shared((PgType::Integer, false)),
            "long" if !self.at_kw("raw") => marker(PgType::BigInt),
            "string" => marker(PgType::Text),
            "binary" => match self.length_modifier()? {
                (Some(n), false) => marker(PgType::FixedBinary(n)),
                _ => marker(PgType::Bytea),
            },
            "json" => shared((PgType::Jsonb, false)),
            "float" if !self.at(TokenKind::LParen) => shared((PgType::Float, false)),
            "double" if !self.at_kw("precision") => shared((PgType::DoublePrecision, true)),
            "boolean" => shared((PgType::Boolean, false)),
            "timestamp" => {
                let from = self.pos;
                let mapped = self.timestamp_type()?;
                let zoned = self.tokens[from..self.pos]
                    .iter()
                    .any(|t| t.is_keyword("with") || t.is_keyword("without"));
                match zoned {
                    false => shared(mapped),
                    true => other(mapped),
                }
            }
            "enum" => marker(PgType::Enum(self.enum_values()?)),
            "record" | "map" | "array" if self.at(TokenKind::LParen) => {
                self.pos -= 1;
                marker(self.nosql_composite()?)
            }
            _ => {
                self.pos -= 1;
                other(self.oracle_or_native_type()?)
            }
        };
        Ok(mapped)
    }

    /// The Oracle names and PostgreSQL's own.
    fn oracle_or_native_type(&mut self) -> Result<(PgType, bool), DdlError> {
        let name = self.peek_required()?.value.clone();
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
            "int" => (PgType::Integer, false),
            "smallint" => (PgType::SmallInt, false),
            "bigint" => (PgType::BigInt, false),
            "long" if self.eat_kw("raw") => (PgType::Bytea, true),
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
            "raw" => {
                self.length_modifier()?;
                (PgType::Bytea, true)
            }
            "blob" => (PgType::Bytea, true),
            "clob" | "nclob" => (PgType::Text, true),
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
            "bool" => (PgType::Boolean, false),
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

    /// NoSQL `ARRAY(t)`, `MAP(t)` or `RECORD(name t, ...)`: an array of a scalar becomes a
    /// PostgreSQL array, anything else a JSON document of its shape.
    fn nosql_composite(&mut self) -> Result<PgType, DdlError> {
        if self.eat_kw("array") {
            self.expect(TokenKind::LParen)?;
            let element_at = self.pos;
            let element = self.nosql_shape()?;
            self.expect(TokenKind::RParen)?;
            if matches!(
                element,
                JsonShape::Any | JsonShape::Record(_) | JsonShape::Map(_) | JsonShape::Array(_)
            ) {
                return Ok(PgType::Json(JsonShape::Array(Box::new(element))));
            }
            // Read the element again as a column type for its PostgreSQL name.
            let after = self.pos;
            self.pos = element_at;
            let (pg, _, _) = self.type_body()?;
            self.pos = after;
            return Ok(PgType::NoSqlArray(Box::new(pg)));
        }
        Ok(PgType::Json(self.nosql_shape()?))
    }

    /// A NoSQL type inside a `RECORD`, `MAP` or `ARRAY`, as the JSON it is stored as.
    fn nosql_shape(&mut self) -> Result<JsonShape, DdlError> {
        let tok = self.peek_required()?;
        if tok.kind != TokenKind::Word {
            return Err(self.unexpected());
        }
        let name = tok.value.clone();
        let at = tok.start;
        self.advance();
        let nested = |p: &mut Self| -> Result<Box<JsonShape>, DdlError> {
            p.expect(TokenKind::LParen)?;
            let inner = p.nosql_shape()?;
            p.expect(TokenKind::RParen)?;
            Ok(Box::new(inner))
        };
        Ok(match name.as_str() {
            "integer" => JsonShape::Integer {
                max: i32::MAX.into(),
            },
            "long" => JsonShape::Integer { max: i64::MAX },
            "float" | "double" | "number" => JsonShape::Number,
            "string" => JsonShape::String,
            "binary" => {
                self.length_modifier()?;
                JsonShape::String
            }
            "timestamp" => {
                self.length_modifier()?;
                JsonShape::String
            }
            "boolean" => JsonShape::Boolean,
            "json" => JsonShape::Any,
            "enum" => JsonShape::Enum(self.enum_values()?),
            "array" => JsonShape::Array(nested(self)?),
            "map" => JsonShape::Map(nested(self)?),
            "record" => {
                self.expect(TokenKind::LParen)?;
                let mut fields = Vec::new();
                loop {
                    let field = self.ident()?;
                    fields.push((field.value, self.nosql_shape()?));
                    if !self.eat(TokenKind::Comma) {
                        break;
                    }
                }
                self.expect(TokenKind::RParen)?;
                JsonShape::Record(fields)
            }
            _ => {
                return Err(DdlError::NotNoSqlType {
                    name: self.src[at..self.prev_end()].to_string(),
                    position: at,
                })
            }
        })
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
