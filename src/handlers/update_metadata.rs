//! UpdateMetadata (key 6), from the controller on the inter-broker listener:
//! the live brokers and partition states this broker answers clients with.

use bytes::Bytes;

use super::RequestContext;
use crate::network::Outcome;
use crate::protocol::inter_broker::{
    decode_update_metadata, encode_update_metadata_response, UpdateMetadataResponse,
};
use crate::protocol::{ErrorCode, FrameError};

pub async fn serve(
    ctx: &RequestContext,
    mut body: Bytes,
    version: i16,
) -> Result<Outcome, FrameError> {
    let request = decode_update_metadata(&mut body, version).map_err(FrameError::Malformed)?;
    let applied = ctx.broker.control.update_metadata(request).await;
    let code = applied.error_code();
    if code != 0 {
        ctx.broker
            .metrics
            .record_error(crate::protocol::inter_broker::UPDATE_METADATA, code);
    }
    let response = UpdateMetadataResponse::default().with_error_code(code);
    encode_update_metadata_response(version, ctx.header.correlation_id, &response)
        .map(Outcome::Respond)
        .map_err(FrameError::Malformed)
}
