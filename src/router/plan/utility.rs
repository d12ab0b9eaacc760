//! Utility statements that name recorded tables. The tables exist on every shard that holds
//! them, so what changes or locks them runs on each of those shards (TRUNCATE, LOCK, GRANT and
//! REVOKE, COMMENT, triggers, policies, rules, extended statistics), and so does maintenance
//! (VACUUM, ANALYZE, CLUSTER, REINDEX). DDL the proxy runs itself (CREATE INDEX, ALTER TABLE,
//! DROP TABLE, …) is recognised only as a statement of its own: met here, among other
//! statements of one query string, it is refused rather than run on one shard.
//!
//! The objects a table's columns can use — types, domains, schemas, extensions — are made,
//! changed and dropped on every shard, so that a sharded table can use them wherever it is.

use super::scope::{resolve, resolve_name, Scope};
use super::{function_body, unsupported, Plan};
use crate::catalog::{ShardId, Table};
use pg_query::protobuf::{
    ConstrType, GrantTargetType, Node, ObjectType, RangeVar, ReindexObjectType,
};
use pg_query::NodeEnum;
use std::sync::Arc;

/// What every shard holding the tables does with a utility statement.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct UtilityPlan {
    pub shards: Vec<ShardId>,
    pub kind: UtilityKind,
    /// What the shards other than the first run instead of the statement: a DROP made
    /// `IF EXISTS` (an object made before the proxy made such objects everywhere is on the first
    /// shard only), a CREATE made `IF NOT EXISTS` where PostgreSQL has the form.
    pub elsewhere: Option<String>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum UtilityKind {
    /// Changes the tables or their catalog entries: all shards or none, as a write.
    Atomic,
    /// LOCK: PostgreSQL takes it only inside a transaction block, and so do the shards; out of
    /// one, a shard reports PostgreSQL's error.
    InBlock,
    /// VACUUM, ANALYZE, CLUSTER, REINDEX: each shard on its own, in no transaction of the
    /// proxy's (VACUUM cannot run inside one).
    EachOnItsOwn,
}

/// The plan of a utility statement naming recorded tables or of a shared object's DDL; `None`
/// for every other statement.
pub(super) fn plan_utility(node: &NodeEnum, snapshot: &Scope) -> Option<Plan> {
    use UtilityKind::*;
    if let Some(refused) = temporary_named_like_recorded(node, snapshot) {
        return Some(refused);
    }
    let relations = |nodes: &[Node]| -> Vec<Name> {
        nodes
            .iter()
            .filter_map(|n| match n.node.as_ref()? {
                NodeEnum::RangeVar(r) => Some(Name::of_range_var(r)),
                _ => None,
            })
            .collect()
    };
    let (names, kind, verb) = match node {
        NodeEnum::DoStmt(d) => return function_body::do_refusal(d, snapshot),
        NodeEnum::TruncateStmt(t) => {
            let names = relations(&t.relations);
            if t.restart_seqs {
                if let Some(table) = names
                    .iter()
                    .filter_map(|n| n.resolve(snapshot))
                    .find(|t| !t.generated.is_empty())
                {
                    return Some(unsupported(format!(
                        "TRUNCATE … RESTART IDENTITY of table \"{}\" is not supported: its \
                         generated key comes from the cluster-wide sequence, which does not \
                         restart; use CONTINUE IDENTITY",
                        table.qualified_name()
                    )));
                }
            }
            (names, Atomic, "TRUNCATE")
        }
        NodeEnum::LockStmt(l) => (relations(&l.relations), InBlock, "LOCK"),
        NodeEnum::VacuumStmt(v) => {
            let names = v
                .rels
                .iter()
                .filter_map(|n| match n.node.as_ref()? {
                    NodeEnum::VacuumRelation(r) => r.relation.as_ref().map(Name::of_range_var),
                    _ => None,
                })
                .collect();
            let verb = if v.is_vacuumcmd { "VACUUM" } else { "ANALYZE" };
            (names, EachOnItsOwn, verb)
        }
        NodeEnum::ClusterStmt(c) => (on_table(c.relation.as_ref()), EachOnItsOwn, "CLUSTER"),
        NodeEnum::ReindexStmt(r) if r.kind == ReindexObjectType::ReindexObjectTable as i32 => {
            (on_table(r.relation.as_ref()), EachOnItsOwn, "REINDEX")
        }
        NodeEnum::GrantStmt(g) if g.objtype == ObjectType::ObjectTable as i32 => {
            let verb = if g.is_grant { "GRANT" } else { "REVOKE" };
            if g.targtype == GrantTargetType::AclTargetAllInSchema as i32 {
                return grant_in_schemas(&g.objects, snapshot);
            }
            if g.targtype != GrantTargetType::AclTargetObject as i32 {
                return None;
            }
            (relations(&g.objects), Atomic, verb)
        }
        NodeEnum::CommentStmt(c) => {
            let table_at = match ObjectType::try_from(c.objtype).ok()? {
                ObjectType::ObjectTable | ObjectType::ObjectView => 0,
                ObjectType::ObjectColumn
                | ObjectType::ObjectTabconstraint
                | ObjectType::ObjectTrigger
                | ObjectType::ObjectPolicy
                | ObjectType::ObjectRule => 1,
                _ => return shared_object(node, snapshot),
            };
            let name = Name::of_list(c.object.as_deref()?, table_at)?;
            (vec![name], Atomic, "COMMENT")
        }
        NodeEnum::DropStmt(d) => {
            match ObjectType::try_from(d.remove_type).ok()? {
                ObjectType::ObjectTrigger | ObjectType::ObjectPolicy | ObjectType::ObjectRule => {}
                _ => {
                    return shared_object(node, snapshot)
                        .or_else(|| proxy_ddl_among_others(node, snapshot))
                }
            }
            let names = d
                .objects
                .iter()
                .filter_map(|o| Name::of_list(o, 1))
                .collect();
            (names, Atomic, "DROP")
        }
        NodeEnum::CreateTrigStmt(t) => (on_table(t.relation.as_ref()), Atomic, "CREATE TRIGGER"),
        NodeEnum::CreatePolicyStmt(p) => (on_table(p.table.as_ref()), Atomic, "CREATE POLICY"),
        NodeEnum::AlterPolicyStmt(p) => (on_table(p.table.as_ref()), Atomic, "ALTER POLICY"),
        NodeEnum::RuleStmt(r) => (on_table(r.relation.as_ref()), Atomic, "CREATE RULE"),
        NodeEnum::CreateStatsStmt(s) => (relations(&s.relations), Atomic, "CREATE STATISTICS"),
        _ => {
            return shared_object(node, snapshot).or_else(|| proxy_ddl_among_others(node, snapshot))
        }
    };
    on_shards_of(&names, snapshot, verb).map(|shards| match shards {
        Ok(shards) => Plan::Utility(Arc::new(UtilityPlan {
            shards,
            kind,
            elsewhere: None,
        })),
        Err(refused) => refused,
    })
}

/// CREATE, ALTER and DROP of a type, domain, schema or extension: on every shard.
fn shared_object(node: &NodeEnum, snapshot: &Scope) -> Option<Plan> {
    let elsewhere = match node {
        NodeEnum::CreateFunctionStmt(f) => {
            if let Some(refused) = function_body::body_refusal(f, snapshot) {
                return Some(refused);
            }
            None
        }
        NodeEnum::DefineStmt(d) if d.kind == ObjectType::ObjectAggregate as i32 => None,
        NodeEnum::AlterFunctionStmt(_)
        | NodeEnum::CreateEnumStmt(_)
        | NodeEnum::CompositeTypeStmt(_)
        | NodeEnum::CreateRangeStmt(_)
        | NodeEnum::CreateDomainStmt(_)
        | NodeEnum::AlterEnumStmt(_)
        | NodeEnum::AlterDomainStmt(_)
        | NodeEnum::AlterExtensionStmt(_) => None,
        NodeEnum::AlterTableStmt(a) if a.objtype == ObjectType::ObjectType as i32 => None,
        NodeEnum::AlterObjectSchemaStmt(a) if is_shared_kind(a.object_type) => None,
        NodeEnum::AlterOwnerStmt(a) if is_shared_kind(a.object_type) => None,
        NodeEnum::GrantStmt(g)
            if (g.targtype == GrantTargetType::AclTargetObject as i32
                || g.targtype == GrantTargetType::AclTargetAllInSchema as i32)
                && is_shared_kind(g.objtype) =>
        {
            None
        }
        // Privileges of objects made later, sharded tables' partitions included.
        NodeEnum::AlterDefaultPrivilegesStmt(_) => None,
        NodeEnum::CommentStmt(c) if is_shared_kind(c.objtype) => None,
        NodeEnum::RenameStmt(r) => {
            match ObjectType::try_from(r.rename_type).ok()? {
                ObjectType::ObjectType
                | ObjectType::ObjectDomain
                | ObjectType::ObjectFunction
                | ObjectType::ObjectProcedure
                | ObjectType::ObjectRoutine
                | ObjectType::ObjectAggregate => {}
                ObjectType::ObjectSchema => {
                    if let Some(t) = snapshot.tables().iter().find(|t| t.schema == r.subname) {
                        return Some(holds_tables("ALTER SCHEMA … RENAME", t));
                    }
                }
                _ => return None,
            }
            None
        }
        // A schema's own objects made with it are plain ones, which live on the first shard.
        NodeEnum::CreateSchemaStmt(c) if c.schema_elts.is_empty() => {
            let mut everywhere = c.clone();
            everywhere.if_not_exists = true;
            Some(
                NodeEnum::CreateSchemaStmt(everywhere)
                    .deparse(Default::default())
                    .ok()?,
            )
        }
        NodeEnum::CreateExtensionStmt(c) => {
            let mut everywhere = c.clone();
            everywhere.if_not_exists = true;
            Some(
                NodeEnum::CreateExtensionStmt(everywhere)
                    .deparse(Default::default())
                    .ok()?,
            )
        }
        NodeEnum::DropStmt(d) => {
            let kind = ObjectType::try_from(d.remove_type).ok()?;
            if !is_shared_kind(d.remove_type) {
                return None;
            }
            if kind == ObjectType::ObjectSchema {
                let dropped = strings(&d.objects);
                if let Some(t) = snapshot
                    .tables()
                    .iter()
                    .find(|t| dropped.contains(&t.schema.as_str()))
                {
                    return Some(holds_tables("DROP SCHEMA", t));
                }
            }
            // CASCADE could drop columns of recorded tables, behind the catalog's back.
            if d.behavior == pg_query::protobuf::DropBehavior::DropCascade as i32
                && !snapshot.tables().is_empty()
            {
                return Some(unsupported(
                    "DROP … CASCADE of a type, domain, schema, extension or function is not \
                     supported while shardwire records tables (it could drop their columns, \
                     defaults or triggers): drop what depends on it first, then drop it without \
                     CASCADE",
                ));
            }
            let mut everywhere = d.clone();
            everywhere.missing_ok = true;
            Some(
                NodeEnum::DropStmt(everywhere)
                    .deparse(Default::default())
                    .ok()?,
            )
        }
        _ => return None,
    };
    let shards: Vec<ShardId> = snapshot.shards().iter().map(|s| s.id).collect();
    (shards.len() > 1).then(|| {
        Plan::Utility(Arc::new(UtilityPlan {
            shards,
            kind: UtilityKind::Atomic,
            elsewhere,
        }))
    })
}

/// Whether `object_type` is a type, domain, schema, extension, function, procedure or aggregate.
fn is_shared_kind(object_type: i32) -> bool {
    matches!(
        ObjectType::try_from(object_type),
        Ok(ObjectType::ObjectType
            | ObjectType::ObjectDomain
            | ObjectType::ObjectSchema
            | ObjectType::ObjectExtension
            | ObjectType::ObjectFunction
            | ObjectType::ObjectProcedure
            | ObjectType::ObjectRoutine
            | ObjectType::ObjectAggregate)
    )
}

fn holds_tables(verb: &str, table: &Table) -> Plan {
    unsupported(format!(
        "{verb} of a schema that holds recorded tables (such as \"{}\") is not supported: \
         drop or move the tables first",
        table.qualified_name()
    ))
}

/// The shards every named table is on, when at least one is recorded; a refusal when they are
/// not all recorded or not all on the same shards (no one shard runs the statement whole).
fn on_shards_of(
    names: &[Name],
    snapshot: &Scope,
    verb: &str,
) -> Option<Result<Vec<ShardId>, Plan>> {
    let resolved: Vec<(&Name, Option<&Table>)> =
        names.iter().map(|n| (n, n.resolve(snapshot))).collect();
    let (_, first) = resolved.iter().find(|(_, t)| t.is_some())?;
    let first = first.expect("found recorded");
    if let Some((other, _)) = resolved.iter().find(|(_, t)| t.is_none()) {
        return Some(Err(unsupported(format!(
            "{verb} names table \"{}\", which shardwire shards or duplicates, together with \
             table \"{}\", which lives on the first shard only: name them in separate statements",
            first.qualified_name(),
            other.name
        ))));
    }
    let shards = sorted(snapshot.shards_of(first.id));
    for (_, t) in &resolved[1..] {
        let t = t.expect("all recorded");
        if sorted(snapshot.shards_of(t.id)) != shards {
            return Some(Err(unsupported(format!(
                "{verb} names tables \"{}\" and \"{}\", which are not on the same shards: name \
                 them in separate statements",
                first.qualified_name(),
                t.qualified_name()
            ))));
        }
    }
    Some(Ok(shards))
}

fn sorted(mut shards: Vec<ShardId>) -> Vec<ShardId> {
    shards.sort_unstable();
    shards.dedup();
    shards
}

/// `GRANT … ON ALL TABLES IN SCHEMA s`: every shard holding a recorded table of `s`, and the
/// first shard, where the schema's other tables live.
fn grant_in_schemas(schemas: &[Node], snapshot: &Scope) -> Option<Plan> {
    let schemas = strings(schemas);
    let mut shards: Vec<ShardId> = snapshot
        .tables()
        .iter()
        .filter(|t| schemas.contains(&t.schema.as_str()))
        .flat_map(|t| snapshot.shards_of(t.id))
        .collect();
    if shards.is_empty() {
        return None;
    }
    shards.push(ShardId(0));
    Some(Plan::Utility(Arc::new(UtilityPlan {
        shards: sorted(shards),
        kind: UtilityKind::Atomic,
        elsewhere: None,
    })))
}

/// DDL the proxy runs itself on every shard holding a recorded table — when the statement is
/// the query string's only one. Planned here, it came with other statements.
fn proxy_ddl_among_others(node: &NodeEnum, snapshot: &Scope) -> Option<Plan> {
    let (relation, verb) = match node {
        NodeEnum::IndexStmt(i) => (i.relation.as_ref()?, "CREATE INDEX"),
        NodeEnum::AlterTableStmt(a) => (a.relation.as_ref()?, "ALTER TABLE"),
        NodeEnum::RenameStmt(r) => (r.relation.as_ref()?, "ALTER TABLE"),
        NodeEnum::AlterObjectSchemaStmt(a) => (a.relation.as_ref()?, "ALTER TABLE"),
        // The proxy stores a materialized view's rows before PostgreSQL refreshes it.
        NodeEnum::RefreshMatViewStmt(r) if !r.skip_data => {
            (r.relation.as_ref()?, "REFRESH MATERIALIZED VIEW")
        }
        NodeEnum::DropStmt(d) if d.remove_type == ObjectType::ObjectTable as i32 => {
            let named = d.objects.iter().filter_map(|o| Name::of_list(o, 0));
            return named
                .into_iter()
                .find_map(|n| n.resolve(snapshot))
                .map(|t| send_alone("DROP TABLE", t));
        }
        NodeEnum::CreateStmt(c) => return create_table_among_others(c, snapshot),
        NodeEnum::DropTableSpaceStmt(d) => {
            return snapshot.tablespace(&d.tablespacename).map(|_| {
                unsupported(format!(
                    "DROP TABLESPACE of shardwire's tablespace \"{}\" {ALONE}",
                    d.tablespacename
                ))
            })
        }
        _ => return None,
    };
    let table = resolve(snapshot, relation)?;
    if let (NodeEnum::IndexStmt(_), Some(view)) = (node, snapshot.view(table.id)) {
        // An index of a materialized view: PostgreSQL's on the view's shard.
        return Some(Plan::Utility(Arc::new(UtilityPlan {
            shards: view.shards.clone(),
            kind: UtilityKind::Atomic,
            elsewhere: None,
        })));
    }
    Some(send_alone(verb, table))
}

/// A `CREATE TABLE` the sharding rules decide on when it is a statement of its own: one whose
/// foreign key references a recorded table, or a NoSQL child (`parent.child`).
fn create_table_among_others(c: &pg_query::protobuf::CreateStmt, snapshot: &Scope) -> Option<Plan> {
    let relation = c.relation.as_ref()?;
    let foreign_key = |n: &Node| match n.node.as_ref() {
        Some(NodeEnum::Constraint(k)) if k.contype == ConstrType::ConstrForeign as i32 => {
            k.pktable.as_ref().and_then(|t| resolve(snapshot, t))
        }
        _ => None,
    };
    let referenced = c.table_elts.iter().find_map(|e| match e.node.as_ref()? {
        NodeEnum::ColumnDef(column) => column.constraints.iter().find_map(foreign_key),
        _ => foreign_key(e),
    });
    if let Some(t) = referenced {
        return Some(unsupported(format!(
            "CREATE TABLE \"{}\" referencing table \"{}\" {ALONE}",
            relation.relname,
            t.qualified_name()
        )));
    }
    let parent = resolve_name(snapshot, "", &relation.schemaname).filter(|p| p.nosql)?;
    Some(unsupported(format!(
        "CREATE TABLE of child table \"{}.{}\" of \"{}\" {ALONE}",
        relation.schemaname,
        relation.relname,
        parent.qualified_name()
    )))
}

/// A temporary table or view named like a recorded table: PostgreSQL looks in the session's
/// temporary schema first, so on the shard holding it the name would mean it, and on the others
/// the recorded table — one statement would read two different tables.
fn temporary_named_like_recorded(node: &NodeEnum, snapshot: &Scope) -> Option<Plan> {
    let made = match node {
        NodeEnum::CreateStmt(c) => c.relation.as_ref()?,
        NodeEnum::CreateTableAsStmt(c) => c.into.as_ref()?.rel.as_ref()?,
        NodeEnum::ViewStmt(v) => v.view.as_ref()?,
        NodeEnum::SelectStmt(s) => s.into_clause.as_ref()?.rel.as_ref()?,
        _ => return None,
    };
    if made.relpersistence != "t" && made.schemaname != "pg_temp" {
        return None;
    }
    let table = snapshot.tables().iter().find(|t| t.name == made.relname)?;
    Some(unsupported(format!(
        "a temporary table or view named like table \"{}\" is not supported: PostgreSQL would \
         read it in place of that table on one shard only; give it another name",
        table.qualified_name()
    )))
}

/// What a refusal of the proxy's own DDL among other statements asks for.
const ALONE: &str = "must be sent as a statement of its own (shardwire runs it itself): send \
                     it alone, not together with other statements in one query string";

fn send_alone(verb: &str, table: &Table) -> Plan {
    unsupported(format!(
        "{verb} of table \"{}\" {ALONE}",
        table.qualified_name()
    ))
}

/// The table a statement about one table names.
fn on_table(relation: Option<&RangeVar>) -> Vec<Name> {
    relation.map(Name::of_range_var).into_iter().collect()
}

/// The strings among `nodes` (the parts of a dotted name, a list of schema names).
pub(super) fn strings(nodes: &[Node]) -> Vec<&str> {
    nodes
        .iter()
        .filter_map(|n| match n.node.as_ref()? {
            NodeEnum::String(s) => Some(s.sval.as_str()),
            _ => None,
        })
        .collect()
}

/// A table's name as a statement writes it.
struct Name {
    schema: String,
    name: String,
}

impl Name {
    fn of_range_var(r: &RangeVar) -> Name {
        Name {
            schema: r.schemaname.clone(),
            name: r.relname.clone(),
        }
    }

    /// The table of a dotted name held as a list of strings (`[schema.]table[.member]`), its
    /// last `members_after` parts naming something of the table's (a column, a trigger).
    fn of_list(node: &Node, members_after: usize) -> Option<Name> {
        let NodeEnum::List(list) = node.node.as_ref()? else {
            return None;
        };
        let parts = strings(&list.items);
        let table = parts.len().checked_sub(members_after + 1)?;
        Some(Name {
            schema: table
                .checked_sub(1)
                .map_or(String::new(), |s| parts[s].to_string()),
            name: parts[table].to_string(),
        })
    }

    fn resolve<'s>(&self, snapshot: &'s Scope) -> Option<&'s Table> {
        resolve_name(snapshot, &self.schema, &self.name)
    }
}
