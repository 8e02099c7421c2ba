//! A new topic as Kafka's AdminZkClient creates it: its replica assignment
//! (explicit, or Kafka's algorithm over the live brokers), checked configs,
//! then `/config/topics/<t>` and `/brokers/topics/<t>`. The controller does
//! this for CreateTopics; any other broker for auto-creation, leaving the
//! partition states to the controller's watch on `/brokers/topics`.

use std::collections::BTreeMap;

use shards::log::LogConfig;
use uuid::Uuid;

use super::replica_assignment::{
    assign_replicas_to_brokers, check_assignments, check_partition_count, validate_topic_name,
    BrokerMetadata,
};
use super::topic_config::log_config_with;
use super::{random_start, NewTopic, TopicDefaults};
use crate::metadata::image::Broker;
use crate::metadata::kafka_zk_client::KafkaZkClient;
use crate::metadata::zk_client::{ZkClient, ZkError};
use crate::metadata::znodes::TopicZNode;
use crate::protocol::{ApiError, ResponseError};

/// What a new topic will be, checked but not written.
pub struct TopicPlan {
    pub assignment: TopicZNode,
    pub overrides: BTreeMap<String, String>,
    pub log_config: LogConfig,
}

impl TopicPlan {
    /// Its partition count and replication factor.
    pub fn counts(&self) -> (i32, i16) {
        let partitions = &self.assignment.partitions;
        (partitions.len() as i32, partitions[0].len() as i16)
    }
}

/// Checks `topic` and assigns its replicas over `brokers` (the live ones).
pub fn plan_topic(
    topic: &NewTopic,
    defaults: &TopicDefaults,
    brokers: &[BrokerMetadata],
) -> Result<TopicPlan, ApiError> {
    validate_topic_name(&topic.name)?;
    let partitions: Vec<Vec<i32>> = if topic.assignments.is_empty() {
        let partitions = match topic.num_partitions {
            -1 => defaults.num_partitions,
            partitions => partitions,
        };
        let replication_factor = match topic.replication_factor {
            -1 => defaults.default_replication_factor,
            factor => factor,
        };
        check_partition_count(partitions)?;
        assign_replicas_to_brokers(
            brokers,
            partitions,
            replication_factor,
            random_start(brokers.len().max(1)),
            0,
        )?
    } else {
        if topic.num_partitions != -1 || topic.replication_factor != -1 {
            return Err(ApiError::new(
                ResponseError::InvalidRequest,
                "both replica assignment and partitions/replication factor were given",
            ));
        }
        check_partition_count(topic.assignments.len().try_into().unwrap_or(i32::MAX))?;
        let live: Vec<i32> = brokers.iter().map(|broker| broker.id).collect();
        check_assignments(&topic.assignments, &live, None)?;
        topic.assignments.clone()
    };
    let overrides: BTreeMap<String, String> = topic
        .configs
        .iter()
        .filter_map(|(key, value)| Some((key.clone(), value.clone()?)))
        .collect();
    let log_config = log_config_with(&defaults.log_config, &overrides)?;
    Ok(TopicPlan {
        assignment: TopicZNode {
            topic_id: Uuid::new_v4(),
            partitions,
            adding_replicas: BTreeMap::new(),
            removing_replicas: BTreeMap::new(),
        },
        overrides,
        log_config,
    })
}

/// Writes a planned topic's config, then its assignment.
pub async fn write_topic<Z: ZkClient>(
    zk: &KafkaZkClient<Z>,
    name: &str,
    plan: &TopicPlan,
) -> Result<(), ApiError> {
    match zk
        .create_topic(name, &plan.assignment, &plan.overrides)
        .await
    {
        Err(ZkError::NodeExists(_)) => Err(ApiError::new(
            ResponseError::TopicAlreadyExists,
            format!("topic '{name}' already exists"),
        )),
        created => Ok(created?),
    }
}

/// Kafka's AdminZkClient.createTopic on a broker that is not the controller
/// (auto-creation, `__consumer_offsets`): the topics' znodes over `brokers`,
/// this broker's view of the live ones. The controller, watching
/// `/brokers/topics`, writes their partition states and tells the replicas.
pub async fn create_topics_in_zk<Z: ZkClient>(
    zk: &KafkaZkClient<Z>,
    defaults: &TopicDefaults,
    brokers: &[Broker],
    topics: &[NewTopic],
) -> Vec<Result<(i32, i16), ApiError>> {
    let brokers: Vec<BrokerMetadata> = brokers
        .iter()
        .map(|broker| BrokerMetadata {
            id: broker.id,
            rack: broker.rack.clone(),
        })
        .collect();
    let mut results = Vec::with_capacity(topics.len());
    for topic in topics {
        let created = match plan_topic(topic, defaults, &brokers) {
            Ok(plan) => write_topic(zk, &topic.name, &plan)
                .await
                .map(|()| plan.counts()),
            Err(error) => Err(error),
        };
        if created.is_ok() {
            tracing::info!(
                topic = topic.name,
                "created topic's znodes for the controller"
            );
        }
        results.push(created);
    }
    results
}
