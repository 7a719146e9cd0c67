//! `ringlog partition elect-leaders|reassign|reassignments`: kafka-leader-election and
//! kafka-reassign-partitions over the Kafka protocol (ElectLeaders,
//! AlterPartitionReassignments, ListPartitionReassignments).
//!
//! Invariants: every partition's outcome is printed; the command fails (exits non-zero) if
//! any partition was refused, except a leader election that was not needed, which
//! kafka-leader-election reports as done too.

use std::io::Write;

use anyhow::{bail, Result};
use clap::Subcommand;
use client::partitions::{self, ElectionType, PartitionOutcome};

use super::Connect;

/// Kafka's ELECTION_NOT_NEEDED: the leader the election asks for leads already.
const ELECTION_NOT_NEEDED: i16 = 84;

#[derive(clap::Args, Debug)]
pub struct PartitionArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(subcommand)]
    pub command: PartitionCommand,
}

#[derive(Subcommand, Debug)]
pub enum PartitionCommand {
    /// Give partitions to their preferred replica (the first), if it is in sync and live;
    /// with --unclean, give partitions that have no leader to any live replica, losing what
    /// only the others held.
    ElectLeaders {
        /// One topic (default: every partition of every topic).
        #[arg(long)]
        topic: Option<String>,
        /// Partitions of --topic (repeatable; default: all of them).
        #[arg(long, requires = "topic")]
        partition: Vec<i32>,
        #[arg(long)]
        unclean: bool,
    },
    /// Move a partition to the brokers --replicas names (the first one preferred leader):
    /// new replicas copy the log, then old ones leave. --cancel stops a move in progress.
    Reassign {
        topic: String,
        #[arg(long)]
        partition: i32,
        /// Broker ids, comma-separated.
        #[arg(long, value_delimiter = ',', required_unless_present = "cancel")]
        replicas: Vec<i32>,
        #[arg(long, conflicts_with = "replicas")]
        cancel: bool,
    },
    /// List the moves in progress: replicas, and those being added and removed.
    Reassignments {
        /// One topic (default: every topic).
        #[arg(long)]
        topic: Option<String>,
    },
}

pub fn run(args: PartitionArgs, out: &mut impl Write) -> Result<()> {
    let mut cluster = args.connect.cluster()?;
    match args.command {
        PartitionCommand::ElectLeaders {
            topic,
            partition,
            unclean,
        } => {
            let election = if unclean {
                ElectionType::Unclean
            } else {
                ElectionType::Preferred
            };
            let named = match topic {
                None => None,
                Some(topic) => {
                    let indexes = if partition.is_empty() {
                        cluster
                            .topic(&topic)?
                            .partitions
                            .iter()
                            .map(|p| p.partition)
                            .collect()
                    } else {
                        partition
                    };
                    Some(
                        indexes
                            .into_iter()
                            .map(|p| (topic.clone(), p))
                            .collect::<Vec<_>>(),
                    )
                }
            };
            let outcomes = cluster
                .run(async |c| partitions::elect_leaders(c, election, named.as_deref()).await)?;
            report_elections(out, election, &outcomes)
        }
        PartitionCommand::Reassign {
            topic,
            partition,
            replicas,
            cancel,
        } => {
            let target = (!cancel).then_some(replicas);
            let moves = [((topic, partition), target)];
            let outcomes =
                cluster.run(async |c| partitions::alter_reassignments(c, &moves).await)?;
            for outcome in &outcomes {
                if let Err(error) = &outcome.result {
                    bail!("{error}");
                }
                let ((topic, partition), target) = &moves[0];
                match target {
                    Some(replicas) => writeln!(
                        out,
                        "Started moving {topic}-{partition} to replicas {}.",
                        join(replicas)
                    )?,
                    None => writeln!(out, "Cancelled the move of {topic}-{partition}.")?,
                }
            }
            Ok(())
        }
        PartitionCommand::Reassignments { topic } => {
            let topics = topic.map(|t| vec![t]);
            let moves = cluster
                .run(async |c| partitions::list_reassignments(c, topics.as_deref()).await)?;
            if moves.is_empty() {
                writeln!(out, "No partition reassignments in progress.")?;
            }
            for m in moves {
                writeln!(
                    out,
                    "Topic: {}\tPartition: {}\tReplicas: {}\tAdding: {}\tRemoving: {}",
                    m.topic,
                    m.partition,
                    join(&m.replicas),
                    join(&m.adding),
                    join(&m.removing)
                )?;
            }
            Ok(())
        }
    }
}

/// kafka-leader-election's report: the partitions elected, those that needed no election,
/// then each failure; an error if any failed.
fn report_elections(
    out: &mut impl Write,
    election: ElectionType,
    outcomes: &[PartitionOutcome],
) -> Result<()> {
    let kind = match election {
        ElectionType::Preferred => "PREFERRED",
        ElectionType::Unclean => "UNCLEAN",
    };
    let names = |keep: &dyn Fn(&PartitionOutcome) -> bool| {
        outcomes
            .iter()
            .filter(|o| keep(o))
            .map(|o| format!("{}-{}", o.topic, o.partition))
            .collect::<Vec<_>>()
    };
    let not_needed = |o: &PartitionOutcome| {
        o.result
            .as_ref()
            .is_err_and(|error| error.code == ELECTION_NOT_NEEDED)
    };
    let elected = names(&|o| o.result.is_ok());
    let already = names(&not_needed);
    if !elected.is_empty() {
        let list = elected.join(", ");
        writeln!(
            out,
            "Successfully completed leader election ({kind}) for partitions {list}"
        )?;
    }
    if !already.is_empty() {
        writeln!(
            out,
            "Valid replica already elected for partitions {}",
            already.join(", ")
        )?;
    }
    if outcomes.is_empty() {
        writeln!(out, "No partition needed a leader election ({kind}).")?;
    }
    let mut failed = 0;
    for outcome in outcomes.iter().filter(|o| !not_needed(o)) {
        if let Err(error) = &outcome.result {
            failed += 1;
            writeln!(out, "Error completing leader election ({kind}): {error}")?;
        }
    }
    if failed > 0 {
        bail!("{failed} leader election(s) failed");
    }
    Ok(())
}

fn join(ids: &[i32]) -> String {
    ids.iter().map(i32::to_string).collect::<Vec<_>>().join(",")
}

#[cfg(test)]
mod tests {
    use super::*;
    use client::KafkaError;

    fn outcome(partition: i32, code: i16) -> PartitionOutcome {
        PartitionOutcome {
            topic: "t".into(),
            partition,
            result: if code == 0 {
                Ok(())
            } else {
                Err(KafkaError {
                    code,
                    what: format!("elect a leader of t-{partition}"),
                    message: None,
                })
            },
        }
    }

    #[test]
    fn elections_are_reported_as_kafka_leader_election_does() {
        let mut out = Vec::new();
        let outcomes = [
            outcome(0, 0),
            outcome(1, ELECTION_NOT_NEEDED),
            outcome(2, 0),
        ];
        report_elections(&mut out, ElectionType::Preferred, &outcomes).expect("no failure");
        assert_eq!(
            String::from_utf8(out).unwrap(),
            "Successfully completed leader election (PREFERRED) for partitions t-0, t-2\n\
             Valid replica already elected for partitions t-1\n"
        );
        let mut out = Vec::new();
        let failed = report_elections(&mut out, ElectionType::Unclean, &[outcome(3, 83)]);
        assert!(failed.is_err());
        assert!(String::from_utf8(out)
            .unwrap()
            .contains("Error completing leader election (UNCLEAN): elect a leader of t-3: ELIGIBLE_LEADERS_NOT_AVAILABLE"));
    }
}
