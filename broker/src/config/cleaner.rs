//! The log cleaner's broker settings (Kafka's `log.cleaner.*` beside the topic defaults).
//! `log.cleaner.enable` is read at start; the others are in Kafka's dynamic list and change
//! at run time: the cleaner resolves them from the metadata image at each pass.
//!
//! Invariants: static and dynamic values are read by one function, so a value a properties
//! file may not give cannot be set at run time either; the rate is for the whole node, as
//! Kafka's is for all its cleaner threads, and each shard takes an equal share of it, as it
//! does of the offset maps' memory.

use std::collections::BTreeMap;
use std::time::Duration;

use super::settings::Settings;
use super::ConfigError;

/// The cleaner's settings that change at run time, with Kafka's defaults (its "no limit" is
/// `Double.MAX_VALUE`, written as Java writes it).
pub const DYNAMIC: &[(&str, &str)] = &[
    ("log.cleaner.backoff.ms", "15000"),
    ("log.cleaner.dedupe.buffer.size", "134217728"),
    (
        "log.cleaner.io.max.bytes.per.second",
        "1.7976931348623157E308",
    ),
    ("log.cleaner.threads", "1"),
];

/// Every key of this module.
pub(super) const KEYS: &[&str] = &[
    "log.cleaner.enable",
    "log.cleaner.backoff.ms",
    "log.cleaner.dedupe.buffer.size",
    "log.cleaner.io.max.bytes.per.second",
    "log.cleaner.threads",
];

/// How the cleaners run, as resolved now.
#[derive(Clone, Copy, Debug, PartialEq)]
pub struct CleanerSettings {
    /// `log.cleaner.backoff.ms`: the pause between two cleaning passes of a shard.
    pub backoff: Duration,
    /// `log.cleaner.dedupe.buffer.size`: memory of the offset maps, for the whole node,
    /// split equally among the cleanings that may run at once (shards × threads), as Kafka
    /// splits it among its cleaner threads.
    pub dedupe_buffer_bytes: usize,
    /// `log.cleaner.io.max.bytes.per.second`: the cleaners' reads and writes, for the whole
    /// node (`f64::MAX`: no limit).
    pub io_bytes_per_second: f64,
    /// `log.cleaner.threads`: how many of its partitions each shard cleans at once. Kafka's
    /// threads clean the whole broker; here every shard cleans its own partitions, so the
    /// setting is per shard and one already cleans on every core.
    pub threads: usize,
}

impl CleanerSettings {
    pub(super) fn read(settings: &Settings) -> Result<CleanerSettings, ConfigError> {
        let threads = settings.number("log.cleaner.threads", "1", 1, 64)?;
        Ok(CleanerSettings {
            backoff: settings.positive_long_ms("log.cleaner.backoff.ms", "15000")?,
            dedupe_buffer_bytes: settings.number(
                "log.cleaner.dedupe.buffer.size",
                "134217728",
                1 << 10,
                usize::MAX / 2,
            )?,
            io_bytes_per_second: settings.number(
                "log.cleaner.io.max.bytes.per.second",
                "1.7976931348623157E308",
                f64::MIN_POSITIVE,
                f64::MAX,
            )?,
            threads,
        })
    }

    /// The settings `value_of` gives (each key's effective value, if set anywhere), every
    /// other one at its default.
    pub fn resolve(
        value_of: impl Fn(&str) -> Option<String>,
    ) -> Result<CleanerSettings, ConfigError> {
        let raw: BTreeMap<String, String> = DYNAMIC
            .iter()
            .filter_map(|(key, _)| value_of(key).map(|value| (key.to_string(), value)))
            .collect();
        CleanerSettings::read(&Settings::new(&raw))
    }

    /// Whether `value` is one that `key` may take: the check of a change at run time.
    pub fn check(key: &str, value: &str) -> Result<(), ConfigError> {
        CleanerSettings::resolve(|k| (k == key).then(|| value.to_string())).map(|_| ())
    }

    /// One cleaning's share of the offset maps' memory, on a node of `shard_count` shards.
    pub fn dedupe_share(&self, shard_count: usize) -> usize {
        self.dedupe_buffer_bytes / (shard_count.max(1) * self.threads)
    }

    /// One shard's share of the rate, on a node of `shard_count` shards.
    pub fn io_share(&self, shard_count: usize) -> f64 {
        self.io_bytes_per_second / shard_count.max(1) as f64
    }
}

/// The static value of dynamic cleaner setting `key` (given, or its default).
pub(super) fn static_value(raw: &BTreeMap<String, String>, key: &str) -> Option<String> {
    DYNAMIC
        .iter()
        .find(|(k, _)| *k == key)
        .map(|(k, default)| raw.get(*k).cloned().unwrap_or_else(|| default.to_string()))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn defaults_are_kafkas() {
        let settings = CleanerSettings::resolve(|_| None).expect("defaults are valid");
        assert_eq!(settings.backoff, Duration::from_secs(15));
        assert_eq!(settings.dedupe_buffer_bytes, 128 << 20);
        assert_eq!(settings.io_bytes_per_second, f64::MAX);
        assert_eq!(settings.threads, 1);
        assert_eq!(settings.dedupe_share(2), 64 << 20);
    }

    #[test]
    fn changes_are_checked_as_a_file_is() {
        assert!(CleanerSettings::check("log.cleaner.io.max.bytes.per.second", "1048576").is_ok());
        assert!(CleanerSettings::check("log.cleaner.io.max.bytes.per.second", "1.5E7").is_ok());
        assert!(CleanerSettings::check("log.cleaner.io.max.bytes.per.second", "0").is_err());
        assert!(CleanerSettings::check("log.cleaner.threads", "0").is_err());
        assert!(CleanerSettings::check("log.cleaner.backoff.ms", "soon").is_err());
        let settings =
            CleanerSettings::resolve(|key| (key == "log.cleaner.threads").then(|| "4".to_string()))
                .expect("valid");
        assert_eq!(settings.threads, 4);
        assert_eq!(settings.dedupe_share(2), 16 << 20);
    }
}
