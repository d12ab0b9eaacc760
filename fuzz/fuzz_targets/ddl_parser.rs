//! Arbitrary text through shardwire's sharding DDL: the lexer, the parser (one statement and a
//! script, both dialects), the recognition a simple query goes through, and for what parses,
//! the rewrite to per-shard SQL against the fixture catalog, as the executor runs it before
//! it touches a shard.

#![no_main]

use std::sync::OnceLock;

use libfuzzer_sys::fuzz_target;
use shardwire::ddl::model::{QualifiedName, RewriteContext};
use shardwire::ddl::rewrite::{self, CreateOutcome};
use shardwire::ddl::{self, Statement};
use shardwire::client_error::ClientError;
use shardwire::executor::ddl::{recognise, validate_with_postgres_parser, ExecError, ProxyDdl};
use shardwire::executor::{layout, nosql};
use shardwire_fuzz::{config, snapshot};

fn rewrite_context() -> &'static RewriteContext {
    static CONTEXT: OnceLock<RewriteContext> = OnceLock::new();
    CONTEXT.get_or_init(|| {
        layout::rewrite_context(&snapshot(), config()).expect("the fixture catalog lays out")
    })
}

fuzz_target!(|data: &[u8]| {
    // Bytes that are not UTF-8 reach the parser only as the session passes them on: the
    // recognition takes the bytes, the rest takes text.
    let text = String::from_utf8_lossy(data);
    let _ = ddl::lexer::tokenize(&text);
    let _ = ddl::is_sharding_ddl(&text);
    match ddl::parse(&text) {
        Ok(statement) => rewrite_statement(&statement),
        Err(e) => {
            let _ = (e.sqlstate(), e.error_position(&text), e.to_string());
        }
    }
    if let Ok(statements) = ddl::parse_script(&text) {
        for statement in &statements {
            rewrite_statement(statement);
        }
    }
    if let Some(recognised) = recognise(data, &snapshot()) {
        run_without_shards(recognised);
    }
});

/// What the executor works out for a recognised statement before it talks to any shard.
fn run_without_shards(recognised: ProxyDdl) {
    let snapshot = snapshot();
    match recognised {
        ProxyDdl::Sharding(statement) => rewrite_statement(&statement),
        ProxyDdl::DropTables { tables } => {
            let ctx = rewrite_context();
            for name in &tables {
                if let Ok(per_shard) = rewrite::drop_table(ctx, name) {
                    let _ = validate_with_postgres_parser(&per_shard);
                }
                let _ = ctx.table(name).map(rewrite::drop_leftovers);
            }
        }
        ProxyDdl::OnTable { table, sql, .. } => {
            let Some(recorded) = snapshot.table_by_name(&table.schema, &table.name) else {
                return;
            };
            let Ok(table_layout) = layout::table_layout(&snapshot, recorded) else {
                return;
            };
            let per_shard = match recorded.nosql {
                true => nosql::on_data_table(&table_layout, &sql),
                false => Ok(rewrite::passthrough(&table_layout, &sql)),
            };
            if let Ok(per_shard) = per_shard {
                let _ = validate_with_postgres_parser(&per_shard);
            }
        }
        // Run as written on the shards (the names the CONCURRENTLY recipe picks need them).
        ProxyDdl::DropIndex { .. }
        | ProxyDdl::CreateIndexConcurrently { .. }
        | ProxyDdl::DropIndexConcurrently { .. }
        | ProxyDdl::ReindexConcurrently { .. } => {}
        // Decided from a shard's copy of the view (its definition as PostgreSQL keeps it).
        ProxyDdl::CreateView { .. } | ProxyDdl::DropViews { .. } | ProxyDdl::OnView { .. } => {}
        ProxyDdl::Refused(e) => report(&e),
    }
}

fn rewrite_statement(statement: &Statement) {
    let ctx = rewrite_context();
    match statement {
        Statement::CreateTable(create) => match rewrite::rewrite_create(ctx, create) {
            Ok(CreateOutcome::Create(plan)) => {
                if let Err(e) = validate_with_postgres_parser(&plan.per_shard) {
                    report(&e);
                }
                let _ = layout::new_table(&snapshot(), &plan);
            }
            Ok(CreateOutcome::AlreadyExists(_)) => {}
            Err(e) => {
                let _ = (e.sqlstate(), e.to_string());
            }
        },
        Statement::AlterTtl(alter) => {
            let name = match alter.table.parts.as_slice() {
                [table] => QualifiedName::new(layout::DEFAULT_SCHEMA, table.as_str()),
                [schema, table] => QualifiedName::new(schema.as_str(), table.as_str()),
                _ => return,
            };
            if let Some(table) = ctx.table(&name) {
                let _ = ddl::ttl::set_default_statement(&table.name, Some(alter.ttl));
            }
        }
        Statement::CreateTablespaceSet(_)
        | Statement::DropTablespaceSet(_)
        | Statement::CreateTablespace(_)
        | Statement::DropTablespace(_)
        | Statement::AlterRowMovement(_) => {}
    }
}

/// The client's view of an error: its SQLSTATE, text and position.
fn report(e: &ExecError) {
    let _ = (e.sqlstate(), e.client_message(), e.position());
}
