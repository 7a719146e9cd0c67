//! Reads of a partition log: where a range of a segment's bytes is (write queue, batch cache or
//! file), the `SegmentReader` window that walks batch headers, the direct-mode read-ahead,
//! and the reads and time queries of `Log` built on them.
//!
//! Invariants: a read answers whole batches only, never past a segment's `size_bytes`, and
//! `read_below` never a batch that ends at or past its bound; the part of a range past a
//! segment's `written_bytes` is copied from the write queue, so a read waits only when that
//! part is inside a buffered write in flight; at most one read-ahead per log is in flight, it
//! reads written bytes only and holds at most half the batch cache
//! (`BatchCache::has_read_ahead_room`); bytes read from a file that stopped being its
//! segment's during the read (retention, the cleaner) are never used, since the file may be a
//! new segment's by then (`spares.rs`); no `RefCell` borrow is held across an `.await`.

use std::rc::Rc;

use bytes::{Bytes, BytesMut};

use super::{shard_writes, Inner, Log, ReadResult};
use crate::batch::{BatchHeader, BATCH_BYTES_MAX, BATCH_HEADER_BYTES};
use crate::error::{ReadError, StorageError};
use crate::io::{align_up, IoMode, SegmentFile, BLOCK_BYTES};
use crate::segment::{segment_path, Segment, LOG_SUFFIX, TIMESTAMP_NONE};

/// Largest read issued at once when looking for batches (page-cache reads are fastest at
/// 64–256 KiB on the machines measured, but a fetch wants its bytes in one piece).
const READ_WINDOW_BYTES_MAX: usize = 8 << 20;
/// Direct mode reads ahead for a sequential reader only when at least this much of the
/// segment is on disk past its next read; closer to the end, the write cache serves it.
const READ_AHEAD_BYTES_MIN: u64 = 64 << 10;
/// Upper bound on `max_bytes` of one read (Kafka's fetch.max.bytes default is 50 MiB).
const READ_BYTES_MAX: usize = 64 << 20;

const _: () = assert!(READ_BYTES_MAX >= BATCH_BYTES_MAX);

/// Bytes `[position, position + len)` of a segment, being read ahead of a reader.
#[derive(Clone, Copy, PartialEq, Eq)]
pub(super) struct ReadAhead {
    segment_base_offset: i64,
    position: u64,
    len: usize,
    /// The log's rewrite count when it started: a segment the cleaner replaced meanwhile
    /// gets none of its bytes.
    rewrites: u64,
}

impl ReadAhead {
    fn covers(&self, segment_base_offset: i64, position: u64) -> bool {
        self.segment_base_offset == segment_base_offset
            && self.position <= position
            && position < self.position + self.len as u64
    }
}

/// How to get a range of a segment's bytes.
enum ReadPlan {
    Done(Bytes),
    /// The range is in a buffered write in flight: wait for ops_done to move past this.
    Wait(u64),
    /// The range starts inside this read-ahead: wait for it to land in the cache.
    WaitReadAhead(ReadAhead),
    File {
        file: Rc<SegmentFile>,
        file_bytes: usize,
        queued: Vec<u8>,
    },
}

impl Inner {
    /// Plans reading `[position, position + len)` of a segment; copies what is in memory now,
    /// or, in direct mode, shares it when one written chunk holds it (`shared_prefix`). The
    /// written bytes alone answer when they give `need`, and in direct mode so does a cached
    /// run of at least `need` bytes from `position` (shorter reads; callers need only `need`).
    fn plan_read(
        &self,
        segment_base_offset: i64,
        position: u64,
        need: usize,
        len: usize,
    ) -> Result<ReadPlan, StorageError> {
        let state = self.state.borrow();
        let Some(slot) = state.segment_slot(segment_base_offset) else {
            return Err(StorageError::Closed {
                path: self.dir.clone(),
            });
        };
        let segment = &state.segments[slot];
        let end = position + len as u64;
        if end > segment.size_bytes {
            let reason = format!("read to {end} past segment end {}", segment.size_bytes);
            return Err(StorageError::corrupt(
                segment_path(&self.dir, segment_base_offset, LOG_SUFFIX),
                reason,
            ));
        }
        let written = segment.written_bytes;
        // A read that the written bytes answer (`need` of them) leaves the queued ones out
        // unless they are staged: readers bounded by what is written (followers, consumers
        // below the high watermark) use queued bytes only when the stage holds every one of
        // them (`State::written_end_offset`), and copying them cost as much as the read.
        let end = if position + need as u64 <= written && !state.queue.all_staged() {
            end.min(written)
        } else {
            end
        };
        let file_end = end.min(written);
        let mut queued = Vec::new();
        if end > written {
            queued.reserve((end - position.max(written)) as usize);
            if state
                .queue
                .copy_queued(segment_base_offset, position.max(written), end, &mut queued)
                .is_err()
            {
                return Ok(ReadPlan::Wait(state.queue.ops_done));
            }
        }
        if position >= file_end {
            return Ok(ReadPlan::Done(Bytes::from(queued)));
        }
        let file_bytes = (file_end - position) as usize;
        if self.config.get().io_mode == IoMode::Direct {
            if queued.is_empty() {
                if let Some(bytes) = self.cache.shared_prefix(
                    self.log_id,
                    segment_base_offset,
                    position,
                    need,
                    file_bytes,
                ) {
                    return Ok(ReadPlan::Done(bytes));
                }
            }
            let mut out = Vec::with_capacity(len);
            let cached = self.cache.copy_prefix(
                self.log_id,
                segment_base_offset,
                position,
                file_bytes,
                &mut out,
            );
            if cached == file_bytes {
                out.extend_from_slice(&queued);
                return Ok(ReadPlan::Done(Bytes::from(out)));
            }
            if let Some(ahead) = state.read_ahead {
                if ahead.covers(segment_base_offset, position + cached as u64) {
                    return Ok(ReadPlan::WaitReadAhead(ahead));
                }
            }
            if cached >= need {
                return Ok(ReadPlan::Done(Bytes::from(out)));
            }
        }
        let file = segment
            .file
            .clone()
            .expect("a segment with written bytes has a file");
        Ok(ReadPlan::File {
            file,
            file_bytes,
            queued,
        })
    }

    /// Bytes `[position, position + len)` of a segment, from the write queue, the cache or
    /// disk; possibly fewer, but at least `need`: only the written ones when those give
    /// `need`, and in direct mode a cached run when that gives `need`.
    async fn read_segment(
        &self,
        segment_base_offset: i64,
        position: u64,
        need: usize,
        len: usize,
    ) -> Result<Bytes, StorageError> {
        loop {
            match self.plan_read(segment_base_offset, position, need, len)? {
                ReadPlan::Done(bytes) => return Ok(bytes),
                ReadPlan::WaitReadAhead(ahead) => {
                    self.signals
                        .progress
                        .wait_until(|| self.state.borrow().read_ahead != Some(ahead))
                        .await;
                }
                ReadPlan::Wait(ops_done) => {
                    self.signals
                        .progress
                        .wait_until(|| {
                            let state = self.state.borrow();
                            state.queue.ops_done != ops_done
                                || state.failed.is_some()
                                || self.signals.shutdown.get()
                        })
                        .await;
                    if let Some(reason) = &self.state.borrow().failed {
                        // The write the range waited for will never complete.
                        return Err(self.failed_error(reason));
                    }
                    if self.signals.shutdown.get() {
                        return Err(StorageError::Closed {
                            path: self.dir.clone(),
                        });
                    }
                }
                ReadPlan::File {
                    file,
                    file_bytes,
                    queued,
                } => {
                    let on_disk = file.read_exact(position, file_bytes).await?;
                    self.count_disk_read(file_bytes, false);
                    if !self.reads_from(segment_base_offset, &file) {
                        // Retention deleted the segment or the cleaner replaced its file while
                        // the read was in flight: the file may be a new segment's by now (a
                        // spare, `spares.rs`), its bytes anything.
                        return Err(StorageError::Closed {
                            path: self.dir.clone(),
                        });
                    }
                    if queued.is_empty() {
                        return Ok(on_disk);
                    }
                    let mut joined = BytesMut::with_capacity(len);
                    joined.extend_from_slice(&on_disk);
                    joined.extend_from_slice(&queued);
                    return Ok(joined.freeze());
                }
            }
        }
    }
    /// Whether `file` is still the file of the segment at `segment_base_offset`.
    pub(super) fn reads_from(&self, segment_base_offset: i64, file: &Rc<SegmentFile>) -> bool {
        let state = self.state.borrow();
        let slot = state.segment_slot(segment_base_offset);
        slot.and_then(|slot| state.segments[slot].file.as_ref())
            .is_some_and(|current| Rc::ptr_eq(current, file))
    }

    fn segment_size_bytes(&self, segment_base_offset: i64) -> Result<u64, StorageError> {
        let state = self.state.borrow();
        match state.segment_slot(segment_base_offset) {
            Some(slot) => Ok(state.segments[slot].size_bytes),
            None => Err(StorageError::Closed {
                path: self.dir.clone(),
            }),
        }
    }

    fn next_segment_base(&self, segment_base_offset: i64) -> Option<i64> {
        let state = self.state.borrow();
        let slot = state
            .segments
            .partition_point(|s| s.base_offset <= segment_base_offset);
        state.segments.get(slot).map(|s| s.base_offset)
    }
}

/// A window of one segment's bytes, refilled as a scan moves forward.
pub(super) struct SegmentReader {
    segment_base_offset: i64,
    position: u64,
    data: Bytes,
    window_bytes: usize,
    /// Refills wait for a pause in the shard's writes (`shard_writes::idle`).
    background: bool,
}

impl SegmentReader {
    pub(super) fn new(window_bytes: usize) -> Self {
        SegmentReader {
            segment_base_offset: i64::MIN,
            position: 0,
            data: Bytes::new(),
            window_bytes: window_bytes.clamp(BLOCK_BYTES, READ_WINDOW_BYTES_MAX),
            background: false,
        }
    }

    /// A reader for background work (the cleaner): each refill first lets the shard's
    /// writes in flight finish, for a bounded time, so its reads do not queue ahead of them.
    pub(super) fn background(window_bytes: usize) -> Self {
        SegmentReader {
            background: true,
            ..SegmentReader::new(window_bytes)
        }
    }

    pub(super) async fn bytes(
        &mut self,
        inner: &Inner,
        segment_base_offset: i64,
        position: u64,
        len: usize,
    ) -> Result<Bytes, StorageError> {
        let covered = self.segment_base_offset == segment_base_offset
            && self.position <= position
            && position + len as u64 <= self.position + self.data.len() as u64;
        if !covered {
            let size_bytes = inner.segment_size_bytes(segment_base_offset)?;
            let available = size_bytes.saturating_sub(position) as usize;
            if available < len {
                let path = segment_path(&inner.dir, segment_base_offset, LOG_SUFFIX);
                let reason = format!("{len} bytes at {position} past segment end {size_bytes}");
                return Err(StorageError::corrupt(path, reason));
            }
            let want = len.max(self.window_bytes).min(available);
            if self.background {
                shard_writes::idle().await;
            }
            self.data = inner
                .read_segment(segment_base_offset, position, len, want)
                .await?;
            self.segment_base_offset = segment_base_offset;
            self.position = position;
        }
        let at = (position - self.position) as usize;
        Ok(self.data.slice(at..at + len))
    }

    /// Header of the batch at `position` when the window already holds the whole batch;
    /// `None` otherwise (also at the end of the segment). Never reads.
    fn whole_batch_in_window(
        &self,
        inner: &Inner,
        segment_base_offset: i64,
        position: u64,
    ) -> Result<Option<BatchHeader>, StorageError> {
        let window_end = self.position + self.data.len() as u64;
        if self.segment_base_offset != segment_base_offset
            || position < self.position
            || position + BATCH_HEADER_BYTES as u64 > window_end
        {
            return Ok(None);
        }
        let at = (position - self.position) as usize;
        let header = BatchHeader::parse(&self.data[at..at + BATCH_HEADER_BYTES]).map_err(|e| {
            let path = segment_path(&inner.dir, segment_base_offset, LOG_SUFFIX);
            StorageError::corrupt(path, format!("at {position}: {e}"))
        })?;
        Ok((position + header.total_bytes() as u64 <= window_end).then_some(header))
    }

    /// Header of the batch at `position`, `None` at the end of the segment.
    pub(super) async fn header_at(
        &mut self,
        inner: &Inner,
        segment_base_offset: i64,
        position: u64,
    ) -> Result<Option<BatchHeader>, StorageError> {
        let size_bytes = inner.segment_size_bytes(segment_base_offset)?;
        if position >= size_bytes {
            return Ok(None);
        }
        let path = || segment_path(&inner.dir, segment_base_offset, LOG_SUFFIX);
        if position + BATCH_HEADER_BYTES as u64 > size_bytes {
            return Err(StorageError::corrupt(
                path(),
                format!("partial batch at {position}"),
            ));
        }
        let bytes = self
            .bytes(inner, segment_base_offset, position, BATCH_HEADER_BYTES)
            .await?;
        let header = BatchHeader::parse(&bytes)
            .map_err(|e| StorageError::corrupt(path(), format!("at {position}: {e}")))?;
        if position + header.total_bytes() as u64 > size_bytes {
            return Err(StorageError::corrupt(
                path(),
                format!("batch at {position} past end"),
            ));
        }
        Ok(Some(header))
    }
}

impl Log {
    /// Whole batches starting with the one that contains `offset`, up to `max_bytes` but at
    /// least one whole batch if any exists at or after `offset` (KIP-74).
    pub async fn read(&self, offset: i64, max_bytes: usize) -> Result<ReadResult, ReadError> {
        self.read_below(offset, max_bytes, i64::MAX).await
    }

    /// As [`Log::read`], but only batches that end below `end_offset` (a consumer's view:
    /// the high watermark). An `offset` in `[end_offset, log end]` finds no records and is
    /// no error.
    pub async fn read_below(
        &self,
        offset: i64,
        max_bytes: usize,
        end_offset: i64,
    ) -> Result<ReadResult, ReadError> {
        let result = loop {
            let before = self.layout_changes();
            let result = self.read_batches(offset, max_bytes, end_offset).await;
            let raced = matches!(
                result,
                Err(ReadError::Storage(
                    StorageError::Closed { .. } | StorageError::CorruptFile { .. }
                ))
            ) && (before.1 || self.layout_changes() != before);
            if !raced {
                break result;
            }
            // A truncation or the cleaner moved the segments under the read: read again once
            // a truncation is done.
            let inner = &*self.inner;
            inner
                .signals
                .progress
                .wait_until(|| !inner.state.borrow().truncating || inner.signals.shutdown.get())
                .await;
        };
        if let Err(ReadError::Storage(StorageError::Closed { .. })) = result {
            // Retention deleted the segment while the read was under way.
            let state = self.inner.state.borrow();
            if !state.closed && offset < state.log_start_offset {
                return Err(ReadError::OffsetOutOfRange {
                    offset,
                    log_start_offset: state.log_start_offset,
                    log_end_offset: state.log_end_offset,
                });
            }
        }
        result
    }

    /// Truncations and segment rewrites done so far, and whether a truncation is under way.
    fn layout_changes(&self) -> (u64, bool) {
        let state = self.inner.state.borrow();
        let changes = state.truncations.wrapping_add(state.cleaner.rewrites);
        (changes, state.truncating)
    }

    async fn read_batches(
        &self,
        offset: i64,
        max_bytes: usize,
        end_offset: i64,
    ) -> Result<ReadResult, ReadError> {
        let inner = &*self.inner;
        let max_bytes = max_bytes.min(READ_BYTES_MAX);
        let rewrites = inner.state.borrow().cleaner.rewrites;
        let (log_start_offset, log_end_offset, mut segment_base_offset, mut position) = {
            let state = inner.state.borrow();
            let (start, end) = (state.log_start_offset, state.log_end_offset);
            if offset < start || offset > end {
                return Err(ReadError::OffsetOutOfRange {
                    offset,
                    log_start_offset: start,
                    log_end_offset: end,
                });
            }
            let segment = &state.segments[state.segment_slot_for_offset(offset)];
            (
                start,
                end,
                segment.base_offset,
                u64::from(segment.index.lookup(offset)),
            )
        };
        let empty = ReadResult {
            records: Bytes::new(),
            log_start_offset,
            log_end_offset,
        };
        if offset >= log_end_offset.min(end_offset) {
            return Ok(empty);
        }
        let window_bytes =
            max_bytes.saturating_add(inner.config.get().index_interval_bytes as usize * 2);
        let mut reader = SegmentReader::new(window_bytes);
        let first = loop {
            match reader
                .header_at(inner, segment_base_offset, position)
                .await?
            {
                Some(header) if header.last_offset() < offset => {
                    position += header.total_bytes() as u64;
                }
                Some(header) if header.last_offset() >= end_offset => return Ok(empty),
                Some(header) => break header,
                None => match inner.next_segment_base(segment_base_offset) {
                    Some(next) => {
                        segment_base_offset = next;
                        position = 0;
                    }
                    None => return Ok(empty),
                },
            }
        };
        let start = position;
        let mut total_bytes = first.total_bytes();
        let mut next_offset = first.last_offset() + 1;
        position += total_bytes as u64;
        // Only batches the window already holds: reading on for one more header would cost
        // another window-sized read, and then a third to cover the answer.
        while total_bytes < max_bytes {
            match reader.whole_batch_in_window(inner, segment_base_offset, position)? {
                Some(header)
                    if total_bytes + header.total_bytes() <= max_bytes
                        && header.last_offset() < end_offset =>
                {
                    total_bytes += header.total_bytes();
                    position += header.total_bytes() as u64;
                    next_offset = header.last_offset() + 1;
                }
                _ => break,
            }
        }
        let records = reader
            .bytes(inner, segment_base_offset, start, total_bytes)
            .await?;
        if inner.state.borrow().cleaner.rewrites != rewrites {
            // The cleaner replaced a segment under the read, which may have mixed the old
            // file's positions with the new one's: `read_below` reads again.
            return Err(StorageError::Closed {
                path: inner.dir.clone(),
            }
            .into());
        }
        if inner.config.get().io_mode == IoMode::Direct {
            self.read_ahead(segment_base_offset, next_offset, window_bytes);
        }
        // No CRC pass here: every batch was checked whole when appended (and, after a crash,
        // by recovery), the walk above checked each header's length, and consumers check
        // CRCs themselves, as Kafka's do.
        let state = inner.state.borrow();
        Ok(ReadResult {
            records,
            log_start_offset: state.log_start_offset,
            log_end_offset: state.log_end_offset,
        })
    }

    /// Calls `each` with the header of every batch at or after `from`, in offset order,
    /// reading the segments in windows of `window_bytes`.
    pub(super) async fn for_each_header(
        &self,
        from: i64,
        window_bytes: usize,
        mut each: impl FnMut(&BatchHeader),
    ) -> Result<(), StorageError> {
        let inner = &*self.inner;
        let starts: Vec<(i64, u64)> = {
            let state = inner.state.borrow();
            state
                .segments
                .iter()
                .filter(|segment| segment.next_offset > from)
                .map(|segment| (segment.base_offset, u64::from(segment.index.lookup(from))))
                .collect()
        };
        let mut reader = SegmentReader::new(window_bytes);
        for (segment_base_offset, mut position) in starts {
            while let Some(header) = reader
                .header_at(inner, segment_base_offset, position)
                .await?
            {
                if header.base_offset >= from {
                    each(&header);
                }
                position += header.total_bytes() as u64;
            }
        }
        Ok(())
    }

    /// Direct mode has no page cache to read ahead for a sequential reader, so the log does:
    /// it starts reading the window the reader's next read will ask for (from the index
    /// entry at or before `next_offset`), or the part of it the cache does not hold, and
    /// leaves it in the shard's cache. Only one read-ahead per log is in flight; none starts
    /// for less than `READ_AHEAD_BYTES_MIN` (a reader near the end is served by the write
    /// cache).
    fn read_ahead(&self, segment_base_offset: i64, next_offset: i64, window_bytes: usize) {
        let inner = &*self.inner;
        let (file, ahead) = {
            let mut state = inner.state.borrow_mut();
            if state.read_ahead.is_some()
                || state.failed.is_some()
                || state.closed
                || state.truncating
            {
                return;
            }
            let Some(slot) = state.segment_slot(segment_base_offset) else {
                return;
            };
            let segment = &state.segments[slot];
            if next_offset >= segment.next_offset {
                return;
            }
            let window_start = u64::from(segment.index.lookup(next_offset));
            let end = (window_start + window_bytes as u64).min(segment.written_bytes);
            let cached = inner.cache.cached_prefix_bytes(
                inner.log_id,
                segment_base_offset,
                window_start,
                end.saturating_sub(window_start) as usize,
            );
            let position = window_start + cached as u64;
            if end < position + READ_AHEAD_BYTES_MIN {
                return;
            }
            let Some(file) = segment.file.clone() else {
                return;
            };
            let len = (end - position) as usize;
            if !inner
                .cache
                .has_read_ahead_room(align_up(len as u64) as usize + BLOCK_BYTES)
            {
                return;
            }
            let ahead = ReadAhead {
                segment_base_offset,
                position,
                len,
                rewrites: state.cleaner.rewrites,
            };
            state.read_ahead = Some(ahead);
            (file, ahead)
        };
        let log = Rc::downgrade(&self.inner);
        glommio::spawn_local(async move {
            let read = file.read_blocks(ahead.position, ahead.len).await;
            let Some(inner) = log.upgrade() else { return };
            inner.count_disk_read(ahead.len, true);
            let mut state = inner.state.borrow_mut();
            state.read_ahead = None;
            let replaced = state.cleaner.rewrites != ahead.rewrites;
            if let (Ok((start, data)), Some(_), false) = (
                read,
                state.segment_slot(ahead.segment_base_offset),
                replaced,
            ) {
                // Only the bytes asked for: past them, the last block may hold padding.
                let valid = (ahead.position + ahead.len as u64 - start).min(data.len() as u64);
                let charge = align_up(data.len() as u64) as usize;
                inner.cache.insert(
                    inner.log_id,
                    ahead.segment_base_offset,
                    start,
                    valid as usize,
                    charge,
                    data,
                );
            }
            drop(state);
            inner.signals.progress.notify_all();
        })
        .detach();
    }
    /// The first record whose timestamp is >= `timestamp`, with that timestamp (Kafka
    /// ListOffsets); `None` if no record qualifies. The time index finds the batch; a
    /// compressed batch answers at batch granularity (its base offset).
    pub async fn offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, StorageError> {
        let inner = &*self.inner;
        // Headers read from a segment that retention deleted or the cleaner replaced meanwhile
        // may be another segment's (see the invariants): such a search starts over.
        'search: loop {
            let rewrites = inner.state.borrow().cleaner.rewrites;
            let moved = |segment_base_offset| {
                let state = inner.state.borrow();
                state.cleaner.rewrites != rewrites
                    || state.segment_slot(segment_base_offset).is_none()
            };
            let candidates: Vec<(i64, u64)> = {
                let state = inner.state.borrow();
                state
                    .segments
                    .iter()
                    .filter(|s| s.max_timestamp != TIMESTAMP_NONE && s.max_timestamp >= timestamp)
                    .map(|s| {
                        (
                            s.base_offset,
                            u64::from(s.index.lookup(s.time_index.lookup(timestamp))),
                        )
                    })
                    .collect()
            };
            let window_bytes = inner.config.get().index_interval_bytes as usize * 2;
            let mut reader = SegmentReader::new(window_bytes);
            for (segment_base_offset, mut position) in candidates {
                loop {
                    let header = reader.header_at(inner, segment_base_offset, position).await;
                    if moved(segment_base_offset) {
                        continue 'search;
                    }
                    let Some(header) = header? else { break };
                    if header.max_timestamp >= timestamp {
                        match self.refine_to_record(header, timestamp).await? {
                            Some(found) => return Ok(Some(found)),
                            // Retention deleted the batch since its header was read.
                            None => continue 'search,
                        }
                    }
                    position += header.total_bytes() as u64;
                }
            }
            return Ok(None);
        }
    }

    /// The first record with the log's largest timestamp, as `(offset, timestamp)`: the
    /// max-timestamp query of ListOffsets (KIP-734). `None` when no batch has a timestamp.
    /// A compressed batch answers with its base offset, as in `offset_for_timestamp`.
    pub async fn max_timestamp_record(&self) -> Result<Option<(i64, i64)>, StorageError> {
        let found = {
            let state = self.inner.state.borrow();
            // The earliest segment holding the largest timestamp, as Kafka picks it.
            let mut best: Option<&Segment> = None;
            for segment in &state.segments {
                if segment.max_timestamp != TIMESTAMP_NONE
                    && best.is_none_or(|b| segment.max_timestamp > b.max_timestamp)
                {
                    best = Some(segment);
                }
            }
            best.map(|s| (s.offset_of_max_timestamp, s.max_timestamp))
        };
        let Some((batch_offset, timestamp)) = found else {
            return Ok(None);
        };
        match self.read(batch_offset, 1).await {
            Ok(read) => Ok(Some(
                crate::batch::first_record_at_or_after(&read.records, timestamp)
                    .unwrap_or((batch_offset, timestamp)),
            )),
            Err(ReadError::Storage(error)) => Err(error),
            // Retention removed the segment meanwhile.
            Err(ReadError::OffsetOutOfRange { .. }) => Ok(None),
        }
    }

    /// Kafka answers a time query per record: the first record of `batch` at or after
    /// `timestamp`. A compressed batch (or one that cannot be read) answers with its base
    /// offset, which is at or before that record. `None` when the batch is below the log
    /// start by now.
    async fn refine_to_record(
        &self,
        batch: BatchHeader,
        timestamp: i64,
    ) -> Result<Option<(i64, i64)>, StorageError> {
        let whole_batch = (batch.base_offset, batch.max_timestamp);
        match self.read(batch.base_offset, batch.total_bytes()).await {
            Ok(read) => Ok(Some(
                crate::batch::first_record_at_or_after(&read.records, timestamp)
                    .unwrap_or(whole_batch),
            )),
            Err(ReadError::Storage(error)) => Err(error),
            Err(ReadError::OffsetOutOfRange { .. }) => Ok(None),
        }
    }
}
