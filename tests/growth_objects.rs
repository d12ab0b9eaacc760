//! What a family carries besides its rows survives a chunk move, to a shard that holds other
//! chunks and to one new to the family: a trigger (it fires for rows written to the moved chunk
//! on its new shard), a default from a sequence, an identity-like generated key column, a
//! row-level security policy (it filters the moved rows for a role without BYPASSRLS), comments
//! on the family's table and the chunk's partition, and a CHECK constraint (it refuses a row of
//! the moved chunk). Checked through the proxy and on the shards.
mod common;
mod growth_common;
mod routing_common;

use common::shards;
use growth_common::*;
use routing_common::simple_rows as rows;
use tokio_postgres::error::SqlState;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_moved_chunk_keeps_triggers_defaults_policies_comments_and_checks() {
    // A role, and a sequence of each shard's own (as a serial column's is), made on the shards.
    for i in 0..2 {
        shards()
            .connect(i)
            .await
            .batch_execute(
                "DO $$ BEGIN CREATE ROLE go_reader;
                   EXCEPTION WHEN duplicate_object THEN NULL; END $$;
                 CREATE SEQUENCE IF NOT EXISTS go_seq START 1000",
            )
            .await
            .unwrap();
    }
    let proxy = alone("go", |_| {}).await;
    let c = proxy.connect().await;
    each(
        &c,
        &[
            "CREATE FUNCTION go_stamp() RETURNS trigger LANGUAGE plpgsql AS
               $$ BEGIN NEW.stamped := NEW.id * 10; RETURN NEW; END $$",
            "CREATE SHARDED TABLE go_c (id bigint PRIMARY KEY, v int NOT NULL CHECK (v < 100),
               stamped bigint, serial_no bigint DEFAULT nextval('go_seq'))
               PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
            "CREATE TRIGGER go_trg BEFORE INSERT ON go_c FOR EACH ROW EXECUTE FUNCTION go_stamp()",
            "ALTER TABLE go_c ENABLE ROW LEVEL SECURITY",
            "CREATE POLICY go_small ON go_c FOR SELECT TO go_reader USING (v < 50)",
            "GRANT SELECT ON go_c TO go_reader",
            "COMMENT ON TABLE go_c IS 'moved with care'",
            "INSERT INTO go_c (id, v) SELECT i, i % 100 FROM generate_series(1, 400) i",
        ],
    )
    .await;
    let map = chunk_map(&c, "go_c").await;
    // The partition of chunk 1 gets a comment of its own.
    let source = map[1];
    shards()
        .connect(source)
        .await
        .batch_execute("COMMENT ON TABLE go_c_c1 IS 'chunk one'")
        .await
        .unwrap();

    // Twice: to the other shard, then back, so each shard is once the target.
    for target in [1 - source, source] {
        c.batch_execute(&format!("MOVE CHUNK 1 FOR go_c TO SHARD {}", name(target)))
            .await
            .unwrap();
        assert_eq!(chunk_map(&c, "go_c").await[1], target);
        let on_target = shards().connect(target).await;
        assert_eq!(
            one(&on_target, "SELECT obj_description('go_c_c1'::regclass)").await,
            "chunk one"
        );
        // A new row of chunk 1: the trigger stamps it, the sequence numbers it.
        let key = one(
            &on_target,
            "SELECT i FROM generate_series(100000, 200000) i
              WHERE satisfies_hash_partition('go_c'::regclass, 4, 1, i::bigint) LIMIT 1",
        )
        .await;
        c.batch_execute(&format!("INSERT INTO go_c (id, v) VALUES ({key}, 1)"))
            .await
            .unwrap();
        let row = rows(
            &on_target,
            &format!("SELECT stamped, serial_no FROM go_c_c1 WHERE id = {key}"),
        )
        .await;
        assert_eq!(
            row[0][0].as_deref(),
            Some(&(key.parse::<i64>().unwrap() * 10).to_string()[..])
        );
        assert!(row[0][1].as_deref().unwrap().parse::<i64>().unwrap() >= 1000);
        // The CHECK holds on the moved chunk.
        let e = c
            .batch_execute(&format!("UPDATE go_c SET v = 100 WHERE id = {key}"))
            .await
            .expect_err("CHECK (v < 100)");
        assert_eq!(code(&e), SqlState::CHECK_VIOLATION);
        c.batch_execute(&format!("DELETE FROM go_c WHERE id = {key}"))
            .await
            .unwrap();
    }
    // The policy filters every shard's rows, the moved chunk's included, for its role.
    let reader = proxy.connect().await;
    reader.batch_execute("SET ROLE go_reader").await.unwrap();
    assert_eq!(
        one(&reader, "SELECT count(*) FROM go_c WHERE v >= 50").await,
        "0"
    );
    assert_eq!(
        one(&reader, "SELECT count(*) FROM go_c").await,
        one(&c, "SELECT count(*) FROM go_c WHERE v < 50").await
    );
    assert_eq!(
        one(&c, "SELECT obj_description('go_c'::regclass)").await,
        "moved with care"
    );
    assert_eq!(
        one(&c, "SELECT count(*) FROM go_c WHERE stamped = id * 10").await,
        "400"
    );
}
