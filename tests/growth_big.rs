//! Issue 36's large move: a chunk of 1,000,000 rows moved to another shard while clients write
//! to it at about 1,000 writes a second through the proxy. Each write adds one to a row of the
//! chunk, so afterwards the chunk's sum must equal the number of writes acknowledged; the
//! longest write stall and the writes' p99 are printed. Placement is checked by CHECK PLACEMENT.
mod common;
mod growth_common;
mod routing_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::shards;
use growth_common::*;
use routing_common::simple_rows as rows;

const ROWS: i64 = 1_000_000;
const WRITERS: usize = 4;
/// Each writer's pace; together about 1,000 writes a second.
const WRITE_EVERY: Duration = Duration::from_millis(4);

/// Writes until `stop`: each an UPDATE adding one to a row of `keys`; the latency of each
/// acknowledged write.
async fn write(conn: String, keys: Vec<i64>, stop: Arc<AtomicBool>) -> Vec<Duration> {
    let (client, connection) = tokio_postgres::connect(&conn, tokio_postgres::NoTls)
        .await
        .expect("connect");
    tokio::spawn(connection);
    let update = client
        .prepare("UPDATE gbig SET n = n + 1 WHERE id = $1")
        .await
        .unwrap();
    let mut pace = tokio::time::interval(WRITE_EVERY);
    pace.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
    let mut latencies = Vec::new();
    for key in keys.iter().cycle() {
        if stop.load(Ordering::Relaxed) {
            break;
        }
        pace.tick().await;
        let started = Instant::now();
        let changed = client
            .execute(&update, &[key])
            .await
            .unwrap_or_else(|e| panic!("write of {key}: {e:?}"));
        assert_eq!(changed, 1, "write of {key}");
        latencies.push(started.elapsed());
    }
    latencies
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_million_row_chunk_moves_under_a_thousand_writes_a_second() {
    let proxy = alone("gbig", |_| {}).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE gbig (id bigint PRIMARY KEY, n int NOT NULL)
             PARTITION BY CONSISTENT HASH (id) PARTITIONS 2",
        ],
    )
    .await;
    let source = chunk_map(&c, "gbig").await[1];
    let target = 1 - source;
    // Filled on its shard, for speed: CHECK PLACEMENT proves where the rows are afterwards.
    let on_source = shards().connect(source).await;
    on_source
        .batch_execute(&format!(
            "INSERT INTO gbig_c1 SELECT i, 0 FROM generate_series(1, {}) i
              WHERE satisfies_hash_partition('gbig'::regclass, 2, 1, i::bigint) LIMIT {ROWS};
             ANALYZE gbig_c1",
            ROWS * 22 / 10
        ))
        .await
        .unwrap();
    assert_eq!(one(&c, "SELECT count(*) FROM gbig").await, ROWS.to_string());
    let keys: Vec<i64> = rows(
        &on_source,
        "SELECT id FROM gbig_c1 ORDER BY random() LIMIT 20000",
    )
    .await
    .iter()
    .map(|r| r[0].as_deref().unwrap().parse().unwrap())
    .collect();

    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..WRITERS)
        .map(|w| {
            let keys = keys.iter().copied().skip(w).step_by(WRITERS).collect();
            tokio::spawn(write(proxy.conn_string(), keys, stop.clone()))
        })
        .collect();
    tokio::time::sleep(Duration::from_secs(1)).await;
    let started = Instant::now();
    c.batch_execute(&format!("MOVE CHUNK 1 FOR gbig TO SHARD {}", name(target)))
        .await
        .expect("MOVE CHUNK");
    let took = started.elapsed();
    tokio::time::sleep(Duration::from_secs(1)).await;
    stop.store(true, Ordering::Relaxed);
    let mut latencies = Vec::new();
    for w in writers {
        latencies.extend(w.await.expect("writer"));
    }

    // Every acknowledged write is there, on the target.
    assert_eq!(chunk_map(&c, "gbig").await[1], target);
    assert_eq!(
        one(&c, "SELECT sum(n) FROM gbig").await,
        latencies.len().to_string()
    );
    assert_eq!(
        one(
            &shards().connect(target).await,
            "SELECT count(*) FROM gbig_c1"
        )
        .await,
        ROWS.to_string()
    );
    placed_exactly(&c, "gbig", &ROWS.to_string()).await;
    no_replication_left(&proxy, &c, "gbig").await;

    latencies.sort();
    let p99 = latencies[latencies.len() * 99 / 100];
    let longest = latencies.last().copied().unwrap_or_default();
    let moved = moves_of(&c, "gbig").await;
    eprintln!(
        "1,000,000-row chunk moved in {took:.1?} (cutover pause {} ms) under {} writes: \
         p99 {p99:.1?}, longest write stall {longest:.1?}",
        moved[0][10].as_deref().unwrap_or("?"),
        latencies.len()
    );
}
