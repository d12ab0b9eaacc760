//! Transaction pooling as a client sees it: session state stays with the client that made it
//! (by pinning it to its backend connection), never leaks to another client, and unpinned
//! clients share few connections without waiting on each other forever.

mod common;

use std::time::Duration;

use common::TestProxy;
use futures::future::join_all;
use futures::StreamExt;
use tokio_postgres::error::SqlState;
use tokio_postgres::{AsyncMessage, Client, NoTls, Notification};

const LIMIT: Duration = Duration::from_secs(60);
const DEFAULT_SEARCH_PATH: &str = "\"$user\", public";

async fn show(c: &Client, setting: &str) -> String {
    let rows = c.simple_query(&format!("SHOW {setting}")).await.unwrap();
    rows.iter()
        .find_map(|m| match m {
            tokio_postgres::SimpleQueryMessage::Row(r) => r.get(0).map(str::to_string),
            _ => None,
        })
        .expect("SHOW returns a row")
}

async fn backend_pid(c: &Client) -> i32 {
    c.query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0)
}

/// A client of `proxy` with extra libpq options, e.g. `application_name=x`.
async fn connect_with(proxy: &TestProxy, options: &str) -> Client {
    let (client, conn) =
        tokio_postgres::connect(&format!("{} {options}", proxy.conn_string()), NoTls)
            .await
            .unwrap();
    tokio::spawn(conn);
    client
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn session_set_pins_the_client_and_does_not_leak_to_others() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    a.batch_execute("SET search_path TO pooling_pinned_schema, public")
        .await
        .unwrap();
    a.batch_execute("SET application_name = 'pinned-a'")
        .await
        .unwrap();
    let pinned_pid = backend_pid(&a).await;
    for _ in 0..10 {
        // B's statements take whichever connection is free; none may carry A's settings.
        let (b_path, b_app) = futures::join!(show(&b, "search_path"), show(&b, "application_name"));
        assert_eq!(b_path, DEFAULT_SEARCH_PATH);
        assert_eq!(b_app, "");
        assert_eq!(
            show(&a, "search_path").await,
            "pooling_pinned_schema, public"
        );
        assert_eq!(show(&a, "application_name").await, "pinned-a");
        assert_eq!(backend_pid(&a).await, pinned_pid, "a pinned client moved");
    }
}

#[tokio::test]
async fn a_set_sent_with_the_extended_protocol_pins_the_client() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    // The texts alternate, so the proxy cannot carry one text's verdict over to the next.
    a.execute("SELECT 1", &[]).await.unwrap();
    a.execute("SET search_path TO pooling_extended_schema, public", &[])
        .await
        .unwrap();
    a.execute("SELECT 1", &[]).await.unwrap();
    let pinned_pid = backend_pid(&a).await;
    for _ in 0..5 {
        assert_eq!(show(&b, "search_path").await, DEFAULT_SEARCH_PATH);
        assert_eq!(
            show(&a, "search_path").await,
            "pooling_extended_schema, public"
        );
        assert_eq!(backend_pid(&a).await, pinned_pid, "a pinned client moved");
    }
}

#[tokio::test]
async fn a_pinned_connection_is_not_handed_to_the_next_client() {
    // One backend connection: the next client gets the pinned one's only if it is reused.
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let a = proxy.connect().await;
    a.batch_execute("SET search_path TO pooling_leak_schema; SET statement_timeout = '1234s'")
        .await
        .unwrap();
    assert_eq!(show(&a, "statement_timeout").await, "1234s");
    drop(a);
    let b = proxy.connect().await;
    let (path, timeout) = tokio::time::timeout(LIMIT, async {
        (
            show(&b, "search_path").await,
            show(&b, "statement_timeout").await,
        )
    })
    .await
    .expect("the departed client's connection is released");
    assert_eq!(path, DEFAULT_SEARCH_PATH);
    assert_eq!(timeout, "0");
}

#[tokio::test]
async fn startup_parameters_follow_each_client_across_shared_connections() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let alpha = connect_with(&proxy, "application_name=alpha").await;
    let beta = connect_with(
        &proxy,
        "application_name=beta options='-c DateStyle=SQL,DMY'",
    )
    .await;
    for _ in 0..5 {
        assert_eq!(show(&alpha, "application_name").await, "alpha");
        assert_eq!(show(&beta, "application_name").await, "beta");
    }
}

#[tokio::test]
async fn settings_given_in_startup_options_apply_to_that_client_only() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let plain = proxy.connect().await;
    let styled = connect_with(&proxy, "options='-c DateStyle=SQL,DMY'").await;
    for _ in 0..3 {
        assert_eq!(show(&styled, "DateStyle").await, "SQL, DMY");
        assert_eq!(show(&plain, "DateStyle").await, "ISO, MDY");
    }
}

/// RESET goes back to the value the client's startup packet gave, as on PostgreSQL (the proxy's
/// connections got it by set_config, so theirs is the server's), also for RESET ALL, DISCARD
/// ALL and SET … TO DEFAULT; a setting the startup packet did not give goes to the server's.
#[tokio::test]
async fn reset_goes_back_to_the_startup_value() {
    let proxy = TestProxy::start();
    let c = connect_with(&proxy, "options='-c DateStyle=SQL,DMY'").await;
    for reset in [
        "RESET DateStyle",
        "SET DateStyle TO DEFAULT",
        "RESET ALL",
        "DISCARD ALL",
    ] {
        c.batch_execute("SET DateStyle = 'German'; SET extra_float_digits = 2")
            .await
            .unwrap();
        assert_eq!(show(&c, "DateStyle").await, "German, DMY");
        c.batch_execute(reset).await.unwrap();
        assert_eq!(show(&c, "DateStyle").await, "SQL, DMY", "{reset}");
        let digits = if reset.ends_with("ALL") { "1" } else { "2" };
        assert_eq!(show(&c, "extra_float_digits").await, digits, "{reset}");
    }
}

#[tokio::test]
async fn set_local_and_transaction_settings_do_not_pin() {
    // If anything pinned A, B would wait for the only connection and time out.
    let proxy = TestProxy::start_with(|c| {
        c.pool.size = 1;
        c.pool.connect_timeout_ms = 2_000;
    });
    let mut a = proxy.connect().await;
    let b = proxy.connect().await;
    let tx = a.transaction().await.unwrap();
    tx.batch_execute(
        "SET LOCAL search_path TO pooling_local_schema; \
         SET TRANSACTION ISOLATION LEVEL REPEATABLE READ",
    )
    .await
    .unwrap();
    let in_tx: String = tx
        .query_one("SELECT current_setting('search_path')", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(in_tx, "pooling_local_schema");
    tx.commit().await.unwrap();
    a.batch_execute("BEGIN; SET LOCAL application_name = 'local-only'; COMMIT")
        .await
        .unwrap();

    assert_eq!(show(&b, "search_path").await, DEFAULT_SEARCH_PATH);
    assert_eq!(show(&b, "application_name").await, "");
    assert_eq!(show(&a, "search_path").await, DEFAULT_SEARCH_PATH);
    assert_eq!(show(&a, "application_name").await, "");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_temp_table_stays_visible_to_its_creator_only() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    a.batch_execute("CREATE TEMP TABLE pooling_temp (n int); INSERT INTO pooling_temp VALUES (1)")
        .await
        .unwrap();
    for n in 2..=10i32 {
        // B's transactions interleave; A's temp table must not move or vanish.
        let b_tx = async {
            b.batch_execute("BEGIN; SELECT 1; COMMIT").await.unwrap();
            b.query_one("SELECT to_regclass('pooling_temp') IS NULL", &[])
                .await
                .unwrap()
                .get::<_, bool>(0)
        };
        let params: [&(dyn tokio_postgres::types::ToSql + Sync); 1] = [&n];
        let a_insert = a.execute("INSERT INTO pooling_temp VALUES ($1)", &params);
        let (inserted, b_sees_none) = futures::join!(a_insert, b_tx);
        assert_eq!(inserted.unwrap(), 1);
        assert!(b_sees_none, "B sees A's temp table");
        let count: i64 = a
            .query_one("SELECT count(*) FROM pooling_temp", &[])
            .await
            .unwrap()
            .get(0);
        assert_eq!(count, i64::from(n));
    }
    let e = b
        .query_one("SELECT count(*) FROM pooling_temp", &[])
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::UNDEFINED_TABLE));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn listen_notify_reaches_a_pinned_listener() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let (listener, mut conn) = tokio_postgres::connect(&proxy.conn_string(), NoTls)
        .await
        .unwrap();
    let (tx, mut notifications) = tokio::sync::mpsc::unbounded_channel::<Notification>();
    tokio::spawn(async move {
        let mut messages = futures::stream::poll_fn(move |cx| conn.poll_message(cx));
        while let Some(Ok(m)) = messages.next().await {
            if let AsyncMessage::Notification(n) = m {
                let _ = tx.send(n);
            }
        }
    });
    listener.batch_execute("LISTEN pooling_chan").await.unwrap();
    let notifier = proxy.connect().await;
    let mut other = proxy.connect().await;
    // Unrelated traffic keeps the other connection busy between the two notifications.
    other.batch_execute("SELECT 1").await.unwrap();
    notifier
        .batch_execute("NOTIFY pooling_chan, 'first'")
        .await
        .unwrap();
    let tx = other.transaction().await.unwrap();
    tx.execute("SELECT pg_notify('pooling_chan', 'second')", &[])
        .await
        .unwrap();
    tx.commit().await.unwrap();

    let mut got = Vec::new();
    while got.len() < 2 {
        let n = tokio::time::timeout(Duration::from_secs(10), notifications.recv())
            .await
            .expect("notification delivered")
            .expect("listener connection alive");
        assert_eq!(n.channel(), "pooling_chan");
        got.push(n.payload().to_string());
    }
    assert_eq!(got, ["first", "second"]);
    // The listener's session is still a working one.
    assert_eq!(show(&listener, "search_path").await, DEFAULT_SEARCH_PATH);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_clients_share_one_connection_without_deadlock() {
    let proxy = TestProxy::start_with(|c| {
        c.pool.size = 1;
        c.pool.connect_timeout_ms = 10_000;
    });
    let mut a = proxy.connect().await;
    let mut b = proxy.connect().await;
    a.batch_execute("CREATE TABLE pooling_alternate (who text, n int)")
        .await
        .unwrap();
    async fn one_tx(c: &mut Client, who: &str, n: i32) {
        let tx = c.transaction().await.unwrap();
        tx.execute("INSERT INTO pooling_alternate VALUES ($1, $2)", &[&who, &n])
            .await
            .unwrap();
        tx.commit().await.unwrap();
    }
    let work = async {
        // Strict alternation: each commit must hand the connection back.
        for n in 0..20 {
            one_tx(&mut a, "a", n).await;
            one_tx(&mut b, "b", n).await;
        }
        // Both at once: each waits for the other's transaction to end, never forever.
        futures::join!(
            async {
                for n in 20..60 {
                    one_tx(&mut a, "a", n).await
                }
            },
            async {
                for n in 20..60 {
                    one_tx(&mut b, "b", n).await
                }
            }
        );
    };
    tokio::time::timeout(LIMIT, work)
        .await
        .expect("no deadlock");
    let rows = a
        .query(
            "SELECT who, count(*), count(DISTINCT n) FROM pooling_alternate GROUP BY who ORDER BY who",
            &[],
        )
        .await
        .unwrap();
    let counts: Vec<(String, i64, i64)> = rows
        .iter()
        .map(|r| (r.get(0), r.get(1), r.get(2)))
        .collect();
    assert_eq!(counts, [("a".into(), 60, 60), ("b".into(), 60, 60)]);
    a.batch_execute("DROP TABLE pooling_alternate")
        .await
        .unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_waiting_for_the_only_connection_gets_it_as_soon_as_it_is_released() {
    let proxy = TestProxy::start_with(|c| {
        c.pool.size = 1;
        c.pool.connect_timeout_ms = 5_000;
    });
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    a.batch_execute("BEGIN").await.unwrap();
    let pid_a = backend_pid(&a).await;
    let waiting = tokio::spawn(async move {
        let pid = backend_pid(&b).await;
        (b, pid)
    });
    tokio::time::sleep(Duration::from_millis(300)).await;
    assert!(
        !waiting.is_finished(),
        "b ran while a held the only connection"
    );
    a.batch_execute("COMMIT").await.unwrap();
    // At once: the released connection goes to the waiting client, not onto the stack of
    // just-returned connections (from which the once-a-second sweep would free it only later).
    let (b, pid_b) = tokio::time::timeout(Duration::from_millis(900), waiting)
        .await
        .expect("the waiting client got the released connection")
        .unwrap();
    assert_eq!(pid_a, pid_b);
    // After that, the connection moves between the two as usual.
    assert_eq!(backend_pid(&a).await, pid_a);
    assert_eq!(backend_pid(&b).await, pid_a);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_share_ten_connections() {
    // One proxy thread, the default: every session in one task (frontend::driver).
    two_hundred_clients_share_ten_connections_on(1, "pooling_many").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn two_hundred_clients_share_ten_connections_on_two_proxy_threads() {
    // Each session its own task, spread over the threads by tokio.
    two_hundred_clients_share_ten_connections_on(2, "pooling_many_threads").await;
}

async fn two_hundred_clients_share_ten_connections_on(workers: usize, table: &'static str) {
    const CLIENTS: i32 = 200;
    let proxy = TestProxy::start_with(|c| {
        c.pool.size = 10;
        c.proxy.workers = Some(workers);
        // Completion is the point here, not latency on a loaded machine.
        c.pool.connect_timeout_ms = 30_000;
    });
    let setup = proxy.connect().await;
    setup
        .batch_execute(&format!("CREATE TABLE {table} (client int, step int)"))
        .await
        .unwrap();
    let conn_string = proxy.conn_string();
    let runs = (0..CLIENTS).map(|id| {
        let conn_string = conn_string.clone();
        tokio::spawn(async move {
            let (mut client, conn) = tokio_postgres::connect(&conn_string, NoTls)
                .await
                .unwrap_or_else(|e| panic!("client {id} connects: {e}"));
            tokio::spawn(conn);
            let stmt = client.prepare("SELECT $1::int4 * 2").await.unwrap();
            let doubled: i32 = client.query_one(&stmt, &[&id]).await.unwrap().get(0);
            assert_eq!(doubled, id * 2);
            let tx = client.transaction().await.unwrap();
            for step in 0..2i32 {
                tx.execute(
                    &format!("INSERT INTO {table} VALUES ($1, $2)"),
                    &[&id, &step],
                )
                .await
                .unwrap();
            }
            let mine: i64 = tx
                .query_one(
                    &format!("SELECT count(*) FROM {table} WHERE client = $1"),
                    &[&id],
                )
                .await
                .unwrap()
                .get(0);
            assert_eq!(mine, 2);
            let pid: i32 = tx
                .query_one("SELECT pg_backend_pid()", &[])
                .await
                .unwrap()
                .get(0);
            tx.commit().await.unwrap();
            client.simple_query("SELECT 'done'").await.unwrap();
            pid
        })
    });
    let results = tokio::time::timeout(LIMIT, join_all(runs))
        .await
        .expect("all clients finish");
    let total: i64 = setup
        .query_one(&format!("SELECT count(*) FROM {table}"), &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(total, i64::from(CLIENTS) * 2);
    let pids: std::collections::HashSet<i32> = results
        .into_iter()
        .map(|r| r.expect("client task"))
        .collect();
    assert!(
        pids.len() <= 10,
        "{} backend connections for pool.size = 10",
        pids.len()
    );
    setup
        .batch_execute(&format!("DROP TABLE {table}"))
        .await
        .unwrap();
}

async fn count_rls(c: &Client) -> Result<i64, tokio_postgres::Error> {
    c.query_one("SELECT count(*) FROM fp_rls", &[])
        .await
        .map(|r| r.get(0))
}

/// SET ROLE holds on every shard the session reads, not only the connection that ran it: a
/// read over several shards sees what the role may see (its privileges and row-level security
/// policies), and RESET ROLE gives the rest back. Another client never runs as the role.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn set_role_holds_on_every_shard() {
    let proxy = TestProxy::start();
    for i in 0..common::shards().clusters.len() {
        common::shards()
            .connect(i)
            .await
            .batch_execute(
                "DO $$ BEGIN CREATE ROLE fp_reader;
                   EXCEPTION WHEN duplicate_object THEN NULL; END $$",
            )
            .await
            .unwrap();
    }
    let c = proxy.connect().await;
    for sql in [
        "CREATE SHARDED TABLE fp_rls (id bigint PRIMARY KEY, v int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        "INSERT INTO fp_rls SELECT i, i % 10 FROM generate_series(1, 200) i",
        "ALTER TABLE fp_rls ENABLE ROW LEVEL SECURITY",
        "CREATE POLICY fp_low ON fp_rls FOR SELECT TO fp_reader USING (v < 3)",
        "GRANT SELECT ON fp_rls TO fp_reader",
    ] {
        c.batch_execute(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
    }
    c.batch_execute("SET ROLE fp_reader").await.unwrap();
    assert_eq!(
        count_rls(&c).await.unwrap(),
        60,
        "the policy on every shard"
    );
    // Through the general path too (a distinct count is combined on a connection of its own).
    let distinct: i64 = c
        .query_one("SELECT count(DISTINCT v) FROM fp_rls", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(distinct, 3);
    let e = c
        .batch_execute("DELETE FROM fp_rls")
        .await
        .expect_err("no DELETE privilege");
    assert_eq!(e.code(), Some(&SqlState::INSUFFICIENT_PRIVILEGE));
    let other = proxy.connect().await;
    assert_eq!(
        count_rls(&other).await.unwrap(),
        200,
        "another client is not the role"
    );
    c.batch_execute("RESET ROLE").await.unwrap();
    assert_eq!(count_rls(&c).await.unwrap(), 200);
}
