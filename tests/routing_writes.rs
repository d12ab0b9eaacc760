//! Writes the proxy rewrites: generated sharding keys from the cluster-wide sequence, and
//! INSERT … SELECT pushed down or run in two steps.
mod common;
mod routing_common;

use std::collections::BTreeSet;
use std::time::Duration;

use common::shards;
use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

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
    // Read from every shard a slice at a time while the rows go into the same shards.
    let msgs = client
        .simple_query(
            "INSERT INTO is_cust (cust_id, name) SELECT cust_id + 5000000, 'moved' FROM is_cust \
             WHERE score = 4 AND cust_id <= 100000",
        )
        .await
        .expect("two-step insert … select over every shard");
    assert_eq!(tag(&msgs), 10_000);
    let moved = counts_where("is_cust", "WHERE name = 'moved'").await;
    assert_eq!(moved.iter().sum::<i64>(), 10_000, "{moved:?}");
    assert!(moved.iter().all(|&n| n > 0), "{moved:?}");
    // A failure in a late slice (the duplicate comes after 25,000 rows went in) leaves no row of
    // the statement on any shard.
    let err = client
        .simple_query(
            "INSERT INTO is_cust (cust_id, name) SELECT g, 'late' FROM \
             (SELECT g FROM generate_series(3000001, 3025000) g UNION ALL SELECT 1) s",
        )
        .await
        .expect_err("a duplicate in the last slice");
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION));
    let late = counts_where("is_cust", "WHERE name = 'late'").await;
    assert_eq!(late, vec![0; SHARDS]);
    // Inside a transaction block the rows are the block's: gone with ROLLBACK, kept by COMMIT.
    for end in ["ROLLBACK", "COMMIT"] {
        client.batch_execute("BEGIN").await.expect("begin");
        let msgs = client
            .simple_query(
                "INSERT INTO is_cust (cust_id, name) SELECT g, 'blk' FROM \
                 generate_series(4000001, 4025000) g",
            )
            .await
            .expect("insert … select in a block");
        assert_eq!(tag(&msgs), 25_000);
        client.batch_execute(end).await.expect(end);
        let n: i64 = counts_where("is_cust", "WHERE name = 'blk'")
            .await
            .iter()
            .sum();
        assert_eq!(n, if end == "COMMIT" { 25_000 } else { 0 }, "{end}");
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

/// MERGE into a sharded table from a source every shard has (a subquery over no table), with
/// only WHEN MATCHED clauses, runs on every shard: each changes its own rows. With an INSERT
/// clause, every shard would insert the unmatched rows: refused, nothing changed.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_into_a_sharded_table_runs_where_each_shard_sees_its_rows() {
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mrg (id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    let rows: Vec<String> = (1..=20).map(|i| format!("({i}, 'old')")).collect();
    insert_rows(&client, "mrg", "id, v", &rows).await;
    let err = client
        .simple_query(
            "MERGE INTO mrg t USING (SELECT g AS k FROM generate_series(1, 30) g) s \
             ON t.id = s.k WHEN MATCHED THEN UPDATE SET v = 'merged' \
             WHEN NOT MATCHED THEN INSERT (id, v) VALUES (s.k, 'new')",
        )
        .await
        .expect_err("MERGE inserting from a subquery over several shards");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    let changed: i64 = counts_where("mrg", "WHERE v <> 'old'").await.iter().sum();
    assert_eq!(changed, 0);
    let merged = client
        .simple_query(
            "MERGE INTO mrg t USING (SELECT g AS k FROM generate_series(1, 20) g) s \
             ON t.id = s.k WHEN MATCHED THEN UPDATE SET v = 'merged'",
        )
        .await
        .expect("MERGE with matched clauses only");
    assert_eq!(tag(&merged), 20);
    let merged: i64 = counts_where("mrg", "WHERE v = 'merged'").await.iter().sum();
    assert_eq!(merged, 20);
}

/// A data-modifying WITH is routed by its outer statement: on a sharded table it would change
/// one shard's rows only and count those, so it is refused; nothing changes anywhere.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_write_inside_another_statement_is_refused_on_recorded_tables() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "nested_w").await;
    let rows: Vec<String> = (1..=40).map(|i| format!("({i}, 'm', {i})")).collect();
    c.simple_query(&format!("INSERT INTO nested_w VALUES {}", rows.join(", ")))
        .await
        .expect("insert");
    for sql in [
        "WITH d AS (DELETE FROM nested_w WHERE name = 'm' RETURNING *) SELECT count(*) FROM d",
        "WITH u AS (UPDATE nested_w SET score = 0 RETURNING *) SELECT count(*) FROM u",
        "WITH i AS (INSERT INTO nested_w VALUES (100, 'n', 1) RETURNING *) SELECT * FROM i",
        "WITH d AS (DELETE FROM nested_w WHERE cust_id = 5 RETURNING *) \
         INSERT INTO nested_w SELECT cust_id + 1000, name, score FROM d",
    ] {
        let e = c.simple_query(sql).await.expect_err(sql);
        assert_eq!(
            e.code(),
            Some(&SqlState::FEATURE_NOT_SUPPORTED),
            "{sql}: {e}"
        );
        let e = c.execute(sql, &[]).await.expect_err(sql);
        assert_eq!(
            e.code(),
            Some(&SqlState::FEATURE_NOT_SUPPORTED),
            "{sql}: {e}"
        );
    }
    assert_eq!(counts("nested_w").await.iter().sum::<i64>(), 40);
    assert_eq!(
        counts_where("nested_w", "WHERE score = 0 OR name <> 'm'")
            .await
            .iter()
            .sum::<i64>(),
        0
    );
    c.batch_execute("DROP TABLE nested_w").await.unwrap();
}
