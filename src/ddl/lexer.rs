//! Tokens of the sharding DDL, with PostgreSQL's lexical rules where they matter to users:
//! unquoted identifiers fold to lower case, "quoted" ones keep their case, `''` escapes a quote
//! inside a string, and every token records its byte span so errors can point at it.
//!
//! Besides PostgreSQL's `--` and `/* */` comments (nested, as PostgreSQL nests them), the lexer
//! accepts Oracle NoSQL's `//` and `#` line comments, because the NoSQL examples users copy
//! contain them. `#` is also PostgreSQL's XOR operator, so it starts a comment only where no
//! operand can come before it: first on its line, or after `,`, `(` or `)`.
//!
//! The seeds' NoSQL examples were copied out of Java strings and some end with a stray `"` (`)";`).
//! A `"` that nothing closes and that only whitespace and `;` follow is a [`TokenKind::StrayQuote`];
//! the parser accepts it at the end of a NoSQL `CREATE TABLE` only.

use super::error::DdlError;

/// PostgreSQL truncates identifiers to NAMEDATALEN - 1 bytes; the catalog must agree with the
/// names the shards end up with.
const MAX_IDENTIFIER_BYTES: usize = 63;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TokenKind {
    /// An unquoted identifier or keyword; `value` is folded to lower case.
    Word,
    /// A "quoted identifier"; `value` is its content with `""` unescaped.
    QuotedIdent,
    /// A string literal; `value` is its content with `''` unescaped.
    String,
    /// A numeric literal; `value` is its text.
    Number,
    LParen,
    RParen,
    Comma,
    Dot,
    Semicolon,
    /// Any other operator or punctuation; only expressions contain these.
    Op,
    /// An unclosed `"` followed by nothing but whitespace and `;`: the rest of the input.
    StrayQuote,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Token {
    pub kind: TokenKind,
    pub value: String,
    /// Byte offsets into the statement text.
    pub start: usize,
    pub end: usize,
}

impl Token {
    /// Whether this is the unquoted keyword `kw` (given in lower case).
    pub fn is_keyword(&self, kw: &str) -> bool {
        self.kind == TokenKind::Word && self.value == kw
    }
}

/// Splits `src` into tokens lazily, so a caller that needs only the first few keywords pays only
/// for those.
pub struct Lexer<'a> {
    src: &'a str,
    bytes: &'a [u8],
    pos: usize,
    /// Set once a `//` or `#` comment has been seen: PostgreSQL cannot take such a statement
    /// verbatim, and it marks the Oracle NoSQL dialect.
    pub saw_nosql_comment: bool,
}

fn is_ident_start(b: u8) -> bool {
    b.is_ascii_alphabetic() || b == b'_' || b >= 0x80
}

fn is_ident_char(b: u8) -> bool {
    is_ident_start(b) || b.is_ascii_digit() || b == b'$'
}

fn is_op_char(b: u8) -> bool {
    matches!(
        b,
        b'+' | b'-'
            | b'*'
            | b'/'
            | b'<'
            | b'>'
            | b'='
            | b'~'
            | b'!'
            | b'@'
            | b'#'
            | b'%'
            | b'^'
            | b'&'
            | b'|'
            | b'`'
            | b'?'
    )
}

fn truncate_identifier(mut s: String) -> String {
    if s.len() > MAX_IDENTIFIER_BYTES {
        let mut cut = MAX_IDENTIFIER_BYTES;
        while !s.is_char_boundary(cut) {
            cut -= 1;
        }
        s.truncate(cut);
    }
    s
}

impl<'a> Lexer<'a> {
    pub fn new(src: &'a str) -> Self {
        Lexer {
            src,
            bytes: src.as_bytes(),
            pos: 0,
            saw_nosql_comment: false,
        }
    }

    fn peek_byte(&self, off: usize) -> Option<u8> {
        self.bytes.get(self.pos + off).copied()
    }

    /// PostgreSQL quotes the rest of the input after an unterminated token in its message.
    fn rest_from(&self, start: usize) -> String {
        self.src[start..].to_string()
    }

    fn skip_trivia(&mut self) -> Result<(), DdlError> {
        loop {
            match (self.peek_byte(0), self.peek_byte(1)) {
                (Some(b), _) if b.is_ascii_whitespace() => self.pos += 1,
                (Some(b'-'), Some(b'-')) => self.skip_line(),
                (Some(b'/'), Some(b'/')) => {
                    self.saw_nosql_comment = true;
                    self.skip_line();
                }
                (Some(b'#'), _) if self.hash_starts_comment() => {
                    self.saw_nosql_comment = true;
                    self.skip_line();
                }
                (Some(b'/'), Some(b'*')) => self.skip_block_comment()?,
                _ => return Ok(()),
            }
        }
    }

    /// Whether the `#` at the current position begins a NoSQL comment rather than an operator.
    fn hash_starts_comment(&self) -> bool {
        let before = self.bytes[..self.pos]
            .iter()
            .rev()
            .find(|b| !matches!(b, b' ' | b'\t' | b'\r'));
        matches!(before, None | Some(b'\n' | b',' | b'(' | b')'))
    }

    fn skip_line(&mut self) {
        while let Some(b) = self.peek_byte(0) {
            self.pos += 1;
            if b == b'\n' {
                break;
            }
        }
    }

    fn skip_block_comment(&mut self) -> Result<(), DdlError> {
        let start = self.pos;
        let mut depth = 0usize;
        loop {
            match (self.peek_byte(0), self.peek_byte(1)) {
                (Some(b'/'), Some(b'*')) => {
                    depth += 1;
                    self.pos += 2;
                }
                (Some(b'*'), Some(b'/')) => {
                    depth -= 1;
                    self.pos += 2;
                    if depth == 0 {
                        return Ok(());
                    }
                }
                (Some(_), _) => self.pos += 1,
                (None, _) => {
                    return Err(DdlError::UnterminatedComment {
                        near: self.rest_from(start),
                        position: start,
                    })
                }
            }
        }
    }

    /// Reads a quoted token whose quote character is doubled to escape it. With `backslash`,
    /// a backslash also escapes the next character (PostgreSQL's E'...' strings).
    fn quoted(&mut self, quote: u8, backslash: bool) -> Option<String> {
        let mut out = Vec::new();
        loop {
            let b = self.peek_byte(0)?;
            self.pos += 1;
            if backslash && b == b'\\' {
                let escaped = self.peek_byte(0)?;
                self.pos += 1;
                out.push(match escaped {
                    b'n' => b'\n',
                    b't' => b'\t',
                    b'r' => b'\r',
                    other => other,
                });
            } else if b == quote {
                if self.peek_byte(0) == Some(quote) {
                    self.pos += 1;
                    out.push(quote);
                } else {
                    // Quotes are ASCII, so the content is whole UTF-8 characters.
                    return Some(String::from_utf8(out).unwrap_or_default());
                }
            } else {
                out.push(b);
            }
        }
    }

    fn string_literal(&mut self, start: usize, backslash: bool) -> Result<Token, DdlError> {
        match self.quoted(b'\'', backslash) {
            Some(value) => Ok(self.token(TokenKind::String, value, start)),
            None => Err(DdlError::UnterminatedString {
                near: self.rest_from(start),
                position: start,
            }),
        }
    }

    fn token(&self, kind: TokenKind, value: String, start: usize) -> Token {
        Token {
            kind,
            value,
            start,
            end: self.pos,
        }
    }

    fn number(&mut self, start: usize) -> Token {
        let digits = |lx: &mut Self| {
            while lx
                .peek_byte(0)
                .is_some_and(|b| b.is_ascii_digit() || b == b'_')
            {
                lx.pos += 1;
            }
        };
        digits(self);
        if self.peek_byte(0) == Some(b'.') && self.peek_byte(1) != Some(b'.') {
            self.pos += 1;
            digits(self);
        }
        if matches!(self.peek_byte(0), Some(b'e' | b'E')) {
            let sign = usize::from(matches!(self.peek_byte(1), Some(b'+' | b'-')));
            if self.peek_byte(1 + sign).is_some_and(|b| b.is_ascii_digit()) {
                self.pos += 1 + sign;
                digits(self);
            }
        }
        let text = self.src[start..self.pos].to_string();
        self.token(TokenKind::Number, text, start)
    }

    /// The next token, `Ok(None)` at the end of the input.
    pub fn next_token(&mut self) -> Result<Option<Token>, DdlError> {
        self.skip_trivia()?;
        let start = self.pos;
        let Some(b) = self.peek_byte(0) else {
            return Ok(None);
        };
        let single = |lx: &mut Self, kind| {
            lx.pos += 1;
            let text = lx.src[start..lx.pos].to_string();
            Ok(Some(lx.token(kind, text, start)))
        };
        match b {
            b'(' => single(self, TokenKind::LParen),
            b')' => single(self, TokenKind::RParen),
            b',' => single(self, TokenKind::Comma),
            b';' => single(self, TokenKind::Semicolon),
            b'.' if self.peek_byte(1).is_some_and(|d| d.is_ascii_digit()) => {
                Ok(Some(self.number(start)))
            }
            b'.' => single(self, TokenKind::Dot),
            b'0'..=b'9' => Ok(Some(self.number(start))),
            b'\'' => {
                self.pos += 1;
                self.string_literal(start, false).map(Some)
            }
            b'e' | b'E' if self.peek_byte(1) == Some(b'\'') => {
                self.pos += 2;
                self.string_literal(start, true).map(Some)
            }
            b'"' => {
                self.pos += 1;
                match self.quoted(b'"', false) {
                    None if self.src[start + 1..]
                        .bytes()
                        .all(|b| b.is_ascii_whitespace() || b == b';') =>
                    {
                        self.pos = self.src.len();
                        Ok(Some(self.token(
                            TokenKind::StrayQuote,
                            String::new(),
                            start,
                        )))
                    }
                    None => Err(DdlError::UnterminatedIdentifier {
                        near: self.rest_from(start),
                        position: start,
                    }),
                    Some(v) if v.is_empty() => Err(DdlError::ZeroLengthIdentifier {
                        near: self.src[start..self.pos].to_string(),
                        position: start,
                    }),
                    Some(v) => Ok(Some(self.token(
                        TokenKind::QuotedIdent,
                        truncate_identifier(v),
                        start,
                    ))),
                }
            }
            b if is_ident_start(b) => {
                while self.peek_byte(0).is_some_and(is_ident_char) {
                    self.pos += 1;
                }
                let folded = self.src[start..self.pos].to_ascii_lowercase();
                Ok(Some(self.token(
                    TokenKind::Word,
                    truncate_identifier(folded),
                    start,
                )))
            }
            b if is_op_char(b) => {
                // An operator stops where a comment starts, as in PostgreSQL's scanner.
                while let Some(c) = self.peek_byte(0) {
                    let comment_starts = matches!(
                        (c, self.peek_byte(1)),
                        (b'-', Some(b'-')) | (b'/', Some(b'*')) | (b'/', Some(b'/'))
                    );
                    if !is_op_char(c) || (self.pos > start && comment_starts) {
                        break;
                    }
                    self.pos += 1;
                }
                let text = self.src[start..self.pos].to_string();
                Ok(Some(self.token(TokenKind::Op, text, start)))
            }
            _ => {
                // Any other character (`:`, `[`, `$`, …) is a one-character operator; only
                // expressions, which are kept as source text, contain them.
                let width = self.src[start..].chars().next().map_or(1, char::len_utf8);
                self.pos += width;
                let text = self.src[start..self.pos].to_string();
                Ok(Some(self.token(TokenKind::Op, text, start)))
            }
        }
    }
}

/// Tokenizes the whole input.
pub fn tokenize(src: &str) -> Result<(Vec<Token>, bool), DdlError> {
    let mut lexer = Lexer::new(src);
    let mut tokens = Vec::new();
    while let Some(tok) = lexer.next_token()? {
        tokens.push(tok);
    }
    Ok((tokens, lexer.saw_nosql_comment))
}

/// The statements of a query string as this lexer cuts it (at semicolons outside literals,
/// quoted names and comments), each from its first token to its last; `None` when it cannot
/// read the text.
pub fn statement_texts(src: &str) -> Option<Vec<&str>> {
    let (tokens, _) = tokenize(src).ok()?;
    let mut texts = Vec::new();
    let mut start: Option<usize> = None;
    let mut end = 0;
    for t in &tokens {
        if t.kind == TokenKind::Semicolon {
            texts.extend(start.take().map(|s| &src[s..end]));
        } else {
            start.get_or_insert(t.start);
            end = t.end;
        }
    }
    texts.extend(start.map(|s| &src[s..end]));
    Some(texts)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn statement_texts_are_cut_at_semicolons_outside_literals() {
        let got = statement_texts(
            "SELECT ';' ; ;\n CREATE SHARDED TABLE \"a;b\" (x int) -- ;\n;SHOW CHUNKS",
        )
        .unwrap();
        assert_eq!(
            got,
            [
                "SELECT ';'",
                "CREATE SHARDED TABLE \"a;b\" (x int)",
                "SHOW CHUNKS"
            ]
        );
        assert_eq!(statement_texts(" ; "), Some(vec![]));
    }

    fn kinds_and_values(src: &str) -> Vec<(TokenKind, String)> {
        tokenize(src)
            .unwrap()
            .0
            .into_iter()
            .map(|t| (t.kind, t.value))
            .collect()
    }

    #[test]
    fn folds_unquoted_keeps_quoted_and_unescapes() {
        let toks = kinds_and_values(r#"Orders "MixedCase" "a""b" 'it''s' E'x\'y'"#);
        assert_eq!(
            toks,
            vec![
                (TokenKind::Word, "orders".into()),
                (TokenKind::QuotedIdent, "MixedCase".into()),
                (TokenKind::QuotedIdent, "a\"b".into()),
                (TokenKind::String, "it's".into()),
                (TokenKind::String, "x'y".into()),
            ]
        );
    }

    #[test]
    fn skips_all_comment_styles_and_records_positions() {
        let src = "-- line\n/* block /* nested */ */ a // nosql\n b";
        let (toks, slash) = tokenize(src).unwrap();
        assert!(slash);
        assert_eq!(toks.len(), 2);
        assert_eq!(&src[toks[0].start..toks[0].end], "a");
        assert_eq!(toks[1].start, src.rfind('b').unwrap());
    }

    #[test]
    fn hash_is_a_comment_only_where_no_operand_precedes_it() {
        let src = "# first\n(a # b, # after comma\n c)";
        let (toks, nosql) = tokenize(src).unwrap();
        assert!(nosql);
        let values: Vec<&str> = toks.iter().map(|t| t.value.as_str()).collect();
        assert_eq!(values, ["(", "a", "#", "b", ",", "c", ")"]);
        assert!(!tokenize("a # b").unwrap().1);
    }

    #[test]
    fn an_unclosed_quote_at_the_end_is_a_stray_quote() {
        let toks = kinds_and_values("(a)\";\n");
        assert_eq!(toks.last().unwrap().0, TokenKind::StrayQuote);
        assert!(tokenize("(a)\" b").is_err());
    }

    #[test]
    fn numbers_and_operators() {
        let toks = kinds_and_values("1.5e3 .5 10 -- c\n<= 1::int");
        assert_eq!(toks[0], (TokenKind::Number, "1.5e3".into()));
        assert_eq!(toks[1], (TokenKind::Number, ".5".into()));
        assert_eq!(toks[2], (TokenKind::Number, "10".into()));
        assert_eq!(toks[3], (TokenKind::Op, "<=".into()));
        assert_eq!(toks[5], (TokenKind::Op, ":".into()));
    }

    #[test]
    fn unterminated_tokens_report_postgres_messages() {
        let err = tokenize("a 'abc").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unterminated quoted string at or near \"'abc\""
        );
        assert_eq!(err.position(), Some(2));
        let err = tokenize("x \"ab").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unterminated quoted identifier at or near \"\"ab\""
        );
        let err = tokenize("/* never closed").unwrap_err();
        assert_eq!(
            err.to_string(),
            "unterminated /* comment at or near \"/* never closed\""
        );
        let err = tokenize("\"\"").unwrap_err();
        assert_eq!(
            err.to_string(),
            "zero-length delimited identifier at or near \"\"\"\""
        );
    }

    #[test]
    fn long_identifiers_are_truncated_like_postgres() {
        let long = "a".repeat(70);
        let toks = kinds_and_values(&long);
        assert_eq!(toks[0].1.len(), 63);
    }
}
