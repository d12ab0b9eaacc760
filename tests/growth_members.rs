//! A tablespace set grows and shrinks: ALTER TABLESPACE SET ADD SHARD, REBALANCE onto the new
//! shard (which gets the family's tables, as the others have them, with its first chunk), then
//! a shard drained by MOVE CHUNK (which loses the family's tables with its last chunk) and
//! removed. Definitions and placement are checked on the shards themselves.
mod common;
mod growth_common;
mod routing_common;

use common::shards;
use growth_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const SHARDS: usize = 3;

/// What `pg_catalog` says of a table: columns, constraints, indexes, triggers, security,
/// comments and privileges, one line each, sorted.
async fn definition(shard: &Client, table: &str) -> Vec<String> {
    let facts = [
        "SELECT attname || ' ' || format_type(atttypid, atttypmod) || ' ' || attnotnull::text || ' '
                || coalesce(pg_get_expr(adbin, adrelid), '') || ' ' || attidentity::text || attgenerated::text
                || ' ' || coalesce(col_description(attrelid, attnum), '')
           FROM pg_attribute LEFT JOIN pg_attrdef ON adrelid = attrelid AND adnum = attnum
          WHERE attrelid = $1::text::regclass AND attnum > 0 AND NOT attisdropped",
        "SELECT conname || ' ' || pg_get_constraintdef(oid) FROM pg_constraint
          WHERE conrelid = $1::text::regclass AND conparentid = 0",
        "SELECT replace(pg_get_indexdef(indexrelid), ' ONLY ', ' ') FROM pg_index
          WHERE indrelid = $1::text::regclass",
        "SELECT pg_get_triggerdef(oid) || ' ' || tgenabled::text FROM pg_trigger
          WHERE tgrelid = $1::text::regclass AND NOT tgisinternal",
        "SELECT polname || ' ' || polcmd::text || ' ' || coalesce(pg_get_expr(polqual, polrelid), '')
           FROM pg_policy WHERE polrelid = $1::text::regclass",
        "SELECT relrowsecurity::text || ' ' || relreplident::text || ' ' || coalesce(relacl::text, '')
                || ' ' || coalesce(obj_description(oid, 'pg_class'), '') || ' '
                || pg_get_partkeydef(oid)
           FROM pg_class WHERE oid = $1::text::regclass",
    ];
    let mut out = Vec::new();
    for sql in facts {
        for row in shard.query(sql, &[&table]).await.unwrap() {
            out.push(row.get::<_, String>(0));
        }
    }
    out.sort();
    out
}

async fn exists_on(shard: usize, relation: &str) -> bool {
    one(
        &shards().connect(shard).await,
        &format!("SELECT to_regclass('{relation}') IS NOT NULL"),
    )
    .await
        == "t"
}

/// How many chunks of the map each shard holds.
fn per_shard(map: &[usize]) -> Vec<usize> {
    (0..SHARDS)
        .map(|s| map.iter().filter(|m| **m == s).count())
        .collect()
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_set_grows_onto_a_new_shard_and_shrinks_off_a_drained_one() {
    common::use_shards(SHARDS);
    for i in 0..SHARDS {
        let shard = shards().connect(i).await;
        shard
            .batch_execute(
                "DO $$ BEGIN CREATE ROLE gmm_reader; EXCEPTION WHEN duplicate_object THEN NULL; END $$",
            )
            .await
            .unwrap();
    }
    let proxy = alone("gmm", |_| {}).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE TABLESPACE SET gmm_ts USING SHARDS (s1, s2)",
            "CREATE SHARDED TABLE gmm_c (id bigint PRIMARY KEY, v int NOT NULL DEFAULT 7
               CHECK (v >= 0), label text)
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 6 TABLESPACE SET gmm_ts",
            "CREATE SHARDED TABLE gmm_l (id bigint NOT NULL, line int NOT NULL, note text,
               PRIMARY KEY (id, line),
               CONSTRAINT gmm_l_fk FOREIGN KEY (id) REFERENCES gmm_c (id))
               PARTITION BY REFERENCE (gmm_l_fk)",
            "ALTER TABLE gmm_c ALTER COLUMN label TYPE text COLLATE \"C\"",
            "ALTER TABLE gmm_c ADD COLUMN twice int GENERATED ALWAYS AS (v * 2) STORED",
            "CREATE INDEX gmm_c_label ON gmm_c (label)",
            "COMMENT ON TABLE gmm_c IS 'customers'",
            "COMMENT ON COLUMN gmm_c.v IS 'value'",
            "ALTER TABLE gmm_c ENABLE ROW LEVEL SECURITY",
            "CREATE POLICY gmm_small ON gmm_c FOR SELECT TO gmm_reader USING (v < 100)",
            "GRANT SELECT ON gmm_c TO gmm_reader",
            "INSERT INTO gmm_c (id, v, label) SELECT i, i % 50, 'l' || i FROM generate_series(1, 1200) i",
            "INSERT INTO gmm_l SELECT i, 1, 'n' FROM generate_series(1, 1200) i",
        ],
    )
    .await;
    assert_eq!(per_shard(&chunk_map(&c, "gmm_c").await), [3, 3, 0]);
    assert!(!exists_on(2, "gmm_c").await);

    // A set holding a composite table's partition set does not grow (its chunks are dealt over
    // the set's shards at CREATE); the other refusals are checked.
    each(
        &c,
        &[
            "CREATE TABLESPACE SET gmm_geo USING SHARDS (s1, s2)",
            "CREATE SHARDED TABLE gmm_g (id INT, geo text, PRIMARY KEY (id, geo))
               PARTITIONSET BY LIST (geo) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO
               (PARTITIONSET gmm_all VALUES (DEFAULT) TABLESPACE SET gmm_geo)",
        ],
    )
    .await;
    for (sql, expected) in [
        (
            "ALTER TABLESPACE SET gmm_geo ADD SHARD s3",
            SqlState::FEATURE_NOT_SUPPORTED,
        ),
        (
            "ALTER TABLESPACE SET gmm_ts ADD SHARD s2",
            SqlState::DUPLICATE_OBJECT,
        ),
        (
            "ALTER TABLESPACE SET gmm_ts REMOVE SHARD s3",
            SqlState::UNDEFINED_OBJECT,
        ),
        (
            "ALTER TABLESPACE SET gmm_ts ADD SHARD nowhere",
            SqlState::UNDEFINED_OBJECT,
        ),
        (
            "ALTER TABLESPACE SET gmm_nope ADD SHARD s3",
            SqlState::UNDEFINED_OBJECT,
        ),
        (
            "ALTER TABLESPACE SET gmm_ts REMOVE SHARD s1",
            SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        ),
    ] {
        let e = c.simple_query(sql).await.expect_err(sql);
        assert_eq!(code(&e), expected, "{sql}: {e:?}");
    }

    // s3 joins; REBALANCE gives it its share, and the family's tables with the first chunk.
    c.batch_execute("ALTER TABLESPACE SET gmm_ts ADD SHARD s3")
        .await
        .unwrap();
    assert_eq!(per_shard(&chunk_map(&c, "gmm_c").await), [3, 3, 0]);
    c.batch_execute("REBALANCE TABLESPACE SET gmm_ts")
        .await
        .unwrap();
    assert_eq!(per_shard(&chunk_map(&c, "gmm_c").await), [2, 2, 2]);
    let (s1, s3) = (shards().connect(0).await, shards().connect(2).await);
    for table in ["gmm_c", "gmm_l"] {
        assert_eq!(
            definition(&s3, table).await,
            definition(&s1, table).await,
            "{table} on s3 as on s1"
        );
    }
    placed_exactly(&c, "gmm_c", "1200").await;
    placed_exactly(&c, "gmm_l", "1200").await;

    // DDL now reaches s3 too; writes and reads go on.
    each(
        &c,
        &[
            "ALTER TABLE gmm_c ADD COLUMN extra int",
            "UPDATE gmm_c SET extra = 1",
            "INSERT INTO gmm_c (id, v) SELECT i, 1 FROM generate_series(1201, 1500) i",
        ],
    )
    .await;
    assert_eq!(
        one(&s3, "SELECT count(*) FROM gmm_c WHERE extra = 1").await,
        one(&s3, "SELECT count(*) FROM gmm_c WHERE id <= 1200").await
    );

    // s2 drained by hand: its last chunk takes the family's tables with it; then it leaves.
    let map = chunk_map(&c, "gmm_c").await;
    for (n, chunk) in map
        .iter()
        .enumerate()
        .filter(|(_, s)| **s == 1)
        .map(|(k, _)| k)
        .enumerate()
    {
        let to = if n % 2 == 0 { "s1" } else { "s3" };
        c.batch_execute(&format!("MOVE CHUNK {chunk} FOR gmm_c TO SHARD {to}"))
            .await
            .unwrap();
    }
    assert_eq!(per_shard(&chunk_map(&c, "gmm_c").await), [3, 0, 3]);
    assert!(!exists_on(1, "gmm_c").await && !exists_on(1, "gmm_l").await);
    c.batch_execute("ALTER TABLESPACE SET gmm_ts REMOVE SHARD s2")
        .await
        .unwrap();
    placed_exactly(&c, "gmm_c", "1500").await;
    placed_exactly(&c, "gmm_l", "1200").await;
    // A new table of the set is dealt over its shards now: s1 and s3.
    c.batch_execute(
        "CREATE SHARDED TABLE gmm_new (id bigint PRIMARY KEY)
           PARTITION BY CONSISTENT HASH (id) PARTITIONS 4 TABLESPACE SET gmm_ts",
    )
    .await
    .unwrap();
    assert_eq!(per_shard(&chunk_map(&c, "gmm_new").await), [2, 0, 2]);
    // And back: s2 rejoins and takes chunks again, its tables made afresh.
    c.batch_execute("ALTER TABLESPACE SET gmm_ts ADD SHARD s2")
        .await
        .unwrap();
    c.batch_execute("REBALANCE TABLESPACE SET gmm_ts")
        .await
        .unwrap();
    assert_eq!(per_shard(&chunk_map(&c, "gmm_c").await), [2, 2, 2]);
    let s2 = shards().connect(1).await;
    assert_eq!(
        definition(&s2, "gmm_c").await,
        definition(&s1, "gmm_c").await
    );
    placed_exactly(&c, "gmm_c", "1500").await;
    no_replication_left(&proxy, &c, "gmm_c").await;
}
