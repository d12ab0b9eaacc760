//! COPY on sharded tables through the proxy, against four real shards: COPY FROM STDIN split row
//! by row (each row counted on the shard that holds it, where a row on the wrong shard would
//! be refused by its chunk partition), COPY TO STDOUT gathered, and failures that leave nothing
//! behind and the session usable.

mod common;

use std::pin::pin;
use std::time::Duration;

use bytes::Bytes;
use common::{shards, use_shards, TestProxy};
use futures::{SinkExt, TryStreamExt};
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const SHARDS: usize = 4;
const LIMIT: Duration = Duration::from_secs(120);

fn start() -> TestProxy {
    use_shards(SHARDS);
    TestProxy::start()
}

async fn copy_in(client: &Client, sql: &str, data: &[u8]) -> Result<u64, tokio_postgres::Error> {
    let run = async {
        let mut sink = pin!(client.copy_in(sql).await?);
        for chunk in data.chunks(64 * 1024) {
            sink.send(Bytes::copy_from_slice(chunk)).await?;
        }
        sink.as_mut().finish().await
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("{sql}: no answer"))
}

async fn copy_out(client: &Client, sql: &str) -> Vec<u8> {
    let run = async {
        client
            .copy_out(sql)
            .await?
            .try_fold(Vec::new(), |mut acc, chunk| async move {
                acc.extend_from_slice(&chunk);
                Ok(acc)
            })
            .await
    };
    tokio::time::timeout(LIMIT, run)
        .await
        .unwrap_or_else(|_| panic!("{sql}: no answer"))
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
}

fn sorted_lines(data: &[u8]) -> Vec<String> {
    let mut lines: Vec<String> = String::from_utf8_lossy(data)
        .lines()
        .map(str::to_string)
        .collect();
    lines.sort();
    lines
}

/// Rows of `table` on each shard, counted there.
async fn counts(table: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let c = shards().connect(i).await;
        let n: i64 = c
            .query_one(&format!("SELECT count(*) FROM {table}"), &[])
            .await
            .unwrap_or_else(|e| panic!("count {table} on shard {i}: {e}"))
            .get(0);
        out.push(n);
    }
    out
}

async fn count_through(client: &Client, table: &str) -> i64 {
    let rows = client
        .simple_query(&format!("SELECT cust_id FROM {table}"))
        .await
        .unwrap_or_else(|e| panic!("count {table}: {e}"));
    rows.iter()
        .filter(|m| matches!(m, tokio_postgres::SimpleQueryMessage::Row(_)))
        .count() as i64
}

fn code(e: &tokio_postgres::Error) -> SqlState {
    e.as_db_error()
        .unwrap_or_else(|| panic!("not a server error: {e}"))
        .code()
        .clone()
}

async fn assert_session_usable(client: &Client) {
    let one: i32 = client
        .query_one("SELECT 1", &[])
        .await
        .expect("SELECT 1 after the failed COPY")
        .get(0);
    assert_eq!(one, 1);
}

async fn create_family(client: &Client, parent: &str, child: &str) {
    client
        .batch_execute(&format!(
            "CREATE SHARDED TABLE {parent} (cust_id bigint PRIMARY KEY, name text, note text) \
             PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO"
        ))
        .await
        .unwrap_or_else(|e| panic!("create {parent}: {e}"));
    client
        .batch_execute(&format!(
            "CREATE SHARDED TABLE {child} (order_id bigint, cust_id bigint NOT NULL, \
             remark text, PRIMARY KEY (cust_id, order_id), \
             CONSTRAINT {child}_fk FOREIGN KEY (cust_id) REFERENCES {parent} (cust_id)) \
             PARTITION BY REFERENCE ({child}_fk)"
        ))
        .await
        .unwrap_or_else(|e| panic!("create {child}: {e}"));
}

/// Customers in COPY text, in the column order `(name, cust_id, note)`: escapes and NULLs in
/// canonical form, so COPY TO prints them back byte for byte.
fn customers_text(n: usize) -> Vec<u8> {
    let mut data = Vec::with_capacity(n * 32);
    for i in 1..=n {
        let note = match i % 5 {
            0 => "\\N".to_string(),
            1 => "back\\\\slash\\ttab".to_string(),
            2 => "line\\nbreak".to_string(),
            _ => format!("note {i}"),
        };
        data.extend_from_slice(format!("name {i}\t{i}\t{note}\n").as_bytes());
    }
    data
}

/// The same customers as the table prints them, `cust_id, name, note`.
fn customers_printed(n: usize) -> Vec<String> {
    let text = String::from_utf8(customers_text(n)).unwrap();
    let mut lines: Vec<String> = text
        .lines()
        .map(|l| {
            let f: Vec<&str> = l.split('\t').collect();
            format!("{}\t{}\t{}", f[1], f[0], f[2])
        })
        .collect();
    lines.sort();
    lines
}

/// Orders in CSV with a header, in the table's column order: remarks with commas, doubled
/// quotes and newlines inside quotes; lines end in CRLF (PostgreSQL takes one kind of line
/// ending per COPY, from its first line).
fn orders_csv(n: usize) -> Vec<u8> {
    let mut data = b"order_id,cust_id,remark\r\n".to_vec();
    for i in 1..=n {
        let remark = match i % 4 {
            0 => "\"a, b\"".to_string(),
            1 => "\"say \"\"hi\"\"\nthen, go\"".to_string(),
            2 => String::new(),
            _ => format!("plain {i}"),
        };
        data.extend_from_slice(format!("{},{i},{remark}\r\n", i * 10).as_bytes());
    }
    data
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_splits_100000_rows_by_key_for_a_family_in_text_and_csv() {
    let proxy = start();
    let client = proxy.connect().await;
    create_family(&client, "cp_cust", "cp_orders").await;
    const N: usize = 100_000;

    let n = copy_in(
        &client,
        "COPY cp_cust (name, cust_id, note) FROM STDIN",
        &customers_text(N),
    )
    .await
    .expect("COPY text into the root");
    assert_eq!(n, N as u64, "COPY n adds up the shards' counts");
    let per_shard = counts("cp_cust").await;
    assert_eq!(per_shard.iter().sum::<i64>(), N as i64, "{per_shard:?}");
    assert!(per_shard.iter().all(|&c| c > 0), "{per_shard:?}");

    // No column list: the key's place comes from the table's column order. The old option
    // syntax, with HEADER: the header line must not become a row.
    let n = copy_in(
        &client,
        "COPY cp_orders FROM STDIN CSV HEADER",
        &orders_csv(N),
    )
    .await
    .expect("COPY CSV into the child");
    assert_eq!(n, N as u64);
    let child = counts("cp_orders").await;
    assert_eq!(child, per_shard, "each order lives with its customer");

    // The quoted fields arrived whole.
    let s = shards();
    let mut remark: Option<String> = None;
    for i in 0..SHARDS {
        let c = s.connect(i).await;
        if let Some(row) = c
            .query_opt("SELECT remark FROM cp_orders WHERE order_id = 10", &[])
            .await
            .unwrap()
        {
            remark = row.get(0);
        }
    }
    assert_eq!(remark.as_deref(), Some("say \"hi\"\nthen, go"));

    // COPY TO gathers every shard's rows: exactly what went in.
    let out = copy_out(&client, "COPY cp_cust TO STDOUT").await;
    assert_eq!(sorted_lines(&out), customers_printed(N));

    // CSV with a header: the header once, then every row.
    let out = copy_out(
        &client,
        "COPY cp_orders (order_id, cust_id) TO STDOUT WITH (FORMAT csv, HEADER)",
    )
    .await;
    let text = String::from_utf8(out).unwrap();
    assert_eq!(text.matches("order_id,cust_id").count(), 1);
    assert!(text.starts_with("order_id,cust_id\n"), "{}", &text[..40]);
    assert_eq!(text.lines().count(), N + 1);

    // COPY (SELECT …) over every shard, and with the full key on one.
    let out = copy_out(
        &client,
        "COPY (SELECT cust_id, name FROM cp_cust WHERE cust_id <= 1000) TO STDOUT",
    )
    .await;
    let expected: Vec<String> = {
        let mut v: Vec<String> = (1..=1000).map(|i| format!("{i}\tname {i}")).collect();
        v.sort();
        v
    };
    assert_eq!(sorted_lines(&out), expected);
    let out = copy_out(
        &client,
        "COPY (SELECT name FROM cp_cust WHERE cust_id = 4242) TO STDOUT (FORMAT csv)",
    )
    .await;
    assert_eq!(out, b"name 4242\n");

    client
        .batch_execute("DROP TABLE cp_orders")
        .await
        .expect("drop");
    client
        .batch_execute("DROP TABLE cp_cust")
        .await
        .expect("drop");
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_row_that_cannot_be_placed_aborts_the_copy_and_leaves_no_rows() {
    let proxy = start();
    let client = proxy.connect().await;
    create_family(&client, "cpbad_cust", "cpbad_orders").await;
    let mut data = customers_text(100_000);
    // Far into the data, after earlier rows went to every shard.
    let bad = b"name x\tnot-a-number\tx\n";
    let at = data.len() / 2;
    let at = at + data[at..].iter().position(|&b| b == b'\n').unwrap() + 1;
    data.splice(at..at, bad.iter().copied());

    let e = copy_in(
        &client,
        "COPY cpbad_cust (name, cust_id, note) FROM STDIN",
        &data,
    )
    .await
    .expect_err("a key that is not a bigint");
    assert_eq!(code(&e), SqlState::INVALID_TEXT_REPRESENTATION, "{e}");
    assert_session_usable(&client).await;
    assert_eq!(
        counts("cpbad_cust").await,
        vec![0; SHARDS],
        "nothing half-applied"
    );

    // Inside a transaction block the block fails, as on PostgreSQL, and ROLLBACK ends it.
    client.batch_execute("BEGIN").await.unwrap();
    client
        .batch_execute("INSERT INTO cpbad_cust VALUES (0, 'zero', NULL)")
        .await
        .unwrap();
    let e = copy_in(
        &client,
        "COPY cpbad_cust (name, cust_id, note) FROM STDIN",
        &data,
    )
    .await
    .expect_err("bad row in a block");
    assert_eq!(code(&e), SqlState::INVALID_TEXT_REPRESENTATION);
    let e = client
        .simple_query("SELECT 1")
        .await
        .expect_err("the block failed");
    assert_eq!(code(&e), SqlState::IN_FAILED_SQL_TRANSACTION);
    client.batch_execute("ROLLBACK").await.unwrap();
    assert_session_usable(&client).await;
    assert_eq!(count_through(&client, "cpbad_cust").await, 0);

    // A row with too few fields, and an unterminated CSV quote.
    let e = copy_in(
        &client,
        "COPY cpbad_cust (name, cust_id) FROM STDIN",
        b"a\t1\nb\n",
    )
    .await
    .expect_err("missing key field");
    assert_eq!(code(&e), SqlState::BAD_COPY_FILE_FORMAT, "{e}");
    let e = copy_in(
        &client,
        "COPY cpbad_cust (cust_id, name) FROM STDIN (FORMAT csv)",
        b"1,\"open\n",
    )
    .await
    .expect_err("unterminated quote");
    assert_eq!(code(&e), SqlState::BAD_COPY_FILE_FORMAT, "{e}");

    // An error a shard raises (a duplicate key) reaches the client; the other shards' rows go.
    let e = copy_in(
        &client,
        "COPY cpbad_cust (cust_id, name) FROM STDIN",
        b"1\ta\n2\tb\n3\tc\n4\td\n5\te\n1\tagain\n",
    )
    .await
    .expect_err("duplicate key");
    assert_eq!(code(&e), SqlState::UNIQUE_VIOLATION, "{e}");
    assert_eq!(count_through(&client, "cpbad_cust").await, 0);

    // CopyFail from the client: tokio-postgres sends it when the sink is dropped unfinished.
    {
        let mut sink = pin!(client
            .copy_in("COPY cpbad_cust (name, cust_id, note) FROM STDIN")
            .await
            .expect("COPY starts"));
        sink.send(Bytes::from_static(b"n\t1\tx\nn\t2\tx\nn\t3\tx\n"))
            .await
            .unwrap();
    }
    assert_session_usable(&client).await;
    assert_eq!(counts("cpbad_cust").await, vec![0; SHARDS]);

    // A column that does not exist fails as PostgreSQL fails it, before any data. After a
    // COPY that fails to start, tokio-postgres sends CopyFail and Sync, whose extra
    // ReadyForQuery it then misreads (against PostgreSQL too): a connection each.
    let client = proxy.connect().await;
    let e = client
        .copy_in::<_, Bytes>("COPY cpbad_cust (cust_id, nope) FROM STDIN")
        .await
        .err()
        .expect("unknown column");
    assert_eq!(code(&e), SqlState::UNDEFINED_COLUMN);
    let client = proxy.connect().await;
    let e = client
        .copy_in::<_, Bytes>("COPY cpbad_cust (name) FROM STDIN")
        .await
        .err()
        .expect("no key column");
    assert_eq!(code(&e), SqlState::FEATURE_NOT_SUPPORTED);
    let client = proxy.connect().await;
    assert_session_usable(&client).await;

    client
        .batch_execute("DROP TABLE cpbad_orders")
        .await
        .expect("drop");
    client
        .batch_execute("DROP TABLE cpbad_cust")
        .await
        .expect("drop");
}

/// The shards' COPYs end as one distributed transaction: a constraint that fails only at commit
/// on one shard (a deferred unique constraint) undoes every shard's rows.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_copy_whose_commit_fails_on_one_shard_leaves_no_rows() {
    let proxy = start();
    let client = proxy.connect().await;
    client
        .batch_execute(
            "CREATE SHARDED TABLE cpdef (cust_id bigint, n int, tag text, \
             PRIMARY KEY (cust_id, n)) PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
        )
        .await
        .expect("create");
    for i in 0..SHARDS {
        shards()
            .connect(i)
            .await
            .batch_execute(
                "ALTER TABLE cpdef ADD CONSTRAINT cpdef_tag UNIQUE (cust_id, tag) \
                 DEFERRABLE INITIALLY DEFERRED",
            )
            .await
            .expect("deferred constraint");
    }
    // Every shard takes rows; key 1's shard also takes two rows that break the deferred
    // constraint, first and last, so it is neither the first nor the last shard to end.
    let mut data = b"1\t100\tdup\n".to_vec();
    for k in 1..=200 {
        data.extend_from_slice(format!("{k}\t1\tt{k}\n").as_bytes());
    }
    data.extend_from_slice(b"1\t101\tdup\n");
    let e = copy_in(&client, "COPY cpdef FROM STDIN", &data)
        .await
        .expect_err("the deferred constraint fails the commit");
    assert_eq!(code(&e), SqlState::UNIQUE_VIOLATION, "{e}");
    assert_eq!(
        counts("cpdef").await,
        vec![0; SHARDS],
        "rows of a failed COPY stayed"
    );
    assert_session_usable(&client).await;

    // Without the broken rows every shard's part commits.
    let data: Vec<u8> = (1..=200)
        .flat_map(|k| format!("{k}\t1\tt{k}\n").into_bytes())
        .collect();
    assert_eq!(
        copy_in(&client, "COPY cpdef FROM STDIN", &data)
            .await
            .expect("copy"),
        200
    );
    let placed = counts("cpdef").await;
    assert_eq!(placed.iter().sum::<i64>(), 200);
    assert!(placed.iter().all(|&n| n > 0), "{placed:?}");
    client
        .batch_execute("DROP TABLE cpdef")
        .await
        .expect("drop");
}

/// `COPY … (FORMAT binary) FROM STDIN`, as tokio-postgres's `BinaryCopyInWriter`, pgx's
/// `CopyFrom` and asyncpg's `copy_records_to_table` send it: each tuple lands on its chunk's shard
/// (whose partition would refuse it anywhere else), values and NULLs intact; binary data
/// PostgreSQL would refuse is refused with `22P04`, nothing written and the session usable.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn binary_copy_from_places_each_tuple_on_its_shard() {
    use tokio_postgres::binary_copy::{BinaryCopyInWriter, BinaryCopyOutStream};
    use tokio_postgres::types::{ToSql, Type};
    let proxy = start();
    let client = proxy.connect().await;
    for ddl in [
        "CREATE SHARDED TABLE cpbin (cust_id bigint PRIMARY KEY, name text, score int) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
        "CREATE SHARDED TABLE cpbin_code (code varchar(20) PRIMARY KEY, n int) \
         PARTITION BY CONSISTENT HASH (code) PARTITIONS AUTO",
    ] {
        client.batch_execute(ddl).await.expect("create");
    }
    let copy = async {
        let sink = client
            .copy_in("COPY cpbin (cust_id, name, score) FROM STDIN (FORMAT binary)")
            .await?;
        let writer = BinaryCopyInWriter::new(sink, &[Type::INT8, Type::TEXT, Type::INT4]);
        let mut writer = pin!(writer);
        for k in 1..=20_000i64 {
            let name = (k % 7 != 0).then(|| format!("name {k}"));
            let score = (k % 1000) as i32;
            let row: [&(dyn ToSql + Sync); 3] = [&k, &name, &score];
            writer.as_mut().write(&row).await?;
        }
        writer.finish().await
    };
    let copied = tokio::time::timeout(LIMIT, copy)
        .await
        .expect("binary COPY answers")
        .expect("binary COPY");
    assert_eq!(copied, 20_000);
    let placed = counts("cpbin").await;
    assert_eq!(placed.iter().sum::<i64>(), 20_000);
    assert!(placed.iter().all(|&n| n > 0), "{placed:?}");
    for k in [1i64, 7, 12_345, 20_000] {
        let row = client
            .query_one("SELECT name, score FROM cpbin WHERE cust_id = $1", &[&k])
            .await
            .expect("keyed read");
        let name: Option<String> = row.get(0);
        let score: i32 = row.get(1);
        assert_eq!(name, (k % 7 != 0).then(|| format!("name {k}")));
        assert_eq!(score, (k % 1000) as i32);
    }

    // A text key, hashed as PostgreSQL hashes the varchar.
    let copy = async {
        let sink = client
            .copy_in("COPY cpbin_code FROM STDIN (FORMAT binary)")
            .await?;
        let writer = BinaryCopyInWriter::new(sink, &[Type::VARCHAR, Type::INT4]);
        let mut writer = pin!(writer);
        for n in 0..2_000i32 {
            let code = format!("code-{n}");
            let row: [&(dyn ToSql + Sync); 2] = [&code, &n];
            writer.as_mut().write(&row).await?;
        }
        writer.finish().await
    };
    assert_eq!(
        tokio::time::timeout(LIMIT, copy)
            .await
            .expect("binary COPY answers")
            .expect("binary COPY of text keys"),
        2_000
    );
    let placed = counts("cpbin_code").await;
    assert_eq!(placed.iter().sum::<i64>(), 2_000);
    assert!(placed.iter().all(|&n| n > 0), "{placed:?}");

    // Read back in binary from every shard: one header, each shard's tuples, one trailer.
    for (sql, expected) in [
        ("COPY cpbin TO STDOUT (FORMAT binary)", (1..=20_000).collect::<Vec<i64>>()),
        (
            "COPY (SELECT cust_id, name, score FROM cpbin WHERE score = 7) TO STDOUT (FORMAT binary)",
            (1..=20_000).filter(|k| k % 1000 == 7).collect(),
        ),
        (
            "COPY (SELECT cust_id, name, score FROM cpbin WHERE score < 0) TO STDOUT (FORMAT binary)",
            Vec::new(),
        ),
    ] {
        let read = async {
            let stream = client.copy_out(sql).await?;
            let rows = BinaryCopyOutStream::new(stream, &[Type::INT8, Type::TEXT, Type::INT4]);
            rows.try_collect::<Vec<_>>().await
        };
        let rows = tokio::time::timeout(LIMIT, read)
            .await
            .expect("binary COPY TO answers")
            .unwrap_or_else(|e| panic!("{sql}: {e}"));
        let mut keys = Vec::new();
        for row in &rows {
            let k: i64 = row.get(0);
            let name: Option<String> = row.get(1);
            let score: i32 = row.get(2);
            assert_eq!(name, (k % 7 != 0).then(|| format!("name {k}")));
            assert_eq!(score, (k % 1000) as i32);
            keys.push(k);
        }
        keys.sort_unstable();
        assert_eq!(keys, expected, "{sql}");
    }

    // Data PostgreSQL refuses: a wrong signature; a tuple after the trailer.
    let mut valid = b"PGCOPY\n\xff\r\n\0".to_vec();
    valid.extend_from_slice(&[0; 8]);
    let tuple = |k: i64| {
        let mut t = 3i16.to_be_bytes().to_vec();
        t.extend_from_slice(&8i32.to_be_bytes());
        t.extend_from_slice(&k.to_be_bytes());
        t.extend_from_slice(&(-1i32).to_be_bytes());
        t.extend_from_slice(&(-1i32).to_be_bytes());
        t
    };
    let mut wrong_signature = valid.clone();
    wrong_signature[6] = b'\r';
    wrong_signature.extend(tuple(100_001));
    let after_trailer = [
        valid.clone(),
        tuple(100_002),
        vec![0xff, 0xff],
        tuple(100_003),
    ]
    .concat();
    for data in [wrong_signature, after_trailer] {
        let e = copy_in(&client, "COPY cpbin FROM STDIN (FORMAT binary)", &data)
            .await
            .expect_err("bad binary data");
        assert_eq!(code(&e), SqlState::BAD_COPY_FILE_FORMAT, "{e}");
        assert_session_usable(&client).await;
        assert_eq!(counts("cpbin").await.iter().sum::<i64>(), 20_000);
    }
    for table in ["cpbin", "cpbin_code"] {
        client
            .batch_execute(&format!("DROP TABLE {table}"))
            .await
            .expect("drop");
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_from_places_list_and_range_rows_on_their_partitions_shard() {
    let proxy = start();
    let client = proxy.connect().await;
    for i in 1..=SHARDS {
        client
            .batch_execute(&format!("CREATE TABLESPACE tbs_cp{i} ON SHARD s{i}"))
            .await
            .unwrap_or_else(|e| panic!("tablespace {i}: {e}"));
    }
    client
        .batch_execute(
            "CREATE SHARDED TABLE cp_accounts (id bigint, state varchar(2) NOT NULL, v text) \
             PARTITION BY LIST (state) \
             ( PARTITION p_west VALUES ('OR', 'WA') TABLESPACE tbs_cp1 \
             , PARTITION p_south VALUES ('TX') TABLESPACE tbs_cp2 \
             , PARTITION p_east VALUES ('NY') TABLESPACE tbs_cp3 \
             , PARTITION p_cal VALUES ('CA') TABLESPACE tbs_cp4 )",
        )
        .await
        .expect("list table");
    client
        .batch_execute(
            "CREATE SHARDED TABLE cp_ranged (id bigint, v text) \
             PARTITION BY RANGE (id) \
             ( PARTITION p1 VALUES LESS THAN (1000) TABLESPACE tbs_cp1 \
             , PARTITION p2 VALUES LESS THAN (2000) TABLESPACE tbs_cp2 \
             , PARTITION p3 VALUES LESS THAN (3000) TABLESPACE tbs_cp3 \
             , PARTITION p4 VALUES LESS THAN (4000) TABLESPACE tbs_cp4 )",
        )
        .await
        .expect("range table");

    let states = ["OR", "WA", "TX", "NY", "CA"];
    let mut data = Vec::new();
    for i in 0..5000 {
        data.extend_from_slice(format!("{i};{};\"v;{i}\"\n", states[i % 5]).as_bytes());
    }
    let n = copy_in(
        &client,
        "COPY cp_accounts FROM STDIN WITH (FORMAT csv, DELIMITER ';')",
        &data,
    )
    .await
    .expect("COPY into the list table");
    assert_eq!(n, 5000);
    assert_eq!(counts("cp_accounts").await, vec![2000, 1000, 1000, 1000]);

    let e = copy_in(
        &client,
        "COPY cp_accounts FROM STDIN (FORMAT csv)",
        b"1,ZZ,x\n",
    )
    .await
    .expect_err("a value no partition takes");
    assert_eq!(code(&e), SqlState::CHECK_VIOLATION, "{e}");

    let mut data = Vec::new();
    for i in 0..4000 {
        data.extend_from_slice(format!("{i}\tv{i}\n").as_bytes());
    }
    let n = copy_in(&client, "COPY cp_ranged (id, v) FROM STDIN", &data)
        .await
        .expect("COPY into the range table");
    assert_eq!(n, 4000);
    assert_eq!(counts("cp_ranged").await, vec![1000; SHARDS]);

    let out = copy_out(&client, "COPY cp_ranged TO STDOUT").await;
    assert_eq!(sorted_lines(&out), sorted_lines(&data));

    client
        .batch_execute("DROP TABLE cp_accounts")
        .await
        .expect("drop");
    client
        .batch_execute("DROP TABLE cp_ranged")
        .await
        .expect("drop");
    for i in 1..=SHARDS {
        client
            .batch_execute(&format!("DROP TABLESPACE tbs_cp{i}"))
            .await
            .unwrap();
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn copy_into_a_duplicated_table_writes_every_copy_and_reads_one() {
    let proxy = start();
    let client = proxy.connect().await;
    client
        .batch_execute("CREATE DUPLICATED TABLE cp_dup (code int PRIMARY KEY, label text)")
        .await
        .expect("duplicated table");
    let mut data = b"code,label\n".to_vec();
    for i in 0..1000 {
        data.extend_from_slice(format!("{i},\"label, {i}\"\n").as_bytes());
    }
    let n = copy_in(
        &client,
        "COPY cp_dup FROM STDIN (FORMAT csv, HEADER)",
        &data,
    )
    .await
    .expect("COPY into the duplicated table");
    assert_eq!(n, 1000, "the client hears one copy's count");
    assert_eq!(counts("cp_dup").await, vec![1000; SHARDS]);
    let out = copy_out(&client, "COPY cp_dup TO STDOUT (FORMAT csv, HEADER)").await;
    assert_eq!(String::from_utf8_lossy(&out).lines().count(), 1001);
    client.batch_execute("DROP TABLE cp_dup").await.unwrap();
}

#[test]
fn psql_copy_in_and_out_of_a_sharded_table() {
    let proxy = start();
    let out = proxy.psql(
        "CREATE SHARDED TABLE cp_psql (id bigint PRIMARY KEY, name text) \
         PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO;
\\copy cp_psql (name, id) FROM STDIN WITH (FORMAT csv, HEADER)
name,id
\"Ann, the first\",1
Bob,2
Cy,3
Dee,4
Eve,5
\\.
\\copy (SELECT id, name FROM cp_psql WHERE id > 2) TO STDOUT
\\copy cp_psql TO STDOUT WITH (FORMAT csv)
DROP TABLE cp_psql;
",
    );
    let stderr = String::from_utf8_lossy(&out.stderr);
    assert!(!stderr.contains("ERROR"), "{stderr}");
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(stdout.contains("COPY 5"), "{stdout}");
    let mut tail: Vec<&str> = stdout.lines().filter(|l| l.contains('\t')).collect();
    tail.sort();
    assert_eq!(tail, ["3\tCy", "4\tDee", "5\tEve"], "{stdout}");
    assert!(stdout.contains("1,\"Ann, the first\""), "{stdout}");
}
