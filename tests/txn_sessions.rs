//! A client's transaction block over several shards commits on all of them or on none: two
//! writers commit by two-phase commit over the session's own connections, a failure while
//! preparing rolls every shard back, and participants that only read commit plainly. Checked on
//! the shards themselves: their rows, their statement logs, their prepared transactions.
//!
//! One test: the statement-log checks must not see another test's PREPAREs.

mod common;
mod routing_common;

use std::io::{Read, Write};

use common::shards;
use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// The shard holding the row of `table` with key `id`.
async fn shard_of(table: &str, id: i64) -> usize {
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let n: i64 = c
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE cust_id = $1"),
                &[&id],
            )
            .await
            .expect("count")
            .get(0);
        if n > 0 {
            return i;
        }
    }
    panic!("no shard holds {table} {id}");
}

/// Two keys whose rows live on different shards, found by placing rows 1..=40 of `table`.
async fn keys_on_two_shards(client: &Client, table: &str) -> (i64, i64) {
    let rows: Vec<String> = (1..=40).map(|i| format!("({i}, 0, 'seed')")).collect();
    insert_rows(client, table, "cust_id, n, tag", &rows).await;
    let first = shard_of(table, 1).await;
    for id in 2..=40 {
        if shard_of(table, id).await != first {
            return (1, id);
        }
    }
    panic!("every key on one shard");
}

async fn prepared_anywhere() -> Vec<String> {
    let mut gids = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        for row in c
            .query("SELECT gid FROM pg_prepared_xacts", &[])
            .await
            .expect("prepared xacts")
        {
            gids.push(row.get(0));
        }
    }
    gids
}

async fn tags_on_shard(i: usize, table: &str, id: i64) -> Vec<String> {
    let c = shards().connect(i).await;
    c.query(
        &format!("SELECT tag FROM {table} WHERE cust_id = $1 AND n > 0 ORDER BY n"),
        &[&id],
    )
    .await
    .expect("rows")
    .iter()
    .map(|r| r.get(0))
    .collect()
}

fn count_in_log(i: usize, needle: &str) -> usize {
    std::fs::read_to_string(shards().clusters[i].log_file())
        .unwrap_or_default()
        .matches(needle)
        .count()
}

/// `shardwire_distributed_commits_total{outcome}` as the proxy's metrics listener reports it.
fn distributed_commits(metrics: std::net::SocketAddr, outcome: &str) -> f64 {
    let mut stream = std::net::TcpStream::connect(metrics).expect("metrics listener");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .expect("scrape");
    let mut body = String::new();
    stream.read_to_string(&mut body).expect("scrape");
    let series = format!("shardwire_distributed_commits_total{{outcome=\"{outcome}\"}} ");
    body.lines()
        .find_map(|l| l.strip_prefix(&series)?.trim().parse().ok())
        .unwrap_or(0.0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_over_several_shards_commits_everywhere_or_nowhere() {
    // The recorder is process-wide: this binary's one test installs it.
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .and_then(|l| l.local_addr())
        .expect("a free port");
    shardwire::metrics::install(metrics).expect("metrics");
    let commits = |outcome: &'static str| distributed_commits(metrics, outcome);
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE dtx (cust_id bigint, n int, tag text, PRIMARY KEY (cust_id, n)) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
    )
    .await;
    // A constraint checked at commit: it fails a shard's PREPARE, after every statement ran.
    for i in 0..SHARDS {
        shards()
            .connect(i)
            .await
            .batch_execute(
                "ALTER TABLE dtx ADD CONSTRAINT dtx_tag UNIQUE (cust_id, tag) \
                 DEFERRABLE INITIALLY DEFERRED",
            )
            .await
            .expect("deferred constraint");
    }
    let (a, b) = keys_on_two_shards(&client, "dtx").await;
    let (shard_a, shard_b) = (shard_of("dtx", a).await, shard_of("dtx", b).await);
    log_all_statements().await;
    let prepares = |i| count_in_log(i, "PREPARE TRANSACTION");
    let before = (prepares(shard_a), prepares(shard_b));

    // Two writers: both shards prepare, then commit.
    client.batch_execute("BEGIN").await.expect("begin");
    for (id, tag) in [(a, "a1"), (b, "b1")] {
        client
            .execute(
                "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 1, $2)",
                &[&id, &tag],
            )
            .await
            .expect("insert");
    }
    let committed = commits("committed");
    let msgs = client.simple_query("COMMIT").await.expect("commit");
    assert_eq!(commits("committed"), committed + 1.0);
    assert!(matches!(
        msgs.last(),
        Some(tokio_postgres::SimpleQueryMessage::CommandComplete(0))
    ));
    assert_eq!(tags_on_shard(shard_a, "dtx", a).await, ["a1"]);
    assert_eq!(tags_on_shard(shard_b, "dtx", b).await, ["b1"]);
    assert_eq!(
        (prepares(shard_a), prepares(shard_b)),
        (before.0 + 1, before.1 + 1)
    );
    assert!(prepared_anywhere().await.is_empty());

    // A deferred violation on one shard fails its PREPARE: the other shard's row goes too.
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .execute(
            "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 2, 'a2')",
            &[&a],
        )
        .await
        .expect("insert a");
    client
        .execute(
            "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 2, 'dup'), ($1, 3, 'dup')",
            &[&b],
        )
        .await
        .expect("insert b (checked at commit)");
    let rolled_back = commits("rolled_back");
    let err = client
        .batch_execute("COMMIT")
        .await
        .expect_err("the deferred constraint fails the commit");
    assert_eq!(commits("rolled_back"), rolled_back + 1.0);
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION), "{err:?}");
    assert_eq!(tags_on_shard(shard_a, "dtx", a).await, ["a1"]);
    assert_eq!(tags_on_shard(shard_b, "dtx", b).await, ["b1"]);
    assert!(prepared_anywhere().await.is_empty());
    // The session is out of the block and goes on.
    let r = simple_rows(&client, "SELECT tag FROM dtx WHERE cust_id = 1 AND n = 1").await;
    assert_eq!(r.len(), usize::from(a == 1));

    // A participant that only read commits without PREPARE; COMMIT through the extended
    // protocol.
    let before = (prepares(shard_a), prepares(shard_b));
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .query("SELECT tag FROM dtx WHERE cust_id = $1", &[&a])
        .await
        .expect("read a");
    client
        .execute(
            "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 4, 'b4')",
            &[&b],
        )
        .await
        .expect("insert b");
    client
        .execute("COMMIT", &[])
        .await
        .expect("extended commit");
    assert_eq!(tags_on_shard(shard_b, "dtx", b).await, ["b1", "b4"]);
    assert_eq!((prepares(shard_a), prepares(shard_b)), before);

    // Two writers, COMMIT through the extended protocol.
    client.batch_execute("BEGIN").await.expect("begin");
    for (id, tag) in [(a, "a5"), (b, "b5")] {
        client
            .execute(
                "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 5, $2)",
                &[&id, &tag],
            )
            .await
            .expect("insert");
    }
    client
        .execute("COMMIT", &[])
        .await
        .expect("extended commit");
    assert_eq!(tags_on_shard(shard_a, "dtx", a).await, ["a1", "a5"]);
    assert_eq!(tags_on_shard(shard_b, "dtx", b).await, ["b1", "b4", "b5"]);
    assert_eq!(
        (prepares(shard_a), prepares(shard_b)),
        (before.0 + 1, before.1 + 1)
    );

    // ROLLBACK undoes every shard's part, as before.
    client.batch_execute("BEGIN").await.expect("begin");
    for (id, tag) in [(a, "a6"), (b, "b6")] {
        client
            .execute(
                "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 6, $2)",
                &[&id, &tag],
            )
            .await
            .expect("insert");
    }
    client.batch_execute("ROLLBACK").await.expect("rollback");
    assert_eq!(tags_on_shard(shard_a, "dtx", a).await, ["a1", "a5"]);
    assert!(prepared_anywhere().await.is_empty());
    // Savepoints mean the same on every shard of the block: one that joined before the
    // savepoint keeps its earlier work, one that joined after it loses all of its own.
    client.batch_execute("BEGIN").await.expect("begin");
    let insert = |id: i64, n: i32, tag: &'static str| {
        let client = &client;
        async move {
            client
                .execute(
                    "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, $2, $3)",
                    &[&id, &n, &tag],
                )
                .await
                .unwrap_or_else(|e| panic!("insert {tag}: {e}"));
        }
    };
    insert(a, 10, "a10").await;
    client
        .batch_execute("SAVEPOINT s1")
        .await
        .expect("savepoint");
    insert(b, 10, "b10").await;
    insert(a, 11, "a11").await;
    client
        .batch_execute("ROLLBACK TO SAVEPOINT s1")
        .await
        .expect("rollback to");
    insert(a, 12, "a12").await;
    client
        .batch_execute("SAVEPOINT \"S 2\"")
        .await
        .expect("savepoint");
    insert(b, 13, "b13").await;
    client
        .batch_execute("RELEASE SAVEPOINT \"S 2\"")
        .await
        .expect("release");
    // The extended protocol too (JDBC's setSavepoint / rollback(savepoint)).
    client
        .execute("SAVEPOINT s3", &[])
        .await
        .expect("savepoint");
    insert(a, 14, "a14").await;
    insert(b, 14, "b14").await;
    client
        .execute("ROLLBACK TO s3", &[])
        .await
        .expect("rollback to");
    client.batch_execute("COMMIT").await.expect("commit");
    let on_a = tags_on_shard(shard_a, "dtx", a).await;
    assert_eq!(on_a, ["a1", "a5", "a10", "a12"]);
    assert_eq!(
        tags_on_shard(shard_b, "dtx", b).await,
        ["b1", "b4", "b5", "b13"]
    );
    client
        .batch_execute("DELETE FROM dtx WHERE n >= 10")
        .await
        .expect("tidy");

    // A statement outside a block that writes on several shards is one transaction too.
    let before = (prepares(shard_a), prepares(shard_b));
    let msgs = client
        .simple_query(&format!(
            "INSERT INTO dtx (cust_id, n, tag) VALUES ({a}, 7, 'a7'), ({b}, 7, 'b7')"
        ))
        .await
        .expect("multi-shard insert");
    assert_eq!(tag(&msgs), 2);
    assert_eq!(
        (prepares(shard_a), prepares(shard_b)),
        (before.0 + 1, before.1 + 1)
    );
    let err = client
        .simple_query(&format!(
            "INSERT INTO dtx (cust_id, n, tag) VALUES ({a}, 8, 'a8'), ({b}, 8, 'dup8'), \
             ({b}, 9, 'dup8')"
        ))
        .await
        .expect_err("the deferred constraint fails the statement's commit");
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION), "{err:?}");
    assert_eq!(tags_on_shard(shard_a, "dtx", a).await, ["a1", "a5", "a7"]);
    let err = client
        .simple_query(&format!(
            "UPDATE dtx SET tag = tag || 'x' WHERE n = 7 OR (cust_id = {b} AND 1 / (n - 1) = 0)"
        ))
        .await
        .expect_err("one shard fails the unkeyed update");
    assert_eq!(err.code(), Some(&SqlState::DIVISION_BY_ZERO), "{err:?}");
    assert_eq!(tags_on_shard(shard_a, "dtx", a).await, ["a1", "a5", "a7"]);
    let msgs = client
        .simple_query("UPDATE dtx SET tag = tag || 'x' WHERE n = 7")
        .await
        .expect("unkeyed update");
    assert_eq!(tag(&msgs), 2);
    assert_eq!(tags_on_shard(shard_a, "dtx", a).await, ["a1", "a5", "a7x"]);
    assert!(prepared_anywhere().await.is_empty());

    // Through the extended protocol (a prepared INSERT split at its Bind): committed together
    // at the Sync, or not at all.
    let before = (prepares(shard_a), prepares(shard_b));
    let n = client
        .execute(
            "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 20, 'a20'), ($2, 20, 'b20')",
            &[&a, &b],
        )
        .await
        .expect("prepared multi-shard insert");
    assert_eq!(n, 2);
    assert_eq!(
        (prepares(shard_a), prepares(shard_b)),
        (before.0 + 1, before.1 + 1)
    );
    let err = client
        .execute(
            "INSERT INTO dtx (cust_id, n, tag) VALUES ($1, 21, 'a21'), ($2, 21, 'dup21'), \
             ($2, 22, 'dup21')",
            &[&a, &b],
        )
        .await
        .expect_err("the deferred constraint fails the batch's commit");
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION), "{err:?}");
    assert_eq!(
        tags_on_shard(shard_a, "dtx", a).await,
        ["a1", "a5", "a7x", "a20"]
    );
    assert!(prepared_anywhere().await.is_empty());

    // No decision record is left behind (the catalog lives on shard 0 in the tests); the
    // proxy deletes it after answering the COMMIT, so give it a moment.
    let catalog = shards().connect(0).await;
    let mut left: i64 = -1;
    for _ in 0..50 {
        left = catalog
            .query_one("SELECT count(*) FROM shardwire_catalog.txn_decision", &[])
            .await
            .expect("decision log")
            .get(0);
        if left == 0 {
            break;
        }
        tokio::time::sleep(std::time::Duration::from_millis(100)).await;
    }
    assert_eq!(left, 0);
    client.batch_execute("DROP TABLE dtx").await.expect("drop");
}
