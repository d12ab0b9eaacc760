//! What the proxy logs about a session: its events carry the session's span (and so its id),
//! and neither a password nor a SASL message ever reaches the log, whatever the level.

mod common;

use std::io::Write;
use std::sync::{Arc, Mutex};

use common::{TestProxy, APP};

const SECRET: &str = "pw-never-logged-4f1c9e";
/// A role's password in SQL the client sends: the statement's text must not reach the log.
const ROLE_SECRET: &str = "role-pw-never-logged-77ab";

/// Collects everything the global subscriber writes.
#[derive(Clone, Default)]
struct Captured(Arc<Mutex<Vec<u8>>>);

impl Write for Captured {
    fn write(&mut self, buf: &[u8]) -> std::io::Result<usize> {
        self.0.lock().unwrap().extend_from_slice(buf);
        Ok(buf.len())
    }
    fn flush(&mut self) -> std::io::Result<()> {
        Ok(())
    }
}

#[test]
fn session_events_carry_the_session_id_and_never_a_password() {
    let captured = Captured::default();
    let writer = captured.clone();
    tracing::subscriber::set_global_default(
        tracing_subscriber::fmt()
            .with_env_filter("trace")
            .with_ansi(false)
            .with_writer(move || writer.clone())
            .finish(),
    )
    .expect("the only subscriber of this test binary");
    let proxy = TestProxy::start_with(|c| c.users[0].password = SECRET.into());
    let conn = |password: &str| {
        format!(
            "host={} port={} user={APP} password={password} dbname={APP} sslmode=disable",
            proxy.addr.ip(),
            proxy.addr.port()
        )
    };
    let ok = common::psql(
        &conn(SECRET),
        &[],
        &format!(
            "SELECT 1;\nSHOW POOLS;\nSHOW SHARDS;\n\
             CREATE ROLE sw_logged_role PASSWORD '{ROLE_SECRET}';\n\
             ALTER ROLE sw_logged_role PASSWORD '{ROLE_SECRET}';\n\
             CREATE ROLE sw_logged_role PASSWORD '{ROLE_SECRET}';\n\
             DROP ROLE sw_logged_role;\n"
        ),
    );
    assert!(
        ok.status.success(),
        "{}",
        String::from_utf8_lossy(&ok.stderr)
    );
    // The shards' own passwords are in their URLs; SHOW output and errors leave them out.
    let shard_url: tokio_postgres::Config = common::shards().url(0).parse().unwrap();
    let shard_password = String::from_utf8_lossy(shard_url.get_password().unwrap()).into_owned();
    let shown =
        String::from_utf8_lossy(&ok.stdout).into_owned() + &String::from_utf8_lossy(&ok.stderr);
    assert!(shown.contains("s1"), "{shown}");
    assert!(
        !shown.contains(&shard_password),
        "a shard's password was shown: {shown}"
    );
    assert!(
        !shown.contains(ROLE_SECRET),
        "an error echoed a password: {shown}"
    );
    let refused = common::psql(&conn("wrong-password"), &[], "SELECT 1;\n");
    assert!(!refused.status.success());
    drop(proxy);

    let logs = String::from_utf8(captured.0.lock().unwrap().clone()).unwrap();
    let authenticated: Vec<&str> = logs
        .lines()
        .filter(|l| l.contains("client authenticated"))
        .collect();
    assert_eq!(authenticated.len(), 1, "{logs}");
    assert!(authenticated[0].contains("session{id="), "{logs}");
    assert!(!logs.contains(SECRET), "the password reached the log");
    assert!(
        !logs.contains(ROLE_SECRET),
        "a role's password in a statement reached the log"
    );
    assert!(
        !logs.contains(&shard_password),
        "a shard's password reached the log"
    );
    assert!(
        !logs.contains("wrong-password"),
        "a password reached the log"
    );
    // SCRAM messages: the client-first message starts "n,,n=", the client-final one "c=biws".
    assert!(
        !logs.contains("n,,n=") && !logs.contains("c=biws"),
        "a SASL message reached the log"
    );
}
