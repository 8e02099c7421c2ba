//! Kafka's TopicDeletionManager. A topic marked under `/admin/delete_topics`
//! is announced leaderless to every broker (UpdateMetadata with leader -2),
//! then every replica is stopped and deleted with StopReplica; its znodes
//! (assignment and partition states, config, then the mark) go, each write
//! fenced, once every replica answered. A replica on a broker that is down
//! waits for it to come back. With one broker (the embedded store) every
//! replica is local: the znodes go at once and the image without the topic
//! makes every shard delete its logs.

use std::collections::BTreeSet;

use shards::log::TopicPartition;
use tracing::{info, warn};

use super::{broker_requests, KafkaController};
use crate::metadata::kafka_zk_client::KafkaZkError;
use crate::metadata::zk_client::ZkClient;
use crate::protocol::inter_broker::EPOCH_DURING_DELETE;

impl<Z: ZkClient> KafkaController<Z> {
    /// The marks' watch fired. Returns whether a topic went.
    pub async fn on_topic_deletion(&mut self) -> bool {
        if !self.is_active() {
            return false;
        }
        let processed = self.process_topic_deletions().await;
        self.on_deletion_result(processed)
    }

    fn on_deletion_result(&mut self, result: Result<bool, KafkaZkError>) -> bool {
        match result {
            Ok(deleted) => deleted,
            Err(KafkaZkError::ControllerMoved) => {
                self.resign();
                false
            }
            Err(error) => {
                tracing::error!(%error, "topic deletion failed");
                false
            }
        }
    }

    /// Starts deleting every newly marked topic (a mark for a topic that does
    /// not exist is only removed) and watches for the next mark. Returns
    /// whether a topic went.
    async fn process_topic_deletions(&mut self) -> Result<bool, KafkaZkError> {
        let marked = self.zk.get_topic_deletions(true).await?;
        let mut started = Vec::new();
        for name in marked {
            let context = self.context_mut();
            if context.is_being_deleted(&name) {
                continue;
            }
            let Some(topic) = context.topics.get(&name) else {
                let epoch = context.epoch;
                self.zk.delete_topic_znodes(epoch, &name).await?;
                continue;
            };
            if !topic.reassignments.is_empty() {
                info!(topic = name, "deletion waits for the topic's reassignments");
                continue;
            }
            let replicas: BTreeSet<(i32, i32)> = topic
                .assignment
                .iter()
                .enumerate()
                .flat_map(|(partition, replicas)| {
                    replicas.iter().map(move |id| (*id, partition as i32))
                })
                .collect();
            info!(topic = name, "deleting topic");
            context.topics_being_deleted.insert(name.clone(), replicas);
            started.push(name);
        }
        if started.is_empty() {
            return Ok(false);
        }
        self.send_update_metadata();
        let live = self.context_mut().live_broker_ids();
        self.send_stop_replica_deletions(&started, &live);
        self.complete_deletions().await
    }

    /// StopReplica deleting the pending replicas of `topics` on `brokers`
    /// (the live ones; the others are sent theirs when they come back).
    pub(super) fn send_stop_replica_deletions(&self, topics: &[String], brokers: &[i32]) {
        let Some(context) = self.context.as_ref() else {
            return;
        };
        let Some(propagation) = self.propagation.as_ref() else {
            return;
        };
        let mut overflowed = Vec::new();
        for name in topics {
            let Some(pending) = context.topics_being_deleted.get(name) else {
                continue;
            };
            for broker in brokers {
                if !context.live_brokers.contains_key(broker) {
                    continue;
                }
                let partitions: Vec<i32> = pending
                    .iter()
                    .filter(|(id, _)| id == broker)
                    .map(|(_, partition)| *partition)
                    .collect();
                if partitions.is_empty() {
                    continue;
                }
                let request = broker_requests::stop_replica_deleting(
                    context,
                    self.broker_id,
                    *broker,
                    name,
                    partitions,
                    EPOCH_DURING_DELETE,
                );
                let request = super::channel_manager::BrokerRequest::StopReplica(request);
                if !propagation.channels.send(*broker, request) {
                    overflowed.push(*broker);
                }
            }
        }
        overflowed.dedup();
        self.send_whole_state(&overflowed);
    }

    /// A broker answered a StopReplica: each replica it deleted is done; one
    /// it could not delete is sent again when the broker registers again.
    pub async fn on_stop_replica_answered(
        &mut self,
        broker: i32,
        answers: Vec<(TopicPartition, i16)>,
    ) {
        let Some(context) = self.context.as_mut() else {
            return;
        };
        for (tp, code) in answers {
            let Some(pending) = context.topics_being_deleted.get_mut(&tp.topic) else {
                continue;
            };
            if code == 0 {
                pending.remove(&(broker, tp.partition));
            } else {
                let error = crate::protocol::ResponseError::try_from_code(code);
                warn!(broker, partition = %tp, ?error, "replica deletion failed");
            }
        }
        let completed = self.complete_deletions().await;
        self.on_deletion_result(completed);
    }

    /// Removes the znodes of every topic whose replicas are all deleted, or
    /// at once with one broker. Returns whether a topic went.
    async fn complete_deletions(&mut self) -> Result<bool, KafkaZkError> {
        let single_broker = self.propagation.is_none();
        let done: Vec<String> = self
            .context_mut()
            .topics_being_deleted
            .iter()
            .filter(|(_, pending)| single_broker || pending.is_empty())
            .map(|(name, _)| name.clone())
            .collect();
        let epoch = self.context_mut().epoch;
        for name in &done {
            self.zk.delete_topic_znodes(epoch, name).await?;
            let context = self.context_mut();
            context.topics_being_deleted.remove(name);
            context.topics.remove(name);
            info!(topic = name, "deleted topic");
        }
        Ok(!done.is_empty())
    }
}
