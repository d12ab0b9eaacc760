//! Row movement: the messages that move rows whose sharding key an UPDATE changed, and the
//! reading of the rows a source shard locked (docs/architecture.md §8), and the move itself over
//! the session's connections (`run`, its steps in `steps`), inside one distributed transaction;
//! the statements come from the plan (`router::plan::KeyUpdate`).
//!
//! Values travel in binary between shards of the same schema, each cast to its column's type
//! in the statements, so nothing depends on the session's DateStyle or extra_float_digits.

use std::collections::BTreeMap;

use bytes::{Bytes, BytesMut};
use tokio_postgres::error::SqlState;

use crate::client_error::ClientError;

use crate::executor::gather;
use crate::protocol::MessageBuilder;
use crate::router::plan::{Descendant, KeyUpdate};

/// Why rows could not be moved (the shards' own errors reach the client as they are).
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum MoveError {
    /// The seeds' error: the new key belongs to another shard and the table does not allow
    /// its rows to move.
    #[error(
        "ORA-14402: updating partition key column would cause a partition change (row \
         movement is disabled on \"{table}\"; ALTER TABLE {table} ENABLE ROW MOVEMENT allows it)"
    )]
    RowMovementDisabled { table: String },
    /// The new key cannot be placed on any shard.
    #[error("{0}")]
    Place(crate::router::route::RouteError),
    /// Fewer rows were deleted than were locked: something else changed them.
    #[error(
        "could not move rows of \"{table}\": {locked} rows were locked but {deleted} deleted; \
         retry the statement"
    )]
    RowsChanged {
        table: String,
        locked: u64,
        deleted: u64,
    },
    /// A shard's answer did not have the shape of the proxy's own statement.
    #[error("unexpected answer from a shard while moving rows of \"{table}\"")]
    Malformed { table: String },
}

pub mod run;
mod statements;
mod steps;

pub use statements::{Param, Statements};

/// Parameters per statement at most (the protocol counts them in 16 bits).
const MAX_PARAMS: usize = 32_767;
/// Rows per INSERT at most.
const MAX_ROWS: usize = 1000;

/// The client's side of an extended-protocol execution, as the proxy reuses it.
#[derive(Debug, Clone, Default)]
pub struct ClientBind {
    /// The client's parameter values with their formats (only the ones its statement uses).
    pub params: Vec<(i16, Option<Vec<u8>>)>,
    /// Parse's parameter types for them (count and OIDs).
    pub types: Vec<u8>,
    /// Result format codes (count and codes, as Bind carries them) for RETURNING rows.
    pub result_formats: Vec<u8>,
}

/// A row a source shard locked: where it is, and its values.
pub struct Locked {
    /// The leaf partition holding the row, as PostgreSQL's `regclass` output names it in SQL.
    pub partition: String,
    /// With the partition, names the row on its shard while it is locked.
    pub ctid: String,
    /// The DataRow (partition and ctid as text, then binary values).
    pub row: Bytes,
}

impl Locked {
    pub fn read(row: Bytes) -> Option<Locked> {
        let (partition, ctid) = {
            let values = gather::values(&row);
            let text = |i: usize| std::str::from_utf8(values.get(i).copied().flatten()?).ok();
            (text(0)?.to_string(), text(1)?.to_string())
        };
        Some(Locked {
            partition,
            ctid,
            row,
        })
    }

    /// `partition:ctid`, as the restricted UPDATE of staying rows compares it.
    pub fn pair(&self) -> String {
        format!("{}:{}", self.partition, self.ctid)
    }

    /// Value `i` after the partition and ctid.
    pub fn value(&self, i: usize) -> Option<&[u8]> {
        gather::values(&self.row).get(2 + i).copied().flatten()
    }
}

/// The Sync that ends a step's statements to a shard, so the shard answers them with one
/// ReadyForQuery and an error skips the rest of them.
pub fn sync(out: &mut BytesMut) {
    MessageBuilder::new(out, b'S').finish();
}

/// Result format codes: `text` leading text columns, then `binary` binary ones.
pub fn formats(text: usize, binary: usize) -> Vec<u8> {
    let mut out = Vec::with_capacity(2 + 2 * (text + binary));
    out.extend_from_slice(&((text + binary) as i16).to_be_bytes());
    out.extend(std::iter::repeat_n([0u8, 0], text).flatten());
    out.extend(std::iter::repeat_n([0u8, 1], binary).flatten());
    out
}

/// The client's parameters as the proxy passes them on.
fn client_params(bind: Option<&ClientBind>) -> Vec<Param<'_>> {
    bind.map(|b| b.params.iter().map(|(f, v)| (*f, v.as_deref())).collect())
        .unwrap_or_default()
}

/// Parse's parameter types: the client's, then `extra` unspecified ones.
fn types_with(bind: Option<&ClientBind>, extra: usize) -> Vec<u8> {
    let mut oids: Vec<[u8; 4]> = Vec::new();
    if let Some(b) = bind {
        let mut t = b.types.as_slice();
        let n = crate::protocol::take_i16(&mut t, "Parse")
            .unwrap_or(0)
            .max(0) as usize;
        for _ in 0..n {
            oids.push(
                crate::protocol::take_i32(&mut t, "Parse")
                    .unwrap_or(0)
                    .to_be_bytes(),
            );
        }
        oids.resize(b.params.len(), [0; 4]);
    }
    oids.extend(std::iter::repeat_n([0u8; 4], extra));
    let mut out = Vec::with_capacity(2 + 4 * oids.len());
    out.extend_from_slice(&(oids.len() as i16).to_be_bytes());
    out.extend(oids.into_iter().flatten());
    out
}

/// The root rows the client's statement touches, locked, with their new values.
pub fn select_root(out: &mut Statements, plan: &KeyUpdate, bind: Option<&ClientBind>) {
    let binary = plan.columns.len() + plan.key_positions.len();
    out.prepared(
        &plan.select_sql,
        &types_with(bind, 0),
        &client_params(bind),
        &formats(2, binary),
        false,
    );
}

/// A moving root row: its locked row, and its old and new key values.
pub struct Moving<'a> {
    pub index: usize,
    pub old_key: Vec<Option<&'a [u8]>>,
    pub new_key: Vec<Option<&'a [u8]>>,
}

/// The rows of a descendant table whose key is one of the moving roots' old keys, locked, with
/// the new key in their key columns and the index of their root row after ctid.
pub fn select_descendant(
    out: &mut Statements,
    d: &Descendant,
    key_types: &[String],
    moving: &[Moving<'_>],
) {
    let mut sql = d.select_head.clone();
    let mut params: Vec<Param<'_>> = Vec::new();
    let index_text: Vec<String> = moving.iter().map(|m| m.index.to_string()).collect();
    for (r, m) in moving.iter().enumerate() {
        if r > 0 {
            sql.push_str(", ");
        }
        params.push((0, Some(index_text[r].as_bytes())));
        sql.push_str(&format!("(CAST(${} AS int4)", params.len()));
        let types = key_types.iter().chain(key_types);
        for (v, ty) in m.old_key.iter().chain(&m.new_key).zip(types) {
            params.push((1, *v));
            sql.push_str(&format!(", CAST(${} AS {ty})", params.len()));
        }
        sql.push(')');
    }
    sql.push_str(&d.select_tail);
    out.unnamed(&sql, &[], &params, &formats(3, d.columns.len()), false);
}

/// DELETE of the locked rows `rows`, a statement per partition holding them (their number is
/// returned). Naming the leaf partition spares PostgreSQL planning the DELETE over every
/// partition of the table, which cost more than the rest of a move's statements; the ctid alone
/// then names each row.
pub fn delete(out: &mut Statements, rows: &[&Locked]) -> usize {
    let mut by_partition: BTreeMap<&str, Vec<&str>> = BTreeMap::new();
    for r in rows {
        by_partition
            .entry(r.partition.as_str())
            .or_default()
            .push(r.ctid.as_str());
    }
    let statements = by_partition.len();
    for (partition, ctids) in by_partition {
        // The name is PostgreSQL's own regclass output: quoted as an identifier wherever it
        // needs quotes, so it is the SQL name of that partition and nothing else.
        // One row by its own comparison: PostgreSQL then keeps one generic plan for the
        // statement, where for an array parameter it plans every execution anew.
        if let [ctid] = ctids[..] {
            let sql = format!("DELETE FROM {partition} WHERE ctid = $1::tid");
            out.prepared(&sql, &[], &[(0, Some(ctid.as_bytes()))], &[], false);
        } else {
            let sql = format!("DELETE FROM {partition} WHERE ctid = ANY($1::tid[])");
            let tids = crate::sql::quote::text_array(ctids.into_iter());
            out.prepared(&sql, &[], &[(0, Some(tids.as_bytes()))], &[], false);
        }
    }
    statements
}

/// The client's UPDATE for the rows `rows` that stay where they are.
pub fn update_staying(
    out: &mut Statements,
    plan: &KeyUpdate,
    bind: Option<&ClientBind>,
    rows: &[&Locked],
) {
    let tids = crate::sql::quote::text_array(rows.iter().map(|r| r.ctid.as_str()));
    let pairs: Vec<String> = rows.iter().map(|r| r.pair()).collect();
    let pairs = crate::sql::quote::text_array(pairs.iter().map(String::as_str));
    let mut params = client_params(bind);
    params.push((0, Some(tids.as_bytes())));
    params.push((0, Some(pairs.as_bytes())));
    let result_formats = bind.map(|b| b.result_formats.as_slice()).unwrap_or(&[]);
    out.unnamed(
        &plan.stay_sql,
        &types_with(bind, 2),
        &params,
        result_formats,
        !plan.returning.is_empty(),
    );
}

/// A table the rows go into, as the INSERT names it.
pub struct Target<'a> {
    pub relation: &'a str,
    pub qualifier: Option<&'a str>,
    pub columns: &'a [String],
    pub types: &'a [String],
    /// ` RETURNING …` (empty: none) and the format codes of its rows.
    pub returning: &'a str,
    pub result_formats: &'a [u8],
}

/// INSERTs of `rows` (each a value per column, binary) in batches of at most `MAX_ROWS`; the
/// number of statements.
pub fn insert(out: &mut Statements, into: &Target<'_>, rows: &[Vec<Option<&[u8]>>]) -> usize {
    let width = into.columns.len().max(1);
    let per_batch = (MAX_PARAMS / width).clamp(1, MAX_ROWS);
    let columns: Vec<String> = into
        .columns
        .iter()
        .map(|c| crate::sql::quote::quote_ident(c))
        .collect();
    let alias = into
        .qualifier
        .map(|q| format!(" AS {}", crate::sql::quote::quote_ident(q)))
        .unwrap_or_default();
    let batches = rows.chunks(per_batch);
    let statements = batches.len();
    for batch in batches {
        let mut sql = format!(
            "INSERT INTO {}{alias} ({}) OVERRIDING SYSTEM VALUE VALUES ",
            into.relation,
            columns.join(", ")
        );
        let mut params: Vec<Param<'_>> = Vec::with_capacity(batch.len() * width);
        for (r, row) in batch.iter().enumerate() {
            sql.push_str(if r == 0 { "(" } else { ", (" });
            for (c, ty) in into.types.iter().enumerate() {
                if c > 0 {
                    sql.push_str(", ");
                }
                params.push((1, row.get(c).copied().flatten()));
                sql.push_str(&format!("CAST(${} AS {ty})", params.len()));
            }
            sql.push(')');
        }
        sql.push_str(into.returning);
        let describe = !into.returning.is_empty();
        // One row's INSERT repeats with the same text (a text per row count otherwise).
        if batch.len() == 1 {
            out.prepared(&sql, &[], &params, into.result_formats, describe);
        } else {
            out.unnamed(&sql, &[], &params, into.result_formats, describe);
        }
    }
    statements
}

/// The row count of a command tag (`UPDATE 3`, `DELETE 3`, `INSERT 0 3`).
pub fn tag_count(tag: &str) -> u64 {
    tag.rsplit(' ')
        .next()
        .and_then(|n| n.parse().ok())
        .unwrap_or(0)
}

impl ClientError for MoveError {
    fn sqlstate(&self) -> SqlState {
        use MoveError as M;
        match self {
            M::RowMovementDisabled { .. } => SqlState::CHECK_VIOLATION,
            M::Place(e) => e.sqlstate(),
            M::RowsChanged { .. } => SqlState::T_R_SERIALIZATION_FAILURE,
            M::Malformed { .. } => SqlState::INTERNAL_ERROR,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn counts_come_from_the_tag() {
        assert_eq!(tag_count("INSERT 0 7"), 7);
        assert_eq!(tag_count("DELETE 2"), 2);
    }
}
