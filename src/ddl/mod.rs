//! shardwire's own parser for the sharding DDL of docs/architecture.md §2. Everything else is
//! PostgreSQL SQL and goes to PostgreSQL's parser; [`is_sharding_ddl`] tells the two apart from the
//! first keywords. [`rewrite`] turns a parsed CREATE into the plain PostgreSQL each shard runs and
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
pub mod error;
mod layout;
pub mod lexer;
pub mod model;
pub mod naming;
mod parser;
mod partition;
pub mod render;
pub mod rewrite;
pub mod row_ttl;
mod rules;
pub mod ttl;
mod type_parser;
pub mod types;
mod validate;

pub use ast::*;
pub use error::{DdlError, KeyKind};
pub use parser::{parse, parse_script};
pub use types::{DataType, PgType};

use lexer::{Lexer, TokenKind};

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
        match after_name {
            Some(t) if t.is_keyword("using") => keyword(tokens.next(), &["ttl"]),
            other => {
                keyword(other, &["enable", "disable"])
                    && keyword(tokens.next(), &["row"])
                    && keyword(tokens.next(), &["movement"])
            }
        }
    } else {
        false
    }
}
