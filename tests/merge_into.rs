//! MERGE into a sharded table: from VALUES (each row to the shard of its key), from a table of
//! the target's family joined on the key (each shard merges its own rows), from a duplicated
//! table when nothing is inserted; one distributed transaction over several shards. Each MERGE
//! also runs on plain copies of the tables on one PostgreSQL, and the rows must match.
mod common;
mod routing_common;

use common::shards;
use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const SETUP: &str = "
CREATE SHARDED TABLE mg_cust (cust_id bigint PRIMARY KEY, name text, score int)
  PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO;
CREATE SHARDED TABLE mg_orders (order_id bigint, cust_id bigint NOT NULL, amount int,
  PRIMARY KEY (cust_id, order_id),
  CONSTRAINT mg_orders_fk FOREIGN KEY (cust_id) REFERENCES mg_cust (cust_id))
  PARTITION BY REFERENCE (mg_orders_fk);
CREATE DUPLICATED TABLE mg_bonus (cust_id bigint PRIMARY KEY, bonus int);
";

const PLAIN: &str = "
DROP TABLE IF EXISTS mg_orders_ref, mg_cust_ref, mg_bonus_ref;
CREATE TABLE mg_cust_ref (cust_id bigint PRIMARY KEY, name text, score int);
CREATE TABLE mg_orders_ref (order_id bigint, cust_id bigint NOT NULL REFERENCES mg_cust_ref,
  amount int, PRIMARY KEY (cust_id, order_id));
CREATE TABLE mg_bonus_ref (cust_id bigint PRIMARY KEY, bonus int);
";

const FILL: &str = "
INSERT INTO {cust} SELECT i, 'n' || i, i FROM generate_series(1, 200) i;
INSERT INTO {orders} SELECT i, i, i * 10 FROM generate_series(1, 200, 3) i;
INSERT INTO {bonus} SELECT i, 1000 FROM generate_series(1, 200, 7) i;
";

fn names(sql: &str, plain: bool) -> String {
    let suffix = if plain { "_ref" } else { "" };
    sql.replace("{cust}", &format!("mg_cust{suffix}"))
        .replace("{orders}", &format!("mg_orders{suffix}"))
        .replace("{bonus}", &format!("mg_bonus{suffix}"))
}

/// Runs `sql` through the proxy and on the plain copies: the same command tag (or the same
/// SQLSTATE), then the same rows in the target.
async fn both(proxy: &Client, plain: &Client, sql: &str) -> Result<u64, SqlState> {
    let through = proxy.simple_query(&names(sql, false)).await;
    let reference = plain.simple_query(&names(sql, true)).await;
    let outcome = match (through, reference) {
        (Ok(a), Ok(b)) => {
            assert_eq!(tag(&a), tag(&b), "{sql}");
            Ok(tag(&a))
        }
        (Err(a), Err(b)) => {
            assert_eq!(code(&a), code(&b), "{sql}: {a} / {b}");
            Err(code(&a))
        }
        (a, b) => panic!("{sql}: proxy {a:?}, plain {b:?}"),
    };
    let contents = "SELECT cust_id, name, score FROM {cust} ORDER BY cust_id";
    assert_eq!(
        simple_rows(proxy, &names(contents, false)).await,
        simple_rows(plain, &names(contents, true)).await,
        "after {sql}"
    );
    outcome
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn merge_into_a_sharded_table_answers_as_one_postgres() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(&c, SETUP).await;
    let plain = shards().connect(0).await;
    plain.batch_execute(PLAIN).await.unwrap();
    for (client, is_plain) in [(&c, false), (&plain, true)] {
        client.batch_execute(&names(FILL, is_plain)).await.unwrap();
    }

    // VALUES: matched rows updated, new rows inserted on their keys' shards.
    let upsert = "MERGE INTO {cust} t USING (VALUES (1, 'a', 10), (2, 'b', 20), (1001, 'new', 5), \
                  (1002, 'new2', 6), (77, 'c', 7)) AS s(cust_id, name, score) \
                  ON t.cust_id = s.cust_id \
                  WHEN MATCHED THEN UPDATE SET score = s.score, name = s.name \
                  WHEN NOT MATCHED THEN INSERT (cust_id, name, score) \
                  VALUES (s.cust_id, s.name, s.score)";
    assert_eq!(both(&c, &plain, upsert).await, Ok(5));
    for key in [1001, 1002] {
        let holding = counts_where("mg_cust", &format!("WHERE cust_id = {key}")).await;
        assert_eq!(holding.iter().sum::<i64>(), 1, "{key}: {holding:?}");
        let keyed = simple_rows(
            &c,
            &format!("SELECT count(*) FROM mg_cust WHERE cust_id = {key}"),
        )
        .await;
        assert_eq!(keyed, [[Some("1".to_string())]], "{key} on its key's shard");
    }
    let delete = "MERGE INTO {cust} t USING (VALUES (3), (5), (5000)) AS s(cust_id) \
                  ON t.cust_id = s.cust_id WHEN MATCHED THEN DELETE";
    assert_eq!(both(&c, &plain, delete).await, Ok(2));

    // A table of the family, joined on the key: each shard merges its own rows.
    let family = "MERGE INTO {cust} c USING {orders} o ON c.cust_id = o.cust_id \
                  WHEN MATCHED AND o.amount > 500 THEN UPDATE SET score = c.score + o.amount \
                  WHEN MATCHED THEN UPDATE SET name = c.name || '+'";
    both(&c, &plain, family).await.expect("family MERGE");
    // A duplicated table, nothing inserted: each shard updates its own matched rows.
    let bonus = "MERGE INTO {cust} c USING {bonus} b ON c.cust_id = b.cust_id \
                 WHEN MATCHED THEN UPDATE SET score = c.score + b.bonus";
    both(&c, &plain, bonus).await.expect("duplicated source");

    // One shard's error rolls every shard back.
    let failing = "MERGE INTO {cust} t USING (VALUES (10, 0), (11, 1), (12, 2), (13, 3), (14, 4)) \
                   AS s(cust_id, d) ON t.cust_id = s.cust_id \
                   WHEN MATCHED THEN UPDATE SET score = 100 / s.d";
    assert_eq!(
        both(&c, &plain, failing).await,
        Err(SqlState::DIVISION_BY_ZERO)
    );
    // Inside a block, rolled back with it.
    for (client, is_plain) in [(&c, false), (&plain, true)] {
        client
            .batch_execute(&names(
                "BEGIN; MERGE INTO {cust} t USING (VALUES (20), (21), (23)) AS s(cust_id) \
                 ON t.cust_id = s.cust_id WHEN MATCHED THEN DELETE; ROLLBACK",
                is_plain,
            ))
            .await
            .unwrap();
    }
    both(&c, &plain, "SELECT 1").await.unwrap();

    // What would move rows, insert rows on the wrong shard, or join across shards: refused.
    for refused in [
        "MERGE INTO mg_cust t USING (VALUES (1, 5)) AS s(cust_id, k) ON t.cust_id = s.cust_id \
         WHEN MATCHED THEN UPDATE SET cust_id = s.k",
        "MERGE INTO mg_cust t USING mg_bonus b ON t.cust_id = b.cust_id \
         WHEN NOT MATCHED THEN INSERT (cust_id, score) VALUES (b.cust_id, b.bonus)",
        "MERGE INTO mg_cust t USING (VALUES (1, 'x')) AS s(id, name) ON t.name = s.name \
         WHEN NOT MATCHED THEN INSERT (cust_id, name) VALUES (s.id, s.name)",
        "MERGE INTO mg_cust t USING mg_orders o ON t.cust_id = o.order_id \
         WHEN MATCHED THEN DELETE",
        "MERGE INTO mg_cust t USING (VALUES (900, 'x')) AS s(id, name) ON t.cust_id = s.id \
         WHEN NOT MATCHED THEN INSERT (cust_id, name) VALUES (s.id + 1, s.name)",
    ] {
        let e = c.batch_execute(refused).await.expect_err(refused);
        assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{refused}: {e}");
    }
    both(&c, &plain, "SELECT 1").await.unwrap();

    exec(
        &c,
        "DROP TABLE mg_orders; DROP TABLE mg_cust; DROP TABLE mg_bonus",
    )
    .await;
    plain
        .batch_execute("DROP TABLE mg_orders_ref, mg_cust_ref, mg_bonus_ref")
        .await
        .unwrap();
}
