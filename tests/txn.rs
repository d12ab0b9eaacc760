//! Two-phase commit and in-doubt recovery against real PostgreSQL shards. Each test names its
//! own cluster tag (so its gids, recovery passes and decision records are its own) and its own
//! tables; destructive tests stop and start an extra cluster of their own.

mod common;

use std::sync::Arc;
use std::time::Duration;

use shardwire::client_error::ClientError;
use shardwire::config::Config;
use shardwire::model::ShardId;
use shardwire::pgcluster::StopMode;
use shardwire::txn::coordinator::Commit;
use shardwire::txn::{
    ensure_decision_log, ClusterTag, ControlPools, Coordinator, Gid, GidGenerator, Lease, ProxyId,
    Recovery, TxnError, TxnSettings,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

use common::{shards, OwnCluster, APP};

const S1: ShardId = ShardId(0);
const S2: ShardId = ShardId(1);

/// A short grace period so recovery tests need not wait long.
fn quick_settings() -> TxnSettings {
    TxnSettings {
        connect_timeout: Duration::from_secs(2),
        prepare_deadline: Duration::from_millis(1500),
        recovery_grace: Duration::from_secs(2),
        abort_record_retention: Duration::from_secs(3600),
        commit_attempts: 2,
        // Taken once by the fixture; it must outlast the slowest test.
        lease: Duration::from_secs(600),
        ..TxnSettings::default()
    }
}

struct Fixture {
    pools: Arc<ControlPools>,
    coordinator: Coordinator,
    recovery: Recovery,
    cluster: ClusterTag,
    shard_urls: Vec<String>,
    catalog_url: String,
}

impl Fixture {
    /// Over the harness's two shards, with the catalog on the first.
    async fn new(tag: &str) -> Fixture {
        Fixture::over(
            tag,
            vec![shards().url(0), shards().url(1)],
            None,
            quick_settings(),
        )
        .await
    }

    async fn over(
        tag: &str,
        shard_urls: Vec<String>,
        catalog_url: Option<String>,
        settings: TxnSettings,
    ) -> Fixture {
        let mut text = format!(
            "[proxy]\nlisten = \"127.0.0.1:6432\"\ndatabase = \"{APP}\"\n\
             [[users]]\nname = \"{APP}\"\npassword = \"{APP}\"\n"
        );
        if let Some(url) = &catalog_url {
            text.push_str(&format!("[catalog]\nurl = \"{url}\"\n"));
        }
        for (i, url) in shard_urls.iter().enumerate() {
            text.push_str(&format!(
                "[[shards]]\nname = \"s{}\"\nurl = \"{url}\"\n",
                i + 1
            ));
        }
        let config = Config::parse(&text, "txn test").unwrap_or_else(|e| panic!("{e}"));
        let pools = Arc::new(ControlPools::new(&config, &settings));
        ensure_decision_log(&pools).await.expect("decision log");
        let cluster = ClusterTag::new(tag).expect("tag");
        let gids = GidGenerator::with_identity(cluster.clone(), ProxyId::new("p1").unwrap(), 7);
        let coordinator =
            Coordinator::new(pools.clone(), settings.clone(), gids).expect("settings");
        // The coordinator decides commit only under a live lease, as a proxy's does.
        Lease::new(pools.clone(), coordinator.incarnation(), settings.lease)
            .take()
            .await
            .expect("lease");
        Fixture {
            recovery: Recovery::new(pools.clone(), settings, &coordinator).expect("settings"),
            coordinator,
            pools,
            cluster,
            catalog_url: catalog_url.unwrap_or_else(|| shard_urls[0].clone()),
            shard_urls,
        }
    }

    /// The gid the coordinator will use for its `n`th two-phase transaction.
    fn gid(&self, n: u64) -> Gid {
        Gid {
            cluster: self.cluster.clone(),
            proxy: ProxyId::new("p1").unwrap(),
            epoch: 7,
            seq: n,
        }
    }

    async fn shard(&self, i: usize) -> Client {
        connect(&self.shard_urls[i]).await
    }

    async fn catalog(&self) -> Client {
        connect(&self.catalog_url).await
    }

    /// This test's prepared transactions on shard `i`.
    async fn prepared(&self, i: usize) -> Vec<String> {
        self.shard(i)
            .await
            .query(
                "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1 ORDER BY gid",
                &[&format!("sw\\_{}\\_%", self.cluster)],
            )
            .await
            .expect("pg_prepared_xacts")
            .iter()
            .map(|r| r.get(0))
            .collect()
    }

    async fn decision(&self, gid: &Gid) -> Option<String> {
        self.catalog()
            .await
            .query_opt(
                "SELECT decision FROM shardwire_catalog.txn_decision WHERE gid = $1",
                &[&gid.to_string()],
            )
            .await
            .expect("decision log")
            .map(|r| r.get(0))
    }

    async fn table_exists(&self, i: usize, table: &str) -> bool {
        self.shard(i)
            .await
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&table])
            .await
            .expect("to_regclass")
            .get(0)
    }

    /// BEGIN, `sql`, PREPARE TRANSACTION on shard `i`: what a coordinator leaves when it dies
    /// between PREPARE and the decision.
    async fn prepare_by_hand(&self, i: usize, sql: &str, gid: &str) {
        self.shard(i)
            .await
            .batch_execute(&format!("BEGIN; {sql}; PREPARE TRANSACTION '{gid}'"))
            .await
            .expect("prepare by hand");
    }
}

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(conn);
    client
}

fn stmts(sql: &[&str]) -> Vec<String> {
    sql.iter().map(|s| s.to_string()).collect()
}

#[tokio::test]
async fn two_shard_run_commits_on_both() {
    let f = Fixture::new("tcommit").await;
    let create = "CREATE TABLE txn_commit_both (id int PRIMARY KEY, v text)";
    let outcome = f
        .coordinator
        .run(vec![
            (
                S1,
                stmts(&[
                    create,
                    "INSERT INTO txn_commit_both VALUES (1, 'a'), (2, 'b')",
                ]),
            ),
            (
                S2,
                stmts(&[create, "INSERT INTO txn_commit_both VALUES (3, 'c')"]),
            ),
        ])
        .await
        .expect("two-phase run");
    assert_eq!(
        outcome.commit,
        Commit::TwoPhase {
            gid: f.gid(1),
            unconfirmed: vec![]
        }
    );
    let rows: Vec<_> = outcome
        .results
        .iter()
        .map(|r| (r.shard, r.rows_affected.clone()))
        .collect();
    assert_eq!(rows, vec![(S1, vec![0, 2]), (S2, vec![0, 1])]);
    for (i, expected) in [(0, 2i64), (1, 1)] {
        let count: i64 = f
            .shard(i)
            .await
            .query_one("SELECT count(*) FROM txn_commit_both", &[])
            .await
            .expect("table committed")
            .get(0);
        assert_eq!(count, expected, "shard {i}");
        assert!(
            f.prepared(i).await.is_empty(),
            "shard {i} kept a prepared transaction"
        );
    }
    assert_eq!(
        f.decision(&f.gid(1)).await,
        None,
        "decision record not cleaned up"
    );

    // One participant: a plain commit, no gid used.
    let outcome = f
        .coordinator
        .run(vec![(
            S2,
            stmts(&["INSERT INTO txn_commit_both VALUES (4, 'd')"]),
        )])
        .await
        .expect("one-phase run");
    assert_eq!(outcome.commit, Commit::OnePhase);
    assert_eq!(f.coordinator.gids().next_gid(), f.gid(2));
}

#[tokio::test]
async fn failing_statement_on_one_shard_leaves_nothing_anywhere() {
    let f = Fixture::new("tfail").await;
    let create = "CREATE TABLE txn_fail (id int PRIMARY KEY)";
    let err = f
        .coordinator
        .run(vec![
            (S1, stmts(&[create, "INSERT INTO txn_fail VALUES (1)"])),
            (S2, stmts(&[create, "INSERT INTO txn_fail VALUES (1 / 0)"])),
        ])
        .await
        .expect_err("division by zero on s2");
    assert_eq!(err.sqlstate(), SqlState::DIVISION_BY_ZERO);
    assert_eq!(err.shard().map(|s| s.name.as_str()), Some("s2"));
    let text = err.to_string();
    assert!(
        text.contains("\"s2\"") && text.contains("division by zero"),
        "{text}"
    );
    for i in 0..2 {
        assert!(
            !f.table_exists(i, "txn_fail").await,
            "shard {i} kept the table"
        );
        assert!(
            f.prepared(i).await.is_empty(),
            "shard {i} kept a prepared transaction"
        );
    }
    assert_eq!(
        f.decision(&f.gid(1)).await,
        None,
        "a failed transaction recorded a decision"
    );

    // The pooled sessions went back clean: the same shards take the next transaction.
    f.coordinator
        .run(vec![(S1, stmts(&[create])), (S2, stmts(&[create]))])
        .await
        .expect("next run");
    assert!(f.table_exists(0, "txn_fail").await && f.table_exists(1, "txn_fail").await);
}

#[tokio::test]
async fn abort_recorded_first_makes_the_coordinator_roll_back() {
    let f = Fixture::new("tconflict").await;
    // As if recovery had found this gid prepared too long and decided abort.
    f.catalog()
        .await
        .execute(
            "INSERT INTO shardwire_catalog.txn_decision (gid, decision) VALUES ($1, 'abort')",
            &[&f.gid(1).to_string()],
        )
        .await
        .expect("abort record");
    let create = "CREATE TABLE txn_conflict (id int)";
    let err = f
        .coordinator
        .run(vec![(S1, stmts(&[create])), (S2, stmts(&[create]))])
        .await
        .expect_err("abort won");
    assert!(matches!(err, TxnError::AbortedByRecovery { .. }), "{err}");
    assert_eq!(err.sqlstate(), SqlState::TRANSACTION_ROLLBACK);
    for i in 0..2 {
        assert!(
            !f.table_exists(i, "txn_conflict").await,
            "shard {i} committed"
        );
        assert!(
            f.prepared(i).await.is_empty(),
            "shard {i} kept a prepared transaction"
        );
    }
    assert_eq!(f.decision(&f.gid(1)).await.as_deref(), Some("abort"));
}

#[tokio::test]
async fn an_expired_lease_means_no_commit_decision() {
    let f = Fixture::new("tlease").await;
    let catalog = f.catalog().await;
    // As if the proxy had stalled past its lease: another proxy may be finishing its work.
    catalog
        .execute(
            "UPDATE shardwire_catalog.proxy_lease SET expires_at = now() - interval '1 second' \
             WHERE cluster = 'tlease'",
            &[],
        )
        .await
        .expect("expire the lease");
    let create = "CREATE TABLE txn_lease (id int)";
    let work = || vec![(S1, stmts(&[create])), (S2, stmts(&[create]))];
    let err = f.coordinator.run(work()).await.expect_err("lease expired");
    assert!(matches!(err, TxnError::LeaseExpired { .. }), "{err}");
    assert_eq!(err.sqlstate(), SqlState::TRANSACTION_ROLLBACK);
    for i in 0..2 {
        assert!(!f.table_exists(i, "txn_lease").await, "shard {i} committed");
        assert!(f.prepared(i).await.is_empty(), "shard {i} kept it prepared");
    }
    assert_eq!(f.decision(&f.gid(1)).await, None, "a decision was recorded");

    // A lease that is gone altogether (removed by another proxy's recovery) is no better.
    catalog
        .execute(
            "DELETE FROM shardwire_catalog.proxy_lease WHERE cluster = 'tlease'",
            &[],
        )
        .await
        .expect("remove the lease");
    let err = f.coordinator.run(work()).await.expect_err("no lease");
    assert!(matches!(err, TxnError::LeaseExpired { .. }), "{err}");
    assert_eq!(f.decision(&f.gid(2)).await, None);

    // Renewed, the same coordinator commits again.
    Lease::new(
        f.pools.clone(),
        f.coordinator.incarnation(),
        Duration::from_secs(60),
    )
    .take()
    .await
    .expect("lease");
    f.coordinator.run(work()).await.expect("committed");
    assert!(f.table_exists(0, "txn_lease").await && f.table_exists(1, "txn_lease").await);
}

#[tokio::test]
async fn recovery_rolls_back_a_transaction_prepared_without_decision() {
    let f = Fixture::new("trollback").await;
    let gid = f.gid(1).to_string();
    // The second shard's name carries its number, as on a shard that shares its server.
    let names = [gid.clone(), format!("{gid}_1")];
    for (i, name) in names.iter().enumerate() {
        f.prepare_by_hand(i, "CREATE TABLE txn_undecided (id int)", name)
            .await;
    }
    // Within the grace period its coordinator may still decide: hands off.
    let report = f.recovery.run_once().await.expect("recovery pass");
    assert!(
        report.rolled_back.is_empty() && report.committed.is_empty(),
        "{report:?}"
    );
    assert_eq!(f.prepared(0).await, vec![gid.clone()]);
    assert_eq!(f.prepared(1).await, vec![names[1].clone()]);

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let report = f.recovery.run_once().await.expect("recovery pass");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.rolled_back, vec![(f.gid(1), S1), (f.gid(1), S2)]);
    for i in 0..2 {
        assert!(f.prepared(i).await.is_empty(), "shard {i} still prepared");
        assert!(
            !f.table_exists(i, "txn_undecided").await,
            "shard {i} committed"
        );
    }
    // Kept, so the coordinator could never record commit after all.
    assert_eq!(f.decision(&f.gid(1)).await.as_deref(), Some("abort"));
    let report = f.recovery.run_once().await.expect("recovery pass");
    assert!(report.forgotten.is_empty(), "{report:?}");

    // Once past its retention, nothing can need it any more.
    let settings = TxnSettings {
        abort_record_retention: Duration::ZERO,
        ..quick_settings()
    };
    let recovery = Recovery::new(f.pools.clone(), settings, &f.coordinator).expect("settings");
    let report = recovery.run_once().await.expect("recovery pass");
    assert_eq!(report.forgotten, vec![f.gid(1)]);
    assert_eq!(f.decision(&f.gid(1)).await, None);
}

#[tokio::test]
async fn recovery_commits_where_commit_was_decided() {
    let f = Fixture::new("trecommit").await;
    let gid = f.gid(1).to_string();
    for i in 0..2 {
        f.prepare_by_hand(i, "CREATE TABLE txn_decided (id int)", &gid)
            .await;
    }
    f.catalog()
        .await
        .execute(
            "INSERT INTO shardwire_catalog.txn_decision (gid, decision, participants) \
             VALUES ($1, 'commit', '{s1,s2}')",
            &[&gid],
        )
        .await
        .expect("commit record");
    // The coordinator got as far as committing on s1, then died.
    f.shard(0)
        .await
        .batch_execute(&format!("COMMIT PREPARED '{gid}'"))
        .await
        .expect("commit on s1");

    tokio::time::sleep(Duration::from_millis(2500)).await;
    let report = f.recovery.run_once().await.expect("recovery pass");
    assert!(report.errors.is_empty(), "{report:?}");
    assert_eq!(report.committed, vec![(f.gid(1), S2)]);
    assert_eq!(report.forgotten, vec![f.gid(1)]);
    for i in 0..2 {
        assert!(
            f.table_exists(i, "txn_decided").await,
            "shard {i} did not commit"
        );
        assert!(f.prepared(i).await.is_empty(), "shard {i} still prepared");
    }
    assert_eq!(f.decision(&f.gid(1)).await, None);
}

#[tokio::test]
async fn recovery_never_touches_other_prepared_transactions() {
    let f = Fixture::new("tforeign").await;
    let foreign = [
        "other_app_txn_1",
        "sw_someothercluster_p1_7_1",
        "sw_tforeign_p1_7",
        "sw_tforeign_p1_07_1",
        "sw_tforeign_P1_7_1",
    ];
    for (n, gid) in foreign.iter().enumerate() {
        f.prepare_by_hand(0, &format!("CREATE TABLE txn_foreign_{n} (id int)"), gid)
            .await;
    }
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let report = f.recovery.run_once().await.expect("recovery pass");
    let s1 = f.shard(0).await;
    let left: Vec<String> = s1
        .query("SELECT gid FROM pg_prepared_xacts", &[])
        .await
        .expect("pg_prepared_xacts")
        .iter()
        .map(|r| r.get(0))
        .collect();
    for gid in foreign {
        let _ = s1
            .batch_execute(&format!("ROLLBACK PREPARED '{gid}'"))
            .await;
    }
    assert!(
        report.rolled_back.is_empty() && report.committed.is_empty(),
        "{report:?}"
    );
    for gid in foreign {
        assert!(
            left.iter().any(|g| g == gid),
            "{gid} was touched; left: {left:?}"
        );
        let recorded: i64 = f
            .catalog()
            .await
            .query_one(
                "SELECT count(*) FROM shardwire_catalog.txn_decision WHERE gid = $1",
                &[&gid],
            )
            .await
            .expect("decision log")
            .get(0);
        assert_eq!(recorded, 0, "{gid} got a decision record");
    }
}

async fn stop(cluster: &OwnCluster, mode: StopMode) {
    let c = &cluster.0;
    tokio::task::block_in_place(|| c.stop(mode)).unwrap_or_else(|e| panic!("{e}"));
}

async fn start(cluster: &OwnCluster) {
    tokio::task::block_in_place(|| cluster.0.start()).unwrap_or_else(|e| panic!("{e}"));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_stopping_before_prepare_leaves_nothing_anywhere() {
    let own = OwnCluster::start("txn-stop");
    let f = Fixture::over(
        "tstop",
        vec![shards().url(0), own.url()],
        None,
        quick_settings(),
    )
    .await;
    let create = "CREATE TABLE txn_stop (id int)";
    let run = f.coordinator.run(vec![
        (S1, stmts(&[create])),
        (S2, stmts(&[create, "SELECT pg_sleep(60)"])),
    ]);
    let kill = async {
        // s1 prepares at once; s2 is still working when its server stops.
        let observer = f.shard(1).await;
        loop {
            let sleeping: i64 = observer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity WHERE query LIKE 'SELECT pg_sleep(60)%'",
                    &[],
                )
                .await
                .expect("pg_stat_activity")
                .get(0);
            if sleeping == 1 && f.prepared(0).await.len() == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop(&own, StopMode::Immediate).await;
    };
    let (result, ()) = tokio::join!(run, kill);
    let err = result.expect_err("s2 went down");
    assert_eq!(err.sqlstate(), SqlState::CONNECTION_FAILURE, "{err}");
    assert_eq!(err.shard().map(|s| s.name.as_str()), Some("s2"), "{err}");
    assert!(
        f.prepared(0).await.is_empty(),
        "s1 kept its prepared transaction"
    );
    assert!(!f.table_exists(0, "txn_stop").await);

    // While s2 is down the run fails at once, naming it, and s1 gets nothing.
    let err = f
        .coordinator
        .run(vec![(S1, stmts(&[create])), (S2, stmts(&[create]))])
        .await
        .expect_err("s2 is down");
    assert_eq!(err.sqlstate(), SqlState::CONNECTION_FAILURE, "{err}");
    assert!(err.to_string().contains("\"s2\""), "{err}");
    assert!(f.prepared(0).await.is_empty() && !f.table_exists(0, "txn_stop").await);

    start(&own).await;
    assert!(
        !f.table_exists(1, "txn_stop").await,
        "s2 kept the table after its crash"
    );
    assert!(f.prepared(1).await.is_empty());
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn shard_without_prepared_transactions_is_named() {
    let own = OwnCluster::start("txn-noprep");
    connect(&own.url())
        .await
        .batch_execute("ALTER SYSTEM SET max_prepared_transactions = 0")
        .await
        .expect("alter system");
    stop(&own, StopMode::Fast).await;
    start(&own).await;
    let f = Fixture::over(
        "tnoprep",
        vec![shards().url(0), own.url()],
        None,
        quick_settings(),
    )
    .await;
    let create = "CREATE TABLE txn_noprep (id int)";
    let work = || vec![(S1, stmts(&[create])), (S2, stmts(&[create]))];
    let is_disabled_on_s2 = |err: &TxnError| {
        err.sqlstate() == SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
            && err.shard().map(|s| s.name.as_str()) == Some("s2")
            && err.to_string().contains("max_prepared_transactions")
    };

    // Not checked yet: PREPARE itself fails on s2, and s1's prepared work is rolled back.
    let err = f.coordinator.run(work()).await.expect_err("no 2PC on s2");
    assert!(is_disabled_on_s2(&err), "{err}");
    assert!(f.prepared(0).await.is_empty() && !f.table_exists(0, "txn_noprep").await);

    // Checked at start: refused before anything runs.
    let problems = f.coordinator.check_shards().await;
    assert_eq!(problems.len(), 1, "{problems:?}");
    assert!(is_disabled_on_s2(&problems[0]), "{}", problems[0]);
    let err = f.coordinator.run(work()).await.expect_err("no 2PC on s2");
    assert!(is_disabled_on_s2(&err), "{err}");
    assert!(!f.table_exists(0, "txn_noprep").await);

    // Work on s2 alone needs no two-phase commit.
    let outcome = f
        .coordinator
        .run(vec![(S2, stmts(&[create]))])
        .await
        .expect("single-shard work");
    assert_eq!(outcome.commit, Commit::OnePhase);

    // Reconfigured and restarted: the next control connection to s2 (a recovery pass makes
    // one) reads the setting again, with no new check_shards and no proxy restart.
    let set_capacity = |n: u32| {
        let url = own.url();
        async move {
            connect(&url)
                .await
                .batch_execute(&format!("ALTER SYSTEM SET max_prepared_transactions = {n}"))
                .await
                .expect("alter system");
        }
    };
    set_capacity(8).await;
    stop(&own, StopMode::Fast).await;
    start(&own).await;
    f.recovery.run_once().await.expect("recovery pass");
    f.coordinator
        .ensure_can_prepare(&[S1, S2])
        .expect("s2 can prepare now");
    let drop_it = "DROP TABLE txn_noprep";
    f.coordinator
        .run(vec![(S1, stmts(&[create])), (S2, stmts(&[drop_it]))])
        .await
        .expect("two-phase commit with s2");
    set_capacity(0).await;
    stop(&own, StopMode::Fast).await;
    start(&own).await;
    f.recovery.run_once().await.expect("recovery pass");
    let err = f
        .coordinator
        .ensure_can_prepare(&[S1, S2])
        .expect_err("off again");
    assert!(is_disabled_on_s2(&err), "{err}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unknown_decision_outcome_is_08007_and_recovery_settles_it() {
    let catalog = OwnCluster::start("txn-catalog");
    let settings = TxnSettings {
        // The decision INSERT waits on the blocker below until the catalog goes down.
        lock_timeout: Duration::from_secs(60),
        ..quick_settings()
    };
    let f = Fixture::over(
        "tunknown",
        vec![shards().url(0), shards().url(1)],
        Some(catalog.url()),
        settings,
    )
    .await;
    let blocker = f.catalog().await;
    blocker
        .batch_execute(&format!(
            "BEGIN; INSERT INTO shardwire_catalog.txn_decision (gid, decision) \
             VALUES ('{}', 'abort')",
            f.gid(1)
        ))
        .await
        .expect("blocking insert");
    let create = "CREATE TABLE txn_unknown (id int)";
    let run = f
        .coordinator
        .run(vec![(S1, stmts(&[create])), (S2, stmts(&[create]))]);
    let kill = async {
        let observer = f.catalog().await;
        loop {
            let waiting: i64 = observer
                .query_one(
                    "SELECT count(*) FROM pg_stat_activity \
                     WHERE wait_event_type = 'Lock' AND query LIKE 'INSERT INTO shardwire_catalog%'",
                    &[],
                )
                .await
                .expect("pg_stat_activity")
                .get(0);
            if waiting == 1 {
                break;
            }
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        stop(&catalog, StopMode::Immediate).await;
    };
    let (result, ()) = tokio::join!(run, kill);
    let err = result.expect_err("decision outcome unknown");
    assert_eq!(
        err.sqlstate(),
        SqlState::TRANSACTION_RESOLUTION_UNKNOWN,
        "{err}"
    );
    // Never guessed: both shards still hold the transaction prepared.
    let gid = f.gid(1).to_string();
    assert_eq!(f.prepared(0).await, vec![gid.clone()]);
    assert_eq!(f.prepared(1).await, vec![gid.clone()]);

    start(&catalog).await;
    tokio::time::sleep(Duration::from_millis(2500)).await;
    let report = f.recovery.run_once().await.expect("recovery pass");
    assert_eq!(
        report.rolled_back,
        vec![(f.gid(1), S1), (f.gid(1), S2)],
        "{report:?}"
    );
    for i in 0..2 {
        assert!(f.prepared(i).await.is_empty());
        assert!(!f.table_exists(i, "txn_unknown").await);
    }
}
