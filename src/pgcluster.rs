//! Local PostgreSQL clusters for `shardwire dev` and the tests: find the server binaries, `initdb`
//! a data directory, configure it, start and stop it with `pg_ctl`.
//!
//! initdb and postgres refuse to run as root, so when we are root every server command runs as the
//! `postgres` user through `runuser`, and the data directory belongs to that user.

use std::ffi::OsStr;
use std::fmt::Write as _;
use std::io::Write as _;
use std::os::unix::fs::{MetadataExt, PermissionsExt};
use std::os::unix::process::CommandExt;
use std::path::{Path, PathBuf};
use std::process::{Command, Output, Stdio};

/// The superuser every cluster is created with; shard URLs connect as this role.
pub const SUPERUSER: &str = "postgres";

/// PostgreSQL's limit on a Unix socket path (`sizeof(sun_path)` minus the terminating NUL).
const MAX_SOCKET_PATH: usize = 107;

#[derive(Debug, thiserror::Error)]
pub enum ClusterError {
    #[error(
        "PostgreSQL server binaries (initdb, pg_ctl) not found on PATH or under \
         /usr/lib/postgresql/*/bin; install them with `apt-get install postgresql`"
    )]
    BinariesNotFound,
    #[error("psql not found; install it with `apt-get install postgresql-client`")]
    PsqlNotFound,
    #[error(
        "running as root, but there is no `postgres` user to run the server as \
         (`apt-get install postgresql` creates it)"
    )]
    NoPostgresUser,
    #[error("{path}: {action}: {source}")]
    Io {
        path: PathBuf,
        action: &'static str,
        source: std::io::Error,
    },
    #[error("{path} exists and is not empty but holds no PostgreSQL cluster (no PG_VERSION)")]
    NotACluster { path: PathBuf },
    #[error(
        "socket path {path} is {len} bytes, PostgreSQL allows at most {MAX_SOCKET_PATH}; \
         use a shorter directory"
    )]
    SocketPathTooLong { path: PathBuf, len: usize },
    #[error("`{command}` failed ({status}): {output}")]
    Command {
        command: String,
        status: String,
        output: String,
    },
}

fn io_err(path: &Path, action: &'static str) -> impl FnOnce(std::io::Error) -> ClusterError {
    let path = path.to_path_buf();
    move |source| ClusterError::Io {
        path,
        action,
        source,
    }
}

/// Where the PostgreSQL programs we run live.
#[derive(Debug, Clone)]
pub struct PgBinaries {
    pub initdb: PathBuf,
    pub pg_ctl: PathBuf,
    pub psql: PathBuf,
}

impl PgBinaries {
    /// `initdb` and `pg_ctl` from PATH, else from the newest `/usr/lib/postgresql/<version>/bin`;
    /// psql from beside them, else from PATH.
    pub fn locate() -> Result<PgBinaries, ClusterError> {
        // PATH often holds symlinks (e.g. /usr/local/bin/initdb); their target directory is where
        // the matching pg_ctl and psql live.
        let bin_dir = find_on_path("initdb")
            .and_then(|initdb| std::fs::canonicalize(initdb).ok())
            .and_then(|initdb| initdb.parent().map(Path::to_path_buf))
            .filter(|dir| is_executable(&dir.join("pg_ctl")))
            .or_else(newest_packaged_bin_dir)
            .ok_or(ClusterError::BinariesNotFound)?;
        let psql = Some(bin_dir.join("psql"))
            .filter(|p| is_executable(p))
            .or_else(|| find_on_path("psql"))
            .ok_or(ClusterError::PsqlNotFound)?;
        Ok(PgBinaries {
            initdb: bin_dir.join("initdb"),
            pg_ctl: bin_dir.join("pg_ctl"),
            psql,
        })
    }
}

fn is_executable(path: &Path) -> bool {
    std::fs::metadata(path).is_ok_and(|m| m.is_file() && m.permissions().mode() & 0o111 != 0)
}

fn find_on_path(program: &str) -> Option<PathBuf> {
    let path = std::env::var_os("PATH")?;
    std::env::split_paths(&path)
        .map(|dir| dir.join(program))
        .find(|p| is_executable(p))
}

/// The highest `/usr/lib/postgresql/<version>/bin` holding initdb and pg_ctl (Debian's layout).
fn newest_packaged_bin_dir() -> Option<PathBuf> {
    let entries = std::fs::read_dir("/usr/lib/postgresql").ok()?;
    entries
        .filter_map(|e| e.ok())
        .filter_map(|e| {
            let name = e.file_name().into_string().ok()?;
            let version: Vec<u32> = name
                .split('.')
                .map(|part| part.parse().ok())
                .collect::<Option<_>>()?;
            let bin = e.path().join("bin");
            (is_executable(&bin.join("initdb")) && is_executable(&bin.join("pg_ctl")))
                .then_some((version, bin))
        })
        .max_by(|a, b| a.0.cmp(&b.0))
        .map(|(_, bin)| bin)
}

/// How clients on 127.0.0.1 authenticate as the superuser.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub enum HostAuth {
    #[default]
    Trust,
    Scram {
        password: String,
    },
    Md5 {
        password: String,
    },
}

impl HostAuth {
    fn hba_method(&self) -> &'static str {
        match self {
            HostAuth::Trust => "trust",
            HostAuth::Scram { .. } => "scram-sha-256",
            HostAuth::Md5 { .. } => "md5",
        }
    }

    fn password(&self) -> Option<&str> {
        match self {
            HostAuth::Trust => None,
            HostAuth::Scram { password } | HostAuth::Md5 { password } => Some(password),
        }
    }
}

#[derive(Debug, Clone, Default)]
pub struct ClusterOptions {
    pub auth: HostAuth,
    /// Turn off fsync and friends: fast, and a crash may corrupt the cluster. For tests only.
    pub fast_unsafe: bool,
    /// TLS for connections over TCP.
    pub tls: Option<ClusterTls>,
}

/// A server certificate for the cluster. Its files are copied into the data directory, owned
/// by the server's user, as PostgreSQL wants its key.
#[derive(Debug, Clone)]
pub struct ClusterTls {
    pub cert: PathBuf,
    pub key: PathBuf,
    /// When set, clients over TCP must present a certificate this authority signed, besides
    /// their password (`clientcert=verify-full`).
    pub client_ca: Option<PathBuf>,
    /// Refuse TCP connections without TLS.
    pub only: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum StopMode {
    /// Roll back open transactions, disconnect clients, shut down cleanly.
    Fast,
    /// Stop at once; the next start runs crash recovery.
    Immediate,
}

impl StopMode {
    fn as_arg(self) -> &'static str {
        match self {
            StopMode::Fast => "fast",
            StopMode::Immediate => "immediate",
        }
    }
}

/// Which OS user the server commands run as.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
enum RunAs {
    CurrentUser,
    /// We are root; the server runs as `postgres`.
    Postgres {
        uid: u32,
        gid: u32,
    },
}

/// One PostgreSQL cluster in a local data directory, listening on 127.0.0.1.
#[derive(Debug)]
pub struct LocalCluster {
    bins: PgBinaries,
    dir: PathBuf,
    port: u16,
    options: ClusterOptions,
    run_as: RunAs,
}

impl LocalCluster {
    /// Creates the cluster in `dir` unless one is already there, then (re)writes its settings
    /// and authentication rules so they match `port` and `options`.
    pub fn init(
        bins: PgBinaries,
        dir: &Path,
        port: u16,
        options: ClusterOptions,
    ) -> Result<LocalCluster, ClusterError> {
        std::fs::create_dir_all(dir).map_err(io_err(dir, "cannot create directory"))?;
        let dir = std::fs::canonicalize(dir).map_err(io_err(dir, "cannot resolve path"))?;
        let socket = dir.join(format!(".s.PGSQL.{port}"));
        let len = socket.as_os_str().len();
        if len > MAX_SOCKET_PATH {
            return Err(ClusterError::SocketPathTooLong { path: socket, len });
        }
        let run_as = run_as()?;
        if let RunAs::Postgres { uid, gid } = run_as {
            make_ancestors_traversable(&dir)?;
            std::os::unix::fs::chown(&dir, Some(uid), Some(gid))
                .map_err(io_err(&dir, "cannot chown to postgres"))?;
        }
        let cluster = LocalCluster {
            bins,
            dir,
            port,
            options,
            run_as,
        };
        if !cluster.dir.join("PG_VERSION").is_file() {
            cluster.initdb()?;
        }
        cluster.write_settings()?;
        Ok(cluster)
    }

    fn initdb(&self) -> Result<(), ClusterError> {
        let not_empty = std::fs::read_dir(&self.dir)
            .map_err(io_err(&self.dir, "cannot read directory"))?
            .next()
            .is_some();
        if not_empty {
            return Err(ClusterError::NotACluster {
                path: self.dir.clone(),
            });
        }
        let mut cmd = self.server_command(&self.bins.initdb);
        cmd.arg("-D")
            .arg(&self.dir)
            .args(["--username", SUPERUSER, "--encoding=UTF8", "--locale=C"])
            .args(["--auth-local=trust", "--auth-host=trust"]);
        run(cmd).map(drop)
    }

    /// Our settings live in their own file, included once from postgresql.conf, so a reused
    /// cluster can be reconfigured by rewriting that file.
    fn write_settings(&self) -> Result<(), ClusterError> {
        let mut conf = String::from(
            "# Written by shardwire; rewritten whenever shardwire sets this cluster up.\n",
        );
        let quoted_dir = conf_quote(&self.dir.to_string_lossy());
        let _ = writeln!(conf, "port = {}", self.port);
        let _ = writeln!(conf, "listen_addresses = '127.0.0.1'");
        let _ = writeln!(conf, "unix_socket_directories = {quoted_dir}");
        // Multi-shard writes use two-phase commit.
        let _ = writeln!(conf, "max_prepared_transactions = 64");
        let _ = writeln!(conf, "max_connections = 300");
        // Chunk moves copy a chunk by logical replication from its source shard.
        let _ = writeln!(conf, "wal_level = logical");
        let encryption = match self.options.auth {
            HostAuth::Md5 { .. } => "md5",
            HostAuth::Trust | HostAuth::Scram { .. } => "scram-sha-256",
        };
        let _ = writeln!(conf, "password_encryption = '{encryption}'");
        if self.options.fast_unsafe {
            conf.push_str("fsync = off\nsynchronous_commit = off\nfull_page_writes = off\n");
        }
        if let Some(tls) = &self.options.tls {
            self.copy_owned_file(&tls.cert, "server.crt")?;
            self.copy_owned_file(&tls.key, "server.key")?;
            conf.push_str("ssl = on\nssl_cert_file = 'server.crt'\nssl_key_file = 'server.key'\n");
            if let Some(ca) = &tls.client_ca {
                self.copy_owned_file(ca, "client_ca.crt")?;
                conf.push_str("ssl_ca_file = 'client_ca.crt'\n");
            }
        }
        self.write_owned_file("shardwire.conf", &conf)?;

        let main_conf = self.dir.join("postgresql.conf");
        let text =
            std::fs::read_to_string(&main_conf).map_err(io_err(&main_conf, "cannot read"))?;
        let include = "include_if_exists = 'shardwire.conf'";
        if !text.lines().any(|l| l.trim() == include) {
            self.write_owned_file("postgresql.conf", &format!("{text}\n{include}\n"))?;
        }

        // The Unix socket sits in the data directory, which only the server's user can enter.
        let method = self.options.auth.hba_method();
        let mut hba = String::from(
            "# Written by shardwire; rewritten whenever shardwire sets this cluster up.\n\
             local all all trust\n",
        );
        match &self.options.tls {
            None => {
                let _ = writeln!(hba, "host all all 127.0.0.1/32 {method}");
            }
            Some(tls) => {
                let client_cert = match tls.client_ca {
                    Some(_) => " clientcert=verify-full",
                    None => "",
                };
                let _ = writeln!(hba, "hostssl all all 127.0.0.1/32 {method}{client_cert}");
                if !tls.only {
                    let _ = writeln!(hba, "hostnossl all all 127.0.0.1/32 {method}");
                }
            }
        }
        self.write_owned_file("pg_hba.conf", &hba)
    }

    /// Copies `from` into the data directory as `name`, readable by the server's user alone.
    fn copy_owned_file(&self, from: &Path, name: &str) -> Result<(), ClusterError> {
        use std::os::unix::fs::PermissionsExt;
        let contents = std::fs::read_to_string(from).map_err(io_err(from, "cannot read"))?;
        self.write_owned_file(name, &contents)?;
        let path = self.dir.join(name);
        std::fs::set_permissions(&path, std::fs::Permissions::from_mode(0o600))
            .map_err(io_err(&path, "cannot restrict permissions"))
    }

    fn write_owned_file(&self, name: &str, contents: &str) -> Result<(), ClusterError> {
        let path = self.dir.join(name);
        std::fs::write(&path, contents).map_err(io_err(&path, "cannot write"))?;
        if let RunAs::Postgres { uid, gid } = self.run_as {
            std::os::unix::fs::chown(&path, Some(uid), Some(gid))
                .map_err(io_err(&path, "cannot chown to postgres"))?;
        }
        Ok(())
    }

    pub fn port(&self) -> u16 {
        self.port
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The server's log file.
    pub fn log_file(&self) -> PathBuf {
        self.dir.join("postgres.log")
    }

    /// `postgres://postgres[:password]@127.0.0.1:PORT/db`.
    pub fn url(&self, db: &str) -> String {
        let mut url = url::Url::parse("postgres://127.0.0.1").expect("static URL");
        let _ = url.set_username(SUPERUSER);
        let _ = url.set_password(self.options.auth.password());
        let _ = url.set_port(Some(self.port));
        url.set_path(db);
        url.to_string()
    }

    /// Whether a server runs on this data directory.
    pub fn is_running(&self) -> bool {
        let mut cmd = self.server_command(&self.bins.pg_ctl);
        cmd.arg("status").arg("-D").arg(&self.dir);
        cmd.output().is_ok_and(|o| o.status.success())
    }

    /// Starts the server and waits until it accepts connections; a server already running on
    /// this directory (left behind by an earlier run) is kept. Then sets the superuser's password
    /// for the configured authentication.
    pub fn start(&self) -> Result<(), ClusterError> {
        if !self.is_running() {
            let mut cmd = self.server_command(&self.bins.pg_ctl);
            cmd.arg("start")
                .arg("-D")
                .arg(&self.dir)
                .arg("-l")
                .arg(self.log_file())
                .args(["-w", "-t", "120"]);
            if let Err(e) = run(cmd) {
                return Err(self.with_log_tail(e));
            }
        }
        match self.options.auth.password() {
            Some(password) => self.psql(
                "postgres",
                &[("password", password)],
                "ALTER ROLE postgres PASSWORD :'password';",
            ),
            None => Ok(()),
        }
    }

    fn stop_command(&self, mode: StopMode) -> Command {
        let mut cmd = self.server_command(&self.bins.pg_ctl);
        cmd.arg("stop")
            .arg("-D")
            .arg(&self.dir)
            .args(["-m", mode.as_arg(), "-w", "-t", "120"]);
        cmd
    }

    /// Whether a server was started on this directory and has not shut down (its lock file
    /// exists). Cheaper than [`LocalCluster::is_running`], and also true while it starts.
    pub fn has_server(&self) -> bool {
        self.dir.join("postmaster.pid").exists()
    }

    /// Stops the server; nothing to do when it is not running.
    pub fn stop(&self, mode: StopMode) -> Result<(), ClusterError> {
        if !self.has_server() {
            return Ok(());
        }
        run(self.stop_command(mode)).map(drop)
    }

    /// Creates database `name` unless it exists.
    pub fn create_database(&self, name: &str) -> Result<(), ClusterError> {
        self.psql(
            "postgres",
            &[("db", name)],
            "SELECT format('CREATE DATABASE %I', :'db') \
             WHERE NOT EXISTS (SELECT FROM pg_database WHERE datname = :'db') \\gexec\n",
        )
    }

    /// Runs `script` through psql over the Unix socket; psql quotes the `vars` (`:'name'`,
    /// `:"name"`), so values never become SQL text.
    fn psql(&self, db: &str, vars: &[(&str, &str)], script: &str) -> Result<(), ClusterError> {
        let mut cmd = Command::new(&self.bins.psql);
        cmd.args(["-X", "-q", "-v", "ON_ERROR_STOP=1", "-h"])
            .arg(&self.dir)
            .args(["-p", &self.port.to_string(), "-U", SUPERUSER, "-d", db]);
        for (name, value) in vars {
            cmd.arg("-v").arg(format!("{name}={value}"));
        }
        cmd.args(["-f", "-"]);
        run_with_stdin(cmd, script).map(drop)
    }

    /// A command for a server program, as the `postgres` user when we are root. It gets its own
    /// process group so a Ctrl-C meant for us does not kill it half-way: we finish the step and
    /// then shut down in order.
    fn server_command(&self, program: &Path) -> Command {
        let mut cmd = match self.run_as {
            RunAs::CurrentUser => Command::new(program),
            RunAs::Postgres { .. } => {
                let mut c = Command::new("runuser");
                c.args(["-u", "postgres", "--"]).arg(program);
                c
            }
        };
        // The postgres user may not be able to enter our working directory.
        cmd.current_dir("/").process_group(0);
        cmd
    }

    fn with_log_tail(&self, e: ClusterError) -> ClusterError {
        let ClusterError::Command {
            command,
            status,
            output,
        } = e
        else {
            return e;
        };
        let log = std::fs::read_to_string(self.log_file()).unwrap_or_default();
        let lines: Vec<&str> = log.lines().collect();
        let tail = lines[lines.len().saturating_sub(15)..].join("\n");
        ClusterError::Command {
            command,
            status,
            output: format!(
                "{output}\nlast lines of {}:\n{tail}",
                self.log_file().display()
            ),
        }
    }
}

/// A port on 127.0.0.1 that was free a moment ago, below Linux's default ephemeral range
/// (32768–60999): a server stopped and started again on it (a shard-crash test) must not find
/// it taken by some outgoing connection's local port meanwhile.
pub fn free_port() -> std::io::Result<u16> {
    const LOW: u16 = 20_000;
    const SPAN: u16 = 12_000;
    let mut any = 0;
    for _ in 0..64 {
        // The kernel's pick is random and free; folded below the ephemeral range it is still
        // random, and checked free again.
        any = std::net::TcpListener::bind("127.0.0.1:0")?
            .local_addr()?
            .port();
        let low = LOW + any % SPAN;
        if std::net::TcpListener::bind(("127.0.0.1", low)).is_ok() {
            return Ok(low);
        }
    }
    Ok(any)
}

fn run_as() -> Result<RunAs, ClusterError> {
    // /proc/self belongs to the effective user of the process reading it.
    let me = std::fs::metadata("/proc/self").map_err(io_err(Path::new("/proc/self"), "stat"))?;
    if me.uid() != 0 {
        return Ok(RunAs::CurrentUser);
    }
    let id = |flag: &str| -> Result<u32, ClusterError> {
        let out = Command::new("id")
            .args([flag, "postgres"])
            .output()
            .map_err(io_err(Path::new("id"), "cannot run"))?;
        if !out.status.success() {
            return Err(ClusterError::NoPostgresUser);
        }
        String::from_utf8_lossy(&out.stdout)
            .trim()
            .parse()
            .map_err(|_| ClusterError::NoPostgresUser)
    };
    Ok(RunAs::Postgres {
        uid: id("-u")?,
        gid: id("-g")?,
    })
}

/// The postgres user must be able to walk down to its data directory (temp dirs are 0700).
fn make_ancestors_traversable(dir: &Path) -> Result<(), ClusterError> {
    for ancestor in dir.ancestors().skip(1) {
        let meta = std::fs::metadata(ancestor).map_err(io_err(ancestor, "stat"))?;
        let mode = meta.permissions().mode();
        if mode & 0o001 == 0 {
            tracing::info!(
                dir = %ancestor.display(),
                "adding o+x so the postgres user can reach its data directory"
            );
            std::fs::set_permissions(ancestor, std::fs::Permissions::from_mode(mode | 0o001))
                .map_err(io_err(ancestor, "cannot chmod o+x"))?;
        }
    }
    Ok(())
}

/// A string literal for postgresql.conf.
fn conf_quote(s: &str) -> String {
    format!("'{}'", s.replace('\'', "''"))
}

fn describe(cmd: &Command) -> String {
    std::iter::once(cmd.get_program())
        .chain(cmd.get_args())
        .map(OsStr::to_string_lossy)
        .collect::<Vec<_>>()
        .join(" ")
}

fn check(cmd: &Command, out: std::io::Result<Output>) -> Result<Output, ClusterError> {
    let command = describe(cmd);
    let out = out.map_err(|e| ClusterError::Command {
        command: command.clone(),
        status: "could not start".into(),
        output: e.to_string(),
    })?;
    if out.status.success() {
        return Ok(out);
    }
    let mut output = String::from_utf8_lossy(&out.stderr).trim().to_string();
    let stdout = String::from_utf8_lossy(&out.stdout);
    if !stdout.trim().is_empty() {
        output = format!("{output}\n{}", stdout.trim());
    }
    Err(ClusterError::Command {
        command,
        status: out.status.to_string(),
        output,
    })
}

fn run(mut cmd: Command) -> Result<Output, ClusterError> {
    cmd.stdin(Stdio::null());
    let out = cmd.output();
    check(&cmd, out)
}

fn run_with_stdin(mut cmd: Command, input: &str) -> Result<Output, ClusterError> {
    cmd.stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped());
    let out = cmd.spawn().and_then(|mut child| {
        let written = child
            .stdin
            .take()
            .expect("stdin is piped")
            .write_all(input.as_bytes());
        let out = child.wait_with_output()?;
        written.map(|()| out)
    });
    check(&cmd, out)
}
