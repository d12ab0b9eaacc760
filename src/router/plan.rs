//! What a statement needs for routing, read once from PostgreSQL's parse tree (pg_query): the
//! tables it touches, where its sharding-key values come from (literals or `$n` parameters),
//! and for a read that may span shards, how to merge the shards' rows.
//!
//! A plan holds no values of Bind parameters, so one plan serves every execution of a prepared
//! statement; [`super::route`] combines it with the values.

use std::sync::Arc;

use pg_query::protobuf::{
    a_const, AExpr, AExprKind, BoolExprType, JoinType, LimitOption, Node, RangeVar, SelectStmt,
    SetOperation, SortByDir, SortByNulls,
};
use pg_query::NodeEnum;

use super::hash::KeyType;
use crate::catalog::{ShardId, Snapshot, Table, TableId, TableKind};

mod copy;
mod insert_select;
pub use copy::{CopyArg, CopyOption, CopyPlan};
pub use insert_select::InsertSelect;

/// Where a value in the statement comes from.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Operand {
    /// A value's text (`None`: NULL), as PostgreSQL's input function of the column reads it.
    Const(Option<String>),
    /// A constant of the statement text and its byte offset there: the plan cache turns it
    /// into a [`Operand::Literal`] when it shares the plan between texts that differ in it.
    Located(Option<String>, i32),
    /// The `index`-th literal of the simple query being routed (negated: written `-literal`).
    Literal { index: usize, negated: bool },
    /// The generated key value of VALUES row `n`, taken from the cluster-wide sequence.
    Generated(usize),
    /// Bind parameter `$n`, 0-based.
    Param(usize),
}

/// One complete sharding key: a value for every key column of the family root, and for every
/// partition-set column of a composite root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyTuple {
    pub key: Vec<Operand>,
    pub set_key: Vec<Operand>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StatementKind {
    Select,
    Insert,
    Update,
    Delete,
}

impl StatementKind {
    pub fn writes(self) -> bool {
        self != StatementKind::Select
    }
}

/// Which rows of the family the statement can touch.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Keys {
    /// No complete key: every shard holding the family.
    Any,
    /// Rows whose key is one of these (`=` on every key column, `IN` lists).
    OneOf(Vec<KeyTuple>),
    /// INSERT … VALUES: the key of each row, in VALUES order.
    Rows(Vec<KeyTuple>),
    /// What the conditions say about each key column when they do not pin whole keys as
    /// `OneOf` does: ranges for list and range pruning, a partition-set key without the hash
    /// key, `= ANY(array)` whose elements are known only at Bind. One entry per column of the
    /// family root: sharding-key columns, then partition-set columns. The router narrows to
    /// the shards whose partitions or chunks can hold a matching row, and to every shard of
    /// the family where it cannot tell.
    Constrained(Vec<Constraint>),
}

/// The conditions on one key column; every one holds for each row the statement touches.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Constraint {
    /// `=`, `IN`, `= ANY`, `IS NULL`: the column takes one of these values.
    pub equal: Option<Vec<Value>>,
    /// `>`, `>=` and BETWEEN's first value.
    pub lower: Vec<RangeEnd>,
    /// `<`, `<=` and BETWEEN's second value.
    pub upper: Vec<RangeEnd>,
}

impl Constraint {
    fn is_empty(&self) -> bool {
        self.equal.is_none() && self.lower.is_empty() && self.upper.is_empty()
    }
}

/// One value of an equality, or an array whose elements each are one.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Value {
    One(Operand),
    /// `= ANY('{1,2}')` or `= ANY($n)`: an array in PostgreSQL's text or binary format.
    Elements(Operand),
}

/// A bound of a range condition.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RangeEnd {
    pub value: Operand,
    pub inclusive: bool,
}

/// One ORDER BY key of a multi-shard read, as the merge applies it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SortKey {
    /// The column of the shards' rows the key is read from (hidden ones come last).
    pub column: usize,
    pub descending: bool,
    pub nulls_first: bool,
}

/// How the shards' answers to a read are combined into one.
#[derive(Debug, Clone, PartialEq, Eq, Default)]
pub struct Merge {
    pub order: Vec<SortKey>,
    /// Columns appended for ORDER BY expressions that are not selected; removed before the
    /// client sees a row.
    pub hidden: usize,
    /// The selected columns before the hidden ones (known whenever `hidden > 0`).
    pub visible: usize,
    pub limit: Option<u64>,
    pub offset: u64,
    /// The statement each shard runs: ORDER BY keys added as hidden columns, `LIMIT n + offset`
    /// and no OFFSET. `None`: the client's text as it is.
    pub shard_sql: Option<String>,
}

/// A statement over one family of sharded tables (and, for reads, duplicated tables).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardedPlan {
    /// The family member whose key the tuples are read from (its key columns are in the root's
    /// key order).
    pub table: TableId,
    pub kind: StatementKind,
    pub keys: Keys,
    /// Every shard that holds the family, ascending.
    pub shards: Vec<ShardId>,
    /// How to merge when the statement goes to several shards.
    pub merge: Merge,
    /// Why it cannot run on several shards, when it cannot (an aggregate, GROUP BY, …).
    pub multi_shard_refusal: Option<String>,
    /// The INSERT has RETURNING: the rows come back from each shard.
    pub returning: bool,
    /// An INSERT whose generated key column the proxy fills from the cluster-wide sequence.
    pub generated: Option<GeneratedInsert>,
    /// An INSERT … SELECT the proxy runs in two steps (the SELECT, then the rows by shard).
    pub insert_select: Option<Box<InsertSelect>>,
}

/// The generated key column of an INSERT.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GeneratedInsert {
    pub column: String,
    /// Absent from the column list (else given as DEFAULT).
    pub missing: bool,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Plan {
    /// Names no table: wherever the session's transaction is, else the first shard.
    Anywhere,
    /// An unsharded table, or a table the catalog does not record (which lives on the first
    /// shard, where plain `CREATE TABLE` puts it).
    Fixed(ShardId),
    /// Reads duplicated tables only: any one of these shards.
    AnyOf(Vec<ShardId>),
    /// Writes a duplicated table: every copy.
    Every(Vec<ShardId>),
    Sharded(Arc<ShardedPlan>),
    /// COPY FROM STDIN or TO STDOUT of a sharded table (COPY FROM of a duplicated one), which
    /// the session splits or gathers itself.
    Copy(Arc<CopyPlan>),
    /// Cannot be routed correctly; the client is told why.
    Refused(Refusal),
}

/// A statement the router will not send anywhere, with the SQLSTATE class it fails with.
#[derive(Debug, Clone, PartialEq, Eq, thiserror::Error)]
pub enum Refusal {
    /// Not supported yet (0A000).
    #[error("{0}")]
    Unsupported(String),
    /// An explicit value for a `GENERATED ALWAYS` key column (428C9).
    #[error("cannot insert a non-DEFAULT value into column \"{0}\": it is GENERATED ALWAYS AS IDENTITY; leave it out of the INSERT")]
    GeneratedAlways(String),
    /// The table is being created or dropped (55000).
    #[error("table \"{0}\" is not active (it is being created or dropped); try again, or run DROP TABLE to clear it")]
    NotActive(String),
}

fn unsupported(msg: impl Into<String>) -> Plan {
    Plan::Refused(Refusal::Unsupported(msg.into()))
}

/// The columns of a table in their order, for INSERTs that name none; `None` when the caller
/// must fetch them first.
pub trait ColumnSource {
    fn columns(&self, table: TableId) -> Option<Arc<Vec<String>>>;
}

/// The plan of one SQL text, or the table whose columns are needed to make it.
pub enum Planned {
    Plan(Plan),
    NeedColumns(TableId),
}

impl Plan {
    /// Turns the constants at the offsets of `literals` (the plain literals of the planned
    /// text, in order) into references to the literals of whatever text is routed with the
    /// plan. Returns the indexes referenced: every other literal must be the same for the plan
    /// to serve another text (it may be built into the plan).
    pub fn localize(&mut self, literal_offsets: &[usize], text: &[u8]) -> Vec<usize> {
        let mut used = Vec::new();
        let p = match self {
            // Where these go does not depend on any value.
            Plan::Anywhere
            | Plan::Fixed(_)
            | Plan::AnyOf(_)
            | Plan::Every(_)
            | Plan::Refused(_) => return (0..literal_offsets.len()).collect(),
            // The statements each shard runs are built from the text, values included.
            Plan::Copy(_) => return used,
            Plan::Sharded(p) => p,
        };
        if p.merge.shard_sql.is_some() || p.insert_select.is_some() {
            // The rewritten text has the values in it.
            return used;
        }
        let p = Arc::make_mut(p);
        let tuples = match &mut p.keys {
            // Every shard whatever the values, unless LIMIT/OFFSET took some.
            Keys::Any if p.merge.limit.is_none() && p.merge.offset == 0 => {
                return (0..literal_offsets.len()).collect()
            }
            Keys::Any => return used,
            // Pruning bounds are kept as the planned text gave them.
            Keys::Constrained(_) => return used,
            Keys::OneOf(t) | Keys::Rows(t) => t,
        };
        for op in tuples
            .iter_mut()
            .flat_map(|t| t.key.iter_mut().chain(t.set_key.iter_mut()))
        {
            let Operand::Located(Some(_), at) = *op else {
                continue;
            };
            let at = at.max(0) as usize;
            let found = literal_offsets
                .iter()
                .position(|&o| o == at)
                .map(|i| (i, false))
                .or_else(|| {
                    // `-5` is one constant to the parser, the minus sign and a literal to the
                    // scanner.
                    let after_minus = text.get(at).filter(|&&c| c == b'-').map(|_| {
                        at + 1
                            + text[at + 1..]
                                .iter()
                                .take_while(|c| c.is_ascii_whitespace())
                                .count()
                    })?;
                    literal_offsets
                        .iter()
                        .position(|&o| o == after_minus)
                        .map(|i| (i, true))
                });
            if let Some((index, negated)) = found {
                *op = Operand::Literal { index, negated };
                used.push(index);
            }
        }
        used
    }
}

/// Plans `sql` against `snapshot`. Text that PostgreSQL cannot parse goes to the first shard,
/// which reports the syntax error as PostgreSQL would.
pub fn plan(sql: &str, snapshot: &Snapshot, columns: &dyn ColumnSource) -> Planned {
    let parsed = match pg_query::parse(sql, 0) {
        Ok(p) => p,
        Err(_) => return Planned::Plan(Plan::Fixed(ShardId(0))),
    };
    let stmts: Vec<&Node> = parsed
        .protobuf
        .stmts
        .iter()
        .filter_map(|raw| raw.stmt.as_deref())
        .collect();
    let mut plans = Vec::with_capacity(stmts.len());
    for stmt in &stmts {
        match plan_statement(stmt, snapshot, columns) {
            Planned::Plan(p) => plans.push(p),
            need => return need,
        }
    }
    Planned::Plan(match plans.len() {
        0 => Plan::Anywhere,
        1 => plans.pop().unwrap_or(Plan::Anywhere),
        _ => combine(plans),
    })
}

/// Several statements in one query string run as one implicit transaction on one shard.
fn combine(plans: Vec<Plan>) -> Plan {
    let mut fixed: Option<ShardId> = None;
    for p in &plans {
        match p {
            Plan::Anywhere => {}
            Plan::Fixed(s) if fixed.is_none_or(|f| f == *s) => fixed = Some(*s),
            Plan::Refused(r) => return Plan::Refused(r.clone()),
            _ => {
                return unsupported(
                    "a query string with several statements over sharded or duplicated tables \
                     is not supported yet: send the statements one at a time",
                )
            }
        }
    }
    fixed.map_or(Plan::Anywhere, Plan::Fixed)
}

/// A table as the statement names it.
struct Use<'a> {
    table: Option<&'a Table>,
    /// The name columns are qualified with: the alias, else the table's name.
    qualifier: String,
}

fn plan_statement(stmt: &Node, snapshot: &Snapshot, columns: &dyn ColumnSource) -> Planned {
    let Some(node) = stmt.node.as_ref() else {
        return Planned::Plan(Plan::Anywhere);
    };
    // Every table named anywhere in the statement, at any depth.
    let mut all: Vec<&RangeVar> = Vec::new();
    collect_range_vars(stmt, &mut all);
    if all.is_empty() {
        return Planned::Plan(Plan::Anywhere);
    }
    let resolved: Vec<Option<&Table>> = all.iter().map(|r| resolve(snapshot, r)).collect();
    if let Some(t) = resolved
        .iter()
        .flatten()
        .find(|t| t.state != crate::catalog::TableState::Active)
    {
        return Planned::Plan(Plan::Refused(Refusal::NotActive(t.qualified_name())));
    }
    let sharded: Vec<&Table> = resolved
        .iter()
        .flatten()
        .copied()
        .filter(|t| t.kind == TableKind::Sharded)
        .collect();
    let duplicated: Vec<&Table> = resolved
        .iter()
        .flatten()
        .copied()
        .filter(|t| t.kind == TableKind::Duplicated)
        .collect();
    if let NodeEnum::CopyStmt(c) = node {
        if let Some(p) = copy::plan_copy_table(c, snapshot, columns) {
            return p;
        }
    }
    let writes_target = write_target(node).and_then(|r| resolve(snapshot, r));
    if sharded.is_empty() {
        if let Some(t) = writes_target.filter(|t| t.kind == TableKind::Duplicated) {
            return Planned::Plan(Plan::Every(snapshot.shards_of(t.id)));
        }
        if duplicated.is_empty() || resolved.iter().any(Option::is_none) {
            // Unrecorded tables live on the first shard; an unsharded table on its own.
            let unsharded = resolved
                .iter()
                .flatten()
                .find(|t| t.kind == TableKind::Unsharded)
                .map(|t| snapshot.shards_of(t.id)[0]);
            return Planned::Plan(Plan::Fixed(unsharded.unwrap_or(ShardId(0))));
        }
        // Duplicated tables only: the shards holding every one of them.
        let mut shards = snapshot.shards_of(duplicated[0].id);
        for t in &duplicated[1..] {
            let theirs = snapshot.shards_of(t.id);
            shards.retain(|s| theirs.contains(s));
        }
        return Planned::Plan(if shards.is_empty() {
            unsupported("the duplicated tables of this statement share no shard")
        } else {
            Plan::AnyOf(shards)
        });
    }
    if writes_target.is_some_and(|t| t.kind == TableKind::Duplicated) {
        return Planned::Plan(unsupported(
            "a write to a duplicated table that reads a sharded table is not supported yet",
        ));
    }
    let root = sharded[0].root;
    if let Some(other) = sharded.iter().find(|t| t.root != root) {
        return Planned::Plan(unsupported(format!(
            "statements over tables of different families (\"{}\" and \"{}\") are not \
             supported yet: query each family on its own",
            sharded[0].qualified_name(),
            other.qualified_name()
        )));
    }
    let shards = snapshot.shards_of(sharded[0].id);
    match node {
        NodeEnum::SelectStmt(s) => Planned::Plan(plan_select(s, snapshot, &sharded, shards)),
        NodeEnum::InsertStmt(i) => plan_insert(i, snapshot, columns, shards),
        NodeEnum::UpdateStmt(u) => {
            let mut from = vec![range_var_node(u.relation.as_ref())];
            from.extend(u.from_clause.iter().cloned());
            Planned::Plan(plan_filtered(
                StatementKind::Update,
                &from,
                u.where_clause.as_deref(),
                snapshot,
                &sharded,
                shards,
                u.returning_clause.is_some(),
            ))
        }
        NodeEnum::DeleteStmt(d) => {
            let mut from = vec![range_var_node(d.relation.as_ref())];
            from.extend(d.using_clause.iter().cloned());
            Planned::Plan(plan_filtered(
                StatementKind::Delete,
                &from,
                d.where_clause.as_deref(),
                snapshot,
                &sharded,
                shards,
                d.returning_clause.is_some(),
            ))
        }
        NodeEnum::CopyStmt(c) => {
            Planned::Plan(copy::plan_copy_query(c, snapshot, &sharded, shards))
        }
        NodeEnum::ExplainStmt(_) => Planned::Plan(unsupported(
            "EXPLAIN of statements over sharded tables is not supported yet",
        )),
        _ => Planned::Plan(unsupported(format!(
            "this kind of statement on sharded table \"{}\" is not supported yet",
            sharded[0].qualified_name()
        ))),
    }
}

fn range_var_node(r: Option<&RangeVar>) -> Node {
    Node {
        node: r.map(|r| NodeEnum::RangeVar(r.clone())),
    }
}

fn write_target(node: &NodeEnum) -> Option<&RangeVar> {
    match node {
        NodeEnum::InsertStmt(i) => i.relation.as_ref(),
        NodeEnum::UpdateStmt(u) => u.relation.as_ref(),
        NodeEnum::DeleteStmt(d) => d.relation.as_ref(),
        _ => None,
    }
}

/// The catalog's table for a name; unqualified names mean `public` (search_path is not
/// consulted yet, as in the DDL path).
fn resolve<'s>(snapshot: &'s Snapshot, r: &RangeVar) -> Option<&'s Table> {
    let schema = if r.schemaname.is_empty() {
        "public"
    } else {
        r.schemaname.as_str()
    };
    snapshot.table_by_name(schema, &r.relname)
}

fn collect_range_vars<'a>(node: &'a Node, out: &mut Vec<&'a RangeVar>) {
    // DML targets and COPY's table are RangeVars held directly, not as nodes.
    match node.node.as_ref() {
        Some(NodeEnum::CopyStmt(c)) => out.extend(c.relation.as_ref()),
        Some(n) => out.extend(write_target(n)),
        None => {}
    }
    walk(node, &mut |n| {
        if let Some(NodeEnum::RangeVar(r)) = n.node.as_ref() {
            out.push(r);
        }
    });
}

/// Calls `f` on `node` and every node below it.
fn walk<'a>(node: &'a Node, f: &mut dyn FnMut(&'a Node)) {
    f(node);
    if let Some(inner) = node.node.as_ref() {
        for child in children(inner) {
            walk(child, f);
        }
    }
}

/// The direct child nodes of the node kinds that can contain table references or conditions.
fn children(n: &NodeEnum) -> Vec<&Node> {
    let mut v: Vec<&Node> = Vec::new();
    macro_rules! push_opt {
        ($e:expr) => {
            if let Some(x) = $e.as_deref() {
                v.push(x);
            }
        };
    }
    match n {
        NodeEnum::SelectStmt(s) => select_children(s, &mut v),
        NodeEnum::InsertStmt(i) => {
            push_opt!(i.select_stmt);
            if let Some(w) = &i.with_clause {
                v.extend(w.ctes.iter());
            }
            if let Some(r) = &i.returning_clause {
                v.extend(r.exprs.iter());
            }
            if let Some(oc) = &i.on_conflict_clause {
                v.extend(oc.target_list.iter());
                push_opt!(oc.where_clause);
            }
        }
        NodeEnum::UpdateStmt(u) => {
            v.extend(u.target_list.iter());
            push_opt!(u.where_clause);
            v.extend(u.from_clause.iter());
            if let Some(w) = &u.with_clause {
                v.extend(w.ctes.iter());
            }
            if let Some(r) = &u.returning_clause {
                v.extend(r.exprs.iter());
            }
        }
        NodeEnum::DeleteStmt(d) => {
            push_opt!(d.where_clause);
            v.extend(d.using_clause.iter());
            if let Some(w) = &d.with_clause {
                v.extend(w.ctes.iter());
            }
            if let Some(r) = &d.returning_clause {
                v.extend(r.exprs.iter());
            }
        }
        NodeEnum::CopyStmt(c) => push_opt!(c.query),
        NodeEnum::ExplainStmt(e) => push_opt!(e.query),
        NodeEnum::CommonTableExpr(c) => push_opt!(c.ctequery),
        NodeEnum::RangeSubselect(r) => push_opt!(r.subquery),
        NodeEnum::SubLink(s) => {
            push_opt!(s.testexpr);
            push_opt!(s.subselect);
        }
        NodeEnum::JoinExpr(j) => {
            push_opt!(j.larg);
            push_opt!(j.rarg);
            push_opt!(j.quals);
        }
        NodeEnum::AExpr(a) => {
            push_opt!(a.lexpr);
            push_opt!(a.rexpr);
        }
        NodeEnum::BoolExpr(b) => v.extend(b.args.iter()),
        NodeEnum::ResTarget(r) => push_opt!(r.val),
        NodeEnum::FuncCall(f) => {
            v.extend(f.args.iter());
            push_opt!(f.agg_filter);
        }
        NodeEnum::TypeCast(t) => push_opt!(t.arg),
        NodeEnum::List(l) => v.extend(l.items.iter()),
        NodeEnum::NullTest(t) => push_opt!(t.arg),
        NodeEnum::CaseExpr(c) => {
            push_opt!(c.arg);
            v.extend(c.args.iter());
            push_opt!(c.defresult);
        }
        NodeEnum::CaseWhen(w) => {
            push_opt!(w.expr);
            push_opt!(w.result);
        }
        NodeEnum::CoalesceExpr(c) => v.extend(c.args.iter()),
        NodeEnum::SortBy(s) => push_opt!(s.node),
        NodeEnum::RowExpr(r) => v.extend(r.args.iter()),
        NodeEnum::AArrayExpr(a) => v.extend(a.elements.iter()),
        NodeEnum::RangeFunction(r) => v.extend(r.functions.iter()),
        _ => {}
    }
    v
}

fn select_children<'a>(s: &'a SelectStmt, v: &mut Vec<&'a Node>) {
    v.extend(s.target_list.iter());
    v.extend(s.from_clause.iter());
    if let Some(w) = s.where_clause.as_deref() {
        v.push(w);
    }
    v.extend(s.group_clause.iter());
    if let Some(h) = s.having_clause.as_deref() {
        v.push(h);
    }
    v.extend(s.sort_clause.iter());
    v.extend(s.values_lists.iter());
    if let Some(w) = &s.with_clause {
        v.extend(w.ctes.iter());
    }
    // The arms of a set operation are statements of their own; walked as nodes.
    for arm in [&s.larg, &s.rarg].into_iter().flatten() {
        select_children(arm, v);
    }
}

// ---------------------------------------------------------------------------------------------
// Reads, updates and deletes: the key from the WHERE clause.

/// The tables of the top-level FROM list, and whether a sharded table appears anywhere else
/// (a subquery, a CTE, a set operation's arm).
fn top_level_uses<'s>(from: &[Node], snapshot: &'s Snapshot, out: &mut Vec<Use<'s>>) {
    for item in from {
        match item.node.as_ref() {
            Some(NodeEnum::RangeVar(r)) => out.push(Use {
                table: resolve(snapshot, r),
                qualifier: r
                    .alias
                    .as_ref()
                    .map_or_else(|| r.relname.clone(), |a| a.aliasname.clone()),
            }),
            Some(NodeEnum::JoinExpr(j)) => {
                let sides: Vec<Node> = [&j.larg, &j.rarg]
                    .into_iter()
                    .flatten()
                    .map(|b| (**b).clone())
                    .collect();
                top_level_uses(&sides, snapshot, out);
            }
            _ => {}
        }
    }
}

/// Conditions that hold for every row the statement sees: the WHERE clause's conjuncts and the
/// ON conditions of inner joins.
fn conjuncts<'a>(node: &'a Node, out: &mut Vec<&'a Node>) {
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

fn inner_join_quals<'a>(from: &'a [Node], out: &mut Vec<&'a Node>) {
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
fn all_join_quals<'a>(from: &'a [Node], out: &mut Vec<&'a Node>) {
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

/// A key column of one of the statement's tables: (use index, position). Positions count the
/// sharding-key columns first, then the partition-set columns.
type Slot = (usize, usize);

struct Bindings {
    /// Per slot: what the conditions say about the column.
    conds: Vec<Vec<Constraint>>,
    /// Union-find parent per flattened slot.
    parent: Vec<usize>,
    width: usize,
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
struct Slots<'s> {
    uses: Vec<Use<'s>>,
    root_key: usize,
}

impl<'s> Slots<'s> {
    fn columns(&self, u: usize) -> Vec<&'s str> {
        match self.uses[u].table {
            Some(t) if t.kind == TableKind::Sharded => t
                .key_columns
                .iter()
                .chain(&t.partition_set_columns)
                .map(|c| c.name.as_str())
                .collect(),
            _ => Vec::new(),
        }
    }

    /// The type of the key column in slot `s`, when the router can read it.
    fn column_type(&self, s: Slot) -> Option<KeyType> {
        let t = self.uses.get(s.0)?.table?;
        t.key_columns
            .iter()
            .chain(&t.partition_set_columns)
            .nth(s.1)?
            .key_type()
            .ok()
    }

    /// The slot a column reference names, if it is a key column of one family table.
    fn slot(&self, fields: &[Node]) -> Option<Slot> {
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
                    // Ambiguous: PostgreSQL decides (and then reports it).
                    return None;
                }
                found = Some((u, p));
            }
        }
        found
    }
}

/// A constant or parameter, possibly cast; `None` for any other expression.
fn operand(node: &Node) -> Option<Operand> {
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
        // column's own would read it; casts of other expressions may change the value.
        NodeEnum::TypeCast(t) => match operand(t.arg.as_deref()?)? {
            op @ Operand::Param(_) => Some(op),
            op => match t.arg.as_deref()?.node.as_ref()? {
                NodeEnum::AConst(c) if matches!(c.val, Some(a_const::Val::Sval(_))) || c.isnull => {
                    Some(op)
                }
                _ => None,
            },
        },
        _ => None,
    }
}

fn op_name(a: &AExpr) -> Option<&str> {
    match a.name.as_slice() {
        [n] => match n.node.as_ref()? {
            NodeEnum::String(s) => Some(s.sval.as_str()),
            _ => None,
        },
        _ => None,
    }
}

fn column_fields(node: &Node) -> Option<&[Node]> {
    match node.node.as_ref()? {
        NodeEnum::ColumnRef(c) => Some(&c.fields),
        _ => None,
    }
}

/// Reads the key bindings and key equalities of the conditions.
fn read_conditions(conds: &[&Node], joins: &[&Node], slots: &Slots<'_>, b: &mut Bindings) {
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
                // IS NULL (NullTestType::IsNull = 1): a NULL key hashes as no value.
                if let Some(f) = t.arg.as_deref().and_then(column_fields) {
                    if let Some(s) = slots.slot(f) {
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
fn read_comparison(a: &AExpr, slots: &Slots<'_>, b: &mut Bindings) {
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
fn array_values(node: &Node) -> Option<Vec<Value>> {
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
fn range_operand(node: &Node, column: Option<KeyType>) -> Option<Operand> {
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
        if !super::place::compares_as(cast_type, column?) {
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
fn tuples(per_slot: Vec<Vec<Operand>>, root_key: usize) -> Option<Vec<KeyTuple>> {
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

fn plan_filtered(
    kind: StatementKind,
    from: &[Node],
    where_clause: Option<&Node>,
    snapshot: &Snapshot,
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
    let slots = Slots { uses, root_key };
    let mut b = Bindings::new(slots.uses.len(), width);
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
    let mut refusal = None;
    if !colocated {
        let msg = "a join of sharded tables that are not equal on the whole sharding key is not \
                   supported yet: join the family's tables on their sharding-key columns";
        if keys == Keys::Any {
            return unsupported(msg);
        }
        refusal = Some(msg.to_string());
    }
    Plan::Sharded(Arc::new(ShardedPlan {
        table,
        kind,
        keys,
        shards,
        merge: Merge::default(),
        multi_shard_refusal: refusal,
        returning,
        generated: None,
        insert_select: None,
    }))
}

fn plan_select(
    s: &SelectStmt,
    snapshot: &Snapshot,
    sharded: &[&Table],
    shards: Vec<ShardId>,
) -> Plan {
    if s.op != SetOperation::SetopNone as i32 && s.op != SetOperation::Undefined as i32 {
        return unsupported(
            "set operations (UNION, INTERSECT, EXCEPT) over sharded tables are not supported yet",
        );
    }
    let plan = plan_filtered(
        StatementKind::Select,
        &s.from_clause,
        s.where_clause.as_deref(),
        snapshot,
        sharded,
        shards,
        false,
    );
    let Plan::Sharded(mut p) = plan else {
        return plan;
    };
    let inner = Arc::make_mut(&mut p);
    if inner.multi_shard_refusal.is_none() {
        match merge_of(s) {
            Ok(m) => inner.merge = m,
            Err(why) => inner.multi_shard_refusal = Some(why),
        }
    }
    Plan::Sharded(p)
}

const AGGREGATES: &[&str] = &[
    "count",
    "sum",
    "avg",
    "min",
    "max",
    "array_agg",
    "string_agg",
    "bool_and",
    "bool_or",
    "every",
    "bit_and",
    "bit_or",
    "bit_xor",
    "json_agg",
    "jsonb_agg",
    "json_object_agg",
    "jsonb_object_agg",
    "stddev",
    "stddev_pop",
    "stddev_samp",
    "variance",
    "var_pop",
    "var_samp",
    "xmlagg",
    "percentile_cont",
    "percentile_disc",
    "mode",
    "corr",
    "covar_pop",
    "covar_samp",
    "regr_avgx",
    "regr_avgy",
    "regr_count",
    "regr_intercept",
    "regr_r2",
    "regr_slope",
    "regr_sxx",
    "regr_sxy",
    "regr_syy",
    "range_agg",
    "range_intersect_agg",
    "any_value",
];

/// Why the select list or clauses need more than concatenation and a sorted merge.
fn needs_combining(s: &SelectStmt) -> Option<String> {
    if !s.group_clause.is_empty() {
        return Some("GROUP BY".into());
    }
    if s.having_clause.is_some() {
        return Some("HAVING".into());
    }
    if !s.distinct_clause.is_empty() {
        return Some("DISTINCT".into());
    }
    if !s.window_clause.is_empty() {
        return Some("window functions".into());
    }
    let mut found = None;
    for t in s.target_list.iter().chain(&s.sort_clause) {
        walk(t, &mut |n| {
            if let Some(NodeEnum::FuncCall(f)) = n.node.as_ref() {
                if f.over.is_some() {
                    found.get_or_insert_with(|| "window functions".to_string());
                }
                let name = f.funcname.last().and_then(|n| match n.node.as_ref()? {
                    NodeEnum::String(s) => Some(s.sval.as_str()),
                    _ => None,
                });
                if let Some(name) = name {
                    if f.agg_star || f.agg_distinct || AGGREGATES.contains(&name) {
                        found.get_or_insert_with(|| format!("aggregate {name}()"));
                    }
                }
            }
        });
    }
    found
}

/// How a read's rows from several shards are merged, or why they cannot be yet.
fn merge_of(s: &SelectStmt) -> Result<Merge, String> {
    if let Some(what) = needs_combining(s) {
        return Err(format!(
            "{what} over several shards is not supported yet: add the full sharding key to the \
             WHERE clause so the query runs on one shard"
        ));
    }
    if s.into_clause.is_some() {
        return Err("SELECT INTO over several shards is not supported yet".into());
    }
    if s.limit_option == LimitOption::WithTies as i32 {
        return Err("FETCH … WITH TIES over several shards is not supported yet".into());
    }
    let constant = |n: &Option<Box<Node>>| -> Result<Option<u64>, String> {
        let Some(n) = n.as_deref() else {
            return Ok(None);
        };
        match n.node.as_ref() {
            Some(NodeEnum::AConst(c)) if c.isnull => Ok(None),
            Some(NodeEnum::AConst(c)) => match &c.val {
                Some(a_const::Val::Ival(i)) if i.ival >= 0 => Ok(Some(i.ival as u64)),
                Some(a_const::Val::Fval(f)) => f
                    .fval
                    .parse::<u64>()
                    .map(Some)
                    .map_err(|_| "LIMIT and OFFSET over several shards take integers".into()),
                _ => Err("LIMIT and OFFSET over several shards take non-negative integers".into()),
            },
            _ => Err(
                "LIMIT and OFFSET over several shards must be constants for now (not parameters \
                 or expressions)"
                    .into(),
            ),
        }
    };
    let limit = constant(&s.limit_count)?;
    let offset = constant(&s.limit_offset)?.unwrap_or(0);

    let mut stmt = s.clone();
    let visible = s.target_list.len();
    if s.target_list.iter().any(|t| {
        matches!(t.node.as_ref(), Some(NodeEnum::ResTarget(r)) if r.val.as_deref().is_some_and(|v| {
            matches!(v.node.as_ref(), Some(NodeEnum::ColumnRef(c)) if c.fields.iter().any(|f| matches!(f.node, Some(NodeEnum::AStar(_)))))
        }))
    }) && !s.sort_clause.is_empty()
    {
        return Err(
            "SELECT * with ORDER BY over several shards is not supported yet: name the columns"
                .into(),
        );
    }
    let mut order = Vec::new();
    let mut hidden = 0;
    for (i, sort) in s.sort_clause.iter().enumerate() {
        let Some(NodeEnum::SortBy(sb)) = sort.node.as_ref() else {
            return Err("unexpected ORDER BY item".into());
        };
        if sb.sortby_dir == SortByDir::SortbyUsing as i32 {
            return Err("ORDER BY … USING over several shards is not supported yet".into());
        }
        let descending = sb.sortby_dir == SortByDir::SortbyDesc as i32;
        let nulls_first = match SortByNulls::try_from(sb.sortby_nulls) {
            Ok(SortByNulls::SortbyNullsFirst) => true,
            Ok(SortByNulls::SortbyNullsLast) => false,
            // PostgreSQL's default: NULLs sort as larger than any value.
            _ => descending,
        };
        let expr = sb.node.as_deref().ok_or("ORDER BY without an expression")?;
        let column = match selected_column(s, expr) {
            Some(c) => c,
            None => {
                // Not in the select list: selected as a hidden column the merge reads.
                hidden += 1;
                stmt.target_list.push(Node {
                    node: Some(NodeEnum::ResTarget(Box::new(
                        pg_query::protobuf::ResTarget {
                            name: format!("shardwire_sort_{i}"),
                            indirection: Vec::new(),
                            val: Some(Box::new(expr.clone())),
                            location: -1,
                        },
                    ))),
                });
                visible + hidden - 1
            }
        };
        order.push(SortKey {
            column,
            descending,
            nulls_first,
        });
    }
    let rewritten = hidden > 0 || (limit.is_some() && offset > 0) || s.limit_offset.is_some();
    if rewritten {
        stmt.limit_offset = None;
        if let Some(n) = limit {
            stmt.limit_count = Some(Box::new(int_const(n + offset)));
        }
    }
    let shard_sql = if rewritten {
        let tree = pg_query::protobuf::ParseResult {
            // The deparser reads only the statements.
            version: 0,
            stmts: vec![pg_query::protobuf::RawStmt {
                stmt: Some(Box::new(Node {
                    node: Some(NodeEnum::SelectStmt(Box::new(stmt))),
                })),
                stmt_location: 0,
                stmt_len: 0,
            }],
        };
        Some(
            pg_query::deparse(&tree, Default::default())
                .map_err(|e| format!("cannot rewrite the query for the shards: {e}"))?,
        )
    } else {
        None
    };
    Ok(Merge {
        order,
        hidden,
        visible,
        limit,
        offset,
        shard_sql,
    })
}

fn int_const(n: u64) -> Node {
    let val = if n <= i32::MAX as u64 {
        a_const::Val::Ival(pg_query::protobuf::Integer { ival: n as i32 })
    } else {
        a_const::Val::Fval(pg_query::protobuf::Float {
            fval: n.to_string(),
        })
    };
    Node {
        node: Some(NodeEnum::AConst(pg_query::protobuf::AConst {
            isnull: false,
            location: -1,
            val: Some(val),
        })),
    }
}

/// The select-list position an ORDER BY expression names: a position number, an output
/// column's name, or an expression written the same as a selected one.
fn selected_column(s: &SelectStmt, expr: &Node) -> Option<usize> {
    if let Some(NodeEnum::AConst(c)) = expr.node.as_ref() {
        if let Some(a_const::Val::Ival(i)) = &c.val {
            return (i.ival >= 1 && (i.ival as usize) <= s.target_list.len())
                .then(|| i.ival as usize - 1);
        }
    }
    let bare_name = match expr.node.as_ref() {
        Some(NodeEnum::ColumnRef(c)) if c.fields.len() == 1 => match c.fields[0].node.as_ref() {
            Some(NodeEnum::String(s)) => Some(s.sval.as_str()),
            _ => None,
        },
        _ => None,
    };
    s.target_list.iter().position(|t| {
        let Some(NodeEnum::ResTarget(r)) = t.node.as_ref() else {
            return false;
        };
        if bare_name.is_some_and(|n| n == r.name) {
            return true;
        }
        r.val.as_deref() == Some(expr)
            || (r.val.as_deref().map(strip_location) == Some(strip_location(expr)))
    })
}

/// An expression with its source positions cleared, so equal expressions written at different
/// places compare equal.
fn strip_location(n: &Node) -> String {
    let s = format!("{n:?}");
    let mut out = String::with_capacity(s.len());
    let mut rest = s.as_str();
    while let Some(i) = rest.find("location: ") {
        out.push_str(&rest[..i]);
        rest = &rest[i + "location: ".len()..];
        let end = rest
            .find(|c: char| !(c.is_ascii_digit() || c == '-'))
            .unwrap_or(rest.len());
        rest = &rest[end..];
    }
    out.push_str(rest);
    out
}

// ---------------------------------------------------------------------------------------------
// INSERT: the key of every VALUES row.

fn plan_insert(
    i: &pg_query::protobuf::InsertStmt,
    snapshot: &Snapshot,
    columns: &dyn ColumnSource,
    shards: Vec<ShardId>,
) -> Planned {
    let Some(target) = i.relation.as_ref().and_then(|r| resolve(snapshot, r)) else {
        return Planned::Plan(unsupported(
            "INSERT into a table that reads sharded tables is not supported yet",
        ));
    };
    if target.kind != TableKind::Sharded {
        return Planned::Plan(unsupported(
            "INSERT … SELECT from sharded tables into another table is not supported yet",
        ));
    }
    let names: Vec<String> = if i.cols.is_empty() {
        match columns.columns(target.id) {
            Some(c) => c.as_ref().clone(),
            None => return Planned::NeedColumns(target.id),
        }
    } else {
        i.cols
            .iter()
            .filter_map(|c| match c.node.as_ref()? {
                NodeEnum::ResTarget(r) => Some(r.name.clone()),
                _ => None,
            })
            .collect()
    };
    let Some(NodeEnum::SelectStmt(select)) = i.select_stmt.as_deref().and_then(|s| s.node.as_ref())
    else {
        return Planned::Plan(unsupported(format!(
            "INSERT … DEFAULT VALUES into sharded table \"{}\" is not supported yet: give the \
             sharding key",
            target.qualified_name()
        )));
    };
    if select.values_lists.is_empty() {
        return insert_select::plan_insert_select(
            i, target, &names, select, snapshot, columns, shards,
        );
    }
    let key_names: Vec<&str> = target
        .key_columns
        .iter()
        .chain(&target.partition_set_columns)
        .map(|c| c.name.as_str())
        .collect();
    let positions: Vec<Option<usize>> = key_names
        .iter()
        .map(|k| names.iter().position(|n| n == k))
        .collect();
    let root_key = target.key_columns.len();
    let generated_key = |k: &str| target.generated.iter().find(|g| g.column == k);
    let mut generated: Option<GeneratedInsert> = None;
    let mut rows = Vec::with_capacity(select.values_lists.len());
    for (row_no, row) in select.values_lists.iter().enumerate() {
        let Some(NodeEnum::List(list)) = row.node.as_ref() else {
            return Planned::Plan(unsupported("unexpected VALUES row"));
        };
        let mut values = Vec::with_capacity(positions.len());
        for (k, pos) in key_names.iter().zip(&positions) {
            let expr = pos.and_then(|p| list.items.get(p));
            let is_default =
                expr.is_some_and(|e| matches!(e.node, Some(NodeEnum::SetToDefault(_))));
            if expr.is_none() || is_default {
                let Some(g) = generated_key(k) else {
                    return Planned::Plan(unsupported(format!(
                        "INSERT into sharded table \"{}\" must give sharding key column \"{k}\": \
                         only a serial or identity key column makes its own values",
                        target.qualified_name()
                    )));
                };
                if generated.as_ref().is_some_and(|gi| gi.column != g.column) {
                    return Planned::Plan(unsupported(
                        "an INSERT that leaves two generated sharding-key columns to their \
                         sequences is not supported yet",
                    ));
                }
                generated = Some(GeneratedInsert {
                    column: g.column.clone(),
                    missing: expr.is_none(),
                });
                values.push(Operand::Generated(row_no));
                continue;
            }
            let expr = expr.expect("checked above");
            if generated_key(k).is_some_and(|g| g.always) {
                return Planned::Plan(Plan::Refused(Refusal::GeneratedAlways(k.to_string())));
            }
            match operand(expr) {
                Some(v) => values.push(v),
                None => {
                    return Planned::Plan(unsupported(format!(
                        "the value of sharding key column \"{k}\" must be a constant or a \
                         parameter, not an expression"
                    )))
                }
            }
        }
        let set_key = values.split_off(root_key);
        rows.push(KeyTuple {
            key: values,
            set_key,
        });
    }
    Planned::Plan(Plan::Sharded(Arc::new(ShardedPlan {
        table: target.id,
        kind: StatementKind::Insert,
        keys: Keys::Rows(rows),
        shards,
        merge: Merge::default(),
        multi_shard_refusal: None,
        returning: i.returning_clause.is_some(),
        generated,
        insert_select: None,
    })))
}
