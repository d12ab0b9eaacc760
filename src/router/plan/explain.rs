//! EXPLAIN of a statement over recorded tables: planned as the statement it explains, with the
//! options the shards are to run it with.

use super::scope::Scope;
use super::{plan_scoped, unsupported, ColumnSource, ExplainPlan, Plan, Planned};
use crate::sql::deparse::deparse;
use pg_query::protobuf::Node;
use pg_query::NodeEnum;
use std::sync::Arc;

pub(super) fn plan_explain(
    e: &pg_query::protobuf::ExplainStmt,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Planned {
    let Some(query) = e.query.as_deref() else {
        return Planned::Plan(Plan::Anywhere);
    };
    let analyze = e.options.iter().any(|o| {
        matches!(o.node.as_ref(), Some(NodeEnum::DefElem(d)) if d.defname == "analyze"
            && !matches!(d.arg.as_deref().and_then(|a| a.node.as_ref()),
                Some(NodeEnum::String(s)) if matches!(s.sval.as_str(), "false" | "off" | "0"))
            && !matches!(d.arg.as_deref().and_then(|a| a.node.as_ref()),
                Some(NodeEnum::Boolean(b)) if !b.boolval)
            && !matches!(d.arg.as_deref().and_then(|a| a.node.as_ref()),
                Some(NodeEnum::Integer(i)) if i.ival == 0))
    });
    let explained = query
        .node
        .clone()
        .ok_or_else(|| "an empty statement".to_string());
    let sql = match explained.and_then(deparse) {
        Ok(s) => s,
        Err(e) => {
            return Planned::Plan(unsupported(format!(
                "cannot read the explained statement: {e}"
            )))
        }
    };
    match plan_scoped(&sql, snapshot, columns) {
        Planned::Plan(Plan::Anywhere) => Planned::Plan(Plan::Anywhere),
        Planned::Plan(Plan::Fixed(s)) => Planned::Plan(Plan::Fixed(s)),
        Planned::Plan(plan) => {
            let (options, text_format) = explain_options(&e.options);
            Planned::Plan(Plan::Explain(Arc::new(ExplainPlan {
                sql,
                plan,
                analyze,
                options,
                text_format,
            })))
        }
        need => need,
    }
}

/// EXPLAIN's options written out again (each name with its value, as the grammar takes
/// them), and whether the output format is text.
fn explain_options(options: &[Node]) -> (String, bool) {
    let mut text_format = true;
    let written: Vec<String> = options
        .iter()
        .filter_map(|o| match o.node.as_ref() {
            Some(NodeEnum::DefElem(d)) => Some(d),
            _ => None,
        })
        .map(|d| {
            let value = match d.arg.as_deref().and_then(|a| a.node.as_ref()) {
                Some(NodeEnum::String(v)) => Some(crate::sql::quote::quote_ident(&v.sval)),
                Some(NodeEnum::Boolean(b)) => Some(b.boolval.to_string()),
                Some(NodeEnum::Integer(i)) => Some(i.ival.to_string()),
                Some(NodeEnum::Float(f)) => Some(f.fval.clone()),
                _ => None,
            };
            if d.defname == "format" {
                text_format = value.as_deref().is_none_or(|v| v == "text");
            }
            match value {
                Some(v) => format!("{} {v}", d.defname),
                None => d.defname.clone(),
            }
        })
        .collect();
    (written.join(", "), text_format)
}
