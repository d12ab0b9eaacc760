//! What the fuzz targets share: one small catalog held in memory, with a table of every kind
//! routing tells apart, the configuration that goes with it, and the columns of its tables (so
//! INSERTs and COPYs without a column list plan without a shard to ask).
//!
//! The targets reach the proxy's own functions through these; nothing here decides anything
//! the proxy decides.

use std::sync::{Arc, OnceLock};

use shardwire::catalog::{
    BoundValue, GeneratedKey, KeyColumn, Partition, PartitionBound, PartitionSet, RowMovement,
    Shard, ShardId, ShardingMethod, Snapshot, Table, TableId, TableKind, TableState, Tablespace,
    TablespaceSet, TablespaceSetId,
};
use shardwire::config::Config;
use shardwire::model::{ChunkId, ChunkMap, Ttl, TtlUnit};
use shardwire::router::plan::{ColumnDef, ColumnSource};
use shardwire::router::PlanCache;

/// The catalog version of [`snapshot`]; plans are cached per version.
pub const VERSION: i64 = 7;

const CONFIG: &str = r#"
[proxy]
listen = "127.0.0.1:6432"
database = "app"
chunks_per_shard = 2
auth_method = "scram-sha-256"

[[users]]
name = "app"
password = "app"

[[shards]]
name = "s1"
url = "postgres://postgres@127.0.0.1:55431/app"

[[shards]]
name = "s2"
url = "postgres://postgres@127.0.0.1:55432/app"

[[shards]]
name = "s3"
url = "postgres://postgres@127.0.0.1:55433/app"

[[shards]]
name = "s4"
url = "postgres://postgres@127.0.0.1:55434/app"
"#;

/// The configuration of four shards, with the defaults for everything a client may hit.
pub fn config() -> &'static Config {
    static CONFIG_ONCE: OnceLock<Config> = OnceLock::new();
    CONFIG_ONCE.get_or_init(|| Config::parse(CONFIG, "fuzz").expect("the fuzz configuration"))
}

/// One table of the fixture: its catalog entry and its columns (name, type) in order.
struct Fixture {
    table: Table,
    columns: &'static [(&'static str, &'static str)],
}

fn sharded(id: i64, name: &str, method: ShardingMethod, key: &[(&str, &str)]) -> Table {
    Table {
        id: TableId(id),
        schema: "public".into(),
        name: name.into(),
        kind: TableKind::Sharded,
        method: Some(method),
        key_columns: key.iter().map(|(n, t)| KeyColumn::new(*n, *t)).collect(),
        partition_set_columns: Vec::new(),
        primary_key: Vec::new(),
        root: TableId(id),
        parent: None,
        row_movement: RowMovement::Disabled,
        state: TableState::Active,
        tablespace_set: None,
        chunks: Default::default(),
        partition_sets: Vec::new(),
        partitions: Vec::new(),
        generated: Vec::new(),
        nosql: false,
        ttl: None,
    }
}

/// A family child of `parent` (whose root is `root`), placed by its columns `key`.
fn child(id: i64, name: &str, parent: i64, root: i64, key: &[(&str, &str)]) -> Table {
    Table {
        parent: Some(TableId(parent)),
        root: TableId(root),
        ..sharded(id, name, ShardingMethod::Reference, key)
    }
}

/// Eight chunks dealt over the four shards in turn, chunk 3 split in two (moduli 8 and 16).
fn chunks() -> ChunkMap {
    ChunkMap::spread(8, &[ShardId(0), ShardId(1), ShardId(2), ShardId(3)])
        .split(ChunkId(3))
        .expect("chunk 3 exists")
}

fn literal(v: &str) -> BoundValue {
    BoundValue::Literal(v.into())
}

fn partition(name: &str, bound: PartitionBound, shard: u32) -> Partition {
    Partition {
        name: name.into(),
        bound,
        tablespace: format!("tbs{}", shard + 1),
        shard: ShardId(shard),
    }
}

fn fixtures() -> Vec<Fixture> {
    let mut accounts = sharded(
        1,
        "accounts",
        ShardingMethod::ConsistentHash,
        &[("id", "bigint")],
    );
    accounts.chunks = chunks();
    accounts.primary_key = vec![KeyColumn::new("id", "bigint")];
    accounts.row_movement = RowMovement::Enabled;

    let mut orders = child(2, "orders", 1, 1, &[("account_id", "bigint")]);
    orders.row_movement = RowMovement::Enabled;

    let mut by_email = sharded(
        3,
        "users_by_email",
        ShardingMethod::ConsistentHash,
        &[("email", "text")],
    );
    by_email.chunks = chunks();

    let mut events = sharded(
        4,
        "events",
        ShardingMethod::ConsistentHash,
        &[("tenant", "bigint"), ("kind", "text")],
    );
    events.chunks = chunks();

    let mut regions = sharded(5, "regions", ShardingMethod::List, &[("state", "text")]);
    regions.partitions = vec![
        partition(
            "west",
            PartitionBound::In(vec![vec![literal("OR")], vec![literal("WA")]]),
            0,
        ),
        partition("south", PartitionBound::In(vec![vec![literal("AZ")]]), 1),
        partition(
            "unknown",
            PartitionBound::In(vec![vec![BoundValue::Null]]),
            2,
        ),
        partition(
            "rest",
            PartitionBound::In(vec![vec![BoundValue::Default]]),
            3,
        ),
    ];

    let mut readings = sharded(6, "readings", ShardingMethod::Range, &[("seq", "bigint")]);
    readings.partitions = vec![
        partition("p1", PartitionBound::LessThan(vec![literal("100")]), 0),
        partition("p2", PartitionBound::LessThan(vec![literal("200")]), 1),
        partition(
            "p3",
            PartitionBound::LessThan(vec![BoundValue::MaxValue]),
            2,
        ),
    ];

    let mut members = sharded(
        7,
        "members",
        ShardingMethod::CompositeList,
        &[("id", "bigint")],
    );
    members.partition_set_columns = vec![KeyColumn::new("class", "text")];
    members.partition_sets = vec![
        PartitionSet {
            name: "silver".into(),
            bound: PartitionBound::In(vec![vec![literal("SLV")], vec![literal("BRZ")]]),
            tablespace_set: TablespaceSetId(1),
            chunks: vec![ShardId(0), ShardId(1), ShardId(0), ShardId(1)].into(),
        },
        PartitionSet {
            name: "gold".into(),
            bound: PartitionBound::In(vec![vec![literal("GLD")]]),
            tablespace_set: TablespaceSetId(2),
            chunks: vec![ShardId(2), ShardId(3), ShardId(2), ShardId(3)].into(),
        },
    ];

    let currencies = Table {
        kind: TableKind::Duplicated,
        method: None,
        key_columns: Vec::new(),
        ..sharded(8, "currencies", ShardingMethod::ConsistentHash, &[])
    };

    let local = Table {
        kind: TableKind::Unsharded,
        method: None,
        key_columns: Vec::new(),
        chunks: vec![ShardId(0)].into(),
        ..sharded(9, "local_settings", ShardingMethod::ConsistentHash, &[])
    };

    let mut tickets = sharded(
        10,
        "tickets",
        ShardingMethod::ConsistentHash,
        &[("id", "bigint")],
    );
    tickets.chunks = chunks();
    tickets.generated = vec![GeneratedKey {
        column: "id".into(),
        always: false,
    }];

    // Oracle NoSQL tables: a root with a time to live, its child `app_users.addresses` and
    // grandchild `app_users.addresses.lines` (stored as `app_users."addresses.lines"`).
    let ttl = Some(Ttl {
        amount: 5,
        unit: TtlUnit::Days,
    });
    let mut app_users = sharded(
        11,
        "app_users",
        ShardingMethod::ConsistentHash,
        &[("uid", "text")],
    );
    app_users.chunks = chunks();
    app_users.nosql = true;
    app_users.ttl = ttl;
    app_users.primary_key = vec![KeyColumn::new("uid", "text")];
    let mut addresses = child(12, "addresses", 11, 11, &[("uid", "text")]);
    addresses.schema = "app_users".into();
    addresses.nosql = true;
    let mut lines = child(13, "addresses.lines", 12, 11, &[("uid", "text")]);
    lines.schema = "app_users".into();
    lines.nosql = true;

    vec![
        Fixture {
            table: accounts,
            columns: &[("id", "bigint"), ("owner", "text"), ("balance", "numeric")],
        },
        Fixture {
            table: orders,
            columns: &[
                ("order_id", "bigint"),
                ("account_id", "bigint"),
                ("total", "numeric"),
                ("note", "text"),
            ],
        },
        Fixture {
            table: by_email,
            columns: &[("email", "text"), ("name", "text")],
        },
        Fixture {
            table: events,
            columns: &[
                ("tenant", "bigint"),
                ("kind", "text"),
                ("at", "date"),
                ("payload", "text"),
            ],
        },
        Fixture {
            table: regions,
            columns: &[("state", "text"), ("city", "text"), ("pop", "integer")],
        },
        Fixture {
            table: readings,
            columns: &[("seq", "bigint"), ("value", "double precision")],
        },
        Fixture {
            table: members,
            columns: &[("id", "bigint"), ("class", "text"), ("name", "text")],
        },
        Fixture {
            table: currencies,
            columns: &[("code", "text"), ("rate", "numeric")],
        },
        Fixture {
            table: local,
            columns: &[("k", "text"), ("v", "text")],
        },
        Fixture {
            table: tickets,
            columns: &[("id", "bigint"), ("title", "text")],
        },
        Fixture {
            table: app_users,
            columns: &[("uid", "text"), ("name", "text")],
        },
        Fixture {
            table: addresses,
            columns: &[("uid", "text"), ("addr_id", "integer"), ("line", "text")],
        },
        Fixture {
            table: lines,
            columns: &[
                ("uid", "text"),
                ("addr_id", "integer"),
                ("line_no", "integer"),
                ("body", "text"),
            ],
        },
    ]
}

/// The catalog the targets route against: four shards, tablespace sets `ts1` (s1, s2) and
/// `ts2` (s3, s4), tablespaces `tbs1`…`tbs4` (one per shard), and the tables of [`fixtures`].
pub fn snapshot() -> Arc<Snapshot> {
    static SNAPSHOT: OnceLock<Arc<Snapshot>> = OnceLock::new();
    SNAPSHOT
        .get_or_init(|| {
            let shards = (0..4)
                .map(|i| Shard {
                    id: ShardId(i),
                    name: format!("s{}", i + 1),
                })
                .collect();
            let sets = vec![
                TablespaceSet {
                    id: TablespaceSetId(1),
                    name: "ts1".into(),
                    shards: vec![ShardId(0), ShardId(1)],
                },
                TablespaceSet {
                    id: TablespaceSetId(2),
                    name: "ts2".into(),
                    shards: vec![ShardId(2), ShardId(3)],
                },
            ];
            let tablespaces = (0..4)
                .map(|i| Tablespace {
                    name: format!("tbs{}", i + 1),
                    shard: ShardId(i),
                })
                .collect();
            let tables = fixtures().into_iter().map(|f| f.table).collect();
            Arc::new(Snapshot::new(VERSION, shards, sets, tablespaces, tables))
        })
        .clone()
}

/// The column definitions of every fixture table, by id.
fn column_defs() -> &'static [(TableId, Arc<Vec<ColumnDef>>)] {
    static DEFS: OnceLock<Vec<(TableId, Arc<Vec<ColumnDef>>)>> = OnceLock::new();
    DEFS.get_or_init(|| {
        fixtures()
            .into_iter()
            .map(|f| {
                let defs = f
                    .columns
                    .iter()
                    .map(|(name, ty)| ColumnDef {
                        name: (*name).into(),
                        type_sql: (*ty).into(),
                        generated: false,
                        collation: None,
                    })
                    .collect();
                (f.table.id, Arc::new(defs))
            })
            .collect()
    })
}

/// The fixture's columns, as the planner asks for them.
pub struct Columns;

impl ColumnSource for Columns {
    fn columns(&self, table: TableId) -> Option<Arc<Vec<String>>> {
        self.column_defs(table)
            .map(|defs| Arc::new(defs.iter().map(|d| d.name.clone()).collect()))
    }

    fn column_defs(&self, table: TableId) -> Option<Arc<Vec<ColumnDef>>> {
        column_defs()
            .iter()
            .find(|(id, _)| *id == table)
            .map(|(_, defs)| defs.clone())
    }
}

/// A plan cache that knows the fixture's columns at [`VERSION`], as a session's cache does once
/// it has fetched them. A small capacity, so that eviction runs too.
pub fn plan_cache() -> PlanCache {
    let cache = PlanCache::new(16);
    // Brings the cache to the snapshot's version, which `set_columns` requires.
    let _ = cache.columns(VERSION, TableId(0));
    for (id, defs) in column_defs() {
        cache.set_columns(VERSION, *id, defs.as_ref().clone());
    }
    cache
}

/// A counter nobody reads, for the planner's parse count.
pub fn parses() -> metrics::Counter {
    metrics::Counter::noop()
}
