//! The API versions this client can build, and the choice of one version per API for a
//! broker from what its ApiVersions answer offers.
//!
//! Invariants:
//! - [`CLIENT_APIS`] is the only table: every request the client sends is built at the
//!   highest version both it and the broker support, never outside either range.
//! - Every range in [`CLIENT_APIS`] lies inside the codec's own range for that message
//!   (`every_client_range_is_inside_the_codec`).
//! - An API the broker does not offer, or offers with no version in common, is an error that
//!   names the API; nothing falls back silently.

use std::collections::HashMap;

use anyhow::{anyhow, bail, Result};
use kafka_protocol::messages::{ApiKey, ApiVersionsResponse};
use kafka_protocol::protocol::Request;

/// (api, lowest, highest) versions this client can build. Produce and Metadata stop at 12
/// because later versions name topics by id only (Fetch names them both ways, see
/// `fetch::fetch_request`); OffsetCommit and OffsetFetch stop at 8 because 9 belongs to the
/// KIP-848 group protocol.
pub const CLIENT_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 12),
    (ApiKey::Fetch, 4, 16),
    (ApiKey::ListOffsets, 1, 7),
    (ApiKey::Metadata, 1, 12),
    (ApiKey::OffsetCommit, 2, 8),
    (ApiKey::OffsetFetch, 1, 8),
    (ApiKey::FindCoordinator, 0, 4),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 4),
    (ApiKey::ApiVersions, 0, 3),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::OffsetForLeaderEpoch, 2, 4),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DescribeQuorum, 0, 2),
    (ApiKey::ElectLeaders, 0, 2),
    (ApiKey::AlterPartitionReassignments, 0, 1),
    (ApiKey::ListPartitionReassignments, 0, 0),
];

/// The version of `api` to speak: the highest in both ranges, or an error naming the API.
pub fn negotiate(api: ApiKey, offered: Option<(i16, i16)>) -> Result<i16> {
    let (ours_min, ours_max) = CLIENT_APIS
        .iter()
        .find(|(key, _, _)| *key == api)
        .map(|(_, min, max)| (*min, *max))
        .ok_or_else(|| anyhow!("this client does not speak {api:?}"))?;
    let (theirs_min, theirs_max) =
        offered.ok_or_else(|| anyhow!("the broker does not support {api:?}"))?;
    let version = ours_max.min(theirs_max);
    if version < ours_min.max(theirs_min) {
        bail!(
            "no common {api:?} version: broker {theirs_min}..={theirs_max}, \
             client {ours_min}..={ours_max}"
        );
    }
    Ok(version)
}

/// The `ApiKey` of a request type.
pub fn api_key<R: Request>() -> Result<ApiKey> {
    ApiKey::try_from(R::KEY).map_err(|()| anyhow!("unknown api key {}", R::KEY))
}

/// What one broker offers: api key → (lowest, highest) version.
#[derive(Clone, Debug, Default)]
pub struct Versions {
    offered: HashMap<i16, (i16, i16)>,
}

impl Versions {
    pub fn from_offered(offered: impl IntoIterator<Item = (i16, i16, i16)>) -> Versions {
        Versions {
            offered: offered
                .into_iter()
                .map(|(key, min, max)| (key, (min, max)))
                .collect(),
        }
    }

    pub fn from_response(response: &ApiVersionsResponse) -> Versions {
        Versions::from_offered(
            response
                .api_keys
                .iter()
                .map(|api| (api.api_key, api.min_version, api.max_version)),
        )
    }

    /// The version of `R` to build and send to this broker.
    pub fn of<R: Request>(&self) -> Result<i16> {
        negotiate(api_key::<R>()?, self.offered.get(&R::KEY).copied())
    }

    /// True when the broker offers `R` at any version this client speaks.
    pub fn supports<R: Request>(&self) -> bool {
        self.of::<R>().is_ok()
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use kafka_protocol::messages::*;

    #[test]
    fn negotiation_picks_the_highest_common_version() {
        assert_eq!(negotiate(ApiKey::Fetch, Some((0, 17))).unwrap(), 16);
        assert_eq!(negotiate(ApiKey::Fetch, Some((4, 8))).unwrap(), 8);
        assert_eq!(negotiate(ApiKey::JoinGroup, Some((0, 9))).unwrap(), 9);
        let error = negotiate(ApiKey::Produce, Some((13, 13))).unwrap_err();
        assert!(error.to_string().contains("no common Produce version"));
        let error = negotiate(ApiKey::JoinGroup, None).unwrap_err();
        assert!(error.to_string().contains("does not support JoinGroup"));
    }

    #[test]
    fn versions_answer_per_request_type() {
        let versions = Versions::from_offered([(0, 3, 11), (1, 4, 17), (3, 0, 9)]);
        assert_eq!(versions.of::<ProduceRequest>().unwrap(), 11);
        assert_eq!(versions.of::<FetchRequest>().unwrap(), 16);
        assert_eq!(versions.of::<MetadataRequest>().unwrap(), 9);
        assert!(!versions.supports::<JoinGroupRequest>());
    }

    #[test]
    fn every_client_range_is_inside_the_codec() {
        fn inside<R: Request>() {
            let api = api_key::<R>().unwrap();
            let (_, min, max) = CLIENT_APIS.iter().find(|(k, _, _)| *k == api).unwrap();
            assert!(
                *min >= R::VERSIONS.min && *max <= R::VERSIONS.max,
                "{api:?}"
            );
        }
        inside::<ProduceRequest>();
        inside::<FetchRequest>();
        inside::<ListOffsetsRequest>();
        inside::<MetadataRequest>();
        inside::<OffsetCommitRequest>();
        inside::<OffsetFetchRequest>();
        inside::<FindCoordinatorRequest>();
        inside::<JoinGroupRequest>();
        inside::<HeartbeatRequest>();
        inside::<LeaveGroupRequest>();
        inside::<SyncGroupRequest>();
        inside::<DescribeGroupsRequest>();
        inside::<ListGroupsRequest>();
        inside::<ApiVersionsRequest>();
        inside::<CreateTopicsRequest>();
        inside::<DeleteTopicsRequest>();
        inside::<DescribeConfigsRequest>();
        inside::<CreatePartitionsRequest>();
        inside::<kafka_protocol::messages::DeleteRecordsRequest>();
        inside::<DeleteGroupsRequest>();
        inside::<OffsetDeleteRequest>();
        inside::<InitProducerIdRequest>();
        inside::<kafka_protocol::messages::OffsetForLeaderEpochRequest>();
        inside::<kafka_protocol::messages::DescribeClusterRequest>();
        inside::<kafka_protocol::messages::DescribeQuorumRequest>();
        inside::<ElectLeadersRequest>();
        inside::<AlterPartitionReassignmentsRequest>();
        inside::<ListPartitionReassignmentsRequest>();
        inside::<IncrementalAlterConfigsRequest>();
        assert_eq!(CLIENT_APIS.len(), 29, "every entry checked above");
    }
}
