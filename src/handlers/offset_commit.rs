//! OffsetCommit (key 8): committed offsets become records in
//! `__consumer_offsets`, fenced by the group's generation.

use kafka_protocol::messages::offset_commit_response::{
    OffsetCommitResponsePartition, OffsetCommitResponseTopic,
};
use kafka_protocol::messages::{OffsetCommitRequest, OffsetCommitResponse};

use super::RequestContext;
use crate::coordinator::group::{CommitParams, OffsetToCommit};
use crate::protocol::{ErrorCode, ResponseError};

pub async fn handle(
    ctx: &RequestContext,
    request: OffsetCommitRequest,
    version: i16,
) -> OffsetCommitResponse {
    let image = ctx.broker.image();
    let known = |topic: &str, partition: i32| image.partition(topic, partition).is_some();
    // Offsets of unknown partitions are refused here; the rest go to the group.
    let mut offsets = Vec::new();
    for topic in &request.topics {
        for p in &topic.partitions {
            if known(&topic.name, p.partition_index) {
                offsets.push(OffsetToCommit {
                    topic: topic.name.to_string(),
                    partition: p.partition_index,
                    offset: p.committed_offset,
                    leader_epoch: if version >= 6 {
                        p.committed_leader_epoch
                    } else {
                        -1
                    },
                    metadata: p.committed_metadata.as_ref().map(|m| m.to_string()),
                });
            }
        }
    }
    let count = offsets.len();
    let params = CommitParams {
        generation_id: request.generation_id_or_member_epoch,
        member_id: request.member_id.to_string(),
        group_instance_id: request.group_instance_id.as_ref().map(|i| i.to_string()),
        retention_time_ms: if (2..=4).contains(&version) {
            request.retention_time_ms
        } else {
            -1
        },
        offsets,
    };
    let group_id = request.group_id.to_string();
    let mut codes = ctx
        .broker
        .on_group_coordinator(&group_id, {
            let group_id = group_id.clone();
            move |groups, partition| async move {
                groups.commit_offsets(partition, &group_id, params).await
            }
        })
        .await
        .unwrap_or_else(|code| vec![Err(code); count])
        .into_iter();
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
                    OffsetCommitResponsePartition::default()
                        .with_partition_index(p.partition_index)
                        .with_error_code(code)
                })
                .collect();
            OffsetCommitResponseTopic::default()
                .with_name(topic.name)
                .with_partitions(partitions)
        })
        .collect();
    OffsetCommitResponse::default().with_topics(topics)
}
