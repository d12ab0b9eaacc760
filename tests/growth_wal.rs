//! A chunk move from a shard without `wal_level = logical` is refused before anything changes.
//! A file of its own: its proxy adds a shard to the catalog, which other tests' proxies (whose
//! configurations lack it) could not load.
mod common;

use common::TestProxy;
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

/// A move from a shard without `wal_level = logical` is refused before anything changes, with a
/// message naming the setting.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_source_without_logical_wal_is_refused() {
    let own = common::OwnCluster::start("replica_wal");
    {
        let admin = own.0.url("postgres");
        let (client, conn) = tokio_postgres::connect(&admin, tokio_postgres::NoTls)
            .await
            .unwrap();
        tokio::spawn(conn);
        client
            .batch_execute("ALTER SYSTEM SET wal_level = 'replica'")
            .await
            .unwrap();
    }
    own.0.stop(shardwire::pgcluster::StopMode::Fast).unwrap();
    own.0.start().unwrap();
    let url = own.url();
    let proxy = TestProxy::start_with(move |c| {
        c.shards.push(shardwire::config::ShardConfig {
            name: "plain".into(),
            url,
        })
    });
    let c = proxy.connect().await;
    c.batch_execute(
        "CREATE SHARDED TABLE gw_c (id bigint PRIMARY KEY)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await
    .unwrap();
    let chunks: Vec<Vec<Option<String>>> = c
        .simple_query("SHOW CHUNKS FOR gw_c")
        .await
        .unwrap()
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect();
    let on_plain = chunks
        .iter()
        .find(|r| r[3].as_deref() == Some("plain"))
        .and_then(|r| r[2].clone())
        .expect("a chunk on the new shard");
    let e = c
        .simple_query(&format!("MOVE CHUNK {on_plain} FOR gw_c TO SHARD s1"))
        .await
        .expect_err("refused");
    assert_eq!(
        e.code(),
        Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
        "{e:?}"
    );
    let message = e.as_db_error().unwrap().message();
    assert!(message.contains("wal_level = logical"), "{message}");
    let moves = c.simple_query("SHOW MOVES").await.unwrap();
    assert!(
        !moves
            .iter()
            .any(|m| matches!(m, SimpleQueryMessage::Row(_))),
        "a refused move is not recorded"
    );
}
