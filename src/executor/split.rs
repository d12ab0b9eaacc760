//! A multi-row INSERT whose rows belong to several shards, rewritten into one INSERT per shard
//! holding that shard's rows (in their VALUES order); everything else of the statement (column
//! list, ON CONFLICT, RETURNING) is kept as written.

use pg_query::NodeEnum;

use crate::catalog::ShardId;

/// For each of `shards`, the INSERT of the rows `row_shards` assigns to it.
pub fn split_insert(
    sql: &str,
    row_shards: &[ShardId],
    shards: &[ShardId],
) -> Result<Vec<String>, String> {
    let parsed = pg_query::parse(sql, 0).map_err(|e| e.to_string())?;
    let mut out = Vec::with_capacity(shards.len());
    for shard in shards {
        let mut tree = parsed.protobuf.clone();
        let raw = tree.stmts.first_mut().ok_or("empty statement")?;
        let Some(NodeEnum::InsertStmt(insert)) = raw.stmt.as_mut().and_then(|s| s.node.as_mut())
        else {
            return Err("not an INSERT".into());
        };
        let Some(NodeEnum::SelectStmt(select)) =
            insert.select_stmt.as_mut().and_then(|s| s.node.as_mut())
        else {
            return Err("INSERT without VALUES".into());
        };
        let rows = std::mem::take(&mut select.values_lists);
        select.values_lists = rows
            .into_iter()
            .zip(row_shards)
            .filter(|(_, s)| *s == shard)
            .map(|(r, _)| r)
            .collect();
        out.push(pg_query::deparse(&tree, Default::default()).map_err(|e| e.to_string())?);
    }
    Ok(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn rows_go_to_their_shards_in_order() {
        let sql = "INSERT INTO t (id, v) VALUES (1, 'a'), (2, 'b'), (3, 'c') RETURNING id";
        let split = split_insert(
            sql,
            &[ShardId(1), ShardId(0), ShardId(1)],
            &[ShardId(0), ShardId(1)],
        )
        .unwrap();
        assert_eq!(
            split,
            vec![
                "INSERT INTO t (id, v) VALUES (2, 'b') RETURNING id".to_string(),
                "INSERT INTO t (id, v) VALUES (1, 'a'), (3, 'c') RETURNING id".to_string(),
            ]
        );
    }
}
