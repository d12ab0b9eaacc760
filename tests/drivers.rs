//! Real drivers through the proxy: psycopg 3 with a registered enum, asyncpg binding an enum
//! and an array of it, SQLAlchemy's `Enum` and `ARRAY(Enum)` over psycopg2 and psycopg, and
//! SQLAlchemy's `metadata.create_all()` of a plain table in a block that first reads the
//! catalog. The user-defined type has another OID on each shard, and the sharded tables live on
//! the third and fourth shards only, so every row a driver reads was described by a shard
//! other than the one whose OIDs it caches. The drivers run from `target/drivers-venv`
//! (scripts/drivers-venv, which scripts/test runs); the scripts are in tests/drivers/.
mod common;
mod routing_common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::{shards, APP};
use routing_common::*;

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

fn python() -> PathBuf {
    let python = repo().join("target/drivers-venv/bin/python");
    assert!(
        python.exists(),
        "{} is missing: run scripts/drivers-venv (scripts/test does) to install the Python \
         drivers this test runs",
        python.display()
    );
    python
}

/// Runs `tests/drivers/{script}` with `args`; it must exit 0.
async fn run_script(script: &'static str, args: Vec<String>) {
    let python = python();
    let output = tokio::task::spawn_blocking(move || {
        Command::new(&python)
            .arg(repo().join("tests/drivers").join(script))
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("run {script}: {e}"))
    })
    .await
    .expect("script thread");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{script} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    eprint!("{stdout}");
}

/// Runs tests/drivers/`source` (one Java file) with Debian's pgjdbc on the class path
/// (scripts/drivers-java installs both), failing the test if it fails.
async fn run_java(source: &'static str, args: Vec<String>) {
    let output = tokio::task::spawn_blocking(move || {
        Command::new("java")
            .args(["-cp", "/usr/share/java/postgresql.jar"])
            .arg(repo().join("tests/drivers").join(source))
            .args(&args)
            .output()
            .unwrap_or_else(|e| panic!("run {source}: {e} (scripts/drivers-java installs Java)"))
    })
    .await
    .expect("java thread");
    let stdout = String::from_utf8_lossy(&output.stdout);
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        output.status.success(),
        "{source} failed ({}):\n{stdout}\n{stderr}",
        output.status
    );
    eprint!("{stdout}");
}

fn url(proxy: &common::TestProxy, scheme: &str) -> String {
    format!("{scheme}://{APP}:{APP}@{}/{APP}", proxy.addr)
}

/// The enum (made on every shard, where it gets another OID on each) and tablespace sets.
async fn setup(c: &tokio_postgres::Client) {
    tablespaces(c, "drv").await;
    exec(c, "CREATE TYPE drv_mood AS ENUM ('sad', 'ok', 'happy')").await;
    let mut oids = Vec::new();
    for i in 0..SHARDS {
        let oid: u32 = shards()
            .connect(i)
            .await
            .query_one("SELECT 'drv_mood'::regtype::oid", &[])
            .await
            .expect("the enum's OID")
            .get(0);
        oids.push(oid);
    }
    // Otherwise the test proves nothing.
    assert!(
        oids[2] != oids[0] && oids[3] != oids[0],
        "the enum has the same OID on the shards: {oids:?}"
    );
}

/// A sharded table on the third and fourth shards.
async fn sharded_table(c: &tokio_postgres::Client, name: &str) -> String {
    exec(
        c,
        &format!(
            "CREATE SHARDED TABLE {name} (id bigint PRIMARY KEY, mood drv_mood, moods drv_mood[]) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO TABLESPACE SET drv_tsb"
        ),
    )
    .await;
    name.to_string()
}

/// A plain table, which lives on the first shard.
async fn plain_table(c: &tokio_postgres::Client, name: &str) -> String {
    exec(
        c,
        &format!("CREATE TABLE {name} (id bigint PRIMARY KEY, mood drv_mood, moods drv_mood[])"),
    )
    .await;
    name.to_string()
}

/// Where `table`'s rows are: the number on each shard, -1 where it does not exist.
async fn rows_per_shard(table: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let n = match c
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
        {
            Ok(row) => row.get(0),
            Err(_) => -1,
        };
        out.push(n);
    }
    out
}

/// The sharded table's 40 rows are on the third and fourth shards, which alone hold it.
async fn assert_on_third_and_fourth(table: &str) {
    let on = rows_per_shard(table).await;
    assert!(
        on[0] == -1 && on[1] == -1 && on[2] > 0 && on[3] > 0 && on[2] + on[3] == 40,
        "{table}: rows per shard {on:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drivers_read_and_bind_user_defined_types_from_every_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    setup(&c).await;

    for (script, prefix) in [
        ("psycopg_enum.py", "drv_pg"),
        ("asyncpg_enum.py", "drv_apg"),
    ] {
        let sharded = sharded_table(&c, &format!("{prefix}_sharded")).await;
        let plain = plain_table(&c, &format!("{prefix}_plain")).await;
        run_script(
            script,
            vec![url(&proxy, "postgresql"), sharded.clone(), plain.clone()],
        )
        .await;
        assert_eq!(rows_per_shard(&plain).await, [40, -1, -1, -1], "{script}");
        assert_on_third_and_fourth(&sharded).await;
    }

    for (dialect, prefix) in [("psycopg2", "drv_sa2"), ("psycopg", "drv_sa3")] {
        let sharded = sharded_table(&c, &format!("{prefix}_sharded")).await;
        let plain = format!("{prefix}_plain");
        run_script(
            "sqlalchemy_enum.py",
            vec![
                url(&proxy, &format!("postgresql+{dialect}")),
                sharded.clone(),
                plain.clone(),
            ],
        )
        .await;
        // create_all made the plain table where the proxy reads it: the first shard alone.
        assert_eq!(rows_per_shard(&plain).await, [40, -1, -1, -1], "{dialect}");
        assert_on_third_and_fourth(&sharded).await;
    }
}

/// The resident memory of this process, which runs the proxy (kB).
fn rss_kb() -> u64 {
    std::fs::read_to_string("/proc/self/status")
        .ok()
        .and_then(|s| {
            s.lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1)?.parse().ok())
        })
        .unwrap_or(0)
}

/// Server-side cursors of real drivers stream a multi-shard ORDER BY through the proxy, each
/// row once and in order: psycopg 3 named cursors (with and without hold), psycopg2 named
/// cursors, SQLAlchemy's stream_results over psycopg and Django's QuerySet.iterator() over a
/// model whose table is sharded, the proxy's memory far below the rows'
/// size (it holds a batch per shard, not the result); and asyncpg's cursors (protocol-level
/// portals with a row limit, read from the shards as the cursor's fetches ask) and pgjdbc's
/// setFetchSize inside a transaction (the same, through named portals), measured the same way.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn drivers_stream_server_side_cursors_over_several_shards() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE drv_stream (id bigint PRIMARY KEY, grp int, pad text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    let rows = 100_000;
    c.simple_query(&format!(
        "INSERT INTO drv_stream SELECT i, i % 7, repeat('x', 400) FROM generate_series(1, {rows}) i"
    ))
    .await
    .expect("fill");
    // The rows are about 40 MB: a proxy that held a result would grow by that much.
    for drivers in ["cursors", "django", "portals", "pgjdbc"] {
        let before = rss_kb();
        let sampling = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(true));
        let sampler = {
            let sampling = sampling.clone();
            tokio::spawn(async move {
                let mut peak = 0;
                while sampling.load(std::sync::atomic::Ordering::Relaxed) {
                    peak = peak.max(rss_kb());
                    tokio::time::sleep(std::time::Duration::from_millis(20)).await;
                }
                peak
            })
        };
        let args = vec![
            proxy.addr.to_string(),
            "drv_stream".to_string(),
            rows.to_string(),
            drivers.to_string(),
        ];
        match drivers {
            "pgjdbc" => run_java("FetchSize.java", args).await,
            _ => run_script("server_cursors.py", args).await,
        }
        sampling.store(false, std::sync::atomic::Ordering::Relaxed);
        let peak = sampler.await.unwrap();
        let grown_mb = peak.saturating_sub(before) / 1024;
        eprintln!("the proxy grew by {grown_mb} MB while the {drivers} streamed");
        assert!(
            grown_mb < 25,
            "the proxy grew by {grown_mb} MB while {drivers} streamed ~40 MB of rows"
        );
    }
    exec(&c, "DROP TABLE drv_stream").await;
}
