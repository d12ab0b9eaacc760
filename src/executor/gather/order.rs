//! How the proxy orders rows from several shards: PostgreSQL's order for the column types it
//! can compare exactly (integers, floats with NaN on top, numerics by their text, C-collation
//! text and ISO dates by bytes, binary integers and floats), refused for the rest.

use std::cmp::Ordering;

use super::frames::values;
use crate::router::plan::SortKey;

/// The ORDER BY of a merge, over the columns of its RowDescription.
pub(super) struct RowOrder<'k> {
    keys: &'k [SortKey],
    orders: Vec<Order>,
}

impl<'k> RowOrder<'k> {
    /// `columns`: the type OID and format code of each column (`frames::columns`).
    pub(super) fn new(keys: &'k [SortKey], columns: &[(u32, i16)]) -> Result<Self, String> {
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
    pub(super) fn sort(&self, rows: &mut [bytes::Bytes]) -> Result<(), String> {
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
enum Order {
    Integer,
    Float,
    Numeric,
    /// Byte order: text in the C collation, ISO dates and timestamps, uuids, booleans.
    Bytes,
    /// Binary format: big-endian two's complement (int2/4/8, date, timestamp).
    BinaryInteger,
    /// Binary format: IEEE float4/float8.
    BinaryFloat,
}

fn order_of(oid: u32, format: i16) -> Option<Order> {
    const INTEGERS: [u32; 4] = [20, 21, 23, 26];
    const FLOATS: [u32; 2] = [700, 701];
    // text, varchar, bpchar, name (C collation); uuid; bool (f < t, 0 < 1)
    const BYTES: [u32; 6] = [25, 1043, 1042, 19, 2950, 16];
    // date, timestamp: ISO text output sorts by bytes; binary is an integer
    const TIMES: [u32; 2] = [1082, 1114];
    Some(match (format, oid) {
        (0, o) if INTEGERS.contains(&o) => Order::Integer,
        (0, o) if FLOATS.contains(&o) => Order::Float,
        (0, 1700) => Order::Numeric,
        (0, o) if BYTES.contains(&o) || TIMES.contains(&o) => Order::Bytes,
        (1, o) if INTEGERS.contains(&o) || TIMES.contains(&o) => Order::BinaryInteger,
        (1, o) if FLOATS.contains(&o) => Order::BinaryFloat,
        (1, o) if BYTES.contains(&o) => Order::Bytes,
        _ => return None,
    })
}

fn compare(o: Order, x: &[u8], y: &[u8]) -> Result<Ordering, String> {
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
    })
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
    use super::compare_numeric;
    use std::cmp::Ordering::*;

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
