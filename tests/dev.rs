//! `shardwire dev` as a user runs it: the real binary, real clusters, real signals.

mod common;

use std::io::{BufRead, BufReader};
use std::net::{SocketAddr, TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, ExitStatus, Stdio};
use std::sync::mpsc::{channel, Receiver, Sender};
use std::time::{Duration, Instant};

use shardwire::config::Config;

const TIMEOUT: Duration = Duration::from_secs(90);

/// `shardwire dev` gives fresh clusters the first free ports from 55431 on: two runs starting at
/// once could both pick the same. The tests that run it take turns.
static ONE_DEV_AT_A_TIME: tokio::sync::Mutex<()> = tokio::sync::Mutex::const_new(());

struct DevProcess {
    child: Child,
    /// Lines of stdout and stderr as they come.
    output: Receiver<String>,
    seen: Vec<String>,
}

fn forward_lines(stream: impl std::io::Read + Send + 'static, tx: Sender<String>) {
    std::thread::spawn(move || {
        for line in BufReader::new(stream).lines().map_while(Result::ok) {
            eprintln!("[dev] {line}");
            if tx.send(line).is_err() {
                break;
            }
        }
    });
}

impl DevProcess {
    fn spawn(dir: &Path, args: &[&str]) -> DevProcess {
        let mut child = Command::new(env!("CARGO_BIN_EXE_shardwire"))
            .arg("dev")
            .arg("--dir")
            .arg(dir)
            .args(args)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::piped())
            .stderr(Stdio::piped())
            .spawn()
            .unwrap();
        let (tx, rx) = channel();
        let stdout = child.stdout.take().unwrap();
        let stderr = child.stderr.take().unwrap();
        forward_lines(stdout, tx.clone());
        forward_lines(stderr, tx);
        DevProcess {
            child,
            output: rx,
            seen: Vec::new(),
        }
    }

    fn wait_for_line(&mut self, needle: &str) {
        let deadline = Instant::now() + TIMEOUT;
        while Instant::now() < deadline {
            match self.output.recv_timeout(Duration::from_millis(200)) {
                Ok(line) => {
                    let found = line.contains(needle);
                    self.seen.push(line);
                    if found {
                        return;
                    }
                }
                Err(_) => {
                    if let Some(status) = self.child.try_wait().unwrap() {
                        panic!("dev exited ({status}) before {needle:?}: {:#?}", self.seen);
                    }
                }
            }
        }
        panic!("no {needle:?} within {TIMEOUT:?}: {:#?}", self.seen);
    }

    fn signal(&self, name: &str) {
        // The shell's builtin kill: /bin/kill (procps) is missing on minimal systems.
        let ok = Command::new("sh")
            .args(["-c", "kill -s \"$1\" \"$2\"", "sh", name])
            .arg(self.child.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -s {name}");
    }

    fn wait(&mut self) -> (ExitStatus, String) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            if let Some(status) = self.child.try_wait().unwrap() {
                // The reader threads end at EOF; collect what they still have.
                while let Ok(line) = self.output.recv_timeout(Duration::from_secs(5)) {
                    self.seen.push(line);
                }
                return (status, self.seen.join("\n"));
            }
            assert!(
                Instant::now() < deadline,
                "dev did not exit: {:#?}",
                self.seen
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for DevProcess {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            self.signal("TERM");
            let _ = self.child.wait();
        }
    }
}

/// Processes whose working directory or command line is inside `dir`: a postmaster has its data
/// directory on its command line, and every PostgreSQL process works in its data directory.
fn processes_in(dir: &Path) -> Vec<String> {
    let dir = dir.canonicalize().unwrap_or_else(|_| dir.to_path_buf());
    let needle = dir.to_string_lossy().into_owned();
    let mut found = Vec::new();
    for entry in std::fs::read_dir("/proc").unwrap().flatten() {
        let proc_dir = entry.path();
        let Some(pid) = entry
            .file_name()
            .to_str()
            .and_then(|n| n.parse::<u32>().ok())
        else {
            continue;
        };
        let cwd = std::fs::read_link(proc_dir.join("cwd")).unwrap_or_default();
        let cmdline = std::fs::read(proc_dir.join("cmdline"))
            .map(|b| String::from_utf8_lossy(&b).replace('\0', " "))
            .unwrap_or_default();
        if cwd.starts_with(&dir) || cmdline.contains(&needle) {
            found.push(format!("{pid}: {cmdline}"));
        }
    }
    found
}

fn assert_nothing_left(dir: &Path) {
    assert_eq!(running_clusters(dir), Vec::<PathBuf>::new());
    assert_eq!(processes_in(dir), Vec::<String>::new());
}

fn running_clusters(dir: &Path) -> Vec<PathBuf> {
    (1..=4)
        .map(|i| dir.join(format!("s{i}")))
        .filter(|d| d.join("postmaster.pid").exists())
        .collect()
}

async fn client(url: &str) -> tokio_postgres::Client {
    let (client, conn) = tokio_postgres::connect(url, tokio_postgres::NoTls)
        .await
        .unwrap();
    tokio::spawn(conn);
    client
}

async fn query_one_string(url: &str, sql: &str) -> String {
    client(url).await.query_one(sql, &[]).await.unwrap().get(0)
}

fn proxy_port() -> u16 {
    shardwire::pgcluster::free_port().unwrap()
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_creates_reuses_and_always_stops_its_clusters() {
    let _turn = ONE_DEV_AT_A_TIME.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let config_path = dir.join("shardwire.toml");

    // First run: two fresh clusters with database app, a config that points at them, a listener.
    let port = proxy_port();
    let mut dev = DevProcess::spawn(&dir, &["--shards", "2", "--port", &port.to_string()]);
    dev.wait_for_line("connect with: psql");
    let first = Config::load(&config_path).unwrap();
    assert_eq!(
        first.listen_addr(),
        SocketAddr::from(([127, 0, 0, 1], port))
    );
    assert_eq!(first.proxy.database, "app");
    assert_eq!(first.users[0].name, "app");
    let names: Vec<&str> = first.shards.iter().map(|s| s.name.as_str()).collect();
    assert_eq!(names, ["s1", "s2"]);
    for shard in &first.shards {
        let db = query_one_string(&shard.url, "SELECT current_database()::text").await;
        assert_eq!(db, "app");
        let prepared = query_one_string(
            &shard.url,
            "SELECT current_setting('max_prepared_transactions')",
        )
        .await;
        assert!(prepared.parse::<u32>().unwrap() > 0);
    }
    client(&first.shards[0].url)
        .await
        .batch_execute("CREATE TABLE dev_kept (id int)")
        .await
        .unwrap();
    TcpStream::connect(first.listen_addr()).expect("the proxy listens");
    // What the startup banner tells a user to do: psql to the proxy, as app/app.
    let conn =
        format!("host=127.0.0.1 port={port} user=app password=app dbname=app sslmode=disable");
    let script = "CREATE TABLE dev_smoke (id int PRIMARY KEY, name text);\n\
                  INSERT INTO dev_smoke VALUES (1, 'one'), (2, 'two');\n\
                  SELECT id, name FROM dev_smoke ORDER BY id;\n\
                  DROP TABLE dev_smoke;\n";
    let out = tokio::task::spawn_blocking(move || common::psql(&conn, &["-A", "-t"], script))
        .await
        .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "CREATE TABLE\nINSERT 0 2\n1|one\n2|two\nDROP TABLE\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    // The scan finds the running servers, so finding none later means something.
    assert!(processes_in(&dir).len() >= 2, "{:?}", processes_in(&dir));
    dev.signal("INT");
    let (status, log) = dev.wait();
    assert!(status.success(), "{status}: {log}");
    assert_nothing_left(&dir);

    // A different shard count is refused rather than silently dropping or adding shards.
    let (status, log) = DevProcess::spawn(&dir, &["--shards", "3"]).wait();
    assert!(!status.success());
    assert!(log.contains("--shards 2"), "{log}");
    assert_eq!(running_clusters(&dir), Vec::<PathBuf>::new());

    // Second run: same clusters, same ports, same data; SIGTERM stops everything too.
    let mut dev = DevProcess::spawn(&dir, &["--port", &port.to_string()]);
    dev.wait_for_line("connect with: psql");
    let second = Config::load(&config_path).unwrap();
    let urls = |c: &Config| c.shards.iter().map(|s| s.url.clone()).collect::<Vec<_>>();
    assert_eq!(urls(&second), urls(&first));
    let kept = query_one_string(
        &second.shards[0].url,
        "SELECT count(*)::text FROM pg_tables WHERE tablename = 'dev_kept'",
    )
    .await;
    assert_eq!(kept, "1");
    dev.signal("TERM");
    let (status, log) = dev.wait();
    assert!(status.success(), "{status}: {log}");
    assert_nothing_left(&dir);

    // Startup failing half-way (s2's port is taken) stops s1, which had already started.
    let s2_port = second.shard_endpoint(1).port;
    let blocker = TcpListener::bind(("127.0.0.1", s2_port)).unwrap();
    let (status, log) = DevProcess::spawn(&dir, &[]).wait();
    assert!(!status.success(), "{log}");
    assert_eq!(log.matches("starting cluster").count(), 2, "{log}");
    assert_eq!(running_clusters(&dir), Vec::<PathBuf>::new());
    drop(blocker);

    // The proxy failing to start stops every cluster.
    let blocker = TcpListener::bind("127.0.0.1:0").unwrap();
    let taken = blocker.local_addr().unwrap().port().to_string();
    let (status, log) = DevProcess::spawn(&dir, &["--port", &taken]).wait();
    assert!(!status.success(), "{log}");
    assert!(log.contains(&taken), "{log}");
    assert_eq!(running_clusters(&dir), Vec::<PathBuf>::new());
}

/// `shardwire dev 2>&1 | tee LOG` started from a shell in a process group of its own, as a
/// terminal runs a pipeline; a signal to the group is what Ctrl-C (SIGINT) or closing the
/// terminal (SIGHUP) sends: the pipe's reader goes at the same moment as the proxy is told to
/// stop.
struct DevPipeline {
    shell: Child,
    log: PathBuf,
}

impl DevPipeline {
    fn spawn(dir: &Path, port: u16) -> DevPipeline {
        use std::os::unix::process::CommandExt;
        let log = dir.with_extension("log");
        // The last run's log would answer wait_for_line before tee starts this one's.
        let _ = std::fs::remove_file(&log);
        let shell = Command::new("sh")
            .args([
                "-c",
                "\"$0\" dev --dir \"$1\" --shards 2 --port \"$2\" 2>&1 | tee \"$3\"",
                env!("CARGO_BIN_EXE_shardwire"),
            ])
            .arg(dir)
            .arg(port.to_string())
            .arg(&log)
            .env("NO_COLOR", "1")
            .stdin(Stdio::null())
            .stdout(Stdio::null())
            .process_group(0)
            .spawn()
            .unwrap();
        DevPipeline { shell, log }
    }

    fn wait_for_line(&mut self, needle: &str) {
        let deadline = Instant::now() + TIMEOUT;
        loop {
            let log = std::fs::read_to_string(&self.log).unwrap_or_default();
            if log.contains(needle) {
                return;
            }
            assert!(Instant::now() < deadline, "no {needle:?}: {log}");
            assert!(
                self.shell.try_wait().unwrap().is_none(),
                "the pipeline ended: {log}"
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }

    /// Signals the whole process group, as the terminal does.
    fn signal_group(&self, name: &str) {
        let ok = Command::new("sh")
            .args(["-c", "kill -s \"$1\" -- \"-$2\"", "sh", name])
            .arg(self.shell.id().to_string())
            .status()
            .unwrap()
            .success();
        assert!(ok, "kill -s {name} of the group");
    }

    /// Waits until no process of the pipeline is left (the proxy may outlive the shell).
    fn wait_until_gone(&mut self, dir: &Path) {
        let _ = self.shell.wait();
        let deadline = Instant::now() + TIMEOUT;
        while !processes_in(dir).is_empty() || !running_clusters(dir).is_empty() {
            assert!(
                Instant::now() < deadline,
                "left running: {:?} {:?}\n{}",
                processes_in(dir),
                running_clusters(dir),
                std::fs::read_to_string(&self.log).unwrap_or_default()
            );
            std::thread::sleep(Duration::from_millis(200));
        }
    }
}

#[tokio::test(flavor = "multi_thread")]
async fn dev_stops_its_clusters_when_its_pipe_or_terminal_goes_and_adopts_orphans() {
    let _turn = ONE_DEV_AT_A_TIME.lock().await;
    let tmp = tempfile::tempdir().unwrap();
    let dir = tmp.path().join("dev");
    let port = proxy_port();

    // `| tee` then Ctrl-C, then the same with the terminal closed.
    for signal in ["INT", "HUP"] {
        let mut pipeline = DevPipeline::spawn(&dir, port);
        pipeline.wait_for_line("connect with: psql");
        assert!(
            running_clusters(&dir).len() == 2,
            "{:?}",
            running_clusters(&dir)
        );
        pipeline.signal_group(signal);
        pipeline.wait_until_gone(&dir);
        let log = std::fs::read_to_string(&pipeline.log).unwrap_or_default();
        assert_nothing_left(&dir);
        eprintln!("[{signal}] {log}");
    }

    // A run that is killed outright leaves its clusters running; the next run takes them over,
    // serves with them and stops them when it ends.
    let mut dev = DevProcess::spawn(&dir, &["--port", &port.to_string()]);
    dev.wait_for_line("connect with: psql");
    dev.signal("KILL");
    let _ = dev.wait();
    assert_eq!(running_clusters(&dir).len(), 2, "the orphans are there");
    let mut dev = DevProcess::spawn(&dir, &["--port", &port.to_string()]);
    dev.wait_for_line("connect with: psql");
    let conn =
        format!("host=127.0.0.1 port={port} user=app password=app dbname=app sslmode=disable");
    let out =
        tokio::task::spawn_blocking(move || common::psql(&conn, &["-A", "-t"], "SELECT 41 + 1;\n"))
            .await
            .unwrap();
    assert_eq!(
        String::from_utf8_lossy(&out.stdout),
        "42\n",
        "{}",
        String::from_utf8_lossy(&out.stderr)
    );
    dev.signal("INT");
    let (status, log) = dev.wait();
    assert!(status.success(), "{status}: {log}");
    assert_nothing_left(&dir);
}
