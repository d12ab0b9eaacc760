//! CREATE [OR REPLACE] VIEW, ALTER VIEW and DROP VIEW of views over recorded tables: run on
//! every shard holding what the view reads, under one two-phase commit, and recorded in the
//! catalog with the definition the shards hold (the router's `plan::view` says how each is
//! read).
//!
//! As for tables, a CREATE is recorded CREATING before any shard sees it and ACTIVE once every
//! shard has it, with `pg_get_viewdef`'s definition: PostgreSQL binds a view's names when it is
//! made, and that text, every name qualified, means the same under any search_path. A change
//! to a view or to a table a view reads can change how PostgreSQL writes the definitions of the
//! views over it, so those are read again afterwards.

use std::collections::HashMap;
use std::sync::Arc;

use pg_query::protobuf::{ObjectType, RangeVar};
use pg_query::NodeEnum;

use super::ddl::{fresh_snapshot, DdlCtx, ExecError, ProxyDdl};
use super::layout::DEFAULT_SCHEMA;
use crate::catalog::{NewView, Snapshot, TableId, View};
use crate::ddl::model::{QualifiedName, ShardStatements};
use crate::model::{ShardId, TableState, ViewShape};
use crate::router::plan::{classify, Classified, ColumnDef, ColumnSource, ViewPlan};

/// The proxy's part in a view statement: `Some` when it makes, changes or drops a view over
/// recorded tables.
pub(super) fn recognise_view(node: &NodeEnum, text: &str, snapshot: &Snapshot) -> Option<ProxyDdl> {
    let named = |r: &RangeVar| QualifiedName::new(schema_of(&r.schemaname), &r.relname);
    let recorded = |r: &RangeVar| snapshot.view_by_name(schema_of(&r.schemaname), &r.relname);
    match node {
        NodeEnum::ViewStmt(v) => {
            let view = v.view.as_ref()?;
            let query = v.query.as_deref()?.node.clone()?;
            let query = crate::sql::deparse::deparse(query).ok()?;
            let reads_recorded = !matches!(
                classify(&query, &[], snapshot, &NoColumns),
                Classified::NotRecorded
            );
            if !reads_recorded && recorded(view).is_none() {
                return None;
            }
            if view.relpersistence == "t" {
                return Some(ProxyDdl::Refused(ExecError::TemporaryView {
                    view: view.relname.clone(),
                }));
            }
            Some(ProxyDdl::CreateView {
                view: named(view),
                sql: text.to_owned(),
                query,
                replace: v.replace,
            })
        }
        NodeEnum::DropStmt(d)
            if d.remove_type == ObjectType::ObjectView as i32
                || d.remove_type == ObjectType::ObjectMatview as i32 =>
        {
            let names = super::recognise::dropped_names(&d.objects);
            let views: Vec<QualifiedName> = names
                .iter()
                .filter(|(schema, name)| snapshot.view_by_name(schema_of(schema), name).is_some())
                .map(|(schema, name)| QualifiedName::new(schema_of(schema), *name))
                .collect();
            if views.is_empty() {
                return None;
            }
            let others: Vec<QualifiedName> = names
                .iter()
                .map(|(s, n)| QualifiedName::new(schema_of(s), *n))
                .filter(|n| !views.contains(n))
                .collect();
            if !others.is_empty() && !d.missing_ok {
                return Some(ProxyDdl::Refused(ExecError::MixedDrop {
                    held: views.iter().map(ToString::to_string).collect(),
                    others: others.iter().map(ToString::to_string).collect(),
                }));
            }
            Some(ProxyDdl::DropViews {
                views,
                cascade: d.behavior == pg_query::protobuf::DropBehavior::DropCascade as i32,
                materialized: d.remove_type == ObjectType::ObjectMatview as i32,
                unrecorded: others,
            })
        }
        NodeEnum::AlterTableStmt(a) => on_view(a.relation.as_ref()?, text, snapshot),
        NodeEnum::RenameStmt(r) => on_view(r.relation.as_ref()?, text, snapshot),
        NodeEnum::AlterObjectSchemaStmt(a) => on_view(a.relation.as_ref()?, text, snapshot),
        _ => None,
    }
}

fn on_view(relation: &RangeVar, text: &str, snapshot: &Snapshot) -> Option<ProxyDdl> {
    let view = snapshot.view_by_name(schema_of(&relation.schemaname), &relation.relname)?;
    Some(ProxyDdl::OnView {
        view: view.entry.id,
        sql: text.to_owned(),
    })
}

fn schema_of(written: &str) -> &str {
    if written.is_empty() {
        DEFAULT_SCHEMA
    } else {
        written
    }
}

/// No columns known: a view's shape is decided without them where its definition allows.
struct NoColumns;

impl ColumnSource for NoColumns {
    fn columns(&self, _: TableId) -> Option<Arc<Vec<String>>> {
        None
    }
    fn column_defs(&self, _: TableId) -> Option<Arc<Vec<ColumnDef>>> {
        None
    }
}

/// Columns read from the shards as classifying a definition asks for them.
#[derive(Default)]
struct FetchedColumns(HashMap<TableId, Arc<Vec<ColumnDef>>>);

impl ColumnSource for FetchedColumns {
    fn columns(&self, table: TableId) -> Option<Arc<Vec<String>>> {
        let defs = self.0.get(&table)?;
        Some(Arc::new(defs.iter().map(|c| c.name.clone()).collect()))
    }
    fn column_defs(&self, table: TableId) -> Option<Arc<Vec<ColumnDef>>> {
        self.0.get(&table).cloned()
    }
}

/// How the router reads `definition`, fetching the columns it asks for.
async fn view_plan(
    ctx: DdlCtx<'_>,
    snapshot: &Snapshot,
    definition: &str,
    column_names: &[String],
) -> Result<ViewPlan, ExecError> {
    let mut columns = FetchedColumns::default();
    loop {
        match classify(definition, column_names, snapshot, &columns) {
            Classified::View(plan) => return Ok(plan),
            Classified::Refused(r) => return Err(ExecError::ViewRefused(r)),
            Classified::NotRecorded => return Err(ExecError::ViewReadsNothingRecorded),
            Classified::NeedColumns(t) => {
                let Some(table) = snapshot.table(t) else {
                    return Err(ExecError::CatalogMismatch(format!("table {t} is gone")));
                };
                if columns.0.contains_key(&t) {
                    return Err(ExecError::CatalogMismatch(format!(
                        "the columns of {} were read and asked for again",
                        table.qualified_name()
                    )));
                }
                let shard = snapshot.shards_of(t).first().copied().unwrap_or(ShardId(0));
                let defs =
                    super::columns::fetch(ctx.control, shard, &table.schema, &table.name).await?;
                columns.0.insert(t, Arc::new(defs));
            }
        }
    }
}

/// The shards a view read by `plan` lives on.
fn shards_of_plan(snapshot: &Snapshot, plan: &ViewPlan) -> Vec<ShardId> {
    if let Some(like) = plan.placed_like {
        return snapshot.shards_of(like);
    }
    let mut shards: Vec<ShardId> = snapshot.shards().iter().map(|s| s.id).collect();
    for read in &plan.reads {
        let theirs = snapshot.shards_of(*read);
        shards.retain(|s| theirs.contains(s));
    }
    shards
}

/// The definition (every name qualified) and column names a shard holds for a view.
async fn definition_on(
    ctx: DdlCtx<'_>,
    shard: ShardId,
    view: &QualifiedName,
) -> Result<(String, Vec<String>), ExecError> {
    let pool = ctx.control.shard(shard);
    let on_shard = |e| crate::txn::TxnError::on_shard(&pool.label, e);
    let mut conn = pool.pool.get().await.map_err(on_shard)?;
    let tx = conn.transaction().await.map_err(|e| on_shard(e.into()))?;
    tx.batch_execute("SET LOCAL search_path = ''")
        .await
        .map_err(|e| on_shard(e.into()))?;
    let row = tx
        .query_one(
            "SELECT pg_catalog.pg_get_viewdef(c.oid),
                    array(SELECT a.attname::text FROM pg_catalog.pg_attribute a
                          WHERE a.attrelid = c.oid AND a.attnum > 0 AND NOT a.attisdropped
                          ORDER BY a.attnum)
             FROM pg_catalog.pg_class c WHERE c.oid = pg_catalog.to_regclass($1)",
            &[&view.to_string()],
        )
        .await
        .map_err(|e| on_shard(e.into()))?;
    tx.commit().await.map_err(|e| on_shard(e.into()))?;
    Ok((row.get(0), row.get(1)))
}

/// `CREATE [OR REPLACE] VIEW`: on the shards of what it reads, then recorded.
pub(super) async fn create_view(
    ctx: DdlCtx<'_>,
    name: &QualifiedName,
    sql: &str,
    query: &str,
    replace: bool,
) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let existing = snapshot.view_by_name(&name.schema, &name.name).cloned();
    if existing.is_some() && !replace {
        return Err(ExecError::RelationExists {
            name: name.name.clone(),
        });
    }
    let plan = view_plan(ctx, &snapshot, query, &[]).await?;
    let shards = shards_of_plan(&snapshot, &plan);
    if shards.is_empty() {
        return Err(ExecError::ViewWithoutShard {
            view: name.to_string(),
        });
    }
    let draft = NewView {
        schema: name.schema.clone(),
        name: name.name.clone(),
        shape: plan.shape,
        placed_like: plan.placed_like,
        definition: query.to_owned(),
        key_columns: plan.key_columns,
        reads: plan.reads,
    };
    let id = match &existing {
        Some(old) => {
            if old.shards != shards {
                return Err(ExecError::ViewMovesShards {
                    view: name.to_string(),
                });
            }
            ctx.catalog
                .set_view_state(&[old.entry.id], TableState::Creating)
                .await?;
            old.entry.id
        }
        None => ctx.catalog.create_view(&draft).await?,
    };
    let work: ShardStatements = shards.iter().map(|s| (*s, vec![sql.to_owned()])).collect();
    if let Err(e) = ctx.coordinator.run(work.into_iter().collect()).await {
        let undone = match &existing {
            Some(old) => ctx.catalog.finish_view(id, &entry_of(old)).await,
            None => ctx.catalog.delete_views(&[id]).await,
        };
        if let Err(cleanup) = undone {
            tracing::error!(view = %name, error = %cleanup,
                "CREATE VIEW failed and its catalog entry could not be restored; DROP VIEW clears it");
        }
        return Err(e.into());
    }
    record_from_shards(ctx, id, name, shards[0]).await?;
    refresh_dependents(ctx, &[id]).await?;
    Ok("CREATE VIEW")
}

/// The entry a view has now, to record again.
fn entry_of(view: &View) -> NewView {
    let e = &view.entry;
    NewView {
        schema: e.schema.clone(),
        name: e.name.clone(),
        shape: e.shape,
        placed_like: e.placed_like,
        definition: e.definition.clone(),
        key_columns: e.key_columns.clone(),
        reads: e.reads.clone(),
    }
}

/// Reads the view's definition back from `shard` and records it, classified, ACTIVE.
async fn record_from_shards(
    ctx: DdlCtx<'_>,
    id: TableId,
    name: &QualifiedName,
    shard: ShardId,
) -> Result<(), ExecError> {
    let (definition, column_names) = definition_on(ctx, shard, name).await?;
    let snapshot = fresh_snapshot(ctx).await?;
    let plan = view_plan(ctx, &snapshot, &definition, &column_names).await?;
    let view = NewView {
        schema: name.schema.clone(),
        name: name.name.clone(),
        shape: plan.shape,
        placed_like: plan.placed_like,
        definition,
        key_columns: plan.key_columns,
        reads: plan.reads,
    };
    ctx.catalog.finish_view(id, &view).await?;
    Ok(())
}

/// The views that read any of `changed`, directly or through other views, in creation order.
/// A materialized view reads the proxy's table on its shard, not what it was made from: it
/// depends on nothing PostgreSQL knows of, and its query is kept as written.
fn dependents(snapshot: &Snapshot, changed: &[TableId]) -> Vec<TableId> {
    let mut found: Vec<TableId> = Vec::new();
    for v in snapshot
        .views()
        .iter()
        .filter(|v| v.entry.shape != ViewShape::Materialized)
    {
        let reads_changed = v
            .entry
            .reads
            .iter()
            .any(|r| changed.contains(r) || found.contains(r));
        if reads_changed {
            found.push(v.entry.id);
        }
    }
    found
}

/// Reads again the definitions of the views over `changed`: PostgreSQL writes them anew when a
/// name they use changes.
pub(super) async fn refresh_dependents(
    ctx: DdlCtx<'_>,
    changed: &[TableId],
) -> Result<(), ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    for id in dependents(&snapshot, changed) {
        let Some(view) = snapshot.view(id) else {
            continue;
        };
        let Some(&shard) = view.shards.first() else {
            continue;
        };
        let name = QualifiedName::new(&view.entry.schema, &view.entry.name);
        record_from_shards(ctx, id, &name, shard).await?;
    }
    Ok(())
}

/// `ALTER VIEW` (or ALTER TABLE naming a view): on every shard holding it; then its entry and
/// those of the views over it are read again (a rename, a new schema, renamed columns).
pub(super) async fn alter_view(
    ctx: DdlCtx<'_>,
    id: TableId,
    sql: &str,
) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let Some(view) = snapshot.view(id) else {
        return Err(ExecError::CatalogMismatch(format!("view {id} is gone")));
    };
    require_active(view)?;
    let work: ShardStatements = view
        .shards
        .iter()
        .map(|s| (*s, vec![sql.to_owned()]))
        .collect();
    ctx.coordinator.run(work.into_iter().collect()).await?;
    let (schema, name) = new_name(sql, view);
    if view.entry.shape == ViewShape::Materialized {
        let renamed = NewView {
            schema,
            name,
            ..entry_of(view)
        };
        ctx.catalog.finish_view(id, &renamed).await?;
    } else {
        let renamed = QualifiedName::new(schema, name);
        record_from_shards(ctx, id, &renamed, view.shards[0]).await?;
    }
    refresh_dependents(ctx, &[id]).await?;
    Ok("ALTER VIEW")
}

fn require_active(view: &View) -> Result<(), ExecError> {
    match view.entry.state {
        TableState::Active | TableState::Updating => Ok(()),
        state @ (TableState::Creating | TableState::Dropping) => Err(ExecError::NotActive {
            table: view.qualified_name(),
            state,
        }),
    }
}

/// The view's name after an ALTER: a RENAME TO or SET SCHEMA of the view itself changes it.
fn new_name(sql: &str, view: &View) -> (String, String) {
    let (schema, name) = (view.entry.schema.clone(), view.entry.name.clone());
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return (schema, name);
    };
    let node = parsed
        .protobuf
        .stmts
        .first()
        .and_then(|r| r.stmt.as_deref())
        .and_then(|n| n.node.as_ref());
    match node {
        Some(NodeEnum::RenameStmt(r))
            if r.rename_type == ObjectType::ObjectView as i32
                || r.rename_type == ObjectType::ObjectMatview as i32
                || r.rename_type == ObjectType::ObjectTable as i32 =>
        {
            (schema, r.newname.clone())
        }
        Some(NodeEnum::AlterObjectSchemaStmt(a)) => (a.newschema.clone(), name),
        _ => (schema, name),
    }
}

/// `DROP [MATERIALIZED] VIEW`: every view named (and with CASCADE, every recorded view over
/// them) is DROPPING, dropped on every shard at once (a materialized view with the table it
/// is refreshed from), then removed from the catalog.
pub(super) async fn drop_views(
    ctx: DdlCtx<'_>,
    names: &[QualifiedName],
    cascade: bool,
    materialized: bool,
    unrecorded: &[QualifiedName],
) -> Result<&'static str, ExecError> {
    let snapshot = fresh_snapshot(ctx).await?;
    let named: Vec<&View> = names
        .iter()
        .filter_map(|n| snapshot.view_by_name(&n.schema, &n.name))
        .collect();
    let ids: Vec<TableId> = named.iter().map(|v| v.entry.id).collect();
    let mut gone = ids.clone();
    if cascade {
        gone.extend(dependents(&snapshot, &ids));
    }
    let mut work = ShardStatements::new();
    for v in &named {
        for shard in &v.shards {
            work.entry(*shard).or_default();
        }
    }
    for (shard, statements) in work.iter_mut() {
        let here: Vec<String> = named
            .iter()
            .filter(|v| v.shards.contains(shard))
            .map(|v| QualifiedName::new(&v.entry.schema, &v.entry.name).to_string())
            .collect();
        let behaviour = if cascade { " CASCADE" } else { "" };
        let kind = if materialized {
            "MATERIALIZED VIEW"
        } else {
            "VIEW"
        };
        statements.push(format!(
            "DROP {kind} IF EXISTS {}{behaviour}",
            here.join(", ")
        ));
        for v in named
            .iter()
            .filter(|v| v.entry.shape == ViewShape::Materialized && v.shards.contains(shard))
        {
            statements.push(format!("DROP TABLE IF EXISTS {}", v.staging_table()));
        }
    }
    if !unrecorded.is_empty() {
        // Under IF EXISTS, views the catalog does not hold are dropped where they would be:
        // on the first shard.
        let names: Vec<String> = unrecorded.iter().map(ToString::to_string).collect();
        work.entry(ShardId(0)).or_default().push(format!(
            "DROP {} IF EXISTS {}{}",
            if materialized {
                "MATERIALIZED VIEW"
            } else {
                "VIEW"
            },
            names.join(", "),
            if cascade { " CASCADE" } else { "" }
        ));
    }
    ctx.catalog
        .set_view_state(&ids, TableState::Dropping)
        .await?;
    if let Err(e) = ctx.coordinator.run(work.into_iter().collect()).await {
        // Nothing was dropped: the views are as they were.
        let active: Vec<TableId> = named
            .iter()
            .filter(|v| v.entry.state != TableState::Dropping)
            .map(|v| v.entry.id)
            .collect();
        ctx.catalog
            .set_view_state(&active, TableState::Active)
            .await?;
        return Err(e.into());
    }
    ctx.catalog.delete_views(&gone).await?;
    Ok(if materialized {
        "DROP MATERIALIZED VIEW"
    } else {
        "DROP VIEW"
    })
}
