//! Loading a shard's groups: replaying an offsets partition into the groups and committed
//! offsets it describes. Later records win and tombstones delete, as Kafka's compaction
//! would leave them; a group is served only once its partition is loaded. A node loads a
//! partition when it becomes its leader and unloads it when it stops leading it, so a
//! group's coordinator moves with the leadership and starts from what the log holds.

use super::*;

impl GroupCoordinator {
    /// Replays one offsets partition into memory.
    pub async fn load(&self, partition: &Partition) -> Result<(), storage::StorageError> {
        let started = Instant::now();
        let mut offset = partition.log.log_start_offset();
        let mut record_count = 0usize;
        while offset < partition.log.log_end_offset() {
            let read = match partition.log.read(offset, LOAD_READ_BYTES).await {
                Ok(read) => read,
                Err(storage::ReadError::Storage(error)) => return Err(error),
                Err(storage::ReadError::OffsetOutOfRange { .. }) => break,
            };
            if read.records.is_empty() {
                break;
            }
            let mut position = 0;
            while position < read.records.len() {
                let Ok(header) = storage::batch::BatchHeader::parse(&read.records[position..])
                else {
                    break;
                };
                let end = position + header.total_bytes();
                let mut batch = read.records.slice(position..end.min(read.records.len()));
                position = end;
                offset = header.last_offset() + 1;
                let set = match RecordBatchDecoder::decode(&mut batch) {
                    Ok(set) => set,
                    Err(error) => {
                        tracing::warn!(%error, "skipping an undecodable offsets batch");
                        continue;
                    }
                };
                for record in set.records {
                    record_count += 1;
                    self.apply(record.key, record.value, Instant::now());
                }
            }
        }
        self.loaded.borrow_mut().insert(partition.index);
        tracing::debug!(
            partition = partition.index,
            record_count,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "offsets partition loaded"
        );
        Ok(())
    }

    /// Forgets the groups and offsets of offsets partition `index` (of `partition_count`):
    /// this node no longer leads it, and whoever does serves them from the log.
    pub fn unload(&self, index: i32, partition_count: i32) {
        if !self.loaded.borrow_mut().remove(&index) {
            return;
        }
        let elsewhere = |group: &String| partition_for(group, partition_count) != index;
        self.groups.borrow_mut().retain(|group, _| elsewhere(group));
        self.offsets
            .borrow_mut()
            .retain(|group, _| elsewhere(group));
        tracing::debug!(partition = index, "offsets partition unloaded");
    }

    /// Applies one replayed record; later records win, tombstones delete.
    fn apply(&self, key: Option<Bytes>, value: Option<Bytes>, now: Instant) {
        let Some(key) = key else { return };
        let key = match decode_key(key) {
            Ok(Some(key)) => key,
            Ok(None) => return,
            Err(reason) => {
                tracing::warn!(%reason, "skipping an undecodable offsets key");
                return;
            }
        };
        let value = match value.map(|v| decode_value(&key, v)).transpose() {
            Ok(value) => value,
            Err(reason) => {
                tracing::warn!(%reason, "skipping an undecodable offsets value");
                return;
            }
        };
        match (key, value) {
            (
                RecordKey::Offset {
                    group,
                    topic,
                    partition,
                },
                Some(RecordValue::Offset(value)),
            ) => {
                self.offsets
                    .borrow_mut()
                    .entry(group)
                    .or_default()
                    .insert((topic, partition), value);
            }
            (
                RecordKey::Offset {
                    group,
                    topic,
                    partition,
                },
                None,
            ) => {
                let mut offsets = self.offsets.borrow_mut();
                if let Some(committed) = offsets.get_mut(&group) {
                    committed.remove(&(topic, partition));
                    if committed.is_empty() {
                        offsets.remove(&group);
                    }
                }
            }
            (RecordKey::Group { group }, Some(RecordValue::Group(value))) => {
                let restored = restore_group(&group, value, now);
                self.groups.borrow_mut().insert(group, restored);
            }
            (RecordKey::Group { group }, None) => {
                self.groups.borrow_mut().remove(&group);
            }
            (key, _) => tracing::warn!(?key, "offsets record of the wrong kind"),
        }
    }
}

fn restore_group(group_id: &str, value: GroupValue, now: Instant) -> Group {
    let protocol = value.protocol.clone();
    let members = value
        .members
        .into_iter()
        .enumerate()
        .map(|(seq, m)| {
            Group::restored_member(
                m.member_id,
                m.group_instance_id,
                m.client_id,
                m.client_host,
                Duration::from_millis(m.session_timeout_ms.max(0) as u64),
                Duration::from_millis(m.rebalance_timeout_ms.max(0) as u64),
                protocol.as_deref(),
                m.subscription,
                m.assignment,
                seq as u64,
                now,
            )
        })
        .collect();
    Group::restore(
        group_id,
        value.protocol_type,
        value.generation,
        protocol,
        value.leader,
        members,
    )
}
