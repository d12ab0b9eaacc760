//! How a chunk move ends, whoever ends it (the proxy that ran it, or another that took it over
//! when that one died): finished when the catalog gave the chunk to the target, undone
//! otherwise. Every step is idempotent: a move settled halfway is settled again from the start.

use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::plan::{Level, Plan};
use super::replication::{self, Half, Names};
use super::{Growth, GrowthError};
use crate::catalog::MoveRecord;
use crate::model::{MoveId, MoveState, ShardId};
use crate::sql::quote::{quote_ident, quote_literal};
use crate::txn::control::ControlConn;

/// Ends a move that stopped short: finished when the catalog gave the chunk to the target,
/// undone otherwise and recorded `unfinished` (with `error`). A record that cannot be read
/// leaves everything as it is, for recovery to settle: nothing is undone on a guess. The state
/// it ended in.
pub(super) async fn settle(
    g: &Growth,
    plan: &Plan,
    id: MoveId,
    unfinished: MoveState,
    error: Option<&str>,
) -> Option<MoveState> {
    let ended = match g.catalog.move_record(id).await {
        Ok(Some(r)) if r.state == MoveState::CleaningUp => finish_handed_over(g, plan, id)
            .await
            .map(|()| MoveState::Done),
        Ok(Some(r)) if r.state.is_finished() => return Some(r.state),
        Ok(_) => undo(g, plan, id).await.map(|()| unfinished),
        Err(unread) => {
            tracing::warn!(move_id = %id, error = %unread, "chunk move stopped; its record could not be read");
            return None;
        }
    };
    let state = match ended {
        Ok(MoveState::Done) if kept_prefix(g, id).is_some() => {
            return keep_source(g, id)
                .await
                .ok()
                .map(|()| MoveState::CleaningUp);
        }
        Ok(state) => state,
        Err(e) => {
            // Left as recorded: recovery settles it again later.
            tracing::warn!(move_id = %id, error = %e, "chunk move: settling failed");
            return None;
        }
    };
    if let Err(e) = g.catalog.set_move_state(id, state, error).await {
        tracing::warn!(move_id = %id, error = %e, "chunk move: state not recorded");
        return None;
    }
    g.count_ended(state);
    match error {
        Some(error) => tracing::warn!(move_id = %id, %state, error, "chunk move stopped"),
        None => tracing::info!(move_id = %id, %state, "chunk move settled"),
    }
    Some(state)
}

/// Records how long the source's kept tables of handed-over move `id` stay: it is CLEANING_UP
/// until recovery drops them.
pub(super) async fn keep_source(g: &Growth, id: MoveId) -> Result<(), GrowthError> {
    let keep = std::time::Duration::from_millis(g.config.moves.keep_source_ms);
    g.catalog.keep_move_source(id, keep).await?;
    tracing::info!(move_id = %id, keep_ms = keep.as_millis() as u64,
        "chunk move: the source's tables are kept");
    Ok(())
}

/// Commits or rolls back the prepared transaction `gid` if it is still there; nothing when it
/// is not (settled before, here or by another proxy a moment ago).
pub(super) async fn end_prepared(
    client: &Client,
    gid: &str,
    commit: bool,
) -> Result<(), tokio_postgres::Error> {
    let prepared = client
        .query_opt(
            "SELECT 1 FROM pg_catalog.pg_prepared_xacts
              WHERE gid = $1 AND database = current_database()",
            &[&gid],
        )
        .await?
        .is_some();
    if !prepared {
        return Ok(());
    }
    let verb = if commit { "COMMIT" } else { "ROLLBACK" };
    match client
        .batch_execute(&format!("{verb} PREPARED {}", quote_literal(gid)))
        .await
    {
        Err(e) if e.code() != Some(&SqlState::UNDEFINED_OBJECT) => Err(e),
        _ => Ok(()),
    }
}

/// Commits or rolls back a move's half that is still prepared.
async fn settle_prepared(
    client: &Client,
    names: &Names,
    half: Half,
    commit: bool,
) -> Result<(), tokio_postgres::Error> {
    end_prepared(client, &names.prepared(half), commit).await
}

/// Drops what the move made for the copy: the subscription (with its slot) and the
/// publication.
pub(super) async fn clean_up(g: &Growth, plan: &Plan, id: MoveId) -> Result<(), GrowthError> {
    let names = Names::of(&g.me.cluster, id);
    let target = connect(g, plan.target, &plan.target_name).await?;
    replication::unsubscribe(&target, &names)
        .await
        .map_err(on(&plan.target_name))?;
    let source = connect(g, plan.source, &plan.source_name).await?;
    replication::unpublish(&source, &names)
        .await
        .map_err(on(&plan.source_name))?;
    Ok(())
}

/// After the catalog gave the chunk to the target: both prepared halves committed, the source's
/// partitions gone (removed again if they are still there), then the clean-up.
pub(super) async fn finish_handed_over(
    g: &Growth,
    plan: &Plan,
    id: MoveId,
) -> Result<(), GrowthError> {
    let target = connect(g, plan.target, &plan.target_name).await?;
    settle_prepared(&target, &Names::of(&g.me.cluster, id), Half::Target, true)
        .await
        .map_err(on(&plan.target_name))?;
    let source = connect(g, plan.source, &plan.source_name).await?;
    settle_prepared(&source, &Names::of(&g.me.cluster, id), Half::Source, true)
        .await
        .map_err(on(&plan.source_name))?;
    if has_chunk_tables(&source, plan)
        .await
        .map_err(on(&plan.source_name))?
    {
        let parents: Vec<&str> = plan.levels.iter().map(|l| l.parent.as_str()).collect();
        let lock = format!(
            "BEGIN; LOCK TABLE {} IN ACCESS EXCLUSIVE MODE",
            parents.join(", ")
        );
        let keep = kept_prefix(g, id);
        in_transaction(&source, &lock, plan, keep.as_deref())
            .await
            .map_err(on(&plan.source_name))?;
    }
    clean_up(g, plan, id).await
}

/// Removes everything a move made before the catalog gave the chunk away: the prepared halves
/// rolled back, the replication objects dropped, the target's tables (detached first if an
/// attach went through) dropped.
pub(super) async fn undo(g: &Growth, plan: &Plan, id: MoveId) -> Result<(), GrowthError> {
    let target = connect(g, plan.target, &plan.target_name).await?;
    settle_prepared(&target, &Names::of(&g.me.cluster, id), Half::Target, false)
        .await
        .map_err(on(&plan.target_name))?;
    let source = connect(g, plan.source, &plan.source_name).await?;
    settle_prepared(&source, &Names::of(&g.me.cluster, id), Half::Source, false)
        .await
        .map_err(on(&plan.source_name))?;
    drop(source);
    clean_up(g, plan, id).await?;
    in_transaction(&target, "BEGIN", plan, None)
        .await
        .map_err(on(&plan.target_name))
}

/// `begin`, then the removal of the chunk's tables, committed (rolled back on failure, so the
/// connection goes back to its pool outside any transaction).
async fn in_transaction(
    client: &Client,
    begin: &str,
    plan: &Plan,
    keep: Option<&str>,
) -> Result<(), tokio_postgres::Error> {
    let removed = async {
        client.batch_execute(begin).await?;
        remove_chunk_tables(client, plan, keep).await?;
        client.batch_execute("COMMIT").await
    }
    .await;
    if removed.is_err() {
        let _ = client.batch_execute("ROLLBACK").await;
    }
    removed
}

/// Whether any of the chunk's tables is on `client`'s shard.
async fn has_chunk_tables(client: &Client, plan: &Plan) -> Result<bool, tokio_postgres::Error> {
    let parts = plan.parts();
    Ok(client
        .query_one(
            "SELECT bool_or(pg_catalog.to_regclass(p) IS NOT NULL) FROM unnest($1::text[]) p",
            &[&parts],
        )
        .await?
        .get::<_, Option<bool>>(0)
        .unwrap_or(false))
}

/// Detaches (where still attached) and drops the chunk's partitions, children first, and the
/// family's tables if no chunk of it is left there, in the caller's transaction, which holds the
/// family's lock. With `keep`, a name prefix, the partitions are kept instead as plain tables
/// named `<keep><level>`, without the foreign keys and defaults that tie them to the family.
/// Run again, it finds nothing to do.
pub(super) async fn remove_chunk_tables(
    client: &Client,
    plan: &Plan,
    keep: Option<&str>,
) -> Result<(), tokio_postgres::Error> {
    for (i, level) in plan.levels.iter().enumerate().rev() {
        let attached: bool = client
            .query_one(
                "SELECT EXISTS (SELECT 1 FROM pg_catalog.pg_inherits
                                 WHERE inhrelid = pg_catalog.to_regclass($1))",
                &[&level.part],
            )
            .await?
            .get(0);
        if attached {
            client
                .batch_execute(&format!(
                    "ALTER TABLE {} DETACH PARTITION {}",
                    level.parent, level.part
                ))
                .await?;
        }
        match keep {
            None => {
                client
                    .batch_execute(&format!("DROP TABLE IF EXISTS {}", level.part))
                    .await?
            }
            Some(prefix) => keep_as(client, level, &format!("{prefix}{i}")).await?,
        }
    }
    super::family_schema::drop_family_if_empty(client, plan).await
}

/// Renames a detached partition to `name` and cuts what ties it to the family ([`cut_ties`]: a
/// parent's partition detaches only when no table references its rows).
async fn keep_as(client: &Client, level: &Level, name: &str) -> Result<(), tokio_postgres::Error> {
    if client
        .query_one("SELECT pg_catalog.to_regclass($1) IS NULL", &[&level.part])
        .await?
        .get(0)
    {
        return Ok(());
    }
    let kept = format!("{}.{}", level.schema, quote_ident(name));
    client
        .batch_execute(&format!(
            "ALTER TABLE {} RENAME TO {}",
            level.part,
            quote_ident(name)
        ))
        .await?;
    cut_ties(client, &kept).await
}

/// Drops what ties a detached partition `table` (quoted and qualified) to its family: its
/// foreign keys, and its defaults (the family's sequences, which the family's drop would
/// otherwise refuse to take along).
pub(super) async fn cut_ties(client: &Client, table: &str) -> Result<(), tokio_postgres::Error> {
    let ties = client
        .query(
            "SELECT format('DROP CONSTRAINT IF EXISTS %I', conname) FROM pg_catalog.pg_constraint
              WHERE conrelid = $1::text::regclass AND contype = 'f' AND conparentid = 0
             UNION ALL
             SELECT format('ALTER COLUMN %I DROP DEFAULT', attname) FROM pg_catalog.pg_attribute
              WHERE attrelid = $1::text::regclass AND atthasdef AND attnum > 0
                AND NOT attisdropped AND attgenerated = ''",
            &[&table],
        )
        .await?;
    for tie in ties {
        let action: String = tie.get(0);
        client
            .batch_execute(&format!("ALTER TABLE {table} {action}"))
            .await?;
    }
    Ok(())
}

/// The name prefix of the source tables move `id` keeps, when `[moves] keep_source_ms` keeps
/// them.
pub(super) fn kept_prefix(g: &Growth, id: MoveId) -> Option<String> {
    (g.config.moves.keep_source_ms > 0)
        .then(|| format!("shardwire_kept_{}_{id}_", g.me.cluster.as_str()))
}

/// Drops the source tables a finished move kept, once their time is up, and records the move
/// DONE; any proxy may, and again.
pub(super) async fn drop_kept(g: &Growth, m: &MoveRecord) -> Result<(), GrowthError> {
    let shard = g
        .catalog
        .snapshot()
        .shard_by_name(&m.source)
        .ok_or_else(|| GrowthError::NoSuchShard(m.source.clone()))?
        .id;
    let source = connect(g, shard, &m.source).await?;
    let prefix = format!("shardwire_kept_{}_{}_", m.owner.cluster, m.id);
    let kept = source
        .query(
            "SELECT c.oid::regclass::text FROM pg_catalog.pg_class c
              WHERE c.relkind = 'r' AND starts_with(c.relname, $1)",
            &[&prefix],
        )
        .await
        .map_err(on(&m.source))?;
    for table in kept {
        let table: String = table.get(0);
        source
            .batch_execute(&format!("DROP TABLE IF EXISTS {table}"))
            .await
            .map_err(on(&m.source))?;
    }
    g.catalog
        .set_move_state(m.id, MoveState::Done, None)
        .await?;
    tracing::info!(move_id = %m.id, "chunk move: the source's kept tables dropped");
    Ok(())
}

pub(super) async fn connect<'g>(
    g: &'g Growth,
    shard: ShardId,
    name: &str,
) -> Result<ControlConn<'g>, GrowthError> {
    g.control
        .shard(shard)
        .pool
        .get()
        .await
        .map_err(|source| GrowthError::Connect {
            shard: name.to_string(),
            source,
        })
}

pub(super) fn on(shard: &str) -> impl Fn(tokio_postgres::Error) -> GrowthError + '_ {
    move |source| GrowthError::Shard {
        shard: shard.to_string(),
        source,
    }
}
