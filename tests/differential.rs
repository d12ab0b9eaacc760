//! Differential test of multi-shard reads (issue 12, item 5): the same rows live in sharded,
//! duplicated and unsharded tables behind the proxy (four shards) and in plain tables of one
//! PostgreSQL (database `df_ref` on shard 0's server, same table names), and every read query
//! of `tests/differential/queries.sql` must answer exactly the same through the proxy as there:
//!
//! - (a) simple protocol: column names and every value as text;
//! - (b) extended protocol (unnamed Parse, Bind asking text results, Execute): values as text;
//! - (c) a prepared statement with binary results: column names and type OIDs (the
//!   statement's RowDescription) and the raw bytes of every value.
//!
//! Rows are compared in order; queries marked `-- unordered` compare as sorted multisets.
//! Every mismatch is collected and reported at the end (the test fails once, listing them
//! all). The file format is described at the top of `queries.sql`.

mod common;
#[path = "differential/data.rs"]
mod data;
#[path = "differential/setup.rs"]
mod setup;

use std::fmt::Write as _;
use std::net::SocketAddr;
use std::time::Instant;

use common::raw::{RawClient, Reply};
use common::{use_shards, TestProxy, APP};
use tokio_postgres::error::{DbError, SqlState};
use tokio_postgres::types::{FromSql, Type};
use tokio_postgres::{Client, SimpleQueryMessage};

const SHARDS: usize = 4;
const QUERIES: &str = include_str!("differential/queries.sql");

use data::*;
use setup::{load, reference_db};

// ---------------------------------------------------------------------------------------------
// Queries file

#[derive(Debug)]
struct Query {
    line: usize,
    sql: String,
    unordered: bool,
    refused: Option<String>,
    /// Statements run first on every connection (proxy and reference, all protocols), in
    /// order: `-- session: SET …` lines.
    session: Vec<String>,
}

/// See the header of `queries.sql`.
fn parse_queries(text: &str) -> Vec<Query> {
    let mut out = Vec::new();
    let mut sql = String::new();
    let mut start = 0;
    let mut unordered = false;
    let mut refused = None;
    let mut session = Vec::new();
    for (i, raw) in text.lines().enumerate() {
        let line = raw.trim();
        if sql.is_empty() {
            if line.is_empty() {
                continue;
            }
            if let Some(comment) = line.strip_prefix("--") {
                let comment = comment.trim();
                if comment == "unordered" {
                    unordered = true;
                } else if let Some(why) = comment.strip_prefix("refused:") {
                    refused = Some(why.trim().to_string());
                } else if let Some(stmt) = comment.strip_prefix("session:") {
                    session.push(stmt.trim().to_string());
                }
                continue;
            }
            start = i + 1;
        }
        if !sql.is_empty() {
            sql.push('\n');
        }
        sql.push_str(raw.trim_end());
        if let Some(body) = line.strip_suffix(';') {
            let _ = body;
            let text = sql.trim_end().trim_end_matches(';').trim().to_string();
            out.push(Query {
                line: start,
                sql: text,
                unordered: std::mem::take(&mut unordered),
                refused: refused.take(),
                session: std::mem::take(&mut session),
            });
            sql.clear();
        }
    }
    assert!(
        sql.trim().is_empty(),
        "queries.sql ends inside a query: {sql}"
    );
    out
}

// ---------------------------------------------------------------------------------------------
// Running a query three ways

type TextRows = Vec<Vec<Option<String>>>;
type BinRows = Vec<Vec<Option<Vec<u8>>>>;

/// Any value, as the bytes the server sent.
struct Raw(Vec<u8>);

impl<'a> FromSql<'a> for Raw {
    fn from_sql(_: &Type, raw: &'a [u8]) -> Result<Self, Box<dyn std::error::Error + Sync + Send>> {
        Ok(Raw(raw.to_vec()))
    }
    fn accepts(_: &Type) -> bool {
        true
    }
}

#[derive(Debug, Clone, PartialEq)]
struct Failure {
    code: String,
    message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ERROR {}: {}", self.code, self.message)
    }
}

fn failure(e: &tokio_postgres::Error) -> Failure {
    match e.as_db_error() {
        Some(db) => db_failure(db),
        None => Failure {
            code: "-----".into(),
            message: e.to_string(),
        },
    }
}

fn db_failure(db: &DbError) -> Failure {
    Failure {
        code: db.code().code().to_string(),
        message: db.message().to_string(),
    }
}

/// (column names, rows) through the simple protocol.
async fn run_simple(client: &Client, sql: &str) -> Result<(Vec<String>, TextRows), Failure> {
    let msgs = client.simple_query(sql).await.map_err(|e| failure(&e))?;
    let mut names = Vec::new();
    let mut rows = Vec::new();
    for m in msgs {
        match m {
            SimpleQueryMessage::RowDescription(cols) => {
                names = cols.iter().map(|c| c.name().to_string()).collect();
            }
            SimpleQueryMessage::Row(r) => {
                rows.push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => {}
        }
    }
    Ok((names, rows))
}

/// Rows through Parse/Bind(text results)/Execute/Sync on the unnamed statement.
async fn run_extended_text(client: &mut RawClient, sql: &str) -> Result<TextRows, Failure> {
    let replies = client
        .parse("", sql)
        .bind("", "", &[])
        .execute("")
        .sync()
        .round_trip()
        .await;
    let mut rows = Vec::new();
    for reply in replies {
        match reply {
            Reply::Row(r) => rows.push(r),
            Reply::Error(state) => {
                return Err(Failure {
                    code: state.code().to_string(),
                    message: "(the raw client keeps only the SQLSTATE)".into(),
                })
            }
            _ => {}
        }
    }
    Ok(rows)
}

/// ((name, type OID) per column, rows as raw binary values) through a prepared statement.
async fn run_binary(
    client: &Client,
    sql: &str,
) -> Result<(Vec<(String, String)>, BinRows), Failure> {
    let stmt = client.prepare(sql).await.map_err(|e| failure(&e))?;
    // Types of one database's own (OID 16384 and up: composite row types, say) have other
    // OIDs in another database even when they are the same type: compare those by name.
    let cols: Vec<(String, String)> = stmt
        .columns()
        .iter()
        .map(|c| {
            let t = c.type_();
            let ty = if t.oid() >= 16384 {
                format!("{}.{} (user type)", t.schema(), t.name())
            } else {
                t.oid().to_string()
            };
            (c.name().to_string(), ty)
        })
        .collect();
    let rows = client.query(&stmt, &[]).await.map_err(|e| failure(&e))?;
    let rows = rows
        .iter()
        .map(|row| {
            (0..row.len())
                .map(|i| row.get::<_, Option<Raw>>(i).map(|v| v.0))
                .collect()
        })
        .collect();
    Ok((cols, rows))
}

// ---------------------------------------------------------------------------------------------
// Comparison

fn show_text_row(row: &[Option<String>]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|v| v.as_ref().map_or("NULL".to_string(), |s| format!("{s:?}")))
        .collect();
    format!("({})", cells.join(", "))
}

fn show_bin_row(row: &[Option<Vec<u8>>]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|v| {
            v.as_ref().map_or("NULL".to_string(), |b| {
                let hex: String = b.iter().map(|x| format!("{x:02x}")).collect();
                format!("\\x{hex}")
            })
        })
        .collect();
    format!("({})", cells.join(", "))
}

/// Why `got` is not `want` (None when equal).
fn compare_rows<T: Ord + Clone + PartialEq>(
    want: &[Vec<T>],
    got: &[Vec<T>],
    unordered: bool,
    show: impl Fn(&[T]) -> String,
) -> Option<String> {
    let (mut w, mut g) = (want.to_vec(), got.to_vec());
    if unordered {
        w.sort();
        g.sort();
    }
    if w == g {
        return None;
    }
    let mut why = String::new();
    if w.len() != g.len() {
        let _ = write!(why, "{} rows expected, {} got; ", w.len(), g.len());
    }
    if !unordered {
        let (mut ws, mut gs) = (w.clone(), g.clone());
        ws.sort();
        gs.sort();
        if ws == gs {
            why.push_str("same rows in another order; ");
        }
    }
    match w.iter().zip(g.iter()).position(|(a, b)| a != b) {
        Some(i) => {
            let _ = write!(
                why,
                "first difference at row {}: expected {} got {}",
                i + 1,
                show(&w[i]),
                show(&g[i])
            );
        }
        None => {
            let n = w.len().min(g.len());
            if w.len() > n {
                let _ = write!(why, "missing row {}: {}", n + 1, show(&w[n]));
            } else {
                let _ = write!(why, "extra row {}: {}", n + 1, show(&g[n]));
            }
        }
    }
    Some(why)
}

struct Mismatch {
    query: usize,
    protocol: &'static str,
    what: String,
}

struct Clients {
    proxy: Client,
    plain: Client,
    proxy_raw: RawClient,
    plain_raw: RawClient,
}

/// Checks one query every way; returns how many rows plain PostgreSQL answered.
async fn check_query(c: &mut Clients, q: &Query, qi: usize, out: &mut Vec<Mismatch>) -> usize {
    let mut miss = |protocol: &'static str, what: String| {
        out.push(Mismatch {
            query: qi,
            protocol,
            what,
        })
    };
    for stmt in &q.session {
        for (who, client) in [("proxy", &c.proxy), ("reference", &c.plain)] {
            if let Err(e) = client.batch_execute(stmt).await {
                miss("session", format!("{who}: {stmt}: {}", failure(&e)));
            }
        }
        for (who, client) in [("proxy", &mut c.proxy_raw), ("reference", &mut c.plain_raw)] {
            let replies = client.query(stmt).round_trip().await;
            if let Some(Reply::Error(state)) = replies.iter().find(|r| matches!(r, Reply::Error(_)))
            {
                miss(
                    "session",
                    format!("{who} (raw): {stmt}: ERROR {}", state.code()),
                );
            }
        }
    }
    if let Some(_why) = &q.refused {
        let simple = c.proxy.simple_query(&q.sql).await;
        match simple {
            Err(e) if e.code() == Some(&SqlState::FEATURE_NOT_SUPPORTED) => {}
            Err(e) => miss(
                "simple",
                format!("expected a 0A000 refusal, got {}", failure(&e)),
            ),
            Ok(_) => miss("simple", "expected a 0A000 refusal, the query ran".into()),
        }
        match run_binary(&c.proxy, &q.sql).await {
            Err(f) if f.code == "0A000" => {}
            Err(f) => miss("binary", format!("expected a 0A000 refusal, got {f}")),
            Ok(_) => miss("binary", "expected a 0A000 refusal, the query ran".into()),
        }
        return 0;
    }

    // (a) simple protocol
    let want: (Vec<String>, TextRows) = match run_simple(&c.plain, &q.sql).await {
        Ok(w) => w,
        Err(f) => {
            miss(
                "reference",
                format!("the query fails on plain PostgreSQL: {f}"),
            );
            return 0;
        }
    };
    let reference_rows = want.1.len();
    match run_simple(&c.proxy, &q.sql).await {
        Err(f) => miss("simple", f.to_string()),
        Ok(got) => {
            // A query that returns no rows has no RowDescription in tokio-postgres's
            // simple_query stream when it sends none; compare the names either way.
            if got.0 != want.0 {
                miss(
                    "simple",
                    format!("column names: expected {:?} got {:?}", want.0, got.0),
                );
            }
            if let Some(why) = compare_rows(&want.1, &got.1, q.unordered, show_text_row) {
                miss("simple", why);
            }
        }
    }

    // (b) extended protocol, text results
    match run_extended_text(&mut c.plain_raw, &q.sql).await {
        Err(f) => miss("extended-text", format!("reference failed: {f}")),
        Ok(want) => match run_extended_text(&mut c.proxy_raw, &q.sql).await {
            Err(f) => miss("extended-text", f.to_string()),
            Ok(got) => {
                if let Some(why) = compare_rows(&want, &got, q.unordered, show_text_row) {
                    miss("extended-text", why);
                }
            }
        },
    }

    // (c) prepared statement, binary results
    match run_binary(&c.plain, &q.sql).await {
        Err(f) => miss("binary", format!("reference failed: {f}")),
        Ok(want) => match run_binary(&c.proxy, &q.sql).await {
            Err(f) => miss("binary", f.to_string()),
            Ok(got) => {
                if got.0 != want.0 {
                    miss(
                        "binary",
                        format!(
                            "columns (name, type oid): expected {:?} got {:?}",
                            want.0, got.0
                        ),
                    );
                }
                if let Some(why) = compare_rows(&want.1, &got.1, q.unordered, show_bin_row) {
                    miss("binary", why);
                }
            }
        },
    }
    reference_rows
}

// ---------------------------------------------------------------------------------------------
// Setup

async fn raw_connect(url: &str) -> RawClient {
    let config: tokio_postgres::Config = url.parse().expect("url");
    let port = config.get_ports()[0];
    let password = std::str::from_utf8(config.get_password().expect("password")).unwrap();
    let user = config.get_user().expect("user");
    let db = config.get_dbname().expect("db");
    RawClient::connect(SocketAddr::from(([127, 0, 0, 1], port)), user, password, db)
        .await
        .unwrap_or_else(|e| panic!("raw connect to {db}: {e:?}"))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_reads_answer_as_one_postgres() {
    use_shards(SHARDS);
    let started = Instant::now();
    let proxy = TestProxy::start();
    let (plain, ref_url) = reference_db().await;
    let proxy_client = proxy.connect().await;

    let data = generate();
    load(&proxy_client, &plain, &data).await;
    let counts: Vec<String> = data
        .tables
        .iter()
        .map(|(t, rows)| format!("{t} {}", rows.len()))
        .collect();
    eprintln!(
        "differential: loaded {} in {:.1?}",
        counts.join(", "),
        started.elapsed()
    );

    let proxy_raw = RawClient::connect(proxy.addr, APP, APP, APP)
        .await
        .unwrap_or_else(|e| panic!("raw connect to the proxy: {e:?}"));
    let plain_raw = raw_connect(&ref_url).await;
    let mut clients = Clients {
        proxy: proxy_client,
        plain,
        proxy_raw,
        plain_raw,
    };

    let queries = parse_queries(QUERIES);
    assert!(queries.len() >= 200, "{} queries", queries.len());
    let only: Option<usize> = std::env::var("DIFF_ONLY_LINE")
        .ok()
        .and_then(|v| v.parse().ok());
    let mut mismatches = Vec::new();
    let run_started = Instant::now();
    let (mut total_rows, mut empty) = (0, Vec::new());
    for (qi, q) in queries.iter().enumerate() {
        if only.is_some_and(|l| l != q.line) {
            continue;
        }
        let n = check_query(&mut clients, q, qi, &mut mismatches).await;
        total_rows += n;
        if n == 0 && q.refused.is_none() {
            empty.push(q.line);
        }
    }
    eprintln!(
        "differential: {} queries ({} expected refusals) three ways in {:.1?}; {} reference \
         rows compared; queries answering no rows (lines): {:?}",
        queries.len(),
        queries.iter().filter(|q| q.refused.is_some()).count(),
        run_started.elapsed(),
        total_rows,
        empty
    );

    // The session must still be healthy after everything above.
    let rows = clients
        .proxy
        .simple_query("SELECT count(*) FROM df_customers")
        .await
        .expect("the proxy session still answers");
    assert!(rows
        .iter()
        .any(|m| matches!(m, SimpleQueryMessage::Row(r) if r.get(0) == Some("500"))));

    if !mismatches.is_empty() {
        let mut failing: Vec<usize> = mismatches.iter().map(|m| m.query).collect();
        failing.dedup();
        let mut report = format!(
            "{} of {} queries differ from plain PostgreSQL ({} mismatches):\n",
            failing.len(),
            queries.len(),
            mismatches.len()
        );
        for qi in &failing {
            let q = &queries[*qi];
            let _ = writeln!(
                report,
                "\n--- queries.sql:{}{}\n{}",
                q.line,
                if q.unordered { " (unordered)" } else { "" },
                q.sql
            );
            for m in mismatches.iter().filter(|m| m.query == *qi) {
                let mut what = m.what.clone();
                if what.len() > 1500 {
                    let mut cut = 1500;
                    while !what.is_char_boundary(cut) {
                        cut -= 1;
                    }
                    what.truncate(cut);
                    what.push_str(" …");
                }
                let _ = writeln!(report, "  [{}] {}", m.protocol, what);
            }
        }
        panic!("{report}");
    }
    eprintln!("differential: total {:.1?}", started.elapsed());
}

// ---------------------------------------------------------------------------------------------
// The harness's own pieces

#[test]
fn the_queries_file_parses() {
    let qs = parse_queries(
        "-- a comment\nSELECT 1;\n\n-- unordered\nSELECT a\n  FROM t;\n-- refused: why\nSELECT 2;\n\
         -- session: SET a = 1\n-- session: SET b = 2\nSELECT 3;\n",
    );
    assert_eq!(qs.len(), 4);
    assert_eq!(qs[3].session, ["SET a = 1", "SET b = 2"]);
    assert!(qs[2].session.is_empty());
    assert_eq!(
        (qs[0].sql.as_str(), qs[0].line, qs[0].unordered),
        ("SELECT 1", 2, false)
    );
    assert_eq!(
        (qs[1].sql.as_str(), qs[1].line, qs[1].unordered),
        ("SELECT a\n  FROM t", 5, true)
    );
    assert_eq!(qs[2].refused.as_deref(), Some("why"));
    assert!(!qs[2].unordered);
    let all = parse_queries(QUERIES);
    assert!(all
        .iter()
        .all(|q| !q.sql.is_empty() && !q.sql.contains(";\n")));
}

#[test]
fn the_comparison_sees_values_order_and_counts() {
    let row = |v: &[&str]| v.iter().map(|s| Some(s.to_string())).collect::<Vec<_>>();
    let a = vec![row(&["1", "x"]), row(&["2", "y"])];
    let b = vec![row(&["2", "y"]), row(&["1", "x"])];
    assert!(compare_rows(&a, &a, false, show_text_row).is_none());
    let why = compare_rows(&a, &b, false, show_text_row).unwrap();
    assert!(why.contains("another order"), "{why}");
    assert!(compare_rows(&a, &b, true, show_text_row).is_none());
    let c = vec![row(&["1", "x"])];
    let why = compare_rows(&a, &c, true, show_text_row).unwrap();
    assert!(why.contains("2 rows expected, 1 got"), "{why}");
    let d = vec![row(&["1", "x"]), vec![Some("2".into()), None]];
    let why = compare_rows(&a, &d, false, show_text_row).unwrap();
    assert!(why.contains("row 2") && why.contains("NULL"), "{why}");
}
