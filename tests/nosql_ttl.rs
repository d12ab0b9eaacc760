//! Oracle NoSQL time to live (seeds/002): a table TTL inherited by rows, a row TTL set by INSERT
//! and UPDATE (`SET TTL n HOURS|DAYS`, `SET TTL USING TABLE DEFAULT`) and kept when the table's
//! changes, expired rows invisible through the proxy and on the shards, purged in the
//! background; remaining_hours / remaining_days / expiration_time; table states. Expiry is moved
//! into the past on the shards themselves rather than waited for.

mod common;
mod sharding_common;

use std::time::{Duration, Instant};

use common::{shards, TestProxy};
use sharding_common::{failed, rows, succeeded};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

/// A proxy whose purge does not run while a test looks at expired rows (its first pass runs at
/// start, before any table exists).
fn proxy_without_purge() -> TestProxy {
    TestProxy::start_with(|c| {
        c.proxy.chunks_per_shard = 2;
        c.ttl.purge_interval_ms = 3_600_000;
    })
}

async fn both_shards() -> [Client; 2] {
    [shards().connect(0).await, shards().connect(1).await]
}

/// Sums `sql` (one bigint) over both shards.
async fn on_shards(shards: &[Client; 2], sql: &str) -> i64 {
    let mut total = 0;
    for s in shards {
        let n: i64 = s
            .query_one(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
            .get(0);
        total += n;
    }
    total
}

/// Seconds from now to row `id`'s expiry on whichever shard holds it (`None`: never expires),
/// and whether the expiry is on a boundary of `unit` ('hour' or 'day') in UTC.
async fn expiry(shards: &[Client; 2], table: &str, id: i64, unit: &str) -> Option<(f64, bool)> {
    let sql = format!(
        "SELECT extract(epoch FROM \"$expires\" - now())::float8, \
                date_trunc('{unit}', \"$expires\", 'UTC') = \"$expires\" \
         FROM \"public$rows\".{table} WHERE id = $1"
    );
    for s in shards {
        if let Some(row) = s.query_opt(&sql, &[&id]).await.unwrap() {
            let seconds: Option<f64> = row.get(0);
            let aligned: Option<bool> = row.get(1);
            return seconds.map(|s| (s, aligned.unwrap()));
        }
    }
    panic!("row {id} of {table} is on no shard");
}

fn message(e: &tokio_postgres::Error) -> String {
    e.as_db_error()
        .map_or_else(|| e.to_string(), |d| d.message().to_owned())
}

const HOUR: f64 = 3600.0;
const DAY: f64 = 86400.0;

fn within(value: Option<(f64, bool)>, low: f64, high: f64) {
    let (seconds, aligned) = value.expect("the row expires");
    assert!(
        seconds > low && seconds <= high,
        "expires in {seconds}s, expected ({low}, {high}]"
    );
    assert!(aligned, "the expiry is rounded up to the unit's boundary");
}

#[tokio::test]
async fn expired_rows_are_invisible_everywhere_and_purged() {
    let proxy = proxy_without_purge();
    let shards = both_shards().await;
    let client = proxy.connect().await;
    succeeded(proxy.psql("CREATE TABLE visits (id LONG, who STRING, PRIMARY KEY (id))"));
    // Odd ids never expire; even ids live an hour (one multi-row INSERT split over the shards,
    // and single rows).
    let mut odd = String::new();
    for id in (1..=19).step_by(2) {
        odd.push_str(&format!("INSERT INTO visits VALUES ({id}, 'o{id}');\n"));
    }
    succeeded(proxy.psql(&odd));
    let even: Vec<String> = (2..=16)
        .step_by(2)
        .map(|id| format!("({id}, 'e{id}')"))
        .collect();
    let out = succeeded(proxy.psql(&format!(
        "INSERT INTO visits VALUES {} SET TTL 1 HOURS;\n\
         INSERT INTO visits (id, who) VALUES (18, 'e18') SET TTL 1 HOURS;\n\
         INSERT INTO visits VALUES (20, 'e20') SET TTL 1 HOUR RETURNING *;",
        even.join(", ")
    )));
    assert!(out.contains("INSERT 0 8"), "{out}");
    assert!(
        out.contains("20 | e20"),
        "RETURNING * shows the table's columns: {out}"
    );
    assert!(!out.contains("expires"), "{out}");
    assert_eq!(on_shards(&shards, "SELECT count(*) FROM visits").await, 20);
    assert!(
        shards[0]
            .query_one("SELECT count(*) FROM visits", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    );
    assert!(
        shards[1]
            .query_one("SELECT count(*) FROM visits", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0
    );
    for id in (2..=20).step_by(2) {
        within(
            expiry(&shards, "visits", id, "hour").await,
            HOUR,
            2.0 * HOUR,
        );
    }
    for id in (1..=19).step_by(2) {
        assert_eq!(
            expiry(&shards, "visits", id, "hour").await,
            None,
            "row {id}"
        );
    }
    // The row functions, through the proxy.
    assert_eq!(
        rows(
            &client,
            "SELECT remaining_hours(v), remaining_days(v), \
                    expiration_time(v) > now() AT TIME ZONE 'UTC' FROM visits v WHERE id = 2"
        )
        .await,
        [["1", "0", "t"]]
    );
    assert_eq!(
        rows(
            &client,
            "SELECT remaining_hours(v), remaining_days(v), expiration_time(v) \
             FROM visits v WHERE id = 3"
        )
        .await,
        [["-1", "-1", "1970-01-01 00:00:00"]]
    );

    // An hour passes for the even rows.
    for s in &shards {
        s.batch_execute(
            "UPDATE \"public$rows\".visits SET \"$expires\" = now() - interval '1 minute' \
             WHERE \"$expires\" IS NOT NULL",
        )
        .await
        .unwrap();
    }
    assert_eq!(rows(&client, "SELECT count(*) FROM visits").await, [["10"]]);
    assert_eq!(
        rows(&client, "SELECT who FROM visits WHERE id = 4").await,
        Vec::<Vec<String>>::new()
    );
    assert_eq!(
        rows(&client, "SELECT count(*) FROM visits WHERE id % 2 = 0").await,
        [["0"]]
    );
    // On the shards: the table's name shows no expired row; the rows are still stored.
    assert_eq!(on_shards(&shards, "SELECT count(*) FROM visits").await, 10);
    assert_eq!(
        on_shards(&shards, "SELECT count(*) FROM \"public$rows\".visits").await,
        20
    );
    // An expired row is gone for writers too: its key is free, and UPDATE/DELETE skip it.
    let out = succeeded(proxy.psql(
        "INSERT INTO visits VALUES (4, 'again');\n\
         UPDATE visits SET who = who || '!';\n\
         DELETE FROM visits WHERE id = 6;",
    ));
    assert!(
        out.contains("INSERT 0 1") && out.contains("UPDATE 11") && out.contains("DELETE 0"),
        "{out}"
    );

    // A proxy that purges: every expired row goes, nothing else does.
    let purging = TestProxy::start_with(|c| {
        c.proxy.chunks_per_shard = 2;
        c.ttl.purge_interval_ms = 200;
        c.ttl.purge_batch_rows = 3;
    });
    let deadline = Instant::now() + Duration::from_secs(30);
    while on_shards(&shards, "SELECT count(*) FROM \"public$rows\".visits").await > 11 {
        assert!(Instant::now() < deadline, "expired rows were not purged");
        tokio::time::sleep(Duration::from_millis(100)).await;
    }
    let kept = rows(&client, "SELECT id, who FROM visits ORDER BY id").await;
    let mut expected: Vec<Vec<String>> = (1..=19)
        .step_by(2)
        .map(|id| vec![id.to_string(), format!("o{id}!")])
        .collect();
    expected.insert(2, vec!["4".into(), "again!".into()]);
    assert_eq!(kept, expected);
    drop(purging);
    succeeded(proxy.psql("DROP TABLE visits"));
}

#[tokio::test]
async fn table_ttl_is_inherited_and_a_row_ttl_survives_alter_table() {
    let proxy = proxy_without_purge();
    let shards = both_shards().await;
    let client = proxy.connect().await;
    succeeded(
        proxy.psql("CREATE TABLE carts (id LONG, note STRING, PRIMARY KEY (id)) USING TTL 5 DAYS"),
    );
    for sql in [
        "INSERT INTO carts VALUES (1, 'inherits')",
        "INSERT INTO carts VALUES (2, 'own') SET TTL 3 HOURS",
        "INSERT INTO carts VALUES (3, 'none') SET TTL 0 DAYS",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    within(
        expiry(&shards, "carts", 1, "day").await,
        5.0 * DAY,
        6.0 * DAY,
    );
    within(
        expiry(&shards, "carts", 2, "hour").await,
        3.0 * HOUR,
        4.0 * HOUR,
    );
    assert_eq!(expiry(&shards, "carts", 3, "hour").await, None);

    succeeded(proxy.psql("ALTER TABLE carts USING TTL 2 HOURS"));
    let recorded = rows(
        &shards[0],
        "SELECT ttl_amount::text, ttl_unit FROM shardwire_catalog.table_entry \
         WHERE table_name = 'carts'",
    )
    .await;
    assert_eq!(recorded, [["2", "hours"]]);
    // Rows written before keep their expiry; rows written after inherit the new TTL.
    within(
        expiry(&shards, "carts", 1, "day").await,
        5.0 * DAY,
        6.0 * DAY,
    );
    within(
        expiry(&shards, "carts", 2, "hour").await,
        3.0 * HOUR,
        4.0 * HOUR,
    );
    client
        .batch_execute("INSERT INTO carts VALUES (4, 'after')")
        .await
        .unwrap();
    within(
        expiry(&shards, "carts", 4, "hour").await,
        2.0 * HOUR,
        3.0 * HOUR,
    );

    // UPDATE: without SET TTL the expiry stays; with it, it changes.
    for sql in [
        "UPDATE carts SET note = 'kept' WHERE id = 2",
        "UPDATE carts SET TTL USING TABLE DEFAULT WHERE id = 1",
        "UPDATE carts c SET note = 'forever', SET TTL 0 HOURS WHERE c.id = 4",
    ] {
        client.batch_execute(sql).await.unwrap();
    }
    within(
        expiry(&shards, "carts", 2, "hour").await,
        3.0 * HOUR,
        4.0 * HOUR,
    );
    within(
        expiry(&shards, "carts", 1, "hour").await,
        2.0 * HOUR,
        3.0 * HOUR,
    );
    assert_eq!(expiry(&shards, "carts", 4, "hour").await, None);
    assert_eq!(
        rows(
            &client,
            "SELECT note, remaining_days(c) FROM carts c WHERE id = 4"
        )
        .await,
        [["forever", "-1"]]
    );

    // The extended protocol, with the TTL as a parameter; an upsert keeps the new TTL.
    client
        .execute(
            "INSERT INTO carts VALUES ($1, $2) SET TTL $3 DAYS",
            &[&5i64, &"prepared", &1i32],
        )
        .await
        .unwrap();
    within(expiry(&shards, "carts", 5, "day").await, DAY, 2.0 * DAY);
    client
        .execute(
            "INSERT INTO carts VALUES (3, 'upsert') ON CONFLICT (id) DO UPDATE \
             SET note = excluded.note SET TTL 10 DAYS",
            &[],
        )
        .await
        .unwrap();
    within(
        expiry(&shards, "carts", 3, "day").await,
        10.0 * DAY,
        11.0 * DAY,
    );
    let returned = client
        .query(
            "UPDATE carts SET TTL 1 DAYS WHERE id = $1 RETURNING *",
            &[&3i64],
        )
        .await
        .unwrap();
    assert_eq!(returned.len(), 1);
    let names: Vec<&str> = returned[0].columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["id", "note"]);

    // Columns and indexes change on the data table; the view follows.
    succeeded(proxy.psql(
        "ALTER TABLE carts ADD COLUMN items INTEGER DEFAULT 0;\n\
         CREATE INDEX carts_note ON carts (note);",
    ));
    let described = client.prepare("SELECT * FROM carts").await.unwrap();
    let names: Vec<&str> = described.columns().iter().map(|c| c.name()).collect();
    assert_eq!(names, ["id", "note", "items"]);
    assert_eq!(
        rows(
            &client,
            "SELECT items, remaining_hours(c) FROM carts c WHERE id = 1"
        )
        .await,
        [["0", "2"]]
    );
    let index = rows(
        &shards[1],
        "SELECT count(*) FROM pg_indexes WHERE schemaname = 'public$rows' AND indexname = 'carts_note'",
    )
    .await;
    assert_eq!(index, [["1"]]);
    within(
        expiry(&shards, "carts", 2, "hour").await,
        3.0 * HOUR,
        4.0 * HOUR,
    );

    // Refusals leave the session usable.
    let e = client
        .batch_execute("INSERT INTO carts VALUES (9, 'x') SET TTL 5 WEEKS")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::SYNTAX_ERROR), "{e}");
    assert!(message(&e).contains("HOURS"), "{e}");
    let e = client
        .batch_execute("UPDATE carts SET TTL DAYS WHERE id = 1")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::SYNTAX_ERROR), "{e}");
    succeeded(proxy.psql("CREATE DUPLICATED TABLE plain_t (id bigint PRIMARY KEY)"));
    let e = client
        .batch_execute("INSERT INTO plain_t VALUES (1) SET TTL 1 DAYS")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::WRONG_OBJECT_TYPE), "{e}");
    let e = client
        .batch_execute("ALTER TABLE plain_t USING TTL 1 DAYS")
        .await
        .unwrap_err();
    assert_eq!(e.code(), Some(&SqlState::WRONG_OBJECT_TYPE), "{e}");
    assert_eq!(rows(&client, "SELECT count(*) FROM carts").await, [["5"]]);

    // DROP takes the view, the data table and the row functions from every shard.
    succeeded(proxy.psql("DROP TABLE carts; DROP TABLE plain_t;"));
    assert_eq!(
        on_shards(
            &shards,
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'carts%'"
        )
        .await,
        0
    );
    assert_eq!(
        on_shards(
            &shards,
            "SELECT count(*) FROM pg_proc WHERE proname = 'carts$revive' \
             OR (proname IN ('remaining_hours', 'remaining_days', 'expiration_time') \
                 AND pg_get_function_identity_arguments(oid) LIKE '%carts%')"
        )
        .await,
        0
    );
}

/// A bad TTL in CREATE TABLE names the units it takes, and nothing is created.
#[tokio::test]
async fn a_ttl_unit_other_than_hours_or_days_is_refused() {
    let proxy = proxy_without_purge();
    let shards = both_shards().await;
    let stderr =
        failed(proxy.psql("CREATE TABLE weekly (id LONG, PRIMARY KEY (id)) USING TTL 2 WEEKS"));
    assert!(
        stderr.contains("HOURS") && stderr.contains("DAYS"),
        "{stderr}"
    );
    assert_eq!(
        on_shards(
            &shards,
            "SELECT count(*) FROM pg_class WHERE relname LIKE 'weekly%'"
        )
        .await,
        0
    );
}

/// seeds/002's table states: ACTIVE once created; UPDATING while an ALTER TABLE runs, which
/// refuses a second one but not reads; a table that is gone is gone from the listing.
#[tokio::test]
async fn alter_table_shows_the_table_updating() {
    let proxy = proxy_without_purge();
    let client = proxy.connect().await;
    succeeded(proxy.psql("CREATE TABLE stages (id LONG, v STRING, PRIMARY KEY (id))"));
    client
        .batch_execute("INSERT INTO stages VALUES (1, 'a'), (2, 'b'), (3, 'c')")
        .await
        .unwrap();
    let listed = rows(&client, "SHOW SHARDED TABLES").await;
    assert!(
        listed
            .iter()
            .any(|r| r[0] == "stages" && r.contains(&"active".to_string())),
        "{listed:?}"
    );
    // Hold the data table on one shard so the ALTER waits there.
    let mut blocker = common::shards().connect(1).await;
    let tx = blocker.transaction().await.unwrap();
    tx.batch_execute("LOCK TABLE \"public$rows\".stages IN ACCESS SHARE MODE")
        .await
        .unwrap();
    let alter = {
        let proxy_conn = proxy.connect().await;
        tokio::spawn(async move {
            proxy_conn
                .batch_execute("ALTER TABLE stages ADD COLUMN w INTEGER")
                .await
        })
    };
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let listed = rows(&client, "SHOW SHARDED TABLES").await;
        if listed
            .iter()
            .any(|r| r[0] == "stages" && r.contains(&"updating".to_string()))
        {
            break;
        }
        assert!(Instant::now() < deadline, "never UPDATING: {listed:?}");
        tokio::time::sleep(Duration::from_millis(50)).await;
    }
    let e = client
        .batch_execute("CREATE INDEX stages_v ON stages (v)")
        .await
        .unwrap_err();
    assert_eq!(
        e.code(),
        Some(&SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE),
        "{e}"
    );
    assert!(message(&e).contains("UPDATING"), "{e}");
    tx.rollback().await.unwrap();
    alter.await.unwrap().unwrap_or_else(|e| panic!("{e:?}"));
    let listed = rows(&client, "SHOW SHARDED TABLES").await;
    assert!(
        listed
            .iter()
            .any(|r| r[0] == "stages" && r.contains(&"active".to_string())),
        "{listed:?}"
    );
    assert_eq!(
        rows(&client, "SELECT id, v, w FROM stages ORDER BY id").await,
        [["1", "a", ""], ["2", "b", ""], ["3", "c", ""]]
    );
    succeeded(proxy.psql("DROP TABLE stages"));
    let listed = rows(&client, "SHOW SHARDED TABLES").await;
    assert!(!listed.iter().any(|r| r[0] == "stages"), "{listed:?}");
}

async fn copy_into(client: &Client, sql: &str, data: &'static [u8]) -> u64 {
    use futures::SinkExt;
    let sink = client
        .copy_in(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {}", message(&e)));
    let mut sink = std::pin::pin!(sink);
    sink.send(bytes::Bytes::from_static(data)).await.unwrap();
    sink.as_mut().finish().await.unwrap()
}

#[tokio::test]
async fn copy_from_stdin_fills_the_data_table_with_the_table_ttl() {
    let proxy = proxy_without_purge();
    let shards = both_shards().await;
    let client = proxy.connect().await;
    succeeded(
        proxy.psql("CREATE TABLE copied (id LONG, who STRING, PRIMARY KEY (id)) USING TTL 2 DAYS"),
    );
    let all = copy_into(
        &client,
        "COPY copied FROM STDIN",
        b"1\ta\n2\tb\n3\tc\n4\td\n5\te\n6\tf\n",
    )
    .await;
    assert_eq!(all, 6);
    let named = copy_into(
        &client,
        "COPY copied (who, id) FROM STDIN (FORMAT csv, HEADER)",
        b"who,id\ng,7\nh,8\n",
    )
    .await;
    assert_eq!(named, 2);
    assert_eq!(
        on_shards(&shards, "SELECT count(*) FROM \"public$rows\".copied").await,
        8
    );
    assert!(
        shards[0]
            .query_one("SELECT count(*) FROM copied", &[])
            .await
            .unwrap()
            .get::<_, i64>(0)
            > 0,
        "rows reach both shards"
    );
    for id in 1..=8 {
        within(expiry(&shards, "copied", id, "day").await, DAY, 3.0 * DAY);
    }
    let who: Vec<String> = client
        .query("SELECT who FROM copied ORDER BY id", &[])
        .await
        .unwrap()
        .iter()
        .map(|r| r.get(0))
        .collect();
    assert_eq!(who, ["a", "b", "c", "d", "e", "f", "g", "h"]);
    // COPY TO reads the table's own columns.
    let out = succeeded(proxy.psql("COPY copied TO STDOUT"));
    assert_eq!(out.lines().count(), 8, "{out}");
    assert!(
        out.lines().all(|l| l.split('\t').count() == 2),
        "no expiry column in COPY TO: {out}"
    );
}
