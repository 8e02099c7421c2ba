//! One file per Kafka API; this table registers them. ApiVersions advertises
//! exactly `SUPPORTED_APIS`.

mod alter_configs;
mod api_versions;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod init_producer_id;
mod join_group;
mod leave_group;
mod list_groups;
mod list_offsets;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod produce;
mod sasl_handshake;
mod sync_group;

use std::rc::Rc;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use tracing::debug;

use crate::metrics::errors::ResponseErrors;
use crate::protocol::{
    decode_body, decode_header, encode_fetch_response, encode_response, peek_api, FrameError,
    FramePart,
};
use crate::server::broker::ShardBroker;

/// Every API served, with the versions served (min, max).
pub const SUPPORTED_APIS: &[(ApiKey, i16, i16)] = &[
    (ApiKey::Produce, 3, 13),
    (ApiKey::Fetch, 4, 18),
    (ApiKey::ListOffsets, 1, 10),
    (ApiKey::Metadata, 0, 13),
    (ApiKey::OffsetCommit, 2, 9),
    (ApiKey::OffsetFetch, 1, 9),
    (ApiKey::FindCoordinator, 0, 6),
    (ApiKey::JoinGroup, 0, 9),
    (ApiKey::Heartbeat, 0, 4),
    (ApiKey::LeaveGroup, 0, 5),
    (ApiKey::SyncGroup, 0, 5),
    (ApiKey::DescribeGroups, 0, 5),
    (ApiKey::ListGroups, 0, 5),
    (ApiKey::ApiVersions, 0, 4),
    (ApiKey::SaslHandshake, 0, 1),
    (ApiKey::CreateTopics, 2, 7),
    (ApiKey::DeleteTopics, 1, 6),
    (ApiKey::DeleteRecords, 0, 2),
    (ApiKey::InitProducerId, 0, 5),
    (ApiKey::DescribeConfigs, 1, 4),
    (ApiKey::AlterConfigs, 0, 2),
    (ApiKey::DescribeLogDirs, 1, 4),
    (ApiKey::CreatePartitions, 0, 3),
    (ApiKey::IncrementalAlterConfigs, 0, 1),
    (ApiKey::DescribeCluster, 0, 2),
    (ApiKey::DeleteGroups, 0, 2),
    (ApiKey::OffsetDelete, 0, 0),
];

/// Kafka's ConfigResource types.
pub const RESOURCE_TYPE_TOPIC: i8 = 2;
pub const RESOURCE_TYPE_BROKER: i8 = 4;

pub fn supported_versions(api_key: ApiKey) -> Option<(i16, i16)> {
    SUPPORTED_APIS
        .iter()
        .find(|(key, _, _)| *key == api_key)
        .map(|(_, min, max)| (*min, *max))
}

/// What a request's handler hands the handlers.
pub struct RequestContext {
    pub broker: Rc<ShardBroker>,
    pub header: RequestHeader,
    /// The listener the request came in on: its endpoints are the ones answered.
    pub listener_name: Rc<str>,
    /// The peer as Kafka prints it (`/127.0.0.1`).
    pub client_host: String,
}

impl RequestContext {
    pub fn client_id(&self) -> String {
        self.header
            .client_id
            .as_ref()
            .map(|id| id.to_string())
            .unwrap_or_default()
    }
}

/// What to do after a request.
pub enum Outcome {
    Respond(Bytes),
    /// A frame in parts, ranges of segment files among them (Fetch).
    RespondInParts(Vec<FramePart>),
    /// acks=0 produce: Kafka sends nothing back.
    NoResponse,
}

macro_rules! serve {
    ($ctx:expr, $body:expr, $key:expr, $version:expr, $handler:path) => {{
        let request = decode_body(&mut $body, $version)?;
        let response = $handler(&$ctx, request, $version).await;
        count_errors(&$ctx, $key, &response);
        respond($key, $version, $ctx.header.correlation_id, &response)
    }};
}

/// The response's error codes into the shard's ErrorsPerSec counters.
fn count_errors(ctx: &RequestContext, key: ApiKey, response: &impl ResponseErrors) {
    response.for_each_error(&mut |code| ctx.broker.metrics.record_error(key as i16, code));
}

fn respond<T: kafka_protocol::protocol::Encodable>(
    key: ApiKey,
    version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Outcome, FrameError> {
    encode_response(key, version, correlation_id, body)
        .map(Outcome::Respond)
        .map_err(|error| {
            FrameError::Malformed(format!(
                "cannot encode the {key:?} v{version} response: {error}"
            ))
        })
}

/// Who is at the other end of a connection, for every request on it.
pub struct ConnectionInfo {
    pub listener_name: Rc<str>,
    /// The peer as Kafka prints it (`/127.0.0.1`).
    pub client_host: String,
}

/// Decodes one request frame, runs its handler, encodes the response.
pub async fn handle_request(
    broker: &Rc<ShardBroker>,
    connection: &ConnectionInfo,
    mut frame: Bytes,
) -> Result<Outcome, FrameError> {
    let (raw_key, version) = peek_api(&frame)?;
    let unsupported = FrameError::Unsupported {
        api_key: raw_key,
        api_version: version,
    };
    let Ok(key) = ApiKey::try_from(raw_key) else {
        return Err(unsupported);
    };
    let Some((min, max)) = supported_versions(key) else {
        return Err(unsupported);
    };
    if version < min || version > max {
        if key == ApiKey::ApiVersions {
            // KIP-511: answer in v0 with UNSUPPORTED_VERSION and what we serve.
            let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
            return respond(key, 0, correlation_id, &api_versions::unsupported_version());
        }
        return Err(unsupported);
    }
    let header = decode_header(key, version, &mut frame)?;
    debug!(api = ?key, version, correlation_id = header.correlation_id, "request");
    let ctx = RequestContext {
        broker: broker.clone(),
        header,
        listener_name: connection.listener_name.clone(),
        client_host: connection.client_host.clone(),
    };
    match key {
        ApiKey::ApiVersions => serve!(ctx, frame, key, version, api_versions::handle),
        ApiKey::Metadata => serve!(ctx, frame, key, version, metadata::handle),
        ApiKey::Produce => {
            let request = decode_body(&mut frame, version)?;
            match produce::handle(&ctx, request, version).await {
                Some(response) => {
                    count_errors(&ctx, key, &response);
                    respond(key, version, ctx.header.correlation_id, &response)
                }
                None => Ok(Outcome::NoResponse),
            }
        }
        ApiKey::Fetch => {
            let request = decode_body(&mut frame, version)?;
            let (response, records) = fetch::handle(&ctx, request, version).await;
            count_errors(&ctx, key, &response);
            Ok(Outcome::RespondInParts(encode_fetch_response(
                version,
                ctx.header.correlation_id,
                &response,
                records,
            )))
        }
        ApiKey::ListOffsets => serve!(ctx, frame, key, version, list_offsets::handle),
        ApiKey::CreateTopics => serve!(ctx, frame, key, version, create_topics::handle),
        ApiKey::DeleteTopics => serve!(ctx, frame, key, version, delete_topics::handle),
        ApiKey::InitProducerId => serve!(ctx, frame, key, version, init_producer_id::handle),
        ApiKey::CreatePartitions => serve!(ctx, frame, key, version, create_partitions::handle),
        ApiKey::DescribeConfigs => serve!(ctx, frame, key, version, describe_configs::handle),
        ApiKey::AlterConfigs => serve!(ctx, frame, key, version, alter_configs::handle),
        ApiKey::IncrementalAlterConfigs => {
            serve!(ctx, frame, key, version, alter_configs::handle_incremental)
        }
        ApiKey::DescribeLogDirs => serve!(ctx, frame, key, version, describe_log_dirs::handle),
        ApiKey::DescribeCluster => serve!(ctx, frame, key, version, describe_cluster::handle),
        ApiKey::SaslHandshake => serve!(ctx, frame, key, version, sasl_handshake::handle),
        ApiKey::FindCoordinator => serve!(ctx, frame, key, version, find_coordinator::handle),
        ApiKey::JoinGroup => serve!(ctx, frame, key, version, join_group::handle),
        ApiKey::SyncGroup => serve!(ctx, frame, key, version, sync_group::handle),
        ApiKey::Heartbeat => serve!(ctx, frame, key, version, heartbeat::handle),
        ApiKey::LeaveGroup => serve!(ctx, frame, key, version, leave_group::handle),
        ApiKey::OffsetCommit => serve!(ctx, frame, key, version, offset_commit::handle),
        ApiKey::OffsetFetch => serve!(ctx, frame, key, version, offset_fetch::handle),
        ApiKey::DescribeGroups => serve!(ctx, frame, key, version, describe_groups::handle),
        ApiKey::ListGroups => serve!(ctx, frame, key, version, list_groups::handle),
        ApiKey::DeleteGroups => serve!(ctx, frame, key, version, delete_groups::handle),
        ApiKey::DeleteRecords => serve!(ctx, frame, key, version, delete_records::handle),
        ApiKey::OffsetDelete => serve!(ctx, frame, key, version, offset_delete::handle),
        _ => Err(unsupported),
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::*;
    use kafka_protocol::protocol::{Decodable, Encodable};

    use super::*;

    /// Every advertised version of every served API round-trips through the
    /// codec, request and response alike: ApiVersions promises nothing the
    /// broker cannot parse or answer.
    #[test]
    fn advertised_versions_are_all_served() {
        fn round_trip<T: Encodable + Decodable + Default>(key: ApiKey, min: i16, max: i16) {
            for version in min..=max {
                let mut buf = bytes::BytesMut::new();
                T::default()
                    .encode(&mut buf, version)
                    .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
                T::decode(&mut buf.freeze(), version)
                    .unwrap_or_else(|e| panic!("{key:?} v{version}: {e}"));
            }
        }
        macro_rules! check {
            ($($key:ident => $request:ty, $response:ty;)*) => {
                let mut checked = 0;
                for (key, min, max) in SUPPORTED_APIS {
                    match key {
                        $(ApiKey::$key => {
                            round_trip::<$request>(*key, *min, *max);
                            round_trip::<$response>(*key, *min, *max);
                            checked += 1;
                        })*
                        other => panic!("{other:?} is advertised but not checked here"),
                    }
                }
                assert_eq!(checked, SUPPORTED_APIS.len());
            };
        }
        check! {
            Produce => ProduceRequest, ProduceResponse;
            Fetch => FetchRequest, FetchResponse;
            ListOffsets => ListOffsetsRequest, ListOffsetsResponse;
            Metadata => MetadataRequest, MetadataResponse;
            ApiVersions => ApiVersionsRequest, ApiVersionsResponse;
            SaslHandshake => SaslHandshakeRequest, SaslHandshakeResponse;
            CreateTopics => CreateTopicsRequest, CreateTopicsResponse;
            DeleteTopics => DeleteTopicsRequest, DeleteTopicsResponse;
            DeleteRecords => DeleteRecordsRequest, DeleteRecordsResponse;
            InitProducerId => InitProducerIdRequest, InitProducerIdResponse;
            DescribeConfigs => DescribeConfigsRequest, DescribeConfigsResponse;
            AlterConfigs => AlterConfigsRequest, AlterConfigsResponse;
            DescribeLogDirs => DescribeLogDirsRequest, DescribeLogDirsResponse;
            CreatePartitions => CreatePartitionsRequest, CreatePartitionsResponse;
            IncrementalAlterConfigs => IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse;
            DescribeCluster => DescribeClusterRequest, DescribeClusterResponse;
            OffsetCommit => OffsetCommitRequest, OffsetCommitResponse;
            OffsetFetch => OffsetFetchRequest, OffsetFetchResponse;
            FindCoordinator => FindCoordinatorRequest, FindCoordinatorResponse;
            JoinGroup => JoinGroupRequest, JoinGroupResponse;
            Heartbeat => HeartbeatRequest, HeartbeatResponse;
            LeaveGroup => LeaveGroupRequest, LeaveGroupResponse;
            SyncGroup => SyncGroupRequest, SyncGroupResponse;
            DescribeGroups => DescribeGroupsRequest, DescribeGroupsResponse;
            ListGroups => ListGroupsRequest, ListGroupsResponse;
            DeleteGroups => DeleteGroupsRequest, DeleteGroupsResponse;
            OffsetDelete => OffsetDeleteRequest, OffsetDeleteResponse;
        }
    }
}
