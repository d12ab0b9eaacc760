//! shardwire's own parser for the sharding DDL of DESIGN.md §2. Everything else is PostgreSQL
//! SQL and goes to PostgreSQL's parser; [`is_sharding_ddl`] tells the two apart from the first
//! keywords. [`rewrite`] turns a parsed CREATE into the plain PostgreSQL each shard runs and
//! enforces the sharding rules that need the catalog.
//!
//! # Grammar
//!
//! Keywords are case-insensitive; unquoted names fold to lower case and "quoted" names keep their
//! case, as in PostgreSQL. Comments are `-- …`, `/* … */` and Oracle NoSQL's `// …`. A statement
//! may end with `;`.
//!
//! ```text
//! statement    := create_table | create_ts_set | drop_ts_set | create_ts | drop_ts
//!               | alter_movement
//!
//! create_table := CREATE [SHARDED | DUPLICATED] TABLE [IF NOT EXISTS] name
//!                 '(' element {',' element} ')' {table_clause}
//! element      := column_def | table_constraint
//! column_def   := ident type {column_constraint}
//! column_constraint := [CONSTRAINT ident] ( NOT NULL | NULL | DEFAULT expr | PRIMARY KEY
//!                 | UNIQUE | REFERENCES name ['(' idents ')'] {on_action} | CHECK '(' expr ')' )
//! table_constraint := [CONSTRAINT ident] ( PRIMARY KEY '(' key_part {',' key_part} ')'
//!                 | UNIQUE '(' idents ')' | CHECK '(' expr ')'
//!                 | FOREIGN KEY '(' idents ')' REFERENCES name ['(' idents ')'] {on_action} )
//! key_part     := ident | SHARD '(' idents ')'          -- SHARD(...) only first (NoSQL)
//! on_action    := ON (DELETE | UPDATE) (CASCADE | SET NULL | SET DEFAULT | RESTRICT | NO ACTION)
//!
//! table_clause := PARENT name
//!               | PARTITION BY CONSISTENT HASH '(' idents ')' [partitions]
//!               | PARTITION BY REFERENCE '(' ident ')'
//!               | PARTITION BY LIST '(' ident ')' '(' partition {',' partition} ')'
//!               | PARTITION BY RANGE '(' idents ')' '(' partition {',' partition} ')'
//!               | PARTITIONSET BY (LIST '(' ident ')' | RANGE '(' idents ')')
//!                 PARTITION BY CONSISTENT HASH '(' idents ')' [partitions]
//!                 '(' partition_set {',' partition_set} ')'
//!               | TABLESPACE SET ident | TABLESPACE ident
//!               | (ENABLE | DISABLE) ROW MOVEMENT
//!               | USING TTL number (HOURS | DAYS)                 -- NoSQL, recorded
//! partitions   := PARTITIONS (AUTO | number)
//! partition    := PARTITION ident bound TABLESPACE ident
//! partition_set:= PARTITIONSET ident bound TABLESPACE SET ident
//! bound        := VALUES '(' item {',' item} ')' | VALUES LESS THAN '(' value {',' value} ')'
//! item         := value | '(' value {',' value} ')'
//! value        := string | [+|-] number | NULL | DEFAULT | MAXVALUE | type_word string
//!
//! create_ts_set:= CREATE TABLESPACE SET ident [IN SHARDSPACE ident]
//!                 [USING SHARDS '(' idents ')'] [USING TEMPLATE '(' … ')']
//! drop_ts_set  := DROP TABLESPACE SET [IF EXISTS] ident
//! create_ts    := CREATE TABLESPACE ident ON SHARD ident
//! drop_ts      := DROP TABLESPACE [IF EXISTS] ident
//! alter_movement := ALTER TABLE name (ENABLE | DISABLE) ROW MOVEMENT
//! name         := ident {'.' ident}
//! ```
//!
//! `expr` is kept as source text up to the next constraint keyword, `,` or `)` at its nesting
//! level; types are described in [`types`]. Each table clause may appear once, in any order.
//!
//! # Rules decided here
//!
//! - `PARTITIONSET BY LIST` with several columns fails with ORA-02514 and a user-defined
//!   `PARTITION BY LIST` with several columns with ORA-03813, as soon as the column list is read
//!   (as Oracle does, before the rest of the statement is checked).
//! - `SHARD(...)` must open the primary key (the NoSQL rule: the shard key is a prefix of the
//!   primary key, in order), cannot be combined with a partitioning clause, and a family child
//!   (`PARENT`, `PARTITION BY REFERENCE`) cannot declare one.
//! - A plain `CREATE TABLE` whose primary key names a `SHARD(...)` key is a sharded table.
//! - A sharded table without a partitioning clause is sharded by consistent hash on its shard key
//!   or else its primary key; without either it is an error.
//! - Partitioning columns and key columns must be columns of the table; range bounds and list
//!   values have one value per partitioning column; every partition names its tablespace (set).
//! - `REFERENCE (fk)` must name a foreign key constraint of the same table.

pub mod ast;
mod layout;
pub mod lexer;
mod parser;
mod partition;
pub mod render;
pub mod rewrite;
mod rules;
pub mod types;
mod validate;

use tokio_postgres::error::SqlState;

pub use ast::*;
pub use parser::{parse, parse_script};
pub use types::{DataType, PgType};

use lexer::{Lexer, TokenKind};

/// Where a key column was named, for PostgreSQL's wording of a missing column.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum KeyKind {
    Constraint,
    Partition,
}

impl KeyKind {
    fn describe(self) -> &'static str {
        match self {
            KeyKind::Constraint => "key",
            KeyKind::Partition => "partition key",
        }
    }
}

/// Errors of the sharding DDL parser. Positions are byte offsets into the statement text.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum DdlError {
    #[error("syntax error at or near \"{near}\"")]
    Syntax { near: String, position: usize },
    #[error("syntax error at end of input")]
    SyntaxAtEnd { position: usize },
    #[error("unterminated quoted string at or near \"{near}\"")]
    UnterminatedString { near: String, position: usize },
    #[error("unterminated quoted identifier at or near \"{near}\"")]
    UnterminatedIdentifier { near: String, position: usize },
    #[error("unterminated /* comment at or near \"{near}\"")]
    UnterminatedComment { near: String, position: usize },
    #[error("zero-length delimited identifier at or near \"{near}\"")]
    ZeroLengthIdentifier { near: String, position: usize },
    #[error("ORA-02514: list PARTITIONSET method expects a single partitioning column")]
    ListPartitionSetColumns { position: usize },
    #[error(
        "ORA-03813: list partition method expects a single partitioning column in user-defined sharding"
    )]
    ListPartitionColumns { position: usize },
    #[error("the shard key must be a prefix of the primary key, in order: write PRIMARY KEY (SHARD(a, b), c) with SHARD(...) first and only once")]
    ShardKeyNotPrefix { position: usize },
    #[error("SHARD(...) in the primary key and the PARTITION BY clause both give a sharding key; keep one")]
    ShardKeyWithPartitioning { position: usize },
    #[error("a child table cannot declare a shard key; it is sharded by its parent's key, so remove SHARD(...)")]
    ShardKeyInChild { position: usize },
    #[error("a {kind} table is not partitioned across shards; use CREATE SHARDED TABLE, or remove the PARTITION BY/PARENT clause")]
    PartitioningOnUnsharded { kind: &'static str, position: usize },
    #[error("sharded table \"{table}\" has no sharding key: add PARTITION BY CONSISTENT HASH (columns) or a PRIMARY KEY")]
    NoShardingKey { table: String, position: usize },
    #[error("PARENT needs a PARTITION BY CONSISTENT HASH (columns) clause naming the columns that hold the parent's sharding key")]
    ParentWithoutKey { position: usize },
    #[error("PARENT and PARTITION BY REFERENCE both name the parent table; keep one")]
    ParentAndReference { position: usize },
    #[error("PARTITION BY REFERENCE (\"{constraint}\") must name a FOREIGN KEY constraint of this table")]
    ReferenceNotForeignKey { constraint: String, position: usize },
    #[error("column \"{column}\" named in {} does not exist", kind.describe())]
    UndefinedKeyColumn {
        column: String,
        kind: KeyKind,
        position: usize,
    },
    #[error("partition \"{partition}\" has {found} value(s) in a bound where {expected} (one per partitioning column) are expected")]
    BoundArity {
        partition: String,
        expected: usize,
        found: usize,
        position: usize,
    },
    #[error(
        "partition \"{partition}\" needs a {clause} clause: it decides where the partition lives"
    )]
    MissingPlacement {
        partition: String,
        clause: &'static str,
        position: usize,
    },
}

impl DdlError {
    pub fn sqlstate(&self) -> SqlState {
        match self {
            DdlError::Syntax { .. }
            | DdlError::SyntaxAtEnd { .. }
            | DdlError::UnterminatedString { .. }
            | DdlError::UnterminatedIdentifier { .. }
            | DdlError::UnterminatedComment { .. }
            | DdlError::ZeroLengthIdentifier { .. } => SqlState::SYNTAX_ERROR,
            DdlError::UndefinedKeyColumn { .. } => SqlState::UNDEFINED_COLUMN,
            DdlError::ListPartitionSetColumns { .. }
            | DdlError::ListPartitionColumns { .. }
            | DdlError::ShardKeyNotPrefix { .. }
            | DdlError::ShardKeyWithPartitioning { .. }
            | DdlError::ShardKeyInChild { .. }
            | DdlError::PartitioningOnUnsharded { .. }
            | DdlError::NoShardingKey { .. }
            | DdlError::ParentWithoutKey { .. }
            | DdlError::ParentAndReference { .. }
            | DdlError::ReferenceNotForeignKey { .. }
            | DdlError::BoundArity { .. }
            | DdlError::MissingPlacement { .. } => SqlState::INVALID_TABLE_DEFINITION,
        }
    }

    /// The byte offset in the statement the error points at.
    pub fn position(&self) -> Option<usize> {
        match self {
            DdlError::Syntax { position, .. }
            | DdlError::SyntaxAtEnd { position }
            | DdlError::UnterminatedString { position, .. }
            | DdlError::UnterminatedIdentifier { position, .. }
            | DdlError::UnterminatedComment { position, .. }
            | DdlError::ZeroLengthIdentifier { position, .. }
            | DdlError::ListPartitionSetColumns { position }
            | DdlError::ListPartitionColumns { position }
            | DdlError::ShardKeyNotPrefix { position }
            | DdlError::ShardKeyWithPartitioning { position }
            | DdlError::ShardKeyInChild { position }
            | DdlError::PartitioningOnUnsharded { position, .. }
            | DdlError::NoShardingKey { position, .. }
            | DdlError::ParentWithoutKey { position }
            | DdlError::ParentAndReference { position }
            | DdlError::ReferenceNotForeignKey { position, .. }
            | DdlError::UndefinedKeyColumn { position, .. }
            | DdlError::BoundArity { position, .. }
            | DdlError::MissingPlacement { position, .. } => Some(*position),
        }
    }

    /// The position as PostgreSQL's ErrorResponse `P` field carries it: 1-based, in characters.
    pub fn error_position(&self, sql: &str) -> Option<u32> {
        let byte = self.position()?.min(sql.len());
        let chars = sql.get(..byte)?.chars().count();
        u32::try_from(chars + 1).ok()
    }
}

/// Whether `sql` is a statement this parser owns, decided from its first keywords only:
/// `CREATE SHARDED|DUPLICATED TABLE`, `CREATE|DROP TABLESPACE SET`, `CREATE TABLESPACE name ON
/// SHARD`, and `ALTER TABLE name ENABLE|DISABLE ROW MOVEMENT`.
///
/// `DROP TABLESPACE name` is PostgreSQL's too; it is ours only when the catalog records `name`,
/// which the caller decides (the parser reads it either way). PostgreSQL's own
/// `CREATE TABLESPACE name [OWNER …] LOCATION '…'` has no `ON SHARD` and is not ours.
///
/// A plain `CREATE TABLE` in Oracle NoSQL syntax cannot be recognised this way: parse every
/// `CREATE TABLE` with [`parse`] and take the result when it succeeds with
/// [`CreateTable::non_postgres_syntax`] set (or a sharded kind); otherwise hand the statement to
/// PostgreSQL unchanged.
pub fn is_sharding_ddl(sql: &str) -> bool {
    let mut lexer = Lexer::new(sql);
    let mut tokens = std::iter::from_fn(move || lexer.next_token().ok().flatten());
    let keyword = |t: Option<lexer::Token>, kws: &[&str]| {
        t.is_some_and(|t| t.kind == TokenKind::Word && kws.contains(&t.value.as_str()))
    };
    let Some(first) = tokens.next() else {
        return false;
    };
    if first.is_keyword("create") {
        match tokens.next() {
            Some(t) if t.is_keyword("sharded") || t.is_keyword("duplicated") => {
                keyword(tokens.next(), &["table"])
            }
            Some(t) if t.is_keyword("tablespace") => match tokens.next() {
                Some(t) if t.is_keyword("set") => true,
                Some(t) if matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent) => {
                    keyword(tokens.next(), &["on"]) && keyword(tokens.next(), &["shard"])
                }
                _ => false,
            },
            _ => false,
        }
    } else if first.is_keyword("drop") {
        keyword(tokens.next(), &["tablespace"]) && keyword(tokens.next(), &["set"])
    } else if first.is_keyword("alter") {
        if !keyword(tokens.next(), &["table"]) {
            return false;
        }
        // Skip the possibly qualified table name.
        let after_name = loop {
            let is_name = tokens
                .next()
                .is_some_and(|t| matches!(t.kind, TokenKind::Word | TokenKind::QuotedIdent));
            if !is_name {
                return false;
            }
            match tokens.next() {
                Some(t) if t.kind == TokenKind::Dot => continue,
                other => break other,
            }
        };
        keyword(after_name, &["enable", "disable"])
            && keyword(tokens.next(), &["row"])
            && keyword(tokens.next(), &["movement"])
    } else {
        false
    }
}
