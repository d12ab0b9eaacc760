//! The proxy's merge of a grouped read ([`AggregateMerge`]): the shards' rows, one per group
//! and shard, merged into one row per group — counts and bigint sums added (overflow fails as
//! PostgreSQL's does), numeric sums added exactly in their text, min and max by the type's
//! order — then sorted, offset and limited. Each value keeps the format the shard sent it in.

use std::collections::HashMap;

use bytes::{Bytes, BytesMut};
use tokio_postgres::error::SqlState;

use super::numeric;
use crate::executor::gather::order::{compare, order_of, RowOrder};
use crate::executor::gather::{frames, Rows};
use crate::protocol::{self, MessageBuilder, Severity};
use crate::router::plan::{AggregateMerge, ColumnMerge};

/// The outcome of a merge.
pub enum Merged {
    Rows(Rows),
    /// PostgreSQL would have failed the statement so (a bigint sum out of range).
    Failed(Bytes),
    /// A column the proxy does not merge exactly: the general path answers instead.
    Fallback(String),
}

/// Group keys of these types compare equal exactly when their output is byte for byte the
/// same (integers, text in a deterministic collation, booleans, dates and times, uuids).
const GROUPABLE: [u32; 12] = [20, 21, 23, 26, 25, 1043, 19, 16, 1082, 1114, 1184, 2950];

pub fn merge(
    plan: &AggregateMerge,
    description: &Bytes,
    rows: impl IntoIterator<Item = Bytes>,
) -> Merged {
    let columns = frames::columns(description);
    if let Err(why) = check_columns(plan, &columns) {
        return Merged::Fallback(why);
    }
    let mut index: HashMap<Vec<u8>, usize> = HashMap::new();
    let mut groups: Vec<Vec<Option<Vec<u8>>>> = Vec::new();
    for row in rows {
        let values = frames::values(&row);
        let key = group_key(plan, &values);
        let Some(&at) = index.get(&key) else {
            index.insert(key, groups.len());
            groups.push(values.iter().map(|v| v.map(<[u8]>::to_vec)).collect());
            continue;
        };
        let group = &mut groups[at];
        for (i, c) in plan.columns.iter().enumerate() {
            let (Some(new), (oid, format)) = (values.get(i).copied().flatten(), columns[i]) else {
                continue;
            };
            let Some(old) = group[i].as_deref() else {
                group[i] = Some(new.to_vec());
                continue;
            };
            match merge_value(*c, old, new, oid, format) {
                Ok(Some(merged)) => group[i] = Some(merged),
                Ok(None) => {}
                Err(Stop::Failed(error)) => return Merged::Failed(error),
                Err(Stop::Fallback(why)) => return Merged::Fallback(why),
            }
        }
    }
    let mut out: Vec<Bytes> = groups.iter().map(|values| data_row(values)).collect();
    if !plan.order.is_empty() {
        let order = match RowOrder::new(&plan.order, &columns) {
            Ok(o) => o,
            Err(why) => return Merged::Fallback(why),
        };
        if let Err(why) = order.sort(&mut out) {
            return Merged::Fallback(why);
        }
    }
    let skip = (plan.offset as usize).min(out.len());
    out.drain(..skip);
    if let Some(limit) = plan.limit {
        out.truncate(limit as usize);
    }
    Merged::Rows(Rows {
        description: Some(description.clone()),
        tag: Some(format!("SELECT {}", out.len())),
        rows: out.into(),
        ..Rows::default()
    })
}

/// Whether the shards' columns (type OID, format) are the ones the plan merges, each of a type
/// its merge is exact for; why not, otherwise.
fn check_columns(plan: &AggregateMerge, columns: &[(u32, i16)]) -> Result<(), String> {
    if columns.len() != plan.columns.len() {
        return Err("the shards' columns are not the statement's".into());
    }
    for (c, &(oid, format)) in plan.columns.iter().zip(columns) {
        let fits = match c {
            ColumnMerge::Group => GROUPABLE.contains(&oid),
            ColumnMerge::Count => oid == 20,
            ColumnMerge::Sum => oid == 20 || (oid == 1700 && format == 0),
            ColumnMerge::Min | ColumnMerge::Max => order_of(oid, format).is_some(),
        };
        if !fits {
            return Err(format!("a {c:?} column of type OID {oid}"));
        }
    }
    Ok(())
}

/// A row's group: its grouped columns' values, each length-prefixed (NULL apart from empty).
fn group_key(plan: &AggregateMerge, values: &[Option<&[u8]>]) -> Vec<u8> {
    let mut key = Vec::new();
    for (c, v) in plan.columns.iter().zip(values) {
        if *c == ColumnMerge::Group {
            match v {
                None => key.push(0),
                Some(v) => {
                    key.push(1);
                    key.extend_from_slice(&(v.len() as u32).to_be_bytes());
                    key.extend_from_slice(v);
                }
            }
        }
    }
    key
}

/// Why a merge ends early: PostgreSQL would have failed the statement so, or the general path
/// answers instead (see [`Merged`]).
enum Stop {
    Failed(Bytes),
    Fallback(String),
}

/// A group's value of column `c` merged with another shard's: the new value, `None` to keep
/// the old one, or why the whole merge ends.
fn merge_value(
    c: ColumnMerge,
    old: &[u8],
    new: &[u8],
    oid: u32,
    format: i16,
) -> Result<Option<Vec<u8>>, Stop> {
    let merged = match c {
        ColumnMerge::Group => return Ok(None),
        ColumnMerge::Count | ColumnMerge::Sum if oid == 20 => match add_int8(old, new, format) {
            Some(v) => v,
            None => return Err(Stop::Failed(out_of_range())),
        },
        ColumnMerge::Count | ColumnMerge::Sum => {
            let (Ok(a), Ok(b)) = (std::str::from_utf8(old), std::str::from_utf8(new)) else {
                return Err(Stop::Fallback("a numeric sum that is not text".into()));
            };
            match numeric::add(a, b) {
                Some(s) => s.into_bytes(),
                None => return Err(Stop::Fallback(format!("numeric sum {a:?}"))),
            }
        }
        ColumnMerge::Min | ColumnMerge::Max => {
            let Some(order) = order_of(oid, format) else {
                return Err(Stop::Fallback("an order".into()));
            };
            let ord = compare(order, new, old).map_err(Stop::Fallback)?;
            let better = if c == ColumnMerge::Min {
                ord.is_lt()
            } else {
                ord.is_gt()
            };
            if !better {
                return Ok(None);
            }
            new.to_vec()
        }
    };
    Ok(Some(merged))
}

/// A group's DataRow.
fn data_row(values: &[Option<Vec<u8>>]) -> Bytes {
    let mut frame = BytesMut::new();
    let mut m = MessageBuilder::new(&mut frame, b'D');
    m.i16(values.len() as i16);
    for v in values {
        match v {
            Some(v) => m.i32(v.len() as i32).bytes(v),
            None => m.i32(-1),
        };
    }
    m.finish();
    frame.freeze()
}

/// Two bigints added in their format (text or binary); `None` past bigint's range.
fn add_int8(a: &[u8], b: &[u8], format: i16) -> Option<Vec<u8>> {
    if format == 1 {
        let x = i64::from_be_bytes(a.try_into().ok()?);
        let y = i64::from_be_bytes(b.try_into().ok()?);
        return Some(x.checked_add(y)?.to_be_bytes().to_vec());
    }
    let x: i64 = std::str::from_utf8(a).ok()?.parse().ok()?;
    let y: i64 = std::str::from_utf8(b).ok()?.parse().ok()?;
    Some(x.checked_add(y)?.to_string().into_bytes())
}

fn out_of_range() -> Bytes {
    let mut out = BytesMut::new();
    protocol::error_response(
        &mut out,
        Severity::Error,
        &SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        "bigint out of range",
    );
    out.freeze()
}
