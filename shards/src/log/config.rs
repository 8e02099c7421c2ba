//! Topic-level log configuration, with Kafka's names and defaults.

use std::fmt;
use std::time::Duration;

use super::record_batch::CompressionType;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TimestampPolicy {
    CreateTime,
    LogAppendTime,
}

/// A topic's `compression.type`: keep the producer's codec, or store every
/// batch with this one (recompressing on append, as Kafka does).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum TopicCompression {
    Producer,
    Codec(CompressionType),
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct CleanupPolicy {
    pub delete: bool,
    pub compact: bool,
}

#[derive(Debug, Clone, PartialEq)]
pub struct LogConfig {
    pub segment_bytes: u64,
    pub segment_ms: i64,
    pub segment_index_bytes: u64,
    pub index_interval_bytes: u64,
    pub flush_messages: i64,
    pub flush_ms: i64,
    pub retention_ms: i64,
    pub retention_bytes: i64,
    pub cleanup_policy: CleanupPolicy,
    pub delete_retention_ms: i64,
    pub min_compaction_lag_ms: i64,
    pub min_cleanable_dirty_ratio: f64,
    pub max_message_bytes: usize,
    pub message_timestamp_type: TimestampPolicy,
    pub message_timestamp_before_max_ms: i64,
    pub message_timestamp_after_max_ms: i64,
    pub compression: TopicCompression,
    /// `compression.gzip.level`: 1-9, or -1 for the codec's default.
    pub compression_gzip_level: i32,
    pub compression_lz4_level: i32,
    pub compression_zstd_level: i32,
    /// acks=all needs this many in-sync replicas (NOT_ENOUGH_REPLICAS).
    pub min_insync_replicas: i32,
    /// Stored for the controller's elections, which replication brings.
    pub unclean_leader_election_enable: bool,
    /// `preallocate`: a new active segment gets `segment.bytes` of blocks up
    /// front (see `SegmentFile::preallocate`), trimmed when it rolls; the next
    /// one is made in the background once the active one is half way to its
    /// roll (`PreparedSegment`).
    pub preallocate: bool,
    /// `file.delete.delay.ms`: how long a deleted segment's files keep their
    /// blocks (`SegmentFile::hold_past_deletion`).
    pub file_delete_delay_ms: i64,
    /// The broker's `ringbroker.log.drop.behind.bytes`, no topic key: how far
    /// behind a segment's end its written-back pages stay in the page cache
    /// before the writeback job drops them (`LogSegment::start_writeback`),
    /// in a memory cgroup with a limit only once it is half full
    /// (`segment.rs`' `drop_behind_due`); None leaves eviction to the kernel, as
    /// with Kafka.
    pub drop_behind_bytes: Option<u64>,
}

impl Default for LogConfig {
    fn default() -> Self {
        Self {
            segment_bytes: 1024 * 1024 * 1024,
            segment_ms: 7 * 24 * 60 * 60 * 1000,
            segment_index_bytes: 10 * 1024 * 1024,
            index_interval_bytes: 4096,
            flush_messages: i64::MAX,
            flush_ms: i64::MAX,
            retention_ms: 7 * 24 * 60 * 60 * 1000,
            retention_bytes: -1,
            cleanup_policy: CleanupPolicy {
                delete: true,
                compact: false,
            },
            delete_retention_ms: 24 * 60 * 60 * 1000,
            min_compaction_lag_ms: 0,
            min_cleanable_dirty_ratio: 0.5,
            max_message_bytes: 1024 * 1024 + 12,
            message_timestamp_type: TimestampPolicy::CreateTime,
            message_timestamp_before_max_ms: i64::MAX,
            // Kafka 4.0 (KIP-1030) bounds future timestamps to an hour by default.
            message_timestamp_after_max_ms: 60 * 60 * 1000,
            compression: TopicCompression::Producer,
            compression_gzip_level: -1,
            compression_lz4_level: 9,
            compression_zstd_level: 3,
            min_insync_replicas: 1,
            unclean_leader_election_enable: false,
            preallocate: false,
            file_delete_delay_ms: 60_000,
            drop_behind_bytes: None,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigError {
    pub name: String,
    pub reason: String,
}

impl fmt::Display for ConfigError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        write!(f, "invalid value for {}: {}", self.name, self.reason)
    }
}

impl std::error::Error for ConfigError {}

/// The topic-level keys this log honours, as Kafka names them.
pub const TOPIC_CONFIG_NAMES: &[&str] = &[
    "segment.bytes",
    "segment.ms",
    "segment.index.bytes",
    "index.interval.bytes",
    "flush.messages",
    "flush.ms",
    "retention.ms",
    "retention.bytes",
    "cleanup.policy",
    "delete.retention.ms",
    "min.compaction.lag.ms",
    "min.cleanable.dirty.ratio",
    "max.message.bytes",
    "message.timestamp.type",
    "message.timestamp.before.max.ms",
    "message.timestamp.after.max.ms",
    "compression.type",
    "compression.gzip.level",
    "compression.lz4.level",
    "compression.zstd.level",
    "min.insync.replicas",
    "unclean.leader.election.enable",
    "preallocate",
    "file.delete.delay.ms",
];

fn parse_number<T: std::str::FromStr + PartialOrd + fmt::Display>(
    name: &str,
    value: &str,
    min: T,
) -> Result<T, ConfigError> {
    let parsed: T = value.trim().parse().map_err(|_| ConfigError {
        name: name.into(),
        reason: format!("{value:?} is not a number"),
    })?;
    if parsed < min {
        return Err(ConfigError {
            name: name.into(),
            reason: format!("{parsed} is below the minimum {min}"),
        });
    }
    Ok(parsed)
}

fn check_range(name: &str, value: i32, min: i32, max: i32) -> Result<(), ConfigError> {
    if value < min || value > max {
        return Err(ConfigError {
            name: name.into(),
            reason: format!("{value} is not in [{min},...,{max}]"),
        });
    }
    Ok(())
}

fn parse_bool(name: &str, value: &str) -> Result<bool, ConfigError> {
    match value.trim().to_ascii_lowercase().as_str() {
        "true" => Ok(true),
        "false" => Ok(false),
        _ => Err(ConfigError {
            name: name.into(),
            reason: format!("{value:?} is not true or false"),
        }),
    }
}

impl LogConfig {
    /// Sets one topic-level key. Unknown keys are an error here; the broker decides
    /// which keys it forwards.
    pub fn set(&mut self, name: &str, value: &str) -> Result<(), ConfigError> {
        match name {
            "segment.bytes" => {
                // Positions in `.index` are Kafka ints.
                let bytes: u64 = parse_number(name, value, 14)?;
                if bytes > i32::MAX as u64 {
                    return Err(ConfigError {
                        name: name.into(),
                        reason: format!("{bytes} is above the maximum {}", i32::MAX),
                    });
                }
                self.segment_bytes = bytes;
            }
            "segment.ms" => self.segment_ms = parse_number(name, value, 1)?,
            "segment.index.bytes" => self.segment_index_bytes = parse_number(name, value, 8)?,
            "index.interval.bytes" => self.index_interval_bytes = parse_number(name, value, 0)?,
            "flush.messages" => self.flush_messages = parse_number(name, value, 1)?,
            "flush.ms" => self.flush_ms = parse_number(name, value, 0)?,
            "retention.ms" => self.retention_ms = parse_number(name, value, -1)?,
            "retention.bytes" => self.retention_bytes = parse_number(name, value, -1)?,
            "cleanup.policy" => {
                let mut policy = CleanupPolicy::default();
                for part in value.split(',').map(str::trim).filter(|p| !p.is_empty()) {
                    match part {
                        "delete" => policy.delete = true,
                        "compact" => policy.compact = true,
                        other => {
                            return Err(ConfigError {
                                name: name.into(),
                                reason: format!("{other:?} is not one of [delete, compact]"),
                            })
                        }
                    }
                }
                self.cleanup_policy = policy;
            }
            "delete.retention.ms" => self.delete_retention_ms = parse_number(name, value, 0)?,
            "min.compaction.lag.ms" => self.min_compaction_lag_ms = parse_number(name, value, 0)?,
            "min.cleanable.dirty.ratio" => {
                let ratio: f64 = parse_number(name, value, 0.0)?;
                if ratio > 1.0 {
                    return Err(ConfigError {
                        name: name.into(),
                        reason: format!("{ratio} is above 1"),
                    });
                }
                self.min_cleanable_dirty_ratio = ratio;
            }
            "max.message.bytes" => self.max_message_bytes = parse_number(name, value, 0)?,
            "message.timestamp.type" => {
                self.message_timestamp_type = match value.trim() {
                    "CreateTime" => TimestampPolicy::CreateTime,
                    "LogAppendTime" => TimestampPolicy::LogAppendTime,
                    other => {
                        return Err(ConfigError {
                            name: name.into(),
                            reason: format!("{other:?} is not CreateTime or LogAppendTime"),
                        })
                    }
                }
            }
            "message.timestamp.before.max.ms" => {
                self.message_timestamp_before_max_ms = parse_number(name, value, 0)?
            }
            "message.timestamp.after.max.ms" => {
                self.message_timestamp_after_max_ms = parse_number(name, value, 0)?
            }
            "compression.type" => {
                self.compression = match value.trim() {
                    "producer" => TopicCompression::Producer,
                    "uncompressed" => TopicCompression::Codec(CompressionType::None),
                    "gzip" => TopicCompression::Codec(CompressionType::Gzip),
                    "snappy" => TopicCompression::Codec(CompressionType::Snappy),
                    "lz4" => TopicCompression::Codec(CompressionType::Lz4),
                    "zstd" => TopicCompression::Codec(CompressionType::Zstd),
                    other => {
                        return Err(ConfigError {
                            name: name.into(),
                            reason: format!(
                        "{other:?} is not one of [uncompressed, zstd, lz4, snappy, gzip, producer]"
                    ),
                        })
                    }
                }
            }
            "compression.gzip.level" => {
                let level: i32 = parse_number(name, value, -1)?;
                check_range(name, level, -1, 9)?;
                if level == 0 {
                    return Err(ConfigError {
                        name: name.into(),
                        reason: "0 is not in [1,...,9] or -1".into(),
                    });
                }
                self.compression_gzip_level = level;
            }
            "compression.lz4.level" => {
                let level = parse_number(name, value, 1)?;
                check_range(name, level, 1, 17)?;
                self.compression_lz4_level = level;
            }
            "compression.zstd.level" => {
                let level = parse_number(name, value, -131_072)?;
                check_range(name, level, -131_072, 22)?;
                self.compression_zstd_level = level;
            }
            "min.insync.replicas" => self.min_insync_replicas = parse_number(name, value, 1)?,
            "unclean.leader.election.enable" => {
                self.unclean_leader_election_enable = parse_bool(name, value)?
            }
            "preallocate" => self.preallocate = parse_bool(name, value)?,
            "file.delete.delay.ms" => self.file_delete_delay_ms = parse_number(name, value, 0)?,
            _ => {
                return Err(ConfigError {
                    name: name.into(),
                    reason: "unknown topic config".into(),
                })
            }
        }
        Ok(())
    }

    /// The value of a topic-level key as Kafka prints it.
    pub fn value_of(&self, name: &str) -> Option<String> {
        Some(match name {
            "segment.bytes" => self.segment_bytes.to_string(),
            "segment.ms" => self.segment_ms.to_string(),
            "segment.index.bytes" => self.segment_index_bytes.to_string(),
            "index.interval.bytes" => self.index_interval_bytes.to_string(),
            "flush.messages" => self.flush_messages.to_string(),
            "flush.ms" => self.flush_ms.to_string(),
            "retention.ms" => self.retention_ms.to_string(),
            "retention.bytes" => self.retention_bytes.to_string(),
            "cleanup.policy" => match (self.cleanup_policy.compact, self.cleanup_policy.delete) {
                (true, true) => "compact,delete",
                (true, false) => "compact",
                (false, true) => "delete",
                (false, false) => "",
            }
            .to_owned(),
            "delete.retention.ms" => self.delete_retention_ms.to_string(),
            "min.compaction.lag.ms" => self.min_compaction_lag_ms.to_string(),
            "min.cleanable.dirty.ratio" => self.min_cleanable_dirty_ratio.to_string(),
            "max.message.bytes" => self.max_message_bytes.to_string(),
            "message.timestamp.type" => match self.message_timestamp_type {
                TimestampPolicy::CreateTime => "CreateTime",
                TimestampPolicy::LogAppendTime => "LogAppendTime",
            }
            .to_owned(),
            "message.timestamp.before.max.ms" => self.message_timestamp_before_max_ms.to_string(),
            "message.timestamp.after.max.ms" => self.message_timestamp_after_max_ms.to_string(),
            "compression.type" => match self.compression {
                TopicCompression::Producer => "producer",
                TopicCompression::Codec(CompressionType::None) => "uncompressed",
                TopicCompression::Codec(CompressionType::Gzip) => "gzip",
                TopicCompression::Codec(CompressionType::Snappy) => "snappy",
                TopicCompression::Codec(CompressionType::Lz4) => "lz4",
                TopicCompression::Codec(CompressionType::Zstd) => "zstd",
            }
            .to_owned(),
            "compression.gzip.level" => self.compression_gzip_level.to_string(),
            "compression.lz4.level" => self.compression_lz4_level.to_string(),
            "compression.zstd.level" => self.compression_zstd_level.to_string(),
            "min.insync.replicas" => self.min_insync_replicas.to_string(),
            "unclean.leader.election.enable" => self.unclean_leader_election_enable.to_string(),
            "preallocate" => self.preallocate.to_string(),
            "file.delete.delay.ms" => self.file_delete_delay_ms.to_string(),
            _ => return None,
        })
    }

    /// How long a deleted segment's files are held (`file.delete.delay.ms`).
    pub fn file_delete_delay(&self) -> Duration {
        Duration::from_millis(self.file_delete_delay_ms as u64)
    }

    /// Entries a full `.index` holds.
    pub fn max_index_entries(&self) -> usize {
        (self.segment_index_bytes / 8) as usize
    }

    /// Entries a full `.timeindex` holds.
    pub fn max_time_index_entries(&self) -> usize {
        (self.segment_index_bytes / 12) as usize
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_names_set_fields_and_bad_values_name_the_key() {
        let mut config = LogConfig::default();
        config.set("cleanup.policy", "compact,delete").unwrap();
        assert!(config.cleanup_policy.compact && config.cleanup_policy.delete);
        config.set("segment.bytes", "1048576").unwrap();
        assert_eq!(config.segment_bytes, 1 << 20);
        let error = config.set("retention.ms", "soon").unwrap_err();
        assert_eq!(error.name, "retention.ms");
        assert!(config.set("message.timestamp.type", "Wallclock").is_err());
        for name in TOPIC_CONFIG_NAMES {
            let value = config.value_of(name).expect("every honoured key prints");
            let mut copy = config.clone();
            copy.set(name, &value).unwrap();
            assert_eq!(copy, config, "{name} round-trips");
            assert!(
                !matches!(config.set(name, "x"), Err(ConfigError { ref reason, .. }) if reason == "unknown topic config"),
                "{name} not handled"
            );
        }
    }
}
