//! Two proxies on one catalog and the same shards: a transaction proxy A prepared on both shards
//! (a real client's write, its commit decision held up on a lock in the catalog) and then
//! abandoned (A's process stops dead) is left alone by proxy B's recovery while A's lease is
//! live, and finished by it once the lease has expired: rolled back when no decision was
//! recorded, committed when the commit record A would have written is there.
//!
//! Each test has a catalog cluster of its own, so its proxies' cluster tag (derived from the
//! catalog's address), gids, decision records and leases are its own; the shards are the
//! harness's. A proxy runs `server::run` on a runtime of its own that the test can drop with
//! everything on it, as a crash would end it.

mod common;

use std::net::SocketAddr;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shardwire::config::Config;
use shardwire::server::{self, Deps};
use shardwire::txn::ClusterTag;
use tokio_postgres::{Client, NoTls, SimpleQueryMessage};

use common::{shards, OwnCluster, APP};

/// A's lease: long enough to look at what B does while it is live, even on a loaded machine.
const LEASE_MS: u64 = 6000;

/// A proxy on a thread and runtime of its own.
struct Proxy {
    addr: SocketAddr,
    config: Arc<Config>,
    clean_stop: Option<tokio::sync::oneshot::Sender<()>>,
    crash: Option<tokio::sync::oneshot::Sender<()>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Proxy {
    fn start(catalog_url: &str, lease_ms: u64) -> Proxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind");
        let addr = listener.local_addr().expect("local addr");
        let mut text = format!(
            "[proxy]\nlisten = \"{addr}\"\ndatabase = \"{APP}\"\n\
             [[users]]\nname = \"{APP}\"\npassword = \"{APP}\"\n\
             [catalog]\nurl = \"{catalog_url}\"\n\
             [transactions]\nrecovery_interval_ms = 200\nrecovery_grace_ms = 1200\n\
             prepare_deadline_ms = 800\nlease_ms = {lease_ms}\n"
        );
        for (i, url) in shards().urls.iter().enumerate() {
            text.push_str(&format!(
                "[[shards]]\nname = \"s{}\"\nurl = \"{url}\"\n",
                i + 1
            ));
        }
        let config = Arc::new(Config::parse(&text, "lease test").unwrap_or_else(|e| panic!("{e}")));
        let (clean_tx, clean_rx) = tokio::sync::oneshot::channel::<()>();
        let (crash_tx, crash_rx) = tokio::sync::oneshot::channel::<()>();
        let deps = Deps {
            failpoints: shardwire::failpoint::FailPoints::none(),
            config: config.clone(),
        };
        let thread = std::thread::spawn(move || {
            let runtime = server::runtime(None).expect("runtime");
            runtime.block_on(async move {
                listener.set_nonblocking(true).expect("nonblocking");
                let listener = tokio::net::TcpListener::from_std(listener).expect("listener");
                let run = server::run(
                    listener,
                    async {
                        let _ = clean_rx.await;
                    },
                    deps,
                );
                tokio::select! {
                    result = run => result.expect("proxy failed"),
                    _ = crash_rx => {}
                }
            });
            // Every task of the proxy (sessions, recovery, lease renewal) ends here, mid-step.
            runtime.shutdown_background();
        });
        Proxy {
            addr,
            config,
            clean_stop: Some(clean_tx),
            crash: Some(crash_tx),
            thread: Some(thread),
        }
    }

    async fn connect(&self) -> Client {
        let conn = format!(
            "host=127.0.0.1 port={} user={APP} password={APP} dbname={APP}",
            self.addr.port()
        );
        let (client, connection) = tokio_postgres::connect(&conn, NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to proxy: {e}"));
        tokio::spawn(connection);
        client
    }

    fn cluster(&self) -> ClusterTag {
        ClusterTag::from_catalog(&self.config.catalog_endpoint())
    }

    /// Ends the process's work as a crash would: nothing more reaches the shards or the
    /// catalog, the lease stays behind.
    async fn crash(mut self) {
        let _ = self.crash.take().expect("running").send(());
        self.join().await;
    }

    async fn stop(mut self) {
        let _ = self.clean_stop.take().expect("running").send(());
        self.join().await;
    }

    async fn join(&mut self) {
        let thread = self.thread.take().expect("running");
        tokio::task::spawn_blocking(move || thread.join())
            .await
            .expect("join")
            .expect("proxy thread panicked");
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if let Some(tx) = self.clean_stop.take() {
            let _ = tx.send(());
        }
    }
}

async fn connect(url: &str) -> Client {
    let (client, conn) = tokio_postgres::connect(url, NoTls)
        .await
        .unwrap_or_else(|e| panic!("connect {url}: {e}"));
    tokio::spawn(conn);
    client
}

/// The gids of `cluster` prepared on shard `i`.
async fn prepared(i: usize, cluster: &ClusterTag) -> Vec<String> {
    shards()
        .connect(i)
        .await
        .query(
            "SELECT gid FROM pg_prepared_xacts WHERE gid LIKE $1 ORDER BY gid",
            &[&format!("sw\\_{cluster}\\_%")],
        )
        .await
        .expect("pg_prepared_xacts")
        .iter()
        .map(|r| r.get(0))
        .collect()
}

async fn count(i: usize, table: &str) -> i64 {
    shards()
        .connect(i)
        .await
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .expect("count")
        .get(0)
}

async fn decision(catalog: &Client, gid: &str) -> Option<String> {
    catalog
        .query_opt(
            "SELECT decision FROM shardwire_catalog.txn_decision WHERE gid = $1",
            &[&gid],
        )
        .await
        .expect("decision log")
        .map(|r| r.get(0))
}

async fn leases(catalog: &Client) -> i64 {
    catalog
        .query_one("SELECT count(*) FROM shardwire_catalog.proxy_lease", &[])
        .await
        .expect("leases")
        .get(0)
}

/// Whether the lease of the proxy that made `gid` is still unexpired.
async fn lease_live(catalog: &Client, gid: &str) -> bool {
    let parts: Vec<&str> = gid.split('_').collect();
    let epoch: i64 = parts[3].parse().expect("epoch");
    catalog
        .query_one(
            "SELECT count(*) FROM shardwire_catalog.proxy_lease \
             WHERE proxy = $1 AND epoch = $2 AND expires_at > clock_timestamp()",
            &[&parts[2], &epoch],
        )
        .await
        .expect("lease")
        .get::<_, i64>(0)
        == 1
}

/// SHOW TRANSACTIONS through `client`, as rows of text.
async fn show_transactions(client: &Client) -> Vec<Vec<Option<String>>> {
    client
        .simple_query("SHOW TRANSACTIONS")
        .await
        .expect("SHOW TRANSACTIONS")
        .into_iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect()
}

async fn until(what: &str, timeout: Duration, mut check: impl AsyncFnMut() -> bool) {
    let start = Instant::now();
    while !check().await {
        assert!(start.elapsed() < timeout, "timed out waiting for {what}");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
}

/// The statement of A's commit decision, waiting for the lock the test holds.
const WAITING_DECISION: &str = "FROM pg_stat_activity WHERE wait_event_type = 'Lock' \
     AND query LIKE 'INSERT INTO shardwire_catalog.txn_decision%'";

/// Starts A and B on `catalog`, makes A write `table` on both shards by two-phase commit and
/// holds A's commit decision on a lock in the catalog until A is crashed. Returns B, the gid,
/// and the session still holding the lock.
async fn prepare_on_a_then_crash(catalog: &OwnCluster, table: &str) -> (Proxy, String, Client) {
    let a = Proxy::start(&catalog.url(), LEASE_MS);
    let b = Proxy::start(&catalog.url(), LEASE_MS);
    let cluster = a.cluster();
    let client = a.connect().await;
    client
        .batch_execute(&format!(
            "CREATE DUPLICATED TABLE {table} (id int PRIMARY KEY)"
        ))
        .await
        .expect("create");
    let observer = b.connect().await;
    let cat = connect(&catalog.url()).await;
    assert_eq!(leases(&cat).await, 2, "each proxy holds a lease");

    let locker = connect(&catalog.url()).await;
    locker
        .batch_execute("BEGIN; LOCK TABLE shardwire_catalog.txn_decision IN EXCLUSIVE MODE")
        .await
        .expect("lock");
    let insert = format!("INSERT INTO {table} VALUES (1)");
    let writer = tokio::spawn(async move { client.batch_execute(&insert).await });
    let mut gid = String::new();
    until(
        "A's prepared transaction",
        Duration::from_secs(20),
        async || {
            let (p0, p1) = (prepared(0, &cluster).await, prepared(1, &cluster).await);
            let waiting: i64 = cat
                .query_one(&format!("SELECT count(*) {WAITING_DECISION}"), &[])
                .await
                .expect("pg_stat_activity")
                .get(0);
            if p0.len() == 1 && p0 == p1 && waiting == 1 {
                gid = p0[0].clone();
            }
            !gid.is_empty()
        },
    )
    .await;

    // A's own recovery leaves it alone past the grace period: it is in A's in-flight registry.
    // Not much longer: the decision waits under the control sessions' 5 s lock_timeout.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    assert_eq!(prepared(0, &cluster).await, [gid.clone()]);
    let through_a = show_transactions(&a.connect().await).await;
    let in_flight = through_a
        .iter()
        .find(|r| r[0].as_deref() == Some(&gid) && r[1].as_deref() == Some("deciding"))
        .unwrap_or_else(|| panic!("A lists no deciding {gid}: {through_a:?}"));
    assert_eq!(in_flight[2].as_deref(), Some("s1,s2"), "{in_flight:?}");
    assert!(in_flight[3].is_some(), "age: {in_flight:?}");
    assert_eq!(in_flight[5].as_deref(), Some("this proxy"), "{in_flight:?}");
    let through_b = show_transactions(&observer).await;
    let on_shards: Vec<_> = through_b
        .iter()
        .filter(|r| r[0].as_deref() == Some(&gid))
        .collect();
    assert_eq!(on_shards.len(), 2, "{through_b:?}");
    for r in on_shards {
        assert_eq!(r[1].as_deref(), Some("prepared"), "{r:?}");
        assert_eq!(r[5].as_deref(), Some("live"), "{r:?}");
    }

    a.crash().await;
    let _ = writer.await;
    // The dead proxy's catalog session goes too. (Its statement would not run anyway: it is
    // held at its Parse, and its Bind was never sent.)
    cat.batch_execute(&format!(
        "SELECT pg_terminate_backend(pid) {WAITING_DECISION}"
    ))
    .await
    .expect("terminate");
    until(
        "the decision's session to end",
        Duration::from_secs(10),
        async || {
            let waiting: i64 = cat
                .query_one(&format!("SELECT count(*) {WAITING_DECISION}"), &[])
                .await
                .expect("pg_stat_activity")
                .get(0);
            waiting == 0
        },
    )
    .await;
    (b, gid, locker)
}

/// B leaves `gid` prepared on both shards while its coordinator's lease is live.
async fn left_alone_while_the_lease_lives(catalog: &Client, cluster: &ClusterTag, gid: &str) {
    // Several of B's recovery passes (every 200 ms), all past the grace period.
    tokio::time::sleep(Duration::from_millis(1500)).await;
    for i in 0..2 {
        assert_eq!(prepared(i, cluster).await, [gid.to_string()], "shard {i}");
    }
    assert!(
        lease_live(catalog, gid).await,
        "A's lease expired before the check: the machine is too slow for this test"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_undecided_transaction_is_rolled_back_once_the_lease_expires() {
    let catalog = OwnCluster::start("lease-rollback");
    let (b, gid, locker) = prepare_on_a_then_crash(&catalog, "lease_rb").await;
    locker.batch_execute("COMMIT").await.expect("unlock");
    let cat = connect(&catalog.url()).await;
    let cluster = b.cluster();
    left_alone_while_the_lease_lives(&cat, &cluster, &gid).await;
    assert_eq!(decision(&cat, &gid).await, None);

    until(
        "B to finish A's transaction",
        Duration::from_secs(30),
        async || prepared(0, &cluster).await.is_empty() && prepared(1, &cluster).await.is_empty(),
    )
    .await;
    for i in 0..2 {
        assert_eq!(count(i, "lease_rb").await, 0, "shard {i} committed");
    }
    assert_eq!(decision(&cat, &gid).await.as_deref(), Some("abort"));
    // A's lease goes once nothing refers to it; B's own stays until B stops cleanly.
    until(
        "A's lease to be removed",
        Duration::from_secs(10),
        async || leases(&cat).await == 1,
    )
    .await;
    b.stop().await;
    assert_eq!(leases(&cat).await, 0, "B kept its lease after a clean stop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_abandoned_transaction_decided_commit_is_committed_once_the_lease_expires() {
    let catalog = OwnCluster::start("lease-commit");
    let (b, gid, locker) = prepare_on_a_then_crash(&catalog, "lease_cm").await;
    // As if A's decision had been recorded just before it died, before any COMMIT PREPARED:
    // the record A would have written.
    locker
        .execute(
            "INSERT INTO shardwire_catalog.txn_decision (gid, decision, participants) \
             VALUES ($1, 'commit', '{s1,s2}')",
            &[&gid],
        )
        .await
        .expect("commit record");
    locker.batch_execute("COMMIT").await.expect("unlock");
    let cat = connect(&catalog.url()).await;
    assert_eq!(decision(&cat, &gid).await.as_deref(), Some("commit"));
    let cluster = b.cluster();
    left_alone_while_the_lease_lives(&cat, &cluster, &gid).await;

    until(
        "B to finish A's transaction",
        Duration::from_secs(30),
        async || prepared(0, &cluster).await.is_empty() && prepared(1, &cluster).await.is_empty(),
    )
    .await;
    for i in 0..2 {
        assert_eq!(count(i, "lease_cm").await, 1, "shard {i} did not commit");
    }
    until(
        "the commit record to go",
        Duration::from_secs(10),
        async || decision(&cat, &gid).await.is_none(),
    )
    .await;
    b.stop().await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_proxy_whose_lease_lapsed_rolls_back_instead_of_committing() {
    let catalog = OwnCluster::start("lease-lapsed");
    // Renewed at start, then not for 20 s: the test expires it by hand meanwhile.
    let proxy = Proxy::start(&catalog.url(), 60_000);
    let cluster = proxy.cluster();
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE DUPLICATED TABLE lease_lapsed (id int PRIMARY KEY)")
        .await
        .expect("create");
    let cat = connect(&catalog.url()).await;
    cat.batch_execute(
        "UPDATE shardwire_catalog.proxy_lease SET expires_at = now() - interval '1 second'",
    )
    .await
    .expect("expire the lease");

    let err = client
        .batch_execute("INSERT INTO lease_lapsed VALUES (1)")
        .await
        .expect_err("no commit without a lease");
    assert_eq!(
        err.code(),
        Some(&tokio_postgres::error::SqlState::TRANSACTION_ROLLBACK),
        "{err:?}"
    );
    assert!(format!("{err:?}").contains("lease"), "{err:?}");
    for i in 0..2 {
        assert_eq!(count(i, "lease_lapsed").await, 0, "shard {i} committed");
        assert!(prepared(i, &cluster).await.is_empty(), "shard {i} kept it");
    }
    let recorded: i64 = cat
        .query_one("SELECT count(*) FROM shardwire_catalog.txn_decision", &[])
        .await
        .expect("decision log")
        .get(0);
    assert_eq!(recorded, 0, "a decision was recorded");
    // The session goes on, and the proxy lists nothing in flight any more.
    // (Other tests' transactions on the shared shards are listed too, as another cluster's.)
    let left = show_transactions(&client).await;
    assert!(
        left.iter()
            .all(|r| r[5].as_deref() == Some("other cluster")),
        "{left:?}"
    );
    proxy.stop().await;
}
