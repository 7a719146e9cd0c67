//! Consumer-group and `__consumer_offsets` settings (Kafka's `group.*` and `offsets.*`).

use std::time::Duration;

use super::settings::Settings;
use super::ConfigError;

/// Consumer-group settings (Kafka's names in comments).
#[derive(Clone, Debug)]
pub struct GroupConfig {
    /// `offsets.topic.replication.factor`: 3 in a cluster, 1 on a one-voter node unless set
    /// (as Kafka's single-node sample configuration sets it). `__consumer_offsets` is not
    /// created until that many brokers are live.
    pub offsets_replication_factor: i16,
    /// `offsets.topic.num.partitions`: partitions of `__consumer_offsets` when created.
    pub offsets_partitions: i32,
    /// `offsets.retention.minutes`: committed offsets of an empty group expire after this.
    pub offsets_retention: Duration,
    /// `offsets.retention.check.interval.ms`: how often a group with no member and no
    /// committed offset left is dropped (as Kafka's group metadata cleanup does).
    pub offsets_retention_check_interval: Duration,
    /// `offset.metadata.max.bytes`: the largest metadata string of a commit.
    pub offset_metadata_bytes_max: usize,
    /// `group.initial.rebalance.delay.ms`: a new group waits this long for more members.
    pub initial_rebalance_delay: Duration,
    /// `group.min.session.timeout.ms` and `group.max.session.timeout.ms`.
    pub session_timeout_min: Duration,
    pub session_timeout_max: Duration,
    /// `group.max.size`: members (and pending member ids) per group.
    pub members_max: usize,
}

/// The keys [`GroupConfig::read`] takes.
pub(super) const KEYS: &[&str] = &[
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "offsets.retention.minutes",
    "offsets.retention.check.interval.ms",
    "offset.metadata.max.bytes",
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
];

impl GroupConfig {
    /// The group settings; `in_cluster` when the node is one of several voters.
    pub(super) fn read(settings: &Settings, in_cluster: bool) -> Result<GroupConfig, ConfigError> {
        // Kafka's default of 3 is for a cluster; a one-voter node takes its sample's 1.
        let offsets_replication = if in_cluster { "3" } else { "1" };
        let retention_minutes: u64 =
            settings.number("offsets.retention.minutes", "10080", 1, 1 << 32)?;
        Ok(GroupConfig {
            offsets_replication_factor: settings.number(
                "offsets.topic.replication.factor",
                offsets_replication,
                1,
                i16::MAX,
            )?,
            offsets_partitions: settings.number("offsets.topic.num.partitions", "50", 1, 10_000)?,
            offsets_retention: Duration::from_secs(60 * retention_minutes),
            offsets_retention_check_interval: settings
                .positive_ms("offsets.retention.check.interval.ms", "600000")?,
            offset_metadata_bytes_max: settings.number(
                "offset.metadata.max.bytes",
                "4096",
                0,
                1 << 20,
            )?,
            initial_rebalance_delay: Duration::from_millis(settings.number(
                "group.initial.rebalance.delay.ms",
                "3000",
                0,
                1 << 31,
            )?),
            session_timeout_min: settings.positive_ms("group.min.session.timeout.ms", "6000")?,
            session_timeout_max: settings.positive_ms("group.max.session.timeout.ms", "1800000")?,
            members_max: settings.number("group.max.size", "2147483647", 1, i32::MAX as usize)?,
        })
    }
}
