//! What a statement needs for routing, read once from PostgreSQL's parse tree (pg_query): the
//! tables it touches, where its sharding-key values come from (literals or `$n` parameters),
//! and for a read that may span shards, how to merge the shards' rows.
//!
//! A plan holds no values of Bind parameters, so one plan serves every execution of a prepared
//! statement; [`super::route`] combines it with the values.

use crate::catalog::{ShardId, Snapshot, Table, TableId, TableKind};
use crate::client_error::ClientError;
use pg_query::protobuf::{Node, RangeVar};
use pg_query::NodeEnum;
use scope::{resolve, resolve_name};
use std::sync::Arc;
use strings::{own_statement_among_others, string_plan};
use tokio_postgres::error::SqlState;

mod aggregate;
mod combine;
mod conditions;
mod copy;
mod explain;
mod function_body;
mod hidden;
mod insert;
mod insert_select;
mod key_update;
mod localize;
mod merge_into;
mod partial;
mod row_origin;
mod scope;
mod select;
mod sequence;
mod strings;
mod utility;
mod view;
mod walk;

pub use aggregate::{AggregateMerge, ColumnMerge};
pub use combine::{CombinePlan, Pull, TEMP_PREFIX};
use conditions::*;
pub use copy::{CopyArg, CopyOption, CopyPlan};
use hidden::*;
use insert::*;
pub use insert_select::InsertSelect;
pub use key_update::{Descendant, KeyUpdate};
pub use partial::{PartialPlan, PARTIAL_TABLE};
pub use scope::Scope;
use select::*;
pub use sequence::{serial_sequence_name, SequenceCall, SequenceFunction};
pub use utility::{UtilityKind, UtilityPlan};
pub use view::{
    classify, expand_views, recorded_relations, replace_catalog_view, Classified, ViewPlan,
};
use walk::*;

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
    Merge,
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
    /// `LIMIT $n` (0-based): the limit is read from the Bind into `limit` for each execution,
    /// never into the plan, which every execution of the text shares.
    pub limit_param: Option<usize>,
    /// `OFFSET $n` (0-based), read into `offset` the same way.
    pub offset_param: Option<usize>,
    /// The statement each shard runs: ORDER BY keys added as hidden columns, `LIMIT n + offset`
    /// and no OFFSET. `None`: the client's text as it is.
    pub shard_sql: Option<String>,
}

impl Merge {
    /// Whether the merge drops rows (a LIMIT or OFFSET, as constants or parameters).
    pub fn bounds_rows(&self) -> bool {
        self.limit.is_some()
            || self.offset > 0
            || self.limit_param.is_some()
            || self.offset_param.is_some()
    }
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
    /// Whether the shards' answers to the statement, run whole on each, can be merged.
    pub answers: ShardAnswers,
    /// The INSERT has RETURNING: the rows come back from each shard.
    pub returning: bool,
    /// An INSERT whose generated key column the proxy fills from the cluster-wide sequence.
    pub generated: Option<GeneratedInsert>,
    /// An INSERT … SELECT the proxy runs in two steps (the SELECT, then the rows by shard).
    pub insert_select: Option<Box<InsertSelect>>,
    /// An UPDATE of the sharding key, whose rows may move to other shards.
    pub key_update: Option<Box<KeyUpdate>>,
    /// A read the streaming merge cannot answer: how the general path answers it when it runs
    /// on several shards (on one, the shard answers it whole).
    pub combine: Option<Arc<CombinePlan>>,
    /// A grouped read the proxy merges itself (simple protocol; `combine` when it cannot).
    pub aggregate: Option<Arc<AggregateMerge>>,
}

/// What running a statement whole on each of its shards gives (the rule: `plan/row_origin.rs`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ShardAnswers {
    /// Every output row comes from exactly one shard: the shards' answers are merged, and
    /// each shard may aggregate its own rows first.
    Disjoint,
    /// Merged answers would repeat rows (an outer join padding a relation every shard holds)
    /// or miss some (a join of tables not equal on the whole key): over several shards only
    /// the general path, reading each table's rows, answers.
    Overlapping,
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
    /// `SELECT nextval(…)` or `currval(…)` of a generated key's sequence, which the proxy
    /// answers from the cluster-wide sequence.
    Sequence(SequenceCall),
    /// A read over several shards that only the general path answers (tables of several
    /// families, subqueries, set operations, …).
    Combine(Arc<CombinePlan>),
    /// EXPLAIN of a statement over recorded tables: the plan of the statement explained.
    Explain(Arc<ExplainPlan>),
    /// A utility statement on recorded tables (TRUNCATE, LOCK, GRANT, VACUUM, …) that every
    /// shard holding them runs.
    Utility(Arc<UtilityPlan>),
    /// A query string whose statements go to different shards: the session runs them one by
    /// one, as one transaction, as PostgreSQL runs a query string.
    Script,
}

/// EXPLAIN: one shard explains a statement it runs alone; the proxy describes one it runs on
/// several.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ExplainPlan {
    /// The statement explained, as its own text (deparsed) and plan.
    pub sql: String,
    pub plan: Plan,
    /// EXPLAIN ANALYZE: the statement runs.
    pub analyze: bool,
    /// The options as the client gave them, written out for the shards (`ANALYZE, BUFFERS`).
    pub options: String,
    /// The output is text (FORMAT TEXT, the default): lines the proxy can put its own among.
    pub text_format: bool,
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
    /// An unqualified name that a recorded table outside schema `public` has (0A000).
    #[error("table name \"{name}\" is ambiguous through shardwire: {table} is a recorded table, and shardwire reads this unqualified name in schema public (it does not know the session's search_path, or the statement is DDL it runs itself); qualify the name ({table}, or public.{name})")]
    Ambiguous { name: String, table: String },
    /// The table is being created or dropped (55000).
    #[error("table \"{table}\" is {} (its CREATE or DROP has not finished): it takes statements again once ACTIVE; a DROP TABLE clears it", state.label())]
    NotActive {
        table: String,
        state: crate::catalog::TableState,
    },
}

fn unsupported(msg: impl Into<String>) -> Plan {
    Plan::Refused(Refusal::Unsupported(msg.into()))
}

/// A table column as a statement the proxy writes needs it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ColumnDef {
    pub name: String,
    /// The type as `format_type` spells it, typmod included (`numeric(10,2)`).
    pub type_sql: String,
    /// A stored generated column: PostgreSQL computes it, nobody inserts it.
    pub generated: bool,
    /// The column's collation, quoted and qualified, when it is not its type's default.
    pub collation: Option<String>,
}

/// The columns of a table in their order, for INSERTs that name none; `None` when the caller
/// must fetch them first.
pub trait ColumnSource {
    fn columns(&self, table: TableId) -> Option<Arc<Vec<String>>>;
    /// The columns with their types, for statements that move rows between shards.
    fn column_defs(&self, table: TableId) -> Option<Arc<Vec<ColumnDef>>>;
}

/// The plan of one SQL text, or the table whose columns are needed to make it.
pub enum Planned {
    Plan(Plan),
    NeedColumns(TableId),
}

/// Plans `sql` against `snapshot`, unqualified names meaning schema `public`.
pub fn plan(sql: &str, snapshot: &Snapshot, columns: &dyn ColumnSource) -> Planned {
    plan_in(sql, snapshot, None, columns)
}

/// Plans `sql` against `snapshot` for a session whose `search_path` is `search_path` (schemas in
/// order, `$user` expanded), or unknown to the proxy (`None`: unqualified names mean `public`,
/// and one that a table recorded elsewhere has is refused). Text that PostgreSQL cannot parse
/// goes to the first shard, which reports the syntax error as PostgreSQL would.
pub fn plan_in(
    sql: &str,
    snapshot: &Snapshot,
    search_path: Option<&[String]>,
    columns: &dyn ColumnSource,
) -> Planned {
    let scope = Scope {
        snapshot,
        search_path,
        cte_refs: Vec::new(),
    };
    plan_scoped(sql, &scope, columns)
}

/// The general path of the single SELECT `sql` even where the streaming merge could answer
/// it (a SCROLL cursor, which the proxy materialises on the combining shard). `None`: not a
/// single SELECT over recorded tables the general path can combine.
pub fn combine_in(
    sql: &str,
    snapshot: &Snapshot,
    search_path: Option<&[String]>,
    columns: &dyn ColumnSource,
) -> Result<Option<CombinePlan>, TableId> {
    let scope = Scope {
        snapshot,
        search_path,
        cte_refs: Vec::new(),
    };
    let Ok(parsed) = pg_query::parse(sql, 0) else {
        return Ok(None);
    };
    let raw = &parsed.protobuf.stmts;
    let scope = scope.of_text(raw);
    let [stmt] = raw.as_slice() else {
        return Ok(None);
    };
    let Some(node) = stmt.stmt.as_deref() else {
        return Ok(None);
    };
    match combine::plan_combine(sql, node, &scope, columns) {
        Ok(c) if !c.pulls.is_empty() => Ok(Some(c)),
        Ok(_) | Err(combine::NotCombinable::Refused(_)) => Ok(None),
        Err(combine::NotCombinable::NeedColumns(t)) => Err(t),
    }
}

/// [`plan_in`] in a scope already made (a statement planned inside another's plan).
fn plan_scoped(sql: &str, snapshot: &Scope, columns: &dyn ColumnSource) -> Planned {
    let parsed = match pg_query::parse(sql, 0) {
        Ok(p) => p,
        Err(_) => {
            // The proxy's own statements are not PostgreSQL's syntax: among others in one
            // string, they would reach the first shard as a syntax error.
            let own = crate::ddl::lexer::statement_texts(sql)
                .filter(|texts| texts.len() > 1)
                .and_then(|texts| own_statement_among_others(&texts));
            return Planned::Plan(own.unwrap_or(Plan::Fixed(ShardId(0))));
        }
    };
    let raw = &parsed.protobuf.stmts;
    let scope = snapshot.of_text(raw);
    let snapshot = &scope;
    if raw.len() > 1 {
        let texts: Vec<&str> = raw
            .iter()
            .filter_map(|r| crate::sql::script::statement_text(sql, r))
            .collect();
        if let Some(refused) = own_statement_among_others(&texts) {
            return Planned::Plan(refused);
        }
    }
    let stmts: Vec<&Node> = raw.iter().filter_map(|r| r.stmt.as_deref()).collect();
    let mut plans = Vec::with_capacity(stmts.len());
    for stmt in &stmts {
        match plan_statement(sql, stmt, snapshot, columns) {
            Planned::Plan(p) => plans.push(p),
            need => return need,
        }
    }
    Planned::Plan(match plans.len() {
        0 => Plan::Anywhere,
        1 => plans.pop().unwrap_or(Plan::Anywhere),
        _ => string_plan(&stmts, plans),
    })
}

/// A table as the statement names it.
pub(super) struct Use<'a> {
    pub(super) table: Option<&'a Table>,
    /// The name columns are qualified with: the alias, else the table's name.
    pub(super) qualifier: String,
    /// On the nullable side of an outer join: its columns are NULL in padded rows.
    pub(super) null_extended: bool,
}

fn plan_statement(sql: &str, stmt: &Node, snapshot: &Scope, columns: &dyn ColumnSource) -> Planned {
    if let Some(NodeEnum::ExplainStmt(e)) = stmt.node.as_ref() {
        return explain::plan_explain(e, snapshot, columns);
    }
    // Calls of key sequences are the proxy's to answer or refuse, whatever else is read.
    if let Some(planned) = sequence::plan_sequence_calls(stmt, snapshot, columns) {
        return planned;
    }
    let planned = plan_one(stmt, snapshot, columns);
    if let Some(NodeEnum::CopyStmt(c)) = stmt.node.as_ref() {
        return copy::copy_out_combined(planned, c, sql, snapshot, columns);
    }
    if !matches!(stmt.node, Some(NodeEnum::SelectStmt(_))) {
        return planned;
    }
    // A read the shards cannot answer as they are: the general path, when it can.
    match planned {
        Planned::Plan(Plan::Refused(Refusal::Unsupported(why))) => {
            match combine::plan_combine(sql, stmt, snapshot, columns) {
                Ok(c) if c.pulls.is_empty() => Planned::Plan(unsupported(why)),
                Ok(c) => Planned::Plan(Plan::Combine(Arc::new(c))),
                Err(combine::NotCombinable::NeedColumns(t)) => Planned::NeedColumns(t),
                Err(combine::NotCombinable::Refused(r)) => {
                    Planned::Plan(unsupported(format!("{why}; {r}")))
                }
            }
        }
        Planned::Plan(Plan::Sharded(mut p)) if p.multi_shard_refusal.is_some() => {
            match combine::plan_combine(sql, stmt, snapshot, columns) {
                Ok(mut c) => {
                    // One family, joined on its key: each shard can aggregate its own rows.
                    let inner = Arc::make_mut(&mut p);
                    let disjoint = inner.answers == ShardAnswers::Disjoint;
                    if let (Some(NodeEnum::SelectStmt(s)), true) = (stmt.node.as_ref(), disjoint) {
                        c.partial = partial::plan_partial(s);
                        inner.aggregate = aggregate::plan_aggregate_merge(s).map(Arc::new);
                    }
                    inner.combine = Some(Arc::new(c))
                }
                Err(combine::NotCombinable::NeedColumns(t)) => return Planned::NeedColumns(t),
                Err(combine::NotCombinable::Refused(r)) => {
                    Arc::make_mut(&mut p).multi_shard_refusal = Some(r)
                }
            }
            Planned::Plan(Plan::Sharded(p))
        }
        other => other,
    }
}

fn plan_one(stmt: &Node, snapshot: &Scope, columns: &dyn ColumnSource) -> Planned {
    let Some(node) = stmt.node.as_ref() else {
        return Planned::Plan(Plan::Anywhere);
    };
    if let Some(planned) = plan_before_walk(stmt, node, snapshot, columns) {
        return planned;
    }
    // Every table named anywhere in the statement, at any depth.
    let mut all: Vec<&RangeVar> = Vec::new();
    collect_range_vars(stmt, &mut all);
    let resolved: Vec<Option<&Table>> = all.iter().map(|r| resolve(snapshot, r)).collect();
    if let Some(refused) = missed_table(stmt, snapshot, &resolved) {
        return refused;
    }
    if all.is_empty() {
        return Planned::Plan(Plan::Anywhere);
    }
    if let Some(refused) = view::view_refusal(node, snapshot, &resolved) {
        return Planned::Plan(refused);
    }
    if let Some(t) = resolved
        .iter()
        .flatten()
        .find(|t| !t.state.takes_statements())
    {
        return Planned::Plan(Plan::Refused(Refusal::NotActive {
            table: t.qualified_name(),
            state: t.state,
        }));
    }
    let sharded: Vec<&Table> = resolved
        .iter()
        .flatten()
        .copied()
        .filter(|t| t.kind == TableKind::Sharded)
        .collect();
    if let NodeEnum::CopyStmt(c) = node {
        if let Some(p) = copy::plan_copy_table(c, snapshot, columns) {
            return p;
        }
    }
    let writes_target = write_target(node).and_then(|r| resolve(snapshot, r));
    if sharded.is_empty() {
        return plan_unsharded(snapshot, &resolved, writes_target);
    }
    if writes_target.is_some_and(|t| t.kind == TableKind::Duplicated) {
        return Planned::Plan(unsupported(
            "a write to a duplicated table that reads a sharded table is not supported yet",
        ));
    }
    if let NodeEnum::SelectStmt(_) = node {
        if let Some(refused) = read_elsewhere(stmt, &all, &resolved) {
            return refused;
        }
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
    plan_on_family(node, snapshot, columns, &sharded, writes_target)
}

/// What is decided before the walk over the statement's tables: sequence calls, refused
/// MERGE and nested writes, ambiguous names, utility statements.
fn plan_before_walk(
    stmt: &Node,
    node: &NodeEnum,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Option<Planned> {
    if let Some(planned) = sequence::plan_sequence_calls(stmt, snapshot, columns) {
        return Some(planned);
    }
    if let NodeEnum::MergeStmt(m) = node {
        if let Some(t) = m.relation.as_ref().and_then(|r| resolve(snapshot, r)) {
            return Some(Planned::Plan(merge_into::plan_merge(m, t, snapshot)));
        }
    }
    if let Some(t) = unqualified_elsewhere(stmt, snapshot) {
        return Some(Planned::Plan(ambiguous(t)));
    }
    if let Some(plan) = utility::plan_utility(node, snapshot) {
        return Some(Planned::Plan(plan));
    }
    // A data-modifying statement inside another (`WITH d AS (DELETE … RETURNING *) SELECT …`)
    // changes rows wherever the whole statement runs: routed by the outer statement, it would
    // change one shard's rows of a recorded table and count only those.
    if let Some(t) = nested_write_target(stmt, snapshot) {
        return Some(Planned::Plan(unsupported(format!(
            "a data-modifying statement inside another statement (WITH … INSERT, UPDATE or \
             DELETE) on table \"{}\" is not supported: run it as a statement of its own",
            t.qualified_name()
        ))));
    }
    None
}

/// A recorded table named where the walk does not look (inside an expression kind it does not
/// know, a view's query, …) must not be missed: such a read takes the general path, which finds
/// every table; anything else is refused.
fn missed_table(stmt: &Node, snapshot: &Scope, resolved: &[Option<&Table>]) -> Option<Planned> {
    let missed = combine::named_tables(stmt)
        .into_iter()
        .find_map(|(schema, name, location)| {
            if schema.is_empty() && snapshot.is_cte_ref(location) {
                return None;
            }
            let t = resolve_name(snapshot, &schema, &name)?;
            (!resolved.iter().flatten().any(|r| r.id == t.id)).then_some(t)
        });
    if let Some(t) = missed {
        let why = format!(
            "this statement names table \"{}\" where shardwire cannot route it (a view, a \
             function's argument, an expression it does not read)",
            t.qualified_name()
        );
        return Some(Planned::Plan(unsupported(why)));
    }
    None
}

/// A statement that names no sharded table: on the shards holding every table it names.
fn plan_unsharded(
    snapshot: &Scope,
    resolved: &[Option<&Table>],
    writes_target: Option<&Table>,
) -> Planned {
    let duplicated: Vec<&Table> = resolved
        .iter()
        .flatten()
        .copied()
        .filter(|t| t.kind == TableKind::Duplicated)
        .collect();
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
    // Duplicated tables, and unsharded ones on their one shard: the shards holding every
    // one of them.
    let mut shards = snapshot.shards_of(duplicated[0].id);
    for t in resolved.iter().flatten() {
        let theirs = snapshot.shards_of(t.id);
        shards.retain(|s| theirs.contains(s));
    }
    Planned::Plan(if shards.is_empty() {
        unsupported("the tables of this statement share no shard")
    } else {
        Plan::AnyOf(shards)
    })
}

/// A read of sharded tables that also names a table not on their shards (unsharded, or not
/// recorded: it lives on the first shard) cannot be read shard by shard: the general path
/// reads it where it is. CTE names are the statement's own.
fn read_elsewhere(stmt: &Node, all: &[&RangeVar], resolved: &[Option<&Table>]) -> Option<Planned> {
    let mut ctes: Vec<&str> = Vec::new();
    walk(stmt, &mut |n| {
        if let Some(NodeEnum::CommonTableExpr(c)) = n.node.as_ref() {
            ctes.push(c.ctename.as_str());
        }
    });
    let elsewhere = all.iter().zip(resolved).find(|(r, t)| match t {
        Some(t) => t.kind == TableKind::Unsharded,
        None => !(r.schemaname.is_empty() && ctes.contains(&r.relname.as_str())),
    });
    if let Some((r, _)) = elsewhere {
        return Some(Planned::Plan(unsupported(format!(
            "a read of sharded tables with table \"{}\", which is not on their shards",
            r.relname
        ))));
    }
    None
}

/// A statement over one family's sharded tables (and duplicated ones).
fn plan_on_family(
    node: &NodeEnum,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
    sharded: &[&Table],
    writes_target: Option<&Table>,
) -> Planned {
    let shards = snapshot.shards_of(sharded[0].id);
    match node {
        NodeEnum::SelectStmt(s) => Planned::Plan(plan_select(s, snapshot, sharded, shards)),
        NodeEnum::InsertStmt(i) => plan_insert(i, snapshot, columns, shards),
        NodeEnum::UpdateStmt(u) => {
            let mut from = vec![range_var_node(u.relation.as_ref())];
            from.extend(u.from_clause.iter().cloned());
            let mut plan = plan_filtered(
                StatementKind::Update,
                &from,
                u.where_clause.as_deref(),
                snapshot,
                sharded,
                shards,
                u.returning_clause.is_some(),
            );
            let target = writes_target.filter(|t| t.kind == TableKind::Sharded);
            if let (Some(target), Plan::Sharded(p)) = (target, &mut plan) {
                match key_update::plan_key_update(u, target, snapshot, columns) {
                    None => {}
                    Some(Ok(k)) => Arc::make_mut(p).key_update = Some(Box::new(k)),
                    Some(Err(planned)) => return planned,
                }
            }
            Planned::Plan(plan)
        }
        NodeEnum::DeleteStmt(d) => {
            let mut from = vec![range_var_node(d.relation.as_ref())];
            from.extend(d.using_clause.iter().cloned());
            Planned::Plan(plan_filtered(
                StatementKind::Delete,
                &from,
                d.where_clause.as_deref(),
                snapshot,
                sharded,
                shards,
                d.returning_clause.is_some(),
            ))
        }
        NodeEnum::CopyStmt(c) => Planned::Plan(copy::plan_copy_query(c, snapshot, sharded, shards)),
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

impl ClientError for Refusal {
    fn sqlstate(&self) -> SqlState {
        use Refusal as R;
        match self {
            R::Unsupported(_) | R::Ambiguous { .. } => SqlState::FEATURE_NOT_SUPPORTED,
            R::GeneratedAlways(_) => SqlState::GENERATED_ALWAYS,
            R::NotActive { .. } => SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        }
    }

    fn client_message(&self) -> String {
        self.to_string()
    }
}
