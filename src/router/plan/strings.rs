//! Query strings with several statements: sent whole when they all go to one shard, run as a
//! script otherwise; the proxy's own statements among them are refused.

use super::{unsupported, Plan};
use crate::catalog::ShardId;
use pg_query::protobuf::Node;
use pg_query::NodeEnum;

/// A statement of a query string with several that the proxy answers or runs itself only as a
/// statement of its own (admin SHOW, sharding DDL), refused with what to do instead.
pub(super) fn own_statement_among_others(texts: &[&str]) -> Option<Plan> {
    texts.iter().find_map(|text| {
        if crate::sql::admin::parse(text.as_bytes()).is_some() {
            Some(unsupported(format!(
                "\"{}\" is answered by shardwire only as a statement of its own: send it alone, \
                 not together with other statements in one query string",
                text.trim()
            )))
        } else if crate::ddl::is_sharding_ddl(text) {
            Some(unsupported(
                "sharding DDL must be sent as a statement of its own: send it alone, not \
                 together with other statements in one query string",
            ))
        } else {
            None
        }
    })
}

/// Several statements in one query string: sent whole when they all go to one shard, which
/// runs them as PostgreSQL does (one implicit transaction); otherwise a script the session runs
/// statement by statement.
pub(super) fn string_plan(stmts: &[&Node], plans: Vec<Plan>) -> Plan {
    let mut fixed: Option<ShardId> = None;
    let mut script = false;
    for p in &plans {
        match p {
            Plan::Anywhere => {}
            Plan::Fixed(s) if fixed.is_none_or(|f| f == *s) => fixed = Some(*s),
            Plan::Refused(r) => return Plan::Refused(r.clone()),
            _ => script = true,
        }
    }
    if !script {
        return fixed.map_or(Plan::Anywhere, Plan::Fixed);
    }
    // COPY's data would come from the client in the middle of the string.
    if stmts
        .iter()
        .any(|s| matches!(s.node, Some(NodeEnum::CopyStmt(_))))
    {
        return unsupported(
            "COPY in a query string whose statements go to several shards is not supported: \
             send the COPY as a query of its own",
        );
    }
    Plan::Script
}
