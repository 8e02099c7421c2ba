//! `ReplicaManager`: the partitions this shard holds a replica of, as Kafka's
//! `kafka.server.ReplicaManager`. It opens and deletes their logs as the
//! metadata places them, keeps each one's `Partition`, and parks fetches that
//! found too little (Kafka's fetch purgatory). Requests for a partition on
//! another shard reach it over the mesh; this is the shard-local half.

use super::quota::{is_throttled, ReplicationQuotas, FOLLOWER_REPLICATION_THROTTLED_REPLICAS};
use std::cell::{Cell, RefCell};
use std::collections::HashMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use shards::log::{wall_clock_ms, FetchWatch, LogManager, TopicPartition, WatchedOffset};
use shards::runtime::activity::{self, ActivityKind};
use tracing::warn;

use super::alter_partition_manager::AlterPartitionManager;
use super::partition::{IsrChangeCounts, Partition};
use super::partition_state::Transition;
use super::replica_fetcher::ReplicaFetcherManager;
use super::shared_offsets::SharedPartitionOffsets;
use crate::config::BrokerConfig;
use crate::metadata::image::{kafka_uuid_string, MetadataImage};
use crate::metrics::ReplicationGauges;
use crate::protocol::ResponseError;

/// A parked fetch on every shard it waits on: the shard it arrived on and a
/// number from that shard's count.
pub type ParkedFetchId = (usize, u64);

pub struct ReplicaManager {
    shard_id: usize,
    config: Arc<BrokerConfig>,
    log_manager: Rc<LogManager>,
    /// The followers on this shard fetching from their leaders.
    fetchers: Rc<ReplicaFetcherManager>,
    /// The broker's replication quotas, shared by its shards.
    pub quotas: Arc<ReplicationQuotas>,
    /// ZooKeeper mode: ISR changes to the controller.
    alter_partition_manager: Option<Rc<AlterPartitionManager>>,
    isr_changes: Rc<IsrChangeCounts>,
    partitions: RefCell<HashMap<TopicPartition, Rc<Partition>>>,
    /// Fetches parked on this shard's partitions, so the shard a fetch arrived
    /// on can release them. A connection has one request in flight: about one
    /// entry per connection fetching from here.
    parked_fetches: RefCell<HashMap<ParkedFetchId, Rc<FetchWatch>>>,
    next_parked_fetch: Cell<u64>,
    /// Every shard's partitions' high watermarks, this shard's published here.
    pub shared_offsets: Arc<SharedPartitionOffsets>,
    /// Partitions leaving this shard for another (a shard move), until an
    /// image places them elsewhere.
    handoffs: RefCell<HashMap<TopicPartition, Handoff>>,
}

/// Where a partition leaving this shard stands.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Handoff {
    /// New produces wait; those in flight finish here (acks=all ones with
    /// the followers' fetches, which are still served).
    Draining,
    /// Every new request waits; those in flight finish here.
    Closing,
    /// Out of this shard: its log is in the broker's hands for the next.
    HandedOff,
}

/// How many of a partition's requests (of some kind) are in flight.
type InFlightCount = fn(&Partition) -> usize;

/// The longest a partition leaving this shard holds its new requests while
/// those in flight drain: past it the move is given up, the partition serves
/// on here and the balancer tries again in a later round. A produce can stay
/// in flight for long (an append behind the kernel's dirty-page throttling
/// took 544 ms, an acks=all one waits for its followers); a move must not
/// hold the partition's other requests that long.
const HANDOFF_DRAIN_TIMEOUT: Duration = Duration::from_millis(50);

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
        watched: WatchedOffset,
    ) -> Self {
        let watch = Rc::new(FetchWatch::default());
        for partition in &partitions {
            partition.watch(watched, &watch);
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
            partition.unwatch(&self.watch);
        }
        self.replica_manager
            .parked_fetches
            .borrow_mut()
            .remove(&self.id);
    }
}

impl ReplicaManager {
    pub fn new(
        shard_id: usize,
        config: Arc<BrokerConfig>,
        log_manager: Rc<LogManager>,
        image: Arc<MetadataImage>,
        quotas: Arc<ReplicationQuotas>,
        shared_offsets: Arc<SharedPartitionOffsets>,
    ) -> Self {
        let alter_partition_manager = config.zookeeper.is_some().then(|| {
            Rc::new(AlterPartitionManager::new(
                config.broker_id,
                config.inter_broker_listener_name.clone(),
                Duration::from_millis(config.replication.replica_socket_timeout_ms),
                image,
            ))
        });
        Self {
            shard_id,
            fetchers: Rc::new(ReplicaFetcherManager::new(
                config.broker_id,
                config.replication,
                quotas.clone(),
            )),
            quotas,
            alter_partition_manager,
            isr_changes: Rc::default(),
            config,
            log_manager,
            partitions: RefCell::new(HashMap::new()),
            parked_fetches: RefCell::new(HashMap::new()),
            next_parked_fetch: Cell::new(0),
            shared_offsets,
            handoffs: RefCell::new(HashMap::new()),
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
    /// shard and applies their config, makes each a leader or a follower
    /// as the controller last said (Kafka's `becomeLeaderOrFollower`; a
    /// follower fetches from its leader from its log end), and stops serving
    /// a replica no longer held: its log is deleted when StopReplica deleted
    /// it or the image is complete (the controller's own: a log it does not
    /// place is a deleted topic's).
    pub async fn apply_image(&self, image: &Arc<MetadataImage>) {
        self.fetchers.set_broker_epoch(image.broker_epoch);
        let throttles = image.dynamic_broker_configs.replication_throttles();
        self.quotas
            .leader
            .set_bound(throttles.leader_bytes_per_second);
        self.quotas
            .follower
            .set_bound(throttles.follower_bytes_per_second);
        if let Some(manager) = &self.alter_partition_manager {
            manager.set_image(image.clone());
        }
        let handed_off: Vec<TopicPartition> = self.handoffs.borrow().keys().cloned().collect();
        for tp in handed_off {
            let placed = image.local_replica(&tp.topic, tp.partition);
            if placed.is_some_and(|replica| replica.shard == self.shard_id) {
                continue; // still leaving: the move has not placed it yet
            }
            self.handoffs.borrow_mut().remove(&tp);
            if placed.is_none() && image.complete {
                self.delete_log(&tp).await; // its topic went while it moved
            }
        }
        for (topic, partition, replica) in image.local_replicas() {
            if replica.shard != self.shard_id {
                continue;
            }
            let tp = &TopicPartition::new(topic, partition);
            if self.handoffs.borrow().contains_key(tp) {
                continue;
            }
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
            let known = self.partitions.borrow().get(tp).cloned();
            let partition = match known {
                Some(partition) if Rc::ptr_eq(partition.log(), &log) => partition,
                _ => {
                    let partition = Rc::new(Partition::new(
                        self.config.broker_id,
                        log,
                        replica.state.topic_id,
                        self.config.replication,
                        self.alter_partition_manager.clone(),
                        self.isr_changes.clone(),
                    ));
                    self.partitions
                        .borrow_mut()
                        .insert(tp.clone(), partition.clone());
                    // Replacing what an older log of it published.
                    self.shared_offsets
                        .publish(tp, partition.log().shared_offsets());
                    partition
                }
            };
            let state = &replica.state.leader_and_isr;
            let transition = partition.make_leader_or_follower(state).await;
            let follows = state.leader >= 0 && state.leader != self.config.broker_id;
            let throttled = image.topic(topic).is_some_and(|t| {
                let list = t
                    .config_overrides
                    .get(FOLLOWER_REPLICATION_THROTTLED_REPLICAS);
                is_throttled(
                    list.map(String::as_str),
                    tp.partition,
                    self.config.broker_id,
                )
            });
            self.fetchers.set_throttled(tp, throttled);
            if !follows {
                if transition != Transition::Stale {
                    self.fetchers.remove_partition(tp);
                }
                continue;
            }
            if transition == Transition::Stale && self.fetchers.is_following(tp, state.leader) {
                continue;
            }
            // A follower fetches from its leader once the image knows where
            // the leader listens (UpdateMetadata may come after LeaderAndIsr).
            let leader_address = image.brokers.get(&state.leader).and_then(|broker| {
                broker
                    .endpoint(&self.config.inter_broker_listener_name)
                    .map(|endpoint| format!("{}:{}", endpoint.host, endpoint.port))
            });
            match leader_address {
                Some(address) => self.fetchers.add_partition(
                    partition,
                    replica.state.topic_id,
                    state.leader,
                    address,
                    throttled,
                ),
                None => self.fetchers.remove_partition(tp),
            }
        }
        for log in self.log_manager.logs() {
            let tp = log.topic_partition();
            let held_here = image
                .local_replica(&tp.topic, tp.partition)
                .is_some_and(|replica| replica.shard == self.shard_id);
            if !held_here {
                self.stop_replica(tp);
                if image.complete {
                    self.delete_log(tp).await;
                }
            }
        }
        for (tp, shard) in &image.deleted_replicas {
            if *shard == self.shard_id {
                self.stop_replica(tp);
                self.delete_log(tp).await;
            }
        }
    }

    /// Where `tp` stands if it is leaving this shard.
    pub fn handoff(&self, tp: &TopicPartition) -> Option<Handoff> {
        let handoffs = self.handoffs.borrow();
        if handoffs.is_empty() {
            return None; // every request asks: no hashing while nothing moves
        }
        handoffs.get(tp).copied()
    }

    /// See `Log::wait_for_background_flush`: for a move, before it holds
    /// anything.
    pub async fn wait_for_background_flush(&self, tp: &TopicPartition) {
        if let Some(log) = self.log_manager.get_log(tp) {
            log.wait_for_background_flush().await;
        }
    }

    /// Takes a partition this shard leads out of it for another shard of
    /// the broker: new produces wait while those in flight finish, then
    /// every new request waits while those in flight finish (both drains
    /// within `HANDOFF_DRAIN_TIMEOUT`, or the move is given up), then the
    /// partition stops here and its log is handed off. The partition serves
    /// nowhere until an image places it on its next shard.
    pub async fn hand_off(&self, tp: &TopicPartition) -> Result<(), ResponseError> {
        let partition = self.leader_partition(tp)?;
        let started = Instant::now();
        assert!(
            !self.handoffs.borrow().contains_key(tp),
            "one move of a partition at a time"
        );
        let drains = [
            (
                Handoff::Draining,
                Partition::produces_in_flight as InFlightCount,
            ),
            (Handoff::Closing, Partition::requests_in_flight),
        ];
        let deadline = Instant::now() + HANDOFF_DRAIN_TIMEOUT;
        for (stage, in_flight) in drains {
            self.handoffs.borrow_mut().insert(tp.clone(), stage);
            while in_flight(&partition) > 0 {
                if Instant::now() >= deadline {
                    self.handoffs.borrow_mut().remove(tp);
                    return Err(ResponseError::RequestTimedOut);
                }
                glommio::timer::sleep(Duration::from_millis(1)).await;
            }
        }
        self.handoffs
            .borrow_mut()
            .insert(tp.clone(), Handoff::HandedOff);
        self.stop_replica(tp);
        if let Err(error) = self.log_manager.hand_off(tp).await {
            warn!(partition = %tp, %error, "cannot hand the log off");
            self.handoffs.borrow_mut().remove(tp);
            return Err(error.response_error());
        }
        activity::record(ActivityKind::ShardHandOff, started);
        Ok(())
    }

    /// A hand-off whose move did not happen: the partition is this shard's
    /// again once the image is applied again.
    pub fn forget_handoff(&self, tp: &TopicPartition) {
        self.handoffs.borrow_mut().remove(tp);
    }

    /// Each partition this shard leads (but `__consumer_offsets`', whose
    /// groups live with them), with its requests since the last call by the
    /// shard they arrived on.
    pub fn take_request_counts(&self, excluded_topic: &str) -> Vec<(TopicPartition, Vec<u64>)> {
        self.partitions
            .borrow()
            .iter()
            .filter(|(tp, partition)| tp.topic != excluded_topic && partition.is_leader())
            .map(|(tp, partition)| (tp.clone(), partition.take_request_counts()))
            .collect()
    }

    fn stop_replica(&self, tp: &TopicPartition) {
        self.fetchers.remove_partition(tp);
        if let Some(partition) = self.partitions.borrow_mut().remove(tp) {
            self.shared_offsets
                .withdraw(tp, &partition.log().shared_offsets());
            partition.log().wake_all_watches();
        }
    }

    /// Kafka's `isr-expiration` task: every half `replica.lag.time.max.ms`
    /// each led partition drops the followers that have not caught up.
    pub fn start_isr_expiration(self: &Rc<Self>) {
        let manager = self.clone();
        let interval = Duration::from_millis(
            (self.config.replication.replica_lag_time_max_ms / 2).max(1) as u64,
        );
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(interval).await;
                let led: Vec<Rc<Partition>> = manager
                    .partitions
                    .borrow()
                    .values()
                    .filter(|partition| partition.is_leader())
                    .cloned()
                    .collect();
                let now_ms = wall_clock_ms();
                for partition in led {
                    partition.maybe_shrink_isr(now_ms);
                }
            }
        })
        .detach();
    }

    /// Stops the fetchers (the shard is stopping).
    pub fn shutdown(&self) {
        self.fetchers.shutdown();
    }

    /// What the metrics endpoint reports of replication on this shard.
    pub fn replication_gauges(&self) -> ReplicationGauges {
        let mut gauges = ReplicationGauges {
            followed_partitions: self.fetchers.followed_partition_count() as u64,
            isr_shrinks: self.isr_changes.shrinks.get(),
            isr_expands: self.isr_changes.expands.get(),
            ..ReplicationGauges::default()
        };
        for partition in self.partitions.borrow().values() {
            if !partition.is_leader() {
                continue;
            }
            let (under_replicated, under_min_isr, lag) = partition.replication_status();
            gauges.under_replicated_partitions += u64::from(under_replicated);
            gauges.under_min_isr_partitions += u64::from(under_min_isr);
            gauges.max_follower_lag_messages = gauges.max_follower_lag_messages.max(lag);
        }
        gauges
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

    /// Kafka's DelayedFetch on this shard's partitions: returns when the
    /// watched offset (a consumer's high watermark, a follower's log end) of
    /// one of them moves from what the fetch saw (`seen`), when one goes or
    /// changes leadership, when the fetch is released, or at `deadline`. True
    /// when a partition moved or went: what the fetch should read again.
    pub async fn watch_partitions(
        &self,
        id: ParkedFetchId,
        seen: Vec<(TopicPartition, i64)>,
        watched: WatchedOffset,
        deadline: Instant,
    ) -> bool {
        // A partition no longer here (gone, or moved to another shard)
        // completes the fetch at once, as Kafka's DelayedFetch does for a
        // partition this broker stopped leading: its read says where it is.
        let Ok(watched_partitions) = seen
            .iter()
            .map(|(tp, seen)| Ok((self.online_partition(tp)?, *seen)))
            .collect::<Result<Vec<_>, ResponseError>>()
        else {
            return true;
        };
        if watched_partitions.iter().any(|(partition, seen)| {
            partition.log().watched_offset(watched) != *seen || partition.is_deleted()
        }) {
            return true; // moved (or went) while the request crossed the mesh
        }
        let parked = ParkedFetch::register(
            self,
            id,
            watched_partitions
                .into_iter()
                .map(|(partition, _)| partition)
                .collect(),
            watched,
        );
        let timeout = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
        let moved = or(
            async {
                parked.watch.moved().await;
                true
            },
            async {
                timeout.await;
                false
            },
        )
        .await;
        // A release takes the fetch out of `parked_fetches` before it wakes it.
        moved && self.parked_fetches.borrow().contains_key(&id)
    }

    pub fn release_parked_fetch(&self, id: ParkedFetchId) {
        if let Some(watch) = self.parked_fetches.borrow_mut().remove(&id) {
            watch.wake();
        }
    }

    pub fn parked_fetch_count(&self) -> usize {
        self.parked_fetches.borrow().len()
    }
}
