//! Running a query on one side (simple protocol, every value as text) and comparing the two
//! answers: column names, then rows in order or as sorted multisets.

use std::fmt::Write as _;
use std::time::Duration;

use tokio_postgres::{Client, SimpleQueryMessage};

/// A query taking longer than this on either side is abandoned (its connection replaced).
pub const QUERY_TIMEOUT: Duration = Duration::from_secs(30);
/// Rows of each answer shown in a report.
const SHOW_ROWS: usize = 12;

pub type Rows = Vec<Vec<Option<String>>>;

#[derive(Debug, Clone)]
pub struct Answer {
    pub names: Vec<String>,
    pub rows: Rows,
}

#[derive(Debug, Clone)]
pub struct Failure {
    pub code: String,
    pub message: String,
}

impl std::fmt::Display for Failure {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "ERROR {}: {}", self.code, self.message)
    }
}

pub async fn run(client: &Client, sql: &str) -> Result<Answer, Failure> {
    let run = client.simple_query(sql);
    let msgs = match tokio::time::timeout(QUERY_TIMEOUT, run).await {
        Err(_) => {
            return Err(Failure {
                code: "TIMEOUT".into(),
                message: format!("no answer within {QUERY_TIMEOUT:?}"),
            })
        }
        Ok(Err(e)) => {
            return Err(match e.as_db_error() {
                Some(db) => Failure {
                    code: db.code().code().to_string(),
                    message: db.message().to_string(),
                },
                None => Failure {
                    code: "-----".into(),
                    message: e.to_string(),
                },
            })
        }
        Ok(Ok(msgs)) => msgs,
    };
    let mut answer = Answer {
        names: Vec::new(),
        rows: Vec::new(),
    };
    for m in msgs {
        match m {
            SimpleQueryMessage::RowDescription(cols) => {
                answer.names = cols.iter().map(|c| c.name().to_string()).collect();
            }
            SimpleQueryMessage::Row(r) => answer
                .rows
                .push((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect()),
            _ => {}
        }
    }
    Ok(answer)
}

pub fn show_row(row: &[Option<String>]) -> String {
    let cells: Vec<String> = row
        .iter()
        .map(|v| v.as_ref().map_or("NULL".to_string(), |s| format!("{s:?}")))
        .collect();
    format!("({})", cells.join(", "))
}

pub fn show_answer(a: &Answer) -> String {
    let mut out = format!("{} rows, columns {:?}", a.rows.len(), a.names);
    for row in a.rows.iter().take(SHOW_ROWS) {
        let _ = write!(out, "\n      {}", show_row(row));
    }
    if a.rows.len() > SHOW_ROWS {
        let _ = write!(out, "\n      … {} more", a.rows.len() - SHOW_ROWS);
    }
    out
}

/// Why `got` differs from `want` (None when it does not).
pub fn compare(want: &Answer, got: &Answer, ordered: bool) -> Option<String> {
    let mut why = Vec::new();
    if want.names != got.names {
        why.push(format!(
            "column names: expected {:?} got {:?}",
            want.names, got.names
        ));
    }
    let (mut w, mut g) = (want.rows.clone(), got.rows.clone());
    if !ordered {
        w.sort();
        g.sort();
    }
    if w != g {
        if w.len() != g.len() {
            why.push(format!("{} rows expected, {} got", w.len(), g.len()));
        }
        let (mut ws, mut gs) = (w.clone(), g.clone());
        ws.sort();
        gs.sort();
        if ordered && ws == gs {
            why.push("same rows in another order".into());
        } else {
            // Rows on one side only (as multisets).
            let mut extra = gs.clone();
            let mut missing = Vec::new();
            for r in ws {
                match extra.iter().position(|x| *x == r) {
                    Some(i) => {
                        extra.remove(i);
                    }
                    None => missing.push(r),
                }
            }
            if let Some(r) = missing.first() {
                why.push(format!(
                    "{} expected rows missing, e.g. {}",
                    missing.len(),
                    show_row(r)
                ));
            }
            if let Some(r) = extra.first() {
                why.push(format!(
                    "{} unexpected rows, e.g. {}",
                    extra.len(),
                    show_row(r)
                ));
            }
        }
    }
    (!why.is_empty()).then(|| why.join("; "))
}

#[derive(Debug)]
pub enum Outcome {
    Equal,
    Refused(String),
    RowLimit,
    BothFailed(String),
    /// The reference took longer than the timeout, or answered so many rows that the
    /// proxy's slower answer did: the generator's size estimate was wrong.
    TooBig,
    /// A failure: the text says what.
    Bad(&'static str, String),
}

/// The outcome of one query, from the reference's answer and the proxy's.
pub fn classify(
    ordered: bool,
    want: &Result<Answer, Failure>,
    got: &Result<Answer, Failure>,
) -> Outcome {
    match (want, got) {
        (Ok(w), Ok(g)) => match compare(w, g, ordered) {
            None => Outcome::Equal,
            Some(why) => Outcome::Bad(
                "DIFFERENT",
                format!(
                    "{why}\n  {} compare\n  reference: {}\n  proxy:     {}",
                    if ordered { "ordered" } else { "unordered" },
                    show_answer(w),
                    show_answer(g)
                ),
            ),
        },
        (_, Err(f)) if f.code == "54000" => Outcome::RowLimit,
        (Err(w), Err(g)) if w.code != "TIMEOUT" => Outcome::BothFailed(format!(
            "reference {} {} / proxy {} {}",
            w.code,
            message_kind(&w.message),
            g.code,
            message_kind(&g.message)
        )),
        (Ok(_), Err(f)) if f.code == "0A000" => Outcome::Refused(message_kind(&f.message)),
        (Ok(w), Err(f)) if f.code == "TIMEOUT" && w.rows.len() > 100_000 => Outcome::TooBig,
        (Ok(w), Err(f)) => Outcome::Bad(
            "PROXY ERROR",
            format!("{f}\n  reference: {}", show_answer(w)),
        ),
        // Unchecked, not wrong: the generator's size estimate was off.
        (Err(w), Ok(_)) if w.code == "TIMEOUT" => Outcome::TooBig,
        (Err(w), Ok(g)) => Outcome::Bad(
            "REFERENCE ERROR",
            format!("{w}\n  proxy: {}", show_answer(g)),
        ),
        (Err(_), Err(_)) => Outcome::TooBig,
    }
}

/// A refusal or error message with its numbers (aliases, positions) blanked, so that
/// messages of one kind count together.
pub fn message_kind(m: &str) -> String {
    let mut out = String::new();
    let mut in_digits = false;
    for ch in m.chars() {
        if ch.is_ascii_digit() {
            if !in_digits {
                out.push('N');
            }
            in_digits = true;
        } else {
            in_digits = false;
            out.push(ch);
        }
    }
    out
}
