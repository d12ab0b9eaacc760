//! Recursive-descent parser for the grammar in the module doc of [`super`].

use super::ast::*;
use super::error::DdlError;
use super::lexer::{tokenize, Token, TokenKind};
use super::validate::validate_create_table;
use crate::model::RowMovement;

/// Parses one statement, optionally followed by `;`.
pub fn parse(sql: &str) -> Result<Statement, DdlError> {
    let mut statements = parse_script(sql)?;
    if statements.len() == 1 {
        return Ok(statements.remove(0));
    }
    // Either nothing but comments, or several statements: point at what cannot be here.
    let mut parser = Parser::new(sql)?;
    if statements.is_empty() {
        return Err(parser.unexpected());
    }
    parser.statement()?;
    parser.eat(TokenKind::Semicolon);
    Err(parser.unexpected())
}

/// Parses statements separated by `;`, as a simple-query string may hold several.
pub fn parse_script(sql: &str) -> Result<Vec<Statement>, DdlError> {
    let mut parser = Parser::new(sql)?;
    let mut statements = Vec::new();
    loop {
        while parser.eat(TokenKind::Semicolon) {}
        if parser.peek().is_none() {
            return Ok(statements);
        }
        statements.push(parser.statement()?);
        if parser.peek().is_some() {
            parser.expect(TokenKind::Semicolon)?;
        }
    }
}

pub(super) struct Parser<'a> {
    pub(super) src: &'a str,
    pub(super) tokens: Vec<Token>,
    pub(super) pos: usize,
    /// Set when the statement uses syntax PostgreSQL rejects (see [`CreateTable`]).
    pub(super) non_postgres_syntax: bool,
    /// Set when the statement uses syntax only Oracle NoSQL has (see [`CreateTable::nosql`]).
    pub(super) nosql_syntax: bool,
    saw_nosql_comment: bool,
}

/// Where clauses after a CREATE TABLE's column list started.
struct Clauses {
    /// The partitioning clause, or else PARENT.
    partitioning_at: Option<usize>,
    ttl_at: Option<usize>,
    /// A stray `"` at the end (see [`super::lexer`]).
    stray_quote: Option<usize>,
}

/// Keywords that end a DEFAULT expression when they appear at its top level.
const DEFAULT_STOP_WORDS: &[&str] = &[
    "not",
    "null",
    "constraint",
    "primary",
    "unique",
    "references",
    "check",
    "collate",
    "default",
    "generated",
];

impl<'a> Parser<'a> {
    fn new(src: &'a str) -> Result<Self, DdlError> {
        let (tokens, saw_nosql_comment) = tokenize(src)?;
        Ok(Parser {
            src,
            tokens,
            pos: 0,
            non_postgres_syntax: false,
            nosql_syntax: false,
            saw_nosql_comment,
        })
    }

    // ---- token helpers -------------------------------------------------------------------

    pub(super) fn peek(&self) -> Option<&Token> {
        self.tokens.get(self.pos)
    }

    pub(super) fn peek_nth(&self, n: usize) -> Option<&Token> {
        self.tokens.get(self.pos + n)
    }

    /// The next token, or a syntax error at the end of the input.
    pub(super) fn peek_required(&self) -> Result<&Token, DdlError> {
        self.peek().ok_or_else(|| self.unexpected())
    }

    pub(super) fn advance(&mut self) -> Option<Token> {
        let tok = self.tokens.get(self.pos).cloned();
        if tok.is_some() {
            self.pos += 1;
        }
        tok
    }

    /// Byte offset of the next token (the end of the input when there is none).
    pub(super) fn peek_start(&self) -> usize {
        self.peek().map_or(self.src.len(), |t| t.start)
    }

    /// Byte offset just after the last consumed token.
    pub(super) fn prev_end(&self) -> usize {
        self.pos
            .checked_sub(1)
            .and_then(|i| self.tokens.get(i))
            .map_or(0, |t| t.end)
    }

    pub(super) fn at(&self, kind: TokenKind) -> bool {
        self.peek().is_some_and(|t| t.kind == kind)
    }

    pub(super) fn at_kw(&self, kw: &str) -> bool {
        self.peek().is_some_and(|t| t.is_keyword(kw))
    }

    pub(super) fn eat(&mut self, kind: TokenKind) -> bool {
        let found = self.at(kind);
        if found {
            self.pos += 1;
        }
        found
    }

    pub(super) fn eat_kw(&mut self, kw: &str) -> bool {
        let found = self.at_kw(kw);
        if found {
            self.pos += 1;
        }
        found
    }

    pub(super) fn expect(&mut self, kind: TokenKind) -> Result<Token, DdlError> {
        if self.at(kind) {
            Ok(self.advance().expect("checked by at()"))
        } else {
            Err(self.unexpected())
        }
    }

    pub(super) fn expect_kw(&mut self, kw: &str) -> Result<(), DdlError> {
        if self.eat_kw(kw) {
            Ok(())
        } else {
            Err(self.unexpected())
        }
    }

    /// PostgreSQL's syntax error for the next token.
    pub(super) fn unexpected(&self) -> DdlError {
        match self.peek() {
            Some(t) => DdlError::Syntax {
                near: self.src[t.start..t.end].to_string(),
                position: t.start,
            },
            None => DdlError::SyntaxAtEnd {
                position: self.src.len(),
            },
        }
    }

    pub(super) fn ident(&mut self) -> Result<Ident, DdlError> {
        match self.peek() {
            Some(t) if matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent) => {
                let tok = self.advance().expect("peeked");
                Ok(Ident {
                    value: tok.value,
                    quoted: tok.kind == TokenKind::QuotedIdent,
                    position: tok.start,
                })
            }
            _ => Err(self.unexpected()),
        }
    }

    pub(super) fn object_name(&mut self) -> Result<ObjectName, DdlError> {
        let mut parts = vec![self.ident()?];
        while self.eat(TokenKind::Dot) {
            parts.push(self.ident()?);
        }
        Ok(ObjectName { parts })
    }

    pub(super) fn ident_list(&mut self) -> Result<Vec<Ident>, DdlError> {
        self.expect(TokenKind::LParen)?;
        let mut idents = vec![self.ident()?];
        while self.eat(TokenKind::Comma) {
            idents.push(self.ident()?);
        }
        self.expect(TokenKind::RParen)?;
        Ok(idents)
    }

    pub(super) fn number_u32(&mut self) -> Result<u32, DdlError> {
        match self.peek() {
            Some(t) if t.kind == TokenKind::Number => match t.value.parse() {
                Ok(n) => {
                    self.pos += 1;
                    Ok(n)
                }
                Err(_) => Err(self.unexpected()),
            },
            _ => Err(self.unexpected()),
        }
    }

    pub(super) fn signed_i32(&mut self) -> Result<i32, DdlError> {
        let negative = self.peek().is_some_and(|t| t.value == "-");
        if negative {
            self.advance();
        }
        let magnitude = i32::try_from(self.number_u32()?).map_err(|_| DdlError::Syntax {
            near: self.src[self.tokens[self.pos - 1].start..self.prev_end()].to_string(),
            position: self.tokens[self.pos - 1].start,
        })?;
        Ok(if negative { -magnitude } else { magnitude })
    }

    /// Skips a balanced `( … )` and returns the source text between the parentheses.
    pub(super) fn skip_parenthesized(&mut self) -> Result<String, DdlError> {
        self.expect(TokenKind::LParen)?;
        let inner_start = self.peek_start();
        let mut depth = 1usize;
        loop {
            let Some(tok) = self.advance() else {
                return Err(self.unexpected());
            };
            match tok.kind {
                TokenKind::LParen => depth += 1,
                TokenKind::RParen => {
                    depth -= 1;
                    if depth == 0 {
                        return Ok(self.src[inner_start..tok.start].trim().to_string());
                    }
                }
                _ => {}
            }
        }
    }

    // ---- statements ----------------------------------------------------------------------

    fn statement(&mut self) -> Result<Statement, DdlError> {
        let start = self.peek_start();
        if self.eat_kw("create") {
            if self.eat_kw("sharded") {
                self.expect_kw("table")?;
                self.create_table(TableKind::Sharded, start)
            } else if self.eat_kw("duplicated") {
                self.expect_kw("table")?;
                self.create_table(TableKind::Duplicated, start)
            } else if self.eat_kw("table") {
                self.create_table(TableKind::Plain, start)
            } else if self.eat_kw("tablespace") {
                if self.eat_kw("set") {
                    return self.create_tablespace_set();
                }
                let name = self.ident()?;
                self.expect_kw("on")?;
                self.expect_kw("shard")?;
                let shard = self.ident()?;
                Ok(Statement::CreateTablespace(CreateTablespace {
                    name,
                    shard,
                }))
            } else {
                Err(self.unexpected())
            }
        } else if self.eat_kw("drop") {
            self.expect_kw("tablespace")?;
            let set = self.eat_kw("set");
            let if_exists = self.eat_kw("if");
            if if_exists {
                self.expect_kw("exists")?;
            }
            let name = self.ident()?;
            Ok(if set {
                Statement::DropTablespaceSet(DropTablespaceSet { name, if_exists })
            } else {
                Statement::DropTablespace(DropTablespace { name, if_exists })
            })
        } else if self.eat_kw("alter") {
            self.expect_kw("table")?;
            let table = self.object_name()?;
            if self.eat_kw("using") {
                let ttl = self.ttl()?;
                return Ok(Statement::AlterTtl(AlterTtl { table, ttl }));
            }
            let movement = self.row_movement()?;
            Ok(Statement::AlterRowMovement(AlterRowMovement {
                table,
                movement,
            }))
        } else {
            Err(self.unexpected())
        }
    }

    /// `ENABLE|DISABLE ROW MOVEMENT`.
    fn row_movement(&mut self) -> Result<RowMovement, DdlError> {
        let movement = if self.eat_kw("enable") {
            RowMovement::Enabled
        } else if self.eat_kw("disable") {
            RowMovement::Disabled
        } else {
            return Err(self.unexpected());
        };
        self.expect_kw("row")?;
        self.expect_kw("movement")?;
        Ok(movement)
    }

    fn create_tablespace_set(&mut self) -> Result<Statement, DdlError> {
        let name = self.ident()?;
        let mut set = CreateTablespaceSet {
            name,
            shards: Vec::new(),
            shardspace: None,
            template: None,
        };
        while let Some(tok) = self.peek() {
            if tok.kind == TokenKind::Semicolon {
                break;
            }
            if self.eat_kw("in") && set.shardspace.is_none() {
                self.expect_kw("shardspace")?;
                set.shardspace = Some(self.ident()?);
            } else if self.eat_kw("using") {
                if self.at_kw("shards") && set.shards.is_empty() {
                    self.advance();
                    set.shards = self.ident_list()?;
                } else if self.at_kw("template") && set.template.is_none() {
                    self.advance();
                    set.template = Some(self.skip_parenthesized()?);
                } else {
                    return Err(self.unexpected());
                }
            } else {
                return Err(self.unexpected());
            }
        }
        Ok(Statement::CreateTablespaceSet(set))
    }

    fn create_table(&mut self, kind: TableKind, start: usize) -> Result<Statement, DdlError> {
        let if_not_exists = self.eat_kw("if");
        if if_not_exists {
            self.expect_kw("not")?;
            self.expect_kw("exists")?;
        }
        let name = self.object_name()?;
        let mut columns = Vec::new();
        let mut constraints = Vec::new();
        self.expect(TokenKind::LParen)?;
        loop {
            if self.starts_table_constraint() {
                constraints.push(self.table_constraint()?);
            } else {
                let (column, lifted) = self.column_def()?;
                columns.push(column);
                constraints.extend(lifted);
            }
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen)?;
        let mut table = CreateTable {
            kind,
            if_not_exists,
            name,
            columns,
            constraints,
            distribution: Distribution::None,
            parent: None,
            tablespace: None,
            row_movement: None,
            ttl: None,
            non_postgres_syntax: false,
            nosql: false,
        };
        let clauses = self.table_clauses(&mut table, start)?;
        let nosql_syntax = self.nosql_syntax || self.saw_nosql_comment;
        table.non_postgres_syntax = self.non_postgres_syntax || nosql_syntax;
        table.nosql = nosql_syntax && kind == TableKind::Plain;
        if let Some(position) = clauses.stray_quote.filter(|_| !table.nosql) {
            return Err(DdlError::UnterminatedIdentifier {
                near: self.src[position..].to_string(),
                position,
            });
        }
        if let (Some(position), false) = (clauses.ttl_at, table.nosql) {
            let kind = match kind {
                TableKind::Duplicated => "DUPLICATED",
                TableKind::Sharded | TableKind::Plain => "SHARDED",
            };
            return Err(DdlError::TtlOnOracleTable { kind, position });
        }
        validate_create_table(&mut table, clauses.partitioning_at)?;
        Ok(Statement::CreateTable(table))
    }

    /// Parses the clauses after the column list into `table`; says where some of them
    /// started, for errors about them.
    fn table_clauses(
        &mut self,
        table: &mut CreateTable,
        stmt_start: usize,
    ) -> Result<Clauses, DdlError> {
        let mut partitioning_at = None;
        let mut parent_at = None;
        let mut ttl_at = None;
        let mut stray_quote = None;
        while let Some(tok) = self.peek() {
            if tok.kind == TokenKind::StrayQuote {
                stray_quote = Some(tok.start);
                self.advance();
                break;
            }
            let at = tok.start;
            let is_partitioning = tok.is_keyword("partition") || tok.is_keyword("partitionset");
            let duplicate = match tok.value.as_str() {
                _ if tok.kind != TokenKind::Word => false,
                "parent" => table.parent.is_some(),
                "partition" | "partitionset" => partitioning_at.is_some(),
                "tablespace" => table.tablespace.is_some(),
                "enable" | "disable" => table.row_movement.is_some(),
                "using" => table.ttl.is_some(),
                _ => false,
            };
            if tok.kind == TokenKind::Semicolon {
                break;
            }
            if duplicate {
                return Err(self.unexpected());
            }
            if is_partitioning {
                table.distribution = self.partitioning(stmt_start)?;
                partitioning_at = Some(at);
            } else if self.eat_kw("parent") {
                table.parent = Some(self.object_name()?);
                parent_at = Some(at);
            } else if self.eat_kw("tablespace") {
                table.tablespace = Some(if self.eat_kw("set") {
                    Placement::TablespaceSet(self.ident()?)
                } else {
                    Placement::Tablespace(self.ident()?)
                });
            } else if self.at_kw("enable") || self.at_kw("disable") {
                table.row_movement = Some(self.row_movement()?);
            } else if self.eat_kw("using") {
                table.ttl = Some(self.ttl()?);
                ttl_at = Some(at);
                self.nosql_syntax = true;
            } else {
                return Err(self.unexpected());
            }
        }
        Ok(Clauses {
            partitioning_at: partitioning_at.or(parent_at),
            ttl_at,
            stray_quote,
        })
    }

    /// NoSQL `TTL n HOURS|DAYS` (after USING).
    pub(super) fn ttl(&mut self) -> Result<Ttl, DdlError> {
        self.expect_kw("ttl")?;
        let amount = self.number_u32()?;
        let unit = if self.eat_kw("hours") || self.eat_kw("hour") {
            TtlUnit::Hours
        } else if self.eat_kw("days") || self.eat_kw("day") {
            TtlUnit::Days
        } else {
            return Err(match self.peek() {
                Some(t) if t.kind == TokenKind::Word => DdlError::TtlUnit {
                    unit: self.src[t.start..t.end].to_string(),
                    position: t.start,
                },
                _ => self.unexpected(),
            });
        };
        Ok(Ttl { amount, unit })
    }

    // ---- columns and constraints -----------------------------------------------------------

    fn starts_table_constraint(&self) -> bool {
        let Some(tok) = self.peek() else {
            return false;
        };
        let keyword = ["constraint", "primary", "unique", "foreign", "check"]
            .iter()
            .any(|kw| tok.is_keyword(kw));
        // `unique` or `check` followed by a type would be a column of that name; PostgreSQL
        // reserves these words, so a following `(` (or KEY) decides.
        keyword
            && (tok.is_keyword("constraint")
                || self
                    .peek_nth(1)
                    .is_some_and(|t| t.kind == TokenKind::LParen || t.is_keyword("key")))
    }

    /// A column definition and the key constraints written on it, lifted to table level.
    fn column_def(&mut self) -> Result<(ColumnDef, Vec<TableConstraint>), DdlError> {
        let name = self.ident()?;
        let data_type = self.data_type()?;
        let mut constraints = Vec::new();
        let mut lifted = Vec::new();
        let column = || vec![name.clone()];
        loop {
            let constraint_name = if self.eat_kw("constraint") {
                Some(self.ident()?)
            } else {
                None
            };
            let body = if self.eat_kw("not") {
                self.expect_kw("null")?;
                ColumnConstraintBody::NotNull
            } else if self.eat_kw("null") {
                ColumnConstraintBody::Null
            } else if self.eat_kw("default") {
                ColumnConstraintBody::Default(self.default_expr()?)
            } else if self.eat_kw("generated") {
                let always = if self.eat_kw("always") {
                    true
                } else {
                    self.expect_kw("by")?;
                    self.expect_kw("default")?;
                    false
                };
                self.expect_kw("as")?;
                self.expect_kw("identity")?;
                let options = if self.at(TokenKind::LParen) {
                    Some(self.skip_parenthesized()?)
                } else {
                    None
                };
                ColumnConstraintBody::Identity { always, options }
            } else if self.at_kw("check") {
                self.advance();
                ColumnConstraintBody::Check(self.skip_parenthesized()?)
            } else {
                let lifted_body = if self.eat_kw("primary") {
                    self.expect_kw("key")?;
                    ConstraintBody::PrimaryKey(PrimaryKey {
                        columns: column(),
                        shard_key_len: None,
                    })
                } else if self.eat_kw("unique") {
                    ConstraintBody::Unique(column())
                } else if self.eat_kw("references") {
                    ConstraintBody::ForeignKey {
                        columns: column(),
                        target: self.foreign_key_target()?,
                    }
                } else if constraint_name.is_some() {
                    return Err(self.unexpected());
                } else {
                    break;
                };
                lifted.push(TableConstraint {
                    name: constraint_name,
                    body: lifted_body,
                });
                continue;
            };
            constraints.push(ColumnConstraint {
                name: constraint_name,
                body,
            });
        }
        let column = ColumnDef {
            name,
            data_type,
            constraints,
        };
        Ok((column, lifted))
    }

    /// The source text of a DEFAULT expression: up to the next constraint keyword, `,` or `)`
    /// at its top level.
    fn default_expr(&mut self) -> Result<String, DdlError> {
        let start = self.peek_start();
        let first = self.pos;
        let mut parens = 0usize;
        let mut cases = 0usize;
        while let Some(tok) = self.peek() {
            let top = parens == 0 && cases == 0;
            match tok.kind {
                TokenKind::LParen => parens += 1,
                TokenKind::RParen if parens == 0 => break,
                TokenKind::RParen => parens -= 1,
                TokenKind::Comma | TokenKind::Semicolon if parens == 0 => break,
                TokenKind::Word if tok.value == "case" => cases += 1,
                TokenKind::Word if tok.value == "end" && cases > 0 => cases -= 1,
                TokenKind::Word
                    if top
                        && self.pos > first
                        && DEFAULT_STOP_WORDS.contains(&tok.value.as_str()) =>
                {
                    break
                }
                _ => {}
            }
            self.pos += 1;
        }
        if self.pos == first {
            return Err(self.unexpected());
        }
        Ok(self.src[start..self.prev_end()].to_string())
    }

    fn table_constraint(&mut self) -> Result<TableConstraint, DdlError> {
        let name = if self.eat_kw("constraint") {
            Some(self.ident()?)
        } else {
            None
        };
        let body = if self.eat_kw("primary") {
            self.expect_kw("key")?;
            ConstraintBody::PrimaryKey(self.primary_key_columns()?)
        } else if self.eat_kw("unique") {
            ConstraintBody::Unique(self.ident_list()?)
        } else if self.eat_kw("foreign") {
            self.expect_kw("key")?;
            let columns = self.ident_list()?;
            self.expect_kw("references")?;
            ConstraintBody::ForeignKey {
                columns,
                target: self.foreign_key_target()?,
            }
        } else if self.eat_kw("check") {
            ConstraintBody::Check(self.skip_parenthesized()?)
        } else {
            return Err(self.unexpected());
        };
        Ok(TableConstraint { name, body })
    }

    /// `(a, b)` or NoSQL `(SHARD(a, b), c)`; SHARD(...) must come first, and only once.
    fn primary_key_columns(&mut self) -> Result<PrimaryKey, DdlError> {
        self.expect(TokenKind::LParen)?;
        let mut pk = PrimaryKey {
            columns: Vec::new(),
            shard_key_len: None,
        };
        loop {
            let shard_at = self.peek_start();
            let is_shard =
                self.at_kw("shard") && self.peek_nth(1).map(|t| t.kind) == Some(TokenKind::LParen);
            if is_shard {
                if !pk.columns.is_empty() || pk.shard_key_len.is_some() {
                    return Err(DdlError::ShardKeyNotPrefix { position: shard_at });
                }
                self.advance();
                pk.columns = self.ident_list()?;
                pk.shard_key_len = Some(pk.columns.len());
                self.nosql_syntax = true;
            } else {
                pk.columns.push(self.ident()?);
            }
            if !self.eat(TokenKind::Comma) {
                break;
            }
        }
        self.expect(TokenKind::RParen)?;
        Ok(pk)
    }

    fn foreign_key_target(&mut self) -> Result<ForeignKeyTarget, DdlError> {
        let table = self.object_name()?;
        let columns = if self.at(TokenKind::LParen) {
            self.ident_list()?
        } else {
            Vec::new()
        };
        let mut target = ForeignKeyTarget {
            table,
            columns,
            on_delete: None,
            on_update: None,
        };
        while self.at_kw("on") {
            let slot = match self.peek_nth(1) {
                Some(t) if t.is_keyword("delete") && target.on_delete.is_none() => {
                    &mut target.on_delete
                }
                Some(t) if t.is_keyword("update") && target.on_update.is_none() => {
                    &mut target.on_update
                }
                _ => break,
            };
            self.pos += 2;
            *slot = Some(if self.eat_kw("cascade") {
                ReferentialAction::Cascade
            } else if self.eat_kw("restrict") {
                ReferentialAction::Restrict
            } else if self.eat_kw("set") {
                if self.eat_kw("null") {
                    ReferentialAction::SetNull
                } else {
                    self.expect_kw("default")?;
                    ReferentialAction::SetDefault
                }
            } else {
                self.expect_kw("no")?;
                self.expect_kw("action")?;
                ReferentialAction::NoAction
            });
        }
        Ok(target)
    }
}
