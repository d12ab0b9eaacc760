//! Reads over several shards answered as one PostgreSQL holding every row would answer them:
//! merged ORDER BY, LIMIT/OFFSET, text and binary results, and refusals instead of wrong orders.
mod common;
mod routing_common;

use routing_common::*;
use tokio_postgres::error::SqlState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_reads_answer_as_one_postgres() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "gather_t").await;
    let queries = [
        "SELECT id, v FROM gather_t ORDER BY id",
        "SELECT id, v FROM gather_t ORDER BY v, id",
        "SELECT id, v FROM gather_t ORDER BY v DESC, id DESC",
        "SELECT id, v FROM gather_t ORDER BY v NULLS FIRST, id LIMIT 20",
        "SELECT id, v FROM gather_t ORDER BY v DESC NULLS LAST, id LIMIT 17 OFFSET 5",
        "SELECT id FROM gather_t ORDER BY n, id",
        "SELECT id FROM gather_t ORDER BY n DESC NULLS LAST, id",
        "SELECT id, grp FROM gather_t WHERE grp = 3 ORDER BY v NULLS FIRST, id DESC",
        "SELECT id FROM gather_t ORDER BY grp, n DESC, id OFFSET 290",
        "SELECT id * 2 AS twice FROM gather_t ORDER BY twice DESC LIMIT 3",
        "SELECT id, v FROM gather_t ORDER BY 2, 1 LIMIT 10",
        "SELECT id FROM gather_t WHERE id IN (1, 2, 3, 250) ORDER BY id DESC",
        "SELECT id FROM gather_t ORDER BY id LIMIT 0",
    ];
    for q in queries {
        let got = simple_rows(&client, q).await;
        let want = simple_rows(&plain, &q.replace("gather_t", "gather_t_ref")).await;
        assert_eq!(got, want, "{q}");
    }
    // Without ORDER BY: the same rows in some order, and the count in the tag.
    let mut got = simple_rows(&client, "SELECT id FROM gather_t WHERE grp = 1").await;
    got.sort();
    let mut want = simple_rows(&plain, "SELECT id FROM gather_t_ref WHERE grp = 1").await;
    want.sort();
    assert_eq!(got, want);
    let msgs = client
        .simple_query("SELECT id FROM gather_t")
        .await
        .expect("all rows");
    assert_eq!(tag(&msgs), 300);
    // Aggregates across shards are answered by the general path (tests/combine.rs), as one
    // PostgreSQL answers them.
    for q in [
        "SELECT count(*) FROM gather_t",
        "SELECT grp, max(id) FROM gather_t GROUP BY grp ORDER BY grp",
        "SELECT DISTINCT grp FROM gather_t ORDER BY grp",
    ] {
        let got = simple_rows(&client, q).await;
        let want = simple_rows(&plain, &q.replace("gather_t", "gather_t_ref")).await;
        assert_eq!(got, want, "{q}");
    }
    // With the whole key they run on its shard.
    let r = simple_rows(&client, "SELECT count(*) FROM gather_t WHERE id = 5").await;
    assert_eq!(r, vec![vec![Some("1".into())]]);
    // Writes without the key reach every shard; the tag adds their counts up.
    let msgs = client
        .simple_query("UPDATE gather_t SET v = 'x' WHERE grp = 2")
        .await
        .expect("update everywhere");
    assert_eq!(tag(&msgs), 60);
    let msgs = client
        .simple_query("DELETE FROM gather_t WHERE grp = 4")
        .await
        .expect("delete everywhere");
    assert_eq!(tag(&msgs), 60);
    assert_eq!(counts("gather_t").await.iter().sum::<i64>(), 240);
    // RETURNING rows of a split INSERT come back in VALUES order.
    let r = simple_rows(
        &client,
        "INSERT INTO gather_t (id, grp) VALUES (1001, 0), (1002, 0), (1003, 0), (1004, 0), \
         (1005, 0) RETURNING id",
    )
    .await;
    let ids: Vec<String> = r.into_iter().map(|r| r[0].clone().unwrap()).collect();
    assert_eq!(ids, ["1001", "1002", "1003", "1004", "1005"]);
    client
        .batch_execute("DROP TABLE gather_t")
        .await
        .expect("drop");
    plain
        .batch_execute("DROP TABLE gather_t_ref")
        .await
        .expect("drop ref");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_prepared_statements_answer_in_binary_as_one_postgres() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "bin_t").await;
    let queries = [
        "SELECT id, v FROM bin_t ORDER BY id",
        "SELECT id, v FROM bin_t ORDER BY v DESC NULLS LAST, id",
        "SELECT id, v FROM bin_t ORDER BY n NULLS FIRST, id LIMIT 25 OFFSET 3",
        "SELECT id, v FROM bin_t WHERE grp = $1 ORDER BY v, id DESC",
        "SELECT id, v FROM bin_t WHERE id IN (3, 4, 5, 6) ORDER BY id",
    ];
    for q in queries {
        let params: Vec<&(dyn tokio_postgres::types::ToSql + Sync)> = if q.contains("$1") {
            vec![&2i32]
        } else {
            vec![]
        };
        let got = binary_rows(&client, q, &params).await;
        let want = binary_rows(&plain, &q.replace("bin_t", "bin_t_ref"), &params).await;
        assert_eq!(got, want, "{q}");
    }
    // An array of keys over several shards runs on exactly those, merged.
    let ids: Vec<i32> = (1..=12).collect();
    let q = "SELECT id, v FROM bin_t WHERE id = ANY($1) ORDER BY id DESC";
    let got = binary_rows(&client, q, &[&ids]).await;
    let want = binary_rows(&plain, &q.replace("bin_t", "bin_t_ref"), &[&ids]).await;
    assert_eq!(got, want, "{q}");
    assert_eq!(got.len(), 12);
    // A prepared statement executed again and again keeps answering.
    let stmt = client
        .prepare("SELECT id, v FROM bin_t WHERE grp = $1 ORDER BY id DESC LIMIT 3")
        .await
        .expect("prepare");
    for g in 0..5i32 {
        let got: Vec<i32> = client
            .query(&stmt, &[&g])
            .await
            .expect("query")
            .iter()
            .map(|r| r.get(0))
            .collect();
        let want: Vec<i32> = plain
            .query(
                "SELECT id FROM bin_t_ref WHERE grp = $1 ORDER BY id DESC LIMIT 3",
                &[&g],
            )
            .await
            .expect("reference")
            .iter()
            .map(|r| r.get(0))
            .collect();
        assert_eq!(got, want, "grp {g}");
    }
    // Writes without the key through a prepared statement reach every shard.
    let n = client
        .execute("UPDATE bin_t SET v = $1 WHERE grp = $2", &[&"w", &1i32])
        .await
        .expect("update");
    assert_eq!(n, 60);
    // Aggregates are answered there too (the general path, tests/combine.rs).
    let n: i64 = client
        .query_one("SELECT count(*) FROM bin_t WHERE grp = $1", &[&1i32])
        .await
        .expect("aggregate across shards")
        .get(0);
    assert_eq!(n, 60);
    let one: i32 = client
        .query_one("SELECT 1", &[])
        .await
        .expect("select 1")
        .get(0);
    assert_eq!(one, 1);
    // Inside a transaction block, a multi-shard read sees the block's writes.
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .execute("INSERT INTO bin_t (id, grp) VALUES ($1, 9)", &[&5000i32])
        .await
        .expect("insert");
    let rows = client
        .query("SELECT id, v FROM bin_t WHERE grp = $1", &[&9i32])
        .await
        .expect("read in block");
    assert_eq!(rows.len(), 1);
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let rows = client
        .query("SELECT id, v FROM bin_t WHERE grp = $1", &[&9i32])
        .await
        .expect("read after rollback");
    assert!(rows.is_empty());
    client
        .batch_execute("DROP TABLE bin_t")
        .await
        .expect("drop");
    plain
        .batch_execute("DROP TABLE bin_t_ref")
        .await
        .expect("drop ref");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_merge_never_orders_text_by_another_collation() {
    let proxy = start();
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE coll_t (id int PRIMARY KEY, name text, label text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .expect("create");
    client
        .batch_execute("ALTER TABLE coll_t ALTER COLUMN label TYPE text COLLATE \"und-x-icu\"")
        .await
        .expect("an ICU collation on one column");
    client
        .simple_query("INSERT INTO coll_t VALUES (1, 'b', 'b'), (2, 'a', 'B'), (3, 'C', 'a')")
        .await
        .expect("insert");
    // The database's collation (C in the test clusters) is byte order: merged by the proxy.
    let r = simple_rows(&client, "SELECT id FROM coll_t ORDER BY name").await;
    assert_eq!(
        r,
        vec![
            vec![Some("3".into())],
            vec![Some("2".into())],
            vec![Some("1".into())]
        ]
    );
    // A column in another collation is refused rather than ordered wrongly, in both protocols.
    let err = client
        .simple_query("SELECT id FROM coll_t ORDER BY label")
        .await
        .expect_err("ICU order across shards");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    let err = client
        .query("SELECT id, label FROM coll_t ORDER BY label", &[])
        .await
        .expect_err("ICU order across shards, prepared");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    // With the key it runs on one shard, which sorts as it always does.
    let r = simple_rows(
        &client,
        "SELECT label FROM coll_t WHERE id = 1 ORDER BY label",
    )
    .await;
    assert_eq!(r, vec![vec![Some("b".into())]]);
    client
        .batch_execute("DROP TABLE coll_t")
        .await
        .expect("drop");
}

/// Rows of a read over several shards reach the client while a later shard is still working:
/// the proxy streams them rather than waiting for every shard. The last shard is held up by an
/// advisory lock taken on it directly; the first rows must arrive before the lock is released.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn multi_shard_rows_reach_the_client_while_a_shard_still_works() {
    use futures::{pin_mut, StreamExt};
    use std::time::Duration;
    use tokio_postgres::SimpleQueryMessage;

    let proxy = start();
    let client = proxy.connect().await;
    create_customers(&client, "stream_t").await;
    let rows: Vec<String> = (1..=400).map(|i| format!("({i}, 'n{i}', {i})")).collect();
    insert_rows(&client, "stream_t", "cust_id, name, score", &rows).await;
    let per_shard = counts("stream_t").await;
    assert!(per_shard.iter().all(|&n| n > 0), "{per_shard:?}");
    let last = common::shards().connect(SHARDS - 1).await;
    // Each row waits for a shared lock the last shard cannot give while this one holds it.
    let q = "SELECT cust_id, pg_advisory_xact_lock_shared(4242)::text AS waited FROM stream_t";
    let patience = Duration::from_secs(60);

    last.batch_execute("SELECT pg_advisory_lock(4242)")
        .await
        .expect("lock");
    let messages = client.simple_query_raw(q).await.expect("simple query");
    pin_mut!(messages);
    let first = tokio::time::timeout(patience, messages.next())
        .await
        .expect("no row arrived while the last shard waited: the read is not streamed");
    assert!(matches!(
        first,
        Some(Ok(SimpleQueryMessage::RowDescription(_)))
    ));
    let row = tokio::time::timeout(patience, messages.next())
        .await
        .expect("no row arrived while the last shard waited");
    assert!(matches!(row, Some(Ok(SimpleQueryMessage::Row(_)))));
    last.batch_execute("SELECT pg_advisory_unlock(4242)")
        .await
        .expect("unlock");
    let mut n = 1;
    let mut tag = None;
    while let Some(m) = messages.next().await {
        match m.expect("rest of the rows") {
            SimpleQueryMessage::Row(_) => n += 1,
            SimpleQueryMessage::CommandComplete(c) => tag = Some(c),
            _ => {}
        }
    }
    assert_eq!((n, tag), (400, Some(400)));

    // The same through the extended protocol (an Execute without a row limit), binary results.
    last.batch_execute("SELECT pg_advisory_lock(4242)")
        .await
        .expect("lock");
    let none: [&(dyn tokio_postgres::types::ToSql + Sync); 0] = [];
    let rows = client.query_raw(q, none).await.expect("extended query");
    pin_mut!(rows);
    let row = tokio::time::timeout(patience, rows.next())
        .await
        .expect("no row arrived while the last shard waited: the portal is not streamed");
    let first_id: i64 = row.expect("a row").expect("row").get(0);
    assert!(first_id > 0);
    last.batch_execute("SELECT pg_advisory_unlock(4242)")
        .await
        .expect("unlock");
    let mut n = 1;
    while let Some(r) = rows.next().await {
        r.expect("rest of the rows");
        n += 1;
    }
    assert_eq!(n, 400);
    assert_eq!(rows.rows_affected(), Some(400));
    // The session goes on.
    let r = simple_rows(&client, "SELECT name FROM stream_t WHERE cust_id = 7").await;
    assert_eq!(r, vec![vec![Some("n7".into())]]);
}

/// A multi-shard portal read a few rows at a time inside a transaction block (a driver's fetch
/// size), with other statements run between the fetches, returns what one PostgreSQL returns.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_multi_shard_portal_is_read_a_few_rows_at_a_time() {
    let proxy = start();
    let mut client = proxy.connect().await;
    let plain = twin_tables(&client, "fetch_t").await;
    let q = "SELECT id, v FROM fetch_t ORDER BY v NULLS FIRST, id DESC";
    let want = binary_rows(&plain, &q.replace("fetch_t", "fetch_t_ref"), &[]).await;
    let tx = client.transaction().await.expect("begin");
    let portal = tx.bind(q, &[]).await.expect("bind");
    let mut got: Vec<(i32, Option<String>)> = Vec::new();
    loop {
        let batch = tx.query_portal(&portal, 70).await.expect("fetch");
        if batch.is_empty() {
            break;
        }
        assert!(batch.len() <= 70);
        got.extend(batch.iter().map(|r| (r.get(0), r.get(1))));
        // Another statement between fetches, on one shard and on all of them.
        let one = tx
            .query_one("SELECT v FROM fetch_t WHERE id = $1", &[&5i32])
            .await
            .expect("keyed read between fetches");
        let _: Option<String> = one.get(0);
        tx.query("SELECT id FROM fetch_t WHERE grp = 2", &[])
            .await
            .expect("multi-shard read between fetches");
    }
    assert_eq!(got, want);
    tx.commit().await.expect("commit");
}
