//! Every name the log gives its files, as Kafka's LogFileUtils does: segment
//! and index suffixes, the stage suffixes of the cleaner's swap, the partition
//! directory's files and the per-directory checkpoints and markers.

use std::path::{Path, PathBuf};

pub const LOG_FILE_SUFFIX: &str = ".log";
pub const INDEX_FILE_SUFFIX: &str = ".index";
pub const TIME_INDEX_FILE_SUFFIX: &str = ".timeindex";
/// Suffix of a segment being written by the cleaner, not yet part of the log.
pub const CLEANED_FILE_SUFFIX: &str = ".cleaned";
/// Suffix of a cleaned segment about to replace the segments it was made from.
pub const SWAP_FILE_SUFFIX: &str = ".swap";
/// Suffix of the next segment's files, made before the roll that needs them
/// (`preallocate`): `<active segment's base><.log|.index|.timeindex>.<n>.prepared`,
/// `n` numbering the process's preparations.
pub const PREPARED_FILE_SUFFIX: &str = ".prepared";
/// Suffix of a partition directory being deleted.
pub const DELETE_DIR_SUFFIX: &str = "-delete";
/// A partition's copy in another log dir while it moves there (Kafka's future log).
pub const FUTURE_DIR_SUFFIX: &str = "-future";

/// A partition directory's leader epochs (`<epoch> <start offset>` lines).
pub const LEADER_EPOCH_CHECKPOINT_FILE: &str = "leader-epoch-checkpoint";
/// Kafka's per-partition file naming the topic id the directory belongs to.
pub const PARTITION_METADATA_FILE: &str = "partition.metadata";

pub const RECOVERY_POINT_CHECKPOINT_FILE: &str = "recovery-point-offset-checkpoint";
pub const REPLICATION_CHECKPOINT_FILE: &str = "replication-offset-checkpoint";
pub const LOG_START_OFFSET_CHECKPOINT_FILE: &str = "log-start-offset-checkpoint";
pub const CLEANER_CHECKPOINT_FILE: &str = "cleaner-offset-checkpoint";
pub const CLEAN_SHUTDOWN_FILE: &str = ".kafka_cleanshutdown";
pub const LOCK_FILE: &str = ".lock";

/// `<dir>/<20-digit base offset><suffix>`, Kafka's naming.
pub fn segment_file_path(dir: &Path, base_offset: i64, suffix: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}{suffix}"))
}

/// A segment file's stem: exactly Kafka's 20 digits.
pub fn parse_base_offset(stem: &str) -> Option<i64> {
    if stem.len() == 20 && stem.bytes().all(|b| b.is_ascii_digit()) {
        stem.parse().ok()
    } else {
        None
    }
}
