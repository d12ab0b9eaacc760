//! Views over recorded tables: made on every shard holding their tables and recorded; read as
//! one PostgreSQL reads them (each query also runs over plain copies of the tables and views on
//! one PostgreSQL, and the rows must match); a keyed read of a family view on one shard (the
//! shards' statement logs show it); writes through a simple view routed like writes to its
//! table, WITH CHECK OPTION honoured; renamed, replaced and dropped everywhere.
mod common;
mod routing_common;

use common::{log_all_statements, shards, shards_that_ran};
use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const SETUP: &str = "
CREATE SHARDED TABLE vw_cust (cust_id bigint PRIMARY KEY, name text, region text)
  PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO;
CREATE SHARDED TABLE vw_orders (order_id bigint, cust_id bigint NOT NULL, amount int,
  PRIMARY KEY (cust_id, order_id),
  CONSTRAINT vw_orders_fk FOREIGN KEY (cust_id) REFERENCES vw_cust (cust_id))
  PARTITION BY REFERENCE (vw_orders_fk);
CREATE SHARDED TABLE vw_items (item_id bigint PRIMARY KEY, label text)
  PARTITION BY CONSISTENT HASH (item_id) PARTITIONS AUTO;
CREATE DUPLICATED TABLE vw_region (region text PRIMARY KEY, zone text);
";

const PLAIN: &str = "
DROP TABLE IF EXISTS vw_orders_ref, vw_cust_ref, vw_items_ref, vw_region_ref CASCADE;
CREATE TABLE vw_cust_ref (cust_id bigint PRIMARY KEY, name text, region text);
CREATE TABLE vw_orders_ref (order_id bigint, cust_id bigint NOT NULL REFERENCES vw_cust_ref,
  amount int, PRIMARY KEY (cust_id, order_id));
CREATE TABLE vw_items_ref (item_id bigint PRIMARY KEY, label text);
CREATE TABLE vw_region_ref (region text PRIMARY KEY, zone text);
";

const FILL: &str = "
INSERT INTO {region} VALUES ('north', 'z1'), ('south', 'z2'), ('east', 'z1');
INSERT INTO {cust} SELECT i, 'n' || i, (ARRAY['north','south','east','west'])[i % 4 + 1]
  FROM generate_series(1, 120) i;
INSERT INTO {orders} SELECT i, i % 60 + 1, i * 10 FROM generate_series(1, 300) i;
INSERT INTO {items} SELECT i, 'item ' || i FROM generate_series(1, 80) i;
";

/// The views, over the tables' names (`{…}`) and the views' (`[…]`).
const VIEWS: &[&str] = &[
    // A family join showing the key: read like a table of the family.
    "CREATE VIEW [cust_orders] AS SELECT c.cust_id, c.name, o.order_id, o.amount
       FROM {cust} c JOIN {orders} o ON o.cust_id = c.cust_id",
    // The family with a duplicated table: still the family's.
    "CREATE VIEW [cust_zone] (id, zone) AS SELECT c.cust_id, r.zone
       FROM {cust} c JOIN {region} r USING (region)",
    // Duplicated tables only.
    "CREATE VIEW [zones] AS SELECT zone, count(*) AS regions FROM {region} GROUP BY zone",
    // Aggregated over the family, not by the key: planned through its definition.
    "CREATE VIEW [totals] AS SELECT c.region, sum(o.amount) AS total, count(*) AS orders
       FROM {cust} c JOIN {orders} o ON o.cust_id = c.cust_id GROUP BY c.region",
    // Tables of two families: planned through its definition.
    "CREATE VIEW [cross_pairs] AS SELECT c.cust_id, i.label
       FROM {cust} c JOIN {items} i ON i.item_id = c.cust_id",
    // A view over a view over a view.
    "CREATE VIEW [big_spenders] AS SELECT cust_id, name, sum(amount) AS spent
       FROM [cust_orders] GROUP BY cust_id, name HAVING sum(amount) > 2000",
    "CREATE VIEW [top3] AS SELECT * FROM [big_spenders] ORDER BY spent DESC, cust_id LIMIT 3",
    // An outer join whose preserved side is duplicated: its rows repeat on every shard.
    "CREATE VIEW [region_customers] AS SELECT r.region, c.cust_id
       FROM {region} r LEFT JOIN {cust} c ON c.region = r.region",
    // A simple view of one table, writable, with a check option and a security barrier.
    "CREATE VIEW [north_cust] WITH (security_barrier) AS SELECT cust_id, name, region
       FROM {cust} WHERE region = 'north' WITH CHECK OPTION",
];

/// The reads compared with one PostgreSQL.
const READS: &[&str] = &[
    "SELECT * FROM [cust_orders] ORDER BY order_id",
    "SELECT * FROM [cust_orders] WHERE cust_id = 7 ORDER BY order_id",
    "SELECT name, sum(amount) FROM [cust_orders] GROUP BY name ORDER BY 2 DESC, 1 LIMIT 5",
    "SELECT * FROM [cust_zone] ORDER BY id",
    "SELECT z.*, c.name FROM [cust_zone] z JOIN {cust} c ON c.cust_id = z.id WHERE z.id < 9 ORDER BY 1",
    "SELECT * FROM [zones] ORDER BY zone",
    "SELECT * FROM [totals] ORDER BY region",
    "SELECT t.region, t.total FROM [totals] t WHERE t.orders > 10 ORDER BY 1",
    "SELECT count(*), min(label) FROM [cross_pairs]",
    "SELECT * FROM [big_spenders] ORDER BY cust_id",
    "SELECT * FROM [top3]",
    "SELECT * FROM [region_customers] ORDER BY region, cust_id NULLS FIRST",
    "SELECT count(*) FROM [region_customers] rc JOIN [zones] z ON true",
    "SELECT * FROM [north_cust] ORDER BY cust_id",
    "SELECT x.cust_id FROM (SELECT * FROM [totals]) t, [cust_orders] x WHERE x.order_id = 5 ORDER BY 1",
];

fn names(sql: &str, plain: bool) -> String {
    let mut out = sql.to_string();
    for t in ["cust", "orders", "items", "region"] {
        let name = if plain {
            format!("vw_{t}_ref")
        } else {
            format!("vw_{t}")
        };
        out = out.replace(&format!("{{{t}}}"), &name);
    }
    for v in [
        "cust_orders",
        "cust_zone",
        "zones",
        "totals",
        "cross_pairs",
        "big_spenders",
        "top3",
        "region_customers",
        "north_cust",
    ] {
        let name = if plain {
            format!("vwv_{v}_ref")
        } else {
            format!("vwv_{v}")
        };
        out = out.replace(&format!("[{v}]"), &name);
    }
    out
}

async fn same_rows(proxy: &Client, plain: &Client, sql: &str) {
    assert_eq!(
        simple_rows(proxy, &names(sql, false)).await,
        simple_rows(plain, &names(sql, true)).await,
        "{sql}"
    );
}

/// Every view made, on the proxy and on the plain copies.
async fn setup(proxy: &Client, plain: &Client) {
    exec(proxy, SETUP).await;
    plain.batch_execute(PLAIN).await.unwrap();
    for (client, is_plain) in [(proxy, false), (plain, true)] {
        client.batch_execute(&names(FILL, is_plain)).await.unwrap();
        for v in VIEWS {
            client
                .batch_execute(&names(v, is_plain))
                .await
                .unwrap_or_else(|e| panic!("{v}: {e}"));
        }
    }
}

/// The shards (indexes) whose catalog has view `name`.
async fn shards_with_view(name: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let row = c
            .query_one("SELECT to_regclass($1) IS NOT NULL", &[&name])
            .await
            .unwrap();
        if row.get::<_, bool>(0) {
            out.push(i);
        }
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_over_recorded_tables_answer_as_one_postgres() {
    let proxy = start();
    let c = proxy.connect().await;
    let plain = shards().connect(0).await;
    setup(&c, &plain).await;

    for v in ["vwv_cust_orders", "vwv_totals", "vwv_top3", "vwv_zones"] {
        assert_eq!(
            shards_with_view(v).await,
            vec![0, 1, 2, 3],
            "{v} on every shard"
        );
    }
    for sql in READS {
        same_rows(&c, &plain, sql).await;
    }
    // Through the extended protocol too, with the key bound.
    let rows = c
        .query(
            "SELECT order_id FROM vwv_cust_orders WHERE cust_id = $1 ORDER BY 1",
            &[&7i64],
        )
        .await
        .unwrap();
    let expected = plain
        .query(
            "SELECT order_id FROM vwv_cust_orders_ref WHERE cust_id = $1 ORDER BY 1",
            &[&7i64],
        )
        .await
        .unwrap();
    assert_eq!(
        rows.iter().map(|r| r.get::<_, i64>(0)).collect::<Vec<_>>(),
        expected
            .iter()
            .map(|r| r.get::<_, i64>(0))
            .collect::<Vec<_>>()
    );
    assert!(!rows.is_empty());
    // The plain copies' views check what the test compares: without the shards' other rows
    // a read of the family view would differ.
    let one_shard: Vec<Vec<Option<String>>> = simple_rows(
        &shards().connect(1).await,
        "SELECT * FROM vwv_cust_orders ORDER BY order_id",
    )
    .await;
    assert_ne!(
        one_shard,
        simple_rows(
            &plain,
            "SELECT * FROM vwv_cust_orders_ref ORDER BY order_id"
        )
        .await
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_keyed_read_of_a_family_view_runs_on_one_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE vk_a (k bigint PRIMARY KEY, x int)
           PARTITION BY CONSISTENT HASH (k) PARTITIONS AUTO;
         CREATE SHARDED TABLE vk_b (k bigint NOT NULL, y int,
           CONSTRAINT vk_b_fk FOREIGN KEY (k) REFERENCES vk_a (k)) PARTITION BY REFERENCE (vk_b_fk);
         INSERT INTO vk_a SELECT i, i FROM generate_series(1, 50) i;
         INSERT INTO vk_b SELECT i % 50 + 1, i FROM generate_series(1, 200) i;
         CREATE VIEW vk_v AS SELECT a.k AS key, a.x, b.y FROM vk_a a JOIN vk_b b ON b.k = a.k",
    )
    .await;
    log_all_statements().await;
    let rows = simple_rows(
        &c,
        "SELECT count(*) FROM vk_v WHERE key = 17 /* vk-keyed */",
    )
    .await;
    assert_eq!(rows, vec![vec![Some("4".to_string())]]);
    assert_eq!(
        shards_that_ran("vk-keyed").len(),
        1,
        "keyed read on one shard"
    );
    let rows = simple_rows(&c, "SELECT key FROM vk_v /* vk-all */").await;
    assert_eq!(rows.len(), 200);
    assert_eq!(
        shards_that_ran("vk-all").len(),
        SHARDS,
        "a read of every row on all"
    );
    // The same view on plain PostgreSQL gives the same counts.
    let plain = shards().connect(0).await;
    plain
        .batch_execute(
            "DROP TABLE IF EXISTS vk_a_ref, vk_b_ref CASCADE;
             CREATE TABLE vk_a_ref (k bigint PRIMARY KEY, x int);
             CREATE TABLE vk_b_ref (k bigint, y int);
             INSERT INTO vk_a_ref SELECT i, i FROM generate_series(1, 50) i;
             INSERT INTO vk_b_ref SELECT i % 50 + 1, i FROM generate_series(1, 200) i;
             CREATE VIEW vk_v_ref AS SELECT a.k AS key, a.x, b.y FROM vk_a_ref a
               JOIN vk_b_ref b ON b.k = a.k",
        )
        .await
        .unwrap();
    assert_eq!(
        simple_rows(&plain, "SELECT count(*) FROM vk_v_ref WHERE key = 17").await,
        vec![vec![Some("4".to_string())]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writes_through_a_simple_view_go_where_its_table_rows_are() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE vwr_t (id bigint PRIMARY KEY, region text, v int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         CREATE VIEW vwr_north AS SELECT id, region, v FROM vwr_t WHERE region = 'north'
           WITH CHECK OPTION",
    )
    .await;
    exec(
        &c,
        "INSERT INTO vwr_north VALUES (1, 'north', 10), (2, 'north', 20), (3, 'north', 30), (4, 'north', 40)",
    )
    .await;
    assert_eq!(counts("vwr_t").await.iter().sum::<i64>(), 4);
    assert!(
        counts("vwr_t").await.iter().all(|&n| n > 0),
        "rows on both shards"
    );
    let err = c
        .simple_query("INSERT INTO vwr_north VALUES (5, 'south', 50)")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::WITH_CHECK_OPTION_VIOLATION);
    let updated = c
        .simple_query("UPDATE vwr_north SET v = v + 1 WHERE id IN (1, 2, 3)")
        .await
        .unwrap();
    assert_eq!(tag(&updated), 3);
    let err = c
        .simple_query("UPDATE vwr_north SET region = 'south' WHERE id = 4")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::WITH_CHECK_OPTION_VIOLATION);
    let err = c
        .simple_query("UPDATE vwr_north SET id = 99 WHERE id = 4")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::FEATURE_NOT_SUPPORTED);
    assert!(message(&err).contains("through view"), "{}", message(&err));
    let deleted = c
        .simple_query("DELETE FROM vwr_north WHERE v > 20")
        .await
        .unwrap();
    assert_eq!(tag(&deleted), 3);
    assert_eq!(
        simple_rows(&c, "SELECT id, v FROM vwr_t ORDER BY id").await,
        vec![vec![Some("1".to_string()), Some("11".to_string())]]
    );
    // The session is still usable.
    assert_eq!(simple_rows(&c, "SELECT 1").await.len(), 1);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_are_renamed_replaced_and_dropped_everywhere() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE vwl_t (id bigint PRIMARY KEY, g int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         CREATE SHARDED TABLE vwl_u (id bigint PRIMARY KEY, h int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         INSERT INTO vwl_t SELECT i, i % 3 FROM generate_series(1, 30) i;
         INSERT INTO vwl_u SELECT i, i FROM generate_series(1, 30) i;
         CREATE VIEW vwl_v AS SELECT id, g FROM vwl_t",
    )
    .await;
    let err = c
        .simple_query("CREATE VIEW vwl_v AS SELECT id FROM vwl_t")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::DUPLICATE_TABLE);
    let err = c
        .simple_query("CREATE TEMP VIEW vwl_tmp AS SELECT id FROM vwl_t")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::FEATURE_NOT_SUPPORTED);

    // A view over it, through its definition: it follows the rename.
    exec(
        &c,
        "CREATE VIEW vwl_groups AS SELECT g, count(*) AS n FROM vwl_v GROUP BY g",
    )
    .await;
    exec(&c, "ALTER VIEW vwl_v RENAME TO vwl_w").await;
    assert_eq!(shards_with_view("vwl_w").await, vec![0, 1, 2, 3]);
    assert!(shards_with_view("vwl_v").await.is_empty());
    assert_eq!(
        simple_rows(&c, "SELECT g, n FROM vwl_groups ORDER BY g").await,
        vec![
            vec![Some("0".to_string()), Some("10".to_string())],
            vec![Some("1".to_string()), Some("10".to_string())],
            vec![Some("2".to_string()), Some("10".to_string())],
        ]
    );
    exec(&c, "ALTER VIEW vwl_w RENAME COLUMN g TO grp").await;
    assert_eq!(
        simple_rows(&c, "SELECT count(*) FROM vwl_groups").await,
        vec![vec![Some("3".to_string())]]
    );

    // Replaced by a definition over two families: now read through it.
    exec(
        &c,
        "CREATE OR REPLACE VIEW vwl_w AS SELECT t.id, t.g AS grp, u.h FROM vwl_t t
           JOIN vwl_u u ON u.id = t.g",
    )
    .await;
    assert_eq!(
        simple_rows(&c, "SELECT count(*), sum(h) FROM vwl_w").await,
        vec![vec![Some("20".to_string()), Some("30".to_string())]]
    );

    // DROP without CASCADE is refused by the shards while a view depends on it.
    let err = c.simple_query("DROP VIEW vwl_w").await.unwrap_err();
    assert_eq!(code(&err), SqlState::DEPENDENT_OBJECTS_STILL_EXIST);
    assert_eq!(shards_with_view("vwl_w").await, vec![0, 1, 2, 3]);
    exec(&c, "DROP VIEW vwl_w CASCADE").await;
    for v in ["vwl_w", "vwl_groups"] {
        assert!(shards_with_view(v).await.is_empty(), "{v} dropped");
        let err = c
            .simple_query(&format!("SELECT * FROM {v}"))
            .await
            .unwrap_err();
        assert_eq!(code(&err), SqlState::UNDEFINED_TABLE);
    }
    exec(&c, "DROP VIEW IF EXISTS vwl_w").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_materialized_view_holds_the_whole_answer_on_the_first_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE mv_t (id bigint PRIMARY KEY, g int, v int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         INSERT INTO mv_t SELECT i, i % 5, i FROM generate_series(1, 500) i",
    )
    .await;
    let made = c
        .simple_query(
            "CREATE MATERIALIZED VIEW mv_sums AS SELECT g, sum(v) AS total, count(*) AS n
               FROM mv_t GROUP BY g",
        )
        .await
        .unwrap();
    assert_eq!(tag(&made), 5, "SELECT 5, as PostgreSQL tags it");
    let expected = |extra: i64| -> Vec<Vec<Option<String>>> {
        (0..5)
            .map(|g| {
                let total: i64 =
                    (1..=500).filter(|i| i % 5 == g).sum::<i64>() + extra * (g == 0) as i64;
                let n = 100 + (extra > 0 && g == 0) as i64;
                vec![
                    Some(g.to_string()),
                    Some(total.to_string()),
                    Some(n.to_string()),
                ]
            })
            .collect()
    };
    let read = "SELECT g, total, n FROM mv_sums ORDER BY g";
    assert_eq!(simple_rows(&c, read).await, expected(0));
    // It is on the first shard only, holding every shard's rows.
    assert_eq!(
        simple_rows(&shards().connect(0).await, read).await,
        expected(0)
    );
    for i in 1..SHARDS {
        let on = shards().connect(i).await;
        let row = on
            .query_one("SELECT to_regclass('mv_sums') IS NULL", &[])
            .await
            .unwrap();
        assert!(row.get::<_, bool>(0), "not on shard {i}");
    }
    // A new row shows after a refresh, concurrent once a unique index allows it.
    exec(&c, "INSERT INTO mv_t VALUES (1000, 0, 7)").await;
    assert_eq!(simple_rows(&c, read).await, expected(0));
    let err = c
        .simple_query("REFRESH MATERIALIZED VIEW CONCURRENTLY mv_sums")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
    exec(&c, "CREATE UNIQUE INDEX mv_sums_g ON mv_sums (g)").await;
    exec(&c, "REFRESH MATERIALIZED VIEW CONCURRENTLY mv_sums").await;
    assert_eq!(simple_rows(&c, read).await, expected(7));
    // Joined with the sharded table it came from: the general path reads it where it is.
    assert_eq!(
        simple_rows(
            &c,
            "SELECT count(*) FROM mv_t t JOIN mv_sums s ON s.g = t.g WHERE s.n = 101"
        )
        .await,
        vec![vec![Some("101".to_string())]]
    );
    // Inside a block the proxy refuses (the rows would be stored outside it).
    exec(&c, "BEGIN").await;
    let err = c
        .simple_query("REFRESH MATERIALIZED VIEW mv_sums")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::ACTIVE_SQL_TRANSACTION);
    exec(&c, "ROLLBACK").await;
    let err = c
        .simple_query("SELECT 1; REFRESH MATERIALIZED VIEW mv_sums")
        .await
        .unwrap_err();
    assert_eq!(code(&err), SqlState::FEATURE_NOT_SUPPORTED);
    // WITH NO DATA, then a refresh fills it.
    exec(
        &c,
        "CREATE MATERIALIZED VIEW mv_ids AS SELECT id FROM mv_t WHERE v > 490 WITH NO DATA",
    )
    .await;
    let err = c.simple_query("SELECT * FROM mv_ids").await.unwrap_err();
    assert_eq!(code(&err), SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE);
    exec(&c, "REFRESH MATERIALIZED VIEW mv_ids").await;
    assert_eq!(
        simple_rows(&c, "SELECT count(*) FROM mv_ids").await,
        vec![vec![Some("10".to_string())]]
    );
    exec(&c, "ALTER MATERIALIZED VIEW mv_ids RENAME TO mv_ids2").await;
    exec(&c, "REFRESH MATERIALIZED VIEW mv_ids2").await;
    exec(&c, "DROP MATERIALIZED VIEW mv_ids2, mv_sums").await;
    let first = shards().connect(0).await;
    let left = first
        .query_one(
            "SELECT count(*) FROM pg_class c JOIN pg_namespace n ON n.oid = c.relnamespace
             WHERE n.nspname = 'shardwire_matview' OR c.relname IN ('mv_sums', 'mv_ids2')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(left.get::<_, i64>(0), 0, "nothing left on the first shard");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn views_through_the_extended_protocol_cursors_copy_and_materialized_views() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE vx_t (id bigint PRIMARY KEY, g int, v int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         CREATE SHARDED TABLE vx_u (id bigint PRIMARY KEY, w int)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
         INSERT INTO vx_t SELECT i, i % 4, i FROM generate_series(1, 200) i;
         INSERT INTO vx_u SELECT i, i * 2 FROM generate_series(1, 200) i;
         CREATE VIEW vx_fam AS SELECT id, g, v FROM vx_t WHERE v > 10;
         CREATE VIEW vx_sums AS SELECT g, sum(v) AS total FROM vx_t GROUP BY g;
         CREATE VIEW vx_cross AS SELECT t.g, u.w FROM vx_t t JOIN vx_u u ON u.id = t.v + 1000 - 1000;
         CREATE TABLE vx_plain_view_target (x int);
         CREATE VIEW vx_plain AS SELECT x FROM vx_plain_view_target",
    )
    .await;
    // The extended protocol, with parameters, over a view planned through its definition.
    let rows = c
        .query("SELECT total::text FROM vx_sums WHERE g = $1", &[&2i32])
        .await
        .unwrap();
    let want: i64 = (1..=200).filter(|i| i % 4 == 2).sum();
    assert_eq!(rows.len(), 1);
    assert_eq!(rows[0].get::<_, String>(0), want.to_string());
    let rows = c
        .query("SELECT count(*) FROM vx_cross WHERE g = $1", &[&1i32])
        .await
        .unwrap();
    assert_eq!(rows[0].get::<_, i64>(0), 50);
    // A cursor over each shape.
    exec(&c, "BEGIN").await;
    exec(&c, "DECLARE a CURSOR FOR SELECT id FROM vx_fam ORDER BY id").await;
    let first = simple_rows(&c, "FETCH 3 FROM a").await;
    assert_eq!(
        first,
        vec![
            vec![Some("11".to_string())],
            vec![Some("12".to_string())],
            vec![Some("13".to_string())]
        ]
    );
    exec(
        &c,
        "DECLARE b CURSOR FOR SELECT g, total FROM vx_sums ORDER BY g",
    )
    .await;
    assert_eq!(simple_rows(&c, "FETCH ALL FROM b").await.len(), 4);
    exec(&c, "COMMIT").await;
    // COPY of a query over an expanded view.
    let stream = c
        .copy_out("COPY (SELECT g, total FROM vx_sums ORDER BY g) TO STDOUT")
        .await
        .unwrap();
    let chunks: Vec<bytes::Bytes> = futures::TryStreamExt::try_collect(stream).await.unwrap();
    let text: String = chunks
        .iter()
        .map(|b| String::from_utf8_lossy(b).into_owned())
        .collect();
    let want: String = (0..4)
        .map(|g| format!("{g}\t{}\n", (1..=200).filter(|i| i % 4 == g).sum::<i64>()))
        .collect();
    assert_eq!(text, want);
    // A materialized view over a family view and over an expanded one.
    exec(
        &c,
        "CREATE MATERIALIZED VIEW vx_m AS SELECT s.g, s.total, count(f.id) AS n
           FROM vx_sums s JOIN vx_fam f ON f.g = s.g GROUP BY s.g, s.total",
    )
    .await;
    assert_eq!(
        simple_rows(&c, "SELECT sum(n) FROM vx_m").await,
        vec![vec![Some("190".to_string())]]
    );
    // IF EXISTS drops a recorded view and the first shard's plain one together.
    exec(&c, "DROP MATERIALIZED VIEW vx_m").await;
    exec(&c, "DROP VIEW IF EXISTS vx_cross, vx_plain, vx_nothing").await;
    let first = shards().connect(0).await;
    let left = first
        .query_one(
            "SELECT count(*) FROM pg_class WHERE relname IN ('vx_cross', 'vx_plain')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(left.get::<_, i64>(0), 0);
}
