//! Shards that are databases of one PostgreSQL server. Prepared-transaction names belong to the
//! server, so each such shard prepares under a name of its own (`<gid>_<shard>`): sharding DDL,
//! a write over both shards, a block and an extended-protocol batch over both commit together,
//! and nothing is left prepared.

mod common;

use common::raw::{RawClient, Reply};
use common::{OwnCluster, TestProxy};

async fn connect(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// Rows of `one_srv` with `v = value` in each of the two databases.
async fn counts(urls: &[String; 2], value: &str) -> [i64; 2] {
    let mut out = [0; 2];
    for (i, url) in urls.iter().enumerate() {
        out[i] = connect(url)
            .await
            .query_one("SELECT count(*) FROM one_srv WHERE v = $1", &[&value])
            .await
            .expect("count")
            .get(0);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shards_that_share_a_server_commit_together() {
    let server = OwnCluster::start("one-server");
    server
        .0
        .create_database("app2")
        .unwrap_or_else(|e| panic!("{e}"));
    let urls = [server.url(), server.0.url("app2")];
    let proxy = TestProxy::start_with(|c| {
        c.shards.truncate(2);
        c.shards[0].url = urls[0].clone();
        c.shards[1].url = urls[1].clone();
    });
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE one_srv (id bigint PRIMARY KEY, v text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .expect("sharding DDL over both databases");

    let values: Vec<String> = (1..=40).map(|i| format!("({i}, 'a')")).collect();
    client
        .batch_execute(&format!("INSERT INTO one_srv VALUES {}", values.join(", ")))
        .await
        .expect("an INSERT over both shards");
    let [a, b] = counts(&urls, "a").await;
    assert!(a > 0 && b > 0 && a + b == 40, "{a} + {b}");

    for sql in [
        "BEGIN",
        "UPDATE one_srv SET v = 'b' WHERE id <= 20",
        "UPDATE one_srv SET v = 'b' WHERE id > 20",
        "COMMIT",
    ] {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let [a, b] = counts(&urls, "b").await;
    assert_eq!(a + b, 40);

    // An extended-protocol batch over both shards (one Sync): one transaction.
    let mut raw = RawClient::connect(proxy.addr, common::APP, common::APP, common::APP)
        .await
        .expect("login");
    raw.parse("up", "UPDATE one_srv SET v = 'c' WHERE id = $1");
    for id in 1..=40 {
        raw.bind("", "up", &[&id.to_string()]).execute("");
    }
    let replies = raw.sync().round_trip().await;
    let updated = replies
        .iter()
        .filter(|r| **r == Reply::Complete("UPDATE 1".into()))
        .count();
    assert_eq!(updated, 40, "{replies:?}");
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    raw.terminate().await;
    let [a, b] = counts(&urls, "c").await;
    assert_eq!(a + b, 40);

    for url in &urls {
        let left: i64 = connect(url)
            .await
            .query_one(
                "SELECT count(*) FROM pg_prepared_xacts WHERE database = current_database()",
                &[],
            )
            .await
            .expect("pg_prepared_xacts")
            .get(0);
        assert_eq!(left, 0, "left prepared in {url}");
    }
}
