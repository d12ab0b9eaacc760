//! The catalog's schema in the catalog database: the connection to it, its migrations, and the
//! configuration's shards, tablespace sets and tablespaces written into it at startup.

use std::time::Duration;

use tokio_postgres::{Client, Transaction};

use super::store::{bump_version, insert_set_members};
use super::CatalogError;
use crate::config::{Config, Endpoint};

/// Migration n is `MIGRATIONS[n - 1]`; add the next one at the end. Each runs in the
/// transaction that records it, so a migration is applied entirely or not at all.
const MIGRATIONS: &[&str] = &[
    include_str!("migrations/0001_initial.sql"),
    include_str!("migrations/0002_primary_key.sql"),
    include_str!("migrations/0003_key_sequences.sql"),
    include_str!("migrations/0004_nosql.sql"),
    include_str!("migrations/0005_update_holder.sql"),
    include_str!("migrations/0006_views.sql"),
    include_str!("migrations/0007_moves.sql"),
    include_str!("migrations/0008_split_chunks.sql"),
];

/// Key of the transaction-level advisory lock that serializes proxies migrating the same catalog
/// at once ("shardwir" in ASCII, so an operator can recognise it in pg_locks).
const MIGRATION_LOCK: i64 = 0x7368_6172_6477_6972;

/// Connects to the catalog database; the connection runs on its own task, logging how it ended.
pub(super) async fn connect(
    endpoint: &Endpoint,
    timeout: Duration,
) -> Result<Client, CatalogError> {
    let mut config = endpoint.pg_config();
    config.connect_timeout(timeout);
    let (client, connection) = config
        .connect(endpoint.postgres_tls())
        .await
        .map_err(|source| CatalogError::Connect {
            endpoint: endpoint.to_string(),
            source,
        })?;
    tokio::spawn(async move {
        if let Err(e) = connection.await {
            tracing::warn!(error = %e, "catalog connection ended");
        }
    });
    Ok(client)
}

/// Brings the schema to the newest migration and records the configuration's shards, tablespace
/// sets and tablespaces, all in one transaction under an advisory lock, so proxies starting at
/// once apply each migration exactly once.
pub(super) async fn migrate_and_sync(
    client: &mut Client,
    config: &Config,
) -> Result<(), CatalogError> {
    let tx = client.transaction().await?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&MIGRATION_LOCK])
        .await?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS shardwire_catalog;
         CREATE TABLE IF NOT EXISTS shardwire_catalog.schema_version (
             version integer PRIMARY KEY,
             applied_at timestamptz NOT NULL DEFAULT now()
         );",
    )
    .await?;
    let applied: i32 = tx
        .query_one(
            "SELECT coalesce(max(version), 0) FROM shardwire_catalog.schema_version",
            &[],
        )
        .await?
        .get(0);
    let known = MIGRATIONS.len() as i32;
    if applied > known {
        // A newer proxy migrated this catalog; migrations only add, so keep going.
        tracing::warn!(
            applied,
            known,
            "the catalog schema is newer than this shardwire"
        );
    }
    for (version, sql) in (1..).zip(MIGRATIONS).skip(applied.max(0) as usize) {
        tracing::info!(version, "applying catalog migration");
        tx.batch_execute(sql).await?;
        tx.execute(
            "INSERT INTO shardwire_catalog.schema_version (version) VALUES ($1)",
            &[&version],
        )
        .await?;
    }
    if sync_config(&tx, config).await? {
        bump_version(&tx).await?;
    }
    tx.commit().await?;
    Ok(())
}

/// Records the configured shards, tablespaces and tablespace sets; whether anything changed.
/// The configuration is authoritative for what it names; entries it does not name are kept,
/// since other proxies' configurations may name them.
async fn sync_config(tx: &Transaction<'_>, config: &Config) -> Result<bool, CatalogError> {
    let mut changed = 0;
    for shard in &config.shards {
        changed += tx
            .execute(
                "INSERT INTO shardwire_catalog.shard (name) VALUES ($1) ON CONFLICT DO NOTHING",
                &[&shard.name],
            )
            .await?;
    }
    for ts in &config.tablespaces {
        changed += tx
            .execute(
                "INSERT INTO shardwire_catalog.tablespace AS t (name, shard) VALUES ($1, $2)
                 ON CONFLICT (name) DO UPDATE SET shard = excluded.shard
                 WHERE t.shard <> excluded.shard",
                &[&ts.name, &ts.shard],
            )
            .await?;
    }
    for set in &config.tablespace_sets {
        let inserted = tx
            .query_opt(
                "INSERT INTO shardwire_catalog.tablespace_set (name) VALUES ($1)
                 ON CONFLICT DO NOTHING RETURNING id",
                &[&set.name],
            )
            .await?;
        let id: i64 = match inserted {
            Some(row) => row.get(0),
            None => tx
                .query_one(
                    "SELECT id FROM shardwire_catalog.tablespace_set WHERE name = $1",
                    &[&set.name],
                )
                .await?
                .get(0),
        };
        let current: Vec<String> = tx
            .query_one(
                "SELECT coalesce(array_agg(shard ORDER BY position), '{}')
                 FROM shardwire_catalog.tablespace_set_shard WHERE set_id = $1",
                &[&id],
            )
            .await?
            .get(0);
        if current != set.shards {
            tx.execute(
                "DELETE FROM shardwire_catalog.tablespace_set_shard WHERE set_id = $1",
                &[&id],
            )
            .await?;
            insert_set_members(tx, id, &set.shards).await?;
            changed += 1;
        }
    }
    Ok(changed > 0)
}
