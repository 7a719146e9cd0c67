//! Producer state of one partition: for each idempotent producer, its epoch and the last
//! [`BATCHES_PER_PRODUCER_MAX`] batches it appended, which is what `Log::append` checks a
//! batch against at the moment it assigns offsets (Kafka's rules since 2.5, KIP-360).
//!
//! ```text
//!  batch (producer 7, epoch 2, sequences 10..=14)
//!    same epoch, range among the last 5 ─▶ duplicate: answer the original offsets, store nothing
//!    epoch < 2                           ─▶ INVALID_PRODUCER_EPOCH
//!    epoch > 2 and first sequence != 0   ─▶ OUT_OF_ORDER_SEQUENCE_NUMBER
//!    same epoch, first != last + 1       ─▶ OUT_OF_ORDER_SEQUENCE_NUMBER (a gap, or older than 5)
//!    producer unknown here               ─▶ append at any sequence
//! ```
//! Sequences wrap: after `i32::MAX` comes 0, and a batch may straddle the wrap.
//!
//! Invariants: an entry holds 1 to 5 batches of one epoch, oldest first, with increasing last
//! offsets; checking allocates nothing and recording allocates only for a producer the table
//! has not seen. The table is rebuilt on open from the newest snapshot (see
//! [`ProducerSnapshot`], docs/format.md) and the batches after it, replayed without checks
//! (they were checked when first appended).

use std::collections::HashMap;

use crate::batch::BatchHeader;

/// Batches remembered per producer, as Kafka's broker does (and its clients allow at most
/// this many requests in flight per partition).
pub const BATCHES_PER_PRODUCER_MAX: usize = 5;

/// Why an idempotent batch was refused; nothing of the request was stored.
#[derive(thiserror::Error, Debug, Clone, PartialEq, Eq)]
pub enum ProducerError {
    /// Kafka's OUT_OF_ORDER_SEQUENCE_NUMBER: a gap, a batch older than those remembered, or a
    /// new epoch that does not start at sequence 0.
    #[error(
        "out of order sequence for producer {producer_id} epoch {epoch}: {sequence} \
         (incoming), {last_sequence} (current end sequence at epoch {current_epoch})"
    )]
    OutOfOrderSequence {
        producer_id: i64,
        epoch: i16,
        sequence: i32,
        current_epoch: i16,
        last_sequence: i32,
    },
    /// Kafka's INVALID_PRODUCER_EPOCH: a producer older than the one last seen.
    #[error(
        "epoch {epoch} of producer {producer_id} is older than its last epoch {current_epoch}"
    )]
    StaleEpoch {
        producer_id: i64,
        epoch: i16,
        current_epoch: i16,
    },
}

/// What the table says of a batch about to be appended.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) enum Verdict {
    Append,
    /// A retry of a batch already appended, at these offsets.
    Duplicate {
        base_offset: i64,
        last_offset: i64,
    },
}

/// One appended batch of a producer, as Kafka's `BatchMetadata`.
#[derive(Clone, Copy, Debug, Default, PartialEq, Eq)]
struct BatchMetadata {
    last_sequence: i32,
    last_offset: i64,
    offset_delta: i32,
}

impl BatchMetadata {
    fn first_sequence(&self) -> i32 {
        decrement_sequence(self.last_sequence, self.offset_delta)
    }

    fn first_offset(&self) -> i64 {
        self.last_offset - i64::from(self.offset_delta)
    }
}

#[derive(Clone, Copy, Debug, PartialEq, Eq)]
struct ProducerEntry {
    epoch: i16,
    /// Oldest first; `batches[..batch_count]` are valid.
    batches: [BatchMetadata; BATCHES_PER_PRODUCER_MAX],
    batch_count: u8,
    /// Wall-clock time of the last append (or of the replay that rebuilt it), for
    /// `producer.id.expiration.ms`.
    last_append_ms: i64,
}

impl ProducerEntry {
    fn last(&self) -> &BatchMetadata {
        assert!(self.batch_count > 0, "an entry holds at least one batch");
        &self.batches[usize::from(self.batch_count) - 1]
    }

    fn remembered(&self) -> &[BatchMetadata] {
        &self.batches[..usize::from(self.batch_count)]
    }

    fn push(&mut self, batch: BatchMetadata) {
        let count = usize::from(self.batch_count);
        if count < BATCHES_PER_PRODUCER_MAX {
            self.batches[count] = batch;
            self.batch_count += 1;
        } else {
            self.batches.copy_within(1.., 0);
            self.batches[BATCHES_PER_PRODUCER_MAX - 1] = batch;
        }
    }
}

/// The last sequence of a batch: `base_sequence + last_offset_delta`, wrapping past
/// `i32::MAX` to 0 (Kafka's `incrementSequence`).
pub(crate) fn increment_sequence(sequence: i32, increment: i32) -> i32 {
    debug_assert!(sequence >= 0 && increment >= 0);
    if sequence > i32::MAX - increment {
        increment - (i32::MAX - sequence) - 1
    } else {
        sequence + increment
    }
}

/// The inverse of [`increment_sequence`].
fn decrement_sequence(sequence: i32, decrement: i32) -> i32 {
    debug_assert!(sequence >= 0 && decrement >= 0);
    if sequence < decrement {
        i32::MAX - (decrement - sequence) + 1
    } else {
        sequence - decrement
    }
}

/// `next` follows `last`: one more, or 0 after `i32::MAX`.
fn in_sequence(last: i32, next: i32) -> bool {
    i64::from(next) == i64::from(last) + 1 || (next == 0 && last == i32::MAX)
}

/// Every producer the partition knows, by producer id.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct ProducerTable {
    producers: HashMap<i64, ProducerEntry>,
}

impl ProducerTable {
    pub fn len(&self) -> usize {
        self.producers.len()
    }

    /// The producer's remembered batches (what a retry is checked against, and what a
    /// replay of the log must find again) include the one ending at `last_offset`.
    pub fn remembers(&self, producer_id: i64, last_offset: i64) -> bool {
        self.producers.get(&producer_id).is_some_and(|entry| {
            entry
                .remembered()
                .iter()
                .any(|batch| batch.last_offset == last_offset)
        })
    }

    /// Checks an idempotent batch (`producer_id >= 0`, `base_sequence >= 0`) against what the
    /// producer appended before. Allocates nothing.
    pub fn check(&self, batch: &BatchHeader) -> Result<Verdict, ProducerError> {
        let Some(entry) = self.producers.get(&batch.producer_id) else {
            // Unknown here (new, expired, or its records were deleted): any sequence.
            return Ok(Verdict::Append);
        };
        let first_sequence = batch.base_sequence;
        if batch.producer_epoch == entry.epoch {
            let last_sequence = increment_sequence(first_sequence, batch.last_offset_delta);
            let duplicate = entry
                .remembered()
                .iter()
                .find(|m| m.first_sequence() == first_sequence && m.last_sequence == last_sequence);
            if let Some(original) = duplicate {
                return Ok(Verdict::Duplicate {
                    base_offset: original.first_offset(),
                    last_offset: original.last_offset,
                });
            }
        }
        let out_of_order = || ProducerError::OutOfOrderSequence {
            producer_id: batch.producer_id,
            epoch: batch.producer_epoch,
            sequence: first_sequence,
            current_epoch: entry.epoch,
            last_sequence: entry.last().last_sequence,
        };
        if batch.producer_epoch < entry.epoch {
            return Err(ProducerError::StaleEpoch {
                producer_id: batch.producer_id,
                epoch: batch.producer_epoch,
                current_epoch: entry.epoch,
            });
        }
        if batch.producer_epoch > entry.epoch {
            // The client bumped its epoch (KIP-360) and restarts its sequences.
            return if first_sequence == 0 {
                Ok(Verdict::Append)
            } else {
                Err(out_of_order())
            };
        }
        if in_sequence(entry.last().last_sequence, first_sequence) {
            Ok(Verdict::Append)
        } else {
            Err(out_of_order())
        }
    }

    /// Records an appended idempotent batch (its header carrying its final offsets). A new
    /// epoch forgets the batches of the old one.
    pub fn record(&mut self, batch: &BatchHeader, now_ms: i64) {
        let metadata = BatchMetadata {
            last_sequence: increment_sequence(batch.base_sequence, batch.last_offset_delta),
            last_offset: batch.last_offset(),
            offset_delta: batch.last_offset_delta,
        };
        let entry = self
            .producers
            .entry(batch.producer_id)
            .or_insert(ProducerEntry {
                epoch: batch.producer_epoch,
                batches: Default::default(),
                batch_count: 0,
                last_append_ms: now_ms,
            });
        if entry.epoch != batch.producer_epoch {
            entry.epoch = batch.producer_epoch;
            entry.batch_count = 0;
        }
        entry.push(metadata);
        entry.last_append_ms = now_ms;
    }

    /// Forgets producers idle for `expiration_ms` or longer; returns how many.
    pub fn expire(&mut self, now_ms: i64, expiration_ms: i64) -> usize {
        let before = self.producers.len();
        self.producers
            .retain(|_, entry| now_ms.saturating_sub(entry.last_append_ms) < expiration_ms);
        before - self.producers.len()
    }
}

/// A producer-state snapshot file: the table as it was when every batch below `offset` was
/// appended and none after. Our own format (docs/format.md), big endian:
/// ```text
/// magic "RLPS" | version u16 | offset i64 | producer_count u32
/// producer_count × ( producer_id i64 | epoch i16 | last_append_ms i64 | batch_count u8
///                    batch_count × ( last_sequence i32 | last_offset i64 | offset_delta i32 ) )
/// crc32 u32 (CRC-32, crc32fast) of everything before it
/// ```
pub(crate) struct ProducerSnapshot;

const SNAPSHOT_MAGIC: &[u8; 4] = b"RLPS";
const SNAPSHOT_VERSION: u16 = 1;
const SNAPSHOT_HEADER_BYTES: usize = 4 + 2 + 8 + 4;
const SNAPSHOT_PRODUCER_BYTES: usize = 8 + 2 + 8 + 1;
const SNAPSHOT_BATCH_BYTES: usize = 4 + 8 + 4;

impl ProducerSnapshot {
    /// The largest snapshot a table of `producers_max` producers makes, for reading.
    pub fn bytes_max(producers_max: u64) -> u64 {
        let per_producer =
            SNAPSHOT_PRODUCER_BYTES + BATCHES_PER_PRODUCER_MAX * SNAPSHOT_BATCH_BYTES;
        (SNAPSHOT_HEADER_BYTES + 4) as u64 + producers_max * per_producer as u64
    }

    pub fn encode(table: &ProducerTable, offset: i64) -> Vec<u8> {
        let mut out = Vec::with_capacity(Self::bytes_max(table.len() as u64) as usize);
        out.extend_from_slice(SNAPSHOT_MAGIC);
        out.extend_from_slice(&SNAPSHOT_VERSION.to_be_bytes());
        out.extend_from_slice(&offset.to_be_bytes());
        out.extend_from_slice(&(table.producers.len() as u32).to_be_bytes());
        // In producer id order, so equal tables make equal files.
        let mut ids: Vec<&i64> = table.producers.keys().collect();
        ids.sort_unstable();
        for id in ids {
            let entry = &table.producers[id];
            out.extend_from_slice(&id.to_be_bytes());
            out.extend_from_slice(&entry.epoch.to_be_bytes());
            out.extend_from_slice(&entry.last_append_ms.to_be_bytes());
            out.push(entry.batch_count);
            for batch in entry.remembered() {
                out.extend_from_slice(&batch.last_sequence.to_be_bytes());
                out.extend_from_slice(&batch.last_offset.to_be_bytes());
                out.extend_from_slice(&batch.offset_delta.to_be_bytes());
            }
        }
        let crc = crc32fast::hash(&out);
        out.extend_from_slice(&crc.to_be_bytes());
        out
    }

    /// The snapshot's offset and table, or why the bytes are not a valid snapshot.
    pub fn decode(bytes: &[u8]) -> Result<(i64, ProducerTable), String> {
        if bytes.len() < SNAPSHOT_HEADER_BYTES + 4 {
            return Err(format!("{} bytes, too short", bytes.len()));
        }
        let (body, crc) = bytes.split_at(bytes.len() - 4);
        if crc32fast::hash(body).to_be_bytes() != crc {
            return Err("crc mismatch".to_string());
        }
        let mut reader = Reader { bytes: body, at: 0 };
        if reader.take::<4>()? != *SNAPSHOT_MAGIC {
            return Err("bad magic".to_string());
        }
        let version = u16::from_be_bytes(reader.take()?);
        if version != SNAPSHOT_VERSION {
            return Err(format!("version {version}"));
        }
        let offset = i64::from_be_bytes(reader.take()?);
        let count = u32::from_be_bytes(reader.take()?) as usize;
        // Every producer takes at least SNAPSHOT_PRODUCER_BYTES: refuse before allocating.
        if count > (body.len() - SNAPSHOT_HEADER_BYTES) / SNAPSHOT_PRODUCER_BYTES {
            return Err(format!("{count} producers cannot fit"));
        }
        let mut table = ProducerTable {
            producers: HashMap::with_capacity(count),
        };
        for _ in 0..count {
            let producer_id = i64::from_be_bytes(reader.take()?);
            let epoch = i16::from_be_bytes(reader.take()?);
            let last_append_ms = i64::from_be_bytes(reader.take()?);
            let [batch_count] = reader.take::<1>()?;
            if !(1..=BATCHES_PER_PRODUCER_MAX).contains(&usize::from(batch_count)) {
                return Err(format!("producer {producer_id}: {batch_count} batches"));
            }
            let mut entry = ProducerEntry {
                epoch,
                batches: Default::default(),
                batch_count,
                last_append_ms,
            };
            for slot in entry.batches.iter_mut().take(usize::from(batch_count)) {
                let batch = BatchMetadata {
                    last_sequence: i32::from_be_bytes(reader.take()?),
                    last_offset: i64::from_be_bytes(reader.take()?),
                    offset_delta: i32::from_be_bytes(reader.take()?),
                };
                if batch.last_sequence < 0 || batch.offset_delta < 0 || batch.last_offset >= offset
                {
                    return Err(format!(
                        "producer {producer_id}: impossible batch {batch:?}"
                    ));
                }
                *slot = batch;
            }
            if producer_id < 0 || table.producers.insert(producer_id, entry).is_some() {
                return Err(format!("producer id {producer_id} invalid or repeated"));
            }
        }
        if reader.at != body.len() {
            return Err("bytes after the last producer".to_string());
        }
        Ok((offset, table))
    }
}

struct Reader<'a> {
    bytes: &'a [u8],
    at: usize,
}

impl Reader<'_> {
    fn take<const N: usize>(&mut self) -> Result<[u8; N], String> {
        let field = self
            .bytes
            .get(self.at..self.at + N)
            .ok_or_else(|| "truncated".to_string())?;
        self.at += N;
        Ok(field.try_into().expect("the slice has N bytes"))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn header(producer_id: i64, epoch: i16, base_sequence: i32, records: i32) -> BatchHeader {
        BatchHeader {
            base_offset: 0,
            batch_length: 49,
            partition_leader_epoch: 0,
            magic: 2,
            crc: 0,
            attributes: 0,
            last_offset_delta: records - 1,
            base_timestamp: 0,
            max_timestamp: 0,
            producer_id,
            producer_epoch: epoch,
            base_sequence,
            record_count: records,
        }
    }

    /// Checks and, when it may be appended, records the batch at `*next_offset`.
    fn append(table: &mut ProducerTable, next_offset: &mut i64, batch: BatchHeader) -> Verdict {
        let verdict = table.check(&batch).unwrap_or_else(|e| panic!("{e}"));
        if verdict == Verdict::Append {
            let batch = BatchHeader {
                base_offset: *next_offset,
                ..batch
            };
            table.record(&batch, 0);
            *next_offset = batch.last_offset() + 1;
        }
        verdict
    }

    #[test]
    fn sequences_wrap_after_i32_max() {
        assert_eq!(increment_sequence(i32::MAX, 1), 0);
        assert_eq!(increment_sequence(i32::MAX - 1, 3), 1);
        assert_eq!(increment_sequence(5, 0), 5);
        assert_eq!(decrement_sequence(0, 1), i32::MAX);
        assert_eq!(decrement_sequence(1, 3), i32::MAX - 1);
        assert!(in_sequence(i32::MAX, 0));
        assert!(!in_sequence(i32::MAX, 1));
        assert!(in_sequence(4, 5));
    }

    #[test]
    fn retries_of_the_last_five_batches_are_duplicates_older_ones_out_of_order() {
        let mut table = ProducerTable::default();
        let mut next = 0;
        for batch in 0..7 {
            let verdict = append(&mut table, &mut next, header(9, 0, batch * 2, 2));
            assert_eq!(verdict, Verdict::Append);
        }
        // Batches 2..=6 are remembered; batch 1 (sequences 2..=3) is not.
        for batch in 2..7 {
            assert_eq!(
                table.check(&header(9, 0, batch * 2, 2)),
                Ok(Verdict::Duplicate {
                    base_offset: i64::from(batch) * 2,
                    last_offset: i64::from(batch) * 2 + 1
                })
            );
        }
        assert!(matches!(
            table.check(&header(9, 0, 2, 2)),
            Err(ProducerError::OutOfOrderSequence { .. })
        ));
        // A gap, and an overlapping range that is no batch's.
        assert!(table.check(&header(9, 0, 15, 1)).is_err());
        assert!(table.check(&header(9, 0, 13, 1)).is_err());
        assert_eq!(table.check(&header(9, 0, 14, 1)), Ok(Verdict::Append));
    }

    #[test]
    fn epochs_fence_and_a_new_epoch_starts_at_zero() {
        let mut table = ProducerTable::default();
        let mut next = 0;
        // Unknown producers start at any sequence.
        assert_eq!(
            append(&mut table, &mut next, header(3, 4, 77, 1)),
            Verdict::Append
        );
        assert!(matches!(
            table.check(&header(3, 3, 78, 1)),
            Err(ProducerError::StaleEpoch {
                current_epoch: 4,
                ..
            })
        ));
        assert!(matches!(
            table.check(&header(3, 5, 78, 1)),
            Err(ProducerError::OutOfOrderSequence { .. })
        ));
        assert_eq!(
            append(&mut table, &mut next, header(3, 5, 0, 1)),
            Verdict::Append
        );
        // The old epoch's batches are forgotten: its retry is now fenced, not a duplicate.
        assert!(matches!(
            table.check(&header(3, 4, 77, 1)),
            Err(ProducerError::StaleEpoch { .. })
        ));
        assert_eq!(table.check(&header(3, 5, 1, 1)), Ok(Verdict::Append));
    }

    #[test]
    fn a_batch_may_straddle_the_wrap() {
        let mut table = ProducerTable::default();
        let mut next = 0;
        append(&mut table, &mut next, header(1, 0, i32::MAX - 1, 3));
        assert_eq!(
            table.check(&header(1, 0, i32::MAX - 1, 3)),
            Ok(Verdict::Duplicate {
                base_offset: 0,
                last_offset: 2
            })
        );
        // Sequences i32::MAX - 1, i32::MAX, 0: next comes 1.
        assert!(table.check(&header(1, 0, 2, 1)).is_err());
        assert!(table.check(&header(1, 0, 0, 1)).is_err());
        assert_eq!(table.check(&header(1, 0, 1, 1)), Ok(Verdict::Append));
    }

    #[test]
    fn idle_producers_expire() {
        let mut table = ProducerTable::default();
        table.record(&header(1, 0, 0, 1), 1_000);
        table.record(&header(2, 0, 0, 1), 5_000);
        assert_eq!(table.expire(10_999, 10_000), 0);
        assert_eq!(table.expire(11_000, 10_000), 1);
        assert_eq!(table.check(&header(1, 0, 9, 1)), Ok(Verdict::Append));
        assert!(table.check(&header(2, 0, 9, 1)).is_err());
    }

    #[test]
    fn snapshots_round_trip_and_refuse_damage() {
        let mut table = ProducerTable::default();
        let mut next = 0;
        for batch in 0..8 {
            append(
                &mut table,
                &mut next,
                header(i64::from(batch % 3), 1, batch / 3, 1),
            );
        }
        let bytes = ProducerSnapshot::encode(&table, next);
        assert!(bytes.len() as u64 <= ProducerSnapshot::bytes_max(3));
        assert_eq!(ProducerSnapshot::decode(&bytes), Ok((next, table.clone())));
        let empty = ProducerSnapshot::encode(&ProducerTable::default(), 0);
        assert_eq!(
            ProducerSnapshot::decode(&empty),
            Ok((0, ProducerTable::default()))
        );
        for cut in 0..bytes.len() {
            assert!(
                ProducerSnapshot::decode(&bytes[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        for at in 0..bytes.len() {
            let mut damaged = bytes.clone();
            damaged[at] ^= 0x10;
            assert!(ProducerSnapshot::decode(&damaged).is_err(), "flip at {at}");
        }
    }
}
