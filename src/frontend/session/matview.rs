//! `CREATE MATERIALIZED VIEW` and `REFRESH MATERIALIZED VIEW` over recorded tables (simple
//! queries). A materialized view holds the whole answer of its query, which only the proxy can
//! compute: the general path combines the shards' rows on the first shard, stores them there in
//! a table of the proxy's (`shardwire_matview.m<id>`), and the materialized view on that shard
//! reads that table, so PostgreSQL itself keeps the view's rows, indexes, `WITH NO DATA` and
//! `REFRESH … CONCURRENTLY`. DROP and ALTER are the executor's (`executor::view_ddl`).

use super::host::shared;
use super::{Session, SessionError};
use crate::catalog::{NewView, TableId};
use crate::executor::general::{self, CombineJob, MATERIALIZED_ON};
use crate::frontend::socket::ClientSocket;
use crate::frontend::statements;
use crate::model::ViewShape;
use crate::protocol::{self, Frame, TxStatus};
use crate::router::plan::{expand_views, recorded_relations};
use crate::router::SearchPath;
use crate::sql::classify::{keyword, leading_keywords};
use crate::sql::quote::quote_ident;
use pg_query::protobuf::ObjectType;
use pg_query::NodeEnum;
use tokio_postgres::error::SqlState;

/// A materialized-view statement the proxy runs.
enum Statement {
    Create {
        schema: String,
        name: String,
        /// `(a, b, …)` after the name, as written for PostgreSQL.
        columns: String,
        query: String,
        with_data: bool,
        if_not_exists: bool,
    },
    Refresh {
        id: TableId,
        concurrently: bool,
    },
}

impl Session {
    /// Runs a CREATE or REFRESH of a materialized view over recorded tables; `false` for any
    /// other frame, which goes its usual way.
    pub(super) async fn on_materialized_view(
        &mut self,
        frame: &Frame<&[u8]>,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<bool, SessionError> {
        const CREATE: u128 = keyword(b"create");
        const REFRESH: u128 = keyword(b"refresh");
        const MATERIALIZED: u128 = keyword(b"materialized");
        if frame.tag != b'Q' || !self.ctx.catalog.has_tables() {
            return Ok(false);
        }
        let sql = statements::query_text(frame)?;
        if !matches!(leading_keywords::<2>(sql), [CREATE | REFRESH, MATERIALIZED]) {
            return Ok(false);
        }
        let Some(statement) = std::str::from_utf8(sql)
            .ok()
            .and_then(|sql| self.read_statement(sql))
        else {
            return Ok(false);
        };
        if self.links.status() != TxStatus::Idle {
            let message = "CREATE and REFRESH MATERIALIZED VIEW over recorded tables cannot run \
                           inside a transaction block through shardwire (the rows are stored \
                           by a transaction of their own): run it on its own";
            self.refuse_query(frame, &SqlState::ACTIVE_SQL_TRANSACTION, message)
                .await?;
            return Ok(true);
        }
        self.drain_current().await?;
        match self.run_materialized(statement, client).await? {
            Ok(tag) => protocol::command_complete(&mut self.cout, &tag),
            Err(error) => self.cout.extend_from_slice(&error),
        }
        protocol::ready_for_query(&mut self.cout, self.links.status());
        self.settle_after_shards();
        Ok(true)
    }

    fn read_statement(&self, sql: &str) -> Option<Statement> {
        let parsed = pg_query::parse(sql, 0).ok()?;
        let [raw] = parsed.protobuf.stmts.as_slice() else {
            return None;
        };
        let snapshot = self.ctx.catalog.snapshot();
        let schema_of = |s: &str| if s.is_empty() { "public" } else { s }.to_string();
        match raw.stmt.as_deref()?.node.as_ref()? {
            NodeEnum::CreateTableAsStmt(c) if c.objtype == ObjectType::ObjectMatview as i32 => {
                let into = c.into.as_ref()?;
                let rel = into.rel.as_ref()?;
                let query = crate::sql::deparse::deparse(c.query.as_deref()?.node.clone()?).ok()?;
                if recorded_relations(&query, &snapshot).is_empty() {
                    return None;
                }
                let names: Vec<String> = into
                    .col_names
                    .iter()
                    .filter_map(|n| match n.node.as_ref()? {
                        NodeEnum::String(s) => Some(quote_ident(&s.sval)),
                        _ => None,
                    })
                    .collect();
                Some(Statement::Create {
                    schema: schema_of(&rel.schemaname),
                    name: rel.relname.clone(),
                    columns: match names.is_empty() {
                        true => String::new(),
                        false => format!(" ({})", names.join(", ")),
                    },
                    query,
                    with_data: !into.skip_data,
                    if_not_exists: c.if_not_exists,
                })
            }
            NodeEnum::RefreshMatViewStmt(r) if !r.skip_data => {
                let rel = r.relation.as_ref()?;
                let view = snapshot.view_by_name(&schema_of(&rel.schemaname), &rel.relname)?;
                (view.entry.shape == ViewShape::Materialized).then_some(Statement::Refresh {
                    id: view.entry.id,
                    concurrently: r.concurrent,
                })
            }
            _ => None,
        }
    }

    /// The statement's command tag, or its ErrorResponse.
    async fn run_materialized(
        &mut self,
        statement: Statement,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Result<String, bytes::Bytes>, SessionError> {
        let fail = |code: SqlState, message: String| {
            let mut out = bytes::BytesMut::new();
            protocol::error_response(&mut out, protocol::Severity::Error, &code, &message);
            Ok(Err(out.freeze()))
        };
        match statement {
            Statement::Create {
                schema,
                name,
                columns,
                query,
                with_data,
                if_not_exists,
            } => {
                let snapshot = self.ctx.catalog.snapshot();
                let taken = snapshot.view_by_name(&schema, &name).is_some()
                    || snapshot.table_by_name(&schema, &name).is_some();
                match (taken, if_not_exists) {
                    (true, true) => return Ok(Ok("CREATE MATERIALIZED VIEW".into())),
                    (true, false) => {
                        return fail(
                            SqlState::DUPLICATE_TABLE,
                            format!("relation \"{name}\" already exists"),
                        )
                    }
                    (false, _) => {}
                }
                let Some(job) = self.matview_job(&query).await else {
                    return fail(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        "this query cannot be combined over the shards, so no materialized \
                         view can hold its answer"
                            .into(),
                    );
                };
                let entry = NewView {
                    schema: schema.clone(),
                    name: name.clone(),
                    shape: ViewShape::Materialized,
                    placed_like: None,
                    definition: query.clone(),
                    key_columns: Vec::new(),
                    reads: recorded_relations(&query, &snapshot),
                };
                let id = match self.ctx.catalog.create_view(&entry).await {
                    Ok(id) => id,
                    Err(e) => return fail(e.sqlstate(), e.to_string()),
                };
                let staging = crate::catalog::view::staging_table(id);
                let before = format!(
                    "CREATE SCHEMA IF NOT EXISTS {}; CREATE TABLE {staging} AS",
                    crate::catalog::view::MATVIEW_SCHEMA
                );
                let after = format!(
                    "; CREATE MATERIALIZED VIEW {}.{}{columns} AS SELECT * FROM {staging} WITH {}DATA",
                    quote_ident(&schema),
                    quote_ident(&name),
                    if with_data { "" } else { "NO " }
                );
                let stored = self.store_rows(&job, &before, &after, client).await?;
                let done = match stored {
                    Ok(()) => self.ctx.catalog.finish_view(id, &entry).await,
                    Err(error) => {
                        if let Err(e) = self.ctx.catalog.delete_views(&[id]).await {
                            tracing::error!(view = %name, error = %e,
                                "CREATE MATERIALIZED VIEW failed and its catalog entry stays; DROP MATERIALIZED VIEW clears it");
                        }
                        return Ok(Err(error));
                    }
                };
                if let Err(e) = done {
                    return fail(e.sqlstate(), e.to_string());
                }
                Ok(Ok(match with_data {
                    true => format!("SELECT {}", self.stored_rows(&staging).await),
                    false => "CREATE MATERIALIZED VIEW".into(),
                }))
            }
            Statement::Refresh { id, concurrently } => {
                let snapshot = self.ctx.catalog.snapshot();
                let Some(view) = snapshot.view(id) else {
                    return fail(
                        SqlState::UNDEFINED_TABLE,
                        "the materialized view is gone".into(),
                    );
                };
                let Some(job) = self.matview_job(&view.entry.definition).await else {
                    return fail(
                        SqlState::FEATURE_NOT_SUPPORTED,
                        "the materialized view's query cannot be combined over the shards now"
                            .into(),
                    );
                };
                let staging = view.staging_table();
                let before = format!("TRUNCATE {staging}; INSERT INTO {staging}");
                let after = format!(
                    "; REFRESH MATERIALIZED VIEW {}{}.{}",
                    if concurrently { "CONCURRENTLY " } else { "" },
                    quote_ident(&view.entry.schema),
                    quote_ident(&view.entry.name)
                );
                Ok(self
                    .store_rows(&job, &before, &after, client)
                    .await?
                    .map(|()| "REFRESH MATERIALIZED VIEW".to_string()))
            }
        }
    }

    /// The general path of a materialized view's query, its names read as the proxy's DDL
    /// reads them (unqualified: `public`), whatever this session's search_path.
    async fn matview_job(&mut self, query: &str) -> Option<CombineJob> {
        let path = SearchPath::unknown();
        for _ in 0..32 {
            let snapshot = self.ctx.catalog.snapshot();
            let expanded = expand_views(query, &snapshot, None);
            let query = expanded.as_deref().unwrap_or(query);
            match self.ctx.plans.plan_combined(query, Some(&path), &snapshot) {
                Ok(plan) => {
                    return plan.map(|plan| CombineJob {
                        plan,
                        bound: None,
                        shards: Vec::new(),
                    })
                }
                Err(table) => self.fetch_columns(table).await.ok()?,
            }
        }
        None
    }

    async fn store_rows(
        &mut self,
        job: &CombineJob,
        before: &str,
        after: &str,
        client: &mut (dyn ClientSocket + Send),
    ) -> Result<Result<(), bytes::Bytes>, SessionError> {
        let ctx = self.ctx.clone();
        general::materialize(
            &mut self.host(Some(client)),
            shared(&ctx),
            job,
            before,
            after,
        )
        .await
    }

    /// How many rows a refresh stored (the count PostgreSQL's tag reports).
    async fn stored_rows(&self, staging: &str) -> i64 {
        let Ok(conn) = self.ctx.control.shard(MATERIALIZED_ON).pool.get().await else {
            return 0;
        };
        conn.query_one(&format!("SELECT count(*) FROM {staging}"), &[])
            .await
            .map_or(0, |r| r.get(0))
    }
}
