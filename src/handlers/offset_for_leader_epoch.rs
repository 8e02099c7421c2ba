//! OffsetForLeaderEpoch (key 23) v0-4: where a leader epoch ends on this
//! leader, for followers and for clients checking, after a leader change,
//! that what they read was not truncated (KIP-101, KIP-320). Kafka 3.9's
//! codecs (`kafka-protocol-legacy`), which still have v0-1.

use kafka_protocol_legacy::messages::offset_for_leader_epoch_response::{
    EpochEndOffset, OffsetForLeaderTopicResult,
};
use kafka_protocol_legacy::messages::{OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse};

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: OffsetForLeaderEpochRequest,
    _version: i16,
) -> OffsetForLeaderEpochResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let found = ctx
                .broker
                .last_offset_for_leader_epoch(
                    topic.topic.as_str(),
                    p.partition,
                    p.current_leader_epoch,
                    p.leader_epoch,
                )
                .await;
            let answer = EpochEndOffset::default().with_partition(p.partition);
            partitions.push(match found {
                Ok((epoch, end_offset)) => {
                    answer.with_leader_epoch(epoch).with_end_offset(end_offset)
                }
                Err(error) => answer
                    .with_error_code(error.code())
                    .with_leader_epoch(-1)
                    .with_end_offset(-1),
            });
        }
        topics.push(
            OffsetForLeaderTopicResult::default()
                .with_topic(topic.topic)
                .with_partitions(partitions),
        );
    }
    OffsetForLeaderEpochResponse::default().with_topics(topics)
}
