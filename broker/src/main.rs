//! `ringlog`: the broker and its command-line tools.

use std::path::PathBuf;
use std::process::ExitCode;

use broker::BrokerConfig;
use clap::{Parser, Subcommand};

#[derive(Parser)]
#[command(
    name = "ringlog",
    version,
    about = "A Kafka-compatible, thread-per-core log broker"
)]
struct Cli {
    #[command(subcommand)]
    command: Command,
}

#[derive(Subcommand)]
enum Command {
    /// Run a node (defaults: 127.0.0.1:9092, data under ./data, one shard per CPU).
    Serve {
        /// A properties file with Kafka's configuration names.
        #[arg(long)]
        config: Option<PathBuf>,
        /// Overrides one setting, e.g. --set log.dirs=/var/lib/ringlog (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
        /// Shards (cores) to run; defaults to every online CPU.
        #[arg(long)]
        cores: Option<usize>,
    },
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve { config, set, cores } => BrokerConfig::load(config.as_deref(), &set)
            .map_err(anyhow::Error::from)
            .and_then(|config| broker::server::run(config, cores)),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ringlog: {error:#}");
            ExitCode::FAILURE
        }
    }
}
