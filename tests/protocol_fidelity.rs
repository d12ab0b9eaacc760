//! What a client sees of the protocol through the proxy is what one PostgreSQL sends: the
//! settings reported at startup, spelled as the server spells them; no ParameterStatus or
//! notice the client did not cause. Each check is also made against a shard directly, which
//! proves the check itself.

mod common;

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use common::raw::RawClient;
use common::{TestProxy, APP};
use tokio_postgres::error::SqlState;

async fn through_proxy(proxy: &TestProxy, params: &[(&str, &str)]) -> Result<RawClient, SqlState> {
    RawClient::connect_with(proxy.addr, APP, APP, APP, params).await
}

fn reported(client: &RawClient) -> BTreeMap<String, String> {
    client.reported.iter().cloned().collect()
}

#[tokio::test]
async fn startup_settings_are_reported_as_the_server_spells_them() {
    let proxy = TestProxy::start();
    for encoding in [
        "utf8", "UTF-8", "utf_8", "Unicode", "eucjp", "euc-jp", "LATIN1",
    ] {
        let params = [
            ("client_encoding", encoding),
            ("datestyle", "iso"),
            ("application_name", "fidelity"),
            ("extra_float_digits", "2"),
        ];
        let direct = RawClient::connect_to_shard_with(0, &params)
            .await
            .unwrap_or_else(|e| panic!("direct with {encoding}: {e:?}"));
        let proxied = through_proxy(&proxy, &params)
            .await
            .unwrap_or_else(|e| panic!("through the proxy with {encoding}: {e:?}"));
        let (direct, proxied) = (reported(&direct), reported(&proxied));
        assert_eq!(proxied, direct, "client_encoding={encoding}");
        assert!(!proxied.contains_key("extra_float_digits"), "{proxied:?}");
    }
}

#[tokio::test]
async fn a_startup_setting_postgresql_refuses_ends_the_login_alike() {
    let proxy = TestProxy::start();
    for params in [
        [("client_encoding", "klingon")],
        [("no_such_setting", "1")],
        [("DateStyle", "sideways")],
    ] {
        let direct = RawClient::connect_to_shard_with(0, &params).await.err();
        let proxied = through_proxy(&proxy, &params).await.err();
        assert!(direct.is_some(), "{params:?} refused directly");
        assert_eq!(proxied, direct, "{params:?}");
    }
    // The proxy serves the next login.
    through_proxy(&proxy, &[("client_encoding", "UTF8")])
        .await
        .expect("a good login");
}

#[tokio::test]
async fn the_first_query_on_a_fresh_backend_connection_is_traced_as_directly() {
    // A proxy of its own: its pool's first connection starts as `shardwire`, which the proxy
    // changes to the client's application_name before the client's query.
    let proxy = TestProxy::start();
    let params = [("application_name", "tracer"), ("client_encoding", "utf8")];
    let mut direct = RawClient::connect_to_shard_with(0, &params).await.unwrap();
    let mut proxied = through_proxy(&proxy, &params).await.unwrap();
    for sql in [
        "SELECT 1",
        "SET application_name = 'renamed'",
        "SELECT current_setting('application_name')",
        "SET client_min_messages = notice; DO $$ BEGIN RAISE NOTICE 'hi'; END $$",
    ] {
        let want = direct.query(sql).trace().await;
        let got = proxied.query(sql).trace().await;
        assert_eq!(got, want, "{sql}");
    }
    // In the extended protocol too.
    let mut other = through_proxy(&proxy, &[("application_name", "second")])
        .await
        .unwrap();
    let mut direct = RawClient::connect_to_shard_with(0, &[("application_name", "second")])
        .await
        .unwrap();
    let want = direct
        .parse("", "SELECT 2")
        .bind("", "", &[])
        .execute("")
        .sync()
        .trace()
        .await;
    let got = other
        .parse("", "SELECT 2")
        .bind("", "", &[])
        .execute("")
        .sync()
        .trace()
        .await;
    assert_eq!(got, want);
}

/// A connection straight to shard 0, for the other side of a direct comparison.
async fn shard_client() -> tokio_postgres::Client {
    common::shards().connect(0).await
}

async fn signal(client: &tokio_postgres::Client, function: &str, pid: i32) -> bool {
    client
        .query_one(&format!("SELECT {function}({pid})"), &[])
        .await
        .unwrap_or_else(|e| panic!("{function}: {e}"))
        .get(0)
}

/// `pg_cancel_backend` then `pg_terminate_backend` of `victim`'s pid, called on `admin`: the
/// victim's running statement is canceled (57014) and the session goes on; then it ends with
/// FATAL 57P01.
async fn cancel_then_terminate(admin: &tokio_postgres::Client, mut victim: RawClient) {
    victim.query("SELECT pg_sleep(30)").flush().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    assert!(signal(admin, "pg_cancel_backend", victim.pid).await);
    let replies = victim.until_ready().await;
    assert!(
        replies.contains(&common::raw::Reply::Error(SqlState::QUERY_CANCELED)),
        "{replies:?}"
    );
    let replies = victim.query("SELECT 1").round_trip().await;
    assert!(
        replies.contains(&common::raw::Reply::Complete("SELECT 1".into())),
        "{replies:?}"
    );
    assert!(signal(admin, "pg_terminate_backend", victim.pid).await);
    let replies = victim.until_closed().await;
    assert_eq!(
        replies,
        [common::raw::Reply::Error(SqlState::ADMIN_SHUTDOWN)],
        "the session ends with FATAL 57P01 and nothing else"
    );
}

#[tokio::test]
async fn signal_functions_act_on_the_session_the_proxy_gave_the_pid() {
    // Directly, which proves the check.
    let victim = RawClient::connect_to_shard(0).await;
    cancel_then_terminate(&shard_client().await, victim).await;

    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let admin = proxy.connect().await;
    let bystander = proxy.connect().await;
    let victim = through_proxy(&proxy, &[]).await.unwrap();
    cancel_then_terminate(&admin, victim).await;
    // Everyone else goes on, and the pool serves new sessions.
    for client in [&admin, &bystander] {
        let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
    }
    let later = proxy.connect().await;
    later.simple_query("SELECT 2").await.unwrap();

    // Prepared, as pools' health checks send it.
    let victim = through_proxy(&proxy, &[]).await.unwrap();
    let statement = admin
        .prepare(&format!(
            "SELECT pg_terminate_backend({}) AS gone",
            victim.pid
        ))
        .await
        .unwrap();
    assert_eq!(statement.columns()[0].name(), "gone");
    assert_eq!(
        statement.columns()[0].type_(),
        &tokio_postgres::types::Type::BOOL
    );
    let gone: bool = admin.query_one(&statement, &[]).await.unwrap().get(0);
    assert!(gone);
    let mut victim = victim;
    assert_eq!(
        victim.until_closed().await,
        [common::raw::Reply::Error(SqlState::ADMIN_SHUTDOWN)]
    );

    // The pid bound as a parameter, as drivers send it (binary int4 here).
    let mut victim = through_proxy(&proxy, &[]).await.unwrap();
    victim.query("SELECT pg_sleep(30)").flush().await;
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let canceled: bool = admin
        .query_one("SELECT pg_cancel_backend($1)", &[&victim.pid])
        .await
        .unwrap()
        .get(0);
    assert!(canceled);
    let replies = victim.until_ready().await;
    assert!(
        replies.contains(&common::raw::Reply::Error(SqlState::QUERY_CANCELED)),
        "{replies:?}"
    );
    let gone = admin
        .query_one(
            "SELECT pg_terminate_backend($1::int4) AS gone",
            &[&victim.pid],
        )
        .await
        .unwrap();
    assert_eq!(gone.columns()[0].name(), "gone");
    assert!(gone.get::<_, bool>(0));
    assert_eq!(
        victim.until_closed().await,
        [common::raw::Reply::Error(SqlState::ADMIN_SHUTDOWN)]
    );

    // A pid the proxy did not give goes to a shard, where it names no process.
    let unknown: bool = admin
        .query_one("SELECT pg_cancel_backend(1)", &[])
        .await
        .unwrap()
        .get(0);
    assert!(!unknown);
    let unknown: bool = admin
        .query_one("SELECT pg_cancel_backend($1)", &[&1i32])
        .await
        .unwrap()
        .get(0);
    assert!(!unknown);
}

#[tokio::test]
async fn a_session_of_another_user_may_not_be_signalled() {
    let proxy = TestProxy::start_with(|c| {
        c.users.push(shardwire::config::UserConfig {
            name: "intruder".into(),
            password: "intruder".into(),
        })
    });
    let victim = through_proxy(&proxy, &[]).await.unwrap();
    let mut intruder = RawClient::connect(proxy.addr, "intruder", "intruder", APP)
        .await
        .unwrap();
    for function in ["pg_cancel_backend", "pg_terminate_backend"] {
        let replies = intruder
            .query(&format!("SELECT {function}({})", victim.pid))
            .round_trip()
            .await;
        assert_eq!(
            replies.first(),
            Some(&common::raw::Reply::Error(SqlState::INSUFFICIENT_PRIVILEGE)),
            "{function}: {replies:?}"
        );
    }
    let mut victim = victim;
    let replies = victim.query("SELECT 1").round_trip().await;
    assert!(replies.contains(&common::raw::Reply::Complete("SELECT 1".into())));
}

/// How many statements with `marker` in their text run on the shards.
async fn running_on_shards(marker: &str) -> i64 {
    let mut running = 0;
    for i in 0..common::shards().clusters.len() {
        let n: i64 = common::shards()
            .connect(i)
            .await
            .query_one(
                "SELECT count(*) FROM pg_stat_activity WHERE state = 'active' \
                 AND query LIKE $1 AND pid <> pg_backend_pid()",
                &[&format!("%{marker}%")],
            )
            .await
            .unwrap()
            .get(0);
        running += n;
    }
    running
}

/// Waits until `marker`'s statement runs on `shards` shards.
async fn until_running(marker: &str, shards: i64) {
    let started = Instant::now();
    while running_on_shards(marker).await < shards {
        assert!(
            started.elapsed() < Duration::from_secs(20),
            "the statement never ran on {shards} shards"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// Waits until `marker`'s statement runs nowhere; a canceled statement ends at once, one left
/// running for nobody would take 30 s.
async fn until_gone(marker: &str) {
    let since = Instant::now();
    while running_on_shards(marker).await > 0 {
        assert!(
            since.elapsed() < Duration::from_secs(2),
            "the statement still runs for a client that is gone"
        );
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
}

/// A sharded table with rows on every shard, for statements that run on all of them.
async fn table_on_every_shard(client: &tokio_postgres::Client, name: &str) {
    for sql in [
        format!(
            "CREATE SHARDED TABLE {name} (id bigint PRIMARY KEY, v text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO"
        ),
        format!("INSERT INTO {name} SELECT i, 'v' || i FROM generate_series(1, 64) i"),
    ] {
        client
            .batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    }
    for i in 0..common::shards().clusters.len() {
        let n: i64 = common::shards()
            .connect(i)
            .await
            .query_one(&format!("SELECT count(*) FROM {name}"), &[])
            .await
            .unwrap()
            .get(0);
        assert!(n > 0, "shard {i} holds no row of {name}");
    }
}

/// A statement over every row of `table`, sleeping on every shard.
fn sleeping_over(table: &str, marker: &str) -> String {
    format!("SELECT id FROM {table} WHERE pg_sleep(30) IS NOT NULL AND id = id /* {marker} */")
}

fn psql_running(proxy: &TestProxy, sql: &str) -> std::process::Child {
    std::process::Command::new("psql")
        .arg(proxy.conn_string())
        .arg("-c")
        .arg(sql)
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .expect("psql")
}

#[tokio::test]
async fn a_client_killed_mid_statement_leaves_nothing_running() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let marker = "vanishing_client";
    let mut psql = psql_running(&proxy, &format!("SELECT pg_sleep(30) /* {marker} */"));
    until_running(marker, 1).await;
    psql.kill().expect("kill psql");
    psql.wait().expect("reap psql");
    until_gone(marker).await;
    // The pool's one connection serves the next client.
    let next = proxy.connect().await;
    let one: i32 = next.query_one("SELECT 1", &[]).await.unwrap().get(0);
    assert_eq!(one, 1);
}

#[tokio::test]
async fn a_client_killed_mid_multi_shard_statement_leaves_nothing_running() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let setup = proxy.connect().await;
    table_on_every_shard(&setup, "vanish_multi").await;
    drop(setup);
    let marker = "vanishing_multi_client";
    let shards = common::shards().clusters.len() as i64;
    let mut psql = psql_running(&proxy, &sleeping_over("vanish_multi", marker));
    until_running(marker, shards).await;
    psql.kill().expect("kill psql");
    psql.wait().expect("reap psql");
    until_gone(marker).await;
    // Each pool's one connection serves the next client, on every shard.
    let next = proxy.connect().await;
    let n: i64 = next
        .query_one("SELECT count(*) FROM vanish_multi", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(n, 64);
    next.batch_execute("DROP TABLE vanish_multi").await.unwrap();
}

/// psql interrupted with Ctrl-C (SIGINT) sends a cancel request, reports PostgreSQL's error and
/// exits, on one shard as on several.
#[tokio::test]
async fn an_interrupted_psql_is_told_its_statement_was_canceled() {
    let proxy = TestProxy::start();
    let setup = proxy.connect().await;
    table_on_every_shard(&setup, "interrupted_multi").await;
    let shards = common::shards().clusters.len() as i64;
    for (sql, on) in [
        (
            "SELECT pg_sleep(30) /* interrupted_single */".to_string(),
            1,
        ),
        (
            sleeping_over("interrupted_multi", "interrupted_multi_run"),
            shards,
        ),
    ] {
        let marker = sql
            .rsplit("/* ")
            .next()
            .unwrap()
            .trim_end_matches(" */")
            .to_string();
        let psql = psql_running(&proxy, &sql);
        until_running(&marker, on).await;
        let interrupted = Instant::now();
        let status = std::process::Command::new("kill")
            .args(["-INT", &psql.id().to_string()])
            .status()
            .expect("kill -INT");
        assert!(status.success());
        let out = tokio::task::spawn_blocking(move || psql.wait_with_output())
            .await
            .unwrap()
            .expect("psql output");
        assert!(
            interrupted.elapsed() < Duration::from_secs(5),
            "psql hung after Ctrl-C"
        );
        let stderr = String::from_utf8_lossy(&out.stderr);
        assert!(
            stderr.contains("canceling statement due to user request"),
            "{sql}: {stderr}"
        );
        until_gone(&marker).await;
    }
    setup
        .batch_execute("DROP TABLE interrupted_multi")
        .await
        .unwrap();
}

/// `pg_terminate_backend` of a session running a statement on several shards ends the session
/// at once with FATAL 57P01 and leaves nothing running.
#[tokio::test]
async fn a_session_terminated_mid_multi_shard_statement_ends_at_once() {
    let proxy = TestProxy::start();
    let admin = proxy.connect().await;
    table_on_every_shard(&admin, "terminated_multi").await;
    let marker = "terminated_multi_run";
    let shards = common::shards().clusters.len() as i64;
    let mut victim = through_proxy(&proxy, &[]).await.unwrap();
    victim
        .query(&sleeping_over("terminated_multi", marker))
        .flush()
        .await;
    until_running(marker, shards).await;
    assert!(signal(&admin, "pg_terminate_backend", victim.pid).await);
    let replies = victim.until_closed().await;
    assert_eq!(
        replies.last(),
        Some(&common::raw::Reply::Error(SqlState::ADMIN_SHUTDOWN)),
        "{replies:?}"
    );
    until_gone(marker).await;
    admin
        .batch_execute("DROP TABLE terminated_multi")
        .await
        .unwrap();
}
