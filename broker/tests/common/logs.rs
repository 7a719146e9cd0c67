//! A partition's log as a node holds it and as its leader serves it, batch by batch: the
//! batches in a node's segment files, read as Kafka's DumpLogSegments reads them (ringlog
//! refuses Fetch from a follower, so this is how a follower's copy is seen), and the batches
//! a leader's Fetch answers bring, up to its high watermark. Every wait is bounded.

use std::path::Path;
use std::time::{Duration, Instant};

use bytes::Bytes;

use super::{try_fetch_at, values, Client};

/// Every batch the leader serves of `topic`-`partition` (up to its high watermark), in
/// offset order, as it sends them.
pub fn served_batches(client: &mut Client, topic: &str, partition: i32) -> Vec<Bytes> {
    try_served_batches(client, topic, partition).unwrap_or_else(|(offset, code)| {
        panic!("fetching {topic}-{partition} at {offset}: error {code}")
    })
}

/// As [`served_batches`], the offset and error code of a fetch that is refused (the node no
/// longer leads, say).
pub fn try_served_batches(
    client: &mut Client,
    topic: &str,
    partition: i32,
) -> Result<Vec<Bytes>, (i64, i16)> {
    let mut batches = Vec::new();
    let mut offset = 0;
    while let Some(records) =
        try_fetch_at(client, topic, partition, offset).map_err(|code| (offset, code))?
    {
        let whole = split_batches(&records);
        assert!(
            !whole.is_empty(),
            "a fetch at {offset} brings a whole batch"
        );
        for batch in whole {
            let header = storage::batch::check_batch(&batch).expect("a served batch is valid");
            assert!(
                header.base_offset >= offset,
                "batches arrive in offset order"
            );
            offset = header.last_offset() + 1;
            batches.push(batch);
        }
    }
    Ok(batches)
}

/// The whole, valid batches at the start of `bytes`, up to the first that is not (a
/// partial batch, or the zero padding past a segment's end).
pub fn split_batches(bytes: &Bytes) -> Vec<Bytes> {
    let mut batches = Vec::new();
    let mut position = 0;
    while let Ok(header) = storage::batch::check_batch(&bytes[position..]) {
        let end = position + header.total_bytes();
        batches.push(bytes.slice(position..end));
        position = end;
    }
    batches
}

/// Every batch node directory `dir` holds of `topic`-`partition`, from its segment files in
/// offset order; `None` while a file changes under the read.
pub fn stored_batches(dir: &Path, topic: &str, partition: i32) -> Option<Vec<Bytes>> {
    let dir = dir.join("data").join(format!("{topic}-{partition}"));
    let mut segments: Vec<_> = std::fs::read_dir(&dir)
        .ok()?
        .filter_map(|entry| {
            let path = entry.ok()?.path();
            (path.extension()? == "log").then_some(path)
        })
        .collect();
    // Names are zero-padded base offsets.
    segments.sort();
    let mut batches = Vec::new();
    for segment in segments {
        let bytes = Bytes::from(std::fs::read(segment).ok()?);
        batches.extend(split_batches(&bytes));
    }
    Some(batches)
}

/// Waits until node `id`'s copy of `topic`-`partition` (its segment files under `dir`) is
/// `served`, batch for batch; panics showing both if it is not within the harness's wait.
pub fn wait_same_log(id: i32, dir: &Path, topic: &str, partition: i32, served: &[Bytes]) {
    let deadline = Instant::now() + super::cluster::WAIT;
    loop {
        let stored = stored_batches(dir, topic, partition);
        if stored.as_deref() == Some(served) {
            return;
        }
        if Instant::now() > deadline {
            panic!(
                "node {id}'s log of {topic}-{partition} is not the leader's:\nstored:\n{}\n\
                 served:\n{}",
                describe(&stored.unwrap_or_default()),
                describe(served)
            );
        }
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// The shape of a log: how many batches, the offsets they span, where offsets jump or go
/// back between batches, and where the leader epoch changes.
pub fn outline(batches: &[Bytes]) -> String {
    let headers: Vec<_> = batches
        .iter()
        .map(|batch| storage::batch::check_batch(batch).expect("a valid batch"))
        .collect();
    let (Some(first), Some(last)) = (headers.first(), headers.last()) else {
        return "no batches".into();
    };
    let mut notes = Vec::new();
    for pair in headers.windows(2) {
        let (before, after) = (&pair[0], &pair[1]);
        if after.base_offset != before.last_offset() + 1 {
            notes.push(format!(
                "offsets jump from {} to {}",
                before.last_offset(),
                after.base_offset
            ));
        }
        if after.partition_leader_epoch != before.partition_leader_epoch {
            notes.push(format!(
                "epoch {} from {}",
                after.partition_leader_epoch, after.base_offset
            ));
        }
    }
    format!(
        "{} batches, offsets {}..={}, epoch {} from {}; {}",
        headers.len(),
        first.base_offset,
        last.last_offset(),
        first.partition_leader_epoch,
        first.base_offset,
        notes.join(", ")
    )
}

/// One line per batch: offsets, leader epoch, CRC and record values.
pub fn describe(batches: &[Bytes]) -> String {
    let lines: Vec<String> = batches
        .iter()
        .map(|batch| {
            let header = storage::batch::check_batch(batch).expect("a valid batch");
            format!(
                "  {}..={} epoch {} crc {:08x} {:?}",
                header.base_offset,
                header.last_offset(),
                header.partition_leader_epoch,
                header.crc,
                values(batch)
            )
        })
        .collect();
    lines.join("\n")
}
