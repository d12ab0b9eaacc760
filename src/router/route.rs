//! Where a statement goes, decided before anything is sent: its plan combined with the values
//! of its Bind parameters.

use super::hash::{HashError, KeyValue};
use super::place::{self, PlaceError};
use super::plan::{KeyTuple, Keys, Operand, ShardedPlan};
use crate::catalog::{ShardId, Snapshot};
use crate::protocol::{take_i16, take_i32, FrameError};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Route {
    /// Exactly one shard holds everything the statement touches.
    Single(ShardId),
    /// These shards (ascending), gathered and merged.
    Multi(Vec<ShardId>),
    /// Every shard.
    All,
}

/// Until sharded tables exist every statement goes to the first shard, where unsharded tables
/// live by design.
pub fn route_unsharded() -> Route {
    Route::Single(ShardId(0))
}

/// The parameters of a Bind message, as far as routing reads them.
#[derive(Debug, Default, Clone)]
pub struct Params<'a> {
    /// Format code per parameter (0 text, 1 binary), expanded from Bind's short forms.
    formats: Vec<i16>,
    values: Vec<Option<&'a [u8]>>,
    /// Declared parameter type OIDs from Parse (0: unspecified).
    types: Vec<u32>,
    /// The literals of a simple query routed with a shared plan ([`Operand::Literal`]).
    literals: Vec<std::borrow::Cow<'a, str>>,
    /// Generated key values, one per VALUES row ([`Operand::Generated`]).
    generated: Vec<String>,
}

const INT2: u32 = 21;
const INT4: u32 = 23;
const INT8: u32 = 20;

impl<'a> Params<'a> {
    /// How many parameter values the Bind carries.
    pub fn count(&self) -> usize {
        self.values.len()
    }

    /// Reads Bind's parameter part (`rest`: formats, values, result formats) and Parse's
    /// declared types (`types`: count and OIDs, as sent).
    pub fn parse(rest: &'a [u8], types: &[u8]) -> Result<Params<'a>, FrameError> {
        let mut b = rest;
        let nformats = take_i16(&mut b, "Bind")?.max(0) as usize;
        let mut formats = Vec::with_capacity(nformats);
        for _ in 0..nformats {
            formats.push(take_i16(&mut b, "Bind")?);
        }
        let nvalues = take_i16(&mut b, "Bind")?.max(0) as usize;
        let mut values = Vec::with_capacity(nvalues);
        for _ in 0..nvalues {
            let len = take_i32(&mut b, "Bind")?;
            if len < 0 {
                values.push(None);
            } else {
                let len = len as usize;
                if b.len() < len {
                    return Err(FrameError::Malformed("Bind"));
                }
                values.push(Some(&b[..len]));
                b = &b[len..];
            }
        }
        let formats = match formats.as_slice() {
            [] => vec![0; nvalues],
            [one] => vec![*one; nvalues],
            _ => formats,
        };
        let mut t = types;
        let ntypes = take_i16(&mut t, "Parse").unwrap_or(0).max(0) as usize;
        let mut oids = Vec::with_capacity(ntypes);
        for _ in 0..ntypes {
            oids.push(take_i32(&mut t, "Parse").unwrap_or(0) as u32);
        }
        Ok(Params {
            formats,
            values,
            types: oids,
            literals: Vec::new(),
            generated: Vec::new(),
        })
    }

    /// The literals of a simple query, for plans shared between texts.
    pub fn literals(literals: Vec<std::borrow::Cow<'a, str>>) -> Params<'a> {
        Params {
            literals,
            ..Params::default()
        }
    }

    /// The generated key values of an INSERT's rows, for routing them.
    pub fn with_generated(mut self, values: &[i64]) -> Params<'a> {
        self.generated = values.iter().map(i64::to_string).collect();
        self
    }

    fn literal(&self, index: usize, negated: bool) -> Result<Owned<'_>, RouteError> {
        let v = self
            .literals
            .get(index)
            .ok_or(RouteError::MissingParameter(index + 1))?;
        Ok(if negated {
            Owned::Formatted(format!("-{v}"))
        } else {
            Owned::Text(v)
        })
    }

    /// Parameter `i` as key input. Binary integers declared narrower or wider than the key
    /// column are read by their declared type, as PostgreSQL's implicit cast would.
    fn value(&self, i: usize) -> Result<Owned<'a>, RouteError> {
        let Some(v) = self.values.get(i) else {
            return Err(RouteError::MissingParameter(i + 1));
        };
        let Some(bytes) = v else {
            return Ok(Owned::Null);
        };
        if self.formats.get(i).copied().unwrap_or(0) == 0 {
            return std::str::from_utf8(bytes)
                .map(Owned::Text)
                .map_err(|_| RouteError::BadParameter(i + 1));
        }
        let declared = self.types.get(i).copied().unwrap_or(0);
        let int = match (declared, bytes.len()) {
            (INT2, 2) => Some(i64::from(i16::from_be_bytes([bytes[0], bytes[1]]))),
            (INT4, 4) => Some(i64::from(i32::from_be_bytes([
                bytes[0], bytes[1], bytes[2], bytes[3],
            ]))),
            (INT8, 8) => Some(i64::from_be_bytes(
                bytes[..8]
                    .try_into()
                    .map_err(|_| RouteError::BadParameter(i + 1))?,
            )),
            _ => None,
        };
        Ok(match int {
            Some(n) => Owned::Formatted(n.to_string()),
            None => Owned::Binary(bytes),
        })
    }
}

/// Bind's parameter part with result format codes for `hidden` more result columns after
/// `visible` ones (hidden sort columns, read as text, whatever format the client asked for).
pub fn with_hidden_result_columns(rest: &[u8], visible: usize, hidden: usize) -> Vec<u8> {
    let split = || -> Option<usize> {
        let mut b = rest;
        let nformats = take_i16(&mut b, "Bind").ok()?.max(0) as usize;
        b = b.get(2 * nformats..)?;
        let nvalues = take_i16(&mut b, "Bind").ok()?.max(0) as usize;
        for _ in 0..nvalues {
            let len = take_i32(&mut b, "Bind").ok()?;
            if len > 0 {
                b = b.get(len as usize..)?;
            }
        }
        Some(rest.len() - b.len())
    };
    let (Some(at), true) = (split(), hidden > 0) else {
        return rest.to_vec();
    };
    let mut results = &rest[at..];
    let n = take_i16(&mut results, "Bind").unwrap_or(0).max(0) as usize;
    let codes: Vec<[u8; 2]> = match n {
        // No code: every column in text, the hidden ones too.
        0 => return rest.to_vec(),
        // One code for every column: spelt out, so the hidden ones can differ.
        1 => vec![[results[0], results[1]]; visible],
        _ => results
            .chunks_exact(2)
            .take(n)
            .map(|c| [c[0], c[1]])
            .collect(),
    };
    let mut out = rest[..at].to_vec();
    out.extend_from_slice(&((codes.len() + hidden) as i16).to_be_bytes());
    out.extend(codes.into_iter().flatten());
    out.extend(std::iter::repeat_n([0u8, 0u8], hidden).flatten());
    out
}

/// Bind's parameter part with one more parameter, `value` in text format, after the client's.
pub fn with_extra_param(rest: &[u8], value: &str) -> Result<Vec<u8>, FrameError> {
    let mut b = rest;
    let nformats = take_i16(&mut b, "Bind")?.max(0) as usize;
    let mut formats = Vec::with_capacity(nformats);
    for _ in 0..nformats {
        formats.push(take_i16(&mut b, "Bind")?);
    }
    let values_start = rest.len() - b.len();
    let nvalues = take_i16(&mut b, "Bind")?.max(0) as usize;
    for _ in 0..nvalues {
        let len = take_i32(&mut b, "Bind")?;
        if len > 0 {
            b = b.get(len as usize..).ok_or(FrameError::Malformed("Bind"))?;
        }
    }
    let values_end = rest.len() - b.len();
    // Formats spelt out per parameter, so the new one can be text whatever the others are.
    let formats: Vec<i16> = match formats.as_slice() {
        [] => Vec::new(),
        [one] => vec![*one; nvalues],
        many => many.to_vec(),
    };
    let mut out = Vec::with_capacity(rest.len() + value.len() + 8);
    if formats.is_empty() {
        out.extend_from_slice(&0i16.to_be_bytes());
    } else {
        out.extend_from_slice(&((formats.len() + 1) as i16).to_be_bytes());
        for f in &formats {
            out.extend_from_slice(&f.to_be_bytes());
        }
        out.extend_from_slice(&0i16.to_be_bytes());
    }
    out.extend_from_slice(&((nvalues + 1) as i16).to_be_bytes());
    out.extend_from_slice(&rest[values_start + 2..values_end]);
    out.extend_from_slice(&(value.len() as i32).to_be_bytes());
    out.extend_from_slice(value.as_bytes());
    out.extend_from_slice(&rest[values_end..]);
    Ok(out)
}

/// Parse's parameter types for `count` parameters plus one more of unspecified type (the
/// server infers it from the column).
pub fn with_extra_param_type(types: &[u8], count: usize) -> Vec<u8> {
    let mut t = types;
    let declared = take_i16(&mut t, "Parse").unwrap_or(0).max(0) as usize;
    let mut oids: Vec<u32> = (0..declared)
        .map(|_| take_i32(&mut t, "Parse").unwrap_or(0) as u32)
        .collect();
    oids.resize(count, 0);
    oids.push(0);
    let mut out = Vec::with_capacity(2 + 4 * oids.len());
    out.extend_from_slice(&(oids.len() as i16).to_be_bytes());
    for o in oids {
        out.extend_from_slice(&o.to_be_bytes());
    }
    out
}

/// A key value resolved from a literal or a parameter.
enum Owned<'a> {
    Null,
    Text(&'a str),
    Formatted(String),
    Binary(&'a [u8]),
    Literal(&'a str),
}

impl Owned<'_> {
    fn as_key(&self) -> KeyValue<'_> {
        match self {
            Owned::Null => KeyValue::Null,
            Owned::Text(s) | Owned::Literal(s) => KeyValue::Text(s),
            Owned::Formatted(s) => KeyValue::Text(s),
            Owned::Binary(b) => KeyValue::Binary(b),
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum RouteError {
    #[error("{0}")]
    Place(#[from] PlaceError),
    #[error("bind message supplies no value for parameter ${0}")]
    MissingParameter(usize),
    #[error("parameter ${0} is not valid UTF-8 text")]
    BadParameter(usize),
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

fn resolve<'p>(ops: &'p [Operand], params: &'p Params<'p>) -> Result<Vec<Owned<'p>>, RouteError> {
    ops.iter()
        .map(|op| match op {
            Operand::Const(None) | Operand::Located(None, _) => Ok(Owned::Null),
            Operand::Const(Some(s)) | Operand::Located(Some(s), _) => Ok(Owned::Literal(s)),
            Operand::Literal { index, negated } => params.literal(*index, *negated),
            Operand::Generated(row) => params
                .generated
                .get(*row)
                .map(|v| Owned::Text(v))
                .ok_or(RouteError::MissingParameter(0)),
            Operand::Param(i) => params.value(*i),
        })
        .collect()
}

fn tuple_shard(
    snapshot: &Snapshot,
    plan: &ShardedPlan,
    tuple: &KeyTuple,
    params: &Params<'_>,
) -> Result<ShardId, RouteError> {
    let key = resolve(&tuple.key, params)?;
    let set_key = resolve(&tuple.set_key, params)?;
    let key: Vec<KeyValue<'_>> = key.iter().map(Owned::as_key).collect();
    let set_key: Vec<KeyValue<'_>> = set_key.iter().map(Owned::as_key).collect();
    let Some(table) = snapshot.table(plan.table) else {
        return Ok(plan.shards.first().copied().unwrap_or(ShardId(0)));
    };
    Ok(place::shard_for(snapshot, table, &key, &set_key)?)
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
        Keys::OneOf(tuples) => {
            let mut shards = Vec::with_capacity(tuples.len());
            for t in tuples {
                match tuple_shard(snapshot, plan, t, params) {
                    Ok(s) => shards.push(s),
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
