//! Cheap lexical classification of SQL text: only the statements' leading keywords and a few
//! function names are looked at, never a full parse, because this runs for every simple query.
//! Every caller that tells statements apart by their leading words (session effects, admin
//! statements, the DDL the proxy runs itself, transaction blocks) reads them here, so
//! whitespace and comments are skipped alike everywhere: a statement one part recognises after a
//! comment is not missed by another.

/// What a statement does to the backend session beyond its own transaction.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct SessionEffect {
    /// Leaves state on the backend connection (SET, LISTEN, temp tables, SQL PREPARE, session
    /// advisory locks, WITH HOLD cursors, LOAD): the client keeps that connection from now on.
    pub pins: bool,
    /// Drops every prepared statement (and for DISCARD ALL, resets every setting).
    pub resets: bool,
    /// Makes the transaction one PostgreSQL cannot PREPARE (LISTEN, UNLISTEN, NOTIFY, a
    /// temporary table created, a WITH HOLD cursor), so it cannot commit on several shards.
    pub unpreparable: bool,
}

/// Scans every statement of a (possibly multi-statement) query text.
pub fn session_effect(sql: &[u8]) -> SessionEffect {
    let mut effect = SessionEffect::default();
    // One search finds both the semicolons (only one with more text after it makes splitting,
    // which walks quotes and comments byte by byte, necessary) and the underscores the
    // session-level functions are spelled with. A function name cannot span statements, so
    // looking for it in the whole text is the same as looking in each statement.
    let mut one_statement = true;
    for p in memchr::memchr2_iter(b';', b'_', sql) {
        if sql[p] == b'_' {
            effect.pins |= session_function_at(sql, p);
        } else if one_statement && !sql[p + 1..].iter().all(u8::is_ascii_whitespace) {
            one_statement = false;
        }
    }
    if one_statement {
        statement_effect(sql, &mut effect);
    } else {
        for stmt in Statements::new(sql) {
            statement_effect(stmt, &mut effect);
        }
    }
    effect
}

/// What one statement's leading keywords do to the session.
fn statement_effect(stmt: &[u8], effect: &mut SessionEffect) {
    if !may_affect_session(stmt) {
        return;
    }
    let is = |w: &[u8], k: &str| w.eq_ignore_ascii_case(k.as_bytes());
    let temp = |w: &[u8]| is(w, "temp") || is(w, "temporary");
    let pins = match first_keyword(stmt) {
        SET => {
            let [_, w1, w2] = leading_words::<3>(stmt);
            let tx_local = is(w1, "local")
                || is(w1, "transaction")
                || is(w1, "constraints")
                || (is(w1, "session") && is(w2, "characteristics"));
            !tx_local
        }
        LISTEN => {
            effect.unpreparable = true;
            true
        }
        UNLISTEN | NOTIFY => {
            effect.unpreparable = true;
            false
        }
        RESET | LOAD => true,
        PREPARE => {
            let [_, w1] = leading_words::<2>(stmt);
            !is(w1, "transaction")
        }
        DECLARE => {
            let hold = contains_word(stmt, b"hold");
            effect.unpreparable |= hold;
            hold
        }
        CREATE => {
            let [_, w1, w2] = leading_words::<3>(stmt);
            let temporary = temp(w1) || ((is(w1, "local") || is(w1, "global")) && temp(w2));
            effect.unpreparable |= temporary;
            temporary
        }
        DISCARD => {
            effect.resets = true;
            let [_, w1] = leading_words::<2>(stmt);
            !is(w1, "all")
        }
        DEALLOCATE => {
            effect.resets = true;
            false
        }
        _ => false,
    };
    effect.pins |= pins;
}

/// Whether `sql` is `DISCARD ALL` (which closes every cursor, besides what `session_effect`
/// says of it).
pub fn is_discard_all(sql: &[u8]) -> bool {
    const ALL: u128 = keyword(b"all");
    leading_keywords::<2>(sql) == [DISCARD, ALL]
}

/// Whether a statement's first word may be one of those `statement_effect` looks for. Most are
/// not (SELECT, INSERT, UPDATE, …), which the first three letters tell without reading the word.
fn may_affect_session(stmt: &[u8]) -> bool {
    may_start_with(
        stmt,
        &[
            *b"set", *b"res", *b"lis", *b"loa", *b"pre", *b"dec", *b"cre", *b"dis", *b"dea",
            *b"unl", *b"not",
        ],
    )
}

/// Whether the text may start with a word that begins with one of `heads` (lower case, at most
/// four letters). False only when the text starts with a letter and its first bytes, folded as
/// [`keyword`] folds them, are none of `heads` — a non-letter never folds into a letter, so no
/// such word is missed; whitespace or a comment first needs the full look.
pub fn may_start_with<const N: usize>(sql: &[u8], heads: &[[u8; N]]) -> bool {
    const { assert!(N <= 4) };
    let Some(first) = sql.get(..N) else {
        return true;
    };
    if !first[0].is_ascii_alphabetic() {
        return true;
    }
    let fold = |word: &[u8]| {
        word.iter().enumerate().fold(0u32, |code, (i, &c)| {
            code | (u32::from(c | 0x20) << (8 * i))
        })
    };
    let head = fold(first);
    heads.iter().any(|h| fold(h) == head)
}

/// A word of up to 16 bytes as one number, case folded, so that telling keywords apart is a few
/// integer comparisons rather than a string comparison each; 0 for a longer word.
pub const fn keyword(word: &[u8]) -> u128 {
    if word.len() > 16 {
        return 0;
    }
    let mut code = 0u128;
    let mut i = 0;
    while i < word.len() {
        // Folds letters to lower case; words hold only letters, digits and `_`, and no digit or
        // `_` turns into a letter this way.
        code |= ((word[i] | 0x20) as u128) << (8 * i);
        i += 1;
    }
    code
}

const SET: u128 = keyword(b"set");
const RESET: u128 = keyword(b"reset");
const LISTEN: u128 = keyword(b"listen");
const UNLISTEN: u128 = keyword(b"unlisten");
const NOTIFY: u128 = keyword(b"notify");
const LOAD: u128 = keyword(b"load");
const PREPARE: u128 = keyword(b"prepare");
const DECLARE: u128 = keyword(b"declare");
const CREATE: u128 = keyword(b"create");
const DISCARD: u128 = keyword(b"discard");
const DEALLOCATE: u128 = keyword(b"deallocate");

/// The effect of the text classified last. Clients send the same Parse text again and again
/// (an ORM's or driver's statement cache, or the unnamed statement re-parsed per execution), so
/// one comparison usually replaces the scan.
#[derive(Default)]
pub struct LastEffect {
    text: Vec<u8>,
    effect: SessionEffect,
}

impl LastEffect {
    pub fn session_effect(&mut self, sql: &[u8]) -> SessionEffect {
        if *self.text != *sql {
            self.effect = session_effect(sql);
            self.text.clear();
            self.text.extend_from_slice(sql);
        }
        self.effect
    }
}

/// [`keyword`] of the text's first word, in one pass over it when the text starts with it.
pub fn first_keyword(sql: &[u8]) -> u128 {
    if !sql.first().is_some_and(u8::is_ascii_alphabetic) {
        return keyword(first_word(sql));
    }
    let mut code = 0u128;
    for (i, &c) in sql.iter().enumerate() {
        if !WORD_BYTE[c as usize] {
            break;
        }
        if i == 16 {
            return 0;
        }
        code |= ((c | 0x20) as u128) << (8 * i);
    }
    code
}

/// The text's first word, after whitespace and comments (empty if it starts otherwise).
fn first_word(sql: &[u8]) -> &[u8] {
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
                b'-' if s.get(i + 1) == Some(&b'-') => i = skip_line_comment(s, i),
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
    let end = word_end(s, open + 1);
    match s.get(end) {
        Some(b'$') if !s[open + 1..end].first().is_some_and(u8::is_ascii_digit) => {
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

/// Where the word (letters, digits, `_`) starting at `start` ends.
fn word_end(s: &[u8], start: usize) -> usize {
    s[start..]
        .iter()
        .position(|&c| !WORD_BYTE[c as usize])
        .map_or(s.len(), |p| start + p)
}

/// Bytes a keyword or identifier word is made of, by value: one load per byte when scanning.
static WORD_BYTE: [bool; 256] = {
    let mut table = [false; 256];
    let mut c = 0;
    while c < 256 {
        let b = c as u8;
        table[c] = b.is_ascii_alphanumeric() || b == b'_';
        c += 1;
    }
    table
};

/// The first `N` words of a statement, after whitespace and comments; missing words are empty.
pub fn leading_words<const N: usize>(stmt: &[u8]) -> [&[u8]; N] {
    leading_words_and_rest(stmt).0
}

/// [`keyword`] of each of the first `N` words ([`leading_words`]), for callers that tell
/// statements apart by a few constants; a missing word is 0, which no keyword is.
pub fn leading_keywords<const N: usize>(stmt: &[u8]) -> [u128; N] {
    leading_words::<N>(stmt).map(keyword)
}

/// [`leading_words`], and the text after them from its next byte that is not whitespace or a
/// comment: where a caller that reads more than keywords (a table name, say) takes over. With
/// fewer than `N` words, the rest starts at what stopped the words.
pub fn leading_words_and_rest<const N: usize>(stmt: &[u8]) -> ([&[u8]; N], &[u8]) {
    let mut words: [&[u8]; N] = [&[]; N];
    let mut found = 0;
    let mut i = 0;
    while i < stmt.len() && found < N {
        let c = stmt[i];
        // An opening parenthesis is skipped like whitespace: `(SELECT …) UNION …` starts
        // with SELECT.
        if c == b'(' {
            i += 1;
        } else if c.is_ascii_alphabetic() || c == b'_' {
            let end = word_end(stmt, i);
            words[found] = &stmt[i..end];
            found += 1;
            i = end;
        } else if found == 0 && starts_nosql_comment(stmt, i) {
            i = skip_line_comment(stmt, i);
        } else {
            let next = skip_trivia(stmt, i);
            if next == i {
                break;
            }
            i = next;
        }
    }
    (words, &stmt[skip_trivia(stmt, i)..])
}

/// Oracle NoSQL's `//` and `#` line comments, which the NoSQL examples users paste open with.
/// Only before a statement's first word: no PostgreSQL statement starts with either, while
/// later they may be operators.
fn starts_nosql_comment(s: &[u8], i: usize) -> bool {
    match s.get(i) {
        Some(b'#') => true,
        Some(b'/') => s.get(i + 1) == Some(&b'/'),
        _ => false,
    }
}

/// Whether the text holds nothing but whitespace, comments and semicolons: what may follow the
/// last word of a statement.
pub fn is_blank(sql: &[u8]) -> bool {
    let mut i = 0;
    loop {
        i = skip_trivia(sql, i);
        match sql.get(i) {
            None => return true,
            Some(b';') => i += 1,
            Some(_) => return false,
        }
    }
}

/// Where the whitespace and comments (`--` to the end of the line, `/* */` nested as
/// PostgreSQL nests them) starting at `i` end; `i` itself when none start there.
fn skip_trivia(s: &[u8], mut i: usize) -> usize {
    while let Some(&c) = s.get(i) {
        if c.is_ascii_whitespace() {
            i += 1;
        } else if c == b'-' && s.get(i + 1) == Some(&b'-') {
            i = skip_line_comment(s, i);
        } else if c == b'/' && s.get(i + 1) == Some(&b'*') {
            i = skip_block_comment(s, i);
        } else {
            break;
        }
    }
    i
}

fn skip_line_comment(s: &[u8], open: usize) -> usize {
    s[open..]
        .iter()
        .position(|c| *c == b'\n')
        .map_or(s.len(), |p| open + p + 1)
}

/// Whether the underscore at `p` is the one of `advisory_lock` or `set_config` (any case).
/// Session-level advisory locks and `set_config(…, false)` hide inside any statement; the
/// transaction-level lock functions are spelled `pg_advisory_xact_lock…` and do not match.
fn session_function_at(sql: &[u8], p: usize) -> bool {
    let around = |before: usize, needle: &[u8]| {
        p.checked_sub(before)
            .and_then(|start| sql.get(start..start + needle.len()))
            .is_some_and(|w| w.eq_ignore_ascii_case(needle))
    };
    around(8, b"advisory_lock") || around(3, b"set_config")
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
    fn the_three_letter_look_passes_every_keyword_that_matters_in_any_case() {
        for word in [
            "SET",
            "reset",
            "Listen",
            "LOAD",
            "prepare",
            "DECLARE",
            "create",
            "DISCARD",
            "Deallocate",
        ] {
            assert!(may_affect_session(format!("{word} x").as_bytes()), "{word}");
        }
        for sql in [
            "SELECT 1",
            "insert into t values (1)",
            "UPDATE t SET a = 1",
            "with x",
        ] {
            assert!(!may_affect_session(sql.as_bytes()), "{sql}");
        }
        assert!(pins("Set search_path = a"));
        assert!(!pins("SELECT 1 /* set */"));
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
            "select 1;  ",
            "SELECT abalance FROM pgbench_accounts WHERE aid = 1;",
            "refresh materialized view concurrently m",
            "select $tag$ ; listen x $tag$; select $1",
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
            "select 1; SELECT pg_advisory_lock(1)",
            "SELECT 1;\nlisten chan;",
            "Discard Plans",
        ] {
            assert!(pins(sql), "{sql}");
        }
    }

    #[test]
    fn keywords_fold_case_and_stay_apart() {
        assert_eq!(keyword(b"SeT"), SET);
        assert_ne!(keyword(b"set_"), SET);
        assert_ne!(keyword(b"sets"), SET);
        assert_ne!(keyword(b"se"), SET);
        assert_eq!(keyword(b"DEALLOCATE"), DEALLOCATE);
        assert_eq!(keyword(b"a_very_long_identifier"), 0);
        for text in [
            "SELECT 1",
            "select",
            "  /* c */ Set x = 1",
            "deallocate all",
            "x_y(1)",
        ] {
            assert_eq!(
                first_keyword(text.as_bytes()),
                keyword(first_word(text.as_bytes()))
            );
        }
        assert_eq!(
            first_keyword(b"a_sixteen_chars_ (1)"),
            keyword(b"a_sixteen_chars_")
        );
        assert_eq!(first_keyword(b"seventeen_chars_x (1)"), 0);
    }

    #[test]
    fn leading_words_skip_whitespace_and_comments_nested_as_postgres_nests_them() {
        let [w0, w1] = leading_words::<2>(b" \t\r\n/* a /* nested */ still */ -- line\n SET x");
        assert_eq!((w0, w1), (&b"SET"[..], &b"x"[..]));
        let [w0, w1] = leading_words::<2>(b"-- c\nSHOW--c\n/**/shards");
        assert_eq!((w0, w1), (&b"SHOW"[..], &b"shards"[..]));
        assert_eq!(leading_words::<1>(b"select/* c */x")[0], b"select");
        assert_eq!(leading_words::<2>(b"select/* c */x")[1], b"x");
        for text in [
            "",
            "   ",
            "-- only a comment",
            "/* never closed SET x",
            "/* a */ 1",
        ] {
            assert_eq!(leading_words::<1>(text.as_bytes()), [&b""[..]], "{text}");
        }
        assert_eq!(leading_words::<2>(b"-- SET\nselect")[0], b"select");
        assert_eq!(leading_words::<1>(b"/* SET */ select")[0], b"select");
    }

    #[test]
    fn the_rest_starts_after_the_words_and_their_trivia() {
        let (words, rest) = leading_words_and_rest::<3>(b"show chunks for /* t */ \"Orders\";");
        assert_eq!(words, [&b"show"[..], b"chunks", b"for"]);
        assert_eq!(rest, b"\"Orders\";");
        let (words, rest) = leading_words_and_rest::<3>(b"show shards -- all\n");
        assert_eq!(words, [&b"show"[..], b"shards", b""]);
        assert_eq!(rest, b"");
        let (_, rest) = leading_words_and_rest::<2>(b"drop table s.t");
        assert_eq!(rest, b"s.t");
    }

    #[test]
    fn blank_is_whitespace_comments_and_semicolons() {
        for text in ["", " ", ";", " ;; -- x\n /* y /* z */ */ ;", "--"] {
            assert!(is_blank(text.as_bytes()), "{text:?}");
        }
        for text in ["x", "; x", "/* a */ 1", "- -"] {
            assert!(!is_blank(text.as_bytes()), "{text:?}");
        }
    }

    #[test]
    fn leading_keywords_fold_case_and_missing_words_match_none() {
        let [w0, w1, w2] = leading_keywords::<3>(b"/* c */ Commit PREPARED 'x'");
        assert_eq!([w0, w1], [keyword(b"commit"), keyword(b"prepared")]);
        assert_eq!(w2, 0);
        assert_eq!(leading_keywords::<1>(b"a_very_long_identifier")[0], 0);
    }

    #[test]
    fn last_effect_follows_the_text() {
        let mut last = LastEffect::default();
        assert!(!last.session_effect(b"select 1").pins);
        assert!(last.session_effect(b"set a = 1").pins);
        assert!(last.session_effect(b"set a = 1").pins);
        assert!(!last.session_effect(b"select 1").pins);
    }

    #[test]
    fn discard_and_deallocate_reset() {
        assert!(session_effect(b"DISCARD ALL").resets);
        assert!(!session_effect(b"DISCARD ALL").pins);
        assert!(session_effect(b"deallocate all").resets);
        assert!(!session_effect(b"select 1").resets);
    }
}
