//! Statements on sharded tables through the proxy, against four real shards: rows land on the
//! shard of their chunk (counted on the shards themselves), keyed statements reach exactly the
//! shards of their keys (seen in the shards' statement logs), and multi-shard reads answer
//! exactly what one PostgreSQL holding every row answers.

mod common;
mod routing_common;

use std::time::Duration;

use common::raw::{RawClient, Reply};
use common::{shards, APP};
use routing_common::*;
use tokio_postgres::error::SqlState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rows_land_on_their_chunks_shard_by_every_kind_of_insert() {
    let proxy = start();
    let client = proxy.connect().await;
    create_customers(&client, "place_cust").await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE place_orders (order_id bigint, cust_id bigint NOT NULL, \
             total numeric, PRIMARY KEY (cust_id, order_id), \
             CONSTRAINT place_orders_fk FOREIGN KEY (cust_id) REFERENCES place_cust (cust_id)) \
             PARTITION BY REFERENCE (place_orders_fk)",
        )
        .await
        .expect("create child");

    // Multi-row INSERT, split by shard: ids 1..=1000 in four statements.
    for chunk in 0..4 {
        let values: Vec<String> = (chunk * 250 + 1..=chunk * 250 + 250)
            .map(|i| format!("({i}, 'c{i}', {})", i % 7))
            .collect();
        let msgs = client
            .simple_query(&format!(
                "INSERT INTO place_cust (cust_id, name, score) VALUES {}",
                values.join(", ")
            ))
            .await
            .expect("multi-row insert");
        assert_eq!(tag(&msgs), 250, "the command tag counts every row");
    }
    // Single-row prepared INSERT with $n (binary int8): ids 1001..=1500.
    let insert = client
        .prepare("INSERT INTO place_cust (cust_id, name, score) VALUES ($1, $2, $3)")
        .await
        .expect("prepare");
    for i in 1001..=1500i64 {
        client
            .execute(&insert, &[&i, &format!("c{i}"), &((i % 7) as i32)])
            .await
            .unwrap_or_else(|e| panic!("insert {i}: {e}"));
    }
    // Without a column list: the table's own column order decides where the key is.
    client
        .simple_query("INSERT INTO place_cust VALUES (1501, 'c1501', 1), (1502, 'c1502', 2)")
        .await
        .expect("insert without columns");
    // Children go where their parent is, by their own key column.
    let order = client
        .prepare("INSERT INTO place_orders (order_id, cust_id, total) VALUES ($1, $2, 9.5)")
        .await
        .expect("prepare child insert");
    for i in 1..=300i64 {
        client
            .execute(&order, &[&i, &(i * 5)])
            .await
            .unwrap_or_else(|e| panic!("order {i}: {e}"));
    }

    let per_shard = counts("place_cust").await;
    assert_eq!(per_shard.iter().sum::<i64>(), 1502, "{per_shard:?}");
    assert!(per_shard.iter().all(|&n| n > 200), "spread: {per_shard:?}");
    let orders = counts("place_orders").await;
    assert_eq!(orders.iter().sum::<i64>(), 300, "{orders:?}");
    // The foreign key holds on every shard, so each order sits beside its customer; and each
    // shard holds exactly the rows of its own chunks (PostgreSQL refuses any other).
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let orphans: i64 = c
            .query_one(
                "SELECT count(*) FROM place_orders o \
                 WHERE NOT EXISTS (SELECT 1 FROM place_cust c WHERE c.cust_id = o.cust_id)",
                &[],
            )
            .await
            .expect("orphans")
            .get(0);
        assert_eq!(orphans, 0, "shard {i}");
    }

    // Keyed reads find every row, simple and prepared.
    let row = simple_rows(&client, "SELECT name FROM place_cust WHERE cust_id = 777").await;
    assert_eq!(row, vec![vec![Some("c777".to_string())]]);
    let get = client
        .prepare("SELECT name FROM place_cust WHERE cust_id = $1")
        .await
        .expect("prepare select");
    for i in [1i64, 250, 999, 1234, 1500, 1502] {
        let r = client.query_one(&get, &[&i]).await.expect("keyed read");
        assert_eq!(r.get::<_, String>(0), format!("c{i}"));
    }
    // A join inside the family on the key runs on the key's shard.
    let joined = simple_rows(
        &client,
        "SELECT c.name, o.order_id FROM place_cust c JOIN place_orders o \
         ON o.cust_id = c.cust_id WHERE c.cust_id = 50",
    )
    .await;
    assert_eq!(joined, vec![vec![Some("c50".into()), Some("10".into())]]);
    // A row whose key is missing is refused with PostgreSQL's own words.
    let err = client
        .simple_query("INSERT INTO place_cust (name) VALUES ('nokey')")
        .await
        .expect_err("no key");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    client
        .batch_execute("DROP TABLE place_orders, place_cust")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn keyed_statements_reach_only_their_shards() {
    let proxy = start();
    let client = proxy.connect().await;
    create_customers(&client, "seen_cust").await;
    let values: Vec<String> = (1..=200).map(|i| format!("({i}, 'c{i}', 0)")).collect();
    client
        .simple_query(&format!(
            "INSERT INTO seen_cust VALUES {}",
            values.join(", ")
        ))
        .await
        .expect("insert");
    log_all_statements().await;

    // Simple protocol.
    let r = simple_rows(
        &client,
        "SELECT name FROM seen_cust WHERE cust_id = 42 /* seen-1 */",
    )
    .await;
    assert_eq!(r, vec![vec![Some("c42".into())]]);
    assert_eq!(shards_that_ran("seen-1").len(), 1);
    client
        .simple_query("UPDATE seen_cust SET score = 1 WHERE cust_id = 43 /* seen-2 */")
        .await
        .expect("update");
    assert_eq!(shards_that_ran("seen-2").len(), 1);
    client
        .simple_query("DELETE FROM seen_cust WHERE cust_id = 44 /* seen-3 */")
        .await
        .expect("delete");
    assert_eq!(shards_that_ran("seen-3").len(), 1);
    // Prepared with a binary parameter.
    let stmt = client
        .prepare("SELECT name FROM seen_cust WHERE cust_id = $1 /* seen-4 */")
        .await
        .expect("prepare");
    let r = client.query_one(&stmt, &[&45i64]).await.expect("query");
    assert_eq!(r.get::<_, String>(0), "c45");
    assert_eq!(shards_that_ran("seen-4").len(), 1);
    // Prepared with a text parameter.
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP)
        .await
        .expect("raw");
    let replies = raw
        .parse(
            "",
            "SELECT name FROM seen_cust WHERE cust_id = $1 /* seen-5 */",
        )
        .bind("", "", &["46"])
        .execute("")
        .sync()
        .round_trip()
        .await;
    assert!(
        replies.contains(&Reply::Row(vec![Some("c46".into())])),
        "{replies:?}"
    );
    assert_eq!(shards_that_ran("seen-5").len(), 1);
    // The same key's statements meet on one shard.
    assert_eq!(shards_that_ran("seen-1"), shards_that_ran("seen-1"));
    // An IN list reaches only its values' shards: two keys on at most two shards.
    let r = simple_rows(
        &client,
        "SELECT cust_id FROM seen_cust WHERE cust_id IN (7, 8) /* seen-6 */",
    )
    .await;
    assert_eq!(r.len(), 2);
    let ran = shards_that_ran("seen-6");
    assert!((1..=2).contains(&ran.len()), "{ran:?}");
    let seven = {
        simple_rows(
            &client,
            "SELECT 1 FROM seen_cust WHERE cust_id = 7 /* seen-7a */",
        )
        .await;
        shards_that_ran("seen-7a")
    };
    let eight = {
        simple_rows(
            &client,
            "SELECT 1 FROM seen_cust WHERE cust_id = 8 /* seen-8a */",
        )
        .await;
        shards_that_ran("seen-8a")
    };
    assert_eq!(ran, seven.union(&eight).copied().collect());
    // Without the key: every shard of the table.
    let r = simple_rows(
        &client,
        "SELECT count(*) FROM seen_cust WHERE cust_id = 9 /* seen-9 */",
    )
    .await;
    assert_eq!(r, vec![vec![Some("1".into())]]);
    let r = simple_rows(
        &client,
        "SELECT cust_id FROM seen_cust WHERE score = 1 /* seen-10 */",
    )
    .await;
    assert_eq!(r, vec![vec![Some("43".into())]]);
    assert_eq!(shards_that_ran("seen-10").len(), SHARDS);
    raw.terminate().await;
    client
        .batch_execute("DROP TABLE seen_cust")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_transaction_spans_shards() {
    let proxy = start();
    // Its own application_name, which the proxy sets on every backend connection serving it, so
    // the check below sees this session's connections only.
    let (client, conn) = tokio_postgres::connect(
        &format!("{} application_name=tx_spans", proxy.conn_string()),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect");
    tokio::spawn(conn);
    create_customers(&client, "tx_cust").await;
    client
        .batch_execute(
            "BEGIN; INSERT INTO tx_cust VALUES (1, 'a', 0); INSERT INTO tx_cust VALUES (2, 'b', 0); \
             INSERT INTO tx_cust VALUES (3, 'c', 0); INSERT INTO tx_cust VALUES (4, 'd', 0)",
        )
        .await
        .expect("a block begun in one query string over several shards");
    client.batch_execute("ROLLBACK").await.expect("rollback");
    assert_eq!(
        counts("tx_cust").await.iter().sum::<i64>(),
        0,
        "the block rolled back on every shard"
    );
    client.simple_query("BEGIN").await.expect("begin");
    for i in 1..=40 {
        client
            .simple_query(&format!("INSERT INTO tx_cust VALUES ({i}, 'x', 0)"))
            .await
            .unwrap_or_else(|e| panic!("insert {i}: {e}"));
    }
    // Inside the block the rows are visible through the proxy.
    let seen = simple_rows(&client, "SELECT name FROM tx_cust WHERE cust_id = 17").await;
    assert_eq!(seen, vec![vec![Some("x".into())]]);
    let all = simple_rows(&client, "SELECT cust_id FROM tx_cust ORDER BY cust_id").await;
    assert_eq!(
        all.len(),
        40,
        "a read across shards inside the block sees its writes"
    );
    client.simple_query("COMMIT").await.expect("commit");
    assert_eq!(counts("tx_cust").await.iter().sum::<i64>(), 40);

    client.simple_query("BEGIN").await.expect("begin");
    for i in 41..=60 {
        client
            .simple_query(&format!("INSERT INTO tx_cust VALUES ({i}, 'y', 0)"))
            .await
            .unwrap_or_else(|e| panic!("insert {i}: {e}"));
    }
    client.simple_query("ROLLBACK").await.expect("rollback");
    assert_eq!(counts("tx_cust").await.iter().sum::<i64>(), 40);
    // Every connection went back: the session is idle on every shard.
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let open: i64 = c
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE application_name = 'tx_spans' \
                 AND state LIKE 'idle in transaction%'",
                &[],
            )
            .await
            .expect("activity")
            .get(0);
        assert_eq!(open, 0, "shard {i} has a connection left in a transaction");
    }
    client
        .batch_execute("DROP TABLE tx_cust")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_tables_are_written_everywhere_and_read_once() {
    let proxy = start();
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE DUPLICATED TABLE dup_prod (id int PRIMARY KEY, name text)")
        .await
        .expect("create");
    let msgs = client
        .simple_query("INSERT INTO dup_prod VALUES (1, 'one'), (2, 'two')")
        .await
        .expect("insert");
    assert_eq!(tag(&msgs), 2, "one copy's count");
    assert_eq!(counts("dup_prod").await, vec![2; SHARDS]);
    // Prepared writes too, with RETURNING: every copy written, one copy's answer.
    let n = client
        .execute("INSERT INTO dup_prod VALUES ($1, $2)", &[&3i32, &"three"])
        .await
        .expect("prepared insert");
    assert_eq!(n, 1);
    let back = client
        .query(
            "UPDATE dup_prod SET name = name || '!' WHERE id = $1 RETURNING name",
            &[&3i32],
        )
        .await
        .expect("prepared update");
    assert_eq!(back.len(), 1);
    assert_eq!(back[0].get::<_, String>(0), "three!");
    assert_eq!(counts("dup_prod").await, vec![3; SHARDS]);
    client
        .execute("DELETE FROM dup_prod WHERE id = $1", &[&3i32])
        .await
        .expect("prepared delete");
    let r = simple_rows(&client, "SELECT name FROM dup_prod ORDER BY id").await;
    assert_eq!(r, vec![vec![Some("one".into())], vec![Some("two".into())]]);
    // A join of a sharded table with a duplicated one runs whole on the key's shard.
    create_customers(&client, "dup_cust").await;
    client
        .simple_query("INSERT INTO dup_cust VALUES (5, 'five', 1)")
        .await
        .expect("insert customer");
    let r = simple_rows(
        &client,
        "SELECT c.name, p.name FROM dup_cust c JOIN dup_prod p ON p.id = c.score WHERE c.cust_id = 5",
    )
    .await;
    assert_eq!(r, vec![vec![Some("five".into()), Some("one".into())]]);
    client
        .batch_execute("DROP TABLE dup_cust; DROP TABLE dup_prod")
        .await
        .ok();
    client
        .batch_execute("DROP TABLE IF EXISTS dup_cust")
        .await
        .ok();
    client
        .batch_execute("DROP TABLE IF EXISTS dup_prod")
        .await
        .ok();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_large_failing_batch_leaves_the_session_usable() {
    let proxy = start();
    let client = proxy.connect().await;
    create_customers(&client, "batch_cust").await;
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP)
        .await
        .expect("raw");
    // psycopg's executemany: one Parse, 2,000 Bind/Execute, one Sync; the third row repeats
    // the first row's key and fails.
    raw.parse(
        "ins",
        "INSERT INTO batch_cust (cust_id, name, score) VALUES ($1, $2, 0)",
    );
    for i in 1..=2000 {
        let key = if i == 3 {
            "1".to_string()
        } else {
            i.to_string()
        };
        raw.bind("", "ins", &[&key, "n"]).execute("");
    }
    raw.sync();
    let replies = raw.round_trip().await;
    assert!(
        replies.contains(&Reply::Error(SqlState::UNIQUE_VIOLATION)),
        "{:?}",
        &replies[..replies.len().min(10)]
    );
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')));
    // Every kind of statement still runs on this connection: plain, keyed, admin, DDL.
    let r = raw.query("SELECT 1").round_trip().await;
    assert!(r.contains(&Reply::Row(vec![Some("1".into())])), "{r:?}");
    // The batch is one transaction, as on PostgreSQL: the rows before the failed one are
    // gone on every shard.
    assert_eq!(counts("batch_cust").await.iter().sum::<i64>(), 0);
    let r = raw
        .query("SELECT name FROM batch_cust WHERE cust_id = 1")
        .round_trip()
        .await;
    assert_eq!(
        r,
        vec![
            Reply::RowDescription(1),
            Reply::Complete("SELECT 0".into()),
            Reply::Ready(b'I')
        ]
    );
    let r = raw
        .query("INSERT INTO batch_cust VALUES (1, 'again', 0)")
        .round_trip()
        .await;
    assert!(r.contains(&Reply::Complete("INSERT 0 1".into())), "{r:?}");
    let r = raw.query("SHOW SHARDS").round_trip().await;
    assert_eq!(r.last(), Some(&Reply::Ready(b'I')), "{r:?}");
    let r = tokio::time::timeout(
        Duration::from_secs(30),
        raw.query("DROP TABLE batch_cust").round_trip(),
    )
    .await
    .expect("DROP TABLE answers");
    assert!(r.contains(&Reply::Complete("DROP TABLE".into())), "{r:?}");
    raw.terminate().await;
}

/// The README's quick-start session, through psql.

#[test]
fn the_readme_session_runs_through_psql() {
    let proxy = start();
    let out = proxy.psql(
        "CREATE TABLESPACE SET ts1 USING SHARDS (s1, s2);
CREATE SHARDED TABLE customers
(cust_id     NUMBER NOT NULL
, name        VARCHAR2(50)
, address     VARCHAR2(250)
, region      VARCHAR2(20)
, class       VARCHAR2(3)
, signup      DATE,
CONSTRAINT cust_pk PRIMARY KEY(cust_id, name))
PARTITION BY CONSISTENT HASH (cust_id,name)
PARTITIONS AUTO
TABLESPACE SET ts1;
INSERT INTO customers (cust_id, name, region) VALUES (1, 'Ann', 'OR'), (2, 'Bob', 'WA'), (3, 'Cy', 'CA');
SELECT cust_id, name, region FROM customers ORDER BY cust_id;
DROP TABLE customers;
DROP TABLESPACE SET ts1;
",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("ERROR"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("INSERT 0 3"), "{stdout}");
    assert!(
        stdout.contains(
            " cust_id | name | region \n---------+------+--------\n       1 | Ann  | OR\n       2 | Bob  | WA\n       3 | Cy   | CA\n(3 rows)"
        ),
        "{stdout}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sharding_ddl_and_admin_statements_run_through_the_extended_protocol() {
    let proxy = start();
    let client = proxy.connect().await;
    // tokio-postgres sends these as Parse/Describe/Bind/Execute, as JDBC and ORMs do.
    client
        .execute(
            "CREATE SHARDED TABLE ext_cust (cust_id bigint PRIMARY KEY, name text) \
             PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
            &[],
        )
        .await
        .expect("create through Parse");
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let there: Option<String> = c
            .query_one("SELECT to_regclass('ext_cust')::text", &[])
            .await
            .expect("regclass")
            .get(0);
        assert_eq!(there.as_deref(), Some("ext_cust"), "shard {i}");
    }
    let rows = client
        .query("SHOW CHUNKS FOR ext_cust", &[])
        .await
        .expect("SHOW through Parse");
    assert_eq!(rows.len(), 8 * SHARDS);
    let table: String = rows[0].get(0);
    assert_eq!(table, "ext_cust");
    let shards_rows = client.query("SHOW SHARDS", &[]).await.expect("SHOW SHARDS");
    assert_eq!(shards_rows.len(), SHARDS);
    client
        .execute("DROP TABLE ext_cust", &[])
        .await
        .expect("drop through Parse");
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let there: Option<String> = c
            .query_one("SELECT to_regclass('ext_cust')::text", &[])
            .await
            .expect("regclass")
            .get(0);
        assert_eq!(there, None, "shard {i} still has the table");
    }
    let one: i32 = client
        .query_one("SELECT 1", &[])
        .await
        .expect("select")
        .get(0);
    assert_eq!(one, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_cancel_reaches_every_shard_of_a_multi_shard_statement() {
    let proxy = start();
    let client = proxy.connect().await;
    create_customers(&client, "cancel_t").await;
    let values: Vec<String> = (1..=40).map(|i| format!("({i}, 'c', 0)")).collect();
    client
        .simple_query(&format!(
            "INSERT INTO cancel_t VALUES {}",
            values.join(", ")
        ))
        .await
        .expect("insert");
    assert!(counts("cancel_t").await.iter().all(|&n| n > 0));
    let token = client.cancel_token();
    let started = std::time::Instant::now();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(700)).await;
        token
            .cancel_query(tokio_postgres::NoTls)
            .await
            .expect("cancel request");
    });
    // Every shard sleeps 20 s; only a cancel that reaches all of them ends it early.
    let err = client
        .simple_query(
            "SELECT cust_id FROM cancel_t WHERE pg_sleep(20) IS NOT NULL AND cust_id = cust_id",
        )
        .await
        .expect_err("cancelled");
    canceller.await.expect("canceller");
    assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "took {:?}",
        started.elapsed()
    );
    let one = simple_rows(&client, "SELECT 1").await;
    assert_eq!(one, vec![vec![Some("1".into())]]);
    client
        .batch_execute("DROP TABLE cancel_t")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_held_statement_survives_its_connection_running_the_proxys_own_queries() {
    let proxy = start();
    let setup = proxy.connect().await;
    create_customers(&setup, "held_cust").await;
    setup
        .simple_query("INSERT INTO held_cust VALUES (5, 'five', 0), (6, 'six', 0), (7, 'seven', 0)")
        .await
        .expect("insert");
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP)
        .await
        .expect("raw");
    let five = Reply::Row(vec![Some("five".into())]);
    let keyed = |raw: &mut RawClient| {
        raw.parse("", "SELECT name FROM held_cust WHERE cust_id = $1")
            .bind("", "", &["5"])
            .execute("")
            .sync();
    };
    keyed(&mut raw);
    let r = raw.round_trip().await;
    assert!(r.contains(&five), "{r:?}");
    // A statement over every shard takes the same pooled connections and runs a simple query
    // there, which drops their unnamed statements.
    let r = raw
        .query("SELECT cust_id FROM held_cust")
        .round_trip()
        .await;
    assert_eq!(r.last(), Some(&Reply::Ready(b'I')), "{r:?}");
    keyed(&mut raw);
    let r = raw.round_trip().await;
    assert!(r.contains(&five), "after a multi-shard read: {r:?}");
    // So does the end of a transaction across shards, which reaches the others by simple query.
    let r = raw.query("BEGIN").round_trip().await;
    assert_eq!(r.last(), Some(&Reply::Ready(b'T')));
    keyed(&mut raw);
    let r = raw.round_trip().await;
    assert!(r.contains(&five), "{r:?}");
    for k in ["6", "7"] {
        let sql = format!("UPDATE held_cust SET score = score + 1 WHERE cust_id = {k}");
        let r = raw.query(&sql).round_trip().await;
        assert!(r.contains(&Reply::Complete("UPDATE 1".into())), "{r:?}");
    }
    let r = raw.query("COMMIT").round_trip().await;
    assert_eq!(r.last(), Some(&Reply::Ready(b'I')));
    keyed(&mut raw);
    let r = raw.round_trip().await;
    assert!(r.contains(&five), "after a COMMIT: {r:?}");
    raw.terminate().await;
    setup
        .batch_execute("DROP TABLE held_cust")
        .await
        .expect("drop");
}
