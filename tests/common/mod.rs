//! The harness every integration test uses: two real PostgreSQL shards per test binary, and
//! in-process proxies in front of them.
//!
//! - [`shards()`] starts the shards once per test binary: shard 0 requires SCRAM, shard 1 md5,
//!   so the proxy's backend authentication is exercised both ways. Each has database `app`.
//!   Tests in one binary share them and run in parallel: use table names of your own.
//! - [`TestProxy::start`] runs `shardwire::server::run` on its own thread and runtime, so plain
//!   `#[test]`s (psql) and `#[tokio::test]`s can both use it. Dropping it stops it.

// Every test binary compiles this module and uses a different part of it.
#![allow(dead_code)]

use std::io::Write;
use std::net::SocketAddr;
use std::path::Path;
use std::process::{Child, Command, Output, Stdio};
use std::sync::mpsc;
use std::sync::{Arc, OnceLock};
use std::thread::JoinHandle;
use std::time::Duration;

use shardwire::config::Config;
use shardwire::pgcluster::{free_port, ClusterOptions, HostAuth, LocalCluster, PgBinaries};
use shardwire::server::{self, Deps};
use tokio_postgres::NoTls;

pub mod raw;

/// The database on every shard, and the proxy's user, password and database.
pub const APP: &str = "app";

pub struct TestShards {
    /// `postgres://postgres:PASSWORD@127.0.0.1:PORT/app`, one per shard.
    pub urls: Vec<String>,
    pub clusters: Vec<LocalCluster>,
    /// Its stdin is never written; when this process ends, however it ends, the pipe closes and
    /// the watchdog stops the servers and removes their directory.
    _watchdog: Child,
}

static SHARDS: OnceLock<TestShards> = OnceLock::new();

/// How many shards [`shards()`] starts; a test binary that needs more than two calls
/// [`use_shards`] before its first use of them.
static SHARD_COUNT: std::sync::atomic::AtomicUsize = std::sync::atomic::AtomicUsize::new(2);

/// The shards of this test binary, started on first use.
pub fn shards() -> &'static TestShards {
    SHARDS.get_or_init(start_shards)
}

/// Asks for `n` shards (alternately requiring SCRAM and md5); call it in every test of the
/// binary, before [`shards()`] or [`TestProxy::start`].
pub fn use_shards(n: usize) {
    SHARD_COUNT.store(n, std::sync::atomic::Ordering::SeqCst);
}

/// Every shard logs every statement from now on.
pub async fn log_all_statements() {
    for i in 0..shards().clusters.len() {
        let c = shards().connect(i).await;
        c.batch_execute("ALTER SYSTEM SET log_statement = 'all'")
            .await
            .expect("log_statement");
        c.batch_execute("SELECT pg_reload_conf()")
            .await
            .expect("reload");
    }
    tokio::time::sleep(Duration::from_millis(500)).await;
}

/// The shards whose statement log mentions `marker`.
pub fn shards_that_ran(marker: &str) -> std::collections::BTreeSet<usize> {
    (0..shards().clusters.len())
        .filter(|&i| {
            std::fs::read_to_string(shards().clusters[i].log_file())
                .unwrap_or_default()
                .contains(marker)
        })
        .collect()
}

impl TestShards {
    pub fn url(&self, i: usize) -> String {
        self.urls[i].clone()
    }

    /// A direct connection to shard `i`, bypassing the proxy.
    pub async fn connect(&self, i: usize) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.urls[i], NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to shard {i}: {e}"));
        tokio::spawn(conn);
        client
    }
}

fn start_shards() -> TestShards {
    let root = tempfile::Builder::new()
        .prefix("shardwire-test-")
        .tempdir()
        .expect("temp dir")
        .keep();
    // Spawned before any server so that even a failed startup is cleaned up.
    let watchdog = spawn_watchdog(&root);
    let bins = PgBinaries::locate().unwrap_or_else(|e| panic!("{e}"));
    let count = SHARD_COUNT.load(std::sync::atomic::Ordering::SeqCst);
    let auths = (0..count).map(|i| {
        let password = format!("pw{i}");
        if i % 2 == 0 {
            HostAuth::Scram { password }
        } else {
            HostAuth::Md5 { password }
        }
    });
    let clusters: Vec<LocalCluster> = std::thread::scope(|s| {
        let starting: Vec<_> = auths
            .enumerate()
            .map(|(i, auth)| {
                let (bins, dir) = (&bins, root.join(format!("shard{i}")));
                s.spawn(move || start_shard(bins, &dir, auth))
            })
            .collect();
        starting
            .into_iter()
            .map(|h| h.join().expect("shard startup panicked"))
            .collect()
    });
    TestShards {
        urls: clusters.iter().map(|c| c.url(APP)).collect(),
        clusters,
        _watchdog: watchdog,
    }
}

fn start_shard(bins: &PgBinaries, dir: &Path, auth: HostAuth) -> LocalCluster {
    let options = ClusterOptions {
        auth,
        fast_unsafe: true,
        ..ClusterOptions::default()
    };
    // A free port can be taken by someone else before the server binds it; try another.
    let mut last_error = None;
    for _ in 0..3 {
        let port = free_port().expect("free port");
        let cluster = LocalCluster::init(bins.clone(), dir, port, options.clone())
            .unwrap_or_else(|e| panic!("{e}"));
        match cluster.start() {
            Ok(()) => {
                cluster
                    .create_database(APP)
                    .unwrap_or_else(|e| panic!("{e}"));
                return cluster;
            }
            Err(e) => last_error = Some(e),
        }
    }
    panic!("cannot start shard in {}: {:?}", dir.display(), last_error);
}

/// A process in its own process group (so a Ctrl-C of the test run does not kill it first) that
/// waits for our end of its stdin to close, then stops every server under `root` at once
/// (SIGQUIT is PostgreSQL's immediate shutdown) and removes `root`. It sweeps until it has twice
/// found no server, because a `pg_ctl start` we left running may still bring one up.
fn spawn_watchdog(root: &Path) -> Child {
    const SCRIPT: &str = r#"
        cat >/dev/null
        quiet=0
        rounds=0
        while [ "$quiet" -lt 2 ] && [ "$rounds" -lt 120 ]; do
            found=0
            for pidfile in "$1"/*/postmaster.pid; do
                [ -f "$pidfile" ] || continue
                found=1
                kill -QUIT "$(head -n 1 "$pidfile")" 2>/dev/null || rm -f "$pidfile"
            done
            if [ "$found" = 0 ]; then quiet=$((quiet + 1)); else quiet=0; fi
            rounds=$((rounds + 1))
            sleep 1
        done
        rm -rf "$1"
    "#;
    use std::os::unix::process::CommandExt;
    Command::new("sh")
        .args(["-c", SCRIPT, "shardwire-test-watchdog"])
        .arg(root)
        .stdin(Stdio::piped())
        .stdout(Stdio::null())
        .stderr(Stdio::null())
        .process_group(0)
        .spawn()
        .expect("spawn watchdog")
}

/// A proxy serving on 127.0.0.1 in front of [`shards()`].
pub struct TestProxy {
    pub addr: SocketAddr,
    pub config: Arc<Config>,
    shutdown: Option<tokio::sync::oneshot::Sender<()>>,
    finished: mpsc::Receiver<Result<(), String>>,
    thread: Option<JoinHandle<()>>,
}

impl TestProxy {
    pub fn start() -> TestProxy {
        TestProxy::start_with(|_| {})
    }

    /// Starts a proxy whose configuration `edit` may change first; the edited configuration must
    /// still validate. `proxy.listen` is replaced by the address actually bound.
    pub fn start_with(edit: impl FnOnce(&mut Config)) -> TestProxy {
        let listener = std::net::TcpListener::bind("127.0.0.1:0").expect("bind proxy listener");
        let addr = listener.local_addr().expect("local addr");
        let mut config = Config::parse(&base_config(addr, &shards().urls), "test config")
            .unwrap_or_else(|e| panic!("{e}"));
        edit(&mut config);
        config.proxy.listen = addr.to_string();
        let text = toml::to_string(&config).expect("config serializes");
        let config =
            Arc::new(Config::parse(&text, "edited test config").unwrap_or_else(|e| panic!("{e}")));

        let (shutdown_tx, shutdown_rx) = tokio::sync::oneshot::channel::<()>();
        let (finished_tx, finished) = mpsc::channel();
        let deps = Deps {
            config: config.clone(),
            failpoints: shardwire::failpoint::FailPoints::none(),
        };
        let thread = std::thread::Builder::new()
            .name(format!("test-proxy-{}", addr.port()))
            .spawn(move || {
                let result = serve_on(listener, shutdown_rx, deps);
                if let Err(e) = &result {
                    eprintln!("test proxy on {addr} failed: {e}");
                }
                let _ = finished_tx.send(result);
            })
            .expect("spawn proxy thread");
        TestProxy {
            addr,
            config,
            shutdown: Some(shutdown_tx),
            finished,
            thread: Some(thread),
        }
    }

    /// libpq key=value connection string for user app.
    pub fn conn_string(&self) -> String {
        format!(
            "host={} port={} user={APP} password={APP} dbname={APP} sslmode=disable",
            self.addr.ip(),
            self.addr.port()
        )
    }

    pub async fn connect(&self) -> tokio_postgres::Client {
        let (client, conn) = tokio_postgres::connect(&self.conn_string(), NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to proxy {}: {e}", self.addr));
        tokio::spawn(conn);
        client
    }

    /// Runs `script` through psql against the proxy; errors do not stop the script.
    pub fn psql(&self, script: &str) -> Output {
        psql(&self.conn_string(), &[], script)
    }
}

/// Runs `script` through psql (`-X`, errors do not stop the script) against `conn`, a libpq
/// connection string or URL, with `extra_args` before the connection argument. The client
/// encoding is fixed so output does not depend on the caller's locale.
pub fn psql(conn: &str, extra_args: &[&str], script: &str) -> Output {
    let bins = PgBinaries::locate().unwrap_or_else(|e| panic!("{e}"));
    let mut child = Command::new(&bins.psql)
        .args(["-X", "-v", "ON_ERROR_STOP=0", "-f", "-"])
        .args(extra_args)
        .arg(conn)
        .env("PGCONNECT_TIMEOUT", "10")
        .env("PGCLIENTENCODING", "UTF8")
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("spawn psql");
    let mut stdin = child.stdin.take().expect("piped stdin");
    // A writer thread, so a large script cannot deadlock against psql's full output pipe.
    let script = script.to_string();
    let writer = std::thread::spawn(move || stdin.write_all(script.as_bytes()));
    let output = child.wait_with_output().expect("psql output");
    let written = writer.join().expect("psql stdin writer");
    // A psql that could not connect exits without reading its script.
    if output.status.success() {
        written.expect("write psql script");
    }
    output
}

impl Drop for TestProxy {
    fn drop(&mut self) {
        if let Some(tx) = self.shutdown.take() {
            let _ = tx.send(());
        }
        // A proxy that waits for its clients to leave would wait forever if those clients live on
        // this (now blocked) thread's runtime; give up waiting rather than hang the test.
        let result = match self.finished.recv_timeout(Duration::from_secs(20)) {
            Ok(result) => {
                if let Some(thread) = self.thread.take() {
                    let _ = thread.join();
                }
                result
            }
            Err(_) => Err("did not stop within 20 s of shutdown".into()),
        };
        if let Err(e) = result {
            if !std::thread::panicking() {
                panic!("test proxy on {}: {e}", self.addr);
            }
        }
    }
}

fn serve_on(
    listener: std::net::TcpListener,
    shutdown: tokio::sync::oneshot::Receiver<()>,
    deps: Deps,
) -> Result<(), String> {
    // The runtime production builds for this configuration (one thread by default).
    let runtime = shardwire::server::runtime(deps.config.proxy.workers)
        .map_err(|e| format!("runtime: {e}"))?;
    runtime.block_on(async move {
        listener
            .set_nonblocking(true)
            .map_err(|e| format!("listener: {e}"))?;
        let listener =
            tokio::net::TcpListener::from_std(listener).map_err(|e| format!("listener: {e}"))?;
        server::run(
            listener,
            async {
                let _ = shutdown.await;
            },
            deps,
        )
        .await
        .map_err(|e| e.to_string())
    })
}

fn base_config(addr: SocketAddr, shard_urls: &[String]) -> String {
    let mut text = format!(
        "[proxy]\nlisten = \"{addr}\"\ndatabase = \"{APP}\"\n\n\
         [[users]]\nname = \"{APP}\"\npassword = \"{APP}\"\n"
    );
    for (i, url) in shard_urls.iter().enumerate() {
        text.push_str(&format!(
            "\n[[shards]]\nname = \"s{}\"\nurl = \"{url}\"\n",
            i + 1
        ));
    }
    text
}

/// A cluster of a test's own (a catalog apart from the shards, or one it may stop); the
/// harness's watchdog removes it too.
pub struct OwnCluster(pub LocalCluster);

impl OwnCluster {
    pub fn start(name: &str) -> OwnCluster {
        let root: std::path::PathBuf = shards().clusters[0]
            .dir()
            .parent()
            .expect("harness root")
            .to_path_buf();
        let bins = PgBinaries::locate().unwrap_or_else(|e| panic!("{e}"));
        let options = ClusterOptions {
            fast_unsafe: true,
            ..ClusterOptions::default()
        };
        let port = free_port().expect("free port");
        let cluster = LocalCluster::init(bins, &root.join(name), port, options)
            .unwrap_or_else(|e| panic!("{e}"));
        cluster.start().unwrap_or_else(|e| panic!("{e}"));
        cluster
            .create_database(APP)
            .unwrap_or_else(|e| panic!("{e}"));
        OwnCluster(cluster)
    }

    pub fn url(&self) -> String {
        self.0.url(APP)
    }
}

impl Drop for OwnCluster {
    fn drop(&mut self) {
        let _ = self.0.stop(shardwire::pgcluster::StopMode::Immediate);
    }
}
