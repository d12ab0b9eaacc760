//! Unqualified table names through shardwire: read along the session's search_path as
//! PostgreSQL reads them (SET, RESET and the startup packet, through the simple and the
//! extended protocol), refused where the proxy cannot know the path and the name is ambiguous.
mod common;
mod routing_common;

use routing_common::*;
use tokio_postgres::error::SqlState;

/// Unqualified names are read along the session's search_path when the proxy knows it (from the
/// startup packet, or a SET alone outside a block): the same text names another table in
/// another session. Where the proxy does not know it, or in DDL it runs itself (which names
/// tables in public), a name that a recorded table outside public has is refused rather than
/// read as public's: the shards could read it as the other table.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn unqualified_names_follow_the_sessions_search_path() {
    let proxy = start();
    let c = proxy.connect().await;
    c.batch_execute("CREATE SCHEMA ut_app")
        .await
        .expect("schema on every shard");
    c.batch_execute(
        "CREATE SHARDED TABLE ut_app.amb (cust_id bigint PRIMARY KEY, name text, score int) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
    )
    .await
    .expect("create in a schema");
    fill(&c, "ut_app.amb").await;
    create_customers(&c, "amb").await;
    c.batch_execute("INSERT INTO public.amb VALUES (1, 'p1', 1), (2, 'p2', 2)")
        .await
        .expect("public's rows");
    let count = "SELECT count(*) FROM amb";
    assert_eq!(simple_rows(&c, count).await, [[Some("2".to_string())]]);

    // A SET alone, outside a block: known. The same texts now mean ut_app.amb.
    let app = proxy.connect().await;
    app.batch_execute("SET search_path = ut_app, public")
        .await
        .unwrap();
    assert_eq!(simple_rows(&app, count).await, [[Some("40".to_string())]]);
    assert_eq!(
        simple_rows(&c, count).await,
        [[Some("2".to_string())]],
        "other session"
    );
    log_all_statements().await;
    let keyed = simple_rows(&app, "SELECT name FROM amb WHERE cust_id = 7 /* ut-sp-1 */").await;
    assert_eq!(keyed, [[Some("n7".to_string())]]);
    assert_eq!(
        shards_that_ran("ut-sp-1").len(),
        1,
        "routed by ut_app.amb's key"
    );
    let prepared = app
        .query(
            "SELECT name FROM amb WHERE cust_id = $1 /* ut-sp-2 */",
            &[&7i64],
        )
        .await
        .expect("prepared");
    assert_eq!(prepared[0].get::<_, String>(0), "n7");
    assert_eq!(shards_that_ran("ut-sp-2").len(), 1);
    app.batch_execute(
        "UPDATE amb SET score = 0 WHERE cust_id <= 10; INSERT INTO amb VALUES (41, 'n41', 41)",
    )
    .await
    .expect("writes");
    assert_eq!(
        counts_where("ut_app.amb", "WHERE score = 0")
            .await
            .iter()
            .sum::<i64>(),
        10
    );
    assert_eq!(counts("ut_app.amb").await.iter().sum::<i64>(), 41);
    assert_eq!(
        counts("amb").await.iter().sum::<i64>(),
        2,
        "public's untouched"
    );

    // DDL the proxy runs names public's tables: an ambiguous name is refused.
    for sql in [
        "ALTER TABLE amb ADD COLUMN extra int",
        "CREATE INDEX ON amb (name)",
    ] {
        let e = app.batch_execute(sql).await.expect_err(sql);
        assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{sql}: {e}");
        assert!(message(&e).contains("qualify the name"), "{sql}: {e}");
    }
    let columns = "SELECT count(*)::text FROM information_schema.columns \
                   WHERE table_name = 'amb' AND column_name = 'extra'";
    assert_eq!(on_each_shard(columns).await, vec![Some("0".into()); SHARDS]);

    // From the startup packet too.
    let (started, conn) = tokio_postgres::connect(
        &format!("{} options='-c search_path=ut_app'", proxy.conn_string()),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect with a search_path");
    tokio::spawn(conn);
    assert_eq!(
        simple_rows(&started, count).await,
        [[Some("41".to_string())]]
    );
    started
        .batch_execute("SET search_path = public")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&started, count).await,
        [[Some("2".to_string())]]
    );
    // RESET goes back to the startup packet's path, on the shards as for the router.
    started.batch_execute("RESET search_path").await.unwrap();
    assert_eq!(
        simple_rows(&started, count).await,
        [[Some("41".to_string())]]
    );
    // Without a startup path, RESET goes back to the proxy's default.
    app.batch_execute("RESET search_path").await.unwrap();
    assert_eq!(simple_rows(&app, count).await, [[Some("2".to_string())]]);

    // Set where the proxy cannot follow it: refused, as with any path it does not know.
    let unknown = proxy.connect().await;
    unknown
        .batch_execute("SELECT set_config('search_path', 'ut_app', false)")
        .await
        .unwrap();
    let e = unknown
        .batch_execute(count)
        .await
        .expect_err("unknown path");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{e}");
    assert!(message(&e).contains("qualify the name"), "{e}");
    let in_block = proxy.connect().await;
    in_block
        .batch_execute("BEGIN; SET search_path = ut_app; COMMIT")
        .await
        .unwrap();
    let e = in_block
        .batch_execute(count)
        .await
        .expect_err("set in a block");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{e}");
    // A SET the proxy follows makes it known again.
    in_block
        .batch_execute("SET search_path = ut_app")
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&in_block, count).await,
        [[Some("41".to_string())]]
    );

    // Inside a WITH query's scope its name means the WITH query, not the recorded table.
    let with = "WITH amb AS (SELECT 1 AS one) SELECT one FROM amb";
    assert_eq!(simple_rows(&c, with).await, vec![vec![Some("1".into())]]);
    c.batch_execute("DROP TABLE public.amb").await.unwrap();
    // And not a name of ut_app.amb either.
    assert_eq!(
        simple_rows(&unknown, with).await,
        vec![vec![Some("1".into())]]
    );
    c.batch_execute("DROP TABLE ut_app.amb").await.unwrap();
}

/// SET and RESET of search_path through the extended protocol (pgjdbc's `setSchema`, any
/// driver in extended mode) are followed as PostgreSQL makes them: at the Execute, standing
/// once the batch's Sync finds no error and no block open. A batch that fails after its SET
/// leaves the path as it was on the shards, and the proxy unsure of it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn extended_protocol_search_path_changes_are_followed() {
    use common::raw::{RawClient, Reply};
    let proxy = start();
    let c = proxy.connect().await;
    c.batch_execute("CREATE SCHEMA IF NOT EXISTS ut_ext")
        .await
        .unwrap();
    c.batch_execute(
        "CREATE SHARDED TABLE ut_ext.ext_amb (cust_id bigint PRIMARY KEY, name text, \
         score int) PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
    )
    .await
    .unwrap();
    fill(&c, "ut_ext.ext_amb").await;
    create_customers(&c, "ext_amb").await;
    c.batch_execute("INSERT INTO public.ext_amb VALUES (1, 'p1', 1)")
        .await
        .unwrap();
    let count = "SELECT count(*) FROM ext_amb";

    // Prepared in one batch, executed in the next: the path is ut_ext's after its Sync.
    let app = proxy.connect().await;
    app.execute("SET search_path TO ut_ext, public", &[])
        .await
        .expect("extended SET");
    assert_eq!(simple_rows(&app, count).await, [[Some("40".to_string())]]);
    let keyed: i64 = app
        .query_one("SELECT count(*) FROM ext_amb WHERE cust_id = $1", &[&7i64])
        .await
        .expect("keyed read along the path")
        .get(0);
    assert_eq!(keyed, 1);
    app.execute("SET search_path = public", &[]).await.unwrap();
    assert_eq!(simple_rows(&app, count).await, [[Some("1".to_string())]]);

    // A batch that fails after its SET: rolled back on the shard, so the proxy must not read
    // names along the new path; it refuses the ambiguous name until a SET it follows.
    let mut raw = RawClient::connect(proxy.addr, common::APP, common::APP, common::APP)
        .await
        .expect("raw connect");
    raw.parse("", "SET search_path = ut_ext, public")
        .bind("", "", &[])
        .execute("")
        .parse("", "SELECT 1/0")
        .bind("", "", &[])
        .execute("")
        .sync();
    let replies = raw.round_trip().await;
    assert!(
        replies.contains(&Reply::Error(SqlState::DIVISION_BY_ZERO)),
        "{replies:?}"
    );
    raw.query("SHOW search_path");
    let shown = raw.round_trip().await;
    assert!(
        shown.iter().any(
            |r| matches!(r, Reply::Row(row) if row[0].as_deref() == Some("\"$user\", public"))
        ),
        "the failed batch's SET was rolled back: {shown:?}"
    );
    raw.query(count);
    let refused = raw.round_trip().await;
    assert!(
        refused.contains(&Reply::Error(SqlState::FEATURE_NOT_SUPPORTED)),
        "unsure after a failed batch: {refused:?}"
    );

    // A RESET through the extended protocol goes back to the startup packet's path, on the
    // shard as for the router.
    let (started, conn) = tokio_postgres::connect(
        &format!("{} options='-c search_path=ut_ext'", proxy.conn_string()),
        tokio_postgres::NoTls,
    )
    .await
    .expect("connect with a search_path");
    tokio::spawn(conn);
    started
        .execute("SET search_path = public", &[])
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&started, count).await,
        [[Some("1".to_string())]]
    );
    started.execute("RESET search_path", &[]).await.unwrap();
    let shown: String = started
        .query_one("SHOW search_path", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(shown, "ut_ext");
    assert_eq!(
        simple_rows(&started, count).await,
        [[Some("40".to_string())]]
    );

    // Inside a block the SET may still roll back: not followed.
    app.batch_execute("BEGIN").await.unwrap();
    app.execute("SET search_path = ut_ext", &[]).await.unwrap();
    app.batch_execute("ROLLBACK").await.unwrap();
    let e = app.batch_execute(count).await.expect_err("set in a block");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{e}");

    for table in ["public.ext_amb", "ut_ext.ext_amb"] {
        c.batch_execute(&format!("DROP TABLE {table}"))
            .await
            .unwrap();
    }
}
