//! The syntax tree of the sharding DDL. Names are already folded (see [`Ident`]); types are
//! already mapped to PostgreSQL ([`DataType`]); expressions are kept as the user's source text so
//! the rewrite can hand them to PostgreSQL unchanged.

use super::types::{DataType, PgType, TypeOptions};
use crate::model::RowMovement;
pub use crate::model::{Ttl, TtlUnit};

/// An identifier after PostgreSQL's folding: unquoted names are lower case, quoted names keep
/// their case. `quoted` is kept so the rewrite can tell `"Orders"` from `orders` when it quotes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Ident {
    pub value: String,
    pub quoted: bool,
    /// Byte offset of the identifier in the statement.
    pub position: usize,
}

impl Ident {
    pub fn as_str(&self) -> &str {
        &self.value
    }
}

/// A possibly qualified name. Two parts are `schema.table` in PostgreSQL and `parent.child` in
/// Oracle NoSQL; only the catalog can tell which (a NoSQL child names an existing table).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ObjectName {
    pub parts: Vec<Ident>,
}

impl ObjectName {
    /// The last part: the table's own name.
    pub fn name(&self) -> &Ident {
        // The parser never builds an empty name.
        &self.parts[self.parts.len() - 1]
    }

    /// Everything before the last part (schema, or NoSQL parent path).
    pub fn qualifier(&self) -> &[Ident] {
        &self.parts[..self.parts.len() - 1]
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Statement {
    CreateTable(CreateTable),
    CreateTablespaceSet(CreateTablespaceSet),
    DropTablespaceSet(DropTablespaceSet),
    CreateTablespace(CreateTablespace),
    DropTablespace(DropTablespace),
    AlterRowMovement(AlterRowMovement),
    /// Oracle NoSQL `ALTER TABLE t USING TTL n HOURS|DAYS`.
    AlterTtl(AlterTtl),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TableKind {
    /// `CREATE SHARDED TABLE`, or a `CREATE TABLE` in the Oracle NoSQL dialect
    /// ([`CreateTable::nosql`]).
    Sharded,
    /// `CREATE DUPLICATED TABLE`: a full copy on every shard.
    Duplicated,
    /// A plain `CREATE TABLE` (PostgreSQL's or Oracle's): unsharded, unless it is a NoSQL child.
    Plain,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreateTable {
    pub kind: TableKind,
    pub if_not_exists: bool,
    pub name: ObjectName,
    pub columns: Vec<ColumnDef>,
    pub constraints: Vec<TableConstraint>,
    pub distribution: Distribution,
    /// `PARENT parent_table`: a table family declared without a foreign key.
    pub parent: Option<ObjectName>,
    /// Table-level `TABLESPACE SET ts` (sharded) or `TABLESPACE t` (duplicated).
    pub tablespace: Option<Placement>,
    pub row_movement: Option<RowMovement>,
    /// Oracle NoSQL `USING TTL n HOURS|DAYS`.
    pub ttl: Option<Ttl>,
    /// Whether the statement used syntax PostgreSQL rejects (Oracle or NoSQL type names,
    /// `SHARD(...)`, `//` comments, TTL), so a plain `CREATE TABLE` must be rewritten rather than
    /// passed through.
    pub non_postgres_syntax: bool,
    /// A plain `CREATE TABLE` in the Oracle NoSQL dialect, told by what only NoSQL has: its
    /// type names (LONG, STRING, BINARY, ENUM, RECORD, ARRAY, MAP), `SHARD(...)`, `USING TTL`,
    /// `//` and `#` comments. (A `parent.child` name whose parent is a NoSQL table also makes a
    /// NoSQL table; only the catalog can tell that.) Such a table is sharded.
    pub nosql: bool,
}

impl CreateTable {
    /// The statement with its column types mapped under `options`.
    pub fn with_type_options(&self, options: TypeOptions) -> CreateTable {
        let mut table = self.clone();
        for column in &mut table.columns {
            column.data_type.pg = column.data_type.pg.clone().with_options(options);
        }
        table
    }

    /// The statement with NoSQL's meaning of the type names PostgreSQL reads differently.
    pub fn in_nosql_table(&self) -> CreateTable {
        let mut table = self.clone();
        for column in &mut table.columns {
            column.data_type.pg = column.data_type.pg.clone().in_nosql_table();
        }
        table
    }

    /// The sharding key columns as declared: the partitioning columns (the hash columns for
    /// composite sharding), else the NoSQL `SHARD(...)` columns, else the primary key. `None`
    /// for reference-partitioned children (their key is the parent's) and unsharded tables.
    pub fn sharding_key(&self) -> Option<Vec<&Ident>> {
        match &self.distribution {
            Distribution::ConsistentHash { columns, .. }
            | Distribution::Composite {
                hash_columns: columns,
                ..
            }
            | Distribution::Range { columns, .. } => Some(columns.iter().collect()),
            Distribution::List { column, .. } => Some(vec![column]),
            Distribution::Reference { .. } => None,
            Distribution::PrimaryKey => {
                let pk = self.primary_key()?;
                let len = pk.shard_key_len.unwrap_or(pk.columns.len());
                Some(pk.columns[..len].iter().collect())
            }
            Distribution::None => None,
        }
    }

    /// The primary key, whether declared on a column or as a table constraint.
    pub fn primary_key(&self) -> Option<&PrimaryKey> {
        self.constraints.iter().find_map(|c| match &c.body {
            ConstraintBody::PrimaryKey(pk) => Some(pk),
            _ => None,
        })
    }

    /// Each foreign key with its name: as declared, or the one PostgreSQL gives it (a later
    /// unnamed one on the same columns gets `…_fkey1`, as PostgreSQL numbers them), so that
    /// `PARTITION BY REFERENCE` can name either.
    pub fn foreign_keys(&self) -> Vec<(&TableConstraint, String)> {
        let mut taken: Vec<String> = self
            .constraints
            .iter()
            .filter_map(|c| c.name.as_ref().map(|n| n.value.clone()))
            .collect();
        let mut named = Vec::new();
        for c in &self.constraints {
            let ConstraintBody::ForeignKey { columns, .. } = &c.body else {
                continue;
            };
            let name = match &c.name {
                Some(n) => n.value.clone(),
                None => {
                    let columns: Vec<&str> = columns.iter().map(|i| i.value.as_str()).collect();
                    let table = &self.name.name().value;
                    let mut pass = 0;
                    loop {
                        let label = match pass {
                            0 => "fkey".to_owned(),
                            n => format!("fkey{n}"),
                        };
                        let name = super::naming::foreign_key_name(table, &columns, &label);
                        if !taken.contains(&name) {
                            break name;
                        }
                        pass += 1;
                    }
                }
            };
            taken.push(name.clone());
            named.push((c, name));
        }
        named
    }

    pub fn column(&self, name: &str) -> Option<&ColumnDef> {
        self.columns.iter().find(|c| c.name.value == name)
    }

    /// The first column whose type Oracle NoSQL does not have, as the error a NoSQL table
    /// gets for it.
    pub fn non_nosql_type(&self) -> Option<super::DdlError> {
        self.columns
            .iter()
            .find(|c| c.data_type.nosql == super::types::NoSqlName::Other)
            .map(|c| super::DdlError::NotNoSqlType {
                name: c.data_type.source.clone(),
                position: c.data_type.position,
            })
    }
}

#[derive(Debug, Clone, PartialEq)]
pub enum Distribution {
    /// Not distributed: duplicated and plain tables.
    None,
    /// A sharded table without a partitioning clause: sharded by consistent hash on its NoSQL
    /// shard key, or on its whole primary key.
    PrimaryKey,
    /// `PARTITION BY CONSISTENT HASH (columns) [PARTITIONS AUTO | PARTITIONS n]`.
    ConsistentHash {
        columns: Vec<Ident>,
        partitions: PartitionCount,
    },
    /// `PARTITION BY REFERENCE (fk_constraint)`: placed with the parent the foreign key names.
    Reference { constraint: Ident },
    /// `PARTITIONSET BY LIST|RANGE (set_columns) PARTITION BY CONSISTENT HASH (hash_columns)
    /// PARTITIONS ... (PARTITIONSET ..., ...)`.
    Composite {
        set_method: SetMethod,
        set_columns: Vec<Ident>,
        hash_columns: Vec<Ident>,
        partitions: PartitionCount,
        partition_sets: Vec<NamedPartition>,
    },
    /// User-defined `PARTITION BY LIST (column) (PARTITION p VALUES (...) TABLESPACE t, ...)`.
    List {
        column: Ident,
        partitions: Vec<NamedPartition>,
    },
    /// User-defined `PARTITION BY RANGE (columns) (PARTITION p VALUES LESS THAN (...) ...)`.
    Range {
        columns: Vec<Ident>,
        partitions: Vec<NamedPartition>,
    },
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum SetMethod {
    List,
    Range,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum PartitionCount {
    /// `PARTITIONS AUTO` (or no PARTITIONS clause): `chunks_per_shard` × shards.
    Auto,
    Fixed(u32),
}

/// A partition (user-defined) or partition set (composite) with its bound and placement.
#[derive(Debug, Clone, PartialEq)]
pub struct NamedPartition {
    pub name: Ident,
    pub bound: PartitionBound,
    /// `TABLESPACE SET ts` for a partition set, `TABLESPACE t` for a partition.
    pub placement: Placement,
}

#[derive(Debug, Clone, PartialEq)]
pub enum PartitionBound {
    /// `VALUES (v1, v2)` or, for several columns, `VALUES ((a1, b1), (a2, b2))`: each entry is
    /// one tuple with a value per partitioning column.
    In(Vec<Vec<Value>>),
    /// `VALUES LESS THAN (v1, v2)`: one value per partitioning column.
    LessThan(Vec<Value>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Placement {
    TablespaceSet(Ident),
    Tablespace(Ident),
}

/// A literal in a partition bound.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    String(String),
    /// The number's text, sign included, so no precision is lost before PostgreSQL reads it.
    Number(String),
    Null,
    /// `DEFAULT` in a list bound: every value no other partition takes.
    Default,
    /// `MAXVALUE` in a range bound.
    MaxValue,
    /// A typed literal such as `DATE '2024-01-01'`; `type_name` is folded to lower case.
    Typed {
        type_name: String,
        value: String,
    },
}

#[derive(Debug, Clone, PartialEq)]
pub struct ColumnDef {
    pub name: Ident,
    pub data_type: DataType,
    pub constraints: Vec<ColumnConstraint>,
}

impl ColumnDef {
    /// A column declared `NOT NULL` (a primary key also implies it, see [`CreateTable`]).
    pub fn not_null(&self) -> bool {
        self.constraints
            .iter()
            .any(|c| matches!(c.body, ColumnConstraintBody::NotNull))
    }

    /// Whether the column makes its own values (a serial type or an identity).
    pub fn generated(&self) -> Option<Generated> {
        if let Some(always) = self.constraints.iter().find_map(|c| match c.body {
            ColumnConstraintBody::Identity { always, .. } => Some(always),
            _ => None,
        }) {
            return Some(Generated::Identity { always });
        }
        match &self.data_type.pg {
            PgType::Native(name)
                if matches!(
                    name.to_ascii_lowercase().as_str(),
                    "smallserial" | "serial" | "bigserial" | "serial2" | "serial4" | "serial8"
                ) =>
            {
                Some(Generated::Serial)
            }
            _ => None,
        }
    }

    /// The names of a NoSQL `ENUM(...)` column.
    pub fn enum_values(&self) -> Option<&[String]> {
        match &self.data_type.pg {
            PgType::Enum(values) => Some(values),
            _ => None,
        }
    }

    pub fn default_expr(&self) -> Option<&str> {
        self.constraints.iter().find_map(|c| match &c.body {
            ColumnConstraintBody::Default(e) => Some(e.as_str()),
            _ => None,
        })
    }
}

/// A constraint written on a column. Column-level `PRIMARY KEY`, `UNIQUE` and `REFERENCES` are
/// recorded as one-column [`TableConstraint`]s instead, so key checks look in one place.
#[derive(Debug, Clone, PartialEq)]
pub struct ColumnConstraint {
    pub name: Option<Ident>,
    pub body: ColumnConstraintBody,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ColumnConstraintBody {
    NotNull,
    Null,
    /// The expression's source text.
    Default(String),
    /// The expression's source text, without the enclosing parentheses.
    Check(String),
    /// `GENERATED ALWAYS | BY DEFAULT AS IDENTITY [(sequence options)]`.
    Identity {
        always: bool,
        /// The sequence options' source text, without the parentheses.
        options: Option<String>,
    },
}

/// How a column generates its values when an INSERT gives none.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Generated {
    /// `smallserial`, `serial`, `bigserial`.
    Serial,
    /// An identity column; `always` refuses values given explicitly.
    Identity { always: bool },
}

#[derive(Debug, Clone, PartialEq)]
pub struct TableConstraint {
    pub name: Option<Ident>,
    pub body: ConstraintBody,
}

#[derive(Debug, Clone, PartialEq)]
pub enum ConstraintBody {
    PrimaryKey(PrimaryKey),
    Unique(Vec<Ident>),
    ForeignKey {
        columns: Vec<Ident>,
        target: ForeignKeyTarget,
    },
    /// The expression's source text, without the enclosing parentheses.
    Check(String),
}

#[derive(Debug, Clone, PartialEq)]
pub struct PrimaryKey {
    pub columns: Vec<Ident>,
    /// NoSQL `PRIMARY KEY (SHARD(a, b), c)`: the shard key is the first `shard_key_len` columns.
    pub shard_key_len: Option<usize>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct ForeignKeyTarget {
    pub table: ObjectName,
    /// Empty when the referenced table's primary key is meant.
    pub columns: Vec<Ident>,
    pub on_delete: Option<ReferentialAction>,
    pub on_update: Option<ReferentialAction>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ReferentialAction {
    Cascade,
    SetNull,
    SetDefault,
    Restrict,
    NoAction,
}

#[derive(Debug, Clone, PartialEq)]
pub struct CreateTablespaceSet {
    pub name: Ident,
    /// `USING SHARDS (s1, s2)`; empty means every shard.
    pub shards: Vec<Ident>,
    /// Oracle's `IN SHARDSPACE name`, recorded; shardwire has one shardspace.
    pub shardspace: Option<Ident>,
    /// Oracle's `USING TEMPLATE (...)` storage options, as source text. PostgreSQL shards have no
    /// equivalent, so they are accepted and ignored.
    pub template: Option<String>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct DropTablespaceSet {
    pub name: Ident,
    pub if_exists: bool,
}

/// `CREATE TABLESPACE name ON SHARD shard`: a tablespace of user-defined sharding, which is one
/// shard. It lives in the catalog only; no shard gets a PostgreSQL tablespace.
#[derive(Debug, Clone, PartialEq)]
pub struct CreateTablespace {
    pub name: Ident,
    pub shard: Ident,
}

/// `DROP TABLESPACE [IF EXISTS] name` of a tablespace the catalog records.
#[derive(Debug, Clone, PartialEq)]
pub struct DropTablespace {
    pub name: Ident,
    pub if_exists: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlterTtl {
    pub table: ObjectName,
    pub ttl: Ttl,
}

#[derive(Debug, Clone, PartialEq)]
pub struct AlterRowMovement {
    pub table: ObjectName,
    pub movement: RowMovement,
}
