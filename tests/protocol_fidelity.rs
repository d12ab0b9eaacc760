//! What a client sees of the protocol through the proxy is what one PostgreSQL sends: the
//! settings reported at startup, spelled as the server spells them; no ParameterStatus or
//! notice the client did not cause. Each check is also made against a shard directly, which
//! proves the check itself.

mod common;

use std::collections::BTreeMap;

use common::raw::RawClient;
use common::{TestProxy, APP};
use tokio_postgres::error::SqlState;

async fn through_proxy(proxy: &TestProxy, params: &[(&str, &str)]) -> Result<RawClient, SqlState> {
    RawClient::connect_with(proxy.addr, APP, APP, APP, params).await
}

fn reported(client: &RawClient) -> BTreeMap<String, String> {
    client.reported.iter().cloned().collect()
}

#[tokio::test]
async fn startup_settings_are_reported_as_the_server_spells_them() {
    let proxy = TestProxy::start();
    for encoding in [
        "utf8", "UTF-8", "utf_8", "Unicode", "eucjp", "euc-jp", "LATIN1",
    ] {
        let params = [
            ("client_encoding", encoding),
            ("datestyle", "iso"),
            ("application_name", "fidelity"),
            ("extra_float_digits", "2"),
        ];
        let direct = RawClient::connect_to_shard_with(0, &params)
            .await
            .unwrap_or_else(|e| panic!("direct with {encoding}: {e:?}"));
        let proxied = through_proxy(&proxy, &params)
            .await
            .unwrap_or_else(|e| panic!("through the proxy with {encoding}: {e:?}"));
        let (direct, proxied) = (reported(&direct), reported(&proxied));
        assert_eq!(proxied, direct, "client_encoding={encoding}");
        assert!(!proxied.contains_key("extra_float_digits"), "{proxied:?}");
    }
}

#[tokio::test]
async fn a_startup_setting_postgresql_refuses_ends_the_login_alike() {
    let proxy = TestProxy::start();
    for params in [
        [("client_encoding", "klingon")],
        [("no_such_setting", "1")],
        [("DateStyle", "sideways")],
    ] {
        let direct = RawClient::connect_to_shard_with(0, &params).await.err();
        let proxied = through_proxy(&proxy, &params).await.err();
        assert!(direct.is_some(), "{params:?} refused directly");
        assert_eq!(proxied, direct, "{params:?}");
    }
    // The proxy serves the next login.
    through_proxy(&proxy, &[("client_encoding", "UTF8")])
        .await
        .expect("a good login");
}

#[tokio::test]
async fn the_first_query_on_a_fresh_backend_connection_is_traced_as_directly() {
    // A proxy of its own: its pool's first connection starts as `shardwire`, which the proxy
    // changes to the client's application_name before the client's query.
    let proxy = TestProxy::start();
    let params = [("application_name", "tracer"), ("client_encoding", "utf8")];
    let mut direct = RawClient::connect_to_shard_with(0, &params).await.unwrap();
    let mut proxied = through_proxy(&proxy, &params).await.unwrap();
    for sql in [
        "SELECT 1",
        "SET application_name = 'renamed'",
        "SELECT current_setting('application_name')",
        "SET client_min_messages = notice; DO $$ BEGIN RAISE NOTICE 'hi'; END $$",
    ] {
        let want = direct.query(sql).trace().await;
        let got = proxied.query(sql).trace().await;
        assert_eq!(got, want, "{sql}");
    }
    // In the extended protocol too.
    let mut other = through_proxy(&proxy, &[("application_name", "second")])
        .await
        .unwrap();
    let mut direct = RawClient::connect_to_shard_with(0, &[("application_name", "second")])
        .await
        .unwrap();
    let want = direct
        .parse("", "SELECT 2")
        .bind("", "", &[])
        .execute("")
        .sync()
        .trace()
        .await;
    let got = other
        .parse("", "SELECT 2")
        .bind("", "", &[])
        .execute("")
        .sync()
        .trace()
        .await;
    assert_eq!(got, want);
}
