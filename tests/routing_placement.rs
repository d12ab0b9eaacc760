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
mod routing_common;

use std::collections::BTreeSet;

use routing_common::*;
use tokio_postgres::error::SqlState;

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
        let per_shard = counts_where(table, "").await;
        assert_eq!(per_shard.iter().sum::<i64>(), n, "{table}: {per_shard:?}");
        assert!(
            per_shard.iter().all(|&c| c > n / 8),
            "{table} spread: {per_shard:?}"
        );
        total += n;
    }
    // The family's tables share chunks: per shard, two orders and three lines per customer.
    let customers = counts_where("plc_customers", "").await;
    let orders = counts_where("plc_orders", "").await;
    let lines = counts_where("plc_lineitems", "").await;
    for i in 0..SHARDS {
        assert_eq!(orders[i], 2 * customers[i], "shard {i}");
        assert_eq!(lines[i], 3 * customers[i], "shard {i}");
    }
    // LIST and RANGE: exactly the rows their bounds send to each shard.
    let mut want = [0i64; SHARDS];
    for i in ids.clone() {
        want[region_shard(region(i))] += 1;
    }
    assert_eq!(counts_where("plc_list", "").await, want);
    let mut want = [0i64; SHARDS];
    for i in ids.clone() {
        want[range_shard(k_of(i))] += 1;
    }
    assert_eq!(counts_where("plc_range", "").await, want);
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
        let first = counts_where(table, filter).await;
        let all = counts_where(table, "").await;
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
    assert_eq!(counts_where("nr_accounts", "").await, want);
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
            counts_where("nr_accounts", filter)
                .await
                .iter()
                .sum::<i64>() as usize
        };
        assert_eq!(got, direct, "{sql}");
        let marker = &sql[sql.find("/* ").unwrap() + 3..sql.find(" */").unwrap()];
        let want: BTreeSet<usize> = want.iter().copied().collect();
        assert_eq!(shards_that_ran(marker), want, "{sql}");
    }
    exec(&client, "DROP TABLE nr_accounts").await;
}
