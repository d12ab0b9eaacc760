//! Pruning and constant conversion seen on the shards: range, list and composite predicates and
//! `= ANY` arrays reach only the shards that can hold matching rows; constants of every key type
//! are read as PostgreSQL reads them.

mod common;
mod routing_common;

use std::collections::{BTreeMap, BTreeSet};

use common::shards;
use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn predicates_reach_only_the_shards_that_can_hold_matching_rows() {
    let proxy = start();
    let client = proxy.connect().await;
    tablespaces(&client, "rt").await;
    exec(
        &client,
        "CREATE SHARDED TABLE rt_range (k bigint NOT NULL, v text) PARTITION BY RANGE (k) \
         (PARTITION p_1 VALUES LESS THAN (100) TABLESPACE rt_t1, \
          PARTITION p_2 VALUES LESS THAN (200) TABLESPACE rt_t2, \
          PARTITION p_3 VALUES LESS THAN (300) TABLESPACE rt_t3, \
          PARTITION p_4 VALUES LESS THAN (MAXVALUE) TABLESPACE rt_t4);
         CREATE SHARDED TABLE rt_date (d date NOT NULL, v text) PARTITION BY RANGE (d) \
         (PARTITION p_1 VALUES LESS THAN ('2024-01-01') TABLESPACE rt_t1, \
          PARTITION p_2 VALUES LESS THAN ('2024-07-01') TABLESPACE rt_t2, \
          PARTITION p_3 VALUES LESS THAN (MAXVALUE) TABLESPACE rt_t3);
         CREATE SHARDED TABLE rt_list (id int NOT NULL, region text NOT NULL) \
         PARTITION BY LIST (region) \
         (PARTITION p_1 VALUES ('OR', 'WA') TABLESPACE rt_t1, \
          PARTITION p_2 VALUES ('AZ') TABLESPACE rt_t2, \
          PARTITION p_3 VALUES ('NY') TABLESPACE rt_t3);
         CREATE SHARDED TABLE rt_pair (id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO TABLESPACE SET rt_tsa;
         CREATE SHARDED TABLE rt_hash (id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         CREATE SHARDED TABLE rt_clist (id bigint NOT NULL, class text NOT NULL, \
           CONSTRAINT rt_clist_pk PRIMARY KEY (id, class)) \
         PARTITIONSET BY LIST (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO \
         (PARTITIONSET silver VALUES ('SLV') TABLESPACE SET rt_tsa, \
          PARTITIONSET gold VALUES ('GLD') TABLESPACE SET rt_tsb);",
    )
    .await;
    let rows: Vec<String> = (0..400).map(|k| format!("({k}, 'v{k}')")).collect();
    insert_rows(&client, "rt_range", "k, v", &rows).await;
    let rows: Vec<String> = [
        "2023-06-15",
        "2023-12-31",
        "2024-01-01",
        "2024-03-15",
        "2024-06-30",
        "2024-07-01",
        "2025-01-01",
    ]
    .iter()
    .map(|d| format!("('{d}', 'd')"))
    .collect();
    insert_rows(&client, "rt_date", "d, v", &rows).await;
    let rows: Vec<String> = (0..90)
        .map(|i| format!("({i}, '{}')", ["OR", "WA", "AZ", "NY"][i % 4]))
        .collect();
    insert_rows(&client, "rt_list", "id, region", &rows).await;
    let rows: Vec<String> = (1..=200).map(|i| format!("({i}, 'v{i}')")).collect();
    insert_rows(&client, "rt_pair", "id, v", &rows).await;
    insert_rows(&client, "rt_hash", "id, v", &rows).await;
    let rows: Vec<String> = (1..=200)
        .map(|i| format!("({i}, '{}')", if i % 2 == 0 { "SLV" } else { "GLD" }))
        .collect();
    insert_rows(&client, "rt_clist", "id, class", &rows).await;
    // rt_list and rt_pair live only where their partitions and chunks are.
    for i in 0..SHARDS {
        assert_eq!(has_table(i, "rt_list").await, i < 3, "rt_list on shard {i}");
        assert_eq!(has_table(i, "rt_pair").await, i < 2, "rt_pair on shard {i}");
    }
    log_all_statements().await;

    let set = |v: &[usize]| v.iter().copied().collect::<BTreeSet<usize>>();
    // Ranges: the overlapping partitions' shards only.
    let cases: &[(&str, usize, &[usize])] = &[
        ("SELECT k FROM rt_range WHERE k < 100 /* rr-1 */", 100, &[0]),
        (
            "SELECT k FROM rt_range WHERE k BETWEEN 150 AND 250 /* rr-2 */",
            101,
            &[1, 2],
        ),
        (
            "SELECT k FROM rt_range WHERE k >= 300 /* rr-3 */",
            100,
            &[3],
        ),
        (
            "SELECT k FROM rt_range WHERE k > 99 AND k <= 100 /* rr-4 */",
            1,
            &[1],
        ),
        (
            "SELECT k FROM rt_range WHERE 50 > k AND k >= -5 /* rr-5 */",
            50,
            &[0],
        ),
        (
            "SELECT k FROM rt_range WHERE k IN (5, 305) /* rr-6 */",
            2,
            &[0, 3],
        ),
        (
            "SELECT k FROM rt_range WHERE k = ANY('{105,205}') /* rr-7 */",
            2,
            &[1, 2],
        ),
        (
            "SELECT k FROM rt_range WHERE k < 100.5 /* rr-8 */",
            101,
            &[0, 1, 2, 3],
        ),
        (
            "SELECT d FROM rt_date WHERE d >= DATE '2024-07-01' /* rd-1 */",
            2,
            &[2],
        ),
        (
            "SELECT d FROM rt_date WHERE d < '2024-01-01' /* rd-2 */",
            2,
            &[0],
        ),
        (
            "SELECT d FROM rt_date WHERE d < '2024-01-01 10:00'::timestamp /* rd-3 */",
            3,
            &[0, 1, 2],
        ),
        (
            "SELECT id FROM rt_list WHERE region IN ('OR', 'NY') /* rl-1 */",
            45,
            &[0, 2],
        ),
        (
            "SELECT id FROM rt_list WHERE region = ANY('{AZ}') /* rl-2 */",
            22,
            &[1],
        ),
        (
            "SELECT id FROM rt_list WHERE region = 'TX' /* rl-3 */",
            0,
            &[0],
        ),
        // Unkeyed: every shard the table is on, not the others.
        ("SELECT id FROM rt_list /* rl-4 */", 90, &[0, 1, 2]),
        (
            "SELECT id FROM rt_pair WHERE v <> '' /* rp-1 */",
            200,
            &[0, 1],
        ),
        (
            "UPDATE rt_pair SET v = v WHERE v = 'v7' /* rp-2 */",
            1,
            &[0, 1],
        ),
        ("SELECT id FROM rt_clist /* rcl-1 */", 200, &[0, 1, 2, 3]),
        (
            "SELECT id FROM rt_clist WHERE class = 'GLD' /* rcl-2 */",
            100,
            &[2, 3],
        ),
        (
            "DELETE FROM rt_clist WHERE class = 'SLV' AND id > 1000 /* rcl-3 */",
            0,
            &[0, 1],
        ),
    ];
    for (sql, n, want) in cases {
        let msgs = client
            .simple_query(sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let got = msgs
            .iter()
            .filter(|m| matches!(m, SimpleQueryMessage::Row(_)))
            .count();
        let tag = msgs.iter().find_map(|m| match m {
            SimpleQueryMessage::CommandComplete(n) => Some(*n as usize),
            _ => None,
        });
        assert_eq!(
            if sql.starts_with("SELECT") {
                got
            } else {
                tag.unwrap_or(0)
            },
            *n,
            "{sql}"
        );
        let marker = &sql[sql.find("/* ").unwrap() + 3..sql.find(" */").unwrap()];
        assert_eq!(shards_that_ran(marker), set(want), "{sql}");
    }
    // With the hash key too: one chunk of the gold partition set.
    let r = simple_rows(
        &client,
        "SELECT id FROM rt_clist WHERE class = 'GLD' AND id = 5 /* rcl-4 */",
    )
    .await;
    assert_eq!(r, [[Some("5".to_string())]]);
    let ran = shards_that_ran("rcl-4");
    assert!(ran.len() == 1 && ran.is_subset(&set(&[2, 3])), "{ran:?}");

    // A prepared range with a binary parameter.
    let stmt = client
        .prepare("SELECT k FROM rt_range WHERE k < $1 /* rr-9 */")
        .await
        .expect("prepare");
    let r = client.query(&stmt, &[&50i64]).await.expect("range by $1");
    assert_eq!(r.len(), 50);
    assert_eq!(shards_that_ran("rr-9"), set(&[0]));

    // `= ANY($1)` with a binary int8 array: only its elements' shard. The ids are picked
    // from what one shard holds.
    let mut by_shard: BTreeMap<usize, Vec<i64>> = BTreeMap::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let ids: Vec<i64> = c
            .query("SELECT id FROM rt_hash ORDER BY id LIMIT 3", &[])
            .await
            .expect("ids")
            .iter()
            .map(|r| r.get(0))
            .collect();
        by_shard.insert(i, ids);
    }
    let stmt = client
        .prepare("SELECT id FROM rt_hash WHERE id = ANY($1) /* ra-1 */")
        .await
        .expect("prepare any");
    let elements = by_shard[&2].clone();
    let r = client.query(&stmt, &[&elements]).await.expect("= ANY($1)");
    let mut got: Vec<i64> = r.iter().map(|r| r.get(0)).collect();
    got.sort();
    assert_eq!(got, elements);
    assert_eq!(shards_that_ran("ra-1"), set(&[2]));
    // The elements of two shards, through the simple protocol.
    let (a, b) = (by_shard[&0][0], by_shard[&3][1]);
    let r = simple_rows(
        &client,
        &format!("SELECT id FROM rt_hash WHERE id = ANY('{{{a},{b}}}'::bigint[]) /* ra-2 */"),
    )
    .await;
    assert_eq!(r.len(), 2);
    assert_eq!(shards_that_ran("ra-2"), set(&[0, 3]));
    let r = simple_rows(
        &client,
        &format!("SELECT id FROM rt_hash WHERE id = ANY(ARRAY[{a}, {b}]) /* ra-3 */"),
    )
    .await;
    assert_eq!(r.len(), 2);
    assert_eq!(shards_that_ran("ra-3"), set(&[0, 3]));

    exec(
        &client,
        "DROP TABLE rt_range; DROP TABLE rt_date; DROP TABLE rt_list; DROP TABLE rt_pair; \
         DROP TABLE rt_hash; DROP TABLE rt_clist;",
    )
    .await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn constants_are_converted_as_postgres_converts_them() {
    let proxy = start();
    let client = proxy.connect().await;
    log_all_statements().await;
    // Per key type: the literals rows are inserted with, then other spellings of the same
    // values to find them by. A literal read wrongly would send its row to a shard whose
    // chunks refuse it, or look on a shard that lacks it.
    let cases: &[(&str, &str, &[&str], &[&str])] = &[
        (
            "bigint",
            "int8",
            &["'42'", "-5", "7", "'-17'"],
            &["42", "'-5'", "'7'::bigint", "-17"],
        ),
        (
            "numeric",
            "num",
            &["42", "4.3e1", "-5.50", "'7'"],
            &["42.0", "'43.000'", "-5.5", "7e0"],
        ),
        (
            "date",
            "dt",
            &[
                "'2024-01-01'",
                "DATE '2024-02-29'",
                "'2023-12-31'::date",
                "'2024-03-01'",
            ],
            &[
                "DATE '2024-01-01'",
                "'2024-02-29'",
                "'2023-12-31'",
                "'2024-03-01'",
            ],
        ),
        (
            "timestamp",
            "ts",
            &[
                "'2024-01-01 10:00'",
                "TIMESTAMP '2024-01-01 10:00:00.5'",
                "'2024-05-05T01:02:03'",
                "'2024-01-02'",
            ],
            &[
                "'2024-01-01 10:00:00'",
                "'2024-01-01 10:00:00.500'",
                "TIMESTAMP '2024-05-05 01:02:03'",
                "'2024-01-02 00:00'",
            ],
        ),
        ("boolean", "bool", &["true", "'f'"], &["'yes'", "false"]),
        (
            "text",
            "txt",
            &["'alpha'", "'it''s'", "'Ünïcode'", "''"],
            &["'alpha'", "'it''s'", "'Ünïcode'", "''"],
        ),
        (
            "varchar(10)",
            "vc",
            &["'alpha'", "'beta'", "'gamma'", "'x'"],
            &["'alpha'", "'beta'::varchar", "'gamma'", "'x'"],
        ),
        (
            "char(5)",
            "ch",
            &["'ab'", "'cd   '", "'efghi'", "'j'"],
            &["'ab   '", "'cd'", "'efghi'", "'j '"],
        ),
        (
            "uuid",
            "uu",
            &[
                "'a0eebc99-9c0b-4ef8-bb6d-6bb9bd380a11'",
                "'{b0eebc99-9c0b-4ef8-bb6d-6bb9bd380a12}'",
                "'C0EEBC999C0B4EF8BB6D6BB9BD380A13'",
                "'d0eebc99-9c0b-4ef8-bb6d-6bb9bd380a14'",
            ],
            &[
                "'A0EEBC99-9C0B-4EF8-BB6D-6BB9BD380A11'",
                "'b0eebc999c0b4ef8bb6d6bb9bd380a12'",
                "'c0eebc99-9c0b-4ef8-bb6d-6bb9bd380a13'",
                "'{d0eebc99-9c0b-4ef8-bb6d-6bb9bd380a14}'",
            ],
        ),
    ];
    for (ty, name, inserted, found_by) in cases {
        let table = format!("cv_{name}");
        exec(
            &client,
            &format!(
                "CREATE SHARDED TABLE {table} (k {ty} NOT NULL, n int) \
                 PARTITION BY CONSISTENT HASH (k) PARTITIONS AUTO"
            ),
        )
        .await;
        for (i, lit) in inserted.iter().enumerate() {
            exec(
                &client,
                &format!("INSERT INTO {table} (k, n) VALUES ({lit}, {i})"),
            )
            .await;
        }
        let spread = counts_where(&table, "").await;
        assert_eq!(
            spread.iter().sum::<i64>(),
            inserted.len() as i64,
            "{table}: {spread:?}"
        );
        for (i, lit) in found_by.iter().enumerate() {
            let marker = format!("cv-{name}-{i}");
            let sql = format!("SELECT n FROM {table} WHERE k = {lit} /* {marker} */");
            assert_eq!(
                simple_rows(&client, &sql).await,
                [[Some(i.to_string())]],
                "{sql}"
            );
            assert_eq!(shards_that_ran(&marker).len(), 1, "{sql}");
        }
        exec(&client, &format!("DROP TABLE {table}")).await;
    }

    // timestamptz: with an offset the instant is known; without, it is the session's
    // TimeZone's, which the proxy does not know: reads ask every shard, INSERTs are refused.
    exec(
        &client,
        "CREATE SHARDED TABLE cv_tstz (k timestamptz NOT NULL, n int) \
         PARTITION BY CONSISTENT HASH (k) PARTITIONS AUTO",
    )
    .await;
    exec(
        &client,
        "INSERT INTO cv_tstz (k, n) VALUES ('2024-01-01 10:00+02', 1), ('2024-01-01 08:00Z', 2)",
    )
    .await;
    let r = simple_rows(
        &client,
        "SELECT n FROM cv_tstz WHERE k = '2024-01-01 08:00:00+00' ORDER BY n /* cv-tz-1 */",
    )
    .await;
    assert_eq!(r, [[Some("1".to_string())], [Some("2".to_string())]]);
    assert_eq!(shards_that_ran("cv-tz-1").len(), 1);
    let err = client
        .simple_query("INSERT INTO cv_tstz (k, n) VALUES ('2024-01-01 10:00', 3)")
        .await
        .expect_err("no offset");
    assert_eq!(err.code(), Some(&SqlState::FEATURE_NOT_SUPPORTED), "{err}");
    let text = err
        .as_db_error()
        .map(|e| e.message().to_string())
        .unwrap_or_default();
    assert!(text.contains("add an offset"), "{text}");
    simple_rows(
        &client,
        "SELECT n FROM cv_tstz WHERE k = '2024-01-01 10:00' /* cv-tz-2 */",
    )
    .await;
    assert_eq!(shards_that_ran("cv-tz-2").len(), SHARDS);
    exec(&client, "DROP TABLE cv_tstz").await;
}
