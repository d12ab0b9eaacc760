//! The errors of the sharding DDL: [`DdlError`] for what the parser and the statement-local
//! checks find, [`RewriteError`] for the rules that need the catalog. Each has its one match to
//! a SQLSTATE.

use tokio_postgres::error::SqlState;

use crate::model::{KeyTypeError, TableKind};

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
    #[error("\"{name}\" is not an Oracle NoSQL type: use INTEGER, LONG, FLOAT, DOUBLE, NUMBER, STRING, BOOLEAN, BINARY, BINARY(n), TIMESTAMP(p), ENUM(...), JSON, RECORD(...), ARRAY(...) or MAP(...)")]
    NotNoSqlType { name: String, position: usize },
    #[error("TTL unit \"{unit}\" is not supported: write USING TTL n HOURS or USING TTL n DAYS")]
    TtlUnit { unit: String, position: usize },
    #[error("a table in Oracle NoSQL syntax needs a PRIMARY KEY: its shard key is SHARD(...) inside the primary key, or the whole primary key")]
    NoSqlWithoutPrimaryKey { position: usize },
    #[error("USING TTL belongs to Oracle NoSQL tables: write CREATE TABLE (not CREATE {kind} TABLE) to give the table a time to live")]
    TtlOnOracleTable { kind: &'static str, position: usize },
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
            DdlError::NotNoSqlType { .. } => SqlState::UNDEFINED_OBJECT,
            DdlError::TtlUnit { .. } => SqlState::INVALID_PARAMETER_VALUE,
            DdlError::TtlOnOracleTable { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            DdlError::NoSqlWithoutPrimaryKey { .. } => SqlState::INVALID_TABLE_DEFINITION,
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
            | DdlError::MissingPlacement { position, .. }
            | DdlError::NotNoSqlType { position, .. }
            | DdlError::TtlUnit { position, .. }
            | DdlError::NoSqlWithoutPrimaryKey { position }
            | DdlError::TtlOnOracleTable { position, .. } => Some(*position),
        }
    }

    /// The position as PostgreSQL's ErrorResponse `P` field carries it: 1-based, in characters.
    pub fn error_position(&self, sql: &str) -> Option<u32> {
        let byte = self.position()?.min(sql.len());
        let chars = sql.get(..byte)?.chars().count();
        u32::try_from(chars + 1).ok()
    }
}

/// Errors of the rewrite; each names the rule and the columns involved.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RewriteError {
    #[error("relation {table} already exists")]
    TableExists { table: String },
    #[error("relation {table} does not exist")]
    UndefinedTable { table: String },
    #[error("tablespace set \"{name}\" does not exist: create it with CREATE TABLESPACE SET {name}, or name an existing one")]
    UndefinedTablespaceSet { name: String },
    #[error("tablespace \"{name}\" does not exist: create it with CREATE TABLESPACE {name} ON SHARD <shard> (or in [[tablespaces]] of the configuration), or name an existing one")]
    UndefinedTablespace { name: String },
    #[error("tablespace set \"{name}\" has no shards; add shards to it first")]
    EmptyTablespaceSet { name: String },
    #[error("there are no shards to place the table on")]
    NoShards,
    #[error("PARTITIONS must be at least 1")]
    ZeroPartitions,
    #[error("name \"{name}\" has too many parts: use table or schema.table")]
    UnsupportedName { name: String },
    #[error("{constraint} of sharded table {table} must contain the sharding key columns ({}); missing: {}", key.join(", "), missing.join(", "))]
    KeyNotInConstraint {
        table: String,
        constraint: String,
        key: Vec<String>,
        missing: Vec<String>,
    },
    #[error("foreign key {constraint} of {table} references {target}, which is in another table family: foreign keys between sharded tables must stay inside one family (make {table} a child with PARTITION BY REFERENCE)")]
    ForeignKeyOutsideFamily {
        table: String,
        constraint: String,
        target: String,
    },
    #[error("{table} must reference the sharding key of {target} so related rows share a shard; its foreign key does not cover: {}", missing.join(", "))]
    ForeignKeyMissesKey {
        table: String,
        target: String,
        missing: Vec<String>,
    },
    #[error("foreign key {constraint} ({}) of sharded table {table} references {target_kind} table {target}: foreign keys from sharded tables to {target_kind} tables are not allowed", columns.join(", "))]
    ShardedToUnshardedOrDuplicated {
        table: String,
        constraint: String,
        columns: Vec<String>,
        target: String,
        target_kind: TableKind,
    },
    #[error("foreign key {constraint} ({}) of {kind} table {table} references {target_kind} table {target}: a {kind} table may reference only {} tables", columns.join(", "), may_reference(*kind))]
    ReferenceAcrossKinds {
        table: String,
        kind: TableKind,
        constraint: String,
        columns: Vec<String>,
        target: String,
        target_kind: TableKind,
    },
    #[error("a child table cannot declare a shard key: {table} is sharded by its parent's key, so remove SHARD(...)")]
    NoSqlChildShardKey { table: String },
    #[error("{table} names the Oracle NoSQL parent table {parent}, which does not exist: create {parent} first")]
    NoSqlParentMissing { table: String, parent: String },
    /// A check of the statement alone that only applies once the catalog has shown the table is
    /// a NoSQL child.
    #[error(transparent)]
    Statement(#[from] DdlError),
    #[error("{table} cannot be a child of {parent}: the parent of a table family must be a sharded table")]
    ParentNotSharded { table: String, parent: String },
    #[error("PARENT {parent}: the PARTITION BY CONSISTENT HASH columns of {table} must hold the parent's key columns ({}), one for one", expected.join(", "))]
    ParentKeyArity {
        table: String,
        parent: String,
        expected: Vec<String>,
    },
    #[error("{table} is placed with its family's root {root}; remove TABLESPACE SET {set}")]
    ChildPlacement {
        table: String,
        root: String,
        set: String,
    },
    #[error("column \"{column}\" has type {column_type} but holds key column \"{root_column}\" of type {root_type}; give it type {root_type} so both hash alike")]
    KeyTypeMismatch {
        column: String,
        column_type: String,
        root_column: String,
        root_type: String,
    },
    #[error("sharding key column \"{column}\": {source}")]
    UnhashableKey {
        column: String,
        source: KeyTypeError,
    },
    #[error("partition \"{partition}\": {reason}")]
    InvalidBound {
        partition: String,
        reason: &'static str,
    },
    #[error("cannot drop table {table} because other tables of its family depend on it: {}; drop them first", children.join(", "))]
    ParentHasChildren {
        table: String,
        children: Vec<String>,
    },
}

impl RewriteError {
    pub fn sqlstate(&self) -> SqlState {
        match self {
            RewriteError::TableExists { .. } => SqlState::DUPLICATE_TABLE,
            RewriteError::UndefinedTable { .. } => SqlState::UNDEFINED_TABLE,
            RewriteError::UndefinedTablespaceSet { .. }
            | RewriteError::UndefinedTablespace { .. } => SqlState::UNDEFINED_OBJECT,
            RewriteError::UnsupportedName { .. } => SqlState::INVALID_NAME,
            RewriteError::NoSqlParentMissing { .. } => SqlState::UNDEFINED_TABLE,
            RewriteError::Statement(e) => e.sqlstate(),
            RewriteError::ForeignKeyOutsideFamily { .. }
            | RewriteError::ForeignKeyMissesKey { .. }
            | RewriteError::ShardedToUnshardedOrDuplicated { .. }
            | RewriteError::ReferenceAcrossKinds { .. } => SqlState::INVALID_FOREIGN_KEY,
            RewriteError::KeyTypeMismatch { .. } => SqlState::DATATYPE_MISMATCH,
            RewriteError::UnhashableKey { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            RewriteError::ParentHasChildren { .. } => SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
            RewriteError::EmptyTablespaceSet { .. }
            | RewriteError::NoShards
            | RewriteError::ZeroPartitions
            | RewriteError::KeyNotInConstraint { .. }
            | RewriteError::NoSqlChildShardKey { .. }
            | RewriteError::ParentNotSharded { .. }
            | RewriteError::ParentKeyArity { .. }
            | RewriteError::ChildPlacement { .. }
            | RewriteError::InvalidBound { .. } => SqlState::INVALID_TABLE_DEFINITION,
        }
    }
}

/// What a table of `kind` may hold a foreign key to, besides its own family.
fn may_reference(kind: TableKind) -> &'static str {
    match kind {
        TableKind::Sharded => "sharded tables of its family",
        TableKind::Duplicated => "duplicated",
        TableKind::Unsharded => "unsharded and duplicated",
    }
}
