//! Bind parameters that shape a statement over several shards, as JDBC, asyncpg and ORMs send
//! them: `LIMIT $1 OFFSET $2` applied to the merged rows, and a prepared multi-row INSERT split
//! by shard. Answers are compared with one plain PostgreSQL holding the same rows.
mod common;
mod routing_common;

use std::collections::BTreeSet;

use common::raw::{RawClient, Reply};
use common::{shards, APP};
use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::types::{ToSql, Type};
use tokio_postgres::Client;

type Params<'a> = Vec<&'a (dyn ToSql + Sync)>;

/// A query's rows through the proxy and on the reference table, which must be equal.
async fn same_rows(client: &Client, plain: &Client, sql: &str, params: &[&(dyn ToSql + Sync)]) {
    let got = binary_rows(client, sql, params).await;
    let want = binary_rows(plain, &sql.replace("lim_t", "lim_t_ref"), params).await;
    assert_eq!(got, want, "{sql} with {params:?}");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn limit_and_offset_parameters_answer_as_one_postgres() {
    let proxy = start();
    let client = proxy.connect().await;
    let plain = twin_tables(&client, "lim_t").await;
    let none: Option<i64> = None;
    // One prepared text, executed with many values: none of them is kept in its plan.
    let paged = "SELECT id, v FROM lim_t ORDER BY id LIMIT $1 OFFSET $2";
    let cases: Vec<(&str, Params<'_>)> = vec![
        (paged, vec![&10i64, &5i64]),
        (paged, vec![&0i64, &0i64]),
        (paged, vec![&7i64, &295i64]),
        (paged, vec![&400i64, &0i64]),
        (paged, vec![&3i64, &1000i64]),
        (paged, vec![&none, &290i64]),
        (paged, vec![&4i64, &none]),
        (
            "SELECT id, v FROM lim_t ORDER BY v DESC NULLS LAST, id LIMIT $1",
            vec![&13i64],
        ),
        (
            "SELECT id, v FROM lim_t ORDER BY n NULLS FIRST, id OFFSET $1",
            vec![&290i64],
        ),
        (
            "SELECT id, v FROM lim_t ORDER BY n DESC, id LIMIT $1 OFFSET $2",
            vec![&9i64, &40i64],
        ),
        (
            "SELECT id, v FROM lim_t ORDER BY id FETCH FIRST $1 ROWS ONLY",
            vec![&4i64],
        ),
        (
            "SELECT id, v FROM lim_t WHERE grp = $1 ORDER BY id DESC LIMIT $2 OFFSET $3",
            vec![&2i32, &5i64, &3i64],
        ),
        (
            "SELECT id, v FROM lim_t ORDER BY id LIMIT 6 OFFSET $1",
            vec![&10i64],
        ),
        (
            "SELECT id, v FROM lim_t ORDER BY id LIMIT $1 OFFSET 3",
            vec![&10i64],
        ),
        (
            "SELECT id, v FROM lim_t ORDER BY id OFFSET $2 LIMIT $1",
            vec![&5i64, &20i64],
        ),
    ];
    for (sql, params) in &cases {
        same_rows(&client, &plain, sql, params).await;
    }
    // Every shard runs it, with the limit plus the offset as its LIMIT and no OFFSET.
    log_all_statements().await;
    let marked = "SELECT id, v AS lim_seen_1 FROM lim_t ORDER BY id LIMIT $1 OFFSET $2";
    same_rows(&client, &plain, marked, &[&3i64, &8i64]).await;
    assert_eq!(shards_that_ran("lim_seen_1").len(), SHARDS);
    for i in 0..SHARDS {
        let log = std::fs::read_to_string(shards().clusters[i].log_file()).unwrap_or_default();
        let line = log
            .lines()
            .find(|l| l.contains("lim_seen_1"))
            .expect("logged");
        assert!(
            line.contains("LIMIT $1::bigint + $2::bigint") && !line.contains("OFFSET"),
            "{line}"
        );
    }
    // Declared int4 parameters, binary, as a driver that names its types sends them.
    let got: Vec<i32> = client
        .query_typed(
            "SELECT id FROM lim_t ORDER BY id DESC LIMIT $1 OFFSET $2",
            &[(&6i32, Type::INT4), (&2i32, Type::INT4)],
        )
        .await
        .expect("typed limit")
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(got, vec![298, 297, 296, 295, 294, 293]);
    // Without ORDER BY the rows are any `limit` of the table's.
    let rows = binary_rows(&client, "SELECT id, v FROM lim_t LIMIT $1", &[&25i64]).await;
    assert_eq!(rows.len(), 25);
    assert_eq!(rows.iter().map(|r| r.0).collect::<BTreeSet<_>>().len(), 25);

    // Text-format parameters give what the same constants give through the simple protocol,
    // there and on the plain table.
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP)
        .await
        .expect("raw");
    for (limit, offset) in [("10", "5"), ("3", "297"), ("0", "0"), (" 8 ", "+1")] {
        let replies = raw
            .parse("", paged)
            .bind("", "", &[limit, offset])
            .execute("")
            .sync()
            .round_trip()
            .await;
        let rows: Vec<Vec<Option<String>>> = replies
            .iter()
            .filter_map(|r| match r {
                Reply::Row(v) => Some(v.clone()),
                _ => None,
            })
            .collect();
        let constants = format!(
            "SELECT id, v FROM lim_t ORDER BY id LIMIT {} OFFSET {}",
            limit.trim(),
            offset.trim_start_matches('+')
        );
        assert_eq!(rows, simple_rows(&client, &constants).await, "{constants}");
        assert_eq!(
            rows,
            simple_rows(&plain, &constants.replace("lim_t", "lim_t_ref")).await
        );
        let tag = format!("SELECT {}", rows.len());
        assert!(replies.contains(&Reply::Complete(tag)), "{replies:?}");
    }

    // Refused as PostgreSQL refuses them, with its SQLSTATEs (OFFSET is checked first); the
    // session goes on.
    let refused: Vec<(Params<'_>, SqlState)> = vec![
        (
            vec![&-1i64, &0i64],
            SqlState::INVALID_ROW_COUNT_IN_LIMIT_CLAUSE,
        ),
        (
            vec![&5i64, &-3i64],
            SqlState::INVALID_ROW_COUNT_IN_RESULT_OFFSET_CLAUSE,
        ),
        (
            vec![&-1i64, &-1i64],
            SqlState::INVALID_ROW_COUNT_IN_RESULT_OFFSET_CLAUSE,
        ),
    ];
    for (params, code) in &refused {
        let err = client.query(paged, params).await.expect_err("negative");
        assert_eq!(err.code(), Some(code), "{params:?}: {err}");
        let on_pg = plain
            .query(&paged.replace("lim_t", "lim_t_ref"), params)
            .await
            .expect_err("negative on PostgreSQL");
        assert_eq!(on_pg.code(), Some(code), "{params:?}: {on_pg}");
        assert_eq!(
            err.as_db_error().map(|e| e.message()),
            on_pg.as_db_error().map(|e| e.message())
        );
        let one: i32 = client
            .query_one("SELECT 1", &[])
            .await
            .expect("after")
            .get(0);
        assert_eq!(one, 1);
    }
    let replies = raw
        .parse("", paged)
        .bind("", "", &["2.5", "0"])
        .execute("")
        .sync()
        .round_trip()
        .await;
    assert!(
        replies.contains(&Reply::Error(SqlState::INVALID_TEXT_REPRESENTATION)),
        "{replies:?}"
    );
    same_rows(&client, &plain, paged, &[&2i64, &2i64]).await;
}

/// The keys of `table` on each shard, read there.
async fn keys_by_shard(table: &str, key: &str) -> Vec<BTreeSet<i64>> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let rows = c
            .query(&format!("SELECT {key} FROM {table}"), &[])
            .await
            .unwrap_or_else(|e| panic!("{table} on shard {i}: {e}"));
        out.push(rows.iter().map(|r| r.get(0)).collect());
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_multi_row_insert_is_split_by_shard() {
    let proxy = start();
    let client = proxy.connect().await;
    create_customers(&client, "pm_cust").await;
    create_customers(&client, "pm_cust_simple").await;
    let keys: Vec<i64> = vec![17, 3, 42, 8, 1001, 5, 77, 260, 9, 64];
    let names: Vec<String> = keys.iter().map(|k| format!("c{k}")).collect();
    let scores: Vec<i32> = (0..keys.len() as i32).collect();
    let values: Vec<String> = (0..keys.len())
        .map(|i| format!("(${}, ${}, ${})", 3 * i + 1, 3 * i + 2, 3 * i + 3))
        .collect();
    let insert = format!(
        "INSERT INTO pm_cust (cust_id, name, score) VALUES {} RETURNING cust_id, name",
        values.join(", ")
    );
    let mut params: Params<'_> = Vec::new();
    for i in 0..keys.len() {
        params.push(&keys[i]);
        params.push(&names[i]);
        params.push(&scores[i]);
    }
    // Binary parameters (tokio-postgres): RETURNING in VALUES order.
    let rows = client
        .query(&insert, &params)
        .await
        .expect("prepared insert");
    let returned: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    let expected: Vec<(i64, String)> = keys.iter().copied().zip(names.clone()).collect();
    assert_eq!(returned, expected);
    // The same rows through the simple protocol, whose split is known to place them.
    let literal: Vec<String> = (0..keys.len())
        .map(|i| format!("({}, '{}', {})", keys[i], names[i], scores[i]))
        .collect();
    let msgs = client
        .simple_query(&format!(
            "INSERT INTO pm_cust_simple (cust_id, name, score) VALUES {}",
            literal.join(", ")
        ))
        .await
        .expect("simple insert");
    assert_eq!(tag(&msgs), keys.len() as u64);
    let placed = keys_by_shard("pm_cust", "cust_id").await;
    assert_eq!(placed, keys_by_shard("pm_cust_simple", "cust_id").await);
    assert!(
        placed.iter().filter(|s| !s.is_empty()).count() > 1,
        "the rows should span shards: {placed:?}"
    );
    // Each row is where a keyed read looks for it, with its own values.
    for (i, k) in keys.iter().enumerate() {
        let row = client
            .query_one("SELECT name, score FROM pm_cust WHERE cust_id = $1", &[k])
            .await
            .expect("keyed read");
        assert_eq!(row.get::<_, String>(0), names[i]);
        assert_eq!(row.get::<_, i32>(1), scores[i]);
    }

    // The tag adds up the shards' counts; a parameter shared by rows on several shards (and
    // one used by ON CONFLICT) reaches every shard that needs it.
    let upsert = "INSERT INTO pm_cust (cust_id, name) VALUES ($1, $2), ($3, $2), ($4, $5) \
                  ON CONFLICT (cust_id) DO UPDATE SET name = $6";
    let n = client
        .execute(
            upsert,
            &[&17i64, &"new", &42i64, &2000i64, &"n2000", &"upd"],
        )
        .await
        .expect("upsert");
    assert_eq!(n, 3);
    let names_now = simple_rows(
        &client,
        "SELECT cust_id, name FROM pm_cust WHERE cust_id IN (17, 42, 2000) ORDER BY cust_id",
    )
    .await;
    let s = |v: &str| Some(v.to_string());
    assert_eq!(
        names_now,
        vec![
            vec![s("17"), s("upd")],
            vec![s("42"), s("upd")],
            vec![s("2000"), s("n2000")]
        ]
    );

    // Text-format parameters, through the raw protocol.
    let mut raw = RawClient::connect(proxy.addr, APP, APP, APP)
        .await
        .expect("raw");
    let replies = raw
        .parse(
            "ins",
            "INSERT INTO pm_cust (cust_id, name) VALUES ($1, $2), ($3, $4), ($5, $6) \
             RETURNING cust_id, name",
        )
        .bind("", "ins", &["3001", "a", "3002", "b", "3003", "c"])
        .execute("")
        .sync()
        .round_trip()
        .await;
    let returned: Vec<Reply> = replies
        .iter()
        .filter(|r| matches!(r, Reply::Row(_)))
        .cloned()
        .collect();
    assert_eq!(
        returned,
        vec![
            Reply::Row(vec![s("3001"), s("a")]),
            Reply::Row(vec![s("3002"), s("b")]),
            Reply::Row(vec![s("3003"), s("c")]),
        ]
    );
    assert!(
        replies.contains(&Reply::Complete("INSERT 0 3".into())),
        "{replies:?}"
    );
    assert_eq!(counts("pm_cust").await.iter().sum::<i64>(), 14);
    // A duplicate key on one shard fails the statement, and the session goes on.
    let err = client
        .execute(
            "INSERT INTO pm_cust (cust_id, name) VALUES ($1, $2), ($3, $4)",
            &[&4000i64, &"x", &3i64, &"dup"],
        )
        .await
        .expect_err("duplicate");
    assert_eq!(err.code(), Some(&SqlState::UNIQUE_VIOLATION), "{err}");
    let one: i32 = client
        .query_one("SELECT 1", &[])
        .await
        .expect("after")
        .get(0);
    assert_eq!(one, 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_multi_row_insert_gets_generated_keys() {
    let proxy = start();
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE pm_gen (id bigserial PRIMARY KEY, v text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .expect("create");
    let vs: Vec<String> = (0..12).map(|i| format!("g{i}")).collect();
    let values: Vec<String> = (1..=vs.len()).map(|i| format!("(${i})")).collect();
    let insert = format!(
        "INSERT INTO pm_gen (v) VALUES {} RETURNING id, v",
        values.join(", ")
    );
    let params: Params<'_> = vs.iter().map(|v| v as &(dyn ToSql + Sync)).collect();
    let rows = client.query(&insert, &params).await.expect("generated");
    let returned: Vec<(i64, String)> = rows.iter().map(|r| (r.get(0), r.get(1))).collect();
    assert_eq!(
        returned.iter().map(|r| r.1.clone()).collect::<Vec<_>>(),
        vs,
        "RETURNING in VALUES order"
    );
    let ids: BTreeSet<i64> = returned.iter().map(|r| r.0).collect();
    assert_eq!(ids.len(), vs.len(), "no duplicate key");
    let placed = keys_by_shard("pm_gen", "id").await;
    assert!(
        placed.iter().filter(|s| !s.is_empty()).count() > 1,
        "{placed:?}"
    );
    for (id, v) in &returned {
        let row = client
            .query_one("SELECT v FROM pm_gen WHERE id = $1", &[id])
            .await
            .expect("keyed read of a generated key");
        assert_eq!(&row.get::<_, String>(0), v);
    }
    // DEFAULT next to a given key: each row keeps what it says.
    let n = client
        .execute(
            "INSERT INTO pm_gen (id, v) VALUES (DEFAULT, $1), ($2, $3), (DEFAULT, $4)",
            &[&"d1", &1_000_000i64, &"given", &"d2"],
        )
        .await
        .expect("mixed");
    assert_eq!(n, 3);
    let row = client
        .query_one("SELECT v FROM pm_gen WHERE id = $1", &[&1_000_000i64])
        .await
        .expect("given key");
    assert_eq!(row.get::<_, String>(0), "given");
    assert_eq!(counts("pm_gen").await.iter().sum::<i64>(), 15);
    assert_eq!(
        counts_where("pm_gen", "WHERE v = 'given'")
            .await
            .iter()
            .sum::<i64>(),
        1
    );
}
