//! Kafka's `AlterPartitionManager`, per shard: the ISR changes this shard's
//! leaders propose go to the controller in AlterPartition v3, batched, one
//! request in flight; a request that finds no controller (or one that says
//! it is not) is sent again after 50 ms, as Kafka retries it. Each proposal
//! is answered with the state the controller committed, or its error.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Duration;

use futures_channel::oneshot;
use glommio::sync::Semaphore;
use kafka_protocol::messages::alter_partition_request::{BrokerState, PartitionData, TopicData};
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse, ApiKey, BrokerId};
use tracing::warn;
use uuid::Uuid;

use super::partition_state::LeaderAndIsr;
use crate::metadata::image::MetadataImage;
use crate::network::broker_connection::BrokerConnection;
use crate::protocol::{call, ResponseError};

const ALTER_PARTITION_VERSION: i16 = 3;
const RETRY_BACKOFF: Duration = Duration::from_millis(50);
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;
/// At most this many partitions wait; a leader proposes one change per
/// partition at a time, so this bounds the partitions a shard leads.
pub const MAX_QUEUED_PROPOSALS: usize = 100_000;

type Answer = Result<LeaderAndIsr, ResponseError>;

/// A partition as AlterPartition names it: topic id and index.
type PartitionKey = (Uuid, i32);

struct Proposal {
    state: LeaderAndIsr,
    reply: oneshot::Sender<Answer>,
}

/// Proposals by partition; a topic's partitions sit together, as the
/// request groups them.
type Proposals = BTreeMap<PartitionKey, Proposal>;

pub struct AlterPartitionManager {
    broker_id: i32,
    inter_broker_listener_name: String,
    request_timeout: Duration,
    image: RefCell<Arc<MetadataImage>>,
    queued: RefCell<Proposals>,
    /// Signalled when a proposal is queued.
    queued_signal: Semaphore,
    sender_running: Cell<bool>,
}

impl AlterPartitionManager {
    pub fn new(
        broker_id: i32,
        inter_broker_listener_name: String,
        request_timeout: Duration,
        image: Arc<MetadataImage>,
    ) -> Self {
        Self {
            broker_id,
            inter_broker_listener_name,
            request_timeout,
            image: RefCell::new(image),
            queued: RefCell::new(BTreeMap::new()),
            queued_signal: Semaphore::new(0),
            sender_running: Cell::new(false),
        }
    }

    /// Where the controller is, and this broker's epoch.
    pub fn set_image(&self, image: Arc<MetadataImage>) {
        *self.image.borrow_mut() = image;
    }

    /// Proposes `state` (the leader's epoch and partition epoch, the new ISR)
    /// and resolves with the controller's answer. A newer proposal for the
    /// same partition replaces one not yet sent (OPERATION_NOT_ATTEMPTED).
    pub async fn submit(self: &Rc<Self>, partition: PartitionKey, state: LeaderAndIsr) -> Answer {
        let (reply, answer) = oneshot::channel();
        {
            let mut queued = self.queued.borrow_mut();
            assert!(
                queued.len() < MAX_QUEUED_PROPOSALS,
                "one proposal per led partition"
            );
            if let Some(replaced) = queued.insert(partition, Proposal { state, reply }) {
                let _ = replaced
                    .reply
                    .send(Err(ResponseError::OperationNotAttempted));
            }
        }
        self.queued_signal.signal(1);
        if !self.sender_running.replace(true) {
            let manager = self.clone();
            glommio::spawn_local(async move { manager.send_forever().await }).detach();
        }
        answer
            .await
            .unwrap_or(Err(ResponseError::OperationNotAttempted))
    }

    async fn send_forever(self: Rc<Self>) {
        let mut connection: Option<(i32, BrokerConnection)> = None;
        loop {
            if self.queued_signal.acquire(1).await.is_err() {
                return;
            }
            let batch = std::mem::take(&mut *self.queued.borrow_mut());
            if batch.is_empty() {
                continue; // taken by the batch of an earlier signal
            }
            match self.send(&mut connection, &batch).await {
                Ok(response) => self.answer(batch, response),
                Err(why) => {
                    warn!(%why, partitions = batch.len(), "AlterPartition not answered; retrying");
                    self.requeue(batch);
                    glommio::timer::sleep(RETRY_BACKOFF).await;
                }
            }
        }
    }

    /// Proposals to send again, unless a newer one for their partition came.
    fn requeue(&self, batch: Proposals) {
        let mut queued = self.queued.borrow_mut();
        for (partition, proposal) in batch {
            match queued.entry(partition) {
                std::collections::btree_map::Entry::Occupied(_) => {
                    let _ = proposal
                        .reply
                        .send(Err(ResponseError::OperationNotAttempted));
                }
                std::collections::btree_map::Entry::Vacant(slot) => {
                    slot.insert(proposal);
                }
            }
        }
        drop(queued);
        self.queued_signal.signal(1);
    }

    async fn send(
        &self,
        connection: &mut Option<(i32, BrokerConnection)>,
        batch: &Proposals,
    ) -> Result<AlterPartitionResponse, String> {
        let image = self.image.borrow().clone();
        let controller = image.controller_id;
        let endpoint = image
            .brokers
            .get(&controller)
            .and_then(|broker| broker.endpoint(&self.inter_broker_listener_name))
            .ok_or_else(|| format!("no controller known (controller id {controller})"))?;
        if connection.as_ref().is_none_or(|(id, _)| *id != controller) {
            *connection = Some((
                controller,
                BrokerConnection::new(
                    format!("{}:{}", endpoint.host, endpoint.port),
                    self.request_timeout,
                    MAX_RESPONSE_BYTES,
                ),
            ));
        }
        let mut topics: BTreeMap<Uuid, Vec<PartitionData>> = BTreeMap::new();
        for ((topic_id, partition), proposal) in batch {
            let state = &proposal.state;
            topics.entry(*topic_id).or_default().push(
                PartitionData::default()
                    .with_partition_index(*partition)
                    .with_leader_epoch(state.leader_epoch)
                    // ZooKeeper-mode brokers send no broker epochs here.
                    .with_new_isr_with_epochs(
                        state
                            .isr
                            .iter()
                            .map(|id| {
                                BrokerState::default()
                                    .with_broker_id(BrokerId(*id))
                                    .with_broker_epoch(-1)
                            })
                            .collect(),
                    )
                    .with_leader_recovery_state(state.leader_recovery_state)
                    .with_partition_epoch(state.partition_epoch),
            );
        }
        let request = AlterPartitionRequest::default()
            .with_broker_id(BrokerId(self.broker_id))
            .with_broker_epoch(image.broker_epoch)
            .with_topics(
                topics
                    .into_iter()
                    .map(|(topic_id, partitions)| {
                        TopicData::default()
                            .with_topic_id(topic_id)
                            .with_partitions(partitions)
                    })
                    .collect(),
            );
        let (_, connection) = connection.as_mut().expect("made above");
        let response: AlterPartitionResponse = call(
            connection,
            ApiKey::AlterPartition,
            ALTER_PARTITION_VERSION,
            &self.broker_id.to_string(),
            &request,
        )
        .await?;
        match ResponseError::try_from_code(response.error_code) {
            None => Ok(response),
            Some(error) => Err(format!("the controller answered {error:?}")),
        }
    }

    /// Each proposal's answer; a partition the response forgot is sent again.
    fn answer(&self, mut batch: Proposals, response: AlterPartitionResponse) {
        for topic in response.topics {
            for partition in topic.partitions {
                let Some(proposal) = batch.remove(&(topic.topic_id, partition.partition_index))
                else {
                    continue;
                };
                let answer = match ResponseError::try_from_code(partition.error_code) {
                    Some(error) => Err(error),
                    None => Ok(LeaderAndIsr {
                        leader: partition.leader_id.0,
                        leader_epoch: partition.leader_epoch,
                        partition_epoch: partition.partition_epoch,
                        isr: partition.isr.iter().map(|id| id.0).collect(),
                        replicas: proposal.state.replicas.clone(),
                        leader_recovery_state: partition.leader_recovery_state,
                    }),
                };
                let _ = proposal.reply.send(answer);
            }
        }
        if !batch.is_empty() {
            self.requeue(batch);
        }
    }
}
