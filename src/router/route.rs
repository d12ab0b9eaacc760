//! Where a statement goes, decided before anything is sent: its plan combined with the values
//! of its Bind parameters.

use super::hash::KeyType;
use super::hash::{HashError, KeyValue};
use super::place::ColumnConstraint;
use super::place::{self, PlaceError};
use super::plan::{Constraint, KeyTuple, Keys, Operand, ShardedPlan, Value};
use crate::catalog::Snapshot;
use crate::model::ShardId;
use smallvec::SmallVec;
use tokio_postgres::error::SqlState;

use crate::client_error::ClientError;

mod limits;
mod params;
pub use limits::bound_merge;
pub use params::{
    select_param_types, select_params, with_extra_param, with_extra_param_type,
    with_hidden_result_columns, BindParts, Params,
};
use params::{Owned, INT2, INT4, INT8};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Exactly one shard holds everything the statement touches.
    Single(ShardId),
    /// These shards (ascending), gathered and merged.
    Multi(Vec<ShardId>),
    /// Every shard.
    All,
}

impl Route {
    /// The shards the route names, every shard of `snapshot` for [`Route::All`].
    pub fn into_shards(self, snapshot: &Snapshot) -> Vec<ShardId> {
        match self {
            Route::Single(s) => vec![s],
            Route::Multi(shards) => shards,
            Route::All => snapshot.shards().iter().map(|s| s.id).collect(),
        }
    }
}

/// Until sharded tables exist every statement goes to the first shard, where unsharded tables
/// live by design.
pub fn route_unsharded() -> Route {
    Route::Single(ShardId(0))
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("{0}")]
    Place(#[from] PlaceError),
    #[error("bind message supplies no value for parameter ${0}")]
    MissingParameter(usize),
    #[error("parameter ${0} is not valid UTF-8 text")]
    BadParameter(usize),
    #[error("LIMIT must not be negative")]
    NegativeLimit,
    #[error("OFFSET must not be negative")]
    NegativeOffset,
    /// A LIMIT or OFFSET parameter PostgreSQL would not read as its type.
    #[error("invalid input syntax for type {ty}: \"{value}\"")]
    BoundSyntax { ty: &'static str, value: String },
    #[error("incorrect binary data format in bind parameter {0}")]
    BoundBinary(usize),
    #[error("bigint out of range")]
    BoundRange,
}

impl RouteError {
    /// The hash error behind the failure, for its SQLSTATE.
    pub fn hash_error(&self) -> Option<&HashError> {
        match self {
            RouteError::Place(PlaceError::Hash(h)) => Some(h),
            _ => None,
        }
    }
}

/// Where a sharded statement goes; for an INSERT also the shard of each VALUES row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Routed {
    pub route: Route,
    /// INSERT: the shard of each VALUES row, in order.
    pub rows: Vec<ShardId>,
}

/// A key's values: one or two columns nearly always, read without an allocation.
type KeyValues<'p> = SmallVec<[Owned<'p>; 2]>;

fn resolve<'p, 'a: 'p>(
    ops: &'p [Operand],
    params: &'p Params<'a>,
) -> Result<KeyValues<'p>, RouteError> {
    ops.iter().map(|op| resolve_one(op, params)).collect()
}

fn resolve_one<'p, 'a: 'p>(
    op: &'p Operand,
    params: &'p Params<'a>,
) -> Result<Owned<'p>, RouteError> {
    match op {
        Operand::Const(None) | Operand::Located(None, _) => Ok(Owned::Null),
        Operand::Const(Some(s)) | Operand::Located(Some(s), _) => Ok(Owned::Literal(s)),
        Operand::Literal { index, negated } => params.literal(*index, *negated),
        Operand::Generated(row) => params
            .generated
            .get(*row)
            .map(|v| Owned::Text(v))
            .ok_or(RouteError::MissingParameter(0)),
        Operand::Param(i) => params.value(*i),
    }
}

fn tuple_shard(
    snapshot: &Snapshot,
    plan: &ShardedPlan,
    tuple: &KeyTuple,
    params: &Params<'_>,
) -> Result<ShardId, RouteError> {
    let Some(table) = snapshot.table(plan.table) else {
        return Ok(plan.shards.first().copied().unwrap_or(ShardId(0)));
    };
    // One key column and no partition-set key, as most tables have: no list to build.
    if let ([op], []) = (tuple.key.as_slice(), tuple.set_key.as_slice()) {
        let value = resolve_one(op, params)?;
        return Ok(place::shard_for(snapshot, table, &[value.as_key()], &[])?);
    }
    let key = resolve(&tuple.key, params)?;
    let set_key = resolve(&tuple.set_key, params)?;
    let key: SmallVec<[KeyValue<'_>; 2]> = key.iter().map(Owned::as_key).collect();
    let set_key: SmallVec<[KeyValue<'_>; 2]> = set_key.iter().map(Owned::as_key).collect();
    Ok(place::shard_for(snapshot, table, &key, &set_key)?)
}

/// The shard of one key tuple of a plan's family (a sharding-key UPDATE's new key).
pub fn key_shard(
    snapshot: &Snapshot,
    plan: &ShardedPlan,
    tuple: &KeyTuple,
    params: &Params<'_>,
) -> Result<ShardId, RouteError> {
    tuple_shard(snapshot, plan, tuple, params)
}

/// Routes a sharded statement. A condition whose value the proxy cannot place (a value of
/// another type than the key's, say) narrows nothing: the statement goes to every shard of the
/// family, where PostgreSQL compares as it always does. An INSERT row that cannot be placed is
/// an error.
pub fn route(
    snapshot: &Snapshot,
    plan: &ShardedPlan,
    params: &Params<'_>,
) -> Result<Routed, RouteError> {
    let all = || Route::Multi(plan.shards.clone());
    match &plan.keys {
        Keys::Any => Ok(Routed {
            route: single_or_multi(plan.shards.clone()),
            rows: Vec::new(),
        }),
        // One key value, as in `WHERE id = $1`: the common case, with no list to build.
        Keys::OneOf(tuples) if tuples.len() == 1 => {
            let route = match tuple_shard(snapshot, plan, &tuples[0], params) {
                Ok(s) => Route::Single(s),
                // No partition takes the value (a NULL range key, a value no list partition
                // lists): no row has it, and any one shard of the table says so.
                Err(RouteError::Place(PlaceError::NoPartition { .. })) => {
                    Route::Single(plan.shards.first().copied().unwrap_or(ShardId(0)))
                }
                Err(RouteError::Place(_)) => all(),
                Err(e) => return Err(e),
            };
            Ok(Routed {
                route,
                rows: Vec::new(),
            })
        }
        Keys::OneOf(tuples) => {
            let mut shards = Vec::with_capacity(tuples.len());
            for t in tuples {
                match tuple_shard(snapshot, plan, t, params) {
                    Ok(s) => shards.push(s),
                    // No partition takes the value (a NULL range key, a value no list
                    // partition lists): no row has it.
                    Err(RouteError::Place(PlaceError::NoPartition { .. })) => {}
                    Err(RouteError::Place(_)) => {
                        return Ok(Routed {
                            route: all(),
                            rows: Vec::new(),
                        })
                    }
                    Err(e) => return Err(e),
                }
            }
            shards.sort();
            shards.dedup();
            if shards.is_empty() {
                shards.extend(plan.shards.first().copied().or(Some(ShardId(0))));
            }
            Ok(Routed {
                route: single_or_multi(shards),
                rows: Vec::new(),
            })
        }
        Keys::Constrained(slots) => {
            let Some(table) = snapshot.table(plan.table) else {
                return Ok(Routed {
                    route: all(),
                    rows: Vec::new(),
                });
            };
            let root = snapshot.root_of(table.id).unwrap_or(table);
            let types: Vec<Option<KeyType>> =
                root.sharding_columns().map(|c| c.key_type().ok()).collect();
            let resolved = slots
                .iter()
                .zip(&types)
                .map(|(c, ty)| resolve_constraint(c, *ty, params))
                .collect::<Result<Vec<_>, _>>()?;
            let constraints: Vec<ColumnConstraint<'_>> =
                resolved.iter().map(Resolved::as_constraint).collect();
            let root_key = root.key_columns.len().min(constraints.len());
            let mut shards = place::shards_matching(
                snapshot,
                table,
                &constraints[..root_key],
                &constraints[root_key..],
            );
            if shards.is_empty() {
                // No partition can hold a matching row: any one shard of the table answers
                // (no rows, the right columns).
                shards.extend(plan.shards.first().copied().or(Some(ShardId(0))));
            }
            Ok(Routed {
                route: single_or_multi(shards),
                rows: Vec::new(),
            })
        }
        Keys::Rows(rows) => {
            let per_row = rows
                .iter()
                .map(|t| tuple_shard(snapshot, plan, t, params))
                .collect::<Result<Vec<_>, _>>()?;
            let mut shards = per_row.clone();
            shards.sort();
            shards.dedup();
            Ok(Routed {
                route: single_or_multi(shards),
                rows: per_row,
            })
        }
    }
}

fn single_or_multi(shards: Vec<ShardId>) -> Route {
    match shards.as_slice() {
        [one] => Route::Single(*one),
        _ => Route::Multi(shards),
    }
}

/// A column's conditions with parameters and arrays resolved to values.
struct Resolved<'a> {
    equal: Option<Vec<Owned<'a>>>,
    lower: Vec<(Owned<'a>, bool)>,
    upper: Vec<(Owned<'a>, bool)>,
}

fn key_ends<'b>(v: &'b [(Owned<'_>, bool)]) -> Vec<(KeyValue<'b>, bool)> {
    v.iter().map(|(o, i)| (o.as_key(), *i)).collect()
}

impl Resolved<'_> {
    fn as_constraint(&self) -> ColumnConstraint<'_> {
        let ends = key_ends;
        ColumnConstraint {
            equal: self
                .equal
                .as_ref()
                .map(|vs| vs.iter().map(Owned::as_key).collect()),
            lower: ends(&self.lower),
            upper: ends(&self.upper),
        }
    }
}

fn resolve_constraint<'p, 'a: 'p>(
    c: &'p Constraint,
    ty: Option<KeyType>,
    params: &'p Params<'a>,
) -> Result<Resolved<'p>, RouteError> {
    // Through `resolve`, so every kind of operand reads as it does for whole keys.
    let one = |op: &'p Operand| -> Result<Owned<'p>, RouteError> {
        Ok(resolve(std::slice::from_ref(op), params)?
            .pop()
            .unwrap_or(Owned::Null))
    };
    let mut equal = Some(Vec::new());
    for v in c.equal.iter().flatten() {
        match v {
            Value::One(op) => {
                let v = one(op)?;
                if let Some(e) = equal.as_mut() {
                    e.push(v);
                }
            }
            Value::Elements(op) => {
                let elements = array_elements(one(op)?, ty);
                match (elements, equal.as_mut()) {
                    (Some(els), Some(e)) => e.extend(els),
                    // An array the router cannot read: PostgreSQL reads it (or says why not).
                    (None, _) => equal = None,
                    (Some(_), None) => {}
                }
            }
        }
    }
    if c.equal.is_none() {
        equal = None;
    }
    // A parameter declared with another type than the column's compares as that type; an
    // order comparison then says nothing the router can use.
    let ends = |ends: &'p [super::plan::RangeEnd]| -> Result<Vec<(Owned<'p>, bool)>, RouteError> {
        let mut out = Vec::with_capacity(ends.len());
        for e in ends {
            if let Operand::Param(i) = e.value {
                let declared = params.declared_type(i);
                if declared != 0 && !ty.is_some_and(|t| place::oid_compares_as(declared, t)) {
                    continue;
                }
            }
            out.push((one(&e.value)?, e.inclusive));
        }
        Ok(out)
    };
    Ok(Resolved {
        equal,
        lower: ends(&c.lower)?,
        upper: ends(&c.upper)?,
    })
}

/// The elements of an array value (a literal, or a parameter in text or binary format) as
/// key values of a column of type `column`; `None` when the router cannot read them
/// (PostgreSQL then compares every row).
fn array_elements(array: Owned<'_>, column: Option<KeyType>) -> Option<Vec<Owned<'_>>> {
    let text = |s: &str| -> Option<Vec<Owned<'static>>> {
        array::parse_text(s).map(|e| {
            e.into_iter()
                .map(|v| v.map_or(Owned::Null, Owned::Formatted))
                .collect()
        })
    };
    let bytes = match array {
        // `= ANY(NULL)` holds for no row.
        Owned::Null => return Some(Vec::new()),
        Owned::Text(s) | Owned::Literal(s) => return text(s),
        Owned::Formatted(s) => return text(&s),
        Owned::Binary(b) => b,
    };
    let (element_type, elements) = array::parse_binary(bytes)?;
    let column = column?;
    let numeric_column = matches!(
        column,
        KeyType::Int2 | KeyType::Int4 | KeyType::Int8 | KeyType::Numeric(_)
    );
    let mut out = Vec::with_capacity(elements.len());
    for e in elements {
        let Some(e) = e else {
            out.push(Owned::Null);
            continue;
        };
        let int = match (element_type, e.len()) {
            (INT2, 2) => Some(i64::from(i16::from_be_bytes([e[0], e[1]]))),
            (INT4, 4) => Some(i64::from(i32::from_be_bytes([e[0], e[1], e[2], e[3]]))),
            (INT8, 8) => e.try_into().ok().map(i64::from_be_bytes),
            _ => None,
        };
        match int {
            Some(n) if numeric_column => out.push(Owned::Formatted(n.to_string())),
            _ if place::oid_compares_as(element_type, column)
                && !matches!(element_type, INT2 | INT4 | INT8) =>
            {
                out.push(Owned::Binary(e))
            }
            _ => return None,
        }
    }
    Some(out)
}

/// PostgreSQL's array formats, as far as `= ANY(array)` routing reads them.
mod array {
    /// `array_in`'s text format: `{1,2,3}`, nested braces (every element counts), optional
    /// `[1:3]=` dimensions, double-quoted elements with backslash escapes, unquoted `NULL`.
    /// `None` for anything PostgreSQL would not read as an array.
    pub(super) fn parse_text(s: &str) -> Option<Vec<Option<String>>> {
        let mut s = s.trim_start_matches(is_space);
        if s.starts_with('[') {
            s = s[s.find('=')? + 1..].trim_start_matches(is_space);
        }
        let mut chars = s.chars().peekable();
        if chars.next()? != '{' {
            return None;
        }
        let mut depth = 1usize;
        let mut out = Vec::new();
        // After an element or a closing brace, before the next delimiter.
        let mut after_item = false;
        while depth > 0 {
            let c = chars.next()?;
            match c {
                c if is_space(c) => {}
                '{' if !after_item => depth += 1,
                '}' => {
                    depth -= 1;
                    after_item = true;
                }
                ',' if after_item => after_item = false,
                _ if after_item => return None,
                '"' => {
                    let mut e = String::new();
                    loop {
                        match chars.next()? {
                            '"' => break,
                            '\\' => e.push(chars.next()?),
                            c => e.push(c),
                        }
                    }
                    out.push(Some(e));
                    after_item = true;
                }
                first => {
                    let mut e = String::new();
                    let mut escaped = false;
                    let mut c = first;
                    // Trailing spaces of an unquoted element are not part of it; escaped
                    // characters always are.
                    let mut keep = 0;
                    loop {
                        match c {
                            '\\' => {
                                e.push(chars.next()?);
                                escaped = true;
                                keep = e.len();
                            }
                            '"' | '{' => return None,
                            c => {
                                e.push(c);
                                if !is_space(c) {
                                    keep = e.len();
                                }
                            }
                        }
                        match chars.peek() {
                            Some(',' | '}') | None => break,
                            Some(_) => c = chars.next()?,
                        }
                    }
                    e.truncate(keep);
                    out.push(if !escaped && e.eq_ignore_ascii_case("null") {
                        None
                    } else {
                        Some(e)
                    });
                    after_item = true;
                }
            }
        }
        chars.all(is_space).then_some(out)
    }

    /// `array_recv`'s binary format: dimensions, flags, element type, per dimension its
    /// length and lower bound, then each element as a length (-1: NULL) and its bytes.
    pub(super) fn parse_binary(b: &[u8]) -> Option<(u32, Vec<Option<&[u8]>>)> {
        let int = |at: usize| -> Option<i32> {
            Some(i32::from_be_bytes(b.get(at..at + 4)?.try_into().ok()?))
        };
        let ndim = usize::try_from(int(0)?).ok()?;
        let element_type = int(8)? as u32;
        if ndim > 6 {
            return None;
        }
        let mut count = usize::from(ndim > 0);
        for d in 0..ndim {
            count = count.checked_mul(usize::try_from(int(12 + 8 * d)?).ok()?)?;
        }
        let mut at = 12 + 8 * ndim;
        let mut out = Vec::with_capacity(count.min(b.len() / 4));
        for _ in 0..count {
            let len = int(at)?;
            at += 4;
            if len < 0 {
                out.push(None);
            } else {
                let len = len as usize;
                out.push(Some(b.get(at..at + len)?));
                at += len;
            }
        }
        (at == b.len()).then_some((element_type, out))
    }

    fn is_space(c: char) -> bool {
        matches!(c, ' ' | '\t' | '\n' | '\r' | '\x0b' | '\x0c')
    }
}

#[cfg(test)]
#[path = "prune_tests.rs"]
mod prune_tests;

impl ClientError for RouteError {
    fn sqlstate(&self) -> SqlState {
        use RouteError as R;
        match self {
            R::Place(e) => e.sqlstate(),
            R::MissingParameter(_) => SqlState::PROTOCOL_VIOLATION,
            R::BadParameter(_) => SqlState::CHARACTER_NOT_IN_REPERTOIRE,
            R::NegativeLimit => SqlState::INVALID_ROW_COUNT_IN_LIMIT_CLAUSE,
            R::NegativeOffset => SqlState::INVALID_ROW_COUNT_IN_RESULT_OFFSET_CLAUSE,
            R::BoundSyntax { .. } => SqlState::INVALID_TEXT_REPRESENTATION,
            R::BoundBinary(_) => SqlState::INVALID_BINARY_REPRESENTATION,
            R::BoundRange => SqlState::NUMERIC_VALUE_OUT_OF_RANGE,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}
