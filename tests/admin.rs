//! The statements the proxy answers itself, through psql as a user types them.

mod common;

use common::{shards, TestProxy};
use shardwire::txn::{ClusterTag, GidGenerator, Incarnation};

fn psql_rows(proxy: &TestProxy, sql: &str) -> String {
    let out = common::psql(&proxy.conn_string(), &["-A", "-t"], &format!("{sql}\n"));
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    String::from_utf8(out.stdout).unwrap()
}

#[test]
fn show_shards_pools_and_version() {
    let proxy = TestProxy::start();
    let shards_out = psql_rows(&proxy, "SHOW SHARDS;");
    let lines: Vec<&str> = shards_out.lines().filter(|l| l.contains('|')).collect();
    assert_eq!(lines.len(), proxy.config.shards.len(), "{shards_out}");
    for (line, shard) in lines.iter().zip(&proxy.config.shards) {
        assert!(
            line.starts_with(&format!("{}|127.0.0.1|", shard.name)),
            "{line}"
        );
    }
    let version = psql_rows(&proxy, "show version;");
    assert!(
        version.contains(&format!("shardwire {}", env!("CARGO_PKG_VERSION"))),
        "{version}"
    );
    // The SELECT's connection is back in the pool when SHOW POOLS runs: it counts as idle.
    let pools = psql_rows(&proxy, "SELECT 1;\nSHOW POOLS;");
    let s1: Vec<&str> = pools
        .lines()
        .find(|l| l.starts_with("s1|"))
        .unwrap_or_else(|| panic!("no s1 row in {pools}"))
        .split('|')
        .collect();
    let (connections, idle) = (s1[1].parse::<u32>().unwrap(), s1[2].parse::<u32>().unwrap());
    assert!(connections >= 1 && idle == connections, "{pools}");
    assert_eq!(s1[3], "20", "{pools}");
    // PostgreSQL's own SHOW still reaches PostgreSQL.
    assert_eq!(
        psql_rows(&proxy, "SHOW standard_conforming_strings;").trim(),
        "on"
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn show_transactions_lists_prepared_and_decided_transactions() {
    let proxy = TestProxy::start();
    // The proxy creates the decision log before it serves its first client.
    tokio::task::block_in_place(|| psql_rows(&proxy, "SHOW VERSION;"));
    let shard = shards().connect(1).await;
    let gid = GidGenerator::new(ClusterTag::new("feedc0de").unwrap()).next_gid();
    shard
        .batch_execute("CREATE TABLE admin_tx_probe (id int)")
        .await
        .unwrap();
    shard
        .batch_execute(&format!(
            "BEGIN; INSERT INTO admin_tx_probe VALUES (1); PREPARE TRANSACTION '{gid}'"
        ))
        .await
        .unwrap();
    let catalog = shards().connect(0).await;
    catalog
        .execute(
            "INSERT INTO shardwire_catalog.txn_decision (gid, decision, participants) \
             VALUES ($1, 'commit', ARRAY['s1','s2'])",
            &[&gid.to_string()],
        )
        .await
        .unwrap();

    let out = tokio::task::block_in_place(|| psql_rows(&proxy, "SHOW TRANSACTIONS;"));
    assert!(out.contains(&format!("{gid}|prepared|s2|")), "{out}");
    assert!(
        out.contains(&format!("{gid}|decided commit|s1,s2|")),
        "{out}"
    );
    // Its coordinator, of another cluster than the proxy's: its recovery never touches it.
    let owner = format!("|{}|other cluster", Incarnation::of(&gid));
    assert_eq!(
        out.lines().filter(|l| l.contains(&owner)).count(),
        2,
        "{out}"
    );

    shard
        .batch_execute(&format!("ROLLBACK PREPARED '{gid}'"))
        .await
        .unwrap();
    shard
        .batch_execute("DROP TABLE admin_tx_probe")
        .await
        .unwrap();
    catalog
        .execute(
            "DELETE FROM shardwire_catalog.txn_decision WHERE gid = $1",
            &[&gid.to_string()],
        )
        .await
        .unwrap();
    let out = tokio::task::block_in_place(|| psql_rows(&proxy, "SHOW TRANSACTIONS;"));
    assert!(!out.contains(&gid.to_string()), "{out}");
}
