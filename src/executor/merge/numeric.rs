//! Adding numeric values in PostgreSQL's text form exactly: the sum of two numerics has the
//! larger of their scales (`numeric_add`'s result dscale), and so does a sum of partial sums.

use std::cmp::Ordering;

/// A numeric read from its text: sign, digits before the point (no leading zeros), digits after
/// it (as written: their count is the value's scale).
struct Decimal {
    negative: bool,
    int: Vec<u8>,
    frac: Vec<u8>,
}

enum Value {
    Number(Decimal),
    NaN,
    Infinity,
    NegInfinity,
}

fn parse(s: &str) -> Option<Value> {
    match s {
        "NaN" => return Some(Value::NaN),
        "Infinity" => return Some(Value::Infinity),
        "-Infinity" => return Some(Value::NegInfinity),
        _ => {}
    }
    let (negative, digits) = match s.strip_prefix('-') {
        Some(rest) => (true, rest),
        None => (false, s),
    };
    let (int, frac) = digits.split_once('.').unwrap_or((digits, ""));
    if int.is_empty() || !int.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    if !frac.bytes().all(|c| c.is_ascii_digit()) {
        return None;
    }
    let int: Vec<u8> = int
        .trim_start_matches('0')
        .bytes()
        .map(|c| c - b'0')
        .collect();
    let frac: Vec<u8> = frac.bytes().map(|c| c - b'0').collect();
    Some(Value::Number(Decimal {
        negative,
        int,
        frac,
    }))
}

/// `a + b` as PostgreSQL's numeric addition prints it; `None` when a text is not a numeric's.
pub fn add(a: &str, b: &str) -> Option<String> {
    Some(match (parse(a)?, parse(b)?) {
        (Value::NaN, _) | (_, Value::NaN) => "NaN".into(),
        (Value::Infinity, Value::NegInfinity) | (Value::NegInfinity, Value::Infinity) => {
            "NaN".into()
        }
        (Value::Infinity, _) | (_, Value::Infinity) => "Infinity".into(),
        (Value::NegInfinity, _) | (_, Value::NegInfinity) => "-Infinity".into(),
        (Value::Number(x), Value::Number(y)) => add_numbers(x, y),
    })
}

/// Digits of a magnitude aligned to `scale` fraction digits, most significant first.
fn aligned(d: &Decimal, int_len: usize, scale: usize) -> Vec<u8> {
    let mut out = vec![0; int_len - d.int.len()];
    out.extend_from_slice(&d.int);
    out.extend_from_slice(&d.frac);
    out.resize(int_len + scale, 0);
    out
}

fn add_numbers(x: Decimal, y: Decimal) -> String {
    let scale = x.frac.len().max(y.frac.len());
    let int_len = x.int.len().max(y.int.len()) + 1;
    let (a, b) = (aligned(&x, int_len, scale), aligned(&y, int_len, scale));
    let (negative, digits) = if x.negative == y.negative {
        let mut out = vec![0u8; a.len()];
        let mut carry = 0;
        for i in (0..a.len()).rev() {
            let s = a[i] + b[i] + carry;
            out[i] = s % 10;
            carry = s / 10;
        }
        (x.negative, out)
    } else {
        // The larger magnitude minus the smaller, with its sign.
        let (big, small, negative) = match a.cmp(&b) {
            Ordering::Less => (&b, &a, y.negative),
            _ => (&a, &b, x.negative),
        };
        let mut out = vec![0u8; a.len()];
        let mut borrow = 0i8;
        for i in (0..a.len()).rev() {
            let mut d = big[i] as i8 - small[i] as i8 - borrow;
            borrow = 0;
            if d < 0 {
                d += 10;
                borrow = 1;
            }
            out[i] = d as u8;
        }
        (negative, out)
    };
    let (int, frac) = digits.split_at(int_len);
    let int: Vec<u8> = {
        let first = int.iter().position(|&d| d != 0).unwrap_or(int.len());
        int[first..].to_vec()
    };
    let zero = int.is_empty() && frac.iter().all(|&d| d == 0);
    let mut s = String::new();
    if negative && !zero {
        s.push('-');
    }
    if int.is_empty() {
        s.push('0');
    } else {
        s.extend(int.iter().map(|d| (b'0' + d) as char));
    }
    if scale > 0 {
        s.push('.');
        s.extend(frac.iter().map(|d| (b'0' + d) as char));
    }
    s
}

#[cfg(test)]
mod tests {
    use super::add;

    #[test]
    fn sums_print_as_postgresql_adds() {
        let cases = [
            ("1", "2", "3"),
            ("1.50", "2.5", "4.00"),
            ("-1.25", "1.25", "0.00"),
            ("-5", "3.1", "-1.9"),
            ("999999999999999999999", "1", "1000000000000000000000"),
            ("0.001", "-0.01", "-0.009"),
            ("-0.5", "-0.75", "-1.25"),
            ("NaN", "1", "NaN"),
            ("Infinity", "-Infinity", "NaN"),
            ("Infinity", "5", "Infinity"),
            ("0", "0.00", "0.00"),
        ];
        for (a, b, want) in cases {
            assert_eq!(add(a, b).as_deref(), Some(want), "{a} + {b}");
        }
        assert_eq!(add("1e5", "1"), None);
    }
}
