//! Checks of what sharding DDL left on the shards and in the catalog, for the tests that run it
//! through the proxy.

#![allow(dead_code)]

use std::process::Output;

use tokio_postgres::{Client, SimpleQueryMessage};

/// A table and every partition below it on one shard, as (relation, partition bound) sorted by
/// relation; the table itself has an empty bound. Empty when the shard has no such table.
pub async fn tree(client: &Client, table: &str) -> Vec<(String, String)> {
    client
        .query(
            "WITH RECURSIVE tree(oid) AS (
                 SELECT to_regclass($1)::oid
                 UNION ALL
                 SELECT i.inhrelid FROM pg_inherits i JOIN tree t ON i.inhparent = t.oid)
             SELECT c.relname::text, coalesce(pg_get_expr(c.relpartbound, c.oid), '')
             FROM tree t JOIN pg_class c ON c.oid = t.oid ORDER BY 1",
            &[&table],
        )
        .await
        .unwrap_or_else(|e| panic!("partitions of {table}: {e}"))
        .iter()
        .map(|r| (r.get(0), r.get(1)))
        .collect()
}

/// `(relation, bound)` pairs from string slices, sorted like [`tree`].
pub fn expect(pairs: &[(&str, &str)]) -> Vec<(String, String)> {
    let mut v: Vec<(String, String)> = pairs
        .iter()
        .map(|(a, b)| (a.to_string(), b.to_string()))
        .collect();
    v.sort();
    v
}

/// The hash chunks `chunks` of `table` with modulus `m`, plus the table itself.
pub fn hash_tree(table: &str, m: u32, chunks: &[u32]) -> Vec<(String, String)> {
    let mut v = vec![(table.to_string(), String::new())];
    v.extend(chunks.iter().map(|k| {
        (
            format!("{table}_c{k}"),
            format!("FOR VALUES WITH (modulus {m}, remainder {k})"),
        )
    }));
    v.sort();
    v
}

/// The rows of a simple query, every value as text (NULL as "").
pub async fn rows(client: &Client, sql: &str) -> Vec<Vec<String>> {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => Some(
                (0..r.len())
                    .map(|i| r.get(i).unwrap_or("").to_string())
                    .collect(),
            ),
            _ => None,
        })
        .collect()
}

/// The tables the catalog (schema `shardwire_catalog` on `client`) records.
pub async fn catalog_tables(client: &Client) -> Vec<String> {
    client
        .query(
            "SELECT schema_name || '.' || table_name FROM shardwire_catalog.table_entry ORDER BY 1",
            &[],
        )
        .await
        .expect("catalog tables")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

/// psql's output, asserting that no statement failed.
pub fn succeeded(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(
        !stderr.contains("ERROR"),
        "psql reported an error:\n{stderr}"
    );
    String::from_utf8_lossy(&out.stdout).into_owned()
}

/// psql's error output, asserting that a statement failed.
pub fn failed(out: Output) -> String {
    let stderr = String::from_utf8_lossy(&out.stderr).into_owned();
    assert!(
        stderr.contains("ERROR"),
        "expected an error, psql said:\n{stderr}\n{}",
        String::from_utf8_lossy(&out.stdout)
    );
    stderr
}
