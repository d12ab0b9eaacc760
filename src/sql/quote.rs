//! Quoting for the SQL the proxy builds itself: the one place identifiers and literals are
//! quoted (values from clients go as parameters wherever the protocol allows).

/// An identifier, quoted as PostgreSQL's `quote_ident` would always quote it.
pub fn quote_ident(name: &str) -> String {
    format!("\"{}\"", name.replace('"', "\"\""))
}

/// A PostgreSQL array literal of text elements, each quoted (`{"a","b"}`).
pub fn text_array<'a>(items: impl Iterator<Item = &'a str>) -> String {
    let mut out = String::from("{");
    for (i, item) in items.enumerate() {
        if i > 0 {
            out.push(',');
        }
        out.push('"');
        for c in item.chars() {
            if c == '"' || c == '\\' {
                out.push('\\');
            }
            out.push(c);
        }
        out.push('"');
    }
    out.push('}');
    out
}

/// A string literal that reads the same whatever `standard_conforming_strings` says.
pub fn quote_literal(value: &str) -> String {
    let doubled = value.replace('\'', "''");
    if value.contains('\\') {
        format!("E'{}'", doubled.replace('\\', "\\\\"))
    } else {
        format!("'{doubled}'")
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn arrays_quote_their_elements() {
        assert_eq!(
            text_array(["(0,1)", "a\"b\\c"].into_iter()),
            "{\"(0,1)\",\"a\\\"b\\\\c\"}"
        );
    }

    #[test]
    fn quotes_survive_any_string() {
        assert_eq!(quote_ident("We\"ird"), "\"We\"\"ird\"");
        assert_eq!(quote_literal("it's"), "'it''s'");
        assert_eq!(quote_literal("a\\b'c"), "E'a\\\\b''c'");
    }
}
