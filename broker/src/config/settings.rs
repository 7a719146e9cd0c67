//! Reading settings: Java properties text into a key → value map, and typed, range-checked
//! values out of it, each with Kafka's default when the key is absent.
//!
//! Invariants: a value is parsed once, named by its key in every error; numbers outside
//! their range are refused, never clamped.

use std::collections::BTreeMap;
use std::net::SocketAddr;
use std::time::Duration;

use super::ConfigError;

/// The settings given to a node: the properties file overridden by `--set` flags.
pub(super) struct Settings<'a> {
    raw: &'a BTreeMap<String, String>,
}

impl<'a> Settings<'a> {
    pub(super) fn new(raw: &'a BTreeMap<String, String>) -> Settings<'a> {
        Settings { raw }
    }

    /// The value of `key`, if given.
    pub(super) fn get(&self, key: &str) -> Option<&'a str> {
        self.raw.get(key).map(String::as_str)
    }

    /// The number `key` gives (or `default`), within `min..=max`.
    pub(super) fn number<T>(
        &self,
        key: &str,
        default: &str,
        min: T,
        max: T,
    ) -> Result<T, ConfigError>
    where
        T: std::str::FromStr + PartialOrd + std::fmt::Display + Copy,
    {
        number(key, self.get(key).unwrap_or(default), min, max)
    }

    /// Kafka's int milliseconds settings that must be positive.
    pub(super) fn positive_ms(&self, key: &str, default: &str) -> Result<Duration, ConfigError> {
        self.number(key, default, 1, i32::MAX as u64)
            .map(Duration::from_millis)
    }

    /// Kafka's long milliseconds settings that must be positive.
    pub(super) fn positive_long_ms(
        &self,
        key: &str,
        default: &str,
    ) -> Result<Duration, ConfigError> {
        self.number(key, default, 1, u64::MAX / 2)
            .map(Duration::from_millis)
    }

    /// `true` or `false`, as `key` gives it (or `default`).
    pub(super) fn boolean(&self, key: &str, default: &str) -> Result<bool, ConfigError> {
        let value = self.get(key).unwrap_or(default);
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
}

/// `value` of `key` as a number within `min..=max`.
pub(super) fn number<T>(key: &str, value: &str, min: T, max: T) -> Result<T, ConfigError>
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
pub(super) fn parse_voters(value: &str) -> Result<BTreeMap<i32, SocketAddr>, ConfigError> {
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
