//! `MetadataCache`: what the controller has told this broker with
//! UpdateMetadata (Kafka's ZkMetadataCache), the source of a ZooKeeper-mode
//! broker's image. Live brokers are replaced by each request; partition
//! states are merged, and a partition whose leader is `-2` (its topic is being
//! deleted) leaves the cache.

use std::collections::BTreeMap;

use uuid::Uuid;

use super::image::{Broker, EndPoint, MetadataImage, PartitionImage, TopicImage};
use super::topic_configs::TopicConfigs;
use crate::protocol::inter_broker::{
    broker_ids, security_protocol_name, UpdateMetadataRequest, LEADER_DURING_DELETE,
};
use crate::protocol::ResponseError;

#[derive(Debug, Clone)]
struct CachedTopic {
    id: Uuid,
    partitions: BTreeMap<i32, PartitionImage>,
}

#[derive(Debug, Clone)]
pub struct MetadataCache {
    cluster_id: String,
    controller_id: i32,
    controller_epoch: i32,
    brokers: BTreeMap<i32, Broker>,
    topics: BTreeMap<String, CachedTopic>,
}

impl MetadataCache {
    pub fn new(cluster_id: String) -> Self {
        Self {
            cluster_id,
            controller_id: -1,
            controller_epoch: -1,
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
        }
    }

    /// Applies an UpdateMetadata for this broker at `broker_epoch`; refuses,
    /// as Kafka does, a request from an older controller
    /// (STALE_CONTROLLER_EPOCH) or for an older registration of this broker
    /// (STALE_BROKER_EPOCH).
    pub fn update(
        &mut self,
        request: &UpdateMetadataRequest,
        broker_epoch: i64,
    ) -> Result<(), ResponseError> {
        if request.controller_epoch < self.controller_epoch {
            return Err(ResponseError::StaleControllerEpoch);
        }
        if request.broker_epoch != -1 && request.broker_epoch < broker_epoch {
            return Err(ResponseError::StaleBrokerEpoch);
        }
        self.controller_epoch = request.controller_epoch;
        self.controller_id = request.controller_id.0;
        self.brokers = request
            .live_brokers
            .iter()
            .map(|broker| {
                let endpoints = broker
                    .endpoints
                    .iter()
                    .filter_map(|endpoint| {
                        Some(EndPoint {
                            listener_name: endpoint.listener.to_string(),
                            security_protocol: security_protocol_name(endpoint.security_protocol)?
                                .to_owned(),
                            host: endpoint.host.to_string(),
                            port: u16::try_from(endpoint.port).ok()?,
                        })
                    })
                    .collect();
                let id = broker.id.0;
                let rack = broker.rack.as_ref().map(|rack| rack.to_string());
                (
                    id,
                    Broker {
                        id,
                        endpoints,
                        rack,
                    },
                )
            })
            .collect();
        // v0-4 list partitions ungrouped; v5+ by topic, with topic ids from v7.
        let grouped = request.topic_states.iter().flat_map(|topic| {
            topic
                .partition_states
                .iter()
                .map(move |state| (topic.topic_name.to_string(), Some(topic.topic_id), state))
        });
        let ungrouped = request
            .ungrouped_partition_states
            .iter()
            .map(|state| (state.topic_name.to_string(), None, state));
        for (name, id, state) in grouped.chain(ungrouped) {
            let leader = state.leader.0;
            if leader == LEADER_DURING_DELETE {
                if let Some(topic) = self.topics.get_mut(&name) {
                    topic.partitions.remove(&state.partition_index);
                    if topic.partitions.is_empty() {
                        self.topics.remove(&name);
                    }
                }
                continue;
            }
            let topic = self.topics.entry(name).or_insert_with(|| CachedTopic {
                id: id.unwrap_or_else(Uuid::nil),
                partitions: BTreeMap::new(),
            });
            topic.partitions.insert(
                state.partition_index,
                PartitionImage {
                    leader,
                    leader_epoch: state.leader_epoch,
                    replicas: broker_ids(&state.replicas),
                    isr: broker_ids(&state.isr),
                },
            );
        }
        Ok(())
    }

    pub fn brokers(&self) -> impl Iterator<Item = &Broker> {
        self.brokers.values()
    }

    /// Whether the topic's first `partitions` partitions all have a leader.
    pub fn has_leaders(&self, topic: &str, partitions: i32) -> bool {
        self.topics.get(topic).is_some_and(|topic| {
            (0..partitions).all(|p| topic.partitions.get(&p).is_some_and(|p| p.leader >= 0))
        })
    }

    pub fn topic_names(&self) -> impl Iterator<Item = &String> {
        self.topics.keys()
    }

    /// The image of what the controller said, as version `version`, with the
    /// topics' configs.
    pub fn image(&self, version: u64, configs: &TopicConfigs) -> MetadataImage {
        let mut image = MetadataImage::empty();
        image.version = version;
        image.cluster_id = self.cluster_id.clone();
        image.controller_id = self.controller_id;
        image.brokers = self.brokers.clone();
        for (name, topic) in &self.topics {
            let count = topic.partitions.keys().max().map_or(0, |last| last + 1);
            let partitions = (0..count)
                .map(|index| {
                    topic
                        .partitions
                        .get(&index)
                        .cloned()
                        .unwrap_or(PartitionImage {
                            leader: -1,
                            leader_epoch: -1,
                            replicas: Vec::new(),
                            isr: Vec::new(),
                        })
                })
                .collect();
            let (config_overrides, log_config) = configs.get(name);
            image.insert_topic(TopicImage {
                name: name.clone(),
                id: topic.id,
                partitions,
                config_overrides,
                log_config,
            });
        }
        image
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::inter_broker::{
        BrokerId, StrBytes, TopicName, UpdateMetadataBroker, UpdateMetadataPartitionState,
        UpdateMetadataTopicState,
    };

    fn partition(index: i32, leader: i32) -> UpdateMetadataPartitionState {
        UpdateMetadataPartitionState::default()
            .with_topic_name(TopicName(StrBytes::from_static_str("t")))
            .with_partition_index(index)
            .with_leader(BrokerId(leader))
            .with_replicas(vec![BrokerId(leader.max(1))])
            .with_isr(vec![BrokerId(leader.max(1))])
    }

    fn request(
        controller_epoch: i32,
        partitions: Vec<UpdateMetadataPartitionState>,
    ) -> UpdateMetadataRequest {
        UpdateMetadataRequest::default()
            .with_controller_id(BrokerId(1))
            .with_controller_epoch(controller_epoch)
            .with_broker_epoch(100)
            .with_live_brokers(vec![UpdateMetadataBroker::default().with_id(BrokerId(1))])
            .with_topic_states(vec![UpdateMetadataTopicState::default()
                .with_topic_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_states(partitions)])
    }

    #[test]
    fn states_merge_deletes_leave_and_stale_requests_are_refused() {
        let configs = TopicConfigs::new(Default::default());
        let mut cache = MetadataCache::new("c".into());
        assert_eq!(
            cache.update(&request(3, vec![partition(0, 1), partition(1, 2)]), 100),
            Ok(())
        );
        // A later request with one partition leaves the other as it was.
        cache
            .update(&request(3, vec![partition(1, -1)]), 100)
            .unwrap();
        let image = cache.image(1, &configs);
        let leaders: Vec<i32> = image
            .topic("t")
            .unwrap()
            .partitions
            .iter()
            .map(|p| p.leader)
            .collect();
        assert_eq!(leaders, vec![1, -1]);
        assert_eq!((image.controller_id, image.brokers.len()), (1, 1));
        assert_eq!(
            cache.update(&request(2, Vec::new()), 100),
            Err(ResponseError::StaleControllerEpoch)
        );
        assert_eq!(
            cache.update(&request(3, Vec::new()), 101),
            Err(ResponseError::StaleBrokerEpoch),
            "addressed to an older registration of this broker"
        );
        cache
            .update(&request(4, vec![partition(0, -2), partition(1, -2)]), 100)
            .unwrap();
        assert!(cache.image(2, &configs).topic("t").is_none());
    }
}
