//! `ShardBroker`: what one shard owns and serves: its logs (through its
//! `LogManager`), its copy of the metadata image, and the partition operations
//! the request handlers call, routed to the owning shard over the mesh.

use std::cell::{Cell, OnceCell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::future::Future;
use std::pin::Pin;
use std::rc::Rc;
use std::sync::Arc;
use std::time::Instant;

use bytes::Bytes;
use futures_lite::future::or;
use shards::log::{FetchWatch, Log, LogManager, TopicPartition};
use shards::runtime::ShardMesh;
use tracing::warn;

use super::control::ControlClient;
use super::fetch_session::FetchSessionCache;
use crate::config::BrokerConfig;
use crate::coordinator::group::{partition_for, GroupCoordinator, GROUP_METADATA_TOPIC_NAME};
use crate::metadata::image::{kafka_uuid_string, MetadataImage};
use crate::metrics::{LogGauges, MetricsSnapshot, ShardMetrics};
use crate::protocol::{Records, ResponseError};

pub struct ShardBroker {
    pub shard_id: usize,
    pub config: Arc<BrokerConfig>,
    pub log_manager: Rc<LogManager>,
    pub control: ControlClient,
    image: RefCell<Arc<MetadataImage>>,
    mesh: OnceCell<ShardMesh<ShardBroker>>,
    pub fetch_sessions: RefCell<FetchSessionCache>,
    /// The groups of the `__consumer_offsets` partitions this shard leads.
    pub groups: Rc<GroupCoordinator>,
    /// Fetches parked on this shard's partitions (Kafka's fetch purgatory), so
    /// the shard a fetch arrived on can release them. A connection has one
    /// request in flight: about one entry per connection fetching from here.
    parked_fetches: RefCell<HashMap<ParkedFetchId, Rc<FetchWatch>>>,
    next_parked_fetch: Cell<u64>,
    pub metrics: ShardMetrics,
}

/// A parked fetch on every shard it waits on: the shard it arrived on and a
/// number from that shard's count.
type ParkedFetchId = (usize, u64);

/// A fetch parked on this shard's partitions: its watch registered with their
/// logs and in `ShardBroker::parked_fetches`, until dropped.
struct ParkedFetch<'a> {
    broker: &'a ShardBroker,
    id: ParkedFetchId,
    watch: Rc<FetchWatch>,
    logs: Vec<Rc<Log>>,
}

impl<'a> ParkedFetch<'a> {
    fn register(broker: &'a ShardBroker, id: ParkedFetchId, logs: Vec<Rc<Log>>) -> Self {
        let watch = Rc::new(FetchWatch::default());
        for log in &logs {
            log.watch_high_watermark(&watch);
        }
        let displaced = broker.parked_fetches.borrow_mut().insert(id, watch.clone());
        assert!(displaced.is_none(), "parked fetch ids are unique");
        Self {
            broker,
            id,
            watch,
            logs,
        }
    }
}

impl Drop for ParkedFetch<'_> {
    fn drop(&mut self) {
        for log in &self.logs {
            log.unwatch_high_watermark(&self.watch);
        }
        self.broker.parked_fetches.borrow_mut().remove(&self.id);
    }
}

/// A partition this broker leads: the shard that owns it and what an append
/// needs from the image, read once on the shard the request arrived on.
pub struct Leader {
    pub shard: usize,
    pub leader_epoch: i32,
    pub isr_size: usize,
    /// The topic's `min.insync.replicas` (its override, else the broker's).
    pub min_insync_replicas: i32,
}

/// One partition's produce outcome.
#[derive(Debug, Clone)]
pub struct AppendResult {
    pub error: Option<ResponseError>,
    pub error_message: Option<String>,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

/// A fetched range at least this long is sent from the page cache with
/// sendfile; a shorter one is copied into the response, which then goes out in
/// one send instead of a send and a sendfile per partition.
const SENDFILE_MIN_BYTES: usize = 64 * 1024;

/// One partition's fetch outcome: the stored batches, as they are.
#[derive(Debug)]
pub struct ReadResult {
    pub error: Option<ResponseError>,
    pub high_watermark: i64,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub records: Option<Records>,
}

impl ReadResult {
    pub fn error(error: ResponseError) -> Self {
        Self {
            error: Some(error),
            high_watermark: -1,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: None,
        }
    }
}

impl ShardBroker {
    pub fn new(
        shard_id: usize,
        config: Arc<BrokerConfig>,
        log_manager: Rc<LogManager>,
        control: ControlClient,
        image: Arc<MetadataImage>,
    ) -> Self {
        // The broker's slots shared among shards; ids interleave so they never clash.
        let fetch_sessions = FetchSessionCache::new(
            config
                .max_incremental_fetch_session_cache_slots
                .div_ceil(config.cores.len()),
            shard_id as i32 + 1,
        );
        let groups = GroupCoordinator::new(config.group.clone(), log_manager.clone());
        Self {
            shard_id,
            config,
            groups,
            log_manager,
            control,
            image: RefCell::new(image),
            mesh: OnceCell::new(),
            fetch_sessions: RefCell::new(fetch_sessions),
            parked_fetches: RefCell::new(HashMap::new()),
            next_parked_fetch: Cell::new(0),
            metrics: ShardMetrics::default(),
        }
    }

    /// What this shard reports to a metrics scrape.
    pub fn metrics_snapshot(&self) -> MetricsSnapshot {
        let (topics, requests, shard) = self.metrics.snapshot(
            self.shard_id,
            &glommio::executor().executor_stats(),
            self.mesh().jobs_in_flight(),
        );
        let image = self.image();
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
        let leaders = logs
            .iter()
            .filter(|log| {
                image
                    .partition(&log.topic, log.partition)
                    .is_some_and(|p| p.leader == self.config.broker_id)
            })
            .count() as u64;
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
            parked_fetches: self.parked_fetches.borrow().len() as u64,
            groups_by_state,
            shard,
        }
    }

    pub fn set_mesh(&self, mesh: ShardMesh<ShardBroker>) {
        assert!(self.mesh.set(mesh).is_ok(), "mesh connected twice");
    }

    pub fn mesh(&self) -> &ShardMesh<ShardBroker> {
        self.mesh.get().expect("mesh connected at start")
    }

    pub fn image(&self) -> Arc<MetadataImage> {
        self.image.borrow().clone()
    }

    /// Takes a new image: opens logs for partitions newly placed here, applies
    /// topic config changes, deletes logs of topics that are gone.
    pub async fn apply_image(&self, image: Arc<MetadataImage>) {
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
        for topic in image.topics.values() {
            let config = Rc::new((*topic.log_config).clone());
            let topic_id = kafka_uuid_string(&topic.id);
            for (index, partition) in topic.partitions.iter().enumerate() {
                if partition.shard != Some(self.shard_id) {
                    continue;
                }
                let tp = TopicPartition::new(topic.name.clone(), index as i32);
                let log = match self.log_manager.get_log(&tp) {
                    Some(log) => {
                        if *log.config() != *config {
                            log.update_config(config.clone());
                        }
                        log
                    }
                    None => match self
                        .log_manager
                        .get_or_create_log(&tp, config.clone(), &topic_id)
                        .await
                    {
                        Ok(log) => log,
                        Err(error) => {
                            warn!(partition = %tp, %error, "cannot open partition log");
                            continue;
                        }
                    },
                };
                // A leader that is its whole ISR has every record replicated.
                if partition.leader == self.config.broker_id
                    && partition.isr == [self.config.broker_id]
                {
                    log.set_high_watermark(log.log_end_offset());
                }
                if topic.name == GROUP_METADATA_TOPIC_NAME
                    && partition.leader == self.config.broker_id
                {
                    self.groups
                        .on_partition_led(index as i32, partition.leader_epoch);
                }
            }
        }
        for led in self.groups.led_partitions() {
            let still_led = image
                .partition(GROUP_METADATA_TOPIC_NAME, led)
                .is_some_and(|p| {
                    p.shard == Some(self.shard_id) && p.leader == self.config.broker_id
                });
            if !still_led {
                self.groups.on_partition_gone(led);
            }
        }
        for log in self.log_manager.logs() {
            let tp = log.topic_partition();
            let placed_here = image
                .partition(&tp.topic, tp.partition)
                .is_some_and(|p| p.shard == Some(self.shard_id));
            if !placed_here {
                if let Err(error) = self.log_manager.delete_log(tp).await {
                    warn!(partition = %tp, %error, "cannot delete partition log");
                }
            }
        }
    }

    /// The `__consumer_offsets` partition holding `group_id`, and the shard
    /// of this broker that leads it (and so coordinates the group).
    pub fn group_coordinator_shard(&self, group_id: &str) -> Result<(i32, usize), ResponseError> {
        let image = self.image.borrow();
        let topic = image
            .topic(GROUP_METADATA_TOPIC_NAME)
            .ok_or(ResponseError::CoordinatorNotAvailable)?;
        let partition = partition_for(group_id, topic.partitions.len() as i32);
        let p = &topic.partitions[partition as usize];
        if p.leader != self.config.broker_id {
            return Err(ResponseError::NotCoordinator);
        }
        let shard = p.shard.ok_or(ResponseError::CoordinatorNotAvailable)?;
        Ok((partition, shard))
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

    /// The partition's leader on this broker, or Kafka's error for why not.
    pub fn route(&self, topic: &str, partition: i32) -> Result<Leader, ResponseError> {
        let image = self.image.borrow();
        let topic = image
            .topic(topic)
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        let p = usize::try_from(partition)
            .ok()
            .and_then(|index| topic.partitions.get(index))
            .ok_or(ResponseError::UnknownTopicOrPartition)?;
        if p.leader != self.config.broker_id {
            return Err(ResponseError::NotLeaderOrFollower);
        }
        Ok(Leader {
            shard: p.shard.ok_or(ResponseError::LeaderNotAvailable)?,
            leader_epoch: p.leader_epoch,
            isr_size: p.isr.len(),
            min_insync_replicas: topic.log_config.min_insync_replicas,
        })
    }

    /// Appends a produced batch on the owning shard.
    pub async fn append(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        records: Bytes,
        required_acks: i16,
    ) -> AppendResult {
        if topic == GROUP_METADATA_TOPIC_NAME {
            // Only the group coordinator writes there, as in Kafka.
            return AppendResult::error(
                ResponseError::InvalidTopicException,
                Some("cannot append to an internal topic".into()),
            );
        }
        let leader = match self.route(topic, partition) {
            Ok(leader) => leader,
            Err(code) => return AppendResult::error(code, None),
        };
        if required_acks == -1 && (leader.isr_size as i32) < leader.min_insync_replicas {
            return AppendResult::error(ResponseError::NotEnoughReplicas, None);
        }
        let tp = TopicPartition::new(topic, partition);
        let leader_epoch = leader.leader_epoch;
        let outcome = self
            .mesh()
            .invoke_on(
                leader.shard,
                self,
                move |broker: Rc<ShardBroker>| async move {
                    broker.append_local(&tp, records, leader_epoch).await
                },
            )
            .await;
        outcome.unwrap_or_else(|_| AppendResult::error(ResponseError::NotLeaderOrFollower, None))
    }

    async fn append_local(
        &self,
        tp: &TopicPartition,
        records: Bytes,
        leader_epoch: i32,
    ) -> AppendResult {
        let Some(log) = self.log_manager.get_log(tp) else {
            return AppendResult::error(ResponseError::NotLeaderOrFollower, None);
        };
        // Written straight from the request's buffer behind a stamped header.
        match log
            .append_as_leader(records, leader_epoch, shards::log::wall_clock_ms())
            .await
        {
            Ok(info) => {
                // This broker is the whole ISR: the high watermark follows the log end.
                log.set_high_watermark(log.log_end_offset());
                AppendResult {
                    error: None,
                    error_message: None,
                    base_offset: info.first_offset,
                    log_append_time_ms: info.log_append_time_ms,
                    log_start_offset: info.log_start_offset,
                }
            }
            Err(error) => AppendResult::error(error.response_error(), Some(error.to_string())),
        }
    }

    /// Reads stored batches below the high watermark on the owning shard.
    pub async fn read(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> ReadResult {
        let shard = match self.route(topic, partition) {
            Ok(leader) => leader.shard,
            Err(code) => return ReadResult::error(code),
        };
        let tp = TopicPartition::new(topic, partition);
        let outcome = self
            .mesh()
            .invoke_on(shard, self, move |broker: Rc<ShardBroker>| async move {
                broker
                    .read_local(&tp, fetch_offset, max_bytes, min_one_batch)
                    .await
            })
            .await;
        outcome.unwrap_or_else(|_| ReadResult::error(ResponseError::NotLeaderOrFollower))
    }

    async fn read_local(
        &self,
        tp: &TopicPartition,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> ReadResult {
        let Some(log) = self.log_manager.get_log(tp) else {
            return ReadResult::error(ResponseError::NotLeaderOrFollower);
        };
        let high_watermark = log.high_watermark();
        let mut result = ReadResult {
            error: None,
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset: log.log_start_offset(),
            records: None,
        };
        match log
            .read(fetch_offset, max_bytes, high_watermark, min_one_batch)
            .await
        {
            Ok(info) => {
                if let Some(slice) = info.records {
                    // Only what the page cache holds is left to sendfile: the
                    // connection's shard must never wait for the disk. The rest
                    // is read through io_uring, which also brings it into the
                    // cache; so is a range whose descriptor cannot be duplicated
                    // (out of descriptors is no disk error).
                    let file = if slice.size_bytes >= SENDFILE_MIN_BYTES
                        && slice.file.is_cached(slice.position, slice.size_bytes)
                    {
                        slice
                            .file
                            .file_records(slice.position, slice.size_bytes)
                            .ok()
                    } else {
                        None
                    };
                    let records = match file {
                        Some(file) => Ok(Records::File(file)),
                        None => slice
                            .read()
                            .await
                            .map(|bytes| Records::Memory(Bytes::from(bytes))),
                    };
                    match records {
                        Ok(records) => result.records = Some(records),
                        Err(error) => {
                            result.error =
                                Some(log.health().on_error(error.into()).response_error())
                        }
                    }
                }
            }
            Err(error) => result.error = Some(error.response_error()),
        }
        result
    }

    /// Parks a fetch that found too little until the high watermark of one of
    /// its partitions moves from what the fetch saw (`seen`), or until
    /// `deadline`: Kafka's DelayedFetch. Each owning shard watches its own.
    pub async fn park_fetch(self: &Rc<Self>, seen: Vec<(TopicPartition, i64)>, deadline: Instant) {
        let mut by_shard: BTreeMap<usize, Vec<(TopicPartition, i64)>> = BTreeMap::new();
        for (tp, high_watermark) in seen {
            if let Ok(leader) = self.route(&tp.topic, tp.partition) {
                by_shard
                    .entry(leader.shard)
                    .or_default()
                    .push((tp, high_watermark));
            }
        }
        let id = (self.shard_id, self.next_parked_fetch.get());
        self.next_parked_fetch.set(id.1 + 1);
        let others: Vec<usize> = by_shard
            .keys()
            .copied()
            .filter(|shard| *shard != self.shard_id)
            .collect();
        let mut parked: Vec<Pin<Box<dyn Future<Output = ()>>>> = vec![Box::pin(
            glommio::timer::sleep(deadline.saturating_duration_since(Instant::now())),
        )];
        for (shard, partitions) in by_shard {
            let broker = self.clone();
            parked.push(Box::pin(async move {
                let _ = broker
                    .mesh()
                    .invoke_on(shard, &broker, move |broker: Rc<ShardBroker>| async move {
                        broker.watch_partitions(id, partitions, deadline).await
                    })
                    .await;
            }));
        }
        let first_done = parked
            .into_iter()
            .reduce(|a, b| Box::pin(or(a, b)))
            .expect("the deadline is always there");
        first_done.await;
        // The watch here went with its future. The other shards release theirs
        // themselves, on a job, rather than by a waker fired from this thread
        // (which can race glommio's teardown of the task it wakes); a release
        // that finds the channel full is left to the deadline.
        for shard in others {
            self.mesh()
                .try_submit_on(shard, move |broker: Rc<ShardBroker>| async move {
                    broker.release_parked_fetch(id)
                });
        }
    }

    async fn watch_partitions(
        &self,
        id: ParkedFetchId,
        partitions: Vec<(TopicPartition, i64)>,
        deadline: Instant,
    ) {
        let logs: Vec<_> = partitions
            .iter()
            .filter_map(|(tp, seen)| Some((self.log_manager.get_log(tp)?, *seen)))
            .collect();
        if logs
            .iter()
            .any(|(log, seen)| log.high_watermark() != *seen || log.is_deleted())
        {
            return; // moved (or went) while the request crossed the mesh
        }
        let parked =
            ParkedFetch::register(self, id, logs.into_iter().map(|(log, _)| log).collect());
        let timeout = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
        or(parked.watch.moved(), timeout).await;
    }

    fn release_parked_fetch(&self, id: ParkedFetchId) {
        if let Some(watch) = self.parked_fetches.borrow().get(&id) {
            watch.wake();
        }
    }

    /// Offsets for ListOffsets: -1 latest (high watermark), -2 earliest,
    /// -3 max timestamp, otherwise the first offset at or after the timestamp.
    pub async fn list_offset(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        timestamp: i64,
    ) -> Result<(i64, i64, i32), ResponseError> {
        self.on_leader_log(topic, partition, move |log| async move {
            let epoch = log.latest_epoch().unwrap_or(-1);
            match timestamp {
                -1 => Ok((-1, log.high_watermark(), epoch)),
                -2 => Ok((-1, log.log_start_offset(), epoch)),
                _ => {
                    let found = if timestamp == -3 {
                        log.fetch_offset_of_max_timestamp().await
                    } else {
                        log.fetch_offset_by_timestamp(timestamp).await
                    };
                    match found {
                        Ok(Some(found)) if found.offset < log.high_watermark() => {
                            Ok((found.timestamp, found.offset, found.leader_epoch))
                        }
                        Ok(_) => Ok((-1, -1, -1)),
                        Err(error) => Err(error.response_error()),
                    }
                }
            }
        })
        .await
    }

    /// DeleteRecords on the owning shard: the log start offset moves up to
    /// `offset` (-1: the high watermark). Returns the new low watermark.
    pub async fn delete_records(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        offset: i64,
    ) -> Result<i64, ResponseError> {
        self.on_leader_log(topic, partition, move |log| async move {
            // Kafka: records of a compacted-only topic are kept by policy.
            if !log.config().cleanup_policy.delete {
                return Err(ResponseError::PolicyViolation);
            }
            let offset = match offset {
                -1 => log.high_watermark(),
                offset if offset < 0 => return Err(ResponseError::OffsetOutOfRange),
                offset => offset,
            };
            log.maybe_increment_log_start_offset(offset)
                .await
                .map_err(|error| error.response_error())
        })
        .await
    }

    /// Runs `work` on the shard owning a partition this broker leads, against
    /// its log; NOT_LEADER_OR_FOLLOWER when the shard no longer has it.
    async fn on_leader_log<T, F, Fut>(
        self: &Rc<Self>,
        topic: &str,
        partition: i32,
        work: F,
    ) -> Result<T, ResponseError>
    where
        T: Send + 'static,
        F: FnOnce(Rc<Log>) -> Fut + Send + 'static,
        Fut: Future<Output = Result<T, ResponseError>> + 'static,
    {
        let shard = self.route(topic, partition)?.shard;
        let tp = TopicPartition::new(topic, partition);
        self.mesh()
            .invoke_on(shard, self, move |broker: Rc<ShardBroker>| async move {
                match broker.log_manager.get_log(&tp) {
                    Some(log) => work(log).await,
                    None => Err(ResponseError::NotLeaderOrFollower),
                }
            })
            .await
            .unwrap_or(Err(ResponseError::NotLeaderOrFollower))
    }
}

impl AppendResult {
    pub fn error(error: ResponseError, error_message: Option<String>) -> Self {
        Self {
            error: Some(error),
            error_message,
            base_offset: -1,
            log_append_time_ms: -1,
            log_start_offset: -1,
        }
    }
}
