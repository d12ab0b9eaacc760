//! Every identifier and value the proxy builds into SQL of its own is quoted: tables and
//! columns whose names hold double quotes, spaces and non-ASCII letters, and key values with
//! single quotes, backslashes and double quotes, go through sharding DDL, routed and split
//! writes, COPY, row movement, reads over several shards (the streaming merge and the general
//! path) and DROP — checked on the shards themselves.

mod common;
mod routing_common;

use common::shards;
use routing_common::*;
use tokio_postgres::Client;

/// A family root and child, and a text-keyed table, named as no sane schema would be.
const ROOT: &str = r#""Cust ""Q"" ü""#;
const CHILD: &str = r#""Ord ""rs"" ñ""#;
const TEXT_KEYED: &str = r#""t ""k"" ¿ x""#;
const KEY: &str = r#""Key col ""x"" é""#;
const TEXT_KEY: &str = r#""k ""ey"" ø""#;

/// The names as PostgreSQL stores them (unquoted).
const ROOT_NAME: &str = r#"Cust "Q" ü"#;
const CHILD_NAME: &str = r#"Ord "rs" ñ"#;
const TEXT_KEYED_NAME: &str = r#"t "k" ¿ x"#;

/// Keys that break naive quoting.
const TEXT_KEYS: [&str; 8] = [
    "O'Brien",
    r"back\slash",
    r#"say "hi""#,
    "ünïcödé",
    "semi; DROP TABLE x; --",
    r"\x27",
    "tab\there",
    "$1",
];

/// Whether shard `i` has a table named exactly `name` (as stored, unquoted).
async fn has_table_named(i: usize, name: &str) -> bool {
    shards()
        .connect(i)
        .await
        .query_one(
            "SELECT EXISTS (SELECT 1 FROM pg_class WHERE relname = $1 AND relkind IN ('p', 'r'))",
            &[&name],
        )
        .await
        .unwrap()
        .get(0)
}

/// Shards holding rows of `table` (a quoted name) where `condition` holds, counted there.
async fn rows_on_shards(table: &str, condition: &str) -> Vec<i64> {
    let mut out = Vec::new();
    for i in 0..SHARDS {
        let n: i64 = shards()
            .connect(i)
            .await
            .query_one(
                &format!("SELECT count(*) FROM {table} WHERE {condition}"),
                &[],
            )
            .await
            .unwrap_or_else(|e| panic!("{table} on shard {i}: {e}"))
            .get(0);
        out.push(n);
    }
    out
}

/// The text key's row is on exactly one shard, by the key's value sent as a parameter.
async fn text_key_placed_once(key: &str) -> usize {
    let mut on = Vec::new();
    for i in 0..SHARDS {
        let n: i64 = shards()
            .connect(i)
            .await
            .query_one(
                &format!("SELECT count(*) FROM {TEXT_KEYED} WHERE {TEXT_KEY} = $1"),
                &[&key],
            )
            .await
            .unwrap()
            .get(0);
        if n > 0 {
            assert_eq!(n, 1, "{key:?} once on shard {i}");
            on.push(i);
        }
    }
    assert_eq!(on.len(), 1, "{key:?} on one shard: {on:?}");
    on[0]
}

async fn one_text(
    client: &Client,
    sql: &str,
    params: &[&(dyn tokio_postgres::types::ToSql + Sync)],
) -> String {
    client
        .query_one(sql, params)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {e}"))
        .get(0)
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn strange_names_and_values_survive_every_path() {
    let proxy = start();
    let client = proxy.connect().await;
    for ddl in [
        format!(
            "CREATE SHARDED TABLE {ROOT} ({KEY} bigint PRIMARY KEY, \"vä l\" text) \
             PARTITION BY CONSISTENT HASH ({KEY}) PARTITIONS AUTO"
        ),
        format!(
            "CREATE SHARDED TABLE {CHILD} ({KEY} bigint NOT NULL, \"n o\" int NOT NULL, \
             \"note \"\"t\"\"\" text, CONSTRAINT \"pk \"\"o\"\"\" PRIMARY KEY ({KEY}, \"n o\"), \
             CONSTRAINT \"fk \"\"c\"\"\" FOREIGN KEY ({KEY}) REFERENCES {ROOT} ({KEY})) \
             PARTITION BY REFERENCE (\"fk \"\"c\"\"\")"
        ),
        format!(
            "CREATE SHARDED TABLE {TEXT_KEYED} ({TEXT_KEY} text PRIMARY KEY, \"v\"\"al\" text) \
             PARTITION BY CONSISTENT HASH ({TEXT_KEY}) PARTITIONS AUTO ENABLE ROW MOVEMENT"
        ),
        format!("CREATE INDEX \"ix \"\"v\"\"\" ON {TEXT_KEYED} (\"v\"\"al\")"),
    ] {
        exec(&client, &ddl).await;
    }
    // On every shard under the exact names the client gave.
    for i in 0..SHARDS {
        for name in [ROOT_NAME, CHILD_NAME, TEXT_KEYED_NAME] {
            assert!(has_table_named(i, name).await, "{name} on shard {i}");
        }
    }

    // A split multi-row INSERT, simple protocol, literal values quoted as SQL requires.
    let values: Vec<String> = (1..=40).map(|k| format!("({k}, 'it''s \\ {k}')")).collect();
    exec(
        &client,
        &format!("INSERT INTO {ROOT} VALUES {}", values.join(", ")),
    )
    .await;
    exec(
        &client,
        &format!(
            "INSERT INTO {CHILD} SELECT k, n, 'n''' || n FROM generate_series(1, 40) k, \
             generate_series(1, 2) n"
        ),
    )
    .await;
    assert_eq!(rows_on_shards(ROOT, "true").await.iter().sum::<i64>(), 40);
    assert_eq!(rows_on_shards(CHILD, "true").await.iter().sum::<i64>(), 80);
    // Each child row is with its parent (the foreign key holds on each shard).
    for i in 0..SHARDS {
        let orphans: i64 = shards()
            .connect(i)
            .await
            .query_one(
                &format!(
                    "SELECT count(*) FROM {CHILD} c WHERE NOT EXISTS \
                     (SELECT 1 FROM {ROOT} r WHERE r.{KEY} = c.{KEY})"
                ),
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(orphans, 0, "shard {i}");
    }

    // Text keys through the extended protocol (values as parameters) and the simple protocol
    // (values as literals), then read back by key both ways.
    for (i, key) in TEXT_KEYS.iter().enumerate() {
        if i % 2 == 0 {
            client
                .execute(
                    &format!("INSERT INTO {TEXT_KEYED} VALUES ($1, $2)"),
                    &[key, &format!("v {key}")],
                )
                .await
                .unwrap_or_else(|e| panic!("insert {key:?}: {e}"));
        } else {
            let literal = format!("E'{}'", key.replace('\\', "\\\\").replace('\'', "\\'"));
            exec(
                &client,
                &format!("INSERT INTO {TEXT_KEYED} VALUES ({literal}, 'v ' || {literal})"),
            )
            .await;
        }
    }
    for key in TEXT_KEYS {
        text_key_placed_once(key).await;
        let v = one_text(
            &client,
            &format!("SELECT \"v\"\"al\" FROM {TEXT_KEYED} WHERE {TEXT_KEY} = $1"),
            &[&key],
        )
        .await;
        assert_eq!(v, format!("v {key}"));
        let quoted = key.replace('\'', "''");
        let rows = simple_rows(
            &client,
            &format!("SELECT \"v\"\"al\" FROM {TEXT_KEYED} WHERE {TEXT_KEY} = '{quoted}'"),
        )
        .await;
        assert_eq!(rows, vec![vec![Some(format!("v {key}"))]], "{key:?}");
    }

    // COPY FROM STDIN, split by key, with escapes in text format.
    let copy_keys = ["C'o\\py", "c\"q", "ç tab"];
    let sink = client
        .copy_in(&format!(
            "COPY {TEXT_KEYED} ({TEXT_KEY}, \"v\"\"al\") FROM STDIN"
        ))
        .await
        .expect("COPY FROM STDIN");
    let data: String = copy_keys
        .iter()
        .map(|k| format!("{}\tcopied\n", k.replace('\\', "\\\\")))
        .collect();
    {
        use futures::SinkExt;
        let mut sink = std::pin::pin!(sink);
        sink.send(bytes::Bytes::from(data)).await.unwrap();
        let n = sink.finish().await.expect("COPY ends");
        assert_eq!(n, copy_keys.len() as u64);
    }
    for key in copy_keys {
        text_key_placed_once(key).await;
    }

    // Row movement to a new key with quotes and backslashes: moved, found once.
    let n = client
        .execute(
            &format!("UPDATE {TEXT_KEYED} SET {TEXT_KEY} = $1 WHERE {TEXT_KEY} = $2"),
            &[&r#"moved 'x' \ "y""#, &"O'Brien"],
        )
        .await
        .expect("key update");
    assert_eq!(n, 1);
    text_key_placed_once(r#"moved 'x' \ "y""#).await;
    assert_eq!(
        rows_on_shards(TEXT_KEYED, &format!("{TEXT_KEY} = 'O''Brien'"))
            .await
            .iter()
            .sum::<i64>(),
        0
    );

    // Reads over every shard: a merge in the proxy, and the general path (a join across
    // families, aggregates in expressions), whose temporary tables carry these names.
    let total = one_text(
        &client,
        &format!("SELECT count(*)::text FROM {TEXT_KEYED}"),
        &[],
    )
    .await;
    assert_eq!(total, (TEXT_KEYS.len() + copy_keys.len()).to_string());
    let sorted = simple_rows(
        &client,
        &format!("SELECT {TEXT_KEY} FROM {TEXT_KEYED} ORDER BY {TEXT_KEY} COLLATE \"C\" LIMIT 2"),
    )
    .await;
    let mut expected: Vec<String> = TEXT_KEYS
        .iter()
        .chain(copy_keys.iter())
        .map(|k| k.to_string())
        .filter(|k| k != "O'Brien")
        .chain([r#"moved 'x' \ "y""#.to_string()])
        .collect();
    expected.sort();
    assert_eq!(
        sorted,
        expected[..2]
            .iter()
            .map(|k| vec![Some(k.clone())])
            .collect::<Vec<_>>()
    );
    let joined = one_text(
        &client,
        &format!(
            "SELECT (sum(length(c.\"note \"\"t\"\"\")) + count(DISTINCT t.{TEXT_KEY}))::text \
             FROM {CHILD} c JOIN {TEXT_KEYED} t ON t.\"v\"\"al\" <> c.\"note \"\"t\"\"\" \
             WHERE c.{KEY} <= 2"
        ),
        &[],
    )
    .await;
    // 4 child rows of keys 1 and 2, each note 3 characters ("n'1", "n'2"), over every text key.
    let text_rows = (TEXT_KEYS.len() + copy_keys.len()) as i64;
    assert_eq!(joined, (4 * 3 * text_rows + text_rows).to_string());

    // DROP reaches every shard.
    for table in [CHILD, ROOT, TEXT_KEYED] {
        exec(&client, &format!("DROP TABLE {table}")).await;
    }
    for i in 0..SHARDS {
        for name in [ROOT_NAME, CHILD_NAME, TEXT_KEYED_NAME] {
            assert!(!has_table_named(i, name).await, "{name} left on shard {i}");
        }
    }
}
