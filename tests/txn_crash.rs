//! Crash acceptance tests of two-phase commit (DESIGN.md §4): the real `shardwire` binary, built
//! with fail points (`src/failpoint.rs`), runs as a child process in front of three real shards.
//!
//! - Killed (SIGKILL) at each step of a client's COMMIT over all three shards, then restarted
//!   without fail points: once recovery ran, every shard shows the same outcome — rolled back
//!   when the proxy died before its decision, committed after — and no shard keeps a prepared
//!   transaction.
//! - The same for the coordinator's own two-phase commit, a CREATE SHARDED TABLE (`ddl.*`):
//!   the table ends on every shard or on none, and DROP TABLE clears the catalog's entry.
//! - A commit the client saw acknowledged survives the proxy's kill.
//! - A shard that crashes (`pg_ctl stop -m immediate`) while the proxy is held in the middle of a
//!   COMMIT: what the client was told matches what every shard shows once it is back.
//!
//! The timings are short (`[transactions]` below) and every wait polls up to a deadline, so the
//! tests hold whichever rule recovery follows to judge a predecessor's transaction abandoned (its
//! age, or its proxy's expired lease).
//!
//! The tests run one at a time: each checks that no shard holds a prepared transaction, which
//! another test's commit in flight would break, and one stops a shard.

#![cfg(feature = "failpoints")]

mod common;
mod process_common;

use std::time::{Duration, Instant};

use common::shards;
use process_common::Proxy;
use shardwire::pgcluster::StopMode;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const SHARDS: usize = 3;
/// How long anything a test waits for may take.
const DEADLINE: Duration = Duration::from_secs(30);

static SERIAL: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

/// The binary in front of this file's three shards.
async fn start_proxy(dir: &std::path::Path, failpoints: Option<&str>) -> Proxy {
    common::use_shards(SHARDS);
    Proxy::start(dir, failpoints).await
}

async fn exec(client: &Client, sql: &str) {
    client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"));
}

/// Creates `table` through the proxy and seeds it with rows `v = 'seed'`; returns one key on
/// each shard, in shard order.
async fn seeded_table(client: &Client, table: &str) -> Vec<i64> {
    exec(
        client,
        &format!(
            "CREATE SHARDED TABLE {table} (id bigint PRIMARY KEY, v text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
        ),
    )
    .await;
    // One row per statement: each commits on its own shard, so no fail point fires.
    for id in 1..=60 {
        exec(
            client,
            &format!("INSERT INTO {table} VALUES ({id}, 'seed')"),
        )
        .await;
    }
    let mut keys = Vec::new();
    for i in 0..SHARDS {
        let key: Option<i64> = shards()
            .connect(i)
            .await
            .query_one(&format!("SELECT min(id) FROM {table}"), &[])
            .await
            .expect("a key on the shard")
            .get(0);
        keys.push(key.unwrap_or_else(|| panic!("no key of 1..=60 on shard {i}")));
    }
    keys
}

/// One block updating each key's row (one per shard) to `value`, then COMMIT.
async fn write_everywhere(
    client: &Client,
    table: &str,
    keys: &[i64],
    value: &str,
) -> Result<(), tokio_postgres::Error> {
    client.simple_query("BEGIN").await?;
    for key in keys {
        client
            .simple_query(&format!(
                "UPDATE {table} SET v = '{value}' WHERE id = {key}"
            ))
            .await?;
    }
    client.simple_query("COMMIT").await.map(drop)
}

/// The gids prepared on shard `i`.
async fn prepared_on(i: usize) -> Vec<String> {
    shards()
        .connect(i)
        .await
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE database = current_database()",
            &[],
        )
        .await
        .expect("pg_prepared_xacts")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn prepared_everywhere() -> Vec<Vec<String>> {
    let mut all = Vec::new();
    for i in 0..SHARDS {
        all.push(prepared_on(i).await);
    }
    all
}

/// Waits until no shard holds a prepared transaction; then each key's value, read on its shard.
async fn settled(table: &str, keys: &[i64]) -> Vec<String> {
    none_prepared().await;
    let mut values = Vec::new();
    for (i, key) in keys.iter().enumerate() {
        let value: String = shards()
            .connect(i)
            .await
            .query_one(&format!("SELECT v FROM {table} WHERE id = $1"), &[key])
            .await
            .expect("the row")
            .get(0);
        values.push(value);
    }
    values
}

/// The proxy dies by `point`'s SIGKILL during a COMMIT over every shard, leaving `prepared`
/// shards with the transaction prepared; restarted, it settles every shard on `outcome`.
async fn killed_during_commit(point: &str, table: &str, prepared: usize, outcome: &str) {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut proxy = start_proxy(dir.path(), Some(&format!("{point}=kill"))).await;
    let client = proxy.connect().await;
    let keys = seeded_table(&client, table).await;

    let err = write_everywhere(&client, table, &keys, "txn")
        .await
        .expect_err("the proxy dies in the COMMIT");
    assert!(
        err.as_db_error().is_none(),
        "the COMMIT was answered: {err}"
    );
    proxy.wait_killed().await;
    assert!(
        proxy.output().contains(point),
        "the kill was not {point}'s:\n{}",
        proxy.output()
    );
    // Where the point stopped the commit: on how many shards the transaction waits prepared.
    let left: Vec<Vec<String>> = prepared_everywhere().await;
    assert_eq!(
        left.iter().filter(|gids| !gids.is_empty()).count(),
        prepared,
        "prepared after the kill at {point}: {left:?}"
    );

    let proxy = start_proxy(dir.path(), None).await;
    assert_eq!(
        settled(table, &keys).await,
        vec![outcome; SHARDS],
        "after recovery\n{}",
        proxy.output()
    );
    // The restarted proxy commits over every shard again.
    let client = proxy.connect().await;
    write_everywhere(&client, table, &keys, "again")
        .await
        .expect("COMMIT after the restart");
    assert_eq!(settled(table, &keys).await, vec!["again"; SHARDS]);
}

#[tokio::test]
async fn killed_after_the_first_prepare_rolls_back_everywhere() {
    killed_during_commit("commit.after_first_prepare", "crash_prep", 1, "seed").await;
}

#[tokio::test]
async fn killed_after_the_decision_commits_everywhere() {
    killed_during_commit("commit.after_decision", "crash_decided", SHARDS, "txn").await;
}

#[tokio::test]
async fn killed_between_commit_prepareds_commits_everywhere() {
    killed_during_commit(
        "commit.between_commit_prepared",
        "crash_half",
        SHARDS - 1,
        "txn",
    )
    .await;
}

#[tokio::test]
async fn an_acknowledged_commit_survives_a_kill_of_the_proxy() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut proxy = start_proxy(dir.path(), None).await;
    let keys = seeded_table(&proxy.connect().await, "crash_acked").await;
    let updates: String = keys
        .iter()
        .map(|k| format!("UPDATE crash_acked SET v = 'acked' WHERE id = {k};\n"))
        .collect();
    let out = common::psql(
        &proxy.conn_string(),
        &[],
        &format!("BEGIN;\n{updates}COMMIT;\n"),
    );
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        stdout.lines().any(|l| l == "COMMIT"),
        "psql: {stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // At once, as kill -9 would: the acknowledgement must not depend on anything still to run.
    proxy.kill().await;

    let _proxy = start_proxy(dir.path(), None).await;
    assert_eq!(settled("crash_acked", &keys).await, vec!["acked"; SHARDS]);
}

/// Waits until recovery has settled every prepared transaction on every shard.
async fn none_prepared() {
    let started = Instant::now();
    loop {
        let prepared = prepared_everywhere().await;
        if prepared.iter().all(Vec::is_empty) {
            return;
        }
        assert!(
            started.elapsed() < DEADLINE,
            "still prepared after {DEADLINE:?}: {prepared:?}"
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}

/// `count_sql`'s count on each shard, in shard order.
async fn count_on_each_shard(count_sql: &str) -> Vec<i64> {
    let mut counts = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        counts.push(c.query_one(count_sql, &[]).await.expect("count").get(0));
    }
    counts
}

/// Runs `sql`, during which the proxy dies by `point`'s kill without answering.
async fn dies_at(proxy: &mut Proxy, client: &Client, sql: &str, point: &str) {
    let err = client
        .simple_query(sql)
        .await
        .expect_err("the proxy dies in the statement");
    assert!(err.as_db_error().is_none(), "{sql} was answered: {err}");
    proxy.wait_killed().await;
    assert!(
        proxy.output().contains(point),
        "the kill was not {point}'s:\n{}",
        proxy.output()
    );
}

/// Whether shard `i` has `table`.
async fn has_table(i: usize, table: &str) -> bool {
    shards()
        .connect(i)
        .await
        .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
        .await
        .expect("to_regclass")
        .get(0)
}

/// The proxy dies by `point`'s SIGKILL in the two-phase commit of a CREATE SHARDED TABLE over
/// every shard; restarted, it settles the table on every shard (`created`) or on none, and the
/// name works again: DROP TABLE clears what is left, and CREATE succeeds.
async fn killed_during_ddl(point: &str, table: &str, prepared: usize, created: bool) {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut proxy = start_proxy(dir.path(), Some(&format!("{point}=kill"))).await;
    let create = format!(
        "CREATE SHARDED TABLE {table} (id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
    );
    let err = proxy
        .connect()
        .await
        .simple_query(&create)
        .await
        .expect_err("the proxy dies in the CREATE");
    assert!(
        err.as_db_error().is_none(),
        "the CREATE was answered: {err}"
    );
    proxy.wait_killed().await;
    let left = prepared_everywhere().await;
    assert_eq!(
        left.iter().filter(|gids| !gids.is_empty()).count(),
        prepared,
        "prepared after the kill at {point}: {left:?}"
    );

    let proxy = start_proxy(dir.path(), None).await;
    settled(table, &[]).await;
    for i in 0..SHARDS {
        assert_eq!(has_table(i, table).await, created, "{table} on shard {i}");
    }
    let client = proxy.connect().await;
    // Nobody marked the entry ACTIVE: the table is refused until DROP TABLE clears it.
    let refused = client
        .simple_query(&format!("INSERT INTO {table} VALUES (1, 'x')"))
        .await
        .expect_err("a CREATING table is refused");
    assert_eq!(
        refused.code(),
        Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
        "{refused}"
    );
    let message = refused.as_db_error().map(|e| e.message().to_owned());
    assert!(
        message
            .as_deref()
            .is_some_and(|m| m.contains("is CREATING")),
        "{message:?}"
    );
    exec(&client, &format!("DROP TABLE {table}")).await;
    exec(&client, &create).await;
    for i in 0..SHARDS {
        assert!(has_table(i, table).await, "{table} on shard {i}");
    }
}

#[tokio::test]
async fn ddl_killed_after_the_first_prepare_creates_nothing() {
    killed_during_ddl("ddl.after_first_prepare", "crash_ddl_prep", 1, false).await;
}

#[tokio::test]
async fn ddl_killed_after_the_decision_creates_everywhere() {
    killed_during_ddl("ddl.after_decision", "crash_ddl_decided", SHARDS, true).await;
}

#[tokio::test]
async fn ddl_killed_between_commit_prepareds_creates_everywhere() {
    killed_during_ddl(
        "ddl.between_commit_prepared",
        "crash_ddl_half",
        SHARDS - 1,
        true,
    )
    .await;
}

/// A participant shard crashes while the proxy is held at `point` of a COMMIT over every
/// shard; the commit then goes on, the shard comes back, and recovery runs. The decision was
/// recorded before the crash, so every shard ends committed, and the client is told COMMIT
/// (the lost participant's COMMIT PREPARED is left to the coordinator's retries and recovery).
async fn shard_crash_during_commit(point: &str, table: &str) {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let marker = dir.path().join("paused");
    let proxy = start_proxy(
        dir.path(),
        Some(&format!("{point}=pause({})", marker.display())),
    )
    .await;
    let client = proxy.connect().await;
    let keys = seeded_table(&client, table).await;
    client.simple_query("BEGIN").await.expect("BEGIN");
    for key in &keys {
        exec(
            &client,
            &format!("UPDATE {table} SET v = 'txn' WHERE id = {key}"),
        )
        .await;
    }
    let commit = tokio::spawn(async move { client.simple_query("COMMIT").await.map(drop) });
    let started = Instant::now();
    while !marker.exists() {
        assert!(
            started.elapsed() < DEADLINE,
            "{point} not reached:\n{}",
            proxy.output()
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    // A shard still holding the transaction prepared, and not the first: it holds the catalog,
    // whose loss is another story.
    let mut victim = None;
    for i in 1..SHARDS {
        if !prepared_on(i).await.is_empty() {
            victim = Some(i);
            break;
        }
    }
    let victim = victim.expect("a participant still prepared");
    let cluster = &shards().clusters[victim];
    tokio::task::spawn_blocking(move || cluster.stop(StopMode::Immediate))
        .await
        .expect("pg_ctl stop")
        .expect("stop the shard");
    std::fs::remove_file(&marker).expect("release the fail point");

    let told = tokio::time::timeout(DEADLINE, commit)
        .await
        .expect("the COMMIT is answered or the connection ends")
        .expect("COMMIT task");
    tokio::task::spawn_blocking(move || cluster.start())
        .await
        .expect("pg_ctl start")
        .expect("restart the shard");

    let values = settled(table, &keys).await;
    eprintln!("{point}, shard {victim} crashed: client told {told:?}; shards show {values:?}");
    // Decided before the crash: committed, whatever a participant's connection does after.
    assert!(told.is_ok(), "the client was not told COMMIT: {told:?}");
    assert_eq!(values, vec!["txn"; SHARDS], "\n{}", proxy.output());
}

#[tokio::test]
async fn a_shard_crash_between_commit_prepareds_ends_committed() {
    shard_crash_during_commit("commit.between_commit_prepared", "crash_shard_half").await;
}

#[tokio::test]
async fn a_shard_crash_after_the_decision_ends_committed() {
    shard_crash_during_commit("commit.after_decision", "crash_shard_decided").await;
}

/// The proxy killed in the middle of a family move (rows deleted on the old shard, not yet
/// inserted on the new): nothing was prepared, so every shard rolls back when its connection
/// goes; the account and its orders are where they were, once, and nowhere else.
#[tokio::test]
async fn killed_mid_family_move_loses_nothing() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut proxy = start_proxy(dir.path(), Some("move.mid_family=kill")).await;
    let client = proxy.connect().await;
    let keys = seeded_table(&client, "crash_mv_acc").await;
    exec(
        &client,
        "CREATE SHARDED TABLE crash_mv_ord (n int, id bigint NOT NULL, \
           CONSTRAINT crash_mv_ord_pk PRIMARY KEY (id, n), \
           CONSTRAINT crash_mv_ord_fk FOREIGN KEY (id) REFERENCES crash_mv_acc (id)) \
         PARTITION BY REFERENCE (crash_mv_ord_fk)",
    )
    .await;
    exec(&client, "ALTER TABLE crash_mv_ord ENABLE ROW MOVEMENT").await;
    exec(&client, "ALTER TABLE crash_mv_acc ENABLE ROW MOVEMENT").await;
    let (from, to) = (keys[0], keys[1]);
    exec(
        &client,
        &format!("DELETE FROM crash_mv_acc WHERE id = {to}"),
    )
    .await;
    for n in 1..=3 {
        exec(
            &client,
            &format!("INSERT INTO crash_mv_ord VALUES ({n}, {from})"),
        )
        .await;
    }
    dies_at(
        &mut proxy,
        &client,
        &format!("UPDATE crash_mv_acc SET id = {to} WHERE id = {from}"),
        "move.mid_family",
    )
    .await;

    let _proxy = start_proxy(dir.path(), None).await;
    let accounts = count_on_each_shard(&format!(
        "SELECT count(*) FROM crash_mv_acc WHERE id = {from}"
    ))
    .await;
    let orders = count_on_each_shard(&format!(
        "SELECT count(*) FROM crash_mv_ord WHERE id = {from}"
    ))
    .await;
    assert_eq!(
        count_on_each_shard(&format!(
            "SELECT count(*) FROM crash_mv_acc WHERE id = {to}"
        ))
        .await,
        vec![0; SHARDS],
        "a shard has the half-moved row"
    );
    assert_eq!(
        accounts,
        vec![1, 0, 0],
        "the account stays on its shard, once"
    );
    assert_eq!(orders, vec![3, 0, 0], "its orders with it");
    assert!(prepared_everywhere().await.iter().all(Vec::is_empty));
}

/// The table's state in the catalog (on the first shard's database).
async fn catalog_state(table: &str) -> String {
    shards()
        .connect(0)
        .await
        .query_one(
            "SELECT state FROM shardwire_catalog.table_entry WHERE table_name = $1",
            &[&table],
        )
        .await
        .expect("the table's catalog entry")
        .get(0)
}

/// The proxy dies in the two-phase commit of an ALTER TABLE, leaving the table UPDATING; once
/// its lease lapses, the next proxy's recovery settles the ALTER on every shard and returns the
/// table to ACTIVE, so a second ALTER runs.
#[tokio::test]
async fn alter_table_killed_after_the_decision_leaves_the_table_active_again() {
    let _serial = SERIAL.lock().await;
    let table = "crash_alter";
    let dir = tempfile::tempdir().expect("temp dir");
    let mut proxy = start_proxy(dir.path(), None).await;
    seeded_table(&proxy.connect().await, table).await;
    proxy.kill().await;

    let mut proxy = start_proxy(dir.path(), Some("ddl.after_decision=kill")).await;
    let err = proxy
        .connect()
        .await
        .simple_query(&format!("ALTER TABLE {table} ADD COLUMN w text"))
        .await
        .expect_err("the proxy dies in the ALTER");
    assert!(err.as_db_error().is_none(), "the ALTER was answered: {err}");
    proxy.wait_killed().await;
    assert_eq!(catalog_state(table).await, "updating");

    let proxy = start_proxy(dir.path(), None).await;
    let started = Instant::now();
    while catalog_state(table).await != "active" {
        assert!(
            started.elapsed() < DEADLINE,
            "still UPDATING:\n{}",
            proxy.output()
        );
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    settled(table, &[]).await;
    let client = proxy.connect().await;
    exec(&client, &format!("ALTER TABLE {table} ADD COLUMN z int")).await;
    for i in 0..SHARDS {
        let columns: i64 = shards()
            .connect(i)
            .await
            .query_one(
                "SELECT count(*) FROM pg_attribute \
                 WHERE attrelid = to_regclass($1) AND attname IN ('w', 'z')",
                &[&table],
            )
            .await
            .expect("columns")
            .get(0);
        assert_eq!(columns, 2, "{table} on shard {i} has both new columns");
    }
}

/// A cross-shard move onto the catalog's own shard records its decision in that shard's own
/// transaction: the proxy killed right after that COMMIT, the restarted proxy's recovery
/// commits the other shard's prepared part, so the row is on its new shard once.
#[tokio::test]
async fn killed_after_a_moves_decision_the_move_completes() {
    let _serial = SERIAL.lock().await;
    let dir = tempfile::tempdir().expect("temp dir");
    let mut proxy = start_proxy(dir.path(), Some("commit.after_decision=kill")).await;
    let client = proxy.connect().await;
    let keys = seeded_table(&client, "crash_mv_dec").await;
    exec(&client, "ALTER TABLE crash_mv_dec ENABLE ROW MOVEMENT").await;
    // From the second shard to a key of the first, where the catalog is.
    let (from, to) = (keys[1], keys[0]);
    exec(
        &client,
        &format!("DELETE FROM crash_mv_dec WHERE id = {to}"),
    )
    .await;
    dies_at(
        &mut proxy,
        &client,
        &format!("UPDATE crash_mv_dec SET id = {to}, v = 'moved' WHERE id = {from}"),
        "commit.after_decision",
    )
    .await;
    // The catalog's shard committed with the decision; the other waits prepared.
    let waiting: Vec<bool> = prepared_everywhere()
        .await
        .iter()
        .map(|gids| !gids.is_empty())
        .collect();
    assert_eq!(waiting, vec![false, true, false]);

    let _proxy = start_proxy(dir.path(), None).await;
    none_prepared().await;
    let moved = count_on_each_shard(&format!(
        "SELECT count(*) FROM crash_mv_dec WHERE id = {to} AND v = 'moved'"
    ))
    .await;
    let left = count_on_each_shard(&format!(
        "SELECT count(*) FROM crash_mv_dec WHERE id = {from}"
    ))
    .await;
    assert_eq!(moved, vec![1, 0, 0], "the row on its new shard, once");
    assert_eq!(left, vec![0, 0, 0], "and gone from its old one");
}
