//! SQLAlchemy's own test suite through the proxy: `test/orm/test_transaction.py` and
//! `test/dialect/postgresql/test_types.py` of the release tests/drivers/requirements.txt pins,
//! run with pytest over psycopg2 once against a plain database and once through the proxy
//! (four shards), must pass and fail the same tests. The suite makes its tables with plain
//! `CREATE TABLE` inside blocks that first read the catalog, creates enum types and reads them
//! back by OID, binds arrays of them, and expects its schemas `test_schema`, `test_schema_2` and
//! the extensions hstore and citext. scripts/drivers-venv (run by scripts/test) installs
//! pytest and unpacks the suite into target/drivers-src.
mod common;
mod routing_common;

use std::collections::BTreeSet;
use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{shards, APP};
use routing_common::*;

const SUITE: &[&str] = &[
    "test/orm/test_transaction.py",
    "test/dialect/postgresql/test_types.py",
];

/// What the suite expects in its database (README.unittests.rst).
const PREREQUISITES: &str = "CREATE SCHEMA test_schema; CREATE SCHEMA test_schema_2; \
                             CREATE EXTENSION hstore; CREATE EXTENSION citext";

fn repo() -> &'static Path {
    Path::new(env!("CARGO_MANIFEST_DIR"))
}

/// The unpacked source distribution of the pinned SQLAlchemy release.
fn suite_dir() -> PathBuf {
    let requirements = std::fs::read_to_string(repo().join("tests/drivers/requirements.txt"))
        .expect("tests/drivers/requirements.txt");
    let version = requirements
        .lines()
        .find_map(|l| l.strip_prefix("SQLAlchemy=="))
        .expect("SQLAlchemy pinned in tests/drivers/requirements.txt");
    let dir = repo().join(format!("target/drivers-src/sqlalchemy-{version}"));
    let python = repo().join("target/drivers-venv/bin/python");
    assert!(
        dir.join("test").is_dir() && python.exists(),
        "{} or {} is missing: run scripts/drivers-venv (scripts/test does)",
        dir.display(),
        python.display()
    );
    dir
}

/// One run of the suite: the tests that failed or errored, and how many passed.
#[derive(Debug)]
struct Run {
    failed: BTreeSet<String>,
    passed: usize,
    summary: String,
}

fn run_suite(dir: PathBuf, url: String) -> Run {
    let output: Output = Command::new(repo().join("target/drivers-venv/bin/python"))
        .current_dir(&dir)
        .args(["-m", "pytest", "-p", "no:cacheprovider", "-q", "-rfE"])
        .args(["--maxfail=100000", "--dburi", &url])
        .args(SUITE)
        .output()
        .unwrap_or_else(|e| panic!("run pytest: {e}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    // Test ids name the server version (`…_postgresql+psycopg2_15_18::…`), which is the same
    // on both sides; the outcome is all that is compared.
    let failed = stdout
        .lines()
        .filter_map(|l| {
            l.strip_prefix("FAILED ")
                .or_else(|| l.strip_prefix("ERROR "))
                .map(|rest| rest.split(" - ").next().unwrap_or(rest).to_string())
        })
        .collect();
    let summary = stdout
        .lines()
        .rev()
        .find(|l| l.contains(" passed") || l.contains(" failed") || l.contains(" error"))
        .unwrap_or("")
        .trim_matches(|c: char| c == '=' || c == ' ')
        .to_string();
    // "2 failed, 9230 passed, 22 skipped, 13 warnings in 173.38s (0:02:53)"
    let passed = summary
        .split(", ")
        .find(|part| part.contains(" passed"))
        .and_then(|part| part.split(' ').next()?.parse().ok())
        .unwrap_or_else(|| {
            panic!(
                "no pytest summary against {url}:\n{stdout}\n{}",
                String::from_utf8_lossy(&output.stderr)
            )
        });
    Run {
        failed,
        passed,
        summary,
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn sqlalchemy_suite_passes_through_the_proxy_as_it_does_direct() {
    let dir = suite_dir();
    let proxy = start();
    exec(&proxy.connect().await, PREREQUISITES).await;
    let direct_db = "sqla_direct";
    shards().clusters[0]
        .create_database(direct_db)
        .unwrap_or_else(|e| panic!("create {direct_db}: {e}"));
    let direct_url = shards().clusters[0].url(direct_db);
    let (direct, conn) = tokio_postgres::connect(&direct_url, tokio_postgres::NoTls)
        .await
        .expect("connect to the direct database");
    tokio::spawn(conn);
    direct
        .batch_execute(PREREQUISITES)
        .await
        .expect("the suite's schemas and extensions, direct");

    let through_proxy = format!("postgresql+psycopg2://{APP}:{APP}@{}/{APP}", proxy.addr);
    let direct_url = direct_url.replacen("postgres://", "postgresql+psycopg2://", 1);
    // Both at once: each mostly waits on its server.
    let (d, p) = (dir.clone(), dir);
    let direct_run = tokio::task::spawn_blocking(move || run_suite(d, direct_url));
    let proxy_run = tokio::task::spawn_blocking(move || run_suite(p, through_proxy));
    let direct_run = direct_run.await.expect("direct run");
    let proxy_run = proxy_run.await.expect("proxy run");
    eprintln!(
        "SQLAlchemy suite: direct {}; through the proxy {}",
        direct_run.summary, proxy_run.summary
    );
    let only_proxy: Vec<_> = proxy_run.failed.difference(&direct_run.failed).collect();
    let only_direct: Vec<_> = direct_run.failed.difference(&proxy_run.failed).collect();
    assert!(
        only_proxy.is_empty() && only_direct.is_empty(),
        "failed through the proxy only: {only_proxy:#?}\nfailed direct only: {only_direct:#?}"
    );
    assert_eq!(proxy_run.passed, direct_run.passed, "tests passed");
    assert!(
        direct_run.passed > 9000,
        "the suite ran: {}",
        direct_run.summary
    );
}
