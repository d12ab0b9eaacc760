//! Transaction blocks over several shards, checked on the shards: a block that did something
//! PostgreSQL cannot PREPARE (LISTEN, a temporary table, a WITH HOLD cursor) commits on one shard
//! as ever, but refuses to commit writes on several shards with a clear error before anything is
//! prepared; a pinned session's blocks stay atomic on the connections it keeps between them.

mod common;
mod routing_common;

use routing_common::*;
use tokio_postgres::error::SqlState;

/// `table` with keys 1..=40; a key whose row is on another shard than key 1's.
async fn seeded(client: &tokio_postgres::Client, table: &str) -> i64 {
    exec(
        client,
        &format!(
            "CREATE SHARDED TABLE {table} (cust_id bigint PRIMARY KEY, v text) \
             PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO"
        ),
    )
    .await;
    let rows: Vec<String> = (1..=40).map(|i| format!("({i}, 'seed')")).collect();
    insert_rows(client, table, "cust_id, v", &rows).await;
    let shard_of = |counts: Vec<i64>| counts.iter().position(|&n| n > 0).unwrap();
    let home = shard_of(counts_where(table, "WHERE cust_id = 1").await);
    for k in 2..=40 {
        if shard_of(counts_where(table, &format!("WHERE cust_id = {k}")).await) != home {
            return k;
        }
    }
    panic!("every key on one shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_pinned_sessions_blocks_stay_atomic_on_the_connections_it_keeps() {
    let proxy = start();
    let client = proxy.connect().await;
    let other = seeded(&client, "pinblk").await;
    // SET pins the session: its connections stay with it between blocks.
    client
        .simple_query("SET application_name = 'pinned'")
        .await
        .expect("set");
    for (end, expected) in [("COMMIT", "first"), ("ROLLBACK", "first")] {
        let value = if end == "COMMIT" { "first" } else { "second" };
        client.simple_query("BEGIN").await.expect("begin");
        for key in [1, other] {
            client
                .simple_query(&format!(
                    "UPDATE pinblk SET v = '{value}' WHERE cust_id = {key}"
                ))
                .await
                .expect("update");
        }
        client.simple_query(end).await.expect(end);
        let rows: i64 = counts_where("pinblk", &format!("WHERE v = '{expected}'"))
            .await
            .iter()
            .sum();
        assert_eq!(rows, 2, "after {end}: both rows as the block left them");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_that_cannot_be_prepared_commits_on_one_shard_only() {
    let proxy = start();
    let client = proxy.connect().await;
    let other = seeded(&client, "unprep").await;

    for state in [
        "LISTEN unprep_channel",
        "CREATE TEMP TABLE unprep_scratch (x int)",
        "DECLARE unprep_cursor CURSOR WITH HOLD FOR SELECT 1",
    ] {
        client.simple_query("BEGIN").await.expect("begin");
        client
            .simple_query("UPDATE unprep SET v = 'changed' WHERE cust_id = 1")
            .await
            .expect("first shard");
        client.simple_query(state).await.expect(state);
        client
            .simple_query(&format!(
                "UPDATE unprep SET v = 'changed' WHERE cust_id = {other}"
            ))
            .await
            .expect("second shard");
        let err = client.simple_query("COMMIT").await.expect_err(state);
        assert_eq!(
            err.code(),
            Some(&SqlState::FEATURE_NOT_SUPPORTED),
            "{state}: {err:?}"
        );
        let message = err
            .as_db_error()
            .map(|d| d.message().to_string())
            .unwrap_or_default();
        assert!(
            message.contains("two-phase commit cannot carry"),
            "{message}"
        );
        let changed: i64 = counts_where("unprep", "WHERE v = 'changed'")
            .await
            .iter()
            .sum();
        assert_eq!(changed, 0, "{state}: rolled back on every shard");
        assert_eq!(
            prepared_holding("unprep").await,
            0,
            "{state}: nothing was prepared"
        );
        client
            .simple_query("SELECT 1")
            .await
            .expect("the session goes on");
    }

    // On one shard the same block commits plainly.
    client.simple_query("BEGIN").await.expect("begin");
    client
        .simple_query("LISTEN unprep_channel")
        .await
        .expect("listen");
    client
        .simple_query("UPDATE unprep SET v = 'one shard' WHERE cust_id = 1")
        .await
        .expect("write");
    client
        .simple_query("COMMIT")
        .await
        .expect("commits on one shard");
    let committed: i64 = counts_where("unprep", "WHERE v = 'one shard'")
        .await
        .iter()
        .sum();
    assert_eq!(committed, 1);
}
