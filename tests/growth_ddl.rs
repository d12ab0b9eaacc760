//! DDL on a family while one of its chunks copies to a shard that held none of it: the DDL
//! reaches only the shards holding chunks, so the tables the move made on the target miss it.
//! The cutover sees the difference under its lock and fails the move with nothing changed;
//! run again, the move carries the change. The real binary runs with a fail point that holds
//! the move after its copy while the test runs the DDL.
#![cfg(feature = "failpoints")]

mod common;
mod process_common;
mod routing_common;

use std::time::{Duration, Instant};

use common::shards;
use process_common::Proxy;
use routing_common::simple_rows as rows;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

async fn one(client: &Client, sql: &str) -> String {
    rows(client, sql).await[0][0].clone().expect("a value")
}

async fn has_table(shard: usize, table: &str) -> bool {
    one(
        &shards().connect(shard).await,
        &format!("SELECT to_regclass('{table}') IS NOT NULL"),
    )
    .await
        == "t"
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_during_a_move_to_a_new_shard_fails_the_move_cleanly() {
    let dir = tempfile::tempdir().expect("temp dir");
    let paused = dir.path().join("paused");
    let failpoint = format!("chunk_move.after_copy=pause({})", paused.display());
    let proxy = Proxy::start(dir.path(), Some(&failpoint)).await;
    let c = proxy.connect().await;
    for sql in [
        "CREATE SHARDED TABLE gd_c (id bigint PRIMARY KEY, v int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS 1",
        "INSERT INTO gd_c SELECT i, i FROM generate_series(1, 300) i",
    ] {
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    let source: usize = rows(&c, "SHOW CHUNKS FOR gd_c").await[0][3]
        .as_deref()
        .unwrap()[1..]
        .parse::<usize>()
        .unwrap()
        - 1;
    let target = 1 - source;
    assert!(!has_table(target, "gd_c").await);

    let mover = {
        let c = proxy.connect().await;
        let sql = format!("MOVE CHUNK 0 FOR gd_c TO SHARD s{}", target + 1);
        tokio::spawn(async move { c.simple_query(&sql).await })
    };
    let deadline = Instant::now() + Duration::from_secs(60);
    while !paused.exists() {
        assert!(Instant::now() < deadline, "the move never paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    // The target's copy of the family is made; the DDL reaches the source only.
    assert!(has_table(target, "gd_c").await);
    c.batch_execute("ALTER TABLE gd_c ADD COLUMN extra int DEFAULT 5")
        .await
        .unwrap();
    std::fs::remove_file(&paused).unwrap();
    let e = mover
        .await
        .unwrap()
        .expect_err("the move sees the family changed");
    assert_eq!(
        e.code(),
        Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
        "{e:?}"
    );
    let message = e.as_db_error().map(|d| d.message()).unwrap_or_default();
    assert!(message.contains("changed"), "{message}");

    // Nothing moved, nothing left on the target.
    assert!(!has_table(target, "gd_c").await);
    assert_eq!(
        one(&c, "SELECT count(*) FROM gd_c WHERE extra = 5").await,
        "300"
    );

    // Again, past the fail point (it holds every move): the column comes along.
    let again = {
        let c = proxy.connect().await;
        let sql = format!("MOVE CHUNK 0 FOR gd_c TO SHARD s{}", target + 1);
        tokio::spawn(async move { c.simple_query(&sql).await })
    };
    while !paused.exists() {
        assert!(Instant::now() < deadline, "the move never paused");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    std::fs::remove_file(&paused).unwrap();
    again.await.unwrap().expect("MOVE CHUNK");
    assert!(!has_table(source, "gd_c").await);
    let on_target = shards().connect(target).await;
    assert_eq!(
        one(&on_target, "SELECT count(*) FROM gd_c WHERE extra = 5").await,
        "300"
    );
    c.batch_execute("INSERT INTO gd_c (id, v) VALUES (301, 1)")
        .await
        .unwrap();
    assert_eq!(one(&c, "SELECT extra FROM gd_c WHERE id = 301").await, "5");
}
