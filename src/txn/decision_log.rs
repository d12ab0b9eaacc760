//! The decision log, `shardwire_catalog.txn_decision`: a distributed transaction is committed
//! exactly when a `commit` row for its gid exists. The gid is the primary key, so the coordinator's
//! `commit` and recovery's `abort` cannot both be recorded: whichever is inserted first wins.

use std::time::Duration;

use tokio_postgres::Client;

use super::control::{ConnectError, ControlClient, ControlPools};
use super::error::TxnError;
use super::gid::Gid;

/// Serializes concurrent creation of the schema by several proxies (`CREATE … IF NOT EXISTS`
/// can still fail on a race). The value is arbitrary, fixed for all shardwire versions.
const CREATE_LOCK_KEY: i64 = 0x7368_6172_6477_6972; // "shardwir"

/// What was decided for a gid.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Decision {
    Commit,
    Abort,
}

impl Decision {
    fn as_sql(self) -> &'static str {
        match self {
            Decision::Commit => "commit",
            Decision::Abort => "abort",
        }
    }

    fn from_sql(text: &str) -> Option<Decision> {
        match text {
            "commit" => Some(Decision::Commit),
            "abort" => Some(Decision::Abort),
            _ => None,
        }
    }
}

impl std::fmt::Display for Decision {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(self.as_sql())
    }
}

/// One row of the log.
#[derive(Debug, Clone)]
pub struct DecisionRecord {
    pub gid: Gid,
    pub decision: Decision,
    /// Shard names; empty for an `abort` record written by recovery, which cannot know them.
    pub participants: Vec<String>,
    /// Older than the retention period given to [`list`].
    pub expired: bool,
}

/// Creates the schema, this table and the lease table unless they exist. Until the catalog's migrations own the table,
/// every proxy calls this at start.
pub async fn ensure_decision_log(pools: &ControlPools) -> Result<(), TxnError> {
    let fail = |e: ConnectError| TxnError::DecisionLog { source: e };
    let mut conn = pools.catalog().get().await.map_err(fail)?;
    let tx = conn.transaction().await.map_err(|e| fail(e.into()))?;
    tx.execute("SELECT pg_advisory_xact_lock($1)", &[&CREATE_LOCK_KEY])
        .await
        .map_err(|e| fail(e.into()))?;
    tx.batch_execute(
        "CREATE SCHEMA IF NOT EXISTS shardwire_catalog;
         CREATE TABLE IF NOT EXISTS shardwire_catalog.txn_decision (
             gid text PRIMARY KEY,
             decision text NOT NULL CHECK (decision IN ('commit', 'abort')),
             participants text[],
             created_at timestamptz DEFAULT now()
         );",
    )
    .await
    .map_err(|e| fail(e.into()))?;
    tx.batch_execute(super::lease::CREATE_TABLE)
        .await
        .map_err(|e| fail(e.into()))?;
    tx.commit().await.map_err(|e| fail(e.into()))
}

/// What the decision point found.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub(crate) enum CommitRecord {
    /// `commit` is recorded: the transaction commits.
    Recorded,
    /// A decision for the gid existed already: recovery's `abort`.
    AlreadyDecided,
    /// The coordinator's lease had expired (or is gone): nothing was recorded.
    LeaseExpired,
}

/// The decision record of a commit: inserted unless a decision for the gid exists or the lease
/// of the incarnation that made the gid has expired (then no row is). The coordinator runs it
/// on its own; a participant whose database is the catalog's may run it inside its own
/// transaction, whose COMMIT is then the commit point: the row becomes visible with that
/// participant's writes or not at all, and recovery's `abort` for the gid waits on it.
pub(crate) const COMMIT_RECORD: &str =
    "INSERT INTO shardwire_catalog.txn_decision (gid, decision, participants) \
     SELECT $1, $2, $3 WHERE EXISTS ( \
         SELECT 1 FROM shardwire_catalog.proxy_lease \
         WHERE cluster = $4 AND proxy = $5 AND epoch = $6 \
           AND expires_at > clock_timestamp()) \
     ON CONFLICT (gid) DO NOTHING";

/// [`COMMIT_RECORD`]'s parameters as text; None for a gid whose epoch the table cannot hold.
pub(crate) fn commit_record_params(gid: &Gid, participants: &[String]) -> Option<Vec<String>> {
    let epoch = i64::try_from(gid.epoch).ok()?;
    Some(vec![
        gid.to_string(),
        Decision::Commit.as_sql().to_string(),
        crate::sql::quote::text_array(participants.iter().map(String::as_str)),
        gid.cluster.as_str().to_string(),
        gid.proxy.as_str().to_string(),
        epoch.to_string(),
    ])
}

/// The decision point: records `commit` unless a decision for `gid` exists or the lease of the
/// incarnation that made `gid` has expired — one statement, so that no commit can be recorded
/// once recovery elsewhere may consider the coordinator gone. The expiry is compared with
/// `clock_timestamp()`, not `now()`: a statement held up on a lock must not decide by the time
/// it was sent.
pub(crate) async fn record_commit(
    client: &ControlClient,
    gid: &Gid,
    participants: &[String],
) -> Result<CommitRecord, tokio_postgres::Error> {
    let Ok(epoch) = i64::try_from(gid.epoch) else {
        return Ok(CommitRecord::LeaseExpired);
    };
    let record = client.prepared(COMMIT_RECORD).await?;
    let inserted = client
        .execute(
            &record,
            &[
                &gid.to_string(),
                &Decision::Commit.as_sql(),
                &participants,
                &gid.cluster.as_str(),
                &gid.proxy.as_str(),
                &epoch,
            ],
        )
        .await?;
    if inserted == 1 {
        return Ok(CommitRecord::Recorded);
    }
    // Nothing was recorded, so the transaction rolls back whichever the reason; this only
    // names it. Only this coordinator records `commit` for its gid, so a record found is
    // recovery's `abort`.
    Ok(match lookup(client, gid).await? {
        Some(_) => CommitRecord::AlreadyDecided,
        None => CommitRecord::LeaseExpired,
    })
}

/// Records `abort` unless a decision exists, then returns the decision that holds.
pub(crate) async fn decide_abort_unless_decided(
    client: &Client,
    gid: &Gid,
) -> Result<Decision, tokio_postgres::Error> {
    client
        .execute(
            "INSERT INTO shardwire_catalog.txn_decision (gid, decision) VALUES ($1, $2) \
             ON CONFLICT (gid) DO NOTHING",
            &[&gid.to_string(), &Decision::Abort.as_sql()],
        )
        .await?;
    let row = client
        .query_one(
            "SELECT decision FROM shardwire_catalog.txn_decision WHERE gid = $1",
            &[&gid.to_string()],
        )
        .await?;
    // The CHECK constraint admits nothing else; should it ever, not committing is the safe side.
    Ok(Decision::from_sql(row.get(0)).unwrap_or(Decision::Abort))
}

/// The decision for `gid`, if one is recorded.
pub async fn lookup(client: &Client, gid: &Gid) -> Result<Option<Decision>, tokio_postgres::Error> {
    let row = client
        .query_opt(
            "SELECT decision FROM shardwire_catalog.txn_decision WHERE gid = $1",
            &[&gid.to_string()],
        )
        .await?;
    Ok(row.and_then(|r| Decision::from_sql(r.get(0))))
}

/// Deletes the records of `gids` (finished transactions), in one statement. One record, the
/// common case, has a statement of its own: PostgreSQL keeps a generic plan for it, while it
/// plans the array form again at every execution.
pub(crate) async fn delete(
    client: &ControlClient,
    gids: &[Gid],
) -> Result<(), tokio_postgres::Error> {
    if let [gid] = gids {
        let delete = client
            .prepared("DELETE FROM shardwire_catalog.txn_decision WHERE gid = $1")
            .await?;
        return client.execute(&delete, &[&gid.to_string()]).await.map(drop);
    }
    let delete = client
        .prepared("DELETE FROM shardwire_catalog.txn_decision WHERE gid = ANY($1)")
        .await?;
    let gids: Vec<String> = gids.iter().map(Gid::to_string).collect();
    client.execute(&delete, &[&gids]).await.map(drop)
}

/// Every record whose gid is a shardwire gid; `expired` says whether it is older than
/// `retention` by the catalog's own clock.
pub async fn list(
    client: &Client,
    retention: Duration,
) -> Result<Vec<DecisionRecord>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT gid, decision, coalesce(participants, '{}'), \
                    coalesce(created_at < now() - make_interval(secs => $1), true) \
             FROM shardwire_catalog.txn_decision",
            &[&retention.as_secs_f64()],
        )
        .await?;
    Ok(rows
        .iter()
        .filter_map(|row| {
            Some(DecisionRecord {
                gid: Gid::parse(row.get(0)).ok()?,
                decision: Decision::from_sql(row.get(1))?,
                participants: row.get(2),
                expired: row.get(3),
            })
        })
        .collect())
}
