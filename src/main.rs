use std::io::Write as _;
use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "shardwire",
    version,
    about = "A PostgreSQL-wire-compatible sharding proxy"
)]
struct Cli {
    /// Configuration file (for the default `serve` command).
    #[arg(long, global = true)]
    config: Option<PathBuf>,
    #[command(subcommand)]
    command: Option<Command>,
}

#[derive(Subcommand)]
enum Command {
    /// Run the proxy (the default).
    Serve,
    /// Validate a configuration file and print it resolved, passwords masked.
    CheckConfig,
    /// Create (or reuse) local PostgreSQL shards under DIR and serve them; Ctrl-C stops all.
    Dev {
        /// Number of shards [default: 4, or as many as DIR already has]
        #[arg(long, value_parser = clap::value_parser!(u32).range(1..=64))]
        shards: Option<u32>,
        /// Port of the proxy on 127.0.0.1 [default: 6432, or the one DIR's configuration has]
        #[arg(long)]
        port: Option<u16>,
        /// Where the clusters and the generated shardwire.toml live
        #[arg(long, default_value = shardwire::dev::DEFAULT_DIR)]
        dir: PathBuf,
    },
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    shardwire::server::init_tracing();
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let path = cli
                .config
                .unwrap_or_else(|| PathBuf::from("config/shardwire.toml"));
            match shardwire::config::Config::load(&path) {
                Ok(config) => {
                    runtime(config.proxy.workers).block_on(shardwire::server::serve(config))
                }
                Err(e) => Err(e.to_string()),
            }
        }
        Command::Dev { shards, port, dir } => runtime(None)
            .block_on(shardwire::dev::run(shardwire::dev::DevOptions {
                shards,
                port,
                dir,
            }))
            .map_err(|e| e.to_string()),
        Command::CheckConfig => {
            let path = cli
                .config
                .unwrap_or_else(|| PathBuf::from("config/shardwire.toml"));
            shardwire::config::Config::load(&path)
                .map(|c| print!("{}", c.to_masked_toml()))
                .map_err(|e| e.to_string())
        }
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(e) => {
            // Not eprintln!, which panics when standard error is a closed pipe.
            let _ = writeln!(std::io::stderr(), "shardwire: {e}");
            ExitCode::FAILURE
        }
    }
}

fn runtime(workers: Option<usize>) -> tokio::runtime::Runtime {
    shardwire::server::runtime(workers).expect("tokio runtime")
}
