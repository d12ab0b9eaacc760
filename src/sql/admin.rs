//! The statements the proxy answers itself (docs/architecture.md §1: SHOW SHARDS, SHOW SHARDED
//! TABLES, SHOW CHUNKS [FOR table], SHOW POOLS, SHOW TRANSACTIONS, SHOW VERSION), recognised from
//! their words; the admin layer answers them.

use crate::sql::classify::{is_blank, keyword, leading_words_and_rest};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum AdminCommand {
    ShowShards,
    ShowShardedTables,
    ShowChunks {
        table: Option<String>,
    },
    ShowPools,
    ShowTransactions,
    ShowVersion,
    ShowMoves,
    /// `CHECK PLACEMENT [FOR table]`.
    CheckPlacement {
        table: Option<String>,
    },
    /// `MOVE CHUNK n FOR table TO SHARD s`.
    MoveChunk {
        chunk: u32,
        table: String,
        shard: String,
    },
    /// `SPLIT CHUNK n FOR table`.
    SplitChunk {
        chunk: u32,
        table: String,
    },
    /// `CANCEL MOVE id`.
    CancelMove {
        id: i64,
    },
    /// `REBALANCE TABLESPACE SET ts`.
    Rebalance {
        set: String,
    },
    /// `ALTER TABLESPACE SET ts ADD | REMOVE SHARD s`.
    ChangeSetMembers {
        set: String,
        shard: String,
        change: MemberChange,
    },
}

/// What `ALTER TABLESPACE SET` does to its shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum MemberChange {
    Add,
    Remove,
}

/// Recognises an admin statement; anything else (including PostgreSQL's own SHOW) is `None`.
pub fn parse(sql: &[u8]) -> Option<AdminCommand> {
    const SHOW: u128 = keyword(b"show");
    const SHARDS: u128 = keyword(b"shards");
    const SHARDED: u128 = keyword(b"sharded");
    const TABLES: u128 = keyword(b"tables");
    const CHUNKS: u128 = keyword(b"chunks");
    const FOR: u128 = keyword(b"for");
    const POOLS: u128 = keyword(b"pools");
    const TRANSACTIONS: u128 = keyword(b"transactions");
    const VERSION: u128 = keyword(b"version");
    const MOVES: u128 = keyword(b"moves");
    let (words, rest) = leading_words_and_rest::<3>(sql);
    let [show, w1, w2] = words.map(keyword);
    if show != SHOW {
        return None;
    }
    // A word too long for a keyword is 0, as a missing one is: only a missing one ends the
    // statement.
    let alone = words[2].is_empty() && is_blank(rest);
    match [w1, w2] {
        [SHARDS, _] if alone => Some(AdminCommand::ShowShards),
        [SHARDED, TABLES] if is_blank(rest) => Some(AdminCommand::ShowShardedTables),
        [CHUNKS, _] if alone => Some(AdminCommand::ShowChunks { table: None }),
        [CHUNKS, FOR] => Some(AdminCommand::ShowChunks {
            table: Some(identifier(table_name(rest)?)),
        }),
        [POOLS, _] if alone => Some(AdminCommand::ShowPools),
        [TRANSACTIONS, _] if alone => Some(AdminCommand::ShowTransactions),
        [VERSION, _] if alone => Some(AdminCommand::ShowVersion),
        [MOVES, _] if alone => Some(AdminCommand::ShowMoves),
        _ => None,
    }
}

/// Recognises a growth statement that changes or checks placement (`MOVE CHUNK`, `SPLIT
/// CHUNK`, `CHECK PLACEMENT`, `CANCEL MOVE`, `REBALANCE TABLESPACE SET`, `ALTER TABLESPACE SET
/// … ADD | REMOVE SHARD`); anything else, a cursor's MOVE included, is `None`.
pub fn parse_growth(sql: &[u8]) -> Option<AdminCommand> {
    let text = std::str::from_utf8(sql).ok()?.trim();
    let text = text.strip_suffix(';').unwrap_or(text);
    let words = words(text)?;
    let word = |i: usize| words.get(i).map(String::as_str);
    let is = |i: usize, k: &str| word(i).is_some_and(|w| w.eq_ignore_ascii_case(k));
    if is(0, "check") && is(1, "placement") {
        return match words.len() {
            2 => Some(AdminCommand::CheckPlacement { table: None }),
            4 if is(2, "for") => Some(AdminCommand::CheckPlacement {
                table: Some(identifier(word(3)?)),
            }),
            _ => None,
        };
    }
    if is(0, "rebalance") && is(1, "tablespace") && is(2, "set") && words.len() == 4 {
        return Some(AdminCommand::Rebalance {
            set: identifier(word(3)?),
        });
    }
    if is(0, "alter") && is(1, "tablespace") && is(2, "set") && is(5, "shard") {
        let change = match word(4) {
            Some(w) if w.eq_ignore_ascii_case("add") => MemberChange::Add,
            Some(w) if w.eq_ignore_ascii_case("remove") => MemberChange::Remove,
            _ => return None,
        };
        return (words.len() == 7).then_some(AdminCommand::ChangeSetMembers {
            set: identifier(word(3)?),
            shard: identifier(word(6)?),
            change,
        });
    }
    if is(0, "cancel") && is(1, "move") && words.len() == 3 {
        return Some(AdminCommand::CancelMove {
            id: word(2)?.parse().ok()?,
        });
    }
    if is(0, "split") && is(1, "chunk") && is(3, "for") && words.len() == 5 {
        return Some(AdminCommand::SplitChunk {
            chunk: word(2)?.parse().ok()?,
            table: identifier(word(4)?),
        });
    }
    if is(0, "move") && is(1, "chunk") && is(3, "for") && is(5, "to") && is(6, "shard") {
        return (words.len() == 8).then_some(AdminCommand::MoveChunk {
            chunk: word(2)?.parse().ok()?,
            table: identifier(word(4)?),
            shard: identifier(word(7)?),
        });
    }
    None
}

/// The statement's words, split at blanks outside double quotes.
fn words(text: &str) -> Option<Vec<String>> {
    let mut out = Vec::new();
    let mut current = String::new();
    let mut quoted = false;
    for c in text.chars() {
        match c {
            '"' => {
                quoted = !quoted;
                current.push(c);
            }
            c if c.is_whitespace() && !quoted => {
                if !current.is_empty() {
                    out.push(std::mem::take(&mut current));
                }
            }
            c => current.push(c),
        }
    }
    if quoted {
        return None;
    }
    if !current.is_empty() {
        out.push(current);
    }
    Some(out)
}

/// The table of `SHOW CHUNKS FOR table`: one name with no whitespace in it (`t`, `s.t`,
/// `"T"`), before the statement's end.
fn table_name(rest: &[u8]) -> Option<&str> {
    let end = rest
        .iter()
        .position(u8::is_ascii_whitespace)
        .unwrap_or(rest.len());
    let (name, after) = rest.split_at(end);
    let name = std::str::from_utf8(name).ok()?.trim_end_matches(';');
    (!name.is_empty() && is_blank(after)).then_some(name)
}

/// An identifier as PostgreSQL resolves it: quoted keeps its case, unquoted folds to lower.
fn identifier(t: &str) -> String {
    match t.strip_prefix('"').and_then(|t| t.strip_suffix('"')) {
        Some(q) => q.replace("\"\"", "\""),
        None => t.to_lowercase(),
    }
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
        assert_eq!(parse(b"show shards a_very_long_identifier"), None);
        assert_eq!(parse(b"show chunks for"), None);
        assert_eq!(parse(b"show chunks for t extra"), None);
    }

    #[test]
    fn comments_and_semicolons_around_the_words_are_skipped() {
        assert_eq!(
            parse(b"/* admin */ SHOW -- what\n shards;"),
            Some(AdminCommand::ShowShards)
        );
        assert_eq!(
            parse(b"show chunks for s.Orders ; -- done"),
            Some(AdminCommand::ShowChunks {
                table: Some("s.orders".into())
            })
        );
        assert_eq!(parse(b"show /* not */ server_version"), None);
    }
}
