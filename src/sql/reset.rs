//! Which settings a statement sets back to their defaults. PostgreSQL's default for a session is
//! the value its startup packet gave; the proxy's connections to the shards got the client's
//! startup values by `set_config`, so their defaults are the server's, and the proxy restores the
//! client's values after such a statement.

use pg_query::protobuf::{DiscardMode, VariableSetKind};
use pg_query::NodeEnum;

/// What a statement resets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Reset {
    /// These settings (lower case), by `RESET name` or `SET name TO DEFAULT`.
    Names(Vec<String>),
    /// Every setting: `RESET ALL`, `DISCARD ALL`.
    All,
}

/// What `sql` (a simple query's text, one statement or several) resets; `None`: nothing.
pub fn resets(sql: &[u8]) -> Option<Reset> {
    let lower = sql.to_ascii_lowercase();
    let may = [&b"reset"[..], b"default", b"discard"]
        .iter()
        .any(|w| memchr::memmem::find(&lower, w).is_some());
    if !may {
        return None;
    }
    let parsed = pg_query::parse(std::str::from_utf8(sql).ok()?, 0).ok()?;
    let mut names = Vec::new();
    for raw in &parsed.protobuf.stmts {
        match raw.stmt.as_ref().and_then(|s| s.node.as_ref()) {
            Some(NodeEnum::VariableSetStmt(v)) => {
                match VariableSetKind::try_from(v.kind) {
                    Ok(VariableSetKind::VarResetAll) => return Some(Reset::All),
                    // SET LOCAL … TO DEFAULT lasts until the transaction's end only.
                    Ok(VariableSetKind::VarReset | VariableSetKind::VarSetDefault)
                        if !v.is_local =>
                    {
                        names.push(v.name.to_ascii_lowercase())
                    }
                    _ => {}
                }
            }
            Some(NodeEnum::DiscardStmt(d)) if d.target == DiscardMode::DiscardAll as i32 => {
                return Some(Reset::All)
            }
            _ => {}
        }
    }
    (!names.is_empty()).then_some(Reset::Names(names))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn resets_are_read_from_every_statement() {
        let names = |n: &[&str]| Some(Reset::Names(n.iter().map(|s| s.to_string()).collect()));
        assert_eq!(resets(b"RESET TimeZone"), names(&["timezone"]));
        assert_eq!(
            resets(b"set search_path to default"),
            names(&["search_path"])
        );
        assert_eq!(
            resets(b"SET DateStyle = DEFAULT; RESET x.y"),
            names(&["datestyle", "x.y"])
        );
        assert_eq!(resets(b"RESET ALL"), Some(Reset::All));
        assert_eq!(resets(b"SELECT 1; DISCARD ALL"), Some(Reset::All));
        assert_eq!(resets(b"SET LOCAL TimeZone TO DEFAULT"), None);
        assert_eq!(resets(b"SELECT 'reset' AS default_value"), None);
        assert_eq!(resets(b"DISCARD PLANS"), None);
        assert_eq!(resets(b"SET TimeZone = 'UTC'"), None);
    }
}
