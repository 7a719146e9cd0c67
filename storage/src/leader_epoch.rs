//! The leader-epoch cache of a partition, Kafka's `LeaderEpochFileCache`: for each leader epoch
//! that wrote to the log, the offset of its first batch. Kept in memory by the log and in the
//! partition's `leader-epoch-checkpoint` (Kafka's text checkpoint, `crate::checkpoint`:
//! `0`, the count, then `epoch start_offset` lines).
//!
//! Invariants: epochs strictly increase and start offsets increase with them; an entry is
//! added only for an epoch above the latest (`assign`); after `truncate_from_end(end)` no entry
//! starts at or past `end`; after `truncate_from_start(start)` no entry starts below `start`
//! (the latest entry at or below it is moved up to it, as Kafka does).

use crate::checkpoint::{encode_lines, parse_lines};

pub(crate) const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";

/// One leader epoch and the offset of the first batch it wrote.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub(crate) struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub(crate) struct LeaderEpochCache {
    entries: Vec<EpochEntry>,
}

impl LeaderEpochCache {
    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|e| e.epoch)
    }

    /// Notes that a batch of `epoch` starts at `start_offset`; true if that added an entry (the
    /// epoch is above the latest). A negative epoch (no epoch, from old message formats) is
    /// never recorded, as in Kafka.
    #[inline]
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 || self.latest_epoch().is_some_and(|latest| epoch <= latest) {
            return false;
        }
        debug_assert!(self
            .entries
            .last()
            .is_none_or(|last| last.start_offset <= start_offset));
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Drops the entries that start at or after `end_offset` (the log was cut there); true if
    /// any went.
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let keep = self
            .entries
            .partition_point(|e| e.start_offset < end_offset);
        let changed = keep < self.entries.len();
        self.entries.truncate(keep);
        changed
    }

    /// The log now starts at `start_offset`: entries that start below it go, except the latest
    /// of them, whose start moves up to `start_offset` (its epoch still holds the first
    /// batches). True if anything changed.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let below = self
            .entries
            .partition_point(|e| e.start_offset <= start_offset);
        if below == 0 || (below == 1 && self.entries[0].start_offset == start_offset) {
            return false;
        }
        self.entries.drain(..below - 1);
        self.entries[0].start_offset = start_offset;
        true
    }

    /// Kafka's OffsetsForLeaderEpoch answer for `requested` (`LeaderEpochFileCache.endOffsetFor`):
    /// the largest epoch at or below it, with that epoch's end offset: the start of the next
    /// higher epoch, or `log_end_offset` when it is the latest. A requested epoch below every
    /// known one gets itself with the first known epoch's start offset (the follower
    /// truncates there). `None` (UNDEFINED) above the latest epoch or when the cache is empty.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        let latest = self.entries.last()?;
        if requested == latest.epoch {
            return Some((requested, log_end_offset));
        }
        if requested > latest.epoch {
            return None;
        }
        let higher = self.entries.partition_point(|e| e.epoch <= requested);
        if higher == 0 {
            return Some((requested, self.entries[0].start_offset));
        }
        let floor = self.entries[higher - 1];
        Some((floor.epoch, self.entries[higher].start_offset))
    }

    pub fn encode(&self) -> Vec<u8> {
        encode_lines(
            self.entries
                .iter()
                .map(|e| format!("{} {}", e.epoch, e.start_offset)),
        )
    }

    /// The cache a checkpoint's text describes; `Err` with the reason if the text is not a
    /// checkpoint or breaks the invariants (epochs increasing, offsets not decreasing).
    pub fn decode(text: &str) -> Result<LeaderEpochCache, String> {
        let mut entries: Vec<EpochEntry> = Vec::new();
        for fields in parse_lines(text, 2)? {
            let epoch = fields[0].parse().ok().filter(|e: &i32| *e >= 0);
            let start_offset = fields[1].parse().ok().filter(|o: &i64| *o >= 0);
            let (Some(epoch), Some(start_offset)) = (epoch, start_offset) else {
                return Err(format!("entry {:?} does not parse", fields.join(" ")));
            };
            if let Some(last) = entries.last() {
                if epoch <= last.epoch || start_offset < last.start_offset {
                    return Err(format!(
                        "entry {epoch} {start_offset} does not follow {} {}",
                        last.epoch, last.start_offset
                    ));
                }
            }
            entries.push(EpochEntry {
                epoch,
                start_offset,
            });
        }
        Ok(LeaderEpochCache { entries })
    }

    #[cfg(test)]
    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }
}

#[cfg(test)]
mod tests {
    use proptest::prelude::*;

    use super::*;

    fn cache(entries: &[(i32, i64)]) -> LeaderEpochCache {
        let mut cache = LeaderEpochCache::default();
        for &(epoch, start_offset) in entries {
            assert!(cache.assign(epoch, start_offset));
        }
        cache
    }

    fn pairs(cache: &LeaderEpochCache) -> Vec<(i32, i64)> {
        cache
            .entries()
            .iter()
            .map(|e| (e.epoch, e.start_offset))
            .collect()
    }

    #[test]
    fn assign_adds_only_higher_epochs() {
        let mut c = LeaderEpochCache::default();
        assert!(!c.assign(-1, 0));
        assert!(c.assign(0, 0));
        assert!(!c.assign(0, 5));
        assert!(c.assign(3, 10));
        assert!(!c.assign(2, 12));
        assert_eq!(pairs(&c), vec![(0, 0), (3, 10)]);
        assert_eq!(c.latest_epoch(), Some(3));
    }

    #[test]
    fn end_offsets_follow_offsets_for_leader_epoch() {
        let c = cache(&[(1, 0), (3, 100), (6, 250)]);
        let end = 400;
        assert_eq!(
            c.end_offset_for(6, end),
            Some((6, 400)),
            "latest: the log end"
        );
        assert_eq!(c.end_offset_for(3, end), Some((3, 250)));
        assert_eq!(c.end_offset_for(1, end), Some((1, 100)));
        assert_eq!(
            c.end_offset_for(4, end),
            Some((3, 250)),
            "the largest epoch at or below"
        );
        assert_eq!(c.end_offset_for(5, end), Some((3, 250)));
        assert_eq!(c.end_offset_for(2, end), Some((1, 100)));
        assert_eq!(
            c.end_offset_for(0, end),
            Some((0, 0)),
            "below every known epoch: where the first one starts"
        );
        assert_eq!(c.end_offset_for(7, end), None, "above the latest");
        assert_eq!(LeaderEpochCache::default().end_offset_for(0, end), None);
    }

    #[test]
    fn truncation_from_either_end() {
        let mut c = cache(&[(1, 0), (3, 100), (6, 250)]);
        assert!(!c.truncate_from_end(251));
        assert!(c.truncate_from_end(250));
        assert_eq!(pairs(&c), vec![(1, 0), (3, 100)]);
        assert!(c.truncate_from_end(50));
        assert_eq!(pairs(&c), vec![(1, 0)]);

        let mut c = cache(&[(1, 0), (3, 100), (6, 250)]);
        assert!(!c.truncate_from_start(0));
        assert!(c.truncate_from_start(120));
        assert_eq!(pairs(&c), vec![(3, 120), (6, 250)], "the start moves up");
        assert!(c.truncate_from_start(250));
        assert_eq!(pairs(&c), vec![(6, 250)]);
        assert!(!c.truncate_from_start(250));
        assert!(c.truncate_from_start(300));
        assert_eq!(pairs(&c), vec![(6, 300)]);
    }

    #[test]
    fn checkpoint_text_is_kafkas() {
        let c = cache(&[(0, 0), (4, 1234)]);
        let text = String::from_utf8(c.encode()).expect("text");
        assert_eq!(text, "0\n2\n0 0\n4 1234\n");
        assert_eq!(LeaderEpochCache::decode(&text), Ok(c));
        for cut in 0..text.len() {
            assert!(
                LeaderEpochCache::decode(&text[..cut]).is_err(),
                "cut at {cut}"
            );
        }
        for bad in [
            "0\n2\n4 0\n3 10\n",
            "0\n2\n1 10\n2 5\n",
            "0\n1\n-1 0\n",
            "0\n1\n1 x\n",
            "0\n1\n1 2 3\n",
            "1\n0\n",
        ] {
            assert!(LeaderEpochCache::decode(bad).is_err(), "{bad:?}");
        }
    }

    proptest! {
        /// Against a model (a list of (epoch, start) pairs): every operation keeps epochs
        /// strictly increasing and starts increasing, and the answers match the model's.
        #[test]
        fn operations_keep_the_invariants(
            ops in proptest::collection::vec((0u8..3, 0i32..20, 0i64..1000), 1..60),
        ) {
            let mut c = LeaderEpochCache::default();
            let mut log_end = 0i64;
            for (op, epoch, offset) in ops {
                match op {
                    0 => {
                        log_end = log_end.max(offset);
                        c.assign(epoch, log_end);
                    }
                    1 => {
                        c.truncate_from_end(offset);
                        log_end = log_end.min(offset);
                    }
                    _ => {
                        if offset <= log_end {
                            c.truncate_from_start(offset);
                            prop_assert!(c.entries().iter().all(|e| e.start_offset >= offset));
                        }
                    }
                }
                for pair in c.entries().windows(2) {
                    prop_assert!(pair[0].epoch < pair[1].epoch);
                    prop_assert!(pair[0].start_offset <= pair[1].start_offset);
                }
                let text = String::from_utf8(c.encode()).expect("text");
                prop_assert_eq!(LeaderEpochCache::decode(&text), Ok(c.clone()));
                for requested in 0..21 {
                    let answer = c.end_offset_for(requested, log_end);
                    let floor = c.entries().iter().rev().find(|e| e.epoch <= requested);
                    let expected = match (floor, c.latest_epoch()) {
                        (Some(f), Some(latest)) if requested <= latest => {
                            let next = c.entries().iter().find(|e| e.epoch > f.epoch);
                            Some((f.epoch, next.map_or(log_end, |n| n.start_offset)))
                        }
                        (None, Some(_)) => Some((requested, c.entries()[0].start_offset)),
                        _ => None,
                    };
                    prop_assert_eq!(answer, expected);
                }
            }
        }
    }
}
