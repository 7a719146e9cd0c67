//! DescribeLogDirs (KIP-113): the node's log directory and, for each replica it holds of
//! the partitions asked for (every one when none is named), its size in bytes and its
//! offset lag (how far its log end is below the high watermark, never negative); v4 adds
//! the directory's total and usable bytes (KIP-827). Each shard reports the partitions it
//! owns; the answer lists them by topic, in name and index order.

use std::collections::BTreeMap;
use std::path::Path;
use std::rc::Rc;

use kafka_protocol::error::ResponseError;
use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, ResponseKind};
use kafka_protocol::protocol::StrBytes;

use crate::errors::code;
use crate::shard_state::Shard;

/// (topic, partition) → (size in bytes, offset lag), of one shard's replicas.
type Replicas = BTreeMap<(String, i32), (i64, i64)>;

pub async fn handle(shard: &Rc<Shard>, request: DescribeLogDirsRequest) -> ResponseKind {
    let wanted: Option<Vec<(String, i32)>> = request.topics.map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|&p| (t.topic.to_string(), p)))
            .collect()
    });
    let mut replicas = Replicas::new();
    let mut response = DescribeLogDirsResponse::default();
    for target in 0..shard.router.shard_count() {
        let wanted = wanted.clone();
        let reported = shard
            .router
            .call(shard, target, move |owner: Rc<Shard>| async move {
                replicas_of(&owner, wanted.as_deref())
            })
            .await;
        match reported {
            Ok(part) => replicas.extend(part),
            Err(_) => {
                response.error_code = code(ResponseError::BrokerNotAvailable);
                return ResponseKind::DescribeLogDirs(response);
            }
        }
    }
    let dir = &shard.config.log_dir;
    let (total_bytes, usable_bytes) = disk_space(dir).unwrap_or((-1, -1));
    let mut result = DescribeLogDirsResult::default()
        .with_log_dir(StrBytes::from_string(dir.display().to_string()))
        .with_total_bytes(total_bytes)
        .with_usable_bytes(usable_bytes);
    for ((topic, index), (size_bytes, lag)) in replicas {
        let partition = DescribeLogDirsPartition::default()
            .with_partition_index(index)
            .with_partition_size(size_bytes)
            .with_offset_lag(lag);
        match result.topics.last_mut() {
            Some(last) if last.name.as_str() == topic => last.partitions.push(partition),
            _ => result.topics.push(
                DescribeLogDirsTopic::default()
                    .with_name(StrBytes::from_string(topic).into())
                    .with_partitions(vec![partition]),
            ),
        }
    }
    response.results.push(result);
    ResponseKind::DescribeLogDirs(response)
}

/// The replicas `owner` holds of `wanted` (all when `None`).
fn replicas_of(owner: &Shard, wanted: Option<&[(String, i32)]>) -> Replicas {
    owner
        .owned_partitions_by_topic()
        .into_iter()
        .filter(|(topic, p)| {
            wanted.is_none_or(|w| w.iter().any(|(t, i)| t == topic && *i == p.index))
        })
        .map(|(topic, p)| {
            let lag = (p.high_watermark() - p.log.log_end_offset()).max(0);
            ((topic, p.index), (p.log.size_bytes() as i64, lag))
        })
        .collect()
}

/// The total and available bytes of the file system holding `dir`.
fn disk_space(dir: &Path) -> Option<(i64, i64)> {
    let path = std::ffi::CString::new(dir.as_os_str().as_encoded_bytes()).ok()?;
    // SAFETY: `path` is a valid C string and `stat` a plain struct statvfs fills in.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(path.as_ptr(), &mut stat) } != 0 {
        return None;
    }
    let block = stat.f_frsize as i64;
    Some((stat.f_blocks as i64 * block, stat.f_bavail as i64 * block))
}
