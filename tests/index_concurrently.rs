//! `CREATE INDEX CONCURRENTLY`, `DROP INDEX CONCURRENTLY` and `REINDEX … CONCURRENTLY` on
//! sharded and duplicated tables (docs/behaviour.md, "CONCURRENTLY index DDL on recorded
//! tables"), checked on the shards themselves. Each check is also run against one plain PostgreSQL (a shard reached directly),
//! to show that it tells a good outcome from a bad one.
mod common;
mod routing_common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::shards;
use routing_common::*;
use tokio_postgres::error::{DbError, SqlState};
use tokio_postgres::Client;

async fn exec(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e:?}"));
}

async fn refused(client: &Client, sql: &str) -> DbError {
    let e = client
        .batch_execute(sql)
        .await
        .expect_err(&format!("{sql} should fail"));
    e.as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not a server error: {e:?}"))
        .clone()
}

/// Every index of the partition tree of `index` on the server behind `c` (the index itself
/// when it is not partitioned), with whether it is valid.
async fn index_tree(c: &Client, index: &str) -> Vec<(String, bool)> {
    let rows = c
        .query(
            "SELECT c.relname::text, i.indisvalid FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE i.indexrelid = to_regclass($1) \
                OR i.indexrelid IN (SELECT relid FROM pg_partition_tree(to_regclass($1))) \
             ORDER BY 1",
            &[&index],
        )
        .await
        .expect("index tree");
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// The relations of `table`'s partition tree (the table itself when it is not partitioned).
async fn table_tree_size(c: &Client, table: &str) -> usize {
    let n: i64 = c
        .query_one(
            "SELECT greatest(count(*), 1) FROM pg_partition_tree(to_regclass($1))",
            &[&table],
        )
        .await
        .expect("table tree")
        .get(0);
    n as usize
}

/// The indexes on any relation of `table`'s partition tree, but its primary key's.
async fn table_indexes(c: &Client, table: &str) -> Vec<(String, bool)> {
    let rows = c
        .query(
            "SELECT c.relname::text, i.indisvalid FROM pg_index i \
             JOIN pg_class c ON c.oid = i.indexrelid \
             WHERE (i.indrelid = to_regclass($1) \
                OR i.indrelid IN (SELECT relid FROM pg_partition_tree(to_regclass($1)))) \
               AND NOT i.indisprimary ORDER BY 1",
            &[&table],
        )
        .await
        .expect("table indexes");
    rows.iter().map(|r| (r.get(0), r.get(1))).collect()
}

/// Asserts that `index` exists on every shard, on every relation of `table`'s tree there,
/// and is valid everywhere.
async fn assert_valid_everywhere(table: &str, index: &str) {
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let tree = index_tree(&c, index).await;
        assert_eq!(
            tree.len(),
            table_tree_size(&c, table).await,
            "shard {i}: an index on every relation of {table}: {tree:?}"
        );
        assert!(tree.iter().all(|(_, valid)| *valid), "shard {i}: {tree:?}");
    }
}

/// Inserts single rows through `client` from id `first` on, until `stop`; the number written
/// and the longest an insert took.
async fn write_until(
    client: Client,
    sql: &'static str,
    first: i64,
    stop: Arc<AtomicBool>,
) -> (i64, Duration) {
    let insert = client.prepare(sql).await.expect("prepare insert");
    let mut longest = Duration::ZERO;
    let mut id = first;
    while !stop.load(Ordering::SeqCst) {
        let started = Instant::now();
        client
            .execute(&insert, &[&id])
            .await
            .unwrap_or_else(|e| panic!("insert {id}: {e:?}"));
        longest = longest.max(started.elapsed());
        id += 1;
        tokio::time::sleep(Duration::from_millis(2)).await;
    }
    (id - first, longest)
}

/// How a check is run: the statement, the writer's connection and INSERT, its first id, and
/// a connection that holds a write open for a while once the statement has started (the
/// statement waits for it, as CONCURRENTLY waits for older transactions).
struct Writing<'a> {
    statement: &'a str,
    writer: Client,
    insert: &'static str,
    first_id: i64,
    holder: Client,
    held_write: String,
}

/// Runs the statement on `runner` while a writer inserts; the writer's rows and longest
/// insert.
async fn while_writing(runner: &Client, w: Writing<'_>) -> (i64, Duration) {
    let stop = Arc::new(AtomicBool::new(false));
    let task = tokio::spawn(write_until(w.writer, w.insert, w.first_id, stop.clone()));
    exec(&w.holder, "BEGIN").await;
    exec(&w.holder, &w.held_write).await;
    let holder = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(2500)).await;
        exec(&w.holder, "COMMIT").await;
    });
    // The writer is under way before the statement starts.
    tokio::time::sleep(Duration::from_millis(300)).await;
    let started = Instant::now();
    exec(runner, w.statement).await;
    eprintln!("{}: {:?}", w.statement, started.elapsed());
    holder.await.expect("holder");
    tokio::time::sleep(Duration::from_millis(300)).await;
    stop.store(true, Ordering::SeqCst);
    task.await.expect("writer")
}

const ROWS: i64 = 200_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn writers_never_wait_while_the_index_is_built_and_it_is_valid_everywhere() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_w (id bigint PRIMARY KEY, v int, t text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    exec(
        &c,
        &format!(
            "INSERT INTO ic_w SELECT g, g % 997, md5(g::text) FROM generate_series(1, {ROWS}) g"
        ),
    )
    .await;
    let writing = Writing {
        statement: "CREATE INDEX CONCURRENTLY ic_w_v ON ic_w (v) INCLUDE (t)",
        writer: proxy.connect().await,
        insert: "INSERT INTO ic_w (id, v, t) VALUES ($1, 7, 'w')",
        first_id: 10_000_000,
        holder: proxy.connect().await,
        held_write: "INSERT INTO ic_w VALUES (-1, 0, 'held')".into(),
    };
    let (written, longest) = while_writing(&c, writing).await;
    eprintln!("through the proxy: {written} inserts, the longest {longest:?}");
    assert!(written > 10, "the writer wrote while the index was built");
    assert!(
        longest < Duration::from_secs(1),
        "an insert waited {longest:?}"
    );
    assert_valid_everywhere("ic_w", "ic_w_v").await;
    let rows = simple_rows(&c, "SELECT count(*) FROM ic_w WHERE v = 7").await;
    assert_eq!(
        rows[0][0].as_deref().map(|n| n.parse::<i64>().unwrap()),
        Some(written + ROWS / 997 + 1)
    );

    // The checks, on one plain PostgreSQL: CONCURRENTLY lets the writer on; a plain CREATE
    // INDEX waiting for the held write makes it wait too, which the latency check sees.
    let direct = shards().connect(0).await;
    exec(
        &direct,
        &format!(
            "CREATE TABLE ic_w_plain (id bigint PRIMARY KEY, v int, t text); \
             INSERT INTO ic_w_plain SELECT g, g % 997, md5(g::text) \
             FROM generate_series(1, {ROWS}) g"
        ),
    )
    .await;
    let insert = "INSERT INTO ic_w_plain (id, v, t) VALUES ($1, 7, 'w')";
    let writing = |statement, first_id, held| async move {
        Writing {
            statement,
            writer: shards().connect(0).await,
            insert,
            first_id,
            holder: shards().connect(0).await,
            held_write: format!("INSERT INTO ic_w_plain VALUES ({held}, 0, 'held')"),
        }
    };
    let statement = "CREATE INDEX CONCURRENTLY ic_w_plain_v ON ic_w_plain (v) INCLUDE (t)";
    let (_, longest) = while_writing(&direct, writing(statement, 10_000_000, -1).await).await;
    assert!(longest < Duration::from_secs(1), "direct: {longest:?}");
    assert_eq!(
        index_tree(&direct, "ic_w_plain_v").await,
        [("ic_w_plain_v".to_string(), true)]
    );
    let statement = "CREATE INDEX ic_w_plain_v2 ON ic_w_plain (v)";
    let (_, longest) = while_writing(&direct, writing(statement, 20_000_000, -2).await).await;
    assert!(
        longest >= Duration::from_secs(1),
        "a blocked writer: {longest:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_failure_on_one_shard_leaves_no_index_on_any() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_u (id bigint NOT NULL, k int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    exec(
        &c,
        "INSERT INTO ic_u SELECT g, g FROM generate_series(1, 2000) g; \
         INSERT INTO ic_u VALUES (77, -1)",
    )
    .await;
    let e = refused(&c, "CREATE UNIQUE INDEX CONCURRENTLY ic_u_id ON ic_u (id)").await;
    assert_eq!(e.code(), &SqlState::UNIQUE_VIOLATION, "{e:?}");
    assert!(
        e.message().contains("could not create unique index"),
        "{e:?}"
    );
    for i in 0..SHARDS {
        let direct = shards().connect(i).await;
        assert_eq!(table_indexes(&direct, "ic_u").await, [], "shard {i}");
    }
    // Unnamed, the same; and the table takes the next statement (it is ACTIVE again).
    let e = refused(&c, "CREATE UNIQUE INDEX CONCURRENTLY ON ic_u (id)").await;
    assert_eq!(e.code(), &SqlState::UNIQUE_VIOLATION, "{e:?}");
    exec(&c, "DELETE FROM ic_u WHERE k = -1").await;
    exec(&c, "CREATE UNIQUE INDEX CONCURRENTLY ON ic_u (id)").await;
    assert_valid_everywhere("ic_u", "ic_u_id_idx").await;

    // The check, on one plain PostgreSQL: its own failed build leaves an invalid index.
    let direct = shards().connect(0).await;
    exec(
        &direct,
        "CREATE TABLE ic_u_plain (id bigint, k int); INSERT INTO ic_u_plain VALUES (1, 1), (1, 2)",
    )
    .await;
    let e = refused(
        &direct,
        "CREATE UNIQUE INDEX CONCURRENTLY ic_u_plain_id ON ic_u_plain (id)",
    )
    .await;
    assert_eq!(e.code(), &SqlState::UNIQUE_VIOLATION);
    assert_eq!(
        table_indexes(&direct, "ic_u_plain").await,
        [("ic_u_plain_id".to_string(), false)]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn names_are_postgresqls_and_if_not_exists_is_honoured() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_n (id bigint PRIMARY KEY, v text, w int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    exec(
        &c,
        "INSERT INTO ic_n SELECT g, g::text, g FROM generate_series(1, 500) g",
    )
    .await;
    let statements = [
        "CREATE INDEX CONCURRENTLY ON ic_n (lower(v), w)",
        "CREATE INDEX CONCURRENTLY ON ic_n (lower(v), w)",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS ic_n_named ON ic_n (w) WHERE w > 10",
        "CREATE INDEX CONCURRENTLY IF NOT EXISTS ic_n_named ON ic_n (w) WHERE w > 10",
    ];
    for sql in statements {
        exec(&c, sql).await;
    }
    // Through the extended protocol too (run at its Bind).
    c.execute("CREATE INDEX CONCURRENTLY ic_n_w ON ic_n (w)", &[])
        .await
        .expect("extended protocol");
    assert_valid_everywhere("ic_n", "ic_n_w").await;
    let expected = ["ic_n_lower_w_idx", "ic_n_lower_w_idx1", "ic_n_named"];
    for index in expected {
        assert_valid_everywhere("ic_n", index).await;
    }
    let e = refused(&c, "CREATE INDEX CONCURRENTLY ic_n_named ON ic_n (v)").await;
    assert_eq!(e.code(), &SqlState::DUPLICATE_TABLE);
    assert_eq!(e.message(), "relation \"ic_n_named\" already exists");
    // The partial index's condition reached every partition.
    let direct = shards().connect(1).await;
    let partial: i64 = direct
        .query_one(
            "SELECT count(*) FROM pg_index i JOIN pg_inherits h ON h.inhrelid = i.indexrelid \
             WHERE h.inhparent = 'ic_n_named'::regclass AND i.indpred IS NOT NULL",
            &[],
        )
        .await
        .unwrap()
        .get(0);
    assert_eq!(partial as usize + 1, table_tree_size(&direct, "ic_n").await);

    // The same statements on one plain PostgreSQL name the same indexes.
    let direct = shards().connect(0).await;
    exec(
        &direct,
        "CREATE TABLE ic_n_twin (id bigint PRIMARY KEY, v text, w int)",
    )
    .await;
    for sql in statements {
        exec(
            &direct,
            &sql.replace("ic_n ", "ic_n_twin ")
                .replace("ic_n_named", "ic_n_twin_named"),
        )
        .await;
    }
    let names: Vec<String> = table_indexes(&direct, "ic_n_twin")
        .await
        .into_iter()
        .map(|(n, _)| n)
        .collect();
    assert_eq!(
        names,
        [
            "ic_n_twin_lower_w_idx",
            "ic_n_twin_lower_w_idx1",
            "ic_n_twin_named"
        ]
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn concurrently_is_refused_inside_a_block_as_postgresql_refuses_it() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_b (id bigint PRIMARY KEY, v int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    exec(&c, "CREATE INDEX ic_b_v ON ic_b (v)").await;
    let direct = shards().connect(0).await;
    exec(
        &direct,
        "CREATE TABLE ic_b_plain (id bigint, v int); CREATE INDEX ic_b_plain_v ON ic_b_plain (v)",
    )
    .await;
    let cases = [
        (
            "CREATE INDEX CONCURRENTLY ON ic_b (v)",
            "CREATE INDEX CONCURRENTLY ON ic_b_plain (v)",
        ),
        (
            "DROP INDEX CONCURRENTLY ic_b_v",
            "DROP INDEX CONCURRENTLY ic_b_plain_v",
        ),
        (
            "REINDEX INDEX CONCURRENTLY ic_b_v",
            "REINDEX INDEX CONCURRENTLY ic_b_plain_v",
        ),
        (
            "REINDEX TABLE CONCURRENTLY ic_b",
            "REINDEX TABLE CONCURRENTLY ic_b_plain",
        ),
    ];
    for (through_proxy, plain) in cases {
        exec(&c, "BEGIN").await;
        let ours = refused(&c, through_proxy).await;
        exec(&c, "ROLLBACK").await;
        exec(&direct, "BEGIN").await;
        let theirs = refused(&direct, plain).await;
        exec(&direct, "ROLLBACK").await;
        assert_eq!(ours.code(), &SqlState::ACTIVE_SQL_TRANSACTION, "{ours:?}");
        assert_eq!(
            (ours.code(), ours.message()),
            (theirs.code(), theirs.message())
        );
    }
    // Nothing was made, nothing dropped.
    let indexes = table_indexes(&direct, "ic_b").await;
    assert!(indexes.iter().all(|(_, valid)| *valid), "{indexes:?}");
    assert!(indexes.iter().any(|(n, _)| n == "ic_b_v"), "{indexes:?}");
    assert!(
        !indexes.iter().any(|(n, _)| n == "ic_b_v_idx"),
        "{indexes:?}"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn duplicated_tables_get_and_lose_the_index_on_every_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE DUPLICATED TABLE ic_d (id bigint PRIMARY KEY, v int)",
    )
    .await;
    exec(
        &c,
        "INSERT INTO ic_d SELECT g, g FROM generate_series(1, 1000) g",
    )
    .await;
    exec(&c, "CREATE UNIQUE INDEX CONCURRENTLY ON ic_d (v)").await;
    assert_valid_everywhere("ic_d", "ic_d_v_idx").await;
    exec(&c, "DROP INDEX CONCURRENTLY ic_d_v_idx").await;
    exec(&c, "DROP INDEX CONCURRENTLY IF EXISTS ic_d_v_idx").await;
    for i in 0..SHARDS {
        let direct = shards().connect(i).await;
        assert_eq!(table_indexes(&direct, "ic_d").await, [], "shard {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_sharded_tables_index_is_not_dropped_concurrently_but_plainly() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_x (id bigint PRIMARY KEY, v int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    exec(&c, "CREATE INDEX CONCURRENTLY ic_x_v ON ic_x (v)").await;
    let e = refused(&c, "DROP INDEX CONCURRENTLY ic_x_v").await;
    assert_eq!(e.code(), &SqlState::FEATURE_NOT_SUPPORTED, "{e:?}");
    assert!(
        e.message()
            .starts_with("cannot drop partitioned index \"ic_x_v\" concurrently"),
        "{e:?}"
    );
    assert_valid_everywhere("ic_x", "ic_x_v").await;
    // PostgreSQL refuses its own partitioned index the same way.
    let direct = shards().connect(0).await;
    let theirs = refused(&direct, "DROP INDEX CONCURRENTLY ic_x_v").await;
    assert_eq!(theirs.code(), e.code());
    exec(&c, "DROP INDEX ic_x_v").await;
    for i in 0..SHARDS {
        let direct = shards().connect(i).await;
        assert_eq!(table_indexes(&direct, "ic_x").await, [], "shard {i}");
    }
}

/// The files of `index`'s tree on the server behind `c` (a rebuilt index gets new ones; a
/// partitioned index has none of its own).
async fn index_files(c: &Client, index: &str) -> Vec<u32> {
    let rows = c
        .query(
            "SELECT c.relfilenode FROM pg_class c \
             WHERE (c.oid IN (SELECT relid FROM pg_partition_tree(to_regclass($1))) \
                OR c.oid = to_regclass($1)) AND c.relkind = 'i' ORDER BY c.relname",
            &[&index],
        )
        .await
        .expect("index files");
    rows.iter().map(|r| r.get::<_, u32>(0)).collect()
}

/// An index's files on every shard, and their union with new ones, so that a REINDEX is
/// seen on every shard.
async fn files_everywhere(index: &str) -> Vec<Vec<u32>> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        out.push(index_files(&shards().connect(i).await, index).await);
    }
    out
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn reindex_concurrently_rebuilds_on_every_shard() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_r (id bigint PRIMARY KEY, v int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    exec(
        &c,
        "INSERT INTO ic_r SELECT g, g FROM generate_series(1, 1000) g",
    )
    .await;
    exec(&c, "CREATE INDEX CONCURRENTLY ic_r_v ON ic_r (v)").await;
    let rebuilt = |before: &[Vec<u32>], after: &[Vec<u32>]| {
        before.iter().zip(after).all(|(b, a)| {
            b.len() == a.len() && !b.is_empty() && b.iter().zip(a).all(|(x, y)| x != y)
        })
    };
    for sql in [
        "REINDEX INDEX CONCURRENTLY ic_r_v",
        "REINDEX TABLE CONCURRENTLY ic_r",
        "REINDEX (VERBOSE) INDEX CONCURRENTLY public.ic_r_v",
    ] {
        let before = files_everywhere("ic_r_v").await;
        exec(&c, sql).await;
        let after = files_everywhere("ic_r_v").await;
        assert!(rebuilt(&before, &after), "{sql}: {before:?} → {after:?}");
        assert_valid_everywhere("ic_r", "ic_r_v").await;
    }

    // The check, on one plain PostgreSQL: a REINDEX changes the files, a no-op does not.
    let direct = shards().connect(0).await;
    let before = index_files(&direct, "ic_r_v").await;
    exec(&direct, "ANALYZE ic_r").await;
    assert_eq!(index_files(&direct, "ic_r_v").await, before);
    exec(&direct, "REINDEX INDEX CONCURRENTLY ic_r_v").await;
    assert!(rebuilt(&[before], &[index_files(&direct, "ic_r_v").await]));
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn composite_tables_get_the_index_on_every_level() {
    let proxy = start();
    let c = proxy.connect().await;
    tablespaces(&c, "icc").await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_c (id bigint NOT NULL, class varchar(3) NOT NULL, v int, \
           CONSTRAINT ic_c_pk PRIMARY KEY (id, class)) \
         PARTITIONSET BY LIST (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO \
         (PARTITIONSET silver VALUES ('SLV', 'BRZ') TABLESPACE SET icc_tsa, \
          PARTITIONSET gold VALUES ('GLD') TABLESPACE SET icc_tsb)",
    )
    .await;
    exec(
        &c,
        "INSERT INTO ic_c SELECT g, (ARRAY['SLV', 'BRZ', 'GLD'])[g % 3 + 1], g \
         FROM generate_series(1, 3000) g",
    )
    .await;
    exec(
        &c,
        "CREATE UNIQUE INDEX CONCURRENTLY ic_c_v ON ic_c (v, class, id)",
    )
    .await;
    for i in 0..SHARDS {
        let direct = shards().connect(i).await;
        let tree = index_tree(&direct, "ic_c_v").await;
        // The root, a partition set and its chunks.
        assert!(tree.len() > 2, "shard {i}: {tree:?}");
    }
    assert_valid_everywhere("ic_c", "ic_c_v").await;

    // A unique index without the chunks' key: every partition's builds, then the partition
    // sets' `ON ONLY` index is refused by PostgreSQL on every shard; what was made is removed.
    let mut before = Vec::new();
    for i in 0..SHARDS {
        before.push(table_indexes(&shards().connect(i).await, "ic_c").await);
    }
    let e = refused(
        &c,
        "CREATE UNIQUE INDEX CONCURRENTLY ic_c_bad ON ic_c (v, class)",
    )
    .await;
    assert_eq!(e.code(), &SqlState::FEATURE_NOT_SUPPORTED, "{e:?}");
    assert!(
        e.message()
            .contains("must include all partitioning columns"),
        "{e:?}"
    );
    for (i, before) in before.iter().enumerate() {
        let after = table_indexes(&shards().connect(i).await, "ic_c").await;
        assert_eq!(&after, before, "shard {i}");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn an_oracle_nosql_tables_index_goes_to_its_data_table() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE TABLE ic_ns (id LONG, note STRING, PRIMARY KEY (id)) USING TTL 5 DAYS",
    )
    .await;
    exec(&c, "INSERT INTO ic_ns VALUES (1, 'a'), (2, 'b'), (3, 'c')").await;
    exec(&c, "CREATE INDEX CONCURRENTLY ic_ns_note ON ic_ns (note)").await;
    assert_valid_everywhere("\"public$rows\".ic_ns", "\"public$rows\".ic_ns_note").await;
}

/// The brief steps wait for their locks a little at a time: a transaction holding the table
/// open (a write lock on the partitioned table itself, which the partitions' builds do not
/// wait for) delays the index, not the writers queued behind it.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_long_transaction_on_the_table_delays_the_index_not_the_writers() {
    let proxy = start();
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_l (id bigint PRIMARY KEY, v int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
    )
    .await;
    exec(
        &c,
        "INSERT INTO ic_l SELECT g, g FROM generate_series(1, 20000) g",
    )
    .await;
    let writing = Writing {
        statement: "CREATE INDEX CONCURRENTLY ic_l_v ON ic_l (v)",
        writer: proxy.connect().await,
        insert: "INSERT INTO ic_l (id, v) VALUES ($1, 7)",
        first_id: 10_000_000,
        holder: shards().connect(0).await,
        held_write: "LOCK TABLE ONLY ic_l IN ROW EXCLUSIVE MODE".into(),
    };
    let started = Instant::now();
    let (written, longest) = while_writing(&c, writing).await;
    eprintln!("held open: {written} inserts, the longest {longest:?}");
    assert!(
        started.elapsed() > Duration::from_secs(2),
        "the index waited"
    );
    assert!(
        longest < Duration::from_secs(1),
        "an insert waited {longest:?}"
    );
    assert_valid_everywhere("ic_l", "ic_l_v").await;

    // The check, on one plain PostgreSQL: the same step taken without giving way makes the
    // writers wait as long as the transaction holds the table.
    let direct = shards().connect(0).await;
    exec(
        &direct,
        "CREATE TABLE ic_l_plain (id bigint, v int) PARTITION BY HASH (id); \
         CREATE TABLE ic_l_plain_0 PARTITION OF ic_l_plain FOR VALUES WITH (MODULUS 1, REMAINDER 0)",
    )
    .await;
    let writing = Writing {
        statement: "CREATE INDEX ic_l_plain_v ON ONLY ic_l_plain (v)",
        writer: shards().connect(0).await,
        insert: "INSERT INTO ic_l_plain (id, v) VALUES ($1, 7)",
        first_id: 10_000_000,
        holder: shards().connect(0).await,
        held_write: "LOCK TABLE ONLY ic_l_plain IN ROW EXCLUSIVE MODE".into(),
    };
    let (_, longest) = while_writing(&direct, writing).await;
    assert!(
        longest >= Duration::from_secs(1),
        "a blocked writer: {longest:?}"
    );
}

/// Stops its clusters even when an assertion fails.
struct Stopper<'a>(&'a [shardwire::pgcluster::LocalCluster]);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        for c in self.0 {
            let _ = c.stop(shardwire::pgcluster::StopMode::Immediate);
        }
    }
}

/// A shard that goes down after the other has made the index whole: the other's index,
/// attached and valid, is removed, and the client hears that the shard is unavailable. The
/// test stops a shard, so it runs two clusters of its own.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_shard_lost_while_attaching_leaves_no_index_on_the_others() {
    use shardwire::pgcluster::{free_port, ClusterOptions, LocalCluster, PgBinaries, StopMode};
    let tmp = tempfile::tempdir().unwrap();
    let bins = PgBinaries::locate().unwrap();
    let clusters: Vec<LocalCluster> = (0..2)
        .map(|i| {
            let options = ClusterOptions {
                fast_unsafe: true,
                ..ClusterOptions::default()
            };
            let dir = tmp.path().join(format!("s{i}"));
            LocalCluster::init(bins.clone(), &dir, free_port().unwrap(), options).unwrap()
        })
        .collect();
    let _stopper = Stopper(&clusters);
    for c in &clusters {
        c.start().unwrap();
        c.create_database("app").unwrap();
    }
    let urls: Vec<String> = clusters.iter().map(|c| c.url("app")).collect();
    let connect = |i: usize| {
        let url = urls[i].clone();
        async move {
            let (client, conn) = tokio_postgres::connect(&url, tokio_postgres::NoTls)
                .await
                .expect("connect to own shard");
            tokio::spawn(conn);
            client
        }
    };
    let proxy = common::TestProxy::start_with(|c| {
        c.catalog = None;
        c.shards.truncate(2);
        for (shard, url) in c.shards.iter_mut().zip(&urls) {
            shard.url = url.clone();
        }
        c.pool.connect_timeout_ms = 2000;
    });
    let c = proxy.connect().await;
    exec(
        &c,
        "CREATE SHARDED TABLE ic_down (id bigint NOT NULL, v int) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
    )
    .await;
    exec(
        &c,
        "INSERT INTO ic_down SELECT g, g FROM generate_series(1, 2000) g",
    )
    .await;
    // s2's ON ONLY step waits for this, after s1 has attached everything.
    let locker = connect(1).await;
    exec(
        &locker,
        "BEGIN; LOCK TABLE ONLY ic_down IN ROW EXCLUSIVE MODE",
    )
    .await;
    let creating = {
        let client = proxy.connect().await;
        tokio::spawn(async move {
            client
                .batch_execute("CREATE INDEX CONCURRENTLY ic_down_v ON ic_down (v)")
                .await
        })
    };
    let s1 = connect(0).await;
    let s2 = connect(1).await;
    let deadline = Instant::now() + Duration::from_secs(20);
    let waiting = "SELECT count(*) FROM pg_stat_activity \
                   WHERE wait_event_type = 'Lock' AND query LIKE '%ON ONLY%'";
    loop {
        let whole = index_tree(&s1, "ic_down_v").await;
        let s1_done = whole.len() == 3 && whole.iter().all(|(_, valid)| *valid);
        let s2_waits = s2.query_one(waiting, &[]).await.unwrap().get::<_, i64>(0) > 0;
        if s1_done && s2_waits {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "never attached on s1 while s2 waits: {whole:?}"
        );
        tokio::time::sleep(Duration::from_millis(10)).await;
    }
    clusters[1].stop(StopMode::Immediate).unwrap();
    let e = creating.await.unwrap().expect_err("s2 went down");
    let db = e.as_db_error().expect("an ErrorResponse");
    assert_eq!(db.code(), &SqlState::CONNECTION_FAILURE, "{}", db.message());
    assert!(db.message().contains("\"s2\""), "{}", db.message());
    assert_eq!(table_indexes(&s1, "ic_down").await, []);
    // The table takes DDL again.
    let listed = simple_rows(&c, "SHOW SHARDED TABLES").await;
    assert!(
        listed
            .iter()
            .any(|r| r[0].as_deref() == Some("ic_down") && r.contains(&Some("active".into()))),
        "{listed:?}"
    );
    drop(c);
    drop(proxy);
}
