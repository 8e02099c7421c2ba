//! OffsetDelete (key 47): deletes a group's committed offsets of topics its
//! members do not subscribe to.

use kafka_protocol::messages::offset_delete_response::{
    OffsetDeleteResponsePartition, OffsetDeleteResponseTopic,
};
use kafka_protocol::messages::{OffsetDeleteRequest, OffsetDeleteResponse};

use super::RequestContext;
use crate::protocol::{ErrorCode, ResponseError};

pub async fn handle(
    ctx: &RequestContext,
    request: OffsetDeleteRequest,
    _version: i16,
) -> OffsetDeleteResponse {
    let image = ctx.broker.image();
    let known = |topic: &str, partition: i32| image.partition(topic, partition).is_some();
    let partitions: Vec<(String, i32)> = request
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (t.name.to_string(), p.partition_index))
        })
        .filter(|(topic, partition)| known(topic, *partition))
        .collect();
    let group_id = request.group_id.to_string();
    let deleted = ctx
        .broker
        .on_group_coordinator(&group_id, {
            let group_id = group_id.clone();
            move |groups, partition| async move {
                groups
                    .delete_offsets(partition, &group_id, partitions)
                    .await
            }
        })
        .await
        .and_then(|deleted| deleted);
    let mut codes = match deleted {
        Ok(codes) => codes.into_iter(),
        Err(error) => return OffsetDeleteResponse::default().with_error_code(error.code()),
    };
    let topics = request
        .topics
        .into_iter()
        .map(|topic| {
            let partitions = topic
                .partitions
                .iter()
                .map(|p| {
                    let code = if known(&topic.name, p.partition_index) {
                        codes
                            .next()
                            .map_or(ResponseError::UnknownServerError.code(), |c| c.error_code())
                    } else {
                        ResponseError::UnknownTopicOrPartition.code()
                    };
                    OffsetDeleteResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetDeleteResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetDeleteResponse::default().with_topics(topics)
}
