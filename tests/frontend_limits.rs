//! The limits a client meets at the proxy (`[limits]`): sessions in all and per user, the time
//! to log in, time idle in a transaction block, time waiting for a statement.

mod common;

use std::time::{Duration, Instant};

use common::raw::{RawClient, Reply};
use common::{TestProxy, APP};
use tokio::io::AsyncReadExt;
use tokio_postgres::error::SqlState;

#[tokio::test]
async fn sessions_past_the_limits_are_refused_with_53300_until_one_ends() {
    let proxy = TestProxy::start_with(|c| {
        c.limits.max_client_connections = 3;
        c.limits.max_connections_per_user = 2;
        c.users.push(shardwire::config::UserConfig {
            name: "other".into(),
            password: "other".into(),
        });
    });
    let first = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let second = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let refused = RawClient::connect(proxy.addr, APP, APP, APP).await.err();
    assert_eq!(refused, Some(SqlState::TOO_MANY_CONNECTIONS), "per user");
    let other = RawClient::connect(proxy.addr, "other", "other", APP)
        .await
        .unwrap();
    let refused = RawClient::connect(proxy.addr, "other", "other", APP)
        .await
        .err();
    assert_eq!(refused, Some(SqlState::TOO_MANY_CONNECTIONS), "in all");
    // The message is PostgreSQL's.
    let err = tokio_postgres::connect(
        &format!("{} user=other password=other", proxy.conn_string()),
        tokio_postgres::NoTls,
    )
    .await
    .err()
    .expect("refused");
    let db = err.as_db_error().expect("an ErrorResponse");
    assert_eq!(db.message(), "sorry, too many clients already");

    // A session that ends gives its place back.
    first.terminate().await;
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut again = loop {
        match RawClient::connect(proxy.addr, APP, APP, APP).await {
            Ok(c) => break c,
            Err(e) => {
                assert_eq!(e, SqlState::TOO_MANY_CONNECTIONS);
                assert!(Instant::now() < deadline, "the place never came back");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let replies = again.query("SELECT 1").round_trip().await;
    assert!(replies.contains(&common::raw::Reply::Complete("SELECT 1".into())));
    drop(second);
}

#[tokio::test]
async fn a_client_that_does_not_log_in_in_time_is_disconnected() {
    let proxy = TestProxy::start_with(|c| c.limits.login_timeout_ms = 500);
    let mut silent = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("closed within the login timeout");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    let client = proxy.connect().await;
    client.simple_query("SELECT 1").await.unwrap();
}

/// How many statements with `marker` in their text run on shard 0.
async fn running_on_shard(marker: &str) -> i64 {
    common::shards()
        .connect(0)
        .await
        .query_one(
            "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
             AND query LIKE $1 AND pid <> pg_backend_pid()",
            &[&format!("%{marker}%")],
        )
        .await
        .unwrap()
        .get(0)
}

/// A client idle in a transaction block past `idle_in_transaction_timeout_ms` is ended as
/// PostgreSQL ends one past its idle_in_transaction_session_timeout, and its block is rolled
/// back on the shard.
#[tokio::test]
async fn a_client_idle_in_a_transaction_block_is_ended_as_postgresql_ends_it() {
    let proxy = TestProxy::start_with(|c| c.limits.idle_in_transaction_timeout_ms = 300);
    let setup = proxy.connect().await;
    setup
        .batch_execute("CREATE TABLE idle_block (v text)")
        .await
        .unwrap();

    let mut direct = RawClient::connect_to_shard(0).await;
    direct
        .query("SET idle_in_transaction_session_timeout = 300")
        .round_trip()
        .await;
    let mut proxied = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    for (client, v) in [(&mut direct, "direct"), (&mut proxied, "proxied")] {
        client.query("BEGIN").round_trip().await;
        let replies = client
            .query(&format!("INSERT INTO idle_block VALUES ('{v}')"))
            .round_trip()
            .await;
        assert!(
            replies.contains(&Reply::Complete("INSERT 0 1".into())),
            "{replies:?}"
        );
    }
    // Busy clients are not idle: a statement longer than the limit is fine.
    let replies = proxied.query("SELECT pg_sleep(0.6)").round_trip().await;
    assert!(
        replies.contains(&Reply::Complete("SELECT 1".into())),
        "{replies:?}"
    );

    tokio::time::sleep(Duration::from_millis(900)).await;
    let want = direct.until_closed().await;
    assert_eq!(
        want,
        [Reply::Error(SqlState::IDLE_IN_TRANSACTION_SESSION_TIMEOUT)]
    );
    let got = proxied.until_closed().await;
    assert_eq!(got, want);

    let left: i64 = setup
        .query_one("SELECT count(*) FROM idle_block", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(left, 0, "both blocks were rolled back");
    setup.batch_execute("DROP TABLE idle_block").await.unwrap();
}

/// A statement that runs past `query_timeout_ms` ends its session with 57014 and is canceled
/// on the shards, on one shard as on several.
#[tokio::test]
async fn a_statement_past_the_query_timeout_is_canceled_and_its_session_ended() {
    let proxy = TestProxy::start_with(|c| c.limits.query_timeout_ms = 500);
    let setup = proxy.connect().await;
    setup
        .batch_execute(
            "CREATE SHARDED TABLE query_timeout_t (id bigint PRIMARY KEY) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .unwrap();
    setup
        .batch_execute("INSERT INTO query_timeout_t SELECT generate_series(1, 32)")
        .await
        .unwrap();
    // In time: nothing happens.
    setup.batch_execute("SELECT pg_sleep(0.2)").await.unwrap();

    for (sql, marker) in [
        ("SELECT pg_sleep(30) /* qt_single */", "qt_single"),
        (
            "SELECT id FROM query_timeout_t WHERE pg_sleep(30) IS NOT NULL /* qt_multi */",
            "qt_multi",
        ),
    ] {
        let mut client = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
        let started = Instant::now();
        let replies = client.query(sql).until_closed().await;
        assert_eq!(replies, [Reply::Error(SqlState::QUERY_CANCELED)], "{sql}");
        assert!(started.elapsed() < Duration::from_secs(5), "{sql}");
        let since = Instant::now();
        while running_on_shard(marker).await > 0 {
            assert!(
                since.elapsed() < Duration::from_secs(2),
                "{sql} still runs on the shard"
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
    }
    setup.batch_execute("SELECT 1").await.unwrap();
    setup
        .batch_execute("DROP TABLE query_timeout_t")
        .await
        .unwrap();
}

/// Stops (SIGSTOP) and continues every process of a cluster, as when its host freezes.
struct Frozen(Vec<String>);

impl Frozen {
    fn cluster(dir: &std::path::Path) -> Frozen {
        let pid = std::fs::read_to_string(dir.join("postmaster.pid")).unwrap();
        let postmaster = pid.lines().next().unwrap().trim().to_string();
        let children = std::process::Command::new("pgrep")
            .args(["-P", &postmaster])
            .output()
            .unwrap();
        let mut pids = vec![postmaster];
        pids.extend(
            String::from_utf8_lossy(&children.stdout)
                .split_whitespace()
                .map(str::to_string),
        );
        let frozen = Frozen(pids);
        frozen.signal("STOP");
        frozen
    }

    fn signal(&self, name: &str) {
        let ok = std::process::Command::new("kill")
            .arg(format!("-{name}"))
            .args(&self.0)
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -{name} {:?}", self.0);
    }
}

impl Drop for Frozen {
    fn drop(&mut self) {
        self.signal("CONT");
    }
}

/// A shard that stops answering altogether — no cancel reaches it — holds its clients no
/// longer than `query_timeout_ms`; once it answers again, so does the proxy.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_that_stops_answering_is_noticed_by_the_query_timeout() {
    let own = common::OwnCluster::start("limits-frozen");
    let url = own.url();
    let proxy = TestProxy::start_with(|c| {
        c.shards = vec![shardwire::config::ShardConfig {
            name: "s1".into(),
            url,
        }];
        c.catalog = None;
        c.limits.query_timeout_ms = 1000;
    });
    let mut client = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let replies = client.query("SELECT 1").round_trip().await;
    assert!(replies.contains(&Reply::Complete("SELECT 1".into())));

    let frozen = Frozen::cluster(own.0.dir());
    let started = Instant::now();
    let replies = client.query("SELECT 2").until_closed().await;
    assert_eq!(replies, [Reply::Error(SqlState::QUERY_CANCELED)]);
    assert!(started.elapsed() < Duration::from_secs(5));
    drop(frozen);

    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let mut next = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
        let replies = next.query("SELECT 3").round_trip().await;
        if replies.contains(&Reply::Complete("SELECT 1".into())) {
            break;
        }
        assert!(Instant::now() < deadline, "never served again: {replies:?}");
        tokio::time::sleep(Duration::from_millis(200)).await;
    }
}
