//! Helpers of the row-movement tests: where a key's rows are, on the shards themselves.

#![allow(dead_code)]

use crate::common::shards;
use crate::routing_common::*;
use tokio_postgres::Client;

/// The shards holding rows of `table` with `column = id`.
pub async fn shards_of(table: &str, column: &str, id: i64) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let n: i64 = c
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE {column} = $1"),
                &[&id],
            )
            .await
            .expect("count")
            .get(0);
        if n > 0 {
            out.push(i);
        }
    }
    out
}

/// The shard a key's row lands on, found by inserting it through the proxy and looking.
pub async fn placed(client: &Client, table: &str, id: i64) -> usize {
    exec(
        client,
        &format!("INSERT INTO {table} VALUES ({id}, 'v{id}')"),
    )
    .await;
    let on = shards_of(table, "cust_id", id).await;
    assert_eq!(on.len(), 1, "{table} {id} on one shard");
    on[0]
}

/// Keys 1..=60 inserted; the first key, one on the same shard, one on another.
pub async fn seeded(client: &Client, table: &str) -> (i64, i64, i64, Vec<usize>) {
    let mut shard = Vec::new();
    for id in 1..=60 {
        shard.push(placed(client, table, id).await);
    }
    let same = (2..=60)
        .find(|&k| shard[k as usize - 1] == shard[0])
        .unwrap();
    let other = (2..=60)
        .find(|&k| shard[k as usize - 1] != shard[0])
        .unwrap();
    (1, same, other, shard)
}
