//! Statements the proxy answers itself (docs/architecture.md §1): SHOW SHARDS, SHOW SHARDED TABLES,
//! SHOW CHUNKS [FOR table], SHOW POOLS, SHOW TRANSACTIONS, SHOW VERSION, SHOW MOVES — as ordinary
//! result sets — and the growth statements MOVE CHUNK and CHECK PLACEMENT (run by
//! [`crate::growth`]). `crate::sql::admin` recognises them.

use crate::backend::Pools;
use crate::catalog::{Catalog, CatalogError, RowMovement, ShardId, Snapshot, Table};
use crate::config::Config;
use crate::growth::{
    cancel_move, change_members, check_placement, move_chunk, rebalance, split_chunk, Growth,
    GrowthError, MoveRequest, SplitRequest,
};
use crate::protocol::{ColumnType, ResultSet};
use crate::txn::lease::{self, LeaseRecord};
use crate::txn::{decision_log, ControlPools, Coordinator, Gid, Incarnation};

pub use crate::sql::admin::{parse, parse_growth, AdminCommand};

/// A table as listings show it: unqualified in `public`, `schema.name` elsewhere.
fn display_name(table: &Table) -> String {
    if table.schema == "public" {
        table.name.clone()
    } else {
        table.qualified_name()
    }
}

/// Every table the catalog holds, in creation order. `method` is the sharding method, or the
/// kind (`duplicated`, `unsharded`) of a table that is not sharded.
fn sharded_tables(snapshot: &Snapshot) -> ResultSet {
    use ColumnType::{Bool, Text};
    let mut rs = ResultSet::new(&[
        ("table", Text),
        ("family_root", Text),
        ("parent", Text),
        ("method", Text),
        ("key_columns", Text),
        ("tablespace_set", Text),
        ("row_movement", Bool),
        ("state", Text),
    ]);
    let name_of = |id| snapshot.table(id).map(display_name);
    for t in snapshot.tables() {
        let keys: Vec<&str> = t
            .partition_set_columns
            .iter()
            .chain(&t.key_columns)
            .map(|c| c.name.as_str())
            .collect();
        rs.push(vec![
            Some(display_name(t)),
            name_of(t.root),
            t.parent.and_then(name_of),
            Some(t.method.map_or(t.kind.as_str(), |m| m.as_str()).to_owned()),
            Some(keys.join(", ")),
            t.tablespace_set
                .and_then(|id| snapshot.tablespace_set(id))
                .map(|s| s.name.clone()),
            Some(
                if t.row_movement == RowMovement::Enabled {
                    "t"
                } else {
                    "f"
                }
                .to_owned(),
            ),
            Some(t.state.as_str().to_owned()),
        ]);
    }
    rs
}

/// Where each chunk lives: a consistent-hash family's chunks (children share their root's), a
/// composite table's chunks per partition set, a user-defined table's partitions (no chunk
/// number), an unsharded table's single chunk. `table` may be `name` or `schema.name`.
fn chunks(snapshot: &Snapshot, table: Option<&str>) -> ResultSet {
    use ColumnType::{Int8, Text};
    let mut rs = ResultSet::new(&[
        ("table", Text),
        ("partition", Text),
        ("chunk", Int8),
        ("shard", Text),
    ]);
    let wanted = |t: &Table| {
        table
            .map(schema_and_name)
            .is_none_or(|(schema, name)| t.schema == schema && t.name == name)
    };
    let shard_name = |id: ShardId| snapshot.shard(id).map(|s| s.name.clone());
    for t in snapshot.tables().iter().filter(|t| wanted(t)) {
        let Some(root) = snapshot.root_of(t.id) else {
            continue;
        };
        let mut row = |partition: Option<&str>, chunk: Option<u32>, shard: ShardId| {
            rs.push(vec![
                Some(display_name(t)),
                partition.map(str::to_owned),
                chunk.map(|k| k.to_string()),
                shard_name(shard),
            ])
        };
        for chunk in root.chunks.chunks() {
            row(None, Some(chunk.id.0), chunk.shard);
        }
        for set in &root.partition_sets {
            for chunk in set.chunks.chunks() {
                row(Some(&set.name), Some(chunk.id.0), chunk.shard);
            }
        }
        for p in &root.partitions {
            row(Some(&p.name), None, p.shard);
        }
    }
    rs
}

/// The answer to an admin statement, with its command tag. SHOW TRANSACTIONS asks the shards
/// and is [`transactions`].
pub fn answer(
    cmd: &AdminCommand,
    catalog: &Catalog,
    pools: &Pools,
    config: &Config,
) -> (ResultSet, String) {
    use ColumnType::{Int8, Text};
    let rs = match cmd {
        AdminCommand::ShowShards => {
            let mut rs = ResultSet::new(&[
                ("shard", Text),
                ("host", Text),
                ("port", Int8),
                ("database", Text),
            ]);
            for p in pools.all() {
                rs.push(vec![
                    Some(p.name.clone()),
                    Some(p.endpoint.host.clone()),
                    Some(p.endpoint.port.to_string()),
                    Some(p.endpoint.dbname.clone()),
                ]);
            }
            rs
        }
        AdminCommand::ShowPools => {
            let mut rs = ResultSet::new(&[
                ("shard", Text),
                ("connections", Int8),
                ("idle", Int8),
                ("max_size", Int8),
            ]);
            for p in pools.all() {
                let st = p.state();
                rs.push(vec![
                    Some(p.name.clone()),
                    Some(st.connections.to_string()),
                    Some(st.idle.to_string()),
                    Some(config.pool.size.to_string()),
                ]);
            }
            rs
        }
        AdminCommand::ShowVersion => {
            let mut rs = ResultSet::new(&[("version", Text)]);
            rs.push(vec![Some(format!(
                "shardwire {}",
                env!("CARGO_PKG_VERSION")
            ))]);
            rs
        }
        AdminCommand::ShowShardedTables => sharded_tables(&catalog.snapshot()),
        AdminCommand::ShowChunks { table } => chunks(&catalog.snapshot(), table.as_deref()),
        AdminCommand::ShowTransactions => transactions_columns(),
        AdminCommand::ShowMoves => moves_columns(),
        AdminCommand::CheckPlacement { .. } => placement_columns(),
        AdminCommand::MoveChunk { .. }
        | AdminCommand::SplitChunk { .. }
        | AdminCommand::ChangeSetMembers { .. }
        | AdminCommand::CancelMove { .. }
        | AdminCommand::Rebalance { .. } => ResultSet::new(&[]),
    };
    let tag = format!("SHOW {}", rs.rows.len());
    (rs, tag)
}

/// PostgreSQL's own message when there is one ("db error" alone says nothing).
fn pg_error_text(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map(|d| d.message().to_string())
        .unwrap_or_else(|| e.to_string())
}

fn transactions_columns() -> ResultSet {
    ResultSet::new(&[
        ("gid", ColumnType::Text),
        ("state", ColumnType::Text),
        ("participants", ColumnType::Text),
        ("age_seconds", ColumnType::Int8),
        ("coordinator", ColumnType::Text),
        ("lease", ColumnType::Text),
    ])
}

/// Who may finish a gid, as recovery sees it: its coordinator is this proxy, or another with a
/// `live` lease; with an `expired` lease or `none`, any proxy's recovery finishes it; a gid of
/// `other cluster` (another catalog's proxies) is never touched by ours. NULL when the leases
/// could not be read.
struct Owners<'a> {
    me: Incarnation,
    leases: Option<&'a [LeaseRecord]>,
}

impl Owners<'_> {
    fn columns(&self, gid: &Gid) -> [Option<String>; 2] {
        let whose = Incarnation::of(gid);
        let lease = if whose == self.me {
            Some("this proxy")
        } else if whose.cluster != self.me.cluster {
            Some("other cluster")
        } else {
            self.leases.map(
                |leases| match leases.iter().find(|l| l.incarnation == whose) {
                    Some(l) if l.live => "live",
                    Some(_) => "expired",
                    None => "none",
                },
            )
        };
        [Some(whose.to_string()), lease.map(str::to_owned)]
    }
}

/// SHOW TRANSACTIONS: the distributed transactions that are not finished — those this proxy is
/// committing now (state `preparing`, `deciding`, `committing` or `rolling back`, age by this
/// proxy's clock), every shard's prepared transactions with a shardwire gid, and every decision
/// record in the catalog (a record outlives its transaction until all participants confirmed).
/// A shard or catalog that cannot be asked gets a row saying so, so the answer never looks
/// complete when it is not.
pub async fn transactions(
    control: &ControlPools,
    coordinator: &Coordinator,
) -> (ResultSet, String) {
    let mut rs = transactions_columns();
    let catalog = control.catalog().get().await;
    // Every record, however old: the retention only marks which ones recovery may forget.
    let (records, leases) = match &catalog {
        Ok(conn) => {
            let records = decision_log::list(conn, std::time::Duration::from_secs(86_400))
                .await
                .map_err(|e| pg_error_text(&e));
            let leases = lease::list(conn, Some(coordinator.gids().cluster()))
                .await
                .ok();
            (records, leases)
        }
        Err(e) => (Err(e.to_string()), None),
    };
    drop(catalog);
    let owners = Owners {
        me: coordinator.incarnation(),
        leases: leases.as_deref(),
    };
    for t in coordinator.in_flight().list() {
        let [whose, lease] = owners.columns(&t.gid);
        rs.push(vec![
            Some(t.gid.to_string()),
            Some(t.phase.as_str().into()),
            Some(t.participants.join(",")),
            Some(t.age.as_secs().to_string()),
            whose,
            lease,
        ]);
    }
    for shard in control.shards() {
        let rows = match shard.pool.get().await {
            Ok(conn) => conn
                .query(
                    "SELECT gid, extract(epoch FROM now() - prepared)::bigint \
                     FROM pg_catalog.pg_prepared_xacts \
                     WHERE database = current_database() ORDER BY prepared",
                    &[],
                )
                .await
                .map_err(|e| pg_error_text(&e)),
            Err(e) => Err(e.to_string()),
        };
        match rows {
            Ok(rows) => {
                for row in rows {
                    let Ok(gid) = Gid::of_prepared(row.get(0)) else {
                        continue;
                    };
                    let age: i64 = row.get(1);
                    let [whose, lease] = owners.columns(&gid);
                    rs.push(vec![
                        Some(gid.to_string()),
                        Some("prepared".into()),
                        Some(shard.label.name.clone()),
                        Some(age.to_string()),
                        whose,
                        lease,
                    ]);
                }
            }
            Err(e) => rs.push(vec![
                None,
                Some(format!("shard {} unreachable: {e}", shard.label.name)),
                Some(shard.label.name.clone()),
                None,
                None,
                None,
            ]),
        }
    }
    match records {
        Ok(records) => {
            for r in records {
                let [whose, lease] = owners.columns(&r.gid);
                rs.push(vec![
                    Some(r.gid.to_string()),
                    Some(format!("decided {}", r.decision)),
                    Some(r.participants.join(",")),
                    None,
                    whose,
                    lease,
                ]);
            }
        }
        Err(e) => rs.push(vec![
            None,
            Some(format!("catalog unreachable: {e}")),
            None,
            None,
            None,
            None,
        ]),
    }
    let tag = format!("SHOW {}", rs.rows.len());
    (rs, tag)
}

/// `schema.name` or `name` (in `public`), as SHOW CHUNKS FOR and the growth statements take it.
fn schema_and_name(table: &str) -> (&str, &str) {
    table.split_once('.').unwrap_or(("public", table))
}

fn moves_columns() -> ResultSet {
    use ColumnType::{Int8, Text};
    ResultSet::new(&[
        ("id", Int8),
        ("table", Text),
        ("chunk", Int8),
        ("source", Text),
        ("target", Text),
        ("state", Text),
        ("rows", Int8),
        ("bytes", Int8),
        ("started", Text),
        ("finished", Text),
        ("pause_ms", Int8),
        ("error", Text),
    ])
}

/// SHOW MOVES: every recorded move, oldest first.
pub async fn moves(catalog: &Catalog) -> Result<(ResultSet, String), CatalogError> {
    let snapshot = catalog.snapshot();
    let mut rs = moves_columns();
    for m in catalog.moves().await? {
        rs.push(vec![
            Some(m.id.to_string()),
            Some(
                snapshot
                    .table(m.table)
                    .map_or_else(|| m.table.to_string(), display_name),
            ),
            Some(m.chunk.to_string()),
            Some(m.source),
            Some(m.target),
            Some(m.state.as_str().to_owned()),
            Some(m.rows.to_string()),
            Some(m.bytes.to_string()),
            Some(m.started),
            m.finished,
            m.pause_ms.map(|p| p.to_string()),
            m.error,
        ]);
    }
    let tag = format!("SHOW {}", rs.rows.len());
    Ok((rs, tag))
}

fn placement_columns() -> ResultSet {
    use ColumnType::{Int8, Text};
    ResultSet::new(&[
        ("table", Text),
        ("shard", Text),
        ("chunk", Int8),
        ("rows", Int8),
        ("misplaced", Int8),
    ])
}

/// What a growth statement answers: rows with their tag, or a tag alone.
pub enum GrowthAnswer {
    Rows(ResultSet, String),
    Done(String),
}

/// Runs MOVE CHUNK or CHECK PLACEMENT; `None` for any other statement.
pub async fn growth(cmd: &AdminCommand, g: &Growth) -> Option<Result<GrowthAnswer, GrowthError>> {
    Some(match cmd {
        AdminCommand::MoveChunk {
            chunk,
            table,
            shard,
        } => {
            let (schema, name) = schema_and_name(table);
            let request = MoveRequest {
                schema: schema.to_owned(),
                table: name.to_owned(),
                chunk: *chunk,
                target: shard.clone(),
            };
            let g = g.clone();
            match tokio::spawn(async move { move_chunk(&g, &request).await }).await {
                // Not `MOVE …`: libpq reads a tag starting so as a cursor's MOVE and its count.
                Ok(moved) => moved.map(|_| GrowthAnswer::Done("CHUNK MOVED".into())),
                Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
                Err(_) => Err(GrowthError::Interrupted),
            }
        }
        AdminCommand::SplitChunk { chunk, table } => {
            let (schema, name) = schema_and_name(table);
            let request = SplitRequest {
                schema: schema.to_owned(),
                table: name.to_owned(),
                chunk: *chunk,
            };
            let g = g.clone();
            match tokio::spawn(async move { split_chunk(&g, &request).await }).await {
                Ok(split) => split.map(|_| GrowthAnswer::Done("SPLIT CHUNK".into())),
                Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
                Err(_) => Err(GrowthError::Interrupted),
            }
        }
        AdminCommand::Rebalance { set } => {
            let (g, set) = (g.clone(), set.clone());
            match tokio::spawn(async move { rebalance(&g, &set).await }).await {
                Ok(moved) => moved.map(|n| GrowthAnswer::Done(format!("REBALANCE {n}"))),
                Err(join) if join.is_panic() => std::panic::resume_unwind(join.into_panic()),
                Err(_) => Err(GrowthError::Interrupted),
            }
        }
        AdminCommand::ChangeSetMembers { set, shard, change } => {
            change_members(g, set, shard, *change)
                .await
                .map(|()| GrowthAnswer::Done("ALTER TABLESPACE SET".into()))
        }
        AdminCommand::CancelMove { id } => cancel_move(g, crate::model::MoveId(*id))
            .await
            .map(|()| GrowthAnswer::Done("CANCEL MOVE".into())),
        AdminCommand::CheckPlacement { table } => {
            let table = table.as_deref().map(schema_and_name);
            check_placement(g, table).await.map(|found| {
                let mut rs = placement_columns();
                for row in found {
                    rs.push(vec![
                        Some(row.table),
                        Some(row.shard),
                        row.chunk.map(|k| k.to_string()),
                        Some(row.rows.to_string()),
                        Some(row.misplaced.to_string()),
                    ]);
                }
                let tag = format!("CHECK PLACEMENT {}", rs.rows.len());
                GrowthAnswer::Rows(rs, tag)
            })
        }
        AdminCommand::ShowShards
        | AdminCommand::ShowShardedTables
        | AdminCommand::ShowChunks { .. }
        | AdminCommand::ShowPools
        | AdminCommand::ShowTransactions
        | AdminCommand::ShowVersion
        | AdminCommand::ShowMoves => return None,
    })
}
