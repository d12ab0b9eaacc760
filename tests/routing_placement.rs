//! Placement and pruning against four real shards: 100,000 rows through the proxy into a
//! family, a LIST, a RANGE, a composite LIST and a composite RANGE table land where their
//! partitions and chunks live (the shards refuse any other row; the counts per shard are
//! checked against what the bounds imply); range, list, partition-set and `= ANY` predicates
//! reach only the shards that can hold matching rows (seen in the shards' statement logs);
//! constants of every key type are read as PostgreSQL reads them.
//!
//! The tests share the shards and the catalog: each uses tablespaces, tablespace sets and
//! tables of its own names.

mod common;

use std::collections::{BTreeMap, BTreeSet};
use std::time::Duration;

use common::{shards, use_shards, TestProxy};
use futures::future::try_join_all;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::ToSql;
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

/// Runs each `;`-ended statement of `sql` on its own (sharding DDL takes one at a time).
async fn exec(client: &Client, sql: &str) {
    for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        client.batch_execute(stmt).await.unwrap_or_else(|e| {
            let why = e
                .as_db_error()
                .map_or(e.to_string(), |d| d.message().to_string());
            panic!("{stmt}: {why}")
        });
    }
}

/// `SELECT count(*) … <filter>` on each shard, directly; 0 where the table is not.
async fn counts(table: &str, filter: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        if !has_table(i, table).await {
            out.push(0);
            continue;
        }
        let c = shards().connect(i).await;
        let sql = format!("SELECT count(*) FROM {table} {filter}");
        let n: i64 = c
            .query_one(&sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql} on shard {i}: {e}"))
            .get(0);
        out.push(n);
    }
    out
}

/// Whether shard `i` has a table of that name.
async fn has_table(i: usize, table: &str) -> bool {
    let c = shards().connect(i).await;
    c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .expect("to_regclass")
        .get(0)
}

/// Every shard logs every statement from now on.
async fn log_all_statements() {
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        exec(&c, "ALTER SYSTEM SET log_statement = 'all'").await;
        exec(&c, "SELECT pg_reload_conf()").await;
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

/// Tablespaces `{prefix}_t1`…`_t4` on s1…s4, and tablespace sets `{prefix}_tsa` = (s1, s2),
/// `{prefix}_tsb` = (s3, s4).
async fn tablespaces(client: &Client, prefix: &str) {
    for i in 1..=SHARDS {
        exec(
            client,
            &format!("CREATE TABLESPACE {prefix}_t{i} ON SHARD s{i}"),
        )
        .await;
    }
    exec(
        client,
        &format!("CREATE TABLESPACE SET {prefix}_tsa USING SHARDS (s1, s2)"),
    )
    .await;
    exec(
        client,
        &format!("CREATE TABLESPACE SET {prefix}_tsb USING SHARDS (s3, s4)"),
    )
    .await;
}

/// Multi-row INSERTs of `rows` (each a parenthesised VALUES row), 500 per statement.
async fn insert_rows(client: &Client, table: &str, columns: &str, rows: &[String]) {
    for chunk in rows.chunks(500) {
        let sql = format!(
            "INSERT INTO {table} ({columns}) VALUES {}",
            chunk.join(", ")
        );
        let msgs = client
            .simple_query(&sql)
            .await
            .unwrap_or_else(|e| panic!("INSERT INTO {table}: {e}"));
        let n = msgs.iter().find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        });
        assert_eq!(n, Some(chunk.len() as u64), "INSERT INTO {table}");
    }
}

/// A prepared single-row INSERT run once per parameter row (binary parameters), pipelined
/// 100 at a time.
async fn insert_prepared(client: &Client, sql: &str, rows: Vec<Vec<Box<dyn ToSql + Sync + Send>>>) {
    let stmt = client
        .prepare(sql)
        .await
        .unwrap_or_else(|e| panic!("prepare {sql}: {e}"));
    for chunk in rows.chunks(100) {
        let runs = chunk.iter().map(|row| {
            let params: Vec<&(dyn ToSql + Sync)> = row
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let stmt = &stmt;
            async move { client.execute(stmt, &params).await }
        });
        let done = try_join_all(runs)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(done.iter().all(|&n| n == 1), "{sql}");
    }
}

fn boxed<T: ToSql + Sync + Send + 'static>(v: T) -> Box<dyn ToSql + Sync + Send> {
    Box::new(v)
}

const REGIONS: [&str; 7] = ["OR", "WA", "AZ", "UT", "NY", "TX", "FL"];

/// The LIST table's partition (= shard) of a region.
fn region_shard(region: &str) -> usize {
    match region {
        "OR" | "WA" => 0,
        "AZ" | "UT" => 1,
        "NY" => 2,
        _ => 3,
    }
}

/// The RANGE table's partition (= shard) of a key: < 2500, < 5000, < 7500, < MAXVALUE.
fn range_shard(k: i64) -> usize {
    (k / 2500).clamp(0, 3) as usize
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_hundred_thousand_rows_land_where_their_partitions_and_chunks_live() {
    let proxy = start();
    let client = proxy.connect().await;
    tablespaces(&client, "plc").await;
    exec(
        &client,
        "CREATE SHARDED TABLE plc_customers (cust_id bigint PRIMARY KEY, name text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO;
         CREATE SHARDED TABLE plc_orders (order_id bigint NOT NULL, cust_id bigint NOT NULL, \
           CONSTRAINT plc_orders_pk PRIMARY KEY (cust_id, order_id), \
           CONSTRAINT plc_orders_fk FOREIGN KEY (cust_id) REFERENCES plc_customers (cust_id)) \
         PARTITION BY REFERENCE (plc_orders_fk);
         CREATE SHARDED TABLE plc_lineitems (line_no int NOT NULL, order_id bigint NOT NULL, \
           cust_id bigint NOT NULL, \
           CONSTRAINT plc_li_pk PRIMARY KEY (cust_id, order_id, line_no), \
           CONSTRAINT plc_li_fk FOREIGN KEY (cust_id, order_id) \
             REFERENCES plc_orders (cust_id, order_id)) \
         PARTITION BY REFERENCE (plc_li_fk);
         CREATE SHARDED TABLE plc_list (id bigint NOT NULL, region varchar(2) NOT NULL) \
         PARTITION BY LIST (region) \
         (PARTITION p_1 VALUES ('OR', 'WA') TABLESPACE plc_t1, \
          PARTITION p_2 VALUES ('AZ', 'UT') TABLESPACE plc_t2, \
          PARTITION p_3 VALUES ('NY') TABLESPACE plc_t3, \
          PARTITION p_4 VALUES ('TX', 'FL') TABLESPACE plc_t4);
         CREATE SHARDED TABLE plc_range (id bigint NOT NULL, k bigint NOT NULL) \
         PARTITION BY RANGE (k) \
         (PARTITION p_1 VALUES LESS THAN (2500) TABLESPACE plc_t1, \
          PARTITION p_2 VALUES LESS THAN (5000) TABLESPACE plc_t2, \
          PARTITION p_3 VALUES LESS THAN (7500) TABLESPACE plc_t3, \
          PARTITION p_4 VALUES LESS THAN (MAXVALUE) TABLESPACE plc_t4);
         CREATE SHARDED TABLE plc_clist (id bigint NOT NULL, class varchar(3) NOT NULL, \
           CONSTRAINT plc_clist_pk PRIMARY KEY (id, class)) \
         PARTITIONSET BY LIST (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO \
         (PARTITIONSET silver VALUES ('SLV', 'BRZ') TABLESPACE SET plc_tsa, \
          PARTITIONSET gold VALUES ('GLD') TABLESPACE SET plc_tsb);
         CREATE SHARDED TABLE plc_crange (id bigint NOT NULL, grade int NOT NULL) \
         PARTITIONSET BY RANGE (grade) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO \
         (PARTITIONSET low VALUES LESS THAN (50) TABLESPACE SET plc_tsa, \
          PARTITIONSET high VALUES LESS THAN (100) TABLESPACE SET plc_tsb);",
    )
    .await;

    // The family: 10,000 customers, two orders each, three lines on each first order.
    let order = |c: i64, j: i64| c * 10 + j;
    let rows: Vec<String> = (1..=8000).map(|c| format!("({c}, 'c{c}')")).collect();
    insert_rows(&client, "plc_customers", "cust_id, name", &rows).await;
    insert_prepared(
        &client,
        "INSERT INTO plc_customers (cust_id, name) VALUES ($1, $2)",
        (8001..=10000i64)
            .map(|c| vec![boxed(c), boxed(format!("c{c}"))])
            .collect(),
    )
    .await;
    let rows: Vec<String> = (1..=9000)
        .flat_map(|c| (1..=2).map(move |j| format!("({}, {c})", order(c, j))))
        .collect();
    insert_rows(&client, "plc_orders", "order_id, cust_id", &rows).await;
    insert_prepared(
        &client,
        "INSERT INTO plc_orders (order_id, cust_id) VALUES ($1, $2)",
        (9001..=10000i64)
            .flat_map(|c| (1..=2).map(move |j| vec![boxed(order(c, j)), boxed(c)]))
            .collect(),
    )
    .await;
    let rows: Vec<String> = (1..=9334)
        .flat_map(|c| (1..=3).map(move |l| format!("({l}, {}, {c})", order(c, 1))))
        .collect();
    insert_rows(
        &client,
        "plc_lineitems",
        "line_no, order_id, cust_id",
        &rows,
    )
    .await;
    insert_prepared(
        &client,
        "INSERT INTO plc_lineitems (line_no, order_id, cust_id) VALUES ($1, $2, $3)",
        (9335..=10000i64)
            .flat_map(|c| (1..=3i32).map(move |l| vec![boxed(l), boxed(order(c, 1)), boxed(c)]))
            .collect(),
    )
    .await;

    // LIST, RANGE and the composites: 10,000 rows each, the last 2,000 prepared.
    let region = |id: i64| REGIONS[(id % 7) as usize];
    let k_of = |id: i64| (id * 37) % 10000;
    let class = |id: i64| ["SLV", "BRZ", "GLD"][(id % 3) as usize];
    let grade = |id: i64| (id % 100) as i32;
    let ids = 1..=10000i64;
    let multi = |id: &i64| *id <= 8000;
    let rows: Vec<String> = ids
        .clone()
        .filter(multi)
        .map(|i| format!("({i}, '{}')", region(i)))
        .collect();
    insert_rows(&client, "plc_list", "id, region", &rows).await;
    insert_prepared(
        &client,
        "INSERT INTO plc_list (id, region) VALUES ($1, $2)",
        (8001..=10000)
            .map(|i| vec![boxed(i), boxed(region(i).to_string())])
            .collect(),
    )
    .await;
    let rows: Vec<String> = ids
        .clone()
        .filter(multi)
        .map(|i| format!("({i}, {})", k_of(i)))
        .collect();
    insert_rows(&client, "plc_range", "id, k", &rows).await;
    insert_prepared(
        &client,
        "INSERT INTO plc_range (id, k) VALUES ($1, $2)",
        (8001..=10000)
            .map(|i| vec![boxed(i), boxed(k_of(i))])
            .collect(),
    )
    .await;
    let rows: Vec<String> = ids
        .clone()
        .filter(multi)
        .map(|i| format!("({i}, '{}')", class(i)))
        .collect();
    insert_rows(&client, "plc_clist", "id, class", &rows).await;
    insert_prepared(
        &client,
        "INSERT INTO plc_clist (id, class) VALUES ($1, $2)",
        (8001..=10000)
            .map(|i| vec![boxed(i), boxed(class(i).to_string())])
            .collect(),
    )
    .await;
    let rows: Vec<String> = ids
        .clone()
        .filter(multi)
        .map(|i| format!("({i}, {})", grade(i)))
        .collect();
    insert_rows(&client, "plc_crange", "id, grade", &rows).await;
    insert_prepared(
        &client,
        "INSERT INTO plc_crange (id, grade) VALUES ($1, $2)",
        (8001..=10000)
            .map(|i| vec![boxed(i), boxed(grade(i))])
            .collect(),
    )
    .await;

    // Counted on the shards. Each shard's partitions refuse rows of other partitions and
    // chunks, and each child's foreign key is checked on its shard, so every row sits on
    // its chunk's shard beside its parent.
    let mut total = 0;
    for (table, n) in [
        ("plc_customers", 10000),
        ("plc_orders", 20000),
        ("plc_lineitems", 30000),
    ] {
        let per_shard = counts(table, "").await;
        assert_eq!(per_shard.iter().sum::<i64>(), n, "{table}: {per_shard:?}");
        assert!(
            per_shard.iter().all(|&c| c > n / 8),
            "{table} spread: {per_shard:?}"
        );
        total += n;
    }
    // The family's tables share chunks: per shard, two orders and three lines per customer.
    let customers = counts("plc_customers", "").await;
    let orders = counts("plc_orders", "").await;
    let lines = counts("plc_lineitems", "").await;
    for i in 0..SHARDS {
        assert_eq!(orders[i], 2 * customers[i], "shard {i}");
        assert_eq!(lines[i], 3 * customers[i], "shard {i}");
    }
    // LIST and RANGE: exactly the rows their bounds send to each shard.
    let mut want = [0i64; SHARDS];
    for i in ids.clone() {
        want[region_shard(region(i))] += 1;
    }
    assert_eq!(counts("plc_list", "").await, want);
    let mut want = [0i64; SHARDS];
    for i in ids.clone() {
        want[range_shard(k_of(i))] += 1;
    }
    assert_eq!(counts("plc_range", "").await, want);
    // Composites: each partition set on its tablespace set's shards only, spread by chunk.
    for (table, filter, first_set) in [
        (
            "plc_clist",
            "WHERE class IN ('SLV', 'BRZ')",
            ids.clone().filter(|&i| class(i) != "GLD").count(),
        ),
        (
            "plc_crange",
            "WHERE grade < 50",
            ids.clone().filter(|&i| grade(i) < 50).count(),
        ),
    ] {
        let first = counts(table, filter).await;
        let all = counts(table, "").await;
        assert_eq!(all.iter().sum::<i64>(), 10000, "{table}");
        assert_eq!(first[0] + first[1], first_set as i64, "{table}: {first:?}");
        assert_eq!(first[2] + first[3], 0, "{table}: {first:?}");
        assert_eq!(all[0] + all[1], first_set as i64, "{table}: {all:?}");
        assert!(all.iter().all(|&c| c > 0), "{table}: {all:?}");
        total += 10000;
    }
    total += 20000;
    assert_eq!(total, 100_000);

    // Every row reads back through the proxy.
    let n = simple_rows(
        &client,
        "SELECT count(*) FROM plc_lineitems WHERE cust_id = 9999",
    )
    .await;
    assert_eq!(n, [[Some("3".to_string())]]);
    let back = simple_rows(
        &client,
        "SELECT id FROM plc_range WHERE k >= 2490 AND k < 2510",
    )
    .await;
    assert_eq!(back.len(), 20);

    exec(
        &client,
        "DROP TABLE plc_lineitems; DROP TABLE plc_orders; DROP TABLE plc_customers; \
         DROP TABLE plc_list; DROP TABLE plc_range; DROP TABLE plc_clist; DROP TABLE plc_crange;",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicates_reach_only_the_shards_that_can_hold_matching_rows() {
    let proxy = start();
    let client = proxy.connect().await;
    tablespaces(&client, "rt").await;
    exec(
        &client,
        "CREATE SHARDED TABLE rt_range (k bigint NOT NULL, v text) PARTITION BY RANGE (k) \
         (PARTITION p_1 VALUES LESS THAN (100) TABLESPACE rt_t1, \
          PARTITION p_2 VALUES LESS THAN (200) TABLESPACE rt_t2, \
          PARTITION p_3 VALUES LESS THAN (300) TABLESPACE rt_t3, \
          PARTITION p_4 VALUES LESS THAN (MAXVALUE) TABLESPACE rt_t4);
         CREATE SHARDED TABLE rt_date (d date NOT NULL, v text) PARTITION BY RANGE (d) \
         (PARTITION p_1 VALUES LESS THAN ('2024-01-01') TABLESPACE rt_t1, \
          PARTITION p_2 VALUES LESS THAN ('2024-07-01') TABLESPACE rt_t2, \
          PARTITION p_3 VALUES LESS THAN (MAXVALUE) TABLESPACE rt_t3);
         CREATE SHARDED TABLE rt_list (id int NOT NULL, region text NOT NULL) \
         PARTITION BY LIST (region) \
         (PARTITION p_1 VALUES ('OR', 'WA') TABLESPACE rt_t1, \
          PARTITION p_2 VALUES ('AZ') TABLESPACE rt_t2, \
          PARTITION p_3 VALUES ('NY') TABLESPACE rt_t3);
         CREATE SHARDED TABLE rt_pair (id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO TABLESPACE SET rt_tsa;
         CREATE SHARDED TABLE rt_hash (id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         CREATE SHARDED TABLE rt_clist (id bigint NOT NULL, class text NOT NULL, \
           CONSTRAINT rt_clist_pk PRIMARY KEY (id, class)) \
         PARTITIONSET BY LIST (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO \
         (PARTITIONSET silver VALUES ('SLV') TABLESPACE SET rt_tsa, \
          PARTITIONSET gold VALUES ('GLD') TABLESPACE SET rt_tsb);",
    )
    .await;
    let rows: Vec<String> = (0..400).map(|k| format!("({k}, 'v{k}')")).collect();
    insert_rows(&client, "rt_range", "k, v", &rows).await;
    let rows: Vec<String> = [
        "2023-06-15",
        "2023-12-31",
        "2024-01-01",
        "2024-03-15",
        "2024-06-30",
        "2024-07-01",
        "2025-01-01",
    ]
    .iter()
    .map(|d| format!("('{d}', 'd')"))
    .collect();
    insert_rows(&client, "rt_date", "d, v", &rows).await;
    let rows: Vec<String> = (0..90)
        .map(|i| format!("({i}, '{}')", ["OR", "WA", "AZ", "NY"][i % 4]))
        .collect();
    insert_rows(&client, "rt_list", "id, region", &rows).await;
    let rows: Vec<String> = (1..=200).map(|i| format!("({i}, 'v{i}')")).collect();
    insert_rows(&client, "rt_pair", "id, v", &rows).await;
    insert_rows(&client, "rt_hash", "id, v", &rows).await;
    let rows: Vec<String> = (1..=200)
        .map(|i| format!("({i}, '{}')", if i % 2 == 0 { "SLV" } else { "GLD" }))
        .collect();
    insert_rows(&client, "rt_clist", "id, class", &rows).await;
    // rt_list and rt_pair live only where their partitions and chunks are.
    for i in 0..SHARDS {
        assert_eq!(has_table(i, "rt_list").await, i < 3, "rt_list on shard {i}");
        assert_eq!(has_table(i, "rt_pair").await, i < 2, "rt_pair on shard {i}");
    }
    log_all_statements().await;

    let set = |v: &[usize]| v.iter().copied().collect::<BTreeSet<usize>>();
    // Ranges: the overlapping partitions' shards only.
    let cases: &[(&str, usize, &[usize])] = &[
        ("SELECT k FROM rt_range WHERE k < 100 /* rr-1 */", 100, &[0]),
        (
            "SELECT k FROM rt_range WHERE k BETWEEN 150 AND 250 /* rr-2 */",
            101,
            &[1, 2],
        ),
        (
            "SELECT k FROM rt_range WHERE k >= 300 /* rr-3 */",
            100,
            &[3],
        ),
        (
            "SELECT k FROM rt_range WHERE k > 99 AND k <= 100 /* rr-4 */",
            1,
            &[1],
        ),
        (
            "SELECT k FROM rt_range WHERE 50 > k AND k >= -5 /* rr-5 */",
            50,
            &[0],
        ),
        (
            "SELECT k FROM rt_range WHERE k IN (5, 305) /* rr-6 */",
            2,
            &[0, 3],
        ),
        (
            "SELECT k FROM rt_range WHERE k = ANY('{105,205}') /* rr-7 */",
            2,
            &[1, 2],
        ),
        (
            "SELECT k FROM rt_range WHERE k < 100.5 /* rr-8 */",
            101,
            &[0, 1, 2, 3],
        ),
        (
            "SELECT d FROM rt_date WHERE d >= DATE '2024-07-01' /* rd-1 */",
            2,
            &[2],
        ),
        (
            "SELECT d FROM rt_date WHERE d < '2024-01-01' /* rd-2 */",
            2,
            &[0],
        ),
        (
            "SELECT d FROM rt_date WHERE d < '2024-01-01 10:00'::timestamp /* rd-3 */",
            3,
            &[0, 1, 2],
        ),
        (
            "SELECT id FROM rt_list WHERE region IN ('OR', 'NY') /* rl-1 */",
            45,
            &[0, 2],
        ),
        (
            "SELECT id FROM rt_list WHERE region = ANY('{AZ}') /* rl-2 */",
            22,
            &[1],
        ),
        (
            "SELECT id FROM rt_list WHERE region = 'TX' /* rl-3 */",
            0,
            &[0],
        ),
        // Unkeyed: every shard the table is on, not the others.
        ("SELECT id FROM rt_list /* rl-4 */", 90, &[0, 1, 2]),
        (
            "SELECT id FROM rt_pair WHERE v <> '' /* rp-1 */",
            200,
            &[0, 1],
        ),
        (
            "UPDATE rt_pair SET v = v WHERE v = 'v7' /* rp-2 */",
            1,
            &[0, 1],
        ),
        ("SELECT id FROM rt_clist /* rcl-1 */", 200, &[0, 1, 2, 3]),
        (
            "SELECT id FROM rt_clist WHERE class = 'GLD' /* rcl-2 */",
            100,
            &[2, 3],
        ),
        (
            "DELETE FROM rt_clist WHERE class = 'SLV' AND id > 1000 /* rcl-3 */",
            0,
            &[0, 1],
        ),
    ];
    for (sql, n, want) in cases {
        let msgs = client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let got = msgs
            .iter()
            .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
            .count();
        let tag = msgs.iter().find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n as usize),
            _ => None,
        });
        assert_eq!(
            if sql.starts_with("SELECT") {
                got
            } else {
                tag.unwrap_or(0)
            },
            *n,
            "{sql}"
        );
        let marker = &sql[sql.find("/* ").unwrap() + 3..sql.find(" */").unwrap()];
        assert_eq!(shards_that_ran(marker), set(want), "{sql}");
    }
    // With the hash key too: one chunk of the gold partition set.
    let r = simple_rows(
        &client,
        "SELECT id FROM rt_clist WHERE class = 'GLD' AND id = 5 /* rcl-4 */",
    )
    .await;
    assert_eq!(r, [[Some("5".to_string())]]);
    let ran = shards_that_ran("rcl-4");
    assert!(ran.len() == 1 && ran.is_subset(&set(&[2, 3])), "{ran:?}");

    // A prepared range with a binary parameter.
    let stmt = client
        .prepare("SELECT k FROM rt_range WHERE k < $1 /* rr-9 */")
        .await
        .expect("prepare");
    let r = client.query(&stmt, &[&50i64]).await.expect("range by $1");
    assert_eq!(r.len(), 50);
    assert_eq!(shards_that_ran("rr-9"), set(&[0]));

    // `= ANY($1)` with a binary int8 array: only its elements' shard. The ids are picked
    // from what one shard holds.
    let mut by_shard: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let ids: Vec<i64> = c
            .query("SELECT id FROM rt_hash ORDER BY id LIMIT 3", &[])
            .await
            .expect("ids")
            .iter()
            .map(|r| r.get(0))
            .collect();
        by_shard.insert(i, ids);
    }
    let stmt = client
        .prepare("SELECT id FROM rt_hash WHERE id = ANY($1) /* ra-1 */")
        .await
        .expect("prepare any");
    let elements = by_shard[&2].clone();
    let r = client.query(&stmt, &[&elements]).await.expect("= ANY($1)");
    let mut got: Vec<i64> = r.iter().map(|r| r.get(0)).collect();
    got.sort();
    assert_eq!(got, elements);
    assert_eq!(shards_that_ran("ra-1"), set(&[2]));
    // The elements of two shards, through the simple protocol.
    let (a, b) = (by_shard[&0][0], by_shard[&3][1]);
    let r = simple_rows(
        &client,
        &format!("SELECT id FROM rt_hash WHERE id = ANY('{{{a},{b}}}'::bigint[]) /* ra-2 */"),
    )
    .await;
    assert_eq!(r.len(), 2);
    assert_eq!(shards_that_ran("ra-2"), set(&[0, 3]));
    let r = simple_rows(
        &client,
        &format!("SELECT id FROM rt_hash WHERE id = ANY(ARRAY[{a}, {b}]) /* ra-3 */"),
    )
    .await;
    assert_eq!(r.len(), 2);
    assert_eq!(shards_that_ran("ra-3"), set(&[0, 3]));

    exec(
        &client,
        "DROP TABLE rt_range; DROP TABLE rt_date; DROP TABLE rt_list; DROP TABLE rt_pair; \
         DROP TABLE rt_hash; DROP TABLE rt_clist;",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constants_are_converted_as_postgres_converts_them() {
    let proxy = start();
    let client = proxy.connect().await;
    log_all_statements().await;
    // Per key type: the literals rows are inserted with, then other spellings of the same
    // values to find them by. A literal read wrongly would send its row to a shard whose
    // chunks refuse it, or look on a shard that lacks it.
    let cases: &[(&str, &str, &[&str], &[&str])] = &[
        (
            "bigint",
            "int8",
            &["'42'", "-5", "7", "'-17'"],
            &["42", "'-5'", "'7'::bigint", "-17"],
        ),
        (
            "numeric",
            "num",
            &["42", "4.3e1", "-5.50", "'7'"],
            &["42.0", "'43.000'", "-5.5", "7e0"],
        ),
        (
            "date",
            "dt",
            &[
                "'2024-01-01'",
                "DATE '2024-02-29'",
                "'2023-12-31'::date",
                "'2024-03-01'",
            ],
            &[
                "DATE '2024-01-01'",
                "'2024-02-29'",
                "'2023-12-31'",
                "'2024-03-01'",
            ],
        ),
        (
            "timestamp",
            "ts",
            &[
                "'2024-01-01 10:00'",
                "TIMESTAMP '2024-01-01 10:00:00.5'",
                "'2024-05-05T01:02:03'",
                "'2024-01-02'",
            ],
            &[
                "'2024-01-01 10:00:00'",
                "'2024-01-01 10:00:00.500'",
                "TIMESTAMP '2024-05-05 01:02:03'",
                "'2024-01-02 00:00'",
            ],
        ),
        ("boolean", "bool", &["true", "'f'"], &["'yes'", "false"]),
        (
            "text",
            "txt",
            &["'alpha'", "'it''s'", "'Ünïcode'", "''"],
            &["'alpha'", "'it''s'", "'Ünïcode'", "''"],
        ),
        (
            "varchar(10)",
            "vc",
            &["'alpha'", "'beta'", "'gamma'", "'x'"],
            &["'alpha'", "'beta'::varchar", "'gamma'", "'x'"],
        ),
        (
            "char(5)",
            "ch",
            &["'ab'", "'cd   '", "'efghi'", "'j'"],
            &["'ab   '", "'cd'", "'efghi'", "'j '"],
        ),
        (
            "uuid",
            "uu",
            &[
                "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
                "'{b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12}'",
                "'C0EEBC999C0B4EF8BB6D6BB9BD380A13'",
                "'d0eebc99-9c0b-4ef8-bb6d-6bb9bd380a14'",
            ],
            &[
                "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
                "'b0eebc999c0b4ef8bb6d6bb9bd380a12'",
                "'c0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13'",
                "'{d0eebc99-9c0b-4ef8-bb6d-6bb9bd380a14}'",
            ],
        ),
    ];
    for (ty, name, inserted, found_by) in cases {
        let table = format!("cv_{name}");
        exec(
            &client,
            &format!(
                "CREATE SHARDED TABLE {table} (k {ty} NOT NULL, n int) \
                 PARTITION BY CONSISTENT HASH (k) PARTITIONS AUTO"
            ),
        )
        .await;
        for (i, lit) in inserted.iter().enumerate() {
            exec(
                &client,
                &format!("INSERT INTO {table} (k, n) VALUES ({lit}, {i})"),
            )
            .await;
        }
        let spread = counts(&table, "").await;
        assert_eq!(
            spread.iter().sum::<i64>(),
            inserted.len() as i64,
            "{table}: {spread:?}"
        );
        for (i, lit) in found_by.iter().enumerate() {
            let marker = format!("cv-{name}-{i}");
            let sql = format!("SELECT n FROM {table} WHERE k = {lit} /* {marker} */");
            assert_eq!(
                simple_rows(&client, &sql).await,
                [[Some(i.to_string())]],
                "{sql}"
            );
            assert_eq!(shards_that_ran(&marker).len(), 1, "{sql}");
        }
        exec(&client, &format!("DROP TABLE {table}")).await;
    }

    // timestamptz: with an offset the instant is known; without, it is the session's
    // TimeZone's, which the proxy does not know: reads ask every shard, INSERTs are refused.
    exec(
        &client,
        "CREATE SHARDED TABLE cv_tstz (k timestamptz NOT NULL, n int) \
         PARTITION BY CONSISTENT HASH (k) PARTITIONS AUTO",
    )
    .await;
    exec(
        &client,
        "INSERT INTO cv_tstz (k, n) VALUES ('2024-01-01 10:00+02', 1), ('2024-01-01 08:00Z', 2)",
    )
    .await;
    let r = simple_rows(
        &client,
        "SELECT n FROM cv_tstz WHERE k = '2024-01-01 08:00:00+00' ORDER BY n /* cv-tz-1 */",
    )
    .await;
    assert_eq!(r, [[Some("1".to_string())], [Some("2".to_string())]]);
    assert_eq!(shards_that_ran("cv-tz-1").len(), 1);
    let err = client
        .simple_query("INSERT INTO cv_tstz (k, n) VALUES ('2024-01-01 10:00', 3)")
        .await
        .expect_err("no offset");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    let text = err
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    assert!(text.contains("add an offset"), "{text}");
    simple_rows(
        &client,
        "SELECT n FROM cv_tstz WHERE k = '2024-01-01 10:00' /* cv-tz-2 */",
    )
    .await;
    assert_eq!(shards_that_ran("cv-tz-2").len(), SHARDS);
    exec(&client, "DROP TABLE cv_tstz").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn numeric_range_keys_place_rows_and_prune() {
    let proxy = start();
    let client = proxy.connect().await;
    tablespaces(&client, "nr").await;
    // seeds/004's user-defined RANGE example, on tablespaces of this test.
    exec(
        &client,
        "CREATE SHARDED TABLE nr_accounts
         ( id NUMBER, state NUMBER NOT NULL, state2 NUMBER NOT NULL, status VARCHAR2(1) )
         PARTITION BY RANGE (state, state2)
         ( PARTITION p_northwest VALUES LESS THAN(10, 100) TABLESPACE nr_t1
         , PARTITION p_southwest VALUES LESS THAN(20,200) TABLESPACE nr_t2)",
    )
    .await;
    // (state, state2) pairs around the bounds; the expected shard from the bounds.
    let pairs: Vec<(f64, f64)> = (0..200)
        .map(|i| {
            (
                f64::from(i % 40) / 2.0 - 0.5,
                f64::from(i % 7) * 50.0 - 25.0,
            )
        })
        .filter(|&(s, s2)| (s, s2) < (20.0, 200.0))
        .collect();
    let shard = |(s, s2): (f64, f64)| usize::from((s, s2) >= (10.0, 100.0));
    let rows: Vec<String> = pairs
        .iter()
        .enumerate()
        .map(|(i, (s, s2))| format!("({i}, {s}, {s2}, 'a')"))
        .collect();
    insert_rows(&client, "nr_accounts", "id, state, state2, status", &rows).await;
    let mut want = [0i64; SHARDS];
    for p in &pairs {
        want[shard(*p)] += 1;
    }
    assert_eq!(counts("nr_accounts", "").await, want);
    for i in 2..SHARDS {
        assert!(!has_table(i, "nr_accounts").await, "shard {i}");
    }
    let err = client
        .simple_query("INSERT INTO nr_accounts (id, state, state2) VALUES (0, 20, 200)")
        .await
        .expect_err("above the last bound");
    assert_eq!(err.code(), Some(&SqlState::CHECK_VIOLATION), "{err}");

    log_all_statements().await;
    let cases: &[(&str, &[usize])] = &[
        (
            "SELECT id FROM nr_accounts WHERE state < 9.5 /* nr-1 */",
            &[0],
        ),
        (
            "SELECT id FROM nr_accounts WHERE state = 10.0 AND state2 >= 100 /* nr-2 */",
            &[1],
        ),
        (
            "SELECT id FROM nr_accounts WHERE state BETWEEN 10 AND 10 /* nr-3 */",
            &[0, 1],
        ),
        (
            "SELECT id FROM nr_accounts WHERE state >= 1.05e1 /* nr-4 */",
            &[1],
        ),
    ];
    for (sql, want) in cases {
        let got = simple_rows(&client, sql).await.len();
        let direct = {
            let filter = &sql[sql.find("WHERE").unwrap()..sql.find(" /*").unwrap()];
            counts("nr_accounts", filter).await.iter().sum::<i64>() as usize
        };
        assert_eq!(got, direct, "{sql}");
        let marker = &sql[sql.find("/* ").unwrap() + 3..sql.find(" */").unwrap()];
        let want: BTreeSet<usize> = want.iter().copied().collect();
        assert_eq!(shards_that_ran(marker), want, "{sql}");
    }
    exec(&client, "DROP TABLE nr_accounts").await;
}
