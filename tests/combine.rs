//! The general path of reads over several shards: PostgreSQL itself combines the shards' rows,
//! so aggregates, GROUP BY, HAVING, window functions, subqueries, set operations and joins
//! across families answer as one PostgreSQL holding every row would.
mod common;
mod routing_common;

use routing_common::*;
use tokio_postgres::error::SqlState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_general_path_answers_as_one_postgres() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "comb_t").await;
    let queries = [
        "SELECT count(*) FROM comb_t",
        "SELECT count(*), sum(id), avg(id), min(v), max(n) FROM comb_t",
        "SELECT grp, count(*), sum(n), avg(n) FROM comb_t GROUP BY grp ORDER BY grp",
        "SELECT grp, string_agg(v, ',' ORDER BY v, id) FROM comb_t GROUP BY grp ORDER BY 1",
        "SELECT grp FROM comb_t GROUP BY grp HAVING sum(id) > 9000 ORDER BY grp",
        "SELECT DISTINCT grp FROM comb_t ORDER BY grp",
        "SELECT id, rank() OVER (PARTITION BY grp ORDER BY n DESC NULLS LAST, id) FROM comb_t \
         ORDER BY id",
        "SELECT id FROM comb_t WHERE n > (SELECT avg(n) FROM comb_t) ORDER BY id",
        "SELECT grp, id FROM comb_t WHERE id < 20 UNION SELECT grp, id FROM comb_t WHERE id > 290 \
         ORDER BY 2",
        "WITH g AS (SELECT grp, max(id) AS top FROM comb_t GROUP BY grp) \
         SELECT g.grp, t.v FROM g JOIN comb_t t ON t.id = g.top ORDER BY 1",
        "SELECT round(avg(id), 2), sum(n) / count(n) FROM comb_t WHERE grp = 2",
        "SELECT count(DISTINCT v) FROM comb_t",
        "SELECT a.id, b.id FROM comb_t a JOIN comb_t b ON a.grp = b.grp AND b.id = a.id + 5 \
         WHERE a.id < 30 ORDER BY 1, 2",
        // Groups that contain the sharding key are the shards' own: merged, not combined.
        "SELECT id, count(*), max(v) FROM comb_t GROUP BY id ORDER BY count(*) DESC, id LIMIT 7",
        "SELECT id, grp, sum(n) FROM comb_t GROUP BY grp, id HAVING sum(n) > 0 ORDER BY 3 DESC, 1 LIMIT 12",
        "SELECT DISTINCT id, grp FROM comb_t WHERE id > 250 ORDER BY grp, id",
    ];
    for q in queries {
        let got = simple_rows(&client, q).await;
        let want = simple_rows(&plain, &q.replace("comb_t", "comb_t_ref")).await;
        assert_eq!(got, want, "{q}");
    }
    // Prepared, with parameters, in binary.
    let sql = "SELECT grp, count(*)::int4, max(v) FROM comb_t WHERE id > $1 GROUP BY grp \
               HAVING count(*) > $2 ORDER BY grp";
    let rows = |r: Vec<tokio_postgres::Row>| -> Vec<(i32, i32, Option<String>)> {
        r.iter().map(|r| (r.get(0), r.get(1), r.get(2))).collect()
    };
    let got = rows(
        client
            .query(sql, &[&100i32, &3i64])
            .await
            .expect("prepared"),
    );
    let want = rows(
        plain
            .query(&sql.replace("comb_t", "comb_t_ref"), &[&100i32, &3i64])
            .await
            .expect("direct"),
    );
    assert_eq!(got, want);
    assert_eq!(got.len(), 5);

    // A transaction block sees its own writes on every shard.
    client.batch_execute("BEGIN").await.expect("begin");
    client
        .batch_execute("DELETE FROM comb_t WHERE grp = 1")
        .await
        .expect("delete in block");
    let r = simple_rows(&client, "SELECT count(*) FROM comb_t").await;
    assert_eq!(r, vec![vec![Some("240".into())]]);
    client.batch_execute("ROLLBACK").await.expect("rollback");
    let r = simple_rows(&client, "SELECT count(*) FROM comb_t").await;
    assert_eq!(r, vec![vec![Some("300".into())]]);

    // What the general path refuses is named, and the session goes on.
    let err = client
        .simple_query("SELECT grp, count(*) FROM comb_t GROUP BY grp FOR UPDATE")
        .await
        .expect_err("locking");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    let r = simple_rows(&client, "SELECT count(*) FROM comb_t WHERE id = 7").await;
    assert_eq!(r, vec![vec![Some("1".into())]]);

    // A table named where the router does not look is still found: a subquery inside
    // GREATEST reads every shard; CREATE TABLE … AS over a sharded table, which would read
    // one shard's rows, is refused (views over it are tests/views.rs's).
    let r = simple_rows(&client, "SELECT greatest((SELECT max(id) FROM comb_t), 0)").await;
    assert_eq!(r, vec![vec![Some("300".into())]]);
    let err = client
        .simple_query("CREATE TABLE comb_copy AS SELECT * FROM comb_t")
        .await
        .expect_err("CREATE TABLE AS over a sharded table");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");

    // EXPLAIN says which path a query takes and what each shard runs.
    let plan = |rows: Vec<Vec<Option<String>>>| -> Vec<String> {
        rows.into_iter()
            .map(|r| r[0].clone().unwrap_or_default())
            .collect()
    };
    let partial = plan(
        simple_rows(
            &client,
            "EXPLAIN SELECT grp, count(*) FROM comb_t WHERE id < 50 GROUP BY grp",
        )
        .await,
    );
    assert_eq!(partial[0], "Shardwire Aggregate Merge", "{partial:?}");
    assert!(
        partial.contains(&"  Shardwire General Path (partial aggregation)".to_string()),
        "{partial:?}"
    );
    assert!(
        partial.contains(
            &"    Shard SQL: SELECT grp AS g1, count(*) AS p1 FROM comb_t WHERE id < 50 GROUP BY grp"
                .to_string()
        ),
        "{partial:?}"
    );
    let general = plan(
        simple_rows(
            &client,
            "EXPLAIN SELECT grp, string_agg(v, ',') FROM comb_t WHERE id < 50 GROUP BY grp",
        )
        .await,
    );
    assert_eq!(general[0], "Shardwire General Path", "{general:?}");
    assert!(
        general
            .iter()
            .any(|l| l.contains("Rows of public.comb_t") && l.contains("WHERE (id < 50)")),
        "{general:?}"
    );
    assert!(general.iter().any(|l| l.starts_with("  Combining SQL: SELECT grp, string_agg(v, ',') FROM pg_temp.")), "{general:?}");
    let merge = plan(
        simple_rows(
            &client,
            "EXPLAIN SELECT id FROM comb_t ORDER BY id DESC LIMIT 5",
        )
        .await,
    );
    assert_eq!(merge[0], "Shardwire Streaming Merge", "{merge:?}");
    assert!(
        merge.contains(&"  Shards: s1, s2, s3, s4".to_string()),
        "{merge:?}"
    );
    assert!(
        merge.contains(&"  Merge: ORDER BY column 1 DESC; LIMIT 5".to_string()),
        "{merge:?}"
    );
    let local = plan(
        simple_rows(
            &client,
            "EXPLAIN SELECT id, count(*) FROM comb_t GROUP BY id ORDER BY 2 DESC LIMIT 3",
        )
        .await,
    );
    assert_eq!(local[0], "Shardwire Streaming Merge", "{local:?}");
    let single = plan(simple_rows(&client, "EXPLAIN SELECT v FROM comb_t WHERE id = 5").await);
    assert!(
        single.iter().any(|l| l.contains("Scan")),
        "the shard's own plan: {single:?}"
    );
    let prepared = client
        .query(
            "EXPLAIN SELECT count(*) FROM comb_t WHERE grp = $1",
            &[&1i32],
        )
        .await
        .expect("prepared explain");
    assert_eq!(prepared[0].get::<_, String>(0), "Shardwire Aggregate Merge");
    let err = client
        .simple_query("EXPLAIN (ANALYZE, FORMAT JSON) SELECT count(*) FROM comb_t")
        .await
        .expect_err("analyze over several shards in JSON");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    client
        .batch_execute("DROP TABLE comb_t")
        .await
        .expect("drop");
}

/// EXPLAIN ANALYZE of a statement each shard runs as it is: the proxy's plan, then each shard's
/// own EXPLAIN ANALYZE under its name, then the proxy's time. A write runs, as on PostgreSQL,
/// with the statement's atomicity (one distributed transaction, or the client's block).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn explain_analyze_shows_every_shards_run() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "comb_xa").await;
    let lines = |rows: Vec<Vec<Option<String>>>| -> Vec<String> {
        rows.into_iter()
            .map(|r| r[0].clone().unwrap_or_default())
            .collect()
    };
    let read = lines(
        simple_rows(
            &client,
            "EXPLAIN (ANALYZE, BUFFERS) SELECT id FROM comb_xa WHERE v IS NOT NULL ORDER BY id \
             LIMIT 5",
        )
        .await,
    );
    assert_eq!(read[0], "Shardwire Streaming Merge", "{read:?}");
    for shard in ["s1", "s2", "s3", "s4"] {
        let at = read
            .iter()
            .position(|l| *l == format!("  On shard {shard}:"))
            .unwrap_or_else(|| panic!("{shard}: {read:?}"));
        assert!(read[at + 1].contains("actual time="), "{read:?}");
    }
    assert!(read.iter().any(|l| l.contains("Buffers:")), "{read:?}");
    assert!(
        read.last()
            .unwrap()
            .starts_with("  Proxy: all 4 shards answered in "),
        "{read:?}"
    );

    // A write runs: its rows change on the shards, as the same EXPLAIN ANALYZE changes them on
    // one PostgreSQL.
    let update = "EXPLAIN ANALYZE UPDATE {t} SET v = 'xa' WHERE grp = 1";
    let write = lines(simple_rows(&client, &update.replace("{t}", "comb_xa")).await);
    simple_rows(&plain, &update.replace("{t}", "comb_xa_ref")).await;
    assert_eq!(
        write[0],
        "Shardwire Write on Several Shards (one distributed transaction)"
    );
    assert!(write.iter().any(|l| l.contains("Update on")), "{write:?}");
    let changed: i64 = counts_where("comb_xa", "WHERE v = 'xa'").await.iter().sum();
    let want: i64 = plain
        .query_one("SELECT count(*) FROM comb_xa_ref WHERE v = 'xa'", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!((changed, want), (60, 60));
    // Inside a block that rolls back, nothing stays.
    client
        .batch_execute("BEGIN; EXPLAIN ANALYZE DELETE FROM comb_xa WHERE grp = 2; ROLLBACK")
        .await
        .expect("explain analyze in a block");
    assert_eq!(counts("comb_xa").await.iter().sum::<i64>(), 300);
    // A shard's error fails it everywhere: no shard keeps its part.
    let before = counts_where("comb_xa", "WHERE n = 0").await;
    let e = client
        .simple_query("EXPLAIN ANALYZE UPDATE comb_xa SET n = 1 / (id - 7)")
        .await
        .expect_err("division by zero on one shard");
    assert_eq!(e.code(), Some(&SqlState::DIVISION_BY_ZERO), "{e}");
    assert_eq!(
        counts_where("comb_xa", "WHERE n = 0").await,
        before,
        "rolled back on every shard"
    );

    // On the general path: each table's pull on its shards, then the combining statement.
    let general = lines(
        simple_rows(
            &client,
            "EXPLAIN ANALYZE SELECT grp, count(*), string_agg(v, ',' ORDER BY id) FROM comb_xa \
             GROUP BY grp ORDER BY grp",
        )
        .await,
    );
    assert_eq!(general[0], "Shardwire General Path", "{general:?}");
    assert!(
        general
            .iter()
            .any(|l| l.starts_with("  Rows into pg_temp.")),
        "{general:?}"
    );
    for shard in ["s1", "s2", "s3", "s4"] {
        assert!(
            general.contains(&format!("  On shard {shard}:")),
            "{shard}: {general:?}"
        );
    }
    let at = general
        .iter()
        .position(|l| l.starts_with("  Combining on "))
        .unwrap_or_else(|| panic!("{general:?}"));
    assert!(
        general[at + 1..].iter().any(|l| l.contains("actual time=")),
        "{general:?}"
    );
    assert!(
        general
            .last()
            .unwrap()
            .starts_with("  Proxy: rows loaded and combined in "),
        "{general:?}"
    );
    let refused = "EXPLAIN (ANALYZE, FORMAT JSON) SELECT id FROM comb_xa ORDER BY id";
    let e = client.simple_query(refused).await.expect_err(refused);
    assert_eq!(e.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{e}");
    client.batch_execute("DROP TABLE comb_xa").await.unwrap();
    plain.batch_execute("DROP TABLE comb_xa_ref").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_combining_step_is_bounded_by_its_row_limit() {
    common::use_shards(SHARDS);
    let proxy = common::TestProxy::start_with(|c| c.queries.combine_row_limit = 100);
    let client = proxy.connect().await;
    let _plain = twin_tables(&client, "comb_lim").await;
    let err = client
        .simple_query("SELECT string_agg(v, ',' ORDER BY id) FROM comb_lim")
        .await
        .expect_err("over the limit");
    assert_eq!(err.code(), Some(&SqlState::PROGRAM_LIMIT_EXCEEDED), "{err}");
    let text = err
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    assert!(text.contains("combine_row_limit"), "{text}");
    // Grouped reads aggregate on the shards first: a row per group and shard is combined.
    let r = simple_rows(
        &client,
        "SELECT grp, count(*) FROM comb_lim GROUP BY grp ORDER BY grp",
    )
    .await;
    assert_eq!(r.len(), 5);
    assert!(r.iter().all(|row| row[1].as_deref() == Some("60")), "{r:?}");
    // Conditions on the table are read on the shards: fewer rows come to the combining step.
    let r = simple_rows(
        &client,
        "SELECT array_agg(id ORDER BY id) FROM comb_lim WHERE id <= 50",
    )
    .await;
    let want: Vec<String> = (1..=50).map(|i| i.to_string()).collect();
    assert_eq!(r, vec![vec![Some(format!("{{{}}}", want.join(",")))]]);
    client
        .batch_execute("DROP TABLE comb_lim")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_proxy_merges_grouped_reads_itself() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "comb_agg").await;
    log_all_statements().await;
    let queries = [
        "SELECT grp AS agg_marker_a, count(*), sum(id), min(v), max(n), sum(n) FROM comb_agg \
         GROUP BY grp ORDER BY grp DESC",
        "SELECT count(*) AS agg_marker_b, sum(id), min(id), max(v), count(v) FROM comb_agg WHERE id > 17",
        "SELECT v AS agg_marker_c, count(*) FROM comb_agg GROUP BY v ORDER BY 2 DESC, 1 NULLS FIRST \
         LIMIT 5 OFFSET 2",
    ];
    for q in queries {
        let got = simple_rows(&client, q).await;
        let want = simple_rows(&plain, &q.replace("comb_agg", "comb_agg_ref")).await;
        assert_eq!(got, want, "{q}");
    }
    // Prepared, in binary: merged the same way; a numeric sum in binary goes to the general
    // path, with the same answer.
    let sql = "SELECT grp AS agg_marker_d, count(*), sum(id), max(v) FROM comb_agg WHERE id > $1 \
               GROUP BY grp ORDER BY grp";
    type Row = (i32, i64, Option<i64>, Option<String>);
    let read = |r: Vec<tokio_postgres::Row>| -> Vec<Row> {
        r.iter()
            .map(|r| (r.get(0), r.get(1), r.get(2), r.get(3)))
            .collect()
    };
    let got = read(client.query(sql, &[&10i32]).await.expect("prepared"));
    let want = read(
        plain
            .query(&sql.replace("comb_agg", "comb_agg_ref"), &[&10i32])
            .await
            .expect("direct"),
    );
    assert_eq!(got, want);
    let sums = "SELECT grp, sum(n)::text FROM comb_agg GROUP BY grp ORDER BY grp";
    let text = |r: Vec<tokio_postgres::Row>| -> Vec<(i32, Option<String>)> {
        r.iter().map(|r| (r.get(0), r.get(1))).collect()
    };
    assert_eq!(
        text(client.query(sums, &[]).await.expect("numeric sums")),
        text(
            plain
                .query(&sums.replace("comb_agg", "comb_agg_ref"), &[])
                .await
                .expect("direct")
        )
    );
    // Every shard ran the grouped statement itself, and no combining step ran.
    for marker in [
        "agg_marker_a",
        "agg_marker_b",
        "agg_marker_c",
        "agg_marker_d",
    ] {
        assert_eq!(shards_that_ran(marker).len(), SHARDS, "{marker}");
        for i in 0..SHARDS {
            let log = std::fs::read_to_string(common::shards().clusters[i].log_file())
                .unwrap_or_default();
            assert!(
                !log.lines()
                    .any(|l| l.contains(marker) && l.contains("pg_temp.")),
                "{marker} took the general path on shard {i}"
            );
        }
    }
    client
        .batch_execute("DROP TABLE comb_agg")
        .await
        .expect("drop");
}
