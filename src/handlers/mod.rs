//! One file per Kafka API. `ApiTable` registers them for a listener, and
//! ApiVersions on that listener advertises exactly its table. Dispatch is on
//! the raw API key, so an API the kafka-protocol crate does not know (the
//! controller's requests to brokers) can be served with a codec of our own.

mod allocate_producer_ids;
mod alter_configs;
mod alter_partition;
mod alter_partition_reassignments;
mod alter_replica_log_dirs;
mod api_versions;
mod controlled_shutdown;
mod create_partitions;
mod create_topics;
mod delete_groups;
mod delete_records;
mod delete_topics;
mod describe_cluster;
mod describe_configs;
mod describe_groups;
mod describe_log_dirs;
mod elect_leaders;
mod fetch;
mod find_coordinator;
mod heartbeat;
mod init_producer_id;
mod join_group;
mod leader_and_isr;
mod leave_group;
mod list_groups;
mod list_offsets;
mod list_partition_reassignments;
mod metadata;
mod offset_commit;
mod offset_delete;
mod offset_fetch;
mod offset_for_leader_epoch;
mod produce;
mod sasl_handshake;
mod stop_replica;
mod sync_group;
mod update_metadata;

use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::rc::Rc;
use std::time::Instant;

use bytes::Bytes;
use kafka_protocol::messages::{ApiKey, RequestHeader};
use kafka_protocol::protocol::{Decodable, Encodable};
use shards::log::wall_clock_ms;
use tracing::debug;

use crate::metrics::errors::ResponseErrors;
use crate::metrics::request_metrics::{Phase, RequestTimes};
use crate::metrics::slow_requests::SlowRequest;
use crate::network::{ConnectionInfo, Dispatcher, Outcome};
use crate::protocol::inter_broker;
use crate::protocol::{
    decode_body, decode_header, encode_fetch_response, encode_response, peek_api, FrameError,
    ResponseError,
};
use crate::server::broker::ShardBroker;

/// Kafka's ConfigResource types.
pub const RESOURCE_TYPE_TOPIC: i8 = 2;
pub const RESOURCE_TYPE_BROKER: i8 = 4;

/// What a request's handler hands the handlers.
pub struct RequestContext {
    pub broker: Rc<ShardBroker>,
    pub header: RequestHeader,
    /// The listener the request came in on: its endpoints are the ones answered.
    pub listener_name: Rc<str>,
    /// The peer as Kafka prints it (`/127.0.0.1`).
    pub client_host: String,
    /// What this listener serves.
    pub apis: Rc<ApiTable>,
    /// Where the request's time goes; handlers mark the end of their local part.
    pub times: Rc<RequestTimes>,
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

/// A request being served: it borrows its context.
type Serving<'a> = Pin<Box<dyn Future<Output = Result<Outcome, FrameError>> + 'a>>;

/// One served API: its raw key, the versions served, the request header's
/// version at each, and how a request body becomes the response.
pub struct Api {
    pub key: i16,
    pub min_version: i16,
    pub max_version: i16,
    request_header_version: fn(i16) -> i16,
    serve: for<'a> fn(&'a RequestContext, Bytes, i16) -> Serving<'a>,
}

/// The APIs a listener serves, by key.
pub struct ApiTable {
    apis: Vec<Api>,
}

/// An API kafka-protocol knows, served by `$handler` (an `async fn(&ctx,
/// request, version) -> response`).
/// With `serve = f`, `f(&ctx, body, version)` does the whole request.
macro_rules! api {
    ($key:ident, $min:expr, $max:expr, serve = $serve:path) => {
        Api {
            key: ApiKey::$key as i16,
            min_version: $min,
            max_version: $max,
            request_header_version: |version| ApiKey::$key.request_header_version(version),
            serve: |ctx, body, version| Box::pin($serve(ctx, body, version)),
        }
    };
    ($key:ident, $min:expr, $max:expr, $handler:path) => {
        Api {
            key: ApiKey::$key as i16,
            min_version: $min,
            max_version: $max,
            request_header_version: |version| ApiKey::$key.request_header_version(version),
            serve: |ctx, body, version| Box::pin(serve(ctx, body, version, ApiKey::$key, $handler)),
        }
    };
}

/// A controller API (`inter_broker::ControlApi`, kafka-protocol 0.15.1's
/// codecs), served by `$handler` as `api!` serves the others.
macro_rules! control_api {
    ($api:path, $handler:path) => {
        Api {
            key: $api.key,
            min_version: $api.min_version,
            max_version: $api.max_version,
            request_header_version: |version| $api.request_header_version(version),
            serve: |ctx, body, version| Box::pin(serve_control(ctx, body, version, $api, $handler)),
        }
    };
}

impl ApiTable {
    /// What every listener serves to clients.
    pub fn client() -> Self {
        let apis = vec![
            api!(Produce, 3, 13, serve = serve_produce),
            api!(Fetch, 4, 18, serve = serve_fetch),
            api!(ListOffsets, 1, 10, list_offsets::handle),
            api!(Metadata, 0, 13, metadata::handle),
            api!(OffsetCommit, 2, 9, offset_commit::handle),
            api!(OffsetFetch, 1, 9, offset_fetch::handle),
            api!(FindCoordinator, 0, 6, find_coordinator::handle),
            api!(JoinGroup, 0, 9, join_group::handle),
            api!(Heartbeat, 0, 4, heartbeat::handle),
            api!(LeaveGroup, 0, 5, leave_group::handle),
            api!(SyncGroup, 0, 5, sync_group::handle),
            api!(DescribeGroups, 0, 5, describe_groups::handle),
            api!(ListGroups, 0, 5, list_groups::handle),
            api!(SaslHandshake, 0, 1, sasl_handshake::handle),
            api!(ApiVersions, 0, 4, api_versions::handle),
            api!(CreateTopics, 2, 7, create_topics::handle),
            api!(DeleteTopics, 1, 6, delete_topics::handle),
            api!(DeleteRecords, 0, 2, delete_records::handle),
            api!(InitProducerId, 0, 5, init_producer_id::handle),
            api!(DescribeConfigs, 1, 4, describe_configs::handle),
            api!(AlterConfigs, 0, 2, alter_configs::handle),
            api!(DescribeLogDirs, 1, 4, describe_log_dirs::handle),
            api!(AlterReplicaLogDirs, 1, 2, alter_replica_log_dirs::handle),
            api!(CreatePartitions, 0, 3, create_partitions::handle),
            api!(
                IncrementalAlterConfigs,
                0,
                1,
                alter_configs::handle_incremental
            ),
            api!(DeleteGroups, 0, 2, delete_groups::handle),
            api!(ElectLeaders, 0, 2, elect_leaders::handle),
            api!(
                AlterPartitionReassignments,
                0,
                0,
                alter_partition_reassignments::handle
            ),
            api!(
                ListPartitionReassignments,
                0,
                0,
                list_partition_reassignments::handle
            ),
            api!(DescribeCluster, 0, 2, describe_cluster::handle),
            api!(OffsetDelete, 0, 0, offset_delete::handle),
            control_api!(
                inter_broker::OFFSET_FOR_LEADER_EPOCH,
                offset_for_leader_epoch::handle
            ),
        ];
        Self::new(apis)
    }

    /// The inter-broker listener's: the clients' APIs and the controller's
    /// requests to brokers, as Kafka 3.9 serves them.
    pub fn inter_broker() -> Self {
        let mut apis = Self::client().apis;
        apis.extend([
            api!(AllocateProducerIds, 0, 0, allocate_producer_ids::handle),
            api!(AlterPartition, 2, 3, alter_partition::handle),
            control_api!(inter_broker::LEADER_AND_ISR, leader_and_isr::handle),
            control_api!(inter_broker::STOP_REPLICA, stop_replica::handle),
            control_api!(inter_broker::UPDATE_METADATA, update_metadata::handle),
            control_api!(
                inter_broker::CONTROLLED_SHUTDOWN,
                controlled_shutdown::handle
            ),
        ]);
        Self::new(apis)
    }

    fn new(mut apis: Vec<Api>) -> Self {
        apis.sort_by_key(|api| api.key);
        assert!(
            apis.windows(2).all(|pair| pair[0].key < pair[1].key),
            "one entry per API key"
        );
        Self { apis }
    }

    pub fn get(&self, key: i16) -> Option<&Api> {
        self.apis
            .binary_search_by_key(&key, |api| api.key)
            .ok()
            .map(|index| &self.apis[index])
    }

    pub fn apis(&self) -> &[Api] {
        &self.apis
    }
}

/// Decodes the body, runs the handler, counts the response's errors and
/// encodes it.
async fn serve<'a, Request, Response, Serving>(
    ctx: &'a RequestContext,
    mut body: Bytes,
    version: i16,
    key: ApiKey,
    handler: fn(&'a RequestContext, Request, i16) -> Serving,
) -> Result<Outcome, FrameError>
where
    Request: Decodable,
    Response: Encodable + ResponseErrors,
    Serving: Future<Output = Response> + 'a,
{
    let request = decode_body(&mut body, version)?;
    let response = handler(ctx, request, version).await;
    count_errors(ctx, key, &response);
    respond(key, version, ctx.header.correlation_id, &response)
}

/// `serve` for a controller API, with its own codecs.
async fn serve_control<'a, Request, Response, Serving>(
    ctx: &'a RequestContext,
    mut body: Bytes,
    version: i16,
    api: inter_broker::ControlApi,
    handler: fn(&'a RequestContext, Request, i16) -> Serving,
) -> Result<Outcome, FrameError>
where
    Request: kafka_protocol_legacy::protocol::Decodable,
    Response: kafka_protocol_legacy::protocol::Encodable + ResponseErrors,
    Serving: Future<Output = Response> + 'a,
{
    let request = api
        .decode_request(&mut body, version)
        .map_err(FrameError::Malformed)?;
    let response = handler(ctx, request, version).await;
    response.for_each_error(&mut |code| ctx.broker.metrics.record_error(api.key, code));
    api.encode_response(version, ctx.header.correlation_id, &response)
        .map(Outcome::Respond)
        .map_err(FrameError::Malformed)
}

/// Produce: acks=0 gets no response, as in Kafka.
async fn serve_produce(
    ctx: &RequestContext,
    mut body: Bytes,
    version: i16,
) -> Result<Outcome, FrameError> {
    let request = decode_body(&mut body, version)?;
    match produce::handle(ctx, request, version).await {
        Some(response) => {
            count_errors(ctx, ApiKey::Produce, &response);
            respond(
                ApiKey::Produce,
                version,
                ctx.header.correlation_id,
                &response,
            )
        }
        None => Ok(Outcome::NoResponse),
    }
}

/// Fetch: the response in parts, file ranges among them.
async fn serve_fetch(
    ctx: &RequestContext,
    mut body: Bytes,
    version: i16,
) -> Result<Outcome, FrameError> {
    let request = decode_body(&mut body, version)?;
    let (response, records) = fetch::handle(ctx, request, version).await;
    count_errors(ctx, ApiKey::Fetch, &response);
    Ok(Outcome::RespondInParts(encode_fetch_response(
        version,
        ctx.header.correlation_id,
        &response,
        records,
    )))
}

/// The response's error codes into the shard's ErrorsPerSec counters.
fn count_errors(ctx: &RequestContext, key: ApiKey, response: &impl ResponseErrors) {
    response.for_each_error(&mut |code| ctx.broker.metrics.record_error(key as i16, code));
}

fn respond<T: Encodable>(
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

/// A listener's dispatcher on one shard: its API table and the shard's broker.
pub struct RequestDispatcher {
    broker: Rc<ShardBroker>,
    apis: Rc<ApiTable>,
}

impl RequestDispatcher {
    pub fn new(broker: Rc<ShardBroker>, apis: Rc<ApiTable>) -> Self {
        Self { broker, apis }
    }
}

impl Dispatcher for RequestDispatcher {
    /// Decodes one request frame, runs its handler, encodes the response.
    async fn dispatch(
        &self,
        connection: &ConnectionInfo,
        mut frame: Bytes,
        times: &Rc<RequestTimes>,
    ) -> Result<Outcome, FrameError> {
        let (key, version) = peek_api(&frame)?;
        let unsupported = FrameError::Unsupported {
            api_key: key,
            api_version: version,
        };
        let Some(api) = self.apis.get(key) else {
            return Err(unsupported);
        };
        if version < api.min_version || version > api.max_version {
            if key == ApiKey::ApiVersions as i16 {
                // KIP-511: answer in v0 with UNSUPPORTED_VERSION and what we serve.
                let correlation_id = i32::from_be_bytes([frame[4], frame[5], frame[6], frame[7]]);
                let response = api_versions::unsupported_version(&self.apis);
                return respond(ApiKey::ApiVersions, 0, correlation_id, &response);
            }
            return Err(unsupported);
        }
        let header = decode_header((api.request_header_version)(version), &mut frame)?;
        times.dequeued(version, header.correlation_id);
        debug!(
            api = key,
            version,
            correlation_id = header.correlation_id,
            "request"
        );
        let ctx = RequestContext {
            broker: self.broker.clone(),
            header,
            listener_name: connection.listener_name.clone(),
            client_host: connection.client_host.clone(),
            apis: self.apis.clone(),
            times: times.clone(),
        };
        (api.serve)(&ctx, frame, version).await
    }

    async fn send_connection(&self, shard: usize, listener_name: &str, socket: OwnedFd) {
        let listener_name = listener_name.to_owned();
        let sent = self
            .broker
            .mesh()
            .invoke_on(
                shard,
                &self.broker,
                move |broker: Rc<ShardBroker>| async move {
                    broker.adopt_connection(&listener_name, socket)
                },
            )
            .await;
        if sent.is_err() {
            debug!(shard, "a connection's new shard is stopping; closed");
        }
    }

    fn request_refused(&self, api_key: i16) {
        self.broker
            .metrics
            .record_error(api_key, ResponseError::UnsupportedVersion.code());
    }

    fn request_answered(
        &self,
        api_key: i16,
        connection: &ConnectionInfo,
        times: &RequestTimes,
        responded: Instant,
        send_started: Instant,
    ) {
        let phases = times.phases(responded, send_started, Instant::now());
        let metrics = &self.broker.metrics;
        metrics.record_request(api_key, &phases);
        if let Some(waited) = times.socket_wait {
            metrics.record_phase(api_key, Phase::SocketWait, waited);
        }
        let now_ms = wall_clock_ms();
        let total = phases[6];
        if !metrics.slow_requests.borrow().keeps(now_ms, api_key, total) {
            return;
        }
        let (api_version, correlation_id) = times.identity().unwrap_or((-1, -1));
        metrics.slow_requests.borrow_mut().record(
            now_ms,
            SlowRequest {
                shard: self.broker.shard_id,
                received_wall_ms: now_ms - total.as_millis() as i64,
                received: times.received,
                api_key,
                api_version,
                correlation_id,
                client_host: connection.client_host.clone(),
                phases,
                socket_wait: times.socket_wait,
                mesh_jobs_in_flight: self.broker.mesh().jobs_in_flight(),
                slowest_partition: times.slowest_partition(),
            },
        );
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
        fn legacy_round_trip<T>(min: i16, max: i16)
        where
            T: kafka_protocol_legacy::protocol::Encodable
                + kafka_protocol_legacy::protocol::Decodable
                + Default,
        {
            for version in min..=max {
                let mut buf = bytes::BytesMut::new();
                T::default().encode(&mut buf, version).unwrap();
                T::decode(&mut buf.freeze(), version).unwrap();
            }
        }
        macro_rules! check {
            ($($key:ident => $request:ty, $response:ty;)*) => {
                let table = ApiTable::client();
                let mut checked = 0;
                for api in table.apis() {
                    let key = ApiKey::try_from(api.key).expect("an API kafka-protocol knows");
                    match key {
                        $(ApiKey::$key => {
                            round_trip::<$request>(key, api.min_version, api.max_version);
                            round_trip::<$response>(key, api.min_version, api.max_version);
                            checked += 1;
                        })*
                        // Kafka 3.9's codecs: 0.18's lack v0-1.
                        ApiKey::OffsetForLeaderEpoch => {
                            use kafka_protocol_legacy::messages as legacy;
                            legacy_round_trip::<legacy::OffsetForLeaderEpochRequest>(api.min_version, api.max_version);
                            legacy_round_trip::<legacy::OffsetForLeaderEpochResponse>(api.min_version, api.max_version);
                            checked += 1;
                        }
                        other => panic!("{other:?} is advertised but not checked here"),
                    }
                }
                assert_eq!(checked, table.apis().len());
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
            AlterReplicaLogDirs => AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse;
            CreatePartitions => CreatePartitionsRequest, CreatePartitionsResponse;
            ElectLeaders => ElectLeadersRequest, ElectLeadersResponse;
            AlterPartitionReassignments => AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse;
            ListPartitionReassignments => ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse;
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
