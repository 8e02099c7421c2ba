//! Produce (key 0): appends each partition's batch on the shard that owns it,
//! all partitions at once, one mesh hop per shard. Stored as produced; acks=all answers once the ISR
//! has every batch (or at the request's timeout), acks=1 after the leader's
//! append, acks=0 never, as in Kafka.

use std::time::{Duration, Instant};

use kafka_protocol::messages::produce_response::{PartitionProduceResponse, TopicProduceResponse};
use kafka_protocol::messages::{ProduceRequest, ProduceResponse};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::RecordBatchHeader;

use super::RequestContext;
use crate::coordinator::group::GROUP_METADATA_TOPIC_NAME;
use crate::protocol::{ErrorCode, ResponseError};
use crate::replication::{AppendResult, AppendTiming};

pub async fn handle(
    ctx: &RequestContext,
    request: ProduceRequest,
    version: i16,
) -> Option<ProduceResponse> {
    let acks = request.acks;
    let valid_acks = matches!(acks, -1..=1);
    // acks=all waits at most the request's timeout for the ISR.
    let deadline = Instant::now() + Duration::from_millis(request.timeout_ms.max(0) as u64);
    let image = ctx.broker.image();
    let mut names = Vec::with_capacity(request.topic_data.len());
    let mut topics = Vec::with_capacity(request.topic_data.len());
    // Each partition's batch, with its topic's place in `names`.
    let mut batches = Vec::new();
    for topic in request.topic_data {
        // v13+ names topics by id.
        names.push(if version >= 13 {
            image
                .topic_by_id(&topic.topic_id)
                .map(|t| t.name.clone())
                .unwrap_or_default()
        } else {
            topic.name.0.to_string()
        });
        let mut indexes = Vec::with_capacity(topic.partition_data.len());
        for data in topic.partition_data {
            indexes.push(data.index);
            batches.push((names.len() - 1, data.index, data.records));
        }
        topics.push((topic.name, topic.topic_id, indexes));
    }
    // Every partition is appended (and waited on) at once, each on its
    // shard. None: the request itself is refused for it.
    let mut results: Vec<Option<AppendResult>> = Vec::with_capacity(batches.len());
    let mut appends = Vec::new();
    // (slot in `results`, topic in `names`, messages, bytes) of each batch appended.
    let mut counted = Vec::new();
    for (topic, index, records) in batches {
        let name = names[topic].as_str();
        let result = match (valid_acks, records) {
            (false, _) | (true, None) => None,
            (true, Some(_)) if name.is_empty() => {
                Some(AppendResult::error(ResponseError::UnknownTopicId, None))
            }
            (true, Some(_)) if name == GROUP_METADATA_TOPIC_NAME => {
                // Only the group coordinator writes there, as in Kafka.
                Some(AppendResult::error(
                    ResponseError::InvalidTopicException,
                    Some("cannot append to an internal topic".into()),
                ))
            }
            (true, Some(records)) => {
                let messages = RecordBatchHeader::parse(&records)
                    .map_or(0, |header| header.records_count.max(0) as u64);
                counted.push((results.len(), topic, messages, records.len() as u64));
                appends.push((name.to_owned(), index, records));
                None
            }
        };
        results.push(result);
    }
    let appended = ctx.broker.append_all(appends, acks, deadline).await;
    for ((slot, topic, messages, bytes), result) in counted.into_iter().zip(appended) {
        if result.error.is_none() {
            ctx.broker
                .metrics
                .record_produce(&names[topic], messages, bytes);
        }
        results[slot] = Some(result);
    }
    // The request's local part ends with its last append; acks=all then
    // waits on the ISR (RemoteTimeMs). Once every partition is done, the
    // response is ready: a wait for the shard after that is its response's
    // queueing (ResponseQueueTimeMs), not the ISR's.
    let slowest = results
        .iter()
        .flatten()
        .filter_map(|r| r.timing)
        .reduce(AppendTiming::max);
    if let Some(slowest) = slowest {
        if let Some(appended) = slowest.appended_at {
            ctx.times.local_complete_at(appended);
        }
        ctx.times.set_slowest_partition(slowest);
    }
    let mut results = results.into_iter();
    let mut responses = Vec::with_capacity(topics.len());
    for (name, topic_id, indexes) in topics {
        let mut partitions = Vec::with_capacity(indexes.len());
        for index in indexes {
            let result = results.next().expect("one result per partition");
            let mut partition = PartitionProduceResponse::default().with_index(index);
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
            response.with_topic_id(topic_id)
        } else {
            response.with_name(name)
        });
    }
    (acks != 0).then(|| ProduceResponse::default().with_responses(responses))
}
