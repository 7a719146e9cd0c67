//! Record-level work of log compaction, without I/O: the records of a batch (decompressed
//! when the batch is), the offset map of the latest offset per key, and the filtering of one
//! batch into what survives cleaning. `crate::log::compaction` drives it over segments.
//!
//! Invariants: a batch is never changed unless every record in it was decoded; a batch that
//! loses no record is kept byte for byte; a rewritten batch keeps its base offset, last
//! offset delta, base timestamp, producer id, epoch and base sequence, partition leader
//! epoch and attributes, and each surviving record's bytes unchanged (so its offset and
//! timestamp deltas still hold), with a new record count and CRC-32C; a batch whose
//! records cannot be decoded (a corrupt compressed payload, or framing a producer got wrong) is
//! kept whole and gives no key to the offset map.

mod codec;
mod offset_map;
mod records;

pub(crate) use self::offset_map::OffsetMap;
pub(crate) use self::records::{filter_batch, for_each_record, keyless_records, Filtered};

#[cfg(test)]
pub(crate) mod test_records;
