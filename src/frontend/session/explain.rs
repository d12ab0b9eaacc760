//! EXPLAIN through the proxy: a statement that runs on one shard is explained by that shard;
//! one that runs on several is described by the proxy — which path it takes (streaming merge,
//! general path, a write on every shard) and the SQL each shard runs.

use super::dest::Dest;
use super::{fan_out, Session, SessionError};
use crate::catalog::{ShardId, Snapshot};
use crate::executor::gather::{Combine, ExplainAnalyze};
use crate::executor::general::CombineJob;
use crate::frontend::pipeline::Pending;
use crate::frontend::FrontendError;
use crate::protocol::{self, ColumnType, ResultSet};
use crate::router::plan::{
    AggregateMerge, ColumnMerge, CombinePlan, ExplainPlan, Keys, Merge, Plan, ShardedPlan,
};
use crate::router::route::{self as routing, Params, Route};
use bytes::BytesMut;

/// The proxy's answer to an EXPLAIN: its lines, for a simple query or a Bind's portal.
pub(super) struct ExplainAnswer {
    pub(super) lines: Vec<String>,
    pub(super) portal: Option<Box<[u8]>>,
}

impl Session {
    pub(super) fn explain_dest(
        &mut self,
        x: &ExplainPlan,
        snapshot: &Snapshot,
        params: &Params<'_>,
        portal: Option<&[u8]>,
        describer: Option<ShardId>,
    ) -> Dest {
        let refuse = |why: &str| Dest::refuse(&FrontendError::NotAcrossShards(why.to_string()));
        let analyze_refused = "EXPLAIN ANALYZE of a statement over several shards is not \
                               supported: run EXPLAIN without ANALYZE, or give the full sharding \
                               key so one shard runs it";
        let lines = match &x.plan {
            Plan::Anywhere => return Dest::Here,
            Plan::Fixed(s) => return Dest::Shard(*s),
            Plan::AnyOf(shards) => {
                return match self.links.current_shard() {
                    Some(c) if shards.contains(&c) => Dest::Shard(c),
                    _ => Dest::Shard(shards[0]),
                }
            }
            Plan::Every(shards) if !x.analyze => {
                return Dest::Shard(describer.unwrap_or(shards[0]));
            }
            Plan::Every(_) => return refuse(analyze_refused),
            Plan::Refused(r) => return Dest::refuse(r),
            Plan::Copy(_)
            | Plan::Sequence(_)
            | Plan::Explain(_)
            | Plan::Utility(_)
            | Plan::Script => {
                return refuse("EXPLAIN of this statement is not supported through shardwire")
            }
            Plan::Combine(c) => {
                if describer.is_some() {
                    return Dest::Shard(ShardId(0));
                }
                if x.analyze {
                    return analyze_combined(x, c, Vec::new(), snapshot, portal);
                }
                combine_lines(c, &[], snapshot)
            }
            Plan::Sharded(p) => {
                let routed = match routing::route(snapshot, p, params) {
                    Ok(r) => r,
                    Err(e) => return Dest::refuse(&e),
                };
                let shards = match routed.route {
                    Route::Single(s) => return Dest::Shard(s),
                    _ if describer.is_some() => return Dest::Shard(p.shards[0]),
                    other => other.into_shards(snapshot),
                };
                if let (true, Some(c)) = (x.analyze, &p.combine) {
                    return analyze_combined(x, c, shards, snapshot, portal);
                }
                if x.analyze {
                    return match analyze_on_shards(x, p, &shards, snapshot, portal) {
                        Ok(multi) => Dest::Multi(Box::new(multi)),
                        Err(why) => refuse(why),
                    };
                }
                match (&p.combine, &p.multi_shard_refusal) {
                    (Some(c), _) => {
                        let mut lines = Vec::new();
                        if let Some(a) = &p.aggregate {
                            lines = aggregate_lines(a, &shards, snapshot);
                            lines.push(
                                "  Otherwise (extended protocol, or a column the proxy \
                                        does not merge):"
                                    .to_string(),
                            );
                        }
                        let indent = if lines.is_empty() { "" } else { "  " };
                        lines.extend(
                            combine_lines(c, &shards, snapshot)
                                .into_iter()
                                .map(|l| format!("{indent}{l}")),
                        );
                        lines
                    }
                    (None, Some(why)) => return refuse(why),
                    (None, None) => sharded_lines(p, &x.sql, &shards, snapshot),
                }
            }
        };
        Dest::Explain(Box::new(ExplainAnswer {
            lines,
            portal: portal.map(Into::into),
        }))
    }

    pub(super) fn answer_explain(&mut self, answer: ExplainAnswer) -> Result<(), SessionError> {
        let mut rs = ResultSet::new(&[("QUERY PLAN", ColumnType::Text)]);
        for line in answer.lines {
            rs.push(vec![Some(line)]);
        }
        let mut out = BytesMut::new();
        match answer.portal {
            None => {
                rs.encode("EXPLAIN", &mut out);
                let status = self.links.status();
                protocol::ready_for_query(&mut out, status);
                self.pipeline
                    .push(Pending::composed(out.freeze()), &mut self.cout);
            }
            Some(portal) => {
                rs.encode("EXPLAIN", &mut out);
                let rows = fan_out::rows_of_reply(&out).unwrap_or_default();
                self.pipeline.push(
                    Pending::composed(protocol::empty_message(b'2')),
                    &mut self.cout,
                );
                self.portals.put_buffered(portal, rows);
            }
        }
        Ok(())
    }
}

/// EXPLAIN ANALYZE of a read the general path answers: run by the executor
/// ([`crate::executor::general::explain_analyze`]), under the proxy's plan.
pub(super) struct ExplainCombined {
    job: CombineJob,
    options: String,
    head: Vec<String>,
}

fn analyze_combined(
    x: &ExplainPlan,
    c: &std::sync::Arc<CombinePlan>,
    shards: Vec<ShardId>,
    snapshot: &Snapshot,
    portal: Option<&[u8]>,
) -> Dest {
    let refuse = |why: &str| Dest::refuse(&FrontendError::NotAcrossShards(why.to_string()));
    if portal.is_some() {
        return refuse(
            "EXPLAIN ANALYZE of a statement over several shards runs in a simple query only: \
             send it as a simple query, or give the full sharding key",
        );
    }
    if !x.text_format {
        return refuse(
            "EXPLAIN ANALYZE of a statement over several shards shows the shards' plans in \
             FORMAT TEXT only: leave out FORMAT, or give the full sharding key",
        );
    }
    // ANALYZE reads every table's rows (no partial aggregation): the plan says so.
    let mut pulls = (**c).clone();
    pulls.partial = None;
    let head = combine_lines(&pulls, &shards, snapshot);
    Dest::ExplainCombined(Box::new(ExplainCombined {
        job: CombineJob {
            plan: c.clone(),
            bound: None,
            shards,
        },
        options: x.options.clone(),
        head,
    }))
}

impl Session {
    /// EXPLAIN ANALYZE on the general path: the proxy's plan, each pull's and the combining
    /// statement's EXPLAIN ANALYZE, the proxy's times.
    pub(super) async fn run_explain_combined(
        &mut self,
        e: ExplainCombined,
        client: &mut (dyn crate::frontend::socket::ClientSocket + Send),
    ) -> Result<(), SessionError> {
        let ctx = self.ctx.clone();
        let explained = crate::executor::general::explain_analyze(
            &mut self.host(Some(client)),
            super::host::shared(&ctx),
            &e.job,
            &e.options,
        )
        .await?;
        self.release_parked_if_idle();
        match explained {
            Ok(lines) => {
                let mut all = e.head;
                all.extend(lines);
                self.answer_explain(ExplainAnswer {
                    lines: all,
                    portal: None,
                })
            }
            Err(error) => {
                self.cout.extend_from_slice(&error);
                let status = self.links.status();
                protocol::ready_for_query(&mut self.cout, status);
                Ok(())
            }
        }
    }
}

/// EXPLAIN ANALYZE of a statement each shard runs as it is (a streaming-merge read, or a write
/// on several shards): each shard's own EXPLAIN ANALYZE of its SQL, under the proxy's plan.
/// The statement runs as it would without EXPLAIN, a write as one distributed transaction.
fn analyze_on_shards(
    x: &ExplainPlan,
    p: &ShardedPlan,
    shards: &[ShardId],
    snapshot: &Snapshot,
    portal: Option<&[u8]>,
) -> Result<crate::executor::fan_out::Multi, &'static str> {
    if portal.is_some() {
        return Err(
            "EXPLAIN ANALYZE of a statement over several shards runs in a simple query \
                    only: send it as a simple query, or give the full sharding key",
        );
    }
    if !x.text_format {
        return Err(
            "EXPLAIN ANALYZE of a statement over several shards shows the shards' plans \
                    in FORMAT TEXT only: leave out FORMAT, or give the full sharding key",
        );
    }
    let plain = p.combine.is_none()
        && p.multi_shard_refusal.is_none()
        && p.aggregate.is_none()
        && p.key_update.is_none()
        && p.insert_select.is_none()
        && p.generated.is_none()
        && !matches!(p.keys, Keys::Rows(_));
    if !plain {
        return Err(
            "EXPLAIN ANALYZE over several shards of a statement the proxy combines \
                    (an aggregate, the general path, a split INSERT, a sharding-key UPDATE) is \
                    not supported: run EXPLAIN without ANALYZE, or give the full sharding key",
        );
    }
    let shard_sql = p.merge.shard_sql.as_deref().unwrap_or(&x.sql);
    let explain = format!("EXPLAIN ({}) {shard_sql}", x.options);
    Ok(crate::executor::fan_out::Multi {
        shards: shards.to_vec(),
        sql: vec![explain; shards.len()],
        combine: Combine::Explain(ExplainAnalyze {
            head: sharded_lines(p, &x.sql, shards, snapshot),
            shards: shards
                .iter()
                .map(|&s| shard_names(&[s], snapshot))
                .collect(),
            writes: p.kind.writes(),
            started: std::time::Instant::now(),
        }),
    })
}

fn shard_names(shards: &[ShardId], snapshot: &Snapshot) -> String {
    shards
        .iter()
        .map(|&s| {
            snapshot
                .shard(s)
                .map_or_else(|| s.to_string(), |s| s.name.clone())
        })
        .collect::<Vec<_>>()
        .join(", ")
}

fn sharded_lines(
    p: &ShardedPlan,
    sql: &str,
    shards: &[ShardId],
    snapshot: &Snapshot,
) -> Vec<String> {
    let head = if p.kind.writes() {
        if matches!(p.keys, Keys::Rows(_)) {
            "Shardwire Split INSERT (one distributed transaction)"
        } else if p.key_update.is_some() {
            "Shardwire Sharding-Key UPDATE (rows may move between shards)"
        } else {
            "Shardwire Write on Several Shards (one distributed transaction)"
        }
    } else {
        "Shardwire Streaming Merge"
    };
    let mut lines = vec![
        head.to_string(),
        format!("  Shards: {}", shard_names(shards, snapshot)),
        format!(
            "  Shard SQL: {}",
            p.merge.shard_sql.as_deref().unwrap_or(sql)
        ),
    ];
    if !p.kind.writes() {
        if let Some(merge) = merge_line(&p.merge) {
            lines.push(format!("  Merge: {merge}"));
        }
    }
    lines
}

/// What the proxy does to the shards' rows: their ORDER BY merge, OFFSET and LIMIT.
fn merge_line(m: &Merge) -> Option<String> {
    let mut parts = Vec::new();
    if !m.order.is_empty() {
        let keys: Vec<String> = m
            .order
            .iter()
            .map(|k| {
                format!(
                    "column {}{}{}",
                    k.column + 1,
                    if k.descending { " DESC" } else { "" },
                    match (k.nulls_first, k.descending) {
                        (true, false) => " NULLS FIRST",
                        (false, true) => " NULLS LAST",
                        _ => "",
                    }
                )
            })
            .collect();
        parts.push(format!("ORDER BY {}", keys.join(", ")));
    }
    match (m.offset, m.offset_param) {
        (_, Some(p)) => parts.push(format!("OFFSET ${}", p + 1)),
        (0, None) => {}
        (n, None) => parts.push(format!("OFFSET {n}")),
    }
    match (m.limit, m.limit_param) {
        (_, Some(p)) => parts.push(format!("LIMIT ${}", p + 1)),
        (Some(n), None) => parts.push(format!("LIMIT {n}")),
        (None, None) => {}
    }
    if m.hidden > 0 {
        parts.push(format!("{} hidden sort column(s)", m.hidden));
    }
    (!parts.is_empty()).then(|| parts.join("; "))
}

fn aggregate_lines(a: &AggregateMerge, shards: &[ShardId], snapshot: &Snapshot) -> Vec<String> {
    let columns: Vec<&str> = a
        .columns
        .iter()
        .map(|c| match c {
            ColumnMerge::Group => "group key",
            ColumnMerge::Count => "count",
            ColumnMerge::Sum => "sum",
            ColumnMerge::Min => "min",
            ColumnMerge::Max => "max",
        })
        .collect();
    let rest = Merge {
        order: a.order.clone(),
        limit: a.limit,
        offset: a.offset,
        ..Merge::default()
    };
    let mut lines = vec![
        "Shardwire Aggregate Merge".to_string(),
        format!("  Shards: {}", shard_names(shards, snapshot)),
        format!("  Shard SQL: {}", a.shard_sql),
        format!("  Per group: {}", columns.join(", ")),
    ];
    if let Some(m) = merge_line(&rest) {
        lines.push(format!("  Merge: {m}"));
    }
    lines
}

fn combine_lines(c: &CombinePlan, shards: &[ShardId], snapshot: &Snapshot) -> Vec<String> {
    if let (Some(p), Some(&first)) = (&c.partial, shards.first()) {
        return vec![
            "Shardwire General Path (partial aggregation)".to_string(),
            format!("  Shards: {}", shard_names(shards, snapshot)),
            format!("  Shard SQL: {}", p.select),
            format!("  Combining on: {}", shard_names(&[first], snapshot)),
            format!("  Combining SQL: {}", p.combine),
        ];
    }
    let mut lines = vec![
        "Shardwire General Path".to_string(),
        format!("  Combining on: {}", shard_names(&[ShardId(0)], snapshot)),
    ];
    for pull in &c.pulls {
        let table = snapshot
            .table(pull.table)
            .map_or_else(|| pull.table.to_string(), |t| t.qualified_name());
        let shards = match &pull.route {
            Plan::Sharded(p) => match routing::route(snapshot, p, &Params::default()) {
                Ok(r) => r.route.into_shards(snapshot),
                Err(_) => p.shards.clone(),
            },
            Plan::AnyOf(s) => s[..1].to_vec(),
            Plan::Fixed(s) => vec![*s],
            _ => Vec::new(),
        };
        lines.push(format!(
            "  Rows of {table} into {} from {}: {}",
            pull.temp,
            shard_names(&shards, snapshot),
            pull.select
        ));
    }
    lines.push(format!("  Combining SQL: {}", c.sql));
    lines
}
