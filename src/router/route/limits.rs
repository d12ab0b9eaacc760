//! LIMIT and OFFSET given as Bind parameters of a read over several shards: the proxy applies
//! them to the merged rows, so it reads their values as PostgreSQL would (the shards evaluate
//! the same parameters in their own `LIMIT`, see `plan::select::shard_limit`).

use super::{Params, RouteError, INT2, INT4, INT8};
use crate::router::plan::Merge;

const NUMERIC: u32 = 1700;
const FLOAT4: u32 = 700;
const FLOAT8: u32 = 701;

/// The plan's merge with this execution's LIMIT and OFFSET parameter values in it. Like
/// PostgreSQL's executor, OFFSET is checked before LIMIT; NULL means no limit, no offset.
pub fn bound_merge(merge: &Merge, params: &Params<'_>) -> Result<Merge, RouteError> {
    let mut bound = merge.clone();
    if let Some(i) = merge.offset_param {
        bound.offset = match read(params, i)? {
            Some(n) if n < 0 => return Err(RouteError::NegativeOffset),
            n => n.unwrap_or(0) as u64,
        };
    }
    if let Some(i) = merge.limit_param {
        bound.limit = match read(params, i)? {
            Some(n) if n < 0 => return Err(RouteError::NegativeLimit),
            n => n.map(|n| n as u64),
        };
    }
    Ok(bound)
}

/// Parameter `i` as the bigint PostgreSQL makes of it in LIMIT or OFFSET: text in the input
/// syntax of its declared type (bigint when undeclared, as PostgreSQL infers), binary in the
/// declared type's format; numeric values round half away from zero and floats half to even,
/// as their casts to bigint do.
fn read(params: &Params<'_>, i: usize) -> Result<Option<i64>, RouteError> {
    let value = params.raw(i).ok_or(RouteError::MissingParameter(i + 1))?;
    let Some(bytes) = value else {
        return Ok(None);
    };
    let declared = params.declared_type(i);
    if params.format(i) == 0 {
        let text = std::str::from_utf8(bytes).map_err(|_| RouteError::BadParameter(i + 1))?;
        let syntax = |ty: &'static str| RouteError::BoundSyntax {
            ty,
            value: text.to_string(),
        };
        return match declared {
            NUMERIC => decimal(text).ok_or_else(|| syntax("numeric"))?.map(Some),
            FLOAT4 | FLOAT8 => {
                let f: f64 = text
                    .trim()
                    .parse()
                    .map_err(|_| syntax("double precision"))?;
                float(f).map(Some)
            }
            _ => integer(text).ok_or_else(|| syntax("bigint"))?.map(Some),
        };
    }
    let binary = RouteError::BoundBinary(i + 1);
    let n = match (declared, bytes.len()) {
        (INT2, 2) => i64::from(i16::from_be_bytes([bytes[0], bytes[1]])),
        (INT4, 4) => i64::from(i32::from_be_bytes(bytes.try_into().map_err(|_| binary)?)),
        (INT8 | 0, 8) => i64::from_be_bytes(bytes.try_into().map_err(|_| binary)?),
        (FLOAT4, 4) => float(f64::from(f32::from_be_bytes(
            bytes.try_into().map_err(|_| binary)?,
        )))?,
        (FLOAT8, 8) => float(f64::from_be_bytes(bytes.try_into().map_err(|_| binary)?))?,
        (NUMERIC, _) => binary_numeric(bytes).ok_or(binary)??,
        _ => return Err(binary),
    };
    Ok(Some(n))
}

fn float(f: f64) -> Result<i64, RouteError> {
    let r = f.round_ties_even();
    // i64::MAX as f64 rounds up to 2^63, which is out of range; NaN is in no range.
    if !(-9_223_372_036_854_775_808.0..9_223_372_036_854_775_808.0).contains(&r) {
        return Err(RouteError::BoundRange);
    }
    Ok(r as i64)
}

fn in_range(n: i128) -> Result<i64, RouteError> {
    i64::try_from(n).map_err(|_| RouteError::BoundRange)
}

/// `int8in`: surrounding whitespace, a sign, decimal digits or `0x`/`0o`/`0b` ones, single
/// underscores between digits. `None`: not its syntax.
fn integer(text: &str) -> Option<Result<i64, RouteError>> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let (negative, t) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let prefixed = |p: &str| {
        t.get(..2)
            .filter(|s| s.eq_ignore_ascii_case(p))
            .map(|_| &t[2..])
    };
    let (radix, digits) = if let Some(d) = prefixed("0x") {
        (16, d)
    } else if let Some(d) = prefixed("0o") {
        (8, d)
    } else if let Some(d) = prefixed("0b") {
        (2, d)
    } else {
        (10, t)
    };
    if digits.is_empty() || digits.starts_with('_') || digits.ends_with('_') {
        return None;
    }
    let mut n: i128 = 0;
    let mut last_underscore = false;
    for c in digits.chars() {
        if c == '_' {
            if last_underscore {
                return None;
            }
            last_underscore = true;
            continue;
        }
        last_underscore = false;
        let d = c.to_digit(radix)?;
        // Past i64's range already: the rest only needs checking for syntax.
        n = (n * i128::from(radix) + i128::from(d)).min(i128::from(u64::MAX));
    }
    Some(in_range(if negative { -n } else { n }))
}

/// `numeric_in` followed by the cast to bigint (rounding half away from zero). `None`: not
/// numeric syntax.
fn decimal(text: &str) -> Option<Result<i64, RouteError>> {
    let t = text.trim_matches(|c: char| c.is_ascii_whitespace());
    let lower = t.to_ascii_lowercase();
    if matches!(
        lower.trim_start_matches(['+', '-']),
        "nan" | "infinity" | "inf"
    ) {
        return Some(Err(RouteError::BoundRange));
    }
    let (negative, t) = match t.as_bytes().first()? {
        b'-' => (true, &t[1..]),
        b'+' => (false, &t[1..]),
        _ => (false, t),
    };
    let (mantissa, exponent) = match t.find(['e', 'E']) {
        Some(at) => (&t[..at], t[at + 1..].parse::<i32>().ok()?),
        None => (t, 0),
    };
    let (whole, fraction) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let clean = |s: &str| -> Option<String> {
        (!s.starts_with('_') && !s.ends_with('_') && !s.contains("__")).then(|| s.replace('_', ""))
    };
    let (whole, fraction) = (clean(whole)?, clean(fraction)?);
    if whole.is_empty() && fraction.is_empty() {
        return None;
    }
    let digits = format!("{whole}{fraction}");
    if !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    // How many of `digits` are in front of the decimal point once the exponent is applied.
    let integral = whole.len() as i64 + i64::from(exponent);
    let digit = |k: i64| -> u32 {
        usize::try_from(k)
            .ok()
            .and_then(|k| digits.as_bytes().get(k))
            .map_or(0, |b| u32::from(b - b'0'))
    };
    let significant = digits.trim_start_matches('0').len() as i64;
    let leading_zeros = digits.len() as i64 - significant;
    if integral - leading_zeros > 20 {
        return Some(Err(RouteError::BoundRange));
    }
    let mut n: i128 = 0;
    for k in leading_zeros.min(integral.max(0))..integral.max(0) {
        n = n * 10 + i128::from(digit(k));
    }
    if digit(integral) >= 5 && integral >= 0 {
        n += 1;
    }
    Some(in_range(if negative { -n } else { n }))
}

/// `numeric_recv`'s format: digit count, weight, sign, display scale, then base-10000 digits,
/// the first worth 10000^weight. `None`: not that format.
fn binary_numeric(b: &[u8]) -> Option<Result<i64, RouteError>> {
    let word = |at: usize| -> Option<u16> {
        Some(u16::from_be_bytes(b.get(at..at + 2)?.try_into().ok()?))
    };
    let ndigits = usize::from(word(0)?);
    let weight = i64::from(word(2)? as i16);
    let sign = word(4)?;
    if b.len() != 8 + 2 * ndigits {
        return None;
    }
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 | 0xD000 | 0xF000 => return Some(Err(RouteError::BoundRange)),
        _ => return None,
    }
    if weight > 5 {
        return Some(Err(RouteError::BoundRange));
    }
    let group = |k: i64| -> Option<u16> {
        usize::try_from(k)
            .ok()
            .filter(|&k| k < ndigits)
            .map_or(Some(0), |k| word(8 + 2 * k))
    };
    let mut n: i128 = 0;
    for k in 0..=weight {
        n = n * 10_000 + i128::from(group(k)?);
    }
    if weight >= -1 && group(weight + 1)? >= 5000 {
        n += 1;
    }
    Some(in_range(if sign == 0x4000 { -n } else { n }))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn integers_as_int8in_reads_them() {
        assert_eq!(integer(" 42 ").unwrap(), Ok(42));
        assert_eq!(integer("-1_000").unwrap(), Ok(-1000));
        assert_eq!(integer("0x10").unwrap(), Ok(16));
        assert!(integer("1__0").is_none());
        assert!(integer("2.5").is_none());
        assert!(integer("").is_none());
        assert_eq!(
            integer("9223372036854775808").unwrap(),
            Err(RouteError::BoundRange)
        );
    }

    #[test]
    fn numerics_round_half_away_from_zero() {
        assert_eq!(decimal("2.5").unwrap(), Ok(3));
        assert_eq!(decimal("2.49").unwrap(), Ok(2));
        assert_eq!(decimal("-2.5").unwrap(), Ok(-3));
        assert_eq!(decimal("0.5").unwrap(), Ok(1));
        assert_eq!(decimal(".4").unwrap(), Ok(0));
        assert_eq!(decimal("1e3").unwrap(), Ok(1000));
        assert_eq!(decimal("15e-1").unwrap(), Ok(2));
        assert_eq!(decimal("0004").unwrap(), Ok(4));
        assert!(decimal("abc").is_none());
        // 12345.6789 as numeric_send writes it: groups 1, 2345, 6789; weight 1.
        let b = [0, 3, 0, 1, 0, 0, 0, 4, 0, 1, 0x09, 0x29, 0x1A, 0x85];
        assert_eq!(binary_numeric(&b).unwrap(), Ok(12346));
        // 0.5: one group 5000, weight -1.
        let b = [0, 1, 0xFF, 0xFF, 0, 0, 0, 1, 0x13, 0x88];
        assert_eq!(binary_numeric(&b).unwrap(), Ok(1));
        assert_eq!(float(2.5), Ok(2));
        assert_eq!(float(3.5), Ok(4));
    }
}
