use std::path::PathBuf;
use std::process::ExitCode;

use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(name = "shardwire", version, about = "A PostgreSQL-wire-compatible sharding proxy")]
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
}

fn main() -> ExitCode {
    let cli = Cli::parse();
    shardwire::server::init_tracing();
    let runtime = tokio::runtime::Runtime::new().expect("tokio runtime");
    let result = match cli.command.unwrap_or(Command::Serve) {
        Command::Serve => {
            let path = cli
                .config
                .unwrap_or_else(|| PathBuf::from("config/shardwire.toml"));
            match shardwire::config::Config::load(&path) {
                Ok(config) => runtime.block_on(shardwire::server::serve(config)),
                Err(e) => Err(e.to_string()),
            }
        }
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
            eprintln!("shardwire: {e}");
            ExitCode::FAILURE
        }
    }
}
