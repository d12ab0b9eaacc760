//! Logging in to the proxy: SCRAM (the default) and md5, the SQLSTATEs of a refused login, and
//! TLS with a certificate made for the test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{psql, TestProxy, APP};
use shardwire::config::{AuthMethod, TlsConfig};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};
use tokio_rustls::rustls;

async fn login(
    proxy: &TestProxy,
    user: &str,
    password: &str,
    db: &str,
) -> Result<Client, tokio_postgres::Error> {
    let mut config = tokio_postgres::Config::new();
    config
        .host(proxy.addr.ip().to_string())
        .port(proxy.addr.port())
        .user(user)
        .password(password)
        .dbname(db);
    let (client, conn) = config.connect(NoTls).await?;
    tokio::spawn(conn);
    Ok(client)
}

async fn refused_with(proxy: &TestProxy, user: &str, password: &str, db: &str) -> SqlState {
    let e = login(proxy, user, password, db)
        .await
        .err()
        .unwrap_or_else(|| panic!("login as {user}/{db} was accepted"));
    e.code()
        .cloned()
        .unwrap_or_else(|| panic!("no SQLSTATE in {e}"))
}

/// libpq options for the proxy's user, plus `extra`.
fn conninfo(proxy: &TestProxy, password: &str, extra: &str) -> String {
    format!(
        "host={} port={} user={APP} password={password} dbname={APP} {extra}",
        proxy.addr.ip(),
        proxy.addr.port()
    )
}

fn stdout(o: &Output) -> String {
    String::from_utf8_lossy(&o.stdout).into_owned()
}

fn stderr(o: &Output) -> String {
    String::from_utf8_lossy(&o.stderr).into_owned()
}

#[tokio::test]
async fn scram_login_and_the_sqlstates_of_refused_logins() {
    let proxy = TestProxy::start();
    let client = login(&proxy, APP, APP, APP).await.expect("SCRAM login");
    let user: String = client
        .query_one("SELECT 'logged in'::text", &[])
        .await
        .unwrap()
        .get(0);
    assert_eq!(user, "logged in");
    assert_eq!(
        refused_with(&proxy, APP, "wrong", APP).await,
        SqlState::INVALID_PASSWORD
    );
    assert_eq!(
        refused_with(&proxy, "nobody", APP, APP).await,
        SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    );
    assert_eq!(
        refused_with(&proxy, APP, APP, "not_app").await,
        SqlState::UNDEFINED_DATABASE
    );
    // Refused logins leave the proxy serving.
    login(&proxy, APP, APP, APP)
        .await
        .expect("login after refusals");
}

#[test]
fn psql_logs_in_with_scram_and_is_refused_a_wrong_password() {
    let proxy = TestProxy::start();
    let ok = psql(
        &conninfo(&proxy, APP, "sslmode=disable"),
        &["-A", "-t"],
        "SELECT 40 + 2;",
    );
    assert_eq!(stdout(&ok), "42\n", "{}", stderr(&ok));
    let refused = psql(
        &conninfo(&proxy, "wrong", "sslmode=disable"),
        &[],
        "SELECT 1;",
    );
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("password authentication failed for user \"app\""),
        "{}",
        stderr(&refused)
    );
}

#[tokio::test]
async fn md5_login_with_psql_and_tokio_postgres() {
    let proxy = TestProxy::start_with(|c| c.proxy.auth_method = AuthMethod::Md5);
    let conn = conninfo(&proxy, APP, "sslmode=disable");
    let ok = tokio::task::spawn_blocking(move || psql(&conn, &["-A", "-t"], "SELECT 'md5 ok';"))
        .await
        .unwrap();
    assert_eq!(stdout(&ok), "md5 ok\n", "{}", stderr(&ok));
    let conn = conninfo(&proxy, "wrong", "sslmode=disable");
    let refused = tokio::task::spawn_blocking(move || psql(&conn, &[], "SELECT 1;"))
        .await
        .unwrap();
    assert!(!refused.status.success());
    assert!(
        stderr(&refused).contains("password authentication failed for user \"app\""),
        "{}",
        stderr(&refused)
    );

    login(&proxy, APP, APP, APP).await.expect("md5 login");
    assert_eq!(
        refused_with(&proxy, APP, "wrong", APP).await,
        SqlState::INVALID_PASSWORD
    );
    assert_eq!(
        refused_with(&proxy, "nobody", APP, APP).await,
        SqlState::INVALID_AUTHORIZATION_SPECIFICATION
    );
}

/// A self-signed certificate for 127.0.0.1 and localhost, made with the openssl command.
fn self_signed_certificate(dir: &Path) -> (PathBuf, PathBuf) {
    let (cert, key) = (dir.join("cert.pem"), dir.join("key.pem"));
    let out = Command::new("openssl")
        .args([
            "req",
            "-x509",
            "-newkey",
            "ec",
            "-pkeyopt",
            "ec_paramgen_curve:prime256v1",
        ])
        .args(["-nodes", "-days", "2", "-subj", "/CN=localhost"])
        .args(["-addext", "subjectAltName=IP:127.0.0.1,DNS:localhost"])
        .arg("-keyout")
        .arg(&key)
        .arg("-out")
        .arg(&cert)
        .output()
        .expect("the openssl command is installed");
    assert!(
        out.status.success(),
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    (cert, key)
}

const CONNINFO_SCRIPT: &str = "\\conninfo\nSELECT 'query ok';\n";

#[test]
fn psql_connects_over_tls_when_the_proxy_has_a_certificate() {
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_certificate(dir.path());
    let proxy = TestProxy::start_with(|c| {
        c.tls = Some(TlsConfig {
            cert: cert.clone(),
            key,
        })
    });
    let root = format!("sslrootcert={}", cert.display());
    for sslmode in ["sslmode=require", &format!("sslmode=verify-full {root}")] {
        let out = psql(&conninfo(&proxy, APP, sslmode), &[], CONNINFO_SCRIPT);
        let text = stdout(&out);
        assert!(out.status.success(), "{sslmode}: {}", stderr(&out));
        assert!(
            text.contains("SSL connection (protocol: TLS"),
            "{sslmode}: {text}"
        );
        assert!(text.contains("query ok"), "{sslmode}: {text}");
    }
    // TLS is offered, not imposed.
    let out = psql(
        &conninfo(&proxy, APP, "sslmode=disable"),
        &[],
        CONNINFO_SCRIPT,
    );
    assert!(out.status.success(), "{}", stderr(&out));
    assert!(!stdout(&out).contains("SSL connection"));
    assert!(stdout(&out).contains("query ok"));
}

#[test]
fn without_a_certificate_tls_is_refused_and_plain_connections_work() {
    let proxy = TestProxy::start();
    let required = psql(
        &conninfo(&proxy, APP, "sslmode=require"),
        &[],
        CONNINFO_SCRIPT,
    );
    assert!(!required.status.success());
    assert!(
        stderr(&required).contains("server does not support SSL"),
        "{}",
        stderr(&required)
    );
    let preferred = psql(
        &conninfo(&proxy, APP, "sslmode=prefer"),
        &[],
        CONNINFO_SCRIPT,
    );
    assert!(preferred.status.success(), "{}", stderr(&preferred));
    assert!(!stdout(&preferred).contains("SSL connection"));
    assert!(stdout(&preferred).contains("query ok"));
}

/// Bytes sent with an SSLRequest, ahead of the server's answer, could be a man in the middle's
/// (CVE-2021-23214): the proxy takes nothing sent before the TLS handshake as sent over it, and
/// says so over the encrypted connection, as PostgreSQL does.
#[tokio::test]
async fn bytes_sent_ahead_of_the_tls_handshake_are_refused() {
    use tokio::io::{AsyncReadExt, AsyncWriteExt};
    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_certificate(dir.path());
    let proxy = TestProxy::start_with(|c| {
        c.tls = Some(TlsConfig {
            cert: cert.clone(),
            key,
        })
    });
    // An SSLRequest and, in the same write, a plaintext startup packet.
    let mut injected = vec![0, 0, 0, 8, 0x04, 0xd2, 0x16, 0x2f];
    let mut startup = bytes::BytesMut::new();
    postgres_protocol::message::frontend::startup_message(
        [("user", APP), ("database", APP)],
        &mut startup,
    )
    .unwrap();
    injected.extend_from_slice(&startup);

    let mut tcp = tokio::net::TcpStream::connect(proxy.addr).await.unwrap();
    tcp.write_all(&injected).await.unwrap();
    let mut answer = [0u8; 1];
    tcp.read_exact(&mut answer).await.unwrap();
    assert_eq!(&answer, b"S");

    let config = rustls::ClientConfig::builder()
        .dangerous()
        .with_custom_certificate_verifier(std::sync::Arc::new(AnyCertificate))
        .with_no_client_auth();
    let connector = tokio_rustls::TlsConnector::from(std::sync::Arc::new(config));
    let name = rustls::pki_types::ServerName::try_from("localhost").unwrap();
    let mut tls = connector.connect(name, tcp).await.expect("TLS handshake");
    let mut got = Vec::new();
    let read = tokio::time::timeout(std::time::Duration::from_secs(5), tls.read_to_end(&mut got))
        .await
        .expect("an answer, then the end");
    // The server may close without TLS's close_notify after its FATAL.
    let _ = read;
    let text = String::from_utf8_lossy(&got);
    assert!(got.first() == Some(&b'E'), "{text:?}");
    assert!(text.contains("C08P01"), "{text:?}");
    assert!(
        text.contains("received unencrypted data after SSL request"),
        "{text:?}"
    );
}

/// Takes the test's self-signed certificate (a CA's, which webpki refuses as a server's) on
/// trust, checking only the handshake's signatures: the test is about what comes through TLS,
/// not about the certificate.
#[derive(Debug)]
struct AnyCertificate;

impl rustls::client::danger::ServerCertVerifier for AnyCertificate {
    fn verify_server_cert(
        &self,
        _end_entity: &rustls::pki_types::CertificateDer<'_>,
        _intermediates: &[rustls::pki_types::CertificateDer<'_>],
        _server_name: &rustls::pki_types::ServerName<'_>,
        _ocsp_response: &[u8],
        _now: rustls::pki_types::UnixTime,
    ) -> Result<rustls::client::danger::ServerCertVerified, rustls::Error> {
        Ok(rustls::client::danger::ServerCertVerified::assertion())
    }

    fn verify_tls12_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls12_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn verify_tls13_signature(
        &self,
        message: &[u8],
        cert: &rustls::pki_types::CertificateDer<'_>,
        dss: &rustls::DigitallySignedStruct,
    ) -> Result<rustls::client::danger::HandshakeSignatureValid, rustls::Error> {
        rustls::crypto::verify_tls13_signature(
            message,
            cert,
            dss,
            &rustls::crypto::ring::default_provider().signature_verification_algorithms,
        )
    }

    fn supported_verify_schemes(&self) -> Vec<rustls::SignatureScheme> {
        rustls::crypto::ring::default_provider()
            .signature_verification_algorithms
            .supported_schemes()
    }
}

/// A TLS client that reads slowly fills the socket, so TLS keeps part of what the proxy wrote
/// for later; the end of every result must still come without the client asking again.
#[tokio::test(flavor = "multi_thread", worker_threads = 2)]
async fn a_slow_tls_client_gets_each_result_to_its_end() {
    use shardwire::backend::BackendConn;
    use shardwire::config::Endpoint;
    use shardwire::tls::{ShardTls, ShardTlsSettings, SslMode};
    use std::time::Duration;
    use tokio::io::AsyncWriteExt;

    let dir = tempfile::tempdir().unwrap();
    let (cert, key) = self_signed_certificate(dir.path());
    let proxy = TestProxy::start_with(|c| c.tls = Some(TlsConfig { cert, key }));
    // The proxy's own shard connection makes a fine client that reads only when asked.
    let tls = ShardTls::new(ShardTlsSettings {
        mode: SslMode::Require,
        ..ShardTlsSettings::default()
    })
    .unwrap();
    let endpoint = Endpoint {
        host: proxy.addr.ip().to_string(),
        port: proxy.addr.port(),
        user: APP.into(),
        password: Some(APP.into()),
        dbname: APP.into(),
        tls,
    };
    let mut conn = BackendConn::connect(&endpoint, true, Duration::from_secs(10))
        .await
        .unwrap();
    assert!(conn.stream.is_tls());
    for round in 0..8 {
        let mut query = bytes::BytesMut::new();
        shardwire::protocol::query(
            &mut query,
            "SELECT i, repeat('x', 3000) FROM generate_series(1, 3000) i",
        );
        conn.stream.write_all(&query).await.unwrap();
        let mut rows = 0;
        loop {
            let frame = tokio::time::timeout(Duration::from_secs(20), conn.read_frame())
                .await
                .unwrap_or_else(|_| panic!("round {round}: no more after {rows} rows"))
                .unwrap();
            match frame.tag {
                b'D' => {
                    rows += 1;
                    if rows % 8 == 0 {
                        tokio::time::sleep(Duration::from_millis(1)).await;
                    }
                }
                b'E' => panic!("round {round}: {:?}", frame.body()),
                b'Z' => break,
                _ => {}
            }
        }
        assert_eq!(rows, 3000, "round {round}");
    }
}
