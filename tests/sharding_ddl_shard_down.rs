//! CREATE SHARDED TABLE while one of its shards is down: refused with an error naming the shard,
//! nothing left on any shard (no table, no prepared transaction) and nothing in the catalog; once
//! the shard is back, the same statement succeeds. The test stops a shard, so it runs its own
//! two clusters rather than the shared ones. A second round stops a shard in the middle of a
//! CREATE, after the other shard has done its part.

mod common;
mod sharding_common;

use common::TestProxy;
use sharding_common::{catalog_tables, hash_tree, tree};
use shardwire::pgcluster::{free_port, ClusterOptions, LocalCluster, PgBinaries, StopMode};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// Stops the clusters even when an assertion fails.
struct Stopper<'a>(&'a [LocalCluster]);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        for c in self.0 {
            let _ = c.stop(StopMode::Immediate);
        }
    }
}

async fn connect(cluster: &LocalCluster) -> Client {
    let (client, conn) = tokio_postgres::connect(&cluster.url("app"), NoTls)
        .await
        .expect("connect to own shard");
    tokio::spawn(conn);
    client
}

async fn prepared_transactions(client: &Client) -> i64 {
    client
        .query_one("SELECT count(*) FROM pg_prepared_xacts", &[])
        .await
        .unwrap()
        .get(0)
}

const CREATE: &str = "CREATE SHARDED TABLE down_t (id bigint PRIMARY KEY, v text) \
                      PARTITION BY CONSISTENT HASH (id) PARTITIONS 4";

#[tokio::test(flavor = "multi_thread")]
async fn create_with_a_shard_down_leaves_nothing_and_succeeds_after_restart() {
    let tmp = tempfile::tempdir().unwrap();
    let bins = PgBinaries::locate().unwrap();
    let clusters: Vec<LocalCluster> = (0..2)
        .map(|i| {
            let options = ClusterOptions {
                fast_unsafe: true,
                ..ClusterOptions::default()
            };
            let dir = tmp.path().join(format!("s{i}"));
            LocalCluster::init(bins.clone(), &dir, free_port().unwrap(), options).unwrap()
        })
        .collect();
    let _stopper = Stopper(&clusters);
    for c in &clusters {
        c.start().unwrap();
        c.create_database("app").unwrap();
    }
    let urls: Vec<String> = clusters.iter().map(|c| c.url("app")).collect();
    let proxy = TestProxy::start_with(|c| {
        c.catalog = None;
        for (shard, url) in c.shards.iter_mut().zip(&urls) {
            shard.url = url.clone();
        }
        c.pool.connect_timeout_ms = 2000;
    });
    let client = proxy.connect().await;
    // A first statement opens control connections to both shards, so the stop below also breaks
    // pooled connections, not only new ones.
    client
        .batch_execute("CREATE DUPLICATED TABLE down_warm (id int PRIMARY KEY)")
        .await
        .unwrap();

    clusters[1].stop(StopMode::Immediate).unwrap();
    let e = client.batch_execute(CREATE).await.unwrap_err();
    let db = e.as_db_error().expect("an ErrorResponse");
    assert_eq!(db.code(), &SqlState::CONNECTION_FAILURE, "{}", db.message());
    assert!(db.message().contains("shard \"s2\""), "{}", db.message());
    let s1 = connect(&clusters[0]).await;
    assert_eq!(tree(&s1, "down_t").await, []);
    assert_eq!(prepared_transactions(&s1).await, 0);
    assert!(!catalog_tables(&s1).await.contains(&"public.down_t".into()));

    clusters[1].start().unwrap();
    let s2 = connect(&clusters[1]).await;
    assert_eq!(tree(&s2, "down_t").await, []);
    assert_eq!(prepared_transactions(&s2).await, 0);
    client.batch_execute(CREATE).await.unwrap();
    assert_eq!(tree(&s1, "down_t").await, hash_tree("down_t", 4, &[0, 2]));
    assert_eq!(tree(&s2, "down_t").await, hash_tree("down_t", 4, &[1, 3]));
    assert!(catalog_tables(&s1).await.contains(&"public.down_t".into()));

    // Now a shard stops in the middle: s2 is made to wait for a lock on the parent while s1 has
    // already done its part, then s2 goes down.
    let locker = connect(&clusters[1]).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE down_t IN ACCESS EXCLUSIVE MODE")
        .await
        .unwrap();
    let creating = {
        let client = proxy.connect().await;
        tokio::spawn(async move { client.batch_execute(CREATE_CHILD).await })
    };
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE wait_event_type = 'Lock' AND query LIKE '%down_child%'";
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(4);
    while s2.query_one(waiting, &[]).await.unwrap().get::<_, i64>(0) == 0 {
        assert!(
            std::time::Instant::now() < deadline,
            "the CREATE never reached s2"
        );
        tokio::time::sleep(std::time::Duration::from_millis(20)).await;
    }
    clusters[1].stop(StopMode::Immediate).unwrap();
    let e = creating.await.unwrap().unwrap_err();
    let db = e.as_db_error().expect("an ErrorResponse");
    assert!(db.message().contains("\"s2\""), "{}", db.message());
    assert_eq!(tree(&s1, "down_child").await, []);
    assert_eq!(prepared_transactions(&s1).await, 0);
    assert!(!catalog_tables(&s1)
        .await
        .contains(&"public.down_child".into()));

    clusters[1].start().unwrap();
    let s2 = connect(&clusters[1]).await;
    assert_eq!(tree(&s2, "down_child").await, []);
    assert_eq!(prepared_transactions(&s2).await, 0);
    client.batch_execute(CREATE_CHILD).await.unwrap();
    assert_eq!(
        tree(&s1, "down_child").await,
        hash_tree("down_child", 4, &[0, 2])
    );
    assert_eq!(
        tree(&s2, "down_child").await,
        hash_tree("down_child", 4, &[1, 3])
    );
    drop(client);
    drop(proxy);
}

const CREATE_CHILD: &str = "CREATE SHARDED TABLE down_child (pid bigint NOT NULL, n int NOT NULL, \
                            PRIMARY KEY (pid, n), \
                            CONSTRAINT down_fk FOREIGN KEY (pid) REFERENCES down_t (id)) \
                            PARTITION BY REFERENCE (down_fk)";
