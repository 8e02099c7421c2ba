//! `HostedPartitions`: the replicas this broker holds as the controller
//! assigned them with LeaderAndIsr and took them away with StopReplica, with
//! Kafka's rules for which requests and partition states to accept
//! (`ReplicaManager.becomeLeaderOrFollower` and `stopReplicas`). Pure: the
//! control plane hands it each request and publishes what it now hosts.

use std::collections::BTreeMap;

use shards::log::TopicPartition;
use uuid::Uuid;

use super::partition_state::LeaderAndIsr;
use crate::protocol::inter_broker::{EPOCH_DURING_DELETE, NO_EPOCH};
use crate::protocol::ResponseError;

/// A partition's state as the controller last told this broker.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ReplicaState {
    pub topic_id: Uuid,
    pub leader_and_isr: LeaderAndIsr,
}

/// One partition of a StopReplica.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StopReplicaPartition {
    pub tp: TopicPartition,
    pub leader_epoch: i32,
    pub delete: bool,
}

/// Each partition's answer, in request order.
pub type PartitionErrors = Vec<(TopicPartition, Result<(), ResponseError>)>;

#[derive(Debug, Default)]
pub struct HostedPartitions {
    /// The newest controller epoch a LeaderAndIsr or StopReplica came with.
    controller_epoch: i32,
    partitions: BTreeMap<TopicPartition, ReplicaState>,
}

impl HostedPartitions {
    pub fn iter(&self) -> impl Iterator<Item = (&TopicPartition, &ReplicaState)> {
        self.partitions.iter()
    }

    #[cfg(test)]
    pub fn get(&self, tp: &TopicPartition) -> Option<&ReplicaState> {
        self.partitions.get(tp)
    }

    /// The request-wide checks Kafka makes first: an older controller's
    /// request (STALE_CONTROLLER_EPOCH), or one meant for an earlier
    /// registration of this broker (STALE_BROKER_EPOCH; -1 is never stale).
    fn accept_controller(
        &mut self,
        controller_epoch: i32,
        request_broker_epoch: i64,
        broker_epoch: i64,
    ) -> Result<(), ResponseError> {
        if request_broker_epoch != -1 && request_broker_epoch < broker_epoch {
            return Err(ResponseError::StaleBrokerEpoch);
        }
        if controller_epoch < self.controller_epoch {
            return Err(ResponseError::StaleControllerEpoch);
        }
        self.controller_epoch = controller_epoch;
        Ok(())
    }

    /// LeaderAndIsr for broker `broker_id` at `broker_epoch`. A partition's
    /// state is taken only with a leader epoch newer than the one held
    /// (otherwise STALE_CONTROLLER_EPOCH for it, and it is left as it was);
    /// a partition not assigned to this broker is UNKNOWN_TOPIC_OR_PARTITION
    /// and one under another topic id INCONSISTENT_TOPIC_ID.
    pub fn become_leader_or_follower(
        &mut self,
        broker_id: i32,
        controller_epoch: i32,
        request_broker_epoch: i64,
        broker_epoch: i64,
        states: Vec<(TopicPartition, ReplicaState)>,
    ) -> Result<PartitionErrors, ResponseError> {
        self.accept_controller(controller_epoch, request_broker_epoch, broker_epoch)?;
        let answers = states
            .into_iter()
            .map(|(tp, state)| {
                let answer = match self.partitions.get(&tp) {
                    _ if !state.leader_and_isr.replicas.contains(&broker_id) => {
                        Err(ResponseError::UnknownTopicOrPartition)
                    }
                    Some(held) if held.topic_id != state.topic_id && !held.topic_id.is_nil() => {
                        Err(ResponseError::InconsistentTopicId)
                    }
                    Some(held)
                        if state.leader_and_isr.leader_epoch
                            <= held.leader_and_isr.leader_epoch =>
                    {
                        Err(ResponseError::StaleControllerEpoch)
                    }
                    _ => {
                        self.partitions.insert(tp.clone(), state);
                        Ok(())
                    }
                };
                (tp, answer)
            })
            .collect();
        Ok(answers)
    }

    /// Stops hosting the partitions `offline` names (their log dir failed);
    /// returns them.
    pub fn remove_offline(
        &mut self,
        offline: impl Fn(&TopicPartition) -> bool,
    ) -> Vec<TopicPartition> {
        let gone: Vec<TopicPartition> = self
            .partitions
            .keys()
            .filter(|tp| offline(tp))
            .cloned()
            .collect();
        for tp in &gone {
            self.partitions.remove(tp);
        }
        gone
    }

    /// StopReplica: each partition whose leader epoch is the deletion
    /// sentinel, none, or at least the held one stops being hosted
    /// (FENCED_LEADER_EPOCH otherwise). Returns the answers and the
    /// partitions whose logs go, hosted or not (a restarted broker still has
    /// the logs of a topic deleted while it was down).
    pub fn stop_replicas(
        &mut self,
        controller_epoch: i32,
        request_broker_epoch: i64,
        broker_epoch: i64,
        stops: Vec<StopReplicaPartition>,
    ) -> Result<(PartitionErrors, Vec<TopicPartition>), ResponseError> {
        self.accept_controller(controller_epoch, request_broker_epoch, broker_epoch)?;
        let mut deleted = Vec::new();
        let answers = stops
            .into_iter()
            .map(|stop| {
                let held_epoch = self
                    .partitions
                    .get(&stop.tp)
                    .map(|s| s.leader_and_isr.leader_epoch);
                let accepted = matches!(stop.leader_epoch, EPOCH_DURING_DELETE | NO_EPOCH)
                    || held_epoch.is_none_or(|held| stop.leader_epoch >= held);
                if !accepted {
                    return (stop.tp, Err(ResponseError::FencedLeaderEpoch));
                }
                self.partitions.remove(&stop.tp);
                if stop.delete {
                    deleted.push(stop.tp.clone());
                }
                (stop.tp, Ok(()))
            })
            .collect();
        Ok((answers, deleted))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn state(topic_id: Uuid, leader_epoch: i32, replicas: &[i32]) -> ReplicaState {
        ReplicaState {
            topic_id,
            leader_and_isr: LeaderAndIsr {
                leader: replicas[0],
                leader_epoch,
                isr: replicas.to_vec(),
                replicas: replicas.to_vec(),
                partition_epoch: 0,
                leader_recovery_state: 0,
            },
        }
    }

    fn tp(partition: i32) -> TopicPartition {
        TopicPartition::new("t", partition)
    }

    #[test]
    fn leader_and_isr_takes_only_newer_leader_epochs_for_this_brokers_replicas() {
        let id = Uuid::new_v4();
        let mut hosted = HostedPartitions::default();
        let answers = hosted
            .become_leader_or_follower(
                1,
                5,
                100,
                100,
                vec![
                    (tp(0), state(id, 0, &[1, 2])),
                    (tp(1), state(id, 0, &[2, 3])),
                ],
            )
            .unwrap();
        assert_eq!(
            answers,
            vec![
                (tp(0), Ok(())),
                (tp(1), Err(ResponseError::UnknownTopicOrPartition))
            ]
        );
        // A new controller resends the same epoch: ignored; a newer one is taken.
        let answers = hosted
            .become_leader_or_follower(1, 6, -1, 100, vec![(tp(0), state(id, 0, &[2, 1]))])
            .unwrap();
        assert_eq!(
            answers,
            vec![(tp(0), Err(ResponseError::StaleControllerEpoch))]
        );
        assert_eq!(hosted.get(&tp(0)).unwrap().leader_and_isr.leader, 1);
        hosted
            .become_leader_or_follower(1, 6, 100, 100, vec![(tp(0), state(id, 1, &[2, 1]))])
            .unwrap();
        assert_eq!(hosted.get(&tp(0)).unwrap().leader_and_isr.leader, 2);
        let other = Uuid::new_v4();
        let answers = hosted
            .become_leader_or_follower(1, 6, 100, 100, vec![(tp(0), state(other, 9, &[1]))])
            .unwrap();
        assert_eq!(
            answers,
            vec![(tp(0), Err(ResponseError::InconsistentTopicId))]
        );
        assert_eq!(
            hosted.become_leader_or_follower(1, 5, 100, 100, Vec::new()),
            Err(ResponseError::StaleControllerEpoch)
        );
        assert_eq!(
            hosted.become_leader_or_follower(1, 6, 99, 100, Vec::new()),
            Err(ResponseError::StaleBrokerEpoch),
            "meant for an earlier registration"
        );
    }

    #[test]
    fn stop_replica_fences_older_epochs_and_deletes_unhosted_logs_too() {
        let id = Uuid::new_v4();
        let mut hosted = HostedPartitions::default();
        hosted
            .become_leader_or_follower(1, 3, 100, 100, vec![(tp(0), state(id, 4, &[1]))])
            .unwrap();
        let stop = |partition, leader_epoch, delete| StopReplicaPartition {
            tp: tp(partition),
            leader_epoch,
            delete,
        };
        let (answers, deleted) = hosted
            .stop_replicas(3, 100, 100, vec![stop(0, 3, false)])
            .unwrap();
        assert_eq!(
            answers,
            vec![(tp(0), Err(ResponseError::FencedLeaderEpoch))]
        );
        assert!(deleted.is_empty());
        assert!(hosted.get(&tp(0)).is_some());
        let (answers, deleted) = hosted
            .stop_replicas(
                3,
                100,
                100,
                vec![
                    stop(0, EPOCH_DURING_DELETE, true),
                    stop(7, EPOCH_DURING_DELETE, true),
                ],
            )
            .unwrap();
        assert_eq!(answers, vec![(tp(0), Ok(())), (tp(7), Ok(()))]);
        assert_eq!(deleted, vec![tp(0), tp(7)]);
        assert!(hosted.get(&tp(0)).is_none());
        assert_eq!(
            hosted.stop_replicas(2, 100, 100, Vec::new()),
            Err(ResponseError::StaleControllerEpoch)
        );
    }
}
