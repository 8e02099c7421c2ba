//! UpdateMetadata (key 6), from the controller on the inter-broker listener:
//! the live brokers and partition states this broker answers clients with.

use super::RequestContext;
use crate::protocol::inter_broker::{UpdateMetadataRequest, UpdateMetadataResponse};
use crate::protocol::ErrorCode;

pub async fn handle(
    ctx: &RequestContext,
    request: UpdateMetadataRequest,
    _version: i16,
) -> UpdateMetadataResponse {
    let applied = ctx.broker.control.update_metadata(request).await;
    UpdateMetadataResponse::default().with_error_code(applied.error_code())
}
