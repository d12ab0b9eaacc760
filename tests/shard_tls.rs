//! TLS to the shards, chosen per shard URL as libpq chooses it (`sslmode`, `sslrootcert`,
//! `sslcert`, `sslkey`): every path the proxy talks to a shard on (the data path, multi-shard
//! reads, COPY, cancel, the catalog and two-phase commit's control connections) goes over TLS
//! when asked, the certificate is checked as the mode says, and a check that fails is an error
//! that names the shard and the reason. The shards here accept TCP only over TLS, so a
//! plaintext connection could not have served anything.

mod common;

use std::path::PathBuf;
use std::process::Command;
use std::sync::Arc;
use std::time::{Duration, Instant};

use common::{TestProxy, APP};
use shardwire::config::Config;
use shardwire::pgcluster::{
    free_port, ClusterOptions, ClusterTls, HostAuth, LocalCluster, PgBinaries, StopMode,
};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

/// A certificate authority, and what it signed, made with the openssl command.
struct Certificates {
    dir: tempfile::TempDir,
}

impl Certificates {
    fn new() -> Certificates {
        let certs = Certificates {
            dir: tempfile::tempdir().unwrap(),
        };
        for ca in ["ca", "other_ca"] {
            certs.openssl(&["req", "-x509"], ca, &format!("/CN={ca}"), None, None);
        }
        certs.openssl(
            &["req"],
            "server",
            "/CN=localhost",
            Some("ca"),
            Some("subjectAltName=IP:127.0.0.1,DNS:localhost"),
        );
        certs.openssl(
            &["req"],
            "elsewhere",
            "/CN=elsewhere.example",
            Some("ca"),
            Some("subjectAltName=DNS:elsewhere.example"),
        );
        // A client certificate for the shards' superuser (verify-full matches its name).
        certs.openssl(&["req"], "client", "/CN=postgres", Some("ca"), None);
        certs
    }

    /// `name.crt` and `name.key`: self-signed, or signed by `ca`.
    fn openssl(
        &self,
        command: &[&str],
        name: &str,
        subject: &str,
        ca: Option<&str>,
        extension: Option<&str>,
    ) {
        let mut cmd = Command::new("openssl");
        cmd.args(command)
            .args(["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1"])
            .args(["-nodes", "-days", "2", "-subj", subject])
            .arg("-keyout")
            .arg(self.key(name))
            .arg("-out")
            .arg(self.cert(name));
        if let Some(ca) = ca {
            // OpenSSL 3: -CA makes req sign the new certificate (and implies -x509).
            cmd.arg("-CA")
                .arg(self.cert(ca))
                .arg("-CAkey")
                .arg(self.key(ca));
        }
        if let Some(ext) = extension {
            cmd.args(["-addext", ext]);
        }
        if ca.is_some() {
            // Else req marks it a certificate authority, which may not serve as a server's.
            cmd.args(["-addext", "basicConstraints=critical,CA:FALSE"]);
        }
        let out = cmd.output().expect("the openssl command is installed");
        assert!(
            out.status.success(),
            "openssl for {name}: {}",
            String::from_utf8_lossy(&out.stderr)
        );
    }

    fn cert(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.crt"))
    }

    fn key(&self, name: &str) -> PathBuf {
        self.dir.path().join(format!("{name}.key"))
    }
}

/// Clusters of the test's own that take TCP only over TLS, stopped even when a test fails.
struct TlsShards {
    clusters: Vec<LocalCluster>,
    _dir: tempfile::TempDir,
}

impl TlsShards {
    fn start(count: usize, tls: ClusterTls) -> TlsShards {
        let dir = tempfile::tempdir().unwrap();
        let bins = PgBinaries::locate().unwrap();
        let clusters: Vec<LocalCluster> = (0..count)
            .map(|i| {
                let options = ClusterOptions {
                    auth: HostAuth::Scram {
                        password: format!("tls{i}"),
                    },
                    fast_unsafe: true,
                    tls: Some(tls.clone()),
                };
                let at = dir.path().join(format!("s{i}"));
                LocalCluster::init(bins.clone(), &at, free_port().unwrap(), options).unwrap()
            })
            .collect();
        let shards = TlsShards {
            clusters,
            _dir: dir,
        };
        for c in &shards.clusters {
            c.start().unwrap();
            c.create_database(APP).unwrap();
        }
        shards
    }

    /// Shard URLs with `query` (`sslmode=…&…`) appended.
    fn urls(&self, query: &str) -> Vec<String> {
        self.clusters
            .iter()
            .map(|c| format!("{}?{query}", c.url(APP)))
            .collect()
    }

    /// A superuser session on shard `i` over its Unix socket (trusted, no TLS needed).
    async fn local(&self, i: usize) -> Client {
        let c = &self.clusters[i];
        let conn = format!(
            "host={} port={} user=postgres dbname={APP}",
            c.dir().display(),
            c.port()
        );
        let (client, conn) = tokio_postgres::connect(&conn, NoTls).await.unwrap();
        tokio::spawn(conn);
        client
    }
}

impl Drop for TlsShards {
    fn drop(&mut self) {
        for c in &self.clusters {
            let _ = c.stop(StopMode::Immediate);
        }
    }
}

/// A proxy over `urls`; its catalog is on the first of them unless `catalog` names another.
fn proxy_over(urls: &[String], catalog: Option<String>) -> TestProxy {
    TestProxy::start_with(|c| {
        c.catalog = catalog.map(|url| shardwire::config::CatalogConfig { url });
        c.shards.truncate(urls.len());
        for (shard, url) in c.shards.iter_mut().zip(urls) {
            shard.url = url.clone();
        }
        c.pool.connect_timeout_ms = 3000;
    })
}

/// A catalog database of its own on the harness's first (plain) shard, so proxies over
/// different shard URLs do not share one.
async fn own_catalog(name: &str) -> String {
    let admin = common::shards().connect(0).await;
    admin
        .batch_execute(&format!("CREATE DATABASE {name}"))
        .await
        .unwrap();
    common::shards().urls[0].replace("/app", &format!("/{name}"))
}

fn server_tls(certs: &Certificates, name: &str) -> ClusterTls {
    ClusterTls {
        cert: certs.cert(name),
        key: certs.key(name),
        client_ca: None,
        only: true,
    }
}

fn verify_full(certs: &Certificates, ca: &str) -> String {
    format!(
        "sslmode=verify-full&sslrootcert={}",
        certs.cert(ca).display()
    )
}

/// How many of the proxy's sessions on the shard are over TLS, and how many are not.
async fn proxy_sessions_by_tls(shard: &Client) -> (i64, i64) {
    let row = shard
        .query_one(
            "SELECT count(*) FILTER (WHERE s.ssl), count(*) FILTER (WHERE NOT s.ssl) \
             FROM pg_stat_ssl s JOIN pg_stat_activity a USING (pid) \
             WHERE a.application_name = 'shardwire' AND a.client_addr IS NOT NULL",
            &[],
        )
        .await
        .unwrap();
    (row.get(0), row.get(1))
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn every_path_to_verified_shards_runs_over_tls() {
    let certs = Certificates::new();
    let shards = TlsShards::start(2, server_tls(&certs, "server"));
    let proxy = proxy_over(&shards.urls(&verify_full(&certs, "ca")), None);
    let client = proxy.connect().await;

    // Sharding DDL and two-phase commit go through the control connections.
    client
        .batch_execute(
            "CREATE SHARDED TABLE tls_t (id bigint PRIMARY KEY, v text) \
             PARTITION BY CONSISTENT HASH (id) PARTITIONS 4",
        )
        .await
        .unwrap();
    client
        .batch_execute("INSERT INTO tls_t SELECT i, 'v' || i FROM generate_series(1, 2000) i")
        .await
        .unwrap();
    let mut on_shard = Vec::new();
    for i in 0..2 {
        let n: i64 = shards
            .local(i)
            .await
            .query_one("SELECT count(*) FROM tls_t", &[])
            .await
            .unwrap()
            .get(0);
        on_shard.push(n);
    }
    assert!(on_shard.iter().all(|n| *n > 0), "{on_shard:?}");
    assert_eq!(on_shard.iter().sum::<i64>(), 2000);

    // One shard, extended protocol.
    let v: String = client
        .query_one("SELECT v FROM tls_t WHERE id = $1", &[&1234i64])
        .await
        .unwrap()
        .get(0);
    assert_eq!(v, "v1234");
    // Results far larger than TLS's and the sockets' buffers, from one shard and from both.
    let rows = client
        .query(
            "SELECT repeat('x', 1000) FROM generate_series(1, 20000)",
            &[],
        )
        .await
        .unwrap();
    assert_eq!(rows.len(), 20000);
    assert!(rows.iter().all(|r| r.get::<_, String>(0).len() == 1000));
    let rows = client
        .query("SELECT id, repeat(v, 200) FROM tls_t ORDER BY id", &[])
        .await
        .unwrap();
    let ids: Vec<i64> = rows.iter().map(|r| r.get(0)).collect();
    assert_eq!(ids, (1..=2000).collect::<Vec<i64>>());

    // COPY in, split between the shards, and out, gathered.
    let rows: String = (5001..=5500).map(|i| format!("{i}\tc{i}\n")).collect();
    let out = proxy.psql(&format!(
        "COPY tls_t (id, v) FROM STDIN;\n{rows}\\.\n\
         COPY (SELECT id, v FROM tls_t WHERE id > 5000) TO STDOUT;\n"
    ));
    let stdout = String::from_utf8_lossy(&out.stdout);
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    assert!(
        stdout.starts_with("COPY 500\n"),
        "{stdout}{}",
        String::from_utf8_lossy(&out.stderr)
    );
    let mut copied_out: Vec<&str> = stdout.lines().skip(1).collect();
    copied_out.sort_by_key(|line| line.split('\t').next().unwrap().parse::<i64>().unwrap());
    assert_eq!(copied_out, rows.lines().collect::<Vec<_>>());

    // A cancel reaches the shard that runs the statement.
    let token = client.cancel_token();
    let canceller = tokio::spawn(async move {
        tokio::time::sleep(Duration::from_millis(500)).await;
        token.cancel_query(NoTls).await
    });
    let started = Instant::now();
    let err = client
        .batch_execute("SELECT pg_sleep(30)")
        .await
        .unwrap_err();
    assert_eq!(err.code(), Some(&SqlState::QUERY_CANCELED), "{err}");
    assert!(started.elapsed() < Duration::from_secs(20));
    canceller.await.unwrap().unwrap();

    for i in 0..2 {
        let (tls, plain) = proxy_sessions_by_tls(&shards.local(i).await).await;
        assert!(tls > 0, "shard {i}: no session of the proxy");
        assert_eq!(plain, 0, "shard {i}: a session of the proxy without TLS");
    }
}

/// A session's first statement on a proxy over one shard whose URL says `query`.
async fn first_statement(
    certs_shard: &TlsShards,
    query: &str,
    catalog: &str,
) -> Result<(), tokio_postgres::Error> {
    let catalog = own_catalog(catalog).await;
    let proxy = proxy_over(&certs_shard.urls(query)[..1], Some(catalog));
    // The proxy greets a client with a shard's settings, so a shard it cannot reach may
    // already refuse the login.
    let (client, conn) = tokio_postgres::connect(&proxy.conn_string(), NoTls).await?;
    tokio::spawn(conn);
    client.batch_execute("SELECT 1").await
}

fn assert_refused(result: Result<(), tokio_postgres::Error>, expected: &[&str]) {
    let err = result.expect_err("the shard was reachable");
    let db = err.as_db_error().unwrap_or_else(|| panic!("{err}"));
    assert!(
        matches!(
            *db.code(),
            SqlState::SQLCLIENT_UNABLE_TO_ESTABLISH_SQLCONNECTION
                | SqlState::SQLSERVER_REJECTED_ESTABLISHMENT_OF_SQLCONNECTION
                | SqlState::CONNECTION_FAILURE
        ),
        "{db:?}"
    );
    assert!(
        db.message().contains("\"s1\""),
        "names the shard: {}",
        db.message()
    );
    for part in expected {
        assert!(db.message().contains(part), "{part}: {}", db.message());
    }
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn the_certificate_is_checked_as_sslmode_says() {
    let certs = Certificates::new();
    // Its certificate names another host than the URL's 127.0.0.1.
    let shard = TlsShards::start(1, server_tls(&certs, "elsewhere"));
    let root = |ca: &str| format!("sslrootcert={}", certs.cert(ca).display());

    assert_refused(
        first_statement(&shard, &verify_full(&certs, "ca"), "tls_cat_name").await,
        &[
            "sslmode=verify-full",
            "certificate not valid for name \"127.0.0.1\"",
        ],
    );
    first_statement(
        &shard,
        &format!("sslmode=verify-ca&{}", root("ca")),
        "tls_cat_ca",
    )
    .await
    .expect("verify-ca checks the chain, not the name");
    assert_refused(
        first_statement(
            &shard,
            &format!("sslmode=verify-ca&{}", root("other_ca")),
            "tls_cat_other",
        )
        .await,
        &["sslmode=verify-ca", "UnknownIssuer"],
    );
    // As libpq: require checks nothing without a root certificate, the chain with one.
    first_statement(&shard, "sslmode=require", "tls_cat_require")
        .await
        .expect("require without sslrootcert does not check the certificate");
    assert_refused(
        first_statement(
            &shard,
            &format!("sslmode=require&{}", root("other_ca")),
            "tls_cat_req_root",
        )
        .await,
        &["UnknownIssuer"],
    );
    // Without TLS the shard refuses the proxy, and says why.
    assert_refused(
        first_statement(&shard, "sslmode=disable", "tls_cat_plain").await,
        &["no encryption"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_client_certificate_goes_to_shards_that_ask_for_one() {
    let certs = Certificates::new();
    let shard = TlsShards::start(
        1,
        ClusterTls {
            client_ca: Some(certs.cert("ca")),
            ..server_tls(&certs, "server")
        },
    );
    let with_cert = format!(
        "{}&sslcert={}&sslkey={}",
        verify_full(&certs, "ca"),
        certs.cert("client").display(),
        certs.key("client").display()
    );
    first_statement(&shard, &with_cert, "tls_cat_client")
        .await
        .expect("the client certificate was accepted");
    assert_refused(
        first_statement(&shard, &verify_full(&certs, "ca"), "tls_cat_no_client").await,
        &["certificate"],
    );
}

#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn prefer_takes_plaintext_from_a_server_without_tls_and_require_refuses_it() {
    let plain: Vec<String> = common::shards()
        .urls
        .iter()
        .map(|u| format!("{u}?sslmode=prefer"))
        .collect();
    let proxy = proxy_over(&plain, None);
    proxy
        .connect()
        .await
        .batch_execute("SELECT 1")
        .await
        .unwrap();
    drop(proxy);

    // The catalog is a shard here, so the proxy does not start at all.
    let mut config = Config::clone(&proxy_config(&common::shards().urls, "sslmode=require"));
    config.catalog = None;
    let err = match shardwire::frontend::context::ServerCtx::start(
        Arc::new(config),
        shardwire::failpoint::FailPoints::none(),
    )
    .await
    {
        Ok(_) => panic!("a proxy started over shards without TLS"),
        Err(e) => e.to_string(),
    };
    assert!(err.contains("TLS"), "{err}");
}

/// A configuration over `urls` with `query` appended to each, validated as a file would be.
fn proxy_config(urls: &[String], query: &str) -> Config {
    let mut text = format!(
        "[proxy]\nlisten = \"127.0.0.1:0\"\ndatabase = \"{APP}\"\n\
         [[users]]\nname = \"{APP}\"\npassword = \"{APP}\"\n"
    );
    for (i, url) in urls.iter().enumerate() {
        text.push_str(&format!(
            "[[shards]]\nname = \"s{}\"\nurl = \"{url}?{query}\"\n",
            i + 1
        ));
    }
    Config::parse(&text, "test").unwrap()
}
