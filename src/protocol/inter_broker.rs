//! The controller's requests to brokers, in Kafka 3.9's wire format. The
//! kafka-protocol crate dropped LeaderAndIsr, StopReplica, UpdateMetadata and
//! ControlledShutdown at 0.16; their codecs are 0.15.1's, generated from
//! Kafka 3.9's schemas (`kafka-protocol-legacy` in Cargo.toml). Frames are
//! laid out here, since 0.18's `ApiKey` does not know these keys.

use bytes::{BufMut, Bytes, BytesMut};
pub use kafka_protocol_legacy::messages::update_metadata_request::{
    UpdateMetadataBroker, UpdateMetadataEndpoint, UpdateMetadataPartitionState,
    UpdateMetadataTopicState,
};
pub use kafka_protocol_legacy::messages::{
    BrokerId, TopicName, UpdateMetadataRequest, UpdateMetadataResponse,
};
pub use kafka_protocol_legacy::protocol::StrBytes;
use kafka_protocol_legacy::protocol::{Decodable, Encodable};

/// The leader Kafka sends for a partition of a topic being deleted
/// (`LeaderAndIsr.LeaderDuringDelete`): brokers drop it from their cache.
pub const LEADER_DURING_DELETE: i32 = -2;

/// Kafka's keys of the controller's requests.
pub const UPDATE_METADATA: i16 = 6;
/// What a Kafka 3.9 controller sends (IBP 3.9).
pub const UPDATE_METADATA_VERSION: i16 = 8;
/// What Kafka 3.9 serves.
pub const UPDATE_METADATA_VERSIONS: (i16, i16) = (0, 8);
/// UpdateMetadata is flexible (tagged fields, compact strings) from v6.
const UPDATE_METADATA_FLEXIBLE_FROM: i16 = 6;

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

/// UpdateMetadata's request header version at `version` (2 when flexible).
pub fn update_metadata_request_header_version(version: i16) -> i16 {
    if version >= UPDATE_METADATA_FLEXIBLE_FROM {
        2
    } else {
        1
    }
}

fn response_header_version(version: i16) -> i16 {
    if version >= UPDATE_METADATA_FLEXIBLE_FROM {
        1
    } else {
        0
    }
}

fn codec_error(what: &str, error: impl std::fmt::Display) -> String {
    format!("{what}: {error}")
}

pub fn decode_update_metadata(
    body: &mut Bytes,
    version: i16,
) -> Result<UpdateMetadataRequest, String> {
    UpdateMetadataRequest::decode(body, version).map_err(|e| codec_error("UpdateMetadata", e))
}

/// A whole UpdateMetadata response frame.
pub fn encode_update_metadata_response(
    version: i16,
    correlation_id: i32,
    response: &UpdateMetadataResponse,
) -> Result<Bytes, String> {
    let flexible_header = response_header_version(version) >= 1;
    let body_size = response
        .compute_size(version)
        .map_err(|e| codec_error("UpdateMetadata response", e))?;
    let size = 4 + usize::from(flexible_header) + body_size;
    let mut frame = BytesMut::with_capacity(4 + size);
    frame.put_i32(size as i32);
    frame.put_i32(correlation_id);
    if flexible_header {
        frame.put_u8(0); // no tagged fields
    }
    response
        .encode(&mut frame, version)
        .map_err(|e| codec_error("UpdateMetadata response", e))?;
    Ok(frame.freeze())
}

/// A whole UpdateMetadata request frame from the controller (`client_id`).
pub fn encode_update_metadata_request(
    correlation_id: i32,
    client_id: &str,
    request: &UpdateMetadataRequest,
) -> Result<Bytes, String> {
    let version = UPDATE_METADATA_VERSION;
    let body_size = request
        .compute_size(version)
        .map_err(|e| codec_error("UpdateMetadata", e))?;
    // Header v2: key, version, correlation id, nullable string client id, tagged fields.
    let header_size = 2 + 2 + 4 + 2 + client_id.len() + 1;
    let mut frame = BytesMut::with_capacity(4 + header_size + body_size);
    frame.put_i32((header_size + body_size) as i32);
    frame.put_i16(UPDATE_METADATA);
    frame.put_i16(version);
    frame.put_i32(correlation_id);
    frame.put_i16(client_id.len() as i16);
    frame.put_slice(client_id.as_bytes());
    frame.put_u8(0);
    request
        .encode(&mut frame, version)
        .map_err(|e| codec_error("UpdateMetadata", e))?;
    Ok(frame.freeze())
}

/// The correlation id and body of an UpdateMetadata response frame (after
/// its length).
pub fn decode_update_metadata_response(
    mut frame: Bytes,
) -> Result<(i32, UpdateMetadataResponse), String> {
    use bytes::Buf;
    if frame.len() < 5 {
        return Err(format!("{}-byte UpdateMetadata response", frame.len()));
    }
    let correlation_id = frame.get_i32();
    let tagged_fields = frame.get_u8();
    if tagged_fields != 0 {
        return Err("tagged fields in an UpdateMetadata response header".into());
    }
    let response = UpdateMetadataResponse::decode(&mut frame, UPDATE_METADATA_VERSION)
        .map_err(|e| codec_error("UpdateMetadata response", e))?;
    Ok((correlation_id, response))
}

#[cfg(test)]
mod tests {
    use bytes::Buf;
    use kafka_protocol::messages::RequestHeader;
    use kafka_protocol::protocol::Decodable as _;

    use super::*;

    #[test]
    fn update_metadata_frames_are_kafkas() {
        let request = UpdateMetadataRequest::default()
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
                    .with_security_protocol(security_protocol_id("PLAINTEXT"))])]);
        let mut frame = encode_update_metadata_request(42, "2", &request).unwrap();
        assert_eq!(frame.get_i32() as usize, frame.remaining());
        // The header is Kafka's v2, as 0.18's codec reads it.
        let header = RequestHeader::decode(&mut frame, 2).unwrap();
        assert_eq!(
            (
                header.request_api_key,
                header.request_api_version,
                header.correlation_id
            ),
            (UPDATE_METADATA, UPDATE_METADATA_VERSION, 42)
        );
        assert_eq!(header.client_id.as_deref(), Some("2"));
        assert_eq!(
            decode_update_metadata(&mut frame, UPDATE_METADATA_VERSION).unwrap(),
            request
        );
        assert!(frame.is_empty());

        let response = UpdateMetadataResponse::default().with_error_code(11);
        let mut frame = encode_update_metadata_response(8, 42, &response).unwrap();
        assert_eq!(frame.get_i32() as usize, frame.remaining());
        assert_eq!(
            decode_update_metadata_response(frame).unwrap(),
            (42, response)
        );
        // Before v6 the response header has no tagged fields.
        let old =
            encode_update_metadata_response(5, 9, &UpdateMetadataResponse::default()).unwrap();
        assert_eq!(&old[..], &[0, 0, 0, 6, 0, 0, 0, 9, 0, 0]);
        assert_eq!(update_metadata_request_header_version(5), 1);
    }
}
