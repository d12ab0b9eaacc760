//! Statements on sharded tables through the proxy, against four real shards: rows land on the
//! shard of their chunk (counted on the shards themselves), keyed statements reach exactly the
//! shards of their keys (seen in the shards' statement logs), and multi-shard reads answer
//! exactly what one PostgreSQL holding every row answers.

mod common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::raw::{RawClient, Reply};
use common::{shards, use_shards, TestProxy, APP};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, SimpleQueryMessage};

const SHARDS: usize = 4;

fn start() -> TestProxy {
    use_shards(SHARDS);
    TestProxy::start()
}

async fn simple_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

fn tag(messages: &[SimpleQueryMessage]) -> u64 {
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .expect("a command tag")
}

/// Rows of `table` on each shard, counted there.
async fn counts(table: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap_or_else(|e| panic!("count {table} on shard {i}: {e}"))
            .get(0);
        out.push(n);
    }
    out
}

/// Every shard logs every statement from now on.
async fn log_all_statements() {
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        c.batch_execute("ALTER SYSTEM SET log_statement = 'all'")
            .await
            .expect("log_statement");
        c.batch_execute("SELECT pg_reload_conf()")
            .await
            .expect("reload");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The shards whose statement log mentions `marker`.
fn shards_that_ran(marker: &str) -> BTreeSet<usize> {
    (0..SHARDS)
        .filter(|&i| {
            std::fs::read_to_string(shards().clusters[i].log_file())
                .unwrap_or_default()
                .contains(marker)
        })
        .collect()
}

async fn create_customers(client: &Client, name: &str) {
    client
        .batch_execute(&format!(
            "CREATE SHARDED TABLE {name} (cust_id bigint PRIMARY KEY, name text, score int) \
             PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO"
        ))
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

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

/// The same rows in a sharded table and in one plain table on one PostgreSQL.
async fn twin_tables(client: &Client, name: &str) -> Client {
    client
        .batch_execute(&format!(
            "CREATE SHARDED TABLE {name} (id int PRIMARY KEY, grp int, v text, n numeric) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
        ))
        .await
        .expect("create");
    let rows: Vec<String> = (1..=300)
        .map(|i| {
            let v = if i % 11 == 0 {
                "NULL".to_string()
            } else {
                format!("'v{:03}'", (i * 37) % 101)
            };
            let n = if i % 13 == 0 {
                "NULL".to_string()
            } else {
                format!("{}.{}", (i * 7919) % 500 - 250, i % 10)
            };
            format!("({i}, {}, {v}, {n})", i % 5)
        })
        .collect();
    let insert = format!("INSERT INTO {name} VALUES {}", rows.join(", "));
    client.simple_query(&insert).await.expect("insert");
    // The reference copy lives on shard 0 only, under another name, outside the catalog.
    let plain = shards().connect(0).await;
    plain
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {name}_ref; CREATE TABLE {name}_ref (id int PRIMARY KEY, grp int, v text, n numeric); {}",
            insert.replace(&format!("INTO {name} "), &format!("INTO {name}_ref "))
        ))
        .await
        .expect("reference table");
    plain
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_reads_answer_as_one_postgres() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "gather_t").await;
    let queries = [
        "SELECT id, v FROM gather_t ORDER BY id",
        "SELECT id, v FROM gather_t ORDER BY v, id",
        "SELECT id, v FROM gather_t ORDER BY v DESC, id DESC",
        "SELECT id, v FROM gather_t ORDER BY v NULLS FIRST, id LIMIT 20",
        "SELECT id, v FROM gather_t ORDER BY v DESC NULLS LAST, id LIMIT 17 OFFSET 5",
        "SELECT id FROM gather_t ORDER BY n, id",
        "SELECT id FROM gather_t ORDER BY n DESC NULLS LAST, id",
        "SELECT id, grp FROM gather_t WHERE grp = 3 ORDER BY v NULLS FIRST, id DESC",
        "SELECT id FROM gather_t ORDER BY grp, n DESC, id OFFSET 290",
        "SELECT id * 2 AS twice FROM gather_t ORDER BY twice DESC LIMIT 3",
        "SELECT id, v FROM gather_t ORDER BY 2, 1 LIMIT 10",
        "SELECT id FROM gather_t WHERE id IN (1, 2, 3, 250) ORDER BY id DESC",
        "SELECT id FROM gather_t ORDER BY id LIMIT 0",
    ];
    for q in queries {
        let got = simple_rows(&client, q).await;
        let want = simple_rows(&plain, &q.replace("gather_t", "gather_t_ref")).await;
        assert_eq!(got, want, "{q}");
    }
    // Without ORDER BY: the same rows in some order, and the count in the tag.
    let mut got = simple_rows(&client, "SELECT id FROM gather_t WHERE grp = 1").await;
    got.sort();
    let mut want = simple_rows(&plain, "SELECT id FROM gather_t_ref WHERE grp = 1").await;
    want.sort();
    assert_eq!(got, want);
    let msgs = client
        .simple_query("SELECT id FROM gather_t")
        .await
        .expect("all rows");
    assert_eq!(tag(&msgs), 300);
    // Aggregates across shards are refused, never answered wrongly; the session goes on.
    for q in [
        "SELECT count(*) FROM gather_t",
        "SELECT grp, max(id) FROM gather_t GROUP BY grp",
        "SELECT DISTINCT grp FROM gather_t",
    ] {
        let err = client.simple_query(q).await.expect_err(q);
        assert_eq!(
            err.code(),
            Some(&SqlState::FEATURE_NOT_SUPPORTED),
            "{q}: {err}"
        );
    }
    // With the whole key they run on its shard.
    let r = simple_rows(&client, "SELECT count(*) FROM gather_t WHERE id = 5").await;
    assert_eq!(r, vec![vec![Some("1".into())]]);
    // Writes without the key reach every shard; the tag adds their counts up.
    let msgs = client
        .simple_query("UPDATE gather_t SET v = 'x' WHERE grp = 2")
        .await
        .expect("update everywhere");
    assert_eq!(tag(&msgs), 60);
    let msgs = client
        .simple_query("DELETE FROM gather_t WHERE grp = 4")
        .await
        .expect("delete everywhere");
    assert_eq!(tag(&msgs), 60);
    assert_eq!(counts("gather_t").await.iter().sum::<i64>(), 240);
    // RETURNING rows of a split INSERT come back in VALUES order.
    let r = simple_rows(
        &client,
        "INSERT INTO gather_t (id, grp) VALUES (1001, 0), (1002, 0), (1003, 0), (1004, 0), \
         (1005, 0) RETURNING id",
    )
    .await;
    let ids: Vec<String> = r.into_iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(ids, ["1001", "1002", "1003", "1004", "1005"]);
    client
        .batch_execute("DROP TABLE gather_t")
        .await
        .expect("drop");
    plain
        .batch_execute("DROP TABLE gather_t_ref")
        .await
        .expect("drop ref");
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
        .expect_err("several statements in one query string are refused");
    client.batch_execute("ROLLBACK").await.ok();
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
    // (Key 1 shares a shard with the failed row, whose implicit transaction rolled it back.)
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

/// The rows of a query through tokio-postgres's extended protocol, which asks for binary
/// results: (id, v) pairs.
async fn binary_rows(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Vec<(i32, Option<String>)> {
    client
        .query(sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_prepared_statements_answer_in_binary_as_one_postgres() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "bin_t").await;
    let queries = [
        "SELECT id, v FROM bin_t ORDER BY id",
        "SELECT id, v FROM bin_t ORDER BY v DESC NULLS LAST, id",
        "SELECT id, v FROM bin_t ORDER BY n NULLS FIRST, id LIMIT 25 OFFSET 3",
        "SELECT id, v FROM bin_t WHERE grp = $1 ORDER BY v, id DESC",
        "SELECT id, v FROM bin_t WHERE id IN (3, 4, 5, 6) ORDER BY id",
    ];
    for q in queries {
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = if q.contains("$1") {
            vec![&2i32]
        } else {
            vec![]
        };
        let got = binary_rows(&client, q, &params).await;
        let want = binary_rows(&plain, &q.replace("bin_t", "bin_t_ref"), &params).await;
        assert_eq!(got, want, "{q}");
    }
    // An array of keys over several shards runs on exactly those, merged.
    let ids: Vec<i32> = (1..=12).collect();
    let q = "SELECT id, v FROM bin_t WHERE id = ANY($1) ORDER BY id DESC";
    let got = binary_rows(&client, q, &[&ids]).await;
    let want = binary_rows(&plain, &q.replace("bin_t", "bin_t_ref"), &[&ids]).await;
    assert_eq!(got, want, "{q}");
    assert_eq!(got.len(), 12);
    // A prepared statement executed again and again keeps answering.
    let stmt = client
        .prepare("SELECT id, v FROM bin_t WHERE grp = $1 ORDER BY id DESC LIMIT 3")
        .await
        .expect("prepare");
    for g in 0..5i32 {
        let got: Vec<i32> = client
            .query(&stmt, &[&g])
            .await
            .expect("query")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let want: Vec<i32> = plain
            .query(
                "SELECT id FROM bin_t_ref WHERE grp = $1 ORDER BY id DESC LIMIT 3",
                &[&g],
            )
            .await
            .expect("reference")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(got, want, "grp {g}");
    }
    // Writes without the key through a prepared statement reach every shard.
    let n = client
        .execute("UPDATE bin_t SET v = $1 WHERE grp = $2", &[&"w", &1i32])
        .await
        .expect("update");
    assert_eq!(n, 60);
    // Aggregates are refused there too, and the connection stays usable.
    let err = client
        .query("SELECT count(*) FROM bin_t WHERE grp = $1", &[&1i32])
        .await
        .expect_err("aggregate across shards");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED));
    let one: i32 = client
        .query_one("SELECT 1", &[])
        .await
        .expect("select 1")
        .get(0);
    assert_eq!(one, 1);
    // Inside a transaction block, a multi-shard read sees the block's writes.
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .execute("INSERT INTO bin_t (id, grp) VALUES ($1, 9)", &[&5000i32])
        .await
        .expect("insert");
    let rows = client
        .query("SELECT id, v FROM bin_t WHERE grp = $1", &[&9i32])
        .await
        .expect("read in block");
    assert_eq!(rows.len(), 1);
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let rows = client
        .query("SELECT id, v FROM bin_t WHERE grp = $1", &[&9i32])
        .await
        .expect("read after rollback");
    assert!(rows.is_empty());
    client
        .batch_execute("DROP TABLE bin_t")
        .await
        .expect("drop");
    plain
        .batch_execute("DROP TABLE bin_t_ref")
        .await
        .expect("drop ref");
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
async fn generated_keys_are_unique_across_proxies_and_routed() {
    let proxies = [start(), start()];
    let setup = proxies[0].connect().await;
    setup
        .batch_execute(
            "CREATE SHARDED TABLE gen_t (id bigserial PRIMARY KEY, v text, client int) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .expect("create");
    // The second proxy sees the table (and its sequence) through the catalog.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    let mut clients = Vec::new();
    for c in 0..4i32 {
        let client = proxies[(c % 2) as usize].connect().await;
        clients.push(tokio::spawn(async move {
            let mut ids: Vec<i64> = Vec::new();
            let insert = client
                .prepare("INSERT INTO gen_t (v, client) VALUES ($1, $2) RETURNING id")
                .await
                .expect("prepare");
            for i in 0..1250 {
                let row = client
                    .query_one(&insert, &[&format!("p{i}"), &c])
                    .await
                    .expect("prepared insert");
                ids.push(row.get(0));
            }
            for batch in 0..25 {
                let values: Vec<String> =
                    (0..50).map(|i| format!("('s{batch}_{i}', {c})")).collect();
                let msgs = client
                    .simple_query(&format!(
                        "INSERT INTO gen_t (v, client) VALUES {} RETURNING id",
                        values.join(", ")
                    ))
                    .await
                    .expect("multi-row insert");
                for m in msgs {
                    if let SimpleQueryMessage::Row(r) = m {
                        ids.push(r.get(0).unwrap().parse().unwrap());
                    }
                }
            }
            (c, ids)
        }));
    }
    let mut returned: Vec<(i32, i64)> = Vec::new();
    for h in clients {
        let (c, ids) = h.await.expect("client task");
        assert_eq!(ids.len(), 2500, "client {c}");
        returned.extend(ids.into_iter().map(|id| (c, id)));
    }
    let mut stored: Vec<(i32, i64)> = Vec::new();
    for i in 0..SHARDS {
        let shard = shards().connect(i).await;
        for r in shard
            .query("SELECT client, id FROM gen_t", &[])
            .await
            .expect("ids on shard")
        {
            stored.push((r.get(0), r.get(1)));
        }
    }
    let distinct: BTreeSet<i64> = stored.iter().map(|(_, id)| *id).collect();
    assert_eq!(stored.len(), 10_000, "every row stored");
    assert_eq!(distinct.len(), 10_000, "no value given out twice");
    returned.sort();
    stored.sort();
    assert_eq!(returned, stored, "RETURNING gives each row's stored key");
    assert!(counts("gen_t").await.iter().all(|&n| n > 1000));
    // DEFAULT asks for a generated value too.
    let r = simple_rows(
        &setup,
        "INSERT INTO gen_t (id, v) VALUES (DEFAULT, 'd') RETURNING v",
    )
    .await;
    assert_eq!(r, vec![vec![Some("d".into())]]);
    // An identity that is GENERATED ALWAYS refuses values given explicitly, as PostgreSQL does.
    setup
        .batch_execute(
            "CREATE SHARDED TABLE gen_always (id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY, \
             v text) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .expect("create identity table");
    let err = setup
        .simple_query("INSERT INTO gen_always (id, v) VALUES (5, 'x')")
        .await
        .expect_err("explicit value for GENERATED ALWAYS");
    assert_eq!(err.code(), Some(&SqlState::GENERATED_ALWAYS));
    let r = simple_rows(
        &setup,
        "INSERT INTO gen_always (v) VALUES ('x') RETURNING id",
    )
    .await;
    assert_eq!(r.len(), 1);
    setup
        .batch_execute("DROP TABLE gen_t; ")
        .await
        .expect("drop");
    setup
        .batch_execute("DROP TABLE gen_always")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn insert_select_routes_the_rows_or_runs_on_each_shard() {
    let proxy = start();
    let client = proxy.connect().await;
    create_customers(&client, "is_cust").await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE is_orders (order_id bigint, cust_id bigint NOT NULL, \
             PRIMARY KEY (cust_id, order_id), \
             CONSTRAINT is_orders_fk FOREIGN KEY (cust_id) REFERENCES is_cust (cust_id)) \
             PARTITION BY REFERENCE (is_orders_fk)",
        )
        .await
        .expect("create child");
    // How people load test data: the SELECT runs once, its rows go to their shards.
    let msgs = client
        .simple_query(
            "INSERT INTO is_cust (cust_id, name, score) \
             SELECT g, 'c' || g, g % 10 FROM generate_series(1, 100000) g",
        )
        .await
        .expect("insert … select");
    assert_eq!(tag(&msgs), 100_000);
    let per_shard = counts("is_cust").await;
    assert_eq!(per_shard.iter().sum::<i64>(), 100_000);
    assert!(per_shard.iter().all(|&n| n > 20_000), "{per_shard:?}");
    // Inside one family, on the key: each shard inserts the rows it reads.
    log_all_statements().await;
    let msgs = client
        .simple_query(
            "INSERT INTO is_orders (order_id, cust_id) SELECT cust_id * 10, cust_id \
             FROM is_cust WHERE score = 3 /* is-pushdown */",
        )
        .await
        .expect("pushed down");
    assert_eq!(tag(&msgs), 10_000);
    assert_eq!(shards_that_ran("is-pushdown").len(), SHARDS);
    assert_eq!(counts("is_orders").await.iter().sum::<i64>(), 10_000);
    // A key computed by an expression moves rows between shards: two steps, RETURNING kept.
    let r = simple_rows(
        &client,
        "INSERT INTO is_cust (cust_id, name) SELECT cust_id + 1000000, name FROM is_cust \
         WHERE cust_id <= 5 ORDER BY cust_id RETURNING cust_id",
    )
    .await;
    let mut ids: Vec<String> = r.into_iter().map(|r| r[0].clone().unwrap()).collect();
    ids.sort();
    assert_eq!(ids, ["1000001", "1000002", "1000003", "1000004", "1000005"]);
    // Texts that differ in a literal never share what the literal built.
    for n in [3, 7] {
        let msgs = client
            .simple_query(&format!(
                "INSERT INTO is_cust (cust_id, name) SELECT g, 'x' FROM generate_series({}, {}) g",
                2_000_001 + 100 * n,
                2_000_000 + 100 * n + n
            ))
            .await
            .expect("small insert … select");
        assert_eq!(tag(&msgs), n);
    }
    // A duplicate on one shard fails the statement with PostgreSQL's error.
    let err = client
        .simple_query(
            "INSERT INTO is_cust (cust_id, name) SELECT g, 'd' FROM generate_series(1, 3) g",
        )
        .await
        .expect_err("duplicate keys");
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION));
    client
        .batch_execute("DROP TABLE is_orders, is_cust")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_never_orders_text_by_another_collation() {
    let proxy = start();
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE coll_t (id int PRIMARY KEY, name text, label text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .expect("create");
    client
        .batch_execute("ALTER TABLE coll_t ALTER COLUMN label TYPE text COLLATE \"und-x-icu\"")
        .await
        .expect("an ICU collation on one column");
    client
        .simple_query("INSERT INTO coll_t VALUES (1, 'b', 'b'), (2, 'a', 'B'), (3, 'C', 'a')")
        .await
        .expect("insert");
    // The database's collation (C in the test clusters) is byte order: merged by the proxy.
    let r = simple_rows(&client, "SELECT id FROM coll_t ORDER BY name").await;
    assert_eq!(
        r,
        vec![
            vec![Some("3".into())],
            vec![Some("2".into())],
            vec![Some("1".into())]
        ]
    );
    // A column in another collation is refused rather than ordered wrongly, in both protocols.
    let err = client
        .simple_query("SELECT id FROM coll_t ORDER BY label")
        .await
        .expect_err("ICU order across shards");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    let err = client
        .query("SELECT id, label FROM coll_t ORDER BY label", &[])
        .await
        .expect_err("ICU order across shards, prepared");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    // With the key it runs on one shard, which sorts as it always does.
    let r = simple_rows(
        &client,
        "SELECT label FROM coll_t WHERE id = 1 ORDER BY label",
    )
    .await;
    assert_eq!(r, vec![vec![Some("b".into())]]);
    client
        .batch_execute("DROP TABLE coll_t")
        .await
        .expect("drop");
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
