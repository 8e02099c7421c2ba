//! `Partition`: one partition's replica on this shard, as Kafka's
//! `kafka.cluster.Partition`: its log, the leader and ISR it was last told,
//! and the rules for appending as leader, reading, and the high watermark.

use std::cell::{Cell, RefCell};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::future::or;
use shards::log::{
    wall_clock_ms, FetchDataInfo, FetchWatch, Log, LogAppendInfo, LogError, TopicPartition,
    WatchedOffset,
};
use tracing::{info, warn};
use uuid::Uuid;

use super::alter_partition_manager::AlterPartitionManager;
use super::partition_state::{LeaderAndIsr, PartitionState, Transition, RECOVERED};
use crate::config::ReplicationConfig;
use crate::protocol::{Records, ResponseError};

/// A fetched range at least this long is sent from the page cache with
/// sendfile; a shorter one is copied into the response, which then goes out in
/// one send instead of a send and a sendfile per partition.
const SENDFILE_MIN_BYTES: usize = 64 * 1024;

pub struct Partition {
    log: Rc<Log>,
    topic_id: Uuid,
    state: RefCell<PartitionState>,
    config: ReplicationConfig,
    /// Where a leader sends its ISR changes; unset in single-node mode,
    /// where the ISR is the one broker.
    alter_partition_manager: Option<Rc<AlterPartitionManager>>,
    isr_changes: Rc<IsrChangeCounts>,
    /// Produces appending or waiting for acks, and every request's work on
    /// the partition (produces included): a shard move waits for them.
    produces_in_flight: Rc<Cell<usize>>,
    requests_in_flight: Rc<Cell<usize>>,
    /// Requests for the partition by the shard they arrived on, since the
    /// shard balancer last took them (`count_request_from`).
    requests_by_shard: RefCell<Vec<u64>>,
}

/// One request, in the units `Partition::count_request_from` counts in.
pub const REQUEST_SHARE_UNITS: u64 = 1_000_000;

/// A request's work on a partition, counted until it is done.
pub struct InFlight(Rc<Cell<usize>>);

impl InFlight {
    fn new(count: &Rc<Cell<usize>>) -> Self {
        count.set(count.get() + 1);
        Self(count.clone())
    }
}

impl Drop for InFlight {
    fn drop(&mut self) {
        self.0.set(self.0.get() - 1);
    }
}

/// The ISR changes the controller committed for a shard's partitions
/// (Kafka's IsrShrinksPerSec and IsrExpandsPerSec meters, as counts).
#[derive(Debug, Default)]
pub struct IsrChangeCounts {
    pub shrinks: Cell<u64>,
    pub expands: Cell<u64>,
}

/// What a fetch asks of one partition, as its request says it.
#[derive(Debug, Clone)]
pub struct PartitionFetch {
    pub fetch_offset: i64,
    pub max_bytes: usize,
    pub min_one_batch: bool,
    /// The leader epoch the fetcher believes current; -1 when it does not say.
    pub current_leader_epoch: i32,
    /// A follower's last fetched epoch (-1 none): where their logs may part.
    pub last_fetched_epoch: i32,
    /// The fetching follower's broker id; -1 for a consumer.
    pub replica_id: i32,
    /// A consumer that says where it is (Fetch v11+) may read from a
    /// follower, up to the follower's high watermark (KIP-392).
    pub from_any_replica: bool,
    /// The followers this leader may send the consumer to read from (in
    /// its rack, per `replica.selector.class`); none keeps it here.
    pub preferred_read_candidates: Vec<i32>,
}

/// One partition's produce outcome.
#[derive(Debug, Clone)]
pub struct AppendResult {
    pub error: Option<ResponseError>,
    pub error_message: Option<String>,
    pub base_offset: i64,
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
    /// Where the partition's time went, when it was appended.
    pub timing: Option<AppendTiming>,
}

/// A partition's part of a produce, for the request's phases.
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct AppendTiming {
    /// From the request's dispatch to the append's start: the hop to the
    /// owning shard when it is another (MeshWaitTimeMs counts only those),
    /// and what that shard ran first, this request's earlier appends
    /// included (each copies into the page cache on the shard's thread).
    pub shard_wait: Duration,
    pub append: Duration,
    /// acks=all: the ISR catching up after the append.
    pub acks_wait: Duration,
    /// When the append was done.
    pub appended_at: Option<Instant>,
    /// When the partition's part was done: appended, and with acks=all
    /// replicated by the ISR.
    pub done_at: Option<Instant>,
}

impl AppendTiming {
    /// The longest of each part, `other`'s and this one's.
    pub fn max(self, other: AppendTiming) -> AppendTiming {
        AppendTiming {
            shard_wait: self.shard_wait.max(other.shard_wait),
            append: self.append.max(other.append),
            acks_wait: self.acks_wait.max(other.acks_wait),
            appended_at: self.appended_at.max(other.appended_at),
            done_at: self.done_at.max(other.done_at),
        }
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
            timing: None,
        }
    }
}

/// One partition's fetch outcome: the stored batches, as they are.
#[derive(Debug)]
pub struct ReadResult {
    pub error: Option<ResponseError>,
    pub high_watermark: i64,
    /// What a parked fetch of this partition watches: the high watermark for
    /// a consumer, the log end for a follower.
    pub watched_offset: i64,
    /// The leader's epoch and where it ends, when a follower's log parts from
    /// the leader's before its fetch offset (Kafka's DivergingEpoch).
    pub diverging_epoch: Option<(i32, i64)>,
    pub last_stable_offset: i64,
    pub log_start_offset: i64,
    pub records: Option<Records>,
    /// The follower a consumer should read from instead (-1: none).
    pub preferred_read_replica: i32,
}

impl ReadResult {
    pub fn error(error: ResponseError) -> Self {
        Self {
            error: Some(error),
            high_watermark: -1,
            watched_offset: -1,
            diverging_epoch: None,
            last_stable_offset: -1,
            log_start_offset: -1,
            records: None,
            preferred_read_replica: -1,
        }
    }

    /// No records: where the partition stands.
    pub fn empty(high_watermark: i64, watched_offset: i64, log_start_offset: i64) -> Self {
        Self {
            error: None,
            high_watermark,
            watched_offset,
            diverging_epoch: None,
            last_stable_offset: high_watermark,
            log_start_offset,
            records: None,
            preferred_read_replica: -1,
        }
    }
}

/// ListOffsets' answer for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndEpoch {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

impl Partition {
    pub fn new(
        local_broker_id: i32,
        log: Rc<Log>,
        topic_id: Uuid,
        config: ReplicationConfig,
        alter_partition_manager: Option<Rc<AlterPartitionManager>>,
        isr_changes: Rc<IsrChangeCounts>,
    ) -> Self {
        Self {
            log,
            topic_id,
            state: RefCell::new(PartitionState::new(local_broker_id)),
            config,
            alter_partition_manager,
            isr_changes,
            produces_in_flight: Rc::default(),
            requests_in_flight: Rc::default(),
            requests_by_shard: RefCell::default(),
        }
    }

    /// Counts a produce in flight until the guard goes.
    pub fn produce_in_flight(&self) -> InFlight {
        InFlight::new(&self.produces_in_flight)
    }

    pub fn produces_in_flight(&self) -> usize {
        self.produces_in_flight.get()
    }

    /// Counts a request's work on the partition until the guard goes.
    pub fn request_in_flight(&self) -> InFlight {
        InFlight::new(&self.requests_in_flight)
    }

    pub fn requests_in_flight(&self) -> usize {
        self.requests_in_flight.get()
    }

    /// A request for this partition and `partitions - 1` others that
    /// arrived on shard `shard`: it counts `1/partitions` of a request here
    /// (in `REQUEST_SHARE_UNITS`), so a request's hops, one per shard
    /// whatever its partitions, are counted once across them.
    pub fn count_request_from(&self, shard: usize, partitions: usize) {
        assert!(partitions > 0);
        let mut counts = self.requests_by_shard.borrow_mut();
        if counts.len() <= shard {
            counts.resize(shard + 1, 0);
        }
        counts[shard] += REQUEST_SHARE_UNITS / partitions as u64;
    }

    /// The requests counted since the last call, by the shard they arrived
    /// on, in `REQUEST_SHARE_UNITS`.
    pub fn take_request_counts(&self) -> Vec<u64> {
        std::mem::take(&mut *self.requests_by_shard.borrow_mut())
    }

    pub fn log(&self) -> &Rc<Log> {
        &self.log
    }

    pub fn topic_partition(&self) -> &TopicPartition {
        self.log.topic_partition()
    }

    pub fn is_leader(&self) -> bool {
        self.state.borrow().is_leader()
    }

    pub fn leader_epoch(&self) -> i32 {
        self.state.borrow().leader_epoch()
    }

    /// The leader and ISR as committed (what the controller last confirmed).
    pub fn leader_and_isr(&self) -> LeaderAndIsr {
        self.state.borrow().committed().clone()
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.high_watermark()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// A leader's replication: whether its ISR lacks replicas, whether it is
    /// below `min.insync.replicas`, and how many messages its furthest ISR
    /// follower lags.
    pub fn replication_status(&self) -> (bool, bool, i64) {
        let state = self.state.borrow();
        let committed = state.committed();
        let log_end_offset = self.log.log_end_offset();
        let lag = state
            .followers()
            .filter(|(id, _)| committed.isr.contains(id))
            .map(|(_, follower)| log_end_offset - follower.log_end_offset.max(0))
            .max()
            .unwrap_or(0);
        (
            committed.isr.len() < committed.replicas.len(),
            committed.isr.len() < state.effective_min_isr(self.min_insync_replicas()),
            lag,
        )
    }

    fn min_insync_replicas(&self) -> i32 {
        self.log.config().min_insync_replicas
    }

    /// Takes the controller's word on leader, epoch and ISR (LeaderAndIsr),
    /// if newer than what this replica has: Kafka's `makeLeader` and
    /// `makeFollower`. A leader's new epoch starts at its log end in the epoch
    /// cache. Whatever waits on the partition looks again.
    pub async fn make_leader_or_follower(&self, state: &LeaderAndIsr) -> Transition {
        let transition = self.state.borrow_mut().become_leader_or_follower(
            state,
            self.log.log_end_offset(),
            wall_clock_ms(),
        );
        if transition == Transition::Stale {
            return transition;
        }
        if transition == Transition::NewEpoch && self.is_leader() {
            if let Err(error) = self
                .log
                .assign_epoch_start_offset(self.leader_epoch())
                .await
            {
                warn!(partition = %self.topic_partition(), %error, "cannot write the leader epoch checkpoint");
            }
        }
        self.maybe_increment_high_watermark(wall_clock_ms());
        self.log.wake_all_watches();
        transition
    }

    /// Moves the leader's high watermark to what its ISR holds (Kafka's
    /// `maybeIncrementLeaderHW`); wakes what waits on it.
    fn maybe_increment_high_watermark(&self, now_ms: i64) {
        let moved = self.state.borrow().high_watermark(
            self.log.log_end_offset(),
            self.log.high_watermark(),
            self.min_insync_replicas(),
            now_ms,
            self.config.replica_lag_time_max_ms,
        );
        if let Some(high_watermark) = moved {
            self.log.set_high_watermark(high_watermark);
        }
    }

    /// Kafka's `appendRecordsToLeader`: refused with NOT_ENOUGH_REPLICAS
    /// before anything is written when acks=all finds the ISR smaller than
    /// the topic's `min.insync.replicas`.
    pub async fn append_records_to_leader(
        &self,
        records: impl AsRef<[u8]>,
        required_acks: i16,
    ) -> Result<LogAppendInfo, AppendError> {
        let leader_epoch = {
            let state = self.state.borrow();
            if !state.is_leader() {
                return Err(AppendError::Refused(ResponseError::NotLeaderOrFollower));
            }
            let min_isr = state.effective_min_isr(self.min_insync_replicas());
            if required_acks == -1 && state.committed().isr.len() < min_isr {
                return Err(AppendError::Refused(ResponseError::NotEnoughReplicas));
            }
            state.leader_epoch()
        };
        let info = self
            .log
            .append_as_leader(records, leader_epoch, wall_clock_ms())
            .await
            .map_err(AppendError::Log)?;
        self.maybe_increment_high_watermark(wall_clock_ms());
        Ok(info)
    }

    /// Kafka's DelayedProduce for one partition: waits until the high
    /// watermark passes `last_offset`, or `deadline` (REQUEST_TIMED_OUT).
    pub async fn wait_for_replication(
        &self,
        last_offset: i64,
        deadline: Instant,
    ) -> Result<(), ResponseError> {
        loop {
            let done = self.state.borrow().check_enough_replicas_reach_offset(
                last_offset + 1,
                self.high_watermark(),
                self.min_insync_replicas(),
            );
            if let Some(done) = done {
                return done;
            }
            if self.is_deleted() {
                return Err(ResponseError::NotLeaderOrFollower);
            }
            let watch = Rc::new(FetchWatch::default());
            self.log.watch(WatchedOffset::HighWatermark, &watch);
            let timeout = glommio::timer::sleep(deadline.saturating_duration_since(Instant::now()));
            let timed_out = or(
                async {
                    watch.moved().await;
                    false
                },
                async {
                    timeout.await;
                    true
                },
            )
            .await;
            self.log.unwatch(&watch);
            if timed_out {
                return Err(ResponseError::RequestTimedOut);
            }
        }
    }

    /// Whole batches from `fetch_offset` to the log end (Kafka's
    /// FetchIsolation.LOG_END): what a coordinator loads.
    pub async fn read_records(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> Result<FetchDataInfo, LogError> {
        self.log
            .read(
                fetch_offset,
                max_bytes,
                self.log.log_end_offset(),
                min_one_batch,
            )
            .await
    }

    /// Kafka's check of a fetch's CurrentLeaderEpoch: an older one is fenced,
    /// a newer one not known here yet; -1 asks for no check.
    fn check_current_leader_epoch(&self, current_leader_epoch: i32) -> Result<(), ResponseError> {
        let epoch = self.leader_epoch();
        match current_leader_epoch {
            -1 => Ok(()),
            asked if asked < epoch => Err(ResponseError::FencedLeaderEpoch),
            asked if asked > epoch => Err(ResponseError::UnknownLeaderEpoch),
            _ => Ok(()),
        }
    }

    /// OffsetForLeaderEpoch on the leader: the end of `leader_epoch` here,
    /// (-1, -1) when it is later than any epoch known.
    pub fn last_offset_for_leader_epoch(
        &self,
        current_leader_epoch: i32,
        leader_epoch: i32,
    ) -> Result<(i32, i64), ResponseError> {
        self.check_current_leader_epoch(current_leader_epoch)?;
        Ok(self
            .log
            .end_offset_for_epoch(leader_epoch)
            .unwrap_or((-1, -1)))
    }

    /// A fetch's answer for this partition. A consumer reads below the high
    /// watermark; a follower up to the log end, after a check that its log
    /// has not parted from this one (then it is told where, and reads
    /// nothing), and its fetch offset tells the leader how far it has
    /// replicated: the high watermark and the ISR may move. Only what the
    /// page cache holds is left to sendfile: the connection's shard must never
    /// wait for the disk. The rest is read through io_uring, which also brings
    /// it into the cache; so is a range whose descriptor cannot be duplicated
    /// (out of descriptors is no disk error).
    pub async fn fetch(self: &Rc<Self>, request: PartitionFetch) -> ReadResult {
        if let Err(error) = self.check_current_leader_epoch(request.current_leader_epoch) {
            return ReadResult::error(error);
        }
        let is_follower = request.replica_id >= 0;
        // A follower reads to the log end and parks on it; a consumer reads
        // below the high watermark.
        let isolation = if is_follower {
            WatchedOffset::LogEnd
        } else {
            WatchedOffset::HighWatermark
        };
        if !request.preferred_read_candidates.is_empty() && self.is_leader() {
            let preferred = self
                .state
                .borrow()
                .preferred_read_replica(&request.preferred_read_candidates, request.fetch_offset);
            if let Some(replica) = preferred {
                let mut result = self.empty_result(isolation);
                result.preferred_read_replica = replica;
                return result;
            }
        }
        if is_follower && request.last_fetched_epoch >= 0 {
            match self.log.end_offset_for_epoch(request.last_fetched_epoch) {
                Some((epoch, end_offset))
                    if epoch < request.last_fetched_epoch || end_offset < request.fetch_offset =>
                {
                    let mut result = self.empty_result(isolation);
                    result.diverging_epoch = Some((epoch, end_offset));
                    return result;
                }
                Some(_) => {}
                None => return ReadResult::error(ResponseError::OffsetOutOfRange),
            }
        }
        let read = self
            .log
            .read(
                request.fetch_offset,
                request.max_bytes,
                self.log.watched_offset(isolation),
                request.min_one_batch,
            )
            .await;
        if is_follower && read.is_ok() {
            if let Err(error) = self.on_follower_fetch(request.replica_id, request.fetch_offset) {
                return ReadResult::error(error);
            }
        }
        let mut result = self.empty_result(isolation);
        match read {
            Ok(FetchDataInfo {
                records: Some(slice),
                ..
            }) => {
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
                            Some(self.log.health().on_error(error.into()).response_error())
                    }
                }
            }
            Ok(FetchDataInfo { records: None, .. }) => {}
            Err(error) => result.error = Some(error.response_error()),
        }
        result
    }

    fn empty_result(&self, isolation: WatchedOffset) -> ReadResult {
        ReadResult::empty(
            self.high_watermark(),
            self.log.watched_offset(isolation),
            self.log.log_start_offset(),
        )
    }

    /// A follower fetched from `fetch_offset`: Kafka's
    /// `updateFollowerFetchState`, then `maybeExpandIsr` and the high
    /// watermark.
    fn on_follower_fetch(
        self: &Rc<Self>,
        replica_id: i32,
        fetch_offset: i64,
    ) -> Result<(), ResponseError> {
        let now_ms = wall_clock_ms();
        let expanded = {
            let mut state = self.state.borrow_mut();
            if !state.is_leader() {
                return Err(ResponseError::NotLeaderOrFollower);
            }
            state.update_follower_fetch_state(
                replica_id,
                fetch_offset,
                self.log.log_end_offset(),
                now_ms,
            )?;
            state.maybe_expand_isr(replica_id, self.high_watermark())
        };
        if let Some(isr) = expanded {
            info!(partition = %self.topic_partition(), replica_id, ?isr, "expanding the ISR");
            self.alter_isr(isr);
        }
        self.maybe_increment_high_watermark(now_ms);
        Ok(())
    }

    /// Kafka's `maybeShrinkIsr`, run every half `replica.lag.time.max.ms`.
    pub fn maybe_shrink_isr(self: &Rc<Self>, now_ms: i64) {
        let shrunk = self.state.borrow_mut().maybe_shrink_isr(
            self.log.log_end_offset(),
            now_ms,
            self.config.replica_lag_time_max_ms,
        );
        if let Some(isr) = shrunk {
            info!(partition = %self.topic_partition(), ?isr, "shrinking the ISR");
            self.alter_isr(isr);
        }
    }

    /// The ISR this leader proposes, sent to the controller (AlterPartition);
    /// the answer commits it or clears the proposal.
    fn alter_isr(self: &Rc<Self>, isr: Vec<i32>) {
        let Some(manager) = self.alter_partition_manager.clone() else {
            return;
        };
        let committed = self.leader_and_isr();
        let shrinking = isr.len() < committed.isr.len();
        let proposal = LeaderAndIsr {
            isr,
            leader_recovery_state: RECOVERED,
            ..committed
        };
        let partition = self.clone();
        glommio::spawn_local(async move {
            let key = (partition.topic_id, partition.topic_partition().partition);
            let answer = manager.submit(key, proposal).await;
            let mut state = partition.state.borrow_mut();
            match answer {
                Ok(committed) => {
                    if !state.on_isr_committed(committed) {
                        return;
                    }
                    let counts = &partition.isr_changes;
                    let count = if shrinking {
                        &counts.shrinks
                    } else {
                        &counts.expands
                    };
                    count.set(count.get() + 1);
                }
                Err(error) => {
                    warn!(partition = %partition.topic_partition(), %error, "ISR change refused");
                    state.on_isr_refused();
                    return;
                }
            }
            drop(state);
            partition.maybe_increment_high_watermark(wall_clock_ms());
            partition.log.wake_all_watches();
        })
        .detach();
    }

    /// Appends what this follower fetched from its leader and takes the
    /// leader's high watermark (never past what it has) and log start.
    pub async fn append_records_as_follower(
        &self,
        records: &[u8],
        leader_high_watermark: i64,
        leader_log_start_offset: i64,
    ) -> Result<i64, LogError> {
        let log_end_offset = self
            .log
            .append_as_follower(records, wall_clock_ms())
            .await?;
        self.log
            .maybe_follow_log_start_offset(leader_log_start_offset)
            .await?;
        self.log
            .set_high_watermark(leader_high_watermark.min(log_end_offset));
        Ok(log_end_offset)
    }

    /// A follower cuts its log where its leader's parts from it.
    pub async fn truncate_to(&self, offset: i64) -> Result<(), LogError> {
        info!(partition = %self.topic_partition(), offset, log_end_offset = self.log.log_end_offset(), "truncating to the leader's log");
        self.log.truncate_to(offset).await
    }

    /// A follower behind its leader's log start empties its log and starts
    /// again there.
    pub async fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), LogError> {
        info!(partition = %self.topic_partition(), offset, log_end_offset = self.log.log_end_offset(), "behind the leader's log start");
        self.log.truncate_fully_and_start_at(offset).await
    }

    /// ListOffsets: -1 latest, -2 earliest, -3 max timestamp, otherwise the
    /// first offset at or after the timestamp; nothing past the high
    /// watermark for a consumer, nothing past the log end for a follower
    /// (Kafka's `fetchOffsetForTimestamp` with no isolation level).
    pub async fn fetch_offset_for_timestamp(
        &self,
        timestamp: i64,
        current_leader_epoch: i32,
        from_follower: bool,
    ) -> Result<OffsetAndEpoch, ResponseError> {
        self.check_current_leader_epoch(current_leader_epoch)?;
        let last_fetchable_offset = if from_follower {
            self.log.log_end_offset()
        } else {
            self.high_watermark()
        };
        let epoch = self.log.latest_epoch().unwrap_or(-1);
        let at = |offset| OffsetAndEpoch {
            timestamp: -1,
            offset,
            leader_epoch: epoch,
        };
        match timestamp {
            -1 => Ok(at(last_fetchable_offset)),
            -2 => Ok(at(self.log.log_start_offset())),
            _ => {
                let found = if timestamp == -3 {
                    self.log.fetch_offset_of_max_timestamp().await
                } else {
                    self.log.fetch_offset_by_timestamp(timestamp).await
                };
                match found {
                    Ok(Some(found)) if found.offset < last_fetchable_offset => Ok(OffsetAndEpoch {
                        timestamp: found.timestamp,
                        offset: found.offset,
                        leader_epoch: found.leader_epoch,
                    }),
                    Ok(_) => Ok(OffsetAndEpoch {
                        timestamp: -1,
                        offset: -1,
                        leader_epoch: -1,
                    }),
                    Err(error) => Err(error.response_error()),
                }
            }
        }
    }

    /// DeleteRecords: the log start offset moves up to `offset` (-1: the high
    /// watermark). Returns the new low watermark.
    pub async fn delete_records_on_leader(&self, offset: i64) -> Result<i64, ResponseError> {
        // Kafka: records of a compacted-only topic are kept by policy.
        if !self.log.config().cleanup_policy.delete {
            return Err(ResponseError::PolicyViolation);
        }
        let offset = match offset {
            -1 => self.high_watermark(),
            offset if offset < 0 => return Err(ResponseError::OffsetOutOfRange),
            offset => offset,
        };
        self.log
            .maybe_increment_log_start_offset(offset)
            .await
            .map_err(|error| error.response_error())
    }

    pub fn watch(&self, offset: WatchedOffset, watch: &Rc<FetchWatch>) {
        self.log.watch(offset, watch);
    }

    pub fn unwatch(&self, watch: &Rc<FetchWatch>) {
        self.log.unwatch(watch);
    }

    pub fn is_deleted(&self) -> bool {
        self.log.is_deleted()
    }
}

/// Why an append as leader wrote nothing.
#[derive(Debug)]
pub enum AppendError {
    /// Refused before the log saw it.
    Refused(ResponseError),
    /// Refused or failed by the log, with its message.
    Log(LogError),
}

impl AppendError {
    pub fn response_error(&self) -> ResponseError {
        match self {
            AppendError::Refused(error) => *error,
            AppendError::Log(error) => error.response_error(),
        }
    }

    /// The message a produce response carries, as Kafka sends one.
    pub fn message(&self) -> Option<String> {
        match self {
            AppendError::Refused(_) => None,
            AppendError::Log(error) => Some(error.to_string()),
        }
    }
}
