//! The requests the controller sends brokers, built from its context (Kafka's
//! ControllerBrokerRequestBatch): UpdateMetadata with every live broker and
//! every partition's state, each copy carrying its recipient's broker epoch.

use super::context::{ControllerContext, TopicContext};
use crate::protocol::inter_broker::{
    security_protocol_id, BrokerId, StrBytes, TopicName, UpdateMetadataBroker,
    UpdateMetadataEndpoint, UpdateMetadataPartitionState, UpdateMetadataRequest,
    UpdateMetadataTopicState, LEADER_DURING_DELETE,
};

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

#[cfg(test)]
mod tests {
    use std::collections::BTreeMap;
    use std::sync::Arc;

    use super::*;
    use crate::controller::context::LiveBroker;
    use crate::metadata::image::Broker;
    use crate::metadata::kafka_zk_client::ControllerEpoch;
    use crate::metadata::znodes::{BrokerIdZNode, TopicPartitionStateZNode};

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
            config_version: None,
            log_config: Arc::new(Default::default()),
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
                },
                rack: None,
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
        let deleted = vec![("gone".to_owned(), topic(vec![vec![2]], 2))];
        let requests = update_metadata(&context, 1, &deleted);
        let epochs: Vec<(i32, i64)> = requests
            .iter()
            .map(|(id, r)| (*id, r.broker_epoch))
            .collect();
        assert_eq!(epochs, vec![(1, 10), (2, 20)]);
        let request = &requests[0].1;
        assert_eq!((request.controller_id.0, request.controller_epoch), (1, 5));
        assert_eq!(request.live_brokers.len(), 2);
        let kept = &request.topic_states[0].partition_states[0];
        assert_eq!(
            (kept.leader.0, kept.leader_epoch, kept.zk_version),
            (1, 3, 4)
        );
        assert_eq!(
            kept.offline_replicas,
            vec![BrokerId(3)],
            "broker 3 is not live"
        );
        let gone = &request.topic_states[1].partition_states[0];
        assert_eq!(gone.leader.0, LEADER_DURING_DELETE);
    }
}
