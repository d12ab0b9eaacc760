//! What the routing tests share: four real shards, proxies in front of them, and checks made on
//! the shards themselves (row counts, statement logs).

#![allow(dead_code)]

#[allow(unused_imports)]
pub use crate::common::{log_all_statements, shards_that_ran};
use crate::common::{shards, use_shards, TestProxy};
use futures::future::try_join_all;
use tokio_postgres::types::ToSql;
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
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"))
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

// Placement and pruning tests: tables over tablespaces, bulk inserts, where rows belong.

/// Runs each `;`-ended statement of `sql` on its own (sharding DDL takes one at a time).
pub async fn exec(client: &Client, sql: &str) {
    for stmt in sql.split(';').map(str::trim).filter(|s| !s.is_empty()) {
        client.batch_execute(stmt).await.unwrap_or_else(|e| {
            let why = e
                .as_db_error()
                .map_or(e.to_string(), |d| d.message().to_string());
            panic!("{stmt}: {why}")
        });
    }
}

/// `SELECT count(*) … <filter>` on each shard, directly; 0 where the table is not.
pub async fn counts_where(table: &str, filter: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        if !has_table(i, table).await {
            out.push(0);
            continue;
        }
        let c = shards().connect(i).await;
        let sql = format!("SELECT count(*) FROM {table} {filter}");
        let n: i64 = c
            .query_one(&sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql} on shard {i}: {e}"))
            .get(0);
        out.push(n);
    }
    out
}

/// Whether shard `i` has a table of that name.
pub async fn has_table(i: usize, table: &str) -> bool {
    let c = shards().connect(i).await;
    c.query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .expect("to_regclass")
        .get(0)
}

/// Tablespaces `{prefix}_t1`…`_t4` on s1…s4, and tablespace sets `{prefix}_tsa` = (s1, s2),
/// `{prefix}_tsb` = (s3, s4).
pub async fn tablespaces(client: &Client, prefix: &str) {
    for i in 1..=SHARDS {
        exec(
            client,
            &format!("CREATE TABLESPACE {prefix}_t{i} ON SHARD s{i}"),
        )
        .await;
    }
    exec(
        client,
        &format!("CREATE TABLESPACE SET {prefix}_tsa USING SHARDS (s1, s2)"),
    )
    .await;
    exec(
        client,
        &format!("CREATE TABLESPACE SET {prefix}_tsb USING SHARDS (s3, s4)"),
    )
    .await;
}

/// Multi-row INSERTs of `rows` (each a parenthesised VALUES row), 500 per statement.
pub async fn insert_rows(client: &Client, table: &str, columns: &str, rows: &[String]) {
    for chunk in rows.chunks(500) {
        let sql = format!(
            "INSERT INTO {table} ({columns}) VALUES {}",
            chunk.join(", ")
        );
        let msgs = client
            .simple_query(&sql)
            .await
            .unwrap_or_else(|e| panic!("INSERT INTO {table}: {e}"));
        let n = msgs.iter().find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n),
            _ => None,
        });
        assert_eq!(n, Some(chunk.len() as u64), "INSERT INTO {table}");
    }
}

/// A prepared single-row INSERT run once per parameter row (binary parameters), pipelined
/// 100 at a time.
pub async fn insert_prepared(
    client: &Client,
    sql: &str,
    rows: Vec<Vec<Box<dyn ToSql + Sync + Send>>>,
) {
    let stmt = client
        .prepare(sql)
        .await
        .unwrap_or_else(|e| panic!("prepare {sql}: {e}"));
    for chunk in rows.chunks(100) {
        let runs = chunk.iter().map(|row| {
            let params: Vec<&(dyn ToSql + Sync)> = row
                .iter()
                .map(|p| p.as_ref() as &(dyn ToSql + Sync))
                .collect();
            let stmt = &stmt;
            async move { client.execute(stmt, &params).await }
        });
        let done = try_join_all(runs)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        assert!(done.iter().all(|&n| n == 1), "{sql}");
    }
}

pub fn boxed<T: ToSql + Sync + Send + 'static>(v: T) -> Box<dyn ToSql + Sync + Send> {
    Box::new(v)
}

pub const REGIONS: [&str; 7] = ["OR", "WA", "AZ", "UT", "NY", "TX", "FL"];

/// The LIST table's partition (= shard) of a region.
pub fn region_shard(region: &str) -> usize {
    match region {
        "OR" | "WA" => 0,
        "AZ" | "UT" => 1,
        "NY" => 2,
        _ => 3,
    }
}

/// The RANGE table's partition (= shard) of a key: < 2500, < 5000, < 7500, < MAXVALUE.
pub fn range_shard(k: i64) -> usize {
    (k / 2500).clamp(0, 3) as usize
}

/// Prepared transactions that hold a lock on `table`, on every shard. Only this test's: the
/// binary's other tests may run two-phase commits of their own on the same shards meanwhile.
pub async fn prepared_holding(table: &str) -> i64 {
    let mut n = 0;
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        // A prepared transaction's locks are the ones without a backend pid.
        n += c
            .query_one(
                "SELECT count(*) FROM pg_locks WHERE pid IS NULL AND relation = $1::text::regclass",
                &[&table],
            )
            .await
            .expect("prepared transactions' locks")
            .get::<_, i64>(0);
    }
    n
}

/// The SQLSTATE of an error the proxy or a shard answered.
pub fn code(e: &tokio_postgres::Error) -> tokio_postgres::error::SqlState {
    e.code()
        .cloned()
        .unwrap_or_else(|| panic!("no SQLSTATE: {e}"))
}

/// The message of an error the proxy or a shard answered.
pub fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or(e.to_string(), |d| d.message().to_string())
}

/// Inserts 40 rows (id, name, number) into `table` and checks every shard got some.
pub async fn fill(client: &Client, table: &str) {
    let rows: Vec<String> = (1..=40).map(|i| format!("({i}, 'n{i}', {i})")).collect();
    client
        .simple_query(&format!("INSERT INTO {table} VALUES {}", rows.join(", ")))
        .await
        .expect("insert");
    assert!(
        counts(table).await.iter().all(|&n| n > 0),
        "rows on every shard"
    );
}

/// One value per shard, asked of each shard directly.
pub async fn on_each_shard(sql: &str) -> Vec<Option<String>> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let rows = c
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql} on shard {i}: {e}"));
        out.push(
            rows.into_iter()
                .find_map(|m| match m {
                    tokio_postgres::SimpleQueryMessage::Row(r) => {
                        Some(r.get(0).map(str::to_string))
                    }
                    _ => None,
                })
                .unwrap_or_else(|| panic!("{sql} on shard {i}: no row")),
        );
    }
    out
}
