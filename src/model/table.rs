//! What a sharded table is, in the terms every layer shares: its kind, its sharding method, its
//! key columns, its partition bounds as stored, its state and row movement. The DDL rewrite
//! produces these, the catalog stores them, the router places rows by them.

use std::fmt;

use super::key_type::{KeyType, KeyTypeError};

/// Defines an enum whose variants are stored in the catalog as fixed lower-case codes; the
/// codes are part of the catalog schema (its CHECK constraints), so they never change.
macro_rules! catalog_enum {
    ($(#[$meta:meta])* $name:ident { $($(#[$vmeta:meta])* $variant:ident = $code:literal),+ $(,)? }) => {
        $(#[$meta])*
        #[derive(Debug, Clone, Copy, PartialEq, Eq, Hash)]
        pub enum $name {
            $($(#[$vmeta])* $variant),+
        }

        impl $name {
            /// The code stored in the catalog.
            pub fn as_str(self) -> &'static str {
                match self {
                    $($name::$variant => $code),+
                }
            }

            /// Reads a stored code; `None` for anything else.
            pub fn from_code(code: &str) -> Option<$name> {
                match code {
                    $($code => Some($name::$variant),)+
                    _ => None,
                }
            }
        }

        impl fmt::Display for $name {
            fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
                f.write_str(self.as_str())
            }
        }
    };
}

catalog_enum!(
    /// How a table is placed.
    TableKind {
        /// Rows spread over shards by a sharding key.
        Sharded = "sharded",
        /// A full copy on every shard of its tablespace set (all shards when it has none).
        Duplicated = "duplicated",
        /// One shard holds it: the table's single chunk 0 says which.
        Unsharded = "unsharded",
    }
);

catalog_enum!(
    /// How a view over recorded tables answers a query, decided from its definition when it is
    /// created (the router's `view` module).
    ViewShape {
        /// Reads one family joined on its key (and duplicated tables): each shard's copy gives
        /// that shard's rows, so the view is read like a table of the family.
        Family = "family",
        /// Reads duplicated tables only: every copy gives every row.
        Duplicated = "duplicated",
        /// Anything else (tables of several families, aggregates over the family, …): a query
        /// over it is planned as the query over its definition.
        Expanded = "expanded",
        /// A materialized view: the whole answer, computed over every shard, held on the
        /// first shard (where statements naming no recorded table go, so its indexes and
        /// `\d` reach it there), over a table the proxy fills at each refresh.
        Materialized = "materialized",
    }
);

catalog_enum!(
    /// Where a chunk move stands (`SHOW MOVES`). A move is recorded in a state before the step
    /// the state names is taken.
    MoveState {
        /// Recorded, nothing made yet.
        Planned = "planned",
        /// The chunk's tables made on the target, its rows copied by logical replication.
        Copying = "copying",
        /// Copied; the target applies the writes made since.
        CatchingUp = "catching_up",
        /// Statements on the chunk held while the target takes it over.
        CuttingOver = "cutting_over",
        /// The target owns the chunk; replication objects are being removed.
        CleaningUp = "cleaning_up",
        Done = "done",
        /// Stopped by an error before the cutover, everything it made removed.
        Failed = "failed",
        /// Stopped (its proxy died, say) and undone by another step.
        RolledBack = "rolled_back",
        /// CANCEL MOVE stopped it before the cutover.
        Canceled = "canceled",
    }
);

catalog_enum!(
    /// How a sharded table's rows map to shards.
    ShardingMethod {
        /// System-managed: PostgreSQL hash partitions (chunks) spread over a tablespace set.
        ConsistentHash = "consistent_hash",
        /// User-defined list partitions, each in a tablespace (one shard).
        List = "list",
        /// User-defined range partitions, each in a tablespace (one shard).
        Range = "range",
        /// List partition sets, each hash-partitioned into chunks over its tablespace set.
        CompositeList = "composite_list",
        /// Range partition sets, each hash-partitioned into chunks over its tablespace set.
        CompositeRange = "composite_range",
        /// A family child: placed with its root, by the columns that map to the root's key.
        Reference = "reference",
    }
);

impl ShardingMethod {
    /// Whether rows are placed by PostgreSQL's partition hash of the sharding key, so the key
    /// types must be ones `router::hash` can hash.
    pub fn hashes_key(self) -> bool {
        match self {
            ShardingMethod::ConsistentHash
            | ShardingMethod::CompositeList
            | ShardingMethod::CompositeRange
            | ShardingMethod::Reference => true,
            ShardingMethod::List | ShardingMethod::Range => false,
        }
    }
}

catalog_enum!(
    /// Where a table is in its life. A multi-shard CREATE records CREATING before touching the
    /// shards and ACTIVE once every shard has it; DROP records DROPPING first. So after a crash
    /// the state says which shards may hold a partial table.
    TableState {
        Creating = "creating",
        Active = "active",
        /// An ALTER TABLE or CREATE INDEX is running on the table's shards.
        Updating = "updating",
        Dropping = "dropping",
    }
);

impl TableState {
    /// The transitions the catalog accepts: CREATING → ACTIVE ⇄ UPDATING → DROPPING, and a
    /// failed CREATE may go straight to DROPPING to be cleaned up.
    pub fn can_become(self, next: TableState) -> bool {
        matches!(
            (self, next),
            (TableState::Creating, TableState::Active)
                | (TableState::Creating, TableState::Dropping)
                | (TableState::Active, TableState::Dropping)
                | (TableState::Active, TableState::Updating)
                | (TableState::Updating, TableState::Active)
                | (TableState::Updating, TableState::Dropping)
        )
    }

    /// Whether reads and writes may use the table: while an ALTER TABLE or CREATE INDEX runs
    /// they may, as on one PostgreSQL (which orders them by its locks).
    pub fn takes_statements(self) -> bool {
        match self {
            TableState::Active | TableState::Updating => true,
            TableState::Creating | TableState::Dropping => false,
        }
    }

    /// As SHOW SHARDED TABLES and messages spell it.
    pub fn label(self) -> String {
        self.as_str().to_uppercase()
    }
}

catalog_enum!(
    /// The unit of an Oracle NoSQL time to live.
    TtlUnit {
        Hours = "hours",
        Days = "days",
    }
);

/// The schema on the shards that holds the data tables of the NoSQL tables of schema `s` is
/// `s` followed by this (see the DDL layer's `ttl` module).
pub const ROWS_SCHEMA_SUFFIX: &str = "$rows";

/// The schema of the NoSQL tables whose data tables live in `schema`, when it is a rows schema.
pub fn nosql_view_schema(schema: &str) -> Option<&str> {
    schema
        .strip_suffix(ROWS_SCHEMA_SUFFIX)
        .filter(|s| !s.is_empty())
}

/// An Oracle NoSQL time to live: `USING TTL 5 DAYS`.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Ttl {
    pub amount: u32,
    pub unit: TtlUnit,
}

/// `ENABLE|DISABLE ROW MOVEMENT`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Hash, Default)]
pub enum RowMovement {
    Enabled,
    #[default]
    Disabled,
}

/// A sharding-key (or partition-set key) column.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyColumn {
    pub name: String,
    /// The column's PostgreSQL type as `KeyType::from_pg_type_name` reads it, e.g. `integer`,
    /// `numeric(10,2)`, `character varying(20)`.
    pub pg_type: String,
}

impl KeyColumn {
    pub fn new(name: impl Into<String>, pg_type: impl Into<String>) -> KeyColumn {
        KeyColumn {
            name: name.into(),
            pg_type: pg_type.into(),
        }
    }

    pub fn key_type(&self) -> Result<KeyType, KeyTypeError> {
        // The names the catalog usually records, told without the general parser's
        // allocations: routing asks this for every keyed statement.
        Ok(match self.pg_type.as_str() {
            "smallint" | "int2" => KeyType::Int2,
            "integer" | "int" | "int4" => KeyType::Int4,
            "bigint" | "int8" => KeyType::Int8,
            "text" => KeyType::Text,
            "uuid" => KeyType::Uuid,
            "date" => KeyType::Date,
            "boolean" | "bool" => KeyType::Bool,
            "numeric" => KeyType::Numeric(None),
            _ => return KeyType::from_pg_type_name(&self.pg_type),
        })
    }
}

/// One value of a partition bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum BoundValue {
    /// The value's text as PostgreSQL's input function for the column type reads it (`10`,
    /// `OR`, `2024-01-01`).
    Literal(String),
    Null,
    /// A list partition's `DEFAULT`: every value no other partition takes.
    Default,
    /// A range bound's `MAXVALUE`.
    MaxValue,
}

/// A list or range bound, one value per partitioning column in each tuple.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PartitionBound {
    /// `VALUES (...)`: the tuples the partition takes.
    In(Vec<Vec<BoundValue>>),
    /// `VALUES LESS THAN (...)`: the exclusive upper bound; the lower bound is the previous
    /// partition's upper bound.
    LessThan(Vec<BoundValue>),
}

impl PartitionBound {
    /// Whether every tuple has `width` values.
    pub fn has_width(&self, width: usize) -> bool {
        match self {
            PartitionBound::In(tuples) => {
                !tuples.is_empty() && tuples.iter().all(|t| t.len() == width)
            }
            PartitionBound::LessThan(values) => values.len() == width,
        }
    }
}
