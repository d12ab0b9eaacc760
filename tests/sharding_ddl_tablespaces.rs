//! Tablespaces of user-defined sharding made and dropped in SQL through the proxy
//! (`CREATE TABLESPACE name ON SHARD s`, `DROP TABLESPACE [IF EXISTS] name`), used together with
//! one from `[[tablespaces]]` of the configuration, and checked on the shards directly.

mod common;
mod sharding_common;

use common::{shards, TestProxy};
use sharding_common::{expect, rows, tree};
use shardwire::config::TablespaceConfig;
use tokio_postgres::error::{DbError, SqlState};
use tokio_postgres::Client;

async fn run(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {:?}", e.as_db_error()));
}

async fn refused(client: &Client, sql: &str) -> DbError {
    let e = client
        .batch_execute(sql)
        .await
        .expect_err(&format!("expected an error from: {sql}"));
    e.as_db_error()
        .unwrap_or_else(|| panic!("{sql}: not a server error: {e}"))
        .clone()
}

const ACCOUNTS: &str = "CREATE SHARDED TABLE tsq_accounts
    ( id NUMBER, state VARCHAR(2) NOT NULL, status VARCHAR2(1) )
    PARTITION BY LIST (state)
    ( PARTITION p_west VALUES ('OR', 'WA') TABLESPACE tsq_a
    , PARTITION p_south VALUES ('TX') TABLESPACE tsq_b
    , PARTITION p_east VALUES ('NY') TABLESPACE tsq_cfg )";

#[tokio::test]
async fn tablespaces_are_made_and_dropped_in_sql() {
    let proxy = TestProxy::start_with(|c| {
        c.tablespaces = vec![TablespaceConfig {
            name: "tsq_cfg".into(),
            shard: "s2".into(),
        }];
    });
    let client = proxy.connect().await;
    let s1 = shards().connect(0).await;
    let s2 = shards().connect(1).await;
    let psql = |sql: &str| {
        let out = proxy.psql(sql);
        (
            String::from_utf8_lossy(&out.stdout).trim().to_owned(),
            String::from_utf8_lossy(&out.stderr).into_owned(),
        )
    };

    assert_eq!(
        psql("CREATE TABLESPACE tsq_a ON SHARD s1;"),
        ("CREATE TABLESPACE".to_owned(), String::new())
    );
    run(&client, "create tablespace TSQ_B on shard s2").await;
    // Tablespace sets are another namespace: a set may share a tablespace's name.
    run(&client, "CREATE TABLESPACE SET tsq_a USING SHARDS (s2)").await;

    let e = refused(&client, "CREATE TABLESPACE tsq_c ON SHARD s9").await;
    assert_eq!(e.code(), &SqlState::UNDEFINED_OBJECT, "{}", e.message());
    assert!(e.message().contains("s9"), "{}", e.message());
    for existing in ["tsq_a", "tsq_cfg"] {
        let e = refused(
            &client,
            &format!("CREATE TABLESPACE {existing} ON SHARD s2"),
        )
        .await;
        assert_eq!(e.code(), &SqlState::DUPLICATE_OBJECT, "{}", e.message());
        assert!(e.message().contains(existing), "{}", e.message());
    }
    let e = refused(&client, "CREATE TABLESPACE tsq_c ON s1").await;
    assert_eq!(e.code(), &SqlState::SYNTAX_ERROR, "{}", e.message());

    // A list table over SQL-made and configured tablespaces: each partition on its shard, the
    // table only where a partition is.
    run(&client, ACCOUNTS).await;
    assert_eq!(
        tree(&s1, "tsq_accounts").await,
        expect(&[
            ("tsq_accounts", ""),
            ("tsq_accounts_p_west", "FOR VALUES IN ('OR', 'WA')"),
        ])
    );
    assert_eq!(
        tree(&s2, "tsq_accounts").await,
        expect(&[
            ("tsq_accounts", ""),
            ("tsq_accounts_p_south", "FOR VALUES IN ('TX')"),
            ("tsq_accounts_p_east", "FOR VALUES IN ('NY')"),
        ])
    );
    assert_eq!(
        rows(&client, "SHOW CHUNKS FOR tsq_accounts").await,
        [
            ["tsq_accounts", "p_west", "", "s1"],
            ["tsq_accounts", "p_south", "", "s2"],
            ["tsq_accounts", "p_east", "", "s2"],
        ]
    );

    // In use: refused, naming the table; the tablespace stays usable.
    let e = refused(&client, "DROP TABLESPACE tsq_b").await;
    assert_eq!(
        e.code(),
        &SqlState::DEPENDENT_OBJECTS_STILL_EXIST,
        "{}",
        e.message()
    );
    assert!(e.message().contains("tsq_accounts"), "{}", e.message());
    // The configuration records its own tablespaces again at every start.
    let e = refused(&client, "DROP TABLESPACE tsq_cfg").await;
    assert_eq!(
        e.code(),
        &SqlState::OBJECT_NOT_IN_PREREQUISITE_STATE,
        "{}",
        e.message()
    );
    assert!(e.message().contains("[[tablespaces]]"), "{}", e.message());

    run(&client, "DROP TABLE tsq_accounts").await;
    assert_eq!(tree(&s1, "tsq_accounts").await, []);
    assert_eq!(tree(&s2, "tsq_accounts").await, []);
    assert_eq!(
        psql("DROP TABLESPACE tsq_b;"),
        ("DROP TABLESPACE".to_owned(), String::new())
    );
    run(&client, "DROP TABLESPACE IF EXISTS tsq_a").await;
    // Gone: a missing tablespace is PostgreSQL's to report, as for any unknown tablespace.
    let e = refused(&client, "DROP TABLESPACE tsq_b").await;
    assert_eq!(e.code(), &SqlState::UNDEFINED_OBJECT, "{}", e.message());
    let (out, notice) = psql("DROP TABLESPACE IF EXISTS tsq_b;");
    assert_eq!(out, "DROP TABLESPACE");
    assert!(notice.contains("does not exist, skipping"), "{notice}");
    // The table needs its tablespaces again.
    let e = refused(&client, ACCOUNTS).await;
    assert_eq!(e.code(), &SqlState::UNDEFINED_OBJECT, "{}", e.message());
    assert!(
        e.message().contains("CREATE TABLESPACE tsq_a ON SHARD"),
        "{}",
        e.message()
    );
    // The set of the same name was never touched.
    run(&client, "DROP TABLESPACE SET tsq_a").await;

    // PostgreSQL's own CREATE TABLESPACE (no ON SHARD) reaches PostgreSQL unchanged: it fails
    // there, on the directory, not in shardwire's parser.
    let e = refused(
        &client,
        "CREATE TABLESPACE tsq_pg LOCATION '/nonexistent/shardwire-test'",
    )
    .await;
    assert_ne!(e.code(), &SqlState::SYNTAX_ERROR, "{}", e.message());
    assert!(e.message().contains("directory"), "{}", e.message());
}
