//! The requests the controller sends brokers, built from its context (Kafka's
//! ControllerBrokerRequestBatch): UpdateMetadata with every live broker and
//! every partition's state, each copy carrying its recipient's broker epoch.

use super::context::{ControllerContext, TopicContext};
use crate::protocol::inter_broker::{
    security_protocol_id, BrokerId, StrBytes, TopicName, UpdateMetadataBroker,
    UpdateMetadataEndpoint, UpdateMetadataPartitionState, UpdateMetadataRequest,
    UpdateMetadataTopicState,
};

/// The leader Kafka sends for a partition of a topic being deleted
/// (`LeaderAndIsr.LeaderDuringDelete`): brokers drop it from their cache.
pub const LEADER_DURING_DELETE: i32 = -2;

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
                .filter(|id| !context.live_brokers.contains_key(id))
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
/// and the partitions of `deleted` topics with the leader `-2`.
pub fn update_metadata(
    context: &ControllerContext,
    controller_id: i32,
    deleted: &[(String, TopicContext)],
) -> Vec<(i32, UpdateMetadataRequest)> {
    let live_brokers: Vec<UpdateMetadataBroker> = context
        .live_brokers
        .values()
        .map(|live| {
            let broker = &live.info.broker;
            UpdateMetadataBroker::default()
                .with_id(BrokerId(broker.id))
                .with_rack(live.info.rack.clone().map(StrBytes::from_string))
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
        .map(|(name, topic)| topic_state(context, name, topic, false))
        .chain(
            deleted
                .iter()
                .map(|(name, topic)| topic_state(context, name, topic, true)),
        )
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
