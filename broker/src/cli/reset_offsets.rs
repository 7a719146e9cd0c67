//! `ringlog group reset-offsets`: the plan (which offset each partition moves to) and the
//! parsing of its `--to-datetime` and `--by-duration` arguments, as kafka-consumer-groups
//! computes them.
//!
//! Invariants:
//! - A planned offset always lies in [earliest, latest] of its partition: `--to-offset` and
//!   `--shift-by` outside are clamped with Kafka's warning; `--to-datetime` and
//!   `--by-duration` past the last record go to the latest offset.
//! - `--shift-by` needs a committed offset; a partition without one fails the plan with
//!   Kafka's message rather than guessing a base.
//! - Datetimes without a zone are UTC (Kafka appends `Z` to them).

use anyhow::{anyhow, bail, Result};

/// Where to move the offsets.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum Target {
    Earliest,
    Latest,
    Offset(i64),
    /// The first offset whose record timestamp is at or after this time (ms since epoch).
    Datetime(i64),
    ShiftBy(i64),
    /// Like `Datetime(now - duration)`.
    ByDurationMs(i64),
}

/// What is known about one partition when planning.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct PartitionOffsets {
    pub earliest: i64,
    pub latest: i64,
    pub committed: Option<i64>,
    /// ListOffsets' answer for the target time (datetime and duration targets only).
    pub at_time: Option<i64>,
}

/// One partition's new offset, and the warning Kafka prints when it was clamped.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Planned {
    pub offset: i64,
    pub warning: Option<String>,
}

/// The timestamp ListOffsets must be asked for, for targets that depend on time.
pub fn lookup_time(target: Target, now_ms: i64) -> Option<i64> {
    match target {
        Target::Datetime(at) => Some(at),
        Target::ByDurationMs(duration) => Some(now_ms - duration),
        _ => None,
    }
}

/// The new offset of `topic`-`partition`.
pub fn plan(
    target: Target,
    topic: &str,
    partition: i32,
    known: PartitionOffsets,
) -> Result<Planned> {
    let requested = match target {
        Target::Earliest => known.earliest,
        Target::Latest => known.latest,
        Target::Offset(offset) => offset,
        Target::ShiftBy(shift) => {
            let current = known.committed.ok_or_else(|| {
                anyhow!(
                    "Cannot shift offset for partition {topic}-{partition} since there is no \
                     current committed offset"
                )
            })?;
            current.saturating_add(shift)
        }
        Target::Datetime(_) | Target::ByDurationMs(_) => known.at_time.unwrap_or(known.latest),
    };
    Ok(clamp(requested, topic, partition, known))
}

fn clamp(offset: i64, topic: &str, partition: i32, known: PartitionOffsets) -> Planned {
    if offset > known.latest {
        Planned {
            offset: known.latest,
            warning: Some(format!(
                "New offset ({offset}) is higher than latest offset for topic partition \
                 {topic}-{partition}. Value will be set to {}",
                known.latest
            )),
        }
    } else if offset < known.earliest {
        Planned {
            offset: known.earliest,
            warning: Some(format!(
                "New offset ({offset}) is lower than earliest offset for topic partition \
                 {topic}-{partition}. Value will be set to {}",
                known.earliest
            )),
        }
    } else {
        Planned {
            offset,
            warning: None,
        }
    }
}

/// Parses Kafka's `--to-datetime` format, `YYYY-MM-DDTHH:mm:SS.sss` with an optional zone
/// (`Z`, `+HH`, `+HHMM`, `+HH:MM`, or `-`), into ms since the epoch. The milliseconds may be
/// left out; without a zone the time is UTC.
pub fn parse_datetime(text: &str) -> Result<i64> {
    let bad =
        || anyhow!("Error parsing timestamp {text:?}: expected YYYY-MM-DDTHH:mm:SS.sss[zone]");
    let (date, time) = text.split_once('T').ok_or_else(|| {
        anyhow!("Error parsing timestamp. It does not contain a 'T' according to ISO8601 format")
    })?;
    let number = |s: &str, digits: usize| -> Result<i64> {
        if s.len() != digits || !s.bytes().all(|b| b.is_ascii_digit()) {
            return Err(bad());
        }
        s.parse::<i64>().map_err(|_| bad())
    };
    let mut date_parts = date.split('-');
    let (year, month, day) = match (date_parts.next(), date_parts.next(), date_parts.next()) {
        (Some(y), Some(m), Some(d)) if date_parts.next().is_none() => {
            (number(y, 4)?, number(m, 2)?, number(d, 2)?)
        }
        _ => return Err(bad()),
    };
    let zone_at = time.find(['Z', 'z', '+', '-']).unwrap_or(time.len());
    let (clock, zone) = time.split_at(zone_at);
    let (hms, millis) = match clock.split_once('.') {
        Some((hms, millis)) => (hms, number(millis, 3)?),
        None => (clock, 0),
    };
    let mut hms_parts = hms.split(':');
    let (hour, minute, second) = match (hms_parts.next(), hms_parts.next(), hms_parts.next()) {
        (Some(h), Some(m), Some(s)) if hms_parts.next().is_none() => {
            (number(h, 2)?, number(m, 2)?, number(s, 2)?)
        }
        _ => return Err(bad()),
    };
    if !(1..=12).contains(&month)
        || day < 1
        || day > days_in_month(year, month)
        || hour > 23
        || minute > 59
        || second > 59
    {
        return Err(bad());
    }
    let offset_minutes = match zone {
        "" | "Z" | "z" => 0,
        _ => {
            let sign = if zone.starts_with('-') { -1 } else { 1 };
            let digits = zone[1..].replace(':', "");
            let (hours, minutes) = match digits.len() {
                2 => (number(&digits, 2)?, 0),
                4 => (number(&digits[..2], 2)?, number(&digits[2..], 2)?),
                _ => return Err(bad()),
            };
            if zone[1..].contains(':') && zone.len() != 6 || hours > 18 || minutes > 59 {
                return Err(bad());
            }
            sign * (hours * 60 + minutes)
        }
    };
    let days = days_from_civil(year, month, day);
    let seconds = days * 86_400 + hour * 3_600 + minute * 60 + second - offset_minutes * 60;
    Ok(seconds * 1_000 + millis)
}

fn days_in_month(year: i64, month: i64) -> i64 {
    match month {
        2 if year % 4 == 0 && (year % 100 != 0 || year % 400 == 0) => 29,
        2 => 28,
        4 | 6 | 9 | 11 => 30,
        _ => 31,
    }
}

/// Days from 1970-01-01 to the given proleptic Gregorian date (Howard Hinnant's algorithm).
fn days_from_civil(year: i64, month: i64, day: i64) -> i64 {
    let year = if month <= 2 { year - 1 } else { year };
    let era = year.div_euclid(400);
    let year_of_era = year - era * 400;
    let month_index = (month + 9) % 12;
    let day_of_year = (153 * month_index + 2) / 5 + day - 1;
    let day_of_era = year_of_era * 365 + year_of_era / 4 - year_of_era / 100 + day_of_year;
    era * 146_097 + day_of_era - 719_468
}

/// Parses a Java `Duration` (ISO-8601 `PnDTnHnMn.nS`, e.g. `PT1H30M`, `P1D`, `PT0.5S`) into
/// milliseconds, as `--by-duration` takes it.
pub fn parse_duration_ms(text: &str) -> Result<i64> {
    let bad = || anyhow!("Error parsing duration {text:?}: expected ISO-8601 like PnDTnHnMn.nS");
    let upper = text.to_ascii_uppercase();
    let (sign, rest) = match upper.as_bytes().first() {
        Some(b'-') => (-1, &upper[1..]),
        Some(b'+') => (1, &upper[1..]),
        _ => (1, &upper[..]),
    };
    let rest = rest.strip_prefix('P').ok_or_else(bad)?;
    let (days_part, time_part) = match rest.split_once('T') {
        Some((days, time)) if !time.is_empty() => (days, Some(time)),
        Some(_) => return Err(bad()),
        None => (rest, None),
    };
    if days_part.is_empty() && time_part.is_none() {
        return Err(bad());
    }
    let mut total_ms: i64 = 0;
    if !days_part.is_empty() {
        let days = days_part.strip_suffix('D').ok_or_else(bad)?;
        total_ms += signed_number(days).ok_or_else(bad)? * 86_400_000;
    }
    if let Some(mut time) = time_part {
        for (unit, ms_per_unit) in [('H', 3_600_000i64), ('M', 60_000)] {
            if let Some(at) = time.find(unit) {
                total_ms += signed_number(&time[..at]).ok_or_else(bad)? * ms_per_unit;
                time = &time[at + 1..];
            }
        }
        if !time.is_empty() {
            let seconds = time.strip_suffix('S').ok_or_else(bad)?;
            let (whole, fraction) = seconds.split_once('.').unwrap_or((seconds, ""));
            let negative = whole.starts_with('-');
            let whole_ms = signed_number(whole).ok_or_else(bad)? * 1_000;
            if fraction.len() > 9 || !fraction.bytes().all(|b| b.is_ascii_digit()) {
                return Err(bad());
            }
            let mut fraction_ms = 0;
            for (i, digit) in fraction.bytes().take(3).enumerate() {
                fraction_ms += (digit - b'0') as i64 * 10i64.pow(2 - i as u32);
            }
            total_ms += if negative {
                whole_ms - fraction_ms
            } else {
                whole_ms + fraction_ms
            };
        }
    }
    Ok(sign * total_ms)
}

fn signed_number(text: &str) -> Option<i64> {
    let digits = text.strip_prefix(['-', '+']).unwrap_or(text);
    if digits.is_empty() || !digits.bytes().all(|b| b.is_ascii_digit()) {
        return None;
    }
    text.parse().ok()
}

/// Checks a `--topic` argument: `NAME` or `NAME:P,P,...` (Kafka's partition selection).
pub fn parse_topic_selection(text: &str) -> Result<(String, Option<Vec<i32>>)> {
    match text.split_once(':') {
        None => Ok((text.to_string(), None)),
        Some((name, partitions)) => {
            let partitions = partitions
                .split(',')
                .map(|p| {
                    p.trim()
                        .parse::<i32>()
                        .map_err(|_| anyhow!("bad partition {p:?} in --topic {text}"))
                })
                .collect::<Result<Vec<i32>>>()?;
            if name.is_empty() {
                bail!("--topic {text} names no topic");
            }
            Ok((name.to_string(), Some(partitions)))
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    const KNOWN: PartitionOffsets = PartitionOffsets {
        earliest: 10,
        latest: 100,
        committed: Some(50),
        at_time: None,
    };

    fn offset(target: Target, known: PartitionOffsets) -> i64 {
        plan(target, "t", 0, known).unwrap().offset
    }

    #[test]
    fn earliest_latest_and_exact_offsets() {
        assert_eq!(offset(Target::Earliest, KNOWN), 10);
        assert_eq!(offset(Target::Latest, KNOWN), 100);
        assert_eq!(offset(Target::Offset(42), KNOWN), 42);
        assert_eq!(
            plan(Target::Offset(42), "t", 0, KNOWN).unwrap().warning,
            None
        );
    }

    #[test]
    fn out_of_range_offsets_are_clamped_with_kafkas_warning() {
        let high = plan(Target::Offset(500), "orders", 2, KNOWN).unwrap();
        assert_eq!(high.offset, 100);
        assert_eq!(
            high.warning.unwrap(),
            "New offset (500) is higher than latest offset for topic partition orders-2. \
             Value will be set to 100"
        );
        let low = plan(Target::Offset(3), "orders", 2, KNOWN).unwrap();
        assert_eq!(low.offset, 10);
        assert!(low
            .warning
            .unwrap()
            .contains("is lower than earliest offset"));
    }

    #[test]
    fn shift_by_moves_from_the_committed_offset_and_clamps() {
        assert_eq!(offset(Target::ShiftBy(-5), KNOWN), 45);
        assert_eq!(offset(Target::ShiftBy(5), KNOWN), 55);
        assert_eq!(offset(Target::ShiftBy(-1000), KNOWN), 10);
        assert_eq!(offset(Target::ShiftBy(1000), KNOWN), 100);
        assert_eq!(offset(Target::ShiftBy(i64::MAX), KNOWN), 100);
        let none = PartitionOffsets {
            committed: None,
            ..KNOWN
        };
        let error = plan(Target::ShiftBy(1), "orders", 1, none).unwrap_err();
        assert_eq!(
            error.to_string(),
            "Cannot shift offset for partition orders-1 since there is no current committed offset"
        );
    }

    #[test]
    fn time_targets_use_the_lookup_or_the_latest_offset() {
        let found = PartitionOffsets {
            at_time: Some(70),
            ..KNOWN
        };
        assert_eq!(offset(Target::Datetime(1), found), 70);
        assert_eq!(offset(Target::ByDurationMs(1), found), 70);
        assert_eq!(offset(Target::Datetime(1), KNOWN), 100);
        assert_eq!(lookup_time(Target::ByDurationMs(1_000), 5_000), Some(4_000));
        assert_eq!(lookup_time(Target::Datetime(7), 5_000), Some(7));
        assert_eq!(lookup_time(Target::Earliest, 5_000), None);
    }

    #[test]
    fn datetimes_in_kafkas_format() {
        assert_eq!(parse_datetime("1970-01-01T00:00:00.000").unwrap(), 0);
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20.000Z").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20.123").unwrap(),
            1_700_000_000_123
        );
        assert_eq!(
            parse_datetime("2023-11-14T22:13:20").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T23:13:20.000+01:00").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T23:13:20.000+0100").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2023-11-14T21:13:20.000-01").unwrap(),
            1_700_000_000_000
        );
        assert_eq!(
            parse_datetime("2024-02-29T00:00:00.000").unwrap(),
            1_709_164_800_000
        );
        assert_eq!(parse_datetime("1969-12-31T23:59:59.000").unwrap(), -1_000);
        for bad in [
            "2023-11-14",
            "2023-11-14 22:13:20.000",
            "2023-13-01T00:00:00.000",
            "2023-02-29T00:00:00.000",
            "2023-11-14T24:00:00.000",
            "2023-11-14T22:13:20.1",
            "2023-11-14T22:13:20.000+1",
            "23-11-14T22:13:20.000",
        ] {
            assert!(parse_datetime(bad).is_err(), "{bad}");
        }
        let error = parse_datetime("2023-11-14").unwrap_err();
        assert!(error.to_string().contains("does not contain a 'T'"));
    }

    #[test]
    fn durations_as_java_parses_them() {
        assert_eq!(parse_duration_ms("PT0.5S").unwrap(), 500);
        assert_eq!(parse_duration_ms("PT1H30M").unwrap(), 5_400_000);
        assert_eq!(parse_duration_ms("P1D").unwrap(), 86_400_000);
        assert_eq!(parse_duration_ms("P1DT1S").unwrap(), 86_401_000);
        assert_eq!(parse_duration_ms("pt15m").unwrap(), 900_000);
        assert_eq!(parse_duration_ms("-PT6H").unwrap(), -21_600_000);
        assert_eq!(parse_duration_ms("PT-1.5S").unwrap(), -1_500);
        for bad in ["", "P", "PT", "1H", "PT1X", "PT1.S5", "P1H"] {
            assert!(parse_duration_ms(bad).is_err(), "{bad}");
        }
    }

    #[test]
    fn topic_selections() {
        assert_eq!(
            parse_topic_selection("orders").unwrap(),
            ("orders".into(), None)
        );
        assert_eq!(
            parse_topic_selection("orders:0,2").unwrap(),
            ("orders".into(), Some(vec![0, 2]))
        );
        assert!(parse_topic_selection("orders:x").is_err());
        assert!(parse_topic_selection(":1").is_err());
    }
}
