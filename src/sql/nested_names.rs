//! Three-level NoSQL table names in client SQL. `CREATE TABLE a.b.c` makes a grandchild of
//! `a.b`, stored on the shards as table `"b.c"` in schema `a`; PostgreSQL reads `a.b.c` as
//! database `a`, schema `b`, table `c`. So before anything routes or forwards a statement, a
//! name chain whose first three parts name a recorded grandchild (`a.b.c`, or the column
//! reference `a.b.c.col`) is written as the shards know it, `"a"."b.c"`. Everything else keeps
//! its bytes.
//!
//! A scanner of PostgreSQL's lexical rules, enough to find identifier chains: comments, string
//! forms (plain, escape, dollar-quoted), quoted identifiers, parameters and numbers are skipped.

use super::quote::quote_ident;

/// One part of an identifier chain: its bytes in the text and its name as PostgreSQL folds it.
struct Part {
    start: usize,
    end: usize,
    name: String,
}

/// `sql` with every chain naming a grandchild (`is_grandchild(schema, "parent.child")`)
/// rewritten; `None` when there is none.
pub fn rewrite_nested_names(
    sql: &str,
    is_grandchild: impl Fn(&str, &str) -> bool,
) -> Option<String> {
    let b = sql.as_bytes();
    let mut out: Option<String> = None;
    let mut copied = 0;
    let mut i = 0;
    // A chain right after `.` is a field selection (`(row).a.b.c`), not a table name.
    let mut after_dot = false;
    while i < b.len() {
        let c = b[i];
        match c {
            b'-' if b.get(i + 1) == Some(&b'-') => {
                i = memchr::memchr(b'\n', &b[i..]).map_or(b.len(), |n| i + n + 1);
            }
            b'/' if b.get(i + 1) == Some(&b'*') => i = skip_block_comment(b, i),
            b'\'' => i = skip_string(b, i, false),
            b'$' => i = skip_dollar(b, i),
            b'0'..=b'9' => i = skip_number(b, i),
            b'.' if b.get(i + 1).is_some_and(u8::is_ascii_digit) => i = skip_number(b, i),
            b'"' => {
                let (parts, end) = chain(b, i);
                if !after_dot {
                    rewrite(sql, &parts, &is_grandchild, &mut out, &mut copied);
                }
                after_dot = false;
                // An unterminated quote reads as no chain: step over it.
                i = end.max(i + 1);
                continue;
            }
            c if is_ident_start(c) => {
                let word_end = ident_end(b, i);
                if b.get(word_end) == Some(&b'\'') {
                    // E'…' reads backslash escapes; U&'…', B'…', X'…', N'…' do not.
                    let escapes = word_end - i == 1 && (c == b'e' || c == b'E');
                    i = skip_string(b, word_end, escapes);
                    after_dot = false;
                    continue;
                }
                let (parts, end) = chain(b, i);
                if !after_dot {
                    rewrite(sql, &parts, &is_grandchild, &mut out, &mut copied);
                }
                after_dot = false;
                // An unterminated quote reads as no chain: step over it.
                i = end.max(i + 1);
                continue;
            }
            _ => i += 1,
        }
        after_dot = c == b'.' || (after_dot && c.is_ascii_whitespace());
    }
    let mut out = out?;
    out.push_str(&sql[copied..]);
    Some(out)
}

/// Rewrites the chain's first three parts when they name a grandchild.
fn rewrite(
    sql: &str,
    parts: &[Part],
    is_grandchild: &impl Fn(&str, &str) -> bool,
    out: &mut Option<String>,
    copied: &mut usize,
) {
    let [schema, parent, child, ..] = parts else {
        return;
    };
    let table = format!("{}.{}", parent.name, child.name);
    if !is_grandchild(&schema.name, &table) {
        return;
    }
    let out = out.get_or_insert_with(|| String::with_capacity(sql.len() + 8));
    out.push_str(&sql[*copied..schema.start]);
    out.push_str(&quote_ident(&schema.name));
    out.push('.');
    out.push_str(&quote_ident(&table));
    *copied = child.end;
}

/// The identifier chain starting at `i` (`a . "B" . c`, spaces allowed around the dots) and
/// where it ends.
fn chain(b: &[u8], mut i: usize) -> (Vec<Part>, usize) {
    let mut parts = Vec::new();
    while let Some(part) = identifier(b, i) {
        i = part.end;
        parts.push(part);
        let dot = skip_spaces(b, i);
        if b.get(dot) != Some(&b'.') {
            break;
        }
        let next = skip_spaces(b, dot + 1);
        match b.get(next) {
            Some(&c) if is_ident_start(c) || c == b'"' => i = next,
            // `a.b.*` or a dot before something else: the chain ends before the dot.
            _ => break,
        }
    }
    (parts, i)
}

fn identifier(b: &[u8], start: usize) -> Option<Part> {
    match *b.get(start)? {
        b'"' => {
            let mut name = Vec::new();
            let mut i = start + 1;
            loop {
                match b.get(i)? {
                    b'"' if b.get(i + 1) == Some(&b'"') => {
                        name.push(b'"');
                        i += 2;
                    }
                    b'"' => break,
                    &c => {
                        name.push(c);
                        i += 1;
                    }
                }
            }
            Some(Part {
                start,
                end: i + 1,
                name: String::from_utf8(name).ok()?,
            })
        }
        c if is_ident_start(c) => {
            let end = ident_end(b, start);
            let name = std::str::from_utf8(&b[start..end]).ok()?;
            Some(Part {
                start,
                end,
                name: name.to_ascii_lowercase(),
            })
        }
        _ => None,
    }
}

fn is_ident_start(c: u8) -> bool {
    c.is_ascii_alphabetic() || c == b'_' || c >= 0x80
}

fn ident_end(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (is_ident_start(b[i]) || b[i].is_ascii_digit() || b[i] == b'$') {
        i += 1;
    }
    i
}

fn skip_spaces(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && b[i].is_ascii_whitespace() {
        i += 1;
    }
    i
}

fn skip_block_comment(b: &[u8], start: usize) -> usize {
    let mut depth = 0;
    let mut i = start;
    while i + 1 < b.len() {
        match (b[i], b[i + 1]) {
            (b'/', b'*') => {
                depth += 1;
                i += 2;
            }
            (b'*', b'/') => {
                depth -= 1;
                i += 2;
                if depth == 0 {
                    return i;
                }
            }
            _ => i += 1,
        }
    }
    b.len()
}

/// From the opening quote at `start` to after the closing one.
fn skip_string(b: &[u8], start: usize, escapes: bool) -> usize {
    let mut i = start + 1;
    while i < b.len() {
        match b[i] {
            b'\\' if escapes => i += 2,
            b'\'' if b.get(i + 1) == Some(&b'\'') => i += 2,
            b'\'' => return i + 1,
            _ => i += 1,
        }
    }
    b.len()
}

/// `$1` or a dollar-quoted string `$tag$…$tag$`; a lone `$` is skipped.
fn skip_dollar(b: &[u8], start: usize) -> usize {
    let mut i = start + 1;
    if b.get(i).is_some_and(u8::is_ascii_digit) {
        while i < b.len() && b[i].is_ascii_digit() {
            i += 1;
        }
        return i;
    }
    while i < b.len() && (is_ident_start(b[i]) || b[i].is_ascii_digit()) {
        i += 1;
    }
    if b.get(i) != Some(&b'$') {
        return start + 1;
    }
    let tag = &b[start..=i];
    match memchr::memmem::find(&b[i + 1..], tag) {
        Some(n) => i + 1 + n + tag.len(),
        None => b.len(),
    }
}

fn skip_number(b: &[u8], mut i: usize) -> usize {
    while i < b.len() && (b[i].is_ascii_alphanumeric() || b[i] == b'.' || b[i] == b'_') {
        i += 1;
    }
    i
}

#[cfg(test)]
mod tests {
    use super::*;

    fn rewrite(sql: &str) -> Option<String> {
        rewrite_nested_names(sql, |schema, table| {
            schema == "myproducts" && table == "reviews.ratings"
        })
    }

    #[test]
    fn an_unterminated_quote_ends_the_scan() {
        assert_eq!(rewrite("SELECT 1 \" x"), None);
        assert_eq!(rewrite("SELECT \"a\"\"b"), None);
    }

    #[test]
    fn grandchild_names_are_written_as_on_the_shards() {
        assert_eq!(
            rewrite("SELECT * FROM myProducts.reviews.ratings WHERE productName = 'x'").unwrap(),
            "SELECT * FROM \"myproducts\".\"reviews.ratings\" WHERE productName = 'x'"
        );
        assert_eq!(
            rewrite("select myproducts . reviews.\"ratings\".stars, r.x from MYPRODUCTS.reviews.ratings r")
                .unwrap(),
            "select \"myproducts\".\"reviews.ratings\".stars, r.x from \"myproducts\".\"reviews.ratings\" r"
        );
        assert_eq!(
            rewrite("DELETE FROM myproducts.reviews.ratings").unwrap(),
            "DELETE FROM \"myproducts\".\"reviews.ratings\""
        );
    }

    #[test]
    fn other_text_is_left_alone() {
        for sql in [
            "SELECT * FROM myproducts.reviews",
            "SELECT * FROM myproducts.\"reviews.ratings\"",
            "SELECT 'myproducts.reviews.ratings', E'\\'myproducts.reviews.ratings'",
            "SELECT $x$ myproducts.reviews.ratings $x$, $1",
            "-- myproducts.reviews.ratings\nSELECT 1 /* myproducts.reviews.ratings /* nested */ x.y.z */",
            "SELECT (r).myproducts.reviews.ratings FROM t r",
            "SELECT \"myproducts.reviews\".ratings FROM t",
            "SELECT other.reviews.ratings, myproducts.reviews.other FROM t",
            "SELECT 1.5, .5e3",
        ] {
            assert_eq!(rewrite(sql), None, "{sql}");
        }
    }
}
