//! A shard's `LogManager`: the logs this shard owns, and the background work on
//! them (retention, cleaning, time-based flushes, checkpoint publication).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use tracing::{info, warn};

use super::blocking::run_blocking;
use super::file_names::{DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, PARTITION_METADATA_FILE};
use super::log::sync_copy;
use super::log_dirs::{LogDirs, PartitionCheckpoint};
use crate::runtime::activity::{self, ActivityKind};
use crate::runtime::disk_bound;

use super::{wall_clock_ms, Log, LogConfig, LogError, LogHandoff, LogOpenParams, TopicPartition};

type PeriodicWork = std::pin::Pin<Box<dyn std::future::Future<Output = ()>>>;

/// Broker-level settings of the log layer, with Kafka's names in the comments.
#[derive(Debug, Clone)]
pub struct LogManagerConfig {
    /// `log.retention.check.interval.ms`
    pub retention_check_interval_ms: u64,
    /// `log.flush.scheduler.interval.ms` (Kafka's default never runs it)
    pub flush_scheduler_interval_ms: u64,
    /// `log.flush.offset.checkpoint.interval.ms`
    pub flush_offset_checkpoint_interval_ms: u64,
    /// `replica.high.watermark.checkpoint.interval.ms`: the checkpoint files
    /// are written together, at the shorter of the two intervals.
    pub high_watermark_checkpoint_interval_ms: u64,
    /// `log.cleaner.enable`
    pub cleaner_enable: bool,
    /// `log.cleaner.backoff.ms`
    pub cleaner_backoff_ms: u64,
    /// `log.cleaner.dedupe.buffer.size`
    pub cleaner_dedupe_buffer_bytes: usize,
}

impl Default for LogManagerConfig {
    fn default() -> Self {
        Self {
            retention_check_interval_ms: 300_000,
            flush_scheduler_interval_ms: i64::MAX as u64,
            flush_offset_checkpoint_interval_ms: 60_000,
            high_watermark_checkpoint_interval_ms: 5_000,
            cleaner_enable: true,
            cleaner_backoff_ms: 15_000,
            cleaner_dedupe_buffer_bytes: 128 * 1024 * 1024,
        }
    }
}

pub struct LogManager {
    shard_id: usize,
    dirs: Arc<LogDirs>,
    config: LogManagerConfig,
    logs: RefCell<BTreeMap<TopicPartition, Rc<Log>>>,
    stopping: Cell<bool>,
}

impl LogManager {
    pub fn new(shard_id: usize, dirs: Arc<LogDirs>, config: LogManagerConfig) -> Rc<Self> {
        Rc::new(Self {
            shard_id,
            dirs,
            config,
            logs: RefCell::new(BTreeMap::new()),
            stopping: Cell::new(false),
        })
    }

    pub fn dirs(&self) -> &Arc<LogDirs> {
        &self.dirs
    }

    pub fn get_log(&self, tp: &TopicPartition) -> Option<Rc<Log>> {
        self.logs.borrow().get(tp).cloned()
    }

    pub fn logs(&self) -> Vec<Rc<Log>> {
        self.logs.borrow().values().cloned().collect()
    }

    /// Opens the partition's log where it lives, or creates it in the directory
    /// with the fewest partitions.
    /// `topic_id` is Kafka's text form of the topic's id, kept in the
    /// partition directory's `partition.metadata`: a directory left by an earlier
    /// topic of the same name (deleted while this broker was down) is not this
    /// topic's, and is removed instead of served.
    pub async fn get_or_create_log(
        &self,
        tp: &TopicPartition,
        log_config: Rc<LogConfig>,
        topic_id: &str,
    ) -> Result<Rc<Log>, LogError> {
        if let Some(log) = self.get_log(tp) {
            return Ok(log);
        }
        let dir = self.dirs.assign_dir(tp)?;
        let health = self.dirs.dirs()[dir].health.clone();
        let partition_dir = self.dirs.partition_dir(dir, tp);
        // Handed off by another shard, which served it a moment ago: this
        // topic's, its `partition.metadata` written.
        let handoff = self.dirs.take_handoff(tp);
        let handed_off = handoff.is_some();
        let metadata_path = partition_dir.join(PARTITION_METADATA_FILE);
        let metadata = format!("version: 0\ntopic_id: {topic_id}\n");
        let stale = !handed_off && {
            let (path, expected) = (metadata_path.clone(), metadata.clone());
            run_blocking(move || {
                Ok(std::fs::read_to_string(path).is_ok_and(|text| text != expected))
            })
            .await
            .map_err(|error| health.on_error(error.into()))?
        };
        if stale {
            warn!(partition = %tp, "the directory belongs to an earlier topic of this name; removing it");
            let doomed = partition_dir
                .with_file_name(format!("{tp}.{:x}{DELETE_DIR_SUFFIX}", wall_clock_ms()));
            let from = partition_dir.clone();
            run_blocking(move || {
                std::fs::rename(&from, &doomed)?;
                std::fs::remove_dir_all(&doomed)
            })
            .await
            .map_err(|error| health.on_error(error.into()))?;
            self.dirs.update(tp, PartitionCheckpoint::default());
        }
        let checkpoint = self.dirs.find(tp).map(|(_, c)| c).unwrap_or_default();
        let log = Log::open(LogOpenParams {
            dir: partition_dir,
            topic_partition: tp.clone(),
            config: log_config,
            recovery_point: checkpoint.recovery_point,
            had_clean_shutdown: self.dirs.dirs()[dir].had_clean_shutdown,
            high_watermark: checkpoint.high_watermark,
            log_start_offset: checkpoint.log_start_offset,
            health,
            now_ms: wall_clock_ms(),
            handoff,
        })
        .await?;
        if let Some(first_dirty) = checkpoint.first_dirty_offset {
            log.set_first_dirty_offset(first_dirty);
        }
        if stale || !(handed_off || metadata_path.exists()) {
            let health = log.health().clone();
            run_blocking(move || std::fs::write(metadata_path, metadata))
                .await
                .map_err(|error| health.on_error(error.into()))?;
        }
        let log = Rc::new(log);
        // Another task may have opened it meanwhile; keep the first.
        let log = self
            .logs
            .borrow_mut()
            .entry(tp.clone())
            .or_insert(log)
            .clone();
        Ok(log)
    }

    /// Removes the partition: out of service at once, its directory renamed to
    /// Kafka's `-delete` marker, then removed. A partition on disk that no
    /// shard opened (a replica the controller has not given this broker since
    /// it started) has its directory removed.
    pub async fn delete_log(&self, tp: &TopicPartition) -> Result<(), LogError> {
        let Some(log) = self.logs.borrow_mut().remove(tp) else {
            let Some((dir, _)) = self.dirs.find(tp) else {
                return Ok(());
            };
            let path = self.dirs.partition_dir(dir, tp);
            self.dirs.remove(tp);
            let health = self.dirs.dirs()[dir].health.clone();
            return run_blocking(move || std::fs::remove_dir_all(path))
                .await
                .map_err(|error| health.on_error(error.into()));
        };
        self.dirs.remove(tp);
        let doomed = log.mark_deleted().await?;
        let health = log.health().clone();
        run_blocking(move || std::fs::remove_dir_all(doomed))
            .await
            .map_err(|error| health.on_error(error.into()))
    }

    /// Takes the partition's log out of this shard for another shard of the
    /// broker to open (`get_or_create_log` there takes it up where this one
    /// left it). Its directory and checkpoint stay.
    pub async fn hand_off(&self, tp: &TopicPartition) -> Result<(), LogError> {
        let log = self
            .get_log(tp)
            .ok_or_else(|| LogError::KafkaStorage(format!("no log of {tp} here")))?;
        let LogHandoff {
            checkpoint,
            log: handed_off,
        } = log.hand_off().await?;
        self.logs.borrow_mut().remove(tp);
        self.dirs.update(tp, checkpoint);
        self.dirs.hand_over(tp.clone(), handed_off);
        Ok(())
    }

    /// Kafka's AlterReplicaLogDirs, as a copy: the partition's files go to
    /// `<dir>/<tp>.<id>-future` while the log serves, then, with the log's
    /// locks held, what changed since (the active segment, indexes, state)
    /// follows, the copy takes the partition's name and the log opens there;
    /// the old directory goes as a deleted log's. Returns the new log.
    pub async fn move_log(&self, tp: &TopicPartition, dir: usize) -> Result<Rc<Log>, LogError> {
        let log = self
            .get_log(tp)
            .ok_or_else(|| LogError::KafkaStorage(format!("no log of {tp} here")))?;
        let destination = self.dirs.partition_dir(dir, tp);
        if log.dir() == destination {
            return Ok(log);
        }
        let health = self.dirs.dirs()[dir].health.clone();
        health.check()?;
        let future =
            destination.with_file_name(format!("{tp}.{:x}{FUTURE_DIR_SUFFIX}", wall_clock_ms()));
        let (from, to) = (log.dir().to_owned(), future.clone());
        let started = std::time::Instant::now();
        disk_bound(run_blocking(move || sync_copy(&from, &to, false)))
            .await
            .map_err(|error| health.on_error(error.into()))?;
        let copied = std::time::Instant::now();
        let config = log.config();
        let first_dirty_offset = log.first_dirty_offset();
        let log_start_offset = log.log_start_offset_checkpoint();
        let (doomed, recovery_point, high_watermark) =
            log.finish_move(future, destination.clone()).await?;
        self.logs.borrow_mut().remove(tp);
        let checkpoint = PartitionCheckpoint {
            recovery_point,
            high_watermark: Some(high_watermark),
            log_start_offset,
            first_dirty_offset: Some(first_dirty_offset),
        };
        self.dirs.move_to(tp, dir, checkpoint);
        let moved = Log::open(LogOpenParams {
            dir: destination,
            topic_partition: tp.clone(),
            config,
            recovery_point,
            had_clean_shutdown: true,
            high_watermark: Some(high_watermark),
            log_start_offset,
            health: health.clone(),
            now_ms: wall_clock_ms(),
            handoff: None,
        })
        .await?;
        moved.set_first_dirty_offset(first_dirty_offset);
        let moved = Rc::new(moved);
        self.logs.borrow_mut().insert(tp.clone(), moved.clone());
        // How long the copy ran while the log served, then until the log
        // took writes again here.
        activity::record(ActivityKind::LogMoveHeld, copied);
        let (copy_ms, held_ms) = (
            copied.duration_since(started).as_millis() as u64,
            copied.elapsed().as_millis() as u64,
        );
        let old_health = log.health().clone();
        run_blocking(move || std::fs::remove_dir_all(doomed))
            .await
            .map_err(|error| old_health.on_error(error.into()))?;
        info!(
            partition = %tp,
            dir = %health.path().display(),
            copy_ms,
            held_ms,
            "moved log"
        );
        Ok(moved)
    }

    /// Hands each log's recovery point, high watermark and cleaner position to
    /// the shared checkpoint table.
    pub fn publish_checkpoints(&self) {
        for log in self.logs() {
            self.dirs.update(
                log.topic_partition(),
                PartitionCheckpoint {
                    recovery_point: log.recovery_point(),
                    high_watermark: Some(log.high_watermark()),
                    log_start_offset: log.log_start_offset_checkpoint(),
                    first_dirty_offset: Some(log.first_dirty_offset()),
                },
            );
        }
    }

    pub async fn retention_pass(&self, now_ms: i64) {
        let started = Instant::now();
        for log in self.logs() {
            if let Err(error) = log.delete_retained_segments(now_ms).await {
                warn!(partition = %log.topic_partition(), %error, "retention failed");
            }
        }
        activity::record(ActivityKind::RetentionPass, started);
    }

    pub async fn cleaner_pass(&self, now_ms: i64) {
        let started = Instant::now();
        for log in self.logs() {
            if let Err(error) = log
                .clean(now_ms, self.config.cleaner_dedupe_buffer_bytes)
                .await
            {
                warn!(partition = %log.topic_partition(), %error, "cleaning failed");
            }
        }
        activity::record(ActivityKind::CleanerPass, started);
    }

    pub async fn flush_pass(&self, now_ms: i64) {
        for log in self.logs() {
            if let Err(error) = log.maybe_flush_on_time(now_ms).await {
                warn!(partition = %log.topic_partition(), %error, "flush failed");
            }
        }
    }

    /// Starts the periodic tasks. Shard 0 also writes the checkpoint files.
    pub fn start_background_tasks(self: &Rc<Self>) {
        self.spawn_periodic(self.config.retention_check_interval_ms, |m| {
            Box::pin(async move { m.retention_pass(wall_clock_ms()).await })
        });
        if self.config.cleaner_enable {
            self.spawn_periodic(self.config.cleaner_backoff_ms, |m| {
                Box::pin(async move { m.cleaner_pass(wall_clock_ms()).await })
            });
        }
        self.spawn_periodic(self.config.flush_scheduler_interval_ms, |m| {
            Box::pin(async move { m.flush_pass(wall_clock_ms()).await })
        });
        let checkpoint_interval_ms = self
            .config
            .flush_offset_checkpoint_interval_ms
            .min(self.config.high_watermark_checkpoint_interval_ms);
        self.spawn_periodic(checkpoint_interval_ms, |m| {
            Box::pin(async move {
                m.publish_checkpoints();
                if m.shard_id == 0 {
                    let dirs = m.dirs.clone();
                    let started = Instant::now();
                    if let Err(error) =
                        disk_bound(run_blocking(move || dirs.write_checkpoints())).await
                    {
                        warn!(%error, "writing checkpoints failed");
                    }
                    activity::record(ActivityKind::Checkpoint, started);
                }
            })
        });
    }

    fn spawn_periodic(self: &Rc<Self>, interval_ms: u64, work: fn(Rc<Self>) -> PeriodicWork) {
        let manager = self.clone();
        glommio::spawn_local(async move {
            // Kafka's "never" (Long.MAX_VALUE) sleeps for a year at a time.
            let interval = Duration::from_millis(interval_ms.clamp(10, 365 * 24 * 3_600_000));
            while !manager.stopping.get() {
                glommio::timer::sleep(interval).await;
                if manager.stopping.get() {
                    break;
                }
                work(manager.clone()).await;
            }
        })
        .detach();
    }

    /// Stops background work, flushes every log and publishes final checkpoints.
    /// The caller writes them and the clean-shutdown marker once every shard is done.
    pub async fn shutdown(&self) {
        self.stopping.set(true);
        for log in self.logs() {
            if let Err(error) = log.close().await {
                warn!(partition = %log.topic_partition(), %error, "closing log failed");
            }
        }
        self.publish_checkpoints();
    }
}
