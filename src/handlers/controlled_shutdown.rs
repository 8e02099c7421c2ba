//! ControlledShutdown (key 7), to the controller on the inter-broker
//! listener: a stopping broker's leaderships move to the rest of their ISRs
//! before the answer, which lists the replicated partitions it still leads.

use super::RequestContext;
use crate::protocol::inter_broker::{
    ControlledShutdownRequest, ControlledShutdownResponse, RemainingPartition, StrBytes, TopicName,
};

pub async fn handle(
    ctx: &RequestContext,
    request: ControlledShutdownRequest,
    _version: i16,
) -> ControlledShutdownResponse {
    let moved = ctx
        .broker
        .control
        .controlled_shutdown(request.broker_id.0, request.broker_epoch)
        .await;
    match moved {
        Ok(still_led) => ControlledShutdownResponse::default().with_remaining_partitions(
            still_led
                .into_iter()
                .map(|(topic, partition)| {
                    RemainingPartition::default()
                        .with_topic_name(TopicName(StrBytes::from_string(topic)))
                        .with_partition_index(partition)
                })
                .collect(),
        ),
        Err(error) => ControlledShutdownResponse::default().with_error_code(error.code()),
    }
}
