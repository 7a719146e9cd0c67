//! How `ringlog consume` prints a record: `--format` strings (`%k %v %p %o %t\n`)
//! or kafka-console-consumer's layout (the value, optionally preceded by `CreateTime:…`,
//! `Partition:…`, `Offset:…` and the key, tab-separated).
//!
//! Invariants:
//! - A format is parsed once into pieces; printing a record allocates nothing and writes
//!   key and value bytes exactly as stored (no UTF-8 conversion).
//! - Placeholders: %k key, %v value, %p partition, %o offset, %t timestamp (ms), %h headers
//!   (`k=v,…`), %K / %S key / value length (-1 for null), %% a percent sign; `\n`, `\t`, `\r`
//!   and `\\` are escapes. They are kcat's except that %t is the timestamp (kcat's %T, also
//!   accepted), as consume reads the one topic its command line names. A null key or value prints as nothing in a
//!   `--format` string and as `null` in Kafka's layout (as each tool does).

use std::io::{self, Write};

use anyhow::{bail, Result};
use kafka_protocol::records::Record;

#[derive(Clone, Debug, PartialEq, Eq)]
enum Piece {
    Literal(Vec<u8>),
    Partition,
    Offset,
    Key,
    KeyLength,
    Value,
    ValueLength,
    Timestamp,
    Headers,
}

/// A parsed output format.
#[derive(Clone, Debug, PartialEq, Eq)]
pub struct Format {
    pieces: Vec<Piece>,
    null: &'static [u8],
}

/// What kafka-console-consumer's `print.*` properties select.
#[derive(Clone, Copy, Debug, Default)]
pub struct ConsoleLayout {
    pub timestamp: bool,
    pub partition: bool,
    pub offset: bool,
    pub key: bool,
}

impl Format {
    /// Parses a kcat-style format string.
    pub fn parse(format: &str) -> Result<Format> {
        let mut pieces = Vec::new();
        let mut literal = Vec::new();
        let mut chars = format.chars();
        while let Some(ch) = chars.next() {
            let piece = match ch {
                '%' => match chars.next() {
                    Some('t') | Some('T') => Piece::Timestamp,
                    Some('p') => Piece::Partition,
                    Some('o') => Piece::Offset,
                    Some('k') => Piece::Key,
                    Some('K') => Piece::KeyLength,
                    Some('v') => Piece::Value,
                    Some('S') => Piece::ValueLength,
                    Some('h') => Piece::Headers,
                    Some('%') => {
                        literal.push(b'%');
                        continue;
                    }
                    Some(other) => bail!("unknown placeholder %{other} in --format"),
                    None => bail!("--format ends with a lone %"),
                },
                '\\' => {
                    let escaped = match chars.next() {
                        Some('n') => b'\n',
                        Some('t') => b'\t',
                        Some('r') => b'\r',
                        Some('\\') => b'\\',
                        Some(other) => bail!("unknown escape \\{other} in --format"),
                        None => bail!("--format ends with a lone \\"),
                    };
                    literal.push(escaped);
                    continue;
                }
                other => {
                    let mut utf8 = [0u8; 4];
                    literal.extend_from_slice(other.encode_utf8(&mut utf8).as_bytes());
                    continue;
                }
            };
            if !literal.is_empty() {
                pieces.push(Piece::Literal(std::mem::take(&mut literal)));
            }
            pieces.push(piece);
        }
        if !literal.is_empty() {
            pieces.push(Piece::Literal(literal));
        }
        Ok(Format { pieces, null: b"" })
    }

    /// kafka-console-consumer's layout: selected fields, tab-separated, then the value.
    pub fn console(layout: ConsoleLayout) -> Format {
        let literal = |text: &str| Piece::Literal(text.as_bytes().to_vec());
        let mut pieces = Vec::new();
        if layout.timestamp {
            pieces.extend([literal("CreateTime:"), Piece::Timestamp, literal("\t")]);
        }
        if layout.partition {
            pieces.extend([literal("Partition:"), Piece::Partition, literal("\t")]);
        }
        if layout.offset {
            pieces.extend([literal("Offset:"), Piece::Offset, literal("\t")]);
        }
        if layout.key {
            pieces.extend([Piece::Key, literal("\t")]);
        }
        pieces.extend([Piece::Value, literal("\n")]);
        Format {
            pieces,
            null: b"null",
        }
    }

    /// Writes `record` of `partition` to `out`.
    pub fn write(&self, out: &mut impl Write, partition: i32, record: &Record) -> io::Result<()> {
        for piece in &self.pieces {
            match piece {
                Piece::Literal(bytes) => out.write_all(bytes)?,
                Piece::Partition => write!(out, "{partition}")?,
                Piece::Offset => write!(out, "{}", record.offset)?,
                Piece::Key => out.write_all(record.key.as_deref().unwrap_or(self.null))?,
                Piece::KeyLength => write!(out, "{}", length(record.key.as_deref()))?,
                Piece::Value => out.write_all(record.value.as_deref().unwrap_or(self.null))?,
                Piece::ValueLength => write!(out, "{}", length(record.value.as_deref()))?,
                Piece::Timestamp => write!(out, "{}", record.timestamp)?,
                Piece::Headers => {
                    for (i, (name, value)) in record.headers.iter().enumerate() {
                        if i > 0 {
                            out.write_all(b",")?;
                        }
                        out.write_all(name.as_bytes())?;
                        out.write_all(b"=")?;
                        out.write_all(value.as_deref().unwrap_or(self.null))?;
                    }
                }
            }
        }
        Ok(())
    }
}

/// kcat prints -1 for the length of a null key or value.
fn length(bytes: Option<&[u8]>) -> i64 {
    bytes.map_or(-1, |b| b.len() as i64)
}

#[cfg(test)]
mod tests {
    use super::*;
    use bytes::Bytes;
    use kafka_protocol::protocol::StrBytes;
    use kafka_protocol::records::TimestampType;

    fn record(key: Option<&'static str>, value: Option<&'static str>) -> Record {
        Record {
            transactional: false,
            control: false,
            partition_leader_epoch: 0,
            delete_horizon: false,
            producer_id: -1,
            producer_epoch: -1,
            timestamp_type: TimestampType::Creation,
            offset: 42,
            sequence: -1,
            timestamp: 1_700_000_000_123,
            key: key.map(|k| Bytes::from_static(k.as_bytes())),
            value: value.map(|v| Bytes::from_static(v.as_bytes())),
            headers: Default::default(),
        }
    }

    fn render(format: &Format, record: &Record) -> String {
        let mut out = Vec::new();
        format.write(&mut out, 2, record).unwrap();
        String::from_utf8(out).unwrap()
    }

    #[test]
    fn placeholders_and_escapes() {
        let format = Format::parse(r"%k %v %p %o %t %T %K/%S 100%%\n").unwrap();
        assert_eq!(
            render(&format, &record(Some("user1"), Some("order-A"))),
            "user1 order-A 2 42 1700000000123 1700000000123 5/7 100%\n"
        );
        assert_eq!(
            render(&format, &record(None, None)),
            "  2 42 1700000000123 1700000000123 -1/-1 100%\n"
        );
    }

    #[test]
    fn headers_print_as_pairs() {
        let mut with_headers = record(None, Some("v"));
        with_headers.headers.insert(
            StrBytes::from_static_str("a"),
            Some(Bytes::from_static(b"1")),
        );
        with_headers
            .headers
            .insert(StrBytes::from_static_str("b"), None);
        let format = Format::parse("%h|%v").unwrap();
        assert_eq!(render(&format, &with_headers), "a=1,b=|v");
    }

    #[test]
    fn bad_formats_are_refused() {
        assert!(Format::parse("%x").is_err());
        assert!(Format::parse("abc%").is_err());
        assert!(Format::parse(r"\q").is_err());
    }

    #[test]
    fn console_layout_matches_kafka_console_consumer() {
        let plain = Format::console(ConsoleLayout::default());
        assert_eq!(render(&plain, &record(Some("k"), Some("v"))), "v\n");
        let keyed = Format::console(ConsoleLayout {
            key: true,
            ..Default::default()
        });
        assert_eq!(render(&keyed, &record(None, Some("v"))), "null\tv\n");
        let all = Format::console(ConsoleLayout {
            timestamp: true,
            partition: true,
            offset: true,
            key: true,
        });
        assert_eq!(
            render(&all, &record(Some("k"), Some("v"))),
            "CreateTime:1700000000123\tPartition:2\tOffset:42\tk\tv\n"
        );
    }
}
