//! `ControllerContext`: what the controller knows of the cluster, loaded from
//! ZooKeeper when it takes office and kept current by its own writes, as
//! Kafka's class of that name. The metadata image is built from it.

use std::collections::{BTreeMap, BTreeSet};
use std::sync::Arc;

use shards::log::LogConfig;
use uuid::Uuid;

use super::election::LeaderChange;
use super::reassignment::Reassignment;
use crate::metadata::image::{MetadataImage, PartitionImage, TopicImage};
use crate::metadata::kafka_zk_client::{ControllerEpoch, Versioned};
use crate::metadata::znodes::{BrokerIdZNode, TopicPartitionStateZNode, TopicZNode};

/// A registered broker and its epoch (its registration's czxid).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LiveBroker {
    pub info: BrokerIdZNode,
    pub epoch: i64,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicContext {
    pub id: Uuid,
    /// Replicas by partition, and the assignment znode's version.
    pub assignment: Vec<Vec<i32>>,
    pub assignment_version: i32,
    /// Each partition's state znode and its version, once written.
    pub states: Vec<Option<Versioned<TopicPartitionStateZNode>>>,
    /// The overrides in `/config/topics/<t>`.
    pub config_overrides: BTreeMap<String, String>,
    /// The broker's defaults with the overrides applied.
    pub log_config: Arc<LogConfig>,
    /// Partitions being reassigned (their `assignment` is the target
    /// replicas, then the original ones leaving).
    pub reassignments: BTreeMap<usize, Reassignment>,
}

impl TopicContext {
    /// `/brokers/topics/<t>` as this context holds it.
    pub fn znode(&self) -> TopicZNode {
        let by_partition = |pick: fn(&Reassignment) -> &Vec<i32>| {
            self.reassignments
                .iter()
                .map(|(partition, reassignment)| (*partition as i32, pick(reassignment).clone()))
                .filter(|(_, replicas)| !replicas.is_empty())
                .collect()
        };
        TopicZNode {
            topic_id: self.id,
            partitions: self.assignment.clone(),
            adding_replicas: by_partition(|r| &r.adding),
            removing_replicas: by_partition(|r| &r.removing),
        }
    }
}

#[derive(Debug, Clone)]
pub struct ControllerContext {
    pub epoch: ControllerEpoch,
    pub cluster_id: String,
    pub live_brokers: BTreeMap<i32, LiveBroker>,
    pub topics: BTreeMap<String, TopicContext>,
    /// Topics being deleted (ZooKeeper mode), each with the replicas (broker,
    /// partition) whose StopReplica has not succeeded yet; its znodes go when
    /// none is left (Kafka's TopicDeletionManager).
    pub topics_being_deleted: BTreeMap<String, BTreeSet<(i32, i32)>>,
    /// Live brokers stopping (ControlledShutdown): they lead nothing and
    /// join no ISR.
    pub shutting_down_broker_ids: BTreeSet<i32>,
    /// Replicas (topic, partition) in a log dir that failed, by broker: they
    /// lead nothing and join no ISR until the broker registers again.
    pub replicas_on_offline_dirs: BTreeMap<i32, BTreeSet<(String, i32)>>,
}

impl ControllerContext {
    pub fn new(epoch: ControllerEpoch, cluster_id: String) -> Self {
        Self {
            epoch,
            cluster_id,
            live_brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            topics_being_deleted: BTreeMap::new(),
            shutting_down_broker_ids: BTreeSet::new(),
            replicas_on_offline_dirs: BTreeMap::new(),
        }
    }

    /// A broker that may lead or join an ISR: live and not stopping.
    pub fn is_eligible(&self, id: i32) -> bool {
        self.live_brokers.contains_key(&id) && !self.shutting_down_broker_ids.contains(&id)
    }

    /// Kafka's `isReplicaOnline`: the broker is eligible and the replica
    /// is not in a log dir that failed there.
    pub fn is_replica_online(&self, id: i32, topic: &str, partition: usize) -> bool {
        self.is_eligible(id)
            && !self
                .replicas_on_offline_dirs
                .get(&id)
                .is_some_and(|offline| offline.contains(&(topic.to_owned(), partition as i32)))
    }

    /// The partitions of topics not being deleted whose state `rule` (given
    /// the topic's name, partition and context, the replicas and the state)
    /// changes.
    pub fn partition_changes(
        &self,
        rule: impl Fn(
            (&str, usize),
            &TopicContext,
            &[i32],
            &TopicPartitionStateZNode,
        ) -> Option<LeaderChange>,
    ) -> Vec<(String, usize, LeaderChange)> {
        let mut changes = Vec::new();
        for (name, topic) in &self.topics {
            if self.is_being_deleted(name) {
                continue;
            }
            for (partition, replicas) in topic.assignment.iter().enumerate() {
                let Some(Some((state, _))) = topic.states.get(partition) else {
                    continue;
                };
                if let Some(change) = rule((name, partition), topic, replicas, state) {
                    changes.push((name.clone(), partition, change));
                }
            }
        }
        changes
    }

    pub fn is_being_deleted(&self, topic: &str) -> bool {
        self.topics_being_deleted.contains_key(topic)
    }

    /// The registered brokers with their epochs, as read from `/brokers/ids`;
    /// a stopping broker that is gone (or registered again) stops stopping,
    /// and its failed log dirs are forgotten.
    pub fn set_live_brokers(&mut self, brokers: Vec<(BrokerIdZNode, i64)>) {
        let before = std::mem::take(&mut self.live_brokers);
        self.live_brokers = brokers
            .into_iter()
            .map(|(info, epoch)| (info.broker.id, LiveBroker { info, epoch }))
            .collect();
        let same_registration = |id: &i32| {
            let (was, is) = (before.get(id), self.live_brokers.get(id));
            is.is_some_and(|is| was.is_some_and(|was| was.epoch == is.epoch))
        };
        self.shutting_down_broker_ids.retain(same_registration);
        // A broker that registers again reports its failed dirs afresh.
        self.replicas_on_offline_dirs
            .retain(|id, _| same_registration(id));
    }

    pub fn live_broker_ids(&self) -> Vec<i32> {
        self.live_brokers.keys().copied().collect()
    }

    /// What the shards read, as version `version`, with this broker
    /// (`controller_id`) as controller.
    pub fn image(&self, version: u64, controller_id: i32) -> MetadataImage {
        let mut image = MetadataImage::empty();
        image.version = version;
        image.cluster_id = self.cluster_id.clone();
        image.controller_id = controller_id;
        image.complete = true;
        for (id, broker) in &self.live_brokers {
            image.brokers.insert(*id, broker.info.broker.clone());
        }
        for (name, topic) in &self.topics {
            let partitions = topic
                .assignment
                .iter()
                .enumerate()
                .map(|(partition, replicas)| {
                    let state = topic
                        .states
                        .get(partition)
                        .and_then(Option::as_ref)
                        .map(|(state, _)| state);
                    PartitionImage {
                        leader: state.map_or(-1, |s| s.leader),
                        leader_epoch: state.map_or(0, |s| s.leader_epoch),
                        isr: state.map(|s| s.isr.clone()).unwrap_or_default(),
                        replicas: replicas.clone(),
                    }
                })
                .collect();
            image.insert_topic(TopicImage {
                name: name.clone(),
                id: topic.id,
                partitions,
                config_overrides: topic.config_overrides.clone(),
                log_config: topic.log_config.clone(),
            });
        }
        image
    }
}
