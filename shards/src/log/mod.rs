//! The partition log: Kafka's on-disk format, written through the shard's io_uring.

mod checkpoint;
mod cleaner;
mod compression;
mod config;
mod error;
mod file;
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
pub use index::{OffsetPosition, TimestampOffset};
pub use leader_epoch::{EpochEntry, LeaderEpochFileCache, LEADER_EPOCH_CHECKPOINT_FILE};
pub use log::{
    FetchDataInfo, FetchWatch, Log, LogAppendInfo, LogOpenParams, TimestampAndOffset,
    TopicPartition,
};
pub use log_dirs::{
    LogDir, LogDirHealth, LogDirs, LogDirsError, PartitionCheckpoint, CLEAN_SHUTDOWN_FILE,
    LOCK_FILE, RECOVERY_POINT_CHECKPOINT_FILE,
};
pub use log_manager::{LogManager, LogManagerConfig};
pub use record_batch::CompressionType;
pub use segment::{
    segment_file_path, FileSlice, LogSegment, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};

/// Milliseconds since the Unix epoch, the clock Kafka timestamps use.
pub fn wall_clock_ms() -> i64 {
    std::time::SystemTime::now()
        .duration_since(std::time::UNIX_EPOCH)
        .expect("clock before 1970")
        .as_millis() as i64
}
