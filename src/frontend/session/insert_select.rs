//! The session's side of a two-step INSERT … SELECT: the SELECT answered where its plan says
//! (one shard, or gathered from several), its rows routed by the target's sharding key, each
//! shard's rows inserted in batches, one combined answer for the client.

use super::*;
use crate::error::ClientError;
use crate::executor::gather::{self, Combine, Combined};
use crate::router::hash::KeyValue;
use crate::router::plan::{Plan, ShardedPlan, StatementKind};
use crate::router::route::{self as routing, Params};

impl Session {
    pub(super) async fn run_insert_select(
        &mut self,
        plan: Arc<ShardedPlan>,
    ) -> Result<(), SessionError> {
        let Some(job) = plan.insert_select.as_deref() else {
            return Ok(());
        };
        let snapshot = self.ctx.catalog.snapshot();
        // 1. The SELECT.
        let (shards, sql, merge) = match &*job.source {
            Plan::Sharded(sp) => {
                let routed = match routing::route(&snapshot, sp, &Params::default()) {
                    Ok(r) => r,
                    Err(e) => return self.answer_error(&e),
                };
                let shards = match routed.route {
                    Route::Single(s) => vec![s],
                    Route::Multi(s) => s,
                    Route::All => snapshot.shards().iter().map(|s| s.id).collect(),
                };
                let sql = sp
                    .merge
                    .shard_sql
                    .clone()
                    .unwrap_or_else(|| job.select_sql.clone());
                (shards, sql, sp.merge.clone())
            }
            Plan::Fixed(s) => (vec![*s], job.select_sql.clone(), Default::default()),
            Plan::AnyOf(s) => {
                let shard = match self.current_shard() {
                    Some(c) if s.contains(&c) => c,
                    _ => s[0],
                };
                (vec![shard], job.select_sql.clone(), Default::default())
            }
            Plan::Anywhere
            | Plan::Every(_)
            | Plan::Copy(_)
            | Plan::Refused(_)
            | Plan::Sequence(_) => {
                let shard = self.current_shard().unwrap_or(ShardId(0));
                (vec![shard], job.select_sql.clone(), Default::default())
            }
        };
        let select = Combine::Union {
            kind: StatementKind::Select,
            merge,
            rows: Vec::new(),
        };
        let sql = vec![sql; shards.len()];
        let rows = match self
            .run_on_shards(&shards, Work::Simple(&sql), &select)
            .await?
        {
            Combined::Rows(r) => r.rows,
            failed @ Combined::Failed { .. } => return self.answer(&failed),
        };
        // 2. Each row to its shard.
        let Some(target) = snapshot.table(plan.table) else {
            return Ok(());
        };
        let mut by_shard: std::collections::BTreeMap<ShardId, Vec<bytes::Bytes>> =
            Default::default();
        let key_len = target.key_columns.len();
        for row in rows {
            let values = gather::values(&row);
            let key: Result<Vec<KeyValue<'_>>, _> = job
                .key_positions
                .iter()
                .map(|&p| match values.get(p).copied().flatten() {
                    None => Ok(KeyValue::Null),
                    Some(v) => std::str::from_utf8(v).map(KeyValue::Text),
                })
                .collect();
            let Ok(key) = key else {
                return self.answer_error(&FrontendError::KeyNotUtf8);
            };
            let (key, set_key) = key.split_at(key_len.min(key.len()));
            match crate::router::place::shard_for(&snapshot, target, key, set_key) {
                Ok(s) => by_shard.entry(s).or_default().push(row.clone()),
                Err(e) => {
                    let e = routing::RouteError::Place(e);
                    return self.answer_error(&e);
                }
            }
        }
        // 3. The batches.
        let shards: Vec<ShardId> = by_shard.keys().copied().collect();
        let messages: Vec<BytesMut> = by_shard
            .values()
            .map(|rows| crate::executor::insert_select::batches(job, rows))
            .collect();
        let insert = Combine::Union {
            kind: StatementKind::Insert,
            merge: Default::default(),
            rows: Vec::new(),
        };
        if shards.is_empty() {
            let mut out = BytesMut::new();
            protocol::command_complete(&mut out, "INSERT 0 0");
            let status = self.session_status();
            protocol::ready_for_query(&mut out, status);
            self.pipeline
                .push(Pending::composed(out.freeze()), &mut self.cout);
            return Ok(());
        }
        let combined = self
            .run_on_shards(&shards, Work::Batches(&messages), &insert)
            .await?;
        self.answer(&combined)
    }

    /// Answers the client's simple query with a combined result and ReadyForQuery.
    fn answer(&mut self, combined: &Combined) -> Result<(), SessionError> {
        let mut out = BytesMut::new();
        gather::write(combined, &mut out);
        let status = self.session_status();
        protocol::ready_for_query(&mut out, status);
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    fn answer_error(&mut self, e: &impl ClientError) -> Result<(), SessionError> {
        let mut out = BytesMut::new();
        protocol::error_response(
            &mut out,
            Severity::Error,
            &e.sqlstate(),
            &e.client_message(),
        );
        let status = self.session_status();
        protocol::ready_for_query(&mut out, status);
        self.pipeline
            .push(Pending::composed(out.freeze()), &mut self.cout);
        Ok(())
    }

    /// Runs work on the connections of `shards` (joining them to the session's block or
    /// batch), noting each one's transaction status after.
    async fn run_on_shards(
        &mut self,
        shards: &[ShardId],
        work: Work<'_>,
        combine: &Combine,
    ) -> Result<Combined, SessionError> {
        let order = self.connections_for(shards).await?;
        self.announce_running();
        let mut parked: Vec<Option<&mut Parked>> = self.parked.iter_mut().map(Some).collect();
        let mut conns: Vec<&mut crate::backend::BackendConn> = Vec::with_capacity(order.len());
        for &i in &order {
            if let Some(p) = parked[i].take() {
                conns.push(&mut *p.conn.conn);
            }
        }
        let origin = gather::Origin {
            shards,
            control: &self.ctx.control,
        };
        let result = match work {
            Work::Simple(sql) => gather::run_simple(&mut conns, sql, combine, &origin).await,
            Work::Batches(m) => gather::run_batches(&mut conns, m, combine, &origin).await,
        };
        drop(conns);
        self.cancel.slot.set_others(Vec::new());
        match result {
            Ok((combined, statuses)) => {
                for (&i, status) in order.iter().zip(statuses) {
                    self.parked[i].tx_status = status;
                }
                Ok(combined)
            }
            Err(e) => {
                for &i in &order {
                    self.parked[i].conn.conn.broken = true;
                }
                Err(e.into())
            }
        }
    }
}

/// What [`Session::run_on_shards`] sends each shard.
enum Work<'a> {
    Simple(&'a [String]),
    Batches(&'a [BytesMut]),
}
