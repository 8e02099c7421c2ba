//! LeaderAndIsr (key 4), from the controller on the inter-broker listener:
//! the partitions this broker leads or follows, answered once every shard
//! serves them.

use std::collections::BTreeMap;

use super::RequestContext;
use crate::protocol::inter_broker::{
    LeaderAndIsrPartitionError, LeaderAndIsrRequest, LeaderAndIsrResponse, LeaderAndIsrTopicError,
    StrBytes, TopicName,
};
use crate::protocol::ErrorCode;

/// From v5 the answers are grouped by topic id.
const GROUPED_BY_TOPIC_FROM: i16 = 5;

pub async fn handle(
    ctx: &RequestContext,
    request: LeaderAndIsrRequest,
    version: i16,
) -> LeaderAndIsrResponse {
    let topic_ids: BTreeMap<String, uuid::Uuid> = request
        .topic_states
        .iter()
        .map(|topic| (topic.topic_name.to_string(), topic.topic_id))
        .collect();
    let answers = match ctx.broker.control.leader_and_isr(request).await {
        Ok(answers) => answers,
        Err(error) => return LeaderAndIsrResponse::default().with_error_code(error.code()),
    };
    let partition_error = |tp: &shards::log::TopicPartition, code: i16| {
        LeaderAndIsrPartitionError::default()
            .with_topic_name(TopicName(StrBytes::from_string(tp.topic.clone())))
            .with_partition_index(tp.partition)
            .with_error_code(code)
    };
    if version < GROUPED_BY_TOPIC_FROM {
        let errors = answers
            .iter()
            .map(|(tp, answer)| partition_error(tp, answer.error_code()))
            .collect();
        return LeaderAndIsrResponse::default().with_partition_errors(errors);
    }
    let mut topics: Vec<LeaderAndIsrTopicError> = Vec::new();
    for (tp, answer) in &answers {
        let topic_id = topic_ids.get(&tp.topic).copied().unwrap_or_default();
        if topics.last().is_none_or(|last| last.topic_id != topic_id) {
            topics.push(LeaderAndIsrTopicError::default().with_topic_id(topic_id));
        }
        let topic = topics.last_mut().expect("pushed");
        topic
            .partition_errors
            .push(partition_error(tp, answer.error_code()));
    }
    LeaderAndIsrResponse::default().with_topics(topics)
}
