//! Which shard holds a row, from its sharding-key values: the chunk of a consistent-hash
//! family, the partition of list and range sharding, the partition set and then the chunk of
//! composite sharding (docs/architecture.md §3).

use std::cmp::Ordering;

use super::hash::{self, Comparable, HashError, KeyType, KeyValue};
use crate::catalog::{Snapshot, Table};
use crate::model::{BoundValue, KeyColumn, PartitionBound, ShardId, ShardingMethod, TableKind};
use tokio_postgres::error::SqlState;

use crate::client_error::ClientError;

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum PlaceError {
    #[error("{0}")]
    Hash(#[from] HashError),
    /// No partition takes the value, as PostgreSQL says of such a row.
    #[error("no partition of relation \"{table}\" found for row")]
    NoPartition { table: String },
    /// The proxy cannot tell the partition itself.
    #[error("cannot tell which partition of \"{table}\" takes the value: {reason}")]
    Undecidable { table: String, reason: String },
}

/// The shard holding the row of `table` whose sharding key is `key` (in the order of the
/// family root's key columns) and, for composite sharding, whose partition-set key is
/// `set_key`. Unsharded and duplicated tables have no key: their first shard.
pub fn shard_for(
    snapshot: &Snapshot,
    table: &Table,
    key: &[KeyValue<'_>],
    set_key: &[KeyValue<'_>],
) -> Result<ShardId, PlaceError> {
    let root = snapshot.root_of(table.id).unwrap_or(table);
    let name = || root.qualified_name();
    match (root.kind, root.method) {
        (TableKind::Duplicated | TableKind::Unsharded, _) | (TableKind::Sharded, None) => {
            Ok(snapshot
                .shards_of(table.id)
                .first()
                .copied()
                .unwrap_or(ShardId(0)))
        }
        (TableKind::Sharded, Some(method)) => match method {
            ShardingMethod::ConsistentHash | ShardingMethod::Reference => {
                chunk_shard(&root.key_columns, key, &root.chunks)
            }
            ShardingMethod::CompositeList | ShardingMethod::CompositeRange => {
                let bounds: Vec<&PartitionBound> =
                    root.partition_sets.iter().map(|s| &s.bound).collect();
                let set = find_partition(&root.partition_set_columns, set_key, &bounds)
                    .map_err(|e| e.naming(name()))?;
                chunk_shard(&root.key_columns, key, &root.partition_sets[set].chunks)
            }
            ShardingMethod::List | ShardingMethod::Range => {
                let bounds: Vec<&PartitionBound> =
                    root.partitions.iter().map(|p| &p.bound).collect();
                let p = find_partition(&root.key_columns, key, &bounds)
                    .map_err(|e| e.naming(name()))?;
                Ok(root.partitions[p].shard)
            }
        },
    }
}

fn chunk_shard(
    columns: &[KeyColumn],
    key: &[KeyValue<'_>],
    chunks: &[ShardId],
) -> Result<ShardId, PlaceError> {
    let h = match (columns, key) {
        // One key column, as most tables have: no list to build.
        ([column], [value]) => {
            hash::partition_hash(&[(column.key_type().map_err(HashError::from)?, *value)])?
        }
        _ => {
            let typed: smallvec::SmallVec<[(KeyType, KeyValue<'_>); 2]> = columns
                .iter()
                .zip(key)
                .map(|(c, v)| Ok((c.key_type()?, *v)))
                .collect::<Result<_, HashError>>()?;
            hash::partition_hash(&typed)?
        }
    };
    let chunk = hash::remainder(h, chunks.len().max(1) as u64) as usize;
    Ok(chunks.get(chunk).copied().unwrap_or(ShardId(0)))
}

/// Why no partition could be picked, before the table's name is known.
enum Miss {
    None,
    Undecidable(String),
    Hash(HashError),
}

impl Miss {
    fn naming(self, table: String) -> PlaceError {
        match self {
            Miss::None => PlaceError::NoPartition { table },
            Miss::Undecidable(reason) => PlaceError::Undecidable { table, reason },
            Miss::Hash(e) => PlaceError::Hash(e),
        }
    }
}

/// The index of the list or range partition (or partition set) that takes `values`.
fn find_partition(
    columns: &[KeyColumn],
    values: &[KeyValue<'_>],
    bounds: &[&PartitionBound],
) -> Result<usize, Miss> {
    let types: Vec<KeyType> = columns
        .iter()
        .map(|c| c.key_type().map_err(|e| Miss::Hash(e.into())))
        .collect::<Result<_, _>>()?;
    let given: Vec<Option<Comparable>> = types
        .iter()
        .zip(values)
        .map(|(ty, v)| hash::comparable(*ty, v))
        .collect::<Result<_, _>>()
        .map_err(|e| {
            if e.needs_server() {
                Miss::Undecidable(e.to_string())
            } else {
                Miss::Hash(e)
            }
        })?;
    let bound_value = |ty: KeyType, b: &BoundValue| -> Result<Option<Comparable>, Miss> {
        match b {
            BoundValue::Literal(s) => hash::comparable(ty, &KeyValue::Text(s))
                .map_err(|e| Miss::Undecidable(e.to_string())),
            BoundValue::Null | BoundValue::Default | BoundValue::MaxValue => Ok(None),
        }
    };
    let mut default = None;
    for (i, bound) in bounds.iter().enumerate() {
        match bound {
            PartitionBound::In(tuples) => {
                for tuple in tuples {
                    if tuple.contains(&BoundValue::Default) {
                        default = Some(i);
                        continue;
                    }
                    let mut all = true;
                    for ((ty, b), v) in types.iter().zip(tuple).zip(&given) {
                        let b = bound_value(*ty, b)?;
                        if b != *v {
                            all = false;
                            break;
                        }
                    }
                    if all {
                        return Ok(i);
                    }
                }
            }
            PartitionBound::LessThan(upper) => {
                // Partitions are in bound order: the first whose upper bound lies above the
                // value takes it. Range keys never hold NULL.
                if given.iter().any(Option::is_none) {
                    return Err(Miss::None);
                }
                if below(&types, &given, upper, bound_value)? {
                    return Ok(i);
                }
            }
        }
    }
    default.ok_or(Miss::None)
}

/// Whether the tuple `given` sorts before the exclusive upper bound `upper`.
fn below(
    types: &[KeyType],
    given: &[Option<Comparable>],
    upper: &[BoundValue],
    bound_value: impl Fn(KeyType, &BoundValue) -> Result<Option<Comparable>, Miss>,
) -> Result<bool, Miss> {
    for ((ty, v), b) in types.iter().zip(given).zip(upper) {
        if *b == BoundValue::MaxValue {
            return Ok(true);
        }
        let (Some(v), Some(b)) = (v, bound_value(*ty, b)?) else {
            return Err(Miss::Undecidable("a bound without a value".into()));
        };
        match v.order(&b) {
            Some(Ordering::Less) => return Ok(true),
            Some(Ordering::Greater) => return Ok(false),
            Some(Ordering::Equal) => {}
            None => {
                return Err(Miss::Undecidable(
                    "string order depends on the collation".into(),
                ))
            }
        }
    }
    // Equal to the bound on every column: the bound is exclusive.
    Ok(false)
}

// ---------------------------------------------------------------------------------------------
// Pruning: the shards whose partitions or chunks can hold a row matching a statement's
// conditions. Every "cannot tell" answers "can hold", so a shard is dropped only when no
// matching row can be on it.

/// What a statement's conditions say about one key column, with its values resolved.
#[derive(Debug, Clone, Default)]
pub struct ColumnConstraint<'a> {
    /// The column takes one of these (`None`: any value; `Some(vec![])`: none).
    pub equal: Option<Vec<KeyValue<'a>>>,
    /// Lower bounds: (value, inclusive).
    pub lower: Vec<(KeyValue<'a>, bool)>,
    /// Upper bounds: (value, inclusive).
    pub upper: Vec<(KeyValue<'a>, bool)>,
}

/// The type a value compared with a key column is read as. An order comparison takes the
/// value as written, not rounded to the column's typmod (`ts0_col > '…00.7'` compares with
/// .7), so the typmod is dropped; bounds and stored rows keep it.
fn compared_type(ty: KeyType) -> KeyType {
    match ty {
        KeyType::Numeric(_) => KeyType::Numeric(None),
        KeyType::Varchar(_) => KeyType::Varchar(None),
        KeyType::Bpchar(_) => KeyType::Bpchar(None),
        KeyType::Timestamp(_) => KeyType::Timestamp(None),
        KeyType::Timestamptz(_) => KeyType::Timestamptz(None),
        other => other,
    }
}

/// Whether values of type `a` compare with a column of type `b` as the column's own values
/// do: the same type, or integers of any width (PostgreSQL's cross-width integer operators
/// are exact).
pub fn compares_as(a: KeyType, b: KeyType) -> bool {
    let int = |t: KeyType| matches!(t, KeyType::Int2 | KeyType::Int4 | KeyType::Int8);
    compared_type(a) == compared_type(b) || (int(a) && int(b))
}

/// The type OID a Bind parameter declared with it compares as the column's own values: the
/// column type's, an integer's for an integer column, or a string type's for a string column.
pub fn oid_compares_as(oid: u32, column: KeyType) -> bool {
    const BOOL: u32 = 16;
    const BYTEA: u32 = 17;
    const CHAR: u32 = 18;
    const INT8: u32 = 20;
    const INT2: u32 = 21;
    const INT4: u32 = 23;
    const TEXT: u32 = 25;
    const FLOAT4: u32 = 700;
    const FLOAT8: u32 = 701;
    const BPCHAR: u32 = 1042;
    const VARCHAR: u32 = 1043;
    const DATE: u32 = 1082;
    const TIMESTAMP: u32 = 1114;
    const TIMESTAMPTZ: u32 = 1184;
    const NUMERIC: u32 = 1700;
    const UUID: u32 = 2950;
    match column {
        KeyType::Int2 | KeyType::Int4 | KeyType::Int8 => matches!(oid, INT2 | INT4 | INT8),
        KeyType::Numeric(_) => oid == NUMERIC,
        KeyType::Text | KeyType::Varchar(_) => matches!(oid, TEXT | VARCHAR),
        KeyType::Bpchar(_) => oid == BPCHAR,
        KeyType::Bytea => oid == BYTEA,
        KeyType::Bool => oid == BOOL,
        KeyType::Char => oid == CHAR,
        KeyType::Date => oid == DATE,
        KeyType::Timestamp(_) => oid == TIMESTAMP,
        KeyType::Timestamptz(_) => oid == TIMESTAMPTZ,
        KeyType::Uuid => oid == UUID,
        KeyType::Float4 => oid == FLOAT4,
        KeyType::Float8 => oid == FLOAT8,
    }
}

/// The shards that can hold rows of `table` matching `key` (one entry per root sharding-key
/// column) and `set_key` (per partition-set column), ascending. Empty: no partition can hold
/// such a row (`k IS NULL` on a range table, a value no list partition takes).
pub fn shards_matching(
    snapshot: &Snapshot,
    table: &Table,
    key: &[ColumnConstraint<'_>],
    set_key: &[ColumnConstraint<'_>],
) -> Vec<ShardId> {
    let root = snapshot.root_of(table.id).unwrap_or(table);
    let every = || snapshot.shards_of(table.id);
    let mut out = match (root.kind, root.method) {
        (TableKind::Sharded, Some(ShardingMethod::ConsistentHash | ShardingMethod::Reference)) => {
            chunk_shards(&root.key_columns, key, &root.chunks).unwrap_or_else(every)
        }
        (TableKind::Sharded, Some(ShardingMethod::List | ShardingMethod::Range)) => {
            let bounds: Vec<&PartitionBound> = root.partitions.iter().map(|p| &p.bound).collect();
            match may_hold(&root.key_columns, key, &bounds) {
                Some(hold) => root
                    .partitions
                    .iter()
                    .zip(hold)
                    .filter(|(_, h)| *h)
                    .map(|(p, _)| p.shard)
                    .collect(),
                None => every(),
            }
        }
        (
            TableKind::Sharded,
            Some(ShardingMethod::CompositeList | ShardingMethod::CompositeRange),
        ) => {
            let bounds: Vec<&PartitionBound> =
                root.partition_sets.iter().map(|s| &s.bound).collect();
            match may_hold(&root.partition_set_columns, set_key, &bounds) {
                Some(hold) => root
                    .partition_sets
                    .iter()
                    .zip(hold)
                    .filter(|(_, h)| *h)
                    .flat_map(|(set, _)| {
                        chunk_shards(&root.key_columns, key, &set.chunks)
                            .unwrap_or_else(|| set.chunks.to_vec())
                    })
                    .collect(),
                None => every(),
            }
        }
        (TableKind::Sharded, None) | (TableKind::Duplicated | TableKind::Unsharded, _) => every(),
    };
    out.sort();
    out.dedup();
    out
}

/// The shards of the chunks the key's equalities hash to; `None` when some key column has
/// none, or a value cannot be hashed here.
fn chunk_shards(
    columns: &[KeyColumn],
    key: &[ColumnConstraint<'_>],
    chunks: &[ShardId],
) -> Option<Vec<ShardId>> {
    const MAX_TUPLES: usize = 10_000;
    if key.len() != columns.len() {
        return None;
    }
    let mut tuples: Vec<Vec<KeyValue<'_>>> = vec![Vec::new()];
    for c in key {
        let values = c.equal.as_ref()?;
        if tuples.len() * values.len() > MAX_TUPLES {
            return None;
        }
        tuples = tuples
            .iter()
            .flat_map(|t| {
                values.iter().map(move |v| {
                    let mut t = t.clone();
                    t.push(*v);
                    t
                })
            })
            .collect();
    }
    tuples
        .iter()
        .map(|t| chunk_shard(columns, t, chunks).ok())
        .collect()
}

/// A column's constraint with its values read as the column's type compares them.
struct Domain {
    /// `None`: any value; an element `None` is NULL.
    equal: Option<Vec<Option<Comparable>>>,
    lower: Vec<(Comparable, bool)>,
    upper: Vec<(Comparable, bool)>,
}

impl Domain {
    /// Values that cannot be read drop their condition (PostgreSQL then judges the rows);
    /// an equality list with one such value drops the whole list.
    fn new(ty: KeyType, c: &ColumnConstraint<'_>) -> Domain {
        let ty = compared_type(ty);
        let read = |v: &KeyValue<'_>| hash::comparable(ty, v).ok();
        let ends = |ends: &[(KeyValue<'_>, bool)]| {
            ends.iter()
                .filter_map(|(v, inclusive)| Some((read(v)??, *inclusive)))
                .collect()
        };
        Domain {
            equal: c
                .equal
                .as_ref()
                .and_then(|vs| vs.iter().map(read).collect::<Option<Vec<_>>>()),
            lower: ends(&c.lower),
            upper: ends(&c.upper),
        }
    }

    fn is_free(&self) -> bool {
        self.equal.is_none() && self.lower.is_empty() && self.upper.is_empty()
    }

    /// Whether the column can hold `v` (`None`: NULL, which satisfies no order comparison).
    fn admits(&self, v: Option<&Comparable>) -> bool {
        if let Some(equal) = &self.equal {
            if !equal.iter().any(|e| same(e.as_ref(), v)) {
                return false;
            }
        }
        let Some(v) = v else {
            return self.lower.is_empty() && self.upper.is_empty();
        };
        let lower_ok = self.lower.iter().all(|(b, inclusive)| {
            !matches!(v.order(b), Some(Ordering::Less))
                && (*inclusive || v.order(b) != Some(Ordering::Equal))
        });
        let upper_ok = self.upper.iter().all(|(b, inclusive)| {
            !matches!(v.order(b), Some(Ordering::Greater))
                && (*inclusive || v.order(b) != Some(Ordering::Equal))
        });
        lower_ok && upper_ok
    }

    /// Whether the column can hold a value strictly between `low` and `high` (`None`: no
    /// bound). Orders the proxy cannot tell count as "can".
    fn meets_between(&self, low: Option<&Comparable>, high: Option<&Comparable>) -> bool {
        let within = |v: &Comparable| {
            low.is_none_or(|l| {
                v.order(l) != Some(Ordering::Less) && v.order(l) != Some(Ordering::Equal)
            }) && high.is_none_or(|h| {
                v.order(h) != Some(Ordering::Greater) && v.order(h) != Some(Ordering::Equal)
            })
        };
        if let Some(equal) = &self.equal {
            return equal
                .iter()
                .flatten()
                .any(|e| within(e) && self.admits(Some(e)));
        }
        // Integers (and dates and timestamps, counted in days and microseconds) are discrete:
        // `> 99` is `>= 100`, so `> 99 AND < 100` holds for none.
        let inclusive = |(v, inclusive): (&Comparable, bool), step: i64| match v {
            Comparable::Int(n) if !inclusive => (Comparable::Int(n.saturating_add(step)), true),
            other => (other.clone(), inclusive),
        };
        let lows: Vec<(Comparable, bool)> = self
            .lower
            .iter()
            .map(|(v, i)| (v, *i))
            .chain(low.map(|l| (l, false)))
            .map(|b| inclusive(b, 1))
            .collect();
        let highs: Vec<(Comparable, bool)> = self
            .upper
            .iter()
            .map(|(v, i)| (v, *i))
            .chain(high.map(|h| (h, false)))
            .map(|b| inclusive(b, -1))
            .collect();
        // An interval of a total order is empty exactly when some lower bound lies above
        // some upper bound.
        lows.iter().all(|(l, li)| {
            highs.iter().all(|(h, hi)| match l.order(h) {
                Some(Ordering::Greater) => false,
                Some(Ordering::Equal) => *li && *hi,
                Some(Ordering::Less) | None => true,
            })
        })
    }
}

/// Whether two values are equal as PostgreSQL's `=` says. Floats compare by value (PostgreSQL's NaN equals NaN,
/// and -0 equals 0); strings by their bytes, as the list bounds of deterministic collations.
fn same(a: Option<&Comparable>, b: Option<&Comparable>) -> bool {
    match (a, b) {
        (Some(Comparable::Float(x)), Some(Comparable::Float(y))) => {
            x == y || (x.is_nan() && y.is_nan())
        }
        (a, b) => a == b,
    }
}

/// One value of a range bound as compared.
enum Edge {
    Max,
    Value(Comparable),
    /// A bound value the proxy cannot read.
    Unknown,
}

/// Per partition (or partition set), whether it can hold a matching row; `None` when the
/// partitioning columns' types cannot be read.
fn may_hold(
    columns: &[KeyColumn],
    constraints: &[ColumnConstraint<'_>],
    bounds: &[&PartitionBound],
) -> Option<Vec<bool>> {
    let types: Vec<KeyType> = columns
        .iter()
        .map(|c| c.key_type().ok())
        .collect::<Option<_>>()?;
    if constraints.len() != types.len() {
        return None;
    }
    let domains: Vec<Domain> = types
        .iter()
        .zip(constraints)
        .map(|(ty, c)| Domain::new(*ty, c))
        .collect();
    if domains.iter().all(Domain::is_free) {
        return Some(vec![true; bounds.len()]);
    }
    let edge = |ty: KeyType, b: &BoundValue| match b {
        BoundValue::MaxValue => Edge::Max,
        BoundValue::Literal(s) => match hash::comparable(ty, &KeyValue::Text(s)) {
            Ok(Some(v)) => Edge::Value(v),
            _ => Edge::Unknown,
        },
        BoundValue::Null | BoundValue::Default => Edge::Unknown,
    };
    let list_value = |ty: KeyType, b: &BoundValue| -> Result<Option<Comparable>, ()> {
        match b {
            BoundValue::Null => Ok(None),
            BoundValue::Literal(s) => match hash::comparable(ty, &KeyValue::Text(s)) {
                Ok(Some(v)) => Ok(Some(v)),
                _ => Err(()),
            },
            BoundValue::Default | BoundValue::MaxValue => Err(()),
        }
    };
    let mut out = Vec::with_capacity(bounds.len());
    let mut lower: Option<Vec<Edge>> = None;
    // Every value some non-default list partition takes, to judge the DEFAULT partition by.
    let mut listed: Vec<Vec<Option<Comparable>>> = Vec::new();
    let mut default_at = None;
    for (i, bound) in bounds.iter().enumerate() {
        match bound {
            PartitionBound::In(tuples) => {
                let mut hold = false;
                for tuple in tuples {
                    if tuple.contains(&BoundValue::Default) {
                        default_at = Some(i);
                        continue;
                    }
                    let values: Result<Vec<Option<Comparable>>, ()> = types
                        .iter()
                        .zip(tuple)
                        .map(|(ty, b)| list_value(*ty, b))
                        .collect();
                    match values {
                        Ok(values) => {
                            hold |= domains
                                .iter()
                                .zip(&values)
                                .all(|(d, v)| d.admits(v.as_ref()));
                            listed.push(values);
                        }
                        Err(()) => hold = true,
                    }
                }
                out.push(hold);
            }
            PartitionBound::LessThan(upper) => {
                let upper: Vec<Edge> = types
                    .iter()
                    .zip(upper)
                    .map(|(ty, b)| edge(*ty, b))
                    .collect();
                out.push(in_range(&domains, lower.as_deref(), Some(&upper)));
                lower = Some(upper);
            }
        }
    }
    if let Some(d) = default_at {
        // The DEFAULT partition takes every value no other partition lists (NULL included,
        // when none lists NULL). It can hold a match unless the equalities name only listed
        // values.
        out[d] = match domains.as_slice() {
            [one] => match &one.equal {
                Some(values) => values.iter().any(|v| {
                    one.admits(v.as_ref())
                        && !listed.iter().any(|t| same(t[0].as_ref(), v.as_ref()))
                }),
                None => true,
            },
            _ => true,
        };
    }
    Some(out)
}

/// Whether a tuple with each column in its domain can lie in [`lower`, `upper`) in
/// PostgreSQL's lexicographic order of range bounds (`None`: unbounded). `lower` and `upper`
/// are the bound values from column `i` on, given that the tuple equals them before `i`.
fn in_range(domains: &[Domain], lower: Option<&[Edge]>, upper: Option<&[Edge]>) -> bool {
    let Some((d, rest)) = domains.split_first() else {
        // Equal to the exclusive upper bound on every column: outside; equal to the
        // inclusive lower bound: inside.
        return upper.is_none();
    };
    fn split(b: Option<&[Edge]>) -> Option<(&Edge, &[Edge])> {
        b.and_then(|b| b.split_first())
    }
    let (lo, lo_rest) = match split(lower) {
        Some((e, r)) => (Some(e), Some(r)),
        None => (None, None),
    };
    let (hi, hi_rest) = match split(upper) {
        Some((e, r)) => (Some(e), Some(r)),
        None => (None, None),
    };
    let lo = match lo {
        None => None,
        // Nothing lies at or above MAXVALUE.
        Some(Edge::Max) => return false,
        Some(Edge::Unknown) => return true,
        Some(Edge::Value(v)) => Some(v),
    };
    let hi = match hi {
        // Everything lies below MAXVALUE, whatever the later columns.
        None | Some(Edge::Max) => None,
        Some(Edge::Unknown) => return true,
        Some(Edge::Value(v)) => Some(v),
    };
    let hi_rest = if hi.is_some() { hi_rest } else { None };
    // Strictly between the two bounds on this column: the later columns are free.
    if d.meets_between(lo, hi) {
        return true;
    }
    // On the lower bound's value: the later columns decide, against the upper bound too if
    // it has the same value here.
    if let Some(l) = lo {
        if d.admits(Some(l)) && hi.is_none_or(|h| l.order(h) != Some(Ordering::Greater)) {
            let still_upper = hi.is_some_and(|h| l.order(h) == Some(Ordering::Equal));
            if in_range(rest, lo_rest, if still_upper { hi_rest } else { None }) {
                return true;
            }
        }
    }
    // On the upper bound's value (above the lower bound's).
    if let Some(h) = hi {
        if d.admits(Some(h))
            && lo.is_none_or(|l| l.order(h) != Some(Ordering::Greater))
            && in_range(rest, None, hi_rest)
        {
            return true;
        }
    }
    false
}

impl ClientError for PlaceError {
    fn sqlstate(&self) -> SqlState {
        match self {
            PlaceError::Hash(h) => h.sqlstate(),
            PlaceError::NoPartition { .. } => SqlState::CHECK_VIOLATION,
            PlaceError::Undecidable { .. } => SqlState::FEATURE_NOT_SUPPORTED,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}
