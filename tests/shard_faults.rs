//! Shard faults as clients meet them: with one shard down, statements that need it fail at once
//! with an error naming it while the other shard serves on, and the proxy serves it again by
//! itself once it is back; a shard connection killed in the middle of a client's transaction
//! gives that client an error, never a hang, and the next client is served. The tests stop
//! shards, so each runs clusters of its own.

mod common;

use std::time::{Duration, Instant};

use common::TestProxy;
use shardwire::pgcluster::{free_port, ClusterOptions, LocalCluster, PgBinaries, StopMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// Two clusters of the test's own, stopped even when an assertion fails.
struct OwnShards {
    clusters: Vec<LocalCluster>,
    _dir: tempfile::TempDir,
}

impl OwnShards {
    fn start() -> OwnShards {
        let dir = tempfile::tempdir().unwrap();
        let bins = PgBinaries::locate().unwrap();
        let clusters: Vec<LocalCluster> = (0..2)
            .map(|i| {
                let options = ClusterOptions {
                    fast_unsafe: true,
                    ..ClusterOptions::default()
                };
                let at = dir.path().join(format!("s{i}"));
                LocalCluster::init(bins.clone(), &at, free_port().unwrap(), options).unwrap()
            })
            .collect();
        let shards = OwnShards {
            clusters,
            _dir: dir,
        };
        for c in &shards.clusters {
            c.start().unwrap();
            c.create_database("app").unwrap();
        }
        shards
    }

    fn proxy(&self) -> TestProxy {
        let urls: Vec<String> = self.clusters.iter().map(|c| c.url("app")).collect();
        TestProxy::start_with(|c| {
            c.catalog = None;
            for (shard, url) in c.shards.iter_mut().zip(&urls) {
                shard.url = url.clone();
            }
            c.pool.connect_timeout_ms = 1000;
        })
    }

    async fn connect(&self, i: usize) -> Client {
        let (client, conn) = tokio_postgres::connect(&self.clusters[i].url("app"), NoTls)
            .await
            .expect("connect to own shard");
        tokio::spawn(conn);
        client
    }
}

impl Drop for OwnShards {
    fn drop(&mut self) {
        for c in &self.clusters {
            let _ = c.stop(StopMode::Immediate);
        }
    }
}

/// A sharded table with keys 1..=40; one key whose row is on each shard, found on the shards.
async fn keyed_table(shards: &OwnShards, client: &Client, name: &str) -> [i64; 2] {
    client
        .batch_execute(&format!(
            "CREATE SHARDED TABLE {name} (id bigint PRIMARY KEY, v text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS 4"
        ))
        .await
        .unwrap();
    client
        .batch_execute(&format!(
            "INSERT INTO {name} SELECT i, 'v' || i FROM generate_series(1, 40) i"
        ))
        .await
        .unwrap();
    let mut keys = [0; 2];
    for (i, key) in keys.iter_mut().enumerate() {
        *key = shards
            .connect(i)
            .await
            .query_one(&format!("SELECT min(id) FROM {name}"), &[])
            .await
            .unwrap()
            .get(0);
    }
    keys
}

async fn value_of(client: &Client, table: &str, id: i64) -> Result<String, tokio_postgres::Error> {
    client
        .query_one(&format!("SELECT v FROM {table} WHERE id = $1"), &[&id])
        .await
        .map(|row| row.get(0))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_a_shard_down_its_statements_fail_fast_and_the_other_shard_serves_on() {
    let shards = OwnShards::start();
    let proxy = shards.proxy();
    let client = proxy.connect().await;
    let [on_s1, on_s2] = keyed_table(&shards, &client, "fault_down").await;

    shards.clusters[1].stop(StopMode::Immediate).unwrap();
    // Both the pooled connection broken by the stop and a new one that cannot be made.
    for attempt in 0..2 {
        let started = Instant::now();
        let e = value_of(&client, "fault_down", on_s2)
            .await
            .expect_err("the shard is down");
        let db = e.as_db_error().expect("an ErrorResponse");
        assert!(
            [
                SqlState::CONNECTION_FAILURE,
                SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION
            ]
            .contains(db.code()),
            "attempt {attempt}: {:?} {}",
            db.code(),
            db.message()
        );
        assert!(
            db.message().contains("\"s2\""),
            "attempt {attempt} names the shard: {}",
            db.message()
        );
        assert!(
            started.elapsed() < Duration::from_secs(5),
            "attempt {attempt} took {:?}",
            started.elapsed()
        );
        // The same session goes on, on the shard that is up.
        assert_eq!(
            value_of(&client, "fault_down", on_s1).await.unwrap(),
            format!("v{on_s1}")
        );
    }
    let other = proxy.connect().await;
    assert_eq!(
        value_of(&other, "fault_down", on_s1).await.unwrap(),
        format!("v{on_s1}")
    );

    // Back up: served again without anyone restarting the proxy.
    shards.clusters[1].start().unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        match value_of(&client, "fault_down", on_s2).await {
            Ok(v) => {
                assert_eq!(v, format!("v{on_s2}"));
                break;
            }
            Err(e) => assert!(Instant::now() < deadline, "never served again: {e}"),
        }
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
    let n: i64 = client
        .query_one("SELECT count(*) FROM fault_down", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 40);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_connection_killed_mid_transaction_gives_its_client_an_error_not_a_hang() {
    let shards = OwnShards::start();
    let proxy = shards.proxy();
    let setup = proxy.connect().await;
    let [_, on_s2] = keyed_table(&shards, &setup, "fault_killed").await;

    let client = proxy.connect().await;
    client.batch_execute("BEGIN").await.unwrap();
    client
        .execute(
            "UPDATE fault_killed SET v = 'changed' WHERE id = $1 /* fault_killed_tx */",
            &[&on_s2],
        )
        .await
        .unwrap();
    let shard = shards.connect(1).await;
    let killed: i64 = shard
        .query_one(
            "SELECT count(pg_terminate_backend(pid)) FROM pg_stat_activity \
             WHERE query LIKE '%fault_killed_tx%' AND pid <> pg_backend_pid()",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(killed, 1, "the client's shard connection");

    let next = tokio::time::timeout(
        Duration::from_secs(5),
        client.query_one("SELECT v FROM fault_killed WHERE id = $1", &[&on_s2]),
    )
    .await
    .expect("an answer, not a hang");
    let e = next.expect_err("its transaction is gone");
    // As directly: the shard's own FATAL, or the connection's loss.
    if let Some(db) = e.as_db_error() {
        assert!(
            [SqlState::ADMIN_SHUTDOWN, SqlState::CONNECTION_FAILURE].contains(db.code()),
            "{:?} {}",
            db.code(),
            db.message()
        );
    }

    // Nothing of the killed transaction stayed, and the next client is served.
    let after = proxy.connect().await;
    assert_eq!(
        value_of(&after, "fault_killed", on_s2).await.unwrap(),
        format!("v{on_s2}")
    );
    after.batch_execute("BEGIN").await.unwrap();
    after
        .execute(
            "UPDATE fault_killed SET v = 'again' WHERE id = $1",
            &[&on_s2],
        )
        .await
        .unwrap();
    after.batch_execute("COMMIT").await.unwrap();
    assert_eq!(
        value_of(&after, "fault_killed", on_s2).await.unwrap(),
        "again"
    );
}
