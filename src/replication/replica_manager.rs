//! `ReplicaManager`: the partitions this shard holds a replica of, as Kafka's
//! `kafka.server.ReplicaManager`. It opens and deletes their logs as the
//! metadata places them, keeps each one's `Partition`, and parks fetches that
//! found too little (Kafka's fetch purgatory). Requests for a partition on
//! another shard reach it over the mesh; this is the shard-local half.

use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::time::Instant;

use futures_lite::future::or;
use shards::log::{FetchWatch, LogManager, TopicPartition};
use tracing::warn;

use super::partition::{Partition, PartitionState};
use crate::metadata::image::{kafka_uuid_string, MetadataImage};
use crate::protocol::ResponseError;

/// A parked fetch on every shard it waits on: the shard it arrived on and a
/// number from that shard's count.
pub type ParkedFetchId = (usize, u64);

pub struct ReplicaManager {
    shard_id: usize,
    local_broker_id: i32,
    log_manager: Rc<LogManager>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    /// Fetches parked on this shard's partitions, so the shard a fetch arrived
    /// on can release them. A connection has one request in flight: about one
    /// entry per connection fetching from here.
    parked_fetches: RefCell<HashMap<ParkedFetchId, Rc<FetchWatch>>>,
    next_parked_fetch: Cell<u64>,
}

/// A fetch parked on this shard's partitions: its watch registered with them
/// and in `ReplicaManager::parked_fetches`, until dropped.
struct ParkedFetch<'a> {
    replica_manager: &'a ReplicaManager,
    id: ParkedFetchId,
    watch: Rc<FetchWatch>,
    partitions: Vec<Rc<Partition>>,
}

impl<'a> ParkedFetch<'a> {
    fn register(
        replica_manager: &'a ReplicaManager,
        id: ParkedFetchId,
        partitions: Vec<Rc<Partition>>,
    ) -> Self {
        let watch = Rc::new(FetchWatch::default());
        for partition in &partitions {
            partition.watch_high_watermark(&watch);
        }
        let displaced = replica_manager
            .parked_fetches
            .borrow_mut()
            .insert(id, watch.clone());
        assert!(displaced.is_none(), "parked fetch ids are unique");
        Self {
            replica_manager,
            id,
            watch,
            partitions,
        }
    }
}

impl Drop for ParkedFetch<'_> {
    fn drop(&mut self) {
        for partition in &self.partitions {
            partition.unwatch_high_watermark(&self.watch);
        }
        self.replica_manager
            .parked_fetches
            .borrow_mut()
            .remove(&self.id);
    }
}

impl ReplicaManager {
    pub fn new(shard_id: usize, local_broker_id: i32, log_manager: Rc<LogManager>) -> Self {
        Self {
            shard_id,
            local_broker_id,
            log_manager,
            partitions: RefCell::new(HashMap::new()),
            parked_fetches: RefCell::new(HashMap::new()),
            next_parked_fetch: Cell::new(0),
        }
    }

    /// The partition if this shard holds it; NOT_LEADER_OR_FOLLOWER if not
    /// (it moved or is being deleted), as Kafka answers.
    pub fn online_partition(&self, tp: &TopicPartition) -> Result<Rc<Partition>, ResponseError> {
        self.partitions
            .borrow()
            .get(tp)
            .cloned()
            .ok_or(ResponseError::NotLeaderOrFollower)
    }

    /// The partition if this shard holds it and this broker leads it.
    pub fn leader_partition(&self, tp: &TopicPartition) -> Result<Rc<Partition>, ResponseError> {
        let partition = self.online_partition(tp)?;
        if partition.is_leader() {
            Ok(partition)
        } else {
            Err(ResponseError::NotLeaderOrFollower)
        }
    }

    /// How many partitions this shard leads.
    pub fn leader_count(&self) -> usize {
        self.partitions
            .borrow()
            .values()
            .filter(|p| p.is_leader())
            .count()
    }

    /// Takes a new image: opens the logs of replicas newly placed on this
    /// shard and applies their config and state; a replica no longer held
    /// stops being served, and its log is deleted when StopReplica deleted it
    /// or the image is complete (the controller's own: a log it does not
    /// place is a deleted topic's).
    pub async fn apply_image(&self, image: &MetadataImage) {
        for (topic, partition, replica) in image.local_replicas() {
            if replica.shard != self.shard_id {
                continue;
            }
            let tp = &TopicPartition::new(topic, partition);
            let config = Rc::new((*replica.log_config).clone());
            let log = match self.log_manager.get_log(tp) {
                Some(log) => {
                    if *log.config() != *config {
                        log.update_config(config.clone());
                    }
                    log
                }
                None => {
                    let topic_id = kafka_uuid_string(&replica.state.topic_id);
                    match self
                        .log_manager
                        .get_or_create_log(tp, config.clone(), &topic_id)
                        .await
                    {
                        Ok(log) => log,
                        Err(error) => {
                            warn!(partition = %tp, %error, "cannot open partition log");
                            continue;
                        }
                    }
                }
            };
            let state = PartitionState {
                leader: replica.state.leader,
                leader_epoch: replica.state.leader_epoch,
                isr: replica.state.isr.clone(),
            };
            let known = self.partitions.borrow().get(tp).cloned();
            match known {
                Some(partition) if Rc::ptr_eq(partition.log(), &log) => {
                    partition.update_state(state)
                }
                _ => {
                    let partition = Rc::new(Partition::new(self.local_broker_id, log, state));
                    self.partitions.borrow_mut().insert(tp.clone(), partition);
                }
            }
        }
        for log in self.log_manager.logs() {
            let tp = log.topic_partition();
            let held_here = image
                .local_replica(&tp.topic, tp.partition)
                .is_some_and(|replica| replica.shard == self.shard_id);
            if !held_here {
                self.partitions.borrow_mut().remove(tp);
                if image.complete {
                    self.delete_log(tp).await;
                }
            }
        }
        for (tp, shard) in &image.deleted_replicas {
            if *shard == self.shard_id {
                self.partitions.borrow_mut().remove(tp);
                self.delete_log(tp).await;
            }
        }
    }

    async fn delete_log(&self, tp: &TopicPartition) {
        if let Err(error) = self.log_manager.delete_log(tp).await {
            warn!(partition = %tp, %error, "cannot delete partition log");
        }
    }

    /// A number for a fetch arriving on this shard, unique among its parked fetches.
    pub fn next_parked_fetch_id(&self) -> ParkedFetchId {
        let id = (self.shard_id, self.next_parked_fetch.get());
        self.next_parked_fetch.set(id.1 + 1);
        id
    }

    /// Kafka's DelayedFetch on this shard's partitions: returns when the high
    /// watermark of one of them moves from what the fetch saw (`seen`), when
    /// one goes, when the fetch is released, or at `deadline`.
    pub async fn watch_partitions(
        &self,
        id: ParkedFetchId,
        seen: Vec<(TopicPartition, i64)>,
        deadline: Instant,
    ) {
        let watched: Vec<_> = seen
            .iter()
            .filter_map(|(tp, seen)| Some((self.online_partition(tp).ok()?, *seen)))
            .collect();
        if watched
            .iter()
            .any(|(partition, seen)| partition.high_watermark() != *seen || partition.is_deleted())
        {
            return; // moved (or went) while the request crossed the mesh
        }
        let parked = ParkedFetch::register(
            self,
            id,
            watched
                .into_iter()
                .map(|(partition, _)| partition)
                .collect(),
        );
        let timeout = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
        or(parked.watch.moved(), timeout).await;
    }

    pub fn release_parked_fetch(&self, id: ParkedFetchId) {
        if let Some(watch) = self.parked_fetches.borrow().get(&id) {
            watch.wake();
        }
    }

    pub fn parked_fetch_count(&self) -> usize {
        self.parked_fetches.borrow().len()
    }
}
