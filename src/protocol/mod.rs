//! Kafka's wire protocol at the edge: frames, request headers, response frames,
//! and Kafka's error codes. Message bodies are the kafka-protocol crate's, but
//! for Fetch responses, framed here around file ranges (fetch_response.rs).

mod fetch_response;

pub use fetch_response::{encode_fetch_response, FramePart, Records};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable};

/// Kafka's error codes, by Kafka's names.
pub mod error_code {
    pub const UNKNOWN_SERVER_ERROR: i16 = -1;
    pub const NONE: i16 = 0;
    pub const OFFSET_OUT_OF_RANGE: i16 = 1;
    pub const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;
    pub const INVALID_FETCH_SIZE: i16 = 4;
    pub const LEADER_NOT_AVAILABLE: i16 = 5;
    pub const NOT_LEADER_OR_FOLLOWER: i16 = 6;
    pub const MESSAGE_TOO_LARGE: i16 = 10;
    pub const OFFSET_METADATA_TOO_LARGE: i16 = 12;
    pub const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    pub const COORDINATOR_NOT_AVAILABLE: i16 = 15;
    pub const NOT_COORDINATOR: i16 = 16;
    pub const INVALID_TOPIC_EXCEPTION: i16 = 17;
    pub const RECORD_LIST_TOO_LARGE: i16 = 18;
    pub const NOT_ENOUGH_REPLICAS: i16 = 19;
    pub const NOT_ENOUGH_REPLICAS_AFTER_APPEND: i16 = 20;
    pub const INVALID_REQUIRED_ACKS: i16 = 21;
    pub const ILLEGAL_GENERATION: i16 = 22;
    pub const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
    pub const INVALID_GROUP_ID: i16 = 24;
    pub const UNKNOWN_MEMBER_ID: i16 = 25;
    pub const INVALID_SESSION_TIMEOUT: i16 = 26;
    pub const REBALANCE_IN_PROGRESS: i16 = 27;
    pub const INVALID_COMMIT_OFFSET_SIZE: i16 = 28;
    pub const UNSUPPORTED_SASL_MECHANISM: i16 = 33;
    pub const UNSUPPORTED_VERSION: i16 = 35;
    pub const TOPIC_ALREADY_EXISTS: i16 = 36;
    pub const INVALID_PARTITIONS: i16 = 37;
    pub const INVALID_REPLICATION_FACTOR: i16 = 38;
    pub const INVALID_REPLICA_ASSIGNMENT: i16 = 39;
    pub const INVALID_CONFIG: i16 = 40;
    pub const INVALID_REQUEST: i16 = 42;
    pub const POLICY_VIOLATION: i16 = 44;
    pub const KAFKA_STORAGE_ERROR: i16 = 56;
    pub const NON_EMPTY_GROUP: i16 = 68;
    pub const GROUP_ID_NOT_FOUND: i16 = 69;
    pub const MEMBER_ID_REQUIRED: i16 = 79;
    pub const GROUP_MAX_SIZE_REACHED: i16 = 81;
    pub const FENCED_INSTANCE_ID: i16 = 82;
    pub const GROUP_SUBSCRIBED_TO_TOPIC: i16 = 86;
    pub const INVALID_RECORD: i16 = 87;
    pub const UNKNOWN_TOPIC_ID: i16 = 100;
}

#[derive(Debug)]
pub enum FrameError {
    /// The frame cannot be a Kafka request: close the connection.
    Malformed(String),
    /// An API or version we do not serve (and cannot answer in its schema).
    Unsupported { api_key: i16, api_version: i16 },
}

impl std::fmt::Display for FrameError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            FrameError::Malformed(why) => write!(f, "malformed request: {why}"),
            FrameError::Unsupported {
                api_key,
                api_version,
            } => {
                write!(f, "unsupported API key {api_key} version {api_version}")
            }
        }
    }
}

/// The API key and version at the front of every request, read before the
/// header (whose own version depends on them) is decoded.
pub fn peek_api(frame: &[u8]) -> Result<(i16, i16), FrameError> {
    if frame.len() < 8 {
        return Err(FrameError::Malformed(format!(
            "{}-byte request",
            frame.len()
        )));
    }
    Ok((
        i16::from_be_bytes([frame[0], frame[1]]),
        i16::from_be_bytes([frame[2], frame[3]]),
    ))
}

pub fn decode_header(
    api_key: ApiKey,
    api_version: i16,
    body: &mut Bytes,
) -> Result<RequestHeader, FrameError> {
    RequestHeader::decode(body, api_key.request_header_version(api_version))
        .map_err(|error| FrameError::Malformed(format!("request header: {error}")))
}

pub fn decode_body<T: Decodable>(body: &mut Bytes, version: i16) -> Result<T, FrameError> {
    let message = T::decode(body, version)
        .map_err(|error| FrameError::Malformed(format!("request body: {error}")))?;
    // Kafka ignores bytes after a request's last field, and clients rely on
    // it (librdkafka 2.12 pads Metadata v13 with three zero bytes).
    if body.has_remaining() {
        tracing::debug!(
            trailing_bytes = body.remaining(),
            "ignoring bytes after the request body"
        );
    }
    Ok(message)
}

/// A whole response frame: length, header (with the request's correlation id),
/// body.
pub fn encode_response<T: Encodable>(
    api_key: ApiKey,
    api_version: i16,
    correlation_id: i32,
    body: &T,
) -> Result<Bytes, String> {
    let header = ResponseHeader::default().with_correlation_id(correlation_id);
    let header_version = api_key.response_header_version(api_version);
    let size = header
        .compute_size(header_version)
        .map_err(|e| e.to_string())?
        + body.compute_size(api_version).map_err(|e| e.to_string())?;
    let mut frame = BytesMut::with_capacity(4 + size);
    frame.put_i32(size as i32);
    header
        .encode(&mut frame, header_version)
        .map_err(|e| e.to_string())?;
    body.encode(&mut frame, api_version)
        .map_err(|e| e.to_string())?;
    Ok(frame.freeze())
}
