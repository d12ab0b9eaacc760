//! The DDL rewrite against real PostgreSQL: every CREATE example of seeds/004 (verbatim), parsed
//! and rewritten for four simulated shards (one database each), runs on those databases; each
//! database then holds exactly the partitions, with exactly the bounds, that the placement model
//! gives it, accepts the rows it owns, rejects rows it does not, and puts each hash-sharded row in
//! the chunk the router's hash computes.

mod seeds_004;
use seeds_004::*;
use std::collections::{BTreeMap, BTreeSet};

use shardwire::ddl::model::{RewriteContext, TableLayout};
use shardwire::ddl::rewrite::{rewrite_create, CreateOutcome};
use shardwire::ddl::types::TypeOptions;
use shardwire::ddl::{parse, parse_script, Statement};
use shardwire::model::ShardId;
use shardwire::pgcluster::{free_port, ClusterOptions, LocalCluster, PgBinaries, StopMode};
use shardwire::router::hash::{partition_hash, remainder, KeyType, KeyValue};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

const SHARDS: u32 = 4;

/// Stops the cluster even when an assertion fails.
struct Stopper<'a>(&'a LocalCluster);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        let _ = self.0.stop(StopMode::Immediate);
    }
}

/// Four shards; tablespace sets ts1 = {0, 1} and ts2 = {2, 3}; tablespaces ts1..ts6 on shards
/// 0, 1, 2, 3, 0, 1; two chunks per shard.
fn context() -> RewriteContext {
    RewriteContext {
        shards: (0..SHARDS).map(|i| format!("s{i}")).collect(),
        tablespace_sets: BTreeMap::from([
            ("ts1".to_owned(), vec![ShardId(0), ShardId(1)]),
            ("ts2".to_owned(), vec![ShardId(2), ShardId(3)]),
        ]),
        tablespaces: (0..6)
            .map(|i| (format!("ts{}", i + 1), ShardId(i % SHARDS)))
            .collect(),
        chunks_per_shard: 2,
        default_schema: "public".to_owned(),
        tables: BTreeMap::new(),
        types: TypeOptions::default(),
        default_tablespace_set: None,
    }
}

/// One database per shard of one scenario.
struct Shards {
    clients: Vec<Client>,
}

impl Shards {
    async fn create(cluster: &LocalCluster, scenario: &str) -> Shards {
        let mut clients = Vec::new();
        for i in 0..SHARDS {
            let db = format!("{scenario}_s{i}");
            cluster.create_database(&db).unwrap();
            let (client, conn) = tokio_postgres::connect(&cluster.url(&db), NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            clients.push(client);
        }
        Shards { clients }
    }

    fn shard(&self, i: u32) -> &Client {
        &self.clients[i as usize]
    }

    /// Rewrites `table`, runs its statements on every shard, and records it in `ctx`.
    async fn run(&self, ctx: &mut RewriteContext, statement: &Statement) -> TableLayout {
        let Statement::CreateTable(table) = statement else {
            panic!("not a CREATE TABLE: {statement:?}");
        };
        let CreateOutcome::Create(plan) = rewrite_create(ctx, table).unwrap() else {
            panic!("table already exists");
        };
        for (shard, statements) in &plan.per_shard {
            for sql in statements {
                self.shard(shard.0)
                    .batch_execute(sql)
                    .await
                    .unwrap_or_else(|e| panic!("shard {shard}: {sql}: {e}"));
            }
        }
        ctx.tables
            .insert(plan.layout.name.clone(), plan.layout.clone());
        plan.layout
    }
}

/// (parent, partition, bound) of every partition in the shard's public schema.
async fn partitions(client: &Client) -> BTreeSet<(String, String, String)> {
    let rows = client
        .query(
            "SELECT p.relname::text, c.relname::text, pg_get_expr(c.relpartbound, c.oid) \
             FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
             JOIN pg_class p ON p.oid = i.inhparent \
             JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public' AND c.relkind IN ('r', 'p')",
            &[],
        )
        .await
        .unwrap();
    rows.iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect()
}

/// The shard's ordinary and partitioned tables that are not partitions.
async fn top_tables(client: &Client) -> BTreeSet<String> {
    let rows = client
        .query(
            "SELECT relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = 'public' AND relkind IN ('r', 'p') AND NOT relispartition",
            &[],
        )
        .await
        .unwrap();
    rows.iter().map(|r| r.get(0)).collect()
}

fn set<const N: usize>(items: [(&str, &str, &str); N]) -> BTreeSet<(String, String, String)> {
    items
        .iter()
        .map(|(a, b, c)| (a.to_string(), b.to_string(), c.to_string()))
        .collect()
}

fn hash_chunks(parent: &str, modulus: u32, owned: &[u32]) -> Vec<(String, String, String)> {
    owned
        .iter()
        .map(|k| {
            (
                parent.to_owned(),
                format!("{parent}_c{k}"),
                format!("FOR VALUES WITH (modulus {modulus}, remainder {k})"),
            )
        })
        .collect()
}

/// The chunk the router computes for a row keyed (cust_id, name) of `layout`.
fn chunk_of(layout: &TableLayout, modulus: u32, cust_id: &str, name: &str) -> u32 {
    let types: Vec<KeyType> = layout
        .key
        .iter()
        .map(|c| KeyType::from_pg_type_name(&c.pg_type).unwrap())
        .collect();
    let hash = partition_hash(&[
        (types[0], KeyValue::Text(cust_id)),
        (types[1], KeyValue::Text(name)),
    ])
    .unwrap();
    remainder(hash, u64::from(modulus)) as u32
}

async fn partition_of_row(client: &Client, table: &str, cust_id: i32) -> String {
    client
        .query_one(
            &format!("SELECT tableoid::regclass::text FROM {table} WHERE cust_id = $1::int"),
            &[&cust_id],
        )
        .await
        .unwrap()
        .get(0)
}

fn assert_no_partition(err: tokio_postgres::Error, relation: &str) {
    let db = err.as_db_error().expect("a server error");
    assert_eq!(db.code(), &SqlState::CHECK_VIOLATION, "{db}");
    assert!(
        db.message()
            .starts_with(&format!("no partition of relation \"{relation}\" found")),
        "{db}"
    );
}

async fn system_managed_family(cluster: &LocalCluster) {
    let shards = Shards::create(cluster, "hash").await;
    let mut ctx = context();
    let statements = parse_script(SEED_CUSTOMERS_AND_ORDERS).unwrap();
    let customers = shards.run(&mut ctx, &statements[0]).await;
    shards.run(&mut ctx, &statements[1]).await;

    // M = 2 chunks per shard × 2 shards of ts1; chunk k on shard k mod 2.
    for (shard, owned) in [(0, [0, 2]), (1, [1, 3])] {
        let mut expected = hash_chunks("customers", 4, &owned);
        expected.extend(hash_chunks("orders", 4, &owned));
        assert_eq!(
            partitions(shards.shard(shard)).await,
            expected.into_iter().collect(),
            "shard {shard}"
        );
        assert_eq!(
            top_tables(shards.shard(shard)).await,
            BTreeSet::from(["customers".to_owned(), "orders".to_owned()])
        );
    }
    for shard in [2, 3] {
        assert!(top_tables(shards.shard(shard)).await.is_empty());
    }

    // Every row goes to the shard owning its chunk, into the partition the router computes;
    // the other shard of the set refuses it.
    for id in 1..=12 {
        let name = format!("n{id}");
        let k = chunk_of(&customers, 4, &id.to_string(), &name);
        let (owner, other) = (shards.shard(k % 2), shards.shard(1 - k % 2));
        let insert = "INSERT INTO customers (cust_id, name) VALUES ($1::int, $2)";
        owner.execute(insert, &[&id, &name]).await.unwrap();
        assert_eq!(
            partition_of_row(owner, "customers", id).await,
            format!("customers_c{k}")
        );
        let err = other.execute(insert, &[&id, &name]).await.unwrap_err();
        assert_no_partition(err, "customers");
        // The child row lives with its parent: the shard enforces the foreign key itself.
        owner
            .execute(
                "INSERT INTO orders (orderno, custno, name) VALUES (1, $1::int, $2)",
                &[&id, &name],
            )
            .await
            .unwrap();
        let child_partition: String = owner
            .query_one(
                "SELECT tableoid::regclass::text FROM orders WHERE custno = $1::int",
                &[&id],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(child_partition, format!("orders_c{k}"));
        let err = owner
            .execute(
                "INSERT INTO orders (orderno, custno, name) VALUES (2, $1::int, 'nobody')",
                &[&id],
            )
            .await
            .unwrap_err();
        // Another chunk of this shard: the foreign key fails; another shard's chunk: no partition.
        if chunk_of(&customers, 4, &id.to_string(), "nobody") % 2 == k % 2 {
            assert_eq!(err.code(), Some(&SqlState::FOREIGN_KEY_VIOLATION), "{err}");
        } else {
            assert_no_partition(err, "orders");
        }
    }
}

async fn composite(cluster: &LocalCluster) {
    let err = parse(SEED_COMPOSITE_LIST_TWO_COLUMNS).unwrap_err();
    assert!(err.to_string().starts_with("ORA-02514"), "{err}");

    let shards = Shards::create(cluster, "composite").await;
    let mut ctx = context();
    let customers = shards
        .run(&mut ctx, &parse(SEED_COMPOSITE_RANGE).unwrap())
        .await;
    let silver = "FOR VALUES FROM (MINVALUE, MINVALUE) TO ('10', '100')";
    let gold = "FOR VALUES FROM ('10', '100') TO ('20', '200')";
    for shard in 0..SHARDS {
        let (set, bound) = if shard < 2 {
            ("customers_silver", silver)
        } else {
            ("customers_gold", gold)
        };
        let owned = [shard % 2, shard % 2 + 2];
        let mut expected = hash_chunks(set, 4, &owned);
        expected.push(("customers".into(), set.into(), bound.into()));
        assert_eq!(
            partitions(shards.shard(shard)).await,
            expected.into_iter().collect(),
            "shard {shard}"
        );
        // The primary key lacks class2, so it is declared per partition set.
        let pk: Vec<String> = shards
            .shard(shard)
            .query(
                "SELECT conname::text FROM pg_constraint WHERE contype = 'p' \
                 AND conrelid = $1::text::regclass",
                &[&set],
            )
            .await
            .unwrap()
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(pk, [format!("cust_pk_{}", &set["customers_".len()..])]);
    }

    let insert =
        "INSERT INTO customers (cust_id, name, class, class2) VALUES ($1::int, $2, $3::int, 1)";
    for id in 1..=6 {
        let name = format!("n{id}");
        let k = chunk_of(&customers, 4, &id.to_string(), &name);
        // class 5 is silver (shards 0 and 1), class 15 gold (shards 2 and 3).
        for (class, first_shard, set) in [(5, 0, "customers_silver"), (15, 2, "customers_gold")] {
            let owner = shards.shard(first_shard + k % 2);
            owner.execute(insert, &[&id, &name, &class]).await.unwrap();
            let got: String = owner
                .query_one(
                    "SELECT tableoid::regclass::text FROM customers WHERE cust_id = $1::int \
                     AND class = $2::int",
                    &[&id, &class],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(got, format!("{set}_c{k}"));
            let same_set_other = shards.shard(first_shard + 1 - k % 2);
            let err = same_set_other
                .execute(insert, &[&id, &name, &class])
                .await
                .unwrap_err();
            assert_no_partition(err, set);
            let other_set = shards.shard((first_shard + 2) % 4);
            let err = other_set
                .execute(insert, &[&id, &name, &class])
                .await
                .unwrap_err();
            assert_no_partition(err, "customers");
        }
    }
}

async fn user_defined(cluster: &LocalCluster) {
    let err = parse(SEED_USER_DEFINED_LIST_TWO_COLUMNS).unwrap_err();
    assert!(err.to_string().starts_with("ORA-03813"), "{err}");

    let range = Shards::create(cluster, "range").await;
    let mut ctx = context();
    range
        .run(&mut ctx, &parse(SEED_USER_DEFINED_RANGE).unwrap())
        .await;
    assert_eq!(
        partitions(range.shard(0)).await,
        set([(
            "accounts",
            "accounts_p_northwest",
            "FOR VALUES FROM (MINVALUE, MINVALUE) TO ('10', '100')"
        )])
    );
    assert_eq!(
        partitions(range.shard(1)).await,
        set([(
            "accounts",
            "accounts_p_southwest",
            "FOR VALUES FROM ('10', '100') TO ('20', '200')"
        )])
    );
    // A shard none of whose tablespaces a partition names gets no table at all: DROP goes only
    // to the shards that hold partitions.
    for shard in 2..SHARDS {
        assert!(partitions(range.shard(shard)).await.is_empty());
        assert!(top_tables(range.shard(shard)).await.is_empty());
    }
    let insert = "INSERT INTO accounts (id, state, state2) VALUES (1, $1::int, $2::int)";
    range.shard(0).execute(insert, &[&5, &500]).await.unwrap();
    range.shard(1).execute(insert, &[&10, &100]).await.unwrap();
    assert_no_partition(
        range
            .shard(1)
            .execute(insert, &[&9, &999])
            .await
            .unwrap_err(),
        "accounts",
    );
    let missing = range.shard(2).execute(insert, &[&5, &5]).await.unwrap_err();
    assert_eq!(
        missing.code(),
        Some(&SqlState::UNDEFINED_TABLE),
        "{missing}"
    );

    // The list example with the one column Oracle accepts.
    let list = Shards::create(cluster, "list").await;
    let mut ctx = context();
    let sql = SEED_USER_DEFINED_LIST_TWO_COLUMNS.replace("LIST (state,state2)", "LIST (state)");
    list.run(&mut ctx, &parse(&sql).unwrap()).await;
    assert_eq!(
        partitions(list.shard(0)).await,
        set([
            (
                "accounts",
                "accounts_p_northwest",
                "FOR VALUES IN ('OR', 'WA')"
            ),
            (
                "accounts",
                "accounts_p_northeast",
                "FOR VALUES IN ('NY', 'VM', 'NJ')"
            ),
        ])
    );
    assert_eq!(
        partitions(list.shard(3)).await,
        set([(
            "accounts",
            "accounts_p_southcentral",
            "FOR VALUES IN ('OK', 'TX')"
        )])
    );
    let insert = "INSERT INTO accounts (id, state, state2) VALUES (1, $1, 'x')";
    list.shard(1).execute(insert, &[&"UT"]).await.unwrap();
    assert_no_partition(
        list.shard(0).execute(insert, &[&"UT"]).await.unwrap_err(),
        "accounts",
    );
}

#[tokio::test(flavor = "multi_thread")]
async fn seed_004_tables_have_exactly_the_expected_partitions_on_every_shard() {
    let tmp = tempfile::tempdir().unwrap();
    let options = ClusterOptions {
        fast_unsafe: true,
        ..ClusterOptions::default()
    };
    let cluster = LocalCluster::init(
        PgBinaries::locate().unwrap(),
        &tmp.path().join("pg"),
        free_port().unwrap(),
        options,
    )
    .unwrap();
    let _stopper = Stopper(&cluster);
    cluster.start().unwrap();
    system_managed_family(&cluster).await;
    composite(&cluster).await;
    user_defined(&cluster).await;
}
