//! Elections an operator asks for (ElectLeaders: preferred or unclean) and
//! the controller's own auto leader rebalance, Kafka's
//! `processReplicaLeaderElection` and `checkAndTriggerAutoLeaderRebalance`:
//! leadership returns to each partition's first assigned replica, so the
//! leaders stay spread as topic creation placed them.

use std::collections::BTreeSet;

use tracing::info;

use super::election::{self, ElectionType, LeaderChange};
use super::KafkaController;
use crate::metadata::kafka_zk_client::KafkaZkError;
use crate::metadata::zk_client::ZkClient;
use crate::protocol::{ApiError, ResponseError};

/// A partition an election was asked for, and its new leader or why not.
pub type ElectionResult = ((String, i32), Result<i32, ApiError>);

impl<Z: ZkClient> KafkaController<Z> {
    /// ElectLeaders for `partitions` (None: every partition), each answered
    /// as Kafka does: its new leader, or ELECTION_NOT_NEEDED,
    /// PREFERRED_LEADER_NOT_AVAILABLE, ELIGIBLE_LEADERS_NOT_AVAILABLE,
    /// INVALID_TOPIC_EXCEPTION (being deleted), UNKNOWN_TOPIC_OR_PARTITION.
    pub async fn elect_leaders(
        &mut self,
        election_type: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionResult>, ApiError> {
        let context = self.context()?;
        let partitions: BTreeSet<(String, i32)> = match partitions {
            Some(partitions) => partitions.into_iter().collect(),
            None => context
                .topics
                .iter()
                .flat_map(|(name, topic)| {
                    (0..topic.assignment.len() as i32).map(move |p| (name.clone(), p))
                })
                .collect(),
        };
        let eligible = |id| context.is_eligible(id);
        let mut results = Vec::new();
        let mut changes = Vec::new();
        for (topic_name, partition) in partitions {
            let state = context.topics.get(&topic_name).and_then(|topic| {
                let index = usize::try_from(partition).ok()?;
                let (state, _) = topic.states.get(index)?.as_ref()?;
                Some((&topic.assignment[index], state))
            });
            let outcome = match state {
                None => Err(ApiError::new(
                    ResponseError::UnknownTopicOrPartition,
                    format!("partition {topic_name}-{partition} does not exist"),
                )),
                Some(_) if context.is_being_deleted(&topic_name) => Err(ApiError::new(
                    ResponseError::InvalidTopicException,
                    "the topic is being deleted",
                )),
                Some((replicas, state)) => {
                    election::requested(election_type, replicas, state, eligible)
                        .map_err(|error| ApiError::new(error, error.to_string()))
                }
            };
            match outcome {
                Ok(change) => changes.push((topic_name, partition as usize, change)),
                Err(error) => results.push(((topic_name, partition), Err(error))),
            }
        }
        results.extend(self.apply_elections(election_type, changes).await?);
        Ok(results)
    }

    /// Kafka's auto leader rebalance, run every
    /// `leader.imbalance.check.interval.seconds`: a preferred election for
    /// the partitions of every broker that leads fewer than it should by
    /// more than `imbalance_percentage` percent.
    pub async fn check_and_trigger_auto_leader_rebalance(&mut self, imbalance_percentage: u32) {
        let Some(context) = self.context.as_ref() else {
            return;
        };
        let mut keys = Vec::new();
        let mut items = Vec::new();
        for (name, topic) in &context.topics {
            if context.is_being_deleted(name) {
                continue;
            }
            for (partition, replicas) in topic.assignment.iter().enumerate() {
                if let Some(Some((state, _))) = topic.states.get(partition) {
                    keys.push((name.clone(), partition as i32));
                    items.push((replicas.as_slice(), state));
                }
            }
        }
        let eligible = |id| context.is_eligible(id);
        let candidates = election::auto_rebalance_candidates(items, imbalance_percentage, eligible);
        if candidates.is_empty() {
            return;
        }
        let partitions: Vec<(String, i32)> =
            candidates.into_iter().map(|i| keys[i].clone()).collect();
        info!(
            ?partitions,
            "auto leader rebalance: preferred replica election"
        );
        match self
            .elect_leaders(ElectionType::Preferred, Some(partitions))
            .await
        {
            Ok(results) => {
                for ((topic, partition), result) in results {
                    if let Err(error) = result {
                        info!(topic, partition, %error.message, "not rebalanced");
                    }
                }
            }
            Err(error) => info!(%error.message, "auto leader rebalance stopped"),
        }
    }

    /// Writes the elected states (all issued together) and tells every
    /// broker; a state that moved on meanwhile is answered as not elected.
    async fn apply_elections(
        &mut self,
        election_type: ElectionType,
        changes: Vec<(String, usize, LeaderChange)>,
    ) -> Result<Vec<ElectionResult>, ApiError> {
        if changes.is_empty() {
            return Ok(Vec::new());
        }
        let wanted: Vec<((String, i32), i32)> = changes
            .iter()
            .map(|(topic, partition, change)| ((topic.clone(), *partition as i32), change.leader))
            .collect();
        let written = match self.write_partition_states(changes).await {
            Ok(outcome) => outcome.written,
            Err(KafkaZkError::ControllerMoved) => return Err(super::not_controller()),
            Err(error) => return Err(error.into()),
        };
        self.send_update_metadata();
        let not_elected = match election_type {
            ElectionType::Preferred => ResponseError::PreferredLeaderNotAvailable,
            ElectionType::Unclean => ResponseError::EligibleLeadersNotAvailable,
        };
        Ok(wanted
            .into_iter()
            .map(|((topic, partition), leader)| {
                let done = written
                    .iter()
                    .any(|(t, p)| *t == topic && *p as i32 == partition);
                let result = if done {
                    Ok(leader)
                } else {
                    Err(ApiError::new(
                        not_elected,
                        "the partition's state changed during the election",
                    ))
                };
                ((topic, partition), result)
            })
            .collect())
    }
}
