//! AlterPartition on the controller (Kafka's `processAlterPartition`): a
//! leader's proposed ISR is checked against the partition's state, written
//! to its state znode with a version check (the leader epoch unchanged, the
//! partition epoch moving with the znode's version) and announced to every
//! broker with UpdateMetadata.

use kafka_protocol::messages::alter_partition_response::{PartitionData, TopicData};
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse, BrokerId};

use super::{KafkaController, StatesWritten};
use crate::metadata::zk_client::ZkClient;
use crate::metadata::znodes::TopicPartitionStateZNode;
use crate::protocol::ResponseError;
use crate::replication::partition_state::{RECOVERED, RECOVERING};

/// One partition of a request, as a leader proposes it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ProposedState {
    pub leader_epoch: i32,
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    pub leader_recovery_state: i8,
}

/// What to do with a proposal against the current state (at `version`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Verdict {
    /// Already the state: answer it.
    Unchanged,
    /// Write this state.
    Write(TopicPartitionStateZNode),
    Refused(ResponseError),
}

/// Kafka's checks, in its order. `eligible` says whether a broker may be in
/// an ISR (live and not shutting down); `version >= 2` asks for
/// INELIGIBLE_REPLICA where older versions get OPERATION_NOT_ATTEMPTED.
pub fn check_proposal(
    current: &TopicPartitionStateZNode,
    current_version: i32,
    proposed: &ProposedState,
    replicas: &[i32],
    eligible: impl Fn(i32) -> bool,
    request_version: i16,
) -> Verdict {
    use ResponseError::*;
    if proposed.partition_epoch > current_version || proposed.leader_epoch > current.leader_epoch {
        return Verdict::Refused(NotController);
    }
    if proposed.leader_epoch < current.leader_epoch {
        return Verdict::Refused(FencedLeaderEpoch);
    }
    if proposed.isr == current.isr
        && proposed.leader_recovery_state == current.leader_recovery_state
    {
        return Verdict::Unchanged;
    }
    if proposed.partition_epoch < current_version {
        return Verdict::Refused(InvalidUpdateVersion);
    }
    if proposed.leader_recovery_state == RECOVERING && proposed.isr.len() > 1 {
        return Verdict::Refused(InvalidRequest);
    }
    if current.leader_recovery_state == RECOVERED && proposed.leader_recovery_state == RECOVERING {
        return Verdict::Refused(InvalidRequest);
    }
    let ineligible = proposed
        .isr
        .iter()
        .any(|id| !replicas.contains(id) || (!eligible(*id) && !current.isr.contains(id)));
    if ineligible {
        return Verdict::Refused(if request_version >= 2 {
            IneligibleReplica
        } else {
            OperationNotAttempted
        });
    }
    Verdict::Write(TopicPartitionStateZNode {
        isr: proposed.isr.clone(),
        leader_recovery_state: proposed.leader_recovery_state,
        ..current.clone()
    })
}

/// A request's partition (topic id, index), where the context holds it
/// (topic name, index), and what to do with it.
type PartitionVerdict = (uuid::Uuid, i32, Option<(String, usize)>, Verdict);

impl<Z: ZkClient> KafkaController<Z> {
    pub async fn alter_partition(
        &mut self,
        request: AlterPartitionRequest,
        version: i16,
    ) -> AlterPartitionResponse {
        let refused =
            |error: ResponseError| AlterPartitionResponse::default().with_error_code(error.code());
        let Some(context) = self.context.as_ref() else {
            return refused(ResponseError::NotController);
        };
        let broker = request.broker_id.0;
        match context.live_brokers.get(&broker) {
            Some(live) if request.broker_epoch == -1 || request.broker_epoch == live.epoch => {}
            _ => return refused(ResponseError::StaleBrokerEpoch),
        }
        // Each partition's verdict, in request order.
        let mut verdicts: Vec<PartitionVerdict> = Vec::new();
        for topic in &request.topics {
            let name = context
                .topics
                .iter()
                .find(|(_, t)| t.id == topic.topic_id)
                .map(|(name, _)| name.clone());
            for partition in &topic.partitions {
                let index = partition.partition_index;
                let Some(name) = name.clone() else {
                    verdicts.push((
                        topic.topic_id,
                        index,
                        None,
                        Verdict::Refused(ResponseError::UnknownTopicId),
                    ));
                    continue;
                };
                let topic_context = &context.topics[&name];
                let held = usize::try_from(index)
                    .ok()
                    .and_then(|i| Some((i, topic_context.states.get(i)?.as_ref()?)));
                let Some((i, (state, state_version))) = held else {
                    verdicts.push((
                        topic.topic_id,
                        index,
                        None,
                        Verdict::Refused(ResponseError::UnknownTopicOrPartition),
                    ));
                    continue;
                };
                let isr = if version >= 3 {
                    partition
                        .new_isr_with_epochs
                        .iter()
                        .map(|b| b.broker_id.0)
                        .collect()
                } else {
                    partition.new_isr.iter().map(|b| b.0).collect()
                };
                let proposed = ProposedState {
                    leader_epoch: partition.leader_epoch,
                    partition_epoch: partition.partition_epoch,
                    isr,
                    leader_recovery_state: partition.leader_recovery_state,
                };
                let verdict = if state.leader != broker {
                    Verdict::Refused(ResponseError::NotLeaderOrFollower)
                } else {
                    check_proposal(
                        state,
                        *state_version,
                        &proposed,
                        &topic_context.assignment[i],
                        |id| context.is_eligible(id),
                        version,
                    )
                };
                verdicts.push((topic.topic_id, index, Some((name, i)), verdict));
            }
        }
        let writes: Vec<(String, usize, TopicPartitionStateZNode)> = verdicts
            .iter()
            .filter_map(|(_, _, at, verdict)| match (at, verdict) {
                (Some((name, i)), Verdict::Write(state)) => Some((name.clone(), *i, state.clone())),
                _ => None,
            })
            .collect();
        let outcome = if writes.is_empty() {
            StatesWritten::default()
        } else {
            match self.write_states(writes).await {
                Ok(outcome) => outcome,
                Err(_) => return refused(ResponseError::NotController),
            }
        };
        if !outcome.written.is_empty() || !outcome.read_again.is_empty() {
            self.send_update_metadata();
        }
        let written = outcome.written;
        let Some(context) = self.context.as_ref() else {
            return refused(ResponseError::NotController);
        };
        let mut topics: Vec<TopicData> = Vec::new();
        for (topic_id, index, at, verdict) in verdicts {
            let answer = PartitionData::default().with_partition_index(index);
            let answer = match (&at, verdict) {
                (_, Verdict::Refused(error)) => answer.with_error_code(error.code()),
                (Some((name, i)), Verdict::Write(_)) if !written.contains(&(name.clone(), *i)) => {
                    answer.with_error_code(ResponseError::InvalidUpdateVersion.code())
                }
                (Some((name, i)), _) => {
                    let (state, state_version) = context.topics[name].states[*i]
                        .as_ref()
                        .expect("a checked partition has a state");
                    answer
                        .with_leader_id(BrokerId(state.leader))
                        .with_leader_epoch(state.leader_epoch)
                        .with_isr(state.isr.iter().map(|id| BrokerId(*id)).collect())
                        .with_leader_recovery_state(state.leader_recovery_state)
                        .with_partition_epoch(*state_version)
                }
                (None, _) => unreachable!("only known partitions are written or unchanged"),
            };
            match topics.last_mut() {
                Some(topic) if topic.topic_id == topic_id => topic.partitions.push(answer),
                _ => topics.push(
                    TopicData::default()
                        .with_topic_id(topic_id)
                        .with_partitions(vec![answer]),
                ),
            }
        }
        // The committed ISR is answered; one that grew may then complete a
        // reassignment (Kafka's maybeCompleteReassignment), whose new leader
        // epoch reaches the leader with LeaderAndIsr.
        for (name, partition) in &written {
            let reassigning = self
                .context
                .as_ref()
                .is_some_and(|context| context.topics[name].reassignments.contains_key(partition));
            if reassigning {
                if let Err(error) = self
                    .maybe_complete_reassignment(name, *partition, &[])
                    .await
                {
                    tracing::error!(topic = name, partition, %error, "cannot complete the reassignment");
                }
            }
        }
        AlterPartitionResponse::default().with_topics(topics)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn current(isr: &[i32]) -> TopicPartitionStateZNode {
        TopicPartitionStateZNode {
            leader: 1,
            leader_epoch: 4,
            isr: isr.to_vec(),
            controller_epoch: 2,
            leader_recovery_state: RECOVERED,
        }
    }

    fn proposed(leader_epoch: i32, partition_epoch: i32, isr: &[i32]) -> ProposedState {
        ProposedState {
            leader_epoch,
            partition_epoch,
            isr: isr.to_vec(),
            leader_recovery_state: RECOVERED,
        }
    }

    #[test]
    fn kafkas_checks_in_kafkas_order() {
        let check = |state: &ProposedState, live: &[i32]| {
            check_proposal(
                &current(&[1, 2]),
                7,
                state,
                &[1, 2, 3],
                |id| live.contains(&id),
                3,
            )
        };
        let all = [1, 2, 3];
        assert_eq!(
            check(&proposed(5, 7, &[1]), &all),
            Verdict::Refused(ResponseError::NotController)
        );
        assert_eq!(
            check(&proposed(4, 8, &[1]), &all),
            Verdict::Refused(ResponseError::NotController)
        );
        assert_eq!(
            check(&proposed(3, 7, &[1]), &all),
            Verdict::Refused(ResponseError::FencedLeaderEpoch)
        );
        assert_eq!(check(&proposed(4, 6, &[1, 2]), &all), Verdict::Unchanged);
        assert_eq!(
            check(&proposed(4, 6, &[1]), &all),
            Verdict::Refused(ResponseError::InvalidUpdateVersion)
        );
        assert_eq!(
            check(&proposed(4, 7, &[1, 2, 3]), &[1, 2]),
            Verdict::Refused(ResponseError::IneligibleReplica)
        );
        assert_eq!(
            check(&proposed(4, 7, &[1, 2, 4]), &[1, 2, 4]),
            Verdict::Refused(ResponseError::IneligibleReplica),
            "not a replica"
        );
        assert_eq!(
            check(&proposed(4, 7, &[1, 2, 3]), &all),
            Verdict::Write(current(&[1, 2, 3]))
        );
        assert_eq!(
            check(&proposed(4, 7, &[1]), &all),
            Verdict::Write(current(&[1]))
        );
        let mut recovering = proposed(4, 7, &[1, 2]);
        recovering.leader_recovery_state = RECOVERING;
        assert_eq!(
            check(&recovering, &all),
            Verdict::Refused(ResponseError::InvalidRequest)
        );
    }
}
