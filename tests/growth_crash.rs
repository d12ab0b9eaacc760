//! A chunk move whose proxy dies: the real `shardwire` binary, built with fail points, is killed
//! (SIGKILL) at each step of a MOVE CHUNK — after the copy, with both shards' halves of the
//! cutover prepared, and after the catalog gave the chunk to the target — then started again
//! without fail points. Its recovery takes the move over once the dead proxy's lease lapses and
//! settles it: rolled back before the hand-over, finished after. Every row is then exactly once,
//! on its chunk's shard (checked on the shards and by CHECK PLACEMENT), and no replication slot,
//! publication, subscription or prepared transaction is left. A SPLIT CHUNK whose proxy dies
//! with its shard's half prepared is rolled back the same way.
#![cfg(feature = "failpoints")]

mod common;
mod process_common;
mod routing_common;

use std::time::{Duration, Instant};

use common::shards;
use process_common::Proxy;
use routing_common::simple_rows as rows;
use tokio_postgres::Client;

const DEADLINE: Duration = Duration::from_secs(30);

async fn one(client: &Client, sql: &str) -> String {
    rows(client, sql).await[0][0].clone().expect("a value")
}

/// Shard index of each chunk of `table`, by SHOW CHUNKS (the harness names shards s1, s2, …).
async fn chunk_map(proxy: &Client, table: &str) -> Vec<usize> {
    rows(proxy, &format!("SHOW CHUNKS FOR {table}"))
        .await
        .iter()
        .map(|r| r[3].as_deref().unwrap()[1..].parse::<usize>().unwrap() - 1)
        .collect()
}

async fn leftovers(i: usize) -> String {
    one(
        &shards().connect(i).await,
        "SELECT (SELECT count(*) FROM pg_replication_slots)
              + (SELECT count(*) FROM pg_publication)
              + (SELECT count(*) FROM pg_subscription)
              + (SELECT count(*) FROM pg_prepared_xacts)",
    )
    .await
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_whose_proxy_dies_is_settled_by_the_next() {
    let dir = tempfile::tempdir().expect("temp dir");
    for (n, (point, handed_over)) in [
        ("chunk_move.after_copy", false),
        ("chunk_move.before_hand_over", false),
        ("chunk_move.after_hand_over", true),
    ]
    .into_iter()
    .enumerate()
    {
        let (root, child) = (format!("gk{n}_c"), format!("gk{n}_l"));
        let mut proxy = Proxy::start(dir.path(), Some(&format!("{point}=kill"))).await;
        let c = proxy.connect().await;
        for sql in [
            format!(
                "CREATE SHARDED TABLE {root} (id bigint PRIMARY KEY, v int)
                   PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
            ),
            format!(
                "CREATE SHARDED TABLE {child} (id bigint NOT NULL, CONSTRAINT {child}_fk
                   FOREIGN KEY (id) REFERENCES {root} (id)) PARTITION BY REFERENCE ({child}_fk)"
            ),
            format!("INSERT INTO {root} SELECT i, 0 FROM generate_series(1, 500) i"),
            format!("INSERT INTO {child} SELECT i FROM generate_series(1, 500) i"),
        ] {
            c.batch_execute(&sql)
                .await
                .unwrap_or_else(|e| panic!("{sql}: {e}"));
        }
        let before = chunk_map(&c, &root).await;
        let source = before[1];
        let target = 1 - source;
        // The proxy of the step before is gone, but its lease stays live a moment: the
        // cutover backs off until it lapses (no acknowledgement comes from a dead proxy).
        c.simple_query(&format!("MOVE CHUNK 1 FOR {root} TO SHARD s{}", target + 1))
            .await
            .expect_err(&format!("{point}: the proxy answered the move"));
        proxy.wait_killed().await;
        assert!(
            proxy.output().contains(point),
            "{point}: killed elsewhere:\n{}",
            proxy.output()
        );

        let proxy = Proxy::restart(proxy, dir.path(), None, "").await;
        let c = proxy.connect().await;
        let expected = if handed_over { "done" } else { "rolled_back" };
        let started = Instant::now();
        loop {
            let moves = rows(&c, "SHOW MOVES").await;
            let state = moves.last().and_then(|m| m[5].clone()).unwrap_or_default();
            if state == expected {
                break;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "{point}: the move is {state}, not {expected}:\n{moves:?}\n{}",
                proxy.output()
            );
            tokio::time::sleep(Duration::from_millis(100)).await;
        }

        // The chunk is where the catalog says, and only there.
        let owner = if handed_over { target } else { source };
        assert_eq!(chunk_map(&c, &root).await[1], owner, "{point}");
        for (shard, present) in [(owner, "1"), (1 - owner, "0")] {
            let on = shards().connect(shard).await;
            for table in [&root, &child] {
                let attached = format!(
                    "SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass('{table}_c1')"
                );
                assert_eq!(
                    one(&on, &attached).await,
                    present,
                    "{point}: {table} on {shard}"
                );
            }
        }
        // Every row once.
        assert_eq!(
            one(&c, &format!("SELECT count(*) FROM {root}")).await,
            "500"
        );
        assert_eq!(
            one(&c, &format!("SELECT count(*) FROM {child}")).await,
            "500"
        );
        let placement = rows(&c, &format!("CHECK PLACEMENT FOR {root}")).await;
        let total: i64 = placement
            .iter()
            .map(|r| r[3].as_deref().unwrap().parse::<i64>().unwrap())
            .sum();
        assert_eq!(total, 500, "{point}: {placement:?}");
        assert!(
            placement.iter().all(|r| r[4].as_deref() == Some("0")),
            "{point}: {placement:?}"
        );
        for i in 0..2 {
            assert_eq!(leftovers(i).await, "0", "{point}: left on shard {i}");
        }
        // The chunk moves again, from wherever it is now.
        c.simple_query(&format!("MOVE CHUNK 1 FOR {root} TO SHARD s{}", 2 - owner))
            .await
            .unwrap_or_else(|e| panic!("{point}: moving again: {e}\n{}", proxy.output()));
        assert_eq!(chunk_map(&c, &root).await[1], 1 - owner);
        assert_eq!(
            one(&c, &format!("SELECT count(*) FROM {root}")).await,
            "500"
        );
        drop(proxy);
    }

    // A split whose proxy dies with the shard's half prepared and the catalog unchanged is
    // rolled back by the next proxy: the chunk as it was, and it splits again.
    let mut proxy = Proxy::start(dir.path(), Some("chunk_split.before_record=kill")).await;
    let c = proxy.connect().await;
    for sql in [
        "CREATE SHARDED TABLE gk_s (id bigint PRIMARY KEY) PARTITION BY CONSISTENT HASH (id)
           PARTITIONS 4",
        "INSERT INTO gk_s SELECT i FROM generate_series(1, 500) i",
    ] {
        c.batch_execute(sql).await.unwrap();
    }
    let home = chunk_map(&c, "gk_s").await[1];
    c.simple_query("SPLIT CHUNK 1 FOR gk_s")
        .await
        .expect_err("the proxy died mid-split");
    proxy.wait_killed().await;
    assert!(proxy.output().contains("chunk_split.before_record"));
    let on = shards().connect(home).await;
    let prepared = "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardwire_split_%'";
    assert_eq!(one(&on, prepared).await, "1");
    let proxy = Proxy::restart(proxy, dir.path(), None, "").await;
    let c = proxy.connect().await;
    let started = Instant::now();
    while one(&on, prepared).await != "0" {
        assert!(
            started.elapsed() < DEADLINE,
            "the split's half is still prepared\n{}",
            proxy.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let bound = "SELECT pg_get_expr(relpartbound, oid) FROM pg_class WHERE relname = 'gk_s_c1'";
    assert_eq!(
        one(&on, bound).await,
        "FOR VALUES WITH (modulus 4, remainder 1)"
    );
    assert_eq!(chunk_map(&c, "gk_s").await.len(), 4);
    assert_eq!(one(&c, "SELECT count(*) FROM gk_s").await, "500");
    c.simple_query("SPLIT CHUNK 1 FOR gk_s")
        .await
        .unwrap_or_else(|e| panic!("splitting again: {e}\n{}", proxy.output()));
    assert_eq!(
        one(&on, bound).await,
        "FOR VALUES WITH (modulus 8, remainder 1)"
    );
    assert_eq!(chunk_map(&c, "gk_s").await.len(), 5);
    assert_eq!(one(&c, "SELECT count(*) FROM gk_s").await, "500");
    for i in 0..2 {
        assert_eq!(leftovers(i).await, "0", "split: left on shard {i}");
    }
}
