//! Function calls as pg_query gives them.

use pg_query::protobuf::FuncCall;
use pg_query::NodeEnum;

/// The name of a call of a built-in function: written bare or qualified with `pg_catalog`
/// (folded to lower case by the parser unless quoted). `None` for a function of another schema.
pub fn builtin_name(f: &FuncCall) -> Option<&str> {
    let names: Vec<&str> = f
        .funcname
        .iter()
        .filter_map(|n| match n.node.as_ref()? {
            NodeEnum::String(s) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect();
    match names.as_slice() {
        [name] | ["pg_catalog", name] => Some(name),
        _ => None,
    }
}
