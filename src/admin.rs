//! Statements the proxy answers itself (DESIGN.md §1): SHOW SHARDS, SHOW SHARDED TABLES,
//! SHOW CHUNKS [FOR table], SHOW POOLS, SHOW TRANSACTIONS, SHOW VERSION — as ordinary result sets.
//! They are recognised in the simple query protocol (psql, `simple_query`).

use crate::protocol::{ColumnType, ResultSet};
use crate::server::ServerCtx;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    ShowShards,
    ShowShardedTables,
    ShowChunks { table: Option<String> },
    ShowPools,
    ShowTransactions,
    ShowVersion,
}

/// Recognises an admin statement; anything else (including PostgreSQL's own SHOW) is `None`.
pub fn parse(sql: &[u8]) -> Option<AdminCommand> {
    let text = std::str::from_utf8(sql).ok()?;
    let text = text.trim().trim_end_matches(';').trim_end();
    let mut words = text.split_ascii_whitespace();
    if !words.next()?.eq_ignore_ascii_case("show") {
        return None;
    }
    let rest: Vec<&str> = words.collect();
    let is = |w: &str, k: &str| w.eq_ignore_ascii_case(k);
    match rest.as_slice() {
        [w] if is(w, "shards") => Some(AdminCommand::ShowShards),
        [a, b] if is(a, "sharded") && is(b, "tables") => Some(AdminCommand::ShowShardedTables),
        [w] if is(w, "chunks") => Some(AdminCommand::ShowChunks { table: None }),
        [w, f, t] if is(w, "chunks") && is(f, "for") => Some(AdminCommand::ShowChunks {
            table: Some(identifier(t)),
        }),
        [w] if is(w, "pools") => Some(AdminCommand::ShowPools),
        [w] if is(w, "transactions") => Some(AdminCommand::ShowTransactions),
        [w] if is(w, "version") => Some(AdminCommand::ShowVersion),
        _ => None,
    }
}

/// An identifier as PostgreSQL resolves it: quoted keeps its case, unquoted folds to lower.
fn identifier(t: &str) -> String {
    match t.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(q) => q.replace("\"\"", "\""),
        None => t.to_lowercase(),
    }
}

/// The answer to an admin statement, with its command tag.
pub fn answer(cmd: &AdminCommand, ctx: &ServerCtx) -> (ResultSet, String) {
    use ColumnType::{Int8, Text};
    let rs = match cmd {
        AdminCommand::ShowShards => {
            let mut rs = ResultSet::new(&[
                ("shard", Text),
                ("host", Text),
                ("port", Int8),
                ("database", Text),
            ]);
            for p in ctx.pools.all() {
                rs.push(vec![
                    Some(p.name.clone()),
                    Some(p.endpoint.host.clone()),
                    Some(p.endpoint.port.to_string()),
                    Some(p.endpoint.dbname.clone()),
                ]);
            }
            rs
        }
        AdminCommand::ShowPools => {
            let mut rs = ResultSet::new(&[
                ("shard", Text),
                ("connections", Int8),
                ("idle", Int8),
                ("max_size", Int8),
            ]);
            for p in ctx.pools.all() {
                let st = p.pool.state();
                rs.push(vec![
                    Some(p.name.clone()),
                    Some(st.connections.to_string()),
                    Some(st.idle_connections.to_string()),
                    Some(ctx.config.pool.size.to_string()),
                ]);
            }
            rs
        }
        AdminCommand::ShowVersion => {
            let mut rs = ResultSet::new(&[("version", Text)]);
            rs.push(vec![Some(format!(
                "shardwire {}",
                env!("CARGO_PKG_VERSION")
            ))]);
            rs
        }
        AdminCommand::ShowShardedTables => ResultSet::new(&[
            ("table", Text),
            ("family_root", Text),
            ("parent", Text),
            ("method", Text),
            ("key_columns", Text),
            ("tablespace_set", Text),
            ("row_movement", ColumnType::Bool),
            ("state", Text),
        ]),
        AdminCommand::ShowChunks { .. } => {
            ResultSet::new(&[("table", Text), ("chunk", Int8), ("shard", Text)])
        }
        AdminCommand::ShowTransactions => ResultSet::new(&[
            ("gid", Text),
            ("state", Text),
            ("participants", Text),
            ("age_seconds", Int8),
        ]),
    };
    let tag = format!("SHOW {}", rs.rows.len());
    (rs, tag)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_only_its_own_statements() {
        assert_eq!(parse(b"show shards"), Some(AdminCommand::ShowShards));
        assert_eq!(
            parse(b" SHOW  Sharded Tables ;"),
            Some(AdminCommand::ShowShardedTables)
        );
        assert_eq!(
            parse(b"show chunks for \"Orders\""),
            Some(AdminCommand::ShowChunks {
                table: Some("Orders".into())
            })
        );
        assert_eq!(
            parse(b"show chunks for Orders"),
            Some(AdminCommand::ShowChunks {
                table: Some("orders".into())
            })
        );
        assert_eq!(parse(b"show server_version"), None);
        assert_eq!(parse(b"select 1"), None);
        assert_eq!(parse(b"show shards extra"), None);
    }
}
