//! COPY through the proxy, both ways: bytes go in and come out unchanged, and a COPY that fails
//! fails alone.

mod common;

use std::pin::pin;
use std::time::Duration;

use bytes::Bytes;
use common::raw::{RawClient, Reply};
use common::{TestProxy, APP};
use futures::{SinkExt, TryStreamExt};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const LIMIT: Duration = Duration::from_secs(30);

/// 100,000 rows of COPY text with NULLs, escapes, unicode and numerics in canonical form, so
/// PostgreSQL prints back exactly these bytes. `bad_row` gets an id that is not a number.
fn copy_rows(bad_row: Option<usize>) -> Vec<u8> {
    let mut data = Vec::with_capacity(4 << 20);
    for i in 0..100_000usize {
        let note = match i % 7 {
            0 => "\\N",
            1 => "tab\\there, back\\\\slash",
            2 => "grüße 🐘",
            _ => "plain",
        };
        let id = if bad_row == Some(i) {
            "not-a-number".to_string()
        } else {
            i.to_string()
        };
        let line = format!("{id}\tname {i}\t{}.{:02}\t{note}\n", i / 100, i % 100);
        data.extend_from_slice(line.as_bytes());
    }
    data
}

async fn create_table(client: &Client, table: &str) {
    client
        .batch_execute(&format!(
            "CREATE TABLE {table} (id int PRIMARY KEY, name text, amount numeric(12, 2), note text)"
        ))
        .await
        .unwrap();
}

async fn copy_in(client: &Client, table: &str, data: &[u8]) -> Result<u64, tokio_postgres::Error> {
    let mut sink = pin!(client.copy_in(&format!("COPY {table} FROM STDIN")).await?);
    for chunk in data.chunks(64 * 1024) {
        sink.send(Bytes::copy_from_slice(chunk)).await?;
    }
    sink.as_mut().finish().await
}

async fn copy_out(client: &Client, table: &str) -> Vec<u8> {
    let query = format!("COPY (SELECT * FROM {table} ORDER BY id) TO STDOUT");
    let out = async {
        client
            .copy_out(&query)
            .await
            .unwrap()
            .try_fold(Vec::new(), |mut acc, chunk| async move {
                acc.extend_from_slice(&chunk);
                Ok(acc)
            })
            .await
            .unwrap()
    };
    tokio::time::timeout(LIMIT, out)
        .await
        .expect("COPY TO finishes")
}

async fn count_rows(client: &Client, table: &str) -> i64 {
    client
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0)
}

/// Equal bytes, without printing megabytes when they differ.
fn assert_same_bytes(got: &[u8], expected: &[u8]) {
    let first_difference = got.iter().zip(expected).position(|(a, b)| a != b);
    assert_eq!(first_difference, None, "first differing byte");
    assert_eq!(got.len(), expected.len());
}

/// psql's COPY FROM STDIN goes through the simple protocol: one Query, then the data.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_with_psql_and_out_with_tokio_postgres_keeps_every_byte() {
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    create_table(&client, "copy_psql_in").await;
    let data = copy_rows(None);
    let text = String::from_utf8(data.clone()).unwrap();
    let bad = String::from_utf8(copy_rows(Some(50_000))).unwrap();
    let script = format!(
        "COPY copy_psql_in FROM STDIN;\n{text}\\.\n\
         CREATE TABLE copy_psql_bad (LIKE copy_psql_in);\n\
         COPY copy_psql_bad FROM STDIN;\n{bad}\\.\n\
         SELECT (SELECT count(*) FROM copy_psql_in) AS good, \
                (SELECT count(*) FROM copy_psql_bad) AS bad;\n\
         DROP TABLE copy_psql_bad;\n"
    );
    let conn = proxy.conn_string();
    let output = tokio::task::spawn_blocking(move || common::psql(&conn, &["-A", "-t"], &script))
        .await
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert_eq!(
        stdout.lines().collect::<Vec<_>>(),
        ["COPY 100000", "CREATE TABLE", "100000|0", "DROP TABLE"],
        "{stderr}"
    );
    assert!(
        stderr.contains("invalid input syntax for type integer: \"not-a-number\""),
        "{stderr}"
    );
    assert_same_bytes(&copy_out(&client, "copy_psql_in").await, &data);
    client
        .batch_execute("DROP TABLE copy_psql_in")
        .await
        .unwrap();
}

/// tokio-postgres sends COPY FROM STDIN as Bind, Execute, Sync, the data, CopyDone, Sync.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_in_and_out_of_100000_rows_with_tokio_postgres() {
    let proxy = TestProxy::start_with(|c| {
        c.pool.size = 1;
        c.pool.connect_timeout_ms = 3_000;
    });
    let client = proxy.connect().await;
    let other = proxy.connect().await;
    create_table(&client, "copy_round_trip").await;
    let data = copy_rows(None);
    let copied = tokio::time::timeout(LIMIT, copy_in(&client, "copy_round_trip", &data))
        .await
        .expect("COPY FROM finishes")
        .unwrap();
    assert_eq!(copied, 100_000);
    assert_same_bytes(&copy_out(&client, "copy_round_trip").await, &data);
    // With one backend connection, the other client runs only if the COPYs gave it back.
    let seen = tokio::time::timeout(LIMIT, count_rows(&other, "copy_round_trip"))
        .await
        .expect("other client answered");
    assert_eq!(seen, 100_000);

    // A bad row half-way fails that COPY only (into a fresh table, so only the bad row fails).
    create_table(&client, "copy_round_trip_bad").await;
    let e = tokio::time::timeout(
        LIMIT,
        copy_in(&client, "copy_round_trip_bad", &copy_rows(Some(50_000))),
    )
    .await
    .expect("COPY FROM answers")
    .expect_err("row 50,000 is bad");
    assert_eq!(
        e.code(),
        Some(&SqlState::INVALID_TEXT_REPRESENTATION),
        "{e}"
    );
    assert_eq!(count_rows(&client, "copy_round_trip_bad").await, 0);
    assert_eq!(count_rows(&client, "copy_round_trip").await, 100_000);
    let seen = tokio::time::timeout(LIMIT, count_rows(&other, "copy_round_trip"))
        .await
        .expect("other client answered");
    assert_eq!(seen, 100_000);
    client
        .batch_execute("DROP TABLE copy_round_trip, copy_round_trip_bad")
        .await
        .unwrap();
}

/// What tokio-postgres sends for a COPY FROM STDIN, then a Close and a query: the proxy must
/// answer exactly what PostgreSQL answers.
async fn extended_copy_transcript(c: &mut RawClient, table: &str) -> Vec<Vec<Reply>> {
    let mut transcript = Vec::new();
    c.parse("s0", &format!("COPY {table} FROM STDIN"))
        .describe_statement("s0")
        .sync();
    transcript.push(c.round_trip().await);
    c.bind("", "s0", &[])
        .execute("")
        .sync()
        .copy_data(b"1\n2\n")
        .copy_done()
        .sync();
    transcript.push(c.round_trip().await);
    c.close_statement("s0").sync();
    transcript.push(c.round_trip().await);
    c.query(&format!("SELECT count(*) FROM {table}"));
    transcript.push(c.round_trip().await);
    transcript
}

#[tokio::test]
async fn extended_copy_from_stdin_is_answered_as_postgresql_answers_it() {
    let proxy = TestProxy::start();
    let mut direct = RawClient::connect_to_shard(0).await;
    direct
        .query("CREATE TABLE copy_ext_direct (id int); CREATE TABLE copy_ext_proxy (id int)")
        .round_trip()
        .await;
    let expected = extended_copy_transcript(&mut direct, "copy_ext_direct").await;
    assert_eq!(expected[1][2], Reply::Complete("COPY 2".into()));
    let mut through_proxy = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let got = tokio::time::timeout(
        LIMIT,
        extended_copy_transcript(&mut through_proxy, "copy_ext_proxy"),
    )
    .await
    .expect("every batch answered");
    assert_eq!(got, expected);
    direct
        .query("DROP TABLE copy_ext_direct, copy_ext_proxy")
        .round_trip()
        .await;
}
