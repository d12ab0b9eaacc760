//! The limits a client meets at the proxy (`[limits]`): sessions in all and per user, the time
//! to log in.

mod common;

use std::time::{Duration, Instant};

use common::raw::RawClient;
use common::{TestProxy, APP};
use tokio::io::AsyncReadExt;
use tokio_postgres::error::SqlState;

#[tokio::test]
async fn sessions_past_the_limits_are_refused_with_53300_until_one_ends() {
    let proxy = TestProxy::start_with(|c| {
        c.limits.max_client_connections = 3;
        c.limits.max_connections_per_user = 2;
        c.users.push(shardwire::config::UserConfig {
            name: "other".into(),
            password: "other".into(),
        });
    });
    let first = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let second = RawClient::connect(proxy.addr, APP, APP, APP).await.unwrap();
    let refused = RawClient::connect(proxy.addr, APP, APP, APP).await.err();
    assert_eq!(refused, Some(SqlState::TOO_MANY_CONNECTIONS), "per user");
    let other = RawClient::connect(proxy.addr, "other", "other", APP)
        .await
        .unwrap();
    let refused = RawClient::connect(proxy.addr, "other", "other", APP)
        .await
        .err();
    assert_eq!(refused, Some(SqlState::TOO_MANY_CONNECTIONS), "in all");
    // The message is PostgreSQL's.
    let err = tokio_postgres::connect(
        &format!("{} user=other password=other", proxy.conn_string()),
        tokio_postgres::NoTls,
    )
    .await
    .err()
    .expect("refused");
    let db = err.as_db_error().expect("an ErrorResponse");
    assert_eq!(db.message(), "sorry, too many clients already");

    // A session that ends gives its place back.
    first.terminate().await;
    drop(other);
    let deadline = Instant::now() + Duration::from_secs(5);
    let mut again = loop {
        match RawClient::connect(proxy.addr, APP, APP, APP).await {
            Ok(c) => break c,
            Err(e) => {
                assert_eq!(e, SqlState::TOO_MANY_CONNECTIONS);
                assert!(Instant::now() < deadline, "the place never came back");
                tokio::time::sleep(Duration::from_millis(50)).await;
            }
        }
    };
    let replies = again.query("SELECT 1").round_trip().await;
    assert!(replies.contains(&common::raw::Reply::Complete("SELECT 1".into())));
    drop(second);
}

#[tokio::test]
async fn a_client_that_does_not_log_in_in_time_is_disconnected() {
    let proxy = TestProxy::start_with(|c| c.limits.login_timeout_ms = 500);
    let mut silent = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    let started = Instant::now();
    let mut buf = [0u8; 64];
    let read = tokio::time::timeout(Duration::from_secs(5), silent.read(&mut buf))
        .await
        .expect("closed within the login timeout");
    assert!(matches!(read, Ok(0) | Err(_)), "{read:?}");
    assert!(started.elapsed() >= Duration::from_millis(400));
    let client = proxy.connect().await;
    client.simple_query("SELECT 1").await.unwrap();
}
