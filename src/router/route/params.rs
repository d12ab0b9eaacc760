//! The Bind message's parameter part as routing reads it, and the Bind and Parse rewrites the
//! executor sends a statement's parts with.

use smallvec::SmallVec;

use super::RouteError;
use crate::protocol::{take_i16, take_i32, FrameError};
use crate::router::hash::KeyValue;

/// The parameters of a Bind message, as far as routing reads them. Format codes and declared
/// types stay the bytes they arrived as and are read where a value is: routing reads one or
/// two parameters of most statements.
#[derive(Debug, Default, Clone)]
pub struct Params<'a> {
    /// Bind's format codes as sent (none: all text; one: all alike; else one per parameter).
    format_codes: &'a [u8],
    values: SmallVec<[Option<&'a [u8]>; 4]>,
    /// Parse's declared parameter type OIDs as sent, after their count (0: unspecified).
    declared: &'a [u8],
    /// The literals of a simple query routed with a shared plan ([`Operand::Literal`]).
    literals: crate::router::LiteralValues<'a>,
    /// Generated key values, one per VALUES row ([`Operand::Generated`]).
    pub(super) generated: Vec<String>,
}

pub(super) const INT2: u32 = 21;
pub(super) const INT4: u32 = 23;
pub(super) const INT8: u32 = 20;

impl<'a> Params<'a> {
    /// How many parameter values the Bind carries.
    pub fn count(&self) -> usize {
        self.values.len()
    }

    /// Reads Bind's parameter part (`rest`: formats, values, result formats) and Parse's
    /// declared types (`types`: count and OIDs, as sent).
    pub fn parse(rest: &'a [u8], types: &'a [u8]) -> Result<Params<'a>, FrameError> {
        let (format_codes, values, _) = split_bind(rest)?;
        let mut t = types;
        let ntypes = take_i16(&mut t, "Parse").unwrap_or(0).max(0) as usize;
        Ok(Params {
            format_codes,
            values,
            declared: &t[..t.len().min(4 * ntypes)],
            literals: Default::default(),
            generated: Vec::new(),
        })
    }

    /// Parameter `i`'s format code (0 text, 1 binary); text when Bind gave none for it.
    pub(super) fn format(&self, i: usize) -> i16 {
        let at = if self.format_codes.len() == 2 { 0 } else { i };
        match self.format_codes.get(2 * at..2 * at + 2) {
            Some(&[high, low]) => i16::from_be_bytes([high, low]),
            _ => 0,
        }
    }

    /// Parameter `i`'s declared type OID; 0 when Parse left it unspecified.
    pub(super) fn declared_type(&self, i: usize) -> u32 {
        match self.declared.get(4 * i..4 * i + 4) {
            Some(&[a, b, c, d]) => u32::from_be_bytes([a, b, c, d]),
            _ => 0,
        }
    }

    /// Parameter `i`'s value: `None` past the last one, `Some(None)` for NULL.
    pub(super) fn raw(&self, i: usize) -> Option<Option<&'a [u8]>> {
        self.values.get(i).copied()
    }

    /// The literals of a simple query, for plans shared between texts.
    pub fn literals(literals: crate::router::LiteralValues<'a>) -> Params<'a> {
        Params {
            literals,
            ..Params::default()
        }
    }

    /// The generated key values of an INSERT's rows, for routing them.
    pub fn with_generated(mut self, values: &[i64]) -> Params<'a> {
        self.generated = values.iter().map(i64::to_string).collect();
        self
    }

    pub(super) fn literal(&self, index: usize, negated: bool) -> Result<Owned<'_>, RouteError> {
        let v = self
            .literals
            .get(index)
            .ok_or(RouteError::MissingParameter(index + 1))?;
        Ok(if negated {
            Owned::Formatted(format!("-{v}"))
        } else {
            Owned::Text(v)
        })
    }

    /// Parameter `i` as key input. Binary integers declared narrower or wider than the key
    /// column are read by their declared type, as PostgreSQL's implicit cast would.
    pub(super) fn value(&self, i: usize) -> Result<Owned<'a>, RouteError> {
        let Some(v) = self.raw(i) else {
            return Err(RouteError::MissingParameter(i + 1));
        };
        let Some(bytes) = v else {
            return Ok(Owned::Null);
        };
        if self.format(i) == 0 {
            return crate::router::normalize::utf8(bytes)
                .map(Owned::Text)
                .ok_or(RouteError::BadParameter(i + 1));
        }
        let declared = self.declared_type(i);
        let int = match (declared, bytes.len()) {
            (INT2, 2) => Some(i64::from(i16::from_be_bytes([bytes[0], bytes[1]]))),
            (INT4, 4) => Some(i64::from(i32::from_be_bytes([
                bytes[0], bytes[1], bytes[2], bytes[3],
            ]))),
            (INT8, 8) => Some(i64::from_be_bytes(
                bytes[..8]
                    .try_into()
                    .map_err(|_| RouteError::BadParameter(i + 1))?,
            )),
            _ => None,
        };
        Ok(match int {
            Some(n) => Owned::Formatted(n.to_string()),
            None => Owned::Binary(bytes),
        })
    }
}

/// Bind's parameter part read: a format code per value (short forms expanded), the values,
/// and the result format codes that follow them (count and codes, as sent).
pub struct BindParts<'a> {
    pub formats: SmallVec<[i16; 4]>,
    pub values: SmallVec<[Option<&'a [u8]>; 4]>,
    pub result_formats: &'a [u8],
}

impl<'a> BindParts<'a> {
    /// Refuses a Bind with several format codes but not one per value, as PostgreSQL refuses
    /// it: what reads the parts finds a format at each value's index.
    pub fn read(rest: &'a [u8]) -> Result<BindParts<'a>, FrameError> {
        let parts = BindParts::read_any(rest)?;
        if parts.formats.len() != parts.values.len() {
            return Err(FrameError::Malformed("Bind"));
        }
        Ok(parts)
    }

    /// As [`BindParts::read`], taking format codes that do not match the values too. Routing
    /// reads a value without a format code as text, and sends the Bind on to the shard, which
    /// answers it with PostgreSQL's own error while the session goes on.
    fn read_any(rest: &'a [u8]) -> Result<BindParts<'a>, FrameError> {
        let (codes, values, result_formats) = split_bind(rest)?;
        let code = |k: usize| i16::from_be_bytes([codes[2 * k], codes[2 * k + 1]]);
        let formats = match codes.len() / 2 {
            0 => SmallVec::from_elem(0, values.len()),
            1 => SmallVec::from_elem(code(0), values.len()),
            n => (0..n).map(code).collect(),
        };
        Ok(BindParts {
            formats,
            values,
            result_formats,
        })
    }
}

/// Bind's parameter part split: the format codes as sent, the values, and the result format
/// codes after them (count and codes, as sent).
type SplitBind<'a> = (&'a [u8], SmallVec<[Option<&'a [u8]>; 4]>, &'a [u8]);

fn split_bind(rest: &[u8]) -> Result<SplitBind<'_>, FrameError> {
    let mut b = rest;
    let nformats = take_i16(&mut b, "Bind")?.max(0) as usize;
    let codes = b.get(..2 * nformats).ok_or(FrameError::Malformed("Bind"))?;
    b = &b[2 * nformats..];
    let nvalues = take_i16(&mut b, "Bind")?.max(0) as usize;
    let mut values = SmallVec::with_capacity(nvalues);
    for _ in 0..nvalues {
        let len = take_i32(&mut b, "Bind")?;
        if len < 0 {
            values.push(None);
        } else {
            let value = b.get(..len as usize).ok_or(FrameError::Malformed("Bind"))?;
            values.push(Some(value));
            b = &b[len as usize..];
        }
    }
    Ok((codes, values, b))
}

/// Bind's parameter part with result format codes for `hidden` more result columns after
/// `visible` ones (hidden sort columns, read as text, whatever format the client asked for).
pub fn with_hidden_result_columns(rest: &[u8], visible: usize, hidden: usize) -> Vec<u8> {
    let split = || -> Option<usize> {
        let mut b = rest;
        let nformats = take_i16(&mut b, "Bind").ok()?.max(0) as usize;
        b = b.get(2 * nformats..)?;
        let nvalues = take_i16(&mut b, "Bind").ok()?.max(0) as usize;
        for _ in 0..nvalues {
            let len = take_i32(&mut b, "Bind").ok()?;
            if len > 0 {
                b = b.get(len as usize..)?;
            }
        }
        Some(rest.len() - b.len())
    };
    let (Some(at), true) = (split(), hidden > 0) else {
        return rest.to_vec();
    };
    let mut results = &rest[at..];
    let n = take_i16(&mut results, "Bind").unwrap_or(0).max(0) as usize;
    let codes: Vec<[u8; 2]> = match n {
        // No code: every column in text, the hidden ones too.
        0 => return rest.to_vec(),
        // One code for every column: spelt out, so the hidden ones can differ.
        1 => match results.get(..2) {
            Some(&[high, low]) => vec![[high, low]; visible],
            // The code is missing: the shard refuses the Bind as sent.
            _ => return rest.to_vec(),
        },
        _ => results
            .chunks_exact(2)
            .take(n)
            .map(|c| [c[0], c[1]])
            .collect(),
    };
    let mut out = rest[..at].to_vec();
    out.extend_from_slice(&((codes.len() + hidden) as i16).to_be_bytes());
    out.extend(codes.into_iter().flatten());
    out.extend(std::iter::repeat_n([0u8, 0u8], hidden).flatten());
    out
}

/// Bind's parameter part with one more parameter, `value` in text format, after the client's.
pub fn with_extra_param(rest: &[u8], value: &str) -> Result<Vec<u8>, FrameError> {
    let mut b = rest;
    let nformats = take_i16(&mut b, "Bind")?.max(0) as usize;
    let mut formats = Vec::with_capacity(nformats);
    for _ in 0..nformats {
        formats.push(take_i16(&mut b, "Bind")?);
    }
    let values_start = rest.len() - b.len();
    let nvalues = take_i16(&mut b, "Bind")?.max(0) as usize;
    for _ in 0..nvalues {
        let len = take_i32(&mut b, "Bind")?;
        if len > 0 {
            b = b.get(len as usize..).ok_or(FrameError::Malformed("Bind"))?;
        }
    }
    let values_end = rest.len() - b.len();
    // Formats spelt out per parameter, so the new one can be text whatever the others are.
    let formats: Vec<i16> = match formats.as_slice() {
        [] => Vec::new(),
        [one] => vec![*one; nvalues],
        many => many.to_vec(),
    };
    let mut out = Vec::with_capacity(rest.len() + value.len() + 8);
    if formats.is_empty() {
        out.extend_from_slice(&0i16.to_be_bytes());
    } else {
        out.extend_from_slice(&((formats.len() + 1) as i16).to_be_bytes());
        for f in &formats {
            out.extend_from_slice(&f.to_be_bytes());
        }
        out.extend_from_slice(&0i16.to_be_bytes());
    }
    out.extend_from_slice(&((nvalues + 1) as i16).to_be_bytes());
    out.extend_from_slice(&rest[values_start + 2..values_end]);
    out.extend_from_slice(&(value.len() as i32).to_be_bytes());
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(&rest[values_end..]);
    Ok(out)
}

/// Parse's parameter types for `count` parameters plus one more of unspecified type (the
/// server infers it from the column).
pub fn with_extra_param_type(types: &[u8], count: usize) -> Vec<u8> {
    let mut t = types;
    let declared = take_i16(&mut t, "Parse").unwrap_or(0).max(0) as usize;
    let mut oids: Vec<u32> = (0..declared)
        .map(|_| take_i32(&mut t, "Parse").unwrap_or(0) as u32)
        .collect();
    oids.resize(count, 0);
    oids.push(0);
    let mut out = Vec::with_capacity(2 + 4 * oids.len());
    out.extend_from_slice(&(oids.len() as i16).to_be_bytes());
    for o in oids {
        out.extend_from_slice(&o.to_be_bytes());
    }
    out
}

/// Bind's parameter part with only the parameters `keep` (0-based, in their new order: the
/// new `$1` is `keep[0]`), each with its format; the result formats as they were.
pub fn select_params(rest: &[u8], keep: &[usize]) -> Result<Vec<u8>, FrameError> {
    let parts = BindParts::read(rest)?;
    let mut out = Vec::with_capacity(rest.len());
    out.extend_from_slice(&(keep.len() as i16).to_be_bytes());
    for &k in keep {
        let format = parts.formats.get(k).ok_or(FrameError::Malformed("Bind"))?;
        out.extend_from_slice(&format.to_be_bytes());
    }
    out.extend_from_slice(&(keep.len() as i16).to_be_bytes());
    for &k in keep {
        match parts.values.get(k).ok_or(FrameError::Malformed("Bind"))? {
            Some(v) => {
                out.extend_from_slice(&(v.len() as i32).to_be_bytes());
                out.extend_from_slice(v);
            }
            None => out.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    out.extend_from_slice(parts.result_formats);
    Ok(out)
}

/// Parse's parameter types for the parameters `keep` (as in [`select_params`]): each as the
/// client declared it, unspecified where it declared none.
pub fn select_param_types(types: &[u8], keep: &[usize]) -> Vec<u8> {
    let mut t = types;
    let declared = take_i16(&mut t, "Parse").unwrap_or(0).max(0) as usize;
    let oids: Vec<u32> = (0..declared)
        .map(|_| take_i32(&mut t, "Parse").unwrap_or(0) as u32)
        .collect();
    let mut out = Vec::with_capacity(2 + 4 * keep.len());
    out.extend_from_slice(&(keep.len() as i16).to_be_bytes());
    for &k in keep {
        out.extend_from_slice(&oids.get(k).copied().unwrap_or(0).to_be_bytes());
    }
    out
}

/// A key value resolved from a literal or a parameter.
pub(super) enum Owned<'a> {
    Null,
    Text(&'a str),
    Formatted(String),
    Binary(&'a [u8]),
    Literal(&'a str),
}

impl Owned<'_> {
    pub(super) fn as_key(&self) -> KeyValue<'_> {
        match self {
            Owned::Null => KeyValue::Null,
            Owned::Text(s) | Owned::Literal(s) => KeyValue::Text(s),
            Owned::Formatted(s) => KeyValue::Text(s),
            Owned::Binary(b) => KeyValue::Binary(b),
        }
    }
}
