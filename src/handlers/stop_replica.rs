//! StopReplica (key 5), from the controller on the inter-broker listener:
//! replicas this broker no longer holds, deleted with `delete_partition`,
//! answered once every shard has let them go.

use super::RequestContext;
use crate::protocol::inter_broker::{
    StopReplicaPartitionError, StopReplicaRequest, StopReplicaResponse, StrBytes, TopicName,
};
use crate::protocol::ErrorCode;

pub async fn handle(
    ctx: &RequestContext,
    request: StopReplicaRequest,
    _version: i16,
) -> StopReplicaResponse {
    match ctx.broker.control.stop_replica(request).await {
        Ok(answers) => StopReplicaResponse::default().with_partition_errors(
            answers
                .iter()
                .map(|(tp, answer)| {
                    StopReplicaPartitionError::default()
                        .with_topic_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                        .with_partition_index(tp.partition)
                        .with_error_code(answer.error_code())
                })
                .collect(),
        ),
        Err(error) => StopReplicaResponse::default().with_error_code(error.code()),
    }
}
