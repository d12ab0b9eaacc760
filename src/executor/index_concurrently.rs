//! `CREATE INDEX CONCURRENTLY`, `DROP INDEX CONCURRENTLY` and `REINDEX INDEX … CONCURRENTLY`
//! on recorded tables (docs/behaviour.md, "CONCURRENTLY index DDL on recorded tables"). None of
//! them can run inside the two-phase commit other DDL uses, so each shard runs them on its own,
//! all shards at once.
//!
//! PostgreSQL cannot build an index CONCURRENTLY on a partitioned table, which every sharded
//! table is on its shards, so CREATE follows the recipe of PostgreSQL's documentation: every
//! partition's index built CONCURRENTLY, then, once every shard has built all of its own, the
//! partitioned tables' indexes made `ON ONLY` (catalog entries, instant) and the partitions'
//! attached, which makes them valid. A failure anywhere removes everything the statement made
//! on every shard, so no shard keeps an index, valid or not, and the client hears the shard's
//! error.

use futures::future::join_all;
use pg_query::protobuf::IndexStmt;

use super::ddl::{self, DdlCtx, ExecError};
use super::index_names;
use super::index_shard::{self as shard, shard_error, ShardTree};
use super::layout;
use crate::ddl::model::QualifiedName;
use crate::model::{ShardId, TableState};
use crate::txn::control::{ControlConn, ControlPool};
use crate::txn::{ShardLabel, TxnError};

/// A shard taking part, with the control session it runs everything on.
struct Part<'c> {
    label: ShardLabel,
    pool: &'c ControlPool,
    conn: ControlConn<'c>,
    tree: ShardTree,
}

async fn connect<'c>(ctx: DdlCtx<'c>, shards: &[ShardId]) -> Result<Vec<Part<'c>>, ExecError> {
    let mut parts = Vec::new();
    for id in shards {
        let shard = ctx.control.shard(*id);
        let conn = shard
            .pool
            .get()
            .await
            .map_err(|e| TxnError::on_shard(&shard.label, e))?;
        parts.push(Part {
            label: shard.label.clone(),
            pool: &shard.pool,
            conn,
            tree: ShardTree {
                members: Vec::new(),
            },
        });
    }
    Ok(parts)
}

/// The first error in shard order, if any.
fn first_error(results: Vec<Result<(), ExecError>>) -> Result<(), ExecError> {
    results.into_iter().find(Result::is_err).unwrap_or(Ok(()))
}

/// `CREATE INDEX CONCURRENTLY` on `table`, a recorded table, on every shard holding it.
pub async fn create(
    ctx: DdlCtx<'_>,
    table: &QualifiedName,
    index: &IndexStmt,
) -> Result<&'static str, ExecError> {
    let snapshot = ddl::fresh_snapshot(ctx).await?;
    let entry = ddl::lookup(&snapshot, table)?;
    ddl::require_active(entry)?;
    let layout = layout::table_layout(&snapshot, entry)?;
    // An Oracle NoSQL table's rows are in its data table, behind the view the user names.
    let target = match layout.nosql {
        true => crate::ddl::ttl::data_table(&layout.name),
        false => layout.name.clone(),
    };
    let mut parts = connect(ctx, &layout.shards).await?;
    let read = join_all(parts.iter_mut().map(|p| async {
        p.tree = ShardTree::read(&p.conn, &target.schema, &target.name)
            .await
            .map_err(|e| shard_error(&p.label, e))?;
        Ok(())
    }))
    .await;
    first_error(read)?;
    let Some(name) = root_name(&mut parts, &target, index).await? else {
        tracing::info!(index = %index.idxname,
            "CREATE INDEX IF NOT EXISTS: exists on every shard, skipping");
        return Ok("CREATE INDEX");
    };
    tracing::info!(table = %target, index = %name, shards = parts.len(),
        "creating index concurrently");
    ctx.catalog
        .begin_update(entry.id, &ddl::update_holder(ctx))
        .await?;
    let built = build(&mut parts, index, &name).await;
    ctx.catalog.set_state(entry.id, TableState::Active).await?;
    built?;
    Ok("CREATE INDEX")
}

/// The index's name on every shard: the one given, or PostgreSQL's choice for it numbered
/// past the names any shard has. `None` when the name given exists everywhere and the
/// statement says IF NOT EXISTS; the shards where it exists then take no part.
async fn root_name(
    parts: &mut Vec<Part<'_>>,
    target: &QualifiedName,
    index: &IndexStmt,
) -> Result<Option<String>, ExecError> {
    if !index.idxname.is_empty() {
        let name = index.idxname.clone();
        let mut keep = Vec::new();
        for p in parts.drain(..) {
            let taken = shard::taken_names(&p.conn, &target.schema, std::slice::from_ref(&name))
                .await
                .map_err(|e| shard_error(&p.label, e))?;
            match (taken.is_empty(), index.if_not_exists) {
                (true, _) => keep.push(p),
                (false, true) => {
                    tracing::info!(shard = %p.label, %name,
                        "index exists; IF NOT EXISTS skips this shard");
                }
                (false, false) => return Err(ExecError::RelationExists { name }),
            }
        }
        *parts = keep;
        return Ok((!parts.is_empty()).then_some(name));
    }
    let addition = index_names::column_addition(index);
    let mut pass = 0;
    loop {
        let batch: Vec<String> = (pass..pass + 10)
            .map(|p| index_names::candidate(&target.name, &addition, p))
            .collect();
        let mut taken = Vec::new();
        for p in parts.iter() {
            taken.extend(
                shard::taken_names(&p.conn, &target.schema, &batch)
                    .await
                    .map_err(|e| shard_error(&p.label, e))?,
            );
        }
        if let Some(free) = batch.into_iter().find(|n| !taken.contains(n)) {
            return Ok(Some(free));
        }
        pass += 10;
    }
}

/// Builds the index on every shard, all at once; on a failure anywhere, removes everything
/// the statement made everywhere.
async fn build(parts: &mut [Part<'_>], index: &IndexStmt, name: &str) -> Result<(), ExecError> {
    let addition = index_names::column_addition(index);
    let built = join_all(parts.iter_mut().map(|p| async {
        p.tree
            .name_indexes(&p.conn, name, &addition)
            .await
            .map_err(|e| shard_error(&p.label, e))?;
        for leaf in p.tree.leaves() {
            let sql = shard::member_statement(index, leaf)?;
            tracing::info!(shard = %p.label, index = %leaf.index, "building");
            shard::run_waiting(&p.conn, &sql)
                .await
                .map_err(|e| shard_error(&p.label, e))?;
        }
        Ok(())
    }))
    .await;
    let mut outcome = first_error(built);
    if outcome.is_ok() {
        let attached = join_all(parts.iter().map(|p| attach(p, index))).await;
        outcome = first_error(attached);
    }
    if let Err(e) = &outcome {
        tracing::warn!(error = %e, index = name,
            "CREATE INDEX CONCURRENTLY failed; removing what it made");
        join_all(parts.iter_mut().map(clean_up)).await;
    }
    outcome
}

/// The partitioned tables' indexes, root first, then every partition's attached, deepest
/// first; the root's index is valid afterwards.
async fn attach(p: &Part<'_>, index: &IndexStmt) -> Result<(), ExecError> {
    let on_shard = |e| shard_error(&p.label, e);
    for member in p.tree.partitioned() {
        let sql = shard::member_statement(index, member)?;
        shard::run_brief(&p.conn, &sql).await.map_err(on_shard)?;
    }
    for sql in p.tree.attachments() {
        shard::run_brief(&p.conn, &sql).await.map_err(on_shard)?;
    }
    let root = &p.tree.members[0];
    match shard::root_index_valid(&p.conn, root)
        .await
        .map_err(on_shard)?
    {
        true => Ok(()),
        false => Err(ExecError::IndexNotValid {
            shard: p.label.to_string(),
            index: root.index.clone(),
        }),
    }
}

/// Removes the statement's indexes from one shard, on a fresh session when its own broke. A
/// failure is logged: the client hears the error that made the statement fail.
async fn clean_up(p: &mut Part<'_>) {
    if p.conn.is_closed() {
        match p.pool.get().await {
            Ok(conn) => p.conn = conn,
            Err(e) => {
                tracing::error!(shard = %p.label, error = %e,
                    "cannot remove the indexes a failed CREATE INDEX CONCURRENTLY made; \
                     drop them by hand (DROP INDEX CONCURRENTLY IF EXISTS …)");
                return;
            }
        }
    }
    if let Err(e) = shard::remove(&p.conn, &p.tree).await {
        tracing::error!(shard = %p.label, error = %e,
            "cannot remove the indexes a failed CREATE INDEX CONCURRENTLY made; drop them by \
             hand (DROP INDEX CONCURRENTLY IF EXISTS …)");
    }
}

/// The kind of relation `index` is on each shard (`None` where it does not exist).
async fn kinds_on_shards(
    ctx: DdlCtx<'_>,
    index: &QualifiedName,
) -> Result<Vec<(ShardId, Option<String>)>, ExecError> {
    let mut kinds = Vec::new();
    for s in ctx.control.shards() {
        let conn = s
            .pool
            .get()
            .await
            .map_err(|e| TxnError::on_shard(&s.label, e))?;
        let row = conn
            .query_opt(
                "SELECT relkind::text FROM pg_class WHERE oid = to_regclass($1)",
                &[&index.to_string()],
            )
            .await
            .map_err(|e| shard_error(&s.label, e))?;
        kinds.push((s.label.id, row.map(|r| r.get(0))));
    }
    Ok(kinds)
}

/// Runs `sql` on each of `shards` on its own, all at once, waiting as CONCURRENTLY waits.
async fn run_each(ctx: DdlCtx<'_>, shards: &[ShardId], sql: &str) -> Result<(), ExecError> {
    let parts = connect(ctx, shards).await?;
    let ran = join_all(parts.iter().map(|p| async {
        shard::run_waiting(&p.conn, sql)
            .await
            .map_err(|e| shard_error(&p.label, e))
    }))
    .await;
    first_error(ran)
}

/// The shards where the index exists, or the first shard when none has it (PostgreSQL reports
/// the missing index there, or notes it under IF EXISTS).
fn holding(kinds: &[(ShardId, Option<String>)]) -> Vec<ShardId> {
    let shards: Vec<ShardId> = kinds
        .iter()
        .filter(|(_, kind)| kind.is_some())
        .map(|(id, _)| *id)
        .collect();
    match shards.is_empty() {
        true => vec![ShardId(0)],
        false => shards,
    }
}

/// `DROP INDEX CONCURRENTLY`: on every shard where the index exists. A sharded table's index
/// is a partitioned index there, which PostgreSQL cannot drop CONCURRENTLY: refused before
/// anything runs.
pub async fn drop(
    ctx: DdlCtx<'_>,
    index: &QualifiedName,
    sql: &str,
) -> Result<&'static str, ExecError> {
    let kinds = kinds_on_shards(ctx, index).await?;
    if kinds.iter().any(|(_, kind)| kind.as_deref() == Some("I")) {
        return Err(ExecError::PartitionedIndexConcurrently {
            index: index.name.clone(),
        });
    }
    run_each(ctx, &holding(&kinds), sql).await?;
    Ok("DROP INDEX")
}

/// `REINDEX INDEX … CONCURRENTLY`: on every shard where the index exists (PostgreSQL rebuilds
/// a partitioned index one partition at a time).
pub async fn reindex(
    ctx: DdlCtx<'_>,
    index: &QualifiedName,
    sql: &str,
) -> Result<&'static str, ExecError> {
    let kinds = kinds_on_shards(ctx, index).await?;
    run_each(ctx, &holding(&kinds), sql).await?;
    Ok("REINDEX")
}
