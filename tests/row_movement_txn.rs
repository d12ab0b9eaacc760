//! Row movement inside transactions, checked on the shards themselves: lock waits of a block over
//! several shards are bounded, a move's own prepared statements survive connections that lost
//! them, and a move bound through the extended protocol commits or rolls back with its batch.

mod common;
mod movement_common;
mod routing_common;

use common::shards;
use movement_common::*;
use routing_common::*;
use tokio_postgres::error::SqlState;

/// A transaction spanning shards waits for a lock at most `lock_timeout_ms`: a deadlock whose
/// waits are on different shards is invisible to each PostgreSQL, so the wait ends with 55P03
/// and the block fails, rolling back everything it did on every shard.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_lock_wait_in_a_transaction_over_several_shards_times_out() {
    common::use_shards(SHARDS);
    let proxy = common::TestProxy::start_with(|c| c.transactions.lock_timeout_ms = 300);
    let holder = proxy.connect().await;
    let waiter = proxy.connect().await;
    exec(
        &holder,
        "CREATE SHARDED TABLE mv_locks (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO",
    )
    .await;
    let (first, _, other, _) = seeded(&holder, "mv_locks").await;
    holder.simple_query("BEGIN").await.expect("begin");
    holder
        .simple_query(&format!(
            "UPDATE mv_locks SET v = 'held' WHERE cust_id = {other}"
        ))
        .await
        .expect("lock the row");

    waiter.simple_query("BEGIN").await.expect("begin");
    waiter
        .simple_query(&format!(
            "UPDATE mv_locks SET v = 'mine' WHERE cust_id = {first}"
        ))
        .await
        .expect("first shard");
    let err = waiter
        .simple_query(&format!(
            "UPDATE mv_locks SET v = 'mine' WHERE cust_id = {other}"
        ))
        .await
        .expect_err("the wait on the second shard ends");
    assert_eq!(code(&err), SqlState::LOCK_NOT_AVAILABLE, "{err:?}");
    let commit = waiter.simple_query("COMMIT").await.expect("commit answers");
    assert!(
        commit
            .iter()
            .any(|m| matches!(m, tokio_postgres::SimpleQueryMessage::CommandComplete(_))),
        "COMMIT of a failed block"
    );
    holder.simple_query("COMMIT").await.expect("holder commits");
    let v: Vec<String> = {
        let mut out = Vec::new();
        for i in 0..SHARDS {
            let c = shards().connect(i).await;
            for row in c
                .query(
                    &format!("SELECT v FROM mv_locks WHERE cust_id = {first}"),
                    &[],
                )
                .await
                .expect("row")
            {
                out.push(row.get(0));
            }
        }
        out
    };
    assert_eq!(
        v,
        vec![format!("v{first}")],
        "the failed block changed nothing"
    );
}

/// A move's own statements stay prepared on each backend connection, and are parsed again where
/// a connection no longer has them: after a move that failed before its later statements were
/// parsed, and after the client's DEALLOCATE ALL on that connection. One connection per shard,
/// so every move meets what the one before it left.
#[tokio::test]
async fn moves_parse_their_statements_again_where_a_connection_lost_them() {
    common::use_shards(SHARDS);
    let proxy = common::TestProxy::start_with(|c| c.pool.size = 1);
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_pc (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO;
         CREATE SHARDED TABLE mv_pc_orders (order_id bigint NOT NULL, cust_id bigint NOT NULL, \
           note text, \
           CONSTRAINT mv_pc_orders_pk PRIMARY KEY (cust_id, order_id), \
           CONSTRAINT mv_pc_orders_fk FOREIGN KEY (cust_id) REFERENCES mv_pc (cust_id)) \
         PARTITION BY REFERENCE (mv_pc_orders_fk);
         ALTER TABLE mv_pc_orders ENABLE ROW MOVEMENT;
         ALTER TABLE mv_pc ENABLE ROW MOVEMENT",
    )
    .await;
    let (first, _, other, placement) = seeded(&client, "mv_pc").await;
    let (home, other_home) = (placement[first as usize - 1], placement[other as usize - 1]);
    exec(
        &client,
        &format!("INSERT INTO mv_pc_orders VALUES (1, {first}, 'o1')"),
    )
    .await;
    let move_to =
        |to: i64, from: i64| format!("UPDATE mv_pc SET cust_id = {to} WHERE cust_id = {from}");

    // The root's INSERT fails on the new shard, so the child's INSERT after it is never parsed.
    let err = client
        .simple_query(&move_to(other, first))
        .await
        .expect_err("the new key is taken");
    assert_eq!(code(&err), SqlState::UNIQUE_VIOLATION, "{err}");
    exec(
        &client,
        &format!("DELETE FROM mv_pc WHERE cust_id = {other}"),
    )
    .await;
    let msgs = client
        .simple_query(&move_to(other, first))
        .await
        .expect("the same move with the key free");
    assert_eq!(tag(&msgs), 1);
    assert_eq!(
        shards_of("mv_pc_orders", "cust_id", other).await,
        vec![other_home]
    );
    assert!(shards_of("mv_pc", "cust_id", first).await.is_empty());

    // The client drops every prepared statement of the connection its block holds.
    for stmt in [
        "BEGIN".to_string(),
        format!("SELECT * FROM mv_pc WHERE cust_id = {other}"),
        "DEALLOCATE ALL".into(),
        "COMMIT".into(),
    ] {
        client.simple_query(&stmt).await.expect(&stmt);
    }
    for _ in 0..2 {
        let msgs = client
            .simple_query(&move_to(first, other))
            .await
            .expect("moved back");
        assert_eq!(tag(&msgs), 1);
        let msgs = client
            .simple_query(&move_to(other, first))
            .await
            .expect("moved again");
        assert_eq!(tag(&msgs), 1);
    }
    assert_eq!(shards_of("mv_pc", "cust_id", other).await, vec![other_home]);
    assert_eq!(
        shards_of("mv_pc_orders", "cust_id", other).await,
        vec![other_home]
    );
    assert_ne!(home, other_home);
    assert_eq!(
        prepared_holding("mv_pc").await,
        0,
        "no prepared transaction left"
    );
}

/// A key UPDATE bound through the extended protocol is part of its batch, one transaction up to
/// the Sync on PostgreSQL: a later failure in the batch puts the moved row back; without one,
/// the move commits with the batch's other writes.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_prepared_move_commits_or_rolls_back_with_its_batch() {
    use common::raw::{RawClient, Reply};
    let proxy = start();
    let client = proxy.connect().await;
    exec(
        &client,
        "CREATE SHARDED TABLE mv_batch (cust_id bigint PRIMARY KEY, v text) \
         PARTITION BY CONSISTENT HASH (cust_id) PARTITIONS AUTO ENABLE ROW MOVEMENT",
    )
    .await;
    let (first, same, other, placement) = seeded(&client, "mv_batch").await;
    let (home, other_home) = (placement[0], placement[other as usize - 1]);
    exec(
        &client,
        &format!("DELETE FROM mv_batch WHERE cust_id = {other}"),
    )
    .await;
    let mut raw = RawClient::connect(proxy.addr, common::APP, common::APP, common::APP)
        .await
        .expect("login");
    raw.parse("mv", "UPDATE mv_batch SET cust_id = $1 WHERE cust_id = $2")
        .parse("ins", "INSERT INTO mv_batch VALUES ($1, 'batch')");
    let replies = raw.sync().round_trip().await;
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    let (first_key, other_key, same_key) = (first.to_string(), other.to_string(), same.to_string());

    // The INSERT after the move fails (`same` exists): the row stays where it was.
    raw.bind("", "mv", &[&other_key, &first_key])
        .execute("")
        .bind("", "ins", &[&same_key])
        .execute("")
        .sync();
    let replies = raw.round_trip().await;
    assert!(
        replies.contains(&Reply::Complete("UPDATE 1".into())),
        "{replies:?}"
    );
    assert!(
        replies.contains(&Reply::Error(SqlState::UNIQUE_VIOLATION)),
        "{replies:?}"
    );
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    assert_eq!(shards_of("mv_batch", "cust_id", first).await, vec![home]);
    assert!(shards_of("mv_batch", "cust_id", other).await.is_empty());

    // Without the failure the move and the INSERT commit together.
    raw.bind("", "mv", &[&other_key, &first_key])
        .execute("")
        .bind("", "ins", &["1000"])
        .execute("")
        .sync();
    let replies = raw.round_trip().await;
    assert!(
        !replies.iter().any(|r| matches!(r, Reply::Error(_))),
        "{replies:?}"
    );
    assert_eq!(replies.last(), Some(&Reply::Ready(b'I')), "{replies:?}");
    assert!(shards_of("mv_batch", "cust_id", first).await.is_empty());
    assert_eq!(
        shards_of("mv_batch", "cust_id", other).await,
        vec![other_home]
    );
    assert_eq!(shards_of("mv_batch", "cust_id", 1000).await.len(), 1);
    raw.terminate().await;
}
