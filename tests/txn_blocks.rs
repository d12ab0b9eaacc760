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

/// A statement the proxy refuses itself inside a block fails the block as a shard's error
/// would: what the block wrote before is rolled back by COMMIT, on every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_by_the_proxy_fails_the_block_like_any_error() {
    let proxy = start();
    let client = proxy.connect().await;
    let other = seeded(&client, "refblk").await;
    let refusals = [
        // A data-modifying WITH on a sharded table.
        "WITH d AS (DELETE FROM refblk WHERE cust_id = 5 RETURNING *) SELECT count(*) FROM d",
        // COPY of a multi-shard query to a server file.
        "COPY (SELECT cust_id FROM refblk) TO '/tmp/shardwire_refused'",
        "UPDATE refblk SET cust_id = DEFAULT WHERE cust_id = 3",
    ];
    for (i, refused) in refusals.iter().enumerate() {
        for shards in [vec![1], vec![1, other]] {
            client.simple_query("BEGIN").await.expect("begin");
            for key in &shards {
                client
                    .simple_query(&format!(
                        "UPDATE refblk SET v = 'r{i}' WHERE cust_id = {key}"
                    ))
                    .await
                    .expect("update");
            }
            let err = client.simple_query(refused).await.expect_err(refused);
            assert!(err.code().is_some(), "{refused}: {err}");
            // Nothing more runs, on whichever shard it would.
            for key in &shards {
                let after = client
                    .simple_query(&format!("SELECT v FROM refblk WHERE cust_id = {key}"))
                    .await
                    .expect_err("the block has failed");
                assert_eq!(
                    after.code(),
                    Some(&SqlState::IN_FAILED_SQL_TRANSACTION),
                    "{refused}: {after}"
                );
            }
            let tags = client.simple_query("COMMIT").await.expect("commit");
            let tag = tags.iter().find_map(|m| match m {
                tokio_postgres::SimpleQueryMessage::CommandComplete(_) => Some(()),
                _ => None,
            });
            assert!(tag.is_some());
            let written: i64 = counts_where("refblk", &format!("WHERE v = 'r{i}'"))
                .await
                .iter()
                .sum();
            assert_eq!(
                written, 0,
                "{refused} on {shards:?}: the block's writes were committed"
            );
        }
    }
}

/// An error on one shard of a block fails the whole block: a statement for another shard of it
/// is refused as PostgreSQL refuses it, until ROLLBACK TO a savepoint brings it back.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_error_on_one_shard_fails_the_block_on_every_shard() {
    let proxy = start();
    let client = proxy.connect().await;
    let other = seeded(&client, "errblk").await;
    client
        .simple_query("BEGIN; SAVEPOINT before")
        .await
        .expect("begin");
    for key in [1, other] {
        client
            .simple_query(&format!(
                "UPDATE errblk SET v = 'lost' WHERE cust_id = {key}"
            ))
            .await
            .expect("update");
    }
    let err = client
        .simple_query("SELECT 1 / 0 FROM errblk WHERE cust_id = 1")
        .await
        .expect_err("division by zero");
    assert_eq!(err.code(), Some(&SqlState::DIVISION_BY_ZERO));
    let after = client
        .simple_query(&format!("SELECT v FROM errblk WHERE cust_id = {other}"))
        .await
        .expect_err("the block has failed");
    assert_eq!(after.code(), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    client
        .simple_query("ROLLBACK TO SAVEPOINT before")
        .await
        .expect("rollback to");
    client
        .simple_query(&format!(
            "UPDATE errblk SET v = 'kept' WHERE cust_id = {other}"
        ))
        .await
        .expect("the block goes on after ROLLBACK TO");
    client.simple_query("COMMIT").await.expect("commit");
    let kept: i64 = counts_where("errblk", "WHERE v = 'kept'")
        .await
        .iter()
        .sum();
    let lost: i64 = counts_where("errblk", "WHERE v = 'lost'")
        .await
        .iter()
        .sum();
    assert_eq!((kept, lost), (1, 0));
}

/// A reply that does not come within 10 s is a hang, not a slow answer.
async fn within<T>(reply: impl std::future::Future<Output = T>) -> T {
    tokio::time::timeout(std::time::Duration::from_secs(10), reply)
        .await
        .expect("no answer within 10 s")
}

/// The same through the extended protocol, as JDBC sends a block: BEGIN in the batch of the
/// block's first statement, each statement Parse/Bind/Execute and a Sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_refusal_in_an_extended_batch_fails_the_block_at_its_sync() {
    use common::raw::{RawClient, Reply};
    let proxy = start();
    let client = proxy.connect().await;
    seeded(&client, "refext").await;
    exec(
        &client,
        "CREATE DUPLICATED TABLE refdup (id bigint PRIMARY KEY)",
    )
    .await;
    let refusals = [
        // Refused by the router.
        "INSERT INTO refdup SELECT cust_id FROM refext",
        // Refused by the planner of sharding-key updates.
        "UPDATE refext SET cust_id = DEFAULT WHERE cust_id = 3",
        // Refused by row movement: the new key lives on another shard.
        "UPDATE refext SET cust_id = cust_id + 100 WHERE cust_id < 20",
        // Not a refusal but a shard's own error, on a shard the block may not have reached:
        // its answer can come while the proxy handles the batch's Sync.
        "UPDATE refext SET v = (1 / 0)::text WHERE cust_id = 3",
    ];
    for (refused, refused_with_begin) in refusals.iter().flat_map(|r| [(*r, false), (*r, true)]) {
        let mut raw = RawClient::connect(proxy.addr, common::APP, common::APP, common::APP)
            .await
            .expect("login");
        let run = |raw: &mut RawClient, sql: &str| {
            raw.parse("", sql).bind("", "", &[]).execute("");
        };
        run(&mut raw, "BEGIN");
        if refused_with_begin {
            run(&mut raw, refused);
        } else {
            run(&mut raw, "UPDATE refext SET v = 'ext' WHERE cust_id = 1");
            let replies = within(raw.sync().round_trip()).await;
            assert_eq!(replies.last(), Some(&Reply::Ready(b'T')), "{replies:?}");
            run(&mut raw, refused);
        }
        let replies = within(raw.sync().round_trip()).await;
        assert!(
            replies.iter().any(|r| matches!(r, Reply::Error(_))),
            "{replies:?}"
        );
        assert_eq!(replies.last(), Some(&Reply::Ready(b'E')), "{replies:?}");
        let replies = within(
            raw.query("SELECT v FROM refext WHERE cust_id = 2")
                .round_trip(),
        )
        .await;
        assert!(
            replies.contains(&Reply::Error(SqlState::IN_FAILED_SQL_TRANSACTION)),
            "{replies:?}"
        );
        let replies = within(raw.query("COMMIT").round_trip()).await;
        assert!(
            replies.contains(&Reply::Complete("ROLLBACK".into())),
            "{replies:?}"
        );
        assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
        let written: i64 = counts_where("refext", "WHERE v = 'ext'").await.iter().sum();
        assert_eq!(written, 0, "the failed block's write was committed");
        raw.terminate().await;
    }
}

/// JDBC opens a block by sending BEGIN in the batch of the block's first statement. When that
/// statement runs on another shard than the one BEGIN reached, it is part of the block all the
/// same: ROLLBACK undoes it, and the batch's Sync reports the open block.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_block_begun_in_the_batch_of_its_first_statement_holds_it_on_any_shard() {
    use common::raw::{RawClient, Reply};
    let proxy = start();
    let client = proxy.connect().await;
    seeded(&client, "begext").await;
    // A key on each shard: whichever shard BEGIN reaches, the others' keys are elsewhere.
    let mut keys = Vec::new();
    for shard in 0..SHARDS {
        for k in 1..=40 {
            if counts_where("begext", &format!("WHERE cust_id = {k}")).await[shard] > 0 {
                keys.push(k);
                break;
            }
        }
    }
    assert_eq!(keys.len(), SHARDS, "a key on every shard");
    for key in keys {
        let mut raw = RawClient::connect(proxy.addr, common::APP, common::APP, common::APP)
            .await
            .expect("login");
        raw.parse("", "BEGIN").bind("", "", &[]).execute("");
        raw.parse(
            "",
            &format!("UPDATE begext SET v = 'undone' WHERE cust_id = {key}"),
        )
        .bind("", "", &[])
        .execute("");
        let replies = within(raw.sync().round_trip()).await;
        assert!(
            replies.contains(&Reply::Complete("UPDATE 1".into())),
            "{replies:?}"
        );
        assert_eq!(
            replies.last(),
            Some(&Reply::Ready(b'T')),
            "key {key}: {replies:?}"
        );
        let replies = within(raw.query("ROLLBACK").round_trip()).await;
        assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
        raw.terminate().await;
        let undone: i64 = counts_where("begext", "WHERE v = 'undone'")
            .await
            .iter()
            .sum();
        assert_eq!(undone, 0, "key {key}: the rolled-back block's write stayed");
    }
}

/// The same guard through the extended protocol: once the block failed on one shard, a Parse
/// or Bind for another shard of it is refused with `25P02`, as PostgreSQL refuses them in a
/// failed block; ROLLBACK through Parse/Bind/Execute still goes through.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_statement_for_a_healthy_shard_of_a_failed_block_is_refused() {
    use common::raw::{RawClient, Reply};
    let proxy = start();
    let client = proxy.connect().await;
    let other = seeded(&client, "errext").await;
    let mut raw = RawClient::connect(proxy.addr, common::APP, common::APP, common::APP)
        .await
        .expect("login");
    let replies = within(raw.query("BEGIN").round_trip()).await;
    assert_eq!(replies.last(), Some(&Reply::Ready(b'T')), "{replies:?}");
    for key in [1, other] {
        let sql = format!("UPDATE errext SET v = 'lost' WHERE cust_id = {key}");
        let replies = within(raw.query(&sql).round_trip()).await;
        assert_eq!(replies.last(), Some(&Reply::Ready(b'T')), "{replies:?}");
    }
    raw.parse("keyed", "SELECT v FROM errext WHERE cust_id = $1");
    let replies = within(raw.sync().round_trip()).await;
    assert_eq!(replies.last(), Some(&Reply::Ready(b'T')), "{replies:?}");
    let replies = within(
        raw.query("SELECT 1 / 0 FROM errext WHERE cust_id = 1")
            .round_trip(),
    )
    .await;
    assert!(
        replies.contains(&Reply::Error(SqlState::DIVISION_BY_ZERO)),
        "{replies:?}"
    );
    // A new statement, and one prepared before the block failed.
    let other_key = other.to_string();
    raw.parse("", &format!("SELECT v FROM errext WHERE cust_id = {other}"))
        .bind("", "", &[])
        .execute("");
    let new_statement = within(raw.sync().round_trip()).await;
    raw.bind("", "keyed", &[&other_key]).execute("");
    let prepared = within(raw.sync().round_trip()).await;
    for replies in [new_statement, prepared] {
        assert_eq!(
            replies,
            vec![
                Reply::Error(SqlState::IN_FAILED_SQL_TRANSACTION),
                Reply::Ready(b'E')
            ]
        );
    }
    raw.parse("", "ROLLBACK").bind("", "", &[]).execute("");
    let replies = within(raw.sync().round_trip()).await;
    assert!(
        replies.contains(&Reply::Complete("ROLLBACK".into())),
        "{replies:?}"
    );
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    raw.terminate().await;
    let lost: i64 = counts_where("errext", "WHERE v = 'lost'")
        .await
        .iter()
        .sum();
    assert_eq!(lost, 0);
}

/// An extended-protocol batch outside a block is one transaction on PostgreSQL, up to its Sync
/// (psycopg's `executemany`, a JDBC batch in autocommit): spread over several shards it commits
/// everywhere or nowhere. A failing row undoes the rows before it on every shard, the statements
/// after it run nowhere, and the client sees no answer after the error but the ReadyForQuery.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_extended_batch_over_several_shards_is_one_transaction() {
    use common::raw::{RawClient, Reply};
    let proxy = start();
    let client = proxy.connect().await;
    let other = seeded(&client, "batchx").await;
    let mut raw = RawClient::connect(proxy.addr, common::APP, common::APP, common::APP)
        .await
        .expect("login");
    raw.parse("ins", "INSERT INTO batchx (cust_id, v) VALUES ($1, $2)");
    let replies = within(raw.sync().round_trip()).await;
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    let batch = |raw: &mut RawClient, keys: &[i64], v: &str| {
        for k in keys {
            raw.bind("", "ins", &[&k.to_string(), v]).execute("");
        }
        raw.sync();
    };
    let written =
        |v: &'static str| async move { counts_where("batchx", &format!("WHERE v = '{v}'")).await };

    // Every row of a batch over every shard commits.
    let keys: Vec<i64> = (101..=140).collect();
    batch(&mut raw, &keys, "whole");
    let replies = within(raw.round_trip()).await;
    let inserted = replies
        .iter()
        .filter(|r| **r == Reply::Complete("INSERT 0 1".into()))
        .count();
    assert_eq!(inserted, 40, "{replies:?}");
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    let whole = written("whole").await;
    assert_eq!(whole.iter().sum::<i64>(), 40);
    assert!(
        whole.iter().filter(|&&n| n > 0).count() > 1,
        "the batch reached one shard only: {whole:?}"
    );

    // The last row fails: the rows before it, on every shard, are gone with it.
    let mut keys: Vec<i64> = (201..=239).collect();
    keys.push(101);
    batch(&mut raw, &keys, "late");
    let replies = within(raw.round_trip()).await;
    assert!(
        replies.contains(&Reply::Error(SqlState::UNIQUE_VIOLATION)),
        "{replies:?}"
    );
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    assert_eq!(
        written("late").await,
        vec![0; SHARDS],
        "rows of a failed batch stayed"
    );

    // The first row fails on key 1's shard: the rows after it, on `other`'s shard first, run
    // nowhere, and nothing answers for them.
    batch(&mut raw, &[1, other, 301, 302, 303, 304], "early");
    let replies = within(raw.round_trip()).await;
    assert_eq!(
        replies,
        vec![
            Reply::BindComplete,
            Reply::Error(SqlState::UNIQUE_VIOLATION),
            Reply::Ready(b'I')
        ]
    );
    assert_eq!(
        written("early").await,
        vec![0; SHARDS],
        "rows after the error ran"
    );

    // A write over several shards and keyed rows in one batch: one failure undoes both.
    raw.parse("", "UPDATE batchx SET v = 'mixed' WHERE cust_id <= 40")
        .bind("", "", &[])
        .execute("");
    batch(&mut raw, &[401, 402, 403, other], "mixed");
    let replies = within(raw.round_trip()).await;
    assert!(
        replies.contains(&Reply::Error(SqlState::UNIQUE_VIOLATION)),
        "{replies:?}"
    );
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    assert_eq!(written("mixed").await, vec![0; SHARDS]);
    assert_eq!(written("seed").await.iter().sum::<i64>(), 40);

    // A BEGIN in the batch opens the client's block with what ran before it, on every shard.
    for k in 501..=504 {
        raw.bind("", "ins", &[&k.to_string(), "begun"]).execute("");
    }
    raw.parse("", "BEGIN").bind("", "", &[]).execute("");
    batch(&mut raw, &[505, 506, 507, 508], "begun");
    let replies = within(raw.round_trip()).await;
    assert_eq!(replies.last(), Some(&Reply::Ready(b'T')), "{replies:?}");
    let replies = within(raw.query("ROLLBACK").round_trip()).await;
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    assert_eq!(
        written("begun").await,
        vec![0; SHARDS],
        "rows before BEGIN stayed"
    );

    // The session goes on, and a batch's rows are read back through it.
    raw.parse("", "SELECT v FROM batchx WHERE cust_id = $1")
        .bind("", "", &[&other.to_string()])
        .execute("");
    let replies = within(raw.sync().round_trip()).await;
    assert!(
        replies.contains(&Reply::Row(vec![Some("seed".into())])),
        "{replies:?}"
    );
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    raw.terminate().await;
}
