//! Utility statements on sharded tables (TRUNCATE, LOCK, GRANT, COMMENT, policies, VACUUM,
//! ANALYZE) reach every shard holding the table, checked on the shards themselves; DDL the
//! proxy runs itself is refused among other statements rather than run on one shard. Types,
//! domains, schemas and functions are made on every shard. (How unqualified names are read:
//! tests/routing_search_path.rs.)
mod common;
mod routing_common;

use common::shards;
use routing_common::*;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn truncate_empties_the_table_on_every_shard_or_on_none() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "ut_trunc").await;

    fill(&c, "ut_trunc").await;
    c.batch_execute("TRUNCATE ut_trunc").await.expect("simple");
    assert_eq!(counts("ut_trunc").await, vec![0; SHARDS]);

    fill(&c, "ut_trunc").await;
    c.execute("TRUNCATE TABLE ut_trunc", &[])
        .await
        .expect("extended protocol");
    assert_eq!(counts("ut_trunc").await, vec![0; SHARDS]);

    // Inside a block it is the block's: rolled back with it.
    fill(&c, "ut_trunc").await;
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("TRUNCATE ut_trunc").await.unwrap();
    let seen = simple_rows(&c, "SELECT count(*) FROM ut_trunc").await;
    assert_eq!(seen, vec![vec![Some("0".into())]]);
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(counts("ut_trunc").await.iter().sum::<i64>(), 40);

    // Failing on one shard (a table there references it), it empties no shard.
    let third = shards().connect(2).await;
    third
        .batch_execute(
            "CREATE TABLE ut_trunc_ref (id bigint REFERENCES ut_trunc (cust_id)); \
             INSERT INTO ut_trunc_ref SELECT cust_id FROM ut_trunc LIMIT 1",
        )
        .await
        .expect("referencing table on shard 2");
    let e = c
        .batch_execute("TRUNCATE ut_trunc")
        .await
        .expect_err("referenced on one shard");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{e}");
    assert!(
        counts("ut_trunc").await.iter().all(|&n| n > 0),
        "no shard emptied"
    );
    third
        .batch_execute("DROP TABLE ut_trunc_ref")
        .await
        .unwrap();

    // Tables not on the same shards cannot be truncated by one statement.
    c.batch_execute("CREATE TABLE ut_plain (a int)")
        .await
        .unwrap();
    let e = c
        .batch_execute("TRUNCATE ut_trunc, ut_plain")
        .await
        .expect_err("mixed");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED);
    assert!(message(&e).contains("separate statements"), "{e}");
    // A generated key's cluster-wide sequence does not restart.
    c.batch_execute(
        "CREATE SHARDED TABLE ut_gen (id bigserial PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await
    .unwrap();
    let e = c
        .batch_execute("TRUNCATE ut_gen RESTART IDENTITY")
        .await
        .expect_err("restart of the cluster-wide sequence");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED);
    c.batch_execute("TRUNCATE ut_gen CONTINUE IDENTITY")
        .await
        .expect("continue identity");
    // The session is still usable.
    assert_eq!(counts("ut_trunc").await.iter().sum::<i64>(), 40);
    c.batch_execute("DROP TABLE ut_trunc; DROP TABLE ut_plain")
        .await
        .ok();
    c.batch_execute("DROP TABLE ut_gen").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn grants_comments_policies_and_locks_reach_every_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "ut_acl").await;
    fill(&c, "ut_acl").await;

    c.batch_execute("GRANT SELECT ON ut_acl TO PUBLIC")
        .await
        .expect("grant");
    let acl = "SELECT has_table_privilege('public', 'ut_acl', 'SELECT')::text";
    assert_eq!(on_each_shard(acl).await, vec![Some("true".into()); SHARDS]);
    c.execute("REVOKE SELECT ON ut_acl FROM PUBLIC", &[])
        .await
        .expect("revoke, extended protocol");
    assert_eq!(on_each_shard(acl).await, vec![Some("false".into()); SHARDS]);

    c.batch_execute("COMMENT ON TABLE ut_acl IS 'customers'")
        .await
        .expect("comment on table");
    c.batch_execute("COMMENT ON COLUMN ut_acl.name IS 'full name'")
        .await
        .expect("comment on column");
    assert_eq!(
        on_each_shard("SELECT obj_description('ut_acl'::regclass, 'pg_class')").await,
        vec![Some("customers".into()); SHARDS]
    );
    assert_eq!(
        on_each_shard("SELECT col_description('ut_acl'::regclass, 2)").await,
        vec![Some("full name".into()); SHARDS]
    );

    c.batch_execute("CREATE POLICY ut_p ON ut_acl USING (score > 0)")
        .await
        .expect("create policy");
    let policies = "SELECT count(*)::text FROM pg_policies WHERE tablename = 'ut_acl'";
    assert_eq!(
        on_each_shard(policies).await,
        vec![Some("1".into()); SHARDS]
    );
    c.batch_execute("DROP POLICY ut_p ON ut_acl")
        .await
        .expect("drop policy");
    assert_eq!(
        on_each_shard(policies).await,
        vec![Some("0".into()); SHARDS]
    );

    // LOCK only inside a block, as on PostgreSQL; there it locks the table on every shard.
    let e = c
        .batch_execute("LOCK TABLE ut_acl")
        .await
        .expect_err("outside a block");
    assert_eq!(code(&e), SqlState::NO_ACTIVE_SQL_TRANSACTION);
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("LOCK TABLE ut_acl IN ACCESS EXCLUSIVE MODE")
        .await
        .expect("lock in a block");
    let locks = "SELECT count(*)::text FROM pg_locks l JOIN pg_class c ON c.oid = l.relation \
                 WHERE c.relname = 'ut_acl' AND l.mode = 'AccessExclusiveLock' AND l.granted";
    assert_eq!(on_each_shard(locks).await, vec![Some("1".into()); SHARDS]);
    c.batch_execute("COMMIT").await.unwrap();
    assert_eq!(on_each_shard(locks).await, vec![Some("0".into()); SHARDS]);

    // Maintenance runs on each shard (VACUUM cannot run inside a transaction block).
    c.batch_execute("VACUUM ut_acl").await.expect("vacuum");
    c.batch_execute("ANALYZE ut_acl").await.expect("analyze");
    c.execute("VACUUM ut_acl", &[])
        .await
        .expect("vacuum, extended protocol");
    let maintained = "SELECT (count(*) FILTER (WHERE last_vacuum IS NOT NULL) > 0 \
                      AND count(*) FILTER (WHERE last_analyze IS NOT NULL) > 0)::text \
                      FROM pg_stat_user_tables WHERE relname LIKE 'ut_acl_c%'";
    assert_eq!(
        on_each_shard(maintained).await,
        vec![Some("true".into()); SHARDS]
    );
    c.batch_execute("DROP TABLE ut_acl").await.unwrap();
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn ddl_the_proxy_runs_is_refused_among_other_statements() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "ut_ddl").await;
    tablespaces(&c, "ut_ddl").await;
    for sql in [
        "SELECT 1; CREATE INDEX ut_ddl_name ON ut_ddl (name)",
        "SELECT 1; ALTER TABLE ut_ddl ADD COLUMN extra int",
        "SELECT 1; DROP TABLE ut_ddl",
        // The sharding rules decide on a table whose foreign key references a recorded one.
        "SELECT 1; CREATE TABLE ut_ddl_ref (id int, c bigint REFERENCES ut_ddl (cust_id))",
        "SELECT 1; CREATE TABLE ut_ddl_ref (id int, c bigint, FOREIGN KEY (c) REFERENCES ut_ddl)",
        // The proxy's own statements, which PostgreSQL could not read or would answer otherwise.
        "SELECT 1; CREATE SHARDED TABLE ut_ddl_s (a int PRIMARY KEY) \
         PARTITION BY CONSISTENT HASH (a) PARTITIONS AUTO",
        "SELECT 1; SHOW CHUNKS",
        "SHOW SHARDS; SELECT 1",
        "SELECT 1; SHOW CHUNKS FOR ut_ddl",
        "SELECT 1; DROP TABLESPACE ut_ddl_t1",
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{sql}");
        assert!(message(&e).contains("statement of its own"), "{e}");
    }
    for i in 0..SHARDS {
        assert!(!has_table(i, "ut_ddl_ref").await, "shard {i}");
    }
    let tables = simple_rows(&c, "SHOW SHARDED TABLES").await;
    assert!(
        !tables.iter().any(|r| r[0].as_deref() == Some("ut_ddl_s")),
        "{tables:?}"
    );
    // Still recorded: alone, its DROP is the proxy's (PostgreSQL has no such tablespace).
    c.batch_execute("DROP TABLESPACE ut_ddl_t1")
        .await
        .expect("the refused string left the tablespace");
    let indexes = "SELECT count(*)::text FROM pg_indexes WHERE indexname = 'ut_ddl_name'";
    assert_eq!(on_each_shard(indexes).await, vec![Some("0".into()); SHARDS]);
    let columns = "SELECT count(*)::text FROM information_schema.columns \
                   WHERE table_name = 'ut_ddl' AND column_name = 'extra'";
    assert_eq!(on_each_shard(columns).await, vec![Some("0".into()); SHARDS]);
    // Alone, each runs on every shard.
    c.batch_execute("CREATE INDEX ut_ddl_name ON ut_ddl (name)")
        .await
        .expect("alone");
    assert_eq!(on_each_shard(indexes).await, vec![Some("1".into()); SHARDS]);
    c.batch_execute("DROP TABLE ut_ddl").await.unwrap();
}

/// Types, domains and schemas a sharded table's columns use are made, changed and dropped on
/// every shard, so that the table can be created and written wherever its chunks are.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn types_domains_and_schemas_are_made_on_every_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    let has_type =
        |name: &str| format!("SELECT count(*)::text FROM pg_type WHERE typname = '{name}'");
    c.batch_execute("CREATE TYPE ut_mood AS ENUM ('a', 'b')")
        .await
        .expect("create type");
    assert_eq!(
        on_each_shard(&has_type("ut_mood")).await,
        vec![Some("1".into()); SHARDS]
    );
    c.batch_execute(
        "CREATE SHARDED TABLE ut_typed (cust_id bigint PRIMARY KEY, m ut_mood) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
    )
    .await
    .expect("a sharded table of the type");
    let rows: Vec<String> = (1..=40)
        .map(|i| format!("({i}, '{}')", if i % 2 == 0 { "a" } else { "b" }))
        .collect();
    c.batch_execute(&format!("INSERT INTO ut_typed VALUES {}", rows.join(", ")))
        .await
        .expect("insert");
    c.batch_execute("COMMENT ON TYPE ut_mood IS 'moods'")
        .await
        .expect("comment on the type");
    assert_eq!(
        on_each_shard("SELECT obj_description('ut_mood'::regtype, 'pg_type')").await,
        vec![Some("moods".into()); SHARDS]
    );
    c.batch_execute("ALTER TYPE ut_mood ADD VALUE 'c'")
        .await
        .expect("add a value");
    c.batch_execute("UPDATE ut_typed SET m = 'c' WHERE cust_id > 30")
        .await
        .expect("the new value on every shard");
    assert_eq!(
        counts_where("ut_typed", "WHERE m = 'c'")
            .await
            .iter()
            .sum::<i64>(),
        10
    );
    let e = c
        .batch_execute("DROP TYPE ut_mood")
        .await
        .expect_err("a column depends on it");
    assert_eq!(code(&e), SqlState::DEPENDENT_OBJECTS_STILL_EXIST);
    let e = c
        .batch_execute("DROP TYPE ut_mood CASCADE")
        .await
        .expect_err("cascade would drop the column behind the catalog");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED);
    c.batch_execute("DROP TABLE ut_typed").await.unwrap();
    c.batch_execute("DROP TYPE ut_mood")
        .await
        .expect("drop type");
    assert_eq!(
        on_each_shard(&has_type("ut_mood")).await,
        vec![Some("0".into()); SHARDS]
    );

    // A type made on the first shard alone (before the proxy made them everywhere) drops.
    shards()
        .connect(0)
        .await
        .batch_execute("CREATE TYPE ut_old AS (a int)")
        .await
        .unwrap();
    c.batch_execute("DROP TYPE ut_old").await.expect("drop it");
    assert_eq!(
        on_each_shard(&has_type("ut_old")).await,
        vec![Some("0".into()); SHARDS]
    );

    c.batch_execute("CREATE SCHEMA ut_s").await.expect("schema");
    c.batch_execute("GRANT USAGE ON SCHEMA ut_s TO PUBLIC")
        .await
        .expect("grant on the schema");
    let usage = "SELECT has_schema_privilege('public', 'ut_s', 'USAGE')::text";
    assert_eq!(
        on_each_shard(usage).await,
        vec![Some("true".into()); SHARDS]
    );
    c.execute("CREATE DOMAIN ut_s.pos AS int CHECK (VALUE > 0)", &[])
        .await
        .expect("domain, extended protocol");
    assert_eq!(
        on_each_shard(&has_type("pos")).await,
        vec![Some("1".into()); SHARDS]
    );
    c.batch_execute("DROP DOMAIN ut_s.pos; DROP SCHEMA ut_s")
        .await
        .expect("drop both in one string");
    let schemas = "SELECT count(*)::text FROM pg_namespace WHERE nspname = 'ut_s'";
    assert_eq!(on_each_shard(schemas).await, vec![Some("0".into()); SHARDS]);

    // Inside a block, they are the block's.
    c.batch_execute("BEGIN").await.unwrap();
    c.batch_execute("CREATE TYPE ut_rb AS (a int)")
        .await
        .unwrap();
    c.batch_execute("ROLLBACK").await.unwrap();
    assert_eq!(
        on_each_shard(&has_type("ut_rb")).await,
        vec![Some("0".into()); SHARDS]
    );
}

/// Functions are made, changed and dropped on every shard, so a multi-shard read, a trigger or
/// a column default can use them wherever the rows are; a function whose body reads a sharded
/// table (or writes a duplicated one) would see one shard's rows, and is refused.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn functions_are_made_on_every_shard_unless_they_read_sharded_tables() {
    let proxy = start();
    let c = proxy.connect().await;
    let has_function =
        |name: &str| format!("SELECT count(*)::text FROM pg_proc WHERE proname = '{name}'");
    c.batch_execute("CREATE FUNCTION ut_f_double(x bigint) RETURNS bigint IMMUTABLE LANGUAGE sql AS 'SELECT x * 2'")
        .await
        .expect("create function");
    // Through the extended protocol too.
    c.execute(
        "CREATE FUNCTION ut_f_stamp() RETURNS trigger LANGUAGE plpgsql AS \
         $$ BEGIN NEW.score := NEW.cust_id * 10; RETURN NEW; END $$",
        &[],
    )
    .await
    .expect("create trigger function, extended protocol");
    for f in ["ut_f_double", "ut_f_stamp"] {
        assert_eq!(
            on_each_shard(&has_function(f)).await,
            vec![Some("1".into()); SHARDS],
            "{f}"
        );
    }
    create_customers(&c, "ut_f_t").await;
    c.batch_execute(
        "CREATE TRIGGER ut_f_trg BEFORE INSERT ON ut_f_t FOR EACH ROW EXECUTE FUNCTION ut_f_stamp()",
    )
    .await
    .expect("a trigger on every shard of the table");
    fill(&c, "ut_f_t").await;
    assert_eq!(
        counts_where("ut_f_t", "WHERE score = cust_id * 10")
            .await
            .iter()
            .sum::<i64>(),
        40,
        "the trigger ran on every shard"
    );
    let rows = simple_rows(&c, "SELECT sum(ut_f_double(cust_id)) FROM ut_f_t").await;
    assert_eq!(rows, [[Some("1640".to_string())]], "called on every shard");

    // A body over a table on the first shard only is made everywhere (only the first shard
    // checks it) and answers there.
    c.batch_execute("CREATE TABLE ut_f_plain (a int); INSERT INTO ut_f_plain VALUES (1), (2)")
        .await
        .expect("plain table");
    c.batch_execute(
        "CREATE FUNCTION ut_f_plain_count() RETURNS bigint LANGUAGE sql \
         AS 'SELECT count(*) FROM ut_f_plain'",
    )
    .await
    .expect("a function over an unsharded table");
    assert_eq!(
        on_each_shard(&has_function("ut_f_plain_count")).await,
        vec![Some("1".into()); SHARDS]
    );
    let rows = simple_rows(&c, "SELECT ut_f_plain_count()").await;
    assert_eq!(rows, [[Some("2".to_string())]]);
    let e = c
        .batch_execute("CREATE FUNCTION ut_f_bad() RETURNS int LANGUAGE sql AS 'SELECT nope'")
        .await
        .expect_err("the first shard checks the body");
    assert_eq!(code(&e), SqlState::UNDEFINED_COLUMN);
    assert_eq!(
        on_each_shard(&has_function("ut_f_bad")).await,
        vec![Some("0".into()); SHARDS]
    );

    // Bodies that read a sharded table, in every form a body takes.
    c.batch_execute("CREATE DUPLICATED TABLE ut_f_dup (k int PRIMARY KEY, v text)")
        .await
        .expect("duplicated table");
    for sql in [
        "CREATE FUNCTION ut_f_n() RETURNS bigint LANGUAGE sql AS 'SELECT count(*) FROM ut_f_t'",
        "CREATE FUNCTION ut_f_n() RETURNS bigint BEGIN ATOMIC SELECT count(*) FROM UT_F_T; END",
        "CREATE PROCEDURE ut_f_n() LANGUAGE plpgsql AS \
         $$ BEGIN EXECUTE 'DELETE FROM ut_f_t'; END $$",
        "CREATE FUNCTION ut_f_n() RETURNS void LANGUAGE sql \
         AS 'INSERT INTO ut_f_dup VALUES (1, ''x'')'",
        "DO $$ BEGIN DELETE FROM ut_f_t; END $$",
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{sql}");
    }
    assert_eq!(
        on_each_shard(&has_function("ut_f_n")).await,
        vec![Some("0".into()); SHARDS]
    );
    assert_eq!(counts("ut_f_t").await.iter().sum::<i64>(), 40);
    // Reading a duplicated table reads a whole copy.
    c.batch_execute(
        "INSERT INTO ut_f_dup VALUES (1, 'one'); \
         CREATE FUNCTION ut_f_label(x int) RETURNS text STABLE LANGUAGE sql \
         AS 'SELECT v FROM ut_f_dup WHERE k = x'",
    )
    .await
    .expect("a function reading a duplicated table");
    let rows = simple_rows(
        &c,
        "SELECT count(*) FROM ut_f_t WHERE ut_f_label(1) = 'one'",
    )
    .await;
    assert_eq!(rows, [[Some("40".to_string())]]);

    // Changed and dropped everywhere; CASCADE could drop the trigger behind the catalog.
    c.batch_execute("ALTER FUNCTION ut_f_double(bigint) RENAME TO ut_f_twice")
        .await
        .expect("rename");
    assert_eq!(
        on_each_shard(&has_function("ut_f_twice")).await,
        vec![Some("1".into()); SHARDS]
    );
    let e = c
        .batch_execute("DROP FUNCTION ut_f_stamp() CASCADE")
        .await
        .expect_err("cascade");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED);
    c.batch_execute("DROP TABLE ut_f_t").await.unwrap();
    c.batch_execute("DROP FUNCTION ut_f_stamp(); DROP FUNCTION ut_f_twice(bigint)")
        .await
        .expect("drop");
    for f in ["ut_f_stamp", "ut_f_twice"] {
        assert_eq!(
            on_each_shard(&has_function(f)).await,
            vec![Some("0".into()); SHARDS],
            "{f}"
        );
    }
}

/// A temporary table is searched before every schema: named like a recorded table, it would
/// stand in for that table on the one shard holding it. Refused in each way one is made.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn temporary_tables_named_like_recorded_tables_are_refused() {
    let proxy = start();
    let c = proxy.connect().await;
    create_customers(&c, "ut_tmp").await;
    fill(&c, "ut_tmp").await;
    for sql in [
        "CREATE TEMP TABLE ut_tmp (a int)",
        "CREATE TEMPORARY TABLE ut_tmp AS SELECT 1 AS a",
        "SELECT 1 AS a INTO TEMP ut_tmp",
        "CREATE TEMP VIEW ut_tmp AS SELECT 1 AS a",
        "CREATE TABLE pg_temp.ut_tmp (a int)",
    ] {
        let e = c.batch_execute(sql).await.expect_err(sql);
        assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED, "{sql}: {e}");
        assert!(message(&e).contains("another name"), "{sql}: {e}");
    }
    c.batch_execute("CREATE TEMP TABLE ut_tmp_scratch (a int)")
        .await
        .expect("another name");
    let rows = simple_rows(&c, "SELECT count(*) FROM ut_tmp").await;
    assert_eq!(rows, [[Some("40".to_string())]]);
    c.batch_execute("DROP TABLE ut_tmp").await.unwrap();
}

/// The shards holding a table of that name.
async fn shards_with_table(table: &str) -> Vec<usize> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        if has_table(i, table).await {
            out.push(i);
        }
    }
    out
}

/// What SQLAlchemy's `create_all` sends through psycopg with autocommit off, after a type was
/// made: a block made the type on every shard and changed a setting (which pins the session),
/// then a block read the catalog and made a plain table. The table lands on the first shard,
/// where the proxy sends later statements on it (it was made on the shard the session was
/// pinned to, and the INSERT failed with "relation does not exist"); so does a temporary table.
async fn plain_tables_after_a_block_over_every_shard(c: &Client, prefix: &str) {
    let run = |sql: String| async move {
        c.batch_execute(&sql)
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
    };
    run("BEGIN".into()).await;
    run(format!("CREATE TYPE {prefix}_e AS ENUM ('a', 'b')")).await;
    run("SET TIME ZONE 'UTC'".into()).await;
    run("COMMIT".into()).await;
    run("BEGIN".into()).await;
    run(format!(
        "SELECT relname FROM pg_catalog.pg_class WHERE relname = '{prefix}_p'"
    ))
    .await;
    run(format!("CREATE TABLE {prefix}_p (id int, e {prefix}_e)")).await;
    run("COMMIT".into()).await;
    run(format!("INSERT INTO {prefix}_p VALUES (1, 'b')")).await;
    assert_eq!(
        simple_rows(c, &format!("SELECT id, e FROM {prefix}_p")).await,
        vec![vec![Some("1".into()), Some("b".into())]]
    );
    assert_eq!(shards_with_table(&format!("{prefix}_p")).await, vec![0]);
    // In one block with the type's DDL (every shard) before it.
    run("BEGIN".into()).await;
    run(format!("CREATE TYPE {prefix}_f AS ENUM ('x')")).await;
    run(format!("CREATE TABLE {prefix}_q (f {prefix}_f)")).await;
    run(format!("INSERT INTO {prefix}_q VALUES ('x')")).await;
    run("COMMIT".into()).await;
    assert_eq!(shards_with_table(&format!("{prefix}_q")).await, vec![0]);
    assert_eq!(
        simple_rows(c, &format!("SELECT f FROM {prefix}_q")).await,
        vec![vec![Some("x".into())]]
    );
    // The pinned session's own state is the first shard's connection's.
    assert_eq!(
        simple_rows(c, "SHOW TimeZone").await,
        vec![vec![Some("UTC".into())]]
    );
    run(format!("CREATE TEMP TABLE {prefix}_t (a int)")).await;
    run(format!("INSERT INTO {prefix}_t VALUES (7)")).await;
    assert_eq!(
        simple_rows(c, &format!("SELECT a FROM {prefix}_t")).await,
        vec![vec![Some("7".into())]]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_table_made_after_a_block_over_every_shard_lands_on_the_first() {
    let proxy = start();
    let c = proxy.connect().await;
    // Recorded tables exist: statements are planned.
    create_customers(&c, "ut_pin_rec").await;
    plain_tables_after_a_block_over_every_shard(&c, "ut_pina").await;
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_plain_table_made_after_a_block_over_every_shard_lands_on_the_first_with_no_table_recorded(
) {
    // A catalog of this test's own, recording no table: statements are not planned.
    common::use_shards(SHARDS);
    let admin = shards().connect(0).await;
    admin
        .batch_execute("CREATE DATABASE ut_pin_catalog")
        .await
        .expect("catalog database");
    let url = shards().url(0);
    let catalog = format!(
        "{}/ut_pin_catalog",
        &url[..url.rfind('/').expect("db in url")]
    );
    let proxy = common::TestProxy::start_with(|config| {
        config.catalog = Some(shardwire::config::CatalogConfig { url: catalog })
    });
    let c = proxy.connect().await;
    plain_tables_after_a_block_over_every_shard(&c, "ut_pinb").await;
}
