//! The background purge of expired rows of Oracle NoSQL tables. Readers never see an expired
//! row (each shard's view hides it, [`crate::ddl::ttl`]); the purge gives the space back. Every
//! `[ttl] purge_interval_ms`, for each NoSQL table on each of its shards, it deletes expired rows
//! in batches of at most `purge_batch_rows`, each batch its own short transaction, until a batch
//! comes back short. Several proxies may purge at once: a row is deleted once whoever gets it.

use std::future::Future;

use crate::catalog::{Catalog, Table};
use crate::config::TtlConfig;
use crate::ddl::model::QualifiedName;
use crate::ddl::ttl;
use crate::metrics::Metrics;
use crate::model::ShardId;
use crate::txn::ControlPools;

/// What the purge works with.
pub struct Purge<'a> {
    pub catalog: &'a Catalog,
    pub control: &'a ControlPools,
    pub config: &'a TtlConfig,
    pub metrics: &'a Metrics,
}

impl Purge<'_> {
    /// Purges every interval until `stop` completes.
    pub async fn run_until(&self, stop: impl Future<Output = ()>) {
        tokio::pin!(stop);
        let period = std::time::Duration::from_millis(self.config.purge_interval_ms);
        let mut ticks = tokio::time::interval(period);
        ticks.set_missed_tick_behavior(tokio::time::MissedTickBehavior::Delay);
        loop {
            tokio::select! {
                _ = &mut stop => return,
                _ = ticks.tick() => {}
            }
            tokio::select! {
                _ = &mut stop => return,
                _ = self.pass() => {}
            }
        }
    }

    /// One pass over every NoSQL table and shard.
    async fn pass(&self) {
        let snapshot = self.catalog.snapshot();
        for table in snapshot.tables().iter().filter(|t| t.nosql) {
            if !table.state.takes_statements() {
                continue;
            }
            for shard in snapshot.shards_of(table.id) {
                match self.purge(table, shard).await {
                    Ok(0) => {}
                    Ok(rows) => tracing::info!(
                        table = %table.qualified_name(), shard = shard.index(), rows,
                        "purged expired rows"
                    ),
                    Err(e) => tracing::warn!(
                        table = %table.qualified_name(), shard = shard.index(), error = %e,
                        "cannot purge expired rows; the next pass tries again"
                    ),
                }
            }
        }
    }

    async fn purge(&self, table: &Table, shard: ShardId) -> Result<u64, String> {
        let view = QualifiedName::new(&table.schema, &table.name);
        let primary_key: Vec<&str> = table.primary_key.iter().map(|k| k.name.as_str()).collect();
        let batch = self.config.purge_batch_rows;
        let statement = ttl::purge_statement(&view, &primary_key, batch);
        let client = self
            .control
            .shard(shard)
            .pool
            .get()
            .await
            .map_err(|e| e.to_string())?;
        let mut total = 0;
        loop {
            let rows = client
                .execute(statement.as_str(), &[])
                .await
                .map_err(|e| e.to_string())?;
            self.metrics.ttl_purged(shard, rows);
            total += rows;
            if rows < u64::from(batch) {
                return Ok(total);
            }
        }
    }
}
