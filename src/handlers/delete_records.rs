//! DeleteRecords (key 21): moves each partition's log start offset (its low
//! watermark) up to the requested offset, or to the high watermark for -1.
//! Reads below it answer OFFSET_OUT_OF_RANGE at once; the segments wholly
//! below it are deleted by the next retention pass.

use kafka_protocol::messages::delete_records_response::{
    DeleteRecordsPartitionResult, DeleteRecordsTopicResult,
};
use kafka_protocol::messages::{DeleteRecordsRequest, DeleteRecordsResponse};

use super::RequestContext;
use crate::protocol::ErrorCode;

pub async fn handle(
    ctx: &RequestContext,
    request: DeleteRecordsRequest,
    _version: i16,
) -> DeleteRecordsResponse {
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let deleted = ctx
                .broker
                .delete_records(&name, p.partition_index, p.offset)
                .await;
            partitions.push(
                DeleteRecordsPartitionResult::default()
                    .with_partition_index(p.partition_index)
                    .with_low_watermark(*deleted.as_ref().unwrap_or(&-1))
                    .with_error_code(deleted.error_code()),
            );
        }
        topics.push(
            DeleteRecordsTopicResult::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    DeleteRecordsResponse::default().with_topics(topics)
}
