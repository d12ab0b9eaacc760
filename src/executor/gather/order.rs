//! How the proxy orders rows from several shards: PostgreSQL's order for the column types it
//! can compare exactly (integers, floats with NaN on top, numerics by their text or binary
//! digits, C-collation text by bytes, dates and timestamps by the instant their ISO text or
//! binary value names), refused for the rest. Dates and times in another DateStyle than ISO
//! are refused when compared, never ordered by their text.

use std::cmp::Ordering;

use super::frames::values;
use crate::router::plan::SortKey;

/// The ORDER BY of a merge, over the columns of its RowDescription.
pub(crate) struct RowOrder<'k> {
    keys: &'k [SortKey],
    orders: Vec<Order>,
}

impl<'k> RowOrder<'k> {
    /// `columns`: the type OID and format code of each column (`frames::columns`).
    pub(crate) fn new(keys: &'k [SortKey], columns: &[(u32, i16)]) -> Result<Self, String> {
        let mut orders = Vec::with_capacity(keys.len());
        for k in keys {
            let (oid, format) = columns.get(k.column).copied().unwrap_or((0, 0));
            orders.push(order_of(oid, format).ok_or_else(|| {
                format!(
                    "ORDER BY a column of type OID {oid} over several shards is not supported \
                     yet: add the full sharding key to the WHERE clause, or order by a number, \
                     text, date or timestamp column"
                )
            })?);
        }
        Ok(RowOrder { keys, orders })
    }

    /// How two DataRows compare; an error when a value is not what its type's output is.
    pub(super) fn compare(&self, a: &[u8], b: &[u8]) -> Result<Ordering, String> {
        let (va, vb) = (values(a), values(b));
        for (k, o) in self.keys.iter().zip(&self.orders) {
            let (x, y) = (
                va.get(k.column).copied().flatten(),
                vb.get(k.column).copied().flatten(),
            );
            let nulls_low = if k.nulls_first {
                Ordering::Less
            } else {
                Ordering::Greater
            };
            let ord = match (x, y) {
                (None, None) => Ordering::Equal,
                (None, Some(_)) => nulls_low,
                (Some(_), None) => nulls_low.reverse(),
                (Some(x), Some(y)) => {
                    let c = compare(*o, x, y)?;
                    if k.descending {
                        c.reverse()
                    } else {
                        c
                    }
                }
            };
            if ord != Ordering::Equal {
                return Ok(ord);
            }
        }
        Ok(Ordering::Equal)
    }

    /// Sorts rows stably (so a sort of the shards' concatenated runs equals their merge).
    pub(crate) fn sort(&self, rows: &mut [bytes::Bytes]) -> Result<(), String> {
        let mut bad = None;
        rows.sort_by(|a, b| {
            self.compare(a, b).unwrap_or_else(|e| {
                bad.get_or_insert(e);
                Ordering::Equal
            })
        });
        bad.map_or(Ok(()), Err)
    }
}

/// How a sort column's values compare.
#[derive(Clone, Copy)]
pub(crate) enum Order {
    Integer,
    Float,
    Numeric,
    /// Byte order: text in the C collation, ISO dates and timestamps, uuids, booleans.
    Bytes,
    /// Binary format: big-endian two's complement (int2/4/8, date, timestamp).
    BinaryInteger,
    /// Binary format: IEEE float4/float8.
    BinaryFloat,
    /// Binary numeric: sign, weight and base-10000 digits.
    BinaryNumeric,
    /// ISO text of a date, timestamp or timestamptz (with its UTC offset).
    IsoTime,
}

pub(crate) fn order_of(oid: u32, format: i16) -> Option<Order> {
    const INTEGERS: [u32; 4] = [20, 21, 23, 26];
    const FLOATS: [u32; 2] = [700, 701];
    // text, varchar, bpchar, name (C collation); uuid; bool (f < t, 0 < 1); time (HH:MM:SS)
    const BYTES: [u32; 7] = [25, 1043, 1042, 19, 2950, 16, 1083];
    // date, timestamp, timestamptz: binary is an integer (days, microseconds), as is time's
    const TIMES: [u32; 3] = [1082, 1114, 1184];
    Some(match (format, oid) {
        (0, o) if INTEGERS.contains(&o) => Order::Integer,
        (0, o) if FLOATS.contains(&o) => Order::Float,
        (0, 1700) => Order::Numeric,
        (0, o) if TIMES.contains(&o) => Order::IsoTime,
        (0, o) if BYTES.contains(&o) => Order::Bytes,
        (1, o) if INTEGERS.contains(&o) || TIMES.contains(&o) || o == 1083 => Order::BinaryInteger,
        (1, o) if FLOATS.contains(&o) => Order::BinaryFloat,
        (1, 1700) => Order::BinaryNumeric,
        (1, o) if BYTES.contains(&o) => Order::Bytes,
        _ => return None,
    })
}

pub(crate) fn compare(o: Order, x: &[u8], y: &[u8]) -> Result<Ordering, String> {
    fn text(b: &[u8]) -> Result<&str, String> {
        std::str::from_utf8(b).map_err(|_| "a sort value is not text".to_string())
    }
    Ok(match o {
        Order::Bytes => x.cmp(y),
        Order::BinaryInteger => {
            let p = |b: &[u8]| -> Result<i64, String> {
                Ok(match b.len() {
                    2 => i64::from(i16::from_be_bytes([b[0], b[1]])),
                    4 => i64::from(i32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                    8 => i64::from_be_bytes(b.try_into().map_err(|_| "bad integer")?),
                    n => return Err(format!("a binary integer of {n} bytes")),
                })
            };
            p(x)?.cmp(&p(y)?)
        }
        Order::BinaryFloat => {
            let p = |b: &[u8]| -> Result<f64, String> {
                Ok(match b.len() {
                    4 => f64::from(f32::from_be_bytes([b[0], b[1], b[2], b[3]])),
                    8 => f64::from_be_bytes(b.try_into().map_err(|_| "bad float")?),
                    n => return Err(format!("a binary float of {n} bytes")),
                })
            };
            float_order(p(x)?, p(y)?)
        }
        Order::Integer => {
            let p = |b: &[u8]| text(b)?.parse::<i64>().map_err(|e| e.to_string());
            p(x)?.cmp(&p(y)?)
        }
        Order::Float => {
            // PostgreSQL sorts NaN above every other value.
            let p = |b: &[u8]| -> Result<f64, String> {
                match text(b)? {
                    "NaN" => Ok(f64::NAN),
                    "Infinity" => Ok(f64::INFINITY),
                    "-Infinity" => Ok(f64::NEG_INFINITY),
                    s => s.parse::<f64>().map_err(|e| e.to_string()),
                }
            };
            float_order(p(x)?, p(y)?)
        }
        Order::Numeric => compare_numeric(text(x)?, text(y)?),
        Order::BinaryNumeric => binary_numeric(x)?.cmp(&binary_numeric(y)?),
        Order::IsoTime => {
            let p = |b: &[u8]| {
                iso_instant(text(b)?).ok_or_else(|| {
                    "ORDER BY a date or time over several shards needs DateStyle ISO: \
                     SET DateStyle = ISO, or add the full sharding key"
                        .to_string()
                })
            };
            p(x)?.cmp(&p(y)?)
        }
    })
}

/// A binary numeric as a sortable key: its class (-Infinity, negative, zero, positive,
/// Infinity, NaN) and, for a number, its digits from the most significant, negated for a
/// negative one so that larger magnitudes sort lower.
fn binary_numeric(b: &[u8]) -> Result<(i8, Vec<i32>), String> {
    let word = |i: usize| -> Result<i16, String> {
        b.get(2 * i..2 * i + 2)
            .map(|w| i16::from_be_bytes([w[0], w[1]]))
            .ok_or_else(|| "a binary numeric cut short".to_string())
    };
    let ndigits = word(0)?.max(0) as usize;
    let weight = i32::from(word(1)?);
    let sign = word(2)? as u16;
    let class = match sign {
        0xF000 => return Ok((-2, Vec::new())),
        0xD000 => return Ok((2, Vec::new())),
        0xC000 => return Ok((3, Vec::new())),
        _ if ndigits == 0 => return Ok((0, Vec::new())),
        0x4000 => -1,
        _ => 1,
    };
    // The weight first, then each digit; trailing zero digits do not change the value.
    let mut key = vec![weight];
    for i in 0..ndigits {
        key.push(i32::from(word(4 + i)?));
    }
    while key.len() > 1 && key.last() == Some(&0) {
        key.pop();
    }
    if class < 0 {
        // Larger magnitudes are smaller numbers: each part negated, and a shorter digit list
        // (a prefix, so a smaller magnitude) must sort after a longer one.
        for k in key.iter_mut() {
            *k = -*k;
        }
        key.push(i32::MAX);
    }
    Ok((class, key))
}

/// The instant an ISO-style date, timestamp or timestamptz text names, in microseconds of
/// the proleptic Gregorian calendar (UTC for a timestamptz); `None` for any other style.
fn iso_instant(s: &str) -> Option<i128> {
    match s {
        "infinity" => return Some(i128::MAX),
        "-infinity" => return Some(i128::MIN),
        _ => {}
    }
    let (s, bc) = match s.strip_suffix(" BC") {
        Some(rest) => (rest, true),
        None => (s, false),
    };
    let (date, time) = s.split_once(' ').unwrap_or((s, ""));
    let mut parts = date.splitn(3, '-');
    let year: i64 = parts.next()?.parse().ok()?;
    let month: i64 = parts.next()?.parse().ok()?;
    let day: i64 = parts.next()?.parse().ok()?;
    if !(1..=12).contains(&month) || !(1..=31).contains(&day) {
        return None;
    }
    let year = if bc { 1 - year } else { year };
    let mut micros = i128::from(days_from_civil(year, month, day)) * 86_400_000_000;
    if !time.is_empty() {
        // HH:MM:SS[.ffffff], then a UTC offset ±HH[:MM[:SS]] for a timestamptz.
        let offset_at = time.find(['+', '-']);
        let (clock, offset) = match offset_at {
            Some(i) => (&time[..i], Some(&time[i..])),
            None => (time, None),
        };
        let mut hms = clock.splitn(3, ':');
        let h: i128 = hms.next()?.parse().ok()?;
        let m: i128 = hms.next()?.parse().ok()?;
        let sec = hms.next()?;
        let (whole, frac) = sec.split_once('.').unwrap_or((sec, ""));
        let whole: i128 = whole.parse().ok()?;
        if frac.len() > 6 || !frac.bytes().all(|c| c.is_ascii_digit()) {
            return None;
        }
        let frac: i128 = format!("{frac:0<6}").parse().ok()?;
        micros += ((h * 60 + m) * 60 + whole) * 1_000_000 + frac;
        if let Some(offset) = offset {
            let negative = offset.starts_with('-');
            let mut o = offset[1..].split(':');
            let mut seconds: i128 = 0;
            for unit in [3600, 60, 1] {
                if let Some(p) = o.next() {
                    seconds += p.parse::<i128>().ok()? * unit;
                }
            }
            let seconds = if negative { -seconds } else { seconds };
            micros -= seconds * 1_000_000;
        }
    }
    Some(micros)
}

/// Days since 1970-01-01 of a proleptic Gregorian date (astronomical year numbering).
fn days_from_civil(y: i64, m: i64, d: i64) -> i64 {
    let y = if m <= 2 { y - 1 } else { y };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (m + 9) % 12;
    let doy = (153 * mp + 2) / 5 + d - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468
}

/// PostgreSQL's float order: NaN above every other value, equal to itself.
fn float_order(a: f64, b: f64) -> Ordering {
    match (a.is_nan(), b.is_nan()) {
        (true, true) => Ordering::Equal,
        (true, false) => Ordering::Greater,
        (false, true) => Ordering::Less,
        (false, false) => a.partial_cmp(&b).unwrap_or(Ordering::Equal),
    }
}

/// Orders numeric output text exactly: `-Infinity` < numbers < `Infinity` < `NaN`.
fn compare_numeric(a: &str, b: &str) -> Ordering {
    fn rank(s: &str) -> i8 {
        match s {
            "-Infinity" => 0,
            "Infinity" => 2,
            "NaN" => 3,
            _ => 1,
        }
    }
    let (ra, rb) = (rank(a), rank(b));
    if ra != 1 || rb != 1 {
        return ra.cmp(&rb);
    }
    let neg = |s: &str| s.starts_with('-');
    let magnitude = |s: &str| {
        let s = s.trim_start_matches(['-', '+']);
        let (int, frac) = s.split_once('.').unwrap_or((s, ""));
        let int = int.trim_start_matches('0').to_string();
        let frac = frac.trim_end_matches('0').to_string();
        (int, frac)
    };
    let (ia, fa) = magnitude(a);
    let (ib, fb) = magnitude(b);
    let zero = |i: &str, f: &str| i.is_empty() && f.is_empty();
    let (na, nb) = (neg(a) && !zero(&ia, &fa), neg(b) && !zero(&ib, &fb));
    let mag = ia
        .len()
        .cmp(&ib.len())
        .then_with(|| ia.cmp(&ib))
        .then_with(|| fa.cmp(&fb));
    match (na, nb) {
        (false, false) => mag,
        (true, true) => mag.reverse(),
        (true, false) => Ordering::Less,
        (false, true) => Ordering::Greater,
    }
}

#[cfg(test)]
mod tests {
    use super::{binary_numeric, compare_numeric, iso_instant};
    use std::cmp::Ordering::*;

    #[test]
    fn iso_times_order_by_instant() {
        let t = |s: &str| iso_instant(s).unwrap_or_else(|| panic!("{s}"));
        assert!(t("2023-05-01 10:00:00+05:30") < t("2023-05-01 05:00:00+00"));
        assert!(t("0044-03-15 BC") < t("0001-01-01"));
        assert!(t("9999-12-31") < t("10000-01-01"));
        assert!(t("2021-01-01 00:00:00.5") > t("2021-01-01 00:00:00.25"));
        assert!(t("-infinity") < t("0001-01-01") && t("infinity") > t("294276-01-01"));
        assert_eq!(t("1970-01-02"), 86_400_000_000);
        assert_eq!(iso_instant("04.12.2021"), None);
        assert_eq!(iso_instant("12/04/2021 10:00:00 IST"), None);
    }

    #[test]
    fn binary_numerics_order_by_value() {
        // (ndigits, weight, sign, dscale, digits…)
        let n = |w: &[i16]| -> Vec<u8> { w.iter().flat_map(|x| x.to_be_bytes()).collect() };
        let k = |w: &[i16]| binary_numeric(&n(w)).unwrap();
        let one = k(&[1, 0, 0, 0, 1]);
        let ten_thousand = k(&[1, 1, 0, 0, 1]);
        let one_and_half = k(&[2, 0, 0, 1, 1, 5000]);
        let minus_one = k(&[1, 0, 0x4000, 0, 1]);
        let minus_one_and_half = k(&[2, 0, 0x4000, 1, 1, 5000]);
        let zero = k(&[0, 0, 0, 2]);
        let nan = k(&[0, 0, 0xC000u16 as i16, 0]);
        let mut all = [
            nan.clone(),
            ten_thousand.clone(),
            one_and_half.clone(),
            zero.clone(),
            one.clone(),
            minus_one.clone(),
            minus_one_and_half.clone(),
        ];
        all.sort();
        assert_eq!(
            all,
            [
                minus_one_and_half,
                minus_one,
                zero,
                one,
                one_and_half,
                ten_thousand,
                nan
            ]
        );
    }

    #[test]
    fn numeric_text_orders_exactly() {
        let cases = [
            ("1", "2", Less),
            ("10", "9", Greater),
            ("-10", "-9", Less),
            ("1.50", "1.5", Equal),
            ("0.001", "0.01", Less),
            ("-0", "0", Equal),
            ("-1", "0.5", Less),
            ("NaN", "Infinity", Greater),
            ("-Infinity", "-1e9", Less),
            (
                "123456789012345678901234567890",
                "123456789012345678901234567889",
                Greater,
            ),
        ];
        for (a, b, want) in cases {
            assert_eq!(compare_numeric(a, b), want, "{a} vs {b}");
        }
    }
}
