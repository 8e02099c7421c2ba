//! CreateTopics (key 19): through the controller, with configs and validate_only.

use kafka_protocol::messages::create_topics_response::CreatableTopicResult;
use kafka_protocol::messages::{CreateTopicsRequest, CreateTopicsResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::controller::NewTopic;

pub async fn handle(
    ctx: &RequestContext,
    request: CreateTopicsRequest,
    version: i16,
) -> CreateTopicsResponse {
    let topics: Vec<NewTopic> = request
        .topics
        .iter()
        .map(|t| {
            let mut assignments: Vec<(i32, Vec<i32>)> = t
                .assignments
                .iter()
                .map(|a| {
                    (
                        a.partition_index,
                        a.broker_ids.iter().map(|b| b.0).collect(),
                    )
                })
                .collect();
            assignments.sort_by_key(|(p, _)| *p);
            NewTopic {
                name: t.name.0.to_string(),
                num_partitions: t.num_partitions,
                replication_factor: t.replication_factor,
                assignments: assignments
                    .into_iter()
                    .map(|(_, replicas)| replicas)
                    .collect(),
                configs: t
                    .configs
                    .iter()
                    .map(|c| (c.name.to_string(), c.value.as_ref().map(|v| v.to_string())))
                    .collect(),
            }
        })
        .collect();
    let results = ctx
        .broker
        .control
        .create_topics(topics, request.validate_only, request.timeout_ms)
        .await;
    let image = ctx.broker.image();
    let topics = request
        .topics
        .into_iter()
        .zip(results)
        .map(|(topic, result)| {
            let mut response = CreatableTopicResult::default().with_name(topic.name.clone());
            match result {
                Ok((partitions, replication_factor)) => {
                    response = response.with_error_code(0);
                    if version >= 5 {
                        response = response
                            .with_num_partitions(partitions)
                            .with_replication_factor(replication_factor);
                    }
                    if version >= 7 {
                        if let Some(created) = image.topic(&topic.name.0) {
                            response = response.with_topic_id(created.id);
                        }
                    }
                }
                Err(error) => {
                    response = response.with_error_code(error.code());
                    if version >= 1 {
                        response =
                            response.with_error_message(Some(StrBytes::from_string(error.message)));
                    }
                    if version >= 5 {
                        response = response.with_num_partitions(-1).with_replication_factor(-1);
                    }
                }
            }
            response
        })
        .collect();
    CreateTopicsResponse::default().with_topics(topics)
}
