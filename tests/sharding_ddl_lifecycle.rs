//! Every kind of table the proxy records is created, dropped and created again through the
//! proxy, and each shard is asked directly (`to_regclass`) where the table is: after CREATE on
//! exactly the shards that hold its chunks or partitions, after DROP on none. A copy left on a
//! shard that holds none of its rows would outlive the DROP and make the next CREATE fail with
//! `relation … already exists`.
//!
//! Placement: tablespace sets lc_all = (s1, s2) and lc_s2 = (s2); tablespaces lc_tbs1 on s1 and
//! lc_tbs2 on s2 (configuration).

mod common;
mod sharding_common;

use common::{shards, TestProxy};
use sharding_common::catalog_tables;
use shardwire::config::TablespaceConfig;
use tokio_postgres::Client;

async fn run(client: &Client, sql: &str) {
    client
        .batch_execute(sql)
        .await
        .unwrap_or_else(|e| panic!("{sql}: {:?}", e.as_db_error()));
}

/// The shards (1-based names, as configured) where `public.table` exists.
async fn present(shard_clients: &[Client], table: &str) -> Vec<&'static str> {
    let mut on = Vec::new();
    for (client, name) in shard_clients.iter().zip(["s1", "s2"]) {
        let found: bool = client
            .query_one(
                "SELECT to_regclass(quote_ident('public') || '.' || quote_ident($1)) IS NOT NULL",
                &[&table],
            )
            .await
            .unwrap_or_else(|e| panic!("to_regclass({table}) on {name}: {e}"))
            .get(0);
        if found {
            on.push(name);
        }
    }
    on
}

struct Case {
    table: &'static str,
    create: &'static str,
    /// Where the table must exist after CREATE.
    on: &'static [&'static str],
}

const ROOT: Case = Case {
    table: "lc_hash",
    create: "CREATE SHARDED TABLE lc_hash (id int PRIMARY KEY, v text)
             PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO TABLESPACE SET lc_s2",
    on: &["s2"],
};

/// The family children of [`ROOT`]; created after it and dropped before it.
const CHILDREN: &[Case] = &[
    Case {
        table: "lc_ref",
        create: "CREATE SHARDED TABLE lc_ref (id int, n int, PRIMARY KEY (id, n),
                 CONSTRAINT lc_ref_fk FOREIGN KEY (id) REFERENCES lc_hash (id))
                 PARTITION BY REFERENCE (lc_ref_fk)",
        on: &["s2"],
    },
    Case {
        table: "lc_parent",
        create: "CREATE SHARDED TABLE lc_parent (id int, m int, PRIMARY KEY (id, m))
                 PARENT lc_hash PARTITION BY CONSISTENT HASH (id)",
        on: &["s2"],
    },
];

/// Tables that stand alone.
const SINGLES: &[Case] = &[
    // One chunk over two shards: the second shard owns nothing and gets nothing.
    Case {
        table: "lc_one_chunk",
        create: "CREATE SHARDED TABLE lc_one_chunk (id int PRIMARY KEY)
                 PARTITION BY CONSISTENT HASH (id) PARTITIONS 1 TABLESPACE SET lc_all",
        on: &["s1"],
    },
    Case {
        table: "lc_dup",
        create: "CREATE DUPLICATED TABLE lc_dup (code int PRIMARY KEY, label text)",
        on: &["s1", "s2"],
    },
    // A duplicated table is a full copy everywhere whatever tablespace set it names.
    Case {
        table: "lc_dup_set",
        create: "CREATE DUPLICATED TABLE lc_dup_set (code int PRIMARY KEY) TABLESPACE SET lc_s2",
        on: &["s1", "s2"],
    },
    Case {
        table: "lc_list",
        create: "CREATE SHARDED TABLE lc_list (id int, state varchar(2) NOT NULL)
                 PARTITION BY LIST (state)
                 (PARTITION p_west VALUES ('OR', 'WA') TABLESPACE lc_tbs2,
                  PARTITION p_south VALUES ('TX') TABLESPACE lc_tbs2)",
        on: &["s2"],
    },
    Case {
        table: "lc_range",
        create: "CREATE SHARDED TABLE lc_range (id int, a int NOT NULL, b int NOT NULL)
                 PARTITION BY RANGE (a, b)
                 (PARTITION p_low VALUES LESS THAN (10, 100) TABLESPACE lc_tbs1,
                  PARTITION p_high VALUES LESS THAN (20, 200) TABLESPACE lc_tbs1)",
        on: &["s1"],
    },
    Case {
        table: "lc_range_both",
        create: "CREATE SHARDED TABLE lc_range_both (id int, a int NOT NULL)
                 PARTITION BY RANGE (a)
                 (PARTITION p_low VALUES LESS THAN (10) TABLESPACE lc_tbs1,
                  PARTITION p_high VALUES LESS THAN (MAXVALUE) TABLESPACE lc_tbs2)",
        on: &["s1", "s2"],
    },
    Case {
        table: "lc_comp_list",
        create: "CREATE SHARDED TABLE lc_comp_list (id int, class varchar(3) NOT NULL,
                 PRIMARY KEY (id, class))
                 PARTITIONSET BY LIST (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS AUTO
                 (PARTITIONSET silver VALUES ('SLV') TABLESPACE SET lc_s2,
                  PARTITIONSET gold VALUES ('GLD') TABLESPACE SET lc_s2)",
        on: &["s2"],
    },
    Case {
        table: "lc_comp_range",
        create: "CREATE SHARDED TABLE lc_comp_range (id int, class int NOT NULL,
                 PRIMARY KEY (id, class))
                 PARTITIONSET BY RANGE (class) PARTITION BY CONSISTENT HASH (id) PARTITIONS 2
                 (PARTITIONSET silver VALUES LESS THAN (10) TABLESPACE SET lc_s2)",
        on: &["s2"],
    },
    // Oracle syntax (not NoSQL's) in a plain CREATE TABLE: unsharded, on the first shard.
    Case {
        table: "lc_plain",
        create: "CREATE TABLE lc_plain (code INTEGER, name VARCHAR2(20), PRIMARY KEY (code))",
        on: &["s1"],
    },
];

async fn create(proxy: &Client, shard_clients: &[Client], case: &Case, round: u32) {
    run(proxy, case.create).await;
    assert_eq!(
        present(shard_clients, case.table).await,
        case.on,
        "{} after CREATE (round {round})",
        case.table
    );
}

async fn drop(proxy: &Client, shard_clients: &[Client], case: &Case, round: u32) {
    run(proxy, &format!("DROP TABLE {}", case.table)).await;
    assert_eq!(
        present(shard_clients, case.table).await,
        [] as [&str; 0],
        "{} after DROP (round {round})",
        case.table
    );
    let recorded = catalog_tables(&shard_clients[0]).await;
    assert!(
        !recorded.contains(&format!("public.{}", case.table)),
        "{} still in the catalog after DROP: {recorded:?}",
        case.table
    );
}

#[tokio::test]
async fn every_table_kind_is_created_where_it_lives_and_dropped_everywhere() {
    let proxy = TestProxy::start_with(|c| {
        c.proxy.chunks_per_shard = 2;
        c.tablespaces = vec![
            TablespaceConfig {
                name: "lc_tbs1".into(),
                shard: "s1".into(),
            },
            TablespaceConfig {
                name: "lc_tbs2".into(),
                shard: "s2".into(),
            },
        ];
    });
    let client = proxy.connect().await;
    let shard_clients = [shards().connect(0).await, shards().connect(1).await];
    run(
        &client,
        "CREATE TABLESPACE SET lc_all USING SHARDS (s1, s2)",
    )
    .await;
    run(&client, "CREATE TABLESPACE SET lc_s2 USING SHARDS (s2)").await;

    for round in 1..=2 {
        for case in SINGLES {
            create(&client, &shard_clients, case, round).await;
        }
        create(&client, &shard_clients, &ROOT, round).await;
        for case in CHILDREN {
            create(&client, &shard_clients, case, round).await;
        }
        // Children come and go while their root stays.
        for case in CHILDREN {
            drop(&client, &shard_clients, case, round).await;
            create(&client, &shard_clients, case, round).await;
            drop(&client, &shard_clients, case, round).await;
        }
        drop(&client, &shard_clients, &ROOT, round).await;
        for case in SINGLES {
            drop(&client, &shard_clients, case, round).await;
        }
    }
}
