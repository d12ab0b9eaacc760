//! Arbitrary SQL, and arbitrary Bind parameters for it, routed against the fixture catalog as
//! the session routes them: the plan cache (shared plans of simple queries, plans of prepared
//! texts), the key values read from literals and parameters, the shard of each key, and what
//! the session derives from the plan for statements over several shards (INSERTs split per
//! shard, parameters selected per part, LIMIT/OFFSET parameters, generated keys, sharding-key
//! UPDATEs, COPY (SELECT …)).
//!
//! Input: a flags byte, the SQL text up to the first NUL, then the parameters, each a tag byte
//! and its value. Flags bit 0 set: the text is a prepared statement bound with the parameters;
//! clear: a simple query (the parameters are then unused). A tag's low two bits: 0 NULL, 1 text
//! up to the next NUL, 2 binary (a length byte, then the bytes), 3 the rest of the input is the
//! Bind's whole parameter part as sent (formats, values, result formats). Its upper bits pick
//! the type the Parse declares for it.
//!
//! A simple query is also planned without the cache: the shared plan, read with the query's
//! own literals, must route it where its own plan does.

#![no_main]

use std::borrow::Cow;

use libfuzzer_sys::fuzz_target;
use shardwire::catalog::Snapshot;
use shardwire::executor::split::{fill_generated, split_insert, split_prepared_insert, KeyValues};
use shardwire::router::plan::{self, Keys, Plan, Planned, ShardedPlan};
use shardwire::router::route::{self, Params, Route, Routed};
use shardwire::router::SimpleMemo;
use shardwire_fuzz::{parses, plan_cache, snapshot, Columns};

/// The types a Parse may declare: unspecified, int8, int4, int2, text, numeric, date, uuid,
/// bool, timestamp, timestamptz, varchar.
const DECLARED: [u32; 12] = [0, 20, 23, 21, 25, 1700, 1082, 2950, 16, 1114, 1184, 1043];

/// A Bind's parameters as the client sent them, with the Parse's declared types.
struct Bound {
    types: Vec<u8>,
    rest: Vec<u8>,
}

fn read_input(data: &[u8]) -> Option<(bool, String, Bound)> {
    let (&flags, data) = data.split_first()?;
    let (sql, mut data) = match memchr_zero(data) {
        Some(at) => (&data[..at], &data[at + 1..]),
        None => (data, &[][..]),
    };
    let sql = String::from_utf8_lossy(sql).into_owned();
    let mut oids = Vec::new();
    let mut values: Vec<(i16, Option<&[u8]>)> = Vec::new();
    let mut raw = None;
    while let Some((&tag, rest)) = data.split_first() {
        data = rest;
        oids.push(DECLARED[usize::from(tag >> 2) % DECLARED.len()]);
        match tag & 3 {
            0 => values.push((0, None)),
            1 => {
                let end = memchr_zero(data).unwrap_or(data.len());
                values.push((0, Some(&data[..end])));
                data = data.get(end + 1..).unwrap_or_default();
            }
            2 => {
                let Some((&len, rest)) = data.split_first() else {
                    break;
                };
                let len = usize::from(len).min(rest.len());
                values.push((1, Some(&rest[..len])));
                data = &rest[len..];
            }
            _ => {
                raw = Some(data);
                break;
            }
        }
    }
    let mut types = Vec::new();
    types.extend_from_slice(&(oids.len() as i16).to_be_bytes());
    for oid in &oids {
        types.extend_from_slice(&oid.to_be_bytes());
    }
    let rest = match raw {
        Some(raw) => raw.to_vec(),
        None => bind_rest(&values),
    };
    Some((flags & 1 == 1, sql, Bound { types, rest }))
}

fn memchr_zero(data: &[u8]) -> Option<usize> {
    data.iter().position(|&b| b == 0)
}

/// Bind's parameter part: a format per value, the values, no result formats.
fn bind_rest(values: &[(i16, Option<&[u8]>)]) -> Vec<u8> {
    let mut rest = Vec::new();
    rest.extend_from_slice(&(values.len() as i16).to_be_bytes());
    for (format, _) in values {
        rest.extend_from_slice(&format.to_be_bytes());
    }
    rest.extend_from_slice(&(values.len() as i16).to_be_bytes());
    for (_, value) in values {
        match value {
            Some(v) => {
                rest.extend_from_slice(&(v.len() as i32).to_be_bytes());
                rest.extend_from_slice(v);
            }
            None => rest.extend_from_slice(&(-1i32).to_be_bytes()),
        }
    }
    rest.extend_from_slice(&0i16.to_be_bytes());
    rest
}

fuzz_target!(|data: &[u8]| {
    let Some((prepared, sql, bound)) = read_input(data) else {
        return;
    };
    let snapshot = snapshot();
    // A cache per input, so that a crash replays from its input alone.
    let cache = plan_cache();
    let counter = parses();
    if prepared {
        let Ok(plan) = cache.plan(sql.as_bytes(), None, &snapshot, &counter) else {
            return;
        };
        // Planned again: from the cache this time.
        let again = cache.plan(sql.as_bytes(), None, &snapshot, &counter);
        assert!(again.is_ok_and(|p| *p == *plan), "the cached plan differs");
        let Ok(params) = Params::parse(&bound.rest, &bound.types) else {
            return;
        };
        route_plan(&snapshot, &plan, &params, &sql, Some(&bound));
    } else {
        let mut memo = SimpleMemo::default();
        let normalised = memo.normalise(sql.as_bytes());
        let Ok((plan, literals)) =
            cache.plan_simple(sql.as_bytes(), normalised, &snapshot, &counter, &mut memo)
        else {
            return;
        };
        let shared = Params::literals(literals.clone());
        let routed = route_plan(&snapshot, &plan, &shared, &sql, None);
        // The shared plan again, from the session's memo and from the shared cache.
        for memo in [&mut memo, &mut SimpleMemo::default()] {
            let normalised = memo.normalise(sql.as_bytes());
            if let Ok((cached, again)) =
                cache.plan_simple(sql.as_bytes(), normalised, &snapshot, &counter, memo)
            {
                assert!(*cached == *plan, "the cached shared plan differs");
                assert_eq!(again, literals);
            }
        }
        if let Planned::Plan(own) = plan::plan(&sql, &snapshot, &Columns) {
            let unshared = route_plan(&snapshot, &own, &Params::default(), &sql, None);
            assert_eq!(
                routed, unshared,
                "the shared plan routes the query elsewhere than its own plan: {sql:?}"
            );
        }
    }
});

/// Where a plan sends the statement (the shards of a sharded statement, or its error), having
/// worked out on the way whatever the session derives from the plan before sending anything.
fn route_plan(
    snapshot: &Snapshot,
    plan: &Plan,
    params: &Params<'_>,
    sql: &str,
    bound: Option<&Bound>,
) -> Option<Result<Routed, String>> {
    match plan {
        Plan::Sharded(p) => Some(route_sharded(snapshot, p, params, sql, bound)),
        Plan::Copy(c) => c
            .select
            .as_ref()
            .map(|select| route_sharded(snapshot, select, params, sql, bound)),
        Plan::Explain(x) => route_plan(snapshot, &x.plan, params, &x.sql, None),
        Plan::Anywhere
        | Plan::Fixed(_)
        | Plan::AnyOf(_)
        | Plan::Every(_)
        | Plan::Utility(_)
        | Plan::Script
        | Plan::Refused(_)
        | Plan::Sequence(_)
        | Plan::Combine(_) => None,
    }
}

fn route_sharded(
    snapshot: &Snapshot,
    p: &ShardedPlan,
    params: &Params<'_>,
    sql: &str,
    bound: Option<&Bound>,
) -> Result<Routed, String> {
    if let Some(update) = &p.key_update {
        if let Some(new_key) = &update.new_key {
            let _ = route::key_shard(snapshot, p, new_key, params);
        }
    }
    if let (Some(generated), Keys::Rows(rows)) = (&p.generated, &p.keys) {
        // Keys from the cluster-wide sequence, one per row.
        let values: Vec<i64> = (1..=rows.len() as i64).collect();
        let with_values = params.clone().with_generated(&values);
        if let Ok(routed) = route::route(snapshot, p, &with_values) {
            let shards = distinct(&routed.rows);
            let keys = match bound {
                None => KeyValues::Values(&values),
                Some(_) => KeyValues::Params(params.count() as i32 + 1),
            };
            if let Ok(filled) = fill_generated(sql, &generated.column, generated.missing, keys) {
                split_rows(&filled, &routed.rows, &shards, bound);
            }
            if let Some(b) = bound {
                let mut rest = Cow::Borrowed(&b.rest[..]);
                for v in &values {
                    match route::with_extra_param(&rest, &v.to_string()) {
                        Ok(r) => rest = Cow::Owned(r),
                        Err(_) => break,
                    }
                }
            }
        }
    }
    let routed = route::route(snapshot, p, params).map_err(|e| e.to_string())?;
    let shards = match &routed.route {
        Route::Single(_) => return Ok(routed),
        Route::Multi(shards) => shards.clone(),
        Route::All => snapshot.shards().iter().map(|s| s.id).collect(),
    };
    if matches!(p.keys, Keys::Rows(_)) {
        split_rows(sql, &routed.rows, &shards, bound);
    }
    if let Ok(merge) = route::bound_merge(&p.merge, params) {
        if let Some(b) = bound {
            let _ = route::with_hidden_result_columns(&b.rest, merge.visible, merge.hidden);
        }
    }
    Ok(routed)
}

/// An INSERT's rows split per shard, and for a prepared one each part's parameters.
fn split_rows(
    sql: &str,
    rows: &[shardwire::catalog::ShardId],
    shards: &[shardwire::catalog::ShardId],
    bound: Option<&Bound>,
) {
    match bound {
        None => {
            let _ = split_insert(sql, rows, shards);
        }
        Some(b) => {
            let Ok(parts) = split_prepared_insert(sql, rows, shards) else {
                return;
            };
            for part in &parts {
                let _ = route::select_params(&b.rest, &part.params);
                let _ = route::select_param_types(&b.types, &part.params);
            }
        }
    }
}

fn distinct(rows: &[shardwire::catalog::ShardId]) -> Vec<shardwire::catalog::ShardId> {
    let mut shards = rows.to_vec();
    shards.sort();
    shards.dedup();
    shards
}
