//! One shard's part of `CREATE INDEX CONCURRENTLY` on a recorded table: the table's partition
//! tree as the shard has it, the index each of its relations gets, and the statements that
//! make, attach and remove them (docs/behaviour.md, "CONCURRENTLY index DDL on recorded tables").
//!
//! Two kinds of lock matter. CONCURRENTLY builds wait, by design, for every transaction older
//! than them, which the control sessions' `lock_timeout` would cut short: they run without one.
//! The brief catalog-only steps (`CREATE INDEX … ON ONLY`, `ALTER INDEX … ATTACH PARTITION`,
//! dropping a partitioned index) take locks that block writers while they wait for them, so
//! they wait at most [`BRIEF_LOCK_TIMEOUT`] at a time and are retried, and a writer never
//! queues behind them for longer.

use std::time::Duration;

use pg_query::protobuf::{IndexStmt, RangeVar};
use pg_query::NodeEnum;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

use super::ddl::ExecError;
use super::index_names;
use crate::sql::quote::quote_ident;
use crate::txn::control::ConnectError;
use crate::txn::{ShardLabel, TxnError};

/// How long a brief step waits for its lock before it gives way to the writers queued behind it.
const BRIEF_LOCK_TIMEOUT: Duration = Duration::from_millis(200);
/// How long a brief step keeps trying before the statement fails.
const BRIEF_STEP_PATIENCE: Duration = Duration::from_secs(60);

/// A relation of the table's partition tree on one shard, and the index it gets.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Member {
    pub schema: String,
    pub relation: String,
    /// The position in the tree of the relation this one is a partition of.
    pub parent: Option<usize>,
    /// A partitioned table (its index is made `ON ONLY` and valid once its partitions' are
    /// attached) rather than one with rows (its index is built CONCURRENTLY).
    pub partitioned: bool,
    pub index: String,
}

/// The table on one shard: the root first, every partition after its parent.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardTree {
    pub members: Vec<Member>,
}

pub fn shard_error(shard: &ShardLabel, e: tokio_postgres::Error) -> ExecError {
    TxnError::on_shard(shard, ConnectError::Postgres(e)).into()
}

impl ShardTree {
    /// The partition tree of `schema.table` on the shard behind `conn` (the table alone when
    /// it is not partitioned), each member's index not yet named.
    pub async fn read(
        conn: &Client,
        schema: &str,
        table: &str,
    ) -> Result<ShardTree, tokio_postgres::Error> {
        let qualified = format!("{}.{}", quote_ident(schema), quote_ident(table));
        let rows = conn
            .query(
                "WITH RECURSIVE tree AS ( \
                   SELECT c.oid, NULL::oid AS parent, 0 AS depth FROM pg_class c \
                   WHERE c.oid = $1::text::regclass \
                   UNION ALL \
                   SELECT i.inhrelid, i.inhparent, t.depth + 1 FROM pg_inherits i \
                   JOIN tree t ON i.inhparent = t.oid) \
                 SELECT n.nspname::text, c.relname::text, t.oid, t.parent, c.relkind = 'p' \
                 FROM tree t JOIN pg_class c ON c.oid = t.oid \
                 JOIN pg_namespace n ON n.oid = c.relnamespace \
                 ORDER BY t.depth, c.relname",
                &[&qualified],
            )
            .await?;
        let oids: Vec<u32> = rows.iter().map(|r| r.get(2)).collect();
        let members = rows
            .iter()
            .map(|r| {
                let parent: Option<u32> = r.get(3);
                Member {
                    schema: r.get(0),
                    relation: r.get(1),
                    parent: parent.and_then(|p| oids.iter().position(|&o| o == p)),
                    partitioned: r.get(4),
                    index: String::new(),
                }
            })
            .collect();
        Ok(ShardTree { members })
    }

    /// Names every member's index but the root's (`root_index`): PostgreSQL's name for an
    /// index on that partition, numbered past the names the shard already has and the ones
    /// given before it.
    pub async fn name_indexes(
        &mut self,
        conn: &Client,
        root_index: &str,
        addition: &str,
    ) -> Result<(), tokio_postgres::Error> {
        let mut given = vec![(self.members[0].schema.clone(), root_index.to_owned())];
        self.members[0].index = root_index.to_owned();
        for member in self.members.iter_mut().skip(1) {
            let mut pass = 0;
            loop {
                let batch: Vec<String> = (pass..pass + 10)
                    .map(|p| index_names::candidate(&member.relation, addition, p))
                    .collect();
                let taken = taken_names(conn, &member.schema, &batch).await?;
                let free = batch.into_iter().find(|name| {
                    !taken.contains(name)
                        && !given.iter().any(|(s, n)| s == &member.schema && n == name)
                });
                if let Some(name) = free {
                    given.push((member.schema.clone(), name.clone()));
                    member.index = name;
                    break;
                }
                pass += 10;
            }
        }
        Ok(())
    }

    /// The members whose indexes are built CONCURRENTLY: every one with rows.
    pub fn leaves(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| !m.partitioned)
    }

    /// The partitioned members, root first: their indexes are made `ON ONLY`.
    pub fn partitioned(&self) -> impl Iterator<Item = &Member> {
        self.members.iter().filter(|m| m.partitioned)
    }

    /// `(parent's index, member's index)` for every member below the root, deepest first, so
    /// that each index is valid by the time it is attached.
    pub fn attachments(&self) -> Vec<String> {
        self.members
            .iter()
            .rev()
            .filter_map(|m| {
                let parent = &self.members[m.parent?];
                Some(format!(
                    "ALTER INDEX {} ATTACH PARTITION {}",
                    qualified(&parent.schema, &parent.index),
                    qualified(&m.schema, &m.index)
                ))
            })
            .collect()
    }
}

/// Which of `names` relations of `schema` on the shard already have.
pub async fn taken_names(
    conn: &Client,
    schema: &str,
    names: &[String],
) -> Result<Vec<String>, tokio_postgres::Error> {
    let rows = conn
        .query(
            "SELECT c.relname::text FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace \
             WHERE n.nspname = $1 AND c.relname = ANY($2)",
            &[&schema, &names],
        )
        .await?;
    Ok(rows.iter().map(|r| r.get(0)).collect())
}

pub fn qualified(schema: &str, name: &str) -> String {
    format!("{}.{}", quote_ident(schema), quote_ident(name))
}

/// The user's statement for one member: its index name, on that relation alone; CONCURRENTLY
/// for a member with rows, `ON ONLY` for a partitioned one.
pub fn member_statement(index: &IndexStmt, member: &Member) -> Result<String, ExecError> {
    let mut statement = index.clone();
    statement.idxname.clone_from(&member.index);
    statement.relation = Some(RangeVar {
        schemaname: member.schema.clone(),
        relname: member.relation.clone(),
        inh: !member.partitioned,
        relpersistence: "p".to_owned(),
        ..RangeVar::default()
    });
    statement.concurrent = !member.partitioned;
    statement.if_not_exists = false;
    NodeEnum::IndexStmt(Box::new(statement))
        .deparse(Default::default())
        .map_err(|e| ExecError::InvalidDefinition {
            statement: format!("CREATE INDEX {} …", member.index),
            message: e.to_string(),
        })
}

/// Runs a statement that waits as long as PostgreSQL's own CONCURRENTLY waits.
pub async fn run_waiting(conn: &Client, sql: &str) -> Result<(), tokio_postgres::Error> {
    conn.batch_execute("SET lock_timeout = 0").await?;
    let ran = conn.batch_execute(sql).await;
    let reset = conn.batch_execute("RESET lock_timeout").await;
    ran.and(reset)
}

/// Runs a brief step whose lock blocks writers while it waits: a short wait at a time, retried
/// until [`BRIEF_STEP_PATIENCE`] has passed.
pub async fn run_brief(conn: &Client, sql: &str) -> Result<(), tokio_postgres::Error> {
    conn.batch_execute(&format!(
        "SET lock_timeout = {}",
        BRIEF_LOCK_TIMEOUT.as_millis()
    ))
    .await?;
    let started = tokio::time::Instant::now();
    let ran = loop {
        match conn.batch_execute(sql).await {
            Err(e)
                if e.code() == Some(&SqlState::LOCK_NOT_AVAILABLE)
                    && started.elapsed() < BRIEF_STEP_PATIENCE =>
            {
                tracing::debug!(sql, "waiting for a lock that would block writers; retrying");
                tokio::time::sleep(BRIEF_LOCK_TIMEOUT).await;
            }
            result => break result,
        }
    };
    let reset = conn.batch_execute("RESET lock_timeout").await;
    ran.and(reset)
}

/// Whether the root's index is valid on the shard: every partition's index is attached.
pub async fn root_index_valid(
    conn: &Client,
    member: &Member,
) -> Result<bool, tokio_postgres::Error> {
    let row = conn
        .query_one(
            "SELECT indisvalid FROM pg_index WHERE indexrelid = $1::text::regclass",
            &[&qualified(&member.schema, &member.index)],
        )
        .await?;
    Ok(row.get(0))
}

/// Removes whatever of the tree's indexes exists: the partitioned ones first (dropping one
/// drops the indexes attached to it), then the others CONCURRENTLY. Every step is tried; the
/// first failure is returned.
pub async fn remove(conn: &Client, tree: &ShardTree) -> Result<(), tokio_postgres::Error> {
    let mut first_error = None;
    // A member not yet named was given nothing.
    let named = |m: &&Member| !m.index.is_empty();
    for m in tree.partitioned().filter(named) {
        let sql = format!("DROP INDEX IF EXISTS {}", qualified(&m.schema, &m.index));
        if let Err(e) = run_brief(conn, &sql).await {
            first_error.get_or_insert(e);
        }
    }
    for m in tree.leaves().filter(named) {
        let sql = format!(
            "DROP INDEX CONCURRENTLY IF EXISTS {}",
            qualified(&m.schema, &m.index)
        );
        if let Err(e) = run_waiting(conn, &sql).await {
            first_error.get_or_insert(e);
        }
    }
    first_error.map_or(Ok(()), Err)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(relation: &str, parent: Option<usize>, partitioned: bool, index: &str) -> Member {
        Member {
            schema: "public".into(),
            relation: relation.into(),
            parent,
            partitioned,
            index: index.into(),
        }
    }

    #[test]
    fn members_get_the_statement_on_themselves_alone() {
        let parsed = pg_query::parse(
            "CREATE UNIQUE INDEX CONCURRENTLY IF NOT EXISTS i ON t USING btree (id, lower(v) \
             text_pattern_ops) INCLUDE (w) WITH (fillfactor = 70) WHERE w > 0",
            0,
        )
        .unwrap();
        let Some(NodeEnum::IndexStmt(index)) = parsed.protobuf.stmts[0]
            .stmt
            .as_ref()
            .and_then(|s| s.node.clone())
        else {
            panic!("an index statement");
        };
        let root = member("t", None, true, "t_id_lower_w_idx");
        assert_eq!(
            member_statement(&index, &root).unwrap(),
            "CREATE UNIQUE INDEX t_id_lower_w_idx ON ONLY public.t USING btree (id, lower(v) \
             text_pattern_ops) INCLUDE (w) WITH (fillfactor=70) WHERE w > 0"
        );
        let chunk = member("t_c0", Some(0), false, "t_c0_id_lower_w_idx");
        assert_eq!(
            member_statement(&index, &chunk).unwrap(),
            "CREATE UNIQUE INDEX CONCURRENTLY t_c0_id_lower_w_idx ON public.t_c0 USING btree \
             (id, lower(v) text_pattern_ops) INCLUDE (w) WITH (fillfactor=70) WHERE w > 0"
        );
    }

    #[test]
    fn attachments_go_deepest_first() {
        let tree = ShardTree {
            members: vec![
                member("t", None, true, "t_v_idx"),
                member("t_p1", Some(0), true, "t_p1_v_idx"),
                member("t_p1_c0", Some(1), false, "t_p1_c0_v_idx"),
            ],
        };
        assert_eq!(
            tree.attachments(),
            [
                "ALTER INDEX \"public\".\"t_p1_v_idx\" ATTACH PARTITION \"public\".\"t_p1_c0_v_idx\"",
                "ALTER INDEX \"public\".\"t_v_idx\" ATTACH PARTITION \"public\".\"t_p1_v_idx\""
            ]
        );
    }
}
