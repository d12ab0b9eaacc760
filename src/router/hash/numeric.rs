//! `numeric`: PostgreSQL's `numeric_in` / `numeric_recv`, the column typmod's rounding, and
//! `hash_numeric_extended`.
//!
//! Values are kept as exact decimal digits so that '1.50', '1.5' and '15e-1' come out identical
//! and rounding to a typmod scale is exact, as it is in PostgreSQL.

use super::jenkins::hash_bytes_extended;
use super::{is_pg_space, HashError, KeyType, NumericTypmod};

/// `numeric_in` rejects exponents from `INT_MAX / 2` on, before the format limits below apply.
const MAX_EXPONENT: i64 = (i32::MAX / 2) as i64;
/// Digits after the decimal point a numeric can hold (`NUMERIC_DSCALE_MAX`).
const MAX_DSCALE: i64 = 0x3FFF;
/// Base-10000 digit groups before the decimal point a numeric can hold (`NUMERIC_WEIGHT_MAX`).
const MAX_WEIGHT: i64 = i16::MAX as i64;

#[derive(Debug, Clone, PartialEq, Eq)]
pub(super) enum Numeric {
    NaN,
    Infinity,
    /// `digits × 10^exp`; the sign is kept out because PostgreSQL's hash ignores it.
    Finite {
        digits: Vec<u8>,
        exp: i64,
    },
}

fn syntax(input: &str) -> HashError {
    HashError::InvalidInput {
        ty: KeyType::Numeric(None),
        input: input.to_owned(),
    }
}

pub(super) fn parse_text(input: &str) -> Result<Numeric, HashError> {
    let s = input.trim_matches(is_pg_space);
    for (word, value) in [
        ("nan", Numeric::NaN),
        ("infinity", Numeric::Infinity),
        ("+infinity", Numeric::Infinity),
        ("-infinity", Numeric::Infinity),
        ("inf", Numeric::Infinity),
        ("+inf", Numeric::Infinity),
        ("-inf", Numeric::Infinity),
    ] {
        if s.eq_ignore_ascii_case(word) {
            return Ok(value);
        }
    }
    let unsigned = s.strip_prefix(['+', '-']).unwrap_or(s);
    let (mantissa, exponent) = match unsigned.find(['e', 'E']) {
        Some(at) => (&unsigned[..at], Some(&unsigned[at + 1..])),
        None => (unsigned, None),
    };
    let (int_part, frac_part) = mantissa.split_once('.').unwrap_or((mantissa, ""));
    let all_digits = |p: &str| p.bytes().all(|b| b.is_ascii_digit());
    if int_part.len() + frac_part.len() == 0 || !all_digits(int_part) || !all_digits(frac_part) {
        return Err(syntax(input));
    }
    let mut exp = -(frac_part.len() as i64);
    if let Some(e) = exponent {
        // PostgreSQL reads the exponent with strtol, which skips leading white space.
        let e = e.trim_start_matches(is_pg_space);
        let digits = e.strip_prefix(['+', '-']).unwrap_or(e);
        if digits.is_empty() || !all_digits(digits) {
            return Err(syntax(input));
        }
        match e.parse::<i64>() {
            Ok(e) if e.abs() < MAX_EXPONENT => exp += e,
            _ => return Err(out_of_range(input)),
        }
    }
    let digits = int_part.bytes().chain(frac_part.bytes()).map(|b| b - b'0');
    let value = normalize(digits.collect(), exp);
    // numeric_in keeps the scale as written, so '1.000…' with too many places still overflows.
    let dscale = (-exp).max(0);
    check_format(&value, dscale, input)?;
    Ok(value)
}

/// Decodes `numeric_send` output: ndigits, weight, sign, dscale (all int16), then base-10000
/// digits.
pub(super) fn parse_binary(bytes: &[u8]) -> Result<Numeric, HashError> {
    let invalid = |reason: &'static str| HashError::InvalidBinary {
        ty: KeyType::Numeric(None),
        reason,
    };
    let field = |i: usize| -> Result<i16, HashError> {
        bytes
            .get(2 * i..2 * i + 2)
            .map(|b| i16::from_be_bytes([b[0], b[1]]))
            .ok_or(invalid("the value is shorter than its header says"))
    };
    let ndigits = field(0)?;
    let weight = i64::from(field(1)?);
    let sign = field(2)? as u16;
    let dscale = field(3)?;
    if ndigits < 0 || bytes.len() != 8 + 2 * ndigits as usize {
        return Err(invalid("the length does not match the digit count"));
    }
    match sign {
        0x0000 | 0x4000 => {}
        0xC000 => return Ok(Numeric::NaN),
        0xD000 | 0xF000 => return Ok(Numeric::Infinity),
        _ => return Err(invalid("the sign field is not a valid numeric sign")),
    }
    if dscale < 0 || i64::from(dscale) > MAX_DSCALE {
        return Err(invalid("the display scale is out of range"));
    }
    let mut digits = Vec::with_capacity(4 * ndigits as usize);
    for i in 0..ndigits as usize {
        let group = field(4 + i)?;
        if !(0..10000).contains(&group) {
            return Err(invalid("a base-10000 digit is outside 0..9999"));
        }
        digits.extend(format!("{group:04}").bytes().map(|b| b - b'0'));
    }
    let exp = (weight - i64::from(ndigits) + 1) * 4;
    // numeric_recv truncates digits beyond the declared display scale.
    let value = round_or_truncate(normalize(digits, exp), i64::from(dscale), false);
    check_format(&value, i64::from(dscale), "<binary numeric>")?;
    Ok(value)
}

/// Strips leading and trailing zero digits; an empty digit list is zero.
fn normalize(mut digits: Vec<u8>, mut exp: i64) -> Numeric {
    let lead = digits.iter().take_while(|&&d| d == 0).count();
    digits.drain(..lead);
    while digits.last() == Some(&0) {
        digits.pop();
        exp += 1;
    }
    if digits.is_empty() {
        exp = 0;
    }
    Numeric::Finite { digits, exp }
}

/// Exponent of the most significant digit (`x` in `d × 10^x`), `None` for zero.
fn msd_exponent(digits: &[u8], exp: i64) -> Option<i64> {
    (!digits.is_empty()).then(|| exp + digits.len() as i64 - 1)
}

fn out_of_range(input: &str) -> HashError {
    HashError::OutOfRange {
        ty: KeyType::Numeric(None),
        input: input.to_owned(),
    }
}

fn check_format(value: &Numeric, dscale: i64, input: &str) -> Result<(), HashError> {
    if dscale > MAX_DSCALE {
        return Err(out_of_range(input));
    }
    if let Numeric::Finite { digits, exp } = value {
        if msd_exponent(digits, *exp).is_some_and(|x| x.div_euclid(4) > MAX_WEIGHT) {
            return Err(out_of_range(input));
        }
    }
    Ok(())
}

/// Keeps `scale` digits after the point (negative: rounds to tens, hundreds …). PostgreSQL
/// rounds half away from zero; since the sign is not kept, that is "half up" on magnitudes.
fn round_or_truncate(value: Numeric, scale: i64, round: bool) -> Numeric {
    let Numeric::Finite { mut digits, exp } = value else {
        return value;
    };
    if exp >= -scale {
        return Numeric::Finite { digits, exp };
    }
    let drop = (-scale - exp) as usize;
    let new_exp = -scale;
    if drop > digits.len() {
        return normalize(Vec::new(), 0);
    }
    let round_up = round && digits[digits.len() - drop] >= 5;
    digits.truncate(digits.len() - drop);
    if round_up {
        let mut i = digits.len();
        loop {
            if i == 0 {
                digits.insert(0, 1);
                break;
            }
            i -= 1;
            if digits[i] == 9 {
                digits[i] = 0;
            } else {
                digits[i] += 1;
                break;
            }
        }
    }
    normalize(digits, new_exp)
}

/// What assigning the value to a `numeric(precision, scale)` column does (`apply_typmod`).
pub(super) fn apply_typmod(
    value: Numeric,
    typmod: NumericTypmod,
    input: &str,
) -> Result<Numeric, HashError> {
    let overflow = || HashError::NumericFieldOverflow {
        input: input.to_owned(),
        precision: typmod.precision,
        scale: typmod.scale,
    };
    match value {
        Numeric::NaN => Ok(value),
        Numeric::Infinity => Err(overflow()),
        Numeric::Finite { .. } => {
            let rounded = round_or_truncate(value, i64::from(typmod.scale), true);
            if let Numeric::Finite { digits, exp } = &rounded {
                let max_int_digits = i64::from(typmod.precision - typmod.scale);
                if msd_exponent(digits, *exp).is_some_and(|x| x + 1 > max_int_digits) {
                    return Err(overflow());
                }
            }
            Ok(rounded)
        }
    }
}

/// `hash_numeric_extended`: hashes the base-10000 digits without leading or trailing zero groups,
/// then mixes in the weight (the group position of the most significant digit).
pub(super) fn hash(value: &Numeric, seed: u64) -> u64 {
    let (digits, exp) = match value {
        Numeric::NaN | Numeric::Infinity => return seed,
        Numeric::Finite { digits, exp } => (digits, *exp),
    };
    let Some(msd) = msd_exponent(digits, exp) else {
        return seed.wrapping_sub(1);
    };
    let weight = msd.div_euclid(4);
    let lsd_group = exp.div_euclid(4);
    let mut groups = vec![0i16; (weight - lsd_group + 1) as usize];
    for (i, &d) in digits.iter().enumerate() {
        let x = msd - i as i64;
        let group = x.div_euclid(4);
        let place = 10i16.pow(x.rem_euclid(4) as u32);
        groups[(weight - group) as usize] += i16::from(d) * place;
    }
    let bytes: Vec<u8> = groups.iter().flat_map(|g| g.to_le_bytes()).collect();
    // PostgreSQL XORs a C int into a uint64, which sign-extends negative weights.
    hash_bytes_extended(&bytes, seed) ^ (weight as u64)
}

/// A numeric value in PostgreSQL's sort order (`cmp_numerics`): -Infinity, negative values,
/// zero, positive values, +Infinity, then NaN, which PostgreSQL sorts above everything and
/// equal to itself.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct NumericKey {
    /// -2 -Infinity, -1 negative, 0 zero, 1 positive, 2 +Infinity, 3 NaN.
    class: i8,
    /// The exponent of the most significant digit (finite non-zero values).
    msd: i64,
    /// Without leading or trailing zeros.
    digits: Vec<u8>,
}

/// `value` (whose sign the parse drops, as the hash ignores it) with its sign, for ordering.
pub(super) fn order_key(value: &Numeric, negative: bool) -> NumericKey {
    let sign = if negative { -1 } else { 1 };
    match value {
        Numeric::NaN => NumericKey {
            class: 3,
            msd: 0,
            digits: Vec::new(),
        },
        Numeric::Infinity => NumericKey {
            class: 2 * sign,
            msd: 0,
            digits: Vec::new(),
        },
        Numeric::Finite { digits, exp } => match msd_exponent(digits, *exp) {
            None => NumericKey {
                class: 0,
                msd: 0,
                digits: Vec::new(),
            },
            Some(msd) => NumericKey {
                class: sign,
                msd,
                digits: digits.clone(),
            },
        },
    }
}

impl NumericKey {
    pub fn order(&self, other: &NumericKey) -> std::cmp::Ordering {
        use std::cmp::Ordering;
        let by_class = self.class.cmp(&other.class);
        if by_class != Ordering::Equal || self.class.abs() != 1 {
            return by_class;
        }
        // Same sign: compare magnitudes (digit strings without trailing zeros compare as
        // numbers once their leading digits' places agree), reversed for negatives.
        let magnitude = self
            .msd
            .cmp(&other.msd)
            .then_with(|| self.digits.cmp(&other.digits));
        if self.class < 0 {
            magnitude.reverse()
        } else {
            magnitude
        }
    }
}

/// Whether numeric input (text, or `numeric_send` output) is negative; the digits are read
/// by [`parse_text`] / [`parse_binary`].
pub(super) fn is_negative_text(input: &str) -> bool {
    input.trim_matches(is_pg_space).starts_with('-')
}

pub(super) fn is_negative_binary(bytes: &[u8]) -> bool {
    matches!(bytes.get(4..6), Some([0x40, 0x00] | [0xF0, 0x00]))
}
