//! The controller's requests to brokers and a broker's to the controller, in
//! Kafka 3.9's wire format. The kafka-protocol crate dropped LeaderAndIsr,
//! StopReplica, UpdateMetadata and ControlledShutdown at 0.16, and
//! OffsetForLeaderEpoch v0-1 at 0.17; their codecs are 0.15.1's, generated
//! from Kafka 3.9's schemas (`kafka-protocol-legacy` in Cargo.toml). Frames
//! are laid out here, since 0.18's `ApiKey` does not know these keys.

use bytes::{Buf, BufMut, Bytes, BytesMut};
pub use kafka_protocol_legacy::messages::controlled_shutdown_response::RemainingPartition;
pub use kafka_protocol_legacy::messages::leader_and_isr_request::{
    LeaderAndIsrLiveLeader, LeaderAndIsrPartitionState, LeaderAndIsrTopicState,
};
pub use kafka_protocol_legacy::messages::leader_and_isr_response::{
    LeaderAndIsrPartitionError, LeaderAndIsrTopicError,
};
pub use kafka_protocol_legacy::messages::stop_replica_request::{
    StopReplicaPartitionState, StopReplicaTopicState,
};
pub use kafka_protocol_legacy::messages::stop_replica_response::StopReplicaPartitionError;
pub use kafka_protocol_legacy::messages::update_metadata_request::{
    UpdateMetadataBroker, UpdateMetadataEndpoint, UpdateMetadataPartitionState,
    UpdateMetadataTopicState,
};
pub use kafka_protocol_legacy::messages::{
    BrokerId, ControlledShutdownRequest, ControlledShutdownResponse, LeaderAndIsrRequest,
    LeaderAndIsrResponse, StopReplicaRequest, StopReplicaResponse, TopicName,
    UpdateMetadataRequest, UpdateMetadataResponse,
};
pub use kafka_protocol_legacy::protocol::StrBytes;
use kafka_protocol_legacy::protocol::{Decodable, Encodable};

use crate::network::broker_connection::BrokerConnection;

/// The leader Kafka sends for a partition of a topic being deleted
/// (`LeaderAndIsr.LeaderDuringDelete`): brokers drop it from their cache.
pub const LEADER_DURING_DELETE: i32 = -2;
/// The leader epoch StopReplica carries for a topic's deletion
/// (`LeaderAndIsr.EpochDuringDelete`).
pub const EPOCH_DURING_DELETE: i32 = -2;
/// StopReplica's leader epoch when the controller has none (`NoEpoch`).
pub const NO_EPOCH: i32 = -1;

/// An API Kafka 3.9 serves at versions 0.18's codecs lack.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControlApi {
    pub name: &'static str,
    pub key: i16,
    /// What a Kafka 3.9 broker sends (IBP 3.9).
    pub sent_version: i16,
    /// What Kafka 3.9 serves.
    pub min_version: i16,
    pub max_version: i16,
    /// Tagged fields and compact strings from this version.
    flexible_from: i16,
}

pub const LEADER_AND_ISR: ControlApi = ControlApi {
    name: "LeaderAndIsr",
    key: 4,
    sent_version: 7,
    min_version: 0,
    max_version: 7,
    flexible_from: 4,
};
pub const STOP_REPLICA: ControlApi = ControlApi {
    name: "StopReplica",
    key: 5,
    sent_version: 4,
    min_version: 0,
    max_version: 4,
    flexible_from: 2,
};
pub const UPDATE_METADATA: ControlApi = ControlApi {
    name: "UpdateMetadata",
    key: 6,
    sent_version: 8,
    min_version: 0,
    max_version: 8,
    flexible_from: 6,
};
pub const CONTROLLED_SHUTDOWN: ControlApi = ControlApi {
    name: "ControlledShutdown",
    key: 7,
    sent_version: 3,
    min_version: 0,
    max_version: 3,
    flexible_from: 3,
};

/// Served to followers and clients, v0-4 as Kafka 3.9 serves it; a 3.9
/// follower sends v4.
pub const OFFSET_FOR_LEADER_EPOCH: ControlApi = ControlApi {
    name: "OffsetForLeaderEpoch",
    key: 23,
    sent_version: 4,
    min_version: 0,
    max_version: 4,
    flexible_from: 4,
};

/// A request's broker ids as plain ids.
pub fn broker_ids(ids: &[BrokerId]) -> Vec<i32> {
    ids.iter().map(|id| id.0).collect()
}

/// Kafka's `SecurityProtocol` ids, as UpdateMetadata's endpoints carry them.
pub fn security_protocol_id(name: &str) -> i16 {
    match name {
        "PLAINTEXT" => 0,
        "SSL" => 1,
        "SASL_PLAINTEXT" => 2,
        "SASL_SSL" => 3,
        _ => -1,
    }
}

pub fn security_protocol_name(id: i16) -> Option<&'static str> {
    Some(match id {
        0 => "PLAINTEXT",
        1 => "SSL",
        2 => "SASL_PLAINTEXT",
        3 => "SASL_SSL",
        _ => return None,
    })
}

impl ControlApi {
    fn flexible(&self, version: i16) -> bool {
        version >= self.flexible_from
    }

    /// The request header version at `version`: 2 when flexible, else 1;
    /// ControlledShutdown v0's header has no client id (v0).
    pub fn request_header_version(&self, version: i16) -> i16 {
        match (self.flexible(version), self.key, version) {
            (true, _, _) => 2,
            (false, 7, 0) => 0,
            (false, _, _) => 1,
        }
    }

    fn error(&self, what: &str, error: impl std::fmt::Display) -> String {
        format!("{} {what}: {error}", self.name)
    }

    pub fn decode_request<R: Decodable>(
        &self,
        body: &mut Bytes,
        version: i16,
    ) -> Result<R, String> {
        R::decode(body, version).map_err(|e| self.error("request", e))
    }

    /// A whole response frame at `version`.
    pub fn encode_response<R: Encodable>(
        &self,
        version: i16,
        correlation_id: i32,
        response: &R,
    ) -> Result<Bytes, String> {
        let flexible = self.flexible(version);
        let body_size = response
            .compute_size(version)
            .map_err(|e| self.error("response", e))?;
        let size = 4 + usize::from(flexible) + body_size;
        let mut frame = BytesMut::with_capacity(4 + size);
        frame.put_i32(size as i32);
        frame.put_i32(correlation_id);
        if flexible {
            frame.put_u8(0); // no tagged fields
        }
        response
            .encode(&mut frame, version)
            .map_err(|e| self.error("response", e))?;
        Ok(frame.freeze())
    }

    /// A whole request frame at the version Kafka 3.9 sends, from `client_id`.
    pub fn encode_request<R: Encodable>(
        &self,
        correlation_id: i32,
        client_id: &str,
        request: &R,
    ) -> Result<Bytes, String> {
        let version = self.sent_version;
        assert!(self.flexible(version), "Kafka 3.9 sends flexible versions");
        let body_size = request
            .compute_size(version)
            .map_err(|e| self.error("request", e))?;
        // Header v2: key, version, correlation id, nullable string client id, tagged fields.
        let header_size = 2 + 2 + 4 + 2 + client_id.len() + 1;
        let mut frame = BytesMut::with_capacity(4 + header_size + body_size);
        frame.put_i32((header_size + body_size) as i32);
        frame.put_i16(self.key);
        frame.put_i16(version);
        frame.put_i32(correlation_id);
        frame.put_i16(client_id.len() as i16);
        frame.put_slice(client_id.as_bytes());
        frame.put_u8(0);
        request
            .encode(&mut frame, version)
            .map_err(|e| self.error("request", e))?;
        Ok(frame.freeze())
    }

    /// Sends `request` on `connection` and reads its answer.
    pub async fn call<Request: Encodable, Response: Decodable>(
        &self,
        connection: &mut BrokerConnection,
        client_id: &str,
        request: &Request,
    ) -> Result<Response, String> {
        let correlation_id = connection.next_correlation_id();
        let frame = self.encode_request(correlation_id, client_id, request)?;
        let (answered, response) = self.decode_response(connection.exchange(&frame).await?)?;
        if answered != correlation_id {
            return Err(self.error(
                "response",
                format!("answers {answered}, expected {correlation_id}"),
            ));
        }
        Ok(response)
    }

    /// The correlation id and body of a response frame (after its length) to
    /// a request this broker sent.
    pub fn decode_response<R: Decodable>(&self, mut frame: Bytes) -> Result<(i32, R), String> {
        if frame.len() < 5 {
            return Err(self.error("response", format!("{} bytes", frame.len())));
        }
        let correlation_id = frame.get_i32();
        if frame.get_u8() != 0 {
            return Err(self.error("response", "tagged fields in the header"));
        }
        let response =
            R::decode(&mut frame, self.sent_version).map_err(|e| self.error("response", e))?;
        Ok((correlation_id, response))
    }
}

#[cfg(test)]
mod tests {
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::Decodable as _;

    use super::*;

    /// Encodes `request` as the controller sends it and reads it back with
    /// 0.18's header codec and the API's own request codec.
    fn round_trip<R: Encodable + Decodable + PartialEq + std::fmt::Debug>(
        api: ControlApi,
        request: R,
    ) {
        let mut frame = api.encode_request(42, "2", &request).unwrap();
        assert_eq!(frame.get_i32() as usize, frame.remaining());
        let header = RequestHeader::decode(&mut frame, 2).unwrap();
        assert_eq!(
            (
                header.request_api_key,
                header.request_api_version,
                header.correlation_id
            ),
            (api.key, api.sent_version, 42)
        );
        assert_eq!(header.client_id.as_deref(), Some("2"));
        assert_eq!(api.request_header_version(api.sent_version), 2);
        let decoded: R = api.decode_request(&mut frame, api.sent_version).unwrap();
        assert_eq!(decoded, request);
        assert!(frame.is_empty());
    }

    #[test]
    fn the_controllers_requests_frame_as_kafkas() {
        let name = || TopicName(StrBytes::from_static_str("t"));
        round_trip(
            UPDATE_METADATA,
            UpdateMetadataRequest::default()
                .with_controller_id(BrokerId(2))
                .with_controller_epoch(7)
                .with_broker_epoch(1234)
                .with_live_brokers(vec![UpdateMetadataBroker::default()
                    .with_id(BrokerId(2))
                    .with_rack(Some(StrBytes::from_static_str("r1")))
                    .with_endpoints(vec![UpdateMetadataEndpoint::default()
                        .with_host(StrBytes::from_static_str("127.0.0.1"))
                        .with_port(9092)
                        .with_listener(StrBytes::from_static_str("PLAINTEXT"))
                        .with_security_protocol(security_protocol_id("PLAINTEXT"))])]),
        );
        round_trip(
            LEADER_AND_ISR,
            LeaderAndIsrRequest::default()
                .with_controller_id(BrokerId(2))
                .with_controller_epoch(7)
                .with_broker_epoch(99)
                .with_topic_states(vec![LeaderAndIsrTopicState::default()
                    .with_topic_name(name())
                    .with_topic_id(uuid::Uuid::new_v4())
                    .with_partition_states(vec![LeaderAndIsrPartitionState::default()
                        .with_partition_index(3)
                        .with_leader(BrokerId(1))
                        .with_leader_epoch(4)
                        .with_isr(vec![BrokerId(1), BrokerId(2)])
                        .with_replicas(vec![BrokerId(1), BrokerId(2)])
                        .with_is_new(true)])])
                .with_live_leaders(vec![LeaderAndIsrLiveLeader::default()
                    .with_broker_id(BrokerId(1))
                    .with_host_name(StrBytes::from_static_str("127.0.0.1"))
                    .with_port(9093)]),
        );
        round_trip(
            STOP_REPLICA,
            StopReplicaRequest::default()
                .with_controller_id(BrokerId(2))
                .with_controller_epoch(7)
                .with_broker_epoch(99)
                .with_topic_states(vec![StopReplicaTopicState::default()
                    .with_topic_name(name())
                    .with_partition_states(vec![StopReplicaPartitionState::default()
                        .with_partition_index(0)
                        .with_leader_epoch(EPOCH_DURING_DELETE)
                        .with_delete_partition(true)])]),
        );
        round_trip(
            CONTROLLED_SHUTDOWN,
            ControlledShutdownRequest::default()
                .with_broker_id(BrokerId(3))
                .with_broker_epoch(99),
        );
    }

    #[test]
    fn response_frames_carry_the_header_their_version_has() {
        let response = UpdateMetadataResponse::default().with_error_code(11);
        let mut frame = UPDATE_METADATA.encode_response(8, 42, &response).unwrap();
        assert_eq!(frame.get_i32() as usize, frame.remaining());
        assert_eq!(
            UPDATE_METADATA.decode_response(frame).unwrap(),
            (42, response)
        );
        // Before v6 the response header has no tagged fields.
        let old = UPDATE_METADATA
            .encode_response(5, 9, &UpdateMetadataResponse::default())
            .unwrap();
        assert_eq!(&old[..], &[0, 0, 0, 6, 0, 0, 0, 9, 0, 0]);
        assert_eq!(UPDATE_METADATA.request_header_version(5), 1);
        assert_eq!(CONTROLLED_SHUTDOWN.request_header_version(0), 0);
        assert_eq!(STOP_REPLICA.request_header_version(2), 2);
        let stopped = StopReplicaResponse::default().with_partition_errors(vec![
            StopReplicaPartitionError::default()
                .with_topic_name(TopicName(StrBytes::from_static_str("t")))
                .with_error_code(0),
        ]);
        let mut frame = STOP_REPLICA.encode_response(4, 1, &stopped).unwrap();
        frame.advance(4);
        assert_eq!(STOP_REPLICA.decode_response(frame).unwrap(), (1, stopped));
    }
}
