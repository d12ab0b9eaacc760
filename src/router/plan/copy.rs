//! COPY naming a sharded or duplicated table: what the session needs to split COPY FROM by key
//! and to gather COPY TO (the statement each shard runs, the key columns' positions in a row,
//! the options as written).

use super::scope::resolve;
use super::select::plan_select;
use super::{unsupported, ColumnSource, Plan, Planned, Scope, ShardedPlan};
use crate::catalog::{ShardId, Table, TableId, TableKind};
use crate::model::ROWS_SCHEMA_SUFFIX;
use crate::sql::quote::quote_ident;
use pg_query::protobuf::{CopyStmt, Node};
use pg_query::NodeEnum;
use std::sync::Arc;

/// A COPY option's argument as PostgreSQL's grammar gives it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum CopyArg {
    /// Given without a value (`HEADER`, `WITH (header)`): true for a Boolean option.
    None,
    Text(String),
    Number(String),
    Star,
    List(Vec<String>),
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyOption {
    /// Lower case, as PostgreSQL compares option names.
    pub name: String,
    pub arg: CopyArg,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CopyPlan {
    /// The table copied from or into (for `COPY (SELECT …)`, the first sharded table it reads).
    pub table: TableId,
    /// COPY FROM STDIN; else COPY TO STDOUT.
    pub from: bool,
    /// The table is duplicated: COPY FROM writes every copy.
    pub duplicated: bool,
    /// The names of a row's fields, in order (COPY FROM into a sharded table).
    pub columns: Vec<String>,
    /// The column list was given (else `columns` is the table's column order).
    pub named_columns: bool,
    /// Where in a row each sharding-key column is (the root's key order), then each
    /// partition-set key column.
    pub key_positions: Vec<usize>,
    /// How many of `key_positions` are the sharding key.
    pub root_key: usize,
    pub options: Vec<CopyOption>,
    /// The statement each shard runs.
    pub shard_sql: String,
    /// Every shard holding the table.
    pub shards: Vec<ShardId>,
    /// `COPY (SELECT …) TO`: the SELECT's plan, so a full key routes it to one shard.
    pub select: Option<Arc<ShardedPlan>>,
    /// `COPY (SELECT …) TO` whose rows the shards' answers cannot simply follow one another
    /// as (ordered, limited, aggregated): the general path, whose combining step runs the COPY.
    pub combine: Option<Arc<super::CombinePlan>>,
}

impl CopyPlan {
    /// `FORMAT binary` (or the old `BINARY`) was asked for.
    pub fn binary(&self) -> bool {
        self.options.iter().any(|o| {
            o.name == "format"
                && matches!(&o.arg, CopyArg::Text(s) if s.eq_ignore_ascii_case("binary"))
        })
    }
}

fn names(list: &[Node]) -> Vec<String> {
    list.iter()
        .filter_map(|n| match n.node.as_ref()? {
            NodeEnum::String(s) => Some(s.sval.clone()),
            _ => None,
        })
        .collect()
}

fn options_of(c: &CopyStmt) -> Vec<CopyOption> {
    c.options
        .iter()
        .filter_map(|n| match n.node.as_ref()? {
            NodeEnum::DefElem(d) => Some(d),
            _ => None,
        })
        .map(|d| {
            let arg = match d.arg.as_deref().and_then(|a| a.node.as_ref()) {
                None => CopyArg::None,
                Some(NodeEnum::String(s)) => CopyArg::Text(s.sval.clone()),
                Some(NodeEnum::Integer(i)) => CopyArg::Number(i.ival.to_string()),
                Some(NodeEnum::Float(f)) => CopyArg::Number(f.fval.clone()),
                Some(NodeEnum::Boolean(b)) => CopyArg::Text(b.boolval.to_string()),
                Some(NodeEnum::AStar(_)) => CopyArg::Star,
                Some(NodeEnum::List(l)) => CopyArg::List(names(&l.items)),
                Some(_) => CopyArg::Text(String::new()),
            };
            CopyOption {
                name: d.defname.to_ascii_lowercase(),
                arg,
            }
        })
        .collect()
}

fn is_header_skip(n: &Node) -> bool {
    let Some(NodeEnum::DefElem(d)) = n.node.as_ref() else {
        return false;
    };
    // HEADER MATCH stays: every shard is sent the header line and checks it.
    let is_match = matches!(
        d.arg.as_deref().and_then(|a| a.node.as_ref()),
        Some(NodeEnum::String(s)) if s.sval.eq_ignore_ascii_case("match")
    );
    d.defname.eq_ignore_ascii_case("header") && !is_match
}

/// COPY naming a table (`COPY t … FROM STDIN`, `COPY t TO STDOUT`). `None`: not a sharded or
/// duplicated table, which goes where any statement on it goes.
pub(super) fn plan_copy_table(
    c: &CopyStmt,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Option<Planned> {
    let t = resolve(snapshot, c.relation.as_ref()?)?;
    let duplicated = match t.kind {
        TableKind::Unsharded => return None,
        TableKind::Duplicated => true,
        TableKind::Sharded => false,
    };
    let shards = snapshot.shards_of(t.id);
    if !c.filename.is_empty() || c.is_program {
        if duplicated && !c.is_from {
            return Some(Planned::Plan(Plan::AnyOf(shards)));
        }
        return Some(Planned::Plan(unsupported(format!(
            "COPY of table \"{}\" to or from a server file or program is not supported: each \
             shard would use its own file; use COPY … FROM STDIN or TO STDOUT (psql's \\copy)",
            t.qualified_name()
        ))));
    }
    if duplicated && !c.is_from {
        return Some(Planned::Plan(Plan::AnyOf(shards)));
    }
    let options = options_of(c);
    let deparsed =
        |stmt: CopyStmt| match NodeEnum::CopyStmt(Box::new(stmt)).deparse(Default::default()) {
            Ok(sql) => Ok(sql),
            Err(e) => Err(Planned::Plan(unsupported(format!(
                "cannot rewrite the COPY for the shards: {e}"
            )))),
        };
    let mut plan = CopyPlan {
        table: t.id,
        from: c.is_from,
        duplicated,
        columns: Vec::new(),
        named_columns: !c.attlist.is_empty(),
        key_positions: Vec::new(),
        root_key: 0,
        options,
        shard_sql: String::new(),
        shards,
        select: None,
        combine: None,
    };
    if !c.is_from {
        // A shard's table is partitioned (its chunks), which COPY TO reads only through a
        // query.
        let list = if c.attlist.is_empty() {
            "*".to_string()
        } else {
            names(&c.attlist)
                .iter()
                .map(|n| quote_ident(n))
                .collect::<Vec<_>>()
                .join(", ")
        };
        let text = format!(
            "COPY (SELECT {list} FROM {}.{}) TO STDOUT",
            quote_ident(&t.schema),
            quote_ident(&t.name)
        );
        let Some(mut stmt) = pg_query::parse(&text, 0).ok().and_then(|p| {
            match p.protobuf.stmts.first()?.stmt.as_ref()?.node.as_ref()? {
                NodeEnum::CopyStmt(s) => Some((**s).clone()),
                _ => None,
            }
        }) else {
            return Some(Planned::Plan(unsupported(
                "cannot rewrite the COPY for the shards",
            )));
        };
        stmt.options = c.options.clone();
        match deparsed(stmt) {
            Ok(sql) => plan.shard_sql = sql,
            Err(refused) => return Some(refused),
        }
    }
    if c.is_from && !duplicated {
        plan.columns = if c.attlist.is_empty() {
            match columns.columns(t.id) {
                Some(cols) => cols.as_ref().clone(),
                None => return Some(Planned::NeedColumns(t.id)),
            }
        } else {
            names(&c.attlist)
        };
        match key_positions(t, &plan.columns) {
            Ok(p) => plan.key_positions = p,
            Err(refused) => return Some(Planned::Plan(refused)),
        }
        plan.root_key = t.key_columns.len();
    }
    if c.is_from {
        // The header line is the proxy's to drop: a shard told HEADER would drop its first
        // row instead.
        let mut bare = c.clone();
        if !duplicated {
            bare.options.retain(|o| !is_header_skip(o));
        }
        if t.nosql {
            // A NoSQL table's name on a shard is a view, which COPY cannot fill: the rows go
            // to its data table, naming the view's columns so `$expires` takes its default
            // (the table's time to live).
            if let Some(rel) = bare.relation.as_mut() {
                rel.schemaname = format!("{}{ROWS_SCHEMA_SUFFIX}", t.schema);
                rel.relname = t.name.clone();
            }
            if bare.attlist.is_empty() {
                bare.attlist = plan.columns.iter().map(|n| string_node(n)).collect();
            }
        }
        match deparsed(bare) {
            Ok(sql) => plan.shard_sql = sql,
            Err(refused) => return Some(refused),
        }
    }
    Some(Planned::Plan(Plan::Copy(Arc::new(plan))))
}

fn string_node(s: &str) -> Node {
    Node {
        node: Some(NodeEnum::String(pg_query::protobuf::String {
            sval: s.to_owned(),
        })),
    }
}

fn key_positions(t: &Table, columns: &[String]) -> Result<Vec<usize>, Plan> {
    t.sharding_columns()
        .map(|k| {
            columns.iter().position(|n| *n == k.name).ok_or_else(|| {
                unsupported(format!(
                    "COPY into sharded table \"{}\" must include sharding key column \"{}\" \
                     (generated keys are not supported yet)",
                    t.qualified_name(),
                    k.name
                ))
            })
        })
        .collect()
}

/// `COPY (SELECT …) TO STDOUT` over sharded tables of one family.
pub(super) fn plan_copy_query(
    c: &CopyStmt,
    snapshot: &Scope,
    sharded: &[&Table],
    shards: Vec<ShardId>,
) -> Plan {
    let Some(NodeEnum::SelectStmt(s)) = c.query.as_deref().and_then(|q| q.node.as_ref()) else {
        return unsupported(format!(
            "COPY (INSERT/UPDATE/DELETE … RETURNING) on sharded table \"{}\" is not supported \
             yet",
            sharded[0].qualified_name()
        ));
    };
    if !c.filename.is_empty() || c.is_program {
        return unsupported(format!(
            "COPY of sharded table \"{}\" to a server file or program is not supported: each \
             shard would write its own file; use COPY … TO STDOUT (psql's \\copy)",
            sharded[0].qualified_name()
        ));
    }
    let select = match plan_select(s, snapshot, sharded, shards.clone()) {
        Plan::Sharded(p) => p,
        other => return other,
    };
    let shard_sql = match NodeEnum::CopyStmt(Box::new(c.clone())).deparse(Default::default()) {
        Ok(sql) => sql,
        Err(e) => return unsupported(format!("cannot rewrite the COPY for the shards: {e}")),
    };
    Plan::Copy(Arc::new(CopyPlan {
        table: sharded[0].id,
        from: false,
        duplicated: false,
        columns: Vec::new(),
        named_columns: false,
        key_positions: Vec::new(),
        root_key: 0,
        options: options_of(c),
        shard_sql,
        shards,
        select: Some(select),
        combine: None,
    }))
}

/// `COPY (SELECT …) TO STDOUT` whose rows cannot come as the shards send them (an ORDER BY, a
/// LIMIT, an aggregate, a join across families): the general path, with the COPY run by its
/// combining step over the pulled rows, so PostgreSQL writes the format itself.
pub(super) fn copy_out_combined(
    planned: Planned,
    c: &pg_query::protobuf::CopyStmt,
    sql: &str,
    snapshot: &Scope,
    columns: &dyn ColumnSource,
) -> Planned {
    let Some(query) = c.query.as_deref() else {
        return planned;
    };
    let to_client = !c.is_from && !c.is_program && c.filename.is_empty();
    if !to_client || !matches!(query.node, Some(NodeEnum::SelectStmt(_))) {
        return planned;
    }
    let needed = match &planned {
        Planned::Plan(Plan::Copy(copy)) => copy.select.as_ref().is_some_and(|s| {
            s.multi_shard_refusal.is_some() || !s.merge.order.is_empty() || s.merge.bounds_rows()
        }),
        Planned::Plan(Plan::Refused(super::Refusal::Unsupported(_))) => true,
        _ => false,
    };
    if !needed {
        return planned;
    }
    let combine = match super::combine::plan_combine(sql, query, snapshot, columns) {
        Ok(combine) if !combine.pulls.is_empty() => Arc::new(super::CombinePlan {
            copy_out: true,
            ..combine
        }),
        Err(super::combine::NotCombinable::NeedColumns(t)) => return Planned::NeedColumns(t),
        Ok(_) | Err(super::combine::NotCombinable::Refused(_)) => return planned,
    };
    Planned::Plan(match planned {
        Planned::Plan(Plan::Copy(mut copy)) => {
            Arc::make_mut(&mut copy).combine = Some(combine);
            Plan::Copy(copy)
        }
        _ => Plan::Combine(combine),
    })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn copy_stmt(sql: &str) -> CopyStmt {
        let parsed = pg_query::parse(sql, 0).unwrap();
        match parsed.protobuf.stmts[0]
            .stmt
            .as_ref()
            .unwrap()
            .node
            .as_ref()
        {
            Some(NodeEnum::CopyStmt(c)) => (**c).clone(),
            other => panic!("{other:?}"),
        }
    }

    fn without_header(sql: &str) -> String {
        let mut c = copy_stmt(sql);
        c.options.retain(|o| !is_header_skip(o));
        NodeEnum::CopyStmt(Box::new(c))
            .deparse(Default::default())
            .unwrap()
    }

    #[test]
    fn header_is_dropped_from_the_shards_copy_in_both_syntaxes_but_match_stays() {
        let new = without_header(
            "COPY s.t (a, \"B\") FROM STDIN WITH (FORMAT csv, HEADER, DELIMITER ';', QUOTE '''')",
        );
        assert!(!new.to_lowercase().contains("header"), "{new}");
        assert!(
            new.contains("s.t") && new.contains("\"B\"") && new.contains(';'),
            "{new}"
        );
        let old = without_header("COPY t FROM STDIN CSV HEADER NULL 'x'");
        assert!(!old.to_lowercase().contains("header"), "{old}");
        assert!(
            old.to_lowercase().contains("csv") && old.contains("'x'"),
            "{old}"
        );
        let kept = without_header("COPY t FROM STDIN (FORMAT csv, HEADER match)");
        assert!(kept.to_lowercase().contains("header"), "{kept}");
    }

    #[test]
    fn options_read_as_the_grammar_gives_them() {
        let c = copy_stmt(
            "COPY t FROM STDIN WITH (FORMAT csv, HEADER, FORCE_NULL (a, b), DELIMITER '|', \
             header 1)",
        );
        let o = options_of(&c);
        assert_eq!(o[0].arg, CopyArg::Text("csv".into()));
        assert_eq!((o[1].name.as_str(), &o[1].arg), ("header", &CopyArg::None));
        assert_eq!(o[2].arg, CopyArg::List(vec!["a".into(), "b".into()]));
        assert_eq!(o[4].arg, CopyArg::Number("1".into()));
        let old = options_of(&copy_stmt("COPY t TO STDOUT CSV HEADER FORCE QUOTE *"));
        let names: Vec<&str> = old.iter().map(|o| o.name.as_str()).collect();
        assert_eq!(names, ["format", "header", "force_quote"]);
        assert_eq!(old[2].arg, CopyArg::Star);
    }
}
