//! `Log`: one partition's log, a sorted set of `LogSegment`s of which the last is
//! active. Owned by one shard; mutations are serialized by async locks, reads take
//! a snapshot of the segment list and never wait on writers.

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicI64, Ordering};
use std::sync::Arc;
use std::time::Instant;

use glommio::sync::{Permit, Semaphore};
use tracing::{info, warn};

use super::blocking::run_blocking;
use super::compression::{decompress, recompress, CompressionLevels};
use super::file_names::{
    parse_base_offset, segment_file_path, CLEANED_FILE_SUFFIX, DELETE_DIR_SUFFIX,
    INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, PREPARED_FILE_SUFFIX, SWAP_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};
use super::leader_epoch::LeaderEpochFileCache;
use super::log_dirs::{LogDirHealth, PartitionCheckpoint};
use super::producer_state::{ProducerStateManager, SequenceCheck};
use super::record_batch::{
    stamp_batch, validate_batch, validate_produced_batch, AppendStamp, BatchIter,
    RecordBatchHeader, RecordIter, TimestampType, RECORD_BATCH_OVERHEAD,
};
use super::segment::{AppendedBatch, FileSlice, LogSegment, PreparedSegment, SegmentHandoff};
use super::{LogConfig, LogError, TimestampPolicy, TopicCompression, TopicPartition};
use crate::runtime::activity::{self, ActivityKind};
use crate::runtime::disk_bound;

/// Takes a one-permit lock. The semaphores are never closed.
async fn permit(lock: &Semaphore) -> Permit<'_> {
    lock.acquire_permit(1)
        .await
        .expect("log locks are never closed")
}

/// A fetch parked until the high watermark of one of its partitions moves
/// (Kafka's fetch purgatory): registered with each of those partitions' logs,
/// woken by the first move.
pub struct FetchWatch {
    moved: Semaphore,
}

impl Default for FetchWatch {
    fn default() -> Self {
        Self {
            moved: Semaphore::new(0),
        }
    }
}

impl FetchWatch {
    /// Resolves once a watched high watermark has moved.
    pub async fn moved(&self) {
        let _ = self.moved.acquire(1).await;
    }
    pub fn wake(&self) {
        self.moved.signal(1);
    }
}

/// An offset of a log that its shard moves and any shard may read: a fetch
/// on one shard sees that another shard's partition has nothing new for it
/// without a hop there.
#[derive(Debug, Clone)]
pub struct SharedOffset(Arc<AtomicI64>);

impl SharedOffset {
    pub fn new(offset: i64) -> Self {
        Self(Arc::new(AtomicI64::new(offset)))
    }
    /// Whether both are the same offset (of the same log).
    pub fn is(&self, other: &SharedOffset) -> bool {
        Arc::ptr_eq(&self.0, &other.0)
    }
    /// Relaxed: a reader on another shard that sees an older value only
    /// takes the hop it would have taken anyway.
    pub fn get(&self) -> i64 {
        self.0.load(Ordering::Relaxed)
    }
    fn set(&self, offset: i64) {
        self.0.store(offset, Ordering::Relaxed);
    }
    fn replace(&self, offset: i64) -> i64 {
        self.0.swap(offset, Ordering::Relaxed)
    }
}

/// A log's offsets as any shard may read them, with its directory's health.
#[derive(Debug, Clone)]
pub struct SharedLogOffsets {
    pub high_watermark: SharedOffset,
    pub log_start_offset: SharedOffset,
    pub health: LogDirHealth,
}

/// What a parked fetch waits to move: a consumer's the high watermark, a
/// follower's the log end.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum WatchedOffset {
    HighWatermark,
    LogEnd,
}

fn wake(watches: &RefCell<Vec<Rc<FetchWatch>>>) {
    for watch in watches.take() {
        watch.wake();
    }
}

/// Serializes `leader-epoch-checkpoint` writes, and counts those begun in
/// the background and not yet on disk.
struct EpochCheckpoint {
    lock: Semaphore,
    in_background: Cell<u32>,
    /// The log is being deleted, or was handed to another shard: no
    /// checkpoint of this copy's is written.
    deleted: Cell<bool>,
}

impl Default for EpochCheckpoint {
    fn default() -> Self {
        Self {
            lock: Semaphore::new(1),
            in_background: Cell::new(0),
            deleted: Cell::new(false),
        }
    }
}

/// The recovery point and what guards it: flushes and truncations serialize on
/// `lock`, and a background flush started before a truncation does not move
/// the recovery point after it.
struct FlushState {
    lock: Semaphore,
    recovery_point: Cell<i64>,
    /// Moves at every truncation and when the log leaves this shard (handed
    /// off, moved, deleted): a roll's background work begun before stops.
    generation: Cell<u64>,
}

impl FlushState {
    /// Under `lock`.
    fn next_generation(&self) {
        self.generation.set(self.generation.get() + 1);
    }
}

/// The next segment's files, prepared in the background while the active
/// segment fills (`preallocate`), so that its roll only renames them.
enum NextSegment {
    Idle,
    Preparing,
    Ready(Box<PreparedSegment>),
    /// The log left this shard (handed off, deleted, closed): what it had
    /// ready is removed, and a preparation still running removes its own
    /// files when done. Nothing waits for it: a 1 GiB preparation waiting
    /// behind writeback held a shard move, and the partition's produces,
    /// for two seconds.
    Abandoned,
}

/// What an append did, for the produce response. For an idempotent
/// producer's retry of a batch already in the log nothing is written and the
/// offsets are the original batch's.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogAppendInfo {
    pub first_offset: i64,
    pub last_offset: i64,
    /// The broker's time for LogAppendTime topics, -1 otherwise.
    pub log_append_time_ms: i64,
    pub log_start_offset: i64,
}

/// The result of a read: at most one segment's byte range, whole batches.
#[derive(Debug, Clone)]
pub struct FetchDataInfo {
    pub fetch_offset: i64,
    pub records: Option<FileSlice>,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampAndOffset {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

pub struct LogOpenParams {
    pub dir: PathBuf,
    pub topic_partition: TopicPartition,
    pub config: Rc<LogConfig>,
    /// Offsets below this were flushed before the last shutdown.
    pub recovery_point: i64,
    /// The broker shut down cleanly last time: no recovery scan.
    pub had_clean_shutdown: bool,
    pub high_watermark: Option<i64>,
    /// Where DeleteRecords moved the log start, from `log-start-offset-checkpoint`.
    pub log_start_offset: Option<i64>,
    pub health: LogDirHealth,
    pub now_ms: i64,
    /// A log another shard of this broker handed off (`Log::hand_off`), taken
    /// up where that shard left it; None opens the files and rebuilds the
    /// idempotent producers from the batches.
    pub handoff: Option<HandedOffLog>,
}

/// A log one shard took out of service for another shard of this broker to
/// open (`Log::hand_off`): where it stands, for the checkpoint files, and
/// what the next shard takes up.
#[derive(Debug)]
pub struct LogHandoff {
    pub checkpoint: PartitionCheckpoint,
    pub log: HandedOffLog,
}

/// What a log's next shard takes up instead of reading it back: its
/// idempotent producers (a scan of every batch otherwise) and its segments,
/// open, with their indexes (reads of every segment otherwise).
#[derive(Debug)]
pub struct HandedOffLog {
    pub producers: ProducerStateManager,
    /// The leader epoch cache: a read of `leader-epoch-checkpoint` otherwise,
    /// whose access time, updated once after each write, waits for ext4's
    /// journal, on a busy disk for hundreds of milliseconds.
    pub leader_epochs: LeaderEpochFileCache,
    /// None when the process was out of descriptors to duplicate: the next
    /// shard opens the files, as after a clean shutdown.
    pub segments: Option<Vec<SegmentHandoff>>,
}

pub struct Log {
    topic_partition: TopicPartition,
    dir: PathBuf,
    config: RefCell<Rc<LogConfig>>,
    health: LogDirHealth,
    segments: RefCell<BTreeMap<i64, Rc<LogSegment>>>,
    log_start_offset: SharedOffset,
    log_end_offset: Cell<i64>,
    high_watermark: SharedOffset,
    /// Fetches parked on this partition, woken when the high watermark moves
    /// (consumers, delayed produces) or when the log end does (followers).
    /// A connection has one request in flight, so about one per connection
    /// fetching it (a watch released by another shard lingers until its job runs).
    high_watermark_watches: RefCell<Vec<Rc<FetchWatch>>>,
    log_end_watches: RefCell<Vec<Rc<FetchWatch>>>,
    /// The recovery point and what guards it, shared with the background flush
    /// of rolled segments.
    flush_state: Rc<FlushState>,
    /// Set once the partition is being deleted (or moved away: another dir,
    /// another shard); every later operation refuses.
    deleted: Cell<bool>,
    unflushed_messages: Cell<i64>,
    last_flush_ms: Cell<i64>,
    /// First offset the cleaner has not yet deduplicated.
    first_dirty_offset: Cell<i64>,
    leader_epoch_cache: Rc<RefCell<LeaderEpochFileCache>>,
    /// `leader-epoch-checkpoint`'s writes, each of the cache as it is when
    /// the write begins, so the last one written is the newest.
    epoch_checkpoint: Rc<EpochCheckpoint>,
    producer_state: RefCell<ProducerStateManager>,
    next_segment: Rc<RefCell<NextSegment>>,
    /// The base offset of the active segment the last preparation began
    /// under: one attempt per segment, so a failed one is not retried on
    /// every append.
    next_segment_prepared_for: Cell<Option<i64>>,
    /// Serializes appends, rolls and truncation.
    append_lock: Semaphore,
    /// Serializes the background work that replaces closed segments (retention,
    /// cleaning, truncation), so it never blocks appends.
    maintenance_lock: Semaphore,
}

impl Log {
    pub async fn open(params: LogOpenParams) -> Result<Log, LogError> {
        let LogOpenParams {
            dir,
            topic_partition,
            config,
            recovery_point,
            had_clean_shutdown,
            high_watermark,
            log_start_offset,
            health,
            now_ms,
            handoff,
        } = params;
        health.check()?;
        let result = Self::load(
            &dir,
            topic_partition,
            config,
            recovery_point,
            had_clean_shutdown,
            high_watermark,
            log_start_offset,
            health.clone(),
            now_ms,
            handoff,
        )
        .await;
        result.map_err(|error| health.on_error(error))
    }

    #[allow(clippy::too_many_arguments)]
    async fn load(
        dir: &Path,
        topic_partition: TopicPartition,
        config: Rc<LogConfig>,
        recovery_point: i64,
        had_clean_shutdown: bool,
        high_watermark: Option<i64>,
        checkpointed_log_start_offset: Option<i64>,
        health: LogDirHealth,
        now_ms: i64,
        handoff: Option<HandedOffLog>,
    ) -> Result<Log, LogError> {
        let (producers, leader_epochs, handed_off_segments) = match handoff {
            Some(HandedOffLog {
                producers,
                leader_epochs,
                segments,
            }) => (Some(producers), Some(leader_epochs), segments),
            None => (None, None, None),
        };
        let (mut segments, epochs_seen) = match handed_off_segments {
            Some(handed_off) => (take_up_segments(dir, handed_off, &config), Vec::new()),
            None => {
                let clean = had_clean_shutdown || producers.is_some();
                open_segments(
                    dir,
                    &topic_partition,
                    &config,
                    recovery_point,
                    clean,
                    now_ms,
                )
                .await?
            }
        };
        if segments.is_empty() {
            let start = recovery_point.max(0);
            segments.insert(
                start,
                Rc::new(LogSegment::create(dir, start, "", &config, now_ms).await?),
            );
        } else if config.preallocate {
            // The active segment again: its blocks ahead, as when it was created.
            let active = segments.values().next_back().unwrap();
            if active.preallocated_bytes() == 0 {
                active.preallocate(config.segment_bytes).await?;
            }
        }
        let log_end_offset = segments.values().next_back().unwrap().next_offset();
        // DeleteRecords may have moved the start past the first segment's base.
        let log_start_offset = checkpointed_log_start_offset
            .unwrap_or(i64::MIN)
            .clamp(*segments.keys().next().unwrap(), log_end_offset);
        let mut epoch_cache = match leader_epochs {
            Some(handed_off) => handed_off,
            None => LeaderEpochFileCache::load(dir)?,
        };
        let mut epochs_changed = false;
        for (epoch, offset) in epochs_seen {
            // Only newer epochs: recovered batches never rewrite known history.
            if epoch_cache
                .latest_epoch()
                .is_none_or(|latest| epoch > latest)
            {
                epochs_changed |= epoch_cache.assign(epoch, offset);
            }
        }
        epochs_changed |= epoch_cache.truncate_from_end(log_end_offset);
        epochs_changed |= epoch_cache.truncate_from_start(log_start_offset);
        if epochs_changed {
            epoch_cache.write()?;
        }
        let log = Log {
            topic_partition,
            dir: dir.to_owned(),
            config: RefCell::new(config),
            health,
            segments: RefCell::new(segments),
            log_start_offset: SharedOffset::new(log_start_offset),
            log_end_offset: Cell::new(log_end_offset),
            high_watermark: SharedOffset::new(
                high_watermark
                    .unwrap_or(log_start_offset)
                    .clamp(log_start_offset, log_end_offset),
            ),
            high_watermark_watches: RefCell::new(Vec::new()),
            log_end_watches: RefCell::new(Vec::new()),
            flush_state: Rc::new(FlushState {
                lock: Semaphore::new(1),
                recovery_point: Cell::new(recovery_point.min(log_end_offset)),
                generation: Cell::new(0),
            }),
            deleted: Cell::new(false),
            unflushed_messages: Cell::new(0),
            last_flush_ms: Cell::new(now_ms),
            first_dirty_offset: Cell::new(log_start_offset),
            leader_epoch_cache: Rc::new(RefCell::new(epoch_cache)),
            epoch_checkpoint: Rc::default(),
            producer_state: RefCell::new(ProducerStateManager::default()),
            next_segment: Rc::new(RefCell::new(NextSegment::Idle)),
            next_segment_prepared_for: Cell::new(None),
            append_lock: Semaphore::new(1),
            maintenance_lock: Semaphore::new(1),
        };
        match producers {
            Some(producers) => *log.producer_state.borrow_mut() = producers,
            None => log.rebuild_producer_state().await?,
        }
        info!(
            partition = %log.topic_partition,
            log_start_offset, log_end_offset, segments = log.segments.borrow().len(),
            producers = log.producer_state.borrow().producer_count(),
            "loaded log"
        );
        Ok(log)
    }

    pub fn topic_partition(&self) -> &TopicPartition {
        &self.topic_partition
    }
    pub fn dir(&self) -> &Path {
        &self.dir
    }
    pub fn config(&self) -> Rc<LogConfig> {
        self.config.borrow().clone()
    }
    pub fn update_config(&self, config: Rc<LogConfig>) {
        *self.config.borrow_mut() = config;
    }
    pub fn log_start_offset(&self) -> i64 {
        self.log_start_offset.get()
    }
    /// The next offset to be written (LEO).
    pub fn log_end_offset(&self) -> i64 {
        self.log_end_offset.get()
    }
    pub fn high_watermark(&self) -> i64 {
        self.high_watermark.get()
    }
    pub fn shared_offsets(&self) -> SharedLogOffsets {
        SharedLogOffsets {
            high_watermark: self.high_watermark.clone(),
            log_start_offset: self.log_start_offset.clone(),
            health: self.health.clone(),
        }
    }
    /// Moves the high watermark (it never passes the log end) and wakes the
    /// fetches parked on it.
    pub fn set_high_watermark(&self, offset: i64) {
        let offset = offset.clamp(self.log_start_offset(), self.log_end_offset());
        if offset != self.high_watermark.replace(offset) {
            wake(&self.high_watermark_watches);
        }
    }
    /// Wakes what waits on this partition whatever it watches: its
    /// leadership changed, or it went.
    pub fn wake_all_watches(&self) {
        wake(&self.high_watermark_watches);
        wake(&self.log_end_watches);
    }
    /// The offset a parked fetch of this kind waits to move.
    pub fn watched_offset(&self, offset: WatchedOffset) -> i64 {
        match offset {
            WatchedOffset::HighWatermark => self.high_watermark(),
            WatchedOffset::LogEnd => self.log_end_offset(),
        }
    }
    /// Parks `watch` until `offset` moves.
    pub fn watch(&self, offset: WatchedOffset, watch: &Rc<FetchWatch>) {
        let watches = match offset {
            WatchedOffset::HighWatermark => &self.high_watermark_watches,
            WatchedOffset::LogEnd => &self.log_end_watches,
        };
        watches.borrow_mut().push(watch.clone());
    }
    pub fn unwatch(&self, watch: &Rc<FetchWatch>) {
        for watches in [&self.high_watermark_watches, &self.log_end_watches] {
            watches
                .borrow_mut()
                .retain(|parked| !Rc::ptr_eq(parked, watch));
        }
    }
    pub fn recovery_point(&self) -> i64 {
        self.flush_state.recovery_point.get()
    }

    pub fn is_deleted(&self) -> bool {
        self.deleted.get()
    }

    fn check_not_deleted(&self) -> Result<(), LogError> {
        if self.deleted.get() {
            return Err(LogError::LogDeleted(self.topic_partition.to_string()));
        }
        Ok(())
    }
    pub fn first_dirty_offset(&self) -> i64 {
        self.first_dirty_offset.get()
    }
    pub fn set_first_dirty_offset(&self, offset: i64) {
        self.first_dirty_offset
            .set(offset.max(self.log_start_offset()));
    }
    pub fn health(&self) -> &LogDirHealth {
        &self.health
    }
    pub fn size_bytes(&self) -> u64 {
        self.segments
            .borrow()
            .values()
            .map(|s| s.size_bytes())
            .sum()
    }
    pub fn segment_count(&self) -> usize {
        self.segments.borrow().len()
    }
    pub fn segments(&self) -> Vec<Rc<LogSegment>> {
        self.segments.borrow().values().cloned().collect()
    }
    pub fn active_segment(&self) -> Rc<LogSegment> {
        self.segments.borrow().values().next_back().unwrap().clone()
    }
    pub fn latest_epoch(&self) -> Option<i32> {
        self.leader_epoch_cache.borrow().latest_epoch()
    }
    /// OffsetForLeaderEpoch's answer from this log (Kafka's
    /// `LeaderEpochFileCache.endOffsetFor`).
    pub fn end_offset_for_epoch(&self, epoch: i32) -> Option<(i32, i64)> {
        self.leader_epoch_cache
            .borrow()
            .end_offset_for(epoch, self.log_end_offset())
    }

    /// Validates, stamps (offsets, leader epoch, LogAppendTime) and appends the
    /// batches a leader received. Nothing of a request with a bad batch is written.
    /// The produced bytes are written as they are, behind a stamped copy of
    /// the batch header: no copy of the records.
    pub async fn append_as_leader(
        &self,
        records: impl AsRef<[u8]>,
        leader_epoch: i32,
        now_ms: i64,
    ) -> Result<LogAppendInfo, LogError> {
        self.health.check()?;
        self.check_not_deleted()?;
        let config = self.config();
        let records = records.as_ref();
        let produced = validate_for_append(records, &config, now_ms)?;
        assert_eq!(records.len(), produced.size_bytes(), "one whole batch");
        // A topic whose compression.type names a codec stores every batch in it.
        let recompressed = match config.compression {
            TopicCompression::Codec(target) if produced.compression()? != target => {
                let (batch, levels) = (records.to_vec(), CompressionLevels::of(&config));
                let batch = run_blocking(move || Ok(recompress(&batch, &produced, target, levels)))
                    .await
                    .map_err(LogError::from)??;
                if batch.len() > config.max_message_bytes {
                    return Err(LogError::MessageTooLarge {
                        size_bytes: batch.len(),
                        max_bytes: config.max_message_bytes,
                    });
                }
                Some(batch)
            }
            _ => None,
        };
        let records = recompressed.as_deref().unwrap_or(records);
        let _permit = permit(&self.append_lock).await;
        self.check_not_deleted()?;
        if let SequenceCheck::Duplicate { first_offset } =
            self.producer_state.borrow().check(&produced)?
        {
            // A retry of a batch already written: acknowledge, write nothing.
            return Ok(LogAppendInfo {
                first_offset,
                last_offset: first_offset + produced.last_offset_delta as i64,
                log_append_time_ms: -1,
                log_start_offset: self.log_start_offset(),
            });
        }
        let log_append_time_ms = match config.message_timestamp_type {
            TimestampPolicy::LogAppendTime => Some(now_ms),
            TimestampPolicy::CreateTime => None,
        };
        let first_offset = self.log_end_offset();
        let (header_bytes, records) = records.split_at(RECORD_BATCH_OVERHEAD);
        let mut header_bytes: [u8; RECORD_BATCH_OVERHEAD] = header_bytes
            .try_into()
            .expect("a validated batch has a header");
        stamp_batch(
            &mut header_bytes,
            records,
            &AppendStamp {
                base_offset: first_offset,
                partition_leader_epoch: leader_epoch,
                log_append_time_ms,
            },
        );
        let header = RecordBatchHeader::parse(&header_bytes)?;
        let batch = AppendedBatch {
            position_in_buffer: 0,
            header,
        };
        self.append_locked(&[&header_bytes, records], &[batch], now_ms)
            .await?;
        self.producer_state.borrow_mut().update(&header);
        let epoch_changed = self
            .leader_epoch_cache
            .borrow_mut()
            .assign(leader_epoch, first_offset);
        if epoch_changed {
            self.write_leader_epoch_checkpoint().await?;
        }
        self.unflushed_messages
            .set(self.unflushed_messages.get() + header.next_offset() - first_offset);
        if self.unflushed_messages.get() >= config.flush_messages {
            self.flush().await?;
        }
        Ok(LogAppendInfo {
            first_offset,
            last_offset: header.last_offset(),
            log_append_time_ms: log_append_time_ms.unwrap_or(-1),
            log_start_offset: self.log_start_offset(),
        })
    }

    /// Appends batches, given in `parts` written back to back, rolling first
    /// when they would not fit the active segment.
    async fn append_locked(
        &self,
        parts: &[&[u8]],
        batches: &[AppendedBatch],
        now_ms: i64,
    ) -> Result<(), LogError> {
        let config = self.config();
        let last = batches.last().expect("at least one batch").header;
        let size_bytes: u64 = parts.iter().map(|part| part.len() as u64).sum();
        let max_timestamp = batches
            .iter()
            .map(|batch| batch.header.max_timestamp)
            .max()
            .expect("at least one batch");
        let mut active = self.active_segment();
        if active.should_roll(
            &config,
            size_bytes,
            max_timestamp,
            last.last_offset(),
            now_ms,
        ) {
            active = self.roll_locked(now_ms).await?;
        }
        active
            .append(parts, batches)
            .map_err(|error| self.health.on_error(error.into()))?;
        self.log_end_offset.set(last.next_offset());
        wake(&self.log_end_watches);
        if config.preallocate && active.is_half_way_to_roll(&config, now_ms) {
            self.prepare_next_segment(&active, &config);
        }
        Ok(())
    }

    /// Starts making the next segment's files in the background, once per
    /// active segment and one at a time; a prepared one not yet used waits
    /// for the next roll.
    fn prepare_next_segment(&self, active: &LogSegment, config: &LogConfig) {
        if self.next_segment_prepared_for.get() == Some(active.base_offset())
            || !matches!(*self.next_segment.borrow(), NextSegment::Idle)
        {
            return;
        }
        self.next_segment_prepared_for
            .set(Some(active.base_offset()));
        *self.next_segment.borrow_mut() = NextSegment::Preparing;
        let next_segment = self.next_segment.clone();
        let (dir, name_offset, size_bytes) =
            (self.dir.clone(), active.base_offset(), config.segment_bytes);
        let partition = self.topic_partition.clone();
        let hold = config.file_delete_delay();
        glommio::spawn_local(async move {
            let started = Instant::now();
            let prepared = PreparedSegment::create(&dir, name_offset, size_bytes).await;
            activity::record(ActivityKind::SegmentPrepare, started);
            let abandoned = match &*next_segment.borrow() {
                NextSegment::Preparing => false,
                NextSegment::Abandoned => true,
                NextSegment::Idle | NextSegment::Ready(_) => {
                    unreachable!("one preparation at a time")
                }
            };
            match prepared {
                Ok(prepared) if abandoned => {
                    if let Err(error) = prepared.remove(hold).await {
                        warn!(%partition, %error, "could not remove a next segment left unused");
                    }
                }
                Ok(prepared) => *next_segment.borrow_mut() = NextSegment::Ready(Box::new(prepared)),
                Err(_) if abandoned => {}
                Err(error) => {
                    // The roll makes the segment itself, as without preparation.
                    warn!(%partition, %error, "could not prepare the next segment");
                    *next_segment.borrow_mut() = NextSegment::Idle;
                }
            }
        })
        .detach();
    }

    /// Appends what a follower fetched from its leader, as the leader stored
    /// it: the leader's offsets, epochs and timestamps, byte for byte. Whole
    /// batches at or after the log end, in order; their epochs go to the
    /// epoch cache and idempotent producers' state follows them, so a
    /// follower that becomes leader deduplicates as the old leader did.
    /// Returns the new log end.
    pub async fn append_as_follower(&self, records: &[u8], now_ms: i64) -> Result<i64, LogError> {
        self.health.check()?;
        self.check_not_deleted()?;
        let mut batches = Vec::new();
        let mut iter = BatchIter::new(records);
        loop {
            let position_in_buffer = iter.position();
            let Some(batch) = iter.next() else { break };
            let header = validate_batch(batch?.1)?;
            batches.push(AppendedBatch {
                position_in_buffer,
                header,
            });
        }
        let Some(first) = batches.first() else {
            return Ok(self.log_end_offset());
        };
        let first_offset = first.header.base_offset;
        // An empty follower log (started again at its leader's log start)
        // whose first batch began below it: DeleteRecords moved the leader's
        // log start into that batch. The log starts again at the batch.
        let log_end_offset = self.log_end_offset();
        if first_offset < log_end_offset
            && log_end_offset == self.log_start_offset()
            && first.header.last_offset() >= log_end_offset
        {
            self.truncate_fully_and_start_at(first_offset).await?;
        }
        let _permit = permit(&self.append_lock).await;
        self.check_not_deleted()?;
        let mut next_offset = self.log_end_offset();
        for AppendedBatch { header, .. } in &batches {
            if header.base_offset < next_offset {
                return Err(LogError::InvalidRecord(format!(
                    "a replicated batch at offset {} is below the log end {next_offset}",
                    header.base_offset
                )));
            }
            next_offset = header.next_offset();
        }
        self.append_locked(&[records], &batches, now_ms).await?;
        let mut epochs_changed = false;
        {
            let mut producers = self.producer_state.borrow_mut();
            let mut epochs = self.leader_epoch_cache.borrow_mut();
            for AppendedBatch { header, .. } in &batches {
                if header.has_producer_id() {
                    producers.update(header);
                }
                epochs_changed |= epochs.assign(header.partition_leader_epoch, header.base_offset);
            }
        }
        if epochs_changed {
            self.write_leader_epoch_checkpoint().await?;
        }
        let config = self.config();
        self.unflushed_messages
            .set(self.unflushed_messages.get() + next_offset - first_offset);
        if self.unflushed_messages.get() >= config.flush_messages {
            self.flush().await?;
        }
        Ok(next_offset)
    }

    /// A new leader epoch starts at the log end (Kafka's `makeLeader`): it
    /// goes to the epoch cache at once, so a follower fetching with an older
    /// epoch learns where that epoch ended even before anything is appended.
    pub async fn assign_epoch_start_offset(&self, leader_epoch: i32) -> Result<(), LogError> {
        let _permit = permit(&self.append_lock).await;
        let changed = self
            .leader_epoch_cache
            .borrow_mut()
            .assign(leader_epoch, self.log_end_offset());
        if changed {
            self.write_leader_epoch_checkpoint_in_background();
        }
        Ok(())
    }

    /// A follower's log start follows its leader's (DeleteRecords, retention
    /// there), never past its own log end.
    pub async fn maybe_follow_log_start_offset(
        &self,
        leader_log_start_offset: i64,
    ) -> Result<(), LogError> {
        // Most fetches find it where it was: no wait behind retention then.
        if leader_log_start_offset.min(self.log_end_offset()) <= self.log_start_offset() {
            return Ok(());
        }
        let _permit = permit(&self.maintenance_lock).await;
        let offset = leader_log_start_offset.min(self.log_end_offset());
        if offset > self.log_start_offset() {
            self.advance_log_start_offset(offset).await?;
        }
        Ok(())
    }

    /// Starts a new active segment at the log end (from the prepared files
    /// when there are some). The old one gets its final time index entry; in
    /// the background its unused blocks go back and it is flushed, after
    /// which the recovery point moves past it.
    pub async fn roll(self: &Rc<Self>, now_ms: i64) -> Result<(), LogError> {
        let _permit = permit(&self.append_lock).await;
        self.roll_locked(now_ms).await?;
        Ok(())
    }

    async fn roll_locked(&self, now_ms: i64) -> Result<Rc<LogSegment>, LogError> {
        let started = Instant::now();
        let old = self.active_segment();
        let base = self.log_end_offset();
        if old.base_offset() == base {
            return Ok(old); // already empty at the log end
        }
        old.on_become_inactive()
            .map_err(|error| self.health.on_error(error.into()))?;
        let prepared = match self.next_segment.replace(NextSegment::Idle) {
            NextSegment::Ready(prepared) => Some(prepared),
            // None, or still in the making (it serves the roll after this
            // one), or abandoned: as it was.
            unused => {
                self.next_segment.replace(unused);
                None
            }
        };
        let config = self.config();
        let segment = match prepared {
            Some(prepared) => {
                LogSegment::from_prepared(&self.dir, base, *prepared, &config, now_ms).await
            }
            None => LogSegment::create(&self.dir, base, "", &config, now_ms).await,
        };
        let segment = Rc::new(segment.map_err(|error| self.health.on_error(error.into()))?);
        self.segments.borrow_mut().insert(base, segment.clone());
        info!(partition = %self.topic_partition, base, "rolled a new segment");
        // Give back the old segment's unused blocks (`worth_trimming`) and
        // flush everything before the new segment in the background; only
        // flushed data moves the recovery point (what a crash rescans).
        let trim = worth_trimming(&old, &config);
        let health = self.health.clone();
        let flush_state = self.flush_state.clone();
        let generation = flush_state.generation.get();
        let closed: Vec<Rc<LogSegment>> = self
            .segments
            .borrow()
            .range(..base)
            .map(|(_, s)| s.clone())
            .collect();
        glommio::spawn_local(async move {
            // Not under the lock: flushing a 1 GiB segment takes seconds
            // behind writeback, and a shard move (`hand_off`) waited for it
            // with the partition's appends held. The fsyncs change no file.
            for segment in closed
                .iter()
                .filter(|s| s.next_offset() > flush_state.recovery_point.get())
            {
                if let Err(error) = segment.flush().await {
                    health.on_error(error.into());
                    return;
                }
            }
            let _permit = permit(&flush_state.lock).await;
            if flush_state.generation.get() != generation {
                // Truncated meanwhile: these offsets may no longer exist, and
                // a truncation into `old` took its preallocation already. Or
                // the log left this shard: its files are no longer ours to
                // change, and `old` keeps the blocks past its end until it
                // is deleted (the next shard trims only its active segment).
                // For a segment rolled full that is less than a batch.
                return;
            }
            // Flushed first, so ext4 does not hold the truncate until the
            // segment's data is written (data=ordered): seconds under load.
            if trim {
                if let Err(error) = old.trim_preallocated().await {
                    health.on_error(error.into());
                    return;
                }
            }
            flush_state
                .recovery_point
                .set(flush_state.recovery_point.get().max(base));
        })
        .detach();
        activity::record(ActivityKind::SegmentRoll, started);
        Ok(segment)
    }

    /// Flushes every segment holding unflushed offsets; the recovery point moves
    /// to the log end as it was when the flush began, with the leader epochs
    /// of what it passes on disk.
    pub async fn flush(&self) -> Result<(), LogError> {
        let _permit = permit(&self.flush_state.lock).await;
        if self.epoch_checkpoint.in_background.get() > 0 {
            self.write_leader_epoch_checkpoint().await?;
        }
        let up_to = self.log_end_offset();
        let recovery_point = self.recovery_point();
        let segments: Vec<_> = self
            .segments()
            .into_iter()
            .filter(|segment| {
                segment.next_offset() > recovery_point || segment.base_offset() >= recovery_point
            })
            .collect();
        for segment in segments {
            segment
                .flush()
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
        }
        self.flush_state
            .recovery_point
            .set(recovery_point.max(up_to));
        self.unflushed_messages.set(0);
        Ok(())
    }

    /// Flushes when `flush.ms` has passed since the last flush (the log flusher).
    pub async fn maybe_flush_on_time(&self, now_ms: i64) -> Result<(), LogError> {
        let config = self.config();
        if self.unflushed_messages.get() > 0
            && now_ms.saturating_sub(self.last_flush_ms.get()) >= config.flush_ms
        {
            self.flush().await?;
            self.last_flush_ms.set(now_ms);
        }
        Ok(())
    }

    /// Reads whole batches from the one holding `fetch_offset`, below `max_offset`
    /// (exclusive; the high watermark for consumers), at most `max_bytes` unless
    /// the first batch is larger and `min_one_batch` is set.
    pub async fn read(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        max_offset: i64,
        min_one_batch: bool,
    ) -> Result<FetchDataInfo, LogError> {
        self.health.check()?;
        self.check_not_deleted()?;
        let (log_start_offset, log_end_offset) = (self.log_start_offset(), self.log_end_offset());
        if fetch_offset < log_start_offset || fetch_offset > log_end_offset {
            return Err(LogError::OffsetOutOfRange {
                offset: fetch_offset,
                log_start_offset,
                log_end_offset,
            });
        }
        let empty = FetchDataInfo {
            fetch_offset,
            records: None,
        };
        let max_offset = max_offset.min(log_end_offset);
        if fetch_offset >= max_offset {
            return Ok(empty);
        }
        let candidates: Vec<Rc<LogSegment>> = {
            let segments = self.segments.borrow();
            let floor = segments
                .range(..=fetch_offset)
                .next_back()
                .map_or(log_start_offset, |(base, _)| *base);
            segments.range(floor..).map(|(_, s)| s.clone()).collect()
        };
        for segment in candidates {
            if segment.base_offset() >= max_offset {
                break;
            }
            let max_position = if max_offset >= segment.next_offset() {
                segment.size_bytes()
            } else {
                match segment.translate_offset(max_offset).await {
                    Ok(Some((position, _))) => position,
                    Ok(None) => segment.size_bytes(),
                    Err(error) => return Err(self.health.on_error(error.into())),
                }
            };
            let slice = segment
                .read(fetch_offset, max_bytes, max_position, min_one_batch)
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
            if slice.is_some() {
                return Ok(FetchDataInfo {
                    fetch_offset,
                    records: slice,
                });
            }
        }
        Ok(empty)
    }

    /// ListOffsets by timestamp: the first record whose timestamp is at or after
    /// `timestamp`, or None when every record is older.
    pub async fn fetch_offset_by_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<Option<TimestampAndOffset>, LogError> {
        self.health.check()?;
        let start_offset = self.log_start_offset();
        for segment in self.segments() {
            let found = segment
                .find_batch_by_timestamp(timestamp, start_offset)
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
            let Some((position, header)) = found else {
                continue;
            };
            let batch = segment
                .log_file()
                .read_exact_at(position, header.size_bytes())
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
            return first_record_at_or_after(&batch, &header, timestamp, start_offset).map(Some);
        }
        Ok(None)
    }

    /// ListOffsets MAX_TIMESTAMP: the record holding the largest timestamp.
    pub async fn fetch_offset_of_max_timestamp(
        &self,
    ) -> Result<Option<TimestampAndOffset>, LogError> {
        let max = self
            .segments()
            .iter()
            .map(|segment| segment.max_timestamp())
            .max()
            .unwrap_or(-1);
        if max < 0 {
            return Ok(None);
        }
        self.fetch_offset_by_timestamp(max).await
    }

    /// DeleteRecords: moves the log start offset up to `offset`, which may not
    /// pass the high watermark (OFFSET_OUT_OF_RANGE); never moves it back. Reads
    /// below it are then out of range; the segments wholly below it go with the
    /// next retention pass. Returns the log start offset (the low watermark).
    pub async fn maybe_increment_log_start_offset(&self, offset: i64) -> Result<i64, LogError> {
        self.health.check()?;
        let _permit = permit(&self.maintenance_lock).await;
        self.check_not_deleted()?;
        if offset > self.high_watermark() {
            return Err(LogError::OffsetOutOfRange {
                offset,
                log_start_offset: self.log_start_offset(),
                log_end_offset: self.high_watermark(),
            });
        }
        if offset > self.log_start_offset() {
            self.advance_log_start_offset(offset).await?;
            info!(partition = %self.topic_partition, log_start_offset = offset, "log start offset moved by DeleteRecords");
        }
        Ok(self.log_start_offset())
    }

    /// Raises the log start offset, and with it what may not lie below it.
    async fn advance_log_start_offset(&self, offset: i64) -> Result<(), LogError> {
        assert!(offset >= self.log_start_offset() && offset <= self.log_end_offset());
        self.log_start_offset.set(offset);
        self.high_watermark.set(self.high_watermark().max(offset));
        self.first_dirty_offset
            .set(self.first_dirty_offset().max(offset));
        if self
            .leader_epoch_cache
            .borrow_mut()
            .truncate_from_start(offset)
        {
            self.write_leader_epoch_checkpoint().await?;
        }
        Ok(())
    }

    /// The log start offset when DeleteRecords moved it past the first segment's
    /// base, which is what `log-start-offset-checkpoint` keeps (as Kafka does).
    pub fn log_start_offset_checkpoint(&self) -> Option<i64> {
        let first_base = *self.segments.borrow().keys().next().unwrap();
        (self.log_start_offset() > first_base).then(|| self.log_start_offset())
    }

    /// Deletes closed segments past `retention.ms` or beyond `retention.bytes`,
    /// and those wholly below the log start offset (DeleteRecords, whatever the
    /// cleanup policy); the active segment is never deleted. Returns how many went.
    pub async fn delete_retained_segments(&self, now_ms: i64) -> Result<usize, LogError> {
        self.health.check()?;
        let config = self.config();
        // Not waiting behind the cleaner for a compacted log with nothing to delete.
        if !config.cleanup_policy.delete && self.log_start_offset_checkpoint().is_none() {
            return Ok(0);
        }
        let _permit = permit(&self.maintenance_lock).await;
        self.check_not_deleted()?;
        let segments = self.segments();
        let closed = &segments[..segments.len() - 1];
        // How far the log is over `retention.bytes`; None without a size limit.
        let mut size_over = (config.retention_bytes >= 0)
            .then(|| self.size_bytes() as i64 - config.retention_bytes);
        let mut doomed = Vec::new();
        for (i, segment) in closed.iter().enumerate() {
            let below_log_start = segments[i + 1].base_offset() <= self.log_start_offset();
            // Never what followers and consumers cannot have read yet.
            if segment.next_offset() > self.high_watermark() {
                break;
            }
            let delete = config.cleanup_policy.delete;
            let expired = delete
                && config.retention_ms >= 0
                && segment.max_timestamp() >= 0
                && now_ms - segment.max_timestamp() > config.retention_ms;
            let over_size =
                delete && size_over.is_some_and(|over| over >= segment.size_bytes() as i64);
            if !(expired || over_size || below_log_start) {
                break;
            }
            size_over = size_over.map(|over| over - segment.size_bytes() as i64);
            doomed.push(segment.clone());
        }
        if doomed.is_empty() {
            return Ok(0);
        }
        let new_start = segments[doomed.len()]
            .base_offset()
            .max(self.log_start_offset());
        {
            let mut map = self.segments.borrow_mut();
            for segment in &doomed {
                map.remove(&segment.base_offset());
            }
        }
        self.advance_log_start_offset(new_start).await?;
        for segment in &doomed {
            segment
                .delete_files(self.config().file_delete_delay())
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
        }
        info!(partition = %self.topic_partition, deleted = doomed.len(), log_start_offset = new_start, "retention deleted segments");
        Ok(doomed.len())
    }

    /// Removes every batch at or after `offset` (a follower diverging from its
    /// leader).
    pub async fn truncate_to(&self, offset: i64) -> Result<(), LogError> {
        self.health.check()?;
        let _exclusive = self.exclusive().await;
        self.check_not_deleted()?;
        if offset >= self.log_end_offset() {
            // No batch goes, but an epoch this broker started as leader and
            // appended nothing in does (Kafka's `truncateTo` too): kept, it
            // is the epoch the follower fetches with, the leader never had
            // it, and each fetch answers a divergence at this same offset.
            return self.truncate_epochs_to_log_end().await;
        }
        self.flush_state.next_generation();
        let offset = offset.max(self.log_start_offset());
        let later: Vec<Rc<LogSegment>> = {
            let mut map = self.segments.borrow_mut();
            let keys: Vec<i64> = map.range(offset..).map(|(base, _)| *base).collect();
            let keeps_one = map.len() > keys.len();
            keys.into_iter()
                .filter(|base| *base > offset || keeps_one)
                .filter_map(|base| map.remove(&base))
                .collect()
        };
        for segment in &later {
            segment
                .delete_files(self.config().file_delete_delay())
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
        }
        if self.segments.borrow().is_empty() {
            let segment = LogSegment::create(&self.dir, offset, "", &self.config(), 0)
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
            self.segments.borrow_mut().insert(offset, Rc::new(segment));
        }
        let active = self.active_segment();
        active
            .truncate_to(offset)
            .await
            .map_err(|error| self.health.on_error(error.into()))?;
        self.log_end_offset.set(active.next_offset());
        self.high_watermark
            .set(self.high_watermark().min(self.log_end_offset()));
        self.flush_state
            .recovery_point
            .set(self.recovery_point().min(self.log_end_offset()));
        self.first_dirty_offset
            .set(self.first_dirty_offset().min(self.log_end_offset()));
        self.truncate_epochs_to_log_end().await?;
        self.rebuild_producer_state().await
    }

    /// Forgets the epochs that start at or past the log end, on disk too.
    async fn truncate_epochs_to_log_end(&self) -> Result<(), LogError> {
        let dropped = self
            .leader_epoch_cache
            .borrow_mut()
            .truncate_from_end(self.log_end_offset());
        if dropped {
            self.write_leader_epoch_checkpoint().await?;
        }
        Ok(())
    }

    /// Empties the log and starts it again at `offset` (Kafka's
    /// `truncateFullyAndStartAt`): a follower whose log end is below its
    /// leader's log start, which it can never fetch from where it is.
    pub async fn truncate_fully_and_start_at(&self, offset: i64) -> Result<(), LogError> {
        self.health.check()?;
        let _exclusive = self.exclusive().await;
        self.check_not_deleted()?;
        self.flush_state.next_generation();
        let all: Vec<Rc<LogSegment>> = std::mem::take(&mut *self.segments.borrow_mut())
            .into_values()
            .collect();
        for segment in &all {
            segment
                .delete_files(self.config().file_delete_delay())
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
        }
        let segment = LogSegment::create(&self.dir, offset, "", &self.config(), 0)
            .await
            .map_err(|error| self.health.on_error(error.into()))?;
        self.segments.borrow_mut().insert(offset, Rc::new(segment));
        for position in [
            &self.log_end_offset,
            &self.flush_state.recovery_point,
            &self.first_dirty_offset,
        ] {
            position.set(offset);
        }
        self.log_start_offset.set(offset);
        self.high_watermark.set(offset);
        if self.leader_epoch_cache.borrow_mut().clear() {
            self.write_leader_epoch_checkpoint().await?;
        }
        self.producer_state.borrow_mut().clear();
        info!(partition = %self.topic_partition, log_start_offset = offset, "log emptied, starting again");
        Ok(())
    }

    /// Rebuilds idempotent producers' state from the batch headers in the log.
    async fn rebuild_producer_state(&self) -> Result<(), LogError> {
        self.producer_state.borrow_mut().clear();
        for segment in self.segments() {
            let mut headers = Vec::new();
            segment
                .scan_headers(0, segment.size_bytes(), |_, header| {
                    if header.has_producer_id() {
                        headers.push(*header);
                    }
                    std::ops::ControlFlow::Continue(())
                })
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
            let mut state = self.producer_state.borrow_mut();
            for header in &headers {
                state.update(header);
            }
        }
        Ok(())
    }

    /// Takes the log out of service for deletion: waits for in-flight appends
    /// and background work, refuses everything after, and renames the directory
    /// to `<topic>-<partition>.<id>-delete` (Kafka's marker) so a crash during
    /// the removal never leaves a half-deleted log to load. Returns the new path.
    pub async fn mark_deleted(&self) -> Result<PathBuf, LogError> {
        let _exclusive = self.exclusive().await;
        let _no_epoch_write = permit(&self.epoch_checkpoint.lock).await;
        self.leave_service();
        let doomed = self.dir.with_file_name(format!(
            "{}.{:x}{DELETE_DIR_SUFFIX}",
            self.topic_partition,
            crate::log::wall_clock_ms()
        ));
        let (from, to) = (self.dir.clone(), doomed.clone());
        run_blocking(move || {
            std::fs::rename(&from, &to)?;
            std::fs::File::open(to.parent().unwrap())?.sync_all()
        })
        .await
        .map_err(|error| self.health.on_error(error.into()))?;
        self.hold_files_past_deletion();
        Ok(doomed)
    }

    /// Every file of a log whose directory is about to be removed keeps its
    /// blocks past the removal (`SegmentFile::hold_past_deletion`).
    fn hold_files_past_deletion(&self) {
        let hold = self.config().file_delete_delay();
        for segment in self.segments.borrow().values() {
            segment.hold_files_past_deletion(hold);
        }
        if let Some(prepared) = self.abandon_next_segment() {
            prepared.hold_files_past_deletion(hold);
        }
    }

    /// The last step of moving this log to another directory: with every
    /// lock held, `future` (a copy taken while the log served) is brought up
    /// to date (each file again but the closed segments' `.log` files, which
    /// never change in place; those gone here go there), flushed and renamed
    /// to `destination`; this log is then deleted as `mark_deleted` does and
    /// its old directory returned, for removal. Returns also the recovery
    /// point and high watermark the moved log opens with.
    pub async fn finish_move(
        &self,
        future: PathBuf,
        destination: PathBuf,
    ) -> Result<(PathBuf, i64, i64), LogError> {
        let _exclusive = self.exclusive().await;
        for segment in self.segments() {
            segment.flush().await?;
        }
        self.write_leader_epoch_checkpoint().await?;
        let _no_epoch_write = permit(&self.epoch_checkpoint.lock).await;
        let source = self.dir.clone();
        let doomed = self.dir.with_file_name(format!(
            "{}.{:x}{DELETE_DIR_SUFFIX}",
            self.topic_partition,
            crate::log::wall_clock_ms()
        ));
        let (from, to) = (source.clone(), doomed.clone());
        run_blocking(move || {
            sync_copy(&from, &future, true)?;
            std::fs::rename(&future, &destination)?;
            std::fs::File::open(destination.parent().unwrap())?.sync_all()?;
            std::fs::rename(&from, &to)?;
            std::fs::File::open(to.parent().unwrap())?.sync_all()
        })
        .await
        .map_err(|error| self.health.on_error(error.into()))?;
        self.leave_service();
        self.hold_files_past_deletion();
        Ok((doomed, self.log_end_offset(), self.high_watermark()))
    }

    /// Replaces the closed segments in `old` (consecutive) with `new`, whose files
    /// are already in place under their final names.
    pub(super) fn replace_segments(&self, old: &[Rc<LogSegment>], new: Rc<LogSegment>) {
        let mut map = self.segments.borrow_mut();
        for segment in old {
            map.remove(&segment.base_offset());
        }
        map.insert(new.base_offset(), new);
    }

    pub(super) async fn maintenance_permit(&self) -> Permit<'_> {
        permit(&self.maintenance_lock).await
    }

    /// The log leaves this shard's service (deleted, moved, handed off),
    /// with every lock held (`exclusive`): everything after is refused, and
    /// the background work begun before changes nothing more.
    fn leave_service(&self) {
        self.epoch_checkpoint.deleted.set(true);
        self.deleted.set(true);
        self.flush_state.next_generation();
        // Parked fetches read again now and find the partition gone, as
        // Kafka completes a DelayedFetch whose partition went away.
        self.wake_all_watches();
    }

    /// Every lock: nothing else touches the log while they are held.
    async fn exclusive(&self) -> [Permit<'_>; 3] {
        [
            permit(&self.maintenance_lock).await,
            permit(&self.append_lock).await,
            permit(&self.flush_state.lock).await,
        ]
    }

    async fn write_leader_epoch_checkpoint(&self) -> Result<(), LogError> {
        write_epoch_checkpoint(&self.leader_epoch_cache, &self.epoch_checkpoint)
            .await
            .map_err(|error| self.health.on_error(error.into()))
    }

    /// Writes `leader-epoch-checkpoint` without waiting for it: a new leader
    /// epoch begun at the log end, which matters on disk only once records
    /// of it are below the recovery point, and `flush` sees to that. (A
    /// thousand partitions made leaders at once would otherwise wait for two
    /// fsyncs each, one after another.)
    fn write_leader_epoch_checkpoint_in_background(&self) {
        let (cache, checkpoint) = (
            self.leader_epoch_cache.clone(),
            self.epoch_checkpoint.clone(),
        );
        let health = self.health.clone();
        checkpoint
            .in_background
            .set(checkpoint.in_background.get() + 1);
        glommio::spawn_local(async move {
            if let Err(error) = write_epoch_checkpoint(&cache, &checkpoint).await {
                health.on_error(error.into());
            }
            checkpoint
                .in_background
                .set(checkpoint.in_background.get() - 1);
        })
        .detach();
    }

    /// Waits, holding nothing, until no background flush holds the flush
    /// lock. A roll's trim holds it while it waits for the disk, at times for
    /// seconds behind writeback; a shard move waits here before it closes
    /// the partition to requests, rather than in `hand_off` after.
    pub async fn wait_for_background_flush(&self) {
        drop(permit(&self.flush_state.lock).await);
    }

    /// Takes the log out of this shard's service for another shard of the
    /// broker to take up at once (a shard move): waits for in-flight appends
    /// and background work, refuses everything after, and hands over its
    /// segments open, with their indexes, so the next shard reads nothing. The
    /// files are left as a trusted open reads them (every index entry
    /// written), for a restart, or a next shard out of descriptors. A next
    /// segment still being prepared is not waited for: its preparation
    /// removes its own files (`NextSegment::Abandoned`). Nothing is flushed:
    /// the page cache is the process's, and the recovery point stays what was.
    pub async fn hand_off(&self) -> Result<LogHandoff, LogError> {
        let _exclusive = self.exclusive().await;
        self.check_not_deleted()?;
        if self.epoch_checkpoint.in_background.get() > 0 {
            self.write_leader_epoch_checkpoint().await?;
        }
        let _no_epoch_write = permit(&self.epoch_checkpoint.lock).await;
        self.remove_next_segment().await?;
        // Preallocated blocks stay: the next shard takes them up.
        for segment in self.segments.borrow().values() {
            segment
                .write_pending_index_entries()
                .map_err(|error| self.health.on_error(error.into()))?;
        }
        let segments = self.hand_off_segments();
        self.leave_service();
        Ok(LogHandoff {
            checkpoint: PartitionCheckpoint {
                recovery_point: self.recovery_point(),
                high_watermark: Some(self.high_watermark()),
                log_start_offset: self.log_start_offset_checkpoint(),
                first_dirty_offset: Some(self.first_dirty_offset()),
            },
            log: HandedOffLog {
                producers: std::mem::take(&mut *self.producer_state.borrow_mut()),
                leader_epochs: self.leader_epoch_cache.borrow().clone(),
                segments,
            },
        })
    }

    /// Every segment, open, for the next shard (`LogSegment::hand_off`); None
    /// when the process is out of descriptors: the next shard then opens the
    /// files.
    fn hand_off_segments(&self) -> Option<Vec<SegmentHandoff>> {
        let segments: Result<Vec<_>, _> = self
            .segments
            .borrow()
            .values()
            .map(|segment| segment.hand_off())
            .collect();
        segments
            .inspect_err(|error| {
                warn!(partition = %self.topic_partition, %error, "the next shard opens the log's files");
            })
            .ok()
    }

    /// Flushes everything and leaves files ready for a clean restart.
    pub async fn close(&self) -> Result<(), LogError> {
        let _permit = permit(&self.append_lock).await;
        self.active_segment()
            .trim_preallocated()
            .await
            .map_err(|error| self.health.on_error(error.into()))?;
        self.remove_next_segment().await?;
        self.flush().await
    }

    /// The log leaves this shard: its next segment's files go, now if
    /// ready, or when their preparation ends.
    async fn remove_next_segment(&self) -> Result<(), LogError> {
        if let Some(prepared) = self.abandon_next_segment() {
            prepared
                .remove(self.config().file_delete_delay())
                .await
                .map_err(|error| self.health.on_error(error.into()))?;
        }
        Ok(())
    }

    /// Marks the next segment abandoned (`NextSegment::Abandoned`); the
    /// prepared one, if any, for the caller to remove.
    fn abandon_next_segment(&self) -> Option<Box<PreparedSegment>> {
        match self.next_segment.replace(NextSegment::Abandoned) {
            NextSegment::Ready(prepared) => Some(prepared),
            NextSegment::Idle | NextSegment::Preparing | NextSegment::Abandoned => None,
        }
    }
}

/// Validates a produced partition's records for the topic's config: exactly
/// one well-formed batch of client records, as Kafka requires of v2 clients.
fn validate_for_append(
    records: &[u8],
    config: &LogConfig,
    now_ms: i64,
) -> Result<RecordBatchHeader, LogError> {
    let mut batches = BatchIter::new(records);
    let (_, bytes) = batches
        .next()
        .ok_or_else(|| LogError::InvalidRecord("a produce with no record batch".into()))??;
    if batches.next().is_some() {
        return Err(LogError::InvalidRecord(
            "a produce carries exactly one record batch per partition".into(),
        ));
    }
    if bytes.len() > config.max_message_bytes {
        return Err(LogError::MessageTooLarge {
            size_bytes: bytes.len(),
            max_bytes: config.max_message_bytes,
        });
    }
    let header = validate_produced_batch(bytes)?;
    if header.is_control() {
        return Err(LogError::InvalidRecord(
            "clients cannot write control batches".into(),
        ));
    }
    if config.cleanup_policy.compact {
        let section = decompress(header.compression()?, &bytes[RECORD_BATCH_OVERHEAD..])?;
        for record in RecordIter::new(&section) {
            if record?.key.is_none() {
                return Err(LogError::InvalidRecord(
                    "compacted topic cannot accept a record without a key".into(),
                ));
            }
        }
    }
    if config.message_timestamp_type == TimestampPolicy::CreateTime {
        if header.max_timestamp > now_ms.saturating_add(config.message_timestamp_after_max_ms) {
            return Err(LogError::InvalidTimestamp(format!(
                "timestamp {} is more than message.timestamp.after.max.ms ahead of the broker's clock",
                header.max_timestamp
            )));
        }
        if header.base_timestamp >= 0
            && header.base_timestamp < now_ms.saturating_sub(config.message_timestamp_before_max_ms)
        {
            return Err(LogError::InvalidTimestamp(format!(
                "timestamp {} is more than message.timestamp.before.max.ms behind the broker's clock",
                header.base_timestamp
            )));
        }
    }
    Ok(header)
}

/// Within one batch: the first record at or after `timestamp` (and at or after
/// `start_offset`).
fn first_record_at_or_after(
    batch: &[u8],
    header: &RecordBatchHeader,
    timestamp: i64,
    start_offset: i64,
) -> Result<TimestampAndOffset, LogError> {
    let whole_batch = TimestampAndOffset {
        timestamp: header.max_timestamp,
        offset: header.base_offset.max(start_offset),
        leader_epoch: header.partition_leader_epoch,
    };
    if header.timestamp_type() == TimestampType::LogAppendTime {
        return Ok(whole_batch);
    }
    let section = decompress(header.compression()?, &batch[RECORD_BATCH_OVERHEAD..])?;
    for record in RecordIter::new(&section) {
        let record = record?;
        let record_timestamp = header.base_timestamp + record.timestamp_delta;
        let offset = header.base_offset + record.offset_delta as i64;
        if record_timestamp >= timestamp && offset >= start_offset {
            return Ok(TimestampAndOffset {
                timestamp: record_timestamp,
                offset,
                leader_epoch: header.partition_leader_epoch,
            });
        }
    }
    Ok(whole_batch)
}

/// Whether a roll gives back the old segment's blocks preallocated past its
/// end: when more than `max.message.bytes` of them, or an eighth of the
/// preallocation if less, are left. A roll for size leaves less than the
/// batch that did not fit, under 1 MiB of a 1 GiB segment: not worth the
/// truncate, which under load waits seconds for ext4's journal, holding the
/// log's flush lock that truncations (with the appends held) and shard moves
/// wait for. A roll for time or a full index can leave most of the segment's
/// blocks; those go back.
fn worth_trimming(old: &LogSegment, config: &LogConfig) -> bool {
    let preallocated_bytes = old.preallocated_bytes();
    let unused_bytes = preallocated_bytes.saturating_sub(old.size_bytes());
    unused_bytes > (config.max_message_bytes as u64).min(preallocated_bytes / 8)
}

/// A log's segments from its directory, after a crash or a restart: those
/// past the recovery point are recovered unless the shutdown was clean. Also
/// the (leader epoch, base offset) of each batch recovery saw.
async fn open_segments(
    dir: &Path,
    tp: &TopicPartition,
    config: &LogConfig,
    recovery_point: i64,
    had_clean_shutdown: bool,
    now_ms: i64,
) -> Result<(BTreeMap<i64, Rc<LogSegment>>, Vec<(i32, i64)>), LogError> {
    // Two trips to the blocking pool for a log without crash leftovers to mend.
    let owned_dir = dir.to_path_buf();
    let swaps = run_blocking(move || {
        std::fs::create_dir_all(&owned_dir)?;
        remove_leftovers(&owned_dir)
    })
    .await?;
    complete_interrupted_swaps(dir, swaps, config, now_ms).await?;
    let owned_dir = dir.to_path_buf();
    let base_offsets = run_blocking(move || list_segments(&owned_dir)).await?;
    let mut segments = BTreeMap::new();
    let mut epochs_seen = Vec::new();
    let mut next_expected = None;
    let mut truncated_at = None;
    for (i, &base) in base_offsets.iter().enumerate() {
        if truncated_at.is_some() || next_expected.is_some_and(|next| base < next) {
            // Data after a cut tail is unreachable; so is a segment that overlaps.
            warn!(partition = %tp, base, "deleting a segment after a truncated or overlapping one");
            let owned_dir = dir.to_path_buf();
            run_blocking(move || {
                remove_segment_files(&owned_dir, base);
                Ok(())
            })
            .await?;
            continue;
        }
        let next_base = base_offsets.get(i + 1).copied();
        let recover = !had_clean_shutdown && next_base.is_none_or(|next| next > recovery_point);
        let (segment, recovery) = LogSegment::open(dir, base, "", config, recover, now_ms).await?;
        if let Some(recovery) = recovery {
            // Past the recovery point a cut tail makes later data unreachable
            // (it was never flushed); below it, only this segment is cut.
            if recover && recovery.truncated_bytes > 0 {
                truncated_at = Some(segment.next_offset());
            }
            epochs_seen.extend(recovery.epochs);
        }
        next_expected = Some(segment.next_offset());
        segments.insert(base, Rc::new(segment));
    }
    Ok((segments, epochs_seen))
}

/// A log's segments as the shard that handed it off left them: no reads.
fn take_up_segments(
    dir: &Path,
    handed_off: Vec<SegmentHandoff>,
    config: &LogConfig,
) -> BTreeMap<i64, Rc<LogSegment>> {
    assert!(!handed_off.is_empty(), "a log has an active segment");
    handed_off
        .into_iter()
        .map(|segment| {
            let base_offset = segment.base_offset();
            let segment = LogSegment::take_up(dir, segment, config);
            (base_offset, Rc::new(segment))
        })
        .collect()
}

/// Finishes the cleaner swaps a crash interrupted (`swaps`, from
/// `remove_leftovers`): a `.swap` segment replaces the segments its offsets
/// cover.
async fn complete_interrupted_swaps(
    dir: &Path,
    swaps: Vec<i64>,
    config: &LogConfig,
    now_ms: i64,
) -> Result<(), LogError> {
    for base in swaps {
        warn!(dir = %dir.display(), base, "completing an interrupted cleaner swap");
        let (segment, _) =
            LogSegment::open(dir, base, SWAP_FILE_SUFFIX, config, true, now_ms).await?;
        let swap_end = segment.next_offset();
        drop(segment);
        let owned_dir = dir.to_path_buf();
        run_blocking(move || {
            for old in log_base_offsets(&file_names(&owned_dir)?) {
                if old >= base && old < swap_end {
                    remove_segment_files(&owned_dir, old);
                }
            }
            Ok(())
        })
        .await?;
        rename_segment_files(dir, base, SWAP_FILE_SUFFIX, "").await?;
    }
    Ok(())
}

/// Removes what a crash left of a cleaner pass (`.cleaned`), of a deletion
/// (`.deleted`) and of a segment prepared ahead (`.prepared`); returns the
/// base offsets of the `.swap` segments, which replace others. Blocking.
fn remove_leftovers(dir: &Path) -> std::io::Result<Vec<i64>> {
    let mut swaps = Vec::new();
    for entry in std::fs::read_dir(dir)? {
        let path = entry?.path();
        let name = path.file_name().unwrap().to_string_lossy().into_owned();
        if name.ends_with(CLEANED_FILE_SUFFIX) || name.ends_with(".deleted") {
            std::fs::remove_file(&path)?;
        } else if name.ends_with(PREPARED_FILE_SUFFIX) {
            // A preparation still running on the shard that handed the log
            // here removes its files too.
            match std::fs::remove_file(&path) {
                Err(error) if error.kind() == std::io::ErrorKind::NotFound => {}
                result => result?,
            }
        } else if let Some(stem) =
            name.strip_suffix(&format!("{LOG_FILE_SUFFIX}{SWAP_FILE_SUFFIX}"))
        {
            if let Some(base) = parse_base_offset(stem) {
                swaps.push(base);
            }
        }
    }
    Ok(swaps)
}

/// The names of the directory's files. Blocking.
fn file_names(dir: &Path) -> std::io::Result<Vec<String>> {
    std::fs::read_dir(dir)?
        .map(|entry| Ok(entry?.file_name().to_string_lossy().into_owned()))
        .collect()
}

/// The base offsets of the `.log` files among `names`, in their order.
fn log_base_offsets(names: &[String]) -> Vec<i64> {
    names
        .iter()
        .filter_map(|name| {
            name.strip_suffix(LOG_FILE_SUFFIX)
                .and_then(parse_base_offset)
        })
        .collect()
}

/// A segment's three files gone, those already missing included. Blocking.
fn remove_segment_files(dir: &Path, base: i64) {
    for suffix in [LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX] {
        let _ = std::fs::remove_file(segment_file_path(dir, base, suffix));
    }
}

/// The sorted base offsets of the directory's segments, once interrupted
/// swaps are complete and the index files left without their `.log` are
/// deleted: those a crash between a roll's renames leaves
/// (`LogSegment::from_prepared`), as Kafka's log loader does, and `.swap`
/// ones whose segment was already swapped in (rebuilt on open). Blocking.
fn list_segments(dir: &Path) -> std::io::Result<Vec<i64>> {
    let names = file_names(dir)?;
    let mut base_offsets = log_base_offsets(&names);
    base_offsets.sort_unstable();
    for name in names {
        let index_of = [INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX]
            .iter()
            .find_map(|suffix| name.strip_suffix(suffix).and_then(parse_base_offset));
        let orphaned = index_of.is_some_and(|base| base_offsets.binary_search(&base).is_err());
        if orphaned || name.ends_with(SWAP_FILE_SUFFIX) {
            let path = dir.join(name);
            warn!(file = %path.display(), "deleting a leftover index file");
            std::fs::remove_file(&path)?;
        }
    }
    Ok(base_offsets)
}

/// Renames a segment's three files from one suffix to another (`.cleaned` ->
/// `.swap` -> final), the cleaner's crash-safe hand-over. On the blocking
/// pool: the directory's fsync waits for the disk, and on the shard's thread
/// it held every partition of the shard.
pub(super) async fn rename_segment_files(
    dir: &Path,
    base: i64,
    from: &'static str,
    to: &'static str,
) -> std::io::Result<()> {
    let dir = dir.to_path_buf();
    disk_bound(run_blocking(move || {
        for suffix in [LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX] {
            let path = segment_file_path(&dir, base, suffix);
            let with = |extra: &str| PathBuf::from(format!("{}{extra}", path.display()));
            match std::fs::rename(with(from), with(to)) {
                // An index renamed before a crash, or never written: rebuilt on open.
                Err(error)
                    if error.kind() == std::io::ErrorKind::NotFound
                        && suffix != LOG_FILE_SUFFIX => {}
                result => result?,
            }
        }
        // The renames must reach the disk before anything relies on them.
        std::fs::File::open(&dir)?.sync_all()
    }))
    .await
}

/// Writes the epoch cache as it is once no other write of it runs.
async fn write_epoch_checkpoint(
    cache: &RefCell<LeaderEpochFileCache>,
    checkpoint: &EpochCheckpoint,
) -> std::io::Result<()> {
    let _permit = permit(&checkpoint.lock).await;
    if checkpoint.deleted.get() {
        return Ok(());
    }
    let snapshot = cache.borrow().clone();
    disk_bound(run_blocking(move || snapshot.write())).await
}

/// Copies the regular files of `from` into `to` (created if needed). With
/// `changed_only` (a copy made earlier is brought up to date), a `.log` file
/// is append-only in place: one copied since its last change is left, one
/// that grew gets only its new tail, and one that shrank (truncated) is
/// copied whole; every other file is copied whole, and files `from` no
/// longer has are removed from `to`. Every file written is synced, then `to`.
pub(crate) fn sync_copy(from: &Path, to: &Path, changed_only: bool) -> std::io::Result<()> {
    use std::io::{Read, Seek, SeekFrom};
    std::fs::create_dir_all(to)?;
    let mut names = std::collections::BTreeSet::new();
    for entry in std::fs::read_dir(from)? {
        let entry = entry?;
        if !entry.file_type()?.is_file() {
            continue;
        }
        let name = entry.file_name();
        let target = to.join(&name);
        names.insert(name.clone());
        let source = entry.metadata()?;
        let is_segment = Path::new(&name).extension().is_some_and(|e| e == "log");
        let copy = std::fs::metadata(&target)
            .ok()
            .filter(|_| changed_only && is_segment);
        match copy {
            Some(copy) if copy.len() == source.len() => {
                let unchanged =
                    matches!((copy.modified(), source.modified()), (Ok(c), Ok(s)) if c >= s);
                if unchanged {
                    continue;
                }
                std::fs::copy(entry.path(), &target)?;
            }
            Some(copy) if copy.len() < source.len() => {
                let mut tail = std::fs::File::open(entry.path())?;
                tail.seek(SeekFrom::Start(copy.len()))?;
                let mut out = std::fs::OpenOptions::new().append(true).open(&target)?;
                std::io::copy(&mut tail.take(source.len() - copy.len()), &mut out)?;
            }
            _ => {
                std::fs::copy(entry.path(), &target)?;
            }
        }
        std::fs::File::open(&target)?.sync_all()?;
    }
    if changed_only {
        for entry in std::fs::read_dir(to)? {
            let entry = entry?;
            if !names.contains(&entry.file_name()) {
                std::fs::remove_file(entry.path())?;
            }
        }
    }
    std::fs::File::open(to)?.sync_all()
}

#[cfg(test)]
mod tests {
    use std::fs;

    use super::sync_copy;

    #[test]
    fn a_copy_is_brought_up_to_date_with_segment_tails() {
        let (from, to) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
        let to = to.path().join("copy");
        let file = |dir: &std::path::Path, name: &str| fs::read(dir.join(name)).unwrap();
        fs::write(from.path().join("0.log"), vec![1u8; 100]).unwrap();
        fs::write(from.path().join("0.index"), vec![2u8; 8]).unwrap();
        sync_copy(from.path(), &to, false).unwrap();
        // The segment grows, the index is rewritten, a segment is added.
        let mut grown = vec![1u8; 100];
        grown.extend([3u8; 50]);
        fs::write(from.path().join("0.log"), &grown).unwrap();
        fs::write(from.path().join("0.index"), vec![4u8; 16]).unwrap();
        fs::write(from.path().join("150.log"), vec![5u8; 10]).unwrap();
        sync_copy(from.path(), &to, true).unwrap();
        for name in ["0.log", "0.index", "150.log"] {
            assert_eq!(file(&to, name), file(from.path(), name), "{name}");
        }
        // Truncated and removed.
        fs::write(from.path().join("0.log"), vec![6u8; 20]).unwrap();
        fs::remove_file(from.path().join("150.log")).unwrap();
        sync_copy(from.path(), &to, true).unwrap();
        assert_eq!(file(&to, "0.log"), vec![6u8; 20]);
        assert!(!to.join("150.log").exists());
    }
}
