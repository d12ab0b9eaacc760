//! `date`, `timestamp` and `timestamptz` values as PostgreSQL stores them: days, respectively
//! microseconds, since 2000-01-01 (UTC for timestamptz), with the extreme values for ±infinity.
//!
//! Only input that means the same on every session is parsed here: ISO 8601 dates and times,
//! explicit numeric UTC offsets, `epoch` and `infinity`. Everything else PostgreSQL accepts
//! (`now`, zone names, DateStyle-dependent orders) is reported as needing the server.

use super::{is_pg_space, HashError, KeyType};

const USECS_PER_DAY: i64 = 86_400_000_000;
/// Days from 1970-01-01 to PostgreSQL's epoch 2000-01-01.
const UNIX_TO_PG_DAYS: i64 = 10_957;
/// 4714-11-24 BC (Julian day 0), the first day PostgreSQL accepts, relative to 2000-01-01.
const MIN_DAY: i64 = -2_451_545;
/// 5874897-12-31, the last `date`.
const MAX_DATE_DAY: i64 = 2_145_031_948;
/// 294277-01-01 00:00, the first instant past the last `timestamp`.
const END_TIMESTAMP: i64 = 9_223_371_331_200_000_000;
const MAX_OFFSET_HOURS: i64 = 15;

/// What the text said, before it is checked against the type's range.
#[derive(Debug, PartialEq, Eq)]
enum Parsed {
    Infinity {
        negative: bool,
    },
    /// Local date and time; `offset_secs` is the written UTC offset, if any.
    Instant {
        day: i64,
        usecs: i64,
        offset_secs: Option<i64>,
    },
}

fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    // Proleptic Gregorian calendar, astronomical years (1 BC is year 0).
    let y = if month <= 2 { year - 1 } else { year };
    let era = y.div_euclid(400);
    let yoe = y - era * 400;
    let mp = (month + 9) % 12;
    let doy = (153 * mp + 2) / 5 + day - 1;
    let doe = yoe * 365 + yoe / 4 - yoe / 100 + doy;
    era * 146_097 + doe - 719_468 - UNIX_TO_PG_DAYS
}

fn days_in_month(year: i64, month: i64) -> i64 {
    let leap = year % 4 == 0 && (year % 100 != 0 || year % 400 == 0);
    match month {
        2 if leap => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// A run of ASCII digits at the start of `s`, with the rest.
fn digits(s: &str) -> (&str, &str) {
    let end = s
        .bytes()
        .position(|b| !b.is_ascii_digit())
        .unwrap_or(s.len());
    s.split_at(end)
}

fn number(d: &str) -> Option<i64> {
    if d.is_empty() || d.len() > 9 {
        return None;
    }
    d.parse().ok()
}

/// Parses `[+-]HH[:MM[:SS]]` or `[+-]HHMM[SS]`, returning seconds east of UTC.
fn parse_offset(s: &str) -> Option<Result<i64, ()>> {
    let negative = match s.as_bytes().first()? {
        b'+' => false,
        b'-' => true,
        _ => return None,
    };
    let (h, mut rest) = digits(&s[1..]);
    let (mut hour, mut min, mut sec) = (number(h)?, 0, 0);
    if let Some(r) = rest.strip_prefix(':') {
        let (m, r) = digits(r);
        min = number(m)?;
        rest = r;
        if let Some(r) = rest.strip_prefix(':') {
            let (sx, r) = digits(r);
            sec = number(sx)?;
            rest = r;
        }
    } else if h.len() >= 5 {
        (hour, min, sec) = (hour / 10_000, hour / 100 % 100, hour % 100);
    } else if h.len() >= 3 {
        (hour, min) = (hour / 100, hour % 100);
    }
    if !rest.is_empty() {
        return None;
    }
    if hour > MAX_OFFSET_HOURS || min >= 60 || sec >= 60 {
        return Some(Err(()));
    }
    let secs = (hour * 60 + min) * 60 + sec;
    Some(Ok(if negative { -secs } else { secs }))
}

/// `HH:MM[:SS[.fraction]]` → microseconds into the day (24:00:00 and leap second 60 allowed,
/// as PostgreSQL allows them), with what follows.
fn parse_time(s: &str) -> Option<(Result<i64, ()>, &str)> {
    let (h, rest) = digits(s);
    let rest = rest.strip_prefix(':')?;
    let (m, mut rest) = digits(rest);
    let (hour, min) = (number(h)?, number(m)?);
    if h.len() > 2 || m.len() != 2 {
        return None;
    }
    let (mut sec, mut fsec) = (0, 0);
    if let Some(r) = rest.strip_prefix(':') {
        let (sx, r) = digits(r);
        if sx.len() != 2 {
            return None;
        }
        sec = number(sx)?;
        rest = r;
        if let Some(r) = rest.strip_prefix('.') {
            let (frac, r) = digits(r);
            // PostgreSQL: rint(strtod(".fraction") * 1e6), i.e. ties to even on the double.
            let f: f64 = format!("0.{frac}").parse().ok()?;
            fsec = (f * 1e6).round_ties_even() as i64;
            rest = r;
        }
    }
    let overflow =
        min > 59 || sec > 60 || hour > 24 || (hour == 24 && (min > 0 || sec > 0 || fsec > 0));
    let usecs = ((hour * 60 + min) * 60 + sec) * 1_000_000 + fsec;
    Some((if overflow { Err(()) } else { Ok(usecs) }, rest))
}

fn parse(ty: KeyType, input: &str) -> Result<Parsed, HashError> {
    let invalid = || HashError::InvalidInput {
        ty,
        input: input.to_owned(),
    };
    let field_overflow = || HashError::OutOfRange {
        ty,
        input: input.to_owned(),
    };
    let needs_server = |reason: &'static str| HashError::NeedsServer {
        ty,
        input: input.to_owned(),
        reason,
    };
    let s = input.trim_matches(is_pg_space);
    let lower = s.to_ascii_lowercase();
    match lower.as_str() {
        "infinity" | "+infinity" => return Ok(Parsed::Infinity { negative: false }),
        "-infinity" => return Ok(Parsed::Infinity { negative: true }),
        "epoch" => {
            return Ok(Parsed::Instant {
                day: -UNIX_TO_PG_DAYS,
                usecs: 0,
                offset_secs: Some(0),
            })
        }
        "now" | "today" | "tomorrow" | "yesterday" | "allballs" => {
            return Err(needs_server("it depends on the current time"))
        }
        _ => {}
    }
    let era = [" bc", " ad"].into_iter().find_map(|suffix| {
        lower
            .strip_suffix(suffix)
            .map(|body| (body, suffix == " bc"))
    });
    let (body, bc) = match era {
        Some((body, bc)) => (body.trim_end_matches(is_pg_space), bc),
        None => (lower.as_str(), false),
    };
    let (ys, rest) = digits(body);
    if ys.len() < 4 || !rest.starts_with('-') {
        return Err(needs_server(
            "only ISO 8601 dates (YYYY-MM-DD) are parsed locally",
        ));
    }
    let (ms, rest) = digits(&rest[1..]);
    let (ds, mut rest) = rest.strip_prefix('-').map(digits).ok_or_else(invalid)?;
    let (year, month, day) = match (number(ys), number(ms), number(ds)) {
        (Some(y), Some(m), Some(d)) if ms.len() <= 2 && ds.len() <= 2 => (y, m, d),
        _ => return Err(invalid()),
    };
    let mut usecs = 0;
    let after_date = rest.trim_start_matches(is_pg_space);
    let time_start = after_date.strip_prefix('t').unwrap_or(after_date);
    if time_start.starts_with(|c: char| c.is_ascii_digit()) {
        let (t, r) = parse_time(time_start).ok_or_else(invalid)?;
        usecs = t.map_err(|()| field_overflow())?;
        rest = r;
    } else {
        rest = after_date;
    }
    let zone = rest.trim_matches(is_pg_space);
    let offset_secs = match zone {
        "" => None,
        "z" | "utc" | "gmt" => Some(0),
        _ => match parse_offset(zone) {
            Some(offset) => Some(offset.map_err(|()| field_overflow())?),
            None if zone.starts_with(|c: char| c.is_ascii_alphabetic()) => {
                return Err(needs_server("time zone names are resolved by the server"))
            }
            None => return Err(invalid()),
        },
    };
    if !(1..=12).contains(&month) || year == 0 {
        return Err(field_overflow());
    }
    let year = if bc { 1 - year } else { year };
    if day < 1 || day > days_in_month(year, month) {
        return Err(field_overflow());
    }
    Ok(Parsed::Instant {
        day: days_from_civil(year, month, day),
        usecs,
        offset_secs,
    })
}

/// `date_in`: a time or offset after the date is accepted and ignored, as PostgreSQL does.
pub(super) fn parse_date(input: &str) -> Result<i32, HashError> {
    match parse(KeyType::Date, input)? {
        Parsed::Infinity { negative } => Ok(if negative { i32::MIN } else { i32::MAX }),
        Parsed::Instant { day, .. } if (MIN_DAY..=MAX_DATE_DAY).contains(&day) => Ok(day as i32),
        Parsed::Instant { .. } => Err(HashError::OutOfRange {
            ty: KeyType::Date,
            input: input.to_owned(),
        }),
    }
}

/// `timestamp_in` / `timestamptz_in` (the caller applies the column's precision).
pub(super) fn parse_timestamp(ty: KeyType, input: &str) -> Result<i64, HashError> {
    let with_zone = matches!(ty, KeyType::Timestamptz(_));
    let (day, usecs, offset) = match parse(ty, input)? {
        Parsed::Infinity { negative } => return Ok(if negative { i64::MIN } else { i64::MAX }),
        Parsed::Instant {
            day,
            usecs,
            offset_secs,
        } => {
            let offset = match offset_secs {
                // A timestamp without time zone silently drops a written offset.
                _ if !with_zone => 0,
                Some(o) => o,
                None => {
                    return Err(HashError::AmbiguousTimeZone {
                        input: input.to_owned(),
                    })
                }
            };
            (day, usecs, offset)
        }
    };
    let ts = i128::from(day) * i128::from(USECS_PER_DAY) + i128::from(usecs)
        - i128::from(offset) * 1_000_000;
    let min = i128::from(MIN_DAY) * i128::from(USECS_PER_DAY);
    if ts < min || ts >= i128::from(END_TIMESTAMP) {
        return Err(HashError::OutOfRange {
            ty,
            input: input.to_owned(),
        });
    }
    Ok(ts as i64)
}

/// `date_recv`'s range check; ±infinity are the extreme values.
pub(super) fn check_date(day: i32) -> Result<i32, HashError> {
    let finite = day != i32::MIN && day != i32::MAX;
    if finite && !(MIN_DAY..=MAX_DATE_DAY).contains(&i64::from(day)) {
        return Err(HashError::InvalidBinary {
            ty: KeyType::Date,
            reason: "the date is out of range",
        });
    }
    Ok(day)
}

/// `timestamp_recv`'s range check; ±infinity are the extreme values.
pub(super) fn check_timestamp(ty: KeyType, ts: i64) -> Result<i64, HashError> {
    let finite = ts != i64::MIN && ts != i64::MAX;
    if finite && !(MIN_DAY * USECS_PER_DAY..END_TIMESTAMP).contains(&ts) {
        return Err(HashError::InvalidBinary {
            ty,
            reason: "the timestamp is out of range",
        });
    }
    Ok(ts)
}

/// `AdjustTimestampForTypmod`: rounds half away from zero to the column's fractional digits.
pub(super) fn round_to_precision(ts: i64, precision: Option<u8>) -> i64 {
    let Some(p) = precision.filter(|&p| p < 6) else {
        return ts;
    };
    if ts == i64::MIN || ts == i64::MAX {
        return ts;
    }
    let scale = 10i64.pow(u32::from(6 - p));
    let half = scale / 2;
    if ts >= 0 {
        (ts + half) / scale * scale
    } else {
        -((-ts + half) / scale * scale)
    }
}
