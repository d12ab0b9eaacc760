//! LocalCluster against real PostgreSQL: init, start, connect, reuse, stop.

use shardwire::pgcluster::{
    free_port, ClusterOptions, HostAuth, LocalCluster, PgBinaries, StopMode,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::NoTls;

async fn connect(url: &str) -> Result<tokio_postgres::Client, tokio_postgres::Error> {
    let (client, conn) = tokio_postgres::connect(url, NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

/// Stops the cluster even when an assertion fails, so no server outlives the test.
struct Stopper<'a>(&'a LocalCluster);

impl Drop for Stopper<'_> {
    fn drop(&mut self) {
        let _ = self.0.stop(StopMode::Immediate);
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn init_start_connect_reuse_stop() {
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("c1");
    let bins = PgBinaries::locate().unwrap();
    let options = ClusterOptions {
        auth: HostAuth::Scram {
            password: "it's secret".into(),
        },
        fast_unsafe: true,
        ..ClusterOptions::default()
    };
    let cluster =
        LocalCluster::init(bins.clone(), &dir, free_port().unwrap(), options.clone()).unwrap();
    let _stopper = Stopper(&cluster);
    cluster.start().unwrap();
    cluster.create_database("my app").unwrap();
    cluster.create_database("my app").unwrap();

    let url = cluster.url("my app");
    let client = connect(&url).await.unwrap();
    let row = client
        .query_one(
            "SELECT current_database(), current_setting('max_prepared_transactions')::int, \
             current_setting('fsync'), current_setting('server_encoding')",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(row.get::<_, String>(0), "my app");
    assert_eq!(row.get::<_, i32>(1), 64);
    assert_eq!(row.get::<_, String>(2), "off");
    assert_eq!(row.get::<_, String>(3), "UTF8");
    client
        .batch_execute("CREATE TABLE kept (id int); INSERT INTO kept VALUES (7)")
        .await
        .unwrap();
    drop(client);

    let mut wrong = url::Url::parse(&url).unwrap();
    wrong.set_password(Some("nope")).unwrap();
    let err = connect(wrong.as_str()).await.unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::INVALID_PASSWORD));

    cluster.stop(StopMode::Fast).unwrap();
    assert!(!cluster.is_running());
    assert!(connect(&url).await.is_err());

    // A second init on the same directory keeps the data and takes the new port.
    let port = free_port().unwrap();
    let again = LocalCluster::init(bins, &dir, port, options).unwrap();
    let _stopper2 = Stopper(&again);
    again.start().unwrap();
    assert_eq!(again.port(), port);
    let client = connect(&again.url("my app")).await.unwrap();
    let row = client.query_one("SELECT id FROM kept", &[]).await.unwrap();
    assert_eq!(row.get::<_, i32>(0), 7);
    drop(client);
    again.stop(StopMode::Immediate).unwrap();
    assert!(!again.is_running());
}
