//! Errors end a statement, a transaction or a batch — never the session, and never leave the
//! pooled backend connection in a state another client would inherit.

mod common;

use std::time::Duration;

use common::raw::{RawClient, Reply};
use common::{TestProxy, APP};
use futures::future::join_all;
use tokio_postgres::error::SqlState;

const LIMIT: Duration = Duration::from_secs(30);

fn code(e: &tokio_postgres::Error) -> Option<&SqlState> {
    e.code()
}

async fn count(c: &tokio_postgres::Client) -> i64 {
    c.query_one("SELECT count(*) FROM errors_txn", &[])
        .await
        .unwrap()
        .get(0)
}

#[tokio::test]
async fn a_syntax_error_leaves_the_session_usable() {
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    let simple = client.simple_query("SELEC 1").await.unwrap_err();
    assert_eq!(code(&simple), Some(&SqlState::SYNTAX_ERROR));
    let extended = client.prepare("SELECT FROM WHERE").await.unwrap_err();
    assert_eq!(code(&extended), Some(&SqlState::SYNTAX_ERROR));
    let row = client.query_one("SELECT 'fine'::text", &[]).await.unwrap();
    assert_eq!(row.get::<_, String>(0), "fine");
    let rows = client.simple_query("SELECT 'simple'").await.unwrap();
    let values: Vec<_> = rows
        .iter()
        .filter_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0),
            _ => None,
        })
        .collect();
    assert_eq!(values, ["simple"]);
}

#[tokio::test]
async fn division_by_zero_in_a_transaction_then_rollback() {
    // One backend connection: if the failed transaction kept it, the other client would wait.
    let proxy = TestProxy::start_with(|c| {
        c.pool.size = 1;
        c.pool.connect_timeout_ms = 3_000;
    });
    let mut client = proxy.connect().await;
    let other = proxy.connect().await;
    client
        .batch_execute("CREATE TABLE errors_txn (id int)")
        .await
        .unwrap();

    let tx = client.transaction().await.unwrap();
    tx.execute("INSERT INTO errors_txn VALUES (1)", &[])
        .await
        .unwrap();
    let e = tx.query_one("SELECT 1 / 0", &[]).await.unwrap_err();
    assert_eq!(code(&e), Some(&SqlState::DIVISION_BY_ZERO));
    let e = tx.query_one("SELECT 1", &[]).await.unwrap_err();
    assert_eq!(code(&e), Some(&SqlState::IN_FAILED_SQL_TRANSACTION));
    tx.rollback().await.unwrap();

    let other_count = tokio::time::timeout(LIMIT, count(&other)).await.unwrap();
    assert_eq!(other_count, 0, "the rolled-back insert is gone");
    assert_eq!(count(&client).await, 0);

    // The same through simple-query text, as psql sends it.
    client.batch_execute("BEGIN").await.unwrap();
    let e = client.batch_execute("SELECT 1/0").await.unwrap_err();
    assert_eq!(code(&e), Some(&SqlState::DIVISION_BY_ZERO));
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(tokio::time::timeout(LIMIT, count(&other)).await.unwrap(), 0);
    client.batch_execute("DROP TABLE errors_txn").await.unwrap();
}

#[tokio::test]
async fn a_failing_query_in_a_tokio_postgres_pipeline_fails_alone() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let client = proxy.connect().await;
    let stmt = client.prepare("SELECT 100 / $1::int4").await.unwrap();
    // Each query of the pipeline has its own Sync: only the one dividing by zero fails.
    let divisors: Vec<i32> = vec![1, 2, 0, 4, 0, 5];
    let results = tokio::time::timeout(
        LIMIT,
        join_all(divisors.iter().map(|d| {
            let (client, stmt) = (&client, &stmt);
            async move { client.query_one(stmt, &[d]).await }
        })),
    )
    .await
    .expect("pipeline answered");
    for (d, r) in divisors.iter().zip(results) {
        match r {
            Ok(row) => assert_eq!(row.get::<_, i32>(0), 100 / d),
            Err(e) => {
                assert_eq!(*d, 0);
                assert_eq!(code(&e), Some(&SqlState::DIVISION_BY_ZERO));
            }
        }
    }
    let row = client.query_one(&stmt, &[&10i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 10);
}

/// Batches with errors in them, each answer collected up to its ReadyForQuery.
async fn error_batches(raw: &mut RawClient) -> Vec<Vec<Reply>> {
    let mut transcript = Vec::new();
    raw.parse("ok", "SELECT $1::int4 + 1")
        .bind("", "ok", &["1"])
        .execute("")
        .parse(
            "bad",
            "SELECT 10 / (n - $1::int4) FROM generate_series(1, 2) AS n",
        )
        .bind("", "bad", &["2"])
        .execute("")
        // PostgreSQL skips everything from the error to the Sync.
        .bind("", "ok", &["5"])
        .execute("")
        .parse("never", "SELECT 'never'")
        .sync();
    transcript.push(raw.round_trip().await);
    // Both statements parsed before the error exist.
    raw.bind("", "ok", &["5"])
        .execute("")
        .sync()
        .bind("", "bad", &["0"])
        .execute("")
        .sync();
    transcript.push(raw.round_trip().await);
    transcript.push(raw.until_ready().await);
    // An error at Bind time (the constant is folded when planning), then a good query.
    raw.parse("", "SELECT 1 / $1::int4")
        .bind("", "", &["0"])
        .execute("")
        .sync()
        .query("SELECT 'after'");
    transcript.push(raw.round_trip().await);
    transcript.push(raw.until_ready().await);
    // Inside an explicit transaction the error leaves it failed until the client ends it.
    raw.query("BEGIN")
        .parse("", "SELECT 10 / (n - 1) FROM generate_series(1, 1) AS n")
        .bind("", "", &[])
        .execute("")
        .sync()
        .query("SELECT 1")
        .query("ROLLBACK")
        .query("SELECT 'usable'");
    transcript.push(raw.round_trip().await);
    for _ in 0..4 {
        transcript.push(raw.until_ready().await);
    }
    transcript
}

#[tokio::test]
async fn an_error_mid_batch_skips_to_sync_exactly_as_postgresql_does() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let mut through_proxy = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let mut direct = RawClient::connect_to_shard(0).await;
    let expected = error_batches(&mut direct).await;
    let got = tokio::time::timeout(LIMIT, error_batches(&mut through_proxy))
        .await
        .expect("every batch answered");

    // The reference itself shows what the test is about.
    let row = |v: &str| Reply::Row(vec![Some(v.to_string())]);
    assert_eq!(
        expected[0],
        [
            Reply::ParseComplete,
            Reply::BindComplete,
            row("2"),
            Reply::Complete("SELECT 1".into()),
            Reply::ParseComplete,
            Reply::BindComplete,
            row("-10"),
            Reply::Error(SqlState::DIVISION_BY_ZERO),
            Reply::Ready(b'I'),
        ]
    );
    assert_eq!(expected[1][1], row("6"));
    assert!(expected[3].contains(&Reply::Error(SqlState::DIVISION_BY_ZERO)));
    assert_eq!(expected[4].first(), Some(&Reply::RowDescription(1)));
    assert_eq!(
        expected[7],
        [
            Reply::Error(SqlState::IN_FAILED_SQL_TRANSACTION),
            Reply::Ready(b'E')
        ]
    );
    assert_eq!(expected[9][1], row("usable"));

    for (i, (got, expected)) in got.iter().zip(&expected).enumerate() {
        assert_eq!(got, expected, "batch answer {i}");
    }
    assert_eq!(got.len(), expected.len());
    through_proxy.terminate().await;
    direct.terminate().await;
}

#[tokio::test]
async fn a_parse_that_failed_or_was_skipped_leaves_the_name_free() {
    let proxy = TestProxy::start();
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let ready = || Reply::Ready(b'I');
    let missing = || vec![Reply::Error(SqlState::INVALID_SQL_STATEMENT_NAME), ready()];
    raw.parse("broken", "SELEC 1").sync();
    assert_eq!(
        raw.round_trip().await,
        [Reply::Error(SqlState::SYNTAX_ERROR), ready()]
    );
    raw.parse("ok", "SELECT 1 / 0")
        .bind("", "ok", &[])
        .execute("")
        .parse("skipped", "SELECT 'skipped'")
        .sync();
    let batch = raw.round_trip().await;
    assert_eq!(batch.last(), Some(&ready()));

    // PostgreSQL created neither statement: using one names it as missing, and the name is free.
    raw.bind("", "broken", &[]).execute("").sync();
    let broken = raw.round_trip().await;
    raw.bind("", "skipped", &[]).execute("").sync();
    let skipped = raw.round_trip().await;
    raw.parse("broken", "SELECT 'fixed'")
        .bind("", "broken", &[])
        .execute("")
        .sync();
    let reparsed = raw.round_trip().await;
    assert_eq!(
        (broken, skipped, reparsed),
        (
            missing(),
            missing(),
            vec![
                Reply::ParseComplete,
                Reply::BindComplete,
                Reply::Row(vec![Some("fixed".into())]),
                Reply::Complete("SELECT 1".into()),
                ready()
            ]
        )
    );
}

#[tokio::test]
async fn a_close_skipped_after_an_error_keeps_the_statement() {
    let proxy = TestProxy::start();
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let ready = || Reply::Ready(b'I');
    raw.parse("kept", "SELECT 'kept'").sync();
    assert_eq!(raw.round_trip().await, [Reply::ParseComplete, ready()]);

    // The proxy answers a Close itself; PostgreSQL skips it here, so the statement must stay.
    raw.parse("", "SELECT 1 / 0")
        .bind("", "", &[])
        .execute("")
        .close_statement("kept")
        .sync();
    assert_eq!(
        raw.round_trip().await,
        // The planner folds 1 / 0 when the Bind plans the statement.
        [
            Reply::ParseComplete,
            Reply::Error(SqlState::DIVISION_BY_ZERO),
            ready()
        ]
    );
    raw.bind("", "kept", &[]).execute("").sync();
    assert_eq!(
        raw.round_trip().await,
        [
            Reply::BindComplete,
            Reply::Row(vec![Some("kept".into())]),
            Reply::Complete("SELECT 1".into()),
            ready()
        ]
    );
}
