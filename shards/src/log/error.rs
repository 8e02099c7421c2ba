use std::fmt;

use kafka_protocol::error::ResponseError;

/// Everything the log can refuse or fail with, each mapped to Kafka's error code.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum LogError {
    /// Framing, magic or CRC wrong: CORRUPT_MESSAGE (2).
    CorruptMessage(String),
    /// A well-framed batch whose records are not valid: INVALID_RECORD (87).
    InvalidRecord(String),
    /// A batch larger than `max.message.bytes`: MESSAGE_TOO_LARGE (10).
    MessageTooLarge { size_bytes: usize, max_bytes: usize },
    /// A timestamp outside `message.timestamp.{before,after}.max.ms`: INVALID_TIMESTAMP (32).
    InvalidTimestamp(String),
    /// A read outside `[log start, log end]`: OFFSET_OUT_OF_RANGE (1).
    OffsetOutOfRange {
        offset: i64,
        log_start_offset: i64,
        log_end_offset: i64,
    },
    /// An I/O error; the log directory is taken offline: KAFKA_STORAGE_ERROR (56).
    KafkaStorage(String),
    /// The partition is being deleted here: NOT_LEADER_OR_FOLLOWER (6).
    LogDeleted(String),
    /// An idempotent producer skipped a sequence: OUT_OF_ORDER_SEQUENCE_NUMBER (45).
    OutOfOrderSequence(String),
    /// A fenced (older) producer epoch: INVALID_PRODUCER_EPOCH (47).
    InvalidProducerEpoch(String),
}

impl LogError {
    pub fn response_error(&self) -> ResponseError {
        match self {
            LogError::OffsetOutOfRange { .. } => ResponseError::OffsetOutOfRange,
            LogError::LogDeleted(_) => ResponseError::NotLeaderOrFollower,
            LogError::CorruptMessage(_) => ResponseError::CorruptMessage,
            LogError::MessageTooLarge { .. } => ResponseError::MessageTooLarge,
            LogError::InvalidTimestamp(_) => ResponseError::InvalidTimestamp,
            LogError::KafkaStorage(_) => ResponseError::KafkaStorageError,
            LogError::InvalidRecord(_) => ResponseError::InvalidRecord,
            LogError::OutOfOrderSequence(_) => ResponseError::OutOfOrderSequenceNumber,
            LogError::InvalidProducerEpoch(_) => ResponseError::InvalidProducerEpoch,
        }
    }
}

impl fmt::Display for LogError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            LogError::CorruptMessage(why) => write!(f, "corrupt message: {why}"),
            LogError::InvalidRecord(why) => write!(f, "invalid record: {why}"),
            LogError::MessageTooLarge {
                size_bytes,
                max_bytes,
            } => write!(
                f,
                "batch of {size_bytes} bytes exceeds max.message.bytes {max_bytes}"
            ),
            LogError::InvalidTimestamp(why) => write!(f, "invalid timestamp: {why}"),
            LogError::OffsetOutOfRange {
                offset,
                log_start_offset,
                log_end_offset,
            } => write!(
                f,
                "offset {offset} is outside [{log_start_offset}, {log_end_offset}]"
            ),
            LogError::KafkaStorage(why) => write!(f, "storage error: {why}"),
            LogError::LogDeleted(partition) => write!(f, "{partition} is being deleted"),
            LogError::OutOfOrderSequence(why) => write!(f, "out of order sequence: {why}"),
            LogError::InvalidProducerEpoch(why) => write!(f, "invalid producer epoch: {why}"),
        }
    }
}

impl std::error::Error for LogError {}

impl From<std::io::Error> for LogError {
    fn from(error: std::io::Error) -> Self {
        LogError::KafkaStorage(error.to_string())
    }
}
