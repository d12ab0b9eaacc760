//! Where a statement that runs on several shards goes: the per-shard SQL or extended-protocol
//! messages of a plain sharded statement routed to several shards, and of an INSERT whose
//! generated key values the proxy fills.

use super::dest::{Dest, KeysNeeded, Source};
use super::Session;
use crate::catalog::{ShardId, Snapshot};
use crate::executor::fan_out::Multi;
use crate::executor::gather::Combine;
use crate::frontend::FrontendError;
use crate::protocol::Extended;
use crate::router::plan::{Keys, StatementKind};
use crate::router::route::{self as routing, Params};
use bytes::BytesMut;

/// A Bind whose statement runs on several shards: executed on all of them at once, its
/// combined result kept as the portal the client's Describe and Execute read.
pub(super) struct MultiPortal {
    pub(super) shards: Vec<ShardId>,
    pub(super) portal: Box<[u8]>,
    /// Parse, Bind, Describe portal, Execute and Flush, for each of `shards`.
    pub(super) messages: Vec<BytesMut>,
    pub(super) combine: Combine,
}

/// The messages that run a bound statement on a shard through its unnamed statement and
/// portal, up to a Flush: the batch stays open there until the client's Sync. `hidden` sort
/// columns appended to the statement take text format.
pub(super) fn portal_messages(
    text: &[u8],
    param_types: &[u8],
    rest: &[u8],
    (visible, hidden): (usize, usize),
) -> BytesMut {
    let mut out = BytesMut::new();
    let rest = routing::with_hidden_result_columns(rest, visible, hidden);
    Extended::new(&mut out)
        .parse(b"", text, param_types)
        .bind(b"", &rest)
        .describe_portal()
        // The description comes back before the Execute has run: a slow shard must not hold
        // up the BindComplete the client waits for.
        .flush()
        .execute()
        .flush();
    out
}

/// The messages that run each shard's part of a prepared INSERT whose VALUES rows
/// (`row_shards`) go to several `shards`: its rows only, with their parameters' values,
/// formats and declared types.
fn split_portal(
    text: &str,
    param_types: &[u8],
    rest: &[u8],
    row_shards: &[ShardId],
    shards: &[ShardId],
) -> Result<Vec<BytesMut>, String> {
    let parts = crate::executor::split::split_prepared_insert(text, row_shards, shards)?;
    parts
        .iter()
        .map(|part| {
            let rest = routing::select_params(rest, &part.params).map_err(|e| e.to_string())?;
            let types = routing::select_param_types(param_types, &part.params);
            Ok(portal_messages(part.sql.as_bytes(), &types, &rest, (0, 0)))
        })
        .collect()
}

/// For each VALUES row, the index in `shards` of the shard it goes to.
fn row_indexes(row_shards: &[ShardId], shards: &[ShardId]) -> Vec<usize> {
    row_shards
        .iter()
        .map(|s| shards.iter().position(|t| t == s).unwrap_or(0))
        .collect()
}

impl Session {
    /// A plain sharded statement routed to several shards.
    #[inline(never)]
    pub(super) fn multi_shard_dest(
        &mut self,
        p: &crate::router::plan::ShardedPlan,
        rows: &[ShardId],
        shards: Vec<ShardId>,
        params: &Params<'_>,
        source: Source<'_>,
    ) -> Dest {
        if let (Some(a), Some(c)) = (&p.aggregate, &p.combine) {
            if let Some(job) = self.aggregate_job(a, c, &source, &shards) {
                return Dest::Aggregate(Box::new(job));
            }
        }
        if let Some(c) = &p.combine {
            let describer = shards[0];
            return super::combining::combining_dest(c, source, describer, shards);
        }
        if let Some(why) = &p.multi_shard_refusal {
            return Dest::refuse(&FrontendError::NotAcrossShards(why.clone()));
        }
        let sql = match source {
            Source::Simple(sql) => sql,
            Source::Placement => return Dest::Shard(shards[0]),
            Source::Bind {
                portal,
                statement,
                rest,
            } => {
                self.ctx.metrics.routed_multi.increment(1);
                if matches!(p.keys, Keys::Rows(_)) {
                    let text = String::from_utf8_lossy(&statement.query);
                    let messages =
                        match split_portal(&text, &statement.param_types, rest, rows, &shards) {
                            Ok(m) => m,
                            Err(e) => return Dest::refuse(&FrontendError::SplitInsert(e)),
                        };
                    return Dest::MultiPortal(Box::new(MultiPortal {
                        combine: Combine::Union {
                            kind: p.kind,
                            merge: p.merge.clone(),
                            rows: row_indexes(rows, &shards),
                        },
                        shards,
                        portal: portal.into(),
                        messages,
                    }));
                }
                let merge = match routing::bound_merge(&p.merge, params) {
                    Ok(m) => m,
                    Err(e) => return Dest::refuse(&e),
                };
                let text = merge
                    .shard_sql
                    .as_deref()
                    .map_or(&statement.query[..], str::as_bytes);
                let one = portal_messages(
                    text,
                    &statement.param_types,
                    rest,
                    (merge.visible, merge.hidden),
                );
                return Dest::MultiPortal(Box::new(MultiPortal {
                    messages: vec![one; shards.len()],
                    shards,
                    portal: portal.into(),
                    combine: Combine::Union {
                        kind: p.kind,
                        merge,
                        rows: Vec::new(),
                    },
                }));
            }
        };
        let text = String::from_utf8_lossy(sql);
        let sql = match (&p.keys, p.kind) {
            (Keys::Rows(_), StatementKind::Insert | StatementKind::Merge) => {
                match crate::executor::split::split_insert(&text, rows, &shards) {
                    Ok(s) => s,
                    Err(e) => return Dest::refuse(&FrontendError::SplitInsert(e)),
                }
            }
            _ => {
                let one = p
                    .merge
                    .shard_sql
                    .clone()
                    .unwrap_or_else(|| text.into_owned());
                vec![one; shards.len()]
            }
        };
        let rows = row_indexes(rows, &shards);
        self.ctx.metrics.routed_multi.increment(1);
        Dest::Multi(Box::new(Multi {
            shards,
            sql,
            combine: Combine::Union {
                kind: p.kind,
                merge: p.merge.clone(),
                rows,
            },
        }))
    }

    /// An INSERT whose generated key column the proxy fills: values from the cluster-wide
    /// sequence (taken beforehand, [`Dest::NeedKeys`]), the statement rewritten to carry them,
    /// each row routed by its value. It always runs through the executor, even on one shard,
    /// since what the shard runs is not the client's text.
    pub(super) fn generated_insert(
        &mut self,
        p: &crate::router::plan::ShardedPlan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        source: Source<'_>,
    ) -> Dest {
        let (Some(g), Keys::Rows(rows)) = (&p.generated, &p.keys) else {
            return Dest::Here;
        };
        if matches!(source, Source::Placement) {
            return Dest::Shard(p.shards[0]);
        }
        if self.keys.pending.len() != rows.len() {
            return Dest::NeedKeys(Box::new(KeysNeeded {
                table: p.table,
                column: g.column.clone(),
                count: rows.len(),
            }));
        }
        let values = std::mem::take(&mut self.keys.pending);
        if let Some(&last) = values.last() {
            self.keys.last.set(p.table, &g.column, last);
        }
        let with_values = params.clone().with_generated(&values);
        let routed = match routing::route(snapshot, p, &with_values) {
            Ok(r) => r,
            Err(e) => return Dest::refuse(&e),
        };
        let mut shards = routed.rows.clone();
        shards.sort();
        shards.dedup();
        let rows = row_indexes(&routed.rows, &shards);
        let combine = Combine::Union {
            kind: StatementKind::Insert,
            merge: Default::default(),
            rows,
        };
        let refuse = |e: String| Dest::refuse(&FrontendError::GeneratedKey(e));
        use crate::executor::split::{fill_generated, split_insert, KeyValues};
        self.ctx.metrics.routed_single.increment(1);
        match source {
            Source::Simple(sql) => {
                let text = String::from_utf8_lossy(sql);
                let filled =
                    match fill_generated(&text, &g.column, g.missing, KeyValues::Values(&values)) {
                        Ok(t) => t,
                        Err(e) => return refuse(e),
                    };
                let sql = match split_insert(&filled, &routed.rows, &shards) {
                    Ok(s) => s,
                    Err(e) => return refuse(e),
                };
                Dest::Multi(Box::new(Multi {
                    shards,
                    sql,
                    combine,
                }))
            }
            Source::Bind {
                portal,
                statement,
                rest,
            } => {
                let count = params.count();
                let text = String::from_utf8_lossy(&statement.query);
                // Row `i`'s key is parameter `count + 1 + i`, a value appended to the Bind.
                let filled = match fill_generated(
                    &text,
                    &g.column,
                    g.missing,
                    KeyValues::Params(count as i32 + 1),
                ) {
                    Ok(t) => t,
                    Err(e) => return refuse(e),
                };
                let mut rest = rest.to_vec();
                let mut types = statement.param_types.to_vec();
                for (i, v) in values.iter().enumerate() {
                    rest = match routing::with_extra_param(&rest, &v.to_string()) {
                        Ok(r) => r,
                        Err(e) => return refuse(e.to_string()),
                    };
                    types = routing::with_extra_param_type(&types, count + i);
                }
                let messages = if values.len() == 1 {
                    vec![portal_messages(filled.as_bytes(), &types, &rest, (0, 0))]
                } else {
                    // Split even onto one shard: the parameters of rows that give their own
                    // key are not in the statement, and must not be in the Bind.
                    match split_portal(&filled, &types, &rest, &routed.rows, &shards) {
                        Ok(m) => m,
                        Err(e) => return refuse(e),
                    }
                };
                Dest::MultiPortal(Box::new(MultiPortal {
                    shards,
                    portal: portal.into(),
                    messages,
                    combine,
                }))
            }
            Source::Placement => Dest::Shard(p.shards[0]),
        }
    }
}
