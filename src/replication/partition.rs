//! `Partition`: one partition's replica on this shard, as Kafka's
//! `kafka.cluster.Partition`: its log, the leader and ISR it was last told,
//! and the rules for appending as leader, reading, and the high watermark.

use std::cell::RefCell;
use std::rc::Rc;

use bytes::Bytes;
use shards::log::{wall_clock_ms, FetchDataInfo, FetchWatch, Log, LogAppendInfo, LogError};

use crate::protocol::{Records, ResponseError};

/// A fetched range at least this long is sent from the page cache with
/// sendfile; a shorter one is copied into the response, which then goes out in
/// one send instead of a send and a sendfile per partition.
const SENDFILE_MIN_BYTES: usize = 64 * 1024;

/// What the metadata says of a partition: who leads it, at which epoch, and
/// which replicas are in sync.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct PartitionState {
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
}

pub struct Partition {
    local_broker_id: i32,
    log: Rc<Log>,
    state: RefCell<PartitionState>,
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

/// ListOffsets' answer for one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetAndEpoch {
    pub timestamp: i64,
    pub offset: i64,
    pub leader_epoch: i32,
}

impl Partition {
    pub fn new(local_broker_id: i32, log: Rc<Log>, state: PartitionState) -> Self {
        let partition = Self {
            local_broker_id,
            log,
            state: RefCell::new(state),
        };
        partition.maybe_increment_high_watermark();
        partition
    }

    pub fn log(&self) -> &Rc<Log> {
        &self.log
    }

    pub fn is_leader(&self) -> bool {
        self.state.borrow().leader == self.local_broker_id
    }

    pub fn leader_epoch(&self) -> i32 {
        self.state.borrow().leader_epoch
    }

    pub fn high_watermark(&self) -> i64 {
        self.log.high_watermark()
    }

    pub fn log_start_offset(&self) -> i64 {
        self.log.log_start_offset()
    }

    /// Takes the metadata's latest word on leader, epoch and ISR.
    pub fn update_state(&self, state: PartitionState) {
        if *self.state.borrow() != state {
            *self.state.borrow_mut() = state;
            self.maybe_increment_high_watermark();
        }
    }

    /// Kafka's rule: the high watermark is the lowest log end offset in the
    /// ISR. Until followers replicate, a leader's ISR is itself alone, so
    /// every record it has is committed.
    fn maybe_increment_high_watermark(&self) {
        let state = self.state.borrow();
        if state.leader == self.local_broker_id && state.isr == [self.local_broker_id] {
            self.log.set_high_watermark(self.log.log_end_offset());
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
            if state.leader != self.local_broker_id {
                return Err(AppendError::Refused(ResponseError::NotLeaderOrFollower));
            }
            let min_insync_replicas = self.log.config().min_insync_replicas;
            if required_acks == -1 && (state.isr.len() as i32) < min_insync_replicas {
                return Err(AppendError::Refused(ResponseError::NotEnoughReplicas));
            }
            state.leader_epoch
        };
        let info = self
            .log
            .append_as_leader(records, leader_epoch, wall_clock_ms())
            .await
            .map_err(AppendError::Log)?;
        self.maybe_increment_high_watermark();
        Ok(info)
    }

    /// Whole batches from `fetch_offset`, below the high watermark: what a
    /// consumer may see (Kafka's `fetchRecords` at FETCH_HIGH_WATERMARK).
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
                self.high_watermark(),
                min_one_batch,
            )
            .await
    }

    /// A fetch's answer for this partition. Only what the page cache holds is
    /// left to sendfile: the connection's shard must never wait for the disk.
    /// The rest is read through io_uring, which also brings it into the
    /// cache; so is a range whose descriptor cannot be duplicated (out of
    /// descriptors is no disk error).
    pub async fn fetch(
        &self,
        fetch_offset: i64,
        max_bytes: usize,
        min_one_batch: bool,
    ) -> ReadResult {
        let high_watermark = self.high_watermark();
        let mut result = ReadResult {
            error: None,
            high_watermark,
            last_stable_offset: high_watermark,
            log_start_offset: self.log.log_start_offset(),
            records: None,
        };
        match self
            .read_records(fetch_offset, max_bytes, min_one_batch)
            .await
        {
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

    /// ListOffsets: -1 latest (high watermark), -2 earliest, -3 max
    /// timestamp, otherwise the first offset at or after the timestamp.
    pub async fn fetch_offset_for_timestamp(
        &self,
        timestamp: i64,
    ) -> Result<OffsetAndEpoch, ResponseError> {
        let epoch = self.log.latest_epoch().unwrap_or(-1);
        let at = |offset| OffsetAndEpoch {
            timestamp: -1,
            offset,
            leader_epoch: epoch,
        };
        match timestamp {
            -1 => Ok(at(self.high_watermark())),
            -2 => Ok(at(self.log.log_start_offset())),
            _ => {
                let found = if timestamp == -3 {
                    self.log.fetch_offset_of_max_timestamp().await
                } else {
                    self.log.fetch_offset_by_timestamp(timestamp).await
                };
                match found {
                    Ok(Some(found)) if found.offset < self.high_watermark() => Ok(OffsetAndEpoch {
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

    pub fn watch_high_watermark(&self, watch: &Rc<FetchWatch>) {
        self.log.watch_high_watermark(watch);
    }

    pub fn unwatch_high_watermark(&self, watch: &Rc<FetchWatch>) {
        self.log.unwatch_high_watermark(watch);
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
