//! Row movement on sharding-key UPDATEs (seeds/004 "Enabling Automatic Data Movement on Sharding
//! Key Update"), checked on the shards themselves: a row whose new key belongs to another shard
//! is there and nowhere else, with its family's rows; with row movement disabled the statement
//! fails with ORA-14402 and changes nothing; a child's key cannot be updated.

mod common;
mod movement_common;
mod routing_common;

use common::shards;
use movement_common::*;
use routing_common::*;
use tokio_postgres::error::SqlState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_moves_to_the_shard_of_its_new_key() {
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_one (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO ENABLE ROW MOVEMENT",
    )
    .await;
    let (first, same, other, placement) = seeded(&client, "mv_one").await;
    let home = placement[0];
    let other_home = placement[other as usize - 1];

    // A key the proxy cannot compute is refused by name, with the row left where it is.
    let err = client
        .simple_query(&format!(
            "UPDATE mv_one SET cust_id = DEFAULT WHERE cust_id = {first}"
        ))
        .await
        .expect_err("SET key = DEFAULT");
    assert_eq!(code(&err), SqlState::FEATURE_NOT_SUPPORTED, "{err:?}");
    assert!(message(&err).contains("DEFAULT"), "{err:?}");
    assert_eq!(shards_of("mv_one", "cust_id", first).await, vec![home]);

    // Another key on the same shard: PostgreSQL moves the row between chunks itself.
    exec(
        &client,
        &format!("DELETE FROM mv_one WHERE cust_id = {same}"),
    )
    .await;
    let msgs = client
        .simple_query(&format!(
            "UPDATE mv_one SET cust_id = {same} WHERE cust_id = {first}"
        ))
        .await
        .expect("same-shard key update");
    assert_eq!(tag(&msgs), 1);
    assert_eq!(shards_of("mv_one", "cust_id", same).await, vec![home]);
    assert!(shards_of("mv_one", "cust_id", first).await.is_empty());

    // Another shard: deleted there, inserted here, RETURNING the new row, counted once.
    exec(
        &client,
        &format!("DELETE FROM mv_one WHERE cust_id = {other}"),
    )
    .await;
    let rows = simple_rows(
        &client,
        &format!(
            "UPDATE mv_one SET cust_id = {other}, v = v || '!' WHERE cust_id = {same} \
             RETURNING cust_id, v"
        ),
    )
    .await;
    assert_eq!(
        rows,
        vec![vec![Some(other.to_string()), Some(format!("v{first}!"))]]
    );
    assert_eq!(
        shards_of("mv_one", "cust_id", other).await,
        vec![other_home]
    );
    assert!(shards_of("mv_one", "cust_id", same).await.is_empty());

    let total: i64 = counts("mv_one").await.iter().sum();

    // A unique violation on the new shard undoes everything.
    let taken = if other == 50 { 51 } else { 50 };
    let err = client
        .simple_query(&format!(
            "UPDATE mv_one SET cust_id = {taken} WHERE cust_id = {other}"
        ))
        .await
        .expect_err("duplicate key");
    assert_eq!(code(&err), SqlState::UNIQUE_VIOLATION, "{err}");
    assert_eq!(
        shards_of("mv_one", "cust_id", other).await,
        vec![other_home]
    );
    assert_eq!(counts("mv_one").await.iter().sum::<i64>(), total);

    // Inside a block: a move rolled back leaves the row; one committed moves it.
    for stmt in [
        "BEGIN".to_string(),
        format!("UPDATE mv_one SET cust_id = 7000 WHERE cust_id = {other}"),
        "ROLLBACK".into(),
    ] {
        client.simple_query(&stmt).await.expect(&stmt);
    }
    assert_eq!(
        shards_of("mv_one", "cust_id", other).await,
        vec![other_home]
    );
    for stmt in [
        "BEGIN".to_string(),
        format!("UPDATE mv_one SET cust_id = 7000 WHERE cust_id = {other}"),
        "COMMIT".into(),
    ] {
        client.simple_query(&stmt).await.expect(&stmt);
    }
    assert!(shards_of("mv_one", "cust_id", other).await.is_empty());
    assert_eq!(shards_of("mv_one", "cust_id", 7000).await.len(), 1);

    // Many rows at once, to several shards, through a prepared statement with parameters.
    let in_range: i64 = counts_where("mv_one", "WHERE cust_id BETWEEN 10 AND 40")
        .await
        .iter()
        .sum();
    let n = client
        .execute(
            "UPDATE mv_one SET cust_id = cust_id + $1 WHERE cust_id BETWEEN $2 AND $3",
            &[&1000i64, &10i64, &40i64],
        )
        .await
        .expect("prepared multi-row key update");
    assert_eq!(n, in_range as u64, "each row counted once");
    assert_eq!(
        counts("mv_one").await.iter().sum::<i64>(),
        total,
        "no row lost or doubled"
    );
    let moved: i64 = counts_where("mv_one", "WHERE cust_id BETWEEN 1010 AND 1040")
        .await
        .iter()
        .sum();
    assert_eq!(moved, in_range);

    // Zero rows: UPDATE 0, and RETURNING still describes its columns.
    let msgs = client
        .simple_query("UPDATE mv_one SET cust_id = 5 WHERE cust_id = -1 RETURNING cust_id")
        .await
        .expect("no rows");
    assert_eq!(tag(&msgs), 0);

    assert_eq!(
        prepared_holding("mv_one").await,
        0,
        "no prepared transaction left"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn with_row_movement_disabled_a_key_update_across_shards_fails_with_ora_14402() {
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_off (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
    )
    .await;
    let (first, same, other, placement) = seeded(&client, "mv_off").await;
    exec(
        &client,
        &format!("DELETE FROM mv_off WHERE cust_id IN ({same}, {other})"),
    )
    .await;
    let err = client
        .simple_query(&format!(
            "UPDATE mv_off SET cust_id = {other} WHERE cust_id = {first}"
        ))
        .await
        .expect_err("ORA-14402");
    assert_eq!(code(&err), SqlState::CHECK_VIOLATION);
    let text = message(&err);
    assert!(
        text.starts_with("ORA-14402: updating partition key column would cause a partition change"),
        "{text}"
    );
    assert_eq!(
        shards_of("mv_off", "cust_id", first).await,
        vec![placement[0]]
    );
    assert!(shards_of("mv_off", "cust_id", other).await.is_empty());
    // The same shard is no partition change across shards: allowed.
    client
        .simple_query(&format!(
            "UPDATE mv_off SET cust_id = {same} WHERE cust_id = {first}"
        ))
        .await
        .expect("same-shard key update");

    // In a block the error fails the block, as any error does.
    client.simple_query("BEGIN").await.expect("begin");
    let err = client
        .execute(
            "UPDATE mv_off SET cust_id = $1 WHERE cust_id = $2",
            &[&other, &same],
        )
        .await
        .expect_err("ORA-14402 prepared");
    assert_eq!(code(&err), SqlState::CHECK_VIOLATION);
    let err = client
        .simple_query("SELECT 1")
        .await
        .expect_err("the block has failed");
    assert_eq!(code(&err), SqlState::IN_FAILED_SQL_TRANSACTION);
    client.simple_query("ROLLBACK").await.expect("rollback");

    // Enabled, it moves.
    exec(&client, "ALTER TABLE mv_off ENABLE ROW MOVEMENT").await;
    client
        .simple_query(&format!(
            "UPDATE mv_off SET cust_id = {other} WHERE cust_id = {same}"
        ))
        .await
        .expect("moves once enabled");
    assert_eq!(
        shards_of("mv_off", "cust_id", other).await,
        vec![placement[other as usize - 1]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_family_root_moves_with_its_children_and_grandchildren() {
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_accounts (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO;
         CREATE SHARDED TABLE mv_orders (order_id bigint NOT NULL, cust_id bigint NOT NULL, \
           note text, \
           CONSTRAINT mv_orders_pk PRIMARY KEY (cust_id, order_id), \
           CONSTRAINT mv_orders_fk FOREIGN KEY (cust_id) REFERENCES mv_accounts (cust_id) \
             ON DELETE CASCADE) \
         PARTITION BY REFERENCE (mv_orders_fk);
         CREATE SHARDED TABLE mv_lineitems (line_no int NOT NULL, order_id bigint NOT NULL, \
           cust_id bigint NOT NULL, qty int, \
           CONSTRAINT mv_li_pk PRIMARY KEY (cust_id, order_id, line_no), \
           CONSTRAINT mv_li_fk FOREIGN KEY (cust_id, order_id) \
             REFERENCES mv_orders (cust_id, order_id)) \
         PARTITION BY REFERENCE (mv_li_fk);
         ALTER TABLE mv_lineitems ENABLE ROW MOVEMENT;
         ALTER TABLE mv_orders ENABLE ROW MOVEMENT;
         ALTER TABLE mv_accounts ENABLE ROW MOVEMENT",
    )
    .await;
    let (first, same, other, placement) = seeded(&client, "mv_accounts").await;
    for id in [first, same] {
        for o in 1..=3 {
            exec(
                &client,
                &format!("INSERT INTO mv_orders VALUES ({o}, {id}, 'o{o}')"),
            )
            .await;
            for l in 1..=2 {
                exec(
                    &client,
                    &format!(
                        "INSERT INTO mv_lineitems VALUES ({l}, {o}, {id}, {})",
                        o * l
                    ),
                )
                .await;
            }
        }
    }
    // A child's key is the root's to change.
    let err = client
        .simple_query(&format!(
            "UPDATE mv_orders SET cust_id = {other} WHERE cust_id = {first}"
        ))
        .await
        .expect_err("child key update");
    assert_eq!(code(&err), SqlState::FEATURE_NOT_SUPPORTED);
    assert!(message(&err).contains("family's root table"), "{err:?}");

    // Across shards: the account, its 3 orders and 6 line items leave together.
    exec(
        &client,
        &format!("DELETE FROM mv_accounts WHERE cust_id = {other}"),
    )
    .await;
    let n = client
        .execute(
            "UPDATE mv_accounts SET cust_id = $1 WHERE cust_id = $2",
            &[&other, &first],
        )
        .await
        .expect("family move");
    assert_eq!(n, 1, "the root rows are counted");
    let to = placement[other as usize - 1];
    for table in ["mv_accounts", "mv_orders", "mv_lineitems"] {
        assert!(
            shards_of(table, "cust_id", first).await.is_empty(),
            "{table}: nothing left under the old key"
        );
        assert_eq!(
            shards_of(table, "cust_id", other).await,
            vec![to],
            "{table}"
        );
    }
    let on_target = shards().connect(to).await;
    let moved: i64 = on_target
        .query_one(
            "SELECT count(*) FROM mv_lineitems WHERE cust_id = $1",
            &[&other],
        )
        .await
        .expect("line items")
        .get(0);
    assert_eq!(moved, 6);

    // On the same shard: the children's keys are rewritten with the root's.
    let target_same = placement[same as usize - 1];
    let mut free_same = None;
    for k in 200..400i64 {
        exec(
            &client,
            &format!("INSERT INTO mv_accounts VALUES ({k}, 'probe')"),
        )
        .await;
        let on = shards_of("mv_accounts", "cust_id", k).await;
        exec(
            &client,
            &format!("DELETE FROM mv_accounts WHERE cust_id = {k}"),
        )
        .await;
        if on == vec![target_same] {
            free_same = Some(k);
            break;
        }
    }
    let new_same = free_same.expect("a free key on the same shard");
    client
        .simple_query(&format!(
            "UPDATE mv_accounts SET cust_id = {new_same} WHERE cust_id = {same}"
        ))
        .await
        .expect("same-shard family re-key");
    for table in ["mv_orders", "mv_lineitems"] {
        assert!(
            shards_of(table, "cust_id", same).await.is_empty(),
            "{table}"
        );
        assert_eq!(
            shards_of(table, "cust_id", new_same).await,
            vec![target_same],
            "{table}"
        );
    }

    // Every foreign key still holds, on every shard.
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let orphans: i64 = c
            .query_one(
                "SELECT (SELECT count(*) FROM mv_orders o WHERE NOT EXISTS \
                   (SELECT 1 FROM mv_accounts a WHERE a.cust_id = o.cust_id)) + \
                 (SELECT count(*) FROM mv_lineitems l WHERE NOT EXISTS \
                   (SELECT 1 FROM mv_orders o WHERE o.cust_id = l.cust_id \
                    AND o.order_id = l.order_id))",
                &[],
            )
            .await
            .expect("orphans")
            .get(0);
        assert_eq!(orphans, 0, "shard {i}");
    }
    assert_eq!(counts("mv_orders").await.iter().sum::<i64>(), 6);
    assert_eq!(counts("mv_lineitems").await.iter().sum::<i64>(), 12);
}

/// The same moves through psql (simple protocol, as a person types them).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn psql_moves_a_row_and_reports_ora_14402() {
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_psql (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO ENABLE ROW MOVEMENT",
    )
    .await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_psql_off (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
    )
    .await;
    let (first, _, other, placement) = seeded(&client, "mv_psql").await;
    for id in [first, other] {
        exec(
            &client,
            &format!("INSERT INTO mv_psql_off VALUES ({id}, 'off')"),
        )
        .await;
    }
    exec(
        &client,
        &format!("DELETE FROM mv_psql WHERE cust_id = {other}"),
    )
    .await;
    exec(
        &client,
        &format!("DELETE FROM mv_psql_off WHERE cust_id = {other}"),
    )
    .await;
    let out = proxy.psql(&format!(
        "UPDATE mv_psql SET cust_id = {other} WHERE cust_id = {first} RETURNING cust_id, v;\n\
         UPDATE mv_psql_off SET cust_id = {other} WHERE cust_id = {first};\n"
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(stdout.contains(&format!(" {other} | v{first}")), "{stdout}");
    assert!(stdout.contains("UPDATE 1"), "{stdout}");
    assert!(
        stderr.contains("ORA-14402: updating partition key column would cause a partition change"),
        "{stderr}"
    );
    assert_eq!(
        shards_of("mv_psql", "cust_id", other).await,
        vec![placement[other as usize - 1]]
    );
    assert!(shards_of("mv_psql", "cust_id", first).await.is_empty());
    assert_eq!(shards_of("mv_psql_off", "cust_id", first).await.len(), 1);
    assert!(shards_of("mv_psql_off", "cust_id", other).await.is_empty());
}

/// User-defined sharding: a list table's row moves to the shard of its new region's partition.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_list_sharded_row_moves_to_its_new_partitions_shard() {
    let proxy = start();
    let client = proxy.connect().await;
    tablespaces(&client, "mvl").await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_list (id bigint NOT NULL, region varchar(2) NOT NULL, v text, \
           PRIMARY KEY (region, id)) \
         PARTITION BY LIST (region) \
         (PARTITION p_1 VALUES ('OR', 'WA') TABLESPACE mvl_t1, \
          PARTITION p_2 VALUES ('AZ', 'UT') TABLESPACE mvl_t2, \
          PARTITION p_3 VALUES ('NY') TABLESPACE mvl_t3, \
          PARTITION p_4 VALUES ('TX', 'FL') TABLESPACE mvl_t4) ENABLE ROW MOVEMENT",
    )
    .await;
    exec(
        &client,
        "INSERT INTO mv_list VALUES (1, 'OR', 'a'), (2, 'WA', 'b')",
    )
    .await;
    let n = client
        .execute(
            "UPDATE mv_list SET region = $1 WHERE id = $2",
            &[&"NY", &1i64],
        )
        .await
        .expect("list move");
    assert_eq!(n, 1);
    let on: Vec<i64> = counts_where("mv_list", "WHERE id = 1").await;
    let mut expected = vec![0; SHARDS];
    expected[region_shard("NY")] = 1;
    assert_eq!(on, expected, "the row is on NY's shard only");
    // Within the partition's shard: WA stays where OR was.
    client
        .simple_query("UPDATE mv_list SET region = 'OR' WHERE id = 2")
        .await
        .expect("same-shard list update");
    let on: Vec<i64> = counts_where("mv_list", "WHERE id = 2 AND region = 'OR'").await;
    let mut expected = vec![0; SHARDS];
    expected[region_shard("OR")] = 1;
    assert_eq!(on, expected);
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn thousands_of_rows_move_in_one_statement() {
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_bulk (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO ENABLE ROW MOVEMENT;
         CREATE SHARDED TABLE mv_bulk_items (item int NOT NULL, cust_id bigint NOT NULL, \
           CONSTRAINT mv_bulk_items_pk PRIMARY KEY (cust_id, item), \
           CONSTRAINT mv_bulk_items_fk FOREIGN KEY (cust_id) REFERENCES mv_bulk (cust_id)) \
         PARTITION BY REFERENCE (mv_bulk_items_fk);
         ALTER TABLE mv_bulk_items ENABLE ROW MOVEMENT;
         INSERT INTO mv_bulk SELECT g, 'v' || g FROM generate_series(1, 2500) g;
         INSERT INTO mv_bulk_items SELECT g, 1 FROM generate_series(1, 2500) g",
    )
    .await;
    // One root with more children than one INSERT statement of the move carries.
    let moved = client
        .simple_query("UPDATE mv_bulk SET cust_id = 100001 WHERE cust_id = 1")
        .await
        .expect("family with 2500 children moves");
    assert_eq!(tag(&moved), 1);
    let items = counts_where("mv_bulk_items", "WHERE cust_id = 100001").await;
    let root = shards_of("mv_bulk", "cust_id", 100001).await;
    assert_eq!(root.len(), 1);
    assert_eq!(items[root[0]], 2500, "{items:?}");
    assert_eq!(items.iter().sum::<i64>(), 2500, "{items:?}");

    // Every root at once, most of them to another shard, the session usable afterwards.
    let moved = client
        .simple_query("UPDATE mv_bulk SET cust_id = cust_id + 1000000 WHERE cust_id <= 2500")
        .await
        .expect("2500 roots move");
    assert_eq!(tag(&moved), 2499);
    let left = counts_where("mv_bulk", "WHERE cust_id <= 2500").await;
    assert_eq!(left.iter().sum::<i64>(), 0, "{left:?}");
    let total = counts("mv_bulk").await;
    assert_eq!(total.iter().sum::<i64>(), 2500, "{total:?}");
    for id in [1000002_i64, 1001234, 1002500] {
        assert_eq!(shards_of("mv_bulk", "cust_id", id).await.len(), 1, "{id}");
    }
    let rows = client
        .query_one("SELECT count(*) FROM mv_bulk", &[])
        .await
        .expect("session usable");
    assert_eq!(rows.get::<_, i64>(0), 2500);
}
