//! A chunk move's cutover and the statements in flight when it begins: one routed to the source
//! just before the hold ends there before the source's partitions go, and the rest of an
//! extended-protocol batch begun before the hold goes on where the batch was routed. Results
//! are checked through the proxy and on the shards.
mod common;
mod growth_common;
mod routing_common;

use std::time::{Duration, Instant};

use common::raw::{RawClient, Reply};
use common::{shards, TestProxy, APP};
use growth_common::*;

/// Long enough that a cutover waits out the statements these tests keep in flight.
const PAUSE_MS: u64 = 15_000;

/// A proxy on its own catalog with a one-level family `table` of 1,000 rows (v = 0); returns
/// a chunk on shard 0 (where statements on no table go), the other shard, and a key of the
/// chunk.
async fn family(name: &str) -> (TestProxy, usize, usize, String) {
    let proxy = alone(name, |c| c.moves.cutover_pause_ms = PAUSE_MS).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            &format!(
                "CREATE SHARDED TABLE {name} (id bigint PRIMARY KEY, v int NOT NULL)
                   PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
            ),
            &format!("INSERT INTO {name} SELECT i, 0 FROM generate_series(1, 1000) i"),
        ],
    )
    .await;
    let chunk = chunk_map(&c, name)
        .await
        .iter()
        .position(|&shard| shard == 0)
        .expect("a chunk on shard 0");
    let key = one(
        &shards().connect(0).await,
        &format!("SELECT min(id) FROM {name}_c{chunk}"),
    )
    .await;
    (proxy, chunk, 1, key)
}

/// Waits until some shard runs a statement containing `marker`.
async fn wait_running(marker: &str) {
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        for i in 0..shards().clusters.len() {
            let active = one(
                &shards().connect(i).await,
                &format!(
                    "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
                     AND query LIKE '%{marker}%' AND pid <> pg_backend_pid()"
                ),
            )
            .await;
            if active != "0" {
                return;
            }
        }
        assert!(Instant::now() < deadline, "{marker} never ran");
        tokio::time::sleep(Duration::from_millis(20)).await;
    }
}

/// `v` of row `key`, read through the proxy, and on `shard` directly.
async fn value(proxy: &TestProxy, table: &str, key: &str, shard: usize) -> (String, String) {
    let sql = format!("SELECT v FROM {table} WHERE id = {key}");
    let through = one(&proxy.connect().await, &sql).await;
    let there = one(&shards().connect(shard).await, &sql).await;
    (through, there)
}

/// One extended-protocol batch, sent whole to shard 0: a sleep, then an UPDATE of a row in
/// the chunk. PostgreSQL parses the UPDATE, and locks the family, only after the sleep, long
/// after the proxy routed it: the cutover must wait for the batch rather than lock and remove
/// the source's partitions under it (the UPDATE would then change nothing). The sleep outlasts
/// the copy, so the cutover begins while it runs.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_statement_routed_before_the_hold_ends_before_the_source_locks() {
    let (proxy, chunk, target, key) = family("gfq").await;
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    raw.parse("", "SELECT pg_sleep(6) AS gfq_marker")
        .bind("", "", &[])
        .execute("")
        .parse("", "UPDATE gfq SET v = v + 1 WHERE id = $1")
        .bind("", "", &[&key])
        .execute("")
        .sync()
        .flush()
        .await;
    wait_running("gfq_marker").await;

    let c = proxy.connect().await;
    c.simple_query(&format!(
        "MOVE CHUNK {chunk} FOR gfq TO SHARD {}",
        name(target)
    ))
    .await
    .expect("MOVE CHUNK");
    assert_eq!(chunk_map(&c, "gfq").await[chunk], target);

    let replies = raw.until_ready().await;
    assert_eq!(
        replies.iter().rev().take(2).collect::<Vec<_>>(),
        [&Reply::Ready(b'I'), &Reply::Complete("UPDATE 1".into())],
        "the UPDATE found its row: {replies:?}"
    );
    assert_eq!(
        value(&proxy, "gfq", &key, target).await,
        ("1".into(), "1".into())
    );
    assert_eq!(
        one(
            &shards().connect(0).await,
            &format!("SELECT to_regclass('gfq_c{chunk}') IS NULL")
        )
        .await,
        "t"
    );
    no_replication_left(&proxy, &c, "gfq").await;
}

/// A batch bound before the hold (Parse and Bind answered, no Execute yet) is finished while
/// the fence is closed, on the shard its Bind chose; only then does the cutover go on. A new
/// statement of another client meanwhile is held until the cutover ends.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_batch_begun_before_the_hold_goes_on_where_it_was_routed() {
    let (proxy, chunk, target, key) = family("gfb").await;
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    raw.parse("", "UPDATE gfb SET v = v + 1 WHERE id = $1")
        .bind("", "", &[&key])
        .flush_message()
        .flush()
        .await;
    assert_eq!(raw.next_reply().await, Reply::ParseComplete);
    assert_eq!(raw.next_reply().await, Reply::BindComplete);

    let mover = {
        let c = proxy.connect().await;
        let sql = format!("MOVE CHUNK {chunk} FOR gfb TO SHARD {}", name(target));
        tokio::spawn(async move { c.simple_query(&sql).await })
    };
    // The fence is closed once another client's statement is held.
    let prober = std::sync::Arc::new(proxy.connect().await);
    let deadline = Instant::now() + Duration::from_secs(60);
    let held = loop {
        assert!(Instant::now() < deadline, "the cutover never began");
        let probe = {
            let prober = prober.clone();
            tokio::spawn(async move { prober.simple_query("SELECT 1").await })
        };
        tokio::time::sleep(Duration::from_millis(300)).await;
        if !probe.is_finished() {
            break probe;
        }
        probe.await.unwrap().expect("probe");
    };
    // Keeps the cutover from locking the source until this test has looked.
    let blocker = shards().connect(0).await;
    blocker
        .batch_execute(&format!(
            "BEGIN; LOCK TABLE gfb_c{chunk} IN ACCESS SHARE MODE"
        ))
        .await
        .unwrap();

    raw.execute("").sync();
    let replies = tokio::time::timeout(Duration::from_secs(5), raw.round_trip())
        .await
        .expect("the batch's Execute passes the closed fence");
    assert_eq!(
        replies,
        [Reply::Complete("UPDATE 1".into()), Reply::Ready(b'I')]
    );
    assert!(!held.is_finished(), "the probe waits for the cutover");

    blocker.batch_execute("COMMIT").await.unwrap();
    mover.await.unwrap().expect("MOVE CHUNK");
    held.await
        .unwrap()
        .expect("the held probe runs after the cutover");
    let c = proxy.connect().await;
    assert_eq!(chunk_map(&c, "gfb").await[chunk], target);
    assert_eq!(
        value(&proxy, "gfb", &key, target).await,
        ("1".into(), "1".into())
    );
    no_replication_left(&proxy, &c, "gfb").await;
}
