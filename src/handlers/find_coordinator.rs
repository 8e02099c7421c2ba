//! FindCoordinator (key 10): where a group's coordinator is. The first
//! request for a group creates `__consumer_offsets`, as Kafka does.

use kafka_protocol::messages::find_coordinator_response::Coordinator;
use kafka_protocol::messages::{BrokerId, FindCoordinatorRequest, FindCoordinatorResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::controller::NewTopic;
use crate::coordinator::group::{partition_for, GROUP_METADATA_TOPIC_NAME};
use crate::protocol::{ApiError, ResponseError};

const KEY_TYPE_GROUP: i8 = 0;

pub async fn handle(
    ctx: &RequestContext,
    request: FindCoordinatorRequest,
    version: i16,
) -> FindCoordinatorResponse {
    let keys = if version >= 4 {
        request.coordinator_keys.clone()
    } else {
        vec![request.key.clone()]
    };
    let mut coordinators = Vec::with_capacity(keys.len());
    for key in keys {
        let found = if request.key_type == KEY_TYPE_GROUP {
            find_group_coordinator(ctx, &key).await
        } else {
            Err(ApiError::new(
                ResponseError::InvalidRequest,
                "only group coordinators exist here (no transactions, no share groups)",
            ))
        };
        let coordinator = Coordinator::default().with_key(key);
        coordinators.push(match found {
            Ok((node_id, host, port)) => coordinator
                .with_node_id(BrokerId(node_id))
                .with_host(StrBytes::from_string(host))
                .with_port(port),
            Err(error) => coordinator
                .with_node_id(BrokerId(-1))
                .with_port(-1)
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(error.message))),
        });
    }
    if version >= 4 {
        return FindCoordinatorResponse::default().with_coordinators(coordinators);
    }
    let one = coordinators.pop().expect("one key before v4");
    FindCoordinatorResponse::default()
        .with_error_code(one.error_code)
        .with_error_message(if version >= 1 {
            one.error_message
        } else {
            None
        })
        .with_node_id(one.node_id)
        .with_host(one.host)
        .with_port(one.port)
}

async fn find_group_coordinator(
    ctx: &RequestContext,
    group_id: &str,
) -> Result<(i32, String, i32), ApiError> {
    let config = &ctx.broker.config;
    if ctx
        .broker
        .image()
        .topic(GROUP_METADATA_TOPIC_NAME)
        .is_none()
    {
        let created = ctx
            .broker
            .control
            .auto_create_topics(vec![NewTopic {
                name: GROUP_METADATA_TOPIC_NAME.to_owned(),
                num_partitions: config.offsets_topic_num_partitions,
                replication_factor: config.offsets_topic_replication_factor,
                assignments: Vec::new(),
                configs: vec![
                    ("cleanup.policy".to_owned(), Some("compact".to_owned())),
                    (
                        "segment.bytes".to_owned(),
                        Some(config.offsets_topic_segment_bytes.to_string()),
                    ),
                ],
            }])
            .await;
        match created.into_iter().next() {
            Some(Ok(_)) => {}
            Some(Err(error)) if error.error == ResponseError::TopicAlreadyExists => {}
            Some(Err(error)) => {
                tracing::warn!(error = %error.message, "cannot create __consumer_offsets");
                return Err(ApiError::new(
                ResponseError::CoordinatorNotAvailable,
                    "__consumer_offsets cannot be created (offsets.topic.replication.factor above the live brokers?)",
                ));
            }
            None => {
                return Err(ApiError::new(
                    ResponseError::CoordinatorNotAvailable,
                    "no answer",
                ))
            }
        }
    }
    let image = ctx.broker.image();
    let topic = image.topic(GROUP_METADATA_TOPIC_NAME).ok_or_else(|| {
        ApiError::new(
            ResponseError::CoordinatorNotAvailable,
            "__consumer_offsets is not ready",
        )
    })?;
    let partition = partition_for(group_id, topic.partitions.len() as i32);
    let leader = topic.partitions[partition as usize].leader;
    let endpoint = image
        .brokers
        .get(&leader)
        .and_then(|broker| broker.endpoint(&ctx.listener_name))
        .ok_or_else(|| {
            ApiError::new(
                ResponseError::CoordinatorNotAvailable,
                "the coordinator has no leader on this listener",
            )
        })?;
    Ok((leader, endpoint.host.clone(), i32::from(endpoint.port)))
}
