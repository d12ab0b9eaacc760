//! `UPDATE … SET <sharding key> = …` of a family root: the statements the proxy runs to move
//! rows whose key now belongs elsewhere (docs/architecture.md §8). The planner writes them
//! once per statement text; the movement layer fills in the rows at run time.
//!
//! On each source shard the proxy reads the rows the UPDATE touches with their new values,
//! locking them (`SELECT … FOR UPDATE`: the shard evaluates the SET expressions); a row whose
//! new key belongs to another shard (or, in a family with child tables, whose key changes at
//! all) is deleted there with its descendants and inserted on its new shard, the descendants'
//! key columns rewritten; the other rows take the client's UPDATE restricted to exactly the
//! rows read, so nothing is updated twice or missed.

use super::conditions::operand;
use super::insert_select::deparse_select;
use super::scope::Scope;
use super::{unsupported, ColumnDef, ColumnSource, KeyTuple, Operand, Planned};
use crate::catalog::{KeyColumn, RowMovement, Table, TableId};
use crate::sql::deparse::deparse;
use crate::sql::quote::quote_ident;
use pg_query::protobuf::{
    a_const, BoolExpr, BoolExprType, LimitOption, Node, RangeVar, ResTarget, SelectStmt,
    SetOperation, UpdateStmt,
};
use pg_query::NodeEnum;
use std::sync::Arc;

/// The statements of a sharding-key UPDATE of a family root.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct KeyUpdate {
    pub table: TableId,
    pub movement: RowMovement,
    /// The new key when the SET gives every key column a constant or a parameter: a statement
    /// whose rows all live on the shard that owns it runs there as it is.
    pub new_key: Option<KeyTuple>,
    /// The parameters of the client's statement (`$1` … `$n`); the proxy's come after them.
    pub client_params: usize,
    /// The rows the UPDATE touches, locked: the partition holding each (`tableoid::regclass`,
    /// which PostgreSQL prints as SQL names the table, quoted and, off the search path,
    /// schema-qualified) and `ctid` as text, then the new row
    /// (one value per column of [`KeyUpdate::columns`], each of its column's type), then the
    /// old key (root key columns, then partition-set columns).
    pub select_sql: String,
    /// The columns an INSERT of a moved row gives (stored generated ones are left out), and
    /// their types as `format_type` spells them.
    pub columns: Vec<String>,
    pub column_types: Vec<String>,
    /// Where in the new row each key column is (root key, then partition-set key).
    pub key_positions: Vec<usize>,
    /// The client's UPDATE for the rows that stay, restricted to the rows read: parameter
    /// `client_params + 1` is their ctids (`tid[]`), `client_params + 2` their
    /// `partition:ctid` pairs (`text[]`).
    pub stay_sql: String,
    /// The table, schema-qualified and quoted, and the name its columns are qualified with.
    pub relation: String,
    pub qualifier: String,
    /// ` RETURNING …` of the client's statement, for the inserts of moved rows (empty: none).
    pub returning: String,
    /// The types of the root's key columns as `format_type` spells them (root key, then
    /// partition-set key), for the descendants' lookups.
    pub key_types: Vec<String>,
    /// Every table below the root, parents before their children.
    pub descendants: Vec<Descendant>,
}

/// A table of the family below the root: its rows move with their root row.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Descendant {
    pub table: TableId,
    pub relation: String,
    pub columns: Vec<String>,
    pub column_types: Vec<String>,
    /// `SELECT partition, ctid (as text), m.i, <the row with the new key>` of the rows whose key
    /// is an old key of `(VALUES …) AS m(i, <old key>, <new key>)`, locked: the text before
    /// the VALUES rows and after them.
    pub select_head: String,
    pub select_tail: String,
}

/// A SET target, with the expression it takes.
struct Assignment<'a> {
    column: &'a str,
    value: &'a Node,
}

/// The plan of an UPDATE that assigns a sharding-key column of `target`; `None` when it assigns
/// none (or assigns something PostgreSQL will refuse itself, which the shard then reports).
pub(super) fn plan_key_update(
    u: &UpdateStmt,
    target: &Table,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Option<Result<KeyUpdate, Planned>> {
    let assignments = assignments(u)?;
    let key_names: Vec<&str> = target.sharding_columns().map(|c| c.name.as_str()).collect();
    // By name, also where the value is one a key update cannot take (DEFAULT): that is
    // refused below, not run as a plain UPDATE.
    let assigned_key = u
        .target_list
        .iter()
        .filter_map(|t| match t.node.as_ref() {
            Some(NodeEnum::ResTarget(r)) => Some(r.name.as_str()),
            _ => None,
        })
        .find(|column| key_names.contains(column))?;
    let refuse = |msg: String| Some(Err(Planned::Plan(unsupported(msg))));
    if !target.is_root() {
        let root = snapshot
            .root_of(target.id)
            .map_or_else(String::new, |r| r.qualified_name());
        return refuse(format!(
            "cannot update sharding key column \"{}\" of \"{}\", a child table in the family of \
             \"{root}\": update the sharding key on the family's root table \"{root}\"",
            assigned_key,
            target.qualified_name()
        ));
    }
    let assignments: Vec<Assignment<'_>> = match assignments.into_iter().collect() {
        Ok(a) => a,
        Err(why) => return refuse(why),
    };
    if u.with_clause.is_some() {
        return refuse(
            "an UPDATE of a sharding key with a WITH clause is not supported yet: update the key \
             without one"
                .into(),
        );
    }
    let Some(defs) = columns.column_defs(target.id) else {
        return Some(Err(Planned::NeedColumns(target.id)));
    };
    if assignments
        .iter()
        .any(|a| !defs.iter().any(|d| d.name == a.column && !d.generated))
    {
        // A column that does not exist or cannot be assigned: the shard says so.
        return None;
    }
    let mut descendants = Vec::new();
    for table in family_below(snapshot, target) {
        let Some(defs) = columns.column_defs(table.id) else {
            return Some(Err(Planned::NeedColumns(table.id)));
        };
        descendants.push((table, defs));
    }
    match build(u, target, &defs, &assignments, &descendants) {
        Ok(plan) => Some(Ok(plan)),
        Err(why) => refuse(format!("cannot rewrite the sharding-key UPDATE: {why}")),
    }
}

/// The SET list, one entry per assigned column; `None` when the statement has none.
fn assignments(u: &UpdateStmt) -> Option<Vec<Result<Assignment<'_>, String>>> {
    let list: Vec<Result<Assignment<'_>, String>> = u
        .target_list
        .iter()
        .filter_map(|t| match t.node.as_ref() {
            Some(NodeEnum::ResTarget(r)) => Some(assignment(r)),
            _ => None,
        })
        .collect();
    (!list.is_empty()).then_some(list)
}

fn assignment(r: &ResTarget) -> Result<Assignment<'_>, String> {
    let fail = |what: &str| {
        Err(format!(
            "an UPDATE of a sharding key cannot assign column \"{}\" {what} yet: assign it a \
             plain expression",
            r.name
        ))
    };
    if !r.indirection.is_empty() {
        return fail("through a subscript or field");
    }
    let Some(value) = r.val.as_deref() else {
        return fail("no value");
    };
    match value.node.as_ref() {
        Some(NodeEnum::SetToDefault(_)) => fail("DEFAULT"),
        Some(NodeEnum::MultiAssignRef(m)) => {
            let row = m.source.as_deref().and_then(|s| match s.node.as_ref() {
                Some(NodeEnum::RowExpr(row)) => Some(&row.args),
                _ => None,
            });
            match row.and_then(|args| args.get(m.colno.max(1) as usize - 1)) {
                Some(v) if !matches!(v.node, Some(NodeEnum::SetToDefault(_))) => Ok(Assignment {
                    column: &r.name,
                    value: v,
                }),
                _ => fail("from a sub-SELECT or DEFAULT in a multiple-column SET"),
            }
        }
        _ => Ok(Assignment {
            column: &r.name,
            value,
        }),
    }
}

/// The tables of the family below `root`, each after its parent.
fn family_below<'s>(snapshot: &'s Scope, root: &Table) -> Vec<&'s Table> {
    let mut out: Vec<&Table> = Vec::new();
    let mut next = 0;
    let mut frontier = snapshot.children(root.id);
    loop {
        out.append(&mut frontier);
        let Some(t) = out.get(next) else {
            return out;
        };
        next += 1;
        frontier = snapshot.children(t.id);
    }
}

fn build(
    u: &UpdateStmt,
    target: &Table,
    defs: &[ColumnDef],
    assignments: &[Assignment<'_>],
    descendants: &[(&Table, Arc<Vec<ColumnDef>>)],
) -> Result<KeyUpdate, String> {
    let relation_var = u.relation.as_ref().ok_or("no table")?;
    let qualifier = relation_var
        .alias
        .as_ref()
        .map_or(relation_var.relname.clone(), |a| a.aliasname.clone());
    let q = quote_ident(&qualifier);
    let client_params = max_param(&deparse_update(u.clone())?);

    let mut new_row = Vec::new();
    let mut columns = Vec::new();
    let mut column_types = Vec::new();
    for d in defs.iter().filter(|d| !d.generated) {
        columns.push(d.name.clone());
        column_types.push(d.type_sql.clone());
        new_row.push(match assignments.iter().find(|a| a.column == d.name) {
            Some(a) => format!("CAST(({}) AS {})", expression(a.value)?, d.type_sql),
            None => format!("{q}.{}", quote_ident(&d.name)),
        });
    }
    let key_columns: Vec<&KeyColumn> = target.sharding_columns().collect();
    let mut key_positions = Vec::new();
    let mut key_types = Vec::new();
    for k in &key_columns {
        let at = columns
            .iter()
            .position(|c| *c == k.name)
            .ok_or_else(|| format!("key column \"{}\" is generated", k.name))?;
        key_positions.push(at);
        key_types.push(
            defs.iter()
                .find(|d| d.name == k.name)
                .map_or_else(|| k.pg_type.clone(), |d| d.type_sql.clone()),
        );
    }
    let old_key: Vec<String> = key_columns
        .iter()
        .map(|k| format!("{q}.{}", quote_ident(&k.name)))
        .collect();

    let from_where = from_and_where(relation_var, &u.from_clause, u.where_clause.as_deref())?;
    let select_sql = format!(
        "SELECT {q}.tableoid::regclass::text, {q}.ctid::text, {}, {} {from_where} FOR UPDATE OF {q}",
        new_row.join(", "),
        old_key.join(", ")
    );

    let returning = match &u.returning_clause {
        Some(r) if !r.exprs.is_empty() => {
            let list = deparse_select(&SelectStmt {
                target_list: r.exprs.clone(),
                ..plain_select()
            })?;
            let list = list.strip_prefix("SELECT ").ok_or("unexpected deparse")?;
            if max_param(list) > 0 {
                return Err(
                    "RETURNING with parameters is not supported when rows move between shards"
                        .into(),
                );
            }
            format!(" RETURNING {list}")
        }
        _ => String::new(),
    };

    let stay_sql = restricted_update(u, &q, client_params)?;
    let relation = format!(
        "{}.{}",
        quote_ident(&target.schema),
        quote_ident(&target.name)
    );
    let descendants = descendants
        .iter()
        .map(|(t, defs)| descendant(t, defs, &key_types))
        .collect();
    let value_of = |k: &KeyColumn| {
        assignments
            .iter()
            .find(|a| a.column == k.name)
            .and_then(|a| operand(a.value))
    };
    let new_key = target
        .key_columns
        .iter()
        .map(value_of)
        .collect::<Option<Vec<Operand>>>()
        .zip(
            target
                .partition_set_columns
                .iter()
                .map(value_of)
                .collect::<Option<Vec<Operand>>>(),
        )
        .map(|(key, set_key)| KeyTuple { key, set_key });
    Ok(KeyUpdate {
        table: target.id,
        movement: target.row_movement,
        new_key,
        client_params,
        select_sql,
        columns,
        column_types,
        key_positions,
        stay_sql,
        relation,
        qualifier,
        returning,
        key_types,
        descendants,
    })
}

fn descendant(table: &Table, defs: &[ColumnDef], key_types: &[String]) -> Descendant {
    let keys: Vec<&KeyColumn> = table.sharding_columns().collect();
    let mut columns = Vec::new();
    let mut column_types = Vec::new();
    let mut row = Vec::new();
    for d in defs.iter().filter(|d| !d.generated) {
        columns.push(d.name.clone());
        column_types.push(d.type_sql.clone());
        row.push(match keys.iter().position(|k| k.name == d.name) {
            Some(p) => format!("CAST(m.n{p} AS {})", d.type_sql),
            None => format!("d.{}", quote_ident(&d.name)),
        });
    }
    let names: Vec<String> = (0..key_types.len())
        .map(|p| format!("o{p}"))
        .chain((0..key_types.len()).map(|p| format!("n{p}")))
        .collect();
    let on: Vec<String> = keys
        .iter()
        .enumerate()
        .map(|(p, k)| format!("d.{} = m.o{p}", quote_ident(&k.name)))
        .collect();
    let relation = format!(
        "{}.{}",
        quote_ident(&table.schema),
        quote_ident(&table.name)
    );
    Descendant {
        table: table.id,
        select_head: format!(
            "SELECT d.tableoid::regclass::text, d.ctid::text, m.i, {} FROM {relation} AS d JOIN (VALUES ",
            row.join(", ")
        ),
        select_tail: format!(
            ") AS m(i, {}) ON {} FOR UPDATE OF d",
            names.join(", "),
            on.join(" AND ")
        ),
        relation,
        columns,
        column_types,
    }
}

/// An expression as SQL text.
fn expression(node: &Node) -> Result<String, String> {
    let select = deparse_select(&SelectStmt {
        target_list: vec![Node {
            node: Some(NodeEnum::ResTarget(Box::new(ResTarget {
                val: Some(Box::new(node.clone())),
                ..Default::default()
            }))),
        }],
        ..plain_select()
    })?;
    select
        .strip_prefix("SELECT ")
        .map(str::to_string)
        .ok_or_else(|| "unexpected deparse".into())
}

/// `FROM <table> [, <from list>] [WHERE …]` of the UPDATE, as a SELECT reads it.
fn from_and_where(
    relation: &RangeVar,
    from: &[Node],
    where_clause: Option<&Node>,
) -> Result<String, String> {
    let mut from_clause = vec![Node {
        node: Some(NodeEnum::RangeVar(relation.clone())),
    }];
    from_clause.extend(from.iter().cloned());
    let select = deparse_select(&SelectStmt {
        target_list: vec![Node {
            node: Some(NodeEnum::ResTarget(Box::new(ResTarget {
                val: Some(Box::new(Node {
                    node: Some(NodeEnum::AConst(pg_query::protobuf::AConst {
                        val: Some(a_const::Val::Ival(pg_query::protobuf::Integer { ival: 1 })),
                        ..Default::default()
                    })),
                })),
                ..Default::default()
            }))),
        }],
        from_clause,
        where_clause: where_clause.map(|w| Box::new(w.clone())),
        ..plain_select()
    })?;
    select
        .strip_prefix("SELECT 1 ")
        .map(str::to_string)
        .ok_or_else(|| "unexpected deparse".into())
}

/// The client's UPDATE limited to the rows read ([`KeyUpdate::stay_sql`]).
fn restricted_update(u: &UpdateStmt, q: &str, client_params: usize) -> Result<String, String> {
    let (tids, pairs) = (client_params + 1, client_params + 2);
    let condition = format!(
        "SELECT 1 WHERE {q}.ctid = ANY(${tids}::tid[]) \
         AND ({q}.tableoid::regclass::text || ':' || {q}.ctid::text) = ANY(${pairs}::text[])"
    );
    let parsed = pg_query::parse(&condition, 0).map_err(|e| e.to_string())?;
    let extra = parsed
        .protobuf
        .stmts
        .first()
        .and_then(|s| s.stmt.as_deref())
        .and_then(|s| match s.node.as_ref() {
            Some(NodeEnum::SelectStmt(s)) => s.where_clause.as_deref().cloned(),
            _ => None,
        })
        .ok_or("no condition")?;
    let mut stmt = u.clone();
    stmt.where_clause = Some(Box::new(match u.where_clause.as_deref() {
        None => extra,
        Some(w) => Node {
            node: Some(NodeEnum::BoolExpr(Box::new(BoolExpr {
                boolop: BoolExprType::AndExpr as i32,
                args: vec![w.clone(), extra],
                ..Default::default()
            }))),
        },
    }));
    deparse_update(stmt)
}

fn deparse_update(stmt: UpdateStmt) -> Result<String, String> {
    deparse(NodeEnum::UpdateStmt(Box::new(stmt)))
}

fn plain_select() -> SelectStmt {
    SelectStmt {
        limit_option: LimitOption::Default as i32,
        op: SetOperation::SetopNone as i32,
        ..Default::default()
    }
}

/// The highest `$n` in a text (0: none).
fn max_param(text: &str) -> usize {
    let Ok(scanned) = pg_query::scan(text) else {
        return 0;
    };
    scanned
        .tokens
        .iter()
        .filter(|t| t.token == pg_query::protobuf::Token::Param as i32)
        .filter_map(|t| text.get(t.start as usize + 1..t.end as usize)?.parse().ok())
        .max()
        .unwrap_or(0)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn params_are_counted_by_the_scanner() {
        assert_eq!(max_param("UPDATE t SET k = $2 WHERE id = $1"), 2);
        assert_eq!(max_param("UPDATE t SET k = '$5' WHERE id = 1"), 0);
    }
}
