//! What the growth tests share: a proxy on a catalog of its own, SHOW MOVES and SHOW CHUNKS
//! read as values, and the check that a move left no replication objects behind.
#![allow(dead_code)]

use crate::common::{self, TestProxy};
use crate::routing_common::simple_rows as rows;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

pub async fn one(client: &Client, sql: &str) -> String {
    rows(client, sql).await[0][0].clone().expect("a value")
}

/// A proxy on a catalog of its own (database `cat_<name>` on the first shard, made afresh):
/// MOVE CHUNK refuses to run while another proxy shares its catalog, and this file's tests run
/// at once.
pub async fn alone(name: &str, edit: impl FnOnce(&mut shardwire::config::Config)) -> TestProxy {
    let db = format!("cat_{name}");
    let admin = common::shards().connect(0).await;
    for sql in [
        format!("DROP DATABASE IF EXISTS {db} WITH (FORCE)"),
        format!("CREATE DATABASE {db}"),
    ] {
        admin.batch_execute(&sql).await.unwrap();
    }
    beside(name, edit)
}

/// Another proxy on the catalog of [`alone`]`(name)`.
pub fn beside(name: &str, edit: impl FnOnce(&mut shardwire::config::Config)) -> TestProxy {
    let shard0 = common::shards().url(0);
    let url = format!("{}/cat_{name}", &shard0[..shard0.rfind('/').unwrap()]);
    TestProxy::start_with(move |c| {
        c.catalog = Some(shardwire::config::CatalogConfig { url });
        edit(c);
    })
}

/// The configured name of shard `i` (the harness names them s1, s2, …).
pub fn name(i: usize) -> String {
    format!("s{}", i + 1)
}

/// SHOW MOVES' rows of `table` (the tests of this file share one catalog).
pub async fn moves_of(client: &Client, table: &str) -> Vec<Vec<Option<String>>> {
    rows(client, "SHOW MOVES")
        .await
        .into_iter()
        .filter(|m| m[1].as_deref() == Some(table))
        .collect()
}

pub async fn each(client: &Client, statements: &[&str]) {
    for sql in statements {
        client
            .batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
}

pub fn code(e: &tokio_postgres::Error) -> SqlState {
    e.code()
        .cloned()
        .unwrap_or_else(|| panic!("no SQLSTATE: {e:?}"))
}

/// The shard index of each chunk of `table`, by SHOW CHUNKS.
pub async fn chunk_map(proxy: &Client, table: &str) -> Vec<usize> {
    rows(proxy, &format!("SHOW CHUNKS FOR {table}"))
        .await
        .iter()
        .map(|r| {
            let shard = r[3].as_deref().unwrap();
            shard.trim_start_matches('s').parse::<usize>().unwrap() - 1
        })
        .collect()
}

/// Nothing of `table`'s moves is left on any shard: no replication slot, publication,
/// subscription or prepared half (by name: the tests of this file move chunks at once).
pub async fn no_replication_left(proxy: &TestProxy, client: &Client, table: &str) {
    let cluster = shardwire::txn::gid::ClusterTag::from_catalog(&proxy.config.catalog_endpoint());
    let names: Vec<String> = moves_of(client, table)
        .await
        .iter()
        .map(|m| {
            format!(
                "shardwire_move_{}_{}",
                cluster.as_str(),
                m[0].as_deref().unwrap()
            )
        })
        .collect();
    assert!(!names.is_empty(), "no move of {table}");
    for i in 0..common::shards().clusters.len() {
        let shard = common::shards().connect(i).await;
        let left: i64 = shard
            .query_one(
                "SELECT (SELECT count(*) FROM pg_replication_slots WHERE slot_name = ANY($1))
                      + (SELECT count(*) FROM pg_publication WHERE pubname = ANY($1))
                      + (SELECT count(*) FROM pg_subscription WHERE subname = ANY($1))
                      + (SELECT count(*) FROM pg_prepared_xacts
                          WHERE regexp_replace(gid, '_(target|source)$', '') = ANY($1))",
                &[&names],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(
            left, 0,
            "replication objects of {table}'s moves left on shard {i}"
        );
    }
}

/// Every row once, none misplaced, by CHECK PLACEMENT; the total through the proxy.
pub async fn placed_exactly(c: &Client, table: &str, total: &str) {
    let placement = rows(c, &format!("CHECK PLACEMENT FOR {table}")).await;
    let counted: i64 = placement
        .iter()
        .map(|r| r[3].as_deref().unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(counted.to_string(), total);
    assert!(placement.iter().all(|r| r[4].as_deref() == Some("0")));
    assert_eq!(
        one(c, &format!("SELECT count(*) FROM {table}")).await,
        total
    );
}
