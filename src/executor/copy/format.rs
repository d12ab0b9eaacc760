//! COPY's options as PostgreSQL reads them: the format (text, CSV, binary), delimiter, NULL
//! string, quote and escape, HEADER, and the FORCE options, checked as PostgreSQL checks them.

use super::CopyError;
use crate::router::plan::{CopyArg, CopyOption};

/// What a HEADER option asks of COPY FROM.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Header {
    None,
    /// The first line is skipped.
    Skip,
    /// The first line must name the columns; each shard checks it, so it is sent to every one.
    Match,
}

/// Columns named by FORCE_NULL / FORCE_NOT_NULL.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub enum Forced {
    #[default]
    None,
    All,
    Columns(Vec<String>),
}

impl Forced {
    pub fn covers(&self, column: &str) -> bool {
        match self {
            Forced::None => false,
            Forced::All => true,
            Forced::Columns(c) => c.iter().any(|n| n == column),
        }
    }
}

/// COPY's format options as PostgreSQL's `ProcessCopyOptions` reads them.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyFormat {
    pub csv: bool,
    pub binary: bool,
    pub delimiter: u8,
    pub null: Vec<u8>,
    pub header: Header,
    pub quote: u8,
    pub escape: u8,
    pub force_null: Forced,
    pub force_not_null: Forced,
}

fn arg_text(arg: &CopyArg) -> Option<&str> {
    match arg {
        CopyArg::Text(s) | CopyArg::Number(s) => Some(s),
        CopyArg::None | CopyArg::Star | CopyArg::List(_) => None,
    }
}

fn boolean(name: &str, arg: &CopyArg) -> Result<bool, CopyError> {
    if *arg == CopyArg::None {
        return Ok(true);
    }
    match arg_text(arg).map(str::to_ascii_lowercase).as_deref() {
        Some("true" | "on" | "1" | "yes") => Ok(true),
        Some("false" | "off" | "0" | "no") => Ok(false),
        _ => Err(CopyError::BadOption(format!(
            "{name} requires a Boolean value"
        ))),
    }
}

fn one_byte(name: &str, arg: &CopyArg) -> Result<u8, CopyError> {
    match arg_text(arg).map(str::as_bytes) {
        Some([b]) if b.is_ascii() => Ok(*b),
        _ => Err(CopyError::BadOption(format!(
            "COPY {name} must be a single one-byte character"
        ))),
    }
}

fn forced(name: &str, arg: &CopyArg) -> Result<Forced, CopyError> {
    match arg {
        CopyArg::Star => Ok(Forced::All),
        CopyArg::List(cols) => Ok(Forced::Columns(cols.clone())),
        CopyArg::None | CopyArg::Text(_) | CopyArg::Number(_) => Err(CopyError::BadOption(
            format!("argument to option \"{name}\" must be a list of column names"),
        )),
    }
}

impl CopyFormat {
    /// The text format with its defaults.
    pub fn text() -> CopyFormat {
        CopyFormat {
            csv: false,
            binary: false,
            delimiter: b'\t',
            null: b"\\N".to_vec(),
            header: Header::None,
            quote: b'"',
            escape: b'"',
            force_null: Forced::None,
            force_not_null: Forced::None,
        }
    }

    /// Reads the options of a COPY statement. Options that do not change how rows are cut or
    /// keys are read (ENCODING, FREEZE, FORCE_QUOTE, …) are left to the shards, which apply them
    /// as they would to any COPY.
    pub fn from_options(options: &[CopyOption]) -> Result<CopyFormat, CopyError> {
        let mut f = CopyFormat::text();
        let (mut delimiter, mut null, mut quote, mut escape) = (None, None, None, None);
        for o in options {
            match o.name.as_str() {
                "format" => match arg_text(&o.arg).map(str::to_ascii_lowercase).as_deref() {
                    Some("text") => {}
                    Some("csv") => f.csv = true,
                    Some("binary") => f.binary = true,
                    _ => {
                        return Err(CopyError::BadOption(format!(
                            "COPY format \"{}\" not recognized",
                            arg_text(&o.arg).unwrap_or_default()
                        )))
                    }
                },
                "delimiter" => delimiter = Some(one_byte("delimiter", &o.arg)?),
                "null" => {
                    null = Some(
                        arg_text(&o.arg)
                            .ok_or_else(|| CopyError::BadOption("null requires a value".into()))?
                            .as_bytes()
                            .to_vec(),
                    )
                }
                "header" => {
                    let is_match =
                        arg_text(&o.arg).is_some_and(|s| s.eq_ignore_ascii_case("match"));
                    f.header = if is_match {
                        Header::Match
                    } else if boolean("header", &o.arg)? {
                        Header::Skip
                    } else {
                        Header::None
                    };
                }
                "quote" => quote = Some(one_byte("quote", &o.arg)?),
                "escape" => escape = Some(one_byte("escape", &o.arg)?),
                "force_null" => f.force_null = forced("force_null", &o.arg)?,
                "force_not_null" => f.force_not_null = forced("force_not_null", &o.arg)?,
                _ => {}
            }
        }
        if f.csv {
            f.delimiter = delimiter.unwrap_or(b',');
            f.null = null.unwrap_or_default();
            f.quote = quote.unwrap_or(b'"');
            // ESCAPE defaults to QUOTE, whatever QUOTE is.
            f.escape = escape.unwrap_or(f.quote);
        } else {
            if quote.is_some() || escape.is_some() {
                return Err(CopyError::BadOption(
                    "COPY QUOTE and ESCAPE are available only in CSV mode".into(),
                ));
            }
            f.delimiter = delimiter.unwrap_or(b'\t');
            if let Some(n) = null {
                f.null = n;
            }
        }
        if matches!(f.delimiter, b'\r' | b'\n') {
            return Err(CopyError::BadOption(
                "COPY delimiter cannot be newline or carriage return".into(),
            ));
        }
        Ok(f)
    }
}
