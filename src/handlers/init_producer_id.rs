//! InitProducerId (key 22): producer ids for idempotent producers.
//! Transactions are not served yet.

use kafka_protocol::messages::{InitProducerIdRequest, InitProducerIdResponse, ProducerId};

use super::RequestContext;
use crate::protocol::ResponseError;

pub async fn handle(
    ctx: &RequestContext,
    request: InitProducerIdRequest,
    _version: i16,
) -> InitProducerIdResponse {
    let response = InitProducerIdResponse::default()
        .with_producer_id(ProducerId(-1))
        .with_producer_epoch(-1);
    if request.transactional_id.is_some() {
        return response.with_error_code(ResponseError::InvalidRequest.code());
    }
    // Without a transactional id, Kafka ignores any id and epoch the producer
    // names (KIP-360 bumps need a transaction coordinator) and hands out a new id.
    match ctx.broker.allocate_producer_id().await {
        Ok(id) => response
            .with_error_code(0)
            .with_producer_id(ProducerId(id))
            .with_producer_epoch(0),
        Err(error) => response.with_error_code(error.code()),
    }
}
