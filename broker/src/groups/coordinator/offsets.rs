//! Committed offsets: OffsetCommit (checked against the group's generation, durable before
//! visible), OffsetFetch, OffsetDelete, and the expiry of offsets of empty groups.

use super::*;

impl GroupCoordinator {
    /// OffsetCommit: one error code per part, in order. Called, it checks the commit and
    /// queues its records on the offsets partition at once; the returned future waits until
    /// they are durable and then makes them visible. Both happen in the order of the calls,
    /// so a member's commits, admitted in the order it sent them, never go backwards.
    pub fn commit(
        shard: &Rc<Shard>,
        group_id: String,
        member: (String, Option<String>),
        generation: i32,
        parts: Vec<CommitPart>,
    ) -> impl Future<Output = Vec<i16>> + 'static {
        let coordinator = &shard.groups;
        let (member_id, instance_id) = member;
        let checked = coordinator
            .check_serving(shard, &group_id)
            .and_then(|partition| {
                coordinator
                    .check_commit(&group_id, &member_id, instance_id.as_deref(), generation)
                    .map(|()| partition)
            });
        let partition = match checked {
            Ok(partition) => partition,
            Err(error_code) => {
                let codes = vec![error_code; parts.len()];
                return Box::pin(async move { codes }) as Pin<Box<dyn Future<Output = _>>>;
            }
        };
        let image = shard.image();
        let now = now_ms();
        let mut codes = Vec::with_capacity(parts.len());
        let mut records = Vec::new();
        let mut accepted = Vec::new();
        for part in parts {
            let exists = image
                .topic(&part.topic)
                .is_some_and(|t| (0..t.partition_count()).contains(&part.partition));
            let metadata = part.metadata.unwrap_or_default();
            let error_code = if !exists {
                code(ResponseError::UnknownTopicOrPartition)
            } else if metadata.len() > coordinator.config.offset_metadata_bytes_max {
                code(ResponseError::OffsetMetadataTooLarge)
            } else {
                let key = RecordKey::Offset {
                    group: group_id.clone(),
                    topic: part.topic.clone(),
                    partition: part.partition,
                };
                let value = OffsetValue {
                    offset: part.offset,
                    leader_epoch: part.leader_epoch,
                    metadata,
                    commit_timestamp_ms: now,
                };
                records.push((key, Some(RecordValue::Offset(value.clone()))));
                accepted.push((codes.len(), part.topic, part.partition, value));
                NONE
            };
            codes.push(error_code);
        }
        let turn = coordinator
            .commit_turns
            .borrow_mut()
            .entry(partition.index)
            .or_default()
            .take();
        let written = Self::queue_write(&partition, records);
        let shard = shard.clone();
        Box::pin(async move {
            let result = written.await;
            turn.wait().await;
            match result {
                Ok(()) => {
                    let mut offsets = shard.groups.offsets.borrow_mut();
                    let committed = offsets.entry(group_id).or_default();
                    for (_, topic, partition, value) in accepted {
                        committed.insert((topic, partition), value);
                    }
                }
                Err(error_code) => {
                    for (index, ..) in accepted {
                        codes[index] = error_code;
                    }
                }
            }
            drop(turn);
            codes
        })
    }

    /// Kafka's rules for who may commit: anyone to an empty or unknown group with
    /// generation -1 (a consumer using assign()); otherwise only a current member of the
    /// current generation, and not while the group is completing a rebalance.
    fn check_commit(
        &self,
        group_id: &str,
        member_id: &str,
        instance_id: Option<&str>,
        generation: i32,
    ) -> Result<(), i16> {
        if group_id.is_empty() {
            return Err(code(ResponseError::InvalidGroupId));
        }
        let groups = self.groups.borrow();
        let Some(group) = groups.get(group_id) else {
            return if generation < 0 {
                Ok(())
            } else {
                Err(code(ResponseError::IllegalGeneration))
            };
        };
        if generation < 0 && group.state == GroupState::Empty {
            return Ok(());
        }
        group.check_member(member_id, instance_id).map_err(code)?;
        if generation != group.generation {
            return Err(code(ResponseError::IllegalGeneration));
        }
        if group.state == GroupState::CompletingRebalance {
            return Err(code(ResponseError::RebalanceInProgress));
        }
        Ok(())
    }

    /// OffsetFetch: committed offsets of `wanted` (topic → partitions), or of every
    /// partition the group has committed when `wanted` is None.
    pub fn fetch_offsets(
        &self,
        shard: &Shard,
        group_id: &str,
        wanted: Option<Vec<(String, Vec<i32>)>>,
    ) -> Result<CommittedByTopic, i16> {
        self.check_serving(shard, group_id)?;
        let offsets = self.offsets.borrow();
        let committed = offsets.get(group_id);
        let lookup = |topic: &str, partition: i32| {
            committed
                .and_then(|c| c.get(&(topic.to_string(), partition)))
                .cloned()
        };
        Ok(match wanted {
            Some(wanted) => wanted
                .into_iter()
                .map(|(topic, partitions)| {
                    let found = partitions
                        .iter()
                        .map(|p| (*p, lookup(&topic, *p)))
                        .collect();
                    (topic, found)
                })
                .collect(),
            None => {
                let mut by_topic: BTreeMap<String, Vec<(i32, Option<Committed>)>> = BTreeMap::new();
                for ((topic, partition), value) in committed.into_iter().flatten() {
                    by_topic
                        .entry(topic.clone())
                        .or_default()
                        .push((*partition, Some(value.clone())));
                }
                by_topic.into_iter().collect()
            }
        })
    }

    /// OffsetDelete: removes committed offsets of partitions no active member consumes.
    pub async fn delete_offsets(
        &self,
        shard: &Shard,
        group_id: &str,
        parts: Vec<(String, i32)>,
    ) -> Result<Vec<i16>, i16> {
        let partition = self.check_serving(shard, group_id)?;
        let mut codes = Vec::with_capacity(parts.len());
        let mut tombstones = Vec::new();
        {
            let groups = self.groups.borrow();
            let offsets = self.offsets.borrow();
            let group = groups.get(group_id);
            if group.is_none() && !offsets.contains_key(group_id) {
                return Err(code(ResponseError::GroupIdNotFound));
            }
            for (topic, index) in &parts {
                let subscribed = group.is_some_and(|g| subscribes_to(g, topic));
                if subscribed {
                    codes.push(code(ResponseError::GroupSubscribedToTopic));
                    continue;
                }
                codes.push(NONE);
                let key = RecordKey::Offset {
                    group: group_id.to_string(),
                    topic: topic.clone(),
                    partition: *index,
                };
                tombstones.push((key, None));
            }
        }
        Self::write(&partition, tombstones).await?;
        let mut offsets = self.offsets.borrow_mut();
        if let Some(committed) = offsets.get_mut(group_id) {
            for ((topic, index), error_code) in parts.into_iter().zip(&codes) {
                if *error_code == NONE {
                    committed.remove(&(topic, index));
                }
            }
            if committed.is_empty() {
                offsets.remove(group_id);
            }
        }
        Ok(codes)
    }

    /// Drops every group with no member, no member id handed out and no committed offset
    /// (writing its tombstone, as DeleteGroups does): what Kafka's periodic group metadata
    /// cleanup removes, so that groups used once do not stay forever.
    pub(super) async fn drop_unused_groups(&self, shard: &Shard) {
        let unused: Vec<String> = {
            let offsets = self.offsets.borrow();
            self.groups
                .borrow()
                .values()
                .filter(|group| group.is_unused() && !offsets.contains_key(&group.id))
                .map(|group| group.id.clone())
                .collect()
        };
        for group_id in unused {
            tracing::debug!(group = %group_id, "dropping a group with no member and no offset");
            let _ = self.delete(shard, &group_id).await;
        }
    }

    /// Offsets of empty groups expire `offsets.retention.minutes` after their commit.
    pub(super) async fn expire_offsets(&self, shard: &Shard) {
        let horizon_ms = now_ms() - self.config.offsets_retention.as_millis() as i64;
        let expired: Vec<(String, Vec<(String, i32)>)> = {
            let groups = self.groups.borrow();
            let offsets = self.offsets.borrow();
            offsets
                .iter()
                .filter(|(group_id, _)| groups.get(*group_id).is_none_or(Group::is_empty))
                .filter_map(|(group_id, committed)| {
                    let old: Vec<(String, i32)> = committed
                        .iter()
                        .filter(|(_, value)| value.commit_timestamp_ms < horizon_ms)
                        .map(|(key, _)| key.clone())
                        .collect();
                    (!old.is_empty()).then(|| (group_id.clone(), old))
                })
                .collect()
        };
        for (group_id, parts) in expired {
            tracing::info!(group = %group_id, count = parts.len(), "expiring committed offsets");
            let _ = self.delete_offsets(shard, &group_id, parts).await;
        }
    }
}

/// Whether any member of `group` subscribes to `topic` (consumer protocol subscriptions:
/// version i16, then an array of topic names).
fn subscribes_to(group: &Group, topic: &str) -> bool {
    use kafka_protocol::messages::ConsumerProtocolSubscription;
    use kafka_protocol::protocol::Decodable;
    group.members.values().any(|member| {
        member.protocols.iter().any(|(_, metadata)| {
            let mut bytes = metadata.clone();
            if bytes.len() < 2 {
                return false;
            }
            let version = i16::from_be_bytes([bytes[0], bytes[1]]);
            bytes = bytes.slice(2..);
            ConsumerProtocolSubscription::decode(&mut bytes, version)
                .is_ok_and(|s| s.topics.iter().any(|t| t.as_str() == topic))
        })
    })
}
