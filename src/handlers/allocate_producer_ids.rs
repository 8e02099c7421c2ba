//! AllocateProducerIds (key 67), to the controller on the inter-broker
//! listener: a block of producer ids for the asking broker.

use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, ProducerId,
};

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: AllocateProducerIdsRequest,
    _version: i16,
) -> AllocateProducerIdsResponse {
    let allocated = ctx
        .broker
        .control
        .allocate_producer_ids(request.broker_id.0, request.broker_epoch)
        .await;
    match allocated {
        Ok((start, len)) => AllocateProducerIdsResponse::default()
            .with_producer_id_start(ProducerId(start))
            .with_producer_id_len(len),
        Err(error) => AllocateProducerIdsResponse::default()
            .with_error_code(error.code())
            .with_producer_id_start(ProducerId(-1)),
    }
}
