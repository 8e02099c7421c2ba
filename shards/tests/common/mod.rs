//! Helpers shared by the log's integration tests.
#![allow(dead_code)]

use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use shards::log::record_batch::{BatchIter, RecordBatchBuilder, RecordIter, RECORD_BATCH_OVERHEAD};
use shards::log::{
    Log, LogConfig, LogDirHealth, LogDirs, LogDirsError, LogOpenParams, TopicPartition,
};

pub fn run<T>(future: impl std::future::Future<Output = T>) -> T {
    shards::runtime::local_executor().run(future)
}

/// How long `open_log_dirs` waits for a lock this process let go.
const LOCK_RELEASE_TIMEOUT: Duration = Duration::from_secs(5);

/// `LogDirs::open` of directories this process may have just let go. A child
/// that another test of the same binary is spawning holds a copy of every
/// descriptor, the lock's among them, from its fork to its exec; until then
/// the lock outlives the `LogDirs` that took it. Another process's lock is
/// still refused, after `LOCK_RELEASE_TIMEOUT`.
pub fn open_log_dirs(dirs: &[PathBuf]) -> Arc<LogDirs> {
    let deadline = Instant::now() + LOCK_RELEASE_TIMEOUT;
    loop {
        match LogDirs::open(dirs) {
            Err(LogDirsError::Locked(_)) if Instant::now() < deadline => {
                std::thread::sleep(Duration::from_millis(10));
            }
            opened => return opened.unwrap(),
        }
    }
}

/// One uncompressed batch of `count` records keyed `key-<first+i>`, values of
/// `value_bytes` bytes, all at `timestamp`.
pub fn batch(first: usize, count: usize, value_bytes: usize, timestamp: i64) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(0, timestamp);
    for i in first..first + count {
        let key = format!("key-{i}");
        let value = vec![(i % 251) as u8; value_bytes];
        builder.append(timestamp, Some(key.as_bytes()), Some(&value));
    }
    builder.build()
}

pub fn keyed_batch(records: &[(&str, Option<&str>)], timestamp: i64) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(0, timestamp);
    for (key, value) in records {
        builder.append(timestamp, Some(key.as_bytes()), value.map(str::as_bytes));
    }
    builder.build()
}

pub async fn open_log(dir: &Path, config: LogConfig, recovery_point: i64, clean: bool) -> Log {
    Log::open(LogOpenParams {
        dir: dir.join("topic-0"),
        topic_partition: TopicPartition::new("topic", 0),
        config: Rc::new(config),
        recovery_point,
        had_clean_shutdown: clean,
        high_watermark: None,
        log_start_offset: None,
        health: LogDirHealth::new(dir),
        now_ms: 1_000,
        handoff: None,
    })
    .await
    .expect("open log")
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct StoredRecord {
    pub offset: i64,
    pub key: Option<Vec<u8>>,
    pub value: Option<Vec<u8>>,
}

/// Every record the log returns from its start to its end, checking that reads
/// only ever return whole, valid batches at increasing offsets.
pub async fn read_all(log: &Log) -> Vec<StoredRecord> {
    let mut records = Vec::new();
    let mut offset = log.log_start_offset();
    while offset < log.log_end_offset() {
        let info = log
            .read(offset, 64 * 1024, log.log_end_offset(), true)
            .await
            .expect("read");
        let Some(slice) = info.records else { break };
        let bytes = slice.read().await.unwrap();
        let mut iter = BatchIter::new(&bytes);
        for batch in iter.by_ref() {
            let (header, raw) = batch.expect("whole batches");
            shards::log::record_batch::validate_batch(raw).expect("valid batch");
            assert!(header.last_offset() >= offset, "read went backwards");
            for record in RecordIter::new(&raw[RECORD_BATCH_OVERHEAD..]) {
                let record = record.unwrap();
                let record_offset = header.base_offset + record.offset_delta as i64;
                if record_offset >= offset {
                    records.push(StoredRecord {
                        offset: record_offset,
                        key: record.key.map(<[u8]>::to_vec),
                        value: record.value.map(<[u8]>::to_vec),
                    });
                }
            }
            offset = header.next_offset();
        }
        assert_eq!(
            iter.position(),
            bytes.len(),
            "a read returned a partial batch"
        );
    }
    records
}

/// Waits until `done` holds, checking every 10 ms; fails after 10 s, naming `what`.
pub async fn eventually(what: &str, mut done: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
    while !done() {
        assert!(
            std::time::Instant::now() < deadline,
            "not within 10 s: {what}"
        );
        glommio::timer::sleep(std::time::Duration::from_millis(10)).await;
    }
}
