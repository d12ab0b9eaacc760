//! The real `shardwire` binary as a child process in front of the test binary's shards
//! ([`crate::common::shards`]): started on a configuration file of its own with short
//! `[transactions]` timings, its output in a file, killed with SIGKILL at will.

#![allow(dead_code)]

use std::fs::File;
use std::os::unix::process::ExitStatusExt;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use crate::common::{shards, APP};
use shardwire::failpoint::ENV_VAR;
use shardwire::pgcluster::free_port;
use tokio_postgres::{Client, NoTls};

/// The signal number Linux gives SIGKILL (`kill -l KILL`).
const SIGKILL: i32 = 9;
/// How long a proxy may take to start or to die.
const DEADLINE: Duration = Duration::from_secs(30);

/// The `shardwire` binary serving in front of [`shards()`], with its output in a file.
pub struct Proxy {
    child: Child,
    port: u16,
    log: PathBuf,
}

impl Proxy {
    /// Starts the binary on a configuration of its own in `dir`, with `failpoints` as
    /// `SHARDWIRE_FAILPOINTS`, and waits until it accepts clients.
    pub async fn start(dir: &Path, failpoints: Option<&str>) -> Proxy {
        Proxy::start_with(dir, failpoints, "").await
    }

    /// [`Proxy::start`] with `extra` TOML lines in its `[transactions]` section.
    pub async fn start_with(dir: &Path, failpoints: Option<&str>, extra: &str) -> Proxy {
        Proxy::start_on(free_port().expect("free port"), dir, failpoints, extra).await
    }

    /// A new process in place of `old` (which must have ended), on the same port, so clients
    /// reconnect to the same address.
    pub async fn restart(old: Proxy, dir: &Path, failpoints: Option<&str>, extra: &str) -> Proxy {
        let port = old.port;
        drop(old);
        Proxy::start_on(port, dir, failpoints, extra).await
    }

    async fn start_on(port: u16, dir: &Path, failpoints: Option<&str>, extra: &str) -> Proxy {
        let config = dir.join(format!("shardwire-{port}.toml"));
        std::fs::write(&config, config_text(port, extra)).expect("write config");
        let log = dir.join(format!("proxy-{port}.log"));
        let out = File::create(&log).expect("proxy log");
        let mut command = Command::new(env!("CARGO_BIN_EXE_shardwire"));
        command
            .arg("--config")
            .arg(&config)
            .env("RUST_LOG", "info")
            .env("NO_COLOR", "1")
            .env_remove(ENV_VAR)
            .stdin(Stdio::null())
            .stdout(out.try_clone().expect("log handle"))
            .stderr(out);
        if let Some(failpoints) = failpoints {
            command.env(ENV_VAR, failpoints);
        }
        let mut proxy = Proxy {
            child: command.spawn().expect("spawn shardwire"),
            port,
            log,
        };
        let started = Instant::now();
        while !proxy.output().contains("shardwire is accepting clients") {
            if let Some(status) = proxy.child.try_wait().expect("proxy status") {
                panic!("proxy exited ({status}) at start:\n{}", proxy.output());
            }
            assert!(
                started.elapsed() < DEADLINE,
                "proxy not ready:\n{}",
                proxy.output()
            );
            tokio::time::sleep(Duration::from_millis(50)).await;
        }
        proxy
    }

    pub fn output(&self) -> String {
        std::fs::read_to_string(&self.log).unwrap_or_default()
    }

    pub fn conn_string(&self) -> String {
        format!(
            "host=127.0.0.1 port={} user={APP} password={APP} dbname={APP} sslmode=disable",
            self.port
        )
    }

    pub async fn connect(&self) -> Client {
        let (client, conn) = tokio_postgres::connect(&self.conn_string(), NoTls)
            .await
            .unwrap_or_else(|e| panic!("connect to proxy: {e}\n{}", self.output()));
        tokio::spawn(conn);
        client
    }

    /// Waits for the process to end, which it must by SIGKILL: its fail point's or ours.
    pub async fn wait_killed(&mut self) {
        let started = Instant::now();
        let status = loop {
            if let Some(status) = self.child.try_wait().expect("proxy status") {
                break status;
            }
            assert!(
                started.elapsed() < DEADLINE,
                "proxy still running:\n{}",
                self.output()
            );
            tokio::time::sleep(Duration::from_millis(20)).await;
        };
        assert_eq!(
            status.signal(),
            Some(SIGKILL),
            "proxy ended with {status}, not by SIGKILL:\n{}",
            self.output()
        );
    }
}

impl Proxy {
    /// A line of the process's /proc status (`VmHWM`, `VmRSS`), in KiB.
    pub fn memory_kib(&self, field: &str) -> u64 {
        let status = std::fs::read_to_string(format!("/proc/{}/status", self.child.id()))
            .expect("the proxy's /proc status");
        status
            .lines()
            .find_map(|l| l.strip_prefix(field)?.strip_prefix(':'))
            .and_then(|v| v.trim().trim_end_matches("kB").trim().parse().ok())
            .unwrap_or_else(|| panic!("no {field} in /proc status"))
    }

    /// Sends the process `signal` (`STOP`, `CONT`, …) as `kill -<signal>` would.
    pub fn signal(&self, signal: &str) {
        let sent = Command::new("kill")
            .arg(format!("-{signal}"))
            .arg(self.child.id().to_string())
            .status()
            .expect("kill");
        assert!(sent.success(), "kill -{signal} failed");
    }

    /// Kills the process with SIGKILL, as `kill -9` would, and waits for it.
    pub async fn kill(&mut self) {
        let _ = self.child.kill();
        self.wait_killed().await;
    }
}

impl Drop for Proxy {
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

fn config_text(port: u16, extra: &str) -> String {
    let mut text = format!(
        "[proxy]\nlisten = \"127.0.0.1:{port}\"\ndatabase = \"{APP}\"\n\n\
         [[users]]\nname = \"{APP}\"\npassword = \"{APP}\"\n\n\
         [transactions]\nrecovery_interval_ms = 300\nrecovery_grace_ms = 2000\n\
         prepare_deadline_ms = 1000\nlease_ms = 1500\n{extra}\n\n\
         [moves]\nrecovery_interval_ms = 300\n"
    );
    for (i, url) in shards().urls.iter().enumerate() {
        text.push_str(&format!(
            "\n[[shards]]\nname = \"s{}\"\nurl = \"{url}\"\n",
            i + 1
        ));
    }
    text
}
