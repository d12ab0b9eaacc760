//! Reads, updates and deletes: which rows of a family a statement can touch, from its WHERE
//! clause and join conditions (key equalities, IN lists, ranges, arrays).

use super::row_origin::repeated_rows;
use super::scope::{resolve, Scope};
use super::{
    unsupported, Constraint, KeyTuple, Keys, Merge, Operand, Plan, RangeEnd, ShardAnswers,
    ShardedPlan, StatementKind, Use, Value,
};
use crate::catalog::{ShardId, Table, TableKind};
use crate::router::hash::KeyType;
use pg_query::protobuf::{a_const, AExpr, AExprKind, BoolExprType, JoinType, Node};
use pg_query::NodeEnum;
use std::sync::Arc;

// ---------------------------------------------------------------------------------------------
// Reads, updates and deletes: the key from the WHERE clause.

/// The tables of the top-level FROM list, and whether a sharded table appears anywhere else
/// (a subquery, a CTE, a set operation's arm).
pub(super) fn top_level_uses<'s>(from: &[Node], snapshot: &'s Scope, out: &mut Vec<Use<'s>>) {
    uses_below(from, false, snapshot, out);
}

fn uses_below<'s>(from: &[Node], null_extended: bool, snapshot: &'s Scope, out: &mut Vec<Use<'s>>) {
    for item in from {
        match item.node.as_ref() {
            Some(NodeEnum::RangeVar(r)) => out.push(Use {
                table: resolve(snapshot, r),
                qualifier: r
                    .alias
                    .as_ref()
                    .map_or_else(|| r.relname.clone(), |a| a.aliasname.clone()),
                null_extended,
            }),
            Some(NodeEnum::JoinExpr(j)) => {
                let kind = j.jointype;
                let full = kind == JoinType::JoinFull as i32;
                let left_padded = full || kind == JoinType::JoinRight as i32;
                let right_padded = full || kind == JoinType::JoinLeft as i32;
                for (side, padded) in [(&j.larg, left_padded), (&j.rarg, right_padded)] {
                    if let Some(side) = side.as_deref() {
                        uses_below(
                            std::slice::from_ref(side),
                            null_extended || padded,
                            snapshot,
                            out,
                        );
                    }
                }
            }
            _ => {}
        }
    }
}

/// Conditions that hold for every row the statement sees: the WHERE clause's conjuncts and the
/// ON conditions of inner joins.
pub(super) fn conjuncts<'a>(node: &'a Node, out: &mut Vec<&'a Node>) {
    match node.node.as_ref() {
        Some(NodeEnum::BoolExpr(b)) if b.boolop == BoolExprType::AndExpr as i32 => {
            for a in &b.args {
                conjuncts(a, out);
            }
        }
        Some(_) => out.push(node),
        None => {}
    }
}

pub(super) fn inner_join_quals<'a>(from: &'a [Node], out: &mut Vec<&'a Node>) {
    for item in from {
        if let Some(NodeEnum::JoinExpr(j)) = item.node.as_ref() {
            if j.jointype == JoinType::JoinInner as i32 {
                if let Some(q) = j.quals.as_deref() {
                    conjuncts(q, out);
                }
            }
            let sides: Vec<&Node> = [&j.larg, &j.rarg]
                .into_iter()
                .flatten()
                .map(|b| &**b)
                .collect();
            for s in sides {
                inner_join_quals(std::slice::from_ref(s), out);
            }
        }
    }
}

/// Join conditions of any join (inner or outer): which key columns are equal across tables.
pub(super) fn all_join_quals<'a>(from: &'a [Node], out: &mut Vec<&'a Node>) {
    for item in from {
        if let Some(NodeEnum::JoinExpr(j)) = item.node.as_ref() {
            if let Some(q) = j.quals.as_deref() {
                conjuncts(q, out);
            }
            for s in [&j.larg, &j.rarg].into_iter().flatten() {
                all_join_quals(std::slice::from_ref(&**s), out);
            }
        }
    }
}

/// The USING columns of the FROM list's joins, at any depth.
pub(super) fn using_columns(from: &[Node], out: &mut Vec<String>) {
    for item in from {
        if let Some(NodeEnum::JoinExpr(j)) = item.node.as_ref() {
            out.extend(j.using_clause.iter().filter_map(|n| match n.node.as_ref() {
                Some(NodeEnum::String(s)) => Some(s.sval.clone()),
                _ => None,
            }));
            for s in [&j.larg, &j.rarg].into_iter().flatten() {
                using_columns(std::slice::from_ref(&**s), out);
            }
        }
    }
}

/// `JOIN … USING (k)`: k is equal on both sides, so the key columns named k of the join's
/// tables are one. The tables of a join are a run of [`top_level_uses`]' order, counted from
/// `next`; PostgreSQL refuses a USING column that one side has twice.
fn union_using(from: &[Node], next: &mut usize, slots: &Slots<'_>, b: &mut Bindings) {
    for item in from {
        match item.node.as_ref() {
            Some(NodeEnum::RangeVar(_)) => *next += 1,
            Some(NodeEnum::JoinExpr(j)) => {
                let first = *next;
                for s in [&j.larg, &j.rarg].into_iter().flatten() {
                    union_using(std::slice::from_ref(&**s), next, slots, b);
                }
                for n in &j.using_clause {
                    let Some(NodeEnum::String(column)) = n.node.as_ref() else {
                        continue;
                    };
                    let members: Vec<Slot> = (first..*next)
                        .filter_map(|u| {
                            let p = slots.columns(u).iter().position(|c| *c == column.sval)?;
                            Some((u, p))
                        })
                        .collect();
                    for pair in members.windows(2) {
                        b.union(pair[0], pair[1]);
                    }
                }
            }
            _ => {}
        }
    }
}

/// A key column of one of the statement's tables: (use index, position). Positions count the
/// sharding-key columns first, then the partition-set columns.
pub(super) type Slot = (usize, usize);

pub(super) struct Bindings {
    /// Per slot: what the conditions say about the column.
    pub(super) conds: Vec<Vec<Constraint>>,
    /// Union-find parent per flattened slot.
    pub(super) parent: Vec<usize>,
    pub(super) width: usize,
}

impl Bindings {
    fn new(uses: usize, width: usize) -> Bindings {
        Bindings {
            conds: vec![vec![Constraint::default(); width]; uses],
            parent: (0..uses * width).collect(),
            width,
        }
    }

    fn find(&mut self, i: usize) -> usize {
        let mut i = i;
        while self.parent[i] != i {
            self.parent[i] = self.parent[self.parent[i]];
            i = self.parent[i];
        }
        i
    }

    fn union(&mut self, a: Slot, b: Slot) {
        let (a, b) = (a.0 * self.width + a.1, b.0 * self.width + b.1);
        let (ra, rb) = (self.find(a), self.find(b));
        self.parent[ra] = rb;
    }

    fn same(&mut self, a: Slot, b: Slot) -> bool {
        let (a, b) = (a.0 * self.width + a.1, b.0 * self.width + b.1);
        self.find(a) == self.find(b)
    }

    /// Records an equality. The first one read is kept: each holds, so any one narrows
    /// correctly, and a plain list beats an array only as far as `OneOf` is concerned.
    fn bind(&mut self, slot: Slot, values: Vec<Value>) {
        let cell = &mut self.conds[slot.0][slot.1].equal;
        let plain = |v: &[Value]| v.iter().all(|v| matches!(v, Value::One(_)));
        match cell {
            None => *cell = Some(values),
            Some(old) if !plain(old) && plain(&values) => *cell = Some(values),
            Some(_) => {}
        }
    }

    fn bound(&mut self, slot: Slot, end: RangeEnd, upper: bool) {
        let c = &mut self.conds[slot.0][slot.1];
        if upper {
            c.upper.push(end);
        } else {
            c.lower.push(end);
        }
    }

    /// The plain values slot `s` is known to take, directly or through an equal column.
    fn value_of(&mut self, s: Slot) -> Option<Vec<Operand>> {
        let uses = self.conds.len();
        for u in 0..uses {
            for p in 0..self.width {
                if self.same(s, (u, p)) {
                    let plain: Option<Vec<Operand>> =
                        self.conds[u][p].equal.as_ref().and_then(|vs| {
                            vs.iter()
                                .map(|v| match v {
                                    Value::One(op) => Some(op.clone()),
                                    Value::Elements(_) => None,
                                })
                                .collect()
                        });
                    if plain.is_some() {
                        return plain;
                    }
                }
            }
        }
        None
    }

    /// Everything known about slot `s`: the conditions on every column equal to it.
    fn constraint_of(&mut self, s: Slot) -> Constraint {
        let mut out = Constraint::default();
        for u in 0..self.conds.len() {
            for p in 0..self.width {
                if self.same(s, (u, p)) {
                    let c = &self.conds[u][p];
                    if out.equal.is_none() {
                        out.equal.clone_from(&c.equal);
                    }
                    out.lower.extend(c.lower.iter().cloned());
                    out.upper.extend(c.upper.iter().cloned());
                }
            }
        }
        out
    }
}

/// The key slots of a statement's family tables, by column name.
pub(super) struct Slots<'s> {
    pub(super) uses: Vec<Use<'s>>,
    pub(super) root_key: usize,
    /// The columns of `JOIN … USING (…)`: unqualified, each names the join's merged column.
    pub(super) merged: Vec<String>,
}

impl<'s> Slots<'s> {
    pub(super) fn columns(&self, u: usize) -> Vec<&'s str> {
        match self.uses[u].table {
            Some(t) if t.kind == TableKind::Sharded => {
                t.sharding_columns().map(|c| c.name.as_str()).collect()
            }
            _ => Vec::new(),
        }
    }

    /// The type of the key column in slot `s`, when the router can read it.
    fn column_type(&self, s: Slot) -> Option<KeyType> {
        let t = self.uses.get(s.0)?.table?;
        t.sharding_columns().nth(s.1)?.key_type().ok()
    }

    /// The slot a column reference names, if it is a key column of one family table.
    pub(super) fn slot(&self, fields: &[Node]) -> Option<Slot> {
        let names: Vec<&str> = fields
            .iter()
            .filter_map(|f| match f.node.as_ref()? {
                NodeEnum::String(s) => Some(s.sval.as_str()),
                _ => None,
            })
            .collect();
        if names.len() != fields.len() {
            return None;
        }
        let (qualifier, column) = match names.as_slice() {
            [c] => (None, *c),
            [.., q, c] => (Some(*q), *c),
            [] => return None,
        };
        let mut found = None;
        for u in 0..self.uses.len() {
            if qualifier.is_some_and(|q| q != self.uses[u].qualifier) {
                continue;
            }
            if let Some(p) = self.columns(u).iter().position(|c| *c == column) {
                if found.is_some() {
                    // The merged column of a USING join is equal to each side's (or the
                    // non-null one of an outer join's); any other repeat is ambiguous, which
                    // PostgreSQL reports.
                    if qualifier.is_none() && self.merged.iter().any(|m| m == column) {
                        break;
                    }
                    return None;
                }
                found = Some((u, p));
            }
        }
        found
    }
}

/// A constant or parameter, possibly cast; `None` for any other expression.
pub(super) fn operand(node: &Node) -> Option<Operand> {
    match node.node.as_ref()? {
        NodeEnum::AConst(c) => {
            if c.isnull {
                return Some(Operand::Located(None, c.location));
            }
            let value = match c.val.as_ref()? {
                a_const::Val::Ival(i) => i.ival.to_string(),
                a_const::Val::Fval(f) => f.fval.clone(),
                a_const::Val::Sval(s) => s.sval.clone(),
                a_const::Val::Boolval(b) => b.boolval.to_string(),
                a_const::Val::Bsval(_) => return None,
            };
            Some(Operand::Located(Some(value), c.location))
        }
        NodeEnum::ParamRef(p) if p.number >= 1 => Some(Operand::Param(p.number as usize - 1)),
        // A cast of a string literal hands the text to the type's input function, as the key
        // column's own would read it; so does an integer's cast to an integer or numeric type
        // (SQL EXECUTE's arguments, `7::bigint`). Casts of other expressions may change the
        // value (`7.5::int` is 8).
        NodeEnum::TypeCast(t) => match operand(t.arg.as_deref()?)? {
            op @ Operand::Param(_) => Some(op),
            op => match t.arg.as_deref()?.node.as_ref()? {
                NodeEnum::AConst(c) if matches!(c.val, Some(a_const::Val::Sval(_))) || c.isnull => {
                    Some(op)
                }
                NodeEnum::AConst(c)
                    if matches!(c.val, Some(a_const::Val::Ival(_))) && casts_to_exact_number(t) =>
                {
                    Some(op)
                }
                _ => None,
            },
        },
        _ => None,
    }
}

/// Whether the cast is to an integer or numeric type, which keeps an integer's value.
fn casts_to_exact_number(cast: &pg_query::protobuf::TypeCast) -> bool {
    let Some(type_name) = cast.type_name.as_ref() else {
        return false;
    };
    let name = type_name.names.last().and_then(|n| match n.node.as_ref()? {
        NodeEnum::String(s) => Some(s.sval.as_str()),
        _ => None,
    });
    type_name.array_bounds.is_empty()
        && matches!(
            name,
            Some(
                "int2"
                    | "int4"
                    | "int8"
                    | "smallint"
                    | "integer"
                    | "int"
                    | "bigint"
                    | "numeric"
                    | "decimal"
            )
        )
}

pub(super) fn op_name(a: &AExpr) -> Option<&str> {
    match a.name.as_slice() {
        [n] => match n.node.as_ref()? {
            NodeEnum::String(s) => Some(s.sval.as_str()),
            _ => None,
        },
        _ => None,
    }
}

pub(super) fn column_fields(node: &Node) -> Option<&[Node]> {
    match node.node.as_ref()? {
        NodeEnum::ColumnRef(c) => Some(&c.fields),
        _ => None,
    }
}

/// Reads the key bindings and key equalities of the conditions.
pub(super) fn read_conditions(
    conds: &[&Node],
    joins: &[&Node],
    slots: &Slots<'_>,
    b: &mut Bindings,
) {
    for node in joins {
        if let Some(NodeEnum::AExpr(a)) = node.node.as_ref() {
            if a.kind == AExprKind::AexprOp as i32 && op_name(a) == Some("=") {
                let (Some(l), Some(r)) = (a.lexpr.as_deref(), a.rexpr.as_deref()) else {
                    continue;
                };
                if let (Some(lf), Some(rf)) = (column_fields(l), column_fields(r)) {
                    if let (Some(ls), Some(rs)) = (slots.slot(lf), slots.slot(rf)) {
                        b.union(ls, rs);
                    }
                }
            }
        }
    }
    for node in conds {
        match node.node.as_ref() {
            Some(NodeEnum::AExpr(a)) => read_comparison(a, slots, b),
            Some(NodeEnum::NullTest(t)) if t.nulltesttype == 1 => {
                // IS NULL (NullTestType::IsNull = 1): a NULL key hashes as no value. On the
                // nullable side of an outer join it also holds for every shard's padded rows,
                // so it says nothing of where the rows are.
                if let Some(f) = t.arg.as_deref().and_then(column_fields) {
                    if let Some(s) = slots.slot(f).filter(|s| !slots.uses[s.0].null_extended) {
                        b.bind(s, vec![Value::One(Operand::Const(None))]);
                    }
                }
            }
            _ => {}
        }
    }
}

/// One comparison of the WHERE clause (or an inner join's ON): `=`, `IN`, `= ANY`, `<`, `<=`,
/// `>`, `>=`, `BETWEEN` between a key column and constants or parameters.
pub(super) fn read_comparison(a: &AExpr, slots: &Slots<'_>, b: &mut Bindings) {
    let (Some(l), Some(r)) = (a.lexpr.as_deref(), a.rexpr.as_deref()) else {
        return;
    };
    let kind = a.kind;
    let op = op_name(a);
    if kind == AExprKind::AexprOp as i32 {
        let (f, value, flipped) = match (column_fields(l), column_fields(r)) {
            (Some(lf), Some(rf)) => {
                if op == Some("=") {
                    if let (Some(ls), Some(rs)) = (slots.slot(lf), slots.slot(rf)) {
                        b.union(ls, rs);
                    }
                }
                return;
            }
            (Some(f), None) => (f, r, false),
            (None, Some(f)) => (f, l, true),
            (None, None) => return,
        };
        let Some(s) = slots.slot(f) else { return };
        // `5 < k` is `k > 5`.
        let (upper, inclusive) = match (op, flipped) {
            (Some("="), _) => {
                if let Some(v) = operand(value) {
                    b.bind(s, vec![Value::One(v)]);
                }
                return;
            }
            (Some("<"), false) | (Some(">"), true) => (true, false),
            (Some("<="), false) | (Some(">="), true) => (true, true),
            (Some(">"), false) | (Some("<"), true) => (false, false),
            (Some(">="), false) | (Some("<="), true) => (false, true),
            _ => return,
        };
        if let Some(v) = range_operand(value, slots.column_type(s)) {
            b.bound(
                s,
                RangeEnd {
                    value: v,
                    inclusive,
                },
                upper,
            );
        }
    } else if kind == AExprKind::AexprIn as i32 && op == Some("=") {
        let (Some(f), Some(NodeEnum::List(list))) = (column_fields(l), r.node.as_ref()) else {
            return;
        };
        let values: Option<Vec<Value>> = list
            .items
            .iter()
            .map(|n| operand(n).map(Value::One))
            .collect();
        if let (Some(s), Some(values)) = (slots.slot(f), values) {
            b.bind(s, values);
        }
    } else if kind == AExprKind::AexprOpAny as i32 && op == Some("=") {
        let (Some(f), Some(values)) = (column_fields(l), array_values(r)) else {
            return;
        };
        if let Some(s) = slots.slot(f) {
            b.bind(s, values);
        }
    } else if kind == AExprKind::AexprBetween as i32 {
        // BETWEEN SYMMETRIC and NOT BETWEEN narrow nothing here.
        let (Some(f), Some(NodeEnum::List(list))) = (column_fields(l), r.node.as_ref()) else {
            return;
        };
        let (Some(s), [low, high]) = (slots.slot(f), list.items.as_slice()) else {
            return;
        };
        let ty = slots.column_type(s);
        if let Some(v) = range_operand(low, ty) {
            b.bound(
                s,
                RangeEnd {
                    value: v,
                    inclusive: true,
                },
                false,
            );
        }
        if let Some(v) = range_operand(high, ty) {
            b.bound(
                s,
                RangeEnd {
                    value: v,
                    inclusive: true,
                },
                true,
            );
        }
    }
}

/// The values of `= ANY(…)`'s array: `ARRAY[…]` of constants and parameters, or one array
/// value (a `'{…}'` literal or a parameter, possibly cast) whose elements the router reads at
/// Bind.
pub(super) fn array_values(node: &Node) -> Option<Vec<Value>> {
    match node.node.as_ref()? {
        NodeEnum::AArrayExpr(a) => a
            .elements
            .iter()
            .map(|e| operand(e).map(Value::One))
            .collect(),
        NodeEnum::TypeCast(t) => {
            if let Some(NodeEnum::AArrayExpr(_)) = t.arg.as_deref()?.node.as_ref() {
                // ARRAY[…]::T[] converts each element to T: other than the key's type, it
                // may change the values.
                return None;
            }
            operand(node).map(|v| vec![Value::Elements(v)])
        }
        NodeEnum::AConst(c) if matches!(c.val, Some(a_const::Val::Sval(_))) => {
            operand(node).map(|v| vec![Value::Elements(v)])
        }
        NodeEnum::ParamRef(_) => operand(node).map(|v| vec![Value::Elements(v)]),
        _ => None,
    }
}

/// A range condition's value, when it compares as the key column's own type would. An
/// equality with a value of another type can only send the statement to a shard too many;
/// an order comparison could drop a shard (`date_col < '2024-01-01 10:00'::timestamp` holds
/// for 2024-01-01), so casts count only to the column's type.
pub(super) fn range_operand(node: &Node, column: Option<KeyType>) -> Option<Operand> {
    let mut n = node;
    while let Some(NodeEnum::TypeCast(t)) = n.node.as_ref() {
        let cast = t.type_name.as_ref()?;
        if !cast.array_bounds.is_empty() {
            return None;
        }
        let name = cast.names.last().and_then(|n| match n.node.as_ref()? {
            NodeEnum::String(s) => Some(s.sval.as_str()),
            _ => None,
        })?;
        let cast_type = KeyType::from_pg_type_name(name).ok()?;
        if !crate::router::place::compares_as(cast_type, column?) {
            return None;
        }
        n = t.arg.as_deref()?;
    }
    match n.node.as_ref()? {
        // An integer cast to an integer type keeps its value (`10::int2`); casts of other
        // constants may round it, and `operand` refuses them.
        NodeEnum::AConst(c) if matches!(c.val, Some(a_const::Val::Ival(_))) => operand(n),
        _ => operand(node),
    }
}

/// Every combination of the values of the given slots (an IN list on two key columns gives
/// their cross product), capped so a long IN list cannot explode.
pub(super) fn tuples(per_slot: Vec<Vec<Operand>>, root_key: usize) -> Option<Vec<KeyTuple>> {
    const MAX_TUPLES: usize = 10_000;
    let mut out: Vec<Vec<Operand>> = vec![Vec::new()];
    for values in per_slot {
        if out.len() * values.len() > MAX_TUPLES {
            return None;
        }
        out = out
            .into_iter()
            .flat_map(|prefix| {
                values.iter().map(move |v| {
                    let mut t = prefix.clone();
                    t.push(v.clone());
                    t
                })
            })
            .collect();
    }
    Some(
        out.into_iter()
            .map(|mut t| {
                let set_key = t.split_off(root_key.min(t.len()));
                KeyTuple { key: t, set_key }
            })
            .collect(),
    )
}

pub(super) fn plan_filtered(
    kind: StatementKind,
    from: &[Node],
    where_clause: Option<&Node>,
    snapshot: &Scope,
    sharded: &[&Table],
    shards: Vec<ShardId>,
    returning: bool,
) -> Plan {
    let mut uses = Vec::new();
    top_level_uses(from, snapshot, &mut uses);
    let top_sharded = uses
        .iter()
        .filter(|u| u.table.is_some_and(|t| t.kind == TableKind::Sharded))
        .count();
    if top_sharded < sharded.len() {
        return unsupported(format!(
            "a subquery, CTE or set operation over sharded table \"{}\" is not supported yet",
            sharded[0].qualified_name()
        ));
    }
    let root = snapshot.root_of(sharded[0].id).unwrap_or(sharded[0]);
    let root_key = root.key_columns.len();
    let width = root_key + root.partition_set_columns.len();
    let mut merged = Vec::new();
    using_columns(from, &mut merged);
    let slots = Slots {
        uses,
        root_key,
        merged,
    };
    let mut b = Bindings::new(slots.uses.len(), width);
    union_using(from, &mut 0, &slots, &mut b);
    let mut conds = Vec::new();
    if let Some(w) = where_clause {
        conjuncts(w, &mut conds);
    }
    inner_join_quals(from, &mut conds);
    let mut joins = Vec::new();
    all_join_quals(from, &mut joins);
    joins.extend(conds.iter().copied());
    read_conditions(&conds, &joins, &slots, &mut b);

    let family: Vec<usize> = (0..slots.uses.len())
        .filter(|&u| !slots.columns(u).is_empty())
        .collect();
    // Several family tables are joined shard by shard only when they are equal on the whole key.
    let colocated = family
        .iter()
        .all(|&u| (0..width).all(|p| b.same((family[0], p), (u, p))));
    // Joined on the whole key, the first family table whose whole key is known says where
    // every table's rows are. Otherwise each table's rows are where its own key says: every
    // table needs its whole key, and the statement goes to all of their shards (where, being
    // several, it is refused rather than joined shard by shard).
    let mut keys = Keys::Any;
    let mut all_tuples = Vec::new();
    for &u in &family {
        let per_slot: Option<Vec<Vec<Operand>>> = (0..width).map(|p| b.value_of((u, p))).collect();
        match per_slot.and_then(|per_slot| tuples(per_slot, slots.root_key)) {
            Some(t) if colocated => {
                keys = Keys::OneOf(t);
                break;
            }
            Some(t) => all_tuples.extend(t),
            None if colocated => {}
            None => {
                all_tuples.clear();
                break;
            }
        }
    }
    if !colocated && !all_tuples.is_empty() {
        keys = Keys::OneOf(all_tuples);
    }
    // Short of whole keys, what the conditions say per column. Only when the family's tables
    // are joined on the whole key: otherwise one table's conditions say nothing of where the
    // other's rows are.
    if keys == Keys::Any && colocated {
        let per_slot: Vec<Constraint> = (0..width)
            .map(|p| b.constraint_of((family[0], p)))
            .collect();
        if per_slot.iter().any(|c| !c.is_empty()) {
            keys = Keys::Constrained(per_slot);
        }
    }
    let table = slots.uses[family[0]].table.map_or(sharded[0].id, |t| t.id);
    // Run whole on several shards, the statement must give each output row on exactly one
    // of them (the rule: row_origin.rs). Where it does not, it runs whole only when its keys
    // pin it to one shard; over several, the general path answers.
    let overlap = if colocated {
        repeated_rows(from, snapshot)
    } else {
        Some(
            "a join of sharded tables that are not equal on the whole sharding key is not \
             supported yet: join the family's tables on their sharding-key columns"
                .to_string(),
        )
    };
    let answers = match overlap {
        Some(why) if keys == Keys::Any => return unsupported(why),
        Some(_) => ShardAnswers::Overlapping,
        None => ShardAnswers::Disjoint,
    };
    Plan::Sharded(Arc::new(ShardedPlan {
        table,
        kind,
        keys,
        shards,
        merge: Merge::default(),
        multi_shard_refusal: overlap,
        answers,
        returning,
        generated: None,
        insert_select: None,
        key_update: None,
        combine: None,
        aggregate: None,
    }))
}
