//! What the routing tests share: four real shards, proxies in front of them, and checks made on
//! the shards themselves (row counts, statement logs).

#![allow(dead_code)]

use std::collections::BTreeSet;
use std::time::Duration;

use crate::common::{shards, use_shards, TestProxy};
use tokio_postgres::{Client, SimpleQueryMessage};

pub const SHARDS: usize = 4;

pub fn start() -> TestProxy {
    use_shards(SHARDS);
    TestProxy::start()
}

pub async fn simple_rows(client: &Client, sql: &str) -> Vec<Vec<Option<String>>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

pub fn tag(messages: &[SimpleQueryMessage]) -> u64 {
    messages
        .iter()
        .find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        })
        .expect("a command tag")
}

/// Rows of `table` on each shard, counted there.
pub async fn counts(table: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap_or_else(|e| panic!("count {table} on shard {i}: {e}"))
            .get(0);
        out.push(n);
    }
    out
}

/// Every shard logs every statement from now on.
pub async fn log_all_statements() {
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        c.batch_execute("ALTER SYSTEM SET log_statement = 'all'")
            .await
            .expect("log_statement");
        c.batch_execute("SELECT pg_reload_conf()")
            .await
            .expect("reload");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The shards whose statement log mentions `marker`.
pub fn shards_that_ran(marker: &str) -> BTreeSet<usize> {
    (0..SHARDS)
        .filter(|&i| {
            std::fs::read_to_string(shards().clusters[i].log_file())
                .unwrap_or_default()
                .contains(marker)
        })
        .collect()
}

pub async fn create_customers(client: &Client, name: &str) {
    client
        .batch_execute(&format!(
            "CREATE SHARDED TABLE {name} (cust_id bigint PRIMARY KEY, name text, score int) \
             PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO"
        ))
        .await
        .unwrap_or_else(|e| panic!("create {name}: {e}"));
}

/// The same rows in a sharded table and in one plain table on one PostgreSQL.
pub async fn twin_tables(client: &Client, name: &str) -> Client {
    client
        .batch_execute(&format!(
            "CREATE SHARDED TABLE {name} (id int PRIMARY KEY, grp int, v text, n numeric) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
        ))
        .await
        .expect("create");
    let rows: Vec<String> = (1..=300)
        .map(|i| {
            let v = if i % 11 == 0 {
                "NULL".to_string()
            } else {
                format!("'v{:03}'", (i * 37) % 101)
            };
            let n = if i % 13 == 0 {
                "NULL".to_string()
            } else {
                format!("{}.{}", (i * 7919) % 500 - 250, i % 10)
            };
            format!("({i}, {}, {v}, {n})", i % 5)
        })
        .collect();
    let insert = format!("INSERT INTO {name} VALUES {}", rows.join(", "));
    client.simple_query(&insert).await.expect("insert");
    // The reference copy lives on shard 0 only, under another name, outside the catalog.
    let plain = shards().connect(0).await;
    plain
        .batch_execute(&format!(
            "DROP TABLE IF EXISTS {name}_ref; CREATE TABLE {name}_ref (id int PRIMARY KEY, grp int, v text, n numeric); {}",
            insert.replace(&format!("INTO {name} "), &format!("INTO {name}_ref "))
        ))
        .await
        .expect("reference table");
    plain
}

/// The rows of a query through tokio-postgres's extended protocol, which asks for binary
/// results: (id, v) pairs.
pub async fn binary_rows(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> Vec<(i32, Option<String>)> {
    client
        .query(sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}
