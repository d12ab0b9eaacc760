//! The bank test (issue 11's acceptance): four shards; accounts (a family root) with ledger rows
//! (its children); eight clients for `BANK_SECONDS` (default 20) make transfers between accounts
//! on different shards and move accounts to new sharding keys with their ledger rows, through
//! prepared statements, while the proxy — the real binary — is killed with SIGKILL and
//! restarted twice. Checked on the shards at the end: the total balance is conserved, every
//! account exists exactly once across all shards and its balance is the sum of its ledger rows,
//! every ledger row is on its account's shard, and no prepared transaction outlives recovery.
//!
//! Beside them the clients read: a balance by its account's key, and the whole table's count and
//! sum over every shard.
//!
//! scripts/bank.sh is the long version: minutes, a kill every 30 s, and a shard crashed with
//! `pg_ctl stop -m immediate` half-way (`BANK_SECONDS`, `BANK_KILL_EVERY`, `BANK_SHARD_CRASH`).
//! scripts/soak.sh is the soak: 30 minutes, kills at random intervals around `BANK_KILL_EVERY`
//! (`BANK_SEED` picks them) and a shard crashed and restarted at random intervals
//! (`BANK_SHARD_CRASH=every`).

mod bank_common;
mod common;
mod process_common;

use std::time::{Duration, Instant};

use bank_common::*;
use common::shards;
use process_common::Proxy;
use shardwire::pgcluster::StopMode;

const SHARDS: usize = 4;

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn money_is_conserved_while_accounts_move_and_the_proxy_is_killed() {
    let seconds: u64 = std::env::var("BANK_SECONDS")
        .ok()
        .and_then(|s| s.parse().ok())
        .unwrap_or(20);
    common::use_shards(SHARDS);
    let dir = tempfile::tempdir().expect("temp dir");
    let timings = "lock_timeout_ms = 500\n";
    let mut proxy = Proxy::start_with(dir.path(), None, timings).await;
    let setup = proxy.connect().await;
    open_bank(&setup, None).await;
    drop(setup);

    let clients = Clients::start(&proxy.conn_string());
    let started = Instant::now();
    let run = Duration::from_secs(seconds);
    // The long version (scripts/bank.sh) kills every `BANK_KILL_EVERY` seconds and crashes a
    // shard (not the catalog's) once, half-way.
    let kill_every = std::env::var("BANK_KILL_EVERY")
        .ok()
        .and_then(|s| s.parse().ok())
        .map_or(run / 3, Duration::from_secs);
    let crashes = std::env::var("BANK_SHARD_CRASH").unwrap_or_default();
    // With a seed, the pauses between kills (and crashes) are random: half to one and a half
    // times the mean.
    let mut pauses = std::env::var("BANK_SEED")
        .ok()
        .and_then(|s| s.parse::<u64>().ok())
        .map(|seed| Rng(seed | 1));
    let mut pause = |mean: Duration| match pauses.as_mut() {
        Some(rng) => mean / 2 + mean * rng.next(1000) as u32 / 1000,
        None => mean,
    };
    let mut kills = 0;
    let mut crashed = 0;
    let mut next_kill = pause(kill_every);
    let mut next_crash = match crashes.as_str() {
        "1" => Some(run / 2),
        "every" => Some(pause(kill_every * 2)),
        _ => None,
    };
    while started.elapsed() < run {
        tokio::time::sleep(Duration::from_millis(200)).await;
        if next_crash.is_some_and(|at| started.elapsed() >= at) {
            crashed += 1;
            next_crash = (crashes == "every").then(|| started.elapsed() + pause(kill_every * 2));
            // Any shard but the catalog's, in turn.
            let cluster = &shards().clusters[1 + (crashed - 1) % (SHARDS - 1)];
            tokio::task::spawn_blocking(move || cluster.stop(StopMode::Immediate))
                .await
                .expect("pg_ctl stop")
                .expect("crash a shard");
            tokio::time::sleep(Duration::from_secs(2)).await;
            tokio::task::spawn_blocking(move || cluster.start())
                .await
                .expect("pg_ctl start")
                .expect("restart the shard");
        }
        if started.elapsed() >= next_kill && (kills < 2 || std::env::var("BANK_KILL_EVERY").is_ok())
        {
            next_kill = started.elapsed() + pause(kill_every);
            proxy.kill().await;
            kills += 1;
            // The restarted proxy listens where the clients reconnect.
            proxy = Proxy::restart(proxy, dir.path(), None, timings).await;
        }
    }
    let tally = clients.stop().await;
    eprintln!("bank: {seconds} s, {kills} kills, {crashed} shard crashes");
    check_bank(&tally, || proxy.output()).await;
}
