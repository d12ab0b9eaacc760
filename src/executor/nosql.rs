//! ALTER TABLE and CREATE INDEX on an Oracle NoSQL table: they change its data table
//! ([`crate::ddl::ttl`]), and a change to the columns shows the view again over the columns the
//! data table has afterwards.

use pg_query::protobuf::RangeVar;
use pg_query::NodeEnum;

use super::ddl::ExecError;
use crate::ddl::model::{ShardStatements, TableLayout};
use crate::ddl::ttl;

/// The statements each shard of `layout` runs for `sql`, which names the table's view.
pub fn on_data_table(layout: &TableLayout, sql: &str) -> Result<ShardStatements, ExecError> {
    let invalid = |message: String| ExecError::InvalidDefinition {
        statement: sql.to_owned(),
        message,
    };
    let mut parsed = pg_query::parse(sql, 0).map_err(|e| invalid(e.to_string()))?;
    let data = ttl::data_table(&layout.name);
    let retarget = |relation: Option<&mut RangeVar>| {
        if let Some(r) = relation {
            r.schemaname.clone_from(&data.schema);
            r.relname.clone_from(&data.name);
        }
    };
    let node = parsed
        .protobuf
        .stmts
        .first_mut()
        .and_then(|raw| raw.stmt.as_mut())
        .and_then(|s| s.node.as_mut());
    let changes_columns = match node {
        Some(NodeEnum::AlterTableStmt(a)) => {
            retarget(a.relation.as_mut());
            true
        }
        Some(NodeEnum::RenameStmt(r)) => {
            retarget(r.relation.as_mut());
            true
        }
        Some(NodeEnum::IndexStmt(i)) => {
            retarget(i.relation.as_mut());
            false
        }
        _ => return Err(invalid("not an ALTER TABLE or CREATE INDEX".into())),
    };
    let statement = pg_query::deparse(&parsed.protobuf, Default::default())
        .map_err(|e| invalid(e.to_string()))?;
    let primary_key: Vec<&str> = layout.primary_key.iter().map(|k| k.name.as_str()).collect();
    let statements = match changes_columns {
        true => ttl::altered_statements(&layout.name, &primary_key, statement),
        false => vec![statement],
    };
    Ok(layout
        .shards
        .iter()
        .map(|s| (*s, statements.clone()))
        .collect())
}
