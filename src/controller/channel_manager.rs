//! Kafka's ControllerChannelManager: one sender task per live broker, each
//! with its own connection to the broker's inter-broker listener. A request is
//! sent again, on a new connection after a backoff, until the broker answers
//! or leaves the cluster.
//!
//! LeaderAndIsr and StopReplica go in order; one merges into the request
//! queued before it when that is of its kind and not yet sent (a partition's
//! newer state replacing its older one). A broker's queue holds at most
//! `MAX_QUEUED_REQUESTS`: when full it is emptied, and the controller sends
//! the broker its whole state instead, as to a broker that joins. Every UpdateMetadata carries
//! the whole state, so it has one slot, sent once the queue is empty: a newer
//! one replaces one not yet sent, keeping the deleted topics the older one
//! announced. The controller never waits for a broker, which matters when the
//! broker is its own and waits for the controller's thread to apply a request.
//! StopReplica's answers come back to the controller as events.

use std::cell::RefCell;
use std::collections::{BTreeMap, VecDeque};
use std::rc::Rc;
use std::time::Duration;

use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::task::JoinHandle;
use shards::log::TopicPartition;
use tracing::{debug, warn};

use crate::metadata::image::EndPoint;
use crate::network::broker_connection::BrokerConnection;
use crate::protocol::inter_broker::{
    ControlApi, LeaderAndIsrRequest, LeaderAndIsrResponse, StopReplicaRequest, StopReplicaResponse,
    UpdateMetadataRequest, UpdateMetadataResponse, LEADER_AND_ISR, LEADER_DURING_DELETE,
    STOP_REPLICA, UPDATE_METADATA,
};
use crate::protocol::ResponseError;

/// Kafka's `controller.socket.timeout.ms`.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);
/// Between attempts at a broker that did not answer.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// LeaderAndIsr and StopReplica requests queued for one broker at most.
const MAX_QUEUED_REQUESTS: usize = 32;
/// The largest response the controller reads.
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// A request to a broker that is sent in order with the others of its kind.
#[derive(Debug, Clone, PartialEq)]
pub enum BrokerRequest {
    LeaderAndIsr(LeaderAndIsrRequest),
    StopReplica(StopReplicaRequest),
}

/// What a broker answered that the controller acts on.
#[derive(Debug)]
pub enum ControllerEvent {
    /// Each partition's error code (0: stopped, its log deleted if asked).
    StopReplicaAnswered {
        broker: i32,
        answers: Vec<(TopicPartition, i16)>,
    },
    /// The partitions a LeaderAndIsr found in an offline log dir
    /// (KAFKA_STORAGE_ERROR).
    ReplicasOnOfflineDirs {
        broker: i32,
        partitions: Vec<TopicPartition>,
    },
}

#[derive(Default)]
struct Pending {
    queue: VecDeque<BrokerRequest>,
    update_metadata: Option<UpdateMetadataRequest>,
}

impl Pending {
    /// The next request to send: the queue's first, then UpdateMetadata.
    fn take_next(&mut self) -> Option<Outgoing> {
        if let Some(request) = self.queue.pop_front() {
            return Some(Outgoing::Ordered(request));
        }
        self.update_metadata.take().map(Outgoing::UpdateMetadata)
    }

    /// Queues `request`; false when the queue was full, and is now empty.
    fn push(&mut self, request: BrokerRequest) -> bool {
        let full = self.queue.len() == MAX_QUEUED_REQUESTS;
        match (self.queue.back_mut(), request) {
            (Some(BrokerRequest::LeaderAndIsr(older)), BrokerRequest::LeaderAndIsr(newer)) => {
                merge_leader_and_isr(older, newer)
            }
            (Some(BrokerRequest::StopReplica(older)), BrokerRequest::StopReplica(newer)) => {
                merge_stop_replica(older, newer)
            }
            (_, _) if full => {
                self.queue.clear();
                return false;
            }
            (_, request) => self.queue.push_back(request),
        }
        true
    }

    fn push_update_metadata(&mut self, request: UpdateMetadataRequest) {
        self.update_metadata = Some(match self.update_metadata.take() {
            Some(older) => superseding(older, request),
            None => request,
        });
    }
}

enum Outgoing {
    Ordered(BrokerRequest),
    UpdateMetadata(UpdateMetadataRequest),
}

/// `newer` into `held`, an entry of `newer` replacing the one of `held` with
/// the same key.
fn replace_by_key<T, K: PartialEq>(held: &mut Vec<T>, newer: Vec<T>, key: impl Fn(&T) -> K) {
    for entry in newer {
        held.retain(|old| key(old) != key(&entry));
        held.push(entry);
    }
}

/// `newer` topics into `held`: a topic both have gets `merge`d, a new one
/// is added.
fn merge_topics<T>(
    held: &mut Vec<T>,
    newer: Vec<T>,
    same_topic: impl Fn(&T, &T) -> bool,
    merge: impl Fn(&mut T, T),
) {
    for topic in newer {
        match held.iter_mut().find(|t| same_topic(t, &topic)) {
            Some(held) => merge(held, topic),
            None => held.push(topic),
        }
    }
}

/// `newer` into `older` (not yet sent): its epochs, and each partition's
/// newer state in place of the older one.
fn merge_leader_and_isr(older: &mut LeaderAndIsrRequest, newer: LeaderAndIsrRequest) {
    older.controller_epoch = newer.controller_epoch;
    older.broker_epoch = newer.broker_epoch;
    merge_topics(
        &mut older.topic_states,
        newer.topic_states,
        |a, b| a.topic_name == b.topic_name && a.topic_id == b.topic_id,
        |held, topic| {
            replace_by_key(&mut held.partition_states, topic.partition_states, |p| {
                p.partition_index
            })
        },
    );
    replace_by_key(&mut older.live_leaders, newer.live_leaders, |l| l.broker_id);
}

fn merge_stop_replica(older: &mut StopReplicaRequest, newer: StopReplicaRequest) {
    older.controller_epoch = newer.controller_epoch;
    older.broker_epoch = newer.broker_epoch;
    merge_topics(
        &mut older.topic_states,
        newer.topic_states,
        |a, b| a.topic_name == b.topic_name,
        |held, topic| {
            replace_by_key(&mut held.partition_states, topic.partition_states, |p| {
                p.partition_index
            })
        },
    );
}

struct BrokerChannel {
    endpoint: EndPoint,
    pending: Rc<RefCell<Pending>>,
    /// One wake-up at most waits: the sender takes whatever is pending.
    wake: LocalSender<()>,
    sender: JoinHandle<()>,
}

/// `newer`, with the deleted topics `older` announced that `newer` does not
/// mention (a broker must still drop them).
fn superseding(
    older: UpdateMetadataRequest,
    mut newer: UpdateMetadataRequest,
) -> UpdateMetadataRequest {
    for topic in older.topic_states {
        let deleting = topic
            .partition_states
            .iter()
            .all(|state| state.leader.0 == LEADER_DURING_DELETE);
        let mentioned = newer
            .topic_states
            .iter()
            .any(|t| t.topic_name == topic.topic_name);
        if deleting && !mentioned {
            newer.topic_states.push(topic);
        }
    }
    newer
}

pub struct ControllerChannelManager {
    controller_id: i32,
    brokers: BTreeMap<i32, BrokerChannel>,
    events: Rc<LocalSender<ControllerEvent>>,
}

impl ControllerChannelManager {
    pub fn new(controller_id: i32, events: LocalSender<ControllerEvent>) -> Self {
        Self {
            controller_id,
            brokers: BTreeMap::new(),
            events: Rc::new(events),
        }
    }

    /// Keeps one channel per broker of `live` (its inter-broker endpoint):
    /// new brokers get one, gone or moved ones lose theirs.
    pub fn set_brokers(&mut self, live: &BTreeMap<i32, EndPoint>) {
        let gone: Vec<i32> = self
            .brokers
            .iter()
            .filter(|(id, channel)| live.get(id) != Some(&channel.endpoint))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            let channel = self.brokers.remove(&id).expect("listed");
            channel.sender.cancel();
        }
        for (id, endpoint) in live {
            if self.brokers.contains_key(id) {
                continue;
            }
            let pending: Rc<RefCell<Pending>> = Rc::default();
            let (wake, woken) = local_channel::new_bounded(1);
            let sender = glommio::spawn_local(send_loop(
                self.controller_id,
                *id,
                endpoint.clone(),
                pending.clone(),
                woken,
                self.events.clone(),
            ))
            .detach();
            self.brokers.insert(
                *id,
                BrokerChannel {
                    endpoint: endpoint.clone(),
                    pending,
                    wake,
                    sender,
                },
            );
        }
    }

    /// Hands a request to its broker's sender (dropped for a broker that is
    /// not live: it is told everything when it comes back). False when the
    /// broker's queue was full and was emptied: the caller sends it its whole
    /// state.
    pub fn send(&self, broker: i32, request: BrokerRequest) -> bool {
        let mut queued = true;
        self.with_pending(broker, |pending| queued = pending.push(request));
        queued
    }

    /// Hands each UpdateMetadata to its broker's sender, replacing one not yet sent.
    pub fn send_update_metadata(&self, requests: Vec<(i32, UpdateMetadataRequest)>) {
        for (id, request) in requests {
            self.with_pending(id, |pending| pending.push_update_metadata(request));
        }
    }

    fn with_pending(&self, broker: i32, change: impl FnOnce(&mut Pending)) {
        let Some(channel) = self.brokers.get(&broker) else {
            return;
        };
        change(&mut channel.pending.borrow_mut());
        // Full: a wake-up is already waiting, and it takes this one.
        let _ = channel.wake.try_send(());
    }

    /// Stops every sender (this broker is no longer the controller).
    pub fn shutdown(&mut self) {
        for (_, channel) in std::mem::take(&mut self.brokers) {
            channel.sender.cancel();
        }
    }
}

/// One broker's sender: each request in turn, until the broker answers it.
async fn send_loop(
    controller_id: i32,
    broker: i32,
    endpoint: EndPoint,
    pending: Rc<RefCell<Pending>>,
    woken: LocalReceiver<()>,
    events: Rc<LocalSender<ControllerEvent>>,
) {
    let address = format!("{}:{}", endpoint.host, endpoint.port);
    let mut connection = BrokerConnection::new(address, SOCKET_TIMEOUT, MAX_RESPONSE_BYTES);
    let client_id = controller_id.to_string();
    let mut sender = Sender {
        broker,
        client_id: &client_id,
        connection: &mut connection,
    };
    while woken.recv().await.is_some() {
        loop {
            let next = pending.borrow_mut().take_next();
            match next {
                None => break,
                Some(Outgoing::Ordered(BrokerRequest::LeaderAndIsr(request))) => {
                    let response: LeaderAndIsrResponse =
                        sender.until_answered(LEADER_AND_ISR, &request).await;
                    if response.error_code != 0 {
                        let error = ResponseError::try_from_code(response.error_code);
                        warn!(broker, ?error, "LeaderAndIsr refused");
                    }
                    let partitions = storage_errors(&request, &response);
                    if !partitions.is_empty() {
                        let event = ControllerEvent::ReplicasOnOfflineDirs { broker, partitions };
                        if events.send(event).await.is_err() {
                            return;
                        }
                    }
                }
                Some(Outgoing::Ordered(BrokerRequest::StopReplica(request))) => {
                    let response: StopReplicaResponse =
                        sender.until_answered(STOP_REPLICA, &request).await;
                    let event = ControllerEvent::StopReplicaAnswered {
                        broker,
                        answers: stop_replica_answers(&request, &response),
                    };
                    if events.send(event).await.is_err() {
                        return;
                    }
                }
                Some(Outgoing::UpdateMetadata(mut request)) => loop {
                    match sender
                        .once::<_, UpdateMetadataResponse>(UPDATE_METADATA, &request)
                        .await
                    {
                        Ok(response) => {
                            if response.error_code != 0 {
                                let error = ResponseError::try_from_code(response.error_code);
                                warn!(broker, ?error, "UpdateMetadata refused");
                            }
                            break;
                        }
                        Err(()) => {
                            // What came meanwhile goes instead, with what this one deleted.
                            if let Some(newer) = pending.borrow_mut().update_metadata.take() {
                                request = superseding(request, newer);
                            }
                        }
                    }
                },
            }
        }
    }
}

/// Each partition's answer; a request-wide error counts for every one.
/// The partitions a LeaderAndIsr answer puts in an offline log dir; v5+
/// names them by topic id, earlier versions by name.
fn storage_errors(
    request: &LeaderAndIsrRequest,
    response: &LeaderAndIsrResponse,
) -> Vec<TopicPartition> {
    let storage_error = ResponseError::KafkaStorageError.code();
    let by_name = response
        .partition_errors
        .iter()
        .map(|p| (p.topic_name.to_string(), p.partition_index, p.error_code));
    let by_id = response.topics.iter().flat_map(|topic| {
        let name = request
            .topic_states
            .iter()
            .find(|t| t.topic_id == topic.topic_id)
            .map(|t| t.topic_name.to_string())
            .unwrap_or_default();
        topic
            .partition_errors
            .iter()
            .map(move |p| (name.clone(), p.partition_index, p.error_code))
    });
    by_name
        .chain(by_id)
        .filter(|(name, _, code)| *code == storage_error && !name.is_empty())
        .map(|(name, partition, _)| TopicPartition::new(name, partition))
        .collect()
}

fn stop_replica_answers(
    request: &StopReplicaRequest,
    response: &StopReplicaResponse,
) -> Vec<(TopicPartition, i16)> {
    if response.error_code != 0 {
        let requested = request.topic_states.iter().flat_map(|topic| {
            topic
                .partition_states
                .iter()
                .map(|p| TopicPartition::new(topic.topic_name.to_string(), p.partition_index))
        });
        return requested.map(|tp| (tp, response.error_code)).collect();
    }
    response
        .partition_errors
        .iter()
        .map(|p| {
            let tp = TopicPartition::new(p.topic_name.to_string(), p.partition_index);
            (tp, p.error_code)
        })
        .collect()
}

struct Sender<'a> {
    broker: i32,
    client_id: &'a str,
    connection: &'a mut BrokerConnection,
}

impl Sender<'_> {
    /// One attempt; after a failure, the backoff before the next.
    async fn once<Request, Response>(
        &mut self,
        api: ControlApi,
        request: &Request,
    ) -> Result<Response, ()>
    where
        Request: kafka_protocol_legacy::protocol::Encodable,
        Response: kafka_protocol_legacy::protocol::Decodable,
    {
        match api.call(self.connection, self.client_id, request).await {
            Ok(response) => Ok(response),
            Err(error) => {
                let broker = self.broker;
                debug!(broker, api = api.name, %error, "cannot reach the broker; retrying");
                glommio::timer::sleep(RETRY_BACKOFF).await;
                Err(())
            }
        }
    }

    /// Sends `request` until the broker answers it.
    async fn until_answered<Request, Response>(
        &mut self,
        api: ControlApi,
        request: &Request,
    ) -> Response
    where
        Request: kafka_protocol_legacy::protocol::Encodable,
        Response: kafka_protocol_legacy::protocol::Decodable,
    {
        loop {
            if let Ok(response) = self.once(api, request).await {
                return response;
            }
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::inter_broker::{
        BrokerId, StrBytes, TopicName, UpdateMetadataPartitionState, UpdateMetadataTopicState,
    };

    fn topic(name: &'static str, leader: i32) -> UpdateMetadataTopicState {
        UpdateMetadataTopicState::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(name)))
            .with_partition_states(vec![
                UpdateMetadataPartitionState::default().with_leader(BrokerId(leader))
            ])
    }

    #[test]
    fn a_newer_request_keeps_the_deletions_of_the_one_it_replaces() {
        let older = UpdateMetadataRequest::default().with_topic_states(vec![
            topic("kept", 1),
            topic("gone", LEADER_DURING_DELETE),
            topic("recreated", LEADER_DURING_DELETE),
        ]);
        let newer = UpdateMetadataRequest::default()
            .with_controller_epoch(2)
            .with_topic_states(vec![topic("kept", 2), topic("recreated", 1)]);
        let sent = superseding(older, newer);
        let topics: Vec<(String, i32)> = sent
            .topic_states
            .iter()
            .map(|t| (t.topic_name.to_string(), t.partition_states[0].leader.0))
            .collect();
        assert_eq!(
            topics,
            vec![
                ("kept".into(), 2),
                ("recreated".into(), 1),
                ("gone".into(), LEADER_DURING_DELETE)
            ]
        );
        assert_eq!(sent.controller_epoch, 2);
    }

    fn leader_and_isr(partition: i32, leader_epoch: i32) -> BrokerRequest {
        use crate::protocol::inter_broker::{LeaderAndIsrPartitionState, LeaderAndIsrTopicState};
        BrokerRequest::LeaderAndIsr(LeaderAndIsrRequest::default().with_topic_states(vec![
            LeaderAndIsrTopicState::default()
                .with_topic_name(TopicName(StrBytes::from_static_str("t")))
                .with_partition_states(vec![LeaderAndIsrPartitionState::default()
                    .with_partition_index(partition)
                    .with_leader_epoch(leader_epoch)]),
        ]))
    }

    #[test]
    fn queued_requests_merge_with_their_kind_and_keep_their_order() {
        let mut pending = Pending::default();
        pending.push_update_metadata(UpdateMetadataRequest::default());
        pending.push(leader_and_isr(0, 1));
        pending.push(leader_and_isr(1, 1));
        pending.push(leader_and_isr(0, 2));
        pending.push(BrokerRequest::StopReplica(StopReplicaRequest::default()));
        pending.push(leader_and_isr(2, 1));
        let mut sent = Vec::new();
        while let Some(next) = pending.take_next() {
            sent.push(match next {
                Outgoing::Ordered(BrokerRequest::LeaderAndIsr(request)) => {
                    let states: Vec<(i32, i32)> = request.topic_states[0]
                        .partition_states
                        .iter()
                        .map(|p| (p.partition_index, p.leader_epoch))
                        .collect();
                    format!("LeaderAndIsr {states:?}")
                }
                Outgoing::Ordered(BrokerRequest::StopReplica(_)) => "StopReplica".into(),
                Outgoing::UpdateMetadata(_) => "UpdateMetadata".into(),
            });
        }
        assert_eq!(
            sent,
            [
                "LeaderAndIsr [(1, 1), (0, 2)]",
                "StopReplica",
                "LeaderAndIsr [(2, 1)]",
                "UpdateMetadata"
            ]
        );

        // A full queue is emptied: the controller sends the whole state instead.
        let mut pending = Pending::default();
        for partition in 0..MAX_QUEUED_REQUESTS as i32 {
            let kind = match partition % 2 {
                0 => leader_and_isr(partition, 1),
                _ => BrokerRequest::StopReplica(StopReplicaRequest::default()),
            };
            assert!(pending.push(kind));
        }
        assert_eq!(pending.queue.len(), MAX_QUEUED_REQUESTS);
        assert!(!pending.push(leader_and_isr(99, 1)));
        assert!(pending.queue.is_empty());
        assert!(pending.push(leader_and_isr(99, 1)));
    }
}
