//! SPLIT CHUNK: a chunk of modulus M becomes two of modulus 2M on its shard, and a half then
//! moves like any chunk. Routing over mixed moduli is checked by reading and writing every key
//! through the proxy after one half moved (a shard refuses a row of a chunk it does not hold),
//! placement on the shards themselves and by CHECK PLACEMENT.
mod common;
mod growth_common;
mod routing_common;

use growth_common::*;
use routing_common::simple_rows as rows;
use tokio_postgres::error::SqlState;

/// `(shard name, partition bound)` of each partition of `table` on shard `i`, by name.
async fn partitions(i: usize, table: &str) -> Vec<(String, String)> {
    rows(
        &common::shards().connect(i).await,
        &format!(
            "SELECT c.relname, pg_get_expr(c.relpartbound, c.oid)
               FROM pg_inherits h JOIN pg_class c ON c.oid = h.inhrelid
              WHERE h.inhparent = '{table}'::regclass ORDER BY 1"
        ),
    )
    .await
    .into_iter()
    .map(|r| (r[0].clone().unwrap(), r[1].clone().unwrap()))
    .collect()
}

fn bound(modulus: u32, remainder: u32) -> String {
    format!("FOR VALUES WITH (modulus {modulus}, remainder {remainder})")
}

/// SHOW CHUNKS FOR `table` as (chunk, shard index).
async fn chunks(c: &tokio_postgres::Client, table: &str) -> Vec<(u32, usize)> {
    rows(c, &format!("SHOW CHUNKS FOR {table}"))
        .await
        .iter()
        .map(|r| {
            let shard = r[3].as_deref().unwrap().trim_start_matches('s');
            (
                r[2].as_deref().unwrap().parse().unwrap(),
                shard.parse::<usize>().unwrap() - 1,
            )
        })
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_split_chunk_keeps_its_rows_and_a_half_moves() {
    let proxy = alone("gs", |_| {}).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE gs_c (id bigint PRIMARY KEY, v int NOT NULL, note text)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
            "CREATE SHARDED TABLE gs_l (id bigint NOT NULL, line int NOT NULL,
               PRIMARY KEY (id, line),
               CONSTRAINT gs_l_fk FOREIGN KEY (id) REFERENCES gs_c (id))
               PARTITION BY REFERENCE (gs_l_fk)",
            "INSERT INTO gs_c SELECT i, 0, 'n' || i FROM generate_series(1, 2000) i",
            "INSERT INTO gs_l SELECT i, 1 FROM generate_series(1, 2000) i",
        ],
    )
    .await;
    let before = chunks(&c, "gs_c").await;
    assert_eq!(before.iter().map(|c| c.0).collect::<Vec<_>>(), [0, 1, 2, 3]);
    let home = before[1].1;
    let away = 1 - home;
    let shard = common::shards().connect(home).await;
    // An audit trigger on the root: a split re-places rows, it does not insert them anew.
    each(
        &shard,
        &[
            "CREATE TABLE gs_audit (n int)",
            "CREATE FUNCTION gs_audit_row() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN INSERT INTO gs_audit VALUES (1); RETURN NEW; END $$",
            "CREATE TRIGGER gs_audit AFTER INSERT ON gs_c FOR EACH ROW EXECUTE FUNCTION gs_audit_row()",
            "COMMENT ON TABLE gs_c_c1 IS 'chunk one'",
        ],
    )
    .await;
    let in_chunk = one(&shard, "SELECT count(*) FROM gs_c_c1").await;

    c.simple_query("SPLIT CHUNK 1 FOR gs_c")
        .await
        .expect("SPLIT CHUNK");

    // Chunk 1 (4, 1) became chunks 1 and 5 of modulus 8, both on its shard.
    let after = chunks(&c, "gs_c").await;
    assert_eq!(
        after,
        [
            (0, before[0].1),
            (1, home),
            (2, before[2].1),
            (3, before[3].1),
            (5, home)
        ]
    );
    for table in ["gs_c", "gs_l"] {
        let parts = partitions(home, table).await;
        assert!(
            parts.contains(&(format!("{table}_c1"), bound(8, 1))),
            "{parts:?}"
        );
        assert!(
            parts.contains(&(format!("{table}_c5"), bound(8, 5))),
            "{parts:?}"
        );
        assert!(!parts.iter().any(|(_, b)| *b == bound(4, 1)), "{parts:?}");
    }
    assert_eq!(
        one(
            &shard,
            "SELECT (SELECT count(*) FROM gs_c_c1) + (SELECT count(*) FROM gs_c_c5)"
        )
        .await,
        in_chunk
    );
    assert_ne!(one(&shard, "SELECT count(*) FROM gs_c_c5").await, "0");
    assert_eq!(one(&shard, "SELECT count(*) FROM gs_audit").await, "0");
    assert_eq!(
        one(
            &shard,
            "SELECT obj_description('gs_c_c5'::regclass, 'pg_class')"
        )
        .await,
        "chunk one"
    );
    assert_eq!(
        one(
            &shard,
            "SELECT count(*) FROM pg_prepared_xacts WHERE gid LIKE 'shardwire_split_%'"
        )
        .await,
        "0"
    );
    placed_exactly(&c, "gs_c", "2000").await;
    placed_exactly(&c, "gs_l", "2000").await;

    // A half moves on its own; the other stays.
    c.simple_query(&format!("MOVE CHUNK 5 FOR gs_c TO SHARD {}", name(away)))
        .await
        .expect("MOVE CHUNK 5");
    let moved = chunks(&c, "gs_c").await;
    assert!(
        moved.contains(&(5, away)) && moved.contains(&(1, home)),
        "{moved:?}"
    );
    assert!(partitions(away, "gs_l")
        .await
        .contains(&("gs_l_c5".into(), bound(8, 5))));
    assert!(partitions(home, "gs_c")
        .await
        .contains(&("gs_c_c1".into(), bound(8, 1))));
    // A table added to the family after the split gets the chunks as they are now.
    c.batch_execute(
        "CREATE SHARDED TABLE gs_n (id bigint NOT NULL, CONSTRAINT gs_n_fk FOREIGN KEY (id)
           REFERENCES gs_c (id)) PARTITION BY REFERENCE (gs_n_fk)",
    )
    .await
    .unwrap();
    assert!(partitions(away, "gs_n")
        .await
        .contains(&("gs_n_c5".into(), bound(8, 5))));
    assert!(partitions(home, "gs_n")
        .await
        .contains(&("gs_n_c1".into(), bound(8, 1))));

    // Every key is routed to the shard that holds it: each keyed UPDATE finds its row, each
    // new row and child row is accepted by the shard it is sent to.
    let update = c
        .prepare("UPDATE gs_c SET v = v + 1 WHERE id = $1")
        .await
        .unwrap();
    for id in 1..=2000i64 {
        assert_eq!(c.execute(&update, &[&id]).await.unwrap(), 1, "id {id}");
    }
    each(
        &c,
        &[
            "INSERT INTO gs_c SELECT i, 1, 'later' FROM generate_series(2001, 3000) i",
            "INSERT INTO gs_l SELECT i, 2 FROM generate_series(1, 3000) i",
            "INSERT INTO gs_n SELECT i FROM generate_series(1, 3000) i",
        ],
    )
    .await;
    assert_eq!(
        one(&c, "SELECT count(*) FROM gs_c WHERE v = 1").await,
        "3000"
    );
    placed_exactly(&c, "gs_c", "3000").await;
    placed_exactly(&c, "gs_l", "5000").await;
    placed_exactly(&c, "gs_n", "3000").await;
    // PostgreSQL's own hash agrees: the moved half holds exactly the keys of (8, 5).
    let target = common::shards().connect(away).await;
    assert_eq!(
        one(
            &target,
            "SELECT count(*) FROM gs_c_c5
              WHERE NOT satisfies_hash_partition('gs_c'::regclass, 8, 5, id)"
        )
        .await,
        "0"
    );
    assert_eq!(
        one(&target, "SELECT count(*) FROM gs_c_c5").await,
        one(
            &shard,
            "SELECT count(*) FROM generate_series(1::bigint, 3000) i
              WHERE satisfies_hash_partition('gs_c'::regclass, 8, 5, i)"
        )
        .await
    );

    // Splitting a half again, and what SPLIT refuses.
    c.simple_query("SPLIT CHUNK 5 FOR gs_c")
        .await
        .expect("split 5");
    let again = chunks(&c, "gs_c").await;
    assert!(
        again.contains(&(5, away)) && again.contains(&(13, away)),
        "{again:?}"
    );
    placed_exactly(&c, "gs_c", "3000").await;
    c.batch_execute("CREATE DUPLICATED TABLE gs_d (id int PRIMARY KEY)")
        .await
        .unwrap();
    for (sql, expected) in [
        ("SPLIT CHUNK 9 FOR gs_c", SqlState::INVALID_PARAMETER_VALUE),
        ("SPLIT CHUNK 0 FOR gs_nope", SqlState::UNDEFINED_TABLE),
        ("SPLIT CHUNK 0 FOR gs_l", SqlState::WRONG_OBJECT_TYPE),
        ("SPLIT CHUNK 0 FOR gs_d", SqlState::WRONG_OBJECT_TYPE),
    ] {
        let e = c.simple_query(sql).await.expect_err(sql);
        assert_eq!(code(&e), expected, "{sql}: {e:?}");
    }
    c.batch_execute("BEGIN").await.unwrap();
    let e = c
        .simple_query("SPLIT CHUNK 0 FOR gs_c")
        .await
        .expect_err("in a block");
    assert_eq!(code(&e), SqlState::ACTIVE_SQL_TRANSACTION);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(chunks(&c, "gs_c").await, again);
}
