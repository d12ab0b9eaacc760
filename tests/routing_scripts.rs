//! Query strings whose statements go to several shards run as PostgreSQL runs a query string:
//! one transaction (all shards or none), the rest skipped after an error, BEGIN, COMMIT and
//! ROLLBACK inside the string taken as PostgreSQL takes them. Checked on the shards.
mod common;
mod routing_common;

use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

/// The keys of `table`, read on the shards themselves.
async fn stored(table: &str) -> Vec<i64> {
    let mut keys = Vec::new();
    for i in 0..SHARDS {
        let c = common::shards().connect(i).await;
        for r in c
            .query(&format!("SELECT cust_id FROM {table}"), &[])
            .await
            .expect("read shard")
        {
            keys.push(r.get(0));
        }
    }
    keys.sort_unstable();
    keys
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_query_string_over_several_shards_is_one_transaction() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "sc_c").await;

    let messages = c
        .simple_query(
            "INSERT INTO sc_c VALUES (1, 'a', 1); INSERT INTO sc_c VALUES (2, 'b', 2); \
             INSERT INTO sc_c VALUES (3, 'c', 3), (4, 'd', 4); SELECT count(*) FROM sc_c",
        )
        .await
        .expect("script");
    let tags: Vec<u64> = messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .collect();
    assert_eq!(tags, [1, 1, 2, 1], "one answer per statement");
    let count = messages.iter().find_map(|m| match m {
        SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
        _ => None,
    });
    assert_eq!(
        count.as_deref(),
        Some("4"),
        "a later statement sees the earlier ones"
    );
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4]);
    assert!(
        counts("sc_c").await.iter().filter(|&&n| n > 0).count() > 1,
        "the rows are on several shards"
    );

    // An error rolls back every statement before it, on every shard, and skips the rest.
    let e = c
        .simple_query(
            "INSERT INTO sc_c VALUES (5, 'e', 5); INSERT INTO sc_c VALUES (6, 'f', 6); \
             INSERT INTO sc_c VALUES (1, 'again', 1); INSERT INTO sc_c VALUES (7, 'g', 7)",
        )
        .await
        .expect_err("duplicate key");
    assert_eq!(code(&e), SqlState::UNIQUE_VIOLATION);
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4]);

    // COMMIT inside the string commits what came before it (PostgreSQL warns: no block).
    let out = proxy.psql(
        "INSERT INTO sc_c VALUES (8, 'h', 8)\\; INSERT INTO sc_c VALUES (9, 'i', 9)\\; COMMIT\\; \
         INSERT INTO sc_c VALUES (10, 'j', 10)\\; SELECT 1/0;\n",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        stderr.contains("WARNING:  there is no transaction in progress"),
        "{stderr}"
    );
    assert!(stderr.contains("division by zero"), "{stderr}");
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4, 8, 9]);

    // Inside the client's block the statements are the block's.
    c.batch_execute("BEGIN").await.unwrap();
    c.simple_query("INSERT INTO sc_c VALUES (11, 'k', 11); INSERT INTO sc_c VALUES (12, 'l', 12)")
        .await
        .expect("script in a block");
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4, 8, 9]);

    // A BEGIN inside the string makes the block the client's, with what ran before it.
    c.simple_query(
        "INSERT INTO sc_c VALUES (13, 'm', 13); BEGIN; INSERT INTO sc_c VALUES (14, 'n', 14)",
    )
    .await
    .expect("script that opens a block");
    let seen = simple_rows(&c, "SELECT count(*) FROM sc_c").await;
    assert_eq!(seen, vec![vec![Some("8".into())]]);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4, 8, 9]);

    // A whole block in one string.
    c.simple_query(
        "BEGIN; INSERT INTO sc_c VALUES (15, 'o', 15); INSERT INTO sc_c VALUES (16, 'p', 16); \
         COMMIT",
    )
    .await
    .expect("block in one string");
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4, 8, 9, 15, 16]);

    // An error in a read over every shard fails the string as well.
    let e = c
        .simple_query(
            "INSERT INTO sc_c VALUES (20, 't', 20); SELECT 1 / (cust_id - 3) FROM sc_c; \
             INSERT INTO sc_c VALUES (21, 'u', 21)",
        )
        .await
        .expect_err("division by zero on one shard");
    assert_eq!(code(&e), SqlState::DIVISION_BY_ZERO);
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4, 8, 9, 15, 16]);

    // Savepoints need a block the client began, as on PostgreSQL.
    let e = c
        .simple_query("INSERT INTO sc_c VALUES (17, 'q', 17); SAVEPOINT s; INSERT INTO sc_c VALUES (18, 'r', 18)")
        .await
        .expect_err("savepoint outside a block");
    assert_eq!(code(&e), SqlState::NO_ACTIVE_SQL_TRANSACTION);
    let e = c
        .simple_query("SELECT * FROM sc_c WHERE cust_id = 1; PREPARE TRANSACTION 'sc_x'")
        .await
        .expect_err("two-phase command in a script");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED);
    // COPY's data cannot come in the middle of such a string.
    let e = c
        .simple_query("SELECT * FROM sc_c WHERE cust_id = 1; COPY sc_c FROM STDIN")
        .await
        .expect_err("copy in a script");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED);
    // Through the extended protocol a statement is one command, as PostgreSQL requires.
    let e = c
        .execute("INSERT INTO sc_c VALUES (19, 's', 19); SELECT 1", &[])
        .await
        .expect_err("several commands in a prepared statement");
    assert_eq!(code(&e), SqlState::SYNTAX_ERROR);
    assert_eq!(stored("sc_c").await, [1, 2, 3, 4, 8, 9, 15, 16]);
    c.batch_execute("DROP TABLE sc_c").await.unwrap();
}

/// Queries pipelined ahead of such a string keep their own answers, ReadyForQuery included.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_string_pipelined_behind_other_queries_answers_in_turn() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "sc_pipe").await;
    for round in 0..20i64 {
        let first = c.simple_query("SELECT 'first'");
        let script = format!(
            "INSERT INTO sc_pipe VALUES ({a}, 'a', 0); INSERT INTO sc_pipe VALUES ({b}, 'b', 0)",
            a = 2 * round + 1,
            b = 2 * round + 2
        );
        let second = c.simple_query(&script);
        let third = c.simple_query("SELECT 'third'");
        let (first, second, third) = tokio::time::timeout(
            std::time::Duration::from_secs(20),
            futures::future::join3(first, second, third),
        )
        .await
        .expect("every query answered");
        assert_eq!(tag(&first.expect("first")), 1);
        assert_eq!(second.expect("script").len(), 2, "two INSERT tags");
        assert_eq!(tag(&third.expect("third")), 1);
    }
    assert_eq!(counts("sc_pipe").await.iter().sum::<i64>(), 40);
    c.batch_execute("DROP TABLE sc_pipe").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_answer_in_a_string_reaches_the_client_whole() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "sc_long").await;
    let messages = c
        .simple_query(
            "INSERT INTO sc_long SELECT g, repeat('x', 500), g FROM generate_series(1, 4000) g; \
             SELECT repeat('y', 1000) FROM generate_series(1, 5000); \
             SELECT name FROM sc_long ORDER BY cust_id; SELECT 'last'",
        )
        .await
        .expect("script with long answers");
    let rows = messages
        .iter()
        .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows, 5000 + 4000 + 1);
    match messages.last() {
        Some(SimpleQueryMessage::CommandComplete(1)) => {}
        other => panic!("the last statement's answer comes last: {other:?}"),
    }
    assert_eq!(counts("sc_long").await.iter().sum::<i64>(), 4000);
    c.batch_execute("DROP TABLE sc_long").await.unwrap();
}
