//! The extended protocol through transaction pooling: prepared statements that outlive the
//! backend connection they were prepared on, pipelines, unnamed statements, Close and re-Parse.
//! tokio-postgres asks for binary results, so every value here comes back in binary format.

mod common;

use std::collections::HashSet;
use std::sync::Arc;
use std::time::Duration;

use common::raw::{RawClient, Reply};
use common::{TestProxy, APP};
use futures::future::join_all;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::Type;
use tokio_postgres::{Client, Statement};

/// Bounds every test: a proxy that loses track of a reply hangs its client, and a hang must
/// fail the test rather than the whole run.
const LIMIT: Duration = Duration::from_secs(60);

const TYPED: &str = "SELECT $1::int4 * 2, $2::text || '/' || $1::text, $3::int8 + 1, \
                     $4::float8 / 2, NOT $5::bool, $6::bytea, ARRAY[$1::int4, NULL], \
                     pg_backend_pid()";

/// Runs [`TYPED`] with values derived from `(client, i)`, checks every column, returns the pid.
async fn run_typed(
    c: &impl tokio_postgres::GenericClient,
    stmt: &Statement,
    client: u8,
    i: i32,
) -> i32 {
    let tag = format!("c{client}");
    let big = i64::from(i) * 1_000_000_007;
    let bytes = vec![client, i as u8, 0];
    let row = c
        .query_one(
            stmt,
            &[&i, &tag, &big, &f64::from(i), &(i % 2 == 0), &bytes],
        )
        .await
        .unwrap_or_else(|e| panic!("client {client}, use {i}: {e}"));
    assert_eq!(row.get::<_, i32>(0), i * 2);
    assert_eq!(row.get::<_, String>(1), format!("{tag}/{i}"));
    assert_eq!(row.get::<_, i64>(2), big + 1);
    assert_eq!(row.get::<_, f64>(3), f64::from(i) / 2.0);
    assert_eq!(row.get::<_, bool>(4), i % 2 != 0);
    assert_eq!(row.get::<_, Vec<u8>>(5), bytes);
    assert_eq!(row.get::<_, Vec<Option<i32>>>(6), vec![Some(i), None]);
    row.get(7)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn one_prepared_statement_reused_by_eight_clients_over_two_backend_connections() {
    const CLIENTS: u8 = 8;
    // 1,000 uses in all.
    const USES: i32 = 125;
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let clients = join_all((0..CLIENTS).map(|_| proxy.connect())).await;
    let runs = clients.into_iter().enumerate().map(|(n, mut client)| {
        tokio::spawn(async move {
            let n = n as u8;
            let stmt = client.prepare(TYPED).await.unwrap();
            let mut pids = HashSet::new();
            let mut i = 0;
            while i < USES {
                if i % 10 == 0 {
                    // Three uses in one transaction: one backend connection serves them all.
                    let tx = client.transaction().await.unwrap();
                    let mut in_tx = HashSet::new();
                    for _ in 0..3 {
                        in_tx.insert(run_typed(&tx, &stmt, n, i).await);
                        i += 1;
                    }
                    assert_eq!(in_tx.len(), 1, "a transaction moved between connections");
                    pids.extend(in_tx);
                    if i % 20 < 10 {
                        tx.commit().await.unwrap();
                    } else {
                        tx.rollback().await.unwrap();
                    }
                } else {
                    pids.insert(run_typed(&client, &stmt, n, i).await);
                    i += 1;
                }
            }
            pids
        })
    });
    // Moving between connections is certain only in the test made for it, further down.
    let pids: Vec<HashSet<i32>> = tokio::time::timeout(LIMIT, join_all(runs))
        .await
        .expect("clients finish")
        .into_iter()
        .map(|r| r.expect("client task"))
        .collect();
    let all: HashSet<i32> = pids.iter().flatten().copied().collect();
    assert!(all.len() <= 2, "pool.size = 2, yet backends {all:?} served");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pipelined_queries_on_one_client_all_get_their_own_answers() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let run = |client: Client, n: u8| async move {
        let stmt = client.prepare(TYPED).await.unwrap();
        // tokio-postgres writes every query of the batch before reading any answer.
        let prepared = join_all((0..100).map(|i| run_typed(&client, &stmt, n, i)));
        let ad_hoc = join_all((0..30i64).map(|i| {
            let client = &client;
            async move {
                let row = client
                    .query_one("SELECT $1::int8 * 3, $2::text", &[&i, &format!("q{i}")])
                    .await
                    .unwrap();
                assert_eq!(row.get::<_, i64>(0), i * 3);
                assert_eq!(row.get::<_, String>(1), format!("q{i}"));
            }
        }));
        let unnamed = join_all((0..30i32).map(|i| {
            let client = &client;
            async move {
                let row = client
                    .query_typed_one("SELECT $1 + 1", &[(&i, Type::INT4)])
                    .await
                    .unwrap();
                assert_eq!(row.get::<_, i32>(0), i + 1);
            }
        }));
        futures::join!(prepared, ad_hoc, unnamed);
    };
    let clients = join_all((0..3).map(|_| proxy.connect())).await;
    let runs = clients
        .into_iter()
        .enumerate()
        .map(|(n, c)| tokio::spawn(run(c, n as u8)));
    for r in tokio::time::timeout(LIMIT, join_all(runs))
        .await
        .expect("pipelines finish")
    {
        r.expect("pipelining client");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ad_hoc_and_unnamed_statements_across_transactions() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let mut client = proxy.connect().await;
    let other = proxy.connect().await;
    // Another client keeps taking connections, so ours does not keep getting the same one.
    let stop = Arc::new(tokio::sync::Notify::new());
    let churn = {
        let stop = stop.clone();
        tokio::spawn(async move {
            let mut n = 0u32;
            loop {
                tokio::select! {
                    _ = stop.notified() => return n,
                    r = other.query_one("SELECT 1", &[]) => { r.unwrap(); n += 1; }
                }
            }
        })
    };
    let work = async {
        for i in 0..60i32 {
            let text = format!("t{i}");
            if i % 3 == 0 {
                let tx = client.transaction().await.unwrap();
                let a: i32 = tx
                    .query_one("SELECT $1::int4 + 1", &[&i])
                    .await
                    .unwrap()
                    .get(0);
                let b: String = tx
                    .query_typed_one("SELECT $1 || 'x'", &[(&text, Type::TEXT)])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!((a, b), (i + 1, format!("{text}x")));
                tx.commit().await.unwrap();
            } else {
                let a: i32 = client
                    .query_one("SELECT $1::int4 + 1", &[&i])
                    .await
                    .unwrap()
                    .get(0);
                let b: String = client
                    .query_typed_one("SELECT $1 || 'x'", &[(&text, Type::TEXT)])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!((a, b), (i + 1, format!("{text}x")));
            }
        }
    };
    tokio::time::timeout(LIMIT, work)
        .await
        .expect("queries finish");
    stop.notify_one();
    assert!(churn.await.unwrap() > 0);
}

#[tokio::test]
async fn dropped_statements_are_closed_and_the_same_name_can_be_prepared_again() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let ready = Reply::Ready(b'I');
    let row = |v: &str| Reply::Row(vec![Some(v.to_string())]);
    let complete = || Reply::Complete("SELECT 1".into());

    raw.parse("s1", "SELECT 'first'")
        .bind("", "s1", &[])
        .execute("")
        .sync();
    let first = raw.round_trip().await;
    assert_eq!(
        first,
        [
            Reply::ParseComplete,
            Reply::BindComplete,
            row("first"),
            complete(),
            ready.clone()
        ]
    );

    // Close and Parse of the same name in one batch: the new text is the one that runs.
    raw.close_statement("s1")
        .parse("s1", "SELECT $1::text || '!'")
        .describe_statement("s1")
        .bind("", "s1", &["hi"])
        .execute("")
        .sync();
    assert_eq!(
        raw.round_trip().await,
        [
            Reply::CloseComplete,
            Reply::ParseComplete,
            Reply::ParameterDescription(vec![Type::TEXT.oid()]),
            Reply::RowDescription(1),
            Reply::BindComplete,
            row("hi!"),
            complete(),
            ready.clone()
        ]
    );

    // Without a Close, the name is taken.
    raw.parse("s1", "SELECT 'third'").sync();
    assert_eq!(
        raw.round_trip().await,
        [Reply::Error(SqlState::DUPLICATE_PSTATEMENT), ready.clone()]
    );
    raw.bind("", "s1", &["still"]).execute("").sync();
    assert_eq!(
        raw.round_trip().await,
        [
            Reply::BindComplete,
            row("still!"),
            complete(),
            ready.clone()
        ]
    );

    // Another client with the first text shares the single backend connection; our Close of
    // "s1" must not take its statement away, nor may its Close take ours.
    let mut other = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    other.parse("mine", "SELECT 'first'").sync();
    assert_eq!(
        other.round_trip().await,
        [Reply::ParseComplete, ready.clone()]
    );
    raw.close_statement("s1").sync();
    assert_eq!(
        raw.round_trip().await,
        [Reply::CloseComplete, ready.clone()]
    );
    other.bind("", "mine", &[]).execute("").sync();
    assert_eq!(
        other.round_trip().await,
        [Reply::BindComplete, row("first"), complete(), ready.clone()]
    );

    raw.bind("", "s1", &[]).execute("").sync();
    assert_eq!(
        raw.round_trip().await,
        [
            Reply::Error(SqlState::INVALID_SQL_STATEMENT_NAME),
            ready.clone()
        ]
    );
    raw.parse("s1", "SELECT 'fourth'")
        .bind("", "s1", &[])
        .execute("")
        .sync();
    assert_eq!(
        raw.round_trip().await,
        [
            Reply::ParseComplete,
            Reply::BindComplete,
            row("fourth"),
            complete(),
            ready
        ]
    );
    raw.terminate().await;
    other.terminate().await;

    // tokio-postgres closes a statement when it is dropped; the same text prepares again.
    let client = proxy.connect().await;
    for round in 0..3i32 {
        let stmt = client.prepare("SELECT $1::int4 - 1").await.unwrap();
        let v: i32 = client.query_one(&stmt, &[&round]).await.unwrap().get(0);
        assert_eq!(v, round - 1);
        drop(stmt);
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_statement_still_works_after_its_backend_connection_changed() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 2);
    let mut a = proxy.connect().await;
    let mut b = proxy.connect().await;
    let mut c = proxy.connect().await;
    let stmt = a
        .prepare("SELECT $1::int4 * 10, pg_backend_pid()")
        .await
        .unwrap();
    let first = a.query_one(&stmt, &[&1i32]).await.unwrap();
    assert_eq!(first.get::<_, i32>(0), 10);
    let prepared_on: i32 = first.get(1);

    // B and C hold both connections; whichever of them is not the one the statement was
    // prepared on is released, so A's next use can only run on that other connection.
    let tb = b.transaction().await.unwrap();
    let tc = c.transaction().await.unwrap();
    let pid_b: i32 = tb
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    let pid_c: i32 = tc
        .query_one("SELECT pg_backend_pid()", &[])
        .await
        .unwrap()
        .get(0);
    assert_ne!(pid_b, pid_c);
    assert!(
        [pid_b, pid_c].contains(&prepared_on),
        "pool.size = 2 but a third backend?"
    );
    let (keep, release) = if pid_b == prepared_on {
        (tb, tc)
    } else {
        (tc, tb)
    };
    release.commit().await.unwrap();

    let again = tokio::time::timeout(LIMIT, a.query_one(&stmt, &[&7i32]))
        .await
        .expect("A gets the free connection")
        .unwrap();
    assert_eq!(again.get::<_, i32>(0), 70);
    assert_ne!(again.get::<_, i32>(1), prepared_on, "A was meant to move");

    // And back: the first connection still has it prepared, and it still answers right.
    keep.commit().await.unwrap();
    let tx = a.transaction().await.unwrap();
    for i in 0..5i32 {
        let row = tx.query_one(&stmt, &[&i]).await.unwrap();
        assert_eq!(row.get::<_, i32>(0), i * 10);
    }
    tx.commit().await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn deallocate_all_from_another_client_makes_the_proxy_prepare_again() {
    // One connection: B's DEALLOCATE ALL runs on the connection A's statement lives on, and it
    // is B's first statement, so the proxy takes the connection for it right then.
    let proxy = TestProxy::start_with(|c| c.pool.size = 1);
    let a = proxy.connect().await;
    let b = proxy.connect().await;
    let stmt = a.prepare("SELECT $1::int4 + 1").await.unwrap();
    let row = a.query_one(&stmt, &[&1i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 2);
    b.batch_execute("DEALLOCATE ALL").await.unwrap();
    // The backend no longer has the statement: the proxy must know and prepare it again.
    let row = tokio::time::timeout(LIMIT, a.query_one(&stmt, &[&41i32]))
        .await
        .expect("answered")
        .unwrap();
    assert_eq!(row.get::<_, i32>(0), 42);
    b.batch_execute("DISCARD ALL").await.unwrap();
    let row = a.query_one(&stmt, &[&99i32]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 100);
}
