//! Issue 12's memory acceptance: over 1,000,000 rows on four shards, a GROUP BY of 100,000
//! groups (partial aggregation), an ORDER BY … LIMIT (the streaming merge) and a window
//! function over every row (the general path reading every row) finish while the proxy — the
//! real binary, measured by its peak resident memory — holds far less than the rows that
//! passed through it.

mod common;
mod process_common;

use common::shards;
use process_common::Proxy;

const ROWS: i64 = 1_000_000;
const GROUPS: i64 = 100_000;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn large_multi_shard_reads_keep_the_proxys_memory_bounded() {
    common::use_shards(4);
    let dir = tempfile::tempdir().expect("temp dir");
    let proxy = Proxy::start_with(
        dir.path(),
        None,
        "\n[queries]\ncombine_row_limit = 2000000\n",
    )
    .await;
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE mem_big (id bigint PRIMARY KEY, grp int, v int) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO",
        )
        .await
        .expect("create");
    // Loaded on the shards directly, each chunk with its own rows, to keep the test short.
    let load = format!(
        "DO $$DECLARE p record; BEGIN \
         FOR p IN SELECT c.oid::regclass AS part, pg_get_expr(c.relpartbound, c.oid) AS b \
                  FROM pg_inherits i JOIN pg_class c ON c.oid = i.inhrelid \
                  WHERE i.inhparent = 'mem_big'::regclass LOOP \
           EXECUTE format('INSERT INTO %s SELECT g, g %% {GROUPS}, (g::bigint * 7919) %% 1000003 \
                           FROM generate_series(1, {ROWS}) g \
                           WHERE satisfies_hash_partition(''mem_big''::regclass, %s, %s, g::bigint)', \
                          p.part, substring(p.b from 'modulus (\\d+)'), \
                          substring(p.b from 'remainder (\\d+)')); \
         END LOOP; END $$"
    );
    let loads = (0..4).map(|i| {
        let load = load.clone();
        async move {
            let c = shards().connect(i).await;
            c.batch_execute(&load).await.expect("load a shard");
        }
    });
    futures::future::join_all(loads).await;
    let total: i64 = client
        .query_one("SELECT count(*) FROM mem_big", &[])
        .await
        .expect("count")
        .get(0);
    assert_eq!(total, ROWS);
    let before = proxy.memory_kib("VmRSS");

    let groups = client
        .simple_query("SELECT grp, count(*), sum(v), avg(v) FROM mem_big GROUP BY grp ORDER BY grp")
        .await
        .expect("group by");
    let rows = groups
        .iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count();
    assert_eq!(rows as i64, GROUPS);
    let top = client
        .query(
            "SELECT id, v FROM mem_big ORDER BY v DESC, id LIMIT 10",
            &[],
        )
        .await
        .expect("order by limit");
    assert_eq!(top.len(), 10);
    let ranked: i64 = client
        .query_one(
            "SELECT count(*) FROM (SELECT row_number() OVER (ORDER BY v, id) AS r FROM mem_big) s \
             WHERE r % 1000 = 0",
            &[],
        )
        .await
        .expect("window over every row")
        .get(0);
    assert_eq!(ranked, ROWS / 1000);

    // A million rows of three columns passed through the proxy (about 40 MB as binary rows):
    // its peak stays far below that above where it started.
    let peak = proxy.memory_kib("VmHWM");
    let grown = peak.saturating_sub(before);
    eprintln!("proxy memory: {before} KiB before, peak {peak} KiB");
    assert!(
        grown < 24 * 1024,
        "the proxy's peak memory grew by {grown} KiB (from {before} KiB)"
    );
    client
        .batch_execute("DROP TABLE mem_big")
        .await
        .expect("drop");
}
