//! How a follower fetches from its leaders and when it counts as in sync (Kafka's
//! `replica.*` settings).

use std::time::Duration;

use super::settings::Settings;
use super::ConfigError;

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
    /// `replica.socket.timeout.ms`: how long a follower waits for a fetch's answer before
    /// it drops the connection and connects again (a leader cut off, or a connection
    /// that a healed network partition left waiting on TCP's retransmissions). At least
    /// `replica.fetch.wait.max.ms`, as Kafka requires.
    pub socket_timeout: Duration,
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

/// The keys [`ReplicaFetchConfig::read`] takes.
pub(super) const KEYS: &[&str] = &[
    "replica.fetch.wait.max.ms",
    "replica.fetch.min.bytes",
    "replica.fetch.max.bytes",
    "replica.fetch.response.max.bytes",
    "replica.fetch.backoff.ms",
    "replica.socket.timeout.ms",
    "replica.lag.time.max.ms",
    "replica.high.watermark.checkpoint.interval.ms",
    "replica.fsync.before.fetch",
];

impl ReplicaFetchConfig {
    pub(super) fn read(settings: &Settings) -> Result<ReplicaFetchConfig, ConfigError> {
        let wait_max = settings.positive_ms("replica.fetch.wait.max.ms", "500")?;
        let socket_timeout = settings.positive_ms("replica.socket.timeout.ms", "30000")?;
        if socket_timeout < wait_max {
            return Err(ConfigError::Value {
                key: "replica.socket.timeout.ms".to_string(),
                value: socket_timeout.as_millis().to_string(),
                reason: format!(
                    "must be at least replica.fetch.wait.max.ms ({} ms), or every fetch that \
                     waits for data would time out",
                    wait_max.as_millis()
                ),
            });
        }
        Ok(ReplicaFetchConfig {
            wait_max,
            min_bytes: settings.number("replica.fetch.min.bytes", "1", 1, i32::MAX)?,
            partition_bytes_max: settings.number(
                "replica.fetch.max.bytes",
                "1048576",
                1,
                i32::MAX,
            )?,
            response_bytes_max: settings.number(
                "replica.fetch.response.max.bytes",
                "10485760",
                1,
                i32::MAX,
            )?,
            backoff: settings.positive_ms("replica.fetch.backoff.ms", "1000")?,
            socket_timeout,
            lag_time_max: settings.positive_ms("replica.lag.time.max.ms", "30000")?,
            high_watermark_checkpoint_interval: settings
                .positive_ms("replica.high.watermark.checkpoint.interval.ms", "5000")?,
            fsync_before_fetch: settings.boolean("replica.fsync.before.fetch", "false")?,
        })
    }
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;

    use super::*;

    fn read(pairs: &[(&str, &str)]) -> Result<ReplicaFetchConfig, ConfigError> {
        let raw: BTreeMap<String, String> = pairs
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect();
        ReplicaFetchConfig::read(&Settings::new(&raw))
    }

    #[test]
    fn the_socket_timeout_is_kafkas_and_never_below_the_fetch_wait() {
        let defaults = read(&[]).expect("defaults are valid");
        assert_eq!(defaults.socket_timeout, Duration::from_secs(30));
        assert_eq!(defaults.wait_max, Duration::from_millis(500));
        let short = read(&[("replica.socket.timeout.ms", "400")]).expect_err("below the wait");
        assert!(
            short.to_string().contains("replica.fetch.wait.max.ms"),
            "{short}"
        );
        let both = read(&[
            ("replica.socket.timeout.ms", "400"),
            ("replica.fetch.wait.max.ms", "100"),
        ])
        .expect("above the wait");
        assert_eq!(both.socket_timeout, Duration::from_millis(400));
    }
}
