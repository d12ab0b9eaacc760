//! Two proxies (the real binary) share a catalog; one is stopped with SIGSTOP across a chunk's
//! cutover, which the other runs. The stopped proxy's lease lapses, so the cutover does not
//! wait for it; once it runs again it must not route by its old chunk map: its first write to a
//! moved key, sent while it was stopped, lands on the chunk's new shard, and its client sees no
//! error. Checked on the shards themselves.
mod common;
mod process_common;
mod routing_common;

use std::time::Duration;

use common::shards;
use process_common::Proxy;
use routing_common::simple_rows as rows;
use tokio_postgres::Client;

async fn one(client: &Client, sql: &str) -> String {
    rows(client, sql).await[0][0].clone().expect("a value")
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_stopped_proxy_routes_by_the_new_map_when_it_runs_again() {
    let dir = tempfile::tempdir().expect("temp dir");
    let first = Proxy::start(dir.path(), None).await;
    let second = Proxy::start(dir.path(), None).await;
    let c = first.connect().await;
    for sql in [
        "CREATE SHARDED TABLE gp_c (id bigint PRIMARY KEY, v int NOT NULL)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
        "INSERT INTO gp_c SELECT i, 0 FROM generate_series(1, 400) i",
    ] {
        c.batch_execute(sql).await.unwrap();
    }
    let chunks = rows(&c, "SHOW CHUNKS FOR gp_c").await;
    let home: usize = chunks[1][3].as_deref().unwrap()[1..]
        .parse::<usize>()
        .unwrap()
        - 1;
    let away = 1 - home;
    let on_home = shards().connect(home).await;
    let key: i64 = one(&on_home, "SELECT min(id) FROM gp_c_c1")
        .await
        .parse()
        .unwrap();
    let new_key: i64 = one(
        &on_home,
        "SELECT min(i) FROM generate_series(1000::bigint, 2000) i
          WHERE satisfies_hash_partition('gp_c'::regclass, 4, 1, i)",
    )
    .await
    .parse()
    .unwrap();

    // A client of the second proxy has read the chunk, so that proxy knows the old map.
    let c2 = second.connect().await;
    assert_eq!(
        one(&c2, &format!("SELECT v FROM gp_c WHERE id = {key}")).await,
        "0"
    );
    second.signal("STOP");
    // Its lease (1.5 s) lapses; the cutover then goes on without it.
    tokio::time::sleep(Duration::from_millis(2500)).await;
    c.simple_query(&format!("MOVE CHUNK 1 FOR gp_c TO SHARD s{}", away + 1))
        .await
        .expect("MOVE CHUNK while the other proxy is stopped");
    let on_away = shards().connect(away).await;
    assert_eq!(
        one(
            &on_away,
            "SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass('gp_c_c1')"
        )
        .await,
        "1"
    );

    // Sent while the proxy is stopped: read from its socket the moment it runs again.
    let update = tokio::spawn(async move {
        let updated = c2
            .execute("UPDATE gp_c SET v = v + 1 WHERE id = $1", &[&key])
            .await;
        let inserted = c2
            .execute("INSERT INTO gp_c VALUES ($1, 7)", &[&new_key])
            .await;
        (updated, inserted, c2)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    second.signal("CONT");
    let (updated, inserted, c2) = tokio::time::timeout(Duration::from_secs(30), update)
        .await
        .expect("the resumed proxy answers")
        .unwrap();
    assert_eq!(updated.expect("no error for the update"), 1);
    assert_eq!(inserted.expect("no error for the insert"), 1);
    assert_eq!(
        one(&on_away, &format!("SELECT v FROM gp_c_c1 WHERE id = {key}")).await,
        "1"
    );
    assert_eq!(
        one(
            &on_away,
            &format!("SELECT v FROM gp_c_c1 WHERE id = {new_key}")
        )
        .await,
        "7"
    );
    assert_eq!(one(&c2, "SELECT count(*) FROM gp_c").await, "401");
    assert_eq!(one(&c, "SELECT sum(v) FROM gp_c").await, "8");
    let placement = rows(&c, "CHECK PLACEMENT FOR gp_c").await;
    assert!(
        placement.iter().all(|r| r[4].as_deref() == Some("0")),
        "{placement:?}"
    );
    drop(first);
    drop(second);
}
