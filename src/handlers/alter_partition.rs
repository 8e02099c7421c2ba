//! AlterPartition (key 56), to the controller on the inter-broker listener:
//! a leader's ISR change, checked and written by the controller.

use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse};

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: AlterPartitionRequest,
    version: i16,
) -> AlterPartitionResponse {
    ctx.broker.control.alter_partition(request, version).await
}
