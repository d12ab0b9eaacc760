//! The harness itself: shards up with the promised settings and authentication, proxies that
//! start with the promised configuration and release their port when dropped.

mod common;

use common::{shards, TestProxy, APP};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

#[tokio::test]
async fn shards_are_up_with_database_app_and_two_phase_commit() {
    let shards = shards();
    assert_eq!(shards.urls.len(), 2);
    for i in 0..shards.urls.len() {
        let client = shards.connect(i).await;
        let row = client
            .query_one(
                "SELECT current_database()::text, \
                 current_setting('max_prepared_transactions')::int",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), APP);
        assert!(row.get::<_, i32>(1) > 0);
    }
}

/// Shard 0 must speak SCRAM and shard 1 md5 to clients on 127.0.0.1 — that is what makes the
/// proxy's backend authentication get tested both ways.
#[tokio::test]
async fn shards_require_scram_and_md5_passwords() {
    let shards = shards();
    for (i, (method, stored_prefix)) in [("scram-sha-256", "SCRAM-SHA-256$"), ("md5", "md5")]
        .into_iter()
        .enumerate()
    {
        let client = shards.connect(i).await;
        let row = client
            .query_one(
                "SELECT \
                   (SELECT auth_method FROM pg_hba_file_rules WHERE type = 'host' \
                    AND address = '127.0.0.1'), \
                   (SELECT rolpassword FROM pg_authid WHERE rolname = 'postgres')",
                &[],
            )
            .await
            .unwrap();
        assert_eq!(row.get::<_, String>(0), method, "shard {i}");
        // With a SCRAM verifier stored, PostgreSQL would answer an md5 rule with SCRAM instead.
        assert!(
            row.get::<_, String>(1).starts_with(stored_prefix),
            "shard {i}"
        );

        let mut wrong: tokio_postgres::Config = shards.url(i).parse().unwrap();
        wrong.password("not the password");
        let err = wrong
            .connect(NoTls)
            .await
            .err()
            .expect("wrong password refused");
        assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD), "shard {i}");
    }
}

#[test]
fn test_proxy_applies_edits_and_releases_its_port() {
    let proxy = TestProxy::start_with(|c| c.pool.size = 3);
    assert_eq!(proxy.config.pool.size, 3);
    assert_eq!(proxy.config.listen_addr(), proxy.addr);
    assert_eq!(proxy.config.proxy.database, APP);
    let urls: Vec<&str> = proxy.config.shards.iter().map(|s| s.url.as_str()).collect();
    assert_eq!(urls, shards().urls);
    assert!(proxy
        .conn_string()
        .contains(&format!("port={}", proxy.addr.port())));
    std::net::TcpStream::connect(proxy.addr).expect("proxy listens");

    let addr = proxy.addr;
    drop(proxy);
    assert!(
        std::net::TcpStream::connect(addr).is_err(),
        "the listener is closed once the proxy is dropped"
    );
}
