//! Statement trees back to SQL text. The router and the proxy's rewrites change pg_query's tree
//! of a statement and send the shards the text the deparser writes for it.

use pg_query::protobuf::{Node, ParseResult, RawStmt};
use pg_query::NodeEnum;

/// The SQL text of one statement.
pub fn deparse(stmt: NodeEnum) -> Result<String, String> {
    let tree = ParseResult {
        // The deparser reads only the statements.
        version: 0,
        stmts: vec![RawStmt {
            stmt: Some(Box::new(Node { node: Some(stmt) })),
            stmt_location: 0,
            stmt_len: 0,
        }],
    };
    pg_query::deparse(&tree, Default::default()).map_err(|e| e.to_string())
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_parsed_statement_reads_back() {
        let parsed = pg_query::parse("SELECT a FROM t WHERE b = $1", 0).unwrap();
        let node = parsed.protobuf.stmts[0].stmt.clone().unwrap().node.unwrap();
        assert_eq!(deparse(node).unwrap(), "SELECT a FROM t WHERE b = $1");
    }
}
