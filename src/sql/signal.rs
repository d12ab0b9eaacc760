//! `SELECT pg_cancel_backend(pid)` and `SELECT pg_terminate_backend(pid)` on their own, with a
//! constant pid or one bound as a parameter (`$1`, as drivers send it): when the pid is one the
//! proxy gave a client (its BackendKeyData), the proxy signals that client's session itself,
//! since the pid names no process on any shard.

use pg_query::protobuf::{a_const, Node};
use pg_query::NodeEnum;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Signal {
    /// `pg_cancel_backend`: the session's running statement is canceled.
    Cancel,
    /// `pg_terminate_backend`: the session ends.
    Terminate,
}

impl Signal {
    pub fn function(self) -> &'static str {
        match self {
            Signal::Cancel => "pg_cancel_backend",
            Signal::Terminate => "pg_terminate_backend",
        }
    }
}

/// The pid a call names.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Pid {
    Given(i32),
    /// The Bind's parameter at this index (0-based).
    Param(usize),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SignalCall {
    pub signal: Signal,
    pub pid: Pid,
    /// The result column's name: the function's, or the alias.
    pub result_name: String,
}

/// Whether `sql` may call one of the functions: a cheap test before parsing, made on every
/// simple-protocol SELECT (underscores are found with memchr; only those are compared).
pub fn mentions_signal(sql: &[u8]) -> bool {
    const NEEDLE: &[u8] = b"_backend";
    memchr::memchr_iter(b'_', sql).any(|at| {
        sql.get(at..at + NEEDLE.len())
            .is_some_and(|w| w.eq_ignore_ascii_case(NEEDLE))
    })
}

/// The call, when `sql` is one SELECT of one of the functions with a constant pid or a
/// parameter and nothing else (no FROM, WHERE, other columns …).
pub fn signal_call(sql: &str) -> Option<SignalCall> {
    let parsed = pg_query::parse(sql, 0).ok()?;
    let [raw] = parsed.protobuf.stmts.as_slice() else {
        return None;
    };
    let Some(NodeEnum::SelectStmt(s)) = raw.stmt.as_ref()?.node.as_ref() else {
        return None;
    };
    let bare = s.from_clause.is_empty()
        && s.where_clause.is_none()
        && s.group_clause.is_empty()
        && s.having_clause.is_none()
        && s.window_clause.is_empty()
        && s.values_lists.is_empty()
        && s.sort_clause.is_empty()
        && s.limit_count.is_none()
        && s.limit_offset.is_none()
        && s.locking_clause.is_empty()
        && s.with_clause.is_none()
        && s.distinct_clause.is_empty()
        && s.into_clause.is_none()
        && s.larg.is_none();
    let [target] = s.target_list.as_slice() else {
        return None;
    };
    if !bare {
        return None;
    }
    let Some(NodeEnum::ResTarget(res)) = target.node.as_ref() else {
        return None;
    };
    let Some(NodeEnum::FuncCall(f)) = res.val.as_deref()?.node.as_ref() else {
        return None;
    };
    let signal = match super::func::builtin_name(f)? {
        "pg_cancel_backend" => Signal::Cancel,
        "pg_terminate_backend" => Signal::Terminate,
        _ => return None,
    };
    let plain_call = f.agg_order.is_empty()
        && f.agg_filter.is_none()
        && f.over.is_none()
        && !f.agg_star
        && !f.agg_distinct
        && !f.func_variadic;
    // pg_terminate_backend's optional second argument is how long to wait for the end; the
    // proxy ends the session at once.
    let arity_fits = match signal {
        Signal::Cancel => f.args.len() == 1,
        Signal::Terminate => (1..=2).contains(&f.args.len()),
    };
    if !plain_call || !arity_fits {
        return None;
    }
    let pid = pid_argument(f.args.first()?)?;
    let result_name = if res.name.is_empty() {
        signal.function().to_owned()
    } else {
        res.name.clone()
    };
    Some(SignalCall {
        signal,
        pid,
        result_name,
    })
}

/// `123`, `'123'`, `$n`, or any of them cast to an integer type.
fn pid_argument(node: &Node) -> Option<Pid> {
    match node.node.as_ref()? {
        NodeEnum::ParamRef(p) => Some(Pid::Param(usize::try_from(p.number).ok()?.checked_sub(1)?)),
        NodeEnum::TypeCast(t) => {
            let type_name = t.type_name.as_ref()?;
            let last = type_name.names.last()?;
            let Some(NodeEnum::String(s)) = last.node.as_ref() else {
                return None;
            };
            if !matches!(s.sval.as_str(), "int4" | "int2" | "int8" | "integer") {
                return None;
            }
            pid_argument(t.arg.as_deref()?)
        }
        NodeEnum::AConst(c) => match c.val.as_ref()? {
            a_const::Val::Ival(i) => Some(Pid::Given(i.ival)),
            a_const::Val::Sval(s) => s.sval.trim().parse().ok().map(Pid::Given),
            _ => None,
        },
        _ => None,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn recognises_the_calls_with_a_constant_pid() {
        let call = signal_call("SELECT pg_cancel_backend(4242)").unwrap();
        assert_eq!(call.signal, Signal::Cancel);
        assert_eq!(call.pid, Pid::Given(4242));
        assert_eq!(call.result_name, "pg_cancel_backend");
        let call = signal_call("select PG_CATALOG.Pg_Terminate_Backend(7, 1000) AS gone;").unwrap();
        assert_eq!(call.signal, Signal::Terminate);
        assert_eq!(call.pid, Pid::Given(7));
        assert_eq!(call.result_name, "gone");
        assert_eq!(
            signal_call("SELECT pg_terminate_backend('12'::int4)").map(|c| c.pid),
            Some(Pid::Given(12))
        );
        assert_eq!(
            signal_call("SELECT pg_cancel_backend($1)").map(|c| c.pid),
            Some(Pid::Param(0))
        );
        assert_eq!(
            signal_call("SELECT pg_terminate_backend($2::int4, $1)").map(|c| c.pid),
            Some(Pid::Param(1))
        );
    }

    #[test]
    fn leaves_every_other_shape_to_the_shards() {
        for sql in [
            "SELECT pg_cancel_backend(pid) FROM pg_stat_activity",
            "SELECT pg_cancel_backend($0)",
            "SELECT pg_cancel_backend(1), 2",
            "SELECT pg_cancel_backend(1) WHERE false",
            "SELECT pg_cancel_backend(1); SELECT 1",
            "SELECT pg_cancel_backend(1, 2)",
            "SELECT myschema.pg_cancel_backend(1)",
            "SELECT pg_backend_pid()",
            "SELECT pg_cancel_backend(pg_backend_pid())",
        ] {
            assert_eq!(signal_call(sql), None, "{sql}");
        }
        assert!(mentions_signal(b"select PG_CANCEL_BACKEND(1)"));
        assert!(!mentions_signal(b"select 1"));
    }
}
