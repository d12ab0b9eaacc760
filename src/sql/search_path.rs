//! A session's `search_path` as the proxy follows it: from the startup packet, and from the
//! statements that set it where the proxy can be sure of the outcome (a `SET`, `SET SCHEMA`,
//! `RESET` or `DISCARD ALL` alone in a simple query outside a transaction block). Anywhere
//! else — inside a block that may roll back, among other statements, through `set_config`, or
//! in the extended protocol — the proxy no longer knows it, and says so.

use pg_query::protobuf::{a_const, DiscardMode, VariableSetKind};
use pg_query::NodeEnum;

use crate::sql::classify::{keyword, leading_words};

/// What a statement does to the session's `search_path`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PathChange {
    /// Nothing.
    Keeps,
    /// Sets it to these schemas, in order, as PostgreSQL holds them (`$user` unexpanded).
    To(Vec<String>),
    /// Back to the session's start (the startup packet's value, else the server's).
    Resets,
    /// Changes it, or may, in a way the proxy cannot follow.
    Unknown,
}

/// What `sql` does to `search_path`. `sure`: the statement runs alone in a simple query outside
/// a transaction block, so that it takes effect as written (or fails, leaving it as it was).
pub fn change_of(sql: &[u8], sure: bool) -> PathChange {
    const SET: u128 = keyword(b"set");
    const RESET: u128 = keyword(b"reset");
    const DISCARD: u128 = keyword(b"discard");
    const SCHEMA: u128 = keyword(b"schema");
    const SESSION: u128 = keyword(b"session");
    const ALL: u128 = keyword(b"all");
    let mentions_path = memchr::memmem::find(&sql.to_ascii_lowercase(), b"search_path").is_some();
    let words = leading_words::<3>(sql).map(keyword);
    let may_change = mentions_path
        || matches!(
            words,
            [SET, SCHEMA, _] | [SET, SESSION, SCHEMA] | [RESET, ALL, _] | [DISCARD, ALL, _]
        );
    if !may_change {
        return PathChange::Keeps;
    }
    if !sure {
        return PathChange::Unknown;
    }
    let Ok(parsed) = std::str::from_utf8(sql).map(|text| pg_query::parse(text, 0)) else {
        return PathChange::Unknown;
    };
    let Ok(parsed) = parsed else {
        // PostgreSQL rejects it too, and nothing changes.
        return PathChange::Keeps;
    };
    let [stmt] = parsed.protobuf.stmts.as_slice() else {
        return PathChange::Unknown;
    };
    match stmt.stmt.as_ref().and_then(|s| s.node.as_ref()) {
        Some(NodeEnum::VariableSetStmt(v)) => {
            let kind = VariableSetKind::try_from(v.kind).unwrap_or(VariableSetKind::Undefined);
            if kind == VariableSetKind::VarResetAll {
                return PathChange::Resets;
            }
            if v.name != "search_path" {
                return PathChange::Keeps;
            }
            // Outside a block, SET LOCAL only warns.
            if v.is_local {
                return PathChange::Keeps;
            }
            match kind {
                VariableSetKind::VarSetValue => v
                    .args
                    .iter()
                    .map(|a| match a.node.as_ref() {
                        Some(NodeEnum::AConst(c)) => match &c.val {
                            Some(a_const::Val::Sval(s)) => Some(s.sval.clone()),
                            _ => None,
                        },
                        _ => None,
                    })
                    .collect::<Option<Vec<String>>>()
                    .map_or(PathChange::Unknown, PathChange::To),
                VariableSetKind::VarSetDefault | VariableSetKind::VarReset => PathChange::Resets,
                VariableSetKind::VarSetCurrent => PathChange::Keeps,
                VariableSetKind::VarSetMulti
                | VariableSetKind::VarResetAll
                | VariableSetKind::Undefined => PathChange::Unknown,
            }
        }
        Some(NodeEnum::DiscardStmt(d)) if d.target == DiscardMode::DiscardAll as i32 => {
            PathChange::Resets
        }
        // ALTER ROLE … SET search_path and the like change other sessions, not this one.
        Some(NodeEnum::AlterRoleSetStmt(_) | NodeEnum::AlterDatabaseSetStmt(_)) => {
            PathChange::Keeps
        }
        _ => PathChange::Unknown,
    }
}

/// The schemas of a `search_path` value as PostgreSQL splits it (its SplitIdentifierString):
/// comma-separated names, unquoted ones folded to lower case, quoted ones as written with `""`
/// for a quote. `None`: not a valid value.
pub fn split_setting(value: &str) -> Option<Vec<String>> {
    let mut names = Vec::new();
    let mut rest = value.trim_start();
    if rest.is_empty() {
        return Some(names);
    }
    loop {
        let name;
        if let Some(quoted) = rest.strip_prefix('"') {
            let mut text = String::new();
            let mut chars = quoted.char_indices();
            let end = loop {
                let (i, c) = chars.next()?;
                if c == '"' {
                    if quoted[i + 1..].starts_with('"') {
                        chars.next();
                    } else {
                        break i + 1;
                    }
                }
                text.push(c);
            };
            name = text;
            rest = &quoted[end..];
        } else {
            let end = rest
                .find(|c: char| c == ',' || c.is_ascii_whitespace())
                .unwrap_or(rest.len());
            if end == 0 {
                return None;
            }
            name = rest[..end].to_ascii_lowercase();
            rest = &rest[end..];
        }
        names.push(name);
        rest = rest.trim_start();
        match rest.strip_prefix(',') {
            Some(after) => rest = after.trim_start(),
            None if rest.is_empty() => return Some(names),
            None => return None,
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn to(names: &[&str]) -> PathChange {
        PathChange::To(names.iter().map(|s| s.to_string()).collect())
    }

    #[test]
    fn settings_split_as_postgres_splits_them() {
        let split = |v: &str| split_setting(v);
        assert_eq!(
            split("\"$user\", public"),
            Some(vec!["$user".into(), "public".into()])
        );
        assert_eq!(
            split("App ,\"My \"\"S\"\"\""),
            Some(vec!["app".into(), "My \"S\"".into()])
        );
        assert_eq!(split(""), Some(vec![]));
        assert_eq!(split("a b"), None);
        assert_eq!(split("a,"), None);
        assert_eq!(split("\"open"), None);
    }

    #[test]
    fn statements_that_set_it_are_read_when_sure() {
        assert_eq!(
            change_of(b"SET search_path = App, 'My S'", true),
            to(&["app", "My S"])
        );
        assert_eq!(
            change_of(b"set search_path to \"$user\", public", true),
            to(&["$user", "public"])
        );
        assert_eq!(change_of(b"SET SCHEMA 'app'", true), to(&["app"]));
        assert_eq!(
            change_of(b"SET SESSION search_path = app", true),
            to(&["app"])
        );
        assert_eq!(change_of(b"RESET search_path", true), PathChange::Resets);
        assert_eq!(
            change_of(b"SET search_path TO DEFAULT", true),
            PathChange::Resets
        );
        assert_eq!(change_of(b"RESET ALL", true), PathChange::Resets);
        assert_eq!(change_of(b"DISCARD ALL", true), PathChange::Resets);
        assert_eq!(
            change_of(b"SET LOCAL search_path = app", true),
            PathChange::Keeps
        );
        assert_eq!(change_of(b"SET TimeZone = 'UTC'", true), PathChange::Keeps);
        assert_eq!(change_of(b"SELECT 1", true), PathChange::Keeps);
        assert_eq!(
            change_of(b"SELECT set_config('search_path', 'app', false)", true),
            PathChange::Unknown
        );
        assert_eq!(
            change_of(b"SET search_path = app; SELECT 1", true),
            PathChange::Unknown
        );
        assert_eq!(
            change_of(b"SET search_path = app", false),
            PathChange::Unknown
        );
        assert_eq!(change_of(b"SET TimeZone = 'UTC'", false), PathChange::Keeps);
    }
}
