//! Simple queries normalised for the plan cache: the text with its literals replaced by
//! markers, and the literals themselves, so `SELECT … WHERE id = 7` and `… WHERE id = 8` share
//! one plan and route without a parse.
//!
//! A scanner of our own, much cheaper than PostgreSQL's parser: it only has to find numeric and
//! plain string literals outside comments, quoted identifiers and other string forms. Text it is
//! unsure about (escape strings, dollar quoting, a literal glued to a word) keeps its literals as
//! part of the key, so a plan is only ever shared between texts that differ in plain literals.

use std::borrow::Cow;

use smallvec::SmallVec;

/// A literal of the scanned text.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Literal<'a> {
    /// Byte offset in the text.
    pub offset: usize,
    /// The value as PostgreSQL's input function reads it: the number's digits, or the string's
    /// content with doubled quotes undone.
    pub value: Cow<'a, str>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Normalized<'a> {
    /// The text with every literal replaced by a marker byte that cannot occur in SQL text
    /// outside a literal.
    pub key: Vec<u8>,
    pub literals: Literals<'a>,
}

/// A statement's literals: a few, nearly always, kept without an allocation.
pub type Literals<'a> = SmallVec<[Literal<'a>; 4]>;

const NUMBER_MARK: u8 = 0x01;
const STRING_MARK: u8 = 0x02;

/// Bytes of identifiers and keywords (letters, digits, `_`, `$`, and every non-ASCII byte), by
/// table: the scanner asks this of nearly every byte of every simple query. A static, as a const
/// table was copied onto the stack (256 bytes) in the string literal step.
static IDENT_BYTES: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = b.is_ascii_alphanumeric() || b == b'_' || b == b'$' || b >= 0x80;
        c += 1;
    }
    table
};

fn is_ident_byte(c: u8) -> bool {
    IDENT_BYTES[c as usize]
}

/// Whether a byte may start what the scanner looks for: digits, `.`, quotes, `$`, `-` and `/`
/// (comments) all lie in `"`..=`9`; the few other bytes in that range (`#%&()*+,`) are looked
/// at and passed.
fn may_start_token(c: u8) -> bool {
    (b'"'..=b'9').contains(&c)
}

/// The first position from `i` on whose byte [`may_start_token`], eight bytes at a time: most
/// of a query is words, spaces and punctuation the scanner passes.
fn next_candidate(b: &[u8], i: usize) -> usize {
    const ONES: u64 = u64::from_le_bytes([0x01; 8]);
    const HIGH: u64 = ONES * 0x80;
    const LO: u64 = ONES * b'"' as u64;
    const ABOVE_HI: u64 = ONES * (b'9' + 1) as u64;
    let (eights, rest) = b[i..].as_chunks::<8>();
    for (n, eight) in eights.iter().enumerate() {
        let x = u64::from_le_bytes(*eight);
        // Per byte, with its high bit set first so that no subtraction borrows from the next
        // byte: the first difference keeps the high bit when the low seven bits are >= `"`,
        // the second when they are > `9`; bytes with the high bit set (non-ASCII) are neither.
        let mask = (x | HIGH).wrapping_sub(LO) & !(x | HIGH).wrapping_sub(ABOVE_HI) & !x & HIGH;
        if mask != 0 {
            let at = i + 8 * n + (mask.trailing_zeros() / 8) as usize;
            debug_assert!(may_start_token(b[at]) && b[i..at].iter().all(|&c| !may_start_token(c)));
            return at;
        }
    }
    let tail = b.len() - rest.len();
    rest.iter()
        .position(|&c| may_start_token(c))
        .map_or(b.len(), |p| tail + p)
}

/// The end of the word starting at `i`.
fn word_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && is_ident_byte(b[i]) {
        i += 1;
    }
    i
}

/// `bytes` as text. Keys and literals are short and nearly always ASCII, which is told in a few
/// instructions; the general UTF-8 validation costs dozens even for four bytes.
pub(crate) fn utf8(bytes: &[u8]) -> Option<&str> {
    if bytes.is_ascii() {
        // SAFETY: ASCII is valid UTF-8, and the bytes were checked to be ASCII just above.
        Some(unsafe { std::str::from_utf8_unchecked(bytes) })
    } else {
        std::str::from_utf8(bytes).ok()
    }
}

/// Scans `sql`; `None` when it is not UTF-8, has a backslash in a plain string literal, or
/// ends inside one.
pub fn normalize(sql: &[u8]) -> Option<Normalized<'_>> {
    let mut key = Vec::with_capacity(sql.len());
    let literals = normalize_into(sql, &mut key)?;
    Some(Normalized { key, literals })
}

/// [`normalize`] with the key written into `key` (cleared first), a buffer the caller keeps
/// from one query to the next.
pub fn normalize_into<'a>(sql: &'a [u8], key: &mut Vec<u8>) -> Option<Literals<'a>> {
    // Nearly every query is ASCII, which is much cheaper to tell than UTF-8.
    if !sql.is_ascii() && std::str::from_utf8(sql).is_err() {
        return None;
    }
    let b = sql;
    key.clear();
    let mut literals = Literals::new();
    let mut out = Output {
        sql,
        key,
        literals: &mut literals,
        copied: 0,
    };
    let mut i = 0;
    // Where the last token the match below read ended: a byte there starts the next token
    // whatever comes before it (`$1$$` or `$$a$$5` are read on after the parameter or string).
    let mut token_end = 0;
    loop {
        i = next_candidate(b, i);
        let Some(&c) = b.get(i) else {
            break;
        };
        let prev = if i == 0 { b' ' } else { b[i - 1] };
        if is_ident_byte(prev) && is_ident_byte(c) && i != token_end {
            // A digit or `$` inside a word (`t1`, `a$b`), which no literal is part of.
            i = word_end(b, i + 1);
            continue;
        }
        i = match c {
            b'-' if b.get(i + 1) == Some(&b'-') => line_comment_end(b, i),
            b'/' if b.get(i + 1) == Some(&b'*') => block_comment_end(b, i),
            b'"' => quoted_end(b, i, b'"'),
            b'\'' => out.string(i, prev)?,
            b'$' => dollar_end(b, i),
            b'0'..=b'9' | b'.' if !is_ident_byte(prev) && starts_number(b, i) => out.number(i)?,
            // A digit or `$` that starts a word: `1e`, `0x1F` and `123abc` pass above.
            _ if is_ident_byte(c) => word_end(b, i),
            _ => i + 1,
        };
        token_end = i;
    }
    out.key.extend_from_slice(&b[out.copied..]);
    Some(literals)
}

/// What [`normalize_into`] has built so far, passed to the steps that take a literal out.
struct Output<'a, 'k> {
    sql: &'a [u8],
    key: &'k mut Vec<u8>,
    literals: &'k mut Literals<'a>,
    /// The text is copied to the key as it is, in runs between the literals: where the
    /// current run starts.
    copied: usize,
}

impl<'a> Output<'a, '_> {
    /// Takes the string at the quote at `i` (`prev` the byte before it) as a literal when it is
    /// a plain one, so only texts that differ in plain strings share a plan; returns its end.
    fn string(&mut self, i: usize, prev: u8) -> Option<usize> {
        let b = self.sql;
        // In E'…' a backslash escapes the next character, the quote included.
        let escaped = matches!(prev, b'e' | b'E') && (i < 2 || !is_ident_byte(b[i - 2]));
        let (end, closed) = if escaped {
            (escaped_end(b, i), true)
        } else {
            quoted_close(b, i, b'\'').map_or((b.len(), false), |end| (end, true))
        };
        // E'…', B'…', X'…', N'…', U&'…': other string forms, kept as written.
        if !(is_ident_byte(prev) || prev == b'&') {
            if !closed {
                // The text ends inside the string: a syntax error, which the shard reports;
                // nothing to share a plan with.
                return None;
            }
            let inner = self.text(i + 1, end.saturating_sub(1).max(i + 1))?;
            if inner.contains('\\') {
                // With standard_conforming_strings off a backslash escapes: whether this
                // literal ends where it seems to depends on the session.
                return None;
            }
            let value = if inner.contains("''") {
                Cow::Owned(inner.replace("''", "'"))
            } else {
                Cow::Borrowed(inner)
            };
            self.take(i, end, STRING_MARK, value);
        }
        Some(end)
    }

    /// Takes the number starting at `i` as a literal unless a word goes on from it (`1e`,
    /// `0x1F`, `123abc`), which PostgreSQL does not read as a plain number; returns its end.
    fn number(&mut self, i: usize) -> Option<usize> {
        let b = self.sql;
        let end = number_end(b, i);
        if b.get(end).is_some_and(|&c| is_ident_byte(c)) {
            return Some(word_end(b, end));
        }
        let value = Cow::Borrowed(self.text(i, end)?);
        self.take(i, end, NUMBER_MARK, value);
        Some(end)
    }

    /// The text `from..to` borrowed from the statement, so a literal's value costs no copy.
    fn text(&self, from: usize, to: usize) -> Option<&'a str> {
        // A slice of valid UTF-8 cut at ASCII bytes (quotes, digits) is valid UTF-8.
        utf8(&self.sql[from..to])
    }

    /// Replaces the literal `start..end` by `mark` in the key, so that texts differing only in
    /// its value share the key, and keeps its value for the plan's parameters. Inlined into
    /// both literal steps: as a call it cost the scan of a short query some 6% more instructions.
    #[inline(always)]
    fn take(&mut self, start: usize, end: usize, mark: u8, value: Cow<'a, str>) {
        self.literals.push(Literal {
            offset: start,
            value,
        });
        self.key.extend_from_slice(&self.sql[self.copied..start]);
        self.key.push(mark);
        self.copied = end;
    }
}

/// The end of the `--` comment at `i`: the line's end, so its digits and quotes are passed.
fn line_comment_end(b: &[u8], i: usize) -> usize {
    b[i..]
        .iter()
        .position(|&c| c == b'\n')
        .map_or(b.len(), |p| i + p)
}

/// The end of the `/*` comment at `i`, counting nested ones: block comments nest in
/// PostgreSQL, so the first `*/` may not end it.
fn block_comment_end(b: &[u8], mut i: usize) -> usize {
    let mut depth = 0usize;
    while i < b.len() {
        if b[i] == b'/' && b.get(i + 1) == Some(&b'*') {
            depth += 1;
            i += 2;
        } else if b[i] == b'*' && b.get(i + 1) == Some(&b'/') {
            depth -= 1;
            i += 2;
            if depth == 0 {
                break;
            }
        } else {
            i += 1;
        }
    }
    i
}

/// The end of the `$n` parameter or `$tag$…$tag$` string at `i`, both kept as written: the
/// dollar-quoted body may hold anything that looks like a literal.
fn dollar_end(b: &[u8], i: usize) -> usize {
    let tag_end = b[i + 1..]
        .iter()
        .position(|&c| !(c.is_ascii_alphanumeric() || c == b'_'))
        .map_or(b.len(), |p| i + 1 + p);
    if b.get(tag_end) == Some(&b'$') && !b[i + 1..tag_end].first().is_some_and(u8::is_ascii_digit) {
        let tag = &b[i..=tag_end];
        let body_start = tag_end + 1;
        b[body_start..]
            .windows(tag.len())
            .position(|w| w == tag)
            .map_or(b.len(), |p| body_start + p + tag.len())
    } else {
        tag_end
    }
}

/// The end (exclusive) of a quoted string or identifier starting at `start`; doubled quotes
/// stay inside.
fn quoted_end(b: &[u8], start: usize, quote: u8) -> usize {
    quoted_close(b, start, quote).unwrap_or(b.len())
}

/// [`quoted_end`], when the quote is closed.
fn quoted_close(b: &[u8], start: usize, quote: u8) -> Option<usize> {
    let mut i = start + 1;
    while i < b.len() {
        if b[i] == quote {
            if b.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return Some(i + 1);
        }
        i += 1;
    }
    None
}

/// The end of an `E'…'` string starting at the quote at `start`.
fn escaped_end(b: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

fn starts_number(b: &[u8], i: usize) -> bool {
    b[i].is_ascii_digit() || (b[i] == b'.' && b.get(i + 1).is_some_and(u8::is_ascii_digit))
}

/// The end of `digits[.digits][e[+-]digits]` starting at `i`.
fn number_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_digit() {
        i += 1;
    }
    if i < b.len() && b[i] == b'.' && b.get(i + 1) != Some(&b'.') {
        i += 1;
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
    }
    if i < b.len() && (b[i] == b'e' || b[i] == b'E') {
        let mut j = i + 1;
        if j < b.len() && (b[j] == b'+' || b[j] == b'-') {
            j += 1;
        }
        if j < b.len() && b[j].is_ascii_digit() {
            while j < b.len() && b[j].is_ascii_digit() {
                j += 1;
            }
            i = j;
        }
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn values(sql: &str) -> Vec<String> {
        normalize(sql.as_bytes())
            .unwrap()
            .literals
            .into_iter()
            .map(|l| l.value.into_owned())
            .collect()
    }

    #[test]
    fn texts_differing_in_literals_share_a_key() {
        let a = normalize(b"SELECT v FROM t WHERE id = 7 AND name = 'x'").unwrap();
        let b = normalize(b"SELECT v FROM t WHERE id = 81 AND name = 'it''s'").unwrap();
        assert_eq!(a.key, b.key);
        assert_eq!(
            values("SELECT v FROM t WHERE id = 81 AND name = 'it''s'"),
            ["81", "it's"]
        );
        // A number and a string are different shapes.
        let c = normalize(b"SELECT v FROM t WHERE id = '7' AND name = 'x'").unwrap();
        assert_ne!(a.key, c.key);
    }

    #[test]
    fn only_plain_literals_are_taken() {
        assert!(values("SELECT t1.c2 FROM t1").is_empty());
        assert!(values("SELECT E'a\\'b', B'101', X'ff', U&'x'").is_empty());
        assert!(values("SELECT $1, $$ 5 $$, $q$ 'x' $q$").is_empty());
        assert!(values("SELECT \"col 5\" -- 6\n /* 7 /* 8 */ 9 */").is_empty());
        assert_eq!(
            values("SELECT 1.5, .5, 1e3, 2E-2, 3."),
            ["1.5", ".5", "1e3", "2E-2", "3."]
        );
        assert_eq!(values("SELECT -5"), ["5"]);
        assert!(values("SELECT 0x1F, 12abc").is_empty());
        assert!(normalize(b"SELECT 'a\\', 1").is_none());
    }

    #[test]
    fn the_key_is_the_text_with_a_marker_for_each_literal() {
        let n = normalize(
            b"SELECT \"a 1\", x2, E'3' FROM t -- 4\nWHERE id = 7 AND s = 'it''s' /* 8 */",
        )
        .unwrap();
        assert_eq!(
            n.key,
            b"SELECT \"a 1\", x2, E'3' FROM t -- 4\nWHERE id = \x01 AND s = \x02 /* 8 */"
        );
        assert_eq!(normalize(b"1").unwrap().key, b"\x01");
        assert_eq!(normalize(b"").unwrap().key, b"");
    }

    #[test]
    fn text_is_utf8_checked_whether_ascii_or_not() {
        assert_eq!(utf8(b"1234"), Some("1234"));
        assert_eq!(utf8("é1".as_bytes()), Some("é1"));
        assert_eq!(utf8(b"\xff1"), None);
        assert_eq!(utf8(b""), Some(""));
    }

    #[test]
    fn literal_offsets_point_at_the_literal() {
        let sql = "SELECT 'a', 42";
        let n = normalize(sql.as_bytes()).unwrap();
        assert_eq!(n.literals[0].offset, 7);
        assert_eq!(n.literals[1].offset, 12);
    }
}
