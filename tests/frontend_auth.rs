//! Logging in to the proxy: SCRAM (the default) and md5, the SQLSTATEs of a refused login, and
//! TLS with a certificate made for the test.

mod common;

use std::path::{Path, PathBuf};
use std::process::{Command, Output};

use common::{psql, TestProxy, APP};
use shardwire::config::{AuthMethod, TlsConfig};
use tokio_postgres::error::SqlState;
use tokio_postgres::{Client, NoTls};

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
