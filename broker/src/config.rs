//! Broker configuration: Kafka's names and value formats, from an optional properties
//! file overridden by `--set key=value` flags.
//!
//! Invariants: every value is parsed and range-checked once, at start-up, into a typed
//! [`BrokerConfig`]; an unknown key is reported, never silently ignored; relationships
//! between limits are checked here (a message must fit in a request, a request in the
//! shard's request budget).

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::path::{Path, PathBuf};
use std::sync::atomic::AtomicI32;
use std::sync::Arc;
use std::time::Duration;

use storage::IoMode;
use thiserror::Error;

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
    /// `log.cleaner.backoff.ms`: the pause between two cleaning passes of a shard.
    pub cleaner_backoff: Duration,
    /// `log.cleaner.dedupe.buffer.size`: memory of the cleaners' offset maps, for the whole
    /// node; each shard's cleaner takes an equal share.
    pub cleaner_dedupe_buffer_bytes: usize,
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
}

/// How a follower fetches from its leaders (Kafka's `replica.fetch.*`).
#[derive(Debug, Clone)]
pub struct ReplicaFetchConfig {
    /// `replica.fetch.wait.max.ms`: how long a follower's fetch waits at the leader for data.
    pub wait_max: Duration,
    /// `replica.fetch.min.bytes`.
    pub min_bytes: i32,
    /// `replica.fetch.max.bytes`: per partition (at least one batch is returned, KIP-74).
    pub partition_bytes_max: i32,
    /// `replica.fetch.response.max.bytes`: per fetch.
    pub response_bytes_max: i32,
    /// `replica.fetch.backoff.ms`: the pause after a failed fetch or a partition's error.
    pub backoff: Duration,
    /// `replica.lag.time.max.ms`: a follower that has not caught up for this long leaves
    /// the ISR.
    pub lag_time_max: Duration,
    /// `replica.high.watermark.checkpoint.interval.ms`: how often the high watermarks are
    /// written to `replication-offset-checkpoint`.
    pub high_watermark_checkpoint_interval: Duration,
    /// `replica.fsync.before.fetch` (ringlog's, off by default as in Kafka): a follower
    /// fetches past a batch only once its copy is fdatasynced, and a leader counts only its
    /// own synced records, so the high watermark means "fsynced on every ISR member".
    pub fsync_before_fetch: bool,
}

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

/// What an answer adds around its records: headers and per-partition fields, generously.
pub const RESPONSE_OVERHEAD_BYTES: usize = 64 << 10;

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
];

/// Broker keys that are not topic defaults.
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
    "log.write.buffer.bytes",
    "connections.max.idle.ms",
    "max.in.flight.requests.per.connection",
    "max.connections",
    "max.connections.per.ip",
    "log.retention.hours",
    "log.retention.minutes",
    "log.retention.check.interval.ms",
    "log.cleaner.enable",
    "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size",
    "offsets.topic.num.partitions",
    "offsets.topic.replication.factor",
    "offsets.retention.minutes",
    "offset.metadata.max.bytes",
    "group.initial.rebalance.delay.ms",
    "group.min.session.timeout.ms",
    "group.max.session.timeout.ms",
    "group.max.size",
    "producer.id.expiration.ms",
    "broker.heartbeat.interval.ms",
    "broker.session.timeout.ms",
    "metadata.log.max.record.bytes.between.snapshots",
    "producer.id.expiration.check.interval.ms",
    "replica.fetch.wait.max.ms",
    "replica.fetch.min.bytes",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.backoff.ms",
    "replica.lag.time.max.ms",
    "replica.high.watermark.checkpoint.interval.ms",
    "replica.fsync.before.fetch",
];

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
        for key in raw.keys() {
            let known = BROKER_KEYS.contains(&key.as_str())
                || TOPIC_CONFIGS
                    .iter()
                    .any(|(_, broker_key, _)| broker_key == key);
            if !known {
                return Err(ConfigError::UnknownKey(key.clone()));
            }
        }
        let get = |key: &str| raw.get(key).map(String::as_str);
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
        let request_bytes_max: usize = number(
            "socket.request.max.bytes",
            get("socket.request.max.bytes").unwrap_or("104857600"),
            1024,
            i32::MAX as usize,
        )?;
        let message_bytes_max: usize = number(
            "message.max.bytes",
            get("message.max.bytes").unwrap_or("1048588"),
            0,
            i32::MAX as usize,
        )?;
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
        let queued_response_bytes_max: usize = number(
            "queued.max.response.bytes",
            get("queued.max.response.bytes").unwrap_or("134217728"),
            4 * (message_bytes_max + RESPONSE_OVERHEAD_BYTES),
            usize::MAX / 2,
        )?;
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
        // Kafka's int milliseconds settings that must be positive.
        let positive_ms = |key: &str, default: &str| {
            number(key, get(key).unwrap_or(default), 1, i32::MAX as u64).map(Duration::from_millis)
        };
        let quorum_voters = parse_voters(get("controller.quorum.voters").unwrap_or(""))?;
        // Kafka's default of 3 is for a cluster; a one-voter node takes its sample's 1.
        let offsets_replication = if quorum_voters.len() > 1 { "3" } else { "1" };
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
            num_partitions: number(
                "num.partitions",
                get("num.partitions").unwrap_or("1"),
                1,
                1 << 20,
            )?,
            default_replication_factor: number(
                "default.replication.factor",
                get("default.replication.factor").unwrap_or("1"),
                1,
                i16::MAX,
            )?,
            auto_create_topics: boolean(
                "auto.create.topics.enable",
                get("auto.create.topics.enable").unwrap_or("true"),
            )?,
            segment_bytes_max: number(
                "log.segment.bytes",
                get("log.segment.bytes").unwrap_or("1073741824"),
                14,
                i32::MAX as u64,
            )?,
            segment_ms_max,
            index_interval_bytes: number(
                "log.index.interval.bytes",
                get("log.index.interval.bytes").unwrap_or("4096"),
                0,
                i32::MAX as u32,
            )?,
            flush_interval: Duration::from_millis(number(
                "log.flush.interval.ms",
                get("log.flush.interval.ms").unwrap_or("1000"),
                1,
                u64::MAX / 2,
            )?),
            retention_check_interval: Duration::from_millis(number(
                "log.retention.check.interval.ms",
                get("log.retention.check.interval.ms").unwrap_or("300000"),
                1,
                u64::MAX / 2,
            )?),
            cleaner_enable: boolean(
                "log.cleaner.enable",
                get("log.cleaner.enable").unwrap_or("true"),
            )?,
            cleaner_backoff: Duration::from_millis(number(
                "log.cleaner.backoff.ms",
                get("log.cleaner.backoff.ms").unwrap_or("15000"),
                1,
                u64::MAX / 2,
            )?),
            cleaner_dedupe_buffer_bytes: number(
                "log.cleaner.dedupe.buffer.size",
                get("log.cleaner.dedupe.buffer.size").unwrap_or("134217728"),
                1 << 10,
                usize::MAX / 2,
            )?,
            message_bytes_max,
            request_bytes_max,
            queued_request_bytes_max,
            queued_response_bytes_max,
            write_timeout: Duration::from_millis(number(
                "connections.max.write.ms",
                get("connections.max.write.ms").unwrap_or("30000"),
                1,
                u64::MAX / 2,
            )?),
            io_mode,
            cache_bytes_max: number(
                "log.cache.max.bytes",
                get("log.cache.max.bytes").unwrap_or("67108864"),
                0,
                usize::MAX / 2,
            )?,
            write_buffer_bytes_max: number(
                "log.write.buffer.bytes",
                get("log.write.buffer.bytes").unwrap_or("1048576"),
                4096,
                1 << 30,
            )?,
            idle_timeout: Duration::from_millis(number(
                "connections.max.idle.ms",
                get("connections.max.idle.ms").unwrap_or("600000"),
                1,
                u64::MAX / 2,
            )?),
            in_flight_requests_max: number(
                "max.in.flight.requests.per.connection",
                get("max.in.flight.requests.per.connection").unwrap_or("32"),
                1,
                1024,
            )?,
            connections_max: number(
                "max.connections",
                get("max.connections").unwrap_or("2147483647"),
                1,
                i32::MAX as usize,
            )?,
            connections_per_ip_max: number(
                "max.connections.per.ip",
                get("max.connections.per.ip").unwrap_or("2147483647"),
                1,
                i32::MAX as usize,
            )?,
            topic_defaults,
            producer_id_expiration: positive_ms("producer.id.expiration.ms", "86400000")?,
            heartbeat_interval: positive_ms("broker.heartbeat.interval.ms", "2000")?,
            session_timeout: positive_ms("broker.session.timeout.ms", "9000")?,
            metadata_snapshot_bytes: number(
                "metadata.log.max.record.bytes.between.snapshots",
                get("metadata.log.max.record.bytes.between.snapshots").unwrap_or("20971520"),
                1,
                u64::MAX / 2,
            )?,
            producer_id_expiration_check_interval: positive_ms(
                "producer.id.expiration.check.interval.ms",
                "600000",
            )?,
            replica_fetch: ReplicaFetchConfig {
                wait_max: positive_ms("replica.fetch.wait.max.ms", "500")?,
                min_bytes: number(
                    "replica.fetch.min.bytes",
                    get("replica.fetch.min.bytes").unwrap_or("1"),
                    1,
                    i32::MAX,
                )?,
                partition_bytes_max: number(
                    "replica.fetch.max.bytes",
                    get("replica.fetch.max.bytes").unwrap_or("1048576"),
                    1,
                    i32::MAX,
                )?,
                response_bytes_max: number(
                    "replica.fetch.response.max.bytes",
                    get("replica.fetch.response.max.bytes").unwrap_or("10485760"),
                    1,
                    i32::MAX,
                )?,
                backoff: positive_ms("replica.fetch.backoff.ms", "1000")?,
                lag_time_max: positive_ms("replica.lag.time.max.ms", "30000")?,
                high_watermark_checkpoint_interval: positive_ms(
                    "replica.high.watermark.checkpoint.interval.ms",
                    "5000",
                )?,
                fsync_before_fetch: boolean(
                    "replica.fsync.before.fetch",
                    get("replica.fsync.before.fetch").unwrap_or("false"),
                )?,
            },
            groups: GroupConfig {
                offsets_replication_factor: number(
                    "offsets.topic.replication.factor",
                    get("offsets.topic.replication.factor").unwrap_or(offsets_replication),
                    1,
                    i16::MAX,
                )?,
                offsets_partitions: number(
                    "offsets.topic.num.partitions",
                    get("offsets.topic.num.partitions").unwrap_or("50"),
                    1,
                    10_000,
                )?,
                offsets_retention: Duration::from_secs(
                    60 * number::<u64>(
                        "offsets.retention.minutes",
                        get("offsets.retention.minutes").unwrap_or("10080"),
                        1,
                        1 << 32,
                    )?,
                ),
                offset_metadata_bytes_max: number(
                    "offset.metadata.max.bytes",
                    get("offset.metadata.max.bytes").unwrap_or("4096"),
                    0,
                    1 << 20,
                )?,
                initial_rebalance_delay: Duration::from_millis(number(
                    "group.initial.rebalance.delay.ms",
                    get("group.initial.rebalance.delay.ms").unwrap_or("3000"),
                    0,
                    1 << 31,
                )?),
                session_timeout_min: positive_ms("group.min.session.timeout.ms", "6000")?,
                session_timeout_max: positive_ms("group.max.session.timeout.ms", "1800000")?,
                members_max: number(
                    "group.max.size",
                    get("group.max.size").unwrap_or("2147483647"),
                    1,
                    i32::MAX as usize,
                )?,
            },
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
        out.sort();
        out
    }
}

/// Java properties, the subset Kafka's files use: `key=value` or `key: value` lines,
/// `#`/`!` comments, blank lines.
pub(crate) fn parse_properties(
    text: &str,
    origin: &str,
    out: &mut BTreeMap<String, String>,
) -> Result<(), ConfigError> {
    for line in text.lines() {
        let line = line.trim();
        if line.is_empty() || line.starts_with('#') || line.starts_with('!') {
            continue;
        }
        let (key, value) = line
            .split_once('=')
            .or_else(|| line.split_once(':'))
            .ok_or_else(|| ConfigError::Syntax {
                origin: origin.into(),
                line: line.into(),
            })?;
        out.insert(key.trim().to_string(), value.trim().to_string());
    }
    Ok(())
}

/// `controller.quorum.voters`: `id@host:port` entries separated by commas, as Kafka writes
/// them; hosts are resolved once, at start.
fn parse_voters(value: &str) -> Result<BTreeMap<i32, SocketAddr>, ConfigError> {
    let invalid = |reason: String| ConfigError::Value {
        key: "controller.quorum.voters".into(),
        value: value.into(),
        reason,
    };
    let mut voters = BTreeMap::new();
    for entry in value.split(',').map(str::trim).filter(|e| !e.is_empty()) {
        let (id, address) = entry
            .split_once('@')
            .ok_or_else(|| invalid(format!("{entry} is not id@host:port")))?;
        let id: i32 = id
            .trim()
            .parse()
            .ok()
            .filter(|id| *id >= 0)
            .ok_or_else(|| invalid(format!("{id} is not a node id")))?;
        let address = std::net::ToSocketAddrs::to_socket_addrs(address.trim())
            .ok()
            .and_then(|mut addresses| addresses.next())
            .ok_or_else(|| invalid(format!("{address} is not a reachable host:port")))?;
        if voters.insert(id, address).is_some() {
            return Err(invalid(format!("voter {id} is named twice")));
        }
    }
    Ok(voters)
}

fn number<T>(key: &str, value: &str, min: T, max: T) -> Result<T, ConfigError>
where
    T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
{
    let parsed: T = value.parse().map_err(|_| ConfigError::Value {
        key: key.into(),
        value: value.into(),
        reason: "not a number".into(),
    })?;
    if parsed < min || parsed > max {
        return Err(ConfigError::Value {
            key: key.into(),
            value: value.into(),
            reason: format!("must be between {min} and {max}"),
        });
    }
    Ok(parsed)
}

fn boolean(key: &str, value: &str) -> Result<bool, ConfigError> {
    match value {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError::Value {
            key: key.into(),
            value: value.into(),
            reason: "expected true or false".into(),
        }),
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
