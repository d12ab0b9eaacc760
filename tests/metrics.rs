//! The Prometheus endpoint: every metric is there with its `shardwire_` name, and the counters
//! move with what clients do. The recorder is process-wide, so this binary holds one test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::TestProxy;
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

fn scrape(addr: std::net::SocketAddr) -> String {
    let mut stream = TcpStream::connect(addr).expect("metrics listener");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body
}

/// The value of an unlabelled sample, e.g. `shardwire_client_sessions_total 3`.
fn sample(text: &str, name: &str) -> f64 {
    text.lines()
        .find_map(|l| l.strip_prefix(name)?.strip_prefix(' ')?.trim().parse().ok())
        .unwrap_or_else(|| panic!("no sample {name} in:\n{text}"))
}

#[tokio::test]
async fn counters_follow_sessions_transactions_and_failed_logins() {
    let addr = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    shardwire::metrics::install(addr).unwrap();
    let proxy = TestProxy::start();

    let client = proxy.connect().await;
    for i in 0..3 {
        let row = client.query_one("SELECT $1::int + 1", &[&i]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i + 1);
    }
    client
        .batch_execute("SET application_name = 'pinned'")
        .await
        .unwrap();
    let wrong = format!(
        "{} password=wrong",
        proxy.conn_string().replace("password=app", "")
    );
    let refused = tokio_postgres::connect(&wrong, NoTls)
        .await
        .err()
        .expect("refused");
    assert_eq!(refused.code(), Some(&SqlState::INVALID_PASSWORD));

    // A chunk move: counted with its rows and its cutover's pause.
    client
        .batch_execute(
            "CREATE SHARDED TABLE metrics_moved (id bigint PRIMARY KEY)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO metrics_moved SELECT generate_series(1, 100)")
        .await
        .unwrap();
    let owner = client
        .simple_query("SHOW CHUNKS FOR metrics_moved")
        .await
        .unwrap()
        .into_iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(3).map(str::to_string),
            _ => None,
        })
        .unwrap();
    let target = if owner == "s1" { "s2" } else { "s1" };
    client
        .batch_execute(&format!("MOVE CHUNK 0 FOR metrics_moved TO SHARD {target}"))
        .await
        .unwrap();

    let text = tokio::task::spawn_blocking(move || scrape(addr))
        .await
        .unwrap();
    assert!(
        text.contains("# TYPE shardwire_client_sessions_total counter"),
        "{text}"
    );
    assert_eq!(sample(&text, "shardwire_client_sessions_total"), 1.0);
    assert_eq!(sample(&text, "shardwire_client_sessions_active"), 1.0);
    assert_eq!(sample(&text, "shardwire_auth_failures_total"), 1.0);
    assert_eq!(sample(&text, "shardwire_pinned_sessions_total"), 1.0);
    assert!(
        sample(&text, "shardwire_backend_transactions_total") >= 4.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "shardwire_chunk_moves_total{outcome=\"done\"}"),
        1.0
    );
    assert_eq!(sample(&text, "shardwire_chunk_moves_running"), 0.0);
    // Polled while the chunk copied; back to 0 once the move ended.
    assert_eq!(sample(&text, "shardwire_chunk_move_lag_bytes"), 0.0);
    assert!(
        sample(&text, "shardwire_chunk_move_rows_total") > 0.0,
        "{text}"
    );
    assert_eq!(
        sample(&text, "shardwire_chunk_move_cutover_pause_seconds_count"),
        1.0
    );
}
