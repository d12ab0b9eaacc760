//! The shard catalog against a real PostgreSQL: each test gets its own catalog database on
//! shard 0, so tests run in parallel without seeing each other's entries.

mod common;

use std::sync::Arc;
use std::time::{Duration, Instant};

use common::shards;
use shardwire::catalog::{
    BoundValue, Catalog, CatalogError, KeyColumn, NewPartition, NewTable, PartitionBound,
    PartitionSet, RowMovement, ShardingMethod, Snapshot, TableKind, TableState,
};
use shardwire::config::Config;
use shardwire::model::{ChunkId, ShardId, TableId, TablespaceSetId, Ttl, TtlUnit};
use tokio_postgres::error::SqlState;

const S1: ShardId = ShardId(0);
const S2: ShardId = ShardId(1);

/// Creates database `name` on shard 0 and returns a configuration whose catalog lives there,
/// with `extra` TOML appended (tablespace sets, tablespaces).
async fn catalog_config(name: &str, extra: &str) -> Config {
    let admin = shards().connect(0).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap_or_else(|e| panic!("create database {name}: {e}"));
    config_for(name, extra)
}

fn config_for(db: &str, extra: &str) -> Config {
    let shard0 = shards().url(0);
    let catalog_url = format!("{}/{db}", &shard0[..shard0.rfind('/').unwrap()]);
    let text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\ndatabase = \"app\"\nchunks_per_shard = 2\n\
         [[users]]\nname = \"app\"\npassword = \"app\"\n\
         [catalog]\nurl = \"{catalog_url}\"\n\
         [[shards]]\nname = \"s1\"\nurl = \"{shard0}\"\n\
         [[shards]]\nname = \"s2\"\nurl = \"{}\"\n{extra}",
        shards().url(1)
    );
    Config::parse(&text, "catalog test config").unwrap_or_else(|e| panic!("{e}"))
}

/// A direct connection to the catalog database `db`.
async fn catalog_db(db: &str) -> tokio_postgres::Client {
    let shard0 = shards().url(0);
    let url = format!("{}/{db}", &shard0[..shard0.rfind('/').unwrap()]);
    let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
        .await
        .expect("connect to catalog database");
    tokio::spawn(conn);
    client
}

/// The catalog migrations recorded as applied.
async fn schema_versions(client: &tokio_postgres::Client) -> Vec<String> {
    column(
        client,
        "SELECT version::text FROM shardwire_catalog.schema_version ORDER BY 1",
    )
    .await
}

async fn column(client: &tokio_postgres::Client, sql: &str) -> Vec<String> {
    client
        .query(sql, &[])
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .iter()
        .map(|r| r.get(0))
        .collect()
}

fn key(name: &str, pg_type: &str) -> Vec<KeyColumn> {
    vec![KeyColumn::new(name, pg_type)]
}

/// `customers`, consistent hash on `cust_id integer` over `chunks`.
fn hash_root(name: &str, set: Option<TablespaceSetId>, chunks: Vec<ShardId>) -> NewTable {
    NewTable {
        schema: "public".into(),
        name: name.into(),
        kind: TableKind::Sharded,
        method: Some(ShardingMethod::ConsistentHash),
        key_columns: key("cust_id", "integer"),
        partition_set_columns: Vec::new(),
        primary_key: key("cust_id", "integer"),
        parent: None,
        row_movement: RowMovement::Disabled,
        tablespace_set: set,
        chunks: chunks.into(),
        partition_sets: Vec::new(),
        partitions: Vec::new(),
        nosql: false,
        ttl: None,
    }
}

/// A family child of `parent` whose column `column` maps to the root's key.
fn child(name: &str, parent: TableId, column: &str) -> NewTable {
    NewTable {
        method: Some(ShardingMethod::Reference),
        key_columns: key(column, "integer"),
        parent: Some(parent),
        chunks: Default::default(),
        ..hash_root(name, None, Vec::new())
    }
}

fn lit(s: &str) -> BoundValue {
    BoundValue::Literal(s.into())
}

#[tokio::test]
async fn migrations_create_the_schema_and_reopening_changes_nothing() {
    let config = catalog_config("cat_migrate", "").await;
    let first = Catalog::open(&config).await.expect("first open");
    let version = first.snapshot().version();
    assert!(
        version > 0,
        "recording the configured shards is a catalog change"
    );
    drop(first);
    let second = Catalog::open(&config).await.expect("second open");
    assert_eq!(
        second.snapshot().version(),
        version,
        "an unchanged configuration must not bump the version"
    );

    let db = catalog_db("cat_migrate").await;
    assert_eq!(
        schema_versions(&db).await,
        ["1", "2", "3", "4", "5", "6", "7", "8"]
    );
    let tables = column(
        &db,
        "SELECT table_name::text FROM information_schema.tables
         WHERE table_schema = 'shardwire_catalog' ORDER BY 1",
    )
    .await;
    for expected in [
        "catalog_version",
        "chunk",
        "chunk_move",
        "chunk_split",
        "move_hold_ack",
        "partition_set",
        "schema_version",
        "shard",
        "table_entry",
        "tablespace",
        "tablespace_set",
        "tablespace_set_shard",
        "txn_decision",
        "user_partition",
        "view_entry",
    ] {
        assert!(
            tables.iter().any(|t| t == expected),
            "{expected} in {tables:?}"
        );
    }
    // The coordinator's decision log: one decision per gid.
    db.execute(
        "INSERT INTO shardwire_catalog.txn_decision (gid, decision, participants)
         VALUES ('sw_a_b_1_1', 'commit', '{s1,s2}')",
        &[],
    )
    .await
    .expect("record a decision");
    let err = db
        .execute(
            "INSERT INTO shardwire_catalog.txn_decision (gid, decision) VALUES ('sw_a_b_1_1', 'abort')",
            &[],
        )
        .await
        .expect_err("a second decision for one gid");
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION));
}

#[tokio::test]
async fn proxies_starting_at_once_migrate_once() {
    let config = catalog_config("cat_concurrent", "").await;
    let opens = (0..4).map(|_| Catalog::open(&config));
    for result in futures::future::join_all(opens).await {
        result.expect("every concurrent open succeeds");
    }
    let db = catalog_db("cat_concurrent").await;
    assert_eq!(
        schema_versions(&db).await,
        ["1", "2", "3", "4", "5", "6", "7", "8"]
    );
    assert_eq!(
        column(
            &db,
            "SELECT name FROM shardwire_catalog.shard ORDER BY name"
        )
        .await,
        ["s1", "s2"]
    );
}

#[tokio::test]
async fn configured_shards_tablespace_sets_and_tablespaces_land_in_the_catalog() {
    let extra = "[[tablespace_sets]]\nname = \"ts1\"\nshards = [\"s2\", \"s1\"]\n\
                 [[tablespaces]]\nname = \"tbs1\"\nshard = \"s2\"\n";
    let config = catalog_config("cat_config", extra).await;
    let catalog = Catalog::open(&config).await.expect("open");
    let snap = catalog.snapshot();
    let names: Vec<&str> = snap.shards().iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["s1", "s2"]);
    assert_eq!(snap.shard_by_name("s2").map(|s| s.id), Some(S2));
    let ts1 = snap.tablespace_set_by_name("ts1").expect("ts1");
    assert_eq!(ts1.shards, [S2, S1], "members keep the configured order");
    assert_eq!(snap.tablespace("tbs1").map(|t| t.shard), Some(S2));

    let db = catalog_db("cat_config").await;
    assert_eq!(
        column(
            &db,
            "SELECT m.shard FROM shardwire_catalog.tablespace_set_shard m
             JOIN shardwire_catalog.tablespace_set s ON s.id = m.set_id
             WHERE s.name = 'ts1' ORDER BY m.position"
        )
        .await,
        ["s2", "s1"]
    );

    // The configuration is authoritative: a changed set or tablespace is rewritten at start.
    let changed = "[[tablespace_sets]]\nname = \"ts1\"\nshards = [\"s1\"]\n\
                   [[tablespaces]]\nname = \"tbs1\"\nshard = \"s1\"\n";
    let reopened = Catalog::open(&config_for("cat_config", changed))
        .await
        .expect("reopen");
    let snap = reopened.snapshot();
    assert_eq!(snap.tablespace_set_by_name("ts1").unwrap().shards, [S1]);
    assert_eq!(snap.tablespace("tbs1").map(|t| t.shard), Some(S1));
    assert_eq!(
        snap.tablespace_set_by_name("ts1").unwrap().id,
        ts1.id,
        "the set keeps its id, so tables using it stay attached"
    );
}

#[tokio::test]
async fn a_table_family_with_chunks_shows_in_the_snapshot() {
    let extra = "[[tablespace_sets]]\nname = \"ts1\"\nshards = [\"s1\", \"s2\"]\n";
    let catalog = Catalog::open(&catalog_config("cat_family", extra).await)
        .await
        .expect("open");
    let ts1 = catalog.snapshot().tablespace_set_by_name("ts1").unwrap().id;
    let before = catalog.snapshot().version();
    let customers = catalog
        .create_table(&hash_root("customers", Some(ts1), vec![S1, S2, S1, S2]))
        .await
        .expect("create customers");
    let orders = catalog
        .create_table(&child("orders", customers, "cust_id"))
        .await
        .expect("create orders");
    // A NoSQL grandchild with a table TTL: both are read back as recorded.
    let lineitems = catalog
        .create_table(&NewTable {
            nosql: true,
            ttl: Some(Ttl {
                amount: 5,
                unit: TtlUnit::Days,
            }),
            ..child("lineitems", orders, "order_cust")
        })
        .await
        .expect("create lineitems");

    let snap = catalog.snapshot();
    assert!(snap.version() >= before + 3, "each write bumps the version");
    let root = snap
        .table_by_name("public", "customers")
        .expect("customers");
    assert_eq!(root.id, customers);
    assert_eq!(root.state, TableState::Creating);
    assert_eq!(root.chunks[..], [S1, S2, S1, S2]);
    assert_eq!(root.chunks.chunk_count(), 4);
    assert!(root.chunks.is_uniform());
    assert_eq!(root.primary_key, key("cust_id", "integer"));
    assert_eq!(
        root.key_columns[0].key_type().map(|t| t.to_string()),
        Ok("integer".into())
    );
    assert_eq!(snap.chunk_shard(customers, ChunkId(1)), Some(S2));
    assert_eq!(snap.chunk_shard(customers, ChunkId(4)), None);
    assert_eq!(
        snap.tablespace_set(ts1).map(|s| s.name.as_str()),
        Some("ts1")
    );

    let items = snap.table(lineitems).expect("lineitems");
    assert_eq!(items.root, customers);
    assert_eq!(items.parent, Some(orders));
    assert!(items.nosql && !root.nosql);
    assert_eq!(
        items.ttl,
        Some(Ttl {
            amount: 5,
            unit: TtlUnit::Days
        })
    );
    assert_eq!(root.ttl, None);
    assert_eq!(
        snap.chunks(lineitems)[..],
        [S1, S2, S1, S2],
        "children use their root's chunks"
    );
    assert_eq!(snap.chunk_shard(lineitems, ChunkId(2)), Some(S1));
    assert_eq!(snap.depth(lineitems), Some(2));
    assert_eq!(
        snap.root_key_mapping(lineitems),
        [("order_cust", "cust_id")]
    );
    let family: Vec<TableId> = snap.family(orders).iter().map(|t| t.id).collect();
    assert_eq!(family, [customers, orders, lineitems]);
    assert_eq!(
        snap.children(customers)
            .iter()
            .map(|t| t.id)
            .collect::<Vec<_>>(),
        [orders]
    );
    assert_eq!(snap.shards_of(lineitems), [S1, S2]);
    assert_eq!(
        snap.resolve_table(&["app".to_string(), "public".to_string()], "orders")
            .map(|t| t.id),
        Some(orders)
    );
    assert!(
        snap.table_by_name("public", "Orders").is_none(),
        "names are compared as folded"
    );

    let err = catalog
        .create_table(&hash_root("customers", Some(ts1), vec![S1]))
        .await
        .expect_err("a second customers");
    assert!(matches!(err, CatalogError::TableExists { .. }), "{err}");
    assert_eq!(err.sqlstate(), SqlState::DUPLICATE_TABLE);

    let mut unhashable = hash_root("points", None, vec![S1]);
    unhashable.key_columns = key("at", "point");
    let err = catalog
        .create_table(&unhashable)
        .await
        .expect_err("point key");
    assert_eq!(err.sqlstate(), SqlState::INVALID_TABLE_DEFINITION, "{err}");
}

#[tokio::test]
async fn list_and_composite_tables_keep_their_partitions() {
    let extra = "[[tablespace_sets]]\nname = \"gold\"\nshards = [\"s2\"]\n\
                 [[tablespace_sets]]\nname = \"silver\"\nshards = [\"s1\", \"s2\"]\n\
                 [[tablespaces]]\nname = \"tbs_west\"\nshard = \"s2\"\n\
                 [[tablespaces]]\nname = \"tbs_rest\"\nshard = \"s1\"\n";
    let catalog = Catalog::open(&catalog_config("cat_partitions", extra).await)
        .await
        .expect("open");
    let snap = catalog.snapshot();
    let gold = snap.tablespace_set_by_name("gold").unwrap().id;
    let silver = snap.tablespace_set_by_name("silver").unwrap().id;

    let west = PartitionBound::In(vec![vec![lit("OR")], vec![lit("WA")], vec![lit("O'Neil")]]);
    let listed = NewTable {
        method: Some(ShardingMethod::List),
        key_columns: key("state", "character varying(2)"),
        chunks: Default::default(),
        partitions: vec![
            NewPartition {
                name: "p_west".into(),
                bound: west.clone(),
                tablespace: "tbs_west".into(),
            },
            NewPartition {
                name: "p_rest".into(),
                bound: PartitionBound::In(vec![vec![BoundValue::Default]]),
                tablespace: "tbs_rest".into(),
            },
        ],
        ..hash_root("accounts", None, Vec::new())
    };
    let accounts = catalog.create_table(&listed).await.expect("list table");

    let composite = NewTable {
        method: Some(ShardingMethod::CompositeRange),
        partition_set_columns: vec![
            KeyColumn::new("class", "integer"),
            KeyColumn::new("class2", "integer"),
        ],
        chunks: Default::default(),
        partition_sets: vec![
            PartitionSet {
                name: "low".into(),
                bound: PartitionBound::LessThan(vec![lit("10"), lit("100")]),
                tablespace_set: silver,
                chunks: vec![S1, S2, S1, S2].into(),
            },
            PartitionSet {
                name: "high".into(),
                bound: PartitionBound::LessThan(vec![BoundValue::MaxValue, BoundValue::MaxValue]),
                tablespace_set: gold,
                chunks: vec![S2, S2].into(),
            },
        ],
        ..hash_root("customers", None, Vec::new())
    };
    let customers = catalog
        .create_table(&composite)
        .await
        .expect("composite table");

    let snap = catalog.snapshot();
    let accounts = snap.table(accounts).expect("accounts");
    assert_eq!(accounts.partitions.len(), 2);
    assert_eq!(accounts.partitions[0].bound, west);
    assert_eq!(accounts.partitions[0].shard, S2);
    assert_eq!(
        accounts.partitions[1].bound,
        PartitionBound::In(vec![vec![BoundValue::Default]])
    );
    assert_eq!(accounts.partitions[1].shard, S1);
    assert_eq!(snap.shards_of(accounts.id), [S1, S2]);

    let customers = snap.table(customers).expect("customers");
    let sets: Vec<(&str, &[ShardId])> = customers
        .partition_sets
        .iter()
        .map(|s| (s.name.as_str(), &s.chunks[..]))
        .collect();
    assert_eq!(
        sets,
        [("low", &[S1, S2, S1, S2][..]), ("high", &[S2, S2][..])]
    );
    assert_eq!(customers.partition_set_columns.len(), 2);
    let users: Vec<&str> = snap
        .tables_using_tablespace_set(gold)
        .iter()
        .map(|t| t.name.as_str())
        .collect();
    assert_eq!(users, ["customers"]);

    let mut unknown = listed.clone();
    unknown.name = "elsewhere".into();
    unknown.partitions[0].tablespace = "tbs_nowhere".into();
    let err = catalog
        .create_table(&unknown)
        .await
        .expect_err("unknown tablespace");
    assert!(
        matches!(err, CatalogError::NoSuchTablespace(ref t) if t == "tbs_nowhere"),
        "{err}"
    );
    assert!(
        catalog
            .snapshot()
            .table_by_name("public", "elsewhere")
            .is_none(),
        "a failed create leaves nothing behind"
    );
}

#[tokio::test]
async fn tables_move_through_their_states_and_families_drop_children_first() {
    let catalog = Catalog::open(&catalog_config("cat_states", "").await)
        .await
        .expect("open");
    let root = catalog
        .create_table(&hash_root("accounts", None, vec![S1, S2]))
        .await
        .expect("create");
    let kid = catalog
        .create_table(&child("orders", root, "acct"))
        .await
        .expect("create child");
    let state = |snap: Arc<Snapshot>, id| snap.table(id).map(|t| t.state);

    catalog
        .set_state(root, TableState::Active)
        .await
        .expect("activate");
    assert_eq!(state(catalog.snapshot(), root), Some(TableState::Active));
    let err = catalog
        .set_state(root, TableState::Creating)
        .await
        .expect_err("back to creating");
    assert!(
        matches!(err, CatalogError::InvalidTransition { .. }),
        "{err}"
    );
    assert_eq!(err.sqlstate(), SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
    assert_eq!(state(catalog.snapshot(), root), Some(TableState::Active));

    catalog
        .set_row_movement(root, RowMovement::Enabled)
        .await
        .expect("enable row movement");
    let snap = catalog.snapshot();
    assert_eq!(snap.table(root).unwrap().row_movement, RowMovement::Enabled);
    assert_eq!(snap.table(kid).unwrap().row_movement, RowMovement::Disabled);

    catalog
        .set_state(root, TableState::Dropping)
        .await
        .expect("dropping");
    let err = catalog
        .delete_table(root)
        .await
        .expect_err("parent before child");
    assert_eq!(
        err.sqlstate(),
        SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
        "{err}"
    );
    assert!(err.to_string().contains("public.orders"), "{err}");

    catalog
        .set_state(kid, TableState::Dropping)
        .await
        .expect("child dropping");
    catalog.delete_table(kid).await.expect("delete child");
    catalog.delete_table(root).await.expect("delete parent");
    let snap = catalog.snapshot();
    assert!(snap.table(root).is_none() && snap.table(kid).is_none());
    assert!(snap.tables().is_empty());
    let db = catalog_db("cat_states").await;
    assert_eq!(
        column(&db, "SELECT count(*)::text FROM shardwire_catalog.chunk").await,
        ["0"],
        "chunks go with their table"
    );
    let err = catalog
        .set_state(root, TableState::Active)
        .await
        .expect_err("gone");
    assert_eq!(err.sqlstate(), SqlState::UNDEFINED_TABLE);
}

#[tokio::test]
async fn a_tablespace_set_in_use_cannot_be_dropped() {
    let catalog = Catalog::open(&catalog_config("cat_tsset", "").await)
        .await
        .expect("open");
    let ts = catalog
        .create_tablespace_set("ts_orders", &[S2])
        .await
        .expect("create set");
    let everywhere = catalog
        .create_tablespace_set("ts_all", &[])
        .await
        .expect("create set on every shard");
    let snap = catalog.snapshot();
    assert_eq!(snap.tablespace_set(ts).unwrap().shards, [S2]);
    assert_eq!(snap.tablespace_set(everywhere).unwrap().shards, [S1, S2]);
    let err = catalog
        .create_tablespace_set("ts_orders", &[S1])
        .await
        .expect_err("duplicate set");
    assert_eq!(err.sqlstate(), SqlState::DUPLICATE_OBJECT, "{err}");

    let table = catalog
        .create_table(&hash_root("orders", Some(ts), vec![S2, S2]))
        .await
        .expect("create table");
    let err = catalog
        .drop_tablespace_set("ts_orders")
        .await
        .expect_err("set in use");
    assert!(
        matches!(err, CatalogError::TablespaceSetInUse { .. }),
        "{err}"
    );
    assert_eq!(err.sqlstate(), SqlState::DEPENDENT_OBJECTS_STILL_EXIST);
    assert!(err.to_string().contains("public.orders"), "{err}");
    assert!(catalog.snapshot().tablespace_set(ts).is_some());

    catalog.delete_table(table).await.expect("delete table");
    catalog
        .drop_tablespace_set("ts_orders")
        .await
        .expect("drop set");
    assert!(catalog
        .snapshot()
        .tablespace_set_by_name("ts_orders")
        .is_none());
    let err = catalog
        .drop_tablespace_set("ts_orders")
        .await
        .expect_err("already dropped");
    assert_eq!(err.sqlstate(), SqlState::UNDEFINED_OBJECT);
}

/// Whether `check` holds for `catalog`'s snapshot within one second, without reloading by hand.
async fn visible_within_a_second(catalog: &Catalog, check: impl Fn(&Snapshot) -> bool) -> bool {
    let started = Instant::now();
    while started.elapsed() < Duration::from_secs(1) {
        if check(&catalog.snapshot()) {
            return true;
        }
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
    check(&catalog.snapshot())
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_through_one_proxy_reaches_another_within_a_second() {
    let config = catalog_config("cat_watch", "").await;
    let writer = Catalog::open(&config).await.expect("open writer");
    let reader = Catalog::open(&config).await.expect("open reader");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let watcher = reader.spawn_watcher(async {
        let _ = stopped.await;
    });

    let id = writer
        .create_table(&hash_root("events", None, vec![S2, S1]))
        .await
        .expect("create");
    assert!(
        visible_within_a_second(&reader, |s| s.table(id).is_some()).await,
        "the other proxy sees the new table"
    );
    assert_eq!(reader.snapshot().chunk_shard(id, ChunkId(0)), Some(S2));

    writer
        .set_state(id, TableState::Active)
        .await
        .expect("activate");
    assert!(
        visible_within_a_second(&reader, |s| {
            s.table(id).is_some_and(|t| t.state == TableState::Active)
        })
        .await,
        "the other proxy sees the state change"
    );

    writer.delete_table(id).await.expect("delete");
    assert!(
        visible_within_a_second(&reader, |s| s.table(id).is_none()).await,
        "the other proxy sees the table go"
    );
    assert_eq!(reader.snapshot().version(), writer.snapshot().version());

    stop.send(()).expect("watcher still running");
    tokio::time::timeout(Duration::from_secs(5), watcher)
        .await
        .expect("watcher stops on shutdown")
        .expect("watcher did not panic");
}

/// A notification is lost while the listening connection is down; the version poll still
/// catches the change. Simulated by a write that sends no notification at all.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_change_without_a_notification_is_found_by_polling() {
    let catalog = Catalog::open(&catalog_config("cat_poll", "").await)
        .await
        .expect("open");
    let (stop, stopped) = tokio::sync::oneshot::channel::<()>();
    let _watcher = catalog.spawn_watcher(async {
        let _ = stopped.await;
    });
    let db = catalog_db("cat_poll").await;
    db.batch_execute(
        "BEGIN;
         WITH s AS (INSERT INTO shardwire_catalog.tablespace_set (name) VALUES ('ts_quiet')
                    RETURNING id)
         INSERT INTO shardwire_catalog.tablespace_set_shard (set_id, position, shard)
         SELECT id, 0, 's2' FROM s;
         UPDATE shardwire_catalog.catalog_version SET version = version + 1;
         COMMIT;",
    )
    .await
    .expect("silent catalog change");
    assert!(
        visible_within_a_second(&catalog, |s| s
            .tablespace_set_by_name("ts_quiet")
            .is_some_and(|t| t.shards == [S2]))
        .await,
        "the poll finds the change"
    );
    let _ = stop.send(());
}
