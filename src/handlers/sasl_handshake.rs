//! SaslHandshake (key 17): no SASL mechanism is enabled on this listener.

use kafka_protocol::messages::{SaslHandshakeRequest, SaslHandshakeResponse};

use super::RequestContext;
use crate::protocol::ResponseError;

pub async fn handle(
    _ctx: &RequestContext,
    _request: SaslHandshakeRequest,
    _version: i16,
) -> SaslHandshakeResponse {
    SaslHandshakeResponse::default()
        .with_error_code(ResponseError::UnsupportedSaslMechanism.code())
        .with_mechanisms(Vec::new())
}
