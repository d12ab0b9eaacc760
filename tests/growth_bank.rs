//! Issue 36's bank: the bank of tests/bank.rs (eight clients transferring money between accounts
//! on different shards in two-phase transactions, and moving accounts to new sharding keys with
//! their ledger rows) on a tablespace set of two shards, while two more shards join the set and
//! REBALANCE moves half the chunks onto them. The proxy, the real binary, is killed at the first
//! cutover (both shards' halves prepared, the catalog not yet changed) and started again; its
//! recovery rolls that move back, and REBALANCE runs again. At the end, on the shards: money
//! conserved, every account once, its ledger on its shard; every chunk where the chunk map says
//! (CHECK PLACEMENT); the set balanced; no replication slot, publication, subscription or
//! prepared transaction left.
#![cfg(feature = "failpoints")]

mod bank_common;
mod common;
mod growth_common;
mod process_common;
mod routing_common;

use std::time::{Duration, Instant};

use bank_common::*;
use common::shards;
use growth_common::{one, placed_exactly};
use process_common::Proxy;
use routing_common::simple_rows as rows;
use tokio_postgres::error::SqlState;
use tokio_postgres::Client;

const SHARDS: usize = 4;
const DEADLINE: Duration = Duration::from_secs(90);
const KILLED_AT: &str = "chunk_move.before_hand_over";

/// How many chunks of `bank_accounts` each shard holds.
async fn chunks_per_shard(c: &Client) -> Vec<usize> {
    let mut per = vec![0; SHARDS];
    for r in rows(c, "SHOW CHUNKS FOR bank_accounts").await {
        per[r[3].as_deref().unwrap()[1..].parse::<usize>().unwrap() - 1] += 1;
    }
    per
}

/// REBALANCE, again until the proxy takes it: while the dead proxy's move is not yet settled,
/// it is refused (its chunk is still moving); while the proxy restarts, it cannot connect.
async fn rebalance_when_allowed(proxy: &Proxy) {
    let started = Instant::now();
    loop {
        let done = match tokio_postgres::connect(&proxy.conn_string(), tokio_postgres::NoTls).await
        {
            Ok((c, conn)) => {
                tokio::spawn(conn);
                c.simple_query("REBALANCE TABLESPACE SET bank_ts").await
            }
            Err(e) => Err(e),
        };
        match done {
            Ok(_) => return,
            Err(e) => {
                let retry = e.code().is_none() || e.code() == Some(&SqlState::OBJECT_IN_USE);
                assert!(retry, "REBALANCE: {e:?}\n{}", proxy.output());
                assert!(
                    started.elapsed() < DEADLINE,
                    "REBALANCE never ran: {e:?}\n{}",
                    proxy.output()
                );
                tokio::time::sleep(Duration::from_millis(200)).await;
            }
        }
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn money_is_conserved_while_the_set_grows_onto_new_shards() {
    common::use_shards(SHARDS);
    let dir = tempfile::tempdir().expect("temp dir");
    let timings = "lock_timeout_ms = 500\n";
    let mut proxy =
        Proxy::start_with(dir.path(), Some(&format!("{KILLED_AT}=kill")), timings).await;
    let setup = proxy.connect().await;
    setup
        .batch_execute("CREATE TABLESPACE SET bank_ts USING SHARDS (s1, s2)")
        .await
        .unwrap();
    open_bank(&setup, Some("bank_ts")).await;
    let before = chunks_per_shard(&setup).await;
    assert!(
        before[2] == 0 && before[3] == 0 && before[0] == before[1],
        "{before:?}"
    );
    drop(setup);

    let clients = Clients::start(&proxy.conn_string());
    tokio::time::sleep(Duration::from_secs(2)).await;

    let admin = proxy.connect().await;
    for shard in ["s3", "s4"] {
        admin
            .batch_execute(&format!("ALTER TABLESPACE SET bank_ts ADD SHARD {shard}"))
            .await
            .unwrap();
    }
    let e = admin
        .simple_query("REBALANCE TABLESPACE SET bank_ts")
        .await
        .expect_err("the proxy dies at the first cutover");
    assert!(e.code().is_none(), "{e:?}");
    proxy.wait_killed().await;
    assert!(proxy.output().contains(KILLED_AT), "{}", proxy.output());
    proxy = Proxy::restart(proxy, dir.path(), None, timings).await;
    rebalance_when_allowed(&proxy).await;
    // The clients go on a moment on the grown set.
    tokio::time::sleep(Duration::from_secs(2)).await;
    let tally = clients.stop().await;

    let c = proxy.connect().await;
    let after = chunks_per_shard(&c).await;
    let (least, most) = (after.iter().min().unwrap(), after.iter().max().unwrap());
    assert!(most - least <= 1 && *least > 0, "{after:?}");
    let moves = rows(&c, "SHOW MOVES").await;
    let states: Vec<&str> = moves.iter().map(|m| m[5].as_deref().unwrap()).collect();
    assert_eq!(
        states.iter().filter(|s| **s == "rolled_back").count(),
        1,
        "{moves:?}"
    );
    assert!(
        states.iter().all(|s| *s == "rolled_back" || *s == "done"),
        "{moves:?}"
    );
    check_bank(&tally, || proxy.output()).await;
    placed_exactly(&c, "bank_accounts", &ACCOUNTS.to_string()).await;
    let entries = one(&c, "SELECT count(*) FROM bank_ledger").await;
    placed_exactly(&c, "bank_ledger", &entries).await;
    for i in 0..SHARDS {
        let left: i64 = shards()
            .connect(i)
            .await
            .query_one(
                "SELECT (SELECT count(*) FROM pg_replication_slots)
                      + (SELECT count(*) FROM pg_publication)
                      + (SELECT count(*) FROM pg_subscription)",
                &[],
            )
            .await
            .unwrap()
            .get(0);
        assert_eq!(left, 0, "replication objects left on shard {i}");
    }
}
