//! The bank of tests/bank.rs and tests/growth_bank.rs: accounts (a family root) with ledger rows
//! (its children); clients that transfer money between accounts on different shards and move
//! accounts to new sharding keys with their ledger rows, and read; and the checks made on the
//! shards at the end.
#![allow(dead_code)]

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::Arc;
use std::time::{Duration, Instant};

use crate::common::shards;
use tokio_postgres::{Client, NoTls};

pub const ACCOUNTS: i64 = 40;
pub const OPENING: i64 = 1000;
pub const CLIENTS: usize = 8;
/// Account `i` always has one key in `i * SPAN .. (i + 1) * SPAN`.
pub const SPAN: i64 = 1_000_000;

/// A small deterministic generator, so a failing run can be replayed.
pub struct Rng(pub u64);

impl Rng {
    pub fn next(&mut self, below: u64) -> u64 {
        self.0 ^= self.0 << 13;
        self.0 ^= self.0 >> 7;
        self.0 ^= self.0 << 17;
        self.0 % below
    }
}

#[derive(Default)]
pub struct Tally {
    pub transfers_acked: AtomicU64,
    pub transfers_tried: AtomicU64,
    pub moves_acked: AtomicU64,
    pub reads_acked: AtomicU64,
    pub failures: AtomicU64,
}

pub async fn connect(conn: &str) -> Option<Client> {
    let (client, connection) = tokio_postgres::connect(conn, NoTls).await.ok()?;
    tokio::spawn(connection);
    Some(client)
}

/// The current key of account `i`, read through the proxy.
pub async fn key_of(client: &Client, i: i64) -> Result<Option<i64>, tokio_postgres::Error> {
    let rows = client
        .query(
            "SELECT acct FROM bank_accounts WHERE acct >= $1 AND acct < $2",
            &[&(i * SPAN), &((i + 1) * SPAN)],
        )
        .await?;
    Ok(rows.first().map(|r| r.get(0)))
}

/// One transfer of `amount` from account `a` to account `b` (locked in account order), with its
/// two ledger rows; `Ok(false)` when an account moved meanwhile (rolled back).
pub async fn transfer(
    client: &Client,
    a: i64,
    b: i64,
    amount: i64,
    seq: i64,
) -> Result<bool, tokio_postgres::Error> {
    let (ka, kb) = match (key_of(client, a).await?, key_of(client, b).await?) {
        (Some(ka), Some(kb)) => (ka, kb),
        _ => return Ok(false),
    };
    client.batch_execute("BEGIN").await?;
    let mut ordered = [(a, ka, -amount), (b, kb, amount)];
    ordered.sort();
    for (_, key, delta) in ordered {
        let n = client
            .execute(
                "UPDATE bank_accounts SET balance = balance + $1 WHERE acct = $2",
                &[&delta, &key],
            )
            .await?;
        if n != 1 {
            client.batch_execute("ROLLBACK").await?;
            return Ok(false);
        }
    }
    client
        .execute(
            "INSERT INTO bank_ledger (acct, seq, amount) VALUES ($1, $2, $3), ($4, $5, $6)",
            &[&ka, &seq, &-amount, &kb, &(seq + 1), &amount],
        )
        .await?;
    client.batch_execute("COMMIT").await?;
    Ok(true)
}

/// A keyed read of account `i`'s balance, or (`everywhere`) the table's count and sum over
/// every shard. Neither is checked against a total mid-run: each shard reads its own snapshot,
/// so a read across shards may straddle a transfer or a move (docs/behaviour.md).
pub async fn read(client: &Client, i: i64, everywhere: bool) -> Result<(), tokio_postgres::Error> {
    if everywhere {
        let row = client
            .query_one(
                "SELECT count(*), coalesce(sum(balance), 0)::bigint FROM bank_accounts",
                &[],
            )
            .await?;
        let n: i64 = row.get(0);
        assert!(n > 0, "the accounts are somewhere");
    } else if let Some(key) = key_of(client, i).await? {
        client
            .query_opt("SELECT balance FROM bank_accounts WHERE acct = $1", &[&key])
            .await?;
    }
    Ok(())
}

/// Moves account `i` to another key of its span, ledger rows and all.
pub async fn move_account(
    client: &Client,
    i: i64,
    step: i64,
) -> Result<bool, tokio_postgres::Error> {
    let Some(key) = key_of(client, i).await? else {
        return Ok(false);
    };
    let next = i * SPAN + (key - i * SPAN + step) % SPAN;
    let n = client
        .execute(
            "UPDATE bank_accounts SET acct = $1 WHERE acct = $2",
            &[&next, &key],
        )
        .await?;
    Ok(n == 1)
}

pub async fn run_client(id: u64, conn: String, stop: Arc<AtomicBool>, tally: Arc<Tally>) {
    let mut rng = Rng(0x9e37_79b9_7f4a_7c15 ^ (id + 1).wrapping_mul(0x2545_f491_4f6c_dd1d));
    let mut seq = (id as i64 + 1) * 1_000_000_000;
    let mut client: Option<Client> = None;
    while !stop.load(Ordering::Relaxed) {
        let Some(c) = client.as_ref().filter(|c| !c.is_closed()) else {
            client = connect(&conn).await;
            if client.is_none() {
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
            continue;
        };
        let a = rng.next(ACCOUNTS as u64) as i64;
        let result = if rng.next(5) == 0 {
            read(c, a, rng.next(2) == 0).await.map(|()| {
                tally.reads_acked.fetch_add(1, Ordering::Relaxed);
            })
        } else if rng.next(4) == 0 {
            move_account(c, a, 1 + rng.next(999) as i64)
                .await
                .map(|moved| {
                    if moved {
                        tally.moves_acked.fetch_add(1, Ordering::Relaxed);
                    }
                })
        } else {
            let b = (a + 1 + rng.next(ACCOUNTS as u64 - 1) as i64) % ACCOUNTS;
            seq += 2;
            tally.transfers_tried.fetch_add(1, Ordering::Relaxed);
            transfer(c, a, b, 1 + rng.next(50) as i64, seq)
                .await
                .map(|done| {
                    if done {
                        tally.transfers_acked.fetch_add(1, Ordering::Relaxed);
                    }
                })
        };
        if result.is_err() {
            tally.failures.fetch_add(1, Ordering::Relaxed);
            // A failed block is ended; a lost connection is replaced.
            let _ = c.batch_execute("ROLLBACK").await;
        }
    }
}

/// The bank's `CLIENTS` clients at work through the proxy at `conn`, until stopped.
pub struct Clients {
    stop: Arc<AtomicBool>,
    tally: Arc<Tally>,
    tasks: Vec<tokio::task::JoinHandle<()>>,
}

impl Clients {
    pub fn start(conn: &str) -> Clients {
        let stop = Arc::new(AtomicBool::new(false));
        let tally = Arc::new(Tally::default());
        let tasks = (0..CLIENTS as u64)
            .map(|id| {
                tokio::spawn(run_client(
                    id,
                    conn.to_string(),
                    stop.clone(),
                    tally.clone(),
                ))
            })
            .collect();
        Clients { stop, tally, tasks }
    }

    /// Stops the clients; what they did.
    pub async fn stop(self) -> Arc<Tally> {
        self.stop.store(true, Ordering::Relaxed);
        for task in self.tasks {
            task.await.expect("client task");
        }
        self.tally
    }
}

/// Rows of a query on every shard, with the shard's index.
pub async fn on_shards(sql: &str) -> Vec<(usize, tokio_postgres::Row)> {
    let mut out = Vec::new();
    for i in 0..shards().clusters.len() {
        let c = shards().connect(i).await;
        for row in c
            .query(sql, &[])
            .await
            .unwrap_or_else(|e| panic!("{sql}: {e}"))
        {
            out.push((i, row));
        }
    }
    out
}

/// The bank's tables (in tablespace set `set`, if any) and its accounts with their opening
/// entries.
pub async fn open_bank(setup: &Client, set: Option<&str>) {
    let placed = set.map_or(String::new(), |s| format!(" TABLESPACE SET {s}"));
    let accounts = format!(
        "CREATE SHARDED TABLE bank_accounts (acct bigint PRIMARY KEY, balance bigint NOT NULL) \
         PARTITION BY CONSISTENT HASH (acct) PARTITIONS AUTO{placed}"
    );
    for ddl in [
        accounts.as_str(),
        "CREATE SHARDED TABLE bank_ledger (acct bigint NOT NULL, seq bigint NOT NULL, \
           amount bigint NOT NULL, CONSTRAINT bank_ledger_pk PRIMARY KEY (acct, seq), \
           CONSTRAINT bank_ledger_fk FOREIGN KEY (acct) REFERENCES bank_accounts (acct) \
             ON DELETE CASCADE) \
         PARTITION BY REFERENCE (bank_ledger_fk)",
        "ALTER TABLE bank_ledger ENABLE ROW MOVEMENT",
        "ALTER TABLE bank_accounts ENABLE ROW MOVEMENT",
    ] {
        setup
            .batch_execute(ddl)
            .await
            .unwrap_or_else(|e| panic!("{ddl}: {e}"));
    }
    for i in 0..ACCOUNTS {
        setup
            .execute(
                "INSERT INTO bank_accounts VALUES ($1, $2)",
                &[&(i * SPAN), &OPENING],
            )
            .await
            .expect("open an account");
        setup
            .execute(
                "INSERT INTO bank_ledger VALUES ($1, 0, $2)",
                &[&(i * SPAN), &OPENING],
            )
            .await
            .expect("opening entry");
    }
}

/// What the clients' tally and the shards must show at the end: work was done, recovery left
/// no prepared transaction, every account exactly once with the total conserved, every ledger
/// row on its account's shard summing to its balance, and no acknowledged transfer lost.
/// `output` gives the proxy's log for a failure's message.
pub async fn check_bank(tally: &Tally, output: impl Fn() -> String) {
    let t = tally;
    eprintln!(
        "bank: {} transfers acknowledged of {} tried, {} moves, {} reads, {} failed statements",
        t.transfers_acked.load(Ordering::Relaxed),
        t.transfers_tried.load(Ordering::Relaxed),
        t.moves_acked.load(Ordering::Relaxed),
        t.reads_acked.load(Ordering::Relaxed),
        t.failures.load(Ordering::Relaxed),
    );
    assert!(
        t.transfers_acked.load(Ordering::Relaxed) > 0,
        "no transfer went through"
    );
    assert!(
        t.moves_acked.load(Ordering::Relaxed) > 0,
        "no account moved"
    );
    assert!(
        t.reads_acked.load(Ordering::Relaxed) > 0,
        "no read answered"
    );

    // Recovery finishes whatever the kills left prepared.
    let deadline = Instant::now() + Duration::from_secs(60);
    loop {
        let left = on_shards("SELECT gid FROM pg_prepared_xacts").await;
        if left.is_empty() {
            break;
        }
        assert!(
            Instant::now() < deadline,
            "prepared transactions left: {:?}\n{}",
            left.iter()
                .map(|(i, r)| (*i, r.get::<_, String>(0)))
                .collect::<Vec<_>>(),
            output()
        );
        tokio::time::sleep(Duration::from_millis(200)).await;
    }

    let accounts = on_shards("SELECT acct, balance FROM bank_accounts").await;
    let mut by_account: BTreeMap<i64, Vec<(usize, i64, i64)>> = BTreeMap::new();
    for (shard, row) in &accounts {
        let acct: i64 = row.get(0);
        by_account
            .entry(acct / SPAN)
            .or_default()
            .push((*shard, acct, row.get(1)));
    }
    assert_eq!(
        by_account.len() as i64,
        ACCOUNTS,
        "every account is somewhere"
    );
    for (i, copies) in &by_account {
        assert_eq!(copies.len(), 1, "account {i} exactly once: {copies:?}");
    }
    let total: i64 = accounts.iter().map(|(_, r)| r.get::<_, i64>(1)).sum();
    assert_eq!(total, ACCOUNTS * OPENING, "the total balance is conserved");

    let ledger =
        on_shards("SELECT acct, sum(amount)::bigint, count(*) FROM bank_ledger GROUP BY acct")
            .await;
    let mut entries = 0i64;
    for (shard, row) in &ledger {
        let acct: i64 = row.get(0);
        let sum: i64 = row.get(1);
        entries += row.get::<_, i64>(2);
        let (home, key, balance) = by_account[&(acct / SPAN)][0];
        assert_eq!(
            key,
            acct,
            "ledger rows under an old key of account {}",
            acct / SPAN
        );
        assert_eq!(
            *shard,
            home,
            "account {}'s ledger on its shard",
            acct / SPAN
        );
        assert_eq!(
            sum,
            balance,
            "account {}: balance is its ledger's sum",
            acct / SPAN
        );
    }
    let acked = t.transfers_acked.load(Ordering::Relaxed) as i64;
    let tried = t.transfers_tried.load(Ordering::Relaxed) as i64;
    assert!(
        entries >= ACCOUNTS + 2 * acked && entries <= ACCOUNTS + 2 * tried,
        "{entries} ledger rows for {acked}..={tried} transfers: an acknowledged one was lost or \
         a failed one kept"
    );
}
