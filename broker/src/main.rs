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
        /// Share the CPUs with other processes, as several nodes on one machine do: shards are
        /// not pinned to CPUs, the kernel places them (as Redpanda's --overprovisioned).
        #[arg(long)]
        overprovisioned: bool,
    },
    /// Format a log directory for a node of a cluster (like kafka-storage format); a single
    /// node formats its own on first start.
    Format {
        /// The cluster's id: a UUID in base64, as `ringlog random-uuid` prints.
        #[arg(long)]
        cluster_id: String,
        /// Leave a directory that is already formatted as it is, instead of failing.
        #[arg(long)]
        ignore_formatted: bool,
        /// A properties file with Kafka's configuration names (log.dirs, node.id).
        #[arg(long)]
        config: Option<PathBuf>,
        /// Overrides one setting, e.g. --set node.id=2 (repeatable).
        #[arg(long = "set", value_name = "KEY=VALUE")]
        set: Vec<String>,
    },
    /// Print a fresh cluster id (like kafka-storage random-uuid).
    RandomUuid,
    /// Create, list, describe, delete topics and add partitions (like kafka-topics).
    Topic(broker::cli::topic::TopicArgs),
    /// Elect leaders and move replicas (like kafka-leader-election and
    /// kafka-reassign-partitions).
    Partition(broker::cli::partition::PartitionArgs),
    /// Describe and change topic and broker settings at run time (like kafka-configs).
    Config(broker::cli::config::ConfigArgs),
    /// Produce lines from stdin as records (like kafka-console-producer).
    Produce(broker::cli::produce::ProduceArgs),
    /// Print records of a topic (like kafka-console-consumer).
    Consume(broker::cli::consume::ConsumeArgs),
    /// List, describe, delete consumer groups and reset their offsets (like
    /// kafka-consumer-groups).
    Group(broker::cli::group::GroupArgs),
    /// Show the cluster: its id, the active controller, every broker.
    Cluster(broker::cli::cluster::ClusterArgs),
}

fn main() -> ExitCode {
    tracing_subscriber::fmt()
        .with_env_filter(
            tracing_subscriber::EnvFilter::try_from_default_env()
                .unwrap_or_else(|_| tracing_subscriber::EnvFilter::new("info")),
        )
        .with_writer(std::io::stderr)
        // Colour only for a person at a terminal; a log file or a pipe gets plain text.
        .with_ansi(std::io::IsTerminal::is_terminal(&std::io::stderr()))
        .init();
    let cli = Cli::parse();
    let result = match cli.command {
        Command::Serve {
            config,
            set,
            cores,
            overprovisioned,
        } => BrokerConfig::load(config.as_deref(), &set)
            .map_err(anyhow::Error::from)
            .and_then(|config| broker::server::run(config, cores, !overprovisioned)),
        Command::Format {
            cluster_id,
            ignore_formatted,
            config,
            set,
        } => BrokerConfig::load(config.as_deref(), &set)
            .map_err(anyhow::Error::from)
            .and_then(|config| {
                let formatted = broker::meta_properties::format(
                    &config.log_dir,
                    &cluster_id,
                    config.node_id,
                    ignore_formatted,
                )?;
                println!(
                    "Formatted {} for node {} of cluster {} (directory id {})",
                    config.log_dir.display(),
                    formatted.node_id,
                    formatted.cluster_id,
                    formatted.directory_id
                );
                Ok(())
            }),
        Command::RandomUuid => {
            println!("{}", broker::meta_properties::random_id());
            Ok(())
        }
        Command::Cluster(args) => broker::cli::cluster::run(args, &mut std::io::stdout().lock()),
        Command::Topic(args) => broker::cli::topic::run(args, &mut std::io::stdout().lock()),
        Command::Config(args) => broker::cli::config::run(args, &mut std::io::stdout().lock()),
        Command::Partition(args) => {
            broker::cli::partition::run(args, &mut std::io::stdout().lock())
        }
        Command::Produce(args) => broker::cli::produce::run(args, std::io::stdin()).map(drop),
        Command::Consume(args) => {
            let mut out = std::io::BufWriter::new(std::io::stdout().lock());
            broker::cli::consume::run(args, &mut out)
                .map(|printed| eprintln!("Processed a total of {printed} messages"))
        }
        Command::Group(args) => broker::cli::group::run(
            args,
            &mut std::io::stdout().lock(),
            &mut std::io::stderr().lock(),
        ),
    };
    match result {
        Ok(()) => ExitCode::SUCCESS,
        Err(error) => {
            eprintln!("ringlog: {error:#}");
            ExitCode::FAILURE
        }
    }
}
