//! Random-query differential tester (SQLancer-style; docs/qfuzz.md): a seeded generator
//! (tests/qfuzz/) writes read-only SELECTs over the differential test's tables
//! (tests/differential/data.rs) and the tester's own `qf_` tables, each is run through the
//! proxy (four shards) and on one plain PostgreSQL holding the same rows (database `df_ref`),
//! with the simple protocol, and the answers — column names and every value as text — must be
//! the same: in order when the query's outermost ORDER BY orders by every output column (the
//! generator knows), else as sorted multisets.
//!
//! Outcomes per query: equal; DIFFERENT (a failure); refused by the proxy with SQLSTATE 0A000
//! (counted and listed by message, not a failure); the proxy's row limit, 54000 (counted);
//! both sides fail (counted: the generator should rarely write invalid SQL); only the proxy
//! fails (a failure); only the reference fails (a failure); too big (the reference timed out,
//! or answered so much that the proxy did: counted). Every failure is printed with the seed,
//! the query's index, its text and both answers; the test fails if there is any.
//!
//! Environment: `QFUZZ_QUERIES` (default 2000), `QFUZZ_SEED` (default 20261206, decimal or
//! 0x-hex), `QFUZZ_ONLY=<index>` (run that query alone, printing both answers),
//! `QFUZZ_SHOW=1` (print every query), `QFUZZ_WORKERS` (connections per side, default 4);
//! `QFUZZ_DUMP` and `QFUZZ_SETUP` (see the tests at the end, which need no database).
//! Query `i` of seed `s` depends on nothing else, so `QFUZZ_SEED=s QFUZZ_ONLY=i` reproduces it.

#[path = "qfuzz/calls.rs"]
mod calls;
mod common;
#[path = "qfuzz/compare.rs"]
mod compare;
#[allow(dead_code)]
#[path = "differential/data.rs"]
mod data;
#[path = "qfuzz/expr.rs"]
mod expr;
#[path = "qfuzz/from.rs"]
mod from;
#[path = "qfuzz/pred.rs"]
mod pred;
#[path = "qfuzz/query.rs"]
mod query;
#[path = "qfuzz/rng.rs"]
mod rng;
#[path = "qfuzz/schema.rs"]
mod schema;
#[path = "differential/setup.rs"]
mod setup;
#[path = "qfuzz/with.rs"]
mod with;

use std::collections::BTreeMap;
use std::fmt::Write as _;
use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{use_shards, TestProxy};
use compare::{classify, compare, message_kind, run, Answer, Outcome};
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

const SHARDS: usize = 4;
const DEFAULT_SEED: u64 = 20_261_206;
const DEFAULT_QUERIES: u64 = 2000;
const DEFAULT_WORKERS: usize = 4;

// ---------------------------------------------------------------------------------------------
// The run

struct Settings {
    seed: u64,
    queries: u64,
    only: Option<u64>,
    show: bool,
    workers: usize,
}

fn parse_u64(name: &str, text: &str) -> u64 {
    let t = text.trim();
    let parsed = match t.strip_prefix("0x") {
        Some(hex) => u64::from_str_radix(hex, 16),
        None => t.parse(),
    };
    parsed.unwrap_or_else(|e| panic!("{name}={text}: {e}"))
}

fn settings() -> Settings {
    let var = |name: &str| std::env::var(name).ok().filter(|v| !v.trim().is_empty());
    Settings {
        seed: var("QFUZZ_SEED").map_or(DEFAULT_SEED, |v| parse_u64("QFUZZ_SEED", &v)),
        queries: var("QFUZZ_QUERIES").map_or(DEFAULT_QUERIES, |v| parse_u64("QFUZZ_QUERIES", &v)),
        only: var("QFUZZ_ONLY").map(|v| parse_u64("QFUZZ_ONLY", &v)),
        show: var("QFUZZ_SHOW").is_some_and(|v| v != "0"),
        workers: var("QFUZZ_WORKERS").map_or(DEFAULT_WORKERS, |v| {
            parse_u64("QFUZZ_WORKERS", &v).max(1) as usize
        }),
    }
}

struct Record {
    index: u64,
    sql: String,
    outcome: Outcome,
    /// Rows of the reference's answer.
    rows: usize,
}

async fn connect_ref(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect to the reference database: {e}"));
    tokio::spawn(conn);
    client
}

/// Creates the tester's own tables on both sides and fills them.
async fn load_own_tables(proxy: &Client, plain: &Client) {
    for (name, proxy_ddl, ref_ddl) in schema::qf_tables() {
        proxy
            .batch_execute(&proxy_ddl)
            .await
            .unwrap_or_else(|e| panic!("{proxy_ddl}: {}", setup::error_text(&e)));
        plain
            .batch_execute(&ref_ddl)
            .await
            .unwrap_or_else(|e| panic!("reference {name}: {}", setup::error_text(&e)));
    }
    for (table, rows) in schema::qf_rows() {
        setup::insert_rows(proxy, plain, table, &rows).await;
        plain
            .batch_execute(&format!("ANALYZE {table}"))
            .await
            .expect("analyze");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn random_reads_answer_as_one_postgres() {
    use_shards(SHARDS);
    let s = settings();
    eprintln!(
        "qfuzz: seed {} ({} queries{}); reproduce one with QFUZZ_SEED={} QFUZZ_ONLY=<index>",
        s.seed,
        s.queries,
        s.only.map_or(String::new(), |i| format!(", only #{i}")),
        s.seed
    );
    let started = Instant::now();
    let proxy = TestProxy::start();
    let (plain, ref_url) = setup::reference_db().await;
    let proxy_client = proxy.connect().await;
    setup::load(&proxy_client, &plain, &data::generate()).await;
    load_own_tables(&proxy_client, &plain).await;
    eprintln!("qfuzz: tables loaded in {:.1?}", started.elapsed());

    let indexes: Vec<u64> = match s.only {
        Some(i) => vec![i],
        None => (0..s.queries).collect(),
    };
    let indexes = Arc::new(indexes);
    let next = Arc::new(AtomicU64::new(0));
    let records = Arc::new(Mutex::new(Vec::new()));
    let run_started = Instant::now();
    let mut workers = Vec::new();
    for _ in 0..s.workers.min(indexes.len()) {
        let mut proxy_c = proxy.connect().await;
        let mut ref_c = connect_ref(&ref_url).await;
        let (indexes, next, records) = (indexes.clone(), next.clone(), records.clone());
        let (seed, show, only) = (s.seed, s.show, s.only.is_some());
        let proxy_conn = proxy.conn_string();
        let ref_url = ref_url.clone();
        workers.push(tokio::spawn(async move {
            loop {
                let i = next.fetch_add(1, Ordering::SeqCst) as usize;
                let Some(&index) = indexes.get(i) else { break };
                let q = query::generate(seed, index);
                if only {
                    eprintln!("qfuzz #{index}: {}", q.sql);
                }
                let (want, got) = tokio::join!(run(&ref_c, &q.sql), run(&proxy_c, &q.sql));
                if show {
                    let rows = want
                        .as_ref()
                        .map_or_else(|f| f.to_string(), |a| format!("{} rows", a.rows.len()));
                    eprintln!("qfuzz #{index} ({rows}): {}", q.sql);
                }
                if only {
                    eprintln!("  reference: {:?}\n  proxy: {:?}", want, got);
                }
                let outcome = classify(q.ordered, &want, &got);
                if let Outcome::Bad(kind, what) = &outcome {
                    eprintln!(
                        "\nqfuzz {kind}: seed {seed} index {index} \
                         (QFUZZ_SEED={seed} QFUZZ_ONLY={index})\n  {}\n  {what}\n",
                        q.sql
                    );
                }
                // A connection that timed out or broke is replaced.
                if want
                    .as_ref()
                    .is_err_and(|f| f.code == "TIMEOUT" || f.code == "-----")
                {
                    ref_c = connect_ref(&ref_url).await;
                }
                if got
                    .as_ref()
                    .is_err_and(|f| f.code == "TIMEOUT" || f.code == "-----")
                {
                    let (c, conn) = tokio_postgres::connect(&proxy_conn, NoTls)
                        .await
                        .unwrap_or_else(|e| panic!("reconnect to the proxy: {e}"));
                    tokio::spawn(conn);
                    proxy_c = c;
                }
                let done = {
                    let mut r = records.lock().unwrap();
                    r.push(Record {
                        index,
                        sql: q.sql,
                        outcome,
                        rows: want.as_ref().map_or(0, |a| a.rows.len()),
                    });
                    r.len()
                };
                if done % 500 == 0 {
                    eprintln!("qfuzz: {done} queries done");
                }
            }
        }));
    }
    for w in workers {
        w.await.expect("worker");
    }
    let elapsed = run_started.elapsed();
    let mut records = std::mem::take(&mut *records.lock().unwrap());
    records.sort_by_key(|r| r.index);
    let summary = summarize(&s, &records, elapsed);
    eprintln!("{summary}");

    // The proxy still answers.
    let rows = proxy_client
        .simple_query("SELECT count(*) FROM df_customers")
        .await
        .expect("the proxy still answers");
    assert!(rows
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(r) if r.get(0) == Some("500"))));

    let bad: Vec<&Record> = records
        .iter()
        .filter(|r| matches!(r.outcome, Outcome::Bad(..)))
        .collect();
    if !bad.is_empty() {
        let mut report = format!(
            "{} of {} queries failed (seed {}); each was printed above in full:\n",
            bad.len(),
            records.len(),
            s.seed
        );
        for r in &bad {
            if let Outcome::Bad(kind, what) = &r.outcome {
                let first = what.lines().next().unwrap_or("");
                let _ = writeln!(report, "  #{} {kind}: {first}\n      {}", r.index, r.sql);
            }
        }
        panic!("{report}");
    }
}

/// The end-of-run summary: counts, refusals and failures by message, grammar coverage.
fn summarize(s: &Settings, records: &[Record], elapsed: Duration) -> String {
    let mut equal = 0;
    let mut row_limit = 0;
    let mut too_big = 0;
    let mut refused: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    let mut both: BTreeMap<String, (usize, u64)> = BTreeMap::new();
    let mut bad: BTreeMap<&str, usize> = BTreeMap::new();
    for r in records {
        match &r.outcome {
            Outcome::Equal => equal += 1,
            Outcome::RowLimit => row_limit += 1,
            Outcome::TooBig => too_big += 1,
            Outcome::Refused(m) => {
                let e = refused.entry(m.clone()).or_insert((0, r.index));
                e.0 += 1;
            }
            Outcome::BothFailed(m) => {
                let e = both.entry(m.clone()).or_insert((0, r.index));
                e.0 += 1;
            }
            Outcome::Bad(kind, _) => *bad.entry(kind).or_default() += 1,
        }
    }
    let count = |m: &BTreeMap<String, (usize, u64)>| m.values().map(|v| v.0).sum::<usize>();
    let failures: usize = bad.values().sum();
    let rows: Vec<usize> = records.iter().map(|r| r.rows).collect();
    let mut out = format!(
        "\nqfuzz summary: seed {}, {} queries in {:.1?} ({:.1} ms each)\n  equal {equal}, \
         refused (0A000) {}, row limit (54000) {row_limit}, both failed {}, too big {too_big}, \
         failures {failures} {:?}\n  reference rows: {} in all, {} at most, {} queries empty",
        s.seed,
        records.len(),
        elapsed,
        elapsed.as_secs_f64() * 1000.0 / records.len().max(1) as f64,
        count(&refused),
        count(&both),
        bad,
        rows.iter().sum::<usize>(),
        rows.iter().max().unwrap_or(&0),
        rows.iter().filter(|n| **n == 0).count()
    );
    let top = |title: &str, m: &BTreeMap<String, (usize, u64)>, out: &mut String| {
        if m.is_empty() {
            return;
        }
        let mut v: Vec<(&String, &(usize, u64))> = m.iter().collect();
        v.sort_by(|a, b| b.1 .0.cmp(&a.1 .0).then(a.0.cmp(b.0)));
        let _ = write!(out, "\n  {title}:");
        for (msg, (n, first)) in v.iter().take(12) {
            let _ = write!(out, "\n    {n:>5} × {msg} (e.g. #{first})");
        }
        if v.len() > 12 {
            let _ = write!(out, "\n    … {} more kinds", v.len() - 12);
        }
    };
    top("refusals (0A000), by message", &refused, &mut out);
    top("both sides failed, by message", &both, &mut out);
    let sqls: Vec<&str> = records.iter().map(|r| r.sql.as_str()).collect();
    let _ = write!(out, "\n  grammar coverage: {}", coverage(&sqls));
    out
}

/// The grammar's features, each with the texts (`|`-separated) that show it in a query.
const FEATURES: &[(&str, &str)] = &[
    ("JOIN", " JOIN "),
    ("LEFT", "LEFT "),
    ("RIGHT", "RIGHT "),
    ("FULL", "FULL "),
    ("CROSS", "CROSS JOIN"),
    ("LATERAL", "LATERAL"),
    ("comma join", ", LATERAL"),
    ("WITH", "WITH "),
    ("RECURSIVE", "RECURSIVE"),
    ("UNION", "UNION"),
    ("INTERSECT", "INTERSECT"),
    ("EXCEPT", "EXCEPT"),
    ("GROUP BY", "GROUP BY"),
    ("HAVING", "HAVING"),
    ("ROLLUP", "ROLLUP"),
    ("CUBE", "CUBE"),
    ("GROUPING SETS", "GROUPING SETS"),
    ("OVER", " OVER ("),
    ("DISTINCT", "SELECT DISTINCT"),
    ("DISTINCT ON", "DISTINCT ON"),
    ("FILTER", "FILTER (WHERE"),
    ("string_agg", "string_agg("),
    ("array_agg", "array_agg("),
    ("EXISTS", "EXISTS ("),
    ("NOT EXISTS", "NOT EXISTS"),
    ("IN (SELECT", "IN (SELECT"),
    (
        "ANY/ALL",
        "ANY (SELECT|= ALL (SELECT|> ALL (SELECT|< ALL (SELECT",
    ),
    ("subquery", "(SELECT"),
    ("VALUES", "(VALUES"),
    ("generate_series", "generate_series("),
    ("LIMIT", "LIMIT "),
    ("OFFSET", "OFFSET "),
    ("ORDER BY", "ORDER BY"),
    ("CASE", "CASE WHEN"),
    ("COALESCE", "COALESCE("),
    ("IS NULL", "IS NULL"),
    ("= ANY (ARRAY", "= ANY (ARRAY"),
    ("NULL::", "NULL::"),
];

fn has_feature(sql: &str, needles: &str) -> bool {
    needles.split('|').any(|n| sql.contains(n))
}

fn coverage(sqls: &[&str]) -> String {
    let parts: Vec<String> = FEATURES
        .iter()
        .map(|(name, needle)| {
            let n = sqls.iter().filter(|s| has_feature(s, needle)).count();
            format!("{name} {n}")
        })
        .collect();
    parts.join(", ")
}

// ---------------------------------------------------------------------------------------------
// The tester's own pieces (no database)

#[test]
fn queries_are_reproducible_and_cover_the_grammar() {
    let sqls: Vec<String> = (0..2000)
        .map(|i| query::generate(DEFAULT_SEED, i).sql)
        .collect();
    for (i, sql) in sqls.iter().enumerate().step_by(7) {
        assert_eq!(*sql, query::generate(DEFAULT_SEED, i as u64).sql, "#{i}");
    }
    assert_ne!(sqls[0], query::generate(DEFAULT_SEED + 1, 0).sql);
    let refs: Vec<&str> = sqls.iter().map(String::as_str).collect();
    // QFUZZ_DUMP=<file>: write the queries of QFUZZ_SEED there, one a line (as many as
    // QFUZZ_QUERIES), to read them without a database.
    if let Ok(path) = std::env::var("QFUZZ_DUMP") {
        let s = settings();
        let text: Vec<String> = (0..s.queries)
            .map(|i| format!("{};", query::generate(s.seed, i).sql))
            .collect();
        std::fs::write(&path, text.join("\n") + "\n").expect("write QFUZZ_DUMP");
    }
    for (name, needle) in FEATURES {
        let n = refs.iter().filter(|s| has_feature(s, needle)).count();
        assert!(n > 0, "no query of the first 2000 has {name}");
    }
    eprintln!("coverage: {}", coverage(&refs));
}

/// `QFUZZ_SETUP=<dir>`: writes `<dir>/proxy.sql` (the tables as created through the proxy,
/// and their rows) and `<dir>/reference.sql` (the same as plain tables), to load into
/// `shardwire dev` and a plain database with psql and try queries by hand.
#[test]
fn setup_scripts_for_psql() {
    let Ok(dir) = std::env::var("QFUZZ_SETUP") else {
        return;
    };
    let (mut proxy, mut reference) = (String::new(), String::new());
    for t in data::TABLES {
        let _ = writeln!(proxy, "{};", data::proxy_ddl(t));
        let _ = writeln!(reference, "CREATE TABLE {} ({});", t.name, t.body);
    }
    for (_, proxy_ddl, ref_ddl) in schema::qf_tables() {
        let _ = writeln!(proxy, "{proxy_ddl};");
        let _ = writeln!(reference, "{ref_ddl};");
    }
    let mut rows = data::generate().tables;
    rows.extend(schema::qf_rows());
    for (table, rows) in rows {
        for chunk in rows.chunks(500) {
            let insert = format!("INSERT INTO {table} VALUES {};\n", chunk.join(", "));
            proxy.push_str(&insert);
            reference.push_str(&insert);
        }
    }
    std::fs::create_dir_all(&dir).expect("QFUZZ_SETUP directory");
    std::fs::write(format!("{dir}/proxy.sql"), proxy).expect("write proxy.sql");
    std::fs::write(format!("{dir}/reference.sql"), reference).expect("write reference.sql");
}

#[test]
fn the_comparison_sees_names_values_order_and_counts() {
    let row = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    let a = Answer {
        names: vec!["a".into(), "b".into()],
        rows: vec![row(&["1", "x"]), row(&["2", "y"])],
    };
    let mut b = a.clone();
    b.rows.reverse();
    assert!(compare(&a, &a, true).is_none());
    assert!(compare(&a, &b, false).is_none());
    assert!(compare(&a, &b, true).unwrap().contains("another order"));
    let mut c = a.clone();
    c.rows.push(row(&["2", "y"]));
    let why = compare(&a, &c, false).unwrap();
    assert!(
        why.contains("2 rows expected, 3 got") && why.contains("1 unexpected"),
        "{why}"
    );
    let mut d = a.clone();
    d.names[1] = "c".into();
    assert!(compare(&a, &d, false).unwrap().contains("column names"));
    let mut e = a.clone();
    e.rows[1][1] = None;
    let why = compare(&a, &e, false).unwrap();
    assert!(why.contains("NULL") && why.contains("missing"), "{why}");
    assert_eq!(message_kind("t12 at 34"), "tN at N");
}
