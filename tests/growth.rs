//! Growing online: MOVE CHUNK moves a family's chunk to another shard by logical replication
//! while clients write to it, SHOW MOVES records it, CHECK PLACEMENT proves where every row is.
//! Placement is checked on the shards themselves.
mod common;
mod growth_common;
mod routing_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;

use growth_common::*;
use routing_common::simple_rows as rows;
use tokio_postgres::error::SqlState;
use tokio_postgres::SimpleQueryMessage;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_chunk_moves_with_its_family_while_clients_write() {
    let proxy = alone("gm", |_| {}).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE gm_c (id bigint PRIMARY KEY, v int NOT NULL)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
            "CREATE SHARDED TABLE gm_l (id bigint NOT NULL, line int NOT NULL, note text,
               PRIMARY KEY (id, line),
               CONSTRAINT gm_l_fk FOREIGN KEY (id) REFERENCES gm_c (id))
               PARTITION BY REFERENCE (gm_l_fk)",
            "INSERT INTO gm_c SELECT i, 0 FROM generate_series(1, 3000) i",
            "INSERT INTO gm_l SELECT i, 1, 'first' FROM generate_series(1, 3000) i",
        ],
    )
    .await;
    let before = chunk_map(&c, "gm_c").await;
    let source = before[1];
    let target = 1 - source;
    let in_chunk = one(
        &common::shards().connect(source).await,
        "SELECT count(*) FROM gm_c_c1",
    )
    .await;
    assert_ne!(in_chunk, "0");

    // Clients keep writing through the move, most of it to the moving chunk: new rows with
    // keys in chunk 1 and in others, and updates of chunk 1's old rows.
    let modulus = before.len();
    let keyed = |from: i64, to: i64, chunk: usize| {
        format!(
            "SELECT i FROM generate_series({from}::bigint, {to}) i \
              WHERE satisfies_hash_partition('gm_c'::regclass, {modulus}, {chunk}, i)"
        )
    };
    let ids = |rows: Vec<Vec<Option<String>>>| -> Vec<i64> {
        rows.iter()
            .map(|r| r[0].as_deref().unwrap().parse().unwrap())
            .collect()
    };
    let shard = common::shards().connect(source).await;
    let old_in_chunk = ids(rows(&shard, &keyed(1, 3000, 1)).await);
    let new_in_chunk = ids(rows(&shard, &keyed(100_000, 400_000, 1)).await);
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..3usize)
        .map(|w| {
            let stop = stop.clone();
            let addr = proxy.conn_string();
            let old: Vec<i64> = old_in_chunk.iter().copied().skip(w).step_by(3).collect();
            let new: Vec<i64> = new_in_chunk.iter().copied().skip(w).step_by(3).collect();
            tokio::spawn(async move {
                let (client, conn) = tokio_postgres::connect(&addr, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(conn);
                let (mut inserted, mut updated) = (Vec::new(), 0usize);
                // Keys outside chunk 1 too: 500_000 and up, apart from the list.
                let mut elsewhere = 500_000 + 100_000 * w as i64;
                for (n, id) in new.iter().enumerate() {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let id = if n % 4 == 3 {
                        elsewhere += 1;
                        elsewhere
                    } else {
                        *id
                    };
                    client
                        .batch_execute(&format!(
                            "INSERT INTO gm_c VALUES ({id}, 1); \
                             INSERT INTO gm_l VALUES ({id}, 1, 'new')"
                        ))
                        .await
                        .unwrap_or_else(|e| panic!("writer {w}: insert {id}: {e:?}"));
                    inserted.push(id);
                    let old_id = old[n % old.len()];
                    let changed = client
                        .execute("UPDATE gm_c SET v = v + 1 WHERE id = $1", &[&old_id])
                        .await
                        .unwrap_or_else(|e| panic!("writer {w}: update {old_id}: {e:?}"));
                    assert_eq!(changed, 1, "writer {w}: update {old_id}");
                    updated += 1;
                }
                (inserted, updated)
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    let moved = c
        .simple_query(&format!("MOVE CHUNK 1 FOR gm_c TO SHARD {}", name(target)))
        .await
        .expect("MOVE CHUNK");
    assert!(matches!(
        moved.last(),
        Some(SimpleQueryMessage::CommandComplete(_))
    ));
    tokio::time::sleep(std::time::Duration::from_millis(300)).await;
    stop.store(true, Ordering::Relaxed);
    let (mut acked, mut updates_acked) = (Vec::new(), 0);
    for w in writers {
        let (inserted, updated) = w.await.expect("writer");
        acked.extend(inserted);
        updates_acked += updated;
    }

    // The chunk map says the target, and the shards agree: chunk 1 of both tables is a
    // partition there and gone from the source.
    let after = chunk_map(&c, "gm_c").await;
    assert_eq!(after[1], target);
    assert_eq!(after[0], before[0]);
    let on_target = common::shards().connect(target).await;
    let on_source = common::shards().connect(source).await;
    for part in ["gm_c_c1", "gm_l_c1"] {
        let attached =
            format!("SELECT count(*) FROM pg_inherits WHERE inhrelid = to_regclass('{part}')");
        assert_eq!(
            one(&on_target, &attached).await,
            "1",
            "{part} on the target"
        );
        assert_eq!(
            one(&on_source, &format!("SELECT to_regclass('{part}') IS NULL")).await,
            "t",
            "{part} left on the source"
        );
    }
    // Indexes and the family's foreign key hold on the moved partitions.
    assert_eq!(
        one(
            &on_target,
            "SELECT count(*) FROM pg_constraint WHERE conrelid = 'gm_l_c1'::regclass AND contype = 'f'"
        )
        .await,
        "1"
    );
    assert_eq!(
        one(
            &on_target,
            "SELECT count(*) FROM pg_index WHERE indrelid = 'gm_c_c1'::regclass AND indisprimary"
        )
        .await,
        "1"
    );

    // Every acknowledged write is there, once.
    let total = one(&c, "SELECT count(*) FROM gm_c").await;
    assert_eq!(total, (3000 + acked.len()).to_string());
    let lines = one(&c, "SELECT count(*) FROM gm_l").await;
    assert_eq!(lines, total);
    let new_rows = one(&c, "SELECT count(*) FROM gm_c WHERE id > 3000 AND v = 1").await;
    assert_eq!(new_rows, acked.len().to_string());
    let orphans = one(
        &c,
        "SELECT count(*) FROM gm_l l LEFT JOIN gm_c c USING (id) WHERE c.id IS NULL",
    )
    .await;
    assert_eq!(orphans, "0");
    // Each update of an old row added one: their sum is the number of updates made.
    let updates = one(&c, "SELECT sum(v) FROM gm_c WHERE id <= 3000").await;
    assert_eq!(updates, updates_acked.to_string());
    // A keyed read of a moved row finds it on the target.
    let in_moved = one(&on_target, "SELECT min(id) FROM gm_c_c1").await;
    let read = format!("SELECT v FROM gm_c WHERE id = {in_moved}");
    assert_eq!(one(&c, &read).await, one(&on_target, &read).await);

    // CHECK PLACEMENT proves it: every row once, none misplaced.
    let placement = rows(&c, "CHECK PLACEMENT FOR gm_c").await;
    let counted: i64 = placement
        .iter()
        .map(|r| r[3].as_deref().unwrap().parse::<i64>().unwrap())
        .sum();
    assert_eq!(counted.to_string(), total);
    assert!(placement.iter().all(|r| r[4].as_deref() == Some("0")));
    assert!(placement
        .iter()
        .any(|r| r[1].as_deref() == Some(&name(target)[..]) && r[2].as_deref() == Some("1")));

    // SHOW MOVES records it.
    let moves = moves_of(&c, "gm_c").await;
    assert_eq!(moves.len(), 1);
    let m = &moves[0];
    assert_eq!(m[1].as_deref(), Some("gm_c"));
    assert_eq!(m[2].as_deref(), Some("1"));
    assert_eq!(m[3].as_deref(), Some(&name(source)[..]));
    assert_eq!(m[4].as_deref(), Some(&name(target)[..]));
    assert_eq!(m[5].as_deref(), Some("done"));
    assert_ne!(m[6].as_deref(), Some("0"));
    assert!(m[9].is_some() && m[10].is_some());
    no_replication_left(&proxy, &c, "gm_c").await;

    // And back again, through psql: the chunk's tables can move to a shard that had them
    // before, and libpq reads the answer without complaint.
    let sql = format!("MOVE CHUNK 1 FOR gm_c TO SHARD {};\n", name(source));
    let out = tokio::task::block_in_place(|| proxy.psql(&sql));
    let (stdout, stderr) = (
        String::from_utf8_lossy(&out.stdout),
        String::from_utf8_lossy(&out.stderr),
    );
    assert_eq!(stdout.trim(), "CHUNK MOVED", "{stderr}");
    assert!(stderr.is_empty(), "{stderr}");
    assert_eq!(chunk_map(&c, "gm_c").await[1], source);
    assert_eq!(one(&c, "SELECT count(*) FROM gm_c").await, total);
    no_replication_left(&proxy, &c, "gm_c").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn growth_statements_refuse_what_they_cannot_do() {
    let proxy = alone("gr", |_| {}).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE gr_c (id bigint PRIMARY KEY) PARTITION BY CONSISTENT HASH (id)
               PARTITIONS AUTO",
            "CREATE SHARDED TABLE gr_l (id bigint NOT NULL, CONSTRAINT gr_l_fk FOREIGN KEY (id)
               REFERENCES gr_c (id)) PARTITION BY REFERENCE (gr_l_fk)",
            "CREATE DUPLICATED TABLE gr_d (id int PRIMARY KEY)",
            "CREATE SHARDED TABLE gr_two (id bigint PRIMARY KEY)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 2",
            "CREATE SHARDED TABLE gr_one (id bigint PRIMARY KEY)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 1",
            "CREATE VIEW gr_two_v AS SELECT id FROM gr_two",
            "CREATE VIEW gr_one_v AS SELECT id FROM gr_one",
        ],
    )
    .await;
    let two = chunk_map(&c, "gr_two").await;
    let one_shard = chunk_map(&c, "gr_one").await[0];
    let map = chunk_map(&c, "gr_c").await;
    let other = 1 - map[0];
    let refused = [
        (
            "MOVE CHUNK 0 FOR gr_nope TO SHARD s1",
            SqlState::UNDEFINED_TABLE,
        ),
        (
            &format!("MOVE CHUNK {} FOR gr_c TO SHARD s1", map.len())[..],
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            &format!("MOVE CHUNK 0 FOR gr_c TO SHARD {}", name(map[0]))[..],
            SqlState::INVALID_PARAMETER_VALUE,
        ),
        (
            "MOVE CHUNK 0 FOR gr_c TO SHARD nowhere",
            SqlState::UNDEFINED_OBJECT,
        ),
        (
            "MOVE CHUNK 0 FOR gr_l TO SHARD s1",
            SqlState::WRONG_OBJECT_TYPE,
        ),
        (
            "MOVE CHUNK 0 FOR gr_d TO SHARD s1",
            SqlState::WRONG_OBJECT_TYPE,
        ),
        ("CHECK PLACEMENT FOR gr_nope", SqlState::UNDEFINED_TABLE),
        // Views over the family would not follow its tables: with them, a shard's last chunk
        // stays, and a shard holding none cannot take one.
        (
            &format!("MOVE CHUNK 0 FOR gr_two TO SHARD {}", name(two[1]))[..],
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        ),
        (
            &format!("MOVE CHUNK 0 FOR gr_one TO SHARD {}", name(1 - one_shard))[..],
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        ),
    ];
    for (sql, expected) in refused {
        let e = c.simple_query(sql).await.expect_err(sql);
        assert_eq!(code(&e), expected, "{sql}: {e:?}");
    }
    c.batch_execute("BEGIN").await.unwrap();
    let e = c
        .simple_query(&format!("MOVE CHUNK 0 FOR gr_c TO SHARD {}", name(other)))
        .await
        .expect_err("in a block");
    assert_eq!(code(&e), SqlState::ACTIVE_SQL_TRANSACTION);
    c.batch_execute("ROLLBACK").await.unwrap();
    // Nothing was recorded or changed; the session goes on.
    assert!(moves_of(&c, "gr_c").await.is_empty());
    assert_eq!(chunk_map(&c, "gr_c").await, map);
    // A cursor's MOVE is still PostgreSQL's.
    c.batch_execute("BEGIN; DECLARE chunk CURSOR FOR SELECT 1; MOVE chunk; COMMIT")
        .await
        .unwrap();

    // A row on a shard the chunk map does not give its chunk is found misplaced.
    let modulus = map.len();
    let stray = common::shards().connect(other).await;
    stray
        .batch_execute(&format!(
            "CREATE TABLE gr_c_c0 PARTITION OF gr_c FOR VALUES WITH (MODULUS {modulus}, REMAINDER 0)"
        ))
        .await
        .unwrap();
    let id: i64 = stray
        .query_one(
            &format!(
                "SELECT i::bigint FROM generate_series(1, 1000) i
                  WHERE satisfies_hash_partition('gr_c'::regclass, {modulus}, 0, i::bigint) LIMIT 1"
            ),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    stray
        .execute("INSERT INTO gr_c VALUES ($1)", &[&id])
        .await
        .unwrap();
    let placement = rows(&c, "CHECK PLACEMENT FOR gr_c").await;
    let misplaced: Vec<_> = placement
        .iter()
        .filter(|r| r[4].as_deref() != Some("0"))
        .collect();
    assert_eq!(misplaced.len(), 1, "{placement:?}");
    assert_eq!(misplaced[0][1].as_deref(), Some(&name(other)[..]));
    assert_eq!(misplaced[0][2].as_deref(), Some("0"));
    assert_eq!(misplaced[0][4].as_deref(), Some("1"));
}

/// CANCEL MOVE stops a move that has not cut over: here its cutover cannot get the source's
/// lock while a client's transaction has read the chunk (a read takes no transaction id, so
/// the copy's replication slot does not wait for it), so it keeps backing off.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn cancel_move_stops_a_move_before_its_cutover() {
    let proxy = alone("gx", |c| c.moves.cutover_pause_ms = 200).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE gx_c (id bigint PRIMARY KEY, v int)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
            "INSERT INTO gx_c SELECT i, 0 FROM generate_series(1, 400) i",
        ],
    )
    .await;
    let map = chunk_map(&c, "gx_c").await;
    let (source, target) = (map[1], 1 - map[1]);
    let in_chunk = one(
        &common::shards().connect(source).await,
        "SELECT min(id) FROM gx_c_c1",
    )
    .await;
    let blocker = proxy.connect().await;
    blocker
        .batch_execute(&format!("BEGIN; SELECT v FROM gx_c WHERE id = {in_chunk}"))
        .await
        .unwrap();
    let mover = {
        let addr = proxy.conn_string();
        let sql = format!("MOVE CHUNK 1 FOR gx_c TO SHARD {}", name(target));
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&addr, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            client.simple_query(&sql).await.map(drop)
        })
    };
    let started = std::time::Instant::now();
    let id = loop {
        let moves = moves_of(&c, "gx_c").await;
        if let Some(m) = moves
            .iter()
            .find(|m| m[5].as_deref() == Some("cutting_over"))
        {
            break m[0].clone().unwrap();
        }
        assert!(started.elapsed().as_secs() < 30, "no cutover: {moves:?}");
        tokio::time::sleep(std::time::Duration::from_millis(50)).await;
    };
    c.batch_execute(&format!("CANCEL MOVE {id}"))
        .await
        .expect("CANCEL MOVE");
    let e = mover.await.unwrap().expect_err("the move was canceled");
    assert_eq!(code(&e), SqlState::QUERY_CANCELED, "{e:?}");
    let moves = moves_of(&c, "gx_c").await;
    assert_eq!(moves[0][5].as_deref(), Some("canceled"), "{moves:?}");
    // Nothing changed: the chunk stays, the client's transaction goes on.
    blocker
        .batch_execute(&format!(
            "UPDATE gx_c SET v = 7 WHERE id = {in_chunk}; COMMIT"
        ))
        .await
        .unwrap();
    assert_eq!(chunk_map(&c, "gx_c").await, map);
    assert_eq!(
        one(&c, &format!("SELECT v FROM gx_c WHERE id = {in_chunk}")).await,
        "7"
    );
    assert_eq!(one(&c, "SELECT count(*) FROM gx_c").await, "400");
    assert_eq!(
        one(
            &common::shards().connect(target).await,
            "SELECT to_regclass('gx_c_c1') IS NULL"
        )
        .await,
        "t"
    );
    no_replication_left(&proxy, &c, "gx_c").await;
    for (sql, expected) in [
        (
            format!("CANCEL MOVE {id}"),
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        ),
        ("CANCEL MOVE 999999".to_string(), SqlState::UNDEFINED_OBJECT),
    ] {
        let e = c.simple_query(&sql).await.expect_err(&sql);
        assert_eq!(code(&e), expected, "{sql}: {e:?}");
    }
}

/// REBALANCE TABLESPACE SET moves what balance needs: after two chunks were moved onto one
/// shard by hand, two go back, and every row stays where CHECK PLACEMENT finds it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn rebalance_evens_out_a_tablespace_set() {
    let proxy = alone("gb", |c| c.moves.rebalance_parallel = 2).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE TABLESPACE SET grb USING SHARDS (s1, s2)",
            "CREATE SHARDED TABLE gb_c (id bigint PRIMARY KEY, v int)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 6 TABLESPACE SET grb",
            "CREATE SHARDED TABLE gb_l (id bigint NOT NULL, CONSTRAINT gb_l_fk FOREIGN KEY (id)
               REFERENCES gb_c (id)) PARTITION BY REFERENCE (gb_l_fk)",
            "CREATE SHARDED TABLE gb_d (id bigint PRIMARY KEY)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 6 TABLESPACE SET grb",
            "INSERT INTO gb_c SELECT i, i FROM generate_series(1, 800) i",
            "INSERT INTO gb_l SELECT i FROM generate_series(1, 800) i",
            "INSERT INTO gb_d SELECT i FROM generate_series(1, 800) i",
        ],
    )
    .await;
    let count_on = |map: &[usize], shard: usize| map.iter().filter(|s| **s == shard).count();
    // Two of s1's three onto s2, by hand, in both families.
    for table in ["gb_c", "gb_d"] {
        let map = chunk_map(&c, table).await;
        assert_eq!((count_on(&map, 0), count_on(&map, 1)), (3, 3));
        for k in map
            .iter()
            .enumerate()
            .filter(|(_, s)| **s == 0)
            .map(|(k, _)| k)
            .take(2)
        {
            c.batch_execute(&format!("MOVE CHUNK {k} FOR {table} TO SHARD s2"))
                .await
                .unwrap();
        }
        assert_eq!(count_on(&chunk_map(&c, table).await, 1), 5);
    }
    let before = moves_of(&c, "gb_c").await.len();
    let done = c
        .simple_query("REBALANCE TABLESPACE SET grb")
        .await
        .expect("REBALANCE");
    let Some(SimpleQueryMessage::CommandComplete(n)) = done.last() else {
        panic!("{done:?}");
    };
    assert_eq!(*n, 4, "two moves in each family");
    for table in ["gb_c", "gb_d"] {
        let after = chunk_map(&c, table).await;
        assert_eq!(
            (count_on(&after, 0), count_on(&after, 1)),
            (3, 3),
            "{table}"
        );
    }
    // The two families moved at once (`rebalance_parallel = 2`): their first moves overlap.
    let span = |m: &Vec<Option<String>>| (m[8].clone().unwrap(), m[9].clone().unwrap());
    let first_c = span(&moves_of(&c, "gb_c").await[before]);
    let first_d = span(&moves_of(&c, "gb_d").await[2]);
    assert!(
        first_c.0 < first_d.1 && first_d.0 < first_c.1,
        "{first_c:?} {first_d:?}"
    );
    // Balanced already: nothing moves.
    let again = c
        .simple_query("REBALANCE TABLESPACE SET grb")
        .await
        .unwrap();
    assert!(matches!(
        again.last(),
        Some(SimpleQueryMessage::CommandComplete(0))
    ));
    for table in ["gb_c", "gb_l", "gb_d"] {
        placed_exactly(&c, table, "800").await;
    }
    let e = c
        .simple_query("REBALANCE TABLESPACE SET nope")
        .await
        .expect_err("no such set");
    assert_eq!(code(&e), SqlState::UNDEFINED_OBJECT);
    no_replication_left(&proxy, &c, "gb_c").await;
    no_replication_left(&proxy, &c, "gb_d").await;
}

/// A family without a primary key moves too: its partitions get `REPLICA IDENTITY FULL`, so the
/// updates and deletes clients make during the copy replicate (without it the source would
/// refuse them while the publication exists).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_table_without_a_primary_key_moves_while_rows_change() {
    let proxy = alone("gn", |_| {}).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE gn_c (id bigint NOT NULL, v int NOT NULL)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
            "INSERT INTO gn_c SELECT i, 0 FROM generate_series(1, 2000) i",
        ],
    )
    .await;
    let map = chunk_map(&c, "gn_c").await;
    let (source, target) = (map[1], 1 - map[1]);
    let ids: Vec<i64> = rows(
        &common::shards().connect(source).await,
        "SELECT id FROM gn_c_c1 ORDER BY id",
    )
    .await
    .iter()
    .map(|r| r[0].as_deref().unwrap().parse().unwrap())
    .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writer = {
        let (stop, addr, ids) = (stop.clone(), proxy.conn_string(), ids.clone());
        tokio::spawn(async move {
            let (client, conn) = tokio_postgres::connect(&addr, tokio_postgres::NoTls)
                .await
                .unwrap();
            tokio::spawn(conn);
            // Odd rows of the chunk are deleted once; the others gain one per visit.
            let mut updates = std::collections::HashMap::<i64, i32>::new();
            let mut deleted = std::collections::HashSet::<i64>::new();
            'passes: loop {
                for (n, id) in ids.iter().enumerate() {
                    if stop.load(Ordering::Relaxed) {
                        break 'passes;
                    }
                    if n % 2 == 1 {
                        if deleted.insert(*id) {
                            let changed = client
                                .execute("DELETE FROM gn_c WHERE id = $1", &[id])
                                .await
                                .unwrap_or_else(|e| panic!("delete {id}: {e:?}"));
                            assert_eq!(changed, 1, "delete {id}");
                        }
                    } else {
                        let changed = client
                            .execute("UPDATE gn_c SET v = v + 1 WHERE id = $1", &[id])
                            .await
                            .unwrap_or_else(|e| panic!("update {id}: {e:?}"));
                        assert_eq!(changed, 1, "update {id}");
                        *updates.entry(*id).or_default() += 1;
                    }
                }
            }
            (updates, deleted)
        })
    };
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    c.batch_execute(&format!("MOVE CHUNK 1 FOR gn_c TO SHARD {}", name(target)))
        .await
        .expect("MOVE CHUNK");
    stop.store(true, Ordering::Relaxed);
    let (updates, deleted) = writer.await.unwrap();
    assert!(!updates.is_empty() && !deleted.is_empty());
    // Every acknowledged change is there: each row's value, each deletion.
    let now: std::collections::HashMap<i64, i32> = rows(
        &c,
        &format!(
            "SELECT id, v FROM gn_c WHERE id IN ({})",
            ids.iter()
                .map(|i| i.to_string())
                .collect::<Vec<_>>()
                .join(",")
        ),
    )
    .await
    .iter()
    .map(|r| {
        (
            r[0].as_deref().unwrap().parse().unwrap(),
            r[1].as_deref().unwrap().parse().unwrap(),
        )
    })
    .collect();
    for id in &ids {
        match now.get(id) {
            None => assert!(deleted.contains(id), "row {id} lost"),
            Some(v) => {
                assert!(!deleted.contains(id), "row {id} deleted, still there");
                assert_eq!(*v, updates.get(id).copied().unwrap_or(0), "row {id}");
            }
        }
    }
    assert_eq!(chunk_map(&c, "gn_c").await[1], target);
    let on_target = common::shards().connect(target).await;
    assert_eq!(
        one(&on_target, "SELECT count(*) FROM gn_c_c1").await,
        now.len().to_string()
    );
    no_replication_left(&proxy, &c, "gn_c").await;
}

/// Another proxy shares the catalog: the cutover holds its statements too, and waits until
/// none of its own is in flight. Its clients keep updating rows of the moving chunk through the
/// move; each update finds its row (one that reached the source after its partitions were gone
/// would find none).
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_move_holds_every_proxy_sharing_the_catalog() {
    let proxy = alone("go", |_| {}).await;
    let other = beside("go", |_| {});
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE SHARDED TABLE go_c (id bigint PRIMARY KEY, v int NOT NULL)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
            "INSERT INTO go_c SELECT i, 0 FROM generate_series(1, 400) i",
        ],
    )
    .await;
    let map = chunk_map(&c, "go_c").await;
    let in_chunk: Vec<i64> = rows(
        &common::shards().connect(map[1]).await,
        "SELECT id FROM go_c_c1 ORDER BY id",
    )
    .await
    .iter()
    .map(|r| r[0].as_deref().unwrap().parse().unwrap())
    .collect();
    let stop = Arc::new(AtomicBool::new(false));
    let writers: Vec<_> = (0..2)
        .map(|w| {
            let (stop, ids, addr) = (stop.clone(), in_chunk.clone(), other.conn_string());
            tokio::spawn(async move {
                let (client, conn) = tokio_postgres::connect(&addr, tokio_postgres::NoTls)
                    .await
                    .unwrap();
                tokio::spawn(conn);
                let update = client
                    .prepare("UPDATE go_c SET v = v + 1 WHERE id = $1")
                    .await
                    .unwrap();
                let mut done = 0u64;
                for id in ids.iter().cycle().skip(w) {
                    if stop.load(Ordering::Relaxed) {
                        break;
                    }
                    let n = client.execute(&update, &[id]).await.unwrap();
                    assert_eq!(n, 1, "writer {w}: update of {id} through the other proxy");
                    done += 1;
                }
                done
            })
        })
        .collect();
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    c.simple_query(&format!(
        "MOVE CHUNK 1 FOR go_c TO SHARD {}",
        name(1 - map[1])
    ))
    .await
    .expect("MOVE CHUNK beside another proxy");
    tokio::time::sleep(std::time::Duration::from_millis(200)).await;
    stop.store(true, Ordering::Relaxed);
    let mut updates = 0;
    for w in writers {
        updates += w.await.expect("writer");
    }
    assert_eq!(chunk_map(&c, "go_c").await[1], 1 - map[1]);
    // Every acknowledged update is there: the sum of v is their count.
    assert_eq!(
        one(&c, "SELECT sum(v) FROM go_c").await,
        updates.to_string()
    );
    placed_exactly(&c, "go_c", "400").await;
    let oc = other.connect().await;
    assert_eq!(one(&oc, "SELECT count(*) FROM go_c").await, "400");
    no_replication_left(&proxy, &c, "go_c").await;
}
