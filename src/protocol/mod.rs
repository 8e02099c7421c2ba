//! Kafka's wire protocol at the edge: frames, request headers, response frames,
//! and Kafka's error codes. Message bodies are the kafka-protocol crate's, but
//! for Fetch responses, framed here around file ranges (fetch_response.rs).

mod error;
mod fetch_response;
pub mod inter_broker;

pub use error::{ApiError, ErrorCode, ResponseError};
pub use fetch_response::{encode_fetch_response, FramePart, Records};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::{ApiKey, RequestHeader, ResponseHeader};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

use crate::network::broker_connection::BrokerConnection;

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

pub fn decode_header(header_version: i16, body: &mut Bytes) -> Result<RequestHeader, FrameError> {
    RequestHeader::decode(body, header_version)
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

/// Sends a request on `connection` (a broker's own request to another, such
/// as AllocateProducerIds to the controller) and reads its answer.
pub async fn call<Request: Encodable, Response: Decodable>(
    connection: &mut BrokerConnection,
    api_key: ApiKey,
    api_version: i16,
    client_id: &str,
    request: &Request,
) -> Result<Response, String> {
    let correlation_id = connection.next_correlation_id();
    let header = RequestHeader::default()
        .with_request_api_key(api_key as i16)
        .with_request_api_version(api_version)
        .with_correlation_id(correlation_id)
        .with_client_id(Some(StrBytes::from_string(client_id.to_owned())));
    let header_version = api_key.request_header_version(api_version);
    let size = header
        .compute_size(header_version)
        .map_err(|e| e.to_string())?
        + request
            .compute_size(api_version)
            .map_err(|e| e.to_string())?;
    let mut frame = BytesMut::with_capacity(4 + size);
    frame.put_i32(size as i32);
    header
        .encode(&mut frame, header_version)
        .map_err(|e| e.to_string())?;
    request
        .encode(&mut frame, api_version)
        .map_err(|e| e.to_string())?;
    let mut answer = connection.exchange(&frame).await?;
    let response_header =
        ResponseHeader::decode(&mut answer, api_key.response_header_version(api_version))
            .map_err(|e| format!("{api_key:?} response header: {e}"))?;
    if response_header.correlation_id != correlation_id {
        return Err(format!(
            "{api_key:?} response answers {}, expected {correlation_id}",
            response_header.correlation_id
        ));
    }
    Response::decode(&mut answer, api_version).map_err(|e| format!("{api_key:?} response: {e}"))
}
