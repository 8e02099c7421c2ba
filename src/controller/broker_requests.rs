//! The requests the controller sends brokers, built from its context (Kafka's
//! ControllerBrokerRequestBatch), each copy carrying its recipient's broker
//! epoch: UpdateMetadata with every live broker and every partition's state
//! (a topic being deleted leaderless), LeaderAndIsr to the live replicas of
//! some partitions, StopReplica deleting a topic's replicas.

use std::collections::BTreeMap;

use super::context::{ControllerContext, TopicContext};
use crate::protocol::inter_broker::{
    security_protocol_id, BrokerId, LeaderAndIsrLiveLeader, LeaderAndIsrPartitionState,
    LeaderAndIsrRequest, LeaderAndIsrTopicState, StopReplicaPartitionState, StopReplicaRequest,
    StopReplicaTopicState, StrBytes, TopicName, UpdateMetadataBroker, UpdateMetadataEndpoint,
    UpdateMetadataPartitionState, UpdateMetadataRequest, UpdateMetadataTopicState,
    LEADER_DURING_DELETE,
};

fn topic_name(name: &str) -> TopicName {
    TopicName(StrBytes::from_string(name.to_owned()))
}

fn ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().copied().map(BrokerId).collect()
}

fn topic_state(
    context: &ControllerContext,
    name: &str,
    topic: &TopicContext,
    deleting: bool,
) -> UpdateMetadataTopicState {
    let partitions = topic
        .assignment
        .iter()
        .enumerate()
        .map(|(partition, replicas)| {
            let state = topic.states.get(partition).and_then(Option::as_ref);
            let offline: Vec<i32> = replicas
                .iter()
                .copied()
                .filter(|id| {
                    !context.live_brokers.contains_key(id)
                        || context
                            .replicas_on_offline_dirs
                            .get(id)
                            .is_some_and(|dirs| dirs.contains(&(name.to_owned(), partition as i32)))
                })
                .collect();
            let (leader, leader_epoch, isr, controller_epoch, zk_version) = match state {
                Some((state, version)) => (
                    state.leader,
                    state.leader_epoch,
                    state.isr.clone(),
                    state.controller_epoch,
                    *version,
                ),
                None => (-1, -1, Vec::new(), context.epoch.epoch, -1),
            };
            UpdateMetadataPartitionState::default()
                .with_topic_name(TopicName(StrBytes::from_string(name.to_owned())))
                .with_partition_index(partition as i32)
                .with_controller_epoch(controller_epoch)
                .with_leader(BrokerId(if deleting {
                    LEADER_DURING_DELETE
                } else {
                    leader
                }))
                .with_leader_epoch(leader_epoch)
                .with_isr(ids(&isr))
                .with_zk_version(zk_version)
                .with_replicas(ids(replicas))
                .with_offline_replicas(ids(&offline))
        })
        .collect();
    UpdateMetadataTopicState::default()
        .with_topic_name(TopicName(StrBytes::from_string(name.to_owned())))
        .with_topic_id(topic.id)
        .with_partition_states(partitions)
}

/// One UpdateMetadata per live broker: every live broker, every partition,
/// and the partitions of topics being deleted with the leader `-2`.
pub fn update_metadata(
    context: &ControllerContext,
    controller_id: i32,
) -> Vec<(i32, UpdateMetadataRequest)> {
    let live_brokers: Vec<UpdateMetadataBroker> = context
        .live_brokers
        .values()
        .map(|live| {
            let broker = &live.info.broker;
            UpdateMetadataBroker::default()
                .with_id(BrokerId(broker.id))
                .with_rack(broker.rack.clone().map(StrBytes::from_string))
                .with_endpoints(
                    broker
                        .endpoints
                        .iter()
                        .map(|endpoint| {
                            UpdateMetadataEndpoint::default()
                                .with_host(StrBytes::from_string(endpoint.host.clone()))
                                .with_port(i32::from(endpoint.port))
                                .with_listener(StrBytes::from_string(
                                    endpoint.listener_name.clone(),
                                ))
                                .with_security_protocol(security_protocol_id(
                                    &endpoint.security_protocol,
                                ))
                        })
                        .collect(),
                )
        })
        .collect();
    let topic_states: Vec<UpdateMetadataTopicState> = context
        .topics
        .iter()
        .map(|(name, topic)| topic_state(context, name, topic, context.is_being_deleted(name)))
        .collect();
    context
        .live_brokers
        .iter()
        .map(|(id, live)| {
            let request = UpdateMetadataRequest::default()
                .with_controller_id(BrokerId(controller_id))
                .with_controller_epoch(context.epoch.epoch)
                .with_broker_epoch(live.epoch)
                .with_topic_states(topic_states.clone())
                .with_live_brokers(live_brokers.clone());
            (*id, request)
        })
        .collect()
}

/// LeaderAndIsr for `partitions` (topic and index), one request per live
/// broker holding a replica of any of them, with the endpoints
/// (`inter_broker_listener`) of their live leaders.
pub fn leader_and_isr<'a>(
    context: &ControllerContext,
    controller_id: i32,
    inter_broker_listener: &str,
    partitions: impl IntoIterator<Item = (&'a str, usize)>,
    is_new: bool,
) -> Vec<(i32, LeaderAndIsrRequest)> {
    let mut by_broker: BTreeMap<i32, BTreeMap<&str, Vec<LeaderAndIsrPartitionState>>> =
        BTreeMap::new();
    let mut leaders: BTreeMap<i32, BTreeMap<i32, LeaderAndIsrLiveLeader>> = BTreeMap::new();
    for (name, partition) in partitions {
        let topic = &context.topics[name];
        let Some(Some((state, version))) = topic.states.get(partition) else {
            continue;
        };
        let replicas = &topic.assignment[partition];
        let reassignment = topic
            .reassignments
            .get(&partition)
            .cloned()
            .unwrap_or_default();
        let partition_state = LeaderAndIsrPartitionState::default()
            .with_topic_name(topic_name(name))
            .with_partition_index(partition as i32)
            .with_controller_epoch(state.controller_epoch)
            .with_leader(BrokerId(state.leader))
            .with_leader_epoch(state.leader_epoch)
            .with_isr(ids(&state.isr))
            .with_partition_epoch(*version)
            .with_replicas(ids(replicas))
            .with_adding_replicas(ids(&reassignment.adding))
            .with_removing_replicas(ids(&reassignment.removing))
            .with_is_new(is_new)
            .with_leader_recovery_state(state.leader_recovery_state);
        let leader = context.live_brokers.get(&state.leader).and_then(|live| {
            let endpoint = live.info.broker.endpoint(inter_broker_listener)?;
            Some(
                LeaderAndIsrLiveLeader::default()
                    .with_broker_id(BrokerId(state.leader))
                    .with_host_name(StrBytes::from_string(endpoint.host.clone()))
                    .with_port(i32::from(endpoint.port)),
            )
        });
        for replica in replicas
            .iter()
            .filter(|id| context.live_brokers.contains_key(id))
        {
            by_broker
                .entry(*replica)
                .or_default()
                .entry(name)
                .or_default()
                .push(partition_state.clone());
            if let Some(leader) = &leader {
                leaders
                    .entry(*replica)
                    .or_default()
                    .insert(state.leader, leader.clone());
            }
        }
    }
    by_broker
        .into_iter()
        .map(|(broker, topics)| {
            let topic_states = topics
                .into_iter()
                .map(|(name, states)| {
                    LeaderAndIsrTopicState::default()
                        .with_topic_name(topic_name(name))
                        .with_topic_id(context.topics[name].id)
                        .with_partition_states(states)
                })
                .collect();
            let request = LeaderAndIsrRequest::default()
                .with_controller_id(BrokerId(controller_id))
                .with_controller_epoch(context.epoch.epoch)
                .with_broker_epoch(context.live_brokers[&broker].epoch)
                .with_topic_states(topic_states)
                .with_live_leaders(
                    leaders
                        .remove(&broker)
                        .map(|l| l.into_values().collect())
                        .unwrap_or_default(),
                );
            (broker, request)
        })
        .collect()
}

/// StopReplica deleting `partitions` of `topic` on `broker`, at
/// `leader_epoch` (`EPOCH_DURING_DELETE` for a topic's deletion).
pub fn stop_replica_deleting(
    context: &ControllerContext,
    controller_id: i32,
    broker: i32,
    topic: &str,
    partitions: impl IntoIterator<Item = i32>,
    leader_epoch: i32,
) -> StopReplicaRequest {
    let states = partitions
        .into_iter()
        .map(|partition| {
            StopReplicaPartitionState::default()
                .with_partition_index(partition)
                .with_leader_epoch(leader_epoch)
                .with_delete_partition(true)
        })
        .collect();
    StopReplicaRequest::default()
        .with_controller_id(BrokerId(controller_id))
        .with_controller_epoch(context.epoch.epoch)
        .with_broker_epoch(context.live_brokers[&broker].epoch)
        .with_topic_states(vec![StopReplicaTopicState::default()
            .with_topic_name(topic_name(topic))
            .with_partition_states(states)])
}

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::controller::context::LiveBroker;
    use crate::metadata::image::Broker;
    use crate::metadata::kafka_zk_client::ControllerEpoch;
    use crate::metadata::znodes::{BrokerIdZNode, TopicPartitionStateZNode};
    use crate::protocol::inter_broker::EPOCH_DURING_DELETE;

    fn topic(replicas: Vec<Vec<i32>>, leader: i32) -> TopicContext {
        let states = replicas
            .iter()
            .map(|r| {
                let state = TopicPartitionStateZNode {
                    leader,
                    leader_epoch: 3,
                    isr: r.clone(),
                    controller_epoch: 5,
                    leader_recovery_state: 0,
                };
                Some((state, 4))
            })
            .collect();
        TopicContext {
            id: uuid::Uuid::new_v4(),
            assignment: replicas,
            assignment_version: 0,
            states,
            config_overrides: BTreeMap::new(),
            log_config: Arc::new(Default::default()),
            reassignments: BTreeMap::new(),
        }
    }

    #[test]
    fn one_request_per_live_broker_with_its_epoch_and_deletions_leaderless() {
        let epoch = ControllerEpoch {
            epoch: 5,
            zk_version: 4,
        };
        let mut context = ControllerContext::new(epoch, "c".into());
        for (id, broker_epoch) in [(1, 10), (2, 20)] {
            let info = BrokerIdZNode {
                broker: Broker {
                    id,
                    endpoints: Vec::new(),
                    rack: None,
                },
                timestamp_ms: 0,
            };
            context.live_brokers.insert(
                id,
                LiveBroker {
                    info,
                    epoch: broker_epoch,
                },
            );
        }
        context
            .topics
            .insert("kept".into(), topic(vec![vec![1, 3]], 1));
        context
            .topics
            .insert("gone".into(), topic(vec![vec![2]], 2));
        context
            .topics_being_deleted
            .insert("gone".into(), [(2, 0)].into());
        let requests = update_metadata(&context, 1);
        let epochs: Vec<(i32, i64)> = requests
            .iter()
            .map(|(id, r)| (*id, r.broker_epoch))
            .collect();
        assert_eq!(epochs, vec![(1, 10), (2, 20)]);
        let request = &requests[0].1;
        assert_eq!((request.controller_id.0, request.controller_epoch), (1, 5));
        assert_eq!(request.live_brokers.len(), 2);
        let names: Vec<String> = request
            .topic_states
            .iter()
            .map(|t| t.topic_name.to_string())
            .collect();
        assert_eq!(names, ["gone", "kept"]);
        let kept = &request.topic_states[1].partition_states[0];
        assert_eq!(
            (kept.leader.0, kept.leader_epoch, kept.zk_version),
            (1, 3, 4)
        );
        assert_eq!(
            kept.offline_replicas,
            vec![BrokerId(3)],
            "broker 3 is not live"
        );
        let gone = &request.topic_states[0].partition_states[0];
        assert_eq!(gone.leader.0, LEADER_DURING_DELETE);

        // LeaderAndIsr goes to the live replicas only, with their leaders' endpoints.
        let requests = leader_and_isr(&context, 1, "INTERNAL", [("kept", 0)], true);
        assert_eq!(requests.len(), 1, "broker 3 is not live");
        let (broker, request) = &requests[0];
        assert_eq!((*broker, request.broker_epoch), (1, 10));
        let state = &request.topic_states[0].partition_states[0];
        assert_eq!(
            (
                state.leader.0,
                state.leader_epoch,
                state.partition_epoch,
                state.is_new
            ),
            (1, 3, 4, true)
        );
        assert_eq!(state.replicas, vec![BrokerId(1), BrokerId(3)]);
        assert!(
            request.live_leaders.is_empty(),
            "broker 1 has no INTERNAL listener"
        );
        let stop = stop_replica_deleting(&context, 1, 2, "gone", [0], EPOCH_DURING_DELETE);
        assert_eq!(stop.broker_epoch, 20);
        let partition = &stop.topic_states[0].partition_states[0];
        assert!(partition.delete_partition);
        assert_eq!(partition.leader_epoch, EPOCH_DURING_DELETE);
    }
}
