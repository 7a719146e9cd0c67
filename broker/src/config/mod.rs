//! Broker configuration: Kafka's names and value formats, from an optional properties
//! file overridden by `--set key=value` flags.
//!
//! Invariants: every value is parsed and range-checked once, at start-up, into a typed
//! [`BrokerConfig`]; an unknown key is reported, never silently ignored; relationships
//! between limits are checked here (a message must fit in a request, a request in the
//! shard's request budget).

use std::collections::{BTreeMap, BTreeSet};
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI32;
use std::sync::Arc;
use std::time::Duration;

use storage::IoMode;
use thiserror::Error;

pub mod cleaner;
pub mod dynamic;
mod groups;
mod replica;
mod settings;

pub use cleaner::CleanerSettings;
pub use groups::GroupConfig;
pub use replica::ReplicaFetchConfig;
pub(crate) use settings::parse_properties;
use settings::{number, parse_voters, Settings};

#[derive(Error, Debug)]
pub enum ConfigError {
    #[error("cannot read {path}: {source}")]
    Read {
        path: PathBuf,
        source: std::io::Error,
    },
    #[error("{origin}: expected key=value, got {line:?}")]
    Syntax { origin: String, line: String },
    #[error("{key}={value}: {reason}")]
    Value {
        key: String,
        value: String,
        reason: String,
    },
    #[error("unknown configuration key {0:?}")]
    UnknownKey(String),
}

/// An address the node listens on or advertises: `PLAINTEXT://host:port`.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Listener {
    pub host: String,
    pub port: u16,
}

impl Listener {
    fn parse(key: &str, value: &str) -> Result<Listener, ConfigError> {
        let invalid = |reason: &str| ConfigError::Value {
            key: key.into(),
            value: value.into(),
            reason: reason.into(),
        };
        let first = value.split(',').next().unwrap_or_default().trim();
        let address = first
            .strip_prefix("PLAINTEXT://")
            .ok_or_else(|| invalid("only PLAINTEXT://host:port listeners are supported"))?;
        let (host, port) = address
            .rsplit_once(':')
            .ok_or_else(|| invalid("missing :port"))?;
        let port = port
            .parse()
            .map_err(|_| invalid("port is not a number 0-65535"))?;
        let host = host.trim_start_matches('[').trim_end_matches(']');
        let host = if host.is_empty() { "0.0.0.0" } else { host };
        Ok(Listener {
            host: host.to_string(),
            port,
        })
    }
}

#[derive(Clone, Debug)]
pub struct BrokerConfig {
    pub node_id: i32,
    /// `cluster.id` if configured; a node takes its cluster id from its formatted storage
    /// (`meta.properties`), and refuses to start if the two differ.
    pub cluster_id: Option<String>,
    /// The log directory's id from `meta.properties`, known once the node has started.
    pub directory_id: Option<String>,
    /// `controller.quorum.voters` (`id@host:port,...`): the metadata quorum's voters and
    /// their controller listeners. Empty: this node is a one-voter quorum of itself.
    pub quorum_voters: BTreeMap<i32, SocketAddr>,
    /// Known once the node runs: the node id of the active controller as this node last
    /// learnt it (-1 while none is known), set on shard 0 and read by every shard.
    pub active_controller: Arc<AtomicI32>,
    /// `broker.rack`: announced in the broker's registration and to clients.
    pub rack: Option<String>,
    pub listener: Listener,
    pub advertised: Listener,
    pub log_dir: PathBuf,
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub auto_create_topics: bool,
    pub segment_bytes_max: u64,
    pub segment_ms_max: u64,
    pub index_interval_bytes: u32,
    pub flush_interval: Duration,
    /// `log.retention.check.interval.ms`: how often retention looks for segments to delete.
    pub retention_check_interval: Duration,
    /// `log.cleaner.enable`: compacted topics are cleaned (`cleanup.policy=compact`).
    pub cleaner_enable: bool,
    /// The cleaner's settings as the static configuration gives them (`cleaner`); the
    /// cleaner itself resolves them from the image, where they may have changed since.
    pub cleaner: CleanerSettings,
    /// The static value of each of `cleaner::DYNAMIC`, as given (or its default).
    pub cleaner_static: BTreeMap<String, String>,
    pub message_bytes_max: usize,
    pub request_bytes_max: usize,
    /// Request bytes one shard holds at most, over all its connections.
    pub queued_request_bytes_max: usize,
    /// `queued.max.response.bytes`: bytes of answers one shard holds built and not yet
    /// written, over all its connections.
    pub queued_response_bytes_max: usize,
    /// `connections.max.write.ms`: a connection whose answers make no progress into its
    /// socket for this long (the client stopped reading) is closed.
    pub write_timeout: Duration,
    pub io_mode: IoMode,
    /// Batch cache per shard, for tailing consumers in direct mode.
    pub cache_bytes_max: usize,
    /// `log.stage.dir`: the tmpfs directory of the shards' stage files (`storage::stage`).
    pub stage_dir: PathBuf,
    /// `log.stage.bytes`: each shard's stage, the write-queue memory that outlives the
    /// process in direct mode (0: none, acks=1 then waits for the O_DIRECT write). By default
    /// the batch cache's size plus 64 MiB: written chunks stay in the cache, and in the stage.
    pub stage_bytes: u64,
    pub write_buffer_bytes_max: usize,
    pub idle_timeout: Duration,
    pub in_flight_requests_max: usize,
    /// `max.connections`: the node stops accepting while it holds this many connections.
    pub connections_max: usize,
    /// `max.connections.per.ip`: a new connection from an address holding this many is closed.
    pub connections_per_ip_max: usize,
    /// Defaults for topic-level settings that topics may override.
    pub topic_defaults: BTreeMap<String, String>,
    pub groups: GroupConfig,
    /// `producer.id.expiration.ms`: a partition forgets an idempotent producer that appended
    /// nothing to it for this long.
    pub producer_id_expiration: Duration,
    /// `broker.heartbeat.interval.ms`: how often a node of a quorum tells the active
    /// controller it is alive.
    pub heartbeat_interval: Duration,
    /// `broker.session.timeout.ms`: a broker not heard from for this long is fenced, and its
    /// partitions lose it as leader.
    pub session_timeout: Duration,
    /// `metadata.log.max.record.bytes.between.snapshots`: a voter of a quorum replaces its
    /// Raft log by a snapshot of the image once the log holds this many bytes.
    pub metadata_snapshot_bytes: u64,
    /// `producer.id.expiration.check.interval.ms`: how often each shard looks for them.
    pub producer_id_expiration_check_interval: Duration,
    pub replica_fetch: ReplicaFetchConfig,
    /// `auto.leader.rebalance.enable` (default true) and
    /// `leader.imbalance.check.interval.seconds` (default 300): how often the active
    /// controller gives leadership back to the preferred replicas, `None` when it does not.
    pub leader_balance_interval: Option<Duration>,
    /// The keys the properties file and `--set` gave: a setting not among them has Kafka's
    /// default (DescribeConfigs tells the two apart).
    pub given_keys: BTreeSet<String>,
}

/// What an answer adds around its records: headers and per-partition fields, generously.
pub const RESPONSE_OVERHEAD_BYTES: usize = 64 << 10;
/// A shard's stage by default: its batch cache's size plus this, for the write queues.
const STAGE_BYTES_BEYOND_CACHE: u64 = 64 << 20;

impl BrokerConfig {
    /// The fewest answer bytes a fetch asks for: one batch of the largest size a topic
    /// accepts by default, so that an answer cut to it still holds a whole batch (KIP-74).
    pub fn response_floor_bytes(&self) -> usize {
        self.message_bytes_max + RESPONSE_OVERHEAD_BYTES
    }

    /// Answer bytes one connection may hold built and unsent: a quarter of the shard's, so
    /// that a few clients that stopped reading cannot take it all.
    pub fn unsent_bytes_max(&self) -> usize {
        (self.queued_response_bytes_max / 4).max(self.response_floor_bytes())
    }

    /// The reserve for connections that keep up (see `Shard::response_reserve`): two
    /// answers of the floor size.
    pub fn response_reserve_bytes(&self) -> usize {
        2 * self.response_floor_bytes()
    }
}

/// Topic-level configuration names a topic may override, with the broker key that gives
/// their default, as in Kafka.
pub const TOPIC_CONFIGS: &[(&str, &str, &str)] = &[
    ("cleanup.policy", "log.cleanup.policy", "delete"),
    ("compression.type", "compression.type", "producer"),
    (
        "delete.retention.ms",
        "log.cleaner.delete.retention.ms",
        "86400000",
    ),
    ("flush.ms", "log.flush.interval.ms", "1000"),
    ("index.interval.bytes", "log.index.interval.bytes", "4096"),
    (
        "max.compaction.lag.ms",
        "log.cleaner.max.compaction.lag.ms",
        "9223372036854775807",
    ),
    ("max.message.bytes", "message.max.bytes", "1048588"),
    (
        "message.timestamp.type",
        "log.message.timestamp.type",
        "CreateTime",
    ),
    (
        "min.cleanable.dirty.ratio",
        "log.cleaner.min.cleanable.ratio",
        "0.5",
    ),
    (
        "min.compaction.lag.ms",
        "log.cleaner.min.compaction.lag.ms",
        "0",
    ),
    ("min.insync.replicas", "min.insync.replicas", "1"),
    ("retention.bytes", "log.retention.bytes", "-1"),
    ("retention.ms", "log.retention.ms", "604800000"),
    ("segment.bytes", "log.segment.bytes", "1073741824"),
    ("segment.ms", "log.roll.ms", "604800000"),
    (
        "unclean.leader.election.enable",
        "unclean.leader.election.enable",
        "false",
    ),
];

/// Topic settings without a broker default: Kafka's replication throttles (KIP-73), each a
/// list of `partition:broker` pairs (or `*`, every replica) whose replication traffic the
/// leader (`leader.`) or the follower (`follower.`) throttles; none by default.
pub const TOPIC_ONLY_CONFIGS: &[(&str, &str)] = &[
    ("follower.replication.throttled.replicas", ""),
    ("leader.replication.throttled.replicas", ""),
];

/// Broker settings that exist only at run time, as in Kafka (kafka-configs sets them, a
/// properties file does not): the replication throttles' rates, bytes per second for the
/// whole broker, unlimited by default. A node has one log directory, so nothing moves
/// between directories for `replica.alter.log.dirs.io.max.bytes.per.second` to throttle.
pub const DYNAMIC_ONLY_BROKER_CONFIGS: &[(&str, &str)] = &[
    ("follower.replication.throttled.rate", "9223372036854775807"),
    ("leader.replication.throttled.rate", "9223372036854775807"),
    (
        "replica.alter.log.dirs.io.max.bytes.per.second",
        "9223372036854775807",
    ),
];

/// Broker keys that are not topic defaults (beside `replica::KEYS`, `groups::KEYS` and
/// `cleaner::KEYS`).
const BROKER_KEYS: &[&str] = &[
    "node.id",
    "broker.id",
    "cluster.id",
    "controller.quorum.voters",
    "broker.rack",
    "listeners",
    "advertised.listeners",
    "log.dirs",
    "log.dir",
    "num.partitions",
    "default.replication.factor",
    "auto.create.topics.enable",
    "log.roll.hours",
    "socket.request.max.bytes",
    "queued.max.request.bytes",
    "queued.max.response.bytes",
    "connections.max.write.ms",
    "log.io.mode",
    "log.cache.max.bytes",
    "log.stage.dir",
    "log.stage.bytes",
    "log.write.buffer.bytes",
    "connections.max.idle.ms",
    "max.in.flight.requests.per.connection",
    "max.connections",
    "max.connections.per.ip",
    "log.retention.hours",
    "log.retention.minutes",
    "log.retention.check.interval.ms",
    "producer.id.expiration.ms",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "metadata.log.max.record.bytes.between.snapshots",
    "producer.id.expiration.check.interval.ms",
    "auto.leader.rebalance.enable",
    "leader.imbalance.check.interval.seconds",
];

/// Whether `key` is a broker setting this node knows (static or dynamic).
pub fn is_broker_key(key: &str) -> bool {
    [BROKER_KEYS, replica::KEYS, groups::KEYS, cleaner::KEYS]
        .iter()
        .any(|keys| keys.contains(&key))
        || TOPIC_CONFIGS
            .iter()
            .any(|(_, broker_key, _)| *broker_key == key)
}

impl BrokerConfig {
    /// Reads `file` (if any), applies `overrides` in order, and validates.
    pub fn load(file: Option<&Path>, overrides: &[String]) -> Result<BrokerConfig, ConfigError> {
        let mut raw = BTreeMap::new();
        if let Some(path) = file {
            let text = std::fs::read_to_string(path).map_err(|source| ConfigError::Read {
                path: path.into(),
                source,
            })?;
            parse_properties(&text, &path.display().to_string(), &mut raw)?;
        }
        for line in overrides {
            parse_properties(line, "--set", &mut raw)?;
        }
        BrokerConfig::from_map(&raw)
    }

    pub fn from_map(raw: &BTreeMap<String, String>) -> Result<BrokerConfig, ConfigError> {
        if let Some(unknown) = raw.keys().find(|key| !is_broker_key(key)) {
            return Err(ConfigError::UnknownKey(unknown.clone()));
        }
        let settings = Settings::new(raw);
        let get = |key: &str| settings.get(key);
        let listener = Listener::parse(
            "listeners",
            get("listeners").unwrap_or("PLAINTEXT://127.0.0.1:9092"),
        )?;
        let advertised = match get("advertised.listeners") {
            Some(value) => Listener::parse("advertised.listeners", value)?,
            None if listener.host == "0.0.0.0" => Listener {
                host: "127.0.0.1".into(),
                ..listener.clone()
            },
            None => listener.clone(),
        };
        let segment_ms_max = match (get("log.roll.ms"), get("log.roll.hours")) {
            (Some(ms), _) => number("log.roll.ms", ms, 1, u64::MAX / 2)?,
            (None, Some(hours)) => number::<u64>("log.roll.hours", hours, 1, 1 << 30)? * 3_600_000,
            (None, None) => 7 * 24 * 3_600_000,
        };
        let request_bytes_max: usize = settings.number(
            "socket.request.max.bytes",
            "104857600",
            1024,
            i32::MAX as usize,
        )?;
        let message_bytes_max: usize =
            settings.number("message.max.bytes", "1048588", 0, i32::MAX as usize)?;
        let queued_request_bytes_max = match get("queued.max.request.bytes") {
            None | Some("-1") => request_bytes_max.saturating_mul(2),
            Some(value) => number(
                "queued.max.request.bytes",
                value,
                request_bytes_max,
                usize::MAX / 2,
            )?,
        };
        // At least what one answer of the largest batch needs (KIP-74: one batch always).
        let queued_response_bytes_max: usize = settings.number(
            "queued.max.response.bytes",
            "134217728",
            4 * (message_bytes_max + RESPONSE_OVERHEAD_BYTES),
            usize::MAX / 2,
        )?;
        let cache_bytes_max: usize =
            settings.number("log.cache.max.bytes", "67108864", 0, usize::MAX / 2)?;
        let io_mode = match get("log.io.mode").unwrap_or("direct") {
            "direct" => IoMode::Direct,
            "buffered" => IoMode::Buffered,
            other => {
                return Err(ConfigError::Value {
                    key: "log.io.mode".into(),
                    value: other.into(),
                    reason: "expected direct or buffered".into(),
                })
            }
        };
        let mut topic_defaults = BTreeMap::new();
        for (topic_key, broker_key, default) in TOPIC_CONFIGS {
            let value = get(broker_key).unwrap_or(default);
            topic_defaults.insert(topic_key.to_string(), value.to_string());
        }
        for (topic_key, default) in TOPIC_ONLY_CONFIGS {
            topic_defaults.insert(topic_key.to_string(), default.to_string());
        }
        // Kafka's precedence: log.retention.ms, then .minutes, then .hours; -1 is unlimited.
        if get("log.retention.ms").is_none() {
            let coarser = [
                ("log.retention.minutes", 60_000),
                ("log.retention.hours", 3_600_000),
            ];
            if let Some((key, value, unit_ms)) = coarser
                .into_iter()
                .find_map(|(key, unit_ms)| Some((key, get(key)?, unit_ms)))
            {
                let count = number::<i64>(key, value, -1, 1 << 30)?;
                let ms = if count < 0 { -1 } else { count * unit_ms };
                topic_defaults.insert("retention.ms".into(), ms.to_string());
            }
        }
        topic_defaults.insert("segment.ms".into(), segment_ms_max.to_string());
        let quorum_voters = parse_voters(get("controller.quorum.voters").unwrap_or(""))?;
        let in_cluster = quorum_voters.len() > 1;
        let config = BrokerConfig {
            node_id: number(
                "node.id",
                get("node.id").or(get("broker.id")).unwrap_or("1"),
                0,
                i32::MAX,
            )?,
            cluster_id: get("cluster.id").map(str::to_string),
            directory_id: None,
            quorum_voters,
            active_controller: Arc::new(AtomicI32::new(-1)),
            rack: get("broker.rack").map(str::to_string),
            listener,
            advertised,
            log_dir: PathBuf::from(
                get("log.dirs")
                    .or(get("log.dir"))
                    .unwrap_or("./data")
                    .split(',')
                    .next()
                    .unwrap_or("./data"),
            ),
            num_partitions: settings.number("num.partitions", "1", 1, 1 << 20)?,
            default_replication_factor: settings.number(
                "default.replication.factor",
                "1",
                1,
                i16::MAX,
            )?,
            auto_create_topics: settings.boolean("auto.create.topics.enable", "true")?,
            segment_bytes_max: settings.number(
                "log.segment.bytes",
                "1073741824",
                14,
                i32::MAX as u64,
            )?,
            segment_ms_max,
            index_interval_bytes: settings.number(
                "log.index.interval.bytes",
                "4096",
                0,
                i32::MAX as u32,
            )?,
            flush_interval: settings.positive_long_ms("log.flush.interval.ms", "1000")?,
            retention_check_interval: settings
                .positive_long_ms("log.retention.check.interval.ms", "300000")?,
            cleaner_enable: settings.boolean("log.cleaner.enable", "true")?,
            cleaner: CleanerSettings::read(&settings)?,
            cleaner_static: cleaner::DYNAMIC
                .iter()
                .filter_map(|(key, _)| Some((key.to_string(), cleaner::static_value(raw, key)?)))
                .collect(),
            message_bytes_max,
            request_bytes_max,
            queued_request_bytes_max,
            queued_response_bytes_max,
            write_timeout: settings.positive_long_ms("connections.max.write.ms", "30000")?,
            io_mode,
            cache_bytes_max,
            stage_dir: PathBuf::from(get("log.stage.dir").unwrap_or("/dev/shm")),
            stage_bytes: match get("log.stage.bytes") {
                Some(_) => settings.number("log.stage.bytes", "0", 0, 1 << 40)?,
                None => cache_bytes_max as u64 + STAGE_BYTES_BEYOND_CACHE,
            },
            write_buffer_bytes_max: settings.number(
                "log.write.buffer.bytes",
                "1048576",
                4096,
                1 << 30,
            )?,
            idle_timeout: settings.positive_long_ms("connections.max.idle.ms", "600000")?,
            in_flight_requests_max: settings.number(
                "max.in.flight.requests.per.connection",
                "32",
                1,
                1024,
            )?,
            connections_max: settings.number(
                "max.connections",
                "2147483647",
                1,
                i32::MAX as usize,
            )?,
            connections_per_ip_max: settings.number(
                "max.connections.per.ip",
                "2147483647",
                1,
                i32::MAX as usize,
            )?,
            topic_defaults,
            producer_id_expiration: settings
                .positive_ms("producer.id.expiration.ms", "86400000")?,
            heartbeat_interval: settings.positive_ms("broker.heartbeat.interval.ms", "2000")?,
            session_timeout: settings.positive_ms("broker.session.timeout.ms", "9000")?,
            metadata_snapshot_bytes: settings.number(
                "metadata.log.max.record.bytes.between.snapshots",
                "20971520",
                1,
                u64::MAX / 2,
            )?,
            producer_id_expiration_check_interval: settings
                .positive_ms("producer.id.expiration.check.interval.ms", "600000")?,
            replica_fetch: ReplicaFetchConfig::read(&settings)?,
            leader_balance_interval: settings
                .boolean("auto.leader.rebalance.enable", "true")?
                .then(|| {
                    settings.number("leader.imbalance.check.interval.seconds", "300", 1, 1 << 31)
                })
                .transpose()?
                .map(Duration::from_secs),
            groups: GroupConfig::read(&settings, in_cluster)?,
            given_keys: raw.keys().cloned().collect(),
        };
        if config.message_bytes_max > config.request_bytes_max {
            return Err(ConfigError::Value {
                key: "message.max.bytes".into(),
                value: config.message_bytes_max.to_string(),
                reason: "must not exceed socket.request.max.bytes".into(),
            });
        }
        if !config.quorum_voters.is_empty() && !config.quorum_voters.contains_key(&config.node_id) {
            return Err(ConfigError::Value {
                key: "controller.quorum.voters".into(),
                value: get("controller.quorum.voters").unwrap_or("").into(),
                reason: format!(
                    "node.id {} is not one of the voters (every node is broker and controller)",
                    config.node_id
                ),
            });
        }
        Ok(config)
    }

    /// Whether the static configuration gave `key`, itself or by a coarser synonym
    /// (`log.retention.hours` for `log.retention.ms`, `log.roll.hours` for `log.roll.ms`).
    pub fn given(&self, key: &str) -> bool {
        let synonyms: &[&str] = match key {
            "log.retention.ms" => &["log.retention.minutes", "log.retention.hours"],
            "log.roll.ms" => &["log.roll.hours"],
            _ => &[],
        };
        std::iter::once(&key)
            .chain(synonyms)
            .any(|k| self.given_keys.contains(*k))
    }

    /// Every broker setting and its value, for DescribeConfigs on the broker resource.
    pub fn described(&self) -> Vec<(String, String)> {
        let mut out = vec![
            ("node.id".to_string(), self.node_id.to_string()),
            (
                "listeners".into(),
                format!("PLAINTEXT://{}:{}", self.listener.host, self.listener.port),
            ),
            (
                "advertised.listeners".into(),
                format!(
                    "PLAINTEXT://{}:{}",
                    self.advertised.host, self.advertised.port
                ),
            ),
            ("log.dirs".into(), self.log_dir.display().to_string()),
            ("num.partitions".into(), self.num_partitions.to_string()),
            (
                "default.replication.factor".into(),
                self.default_replication_factor.to_string(),
            ),
            (
                "auto.create.topics.enable".into(),
                self.auto_create_topics.to_string(),
            ),
            (
                "socket.request.max.bytes".into(),
                self.request_bytes_max.to_string(),
            ),
            (
                "queued.max.request.bytes".into(),
                self.queued_request_bytes_max.to_string(),
            ),
            (
                "queued.max.response.bytes".into(),
                self.queued_response_bytes_max.to_string(),
            ),
            (
                "connections.max.write.ms".into(),
                self.write_timeout.as_millis().to_string(),
            ),
            (
                "log.io.mode".into(),
                match self.io_mode {
                    IoMode::Direct => "direct".into(),
                    IoMode::Buffered => "buffered".into(),
                },
            ),
            (
                "log.cache.max.bytes".into(),
                self.cache_bytes_max.to_string(),
            ),
            ("log.stage.dir".into(), self.stage_dir.display().to_string()),
            ("log.stage.bytes".into(), self.stage_bytes.to_string()),
            (
                "connections.max.idle.ms".into(),
                self.idle_timeout.as_millis().to_string(),
            ),
            ("max.connections".into(), self.connections_max.to_string()),
            (
                "max.connections.per.ip".into(),
                self.connections_per_ip_max.to_string(),
            ),
            (
                "producer.id.expiration.ms".into(),
                self.producer_id_expiration.as_millis().to_string(),
            ),
            (
                "broker.heartbeat.interval.ms".into(),
                self.heartbeat_interval.as_millis().to_string(),
            ),
            (
                "broker.session.timeout.ms".into(),
                self.session_timeout.as_millis().to_string(),
            ),
            (
                "metadata.log.max.record.bytes.between.snapshots".into(),
                self.metadata_snapshot_bytes.to_string(),
            ),
            (
                "producer.id.expiration.check.interval.ms".into(),
                self.producer_id_expiration_check_interval
                    .as_millis()
                    .to_string(),
            ),
        ];
        if let Some(rack) = &self.rack {
            out.push(("broker.rack".into(), rack.clone()));
        }
        for (topic_key, broker_key, _) in TOPIC_CONFIGS {
            out.push((
                broker_key.to_string(),
                self.topic_defaults[*topic_key].clone(),
            ));
        }
        for (key, default) in DYNAMIC_ONLY_BROKER_CONFIGS {
            out.push((key.to_string(), default.to_string()));
        }
        out.extend(self.cleaner_static.clone());
        out.push(("log.cleaner.enable".into(), self.cleaner_enable.to_string()));
        out.sort();
        out
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_run_a_local_node() {
        let config = BrokerConfig::load(None, &[]).expect("defaults are valid");
        assert!(
            config.quorum_voters.is_empty(),
            "a one-voter quorum by default"
        );
        assert_eq!(
            config.listener,
            Listener {
                host: "127.0.0.1".into(),
                port: 9092
            }
        );
        assert_eq!(config.log_dir, PathBuf::from("./data"));
        assert!(config.auto_create_topics);
        assert_eq!(config.topic_defaults["max.message.bytes"], "1048588");
        assert!(
            matches!(config.io_mode, IoMode::Direct),
            "the faster mode is the default"
        );
    }

    #[test]
    fn the_stage_follows_the_cache_unless_set() {
        let load = |flags: &[&str]| {
            let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
            BrokerConfig::load(None, &flags).expect("valid")
        };
        let config = load(&[]);
        assert_eq!(config.stage_dir, PathBuf::from("/dev/shm"));
        assert_eq!(config.stage_bytes, (64 << 20) + (64 << 20));
        let config = load(&["log.cache.max.bytes=1048576"]);
        assert_eq!(config.stage_bytes, (1 << 20) + (64 << 20));
        let config = load(&["log.stage.bytes=0", "log.stage.dir=/run/stage"]);
        assert_eq!(config.stage_bytes, 0, "no stage: acks=1 waits for the disk");
        assert_eq!(config.stage_dir, PathBuf::from("/run/stage"));
    }

    #[test]
    fn file_then_flags_override() {
        let dir = tempfile::tempdir().expect("tmp");
        let path = dir.path().join("server.properties");
        std::fs::write(
            &path,
            "# comment\nnum.partitions=3\nlog.dirs=/a,/b\nlog.io.mode = direct\n",
        )
        .expect("write");
        let flags = vec![
            "num.partitions=5".to_string(),
            "listeners=PLAINTEXT://127.0.0.1:19092".to_string(),
        ];
        let config = BrokerConfig::load(Some(&path), &flags).expect("valid");
        assert_eq!(config.num_partitions, 5);
        assert_eq!(config.log_dir, PathBuf::from("/a"));
        assert_eq!(config.listener.port, 19092);
        assert_eq!(config.advertised.port, 19092);
        assert!(matches!(config.io_mode, IoMode::Direct));
    }

    #[test]
    fn bad_values_and_unknown_keys_are_errors() {
        for flag in [
            "num.partitions=0",
            "log.io.mode=mmap",
            "listeners=SSL://h:1",
            "no.such=1",
        ] {
            assert!(
                BrokerConfig::load(None, &[flag.to_string()]).is_err(),
                "{flag}"
            );
        }
        let too_big = [
            "message.max.bytes=2000000",
            "socket.request.max.bytes=1000000",
        ];
        let flags: Vec<String> = too_big.iter().map(|s| s.to_string()).collect();
        assert!(BrokerConfig::load(None, &flags).is_err());
    }

    #[test]
    fn topic_defaults_follow_broker_keys() {
        let load = |flags: &[&str]| {
            let flags: Vec<String> = flags.iter().map(|s| s.to_string()).collect();
            BrokerConfig::load(None, &flags).expect("valid")
        };
        let retention_ms = |flags: &[&str]| load(flags).topic_defaults["retention.ms"].clone();
        assert_eq!(retention_ms(&[]), "604800000");
        assert_eq!(retention_ms(&["log.retention.hours=1"]), "3600000");
        assert_eq!(retention_ms(&["log.retention.hours=-1"]), "-1");
        assert_eq!(
            retention_ms(&["log.retention.hours=1", "log.retention.minutes=2"]),
            "120000"
        );
        assert_eq!(
            retention_ms(&["log.retention.minutes=2", "log.retention.ms=5"]),
            "5"
        );
        let config = load(&[
            "log.retention.bytes=1000",
            "log.retention.check.interval.ms=250",
        ]);
        assert_eq!(config.topic_defaults["retention.bytes"], "1000");
        assert_eq!(config.retention_check_interval, Duration::from_millis(250));
        assert_eq!(load(&[]).retention_check_interval, Duration::from_secs(300));
    }

    #[test]
    fn producer_expiration_has_kafka_defaults() {
        let config = BrokerConfig::load(None, &[]).expect("defaults");
        assert_eq!(config.producer_id_expiration, Duration::from_secs(86_400));
        let interval = config.producer_id_expiration_check_interval;
        assert_eq!(interval, Duration::from_secs(600));
        let flags = ["producer.id.expiration.ms=500".to_string()];
        let config = BrokerConfig::load(None, &flags).expect("valid");
        assert_eq!(config.producer_id_expiration, Duration::from_millis(500));
        let zero = ["producer.id.expiration.ms=0".to_string()];
        assert!(BrokerConfig::load(None, &zero).is_err());
    }

    #[test]
    fn quorum_voters_are_kafkas_id_at_host_port_list_and_name_this_node() {
        let flags = [
            "node.id=2".to_string(),
            "controller.quorum.voters=1@127.0.0.1:19093, 2@127.0.0.1:19094,3@127.0.0.1:19095"
                .to_string(),
        ];
        let config = BrokerConfig::load(None, &flags).expect("valid");
        let ports: Vec<(i32, u16)> = config
            .quorum_voters
            .iter()
            .map(|(&id, address)| (id, address.port()))
            .collect();
        assert_eq!(ports, vec![(1, 19093), (2, 19094), (3, 19095)]);
        for bad in [
            "1@127.0.0.1:19093,1@127.0.0.1:19094",
            "x@127.0.0.1:1",
            "1:127.0.0.1:1",
            "1@nowhere",
        ] {
            let flags = [
                "node.id=1".to_string(),
                format!("controller.quorum.voters={bad}"),
            ];
            assert!(BrokerConfig::load(None, &flags).is_err(), "{bad}");
        }
        let outsider = [
            "node.id=4".to_string(),
            "controller.quorum.voters=1@127.0.0.1:19093".to_string(),
        ];
        assert!(BrokerConfig::load(None, &outsider).is_err());
    }
}
