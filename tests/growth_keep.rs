//! `[moves] keep_source_ms`: a moved chunk's tables stay on the source, detached and renamed,
//! for that long after the cutover, while SHOW MOVES shows the move cleaning up; then any
//! proxy's recovery drops them and the move is done. Checked on the shards themselves.
mod common;
mod growth_common;
mod routing_common;

use std::time::{Duration, Instant};

use growth_common::*;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_chunks_source_tables_are_kept_then_dropped() {
    let proxy = alone("gkeep", |c| {
        c.moves.keep_source_ms = 1500;
        c.moves.recovery_interval_ms = 200;
    })
    .await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE gq_c (id bigint PRIMARY KEY, v int NOT NULL DEFAULT 7)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
            "CREATE SHARDED TABLE gq_l (id bigint NOT NULL, line int NOT NULL,
               PRIMARY KEY (id, line),
               CONSTRAINT gq_l_fk FOREIGN KEY (id) REFERENCES gq_c (id))
               PARTITION BY REFERENCE (gq_l_fk)",
            "INSERT INTO gq_c SELECT i, 0 FROM generate_series(1, 1000) i",
            "INSERT INTO gq_l SELECT i, 1 FROM generate_series(1, 1000) i",
        ],
    )
    .await;
    let map = chunk_map(&c, "gq_c").await;
    let (source, target) = (map[1], 1 - map[1]);
    let on_source = common::shards().connect(source).await;
    let in_chunk = one(&on_source, "SELECT count(*) FROM gq_c_c1").await;
    c.simple_query(&format!("MOVE CHUNK 1 FOR gq_c TO SHARD {}", name(target)))
        .await
        .expect("MOVE CHUNK");

    let moves = moves_of(&c, "gq_c").await;
    assert_eq!(moves.len(), 1, "{moves:?}");
    assert_eq!(moves[0][5].as_deref(), Some("cleaning_up"));
    let id = moves[0][0].clone().unwrap();
    let kept = format!(
        "SELECT c.relname::text, c.relispartition FROM pg_class c
          WHERE c.relkind = 'r' AND c.relname LIKE 'shardwire\\_kept\\_%\\_{id}\\_%' ORDER BY 1"
    );
    let tables = rows_of(&on_source, &kept).await;
    assert_eq!(tables.len(), 2, "{tables:?}");
    assert!(tables.iter().all(|t| t[1].as_deref() == Some("f")));
    let counts: Vec<String> = {
        let mut v = Vec::new();
        for t in &tables {
            let name = t[0].as_deref().unwrap();
            v.push(one(&on_source, &format!("SELECT count(*) FROM {name}")).await);
        }
        v
    };
    assert_eq!(counts, [in_chunk.clone(), in_chunk.clone()]);
    // The chunk is the target's: reads and writes go there, placement is exact.
    assert_eq!(
        one(
            &on_source,
            "SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass('gq_c_c1')"
        )
        .await,
        "0"
    );
    c.batch_execute("UPDATE gq_c SET v = v + 1; INSERT INTO gq_c (id) SELECT i FROM generate_series(1001, 1010) i")
        .await
        .unwrap();
    placed_exactly(&c, "gq_c", "1010").await;
    placed_exactly(&c, "gq_l", "1000").await;

    // The chunk may move again while the old copy waits.
    c.simple_query(&format!("MOVE CHUNK 1 FOR gq_c TO SHARD {}", name(source)))
        .await
        .expect("moving back");
    placed_exactly(&c, "gq_c", "1010").await;

    // Due, the kept tables go and both moves are done.
    let started = Instant::now();
    loop {
        let states: Vec<_> = moves_of(&c, "gq_c")
            .await
            .iter()
            .map(|m| m[5].clone().unwrap())
            .collect();
        if states.iter().all(|s| s == "done") {
            break;
        }
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "moves still {states:?}"
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    for i in 0..2 {
        let shard = common::shards().connect(i).await;
        let left = one(
            &shard,
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'shardwire\\_kept\\_%'",
        )
        .await;
        assert_eq!(left, "0", "kept tables left on shard {i}");
    }
    no_replication_left(&proxy, &c, "gq_c").await;
    placed_exactly(&c, "gq_c", "1010").await;
}

async fn rows_of(client: &tokio_postgres::Client, sql: &str) -> Vec<Vec<Option<String>>> {
    routing_common::simple_rows(client, sql).await
}
