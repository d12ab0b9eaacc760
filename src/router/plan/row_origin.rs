//! Where each output row of a statement comes from, and so whether the statement may run whole
//! on several shards with their answers merged.
//!
//! **The rule.** A statement runs whole on each of several shards, and the shards' answers are
//! concatenated (or merged in order, or aggregated by the proxy), only if every row it produces
//! comes from exactly one shard. A row of a sharded table lives on one shard. A relation that is
//! the same on every shard — a duplicated table, VALUES, a function call, a subquery or WITH
//! query over such relations — gives the same rows on each. A joined row holds a sharded row
//! when either side of an inner join does, when the preserved side of a LEFT or RIGHT join does,
//! and for a FULL join only when both sides do. The rule therefore breaks exactly where a
//! relation that holds no sharded row sits on the preserved side of an outer join whose other
//! side holds a sharded table — directly, nested, or through LATERAL: each shard pads that
//! relation's unmatched rows with NULLs, and the padded rows would come once per shard. Such a
//! statement goes to the general path, which reads each table's rows and lets one PostgreSQL
//! join them — unless its sharding-key conditions pin it to one shard, which then holds every
//! row the statement can see. (Sharded tables inside subqueries, WITH queries and set
//! operations never run whole on several shards: [`super::conditions::plan_filtered`] sends
//! them to the general path before this rule is asked.)
//!
//! Groups follow from the rule: the rows of a group (or of a DISTINCT row) all come from one
//! shard when the group key holds the whole sharding key of a table that is never
//! null-extended ([`preserved_range_vars`]); a key read from the nullable side is NULL on every
//! shard's padded rows.

use super::scope::{resolve, Scope};
use crate::catalog::TableKind;
use pg_query::protobuf::{JoinType, Node, RangeVar};
use pg_query::NodeEnum;

/// What the rows of one FROM item hold.
#[derive(Debug, Clone, Copy)]
struct Origin {
    /// Every row holds a row of a sharded table (so it comes from that row's shard).
    anchored: bool,
    /// The item names a sharded table somewhere.
    sharded: bool,
}

/// Why running the read whole on several shards and merging their answers would repeat rows,
/// or `None` when every output row comes from exactly one shard.
pub(super) fn repeated_rows(from: &[Node], snapshot: &Scope) -> Option<String> {
    let mut why = None;
    for item in from {
        origin(item, snapshot, &mut why);
    }
    why
}

fn origin(item: &Node, snapshot: &Scope, why: &mut Option<String>) -> Origin {
    match item.node.as_ref() {
        Some(NodeEnum::RangeVar(r)) => {
            let sharded = resolve(snapshot, r).is_some_and(|t| t.kind == TableKind::Sharded);
            Origin {
                anchored: sharded,
                sharded,
            }
        }
        Some(NodeEnum::JoinExpr(j)) => {
            let side = |n: &Option<Box<Node>>, why: &mut Option<String>| match n.as_deref() {
                Some(n) => origin(n, snapshot, why),
                None => Origin {
                    anchored: false,
                    sharded: false,
                },
            };
            let l = side(&j.larg, why);
            let r = side(&j.rarg, why);
            let padded =
                |preserved: Origin, nullable: Origin| !preserved.anchored && nullable.sharded;
            let kind = j.jointype;
            let (anchored, breaks) = if kind == JoinType::JoinLeft as i32 {
                (l.anchored, padded(l, r))
            } else if kind == JoinType::JoinRight as i32 {
                (r.anchored, padded(r, l))
            } else if kind == JoinType::JoinFull as i32 {
                (l.anchored && r.anchored, padded(l, r) || padded(r, l))
            } else {
                // Inner and cross joins (semi and anti joins are the planner's, never parsed).
                (l.anchored || r.anchored, false)
            };
            if breaks && why.is_none() {
                *why = Some(
                    "an outer join whose preserved side holds no sharded table (a duplicated \
                     table, VALUES, a function or subquery) and whose other side does"
                        .into(),
                );
            }
            Origin {
                anchored,
                sharded: l.sharded || r.sharded,
            }
        }
        // Subqueries, functions, VALUES: the same on every shard here (a sharded table inside
        // one keeps the statement off this path).
        _ => Origin {
            anchored: false,
            sharded: false,
        },
    }
}

/// The RangeVars of a FROM list whose rows every result row is built from (never the nullable
/// side of an outer join).
pub(super) fn preserved_range_vars<'a>(from: &'a [Node], out: &mut Vec<&'a RangeVar>) {
    for item in from {
        match item.node.as_ref() {
            Some(NodeEnum::RangeVar(r)) => out.push(r),
            Some(NodeEnum::JoinExpr(j)) => {
                let left = j.jointype == JoinType::JoinInner as i32
                    || j.jointype == JoinType::JoinLeft as i32;
                let right = j.jointype == JoinType::JoinInner as i32
                    || j.jointype == JoinType::JoinRight as i32;
                for (side, keep) in [(&j.larg, left), (&j.rarg, right)] {
                    if let (Some(side), true) = (side.as_deref(), keep) {
                        preserved_range_vars(std::slice::from_ref(side), out);
                    }
                }
            }
            _ => {}
        }
    }
}
