//! The partitioning clauses of CREATE SHARDED TABLE: consistent hash, reference, user-defined
//! list and range, and composite partition sets.

use super::ast::*;
use super::error::DdlError;
use super::lexer::TokenKind;
use super::parser::Parser;

impl Parser<'_> {
    pub(super) fn partitioning(&mut self, stmt_start: usize) -> Result<Distribution, DdlError> {
        if self.eat_kw("partitionset") {
            self.expect_kw("by")?;
            let set_method = if self.eat_kw("list") {
                SetMethod::List
            } else if self.eat_kw("range") {
                SetMethod::Range
            } else {
                return Err(self.unexpected());
            };
            let set_columns = self.ident_list()?;
            if set_method == SetMethod::List && set_columns.len() > 1 {
                // Oracle reports this before reading further, at the next line.
                return Err(DdlError::ListPartitionSetColumns {
                    position: self.peek_start(),
                });
            }
            self.expect_kw("partition")?;
            self.expect_kw("by")?;
            self.expect_kw("consistent")?;
            self.expect_kw("hash")?;
            let hash_columns = self.ident_list()?;
            let partitions = self.partition_count()?;
            let partition_sets =
                self.partition_list(PartitionLevel::Set, set_method, set_columns.len())?;
            return Ok(Distribution::Composite {
                set_method,
                set_columns,
                hash_columns,
                partitions,
                partition_sets,
            });
        }
        self.expect_kw("partition")?;
        self.expect_kw("by")?;
        if self.eat_kw("consistent") {
            self.expect_kw("hash")?;
            let columns = self.ident_list()?;
            let partitions = self.partition_count()?;
            Ok(Distribution::ConsistentHash {
                columns,
                partitions,
            })
        } else if self.eat_kw("reference") {
            self.expect(TokenKind::LParen)?;
            let constraint = self.ident()?;
            self.expect(TokenKind::RParen)?;
            Ok(Distribution::Reference { constraint })
        } else if self.eat_kw("list") {
            let mut columns = self.ident_list()?;
            if columns.len() > 1 {
                // Oracle reports this one against the statement as a whole.
                return Err(DdlError::ListPartitionColumns {
                    position: stmt_start,
                });
            }
            let partitions = self.partition_list(PartitionLevel::Partition, SetMethod::List, 1)?;
            Ok(Distribution::List {
                column: columns.remove(0),
                partitions,
            })
        } else if self.eat_kw("range") {
            let columns = self.ident_list()?;
            let partitions =
                self.partition_list(PartitionLevel::Partition, SetMethod::Range, columns.len())?;
            Ok(Distribution::Range {
                columns,
                partitions,
            })
        } else {
            Err(self.unexpected())
        }
    }

    /// `[PARTITIONS AUTO | PARTITIONS n]`.
    fn partition_count(&mut self) -> Result<PartitionCount, DdlError> {
        if !self.eat_kw("partitions") {
            return Ok(PartitionCount::Auto);
        }
        if self.eat_kw("auto") {
            return Ok(PartitionCount::Auto);
        }
        if self.peek().is_some_and(|t| t.value == "0") {
            return Err(self.unexpected());
        }
        Ok(PartitionCount::Fixed(self.number_u32()?))
    }

    /// `( PARTITION[SET] name bound placement, … )`.
    fn partition_list(
        &mut self,
        level: PartitionLevel,
        method: SetMethod,
        columns: usize,
    ) -> Result<Vec<NamedPartition>, DdlError> {
        self.expect(TokenKind::LParen)?;
        let mut partitions = Vec::new();
        loop {
            self.expect_kw(level.keyword())?;
            let name = self.ident()?;
            self.expect_kw("values")?;
            let bound_at = self.peek_start();
            let bound = match method {
                SetMethod::List => PartitionBound::In(self.list_items()?),
                SetMethod::Range => {
                    self.expect_kw("less")?;
                    self.expect_kw("than")?;
                    PartitionBound::LessThan(self.value_tuple()?)
                }
            };
            let arity_error = |found: usize| DdlError::BoundArity {
                partition: name.value.clone(),
                expected: columns,
                found,
                position: bound_at,
            };
            match &bound {
                PartitionBound::In(items) => {
                    if let Some(item) = items.iter().find(|i| i.len() != columns) {
                        return Err(arity_error(item.len()));
                    }
                }
                PartitionBound::LessThan(values) if values.len() != columns => {
                    return Err(arity_error(values.len()))
                }
                PartitionBound::LessThan(_) => {}
            }
            let placement = self.placement(level, &name)?;
            partitions.push(NamedPartition {
                name,
                bound,
                placement,
            });
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen)?;
        Ok(partitions)
    }

    fn placement(&mut self, level: PartitionLevel, name: &Ident) -> Result<Placement, DdlError> {
        let missing = |p: &Self| DdlError::MissingPlacement {
            partition: name.value.clone(),
            clause: level.placement_clause(),
            position: p.peek_start(),
        };
        if !self.eat_kw("tablespace") {
            return Err(missing(self));
        }
        match level {
            PartitionLevel::Set => {
                if !self.eat_kw("set") {
                    return Err(missing(self));
                }
                Ok(Placement::TablespaceSet(self.ident()?))
            }
            PartitionLevel::Partition => Ok(Placement::Tablespace(self.ident()?)),
        }
    }

    /// `( item, … )` where an item is a value or a parenthesized tuple of values.
    fn list_items(&mut self) -> Result<Vec<Vec<Value>>, DdlError> {
        self.expect(TokenKind::LParen)?;
        let mut items = Vec::new();
        loop {
            if self.at(TokenKind::LParen) {
                items.push(self.value_tuple()?);
            } else {
                items.push(vec![self.value()?]);
            }
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen)?;
        Ok(items)
    }

    fn value_tuple(&mut self) -> Result<Vec<Value>, DdlError> {
        self.expect(TokenKind::LParen)?;
        let mut values = vec![self.value()?];
        while self.eat(TokenKind::Comma) {
            values.push(self.value()?);
        }
        self.expect(TokenKind::RParen)?;
        Ok(values)
    }

    fn value(&mut self) -> Result<Value, DdlError> {
        let tok = self.peek_required()?.clone();
        let value = match tok.kind {
            TokenKind::String => Value::String(tok.value),
            TokenKind::Number => Value::Number(tok.value),
            TokenKind::Op if tok.value == "-" || tok.value == "+" => {
                self.advance();
                let number = self.expect(TokenKind::Number)?;
                let sign = if tok.value == "-" { "-" } else { "" };
                return Ok(Value::Number(format!("{sign}{}", number.value)));
            }
            TokenKind::Word => match tok.value.as_str() {
                "null" => Value::Null,
                "default" => Value::Default,
                "maxvalue" => Value::MaxValue,
                _ if self
                    .peek_nth(1)
                    .is_some_and(|t| t.kind == TokenKind::String) =>
                {
                    self.advance();
                    let literal = self.expect(TokenKind::String)?;
                    return Ok(Value::Typed {
                        type_name: tok.value,
                        value: literal.value,
                    });
                }
                _ => return Err(self.unexpected()),
            },
            _ => return Err(self.unexpected()),
        };
        self.advance();
        Ok(value)
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum PartitionLevel {
    /// A composite table's `PARTITIONSET`, placed on a tablespace set.
    Set,
    /// A user-defined table's `PARTITION`, placed on a tablespace.
    Partition,
}

impl PartitionLevel {
    fn keyword(self) -> &'static str {
        match self {
            PartitionLevel::Set => "partitionset",
            PartitionLevel::Partition => "partition",
        }
    }

    fn placement_clause(self) -> &'static str {
        match self {
            PartitionLevel::Set => "TABLESPACE SET",
            PartitionLevel::Partition => "TABLESPACE",
        }
    }
}
