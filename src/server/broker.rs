//! `ShardBroker`: what one shard owns and serves: its logs (through its
//! `LogManager`), its copy of the metadata image, and the partition operations
//! the request handlers call, routed to the owning shard over the mesh.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::BTreeMap;
use std::future::Future;
use std::os::fd::OwnedFd;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::future::or;
use futures_util::future::join_all;
use glommio::sync::Semaphore;
use kafka_protocol::messages::ApiKey;
use shards::log::{LogManager, TopicPartition, WatchedOffset};
use shards::runtime::activity::{self, ActivityKind};
use shards::runtime::{Delivery, ShardMesh};

use super::control::ControlClient;
use super::fetch_session::FetchSessionCache;
use super::producer_id_manager::ProducerIdManager;
use super::shard_balancer::{thread_cpu_time, ShardTraffic};
use crate::config::BrokerConfig;
use crate::coordinator::group::{partition_for, GroupCoordinator, GROUP_METADATA_TOPIC_NAME};
use crate::handlers::RequestDispatcher;
use crate::metadata::image::MetadataImage;
use crate::metrics::request_metrics::Phase;
use crate::metrics::slow_requests::ShardSlowRequests;
use crate::metrics::{ControllerGauges, LogGauges, MetricsSnapshot, ShardMetrics};
use crate::network::{Listener, ShardConnections};
use crate::protocol::ResponseError;
use crate::replication::quota::ReplicationQuotas;
use crate::replication::{
    AppendError, AppendResult, AppendTiming, Handoff, OffsetAndEpoch, Partition, PartitionFetch,
    ReadResult, ReplicaManager, SharedPartitionOffsets,
};

/// The partitions a parked fetch's waking shard read again, by their index in
/// the fetch's `seen`.
pub type WokenReads = Vec<(usize, ReadResult)>;

/// How many shards a partition's work is sent to before it is answered
/// NOT_LEADER_OR_FOLLOWER: a partition moves once a balancing round.
const MAX_ROUTES_PER_PARTITION: usize = 3;

/// How long work sent back by a partition's old shard waits for this
/// shard's image to say where the partition went.
const MOVED_PARTITION_WAIT: Duration = Duration::from_secs(5);

/// A partition's work on the shard it was sent to: done there, or sent back
/// because the partition moved to another shard.
enum Routed<T, F> {
    Done(Result<T, ResponseError>),
    Moved(TopicPartition, F),
}

pub struct ShardBroker {
    pub shard_id: usize,
    pub config: Arc<BrokerConfig>,
    pub log_manager: Rc<LogManager>,
    pub replica_manager: Rc<ReplicaManager>,
    pub control: ControlClient,
    image: RefCell<Arc<MetadataImage>>,
    mesh: OnceCell<ShardMesh<ShardBroker>>,
    pub fetch_sessions: RefCell<FetchSessionCache>,
    /// The groups of the `__consumer_offsets` partitions this shard leads.
    pub groups: Rc<GroupCoordinator>,
    pub metrics: ShardMetrics,
    /// ZooKeeper mode: producer ids from blocks the controller gives.
    producer_ids: ProducerIdManager,
    /// One image applied at a time: the control plane's, or this shard's
    /// own after a log moved between dirs.
    applying_image: Semaphore,
    /// Logs of this shard moving to another log dir (AlterReplicaLogDirs),
    /// with the index of that dir.
    moving_logs: RefCell<BTreeMap<TopicPartition, usize>>,
    /// This shard's listeners and connections, while it serves.
    network: RefCell<Option<ShardNetwork>>,
}

/// This shard's side of the broker's listeners, and its connections.
pub struct ShardNetwork {
    pub connections: Rc<ShardConnections>,
    pub listeners: Vec<Rc<Listener<RequestDispatcher>>>,
}

impl ShardBroker {
    pub fn new(
        shard_id: usize,
        config: Arc<BrokerConfig>,
        log_manager: Rc<LogManager>,
        control: ControlClient,
        image: Arc<MetadataImage>,
        quotas: Arc<ReplicationQuotas>,
        shared_offsets: Arc<SharedPartitionOffsets>,
    ) -> Self {
        // The broker's slots shared among shards; ids interleave so they never clash.
        let fetch_sessions = FetchSessionCache::new(
            config
                .max_incremental_fetch_session_cache_slots
                .div_ceil(config.cores.len()),
            shard_id as i32 + 1,
        );
        let replica_manager = Rc::new(ReplicaManager::new(
            shard_id,
            config.clone(),
            log_manager.clone(),
            image.clone(),
            quotas,
            shared_offsets,
        ));
        let groups = GroupCoordinator::new(config.group.clone(), replica_manager.clone());
        Self {
            shard_id,
            config,
            groups,
            log_manager,
            replica_manager,
            control,
            image: RefCell::new(image),
            mesh: OnceCell::new(),
            fetch_sessions: RefCell::new(fetch_sessions),
            metrics: ShardMetrics::default(),
            producer_ids: ProducerIdManager::default(),
            applying_image: Semaphore::new(1),
            moving_logs: RefCell::new(BTreeMap::new()),
            network: RefCell::new(None),
        }
    }

    /// A producer id no broker of the cluster handed out before: from the
    /// controller's blocks in ZooKeeper mode, else from this broker's own
    /// controller.
    pub async fn allocate_producer_id(&self) -> Result<i64, ResponseError> {
        if self.config.zookeeper.is_some() {
            return self.producer_ids.generate_producer_id(self).await;
        }
        self.control
            .allocate_producer_id()
            .await
            .map_err(|error| error.error)
    }

    /// What this shard reports to a metrics scrape.
    pub fn metrics_snapshot(&self) -> MetricsSnapshot {
        let (connections, connections_moved_in) =
            self.network.borrow().as_ref().map_or((0, 0), |network| {
                (
                    network.connections.open() as u64,
                    network.connections.moved_in(),
                )
            });
        let (topics, requests, shard) = self.metrics.snapshot(
            self.shard_id,
            &glommio::executor().executor_stats(),
            self.mesh().jobs_in_flight(),
            (connections, connections_moved_in),
        );
        let logs: Vec<LogGauges> = self
            .log_manager
            .logs()
            .iter()
            .map(|log| {
                let tp = log.topic_partition();
                LogGauges {
                    topic: tp.topic.clone(),
                    partition: tp.partition,
                    size_bytes: log.size_bytes(),
                    segments: log.segment_count() as u64,
                    log_start_offset: log.log_start_offset(),
                    log_end_offset: log.log_end_offset(),
                }
            })
            .collect();
        let leaders = self.replica_manager.leader_count() as u64;
        let mut groups_by_state = BTreeMap::new();
        for group in self.groups.list_groups().unwrap_or_default() {
            *groups_by_state
                .entry(group.state.name().to_owned())
                .or_default() += 1;
        }
        MetricsSnapshot {
            topics,
            requests,
            logs,
            leaders,
            replication: self.replica_manager.replication_gauges(),
            controller: (self.shard_id == 0).then(|| self.controller_gauges()),
            parked_fetches: self.replica_manager.parked_fetch_count() as u64,
            groups_by_state,
            shard,
        }
    }

    /// This shard's slow requests since `since_ms`, and the activities it
    /// remembers from their time on.
    pub fn slow_requests(&self, since_ms: i64) -> ShardSlowRequests {
        let requests = self.metrics.slow_requests.borrow().since(since_ms);
        let from = requests.iter().map(|r| r.received).min();
        let (activities, activities_since) = match from {
            Some(from) => activity::overlapping(from, Instant::now()),
            None => (
                Vec::new(),
                activity::overlapping(Instant::now(), Instant::now()).1,
            ),
        };
        ShardSlowRequests {
            shard: self.shard_id,
            requests,
            activities,
            activities_since,
        }
    }

    /// The shard serves its listeners from now on, until `close_network`.
    pub fn set_network(&self, network: ShardNetwork) {
        assert!(
            self.network.replace(Some(network)).is_none(),
            "listeners set twice"
        );
    }

    /// The shard stops serving: its listeners (which hold the broker) go.
    pub fn close_network(&self) {
        self.network.take();
    }

    /// Serves a connection another shard sent here, on this shard's side of
    /// its listener; a stopping shard closes it.
    pub fn adopt_connection(&self, listener_name: &str, socket: OwnedFd) {
        let network = self.network.borrow();
        let listener = network.as_ref().and_then(|network| {
            network
                .listeners
                .iter()
                .find(|listener| &*listener.name == listener_name)
        });
        if let Some(listener) = listener {
            listener.adopt(socket);
        }
    }

    /// A fetch session this shard does not have, from the shard that has it:
    /// its connection moved here since (`send_connections_to`). Without it,
    /// the fetch is answered FETCH_SESSION_ID_NOT_FOUND, as for any unknown id.
    pub async fn claim_fetch_session(self: &Rc<Self>, id: i32) {
        let others = (0..self.config.cores.len()).filter(|shard| *shard != self.shard_id);
        let claims = others.map(|shard| {
            self.mesh()
                .invoke_on(shard, self, move |broker: Rc<ShardBroker>| async move {
                    broker.fetch_sessions.borrow_mut().take(id)
                })
        });
        for session in join_all(claims).await.into_iter().flatten().flatten() {
            self.fetch_sessions.borrow_mut().adopt(session);
        }
    }

    /// Every connection of this shard goes to `shard` (None: stays) before
    /// its next request.
    pub fn send_connections_to(&self, shard: Option<usize>) {
        assert_ne!(
            shard,
            Some(self.shard_id),
            "a connection moves to another shard"
        );
        if let Some(network) = &*self.network.borrow() {
            network.connections.send_to(shard);
        }
    }

    /// The next connections of this shard to come to a request go, one each,
    /// to `shards`.
    pub fn send_some_connections_to(&self, shards: Vec<usize>) {
        assert!(
            !shards.contains(&self.shard_id),
            "a connection moves to another shard"
        );
        if let Some(network) = &*self.network.borrow() {
            network.connections.send_some_to(shards);
        }
    }

    pub fn set_mesh(&self, mesh: ShardMesh<ShardBroker>) {
        assert!(self.mesh.set(mesh).is_ok(), "mesh connected twice");
    }

    pub fn mesh(&self) -> &ShardMesh<ShardBroker> {
        self.mesh.get().expect("mesh connected at start")
    }

    /// Whether this broker is the controller, as the image says, and if so
    /// its partitions without a leader and those not led by their preferred
    /// (first) replica.
    fn controller_gauges(&self) -> ControllerGauges {
        let image = self.image.borrow();
        if image.controller_id != self.config.broker_id {
            return ControllerGauges::default();
        }
        let partitions = || image.topics.values().flat_map(|t| &t.partitions);
        ControllerGauges {
            active_controller: true,
            offline_partitions: partitions().filter(|p| p.leader == -1).count() as u64,
            preferred_replica_imbalance: partitions()
                .filter(|p| p.replicas.first() != Some(&p.leader))
                .count() as u64,
        }
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// Takes a new image: opens logs for partitions newly placed here, applies
    /// topic config changes, deletes logs of topics that are gone.
    pub async fn apply_image(&self, image: Arc<MetadataImage>) {
        let _applying = self
            .applying_image
            .acquire_permit(1)
            .await
            .expect("never closed");
        let started = Instant::now();
        let previous = std::mem::replace(&mut *self.image.borrow_mut(), image.clone());
        let deleted: Vec<String> = previous
            .topics
            .values()
            .filter(|old| image.topic(&old.name).is_none_or(|new| new.id != old.id))
            .map(|old| old.name.clone())
            .collect();
        if !deleted.is_empty() {
            self.groups.on_topics_deleted(&deleted);
        }
        self.replica_manager.apply_image(&image).await;
        let offsets_partitions = image
            .topic(GROUP_METADATA_TOPIC_NAME)
            .map_or(0, |topic| topic.partitions.len() as i32);
        for index in 0..offsets_partitions {
            let tp = TopicPartition::new(GROUP_METADATA_TOPIC_NAME, index);
            if let Ok(partition) = self.replica_manager.leader_partition(&tp) {
                self.groups
                    .on_partition_led(index, partition.leader_epoch());
            }
        }
        for led in self.groups.led_partitions() {
            let replica = image.local_replica(GROUP_METADATA_TOPIC_NAME, led);
            let still_led = replica.is_some_and(|replica| {
                replica.shard == self.shard_id
                    && replica.state.leader_and_isr.leader == self.config.broker_id
            });
            if !still_led {
                self.groups.on_partition_gone(led);
            }
        }
        activity::record(ActivityKind::ImageApply, started);
    }

    /// The `__consumer_offsets` partition holding `group_id`, and the shard
    /// of this broker that leads it (and so coordinates the group).
    pub fn group_coordinator_shard(&self, group_id: &str) -> Result<(i32, usize), ResponseError> {
        let image = self.image.borrow();
        let topic = image
            .topic(GROUP_METADATA_TOPIC_NAME)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let partition = partition_for(group_id, topic.partitions.len() as i32);
        match image.local_replica(GROUP_METADATA_TOPIC_NAME, partition) {
            Some(replica) if replica.state.leader_and_isr.leader == self.config.broker_id => {
                Ok((partition, replica.shard))
            }
            _ => Err(ResponseError::NotCoordinator),
        }
    }

    /// Runs `work` on the shard coordinating `group_id`, with that shard's
    /// coordinator and the group's partition.
    pub async fn on_group_coordinator<T, F, Fut>(
        self: &Rc<Self>,
        group_id: &str,
        work: F,
    ) -> Result<T, ResponseError>
    where
        T: Send + 'static,
        F: FnOnce(Rc<GroupCoordinator>, i32) -> Fut + Send + 'static,
        Fut: Future<Output = T> + 'static,
    {
        let (partition, shard) = self.group_coordinator_shard(group_id)?;
        self.mesh()
            .invoke_on(shard, self, move |broker: Rc<ShardBroker>| {
                work(broker.groups.clone(), partition)
            })
            .await
            .map_err(|_| ResponseError::NotCoordinator)
    }

    /// Whether `tp` is leaving this shard for another (`ShardBalancer`):
    /// work for it goes back to the shard that sent it. A request the
    /// hand-off holds (`Handoff`) waits for it to end, either way.
    async fn leaving(&self, tp: &TopicPartition, api: ApiKey) -> bool {
        loop {
            match self.replica_manager.handoff(tp) {
                None => return false,
                Some(Handoff::HandedOff) => return true,
                Some(Handoff::Draining) if api != ApiKey::Produce => return false,
                Some(Handoff::Draining | Handoff::Closing) => {
                    glommio::timer::sleep(Duration::from_millis(1)).await
                }
            }
        }
    }

    /// `hosted_partition`, after the image being applied here, if one is:
    /// the image a shard takes a moved partition with says it is here
    /// before the partition's log is open.
    async fn arrived_partition(
        &self,
        tp: &TopicPartition,
        leader_only: bool,
    ) -> Result<Rc<Partition>, ResponseError> {
        match self.hosted_partition(tp, leader_only) {
            Err(_) if self.applying_image.available() == 0 => {
                drop(
                    self.applying_image
                        .acquire_permit(1)
                        .await
                        .expect("never closed"),
                );
                self.hosted_partition(tp, leader_only)
            }
            hosted => hosted,
        }
    }

    /// Whether this shard's image places this broker's replica of `tp` on
    /// another shard: a partition that moved since the sender looked.
    fn placed_elsewhere(&self, tp: &TopicPartition) -> bool {
        self.image
            .borrow()
            .local_replica(&tp.topic, tp.partition)
            .is_some_and(|replica| replica.shard != self.shard_id)
    }

    /// Waits, at most `MOVED_PARTITION_WAIT`, until this shard's image
    /// places each partition sent back on another shard than the one that
    /// sent it back.
    async fn await_new_shards<F>(&self, pending: &[(usize, TopicPartition, F, Option<usize>)]) {
        let deadline = Instant::now() + MOVED_PARTITION_WAIT;
        let placed_elsewhere = || {
            let image = self.image.borrow();
            pending.iter().all(|(_, tp, _, sent_back_by)| {
                image
                    .local_replica(&tp.topic, tp.partition)
                    .is_none_or(|replica| Some(replica.shard) != *sent_back_by)
            })
        };
        while !placed_elsewhere() && Instant::now() < deadline {
            glommio::timer::sleep(Duration::from_millis(1)).await;
        }
    }

    /// The shard holding this broker's replica of a partition (led here,
    /// with `leader_only`), or Kafka's error for why there is none.
    fn replica_shard(
        &self,
        topic: &str,
        partition: i32,
        leader_only: bool,
    ) -> Result<usize, ResponseError> {
        let image = self.image.borrow();
        match image.local_replica(topic, partition) {
            Some(replica)
                if !leader_only || replica.state.leader_and_isr.leader == self.config.broker_id =>
            {
                Ok(replica.shard)
            }
            Some(_) => Err(ResponseError::NotLeaderOrFollower),
            None if image.partition(topic, partition).is_some() => {
                Err(ResponseError::NotLeaderOrFollower)
            }
            None => Err(ResponseError::UnknownTopicOrPartition),
        }
    }

    /// Appends produced batches (topic, partition, records) as leader, each
    /// on its owning shard, one mesh hop per shard; with acks=all each answers
    /// once the ISR has it (Kafka's DelayedProduce) or at `deadline`. The
    /// answers are in the batches' order.
    pub async fn append_all(
        self: &Rc<Self>,
        batches: Vec<(String, i32, Bytes)>,
        required_acks: i16,
        deadline: Instant,
    ) -> Vec<AppendResult> {
        let sent = Instant::now();
        let work = batches.into_iter().map(|(topic, partition, records)| {
            let append = move |partition: Rc<Partition>| async move {
                let _in_flight = partition.produce_in_flight();
                let started = Instant::now();
                let info = match partition
                    .append_records_to_leader(records, required_acks)
                    .await
                {
                    Ok(info) => info,
                    Err(error) => return Ok(Err(error)),
                };
                let appended = Instant::now();
                if required_acks == -1 {
                    if let Err(error) = partition
                        .wait_for_replication(info.last_offset, deadline)
                        .await
                    {
                        return Ok(Err(AppendError::Refused(error)));
                    }
                }
                let done = Instant::now();
                let timing = AppendTiming {
                    shard_wait: started - sent,
                    append: appended - started,
                    acks_wait: done - appended,
                    appended_at: Some(appended),
                    done_at: Some(done),
                };
                Ok(Ok((info, timing)))
            };
            (TopicPartition::new(topic, partition), append)
        });
        let produce = ApiKey::Produce as i16;
        self.on_partitions(ApiKey::Produce, true, work.collect())
            .await
            .into_iter()
            .map(|appended| match appended {
                Ok(Ok((info, timing))) => {
                    self.metrics
                        .record_phase(produce, Phase::Append, timing.append);
                    if required_acks == -1 {
                        self.metrics
                            .record_phase(produce, Phase::AcksWait, timing.acks_wait);
                    }
                    AppendResult {
                        error: None,
                        error_message: None,
                        base_offset: info.first_offset,
                        log_append_time_ms: info.log_append_time_ms,
                        log_start_offset: info.log_start_offset,
                        timing: Some(timing),
                    }
                }
                Ok(Err(error)) => AppendResult::error(error.response_error(), error.message()),
                Err(error) => AppendResult::error(error, None),
            })
            .collect()
    }

    /// Reads stored batches of partitions, each on its owning shard (one
    /// mesh hop per shard): below the high watermark for a consumer, to the
    /// log end for a follower. With `from_any_replica` (KIP-392) a follower's
    /// replica serves too. A consumer's read of another shard's partition that
    /// it has read to the end is answered here, from the shared high
    /// watermark. The answers are in the reads' order.
    pub async fn read_all(
        self: &Rc<Self>,
        reads: Vec<(TopicPartition, PartitionFetch)>,
        from_any_replica: bool,
    ) -> Vec<ReadResult> {
        let mut answers: Vec<Option<ReadResult>> = Vec::with_capacity(reads.len());
        let mut work = Vec::with_capacity(reads.len());
        for (tp, request) in reads {
            assert_eq!(request.from_any_replica, from_any_replica);
            let answer = self.read_to_the_end(&tp, &request);
            if answer.is_none() {
                let fetch = move |partition: Rc<Partition>| async move {
                    Ok(partition.fetch(request).await)
                };
                work.push((tp, fetch));
            }
            answers.push(answer);
        }
        let mut read = self
            .on_partitions(ApiKey::Fetch, !from_any_replica, work)
            .await
            .into_iter()
            .map(|read| read.unwrap_or_else(ReadResult::error));
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or_else(|| read.next().expect("one read per hop")))
            .collect()
    }

    /// A consumer's read of a partition of another shard, at its high
    /// watermark: nothing to read, answered without a hop (None: read it
    /// there). The leader epoch it names is checked against this shard's
    /// image; a shard that applied a newer one answers the next read.
    fn read_to_the_end(&self, tp: &TopicPartition, request: &PartitionFetch) -> Option<ReadResult> {
        if request.replica_id >= 0 || !request.preferred_read_candidates.is_empty() {
            return None;
        }
        let image = self.image.borrow();
        let replica = image.local_replica(&tp.topic, tp.partition)?;
        let state = &replica.state.leader_and_isr;
        let epoch_matches =
            request.current_leader_epoch < 0 || request.current_leader_epoch == state.leader_epoch;
        let served_here = request.from_any_replica || state.leader == self.config.broker_id;
        if replica.shard == self.shard_id || !epoch_matches || !served_here {
            return None;
        }
        let (high_watermark, log_start_offset) = self.replica_manager.shared_offsets.get(tp)?;
        (request.fetch_offset == high_watermark)
            .then(|| ReadResult::empty(high_watermark, high_watermark, log_start_offset))
    }

    /// OffsetForLeaderEpoch on the owning shard: where `leader_epoch` ends.
    pub async fn last_offset_for_leader_epoch(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64), ResponseError> {
        let api = ApiKey::OffsetForLeaderEpoch;
        self.on_leader_partition(api, topic, partition, move |partition| async move {
            partition.last_offset_for_leader_epoch(current_leader_epoch, leader_epoch)
        })
        .await
    }

    /// Parks a fetch that found too little until the high watermark of one of
    /// its partitions moves from what the fetch saw (`seen`), or until
    /// `deadline`: Kafka's DelayedFetch. Each owning shard watches its own.
    /// Given `reads` (one per partition of `seen`), the shard whose partition
    /// moved reads its partitions again before it answers, so the answer that
    /// wakes the fetch carries them (by their index in `seen`), no second hop
    /// to read them; None at the deadline, or without `reads`.
    pub async fn park_fetch(
        self: &Rc<Self>,
        seen: Vec<(TopicPartition, i64)>,
        reads: Option<Vec<PartitionFetch>>,
        watched: WatchedOffset,
        deadline: Instant,
    ) -> Option<WokenReads> {
        type Watch = (usize, TopicPartition, i64, Option<PartitionFetch>);
        let mut reads = reads.map(Vec::into_iter);
        let mut by_shard: BTreeMap<usize, Vec<Watch>> = BTreeMap::new();
        for (slot, (tp, high_watermark)) in seen.into_iter().enumerate() {
            let read = reads
                .as_mut()
                .map(|reads| reads.next().expect("a read per partition"));
            // A consumer may be parked on a follower (KIP-392).
            if let Ok(shard) = self.replica_shard(&tp.topic, tp.partition, false) {
                by_shard
                    .entry(shard)
                    .or_default()
                    .push((slot, tp, high_watermark, read));
            }
        }
        let id = self.replica_manager.next_parked_fetch_id();
        let others: Vec<usize> = by_shard
            .keys()
            .copied()
            .filter(|shard| *shard != self.shard_id)
            .collect();
        let timeout = deadline.saturating_duration_since(Instant::now());
        // The shard whose job answered first: its watch is gone with the job.
        let answered_by: Rc<Cell<Option<usize>>> = Rc::new(Cell::new(None));
        let mut parked: Vec<Pin<Box<dyn Future<Output = Option<WokenReads>>>>> =
            vec![Box::pin(async move {
                glommio::timer::sleep(timeout).await;
                None
            })];
        for (shard, partitions) in by_shard {
            let broker = self.clone();
            let answered_by = answered_by.clone();
            parked.push(Box::pin(async move {
                let job = move |broker: Rc<ShardBroker>| async move {
                    let seen = partitions
                        .iter()
                        .map(|(_, tp, high_watermark, _)| (tp.clone(), *high_watermark))
                        .collect();
                    let replicas = &broker.replica_manager;
                    if !replicas.watch_partitions(id, seen, watched, deadline).await {
                        return None;
                    }
                    // A partition that moved away is read anew, wherever it went.
                    let reads: Option<Vec<_>> = partitions
                        .into_iter()
                        .map(|(slot, tp, _, read)| {
                            replicas.online_partition(&tp).ok()?;
                            Some((slot, tp, read?))
                        })
                        .collect();
                    let fresh = reads?.into_iter().map(|(slot, tp, read)| {
                        let broker = broker.clone();
                        async move { (slot, broker.read_here(&tp, read).await) }
                    });
                    Some(join_all(fresh).await)
                };
                // Only that shard moves its partitions, and it looks at its
                // channels whenever it is awake: the watch need not wake it.
                let answer = broker
                    .mesh()
                    .invoke_on_with(shard, &broker, job, Delivery::WhenAwake)
                    .await;
                answered_by.set(Some(shard));
                answer.ok().flatten()
            }));
        }
        let first_done = parked
            .into_iter()
            .reduce(|a, b| Box::pin(or(a, b)))
            .expect("the deadline is always there");
        let woken = first_done.await;
        // The watch here went with its future, and the watch of a shard that
        // answered with its job. The other shards release theirs themselves,
        // on a job, rather than by a waker fired from this thread (which can
        // race glommio's teardown of the task it wakes). The release does not
        // wake them either: a watch left a while costs at most a read whose
        // answer nobody awaits. One that finds the channel full is left to the
        // deadline.
        let answered_by = answered_by.get();
        for shard in others
            .into_iter()
            .filter(|shard| Some(*shard) != answered_by)
        {
            self.mesh()
                .try_submit_when_awake(shard, move |broker: Rc<ShardBroker>| async move {
                    broker.replica_manager.release_parked_fetch(id)
                });
        }
        woken
    }

    /// One read of this shard's replica of `tp`, as `read_all` reads it.
    async fn read_here(&self, tp: &TopicPartition, read: PartitionFetch) -> ReadResult {
        match self.hosted_partition(tp, !read.from_any_replica) {
            Ok(partition) => {
                let _in_flight = partition.request_in_flight();
                partition.fetch(read).await
            }
            Err(error) => ReadResult::error(error),
        }
    }

    /// This shard's replica of `tp`, which it must lead with `leader_only`.
    fn hosted_partition(
        &self,
        tp: &TopicPartition,
        leader_only: bool,
    ) -> Result<Rc<Partition>, ResponseError> {
        if leader_only {
            self.replica_manager.leader_partition(tp)
        } else {
            self.replica_manager.online_partition(tp)
        }
    }

    /// ListOffsets on the owning shard.
    pub async fn list_offset(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        timestamp: i64,
        current_leader_epoch: i32,
        from_follower: bool,
    ) -> Result<OffsetAndEpoch, ResponseError> {
        let api = ApiKey::ListOffsets;
        self.on_leader_partition(api, topic, partition, move |partition| async move {
            partition
                .fetch_offset_for_timestamp(timestamp, current_leader_epoch, from_follower)
                .await
        })
        .await
    }

    /// This shard's part of a balancing round (`ShardBalancer`). The last
    /// round's connection hand-offs not taken yet are dropped: this round
    /// counts afresh.
    pub fn shard_traffic(&self) -> ShardTraffic {
        let connections = self.network.borrow().as_ref().map_or(0, |network| {
            network.connections.send_some_to(Vec::new());
            network.connections.open()
        });
        ShardTraffic {
            cpu_time: thread_cpu_time(),
            connections,
            partitions: self
                .replica_manager
                .take_request_counts(GROUP_METADATA_TOPIC_NAME),
        }
    }

    /// Hands a partition this shard leads off for a move to another shard
    /// (`ReplicaManager::hand_off`), between two images; one whose log is
    /// moving between dirs stays. Should the hand-off fail after the
    /// partition stopped, the image is applied again and it serves here as
    /// before.
    pub async fn hand_off_partition(&self, tp: &TopicPartition) -> Result<(), ResponseError> {
        if self.moving_logs.borrow().contains_key(tp) {
            return Err(ResponseError::ReassignmentInProgress);
        }
        // Not under the image's lock, nor with the partition closed.
        self.replica_manager.wait_for_background_flush(tp).await;
        let handed_off = {
            let _applying = self
                .applying_image
                .acquire_permit(1)
                .await
                .expect("never closed");
            self.replica_manager.hand_off(tp).await
        };
        if handed_off.is_err() && self.replica_manager.online_partition(tp).is_err() {
            self.apply_image(self.image()).await;
        }
        handed_off
    }

    /// The partition of a move that did not happen serves here again.
    pub async fn take_back_partition(&self, tp: &TopicPartition) {
        self.replica_manager.forget_handoff(tp);
        self.apply_image(self.image()).await;
    }

    /// The logs of this shard being moved, each with its destination dir
    /// (Kafka's future replicas, for DescribeLogDirs).
    pub fn moving_logs(&self) -> Vec<(TopicPartition, usize)> {
        let moving = self.moving_logs.borrow();
        moving.iter().map(|(tp, dir)| (tp.clone(), *dir)).collect()
    }

    /// AlterReplicaLogDirs for one of this broker's replicas: its log moves
    /// to log dir `dir` on its shard, in the background (Kafka answers
    /// before the copy too); once moved, the image is applied again so the
    /// replica serves from there. REPLICA_NOT_AVAILABLE when this broker has
    /// no log of it.
    pub async fn alter_replica_log_dir(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        dir: usize,
    ) -> Result<(), ResponseError> {
        let shard = self
            .replica_shard(topic, partition, false)
            .map_err(|_| ResponseError::ReplicaNotAvailable)?;
        let tp = TopicPartition::new(topic, partition);
        self.mesh()
            .invoke_on(shard, self, move |broker: Rc<ShardBroker>| async move {
                if broker.log_manager.get_log(&tp).is_none() {
                    return Err(ResponseError::ReplicaNotAvailable);
                }
                if broker.moving_logs.borrow().contains_key(&tp) {
                    return Ok(());
                }
                broker.moving_logs.borrow_mut().insert(tp.clone(), dir);
                glommio::spawn_local(async move {
                    let moved = broker.log_manager.move_log(&tp, dir).await;
                    broker.moving_logs.borrow_mut().remove(&tp);
                    match moved {
                        Ok(_) => broker.apply_image(broker.image()).await,
                        Err(error) => {
                            tracing::warn!(partition = %tp, %error, "cannot move the log")
                        }
                    }
                })
                .detach();
                Ok(())
            })
            .await
            .unwrap_or(Err(ResponseError::ReplicaNotAvailable))
    }

    /// DeleteRecords on the owning shard; returns the new low watermark.
    pub async fn delete_records(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ResponseError> {
        let api = ApiKey::DeleteRecords;
        self.on_leader_partition(api, topic, partition, move |partition| async move {
            partition.delete_records_on_leader(offset).await
        })
        .await
    }

    /// Runs `work` on the shard holding a partition this broker leads, with
    /// its `Partition`; NOT_LEADER_OR_FOLLOWER when the shard no longer has it.
    async fn on_leader_partition<T, F, Fut>(
        self: &Rc<Self>,
        api: ApiKey,
        topic: &str,
        partition: i32,
        work: F,
    ) -> Result<T, ResponseError>
    where
        T: Send + 'static,
        F: FnOnce(Rc<Partition>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ResponseError>> + 'static,
    {
        self.on_partition(api, topic, partition, true, work).await
    }

    /// Runs `work` on the shard of this broker's replica of a partition
    /// (which it must lead, with `leader_only`), for a request of `api`.
    async fn on_partition<T, F, Fut>(
        self: &Rc<Self>,
        api: ApiKey,
        topic: &str,
        partition: i32,
        leader_only: bool,
        work: F,
    ) -> Result<T, ResponseError>
    where
        T: Send + 'static,
        F: FnOnce(Rc<Partition>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ResponseError>> + 'static,
    {
        let tp = TopicPartition::new(topic, partition);
        let mut answers = self.on_partitions(api, leader_only, vec![(tp, work)]).await;
        answers.pop().expect("one answer per partition")
    }

    /// Runs each `work` on the shard of this broker's replica of its
    /// partition (which it must lead, with `leader_only`), for a request of
    /// `api`: one mesh job per shard carries all of that shard's partitions,
    /// so a request costs a hop per shard, not per partition, and each hop
    /// counts once in the API's MeshWaitTimeMs. A partition that moved to
    /// another shard meanwhile (`ShardBalancer`) has its work sent back and
    /// sent on once this shard's image says where it went. The answers are in
    /// order.
    async fn on_partitions<T, F, Fut>(
        self: &Rc<Self>,
        api: ApiKey,
        leader_only: bool,
        work: Vec<(TopicPartition, F)>,
    ) -> Vec<Result<T, ResponseError>>
    where
        T: Send + 'static,
        F: FnOnce(Rc<Partition>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ResponseError>> + 'static,
    {
        let mut answers: Vec<Option<Result<T, ResponseError>>> =
            (0..work.len()).map(|_| None).collect();
        // Each with the shard that sent it back, once one did.
        let mut pending: Vec<(usize, TopicPartition, F, Option<usize>)> = work
            .into_iter()
            .enumerate()
            .map(|(slot, (tp, work))| (slot, tp, work, None))
            .collect();
        let partitions_in_request = pending.len();
        for round in 0..MAX_ROUTES_PER_PARTITION {
            if round > 0 {
                self.await_new_shards(&pending).await;
            }
            let mut by_shard: BTreeMap<usize, Vec<(usize, TopicPartition, F)>> = BTreeMap::new();
            for (slot, tp, work, _) in pending.drain(..) {
                match self.replica_shard(&tp.topic, tp.partition, leader_only) {
                    Ok(shard) => by_shard.entry(shard).or_default().push((slot, tp, work)),
                    Err(error) => answers[slot] = Some(Err(error)),
                }
            }
            let sent = Instant::now();
            let origin = self.shard_id;
            let hops = by_shard.into_iter().map(|(shard, group)| {
                let job = move |broker: Rc<ShardBroker>| async move {
                    let waited = sent.elapsed();
                    let done = join_all(group.into_iter().map(|(slot, tp, work)| {
                        let broker = broker.clone();
                        async move {
                            if broker.leaving(&tp, api).await {
                                return (slot, Routed::Moved(tp, work));
                            }
                            match broker.arrived_partition(&tp, leader_only).await {
                                Ok(partition) => {
                                    partition.count_request_from(origin, partitions_in_request);
                                    let _in_flight = partition.request_in_flight();
                                    (slot, Routed::Done(work(partition).await))
                                }
                                Err(_) if broker.placed_elsewhere(&tp) => {
                                    (slot, Routed::Moved(tp, work))
                                }
                                Err(error) => (slot, Routed::Done(Err(error))),
                            }
                        }
                    }))
                    .await;
                    (waited, done)
                };
                async move { (shard, self.mesh().invoke_on(shard, self, job).await) }
            });
            for (shard, answer) in join_all(hops).await {
                let Ok((waited, done)) = answer else {
                    continue; // the slots left unanswered say NOT_LEADER_OR_FOLLOWER
                };
                if shard != self.shard_id {
                    self.metrics
                        .record_phase(api as i16, Phase::MeshWait, waited);
                }
                for (slot, routed) in done {
                    match routed {
                        Routed::Done(result) => answers[slot] = Some(result),
                        Routed::Moved(tp, work) => pending.push((slot, tp, work, Some(shard))),
                    }
                }
            }
            if pending.is_empty() {
                break;
            }
        }
        answers
            .into_iter()
            .map(|answer| answer.unwrap_or(Err(ResponseError::NotLeaderOrFollower)))
            .collect()
    }
}
