//! Every CREATE and ALTER example of seeds/004 and the Oracle NoSQL CREATE TABLE examples of
//! seeds/003, verbatim, through the proxy with psql; then the shards are inspected directly.
//! The seeds reuse table names, so the examples run one after another in one test, each dropped
//! (through the proxy) before the next.
//!
//! Placement: tablespace set ts1 = (s1, s2), ts2 = (s2), created through the proxy; tablespaces
//! ts1…ts6 alternate s1, s2; two chunks per shard. The examples run twice: first on a proxy
//! whose configuration has no `[[tablespaces]]`, after `CREATE TABLESPACE … ON SHARD …` (as on
//! `shardwire dev` with no file edited), then with the tablespaces in the configuration.

mod common;
mod sharding_common;

mod seeds_004;
use common::{shards, TestProxy};
use seeds_004::*;
use sharding_common::{catalog_tables, expect, failed, hash_tree, rows, succeeded, tree};
use shardwire::config::TablespaceConfig;
use tokio_postgres::Client;

const SEED_CUSTOMERS: &str = "CREATE SHARDED TABLE customers
(cust_id     NUMBER NOT NULL
, name        VARCHAR2(50)
, address     VARCHAR2(250)
, region      VARCHAR2(20)
, class       VARCHAR2(3)
, signup      DATE,
CONSTRAINT cust_pk PRIMARY KEY(cust_id, name))
PARTITION BY CONSISTENT HASH (cust_id,name)
PARTITIONS AUTO
TABLESPACE SET ts1;";

const SEED_ORDERS: &str = "CREATE SHARDED TABLE Orders
( OrderNo   NUMBER NOT NULL
, CustNo    NUMBER NOT NULL
, Name      VARCHAR2(50) NOT NULL
, OrderDate DATE
, CONSTRAINT OrderPK PRIMARY KEY (CustNo, Name, OrderNo)
, CONSTRAINT CustFK  FOREIGN KEY (CustNo, Name) REFERENCES Customers(Cust_ID, Name)
)
PARTITION BY REFERENCE (CustFK);";

const SEED_ALTER_TABLENAME: &str = "ALTER TABLE tablename ENABLE ROW MOVEMENT;

ALTER TABLE tablename DISABLE ROW MOVEMENT;";

const SEED_ALTER_FAMILY: &str = "ALTER TABLE lineitems ENABLE ROW MOVEMENT;

ALTER TABLE orders ENABLE ROW MOVEMENT;

ALTER TABLE accounts ENABLE ROW MOVEMENT;";

const SEED_NOSQL_MY_PRODUCTS: [&str; 3] = [
    "CREATE TABLE myProducts (
    productName STRING,
    productType STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    // Define the primary key. Every table must have one.
    PRIMARY KEY (productName)
)",
    "CREATE TABLE myProducts (
    productName STRING,
    productType STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    // Define the primary key. Every table must have one.
    PRIMARY KEY (productName, productType)
)",
    "CREATE TABLE myProducts (
    productName STRING,
    productType STRING,
    productClass STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    // Define the primary key. Every table must have one.
    PRIMARY KEY (productName, productType, productClass)
)",
];

/// seeds/003's shard-key primary key in the three-field table, as plain NoSQL `CREATE TABLE` and
/// as `CREATE SHARDED TABLE`.
const NOSQL_SHARD_KEY: [&str; 2] = [
    "CREATE TABLE myProducts (
    productName STRING,
    productType STRING,
    productClass STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    PRIMARY KEY (SHARD(productType, productName), productClass)
)",
    "CREATE SHARDED TABLE myProducts (
    productName STRING,
    productType STRING,
    productClass STRING,
    color ENUM (blue,green,red),
    size ENUM (small,medium,large),
    inventoryCount INTEGER,
    PRIMARY KEY (SHARD(productType, productName), productClass)
)",
];

/// The shard of tablespace `ts{i}`.
fn tablespace_shard(i: u32) -> &'static str {
    if i % 2 == 1 {
        "s1"
    } else {
        "s2"
    }
}

fn proxy_with_configured_tablespaces() -> TestProxy {
    TestProxy::start_with(|c| {
        c.proxy.chunks_per_shard = 2;
        c.tablespaces = (1..=6)
            .map(|i| TablespaceConfig {
                name: format!("ts{i}"),
                shard: tablespace_shard(i).into(),
            })
            .collect();
    })
}

fn proxy_without_configured_tablespaces() -> TestProxy {
    TestProxy::start_with(|c| {
        c.proxy.chunks_per_shard = 2;
        assert!(c.tablespaces.is_empty());
    })
}

fn verbose(sql: &str) -> String {
    format!("\\set VERBOSITY verbose\n{sql}\n")
}

struct Shards {
    s1: Client,
    s2: Client,
}

impl Shards {
    async fn connect() -> Shards {
        Shards {
            s1: shards().connect(0).await,
            s2: shards().connect(1).await,
        }
    }

    async fn assert_absent(&self, table: &str) {
        assert_eq!(tree(&self.s1, table).await, [], "{table} on s1");
        assert_eq!(tree(&self.s2, table).await, [], "{table} on s2");
        assert!(
            !catalog_tables(&self.s1)
                .await
                .contains(&format!("public.{table}")),
            "{table} left in the catalog"
        );
    }
}

/// A refused CREATE fails with `code` and `text` in psql's verbose message and leaves nothing.
async fn assert_refused(proxy: &TestProxy, shards: &Shards, sql: &str, table: &str, text: &str) {
    let stderr = failed(proxy.psql(&verbose(sql)));
    assert!(
        stderr.contains(&format!("ERROR:  42P16: {text}")),
        "{stderr}"
    );
    shards.assert_absent(table).await;
}

#[tokio::test]
async fn seed_examples_run_verbatim_through_the_proxy() {
    // The two runs share the catalog, so they run one after the other in one test.
    let proxy = proxy_without_configured_tablespaces();
    let create: String = (1..=6)
        .map(|i| {
            format!(
                "CREATE TABLESPACE ts{i} ON SHARD {};\n",
                tablespace_shard(i)
            )
        })
        .collect();
    let out = succeeded(proxy.psql(&create));
    assert_eq!(out.matches("CREATE TABLESPACE").count(), 6, "{out}");
    seed_examples(&proxy).await;
    let drop: String = (1..=6)
        .map(|i| format!("DROP TABLESPACE ts{i};\n"))
        .collect();
    let out = succeeded(proxy.psql(&drop));
    assert_eq!(out.matches("DROP TABLESPACE").count(), 6, "{out}");
    std::mem::drop(proxy);

    seed_examples(&proxy_with_configured_tablespaces()).await;
}

async fn seed_examples(proxy: &TestProxy) {
    let shards = Shards::connect().await;
    succeeded(proxy.psql(
        "CREATE TABLESPACE SET ts1 USING SHARDS (s1, s2);
         CREATE TABLESPACE SET ts2 USING SHARDS (s2);",
    ));

    // System-managed: a family of two, four chunks over ts1.
    succeeded(proxy.psql(&format!("{SEED_CUSTOMERS}\n{SEED_ORDERS}")));
    assert_eq!(
        tree(&shards.s1, "customers").await,
        hash_tree("customers", 4, &[0, 2])
    );
    assert_eq!(
        tree(&shards.s2, "customers").await,
        hash_tree("customers", 4, &[1, 3])
    );
    assert_eq!(
        tree(&shards.s1, "orders").await,
        hash_tree("orders", 4, &[0, 2])
    );
    assert_eq!(
        tree(&shards.s2, "orders").await,
        hash_tree("orders", 4, &[1, 3])
    );
    let client = proxy.connect().await;
    assert_eq!(
        rows(&client, "SHOW SHARDED TABLES").await,
        [
            [
                "customers",
                "customers",
                "",
                "consistent_hash",
                "cust_id, name",
                "ts1",
                "f",
                "active"
            ],
            [
                "orders",
                "customers",
                "customers",
                "reference",
                "custno, name",
                "ts1",
                "f",
                "active"
            ],
        ]
    );
    let stderr = failed(proxy.psql("DROP TABLE customers;"));
    assert!(stderr.contains("orders"), "{stderr}");
    succeeded(proxy.psql("DROP TABLE orders; DROP TABLE customers;"));
    shards.assert_absent("orders").await;
    shards.assert_absent("customers").await;

    // Composite: a multi-column LIST partition-set key is Oracle's error; RANGE works.
    assert_refused(
        proxy,
        &shards,
        SEED_COMPOSITE_LIST_TWO_COLUMNS,
        "customers",
        "ORA-02514: list PARTITIONSET method expects a single partitioning column",
    )
    .await;
    succeeded(proxy.psql(SEED_COMPOSITE_RANGE));
    let silver = "FOR VALUES FROM (MINVALUE, MINVALUE) TO ('10', '100')";
    let gold = "FOR VALUES FROM ('10', '100') TO ('20', '200')";
    let chunk = |m: u32, k: u32| format!("FOR VALUES WITH (modulus {m}, remainder {k})");
    assert_eq!(
        tree(&shards.s1, "customers").await,
        expect(&[
            ("customers", ""),
            ("customers_silver", silver),
            ("customers_silver_c0", &chunk(4, 0)),
            ("customers_silver_c2", &chunk(4, 2)),
        ])
    );
    assert_eq!(
        tree(&shards.s2, "customers").await,
        expect(&[
            ("customers", ""),
            ("customers_silver", silver),
            ("customers_silver_c1", &chunk(4, 1)),
            ("customers_silver_c3", &chunk(4, 3)),
            ("customers_gold", gold),
            ("customers_gold_c0", &chunk(2, 0)),
            ("customers_gold_c1", &chunk(2, 1)),
        ])
    );
    assert_eq!(
        rows(&client, "SHOW CHUNKS FOR customers").await,
        [
            ["customers", "silver", "0", "s1"],
            ["customers", "silver", "1", "s2"],
            ["customers", "silver", "2", "s1"],
            ["customers", "silver", "3", "s2"],
            ["customers", "gold", "0", "s2"],
            ["customers", "gold", "1", "s2"],
        ]
    );
    succeeded(proxy.psql("DROP TABLE customers;"));
    shards.assert_absent("customers").await;

    // User-defined: a multi-column LIST is Oracle's error; multi-column RANGE works.
    assert_refused(
        proxy,
        &shards,
        SEED_USER_DEFINED_LIST_TWO_COLUMNS,
        "accounts",
        "ORA-03813: list partition method expects a single partitioning column in user-defined sharding",
    )
    .await;
    succeeded(proxy.psql(SEED_USER_DEFINED_RANGE));
    assert_eq!(
        tree(&shards.s1, "accounts").await,
        expect(&[
            ("accounts", ""),
            (
                "accounts_p_northwest",
                "FOR VALUES FROM (MINVALUE, MINVALUE) TO ('10', '100')"
            ),
        ])
    );
    assert_eq!(
        tree(&shards.s2, "accounts").await,
        expect(&[
            ("accounts", ""),
            (
                "accounts_p_southwest",
                "FOR VALUES FROM ('10', '100') TO ('20', '200')"
            ),
        ])
    );
    succeeded(proxy.psql("DROP TABLE accounts;"));
    shards.assert_absent("accounts").await;

    seed_row_movement(proxy, &client, &shards).await;
    seed_nosql(proxy, &client, &shards).await;
    succeeded(proxy.psql("DROP TABLESPACE SET ts1; DROP TABLESPACE SET ts2;"));
}

/// seeds/004's ALTER TABLE … ROW MOVEMENT examples: on any table, and in a family from the
/// children up.
async fn seed_row_movement(proxy: &TestProxy, client: &Client, shards: &Shards) {
    succeeded(proxy.psql(
        "CREATE SHARDED TABLE tablename (id NUMBER PRIMARY KEY) PARTITION BY CONSISTENT HASH (id);",
    ));
    succeeded(proxy.psql(SEED_ALTER_TABLENAME));
    succeeded(proxy.psql(
        "CREATE SHARDED TABLE accounts (acct_id NUMBER NOT NULL PRIMARY KEY, name VARCHAR2(20))
           PARTITION BY CONSISTENT HASH (acct_id) PARTITIONS AUTO TABLESPACE SET ts1;
         CREATE SHARDED TABLE orders (order_id NUMBER NOT NULL, acct_id NUMBER NOT NULL,
           CONSTRAINT orders_pk PRIMARY KEY (acct_id, order_id),
           CONSTRAINT orders_fk FOREIGN KEY (acct_id) REFERENCES accounts (acct_id))
           PARTITION BY REFERENCE (orders_fk);
         CREATE SHARDED TABLE lineitems (line_no NUMBER NOT NULL, order_id NUMBER NOT NULL,
           acct_id NUMBER NOT NULL,
           CONSTRAINT li_pk PRIMARY KEY (acct_id, order_id, line_no),
           CONSTRAINT li_fk FOREIGN KEY (acct_id, order_id) REFERENCES orders (acct_id, order_id))
           PARTITION BY REFERENCE (li_fk);",
    ));
    assert_eq!(
        tree(&shards.s2, "lineitems").await,
        hash_tree("lineitems", 4, &[1, 3])
    );
    let stderr = failed(proxy.psql("ALTER TABLE accounts ENABLE ROW MOVEMENT;"));
    assert!(stderr.contains("child table orders"), "{stderr}");
    let stderr = failed(proxy.psql("ALTER TABLE orders ENABLE ROW MOVEMENT;"));
    assert!(stderr.contains("child table lineitems"), "{stderr}");
    succeeded(proxy.psql(SEED_ALTER_FAMILY));
    let movement: Vec<Vec<String>> = rows(client, "SHOW SHARDED TABLES")
        .await
        .into_iter()
        .map(|r| vec![r[0].clone(), r[6].clone()])
        .collect();
    assert_eq!(
        movement,
        [
            ["tablename", "f"],
            ["accounts", "t"],
            ["orders", "t"],
            ["lineitems", "t"]
        ]
    );
    let stderr = failed(proxy.psql("ALTER TABLE orders DISABLE ROW MOVEMENT;"));
    assert!(stderr.contains("parent accounts"), "{stderr}");
    succeeded(
        proxy.psql("DROP TABLE lineitems, orders; DROP TABLE accounts; DROP TABLE tablename;"),
    );
    for table in ["lineitems", "orders", "accounts", "tablename"] {
        shards.assert_absent(table).await;
    }
}

/// seeds/003: a NoSQL table is sharded by consistent hash on its shard key, which is its
/// whole primary key when it names no SHARD(...), over every shard.
async fn seed_nosql(proxy: &TestProxy, client: &Client, shards: &Shards) {
    for sql in SEED_NOSQL_MY_PRODUCTS {
        succeeded(proxy.psql(sql));
        assert_eq!(
            tree(&shards.s1, "\"public$rows\".myproducts").await,
            hash_tree("myproducts", 4, &[0, 2])
        );
        assert_eq!(
            tree(&shards.s2, "\"public$rows\".myproducts").await,
            hash_tree("myproducts", 4, &[1, 3])
        );
        let listed = rows(client, "SHOW SHARDED TABLES").await;
        let key = match (
            sql.contains("productClass"),
            sql.contains("productName, productType"),
        ) {
            (true, _) => "productname, producttype, productclass",
            (false, true) => "productname, producttype",
            (false, false) => "productname",
        };
        assert_eq!(listed[0][3..5], ["consistent_hash", key]);
        // STRING became text and ENUM a checked text: a value outside the enum is refused.
        let (columns, values) = match sql.contains("productClass") {
            true => (
                "productname, producttype, productclass, color",
                "'p', 't', 'c'",
            ),
            false => ("productname, producttype, color", "'p', 't'"),
        };
        succeeded(proxy.psql(&format!(
            "INSERT INTO myproducts ({columns}) VALUES ({values}, 'red');"
        )));
        let stderr = failed(proxy.psql(&format!(
            "INSERT INTO myproducts ({columns}) VALUES ({values}, 'pink');"
        )));
        assert!(stderr.contains("check constraint"), "{stderr}");
        succeeded(proxy.psql("DROP TABLE myproducts;"));
        shards.assert_absent("myproducts").await;
    }
    for sql in NOSQL_SHARD_KEY {
        succeeded(proxy.psql(sql));
        // A NoSQL CREATE TABLE keeps its rows in a data table; CREATE SHARDED TABLE does not.
        let stored = match sql.starts_with("CREATE SHARDED") {
            true => "myproducts",
            false => "\"public$rows\".myproducts",
        };
        assert_eq!(
            tree(&shards.s1, stored).await,
            hash_tree("myproducts", 4, &[0, 2])
        );
        assert_eq!(
            tree(&shards.s2, stored).await,
            hash_tree("myproducts", 4, &[1, 3])
        );
        let listed = rows(client, "SHOW SHARDED TABLES").await;
        assert_eq!(
            listed[0][3..5],
            ["consistent_hash", "producttype, productname"]
        );
        succeeded(proxy.psql("DROP TABLE myproducts;"));
        shards.assert_absent("myproducts").await;
    }
}
