//! The plan cache: a hot keyed statement routes without a parse, prepared or sent as simple
//! queries with other literals each time — counted by `shardwire_statement_parses_total`. The
//! metrics recorder is process-wide, so this binary holds one test.

mod common;

use std::io::{Read, Write};
use std::net::TcpStream;

use common::{use_shards, TestProxy};
use tokio_postgres::SimpleQueryMessage;

fn parses(addr: std::net::SocketAddr) -> f64 {
    let mut stream = TcpStream::connect(addr).expect("metrics listener");
    stream
        .write_all(b"GET /metrics HTTP/1.1\r\nHost: localhost\r\nConnection: close\r\n\r\n")
        .unwrap();
    let mut body = String::new();
    stream.read_to_string(&mut body).unwrap();
    body.lines()
        .find_map(|l| {
            l.strip_prefix("shardwire_statement_parses_total ")?
                .trim()
                .parse()
                .ok()
        })
        .unwrap_or(0.0)
}

async fn name_of(client: &tokio_postgres::Client, sql: &str) -> Option<String> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .find_map(|m| match m {
            SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn hot_keyed_statements_route_without_a_parse() {
    let metrics = std::net::TcpListener::bind("127.0.0.1:0")
        .unwrap()
        .local_addr()
        .unwrap();
    shardwire::metrics::install(metrics).unwrap();
    use_shards(4);
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE pc_cust (cust_id bigint PRIMARY KEY, name text) \
             PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
        )
        .await
        .expect("create");
    for chunk in 0..10 {
        let values: Vec<String> = (chunk * 100..chunk * 100 + 100)
            .map(|i| format!("({i}, 'n{i}')"))
            .collect();
        client
            .simple_query(&format!("INSERT INTO pc_cust VALUES {}", values.join(", ")))
            .await
            .expect("insert");
    }

    let before = parses(metrics);
    let stmt = client
        .prepare("SELECT name FROM pc_cust WHERE cust_id = $1")
        .await
        .expect("prepare");
    for i in 0..10_000i64 {
        let key = i % 1000;
        let row = client
            .query_one(&stmt, &[&key])
            .await
            .expect("prepared read");
        assert_eq!(row.get::<_, String>(0), format!("n{key}"));
    }
    for i in 0..10_000i64 {
        let key = (i * 7) % 1000;
        let sql = format!("SELECT name FROM pc_cust WHERE cust_id = {key}");
        let name = name_of(&client, &sql).await;
        assert_eq!(name, Some(format!("n{key}")), "{sql}");
    }
    let spent = parses(metrics) - before;
    assert!(spent <= 5.0, "20,000 hot statements cost {spent} parses");

    // Shared plans never mix up what their literals mean: strings, negative numbers, casts.
    assert_eq!(
        name_of(&client, "SELECT name FROM pc_cust WHERE cust_id = '42'").await,
        Some("n42".into())
    );
    assert_eq!(
        name_of(&client, "SELECT name FROM pc_cust WHERE cust_id = '43'").await,
        Some("n43".into())
    );
    client
        .simple_query("INSERT INTO pc_cust VALUES (-5, 'minus five'), (-6, 'minus six')")
        .await
        .expect("negative keys");
    assert_eq!(
        name_of(&client, "SELECT name FROM pc_cust WHERE cust_id = -5").await,
        Some("minus five".into())
    );
    assert_eq!(
        name_of(&client, "SELECT name FROM pc_cust WHERE cust_id = -6").await,
        Some("minus six".into())
    );
    assert_eq!(
        name_of(
            &client,
            "SELECT name FROM pc_cust WHERE cust_id = '7'::bigint"
        )
        .await,
        Some("n7".into())
    );
    // A LIMIT is part of what a multi-shard plan is built with: another LIMIT, another plan.
    let two = client
        .simple_query("SELECT name FROM pc_cust ORDER BY cust_id LIMIT 2")
        .await
        .expect("limit 2");
    let three = client
        .simple_query("SELECT name FROM pc_cust ORDER BY cust_id LIMIT 3")
        .await
        .expect("limit 3");
    let rows = |m: &[SimpleQueryMessage]| {
        m.iter()
            .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
            .count()
    };
    assert_eq!((rows(&two), rows(&three)), (2, 3));
    client
        .batch_execute("DROP TABLE pc_cust")
        .await
        .expect("drop");
}
