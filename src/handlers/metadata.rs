//! Metadata (key 3): brokers, controller and topics, creating requested topics
//! when `auto.create.topics.enable` allows.

use kafka_protocol::messages::metadata_response::{
    MetadataResponseBroker, MetadataResponsePartition, MetadataResponseTopic,
};
use kafka_protocol::messages::{BrokerId, MetadataRequest, MetadataResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::controller::{validate_topic_name, NewTopic};
use crate::metadata::image::{MetadataImage, TopicImage};
use crate::protocol::ResponseError;

/// Kafka's internal topics.
const INTERNAL_TOPICS: &[&str] = &["__consumer_offsets", "__transaction_state"];

pub async fn handle(
    ctx: &RequestContext,
    request: MetadataRequest,
    version: i16,
) -> MetadataResponse {
    let broker = &ctx.broker;
    let mut image = broker.image();
    // v0: an empty list means every topic; v1+: null means every topic.
    let requested: Option<Vec<String>> = match request.topics {
        None => None,
        Some(topics) if version == 0 && topics.is_empty() => None,
        Some(topics) => Some(
            topics
                .into_iter()
                .map(|t| match t.name {
                    Some(name) => name.0.to_string(),
                    None => image
                        .topic_by_id(&t.topic_id)
                        .map(|t| t.name.clone())
                        .unwrap_or_default(),
                })
                .collect(),
        ),
    };
    tracing::debug!(
        ?requested,
        allow = request.allow_auto_topic_creation,
        "metadata"
    );
    // Created by this request but not yet told by the controller.
    let mut created = Vec::new();
    if let Some(names) = &requested {
        let allowed = version < 4 || request.allow_auto_topic_creation;
        let missing: Vec<NewTopic> = names
            .iter()
            .filter(|name| image.topic(name).is_none() && validate_topic_name(name).is_ok())
            .map(|name| NewTopic {
                name: name.clone(),
                num_partitions: -1,
                replication_factor: -1,
                ..NewTopic::default()
            })
            .collect();
        if allowed && broker.config.auto_create_topics_enable && !missing.is_empty() {
            let names: Vec<String> = missing.iter().map(|t| t.name.clone()).collect();
            let results = broker.control.auto_create_topics(missing).await;
            for (name, result) in names.into_iter().zip(results) {
                match result {
                    Ok(_) => created.push(name),
                    // Kafka's answer too: the topic exists, and this broker
                    // (just started, say) has not been told of it yet.
                    Err(error) if error.error == ResponseError::TopicAlreadyExists => {
                        created.push(name)
                    }
                    Err(error) => tracing::warn!(?error, "automatic topic creation failed"),
                }
            }
            image = broker.image();
        }
    }
    let topics = match requested {
        None => image
            .topics
            .values()
            .map(|t| topic_response(&image, t, &ctx.listener_name, version))
            .collect(),
        Some(names) => names
            .iter()
            .map(|name| match image.topic(name) {
                Some(topic) => topic_response(&image, topic, &ctx.listener_name, version),
                None => {
                    let code = if created.contains(name) {
                        // Kafka's answer for a topic it is creating.
                        ResponseError::LeaderNotAvailable.code()
                    } else if validate_topic_name(name).is_ok() {
                        ResponseError::UnknownTopicOrPartition.code()
                    } else {
                        ResponseError::InvalidTopicException.code()
                    };
                    MetadataResponseTopic::default()
                        .with_error_code(code)
                        .with_name(Some(TopicName(StrBytes::from_string(name.clone()))))
                }
            })
            .collect(),
    };
    let brokers = image
        .broker_endpoints(&ctx.listener_name)
        .map(|(broker, endpoint)| {
            MetadataResponseBroker::default()
                .with_node_id(BrokerId(broker.id))
                .with_host(StrBytes::from_string(endpoint.host.clone()))
                .with_port(i32::from(endpoint.port))
                .with_rack(broker.rack.clone().map(StrBytes::from_string))
        })
        .collect();
    let mut response = MetadataResponse::default()
        .with_brokers(brokers)
        .with_topics(topics);
    if version >= 1 {
        response = response.with_controller_id(BrokerId(image.controller_id));
    }
    if version >= 2 {
        response = response.with_cluster_id(Some(StrBytes::from_string(image.cluster_id.clone())));
    }
    response
}

fn topic_response(
    image: &MetadataImage,
    topic: &TopicImage,
    listener_name: &str,
    version: i16,
) -> MetadataResponseTopic {
    let partitions = topic
        .partitions
        .iter()
        .enumerate()
        .map(|(index, p)| {
            // Kafka's answer for a leader that is not a live broker on this
            // listener (killed, and not yet replaced by the controller): no
            // leader, LEADER_NOT_AVAILABLE, so a client waits for the
            // election instead of a broker the same answer does not list.
            let leader_listed = image
                .brokers
                .get(&p.leader)
                .is_some_and(|broker| broker.endpoint(listener_name).is_some());
            let (error_code, leader) = if leader_listed {
                (0, p.leader)
            } else {
                (ResponseError::LeaderNotAvailable.code(), -1)
            };
            let mut partition = MetadataResponsePartition::default()
                .with_error_code(error_code)
                .with_partition_index(index as i32)
                .with_leader_id(BrokerId(leader))
                .with_replica_nodes(p.replicas.iter().map(|r| BrokerId(*r)).collect())
                .with_isr_nodes(p.isr.iter().map(|r| BrokerId(*r)).collect());
            if version >= 7 {
                partition = partition.with_leader_epoch(p.leader_epoch);
            }
            partition
        })
        .collect();
    let mut response = MetadataResponseTopic::default()
        .with_error_code(0)
        .with_name(Some(TopicName(StrBytes::from_string(topic.name.clone()))))
        .with_partitions(partitions);
    if version >= 10 {
        response = response.with_topic_id(topic.id);
    }
    if version >= 1 {
        response = response.with_is_internal(INTERNAL_TOPICS.contains(&topic.name.as_str()));
    }
    response
}
