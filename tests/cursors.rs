//! SQL cursors over sharded tables: DECLARE, FETCH, MOVE and CLOSE of a cursor whose query runs
//! on several shards, merged in ORDER BY order as the client fetches; on one shard when the key
//! pins it. Each step also runs on a plain copy of the rows on one PostgreSQL, which proves it.
mod common;
mod routing_common;

use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, SimpleQueryMessage};

/// The rows and command tag of a simple query through the proxy (table `name`) and on the
/// plain copy (`name_ref`): they must be the same.
async fn both(proxy: &Client, plain: &Client, sql: &str) -> (Vec<Vec<Option<String>>>, u64) {
    let through = run(proxy, &sql.replace("{t}", "cx_t")).await;
    let reference = run(plain, &sql.replace("{t}", "cx_t_ref")).await;
    assert_eq!(through, reference, "{sql}");
    through
}

async fn run(client: &Client, sql: &str) -> (Vec<Vec<Option<String>>>, u64) {
    let messages = client
        .simple_query(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
    let rows: Vec<Vec<Option<String>>> = messages
        .iter()
        .filter_map(|m| match m {
            SimpleQueryMessage::Row(r) => {
                Some((0..r.len()).map(|i| r.get(i).map(str::to_string)).collect())
            }
            _ => None,
        })
        .collect();
    (rows, tag(&messages))
}

async fn both_fail(proxy: &Client, plain: &Client, sql: &str) -> SqlState {
    let a = proxy
        .simple_query(&sql.replace("{t}", "cx_t"))
        .await
        .expect_err(sql);
    let b = plain
        .simple_query(&sql.replace("{t}", "cx_t_ref"))
        .await
        .expect_err(sql);
    assert_eq!(code(&a), code(&b), "{sql}: {a} / {b}");
    code(&a)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cursors_over_several_shards_fetch_as_one_postgres() {
    let proxy = start();
    let c = proxy.connect().await;
    let plain = twin_tables(&c, "cx_t").await;

    // An ordered cursor in a block, read in steps of every forward kind.
    both(&c, &plain, "BEGIN").await;
    both(
        &c,
        &plain,
        "DECLARE cur NO SCROLL CURSOR FOR SELECT id, v, n FROM {t} ORDER BY n DESC NULLS LAST, id",
    )
    .await;
    let (rows, count) = both(&c, &plain, "FETCH 10 cur").await;
    assert_eq!((rows.len(), count), (10, 10));
    both(&c, &plain, "FETCH FORWARD 25 FROM cur").await;
    assert_eq!(both(&c, &plain, "MOVE 5 cur").await.1, 5);
    both(&c, &plain, "FETCH NEXT FROM cur").await;
    both(&c, &plain, "FETCH ABSOLUTE 60 cur").await;
    both(&c, &plain, "FETCH RELATIVE 3 cur").await;
    // The shards' cursors are visible where the client looks.
    let listed = simple_rows(&c, "SELECT name FROM pg_cursors WHERE name = 'cur'").await;
    assert_eq!(listed, [[Some("cur".to_string())]]);
    let (rows, _) = both(&c, &plain, "FETCH ALL cur").await;
    assert_eq!(rows.len(), 300 - 63);
    assert_eq!(both(&c, &plain, "FETCH cur").await.1, 0);
    assert_eq!(
        both_fail(&c, &plain, "FETCH PRIOR cur").await,
        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
    );
    // The refusal failed the block, as the error does on PostgreSQL.
    assert_eq!(
        both_fail(&c, &plain, "FETCH cur").await,
        SqlState::IN_FAILED_SQL_TRANSACTION
    );
    both(&c, &plain, "ROLLBACK").await;

    // LIMIT and OFFSET count over the merged rows.
    both(&c, &plain, "BEGIN").await;
    both(
        &c,
        &plain,
        "DECLARE lim CURSOR FOR SELECT id FROM {t} ORDER BY id DESC LIMIT 50 OFFSET 10",
    )
    .await;
    let (rows, _) = both(&c, &plain, "FETCH 7 lim").await;
    assert_eq!(rows[0][0].as_deref(), Some("290"));
    assert_eq!(both(&c, &plain, "FETCH ALL lim").await.0.len(), 43);
    both(&c, &plain, "CLOSE lim").await;
    assert_eq!(
        both_fail(&c, &plain, "FETCH lim").await,
        SqlState::INVALID_CURSOR_NAME
    );
    both(&c, &plain, "ROLLBACK").await;

    // The cursor ends with its block.
    both(&c, &plain, "BEGIN").await;
    both(
        &c,
        &plain,
        "DECLARE gone CURSOR FOR SELECT id FROM {t} ORDER BY id",
    )
    .await;
    both(&c, &plain, "FETCH 3 gone").await;
    both(&c, &plain, "COMMIT").await;
    both(&c, &plain, "BEGIN").await;
    assert_eq!(
        both_fail(&c, &plain, "FETCH gone").await,
        SqlState::INVALID_CURSOR_NAME
    );
    both(&c, &plain, "ROLLBACK").await;

    // WITH HOLD outlives its block, and needs none.
    both(
        &c,
        &plain,
        "DECLARE held CURSOR WITH HOLD FOR SELECT id, grp FROM {t} ORDER BY grp, id",
    )
    .await;
    both(&c, &plain, "FETCH 100 held").await;
    both(&c, &plain, "BEGIN").await;
    both(&c, &plain, "FETCH 50 held").await;
    both(&c, &plain, "COMMIT").await;
    assert_eq!(both(&c, &plain, "FETCH ALL held").await.0.len(), 150);
    both(&c, &plain, "CLOSE ALL").await;

    // Without HOLD, a cursor needs a block, as on PostgreSQL.
    assert_eq!(
        both_fail(
            &c,
            &plain,
            "DECLARE nb CURSOR FOR SELECT id FROM {t} ORDER BY id"
        )
        .await,
        SqlState::NO_ACTIVE_SQL_TRANSACTION
    );

    // Keyed: the one shard runs it.
    log_all_statements().await;
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("DECLARE k CURSOR FOR SELECT v FROM cx_t WHERE id = 42 /* cx-keyed */")
        .await
        .unwrap();
    let keyed = simple_rows(&c, "FETCH ALL k").await;
    assert_eq!(keyed.len(), 1);
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(shards_that_ran("cx-keyed").len(), 1);

    // A query the general path answers: its rows combined on one shard, a cursor over them
    // there, scrollable both ways when declared SCROLL.
    both(&c, &plain, "BEGIN").await;
    both(
        &c,
        &plain,
        "DECLARE agg SCROLL CURSOR FOR SELECT grp, count(*), sum(n), min(v) FROM {t} \
         GROUP BY grp ORDER BY grp",
    )
    .await;
    both(&c, &plain, "FETCH 2 agg").await;
    both(&c, &plain, "FETCH PRIOR agg").await;
    both(&c, &plain, "FETCH LAST agg").await;
    both(&c, &plain, "FETCH ABSOLUTE 1 agg").await;
    both(&c, &plain, "MOVE BACKWARD ALL agg").await;
    assert_eq!(both(&c, &plain, "FETCH ALL agg").await.0.len(), 5);
    both(&c, &plain, "CLOSE agg").await;
    both(
        &c,
        &plain,
        "DECLARE win NO SCROLL CURSOR FOR SELECT id, rank() OVER (PARTITION BY grp ORDER BY id) \
         FROM {t} ORDER BY id",
    )
    .await;
    both(&c, &plain, "FETCH 5 win").await;
    assert_eq!(
        both_fail(&c, &plain, "FETCH PRIOR win").await,
        SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE
    );
    both(&c, &plain, "ROLLBACK").await;
    // WITH HOLD, outside a block, until CLOSE ALL.
    both(
        &c,
        &plain,
        "DECLARE groups CURSOR WITH HOLD FOR SELECT DISTINCT grp FROM {t} ORDER BY grp DESC",
    )
    .await;
    both(&c, &plain, "FETCH 2 groups").await;
    both(&c, &plain, "FETCH ALL groups").await;
    both(&c, &plain, "CLOSE ALL").await;

    // SCROLL over a query the merge would stream: materialised on the combining shard too.
    both(&c, &plain, "BEGIN").await;
    both(
        &c,
        &plain,
        "DECLARE s SCROLL CURSOR FOR SELECT id, v FROM {t} WHERE id > 250 ORDER BY v, id",
    )
    .await;
    both(&c, &plain, "FETCH 10 s").await;
    both(&c, &plain, "FETCH BACKWARD 4 s").await;
    both(&c, &plain, "FETCH RELATIVE -2 s").await;
    both(&c, &plain, "FETCH LAST s").await;
    both(&c, &plain, "FETCH ABSOLUTE 3 s").await;
    both(&c, &plain, "MOVE FORWARD ALL s").await;
    both(&c, &plain, "FETCH PRIOR s").await;
    both(&c, &plain, "ROLLBACK").await;

    c.batch_execute("DROP TABLE cx_t").await.unwrap();
    plain.batch_execute("DROP TABLE cx_t_ref").await.unwrap();
}

/// Protocol-level portals read a few rows per Execute inside a block (pgjdbc's fetch size,
/// asyncpg's cursors): the rows come in order across Executes and Syncs, also when another
/// statement on the same shards comes between them, when a second portal is bound, and when
/// the block ends before the portal is spent; a shard failing late fails the block at the
/// Execute that reaches it. Each is also run on a plain copy of the rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn row_limited_portals_over_several_shards_read_as_one_postgres() {
    let proxy = start();
    let mut c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE lp_t (id bigint PRIMARY KEY, v int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         INSERT INTO lp_t SELECT i, i % 10 FROM generate_series(1, 5000) i",
    )
    .await;
    let mut plain = common::shards().connect(0).await;
    plain
        .batch_execute(
            "DROP TABLE IF EXISTS lp_t_ref;
             CREATE TABLE lp_t_ref (id bigint PRIMARY KEY, v int);
             INSERT INTO lp_t_ref SELECT i, i % 10 FROM generate_series(1, 5000) i",
        )
        .await
        .unwrap();
    for (client, table) in [(&mut c, "lp_t"), (&mut plain, "lp_t_ref")] {
        let tx = client.transaction().await.unwrap();
        let query = format!("SELECT id, v FROM {table} WHERE id > $1 ORDER BY v, id DESC");
        let portal = tx.bind(query.as_str(), &[&100i64]).await.unwrap();
        let mut got: Vec<(i64, i32)> = Vec::new();
        let mut batches = 0;
        loop {
            let rows = tx.query_portal(&portal, 333).await.unwrap();
            batches += 1;
            got.extend(rows.iter().map(|r| (r.get(0), r.get(1))));
            if batches == 3 {
                // Another statement on the same shards between two Executes.
                let n: i64 = tx
                    .query_one(&format!("SELECT count(*) FROM {table}"), &[])
                    .await
                    .unwrap()
                    .get(0);
                assert_eq!(n, 5000);
            }
            if rows.len() < 333 {
                break;
            }
        }
        let mut want: Vec<(i64, i32)> = (101..=5000).map(|i| (i, (i % 10) as i32)).collect();
        want.sort_by_key(|&(id, v)| (v, -id));
        assert_eq!(got, want, "{table}");
        // A second portal, and the block ends before it is spent.
        let second = tx
            .bind(format!("SELECT id FROM {table} ORDER BY id").as_str(), &[])
            .await
            .unwrap();
        let first = tx.query_portal(&second, 10).await.unwrap();
        assert_eq!(first.len(), 10);
        assert_eq!(first[9].get::<_, i64>(0), 10);
        tx.commit().await.unwrap();
        // A shard failing late: the block fails where the rows reach it.
        let tx = client.transaction().await.unwrap();
        let failing = format!("SELECT id, 1 / (id - 4000) FROM {table} ORDER BY id");
        let portal = tx.bind(failing.as_str(), &[]).await.unwrap();
        let mut error = None;
        for _ in 0..40 {
            match tx.query_portal(&portal, 200).await {
                Ok(rows) if rows.is_empty() => break,
                Ok(_) => {}
                Err(e) => {
                    error = Some(code(&e));
                    break;
                }
            }
        }
        assert_eq!(error, Some(SqlState::DIVISION_BY_ZERO), "{table}");
        let err = tx.query_one("SELECT 1", &[]).await.unwrap_err();
        assert_eq!(code(&err), SqlState::IN_FAILED_SQL_TRANSACTION, "{table}");
        tx.rollback().await.unwrap();
        let one: i32 = client.query_one("SELECT 1", &[]).await.unwrap().get(0);
        assert_eq!(one, 1);
    }
}

/// DISCARD ALL closes a WITH HOLD cursor over several shards, as it closes one on PostgreSQL;
/// in a block PostgreSQL refuses it and the cursor stays.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn discard_all_closes_the_cursors_the_proxy_follows() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE dc_t (id bigint PRIMARY KEY, v int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         INSERT INTO dc_t SELECT i, i % 3 FROM generate_series(1, 100) i",
    )
    .await;
    let plain = common::shards().connect(0).await;
    plain
        .batch_execute(
            "DROP TABLE IF EXISTS dc_t_ref;
             CREATE TABLE dc_t_ref (id bigint PRIMARY KEY, v int);
             INSERT INTO dc_t_ref SELECT i, i % 3 FROM generate_series(1, 100) i",
        )
        .await
        .unwrap();
    for (client, table) in [(&c, "dc_t"), (&plain, "dc_t_ref")] {
        exec(
            client,
            &format!("DECLARE h CURSOR WITH HOLD FOR SELECT id FROM {table} ORDER BY v, id"),
        )
        .await;
        assert_eq!(
            simple_rows(client, "FETCH 2 FROM h").await.len(),
            2,
            "{table}"
        );
        exec(client, "BEGIN").await;
        let err = client.simple_query("DISCARD ALL").await.unwrap_err();
        assert_eq!(code(&err), SqlState::ACTIVE_SQL_TRANSACTION, "{table}");
        exec(client, "ROLLBACK").await;
        assert_eq!(
            simple_rows(client, "FETCH 2 FROM h").await.len(),
            2,
            "{table}"
        );
        exec(client, "DISCARD ALL").await;
        let err = client.simple_query("FETCH 2 FROM h").await.unwrap_err();
        assert_eq!(code(&err), SqlState::INVALID_CURSOR_NAME, "{table}");
    }
}

/// `pg_cursors` read through the proxy lists every cursor of the session as one PostgreSQL
/// lists them, wherever the proxy keeps them: merged over several shards, held on a combining
/// connection (SCROLL, an aggregate), or declared on the one shard its key names.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn pg_cursors_lists_every_cursor_of_the_session() {
    let proxy = start();
    let c = proxy.connect().await;
    let plain = twin_tables(&c, "pc_t").await;
    let both = |sql: &'static str| {
        let (c, plain) = (&c, &plain);
        async move {
            let through = run(c, &sql.replace("{t}", "pc_t")).await;
            let reference = run(plain, &sql.replace("{t}", "pc_t_ref")).await;
            assert_eq!(through, reference, "{sql}");
            through
        }
    };
    both("DECLARE held NO SCROLL CURSOR WITH HOLD FOR SELECT id FROM {t} ORDER BY v, id").await;
    both("BEGIN").await;
    both("DECLARE merged NO SCROLL CURSOR FOR SELECT id FROM {t} ORDER BY v, id").await;
    both("DECLARE scrolled SCROLL CURSOR FOR SELECT id FROM {t} ORDER BY id").await;
    both("DECLARE keyed NO SCROLL CURSOR FOR SELECT * FROM {t} WHERE id = 5").await;
    both("DECLARE counted BINARY NO SCROLL CURSOR FOR SELECT grp, count(*) FROM {t} GROUP BY grp")
        .await;
    both("FETCH 3 FROM scrolled").await;
    let (listed, _) = both(
        "SELECT name, replace(statement, '{t}', 'T'), is_holdable, is_binary, is_scrollable, \
                creation_time > clock_timestamp() - interval '1 minute' \
           FROM pg_cursors ORDER BY name",
    )
    .await;
    let names: Vec<_> = listed.iter().map(|r| r[0].as_deref().unwrap()).collect();
    assert_eq!(names, ["counted", "held", "keyed", "merged", "scrolled"]);
    // Qualified, aliased, filtered, in a subquery: read as PostgreSQL's view.
    both(
        "SELECT c.name FROM pg_catalog.pg_cursors AS c WHERE c.is_scrollable \
          AND c.name IN (SELECT name FROM pg_cursors WHERE NOT is_holdable) ORDER BY 1",
    )
    .await;
    both("CLOSE scrolled").await;
    both("SELECT count(*) FROM pg_cursors").await;
    both("COMMIT").await;
    let (rows, _) = both("SELECT name, is_holdable FROM pg_cursors").await;
    assert_eq!(rows, [[Some("held".to_string()), Some("t".to_string())]]);
    both(
        "SELECT pg_typeof(name), pg_typeof(statement), pg_typeof(is_holdable), \
                pg_typeof(is_binary), pg_typeof(is_scrollable), pg_typeof(creation_time) \
           FROM pg_cursors",
    )
    .await;
    both("CLOSE held").await;
    both("SELECT * FROM pg_cursors").await;
}
