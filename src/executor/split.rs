//! A multi-row INSERT (or a MERGE from VALUES) whose rows belong to several shards, rewritten
//! into one statement per shard holding that shard's rows (in their VALUES order); everything
//! else of the statement (column list, ON CONFLICT, RETURNING, WHEN clauses) is kept as written.

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
        // An INSERT's VALUES, or a MERGE's VALUES source.
        let values = match raw.stmt.as_mut().and_then(|s| s.node.as_mut()) {
            Some(NodeEnum::InsertStmt(insert)) => insert.select_stmt.as_mut(),
            Some(NodeEnum::MergeStmt(merge)) => {
                match merge.source_relation.as_mut().and_then(|s| s.node.as_mut()) {
                    Some(NodeEnum::RangeSubselect(sub)) => sub.subquery.as_mut(),
                    _ => None,
                }
            }
            _ => return Err("not an INSERT or MERGE".into()),
        };
        let Some(NodeEnum::SelectStmt(select)) = values.and_then(|s| s.node.as_mut()) else {
            return Err("no VALUES".into());
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

/// One shard's part of a prepared INSERT.
#[derive(Debug, PartialEq, Eq)]
pub struct PreparedPart {
    /// Its rows, with the parameters it uses renumbered from `$1` in order of appearance.
    pub sql: String,
    /// The client's parameter (0-based) behind each new one.
    pub params: Vec<usize>,
}

/// [`split_insert`] of a prepared INSERT: each shard's statement refers only to its own rows'
/// parameters (and those the rest of the statement uses), since PostgreSQL refuses a
/// parameter whose type it cannot determine and a Bind with more values than parameters.
pub fn split_prepared_insert(
    sql: &str,
    row_shards: &[ShardId],
    shards: &[ShardId],
) -> Result<Vec<PreparedPart>, String> {
    split_insert(sql, row_shards, shards)?
        .iter()
        .map(|s| renumber_params(s))
        .collect()
}

/// `sql` with its parameters renumbered ([`crate::sql::params::renumber`]).
pub fn renumber_params(sql: &str) -> Result<PreparedPart, String> {
    let (sql, params) = crate::sql::params::renumber(sql)?;
    Ok(PreparedPart { sql, params })
}

/// What an INSERT's generated key column gets in each VALUES row.
pub enum KeyValues<'a> {
    /// These values, one per row.
    Values(&'a [i64]),
    /// Parameters from `$n` on, one per row (a prepared INSERT).
    Params(i32),
}

/// The INSERT with its generated key column filled in: added to the column list when the
/// statement leaves it out (`missing`), its DEFAULT replaced otherwise.
pub fn fill_generated(
    sql: &str,
    column: &str,
    missing: bool,
    values: KeyValues<'_>,
) -> Result<String, String> {
    use pg_query::protobuf::{a_const, AConst, Float, Integer, Node, ParamRef, ResTarget};
    let mut tree = pg_query::parse(sql, 0).map_err(|e| e.to_string())?.protobuf;
    let raw = tree.stmts.first_mut().ok_or("empty statement")?;
    let Some(NodeEnum::InsertStmt(insert)) = raw.stmt.as_mut().and_then(|s| s.node.as_mut()) else {
        return Err("not an INSERT".into());
    };
    let position = if missing {
        insert.cols.push(Node {
            node: Some(NodeEnum::ResTarget(Box::new(ResTarget {
                name: column.to_string(),
                indirection: Vec::new(),
                val: None,
                location: -1,
            }))),
        });
        insert.cols.len() - 1
    } else {
        insert
            .cols
            .iter()
            .position(|c| matches!(&c.node, Some(NodeEnum::ResTarget(r)) if r.name == column))
            .ok_or("the generated column is not in the column list")?
    };
    let Some(NodeEnum::SelectStmt(select)) =
        insert.select_stmt.as_mut().and_then(|s| s.node.as_mut())
    else {
        return Err("INSERT without VALUES".into());
    };
    for (i, row) in select.values_lists.iter_mut().enumerate() {
        let Some(NodeEnum::List(list)) = row.node.as_mut() else {
            return Err("unexpected VALUES row".into());
        };
        let value = match &values {
            KeyValues::Values(v) => {
                let v = *v.get(i).ok_or("fewer generated values than rows")?;
                let val = match i32::try_from(v) {
                    Ok(n) => a_const::Val::Ival(Integer { ival: n }),
                    Err(_) => a_const::Val::Fval(Float {
                        fval: v.to_string(),
                    }),
                };
                NodeEnum::AConst(AConst {
                    isnull: false,
                    location: -1,
                    val: Some(val),
                })
            }
            KeyValues::Params(n) => NodeEnum::ParamRef(ParamRef {
                number: *n + i as i32,
                location: -1,
            }),
        };
        let node = Node { node: Some(value) };
        if missing {
            list.items.push(node);
        } else {
            let item = list
                .items
                .get_mut(position)
                .ok_or("a VALUES row is shorter than the column list")?;
            // A row that gives its key routes by it and keeps it; DEFAULT and `nextval` of the
            // key's sequence (the only `nextval` the planner lets through as a key) are filled.
            let generated = match &item.node {
                Some(NodeEnum::SetToDefault(_)) => true,
                Some(NodeEnum::FuncCall(f)) => f.funcname.last().is_some_and(
                    |n| matches!(&n.node, Some(NodeEnum::String(s)) if s.sval == "nextval"),
                ),
                _ => false,
            };
            if generated {
                *item = node;
            }
        }
    }
    pg_query::deparse(&tree, Default::default()).map_err(|e| e.to_string())
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

    #[test]
    fn generated_keys_fill_the_column() {
        let sql = "INSERT INTO t (v) VALUES ('a'), ('b') RETURNING id";
        assert_eq!(
            fill_generated(sql, "id", true, KeyValues::Values(&[7, 3_000_000_000])).unwrap(),
            "INSERT INTO t (v, id) VALUES ('a', 7), ('b', 3000000000) RETURNING id"
        );
        let sql = "INSERT INTO t (id, v) VALUES (DEFAULT, $1)";
        assert_eq!(
            fill_generated(sql, "id", false, KeyValues::Params(2)).unwrap(),
            "INSERT INTO t (id, v) VALUES ($2, $1)"
        );
        let sql = "INSERT INTO t (id, v) VALUES (DEFAULT, $1), (5, $2), (DEFAULT, $3)";
        assert_eq!(
            fill_generated(sql, "id", false, KeyValues::Params(4)).unwrap(),
            "INSERT INTO t (id, v) VALUES ($4, $1), (5, $2), ($6, $3)"
        );
    }

    #[test]
    fn prepared_rows_take_their_parameters_renumbered() {
        let sql = "INSERT INTO t (id, v) VALUES ($1, $2), ($3, '$1'), ($5, $6) \
                   ON CONFLICT (id) DO UPDATE SET v = $7 RETURNING id, $7";
        let split = split_prepared_insert(
            sql,
            &[ShardId(1), ShardId(0), ShardId(1)],
            &[ShardId(0), ShardId(1)],
        )
        .unwrap();
        assert_eq!(split[0].params, vec![2, 6]);
        assert!(
            split[0]
                .sql
                .starts_with("INSERT INTO t (id, v) VALUES ($1, '$1') ON CONFLICT"),
            "{}",
            split[0].sql
        );
        assert!(split[0].sql.ends_with("v = $2 RETURNING id, $2"));
        assert_eq!(split[1].params, vec![0, 1, 4, 5, 6]);
        assert!(split[1]
            .sql
            .starts_with("INSERT INTO t (id, v) VALUES ($1, $2), ($3, $4) ON CONFLICT"));
    }
}
