//! `COPY (query) TO STDOUT` over several shards for queries whose rows the shards cannot simply
//! send one after another (ordered, limited, aggregated, joined), in text, CSV and binary, as a
//! simple query (psql) and through the extended protocol (tokio-postgres): byte for byte what
//! one PostgreSQL holding the rows writes (the same COPY of a plain copy of the rows on one
//! server, which proves each check).
mod common;
mod routing_common;

use common::{psql, shards};
use futures::TryStreamExt;
use routing_common::*;
use tokio_postgres::Client;

const QUERIES: [&str; 4] = [
    "SELECT id, v, n FROM {t} ORDER BY n DESC NULLS LAST, id LIMIT 17 OFFSET 3",
    "SELECT grp, count(*), sum(n), string_agg(v, ',' ORDER BY id) FROM {t} GROUP BY grp \
     ORDER BY grp",
    "SELECT a.id, b.v FROM {t} a JOIN {t} b ON a.grp = b.grp AND a.id < b.id \
     WHERE a.id < 12 AND b.id < 40 ORDER BY 1, 2",
    "SELECT DISTINCT v FROM {t} WHERE v IS NOT NULL ORDER BY v DESC LIMIT 5",
];

const FORMATS: [&str; 3] = ["", "(FORMAT csv, HEADER)", "(FORMAT binary)"];

async fn copy_out(client: &Client, sql: &str) -> Vec<u8> {
    let stream = client
        .copy_out(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    let chunks: Vec<bytes::Bytes> = stream.try_collect().await.expect("copy data");
    chunks.concat()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_of_a_combined_query_writes_what_one_postgres_writes() {
    let proxy = start();
    let c = proxy.connect().await;
    let plain = twin_tables(&c, "cq_t").await;
    for query in QUERIES {
        for format in FORMATS {
            let copy = format!("COPY ({query}) TO STDOUT {format}");
            let through = copy.replace("{t}", "cq_t");
            let reference = copy.replace("{t}", "cq_t_ref");
            // Extended protocol.
            let got = copy_out(&c, &through).await;
            let want = copy_out(&plain, &reference).await;
            assert!(!want.is_empty(), "{reference}");
            assert_eq!(got, want, "{through}");
            // Simple query (psql writes the data to its output); text and CSV only.
            if format.contains("binary") {
                continue;
            }
            let got = proxy.psql(&format!("{through};\n"));
            let want = psql(&shards().url(0), &[], &format!("{reference};\n"));
            assert!(
                got.stderr.is_empty(),
                "{}",
                String::from_utf8_lossy(&got.stderr)
            );
            assert_eq!(got.stdout, want.stdout, "{through}");
        }
    }

    // Inside a block, the block's own writes are read.
    let script = "BEGIN;\nUPDATE {t} SET v = 'changed' WHERE id IN (5, 6);\n\
                  COPY (SELECT id, v FROM {t} WHERE grp = 0 OR id IN (5, 6) ORDER BY v, id \
                  LIMIT 8) TO STDOUT (FORMAT csv);\nROLLBACK;\n";
    let got = proxy.psql(&script.replace("{t}", "cq_t"));
    let want = psql(&shards().url(0), &[], &script.replace("{t}", "cq_t_ref"));
    assert!(
        got.stderr.is_empty(),
        "{}",
        String::from_utf8_lossy(&got.stderr)
    );
    assert!(String::from_utf8_lossy(&got.stdout).contains("changed"));
    assert_eq!(got.stdout, want.stdout);

    // A shard's error reaches the client, and the session goes on.
    let failing = "COPY (SELECT id / (id - id) FROM cq_t ORDER BY id) TO STDOUT";
    let e = match c.copy_out(failing).await {
        Err(e) => e,
        Ok(stream) => stream
            .try_collect::<Vec<_>>()
            .await
            .expect_err("division by zero"),
    };
    assert_eq!(
        code(&e),
        tokio_postgres::error::SqlState::DIVISION_BY_ZERO,
        "{e}"
    );
    assert_eq!(
        simple_rows(&c, "SELECT count(*) FROM cq_t").await,
        [[Some("300".to_string())]]
    );

    c.batch_execute("DROP TABLE cq_t").await.unwrap();
    plain.batch_execute("DROP TABLE cq_t_ref").await.unwrap();
}
