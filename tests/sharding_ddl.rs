//! Sharding DDL through the proxy: the sharding rules, SHOW SHARDED TABLES / SHOW CHUNKS, DDL
//! that must reach every shard (CREATE INDEX, ALTER TABLE, DROP), refusals, and two proxies on
//! one catalog. The tests share two shards and the catalog on shard 0: each uses its own names.

mod common;
mod sharding_common;

use std::time::{Duration, Instant};

use common::{shards, TestProxy};
use sharding_common::{catalog_tables, hash_tree, rows, tree};
use shardwire::router::hash::{partition_hash, remainder, KeyType, KeyValue};
use tokio_postgres::error::{DbError, ErrorPosition, SqlState};
use tokio_postgres::types::Type;
use tokio_postgres::Client;

/// Runs `sql` through the proxy and returns the error it must fail with.
async fn refused(client: &Client, sql: &str) -> DbError {
    let e = client
        .batch_execute(sql)
        .await
        .expect_err(&format!("expected an error from: {sql}"));
    e.as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"))
        .clone()
}

async fn run(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {:?}", e.as_db_error()));
}

/// Neither shard has `table`, and the catalog does not record it.
async fn assert_nowhere(table: &str) {
    for i in 0..2 {
        let shard = shards().connect(i).await;
        assert_eq!(tree(&shard, table).await, [], "{table} on shard {i}");
    }
    let catalog = shards().connect(0).await;
    assert!(
        !catalog_tables(&catalog)
            .await
            .contains(&format!("public.{table}")),
        "{table} is in the catalog"
    );
}

/// The SHOW SHARDED TABLES rows of the named tables.
async fn listed(client: &Client, tables: &[&str]) -> Vec<Vec<String>> {
    rows(client, "SHOW SHARDED TABLES")
        .await
        .into_iter()
        .filter(|r| tables.contains(&r[0].as_str()))
        .collect()
}

#[tokio::test]
async fn sharding_rules_refuse_and_leave_nothing() {
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    run(
        &client,
        "CREATE SHARDED TABLE rv_a (id int PRIMARY KEY) PARTITION BY CONSISTENT HASH (id)",
    )
    .await;
    run(
        &client,
        "CREATE DUPLICATED TABLE rv_dup (code int PRIMARY KEY)",
    )
    .await;
    // Oracle syntax (not NoSQL's) in a plain CREATE TABLE: an unsharded table the catalog
    // records.
    run(
        &client,
        "CREATE TABLE rv_local (code INTEGER, name VARCHAR2(20), PRIMARY KEY (code))",
    )
    .await;

    let cases = [
        (
            "rv_pk",
            "CREATE SHARDED TABLE rv_pk (id int, k int, PRIMARY KEY (id)) \
             PARTITION BY CONSISTENT HASH (k)",
            SqlState::INVALID_TABLE_DEFINITION,
            "must contain the sharding key columns (k); missing: k",
        ),
        (
            "rv_cross",
            "CREATE SHARDED TABLE rv_cross (id int PRIMARY KEY, a_id int REFERENCES rv_a (id)) \
             PARTITION BY CONSISTENT HASH (id)",
            SqlState::INVALID_FOREIGN_KEY,
            "which is in another table family",
        ),
        (
            "rv_to_dup",
            "CREATE SHARDED TABLE rv_to_dup (id int PRIMARY KEY, code int REFERENCES rv_dup) \
             PARTITION BY CONSISTENT HASH (id)",
            SqlState::INVALID_FOREIGN_KEY,
            "references duplicated table \"public\".\"rv_dup\"",
        ),
        (
            "rv_to_local",
            "CREATE SHARDED TABLE rv_to_local (id int PRIMARY KEY, \
             code int REFERENCES rv_local (code)) PARTITION BY CONSISTENT HASH (id)",
            SqlState::INVALID_FOREIGN_KEY,
            "references unsharded table \"public\".\"rv_local\"",
        ),
        (
            "rv_dup_to",
            "CREATE DUPLICATED TABLE rv_dup_to (id int PRIMARY KEY, a_id int REFERENCES rv_a (id))",
            SqlState::INVALID_FOREIGN_KEY,
            "of duplicated table \"public\".\"rv_dup_to\" references sharded table",
        ),
    ];
    for (table, sql, code, text) in cases {
        let e = refused(&client, sql).await;
        assert_eq!(e.code(), &code, "{sql}: {}", e.message());
        assert!(e.message().contains(text), "{sql}: {}", e.message());
        assert_nowhere(table).await;
    }

    // A syntax error points at the offending token, as PostgreSQL's do.
    let sql = "CREATE SHARDED TABLE rv_syntax (id int PRIMARY KEY) PARTITION BY CONSISTENT HASH id";
    let e = refused(&client, sql).await;
    assert_eq!(e.code(), &SqlState::SYNTAX_ERROR);
    assert_eq!(e.message(), "syntax error at or near \"id\"");
    let at = sql.rfind("id").unwrap() as u32 + 1;
    assert_eq!(e.position(), Some(&ErrorPosition::Original(at)));
    assert_nowhere("rv_syntax").await;

    // The session is still usable, and the tables it did create are whole.
    assert_eq!(rows(&client, "SELECT 1").await, [["1"]]);
    for i in 0..2 {
        let shard = shards().connect(i).await;
        assert_eq!(
            tree(&shard, "rv_dup").await,
            [("rv_dup".into(), String::new())]
        );
    }
    for table in ["rv_a", "rv_dup", "rv_local"] {
        run(&client, &format!("DROP TABLE {table}")).await;
        assert_nowhere(table).await;
    }
}

#[tokio::test]
async fn a_definition_postgresql_cannot_read_is_refused_before_anything_runs() {
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    let e = refused(
        &client,
        "CREATE SHARDED TABLE bad_check (id bigint PRIMARY KEY, qty int CHECK (qty >>> ))\n\
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    assert_eq!(e.code(), &SqlState::SYNTAX_ERROR, "{}", e.message());
    assert!(
        e.message().contains("syntax error") && e.message().contains("bad_check"),
        "{}",
        e.message()
    );
    assert_nowhere("bad_check").await;
    assert_eq!(rows(&client, "SELECT 1").await, [["1"]]);
}

#[tokio::test]
async fn show_index_alter_and_drop_reach_every_shard() {
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    run(
        &client,
        "CREATE SHARDED TABLE sd_root (id bigint PRIMARY KEY, name text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
    )
    .await;
    run(
        &client,
        "CREATE SHARDED TABLE sd_child (root_id bigint NOT NULL, n int NOT NULL, x text, \
         CONSTRAINT sd_child_pk PRIMARY KEY (root_id, n), \
         CONSTRAINT sd_child_fk FOREIGN KEY (root_id) REFERENCES sd_root (id)) \
         PARTITION BY REFERENCE (sd_child_fk)",
    )
    .await;
    let s1 = shards().connect(0).await;
    let s2 = shards().connect(1).await;
    assert_eq!(
        tree(&s1, "sd_child").await,
        hash_tree("sd_child", 4, &[0, 2])
    );
    assert_eq!(
        tree(&s2, "sd_child").await,
        hash_tree("sd_child", 4, &[1, 3])
    );

    assert_eq!(
        listed(&client, &["sd_root", "sd_child"]).await,
        [
            [
                "sd_root",
                "sd_root",
                "",
                "consistent_hash",
                "id",
                "",
                "f",
                "active"
            ],
            [
                "sd_child",
                "sd_root",
                "sd_root",
                "reference",
                "root_id",
                "",
                "f",
                "active"
            ],
        ]
    );
    let chunks = [
        ["sd_child", "", "0", "s1"],
        ["sd_child", "", "1", "s2"],
        ["sd_child", "", "2", "s1"],
        ["sd_child", "", "3", "s2"],
    ];
    assert_eq!(rows(&client, "SHOW CHUNKS FOR sd_child").await, chunks);
    let all = rows(&client, "SHOW CHUNKS").await;
    assert!(chunks
        .iter()
        .all(|c| all.contains(&c.map(String::from).to_vec())));

    let count_index = "SELECT count(*)::int FROM pg_class WHERE relname = 'sd_child_x'";
    run(&client, "CREATE INDEX sd_child_x ON sd_child (x)").await;
    for shard in [&s1, &s2] {
        assert_eq!(
            shard
                .query_one(count_index, &[])
                .await
                .unwrap()
                .get::<_, i32>(0),
            1
        );
    }
    run(&client, "ALTER TABLE sd_child ADD COLUMN note text").await;
    let has_note = "SELECT count(*)::int FROM information_schema.columns \
                    WHERE table_name = 'sd_child_c0' AND column_name = 'note'";
    assert_eq!(
        s1.query_one(has_note, &[]).await.unwrap().get::<_, i32>(0),
        1
    );
    run(&client, "DROP INDEX sd_child_x").await;
    for shard in [&s1, &s2] {
        assert_eq!(
            shard
                .query_one(count_index, &[])
                .await
                .unwrap()
                .get::<_, i32>(0),
            0
        );
    }
    let e = refused(&client, "ALTER TABLE sd_root RENAME TO sd_other").await;
    assert_eq!(e.code(), &SqlState::FEATURE_NOT_SUPPORTED);

    let e = refused(&client, "DROP TABLE sd_root").await;
    assert_eq!(e.code(), &SqlState::DEPENDENT_OBJECTS_STILL_EXIST);
    assert!(e.message().contains("sd_child"), "{}", e.message());
    assert_eq!(tree(&s1, "sd_root").await, hash_tree("sd_root", 4, &[0, 2]));
    let e = refused(&client, "DROP TABLE sd_root, sd_unknown_plain_table").await;
    assert_eq!(e.code(), &SqlState::FEATURE_NOT_SUPPORTED);

    run(&client, "DROP TABLE sd_child").await;
    run(&client, "DROP TABLE sd_root").await;
    assert_nowhere("sd_child").await;
    assert_nowhere("sd_root").await;
    assert_eq!(listed(&client, &["sd_root", "sd_child"]).await.len(), 0);
}

#[tokio::test]
async fn refusals_inside_transactions_and_multi_statement_texts() {
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    let create = "CREATE SHARDED TABLE tx_t (id int PRIMARY KEY) PARTITION BY CONSISTENT HASH (id)";
    run(&client, "BEGIN").await;
    let e = refused(&client, create).await;
    assert_eq!(e.code(), &SqlState::ACTIVE_SQL_TRANSACTION);
    run(&client, "ROLLBACK").await;
    assert_nowhere("tx_t").await;

    let e = refused(&client, &format!("{create}; SELECT 1")).await;
    assert_eq!(e.code(), &SqlState::FEATURE_NOT_SUPPORTED);
    assert!(e.message().contains("send it alone"), "{}", e.message());
    assert_nowhere("tx_t").await;

    // Plain PostgreSQL CREATE TABLE is PostgreSQL's: on the first shard, not in the catalog.
    run(&client, "CREATE TABLE tx_plain (id int)").await;
    let s1 = shards().connect(0).await;
    let s2 = shards().connect(1).await;
    assert_eq!(
        tree(&s1, "tx_plain").await,
        [("tx_plain".into(), String::new())]
    );
    assert_eq!(tree(&s2, "tx_plain").await, []);
    assert!(!catalog_tables(&s1)
        .await
        .contains(&"public.tx_plain".into()));
    run(&client, "DROP TABLE tx_plain").await;
    assert_eq!(tree(&s1, "tx_plain").await, []);
}

#[tokio::test]
async fn tablespace_sets_are_created_and_dropped_through_the_proxy() {
    let proxy = TestProxy::start_with(|c| c.proxy.chunks_per_shard = 3);
    let client = proxy.connect().await;
    run(&client, "CREATE TABLESPACE SET tss_only2 USING SHARDS (s2)").await;
    let e = refused(&client, "CREATE TABLESPACE SET tss_bad USING SHARDS (s9)").await;
    assert_eq!(e.code(), &SqlState::UNDEFINED_OBJECT);
    run(
        &client,
        "CREATE SHARDED TABLE tss_t (id int PRIMARY KEY) PARTITION BY CONSISTENT HASH (id) \
         PARTITIONS AUTO TABLESPACE SET tss_only2",
    )
    .await;
    let s1 = shards().connect(0).await;
    let s2 = shards().connect(1).await;
    assert_eq!(tree(&s1, "tss_t").await, []);
    assert_eq!(tree(&s2, "tss_t").await, hash_tree("tss_t", 3, &[0, 1, 2]));
    let e = refused(&client, "DROP TABLESPACE SET tss_only2").await;
    assert_eq!(e.code(), &SqlState::DEPENDENT_OBJECTS_STILL_EXIST);
    assert!(e.message().contains("tss_t"), "{}", e.message());
    run(&client, "DROP TABLE tss_t").await;
    run(&client, "DROP TABLESPACE SET tss_only2").await;
    run(&client, "DROP TABLESPACE SET IF EXISTS tss_only2").await;
    let e = refused(&client, "DROP TABLESPACE SET tss_only2").await;
    assert_eq!(e.code(), &SqlState::UNDEFINED_OBJECT);
}

/// The chunk of a bigint key among `modulus` chunks, as PostgreSQL's hash partitioning puts it.
fn chunk_of(key: i64, modulus: u64) -> usize {
    let text = key.to_string();
    let hash = partition_hash(&[(KeyType::Int8, KeyValue::Text(&text))]).unwrap();
    remainder(hash, modulus) as usize
}

#[tokio::test]
async fn a_table_created_through_one_proxy_is_usable_through_another() {
    let first = TestProxy::start();
    let second = TestProxy::start();
    let a = first.connect().await;
    let b = second.connect().await;
    // The second proxy has loaded its snapshot before the table exists: its watcher must catch up.
    assert_eq!(listed(&b, &["tp_t"]).await.len(), 0);
    run(
        &a,
        "CREATE SHARDED TABLE tp_t (id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
    )
    .await;
    let created = Instant::now();
    // Statements on a table run once the second proxy sees it ACTIVE (a moment after CREATING).
    loop {
        let seen = listed(&b, &["tp_t"]).await;
        if seen
            .first()
            .and_then(|r| r.last())
            .is_some_and(|state| state == "active")
        {
            break;
        }
        assert!(
            created.elapsed() < Duration::from_secs(1),
            "the second proxy did not see tp_t active within 1 s"
        );
        tokio::time::sleep(Duration::from_millis(20)).await;
    }

    let chunks = rows(&b, "SHOW CHUNKS FOR tp_t").await;
    assert_eq!(chunks.len(), 4);
    let key = (1i64..)
        .find(|k| chunks[chunk_of(*k, 4)][3] == "s1")
        .unwrap();
    run(&b, &format!("INSERT INTO tp_t VALUES ({key}, 'through b')")).await;
    let sql = format!("SELECT v FROM tp_t WHERE id = {key}");
    assert_eq!(rows(&b, &sql).await, [["through b"]]);
    assert_eq!(rows(&a, &sql).await, [["through b"]]);
    let s1 = shards().connect(0).await;
    let stored: String = s1
        .query_one(
            &format!("SELECT tableoid::regclass::text FROM tp_t WHERE id = {key}"),
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(stored, format!("tp_t_c{}", chunk_of(key, 4)));

    run(&b, "DROP TABLE tp_t").await;
    assert_nowhere("tp_t").await;
}

/// The type a client sees for `column` of `table` through the proxy, and its value as text.
async fn read_back(client: &Client, table: &str, column: &str) -> (Type, String) {
    let sql = format!("SELECT {column} FROM {table}");
    let statement = client.prepare(&sql).await.unwrap();
    let text = rows(client, &sql).await;
    (statement.columns()[0].type_().clone(), text[0][0].clone())
}

#[tokio::test]
async fn date_is_postgres_date_unless_the_configuration_asks_for_oracle_dates() {
    let postgres_meaning = TestProxy::start();
    let oracle_meaning = TestProxy::start_with(|c| c.ddl.oracle_date = true);
    let cases = [
        (&postgres_meaning, "dd_pg", Type::DATE, "2006-10-01", "date"),
        (
            &oracle_meaning,
            "dd_oracle",
            Type::TIMESTAMP,
            "2006-10-01 00:00:00",
            "timestamp(0) without time zone",
        ),
    ];
    let s1 = shards().connect(0).await;
    for (proxy, table, client_type, text, shard_type) in cases {
        let client = proxy.connect().await;
        run(
            &client,
            &format!(
                "CREATE DUPLICATED TABLE {table} (id NUMBER PRIMARY KEY, name VARCHAR2(20), \
                 enroll_date date)"
            ),
        )
        .await;
        run(
            &client,
            &format!("INSERT INTO {table} VALUES (1, 'Ann', DATE '2006-10-01')"),
        )
        .await;
        assert_eq!(
            read_back(&client, table, "enroll_date").await,
            (client_type, text.to_owned()),
            "{table}"
        );
        let on_shard: String = s1
            .query_one(
                "SELECT format_type(atttypid, atttypmod) FROM pg_attribute \
                 WHERE attrelid = $1::text::regclass AND attname = 'enroll_date'",
                &[&table],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(on_shard, shard_type, "{table}");
        run(&client, &format!("DROP TABLE {table}")).await;
        assert_nowhere(table).await;
    }
}

#[tokio::test]
async fn partition_by_reference_takes_the_name_postgresql_gives_an_unnamed_foreign_key() {
    let proxy = TestProxy::start();
    let client = proxy.connect().await;
    run(
        &client,
        "CREATE SHARDED TABLE fkn_root (id bigint PRIMARY KEY) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
    )
    .await;
    run(
        &client,
        "CREATE SHARDED TABLE fkn_child (root_id bigint, n int, PRIMARY KEY (root_id, n), \
         FOREIGN KEY (root_id) REFERENCES fkn_root (id)) PARTITION BY REFERENCE (fkn_child_root_id_fkey)",
    )
    .await;
    for (i, chunks) in [(0, [0, 2]), (1, [1, 3])] {
        let shard = shards().connect(i).await;
        // The child's chunks sit with its parent's, and each shard named the key as the
        // statement did (the clones for the referenced table's partitions have a parent).
        assert_eq!(
            tree(&shard, "fkn_child").await,
            hash_tree("fkn_child", 4, &chunks)
        );
        assert_eq!(
            rows(
                &shard,
                "SELECT conname FROM pg_constraint WHERE conrelid = \
                 'public.fkn_child'::regclass AND contype = 'f' AND conparentid = 0"
            )
            .await,
            [["fkn_child_root_id_fkey"]]
        );
    }
    run(
        &client,
        "INSERT INTO fkn_root VALUES (7); INSERT INTO fkn_child VALUES (7, 1)",
    )
    .await;
    let e = refused(&client, "INSERT INTO fkn_child VALUES (8, 1)").await;
    assert_eq!(e.code(), &SqlState::FOREIGN_KEY_VIOLATION);
    assert_eq!(e.constraint(), Some("fkn_child_root_id_fkey"));
    run(&client, "DROP TABLE fkn_child").await;
    run(&client, "DROP TABLE fkn_root").await;
}
