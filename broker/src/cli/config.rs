//! `ringlog config describe|alter`: kafka-configs over the Kafka protocol (DescribeConfigs,
//! IncrementalAlterConfigs), for a topic (`--topic`), a broker (`--broker N`) or the
//! cluster-wide broker defaults (`--broker-defaults`).
//!
//! Invariants: describe prints what the resource sets itself (a topic's own settings, a
//! broker's dynamic ones), or with `--all` every setting, each with its source and
//! synonyms as kafka-configs prints them; alter changes all the settings named or none.

use std::io::Write;

use anyhow::{bail, Result};
use clap::Subcommand;
use client::configs::{self, source_name, ConfigEntry, Resource};

use super::topic::parse_setting;
use super::Connect;

#[derive(clap::Args, Debug)]
pub struct ConfigArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(subcommand)]
    pub command: ConfigCommand,
}

/// Which resource: exactly one of the three.
#[derive(clap::Args, Debug)]
#[group(required = true, multiple = false)]
pub struct Target {
    #[arg(long)]
    topic: Option<String>,
    #[arg(long)]
    broker: Option<i32>,
    /// The cluster-wide dynamic defaults of every broker.
    #[arg(long)]
    broker_defaults: bool,
}

/// The source of what `resource` sets itself (kafka-configs' "dynamic configs"): a topic's
/// own settings, a broker's, or the cluster's dynamic defaults.
fn own_source(resource: &Resource) -> i8 {
    match resource {
        Resource::Topic(_) => 1,
        Resource::Broker(_) => 2,
        Resource::BrokerDefaults => 3,
    }
}

impl Target {
    fn resource(&self) -> Resource {
        match (&self.topic, self.broker) {
            (Some(topic), _) => Resource::Topic(topic.clone()),
            (None, Some(id)) => Resource::Broker(id),
            (None, None) => Resource::BrokerDefaults,
        }
    }
}

#[derive(Subcommand, Debug)]
pub enum ConfigCommand {
    /// Show the settings the resource sets itself (with --all, every setting).
    Describe {
        #[command(flatten)]
        target: Target,
        #[arg(long)]
        all: bool,
    },
    /// Set (--add-config k=v,k2=v2) or remove (--delete-config k,k2) settings.
    Alter {
        #[command(flatten)]
        target: Target,
        #[arg(long, value_delimiter = ',', value_name = "KEY=VALUE")]
        add_config: Vec<String>,
        #[arg(long, value_delimiter = ',', value_name = "KEY")]
        delete_config: Vec<String>,
    },
}

pub fn run(args: ConfigArgs, out: &mut impl Write) -> Result<()> {
    let mut cluster = args.connect.cluster()?;
    match args.command {
        ConfigCommand::Describe { target, all } => {
            let resource = target.resource();
            let entries = cluster.run(async |c| configs::describe(c, &resource).await)?;
            let shown: Vec<&ConfigEntry> = entries
                .iter()
                .filter(|e| all || e.source == own_source(&resource))
                .collect();
            let which = if all { "All" } else { "Dynamic" };
            writeln!(out, "{which} configs for {} are:", resource.describe())?;
            for entry in shown {
                writeln!(out, "  {}", format_entry(entry))?;
            }
        }
        ConfigCommand::Alter {
            target,
            add_config,
            delete_config,
        } => {
            if add_config.is_empty() && delete_config.is_empty() {
                bail!("nothing to alter: give --add-config and/or --delete-config");
            }
            let mut changes = Vec::new();
            for setting in &add_config {
                let (key, value) = parse_setting(setting)?;
                changes.push((key.to_string(), Some(value.to_string())));
            }
            changes.extend(delete_config.into_iter().map(|key| (key, None)));
            let resource = target.resource();
            cluster.run(async |c| configs::alter(c, &resource, &changes).await)?;
            writeln!(
                out,
                "Completed updating config for {}.",
                resource.describe()
            )?;
        }
    }
    Ok(())
}

/// kafka-configs' line: `key=value sensitive=false synonyms={SOURCE:key=value, ...}`.
fn format_entry(entry: &ConfigEntry) -> String {
    let value = |v: &Option<String>| v.clone().unwrap_or_else(|| "null".into());
    let synonyms: Vec<String> = entry
        .synonyms
        .iter()
        .map(|(name, v, source)| format!("{}:{name}={}", source_name(*source), value(v)))
        .collect();
    format!(
        "{}={} sensitive={} synonyms={{{}}}",
        entry.name,
        value(&entry.value),
        entry.value.is_none(),
        synonyms.join(", ")
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn entries_print_as_kafka_configs_prints_them() {
        let entry = ConfigEntry {
            name: "retention.ms".into(),
            value: Some("1000".into()),
            source: 1,
            read_only: false,
            synonyms: vec![
                ("retention.ms".into(), Some("1000".into()), 1),
                ("log.retention.ms".into(), Some("60000".into()), 3),
            ],
        };
        assert_eq!(
            format_entry(&entry),
            "retention.ms=1000 sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:retention.ms=1000, \
             DYNAMIC_DEFAULT_BROKER_CONFIG:log.retention.ms=60000}"
        );
    }
}
