//! `ringlog group list|describe|delete|reset-offsets`: kafka-consumer-groups over the Kafka
//! protocol (ListGroups, DescribeGroups, OffsetFetch, ListOffsets, DeleteGroups,
//! OffsetCommit), every group request sent to the group's coordinator.
//!
//! Invariants:
//! - Output is computed from fetched answers by pure functions ([`describe_tables`],
//!   [`write_plan`]) so it is tested without a broker.
//! - reset-offsets refuses, in dry run as with --execute, while the group is neither Empty
//!   nor Dead, with kafka-consumer-groups' message; it commits only with --execute.

use std::collections::{BTreeMap, BTreeSet};
use std::io::Write;
use std::time::{Duration, SystemTime, UNIX_EPOCH};

use anyhow::{anyhow, bail, Result};
use clap::Subcommand;
use kafka_protocol::messages::{
    DeleteGroupsRequest, DescribeGroupsRequest, DescribeGroupsResponse, GroupId, ListGroupsRequest,
};
use kafka_protocol::protocol::StrBytes;

use client::blocking::Cluster;
use client::consumer_protocol::{decode_assignment, PROTOCOL_TYPE};
use client::offsets::{self, TopicPartition, ADMIN, EARLIEST, LATEST};
use client::{check, code_of};

use super::reset_offsets::{
    lookup_time, parse_datetime, parse_duration_ms, parse_topic_selection, plan, PartitionOffsets,
    Target,
};
use super::table::Table;
use super::Connect;

#[derive(clap::Args, Debug)]
pub struct GroupArgs {
    #[command(flatten)]
    pub connect: Connect,
    #[command(subcommand)]
    pub command: GroupCommand,
}

#[derive(Subcommand, Debug)]
pub enum GroupCommand {
    /// List the consumer groups of every broker.
    List,
    /// Show a group's state, members, and per partition its committed offset and lag.
    Describe { group: String },
    /// Delete a group that has no active members, with its committed offsets.
    Delete { group: String },
    /// Plan (by default) or --execute moving a group's committed offsets.
    ResetOffsets(ResetArgs),
}

#[derive(clap::Args, Debug)]
#[command(group(clap::ArgGroup::new("scope").required(true).args(["topic", "all_topics"])))]
#[command(group(clap::ArgGroup::new("target").required(true)
    .args(["to_earliest", "to_latest", "to_offset", "to_datetime", "shift_by", "by_duration"])))]
pub struct ResetArgs {
    pub group: String,
    /// A topic, or TOPIC:P,P,... for some of its partitions (repeatable).
    #[arg(long)]
    pub topic: Vec<String>,
    /// Every topic the group has committed offsets for.
    #[arg(long)]
    pub all_topics: bool,
    /// Move to the earliest offset of each partition.
    #[arg(long)]
    pub to_earliest: bool,
    /// Move to the latest offset (the log end) of each partition.
    #[arg(long)]
    pub to_latest: bool,
    /// Move to this offset, clamped to each partition's earliest and latest.
    #[arg(long, value_name = "OFFSET")]
    pub to_offset: Option<i64>,
    /// YYYY-MM-DDTHH:mm:SS.sss, optionally with a zone (Z, +01:00); UTC without one.
    #[arg(long, value_name = "DATETIME")]
    pub to_datetime: Option<String>,
    /// Move the committed offsets by N (negative: back), clamped to the log.
    #[arg(long, value_name = "N", allow_hyphen_values = true)]
    pub shift_by: Option<i64>,
    /// An ISO-8601 duration back from now, e.g. PT1H30M or P1D.
    #[arg(long, value_name = "DURATION")]
    pub by_duration: Option<String>,
    /// Print the plan only (the default).
    #[arg(long, conflicts_with = "execute")]
    pub dry_run: bool,
    /// Commit the plan.
    #[arg(long)]
    pub execute: bool,
}

impl ResetArgs {
    pub fn target(&self) -> Result<Target> {
        Ok(if self.to_earliest {
            Target::Earliest
        } else if self.to_latest {
            Target::Latest
        } else if let Some(offset) = self.to_offset {
            Target::Offset(offset)
        } else if let Some(datetime) = &self.to_datetime {
            Target::Datetime(parse_datetime(datetime)?)
        } else if let Some(shift) = self.shift_by {
            Target::ShiftBy(shift)
        } else if let Some(duration) = &self.by_duration {
            Target::ByDurationMs(parse_duration_ms(duration)?)
        } else {
            bail!("name where to reset to (--to-earliest, --to-latest, ...)")
        })
    }
}

pub fn run(args: GroupArgs, out: &mut impl Write, err: &mut impl Write) -> Result<()> {
    let mut cluster = args.connect.cluster()?;
    match args.command {
        GroupCommand::List => {
            for group in list(&mut cluster)? {
                writeln!(out, "{group}")?;
            }
        }
        GroupCommand::Describe { group } => describe(&mut cluster, &group, out)?,
        GroupCommand::Delete { group } => {
            delete(&mut cluster, &group)?;
            writeln!(
                out,
                "Deletion of requested consumer groups ('{group}') was successful."
            )?;
        }
        GroupCommand::ResetOffsets(reset) => reset_offsets(&mut cluster, &reset, out, err)?,
    }
    Ok(())
}

/// Group ids of every broker, sorted.
pub fn list(cluster: &mut Cluster) -> Result<BTreeSet<String>> {
    let mut groups = BTreeSet::new();
    for broker in cluster.broker_ids() {
        let mut connection = cluster.broker(broker)?;
        let version = connection.version::<ListGroupsRequest>()?;
        let response = connection.call_at(version, &ListGroupsRequest::default())?;
        check(response.error_code, None, || {
            format!("list groups of broker {broker}")
        })?;
        groups.extend(response.groups.iter().map(|g| g.group_id.0.to_string()));
    }
    Ok(groups)
}

fn describe_group(
    cluster: &mut Cluster,
    coordinator: i32,
    group: &str,
) -> Result<DescribeGroupsResponse> {
    let mut connection = cluster.broker(coordinator)?;
    let version = connection.version::<DescribeGroupsRequest>()?;
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_string()))]);
    let response = connection.call_at(version, &request)?;
    let described = response
        .groups
        .first()
        .ok_or_else(|| anyhow!("DescribeGroups answered for no group"))?;
    check(
        described.error_code,
        described.error_message.as_ref(),
        || format!("describe group {group}"),
    )?;
    Ok(response)
}

/// One member as describe prints it.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct MemberRow {
    pub member_id: String,
    pub client_id: String,
    pub host: String,
    pub assignment: BTreeMap<String, Vec<i32>>,
}

/// What describe prints, gathered from the broker.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct GroupView {
    pub group: String,
    pub coordinator: String,
    pub state: String,
    pub protocol: String,
    pub members: Vec<MemberRow>,
    pub committed: BTreeMap<TopicPartition, i64>,
    pub log_end: BTreeMap<TopicPartition, i64>,
}

pub fn describe(cluster: &mut Cluster, group: &str, out: &mut impl Write) -> Result<()> {
    let (coordinator, response) = at_coordinator(cluster, group, |cluster, coordinator| {
        Ok((coordinator, describe_group(cluster, coordinator, group)?))
    })?;
    // describe_group checked there is one.
    let described = &response.groups[0];
    let state = described.group_state.to_string();
    if state == "Dead" {
        bail!("Consumer group '{group}' does not exist.");
    }
    let consumer =
        described.protocol_type.is_empty() || described.protocol_type.as_str() == PROTOCOL_TYPE;
    let members = described
        .members
        .iter()
        .map(|m| MemberRow {
            member_id: m.member_id.to_string(),
            client_id: m.client_id.to_string(),
            host: m.client_host.to_string(),
            assignment: if consumer {
                decode_assignment(m.member_assignment.clone()).unwrap_or_default()
            } else {
                BTreeMap::new()
            },
        })
        .collect();
    let coordinator_address = format!("{} ({coordinator})", cluster.broker(coordinator)?.address());
    let committed = at_coordinator(cluster, group, |cluster, coordinator| {
        cluster
            .broker(coordinator)?
            .run(async |c| offsets::committed(c, group, None).await)
    })?;
    let mut partitions: BTreeMap<String, BTreeSet<i32>> = BTreeMap::new();
    for (topic, partition) in committed.keys() {
        partitions
            .entry(topic.clone())
            .or_default()
            .insert(*partition);
    }
    let view_members: Vec<MemberRow> = members;
    for member in &view_members {
        for (topic, assigned) in &member.assignment {
            partitions
                .entry(topic.clone())
                .or_default()
                .extend(assigned);
        }
    }
    let mut log_end = BTreeMap::new();
    for (topic, partitions) in partitions {
        let Ok(info) = cluster.topic(&topic) else {
            continue;
        };
        let partitions: Vec<i32> = partitions.into_iter().collect();
        let (info, partitions) = (&info, &partitions[..]);
        let latest =
            cluster.run(async |c| offsets::log_offsets(c, info, partitions, LATEST).await)?;
        for (partition, offset) in latest {
            log_end.insert((topic.clone(), partition), offset);
        }
    }
    let view = GroupView {
        group: group.to_string(),
        coordinator: coordinator_address,
        state,
        protocol: described.protocol_data.to_string(),
        members: view_members,
        committed,
        log_end,
    };
    write_description(out, &view)
}

/// describe's output: the state table, the members (or Kafka's note that there are none),
/// the offsets and lag.
pub fn write_description(out: &mut impl Write, view: &GroupView) -> Result<()> {
    let [state, members, offsets] = describe_tables(view);
    state.write(out)?;
    writeln!(out)?;
    if view.members.is_empty() {
        writeln!(
            out,
            "Consumer group '{}' has no active members.",
            view.group
        )?;
    } else {
        members.write(out)?;
    }
    writeln!(out)?;
    offsets.write(out)
}

/// describe's three tables: the group's state, its members, its offsets and lag.
pub fn describe_tables(view: &GroupView) -> [Table; 3] {
    let mut state = Table::new(&[
        "GROUP",
        "COORDINATOR (ID)",
        "ASSIGNMENT-STRATEGY",
        "STATE",
        "#MEMBERS",
    ]);
    state.row(vec![
        view.group.clone(),
        view.coordinator.clone(),
        view.protocol.clone(),
        view.state.clone(),
        view.members.len().to_string(),
    ]);
    let mut members = Table::new(&[
        "GROUP",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
        "#PARTITIONS",
        "ASSIGNMENT",
    ]);
    let mut owner: BTreeMap<TopicPartition, &MemberRow> = BTreeMap::new();
    for member in &view.members {
        let count: usize = member.assignment.values().map(Vec::len).sum();
        let assignment: Vec<String> = member
            .assignment
            .iter()
            .map(|(topic, partitions)| {
                let list: Vec<String> = partitions.iter().map(i32::to_string).collect();
                format!("{topic}({})", list.join(","))
            })
            .collect();
        members.row(vec![
            view.group.clone(),
            member.member_id.clone(),
            member.host.clone(),
            member.client_id.clone(),
            count.to_string(),
            if assignment.is_empty() {
                "-".to_string()
            } else {
                assignment.join(",")
            },
        ]);
        for (topic, partitions) in &member.assignment {
            for partition in partitions {
                owner.insert((topic.clone(), *partition), member);
            }
        }
    }
    let mut offsets = Table::new(&[
        "GROUP",
        "TOPIC",
        "PARTITION",
        "CURRENT-OFFSET",
        "LOG-END-OFFSET",
        "LAG",
        "CONSUMER-ID",
        "HOST",
        "CLIENT-ID",
    ]);
    let keys: BTreeSet<&TopicPartition> = view.committed.keys().chain(owner.keys()).collect();
    for key in keys {
        let committed = view.committed.get(key);
        let end = view.log_end.get(key);
        let lag = match (committed, end) {
            (Some(committed), Some(end)) => (end - committed).max(0).to_string(),
            _ => "-".to_string(),
        };
        let dash = || "-".to_string();
        let member = owner.get(key);
        offsets.row(vec![
            view.group.clone(),
            key.0.clone(),
            key.1.to_string(),
            committed.map_or_else(dash, i64::to_string),
            end.map_or_else(dash, i64::to_string),
            lag,
            member.map_or_else(dash, |m| m.member_id.clone()),
            member.map_or_else(dash, |m| m.host.clone()),
            member.map_or_else(dash, |m| m.client_id.clone()),
        ]);
    }
    [state, members, offsets]
}

pub fn delete(cluster: &mut Cluster, group: &str) -> Result<()> {
    at_coordinator(cluster, group, |cluster, coordinator| {
        let mut connection = cluster.broker(coordinator)?;
        let version = connection.version::<DeleteGroupsRequest>()?;
        let request = DeleteGroupsRequest::default()
            .with_groups_names(vec![GroupId(StrBytes::from_string(group.to_string()))]);
        let response = connection.call_at(version, &request)?;
        let result = response
            .results
            .first()
            .ok_or_else(|| anyhow!("DeleteGroups answered for no group"))?;
        check(result.error_code, None, || {
            format!("Group '{group}' could not be deleted due to")
        })
    })
}

/// Attempts of one group request while its coordinator loads or moves.
const COORDINATOR_ATTEMPTS_MAX: u32 = 50;

/// Runs `call` against `group`'s coordinator, again (after finding the coordinator anew)
/// while it answers COORDINATOR_LOAD_IN_PROGRESS, COORDINATOR_NOT_AVAILABLE or
/// NOT_COORDINATOR, as Kafka's admin client retries them.
fn at_coordinator<T>(
    cluster: &mut Cluster,
    group: &str,
    mut call: impl FnMut(&mut Cluster, i32) -> Result<T>,
) -> Result<T> {
    let mut attempts = 1;
    loop {
        let coordinator = cluster.coordinator(group)?;
        match call(cluster, coordinator) {
            Err(error)
                if attempts < COORDINATOR_ATTEMPTS_MAX
                    && matches!(code_of(&error), Some(14) | Some(15) | Some(16)) =>
            {
                attempts += 1;
                std::thread::sleep(Duration::from_millis(100));
            }
            answer => return answer,
        }
    }
}

/// kafka-consumer-groups' refusal to move the offsets of a group with active members.
pub fn refuse_active(group: &str, state: &str) -> Result<()> {
    match state {
        "Empty" | "Dead" => Ok(()),
        _ => bail!(
            "Assignments can only be reset if the group '{group}' is inactive, but the current \
             state is {state}."
        ),
    }
}

pub fn reset_offsets(
    cluster: &mut Cluster,
    args: &ResetArgs,
    out: &mut impl Write,
    err: &mut impl Write,
) -> Result<()> {
    let target = args.target()?;
    let group = &args.group;
    let response = at_coordinator(cluster, group, |cluster, coordinator| {
        describe_group(cluster, coordinator, group)
    })?;
    refuse_active(group, response.groups[0].group_state.as_str())?;
    let committed = at_coordinator(cluster, group, |cluster, coordinator| {
        cluster
            .broker(coordinator)?
            .run(async |c| offsets::committed(c, group, None).await)
    })?;

    // Which partitions: the named topics (all or some partitions), or every committed one.
    let mut selected: BTreeMap<String, Vec<i32>> = BTreeMap::new();
    if args.all_topics {
        for (topic, partition) in committed.keys() {
            selected.entry(topic.clone()).or_default().push(*partition);
        }
    } else {
        for selection in &args.topic {
            let (topic, partitions) = parse_topic_selection(selection)?;
            let partitions = match partitions {
                Some(partitions) => partitions,
                None => cluster
                    .topic(&topic)?
                    .partitions
                    .iter()
                    .map(|p| p.partition)
                    .collect(),
            };
            selected.entry(topic).or_default().extend(partitions);
        }
    }

    let now_ms = SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .map_or(0, |d| d.as_millis() as i64);
    let mut planned = BTreeMap::new();
    for (topic, mut partitions) in selected {
        partitions.sort_unstable();
        partitions.dedup();
        let info = cluster.topic(&topic)?;
        let (info, wanted) = (&info, &partitions[..]);
        let earliest =
            cluster.run(async |c| offsets::log_offsets(c, info, wanted, EARLIEST).await)?;
        let latest = cluster.run(async |c| offsets::log_offsets(c, info, wanted, LATEST).await)?;
        let at_time = match lookup_time(target, now_ms) {
            Some(time) => {
                cluster.run(async |c| offsets::list_offsets(c, info, wanted, time).await)?
            }
            None => BTreeMap::new(),
        };
        for partition in partitions {
            let key = (topic.clone(), partition);
            let known = PartitionOffsets {
                earliest: earliest[&partition],
                latest: latest[&partition],
                committed: committed.get(&key).copied(),
                at_time: at_time.get(&partition).copied().flatten(),
            };
            let new = plan(target, &topic, partition, known)?;
            if let Some(warning) = new.warning {
                writeln!(err, "WARN {warning}")?;
            }
            planned.insert(key, new.offset);
        }
    }
    if args.execute {
        at_coordinator(cluster, group, |cluster, coordinator| {
            cluster
                .broker(coordinator)?
                .run(async |c| offsets::commit(c, group, &ADMIN, &planned).await)
        })?;
    }
    write_plan(out, group, &planned)?;
    Ok(())
}

/// The plan as kafka-consumer-groups prints it.
pub fn write_plan(
    out: &mut impl Write,
    group: &str,
    planned: &BTreeMap<TopicPartition, i64>,
) -> Result<()> {
    let mut table = Table::new(&["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"]);
    for ((topic, partition), offset) in planned {
        table.row(vec![
            group.to_string(),
            topic.clone(),
            partition.to_string(),
            offset.to_string(),
        ]);
    }
    writeln!(out)?;
    table.write(out)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn view() -> GroupView {
        let mut assignment = BTreeMap::new();
        assignment.insert("orders".to_string(), vec![0, 1]);
        GroupView {
            group: "g1".into(),
            coordinator: "127.0.0.1:9092 (1)".into(),
            state: "Stable".into(),
            protocol: "range".into(),
            members: vec![MemberRow {
                member_id: "m-1".into(),
                client_id: "ringlog-cli".into(),
                host: "/127.0.0.1".into(),
                assignment,
            }],
            committed: [
                (("orders".to_string(), 0), 3),
                (("orders".to_string(), 2), 9),
            ]
            .into(),
            log_end: [
                (("orders".to_string(), 0), 5),
                (("orders".to_string(), 1), 4),
                (("orders".to_string(), 2), 9),
            ]
            .into(),
        }
    }

    fn render(table: &Table) -> String {
        let mut out = Vec::new();
        table.write(&mut out).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn describe_shows_state_members_and_lag() {
        let tables = describe_tables(&view());
        let state = render(&tables[0]);
        assert!(state.lines().nth(1).unwrap().split_whitespace().eq([
            "g1",
            "127.0.0.1:9092",
            "(1)",
            "range",
            "Stable",
            "1"
        ]));
        let members = render(&tables[1]);
        assert!(members.lines().nth(1).unwrap().split_whitespace().eq([
            "g1",
            "m-1",
            "/127.0.0.1",
            "ringlog-cli",
            "2",
            "orders(0,1)"
        ]));
        let offsets = render(&tables[2]);
        let rows: Vec<Vec<&str>> = offsets
            .lines()
            .skip(1)
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec![
                    "g1",
                    "orders",
                    "0",
                    "3",
                    "5",
                    "2",
                    "m-1",
                    "/127.0.0.1",
                    "ringlog-cli"
                ],
                vec![
                    "g1",
                    "orders",
                    "1",
                    "-",
                    "4",
                    "-",
                    "m-1",
                    "/127.0.0.1",
                    "ringlog-cli"
                ],
                vec!["g1", "orders", "2", "9", "9", "0", "-", "-", "-"],
            ]
        );
    }

    #[test]
    fn reset_is_refused_while_members_are_active() {
        assert!(refuse_active("g1", "Empty").is_ok());
        assert!(refuse_active("g1", "Dead").is_ok());
        let error = refuse_active("g1", "Stable").unwrap_err();
        assert_eq!(
            error.to_string(),
            "Assignments can only be reset if the group 'g1' is inactive, but the current state \
             is Stable."
        );
        assert!(refuse_active("g1", "PreparingRebalance").is_err());
    }

    #[test]
    fn plan_prints_as_kafka_consumer_groups() {
        let planned: BTreeMap<TopicPartition, i64> = [
            (("orders".to_string(), 0), 0),
            (("orders".to_string(), 1), 12),
        ]
        .into();
        let mut out = Vec::new();
        write_plan(&mut out, "g1", &planned).unwrap();
        let text = String::from_utf8(out).unwrap();
        let rows: Vec<Vec<&str>> = text
            .lines()
            .map(|l| l.split_whitespace().collect())
            .collect();
        assert_eq!(
            rows,
            [
                vec![],
                vec!["GROUP", "TOPIC", "PARTITION", "NEW-OFFSET"],
                vec!["g1", "orders", "0", "0"],
                vec!["g1", "orders", "1", "12"],
            ]
        );
    }

    #[test]
    fn reset_arguments_parse() {
        use clap::Parser;
        #[derive(Parser)]
        struct Cli {
            #[command(flatten)]
            reset: ResetArgs,
        }
        let cli =
            Cli::try_parse_from(["x", "g1", "--topic", "orders", "--shift-by", "-2"]).unwrap();
        assert_eq!(cli.reset.target().unwrap(), Target::ShiftBy(-2));
        assert!(!cli.reset.execute);
        let cli = Cli::try_parse_from([
            "x",
            "g1",
            "--all-topics",
            "--by-duration",
            "PT1M",
            "--execute",
        ])
        .unwrap();
        assert_eq!(cli.reset.target().unwrap(), Target::ByDurationMs(60_000));
        assert!(
            Cli::try_parse_from(["x", "g1", "--to-earliest"]).is_err(),
            "needs a scope"
        );
        assert!(
            Cli::try_parse_from(["x", "g1", "--all-topics"]).is_err(),
            "needs a target"
        );
        assert!(
            Cli::try_parse_from(["x", "g1", "--all-topics", "--to-earliest", "--to-latest"])
                .is_err()
        );
        assert!(Cli::try_parse_from([
            "x",
            "g1",
            "--all-topics",
            "--to-earliest",
            "--dry-run",
            "--execute"
        ])
        .is_err());
    }
}
