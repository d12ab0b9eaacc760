//! What `pg_cursors` shows a session whose cursors the proxy spreads over several
//! connections: the cursors of every one of them, read there, as one list. PostgreSQL's view
//! lists one backend's cursors; a client of the proxy has its cursors on each shard it
//! touched and on the combining connections the proxy keeps for cursors over combined rows.

use crate::backend::BackendConn;
use crate::executor::gather::{self, values, Combine, Combined, Origin};
use crate::executor::host::{run_on_shards, Host, Shared, Work};
use crate::model::ShardId;
use crate::router::plan::{Merge, StatementKind};
use crate::sql::quote::quote_literal;
use bytes::Bytes;

/// One row of `pg_cursors`. The creation time is kept as ISO text in UTC, which reads back
/// the same whatever DateStyle the connection that reads it has.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ListedCursor {
    pub name: String,
    pub statement: String,
    pub holdable: bool,
    pub binary: bool,
    pub scrollable: bool,
    pub created_utc: String,
}

const LIST: &str = "SELECT name, statement, is_holdable, is_binary, is_scrollable, \
     to_char(creation_time AT TIME ZONE 'UTC', 'YYYY-MM-DD HH24:MI:SS.US') \
     FROM pg_catalog.pg_cursors";

/// The cursors on the session's connections to `shards` and on `others` (connections the
/// session keeps outside its block); `Ok(Err(frame))`: one of them refused (its block failed).
pub async fn list<H: Host>(
    host: &mut H,
    shared: Shared<'_>,
    shards: &[ShardId],
    others: &mut [(ShardId, &mut BackendConn)],
) -> Result<Result<Vec<ListedCursor>, Bytes>, H::Error> {
    let union = Combine::Union {
        kind: StatementKind::Select,
        merge: Merge::default(),
        rows: Vec::new(),
    };
    let mut listed = Vec::new();
    if !shards.is_empty() {
        let sql = vec![LIST.to_string(); shards.len()];
        match run_on_shards(host, shared, shards, Work::Simple(&sql), &union).await? {
            Combined::Rows(rows) => listed.extend(rows.rows.iter().filter_map(read)),
            Combined::Failed { error, .. } => return Ok(Err(error)),
        }
    }
    for (shard, conn) in others {
        let origin = Origin {
            shards: std::slice::from_ref(shard),
            control: shared.control,
        };
        let sql = [LIST.to_string()];
        let answered = gather::run_simple(&mut [&mut **conn], &sql, &union, &origin).await;
        match answered {
            Ok((Combined::Rows(rows), _)) => {
                listed.extend(rows.rows.iter().filter_map(read));
            }
            Ok((Combined::Failed { error, .. }, _)) => return Ok(Err(error)),
            Err(e) => {
                conn.broken = true;
                return Err(e.into());
            }
        }
    }
    Ok(Ok(listed))
}

fn read(row: &Bytes) -> Option<ListedCursor> {
    let v = values(row);
    let text = |i: usize| -> Option<String> {
        Some(String::from_utf8_lossy(v.get(i).copied().flatten()?).into_owned())
    };
    let flag = |i: usize| v.get(i).copied().flatten() == Some(b"t".as_slice());
    Some(ListedCursor {
        name: text(0)?,
        statement: text(1).unwrap_or_default(),
        holdable: flag(2),
        binary: flag(3),
        scrollable: flag(4),
        created_utc: text(5)?,
    })
}

/// A query with `pg_cursors`' columns and types whose rows are `cursors`.
pub fn as_query(cursors: &[ListedCursor]) -> String {
    const COLUMNS: &str = "name, statement, is_holdable, is_binary, is_scrollable, creation_time";
    if cursors.is_empty() {
        return "SELECT NULL::text AS name, NULL::text AS statement, NULL::boolean AS is_holdable, \
                NULL::boolean AS is_binary, NULL::boolean AS is_scrollable, \
                NULL::timestamptz AS creation_time WHERE false"
            .to_string();
    }
    let rows: Vec<String> = cursors
        .iter()
        .map(|c| {
            format!(
                "({}::text, {}::text, {}, {}, {}, {}::timestamptz)",
                quote_literal(&c.name),
                quote_literal(&c.statement),
                c.holdable,
                c.binary,
                c.scrollable,
                quote_literal(&format!("{}+00", c.created_utc)),
            )
        })
        .collect();
    format!(
        "SELECT {COLUMNS} FROM (VALUES {}) AS listed({COLUMNS})",
        rows.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_listed_cursor_reads_back_as_written() {
        let c = ListedCursor {
            name: "it's".into(),
            statement: r"DECLARE x CURSOR FOR SELECT '\'".into(),
            holdable: true,
            binary: false,
            scrollable: true,
            created_utc: "2026-12-07 10:00:00.123456".into(),
        };
        let q = as_query(&[c]);
        let row = r"('it''s'::text, E'DECLARE x CURSOR FOR SELECT ''\\'''::text, true, false, true, '2026-12-07 10:00:00.123456+00'::timestamptz)";
        assert!(q.contains(row), "{q}");
    }
}
