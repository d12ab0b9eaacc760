//! Setup shared by the differential test (tests/differential.rs) and the random-query tester
//! (tests/qfuzz.rs): the reference database `df_ref` on shard 0's server, and the tables of
//! `data.rs` created through the proxy (sharded, duplicated, unsharded) and as plain tables in
//! the reference database, holding the same rows.

use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use crate::common::shards;
use crate::data::{proxy_ddl, Data, TABLES};

/// The plain PostgreSQL database every answer is compared with.
pub(crate) const REF_DB: &str = "df_ref";

/// `ERROR <SQLSTATE>: <message>`, or the client's own text when the server sent no error.
pub(crate) fn error_text(e: &tokio_postgres::Error) -> String {
    match e.as_db_error() {
        Some(db) => format!("ERROR {}: {}", db.code().code(), db.message()),
        None => format!("ERROR -----: {e}"),
    }
}

/// Creates [`REF_DB`] on shard 0's server; returns a client on it and its URL.
pub(crate) async fn reference_db() -> (Client, String) {
    shards().clusters[0]
        .create_database(REF_DB)
        .unwrap_or_else(|e| panic!("create {REF_DB}: {e}"));
    let ref_url = shards().clusters[0].url(REF_DB);
    let (plain, conn) = tokio_postgres::connect(&ref_url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to {REF_DB}: {e}"));
    tokio::spawn(conn);
    (plain, ref_url)
}

/// Inserts `rows` (VALUES tuples) into `table` on both sides, 500 rows a statement, checking
/// each statement's row count.
pub(crate) async fn insert_rows(proxy: &Client, plain: &Client, table: &str, rows: &[String]) {
    for chunk in rows.chunks(500) {
        let sql = format!("INSERT INTO {table} VALUES {}", chunk.join(", "));
        for (who, client) in [("proxy", proxy), ("reference", plain)] {
            let msgs = client
                .simple_query(&sql)
                .await
                .unwrap_or_else(|e| panic!("{who}: INSERT INTO {table}: {}", error_text(&e)));
            let n = msgs.iter().find_map(|m| match m {
                SimpleQueryMessage::CommandComplete(n) => Some(*n),
                _ => None,
            });
            assert_eq!(n, Some(chunk.len() as u64), "{who}: INSERT INTO {table}");
        }
    }
}

/// Creates every table of [`TABLES`] through the proxy and in the reference database, loads
/// `data` into both, and analyzes the reference tables.
pub(crate) async fn load(proxy: &Client, plain: &Client, data: &Data) {
    for t in TABLES {
        proxy
            .batch_execute(&proxy_ddl(t))
            .await
            .unwrap_or_else(|e| panic!("{}: {}", proxy_ddl(t), error_text(&e)));
        plain
            .batch_execute(&format!("CREATE TABLE {} ({})", t.name, t.body))
            .await
            .unwrap_or_else(|e| panic!("reference {}: {}", t.name, error_text(&e)));
    }
    for (table, rows) in &data.tables {
        insert_rows(proxy, plain, table, rows).await;
    }
    for t in TABLES {
        plain
            .batch_execute(&format!("ANALYZE {}", t.name))
            .await
            .expect("analyze");
    }
}
