//! The partition log: Kafka's on-disk format, written through the shard's io_uring.

mod blocking;
mod checkpoint;
mod cleaner;
mod compression;
mod config;
mod error;
mod file;
pub mod file_names;
mod index;
mod leader_epoch;
#[allow(clippy::module_inception)]
mod log;
mod log_dirs;
mod log_manager;
mod producer_state;
pub mod record_batch;
mod segment;

pub use checkpoint::{read_checkpoint_file, write_checkpoint_file};
pub use cleaner::CleanerStats;
pub use compression::{compress, decompress};
pub use config::{
    CleanupPolicy, ConfigError, LogConfig, TimestampPolicy, TopicCompression, TOPIC_CONFIG_NAMES,
};
pub use error::LogError;
pub use file::{page_cache_stat, FileRecords, PageCacheStat, SegmentFile};
pub use file_names::{
    segment_file_path, CLEAN_SHUTDOWN_FILE, INDEX_FILE_SUFFIX, LEADER_EPOCH_CHECKPOINT_FILE,
    LOCK_FILE, LOG_FILE_SUFFIX, RECOVERY_POINT_CHECKPOINT_FILE, TIME_INDEX_FILE_SUFFIX,
};
pub use index::{OffsetPosition, TimestampOffset};
pub use leader_epoch::{EpochEntry, LeaderEpochFileCache};
pub use log::{
    FetchDataInfo, FetchWatch, HandedOffLog, Log, LogAppendInfo, LogHandoff, LogOpenParams,
    SharedLogOffsets, SharedOffset, TimestampAndOffset, WatchedOffset,
};
pub use log_dirs::{LogDir, LogDirHealth, LogDirs, LogDirsError, PartitionCheckpoint};
pub use log_manager::{LogManager, LogManagerConfig};
pub use producer_state::ProducerStateManager;
pub use record_batch::CompressionType;
pub use segment::{FileSlice, LogSegment};

pub use crate::topic_partition::TopicPartition;

/// Milliseconds since the Unix epoch, the clock Kafka timestamps use.
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock before 1970")
        .as_millis() as i64
}
