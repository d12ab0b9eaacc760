//! The logical replication of a chunk move: a publication of exactly the chunk's partitions
//! on the source, a subscription with `copy_data` on the target (its slot on the source has
//! the subscription's name), and the tests of how far the target has come.

use tokio_postgres::Client;

use crate::model::MoveId;
use crate::sql::quote::{quote_ident, quote_literal};
use crate::txn::gid::ClusterTag;

/// The names a move gives its publication, subscription and replication slot, and the
/// prepared halves of its cutover: `shardwire_move_<cluster>_<id>`, so the moves of proxies on
/// different catalogs (whose ids repeat) never share a name on a shard.
pub(super) struct Names {
    pub publication: String,
    pub subscription: String,
}

/// Which shard's half of the cutover a prepared transaction holds.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(super) enum Half {
    /// The target's attach of the chunk's tables.
    Target,
    /// The source's detach and drop of its partitions.
    Source,
}

impl Names {
    pub fn of(cluster: &ClusterTag, id: MoveId) -> Names {
        let base = format!("shardwire_move_{}_{id}", cluster.as_str());
        Names {
            publication: base.clone(),
            subscription: base,
        }
    }

    /// The name a cutover's half is prepared under (never a shardwire gid, so the distributed
    /// transactions' recovery leaves it alone).
    pub fn prepared(&self, half: Half) -> String {
        match half {
            Half::Target => format!("{}_target", self.subscription),
            Half::Source => format!("{}_source", self.subscription),
        }
    }
}

/// Publishes `parts` (quoted, qualified) on the source.
pub(super) async fn publish(
    source: &Client,
    names: &Names,
    parts: &[String],
) -> Result<(), tokio_postgres::Error> {
    source
        .batch_execute(&format!(
            "CREATE PUBLICATION {} FOR TABLE {}",
            quote_ident(&names.publication),
            parts.join(", ")
        ))
        .await
}

/// Subscribes the target to the source's publication, copying the rows there first. Creating
/// the slot waits for the source's open transactions to end, as PostgreSQL's does.
pub(super) async fn subscribe(
    target: &Client,
    names: &Names,
    source_conninfo: &str,
) -> Result<(), tokio_postgres::Error> {
    target
        .batch_execute(&format!(
            "CREATE SUBSCRIPTION {} CONNECTION {} PUBLICATION {} WITH (copy_data = true, synchronous_commit = on)",
            quote_ident(&names.subscription),
            quote_literal(source_conninfo),
            quote_ident(&names.publication),
        ))
        .await
}

/// Where the target's initial copy stands.
pub(super) enum Synced {
    Copying,
    /// Every table copied; changes are applied as they come.
    Ready,
    /// The target logged an error copying a table.
    Failed,
}

/// Where the target's copy of `tables` tables stands.
pub(super) async fn synced(
    target: &Client,
    names: &Names,
    tables: usize,
) -> Result<Synced, tokio_postgres::Error> {
    let row = target
        .query_one(
            "SELECT count(*) FILTER (WHERE r.srsubstate = 'r'),
                    coalesce(max(st.sync_error_count), 0)
               FROM pg_catalog.pg_subscription s
               LEFT JOIN pg_catalog.pg_subscription_rel r ON r.srsubid = s.oid
               LEFT JOIN pg_catalog.pg_stat_subscription_stats st ON st.subid = s.oid
              WHERE s.subname = $1",
            &[&names.subscription],
        )
        .await?;
    let ready: i64 = row.get(0);
    let errors: i64 = row.get(1);
    Ok(if errors > 0 {
        Synced::Failed
    } else if ready as usize >= tables {
        Synced::Ready
    } else {
        Synced::Copying
    })
}

/// Whether the target has confirmed every change up to `lsn` (text) of the source.
pub(super) async fn caught_up(
    source: &Client,
    names: &Names,
    lsn: &str,
) -> Result<bool, tokio_postgres::Error> {
    let row = source
        .query_opt(
            "SELECT confirmed_flush_lsn >= $2::text::pg_lsn FROM pg_catalog.pg_replication_slots
              WHERE slot_name = $1",
            &[&names.subscription, &lsn],
        )
        .await?;
    Ok(row.and_then(|r| r.get::<_, Option<bool>>(0)) == Some(true))
}

/// The WAL bytes the source has written and the subscription has not confirmed; `None` before
/// its slot exists.
pub(super) async fn lag_bytes(
    source: &Client,
    names: &Names,
) -> Result<Option<i64>, tokio_postgres::Error> {
    let row = source
        .query_opt(
            "SELECT pg_catalog.pg_wal_lsn_diff(pg_catalog.pg_current_wal_lsn(), confirmed_flush_lsn)::bigint
               FROM pg_catalog.pg_replication_slots WHERE slot_name = $1",
            &[&names.subscription],
        )
        .await?;
    Ok(row.and_then(|r| r.get::<_, Option<i64>>(0)))
}

pub(super) async fn set_enabled(
    target: &Client,
    names: &Names,
    enabled: bool,
) -> Result<(), tokio_postgres::Error> {
    target
        .batch_execute(&format!(
            "ALTER SUBSCRIPTION {} {}",
            quote_ident(&names.subscription),
            if enabled { "ENABLE" } else { "DISABLE" }
        ))
        .await
}

/// Drops the subscription (and with it its slot on the source), if it is there.
pub(super) async fn unsubscribe(
    target: &Client,
    names: &Names,
) -> Result<(), tokio_postgres::Error> {
    target
        .batch_execute(&format!(
            "DROP SUBSCRIPTION IF EXISTS {}",
            quote_ident(&names.subscription)
        ))
        .await
}

/// Drops the publication and any slot of the move left on the source (a subscription dropped
/// while the source was down leaves its slot, which would keep WAL forever).
pub(super) async fn unpublish(source: &Client, names: &Names) -> Result<(), tokio_postgres::Error> {
    source
        .batch_execute(&format!(
            "DROP PUBLICATION IF EXISTS {}",
            quote_ident(&names.publication)
        ))
        .await?;
    source
        .execute(
            "SELECT pg_catalog.pg_drop_replication_slot(slot_name)
               FROM pg_catalog.pg_replication_slots WHERE slot_name = $1 AND NOT active",
            &[&names.subscription],
        )
        .await?;
    Ok(())
}
