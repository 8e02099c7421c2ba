//! Fetch (key 1): stored batches below the high watermark, as they are on disk,
//! with Kafka's long poll (`min_bytes`, `max_wait_ms`) and byte budgets
//! (`max_bytes`, `partition_max_bytes`, the first batch always whole).
//! No incremental fetch sessions are created: session id 0 tells clients to
//! keep sending full requests, which Kafka also answers when its cache is full.

use std::time::{Duration, Instant};

use kafka_protocol::messages::fetch_response::{FetchableTopicResponse, PartitionData};
use kafka_protocol::messages::{FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::protocol::error_code;

/// How often a long-polling fetch looks for new data.
const LONG_POLL_INTERVAL: Duration = Duration::from_millis(1);
/// Kafka's error for an incremental fetch naming a session this broker never made.
const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;

pub async fn handle(ctx: &RequestContext, request: FetchRequest, version: i16) -> FetchResponse {
    if version >= 7 && request.session_id != 0 {
        return FetchResponse::default().with_error_code(FETCH_SESSION_ID_NOT_FOUND);
    }
    let deadline = Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64);
    let image = ctx.broker.image();
    // Resolve names (v13+ sends topic ids) once.
    let topics: Vec<(String, &kafka_protocol::messages::fetch_request::FetchTopic)> = request
        .topics
        .iter()
        .map(|t| {
            let name = if version >= 13 {
                image
                    .topic_by_id(&t.topic_id)
                    .map(|t| t.name.clone())
                    .unwrap_or_default()
            } else {
                t.topic.0.to_string()
            };
            (name, t)
        })
        .collect();
    loop {
        let mut budget = request.max_bytes.max(0) as usize;
        let mut total_bytes = 0usize;
        let mut any_error = false;
        let mut responses = Vec::with_capacity(topics.len());
        for (name, topic) in &topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for p in &topic.partitions {
                let mut data = PartitionData::default().with_partition_index(p.partition);
                if name.is_empty() {
                    data = data
                        .with_error_code(error_code::UNKNOWN_TOPIC_ID)
                        .with_records(Some(Default::default()));
                    any_error = true;
                } else {
                    let max_bytes = (p.partition_max_bytes.max(0) as usize).min(budget);
                    let result = ctx
                        .broker
                        .read(
                            name,
                            p.partition,
                            p.fetch_offset,
                            max_bytes,
                            total_bytes == 0,
                        )
                        .await;
                    let size = result.records.as_ref().map_or(0, |r| r.len());
                    total_bytes += size;
                    budget = budget.saturating_sub(size);
                    any_error |= result.error_code != error_code::NONE;
                    data = data
                        .with_error_code(result.error_code)
                        .with_high_watermark(result.high_watermark)
                        .with_last_stable_offset(result.last_stable_offset)
                        .with_log_start_offset(result.log_start_offset)
                        // Clients read a null record set as a protocol error: send empty.
                        .with_records(Some(result.records.unwrap_or_default()));
                    if version >= 4 {
                        data = data.with_aborted_transactions(Some(Vec::new()));
                    }
                }
                partitions.push(data);
            }
            let mut response = FetchableTopicResponse::default().with_partitions(partitions);
            response = if version >= 13 {
                response.with_topic_id(topic.topic_id)
            } else {
                response.with_topic(TopicName(StrBytes::from_string(name.clone())))
            };
            responses.push(response);
        }
        let satisfied =
            total_bytes >= request.min_bytes.max(0) as usize || any_error || topics.is_empty();
        if satisfied || Instant::now() >= deadline {
            return FetchResponse::default().with_responses(responses);
        }
        glommio::timer::sleep(
            LONG_POLL_INTERVAL.min(deadline.saturating_duration_since(Instant::now())),
        )
        .await;
    }
}
