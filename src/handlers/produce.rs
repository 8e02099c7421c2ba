//! Produce (key 0): appends each partition's batch on the shard that owns it.
//! Stored as produced; acks=0 gets no response, as in Kafka.

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::RecordBatchHeader;

use super::RequestContext;
use crate::protocol::{ErrorCode, ResponseError};
use crate::replication::AppendResult;

pub async fn handle(
    ctx: &RequestContext,
    request: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let acks = request.acks;
    let valid_acks = matches!(acks, -1..=1);
    let mut responses = Vec::with_capacity(request.topic_data.len());
    let image = ctx.broker.image();
    for topic in request.topic_data {
        // v13+ names topics by id.
        let name = if version >= 13 {
            image
                .topic_by_id(&topic.topic_id)
                .map(|t| t.name.clone())
                .unwrap_or_default()
        } else {
            topic.name.0.to_string()
        };
        let mut partitions = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            let result = match (valid_acks, data.records) {
                (false, _) => None,
                (true, None) => None,
                (true, Some(_)) if name.is_empty() => {
                    Some(AppendResult::error(ResponseError::UnknownTopicId, None))
                }
                (true, Some(records)) => {
                    let messages = RecordBatchHeader::parse(&records)
                        .map_or(0, |header| header.records_count.max(0) as u64);
                    let bytes = records.len() as u64;
                    let result = ctx.broker.append(&name, data.index, records, acks).await;
                    if result.error.is_none() {
                        ctx.broker.metrics.record_produce(&name, messages, bytes);
                    }
                    Some(result)
                }
            };

            let mut partition = PartitionProduceResponse::default().with_index(data.index);
            partition = match result {
                None => partition
                    .with_error_code(if valid_acks {
                        ResponseError::InvalidRecord.code()
                    } else {
                        ResponseError::InvalidRequiredAcks.code()
                    })
                    .with_base_offset(-1),
                Some(result) => {
                    let mut partition = partition
                        .with_error_code(result.error.error_code())
                        .with_base_offset(result.base_offset);
                    partition = partition.with_log_append_time_ms(result.log_append_time_ms);
                    if version >= 5 {
                        partition = partition.with_log_start_offset(result.log_start_offset);
                    }
                    if version >= 8 {
                        partition = partition
                            .with_error_message(result.error_message.map(StrBytes::from_string));
                    }
                    partition
                }
            };
            partitions.push(partition);
        }
        let response = TopicProduceResponse::default().with_partition_responses(partitions);
        responses.push(if version >= 13 {
            response.with_topic_id(topic.topic_id)
        } else {
            response.with_name(topic.name)
        });
    }
    (acks != 0).then(|| ProduceResponse::default().with_responses(responses))
}
