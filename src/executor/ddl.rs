//! DDL the proxy runs itself (docs/architecture.md §2, §3, §7): CREATE SHARDED/DUPLICATED TABLE and
//! Oracle NoSQL `CREATE TABLE`, CREATE/DROP TABLESPACE SET, ALTER TABLE … ROW MOVEMENT, and DROP
//! TABLE / ALTER TABLE / CREATE INDEX / DROP INDEX on tables the catalog holds, on every shard that
//! holds them under one two-phase commit. [`recognise`] decides what is ours; [`execute`] runs it.
//!
//! A CREATE is recorded in the catalog as CREATING before any shard sees it, runs on every shard
//! as one all-or-nothing unit, and becomes ACTIVE; when the shards refuse or cannot be reached,
//! the entry is deleted again, so neither the shards nor the catalog keep anything. A DROP marks
//! the table DROPPING, drops it everywhere at once, then deletes the entry.

use std::collections::BTreeMap;

use pg_query::protobuf::IndexStmt;
use tokio_postgres::error::SqlState;

pub use super::recognise::recognise;

use super::layout::{self, DEFAULT_SCHEMA};
use super::{index_concurrently, view_ddl};
use crate::catalog::{Catalog, CatalogError, Snapshot, Table, UpdateHolder};
use crate::client_error::ClientError;
use crate::config::Config;
use crate::ddl::ast::{
    AlterRowMovement, CreateTable, CreateTablespace, CreateTablespaceSet, DropTablespace,
    DropTablespaceSet,
};
use crate::ddl::error::RewriteError;
use crate::ddl::model::{QualifiedName, ShardStatements};
use crate::ddl::rewrite::{self, CreateOutcome, TablePlan};
use crate::ddl::{DdlError, ObjectName, Statement};
use crate::model::{RowMovement, ShardId, TableId, TableKind, TableState};
use crate::txn::{ControlPools, Coordinator, TxnError};

/// The parts of a running proxy DDL works with: it decides from the catalog and records there,
/// reads the configuration's tablespaces and rewrite settings, and runs on the shards through
/// the control pools and the two-phase commit coordinator.
#[derive(Clone, Copy)]
pub struct DdlCtx<'a> {
    pub catalog: &'a Catalog,
    pub config: &'a Config,
    pub control: &'a ControlPools,
    pub coordinator: &'a Coordinator,
}

/// A statement the proxy executes itself, as [`recognise`] found it.
#[derive(Debug)]
pub enum ProxyDdl {
    /// Parsed by shardwire's own DDL parser.
    Sharding(Box<Statement>),
    /// `DROP TABLE` of recorded tables, in the order named.
    DropTables { tables: Vec<QualifiedName> },
    /// `ALTER TABLE` or `CREATE INDEX` on a recorded table: the text runs on every shard holding it.
    OnTable {
        table: QualifiedName,
        sql: String,
        tag: &'static str,
    },
    /// `DROP INDEX`: runs wherever one of the indexes exists.
    DropIndex {
        indexes: Vec<QualifiedName>,
        sql: String,
    },
    /// `CREATE INDEX CONCURRENTLY` on a recorded table: built on each shard on its own
    /// ([`super::index_concurrently`]).
    CreateIndexConcurrently {
        table: QualifiedName,
        index: Box<IndexStmt>,
    },
    /// `DROP INDEX CONCURRENTLY`: runs on its own wherever the index exists.
    DropIndexConcurrently { index: QualifiedName, sql: String },
    /// `REINDEX INDEX … CONCURRENTLY`: runs on its own wherever the index exists.
    ReindexConcurrently { index: QualifiedName, sql: String },
    /// `CREATE [OR REPLACE] VIEW` reading recorded tables or views (`query`: its SELECT).
    CreateView {
        view: QualifiedName,
        sql: String,
        query: String,
        replace: bool,
    },
    /// `DROP [MATERIALIZED] VIEW` of recorded views.
    DropViews {
        views: Vec<QualifiedName>,
        cascade: bool,
        materialized: bool,
        /// Named too, under IF EXISTS: dropped on the first shard where they exist.
        unrecorded: Vec<QualifiedName>,
    },
    /// `ALTER VIEW` (or ALTER TABLE) of a recorded view: runs on every shard holding it.
    OnView { view: TableId, sql: String },
    /// Recognised as ours, and refused before anything ran.
    Refused(ExecError),
}

impl ProxyDdl {
    /// The statement's name when, like PostgreSQL's CONCURRENTLY forms, it cannot run inside
    /// a transaction block for a reason of PostgreSQL's (refused there with PostgreSQL's text).
    pub fn concurrently(&self) -> Option<&'static str> {
        match self {
            ProxyDdl::CreateIndexConcurrently { .. } => Some("CREATE INDEX CONCURRENTLY"),
            ProxyDdl::DropIndexConcurrently { .. } => Some("DROP INDEX CONCURRENTLY"),
            ProxyDdl::ReindexConcurrently { .. } => Some("REINDEX CONCURRENTLY"),
            ProxyDdl::Sharding(_)
            | ProxyDdl::DropTables { .. }
            | ProxyDdl::OnTable { .. }
            | ProxyDdl::DropIndex { .. }
            | ProxyDdl::CreateView { .. }
            | ProxyDdl::DropViews { .. }
            | ProxyDdl::OnView { .. }
            | ProxyDdl::Refused(_) => None,
        }
    }
}

#[derive(Debug, thiserror::Error)]
pub enum ExecError {
    #[error("{source}")]
    Parse {
        source: DdlError,
        /// 1-based character position in the statement, as PostgreSQL reports it.
        position: Option<u32>,
    },
    #[error(transparent)]
    Rewrite(#[from] RewriteError),
    #[error(transparent)]
    Catalog(#[from] CatalogError),
    #[error(transparent)]
    Txn(#[from] TxnError),
    #[error(
        "sharding DDL must be sent as a statement of its own: send it alone, \
         not together with other statements in one query string"
    )]
    MultiStatement,
    #[error(
        "DROP TABLE names tables the proxy shards ({}) together with tables it does not ({}); \
         drop them in separate statements", held.join(", "), others.join(", ")
    )]
    MixedDrop {
        held: Vec<String>,
        others: Vec<String>,
    },
    #[error("table name \"{name}\" is ambiguous through shardwire: {table} is a recorded table, and shardwire reads this unqualified name in schema public (the statement is DDL it runs itself); qualify the name ({table}, or public.{name})")]
    Ambiguous { name: String, table: String },
    #[error("{table} is a sharded table: {what} is not supported")]
    Unsupported { table: String, what: &'static str },
    #[error("{table} is a {kind} table; ROW MOVEMENT applies to sharded tables only")]
    NotSharded { table: String, kind: TableKind },
    #[error(
        "cannot enable row movement on {table} before its child table {child}: enable it on the \
         family's children first (ALTER TABLE {child} ENABLE ROW MOVEMENT), then on their parent"
    )]
    ChildWithoutRowMovement { table: String, child: String },
    #[error(
        "cannot disable row movement on {table} while its parent {parent} has it: disable it on \
         the parent first"
    )]
    ParentWithRowMovement { table: String, parent: String },
    #[error("table {table} is {}; only DROP TABLE can run on it now", state.label())]
    NotActive { table: String, state: TableState },
    #[error(
        "table {table} is UPDATING: another ALTER TABLE or CREATE INDEX on it has not finished; \
         run this once it is ACTIVE again (SHOW SHARDED TABLES)"
    )]
    Updating { table: String },
    #[error(
        "table {table} has no time to live: USING TTL belongs to tables made by an Oracle NoSQL \
         CREATE TABLE"
    )]
    NotNoSql { table: String },
    #[error("shard \"{name}\" is not a configured shard")]
    UnknownShard { name: String },
    #[error(
        "tablespace \"{name}\" is declared in [[tablespaces]] of the configuration, which \
         records it again whenever a proxy starts: remove it there instead"
    )]
    ConfiguredTablespace { name: String },
    /// PostgreSQL's parser refused a statement the rewrite produced: a column or constraint
    /// definition (DEFAULT, CHECK, …) PostgreSQL cannot read.
    #[error("{message} (in the PostgreSQL shardwire made of your statement: {statement})")]
    InvalidDefinition { statement: String, message: String },
    #[error(
        "cannot make temporary view \"{view}\" over recorded tables: a temporary view lives in \
         one backend connection, and a query over it would read one shard's rows; create a \
         view (CREATE VIEW) or query the tables"
    )]
    TemporaryView { view: String },
    #[error("a query over this view would be refused: {0}")]
    ViewRefused(crate::router::plan::Refusal),
    #[error(
        "CREATE OR REPLACE VIEW of a view over recorded tables must still read recorded tables \
         or views: drop the view first, then create it"
    )]
    ViewReadsNothingRecorded,
    #[error(
        "view {view} reads tables that share no shard, so no shard can hold it: read those \
         tables in a query instead"
    )]
    ViewWithoutShard { view: String },
    #[error(
        "CREATE OR REPLACE VIEW {view} would put the view on other shards than it is on (it \
         reads other tables): drop it, then create it again"
    )]
    ViewMovesShards { view: String },
    #[error("the catalog and the proxy disagree: {0}")]
    CatalogMismatch(String),
    /// PostgreSQL's text for a name a relation of the schema has.
    #[error("relation \"{name}\" already exists")]
    RelationExists { name: String },
    #[error(
        "cannot drop partitioned index \"{index}\" concurrently: it is the index of a sharded \
         table, partitioned on every shard, and PostgreSQL drops a partitioned index only with \
         an ACCESS EXCLUSIVE lock; run DROP INDEX {index} without CONCURRENTLY (its lock is \
         brief but blocks the table's reads and writes while it is held and while it waits)"
    )]
    PartitionedIndexConcurrently { index: String },
    /// Every partition's index was attached and the index is still not valid: PostgreSQL's
    /// rule for when a partitioned index becomes valid was not met.
    #[error(
        "index \"{index}\" is not valid on {shard} after every partition's index was attached; \
         what the statement made is removed from every shard"
    )]
    IndexNotValid { shard: String, index: String },
}

impl ExecError {
    pub fn parse(source: DdlError, sql: &str) -> ExecError {
        let position = source.error_position(sql);
        ExecError::Parse { source, position }
    }

    /// The statement position an error points at (ErrorResponse field `P`).
    pub fn position(&self) -> Option<u32> {
        match self {
            ExecError::Parse { position, .. } => *position,
            ExecError::Rewrite(_)
            | ExecError::Catalog(_)
            | ExecError::Txn(_)
            | ExecError::MultiStatement
            | ExecError::MixedDrop { .. }
            | ExecError::Ambiguous { .. }
            | ExecError::Unsupported { .. }
            | ExecError::NotSharded { .. }
            | ExecError::ChildWithoutRowMovement { .. }
            | ExecError::ParentWithRowMovement { .. }
            | ExecError::NotActive { .. }
            | ExecError::Updating { .. }
            | ExecError::NotNoSql { .. }
            | ExecError::UnknownShard { .. }
            | ExecError::ConfiguredTablespace { .. }
            | ExecError::InvalidDefinition { .. }
            | ExecError::CatalogMismatch(_)
            | ExecError::TemporaryView { .. }
            | ExecError::ViewRefused(_)
            | ExecError::ViewReadsNothingRecorded
            | ExecError::ViewWithoutShard { .. }
            | ExecError::ViewMovesShards { .. }
            | ExecError::RelationExists { .. }
            | ExecError::PartitionedIndexConcurrently { .. }
            | ExecError::IndexNotValid { .. } => None,
        }
    }
}

impl ClientError for ExecError {
    fn sqlstate(&self) -> SqlState {
        match self {
            ExecError::Parse { source, .. } => source.sqlstate(),
            ExecError::Rewrite(e) => e.sqlstate(),
            ExecError::Catalog(e) => e.sqlstate(),
            ExecError::Txn(e) => e.sqlstate(),
            ExecError::MultiStatement
            | ExecError::MixedDrop { .. }
            | ExecError::Ambiguous { .. }
            | ExecError::Unsupported { .. }
            | ExecError::PartitionedIndexConcurrently { .. }
            | ExecError::TemporaryView { .. }
            | ExecError::ViewWithoutShard { .. }
            | ExecError::ViewMovesShards { .. }
            | ExecError::ViewReadsNothingRecorded => SqlState::FEATURE_NOT_SUPPORTED,
            ExecError::ViewRefused(r) => r.sqlstate(),
            ExecError::NotSharded { .. } | ExecError::NotNoSql { .. } => {
                SqlState::WRONG_OBJECT_TYPE
            }
            ExecError::ChildWithoutRowMovement { .. }
            | ExecError::ParentWithRowMovement { .. }
            | ExecError::NotActive { .. }
            | ExecError::Updating { .. }
            | ExecError::ConfiguredTablespace { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
            ExecError::UnknownShard { .. } => SqlState::UNDEFINED_OBJECT,
            ExecError::InvalidDefinition { .. } => SqlState::SYNTAX_ERROR,
            ExecError::CatalogMismatch(_) => SqlState::DATA_CORRUPTED,
            ExecError::RelationExists { .. } => SqlState::DUPLICATE_TABLE,
            ExecError::IndexNotValid { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}

/// Runs a recognised statement; the result is its command tag.
pub async fn execute(ctx: DdlCtx<'_>, ddl: ProxyDdl) -> Result<String, ExecError> {
    let tag = match ddl {
        ProxyDdl::Sharding(statement) => match *statement {
            Statement::CreateTable(t) => create_table(ctx, &t).await?,
            Statement::CreateTablespaceSet(s) => create_tablespace_set(ctx, &s).await?,
            Statement::DropTablespaceSet(s) => drop_tablespace_set(ctx, &s).await?,
            Statement::CreateTablespace(t) => create_tablespace(ctx, &t).await?,
            Statement::DropTablespace(t) => drop_tablespace(ctx, &t).await?,
            Statement::AlterRowMovement(a) => row_movement(ctx, &a).await?,
            Statement::AlterTtl(a) => alter_ttl(ctx, &object_name(&a.table)?, a.ttl).await?,
        },
        ProxyDdl::DropTables { tables } => drop_tables(ctx, &tables).await?,
        ProxyDdl::OnTable { table, sql, tag } => on_table(ctx, &table, &sql, tag).await?,
        ProxyDdl::DropIndex { indexes, sql } => drop_index(ctx, &indexes, sql).await?,
        ProxyDdl::CreateIndexConcurrently { table, index } => {
            index_concurrently::create(ctx, &table, &index).await?
        }
        ProxyDdl::DropIndexConcurrently { index, sql } => {
            index_concurrently::drop(ctx, &index, &sql).await?
        }
        ProxyDdl::ReindexConcurrently { index, sql } => {
            index_concurrently::reindex(ctx, &index, &sql).await?
        }
        ProxyDdl::CreateView {
            view,
            sql,
            query,
            replace,
        } => view_ddl::create_view(ctx, &view, &sql, &query, replace).await?,
        ProxyDdl::DropViews {
            views,
            cascade,
            materialized,
            unrecorded,
        } => view_ddl::drop_views(ctx, &views, cascade, materialized, &unrecorded).await?,
        ProxyDdl::OnView { view, sql } => view_ddl::alter_view(ctx, view, &sql).await?,
        ProxyDdl::Refused(e) => return Err(e),
    };
    Ok(tag.to_owned())
}

/// The freshest snapshot: DDL decides from what the catalog holds now, not from what this
/// proxy last heard (another proxy may have changed it within the last second).
pub(super) async fn fresh_snapshot(ctx: DdlCtx<'_>) -> Result<std::sync::Arc<Snapshot>, ExecError> {
    Ok(ctx.catalog.reload().await?)
}

async fn run_on_shards(ctx: DdlCtx<'_>, work: ShardStatements) -> Result<(), ExecError> {
    ctx.coordinator.run(work.into_iter().collect()).await?;
    Ok(())
}

pub(super) fn lookup<'s>(
    snapshot: &'s Snapshot,
    name: &QualifiedName,
) -> Result<&'s Table, ExecError> {
    snapshot
        .table_by_name(&name.schema, &name.name)
        .ok_or_else(|| {
            RewriteError::UndefinedTable {
                table: name.to_string(),
            }
            .into()
        })
}

/// This proxy process, as its lease names it.
pub(super) fn update_holder(ctx: DdlCtx<'_>) -> UpdateHolder {
    let me = ctx.coordinator.incarnation();
    UpdateHolder {
        cluster: me.cluster.as_str().to_owned(),
        proxy: me.proxy.as_str().to_owned(),
        // An epoch past i64 is no lease's (see `Incarnation`): recovery releases the table.
        epoch: i64::try_from(me.epoch).unwrap_or(-1),
    }
}

pub(super) fn require_active(table: &Table) -> Result<(), ExecError> {
    match table.state {
        TableState::Active => Ok(()),
        TableState::Updating => Err(ExecError::Updating {
            table: table.qualified_name(),
        }),
        state @ (TableState::Creating | TableState::Dropping) => Err(ExecError::NotActive {
            table: table.qualified_name(),
            state,
        }),
    }
}

async fn create_table(ctx: DdlCtx<'_>, statement: &CreateTable) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let rctx = layout::rewrite_context(&snapshot, ctx.config)?;
    let plan = match rewrite::rewrite_create(&rctx, statement)? {
        CreateOutcome::Create(plan) => plan,
        CreateOutcome::AlreadyExists(name) => {
            tracing::info!(table = %name, "CREATE TABLE IF NOT EXISTS: already exists, skipping");
            return Ok("CREATE TABLE");
        }
    };
    validate_with_postgres_parser(&plan.per_shard)?;
    let entry = layout::new_table(&snapshot, &plan)?;
    let id = ctx.catalog.create_table(&entry).await?;
    if let Err(e) = record_generated_keys(ctx, id, statement, &entry).await {
        if let Err(cleanup) = ctx.catalog.delete_table(id).await {
            tracing::error!(table = %plan.layout.name, error = %cleanup,
                "CREATE failed and its catalog entry could not be removed; DROP TABLE removes it");
        }
        return Err(e);
    }
    check_recorded_placement(ctx, id, &plan).await?;
    tracing::info!(table = %plan.layout.name, shards = plan.per_shard.len(), "creating table");
    if let Err(e) = run_on_shards(ctx, plan.per_shard).await {
        let outcome_unknown = matches!(
            e,
            ExecError::Txn(TxnError::ResolutionUnknown { .. } | TxnError::CommitUnknown { .. })
        );
        if outcome_unknown {
            // The table may exist on the shards after all: keep the entry (CREATING) so that
            // DROP TABLE can remove whatever is there.
            tracing::warn!(table = %plan.layout.name, error = %e, "CREATE outcome unknown");
        } else if let Err(cleanup) = ctx.catalog.delete_table(id).await {
            tracing::error!(table = %plan.layout.name, error = %cleanup,
                "CREATE failed and its catalog entry could not be removed; DROP TABLE removes it");
        }
        return Err(e);
    }
    ctx.catalog.set_state(id, TableState::Active).await?;
    Ok("CREATE TABLE")
}

/// A family root's sharding-key columns declared serial or identity take their values from a
/// cluster-wide sequence in the catalog (each shard's own sequence would hand out the same
/// values on every shard, and the proxy needs the value before it can route the row).
async fn record_generated_keys(
    ctx: DdlCtx<'_>,
    id: TableId,
    statement: &CreateTable,
    entry: &crate::catalog::NewTable,
) -> Result<(), ExecError> {
    if entry.kind != TableKind::Sharded || entry.parent.is_some() {
        return Ok(());
    }
    for key in &entry.key_columns {
        let generated = statement
            .columns
            .iter()
            .find(|c| c.name.value == key.name)
            .and_then(|c| c.generated());
        if let Some(g) = generated {
            let always = g == crate::ddl::Generated::Identity { always: true };
            ctx.catalog
                .record_key_sequence(id, &key.name, always)
                .await?;
        }
    }
    Ok(())
}

/// DROP, ALTER and CREATE INDEX reach the shards the catalog derives from the entry; a CREATE
/// that put the table anywhere else would leave a copy no DROP removes. So the two must agree
/// before anything runs (the entry is deleted again when they do not).
async fn check_recorded_placement(
    ctx: DdlCtx<'_>,
    id: TableId,
    plan: &TablePlan,
) -> Result<(), ExecError> {
    let recorded = ctx.catalog.reload().await?.shards_of(id);
    let planned: Vec<ShardId> = plan.per_shard.keys().copied().collect();
    if recorded == planned {
        return Ok(());
    }
    if let Err(e) = ctx.catalog.delete_table(id).await {
        tracing::error!(table = %plan.layout.name, error = %e,
            "placement mismatch and the catalog entry could not be removed; DROP TABLE removes it");
    }
    Err(ExecError::CatalogMismatch(format!(
        "{} would be created on shards {planned:?} but recorded on {recorded:?}",
        plan.layout.name
    )))
}

/// `DROP TABLE a, b, …`: children may be dropped in the same statement as their parent when
/// they are named before it.
async fn drop_tables(ctx: DdlCtx<'_>, names: &[QualifiedName]) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let mut rctx = layout::rewrite_context(&snapshot, ctx.config)?;
    let mut work: ShardStatements = BTreeMap::new();
    let mut dropped = Vec::new();
    for name in names {
        let table = lookup(&snapshot, name)?;
        let mut per_shard = rewrite::drop_table(&rctx, name)?;
        if matches!(table.state, TableState::Creating | TableState::Dropping) {
            // A CREATE or DROP that did not finish may have left it on some shards only.
            let leftovers = rctx.table(name).map(rewrite::drop_leftovers);
            for statements in per_shard.values_mut() {
                if let Some(leftovers) = &leftovers {
                    statements.clone_from(leftovers);
                }
            }
        }
        rctx.tables.remove(name);
        for (shard, statements) in per_shard {
            work.entry(shard).or_default().extend(statements);
        }
        dropped.push(table);
    }
    for table in &dropped {
        if table.state != TableState::Dropping {
            ctx.catalog
                .set_state(table.id, TableState::Dropping)
                .await?;
        }
    }
    run_on_shards(ctx, work).await?;
    for table in &dropped {
        ctx.catalog.delete_table(table.id).await?;
    }
    Ok("DROP TABLE")
}

async fn on_table(
    ctx: DdlCtx<'_>,
    name: &QualifiedName,
    sql: &str,
    tag: &'static str,
) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let table = lookup(&snapshot, name)?;
    require_active(table)?;
    let layout = layout::table_layout(&snapshot, table)?;
    let work = match layout.nosql {
        true => super::nosql::on_data_table(&layout, sql)?,
        false => rewrite::passthrough(&layout, sql),
    };
    // UPDATING while the shards change, as Oracle NoSQL shows it; reads and writes go on.
    ctx.catalog
        .begin_update(table.id, &update_holder(ctx))
        .await?;
    let ran = run_on_shards(ctx, work).await;
    ctx.catalog.set_state(table.id, TableState::Active).await?;
    ran?;
    // A renamed column changes how PostgreSQL writes the definitions of views over the table.
    view_ddl::refresh_dependents(ctx, &[table.id]).await?;
    Ok(tag)
}

/// `ALTER TABLE t USING TTL n HOURS|DAYS` of a NoSQL table: rows written from now on inherit
/// it; the catalog records it for SHOW and for `SET TTL USING TABLE DEFAULT`.
async fn alter_ttl(
    ctx: DdlCtx<'_>,
    name: &QualifiedName,
    ttl: crate::model::Ttl,
) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let table = lookup(&snapshot, name)?;
    require_active(table)?;
    if !table.nosql {
        return Err(ExecError::NotNoSql {
            table: table.qualified_name(),
        });
    }
    let layout = layout::table_layout(&snapshot, table)?;
    let ttl = (ttl.amount > 0).then_some(ttl);
    let statement = crate::ddl::ttl::set_default_statement(&layout.name, ttl);
    ctx.catalog
        .begin_update(table.id, &update_holder(ctx))
        .await?;
    let ran = run_on_shards(ctx, rewrite::passthrough(&layout, &statement)).await;
    if ran.is_ok() {
        ctx.catalog.set_ttl(table.id, ttl).await?;
    }
    ctx.catalog.set_state(table.id, TableState::Active).await?;
    ran?;
    Ok("ALTER TABLE")
}

/// An index name does not say which table it belongs to: the statement runs on every shard
/// where one of the indexes exists, and on the first shard when none has it (so PostgreSQL
/// reports the missing index, or notes it under IF EXISTS).
async fn drop_index(
    ctx: DdlCtx<'_>,
    indexes: &[QualifiedName],
    sql: String,
) -> Result<&'static str, ExecError> {
    let names: Vec<String> = indexes.iter().map(ToString::to_string).collect();
    let mut work = ShardStatements::new();
    for shard in ctx.control.shards() {
        let on_shard = |e| TxnError::on_shard(&shard.label, e);
        let conn = shard.pool.get().await.map_err(on_shard)?;
        let row = conn
            .query_one(
                "SELECT bool_or(to_regclass(n) IS NOT NULL) FROM unnest($1::text[]) AS n",
                &[&names],
            )
            .await
            .map_err(|e| on_shard(e.into()))?;
        if row.get::<_, Option<bool>>(0).unwrap_or(false) {
            work.insert(shard.label.id, vec![sql.clone()]);
        }
    }
    if work.is_empty() {
        work.insert(ShardId(0), vec![sql]);
    }
    run_on_shards(ctx, work).await?;
    Ok("DROP INDEX")
}

fn object_name(name: &ObjectName) -> Result<QualifiedName, ExecError> {
    match name.parts.as_slice() {
        [table] => Ok(QualifiedName::new(DEFAULT_SCHEMA, &table.value)),
        [schema, table] => Ok(QualifiedName::new(&schema.value, &table.value)),
        parts => Err(RewriteError::UnsupportedName {
            name: parts
                .iter()
                .map(|p| p.value.as_str())
                .collect::<Vec<_>>()
                .join("."),
        }
        .into()),
    }
}

/// Whether `ancestor` is above `table` in its family.
fn descends_from(snapshot: &Snapshot, table: &Table, ancestor: &Table) -> bool {
    let mut parent = table.parent;
    while let Some(p) = parent {
        if p == ancestor.id {
            return true;
        }
        parent = snapshot.table(p).and_then(|t| t.parent);
    }
    false
}

/// Row movement is switched on from the leaves of a family up and off from the root down, so a
/// table that moves its rows never has a child that cannot follow (seeds/004).
async fn row_movement(ctx: DdlCtx<'_>, a: &AlterRowMovement) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let table = lookup(&snapshot, &object_name(&a.table)?)?;
    require_active(table)?;
    if table.kind != TableKind::Sharded {
        return Err(ExecError::NotSharded {
            table: table.qualified_name(),
            kind: table.kind,
        });
    }
    let movement = a.movement;
    match movement {
        RowMovement::Enabled => {
            let lacking = snapshot.family(table.id).into_iter().find(|t| {
                descends_from(&snapshot, t, table) && t.row_movement != RowMovement::Enabled
            });
            if let Some(child) = lacking {
                return Err(ExecError::ChildWithoutRowMovement {
                    table: table.name.clone(),
                    child: child.name.clone(),
                });
            }
        }
        RowMovement::Disabled => {
            let parent = table.parent.and_then(|p| snapshot.table(p));
            if let Some(parent) = parent.filter(|p| p.row_movement == RowMovement::Enabled) {
                return Err(ExecError::ParentWithRowMovement {
                    table: table.name.clone(),
                    parent: parent.name.clone(),
                });
            }
        }
    }
    ctx.catalog.set_row_movement(table.id, movement).await?;
    Ok("ALTER TABLE")
}

/// Every statement the rewrite produced goes through PostgreSQL's own parser before anything is
/// recorded or sent, so a definition PostgreSQL cannot read fails here, not half-way.
pub fn validate_with_postgres_parser(per_shard: &ShardStatements) -> Result<(), ExecError> {
    for statement in per_shard.values().flatten() {
        if let Err(e) = pg_query::parse(statement, 0) {
            let message = match e {
                pg_query::Error::Parse(m) => m,
                other => other.to_string(),
            };
            return Err(ExecError::InvalidDefinition {
                statement: statement.clone(),
                message,
            });
        }
    }
    Ok(())
}

async fn create_tablespace_set(
    ctx: DdlCtx<'_>,
    s: &CreateTablespaceSet,
) -> Result<&'static str, ExecError> {
    let snapshot = ctx.catalog.snapshot();
    let shards = s
        .shards
        .iter()
        .map(|name| {
            snapshot
                .shard_by_name(&name.value)
                .map(|shard| shard.id)
                .ok_or_else(|| ExecError::UnknownShard {
                    name: name.value.clone(),
                })
        })
        .collect::<Result<Vec<_>, _>>()?;
    ctx.catalog
        .create_tablespace_set(&s.name.value, &shards)
        .await?;
    Ok("CREATE TABLESPACE SET")
}

async fn drop_tablespace_set(
    ctx: DdlCtx<'_>,
    s: &DropTablespaceSet,
) -> Result<&'static str, ExecError> {
    match ctx.catalog.drop_tablespace_set(&s.name.value).await {
        Err(CatalogError::NoSuchTablespaceSet(name)) if s.if_exists => {
            tracing::info!(%name, "DROP TABLESPACE SET IF EXISTS: does not exist, skipping");
        }
        result => result?,
    }
    Ok("DROP TABLESPACE SET")
}

/// A tablespace is a name for one shard; nothing is created on the shard itself.
async fn create_tablespace(
    ctx: DdlCtx<'_>,
    t: &CreateTablespace,
) -> Result<&'static str, ExecError> {
    let snapshot = ctx.catalog.snapshot();
    let shard = snapshot
        .shard_by_name(&t.shard.value)
        .ok_or_else(|| ExecError::UnknownShard {
            name: t.shard.value.clone(),
        })?;
    ctx.catalog
        .create_tablespace(&t.name.value, shard.id)
        .await?;
    Ok("CREATE TABLESPACE")
}

async fn drop_tablespace(ctx: DdlCtx<'_>, t: &DropTablespace) -> Result<&'static str, ExecError> {
    let name = &t.name.value;
    if ctx.config.tablespaces.iter().any(|ts| &ts.name == name) {
        return Err(ExecError::ConfiguredTablespace { name: name.clone() });
    }
    match ctx.catalog.drop_tablespace(name).await {
        Err(CatalogError::NoSuchTablespace(name)) if t.if_exists => {
            tracing::info!(%name, "DROP TABLESPACE IF EXISTS: does not exist, skipping");
        }
        result => result?,
    }
    Ok("DROP TABLESPACE")
}
