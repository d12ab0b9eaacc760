//! Text input of the fixed-size and string key types, following PostgreSQL 15's input functions
//! (`int4in`, `boolin`, `charin`, `uuid_in`, `byteain`, `float8in`, `varchar`/`bpchar` typmods).

use super::{is_pg_space, HashError, KeyType};

fn invalid(ty: KeyType, input: &str) -> HashError {
    HashError::InvalidInput {
        ty,
        input: input.to_owned(),
    }
}

fn out_of_range(ty: KeyType, input: &str) -> HashError {
    HashError::OutOfRange {
        ty,
        input: input.to_owned(),
    }
}

/// `pg_strtoint16/32/64` (PostgreSQL 15: decimal only, surrounding white space allowed).
pub(super) fn parse_int(ty: KeyType, input: &str) -> Result<i64, HashError> {
    let s = input.trim_matches(is_pg_space);
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    if unsigned.is_empty() || !unsigned.bytes().all(|b| b.is_ascii_digit()) {
        return Err(invalid(ty, input));
    }
    let (min, max) = match ty {
        KeyType::Int2 => (i64::from(i16::MIN), i64::from(i16::MAX)),
        KeyType::Int4 => (i64::from(i32::MIN), i64::from(i32::MAX)),
        _ => (i64::MIN, i64::MAX),
    };
    match s.parse::<i64>() {
        Ok(v) if (min..=max).contains(&v) => Ok(v),
        _ => Err(out_of_range(ty, input)),
    }
}

/// `boolin`: any unambiguous prefix of true/false/yes/no, on/off, 1/0, case-insensitive.
pub(super) fn parse_bool(input: &str) -> Result<bool, HashError> {
    let s = input.trim_matches(is_pg_space).to_ascii_lowercase();
    let prefix_of = |word: &str, min_len: usize| s.len() >= min_len && word.starts_with(&s);
    if prefix_of("true", 1) || prefix_of("yes", 1) || prefix_of("on", 2) || s == "1" {
        Ok(true)
    } else if prefix_of("false", 1) || prefix_of("no", 1) || prefix_of("off", 2) || s == "0" {
        Ok(false)
    } else {
        Err(invalid(KeyType::Bool, input))
    }
}

/// `charin`: the first byte, or a `\ooo` octal escape; PostgreSQL's `char` is signed.
pub(super) fn parse_char(input: &str) -> i8 {
    let b = input.as_bytes();
    let octal = |c: u8| (b'0'..=b'7').contains(&c);
    if b.len() == 4 && b[0] == b'\\' && (b'0'..=b'3').contains(&b[1]) && octal(b[2]) && octal(b[3])
    {
        let v = (b[1] - b'0') << 6 | (b[2] - b'0') << 3 | (b[3] - b'0');
        return v as i8;
    }
    b.first().map_or(0, |&c| c as i8)
}

/// `uuid_in`: 32 hex digits, optionally in braces, with a hyphen allowed after any group of four.
pub(super) fn parse_uuid(input: &str) -> Result<[u8; 16], HashError> {
    let err = || invalid(KeyType::Uuid, input);
    let (mut rest, braces) = match input.strip_prefix('{') {
        Some(r) => (r.as_bytes(), true),
        None => (input.as_bytes(), false),
    };
    let mut out = [0u8; 16];
    for (i, byte) in out.iter_mut().enumerate() {
        let pair = rest.get(..2).ok_or_else(err)?;
        let hex = std::str::from_utf8(pair).map_err(|_| err())?;
        if !hex.bytes().all(|b| b.is_ascii_hexdigit()) {
            return Err(err());
        }
        *byte = u8::from_str_radix(hex, 16).map_err(|_| err())?;
        rest = &rest[2..];
        if i % 2 == 1 && i < 15 {
            rest = rest.strip_prefix(b"-").unwrap_or(rest);
        }
    }
    if braces {
        rest = rest.strip_prefix(b"}").ok_or_else(err)?;
    }
    if rest.is_empty() {
        Ok(out)
    } else {
        Err(err())
    }
}

/// `byteain`: `\x` hex (white space allowed between digit pairs) or the escape format.
pub(super) fn parse_bytea(input: &str) -> Result<Vec<u8>, HashError> {
    let err = || invalid(KeyType::Bytea, input);
    let bytes = input.as_bytes();
    if let Some(hex) = bytes.strip_prefix(b"\\x") {
        let digits: Vec<u8> = hex
            .iter()
            .copied()
            .filter(|b| !matches!(b, b' ' | b'\t' | b'\n' | b'\r'))
            .collect();
        if !digits.len().is_multiple_of(2) {
            return Err(err());
        }
        return digits
            .chunks(2)
            .map(|p| {
                let s = std::str::from_utf8(p).map_err(|_| err())?;
                if !s.bytes().all(|b| b.is_ascii_hexdigit()) {
                    return Err(err());
                }
                u8::from_str_radix(s, 16).map_err(|_| err())
            })
            .collect();
    }
    let mut out = Vec::with_capacity(bytes.len());
    let mut i = 0;
    while i < bytes.len() {
        if bytes[i] != b'\\' {
            out.push(bytes[i]);
            i += 1;
        } else if bytes.get(i + 1) == Some(&b'\\') {
            out.push(b'\\');
            i += 2;
        } else {
            let esc = bytes.get(i + 1..i + 4).ok_or_else(err)?;
            let ok = (b'0'..=b'3').contains(&esc[0])
                && esc[1..].iter().all(|c| (b'0'..=b'7').contains(c));
            if !ok {
                return Err(err());
            }
            out.push((esc[0] - b'0') << 6 | (esc[1] - b'0') << 3 | (esc[2] - b'0'));
            i += 4;
        }
    }
    Ok(out)
}

/// `float8in` / `float4in`: strtod syntax plus NaN/Infinity spellings; a finite input that
/// overflows, or a non-zero one that underflows to zero, is out of range.
pub(super) fn parse_float(ty: KeyType, input: &str) -> Result<f64, HashError> {
    let s = input.trim_matches(is_pg_space);
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let negative = s.starts_with('-');
    let lower = unsigned.to_ascii_lowercase();
    if lower == "nan" {
        return Ok(f64::NAN);
    }
    if lower == "inf" || lower == "infinity" {
        return Ok(if negative {
            f64::NEG_INFINITY
        } else {
            f64::INFINITY
        });
    }
    if lower.starts_with("0x") {
        return Err(HashError::NeedsServer {
            ty,
            input: input.to_owned(),
            reason: "hexadecimal floating-point input is not parsed locally",
        });
    }
    let syntax_ok = !unsigned.is_empty()
        && unsigned
            .bytes()
            .all(|b| b.is_ascii_digit() || matches!(b, b'.' | b'e' | b'E' | b'+' | b'-'));
    if !syntax_ok {
        return Err(invalid(ty, input));
    }
    let nonzero = unsigned
        .split(['e', 'E'])
        .next()
        .is_some_and(|m| m.bytes().any(|b| matches!(b, b'1'..=b'9')));
    let v = if ty == KeyType::Float4 {
        s.parse::<f32>().map(f64::from)
    } else {
        s.parse::<f64>()
    }
    .map_err(|_| invalid(ty, input))?;
    if v.is_infinite() || (v == 0.0 && nonzero) {
        return Err(out_of_range(ty, input));
    }
    Ok(v)
}

/// Applies a `varchar(n)` / `char(n)` length: excess characters may only be spaces, which are cut.
pub(super) fn fit_length(
    ty: KeyType,
    value: &str,
    max_chars: Option<u32>,
) -> Result<&str, HashError> {
    let Some(max) = max_chars else {
        return Ok(value);
    };
    match value.char_indices().nth(max as usize) {
        None => Ok(value),
        Some((cut, _)) if value[cut..].bytes().all(|b| b == b' ') => Ok(&value[..cut]),
        Some(_) => Err(HashError::ValueTooLong {
            ty,
            input: value.to_owned(),
        }),
    }
}

/// Text values may not contain NUL and must be valid in the (UTF-8) server encoding.
pub(super) fn check_text(ty: KeyType, bytes: &[u8]) -> Result<&str, HashError> {
    let text = std::str::from_utf8(bytes).map_err(|_| HashError::InvalidBinary {
        ty,
        reason: "the bytes are not valid UTF-8",
    })?;
    if text.contains('\0') {
        return Err(HashError::InvalidBinary {
            ty,
            reason: "text values cannot contain a NUL byte",
        });
    }
    Ok(text)
}
