//! Partition reassignment (KIP-455), Kafka's `onPartitionReassignment`.
//! With ORS the original replicas and TRS the target, the partition's
//! replicas become TRS followed by the rest of ORS, with the adding
//! (TRS - ORS) and removing (ORS - TRS) replicas in the topic znode, written
//! first. Phase A: the leader epoch is bumped and every replica told, so the
//! adding ones fetch as followers until the leader takes them into the ISR.
//! Phase B, once TRS is in the ISR (after AlterPartition, a broker change or
//! a failover): TRS becomes the replicas, a new leader from it if the old
//! one leaves, the removing replicas are stopped and deleted, and the topic
//! znode is written without the reassignment last, as it is the only
//! durable copy of ORS. A new target supersedes a running one; a
//! cancellation's target is ORS.

use std::collections::{BTreeMap, BTreeSet};

use tracing::info;

use super::election::{self, LeaderChange};
use super::{broker_requests, KafkaController};
use crate::metadata::kafka_zk_client::KafkaZkError;
use crate::metadata::zk_client::ZkClient;
use crate::metadata::znodes::{TopicPartitionStateZNode, TopicZNode};
use crate::protocol::{ApiError, ResponseError};

/// A partition, and its new target replicas or None to cancel.
pub type ReassignmentRequest = ((String, i32), Option<Vec<i32>>);
/// A partition, and whether its reassignment was taken.
pub type ReassignmentResult = ((String, i32), Result<(), ApiError>);
/// A partition being reassigned: topic, index, replicas and reassignment.
pub type OngoingReassignment = (String, i32, Vec<i32>, Reassignment);

/// A partition's reassignment in progress: the replicas it adds and removes.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct Reassignment {
    pub adding: Vec<i32>,
    pub removing: Vec<i32>,
}

fn minus(from: &[i32], taken: &[i32]) -> Vec<i32> {
    from.iter()
        .copied()
        .filter(|id| !taken.contains(id))
        .collect()
}

/// The replicas before the reassignment (ORS).
pub fn origin(replicas: &[i32], reassignment: &Reassignment) -> Vec<i32> {
    minus(replicas, &reassignment.adding)
}

/// The replicas after it (TRS).
pub fn target(replicas: &[i32], reassignment: &Reassignment) -> Vec<i32> {
    minus(replicas, &reassignment.removing)
}

/// Kafka's `ReplicaAssignment.reassignTo`: the replicas while moving from
/// `origin` to `target`, and what is added and removed.
pub fn reassign(origin: &[i32], target: &[i32]) -> (Vec<i32>, Reassignment) {
    let mut replicas = target.to_vec();
    replicas.extend(minus(origin, target));
    let reassignment = Reassignment {
        adding: minus(target, origin),
        removing: minus(origin, target),
    };
    (replicas, reassignment)
}

/// The reassignments a topic znode records, by partition.
pub fn reassignments_of(znode: &TopicZNode) -> BTreeMap<usize, Reassignment> {
    let mut reassignments: BTreeMap<usize, Reassignment> = BTreeMap::new();
    for (partition, adding) in &znode.adding_replicas {
        reassignments.entry(*partition as usize).or_default().adding = adding.clone();
    }
    for (partition, removing) in &znode.removing_replicas {
        reassignments
            .entry(*partition as usize)
            .or_default()
            .removing = removing.clone();
    }
    reassignments
}

/// Kafka's checks on a target: not empty, no duplicate, no negative id, and
/// every replica it adds to `origin` live.
pub fn check_target(
    origin: &[i32],
    target: &[i32],
    is_live: impl Fn(i32) -> bool,
) -> Result<(), ApiError> {
    let invalid = |message: String| {
        Err(ApiError::new(
            ResponseError::InvalidReplicaAssignment,
            message,
        ))
    };
    if target.is_empty() {
        return invalid("the replica list is empty".into());
    }
    if target.iter().collect::<BTreeSet<_>>().len() != target.len() {
        return invalid(format!("duplicate replicas in {target:?}"));
    }
    if target.iter().any(|id| *id < 0) {
        return invalid(format!("invalid broker id in {target:?}"));
    }
    let dead: Vec<i32> = minus(target, origin)
        .into_iter()
        .filter(|id| !is_live(*id))
        .collect();
    if !dead.is_empty() {
        return invalid(format!(
            "replica assignment has brokers that are not alive: {dead:?}"
        ));
    }
    Ok(())
}

/// The leader and ISR confined to `replicas` (the replicas during phase A,
/// TRS in phase B): members outside it or not eligible leave the ISR
/// (never emptied), and a leader that left is replaced by the first of
/// `replicas` eligible and in the ISR (-1 if none). Unchanged apart from the
/// epoch when nothing leaves.
pub fn confined_to(
    replicas: &[i32],
    state: &TopicPartitionStateZNode,
    eligible: impl Fn(i32) -> bool,
) -> LeaderChange {
    let keep = |id: i32| replicas.contains(&id) && eligible(id);
    election::after_broker_change(replicas, state, keep, false).unwrap_or_else(|| LeaderChange {
        leader: state.leader,
        isr: state.isr.clone(),
        leader_recovery_state: state.leader_recovery_state,
        unclean: false,
    })
}

impl<Z: ZkClient> KafkaController<Z> {
    /// AlterPartitionReassignments: for each partition a new target, or
    /// None to cancel its reassignment. Each answered with its own error.
    pub async fn alter_partition_reassignments(
        &mut self,
        requests: Vec<ReassignmentRequest>,
    ) -> Result<Vec<ReassignmentResult>, ApiError> {
        self.context()?;
        let mut results = Vec::with_capacity(requests.len());
        for ((topic, partition), target) in requests {
            let result = self.reassign_partition(&topic, partition, target).await;
            if matches!(&result, Err(error) if error.error == ResponseError::NotController) {
                return Err(super::not_controller());
            }
            results.push(((topic, partition), result));
        }
        Ok(results)
    }

    /// ListPartitionReassignments: the partitions among `partitions` (None:
    /// all) being reassigned, with their replicas and reassignment.
    pub fn list_partition_reassignments(
        &self,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<OngoingReassignment>, ApiError> {
        let context = self.context()?;
        let wanted = |topic: &str, partition: i32| {
            partitions
                .as_ref()
                .is_none_or(|list| list.iter().any(|(t, p)| t == topic && *p == partition))
        };
        Ok(context
            .topics
            .iter()
            .flat_map(|(name, topic)| {
                topic
                    .reassignments
                    .iter()
                    .map(move |(partition, reassignment)| {
                        (
                            name.clone(),
                            *partition as i32,
                            topic.assignment[*partition].clone(),
                            reassignment.clone(),
                        )
                    })
            })
            .filter(|(name, partition, ..)| wanted(name, *partition))
            .collect())
    }

    async fn reassign_partition(
        &mut self,
        topic: &str,
        partition: i32,
        target: Option<Vec<i32>>,
    ) -> Result<(), ApiError> {
        let context = self.context()?;
        let unknown = || {
            ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("partition {topic}-{partition} does not exist"),
            )
        };
        if context.is_being_deleted(topic) {
            return Err(unknown());
        }
        let topic_context = context.topics.get(topic).ok_or_else(unknown)?;
        let index = usize::try_from(partition)
            .ok()
            .filter(|index| *index < topic_context.assignment.len())
            .ok_or_else(unknown)?;
        let running = topic_context.reassignments.get(&index).cloned();
        let origin = origin(
            &topic_context.assignment[index],
            running.as_ref().unwrap_or(&Reassignment::default()),
        );
        let target = match target {
            Some(target) => {
                check_target(&origin, &target, |id| {
                    context.live_brokers.contains_key(&id)
                })?;
                target
            }
            None if running.is_some() => origin.clone(),
            None => {
                return Err(ApiError::new(
                    ResponseError::NoReassignmentInProgress,
                    format!("no reassignment of {topic}-{partition} is in progress"),
                ))
            }
        };
        info!(topic, partition, ?origin, ?target, "reassigning partition");
        self.on_partition_reassignment(topic, index, &target)
            .await
            .map_err(ApiError::from)
    }

    /// Moves a partition toward `target` (a new reassignment, a superseding
    /// one, a cancellation, or one resumed at failover).
    pub(super) async fn on_partition_reassignment(
        &mut self,
        topic: &str,
        partition: usize,
        target: &[i32],
    ) -> Result<(), KafkaZkError> {
        let topic_context = &self.context_mut().topics[topic];
        let current = topic_context.assignment[partition].clone();
        let running = topic_context
            .reassignments
            .get(&partition)
            .cloned()
            .unwrap_or_default();
        let (replicas, reassignment) = reassign(&origin(&current, &running), target);
        // Replicas a superseded (or cancelled) reassignment was adding.
        let unneeded = minus(&current, &replicas);
        if replicas != current || reassignment != running {
            self.set_reassignment(topic, partition, replicas.clone(), reassignment)
                .await?;
        }
        if !self
            .maybe_complete_reassignment(topic, partition, &unneeded)
            .await?
        {
            // Phase A: every replica, the adding ones included, learns the
            // replicas under a new leader epoch.
            let change = self.confined_change(topic, partition, &replicas);
            self.write_partition_states(vec![(topic.to_owned(), partition, change)])
                .await?;
            self.stop_and_delete_replicas(topic, partition, &unneeded);
            self.send_update_metadata();
        }
        Ok(())
    }

    /// Phase B for a partition being reassigned whose target replicas are
    /// all in the ISR and one of them can lead; returns whether it ran.
    /// `also_stopped` are further replicas to stop and delete.
    pub(super) async fn maybe_complete_reassignment(
        &mut self,
        topic: &str,
        partition: usize,
        also_stopped: &[i32],
    ) -> Result<bool, KafkaZkError> {
        let context = self.context.as_ref().expect("active");
        let topic_context = &context.topics[topic];
        let reassignment = topic_context
            .reassignments
            .get(&partition)
            .cloned()
            .unwrap_or_default();
        let Some(Some((state, _))) = topic_context.states.get(partition) else {
            return Ok(false);
        };
        let target = target(&topic_context.assignment[partition], &reassignment);
        let in_isr = target.iter().all(|id| state.isr.contains(id));
        let change = self.confined_change(topic, partition, &target);
        if !in_isr || change.leader == -1 {
            return Ok(false);
        }
        let topic_context = self.topic_mut(topic);
        let origin = std::mem::replace(&mut topic_context.assignment[partition], target.clone());
        let ongoing = topic_context.reassignments.remove(&partition);
        let outcome = self
            .write_partition_states(vec![(topic.to_owned(), partition, change)])
            .await?;
        if outcome.written.is_empty() {
            // Not elected: the state moved on under the controller (read
            // again) or could not be written. The reassignment stays, for
            // the next ISR or broker change to complete.
            let topic_context = self.topic_mut(topic);
            topic_context.assignment[partition] = origin;
            if let Some(ongoing) = ongoing {
                topic_context.reassignments.insert(partition, ongoing);
            }
            return Ok(false);
        }
        let mut stopped = reassignment.removing.clone();
        stopped.extend_from_slice(also_stopped);
        self.stop_and_delete_replicas(topic, partition, &stopped);
        // Last: until now the znode is the only durable copy of ORS.
        self.write_topic_znode(topic).await?;
        self.send_update_metadata();
        info!(topic, partition, replicas = ?target, "reassignment completed");
        if self.context_mut().topics[topic].reassignments.is_empty() {
            // A deletion waits for the topic's reassignments.
            self.on_topic_deletion().await;
        }
        Ok(true)
    }

    /// Phase B for every partition being reassigned that can complete,
    /// after the ISRs or the live brokers changed.
    pub(super) async fn maybe_complete_reassignments(&mut self) -> Result<(), KafkaZkError> {
        for (topic, partition) in self.reassigning_partitions() {
            self.maybe_complete_reassignment(&topic, partition, &[])
                .await?;
        }
        Ok(())
    }

    /// Every partition being reassigned, with its target, resumed by a new
    /// controller.
    pub(super) async fn resume_reassignments(&mut self) -> Result<(), KafkaZkError> {
        for (topic, partition) in self.reassigning_partitions() {
            let topic_context = &self.context_mut().topics[&topic];
            let target = target(
                &topic_context.assignment[partition],
                &topic_context.reassignments[&partition],
            );
            info!(topic, partition, ?target, "resuming reassignment");
            self.on_partition_reassignment(&topic, partition, &target)
                .await?;
        }
        Ok(())
    }

    fn reassigning_partitions(&self) -> Vec<(String, usize)> {
        let Some(context) = self.context.as_ref() else {
            return Vec::new();
        };
        context
            .topics
            .iter()
            .flat_map(|(name, topic)| topic.reassignments.keys().map(|p| (name.clone(), *p)))
            .collect()
    }

    fn confined_change(&self, topic: &str, partition: usize, replicas: &[i32]) -> LeaderChange {
        let context = self.context.as_ref().expect("active");
        let (state, _) = context.topics[topic].states[partition]
            .as_ref()
            .expect("a reassigned partition has a state");
        confined_to(replicas, state, |id| context.is_eligible(id))
    }

    /// The partition's replicas and reassignment, in memory and in the
    /// topic znode (fenced, at the version held).
    async fn set_reassignment(
        &mut self,
        topic: &str,
        partition: usize,
        replicas: Vec<i32>,
        reassignment: Reassignment,
    ) -> Result<(), KafkaZkError> {
        let topic_context = self.topic_mut(topic);
        topic_context.assignment[partition] = replicas;
        if reassignment == Reassignment::default() {
            topic_context.reassignments.remove(&partition);
        } else {
            topic_context.reassignments.insert(partition, reassignment);
        }
        self.write_topic_znode(topic).await
    }

    async fn write_topic_znode(&mut self, topic: &str) -> Result<(), KafkaZkError> {
        let context = self.context_mut();
        let epoch = context.epoch;
        let topic_context = &context.topics[topic];
        let (znode, version) = (topic_context.znode(), topic_context.assignment_version);
        let written = self
            .zk
            .set_topic_assignment(epoch, topic, &znode, version)
            .await;
        if let Err(KafkaZkError::ControllerMoved) = written {
            self.resign();
        }
        written?;
        self.topic_mut(topic).assignment_version = version + 1;
        Ok(())
    }

    /// StopReplica deleting a partition's replicas on `brokers` (those live;
    /// a dead one keeps its stray log).
    fn stop_and_delete_replicas(&self, topic: &str, partition: usize, brokers: &[i32]) {
        let (Some(context), Some(propagation)) = (self.context.as_ref(), self.propagation.as_ref())
        else {
            return;
        };
        let leader_epoch = context.topics[topic].states[partition]
            .as_ref()
            .map_or(-1, |(state, _)| state.leader_epoch);
        let mut overflowed = Vec::new();
        for broker in brokers {
            if !context.live_brokers.contains_key(broker) {
                continue;
            }
            let request = broker_requests::stop_replica_deleting(
                context,
                self.broker_id,
                *broker,
                topic,
                [partition as i32],
                leader_epoch,
            );
            let request = super::channel_manager::BrokerRequest::StopReplica(request);
            if !propagation.channels.send(*broker, request) {
                overflowed.push(*broker);
            }
        }
        self.send_whole_state(&overflowed);
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::controller::election::tests::state;

    #[test]
    fn the_replicas_are_the_target_then_the_rest_of_the_origin() {
        let (replicas, reassignment) = reassign(&[1, 2, 3], &[2, 3, 4]);
        assert_eq!(replicas, [2, 3, 4, 1]);
        assert_eq!(reassignment.adding, [4]);
        assert_eq!(reassignment.removing, [1]);
        assert_eq!(origin(&replicas, &reassignment), [2, 3, 1]);
        assert_eq!(target(&replicas, &reassignment), [2, 3, 4]);
        // A cancellation's target is the origin: nothing left to move.
        let (replicas, reassignment) = reassign(&[2, 3, 1], &[2, 3, 1]);
        assert_eq!(
            (replicas, reassignment),
            (vec![2, 3, 1], Reassignment::default())
        );
        // Reordering only is a reassignment with nothing added or removed.
        let (replicas, reassignment) = reassign(&[1, 2, 3], &[3, 2, 1]);
        assert_eq!(
            (replicas, reassignment),
            (vec![3, 2, 1], Reassignment::default())
        );
    }

    #[test]
    fn a_target_is_checked_as_kafka_checks_it() {
        let live = |id: i32| id <= 4;
        assert!(check_target(&[1, 2, 3], &[2, 3, 4], live).is_ok());
        for bad in [&[][..], &[2, 2, 3], &[-1, 2, 3], &[2, 3, 5]] {
            let error = check_target(&[1, 2, 3], bad, live).unwrap_err();
            assert_eq!(
                error.error,
                ResponseError::InvalidReplicaAssignment,
                "{bad:?}"
            );
        }
        // A dead replica already in the origin may stay.
        assert!(check_target(&[1, 5], &[5, 2], live).is_ok());
    }

    #[test]
    fn confining_to_the_target_moves_a_removed_leader_and_shrinks_the_isr() {
        let all = |_| true;
        let change = confined_to(&[2, 3, 4], &state(1, &[1, 2, 3, 4]), all);
        assert_eq!((change.leader, change.isr), (2, vec![2, 3, 4]));
        // The leader stays when it is kept; nothing changes but the epoch.
        let change = confined_to(&[1, 2, 3], &state(1, &[1, 2, 3]), all);
        assert_eq!((change.leader, change.isr), (1, vec![1, 2, 3]));
        // No eligible target replica in the ISR: no leader.
        let change = confined_to(&[4], &state(1, &[1, 2]), |id| id != 4);
        assert_eq!(change.leader, -1);
    }
}
