//! Cheap lexical classification of SQL text: only the statements' leading keywords and a few
//! function names are looked at, never a full parse, because this runs for every simple query.

/// What a statement does to the backend session beyond its own transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionEffect {
    /// Leaves state on the backend connection (SET, LISTEN, temp tables, SQL PREPARE, session
    /// advisory locks, WITH HOLD cursors, LOAD): the client keeps that connection from now on.
    pub pins: bool,
    /// Drops every prepared statement (and for DISCARD ALL, resets every setting).
    pub resets: bool,
}

/// Scans every statement of a (possibly multi-statement) query text.
pub fn session_effect(sql: &[u8]) -> SessionEffect {
    let mut effect = SessionEffect::default();
    // Most texts hold one statement: only a semicolon with more text after it makes splitting
    // (which must walk quotes and comments byte by byte) necessary.
    let single = [sql];
    let one_statement = match memchr::memchr(b';', sql) {
        None => true,
        Some(i) => sql[i + 1..].iter().all(u8::is_ascii_whitespace),
    };
    let statements: &mut dyn Iterator<Item = &[u8]> = if one_statement {
        &mut single.into_iter()
    } else {
        &mut Statements::new(sql)
    };
    for stmt in statements {
        let is = |w: &[u8], k: &str| w.eq_ignore_ascii_case(k.as_bytes());
        let w0 = first_word(stmt);
        // Only these statements' meaning depends on the words after the first.
        let [_, w1, w2] = if ["set", "prepare", "create", "discard"]
            .iter()
            .any(|k| is(w0, k))
        {
            leading_words::<3>(stmt)
        } else {
            [w0, &[], &[]]
        };
        let temp = |w: &[u8]| is(w, "temp") || is(w, "temporary");
        let tx_local_set = is(w1, "local")
            || is(w1, "transaction")
            || is(w1, "constraints")
            || (is(w1, "session") && is(w2, "characteristics"));
        if (is(w0, "set") && !tx_local_set)
            || is(w0, "reset")
            || is(w0, "listen")
            || is(w0, "load")
            || (is(w0, "prepare") && !is(w1, "transaction"))
            || (is(w0, "declare") && contains_word(stmt, b"hold"))
            || (is(w0, "create")
                && (temp(w1) || ((is(w1, "local") || is(w1, "global")) && temp(w2))))
            || (is(w0, "discard") && !is(w1, "all"))
        {
            effect.pins = true;
        }
        if is(w0, "discard") || is(w0, "deallocate") {
            effect.resets = true;
        }
        // Session-level advisory locks and set_config(…, false) hide inside any statement; the
        // transaction-level lock functions are spelled pg_advisory_xact_lock… and do not match
        // "advisory_lock".
        if mentions_session_function(stmt) {
            effect.pins = true;
        }
    }
    effect
}

/// The text's first word, after whitespace and comments (empty if it starts otherwise).
pub fn first_word(sql: &[u8]) -> &[u8] {
    // Most texts start with their keyword: no whitespace or comment to skip.
    if sql.first().is_some_and(u8::is_ascii_alphabetic) {
        return &sql[..word_end(sql, 0)];
    }
    let [w] = leading_words::<1>(sql);
    w
}

/// Splits SQL text into statements at semicolons outside quotes, comments and dollar quotes.
struct Statements<'a> {
    sql: &'a [u8],
    pos: usize,
}

impl<'a> Statements<'a> {
    fn new(sql: &'a [u8]) -> Self {
        Statements { sql, pos: 0 }
    }
}

impl<'a> Iterator for Statements<'a> {
    type Item = &'a [u8];
    fn next(&mut self) -> Option<&'a [u8]> {
        let s = self.sql;
        if self.pos >= s.len() {
            return None;
        }
        let start = self.pos;
        let mut i = start;
        while i < s.len() {
            match s[i] {
                b';' => {
                    self.pos = i + 1;
                    return Some(&s[start..i]);
                }
                b'\'' | b'"' => i = skip_quoted(s, i, s[i]),
                b'-' if s.get(i + 1) == Some(&b'-') => {
                    i = s[i..]
                        .iter()
                        .position(|c| *c == b'\n')
                        .map_or(s.len(), |p| i + p + 1)
                }
                b'/' if s.get(i + 1) == Some(&b'*') => i = skip_block_comment(s, i),
                b'$' => i = skip_dollar_quoted(s, i),
                _ => i += 1,
            }
        }
        self.pos = s.len();
        Some(&s[start..])
    }
}

fn skip_quoted(s: &[u8], open: usize, quote: u8) -> usize {
    let mut i = open + 1;
    while i < s.len() {
        if s[i] == quote {
            if s.get(i + 1) == Some(&quote) {
                i += 2;
                continue;
            }
            return i + 1;
        }
        i += 1;
    }
    s.len()
}

fn skip_block_comment(s: &[u8], open: usize) -> usize {
    let mut depth = 0;
    let mut i = open;
    while i + 1 < s.len() {
        if s[i] == b'/' && s[i + 1] == b'*' {
            depth += 1;
            i += 2;
        } else if s[i] == b'*' && s[i + 1] == b'/' {
            depth -= 1;
            i += 2;
            if depth == 0 {
                return i;
            }
        } else {
            i += 1;
        }
    }
    s.len()
}

/// `$tag$ … $tag$`; a `$` that does not open a dollar quote (like `$1`) is skipped alone.
fn skip_dollar_quoted(s: &[u8], open: usize) -> usize {
    let tag_end = s[open + 1..]
        .iter()
        .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
        .map(|p| open + 1 + p);
    match tag_end {
        Some(end)
            if s[end] == b'$' && !s[open + 1..end].first().is_some_and(u8::is_ascii_digit) =>
        {
            let tag = &s[open..=end];
            let body = end + 1;
            s[body..]
                .windows(tag.len())
                .position(|w| w == tag)
                .map_or(s.len(), |p| body + p + tag.len())
        }
        _ => open + 1,
    }
}

/// The first `N` words of a statement, after whitespace and comments; missing words are empty.
/// Where the word (letters, digits, `_`) starting at `start` ends.
fn word_end(s: &[u8], start: usize) -> usize {
    s[start..]
        .iter()
        .position(|c| !(c.is_ascii_alphanumeric() || *c == b'_'))
        .map_or(s.len(), |p| start + p)
}

pub fn leading_words<const N: usize>(stmt: &[u8]) -> [&[u8]; N] {
    let mut words: [&[u8]; N] = [&[]; N];
    let mut found = 0;
    let mut i = 0;
    while i < stmt.len() && found < N {
        let c = stmt[i];
        if c.is_ascii_whitespace() || c == b'(' {
            i += 1;
        } else if c == b'-' && stmt.get(i + 1) == Some(&b'-') {
            i = stmt[i..]
                .iter()
                .position(|c| *c == b'\n')
                .map_or(stmt.len(), |p| i + p + 1);
        } else if c == b'/' && stmt.get(i + 1) == Some(&b'*') {
            i = skip_block_comment(stmt, i);
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let end = word_end(stmt, i);
            words[found] = &stmt[i..end];
            found += 1;
            i = end;
        } else {
            break;
        }
    }
    words
}

/// Whether the statement mentions `advisory_lock` or `set_config` (any case). Both have an
/// underscore at a known place, and underscores are rare, so only those are looked around.
fn mentions_session_function(stmt: &[u8]) -> bool {
    let around = |p: usize, before: usize, needle: &[u8]| {
        p.checked_sub(before)
            .and_then(|start| stmt.get(start..start + needle.len()))
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    };
    memchr::memchr_iter(b'_', stmt)
        .any(|p| around(p, 8, b"advisory_lock") || around(p, 3, b"set_config"))
}

fn contains_word(hay: &[u8], word: &[u8]) -> bool {
    hay.windows(word.len()).enumerate().any(|(i, w)| {
        w.eq_ignore_ascii_case(word)
            && (i == 0 || !hay[i - 1].is_ascii_alphanumeric())
            && hay
                .get(i + word.len())
                .is_none_or(|c| !c.is_ascii_alphanumeric())
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn pins(sql: &str) -> bool {
        session_effect(sql.as_bytes()).pins
    }

    #[test]
    fn plain_statements_do_not_pin() {
        for sql in [
            "select 1",
            "UPDATE t SET a = 1",
            "SET LOCAL statement_timeout = 5",
            "set transaction isolation level serializable",
            "BEGIN; SELECT pg_advisory_xact_lock(1); COMMIT",
            "select 'SET x = 1; listen y'",
            "select $$ ; set a = 1 $$",
            "create table t (a int)",
            "PREPARE TRANSACTION 'x'",
        ] {
            assert!(!pins(sql), "{sql}");
        }
    }

    #[test]
    fn session_state_pins() {
        for sql in [
            "SET search_path = x",
            "select 1; set datestyle = iso",
            "/* c */ set x.y = 1",
            "LISTEN chan",
            "PREPARE q AS SELECT 1",
            "CREATE TEMP TABLE t (a int)",
            "create local temporary table t (a int)",
            "SELECT pg_advisory_lock(1)",
            "select pg_try_advisory_lock(1)",
            "DECLARE c CURSOR WITH HOLD FOR SELECT 1",
            "select set_config('a.b', '1', false)",
            "RESET ALL",
        ] {
            assert!(pins(sql), "{sql}");
        }
    }

    #[test]
    fn discard_and_deallocate_reset() {
        assert!(session_effect(b"DISCARD ALL").resets);
        assert!(!session_effect(b"DISCARD ALL").pins);
        assert!(session_effect(b"deallocate all").resets);
        assert!(!session_effect(b"select 1").resets);
    }
}
