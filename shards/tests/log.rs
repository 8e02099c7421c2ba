//! The partition log against real files: append, read, roll, retention,
//! compaction, timestamps, recovery.

mod common;

use std::fs;

use common::*;
use shards::log::file_names::PREPARED_FILE_SUFFIX;
use shards::log::record_batch::CRC_OFFSET;
use shards::log::{
    page_cache_stat, segment_file_path, LogConfig, LogError, INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX,
    TIME_INDEX_FILE_SUFFIX,
};

fn small_segments() -> LogConfig {
    let mut config = LogConfig::default();
    config.set("segment.bytes", "20000").unwrap();
    config.set("index.interval.bytes", "1000").unwrap();
    config
}

/// `segment.bytes` of the tests of `preallocate`: big enough for the next
/// segment to be prepared in the background while batches of about 960 KiB
/// fill the active one.
const SEGMENT_BYTES: u64 = 4 * 1024 * 1024;

fn preallocated_segments(segment_bytes: u64) -> LogConfig {
    let mut config = LogConfig::default();
    config
        .set("segment.bytes", &segment_bytes.to_string())
        .unwrap();
    config.set("preallocate", "true").unwrap();
    config
}

#[test]
fn appends_assign_offsets_and_reads_return_whole_batches() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_log(dir.path(), small_segments(), 0, false).await;
        for i in 0..50 {
            let info = log
                .append_as_leader(batch(i * 10, 10, 100, 5_000), 3, 5_000)
                .await
                .unwrap();
            assert_eq!(info.first_offset, i as i64 * 10);
            assert_eq!(info.last_offset, i as i64 * 10 + 9);
        }
        assert_eq!(log.log_end_offset(), 500);
        assert!(log.segment_count() > 3, "segment.bytes rolls segments");
        let records = read_all(&log).await;
        assert_eq!(records.len(), 500);
        for (i, record) in records.iter().enumerate() {
            assert_eq!(record.offset, i as i64);
            assert_eq!(record.key.as_deref(), Some(format!("key-{i}").as_bytes()));
        }
        // A read from the middle of a batch starts at that batch.
        let info = log.read(255, 1, 500, true).await.unwrap();
        let bytes = info.records.unwrap().read().await.unwrap();
        assert_eq!(i64::from_be_bytes(bytes[0..8].try_into().unwrap()), 250);
        // Without min_one_batch a budget smaller than a batch returns nothing.
        assert!(log
            .read(255, 1, 500, false)
            .await
            .unwrap()
            .records
            .is_none());
        // The upper bound (a high watermark) hides later batches.
        let info = log.read(0, 1 << 20, 20, true).await.unwrap();
        let bytes = info.records.unwrap().read().await.unwrap();
        let last_base = {
            let mut iter = shards::log::record_batch::BatchIter::new(&bytes);
            iter.by_ref()
                .map(|b| b.unwrap().0.base_offset)
                .last()
                .unwrap()
        };
        assert_eq!(last_base, 10);
        assert!(matches!(
            log.read(501, 100, 500, true).await,
            Err(LogError::OffsetOutOfRange { .. })
        ));
        // Kafka's file names.
        for segment in log.segments() {
            assert!(segment_file_path(log.dir(), segment.base_offset(), LOG_FILE_SUFFIX).exists());
        }
        assert!(log.dir().join("00000000000000000000.index").exists());
        assert!(log.dir().join("00000000000000000000.timeindex").exists());
        let checkpoint = fs::read_to_string(log.dir().join("leader-epoch-checkpoint")).unwrap();
        assert_eq!(checkpoint, "0\n1\n3 0\n");
    });
}

#[test]
fn bad_batches_are_refused_and_nothing_is_written() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = LogConfig::default();
        config.set("max.message.bytes", "2000").unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        log.append_as_leader(batch(0, 2, 10, 1_000), 0, 1_000)
            .await
            .unwrap();
        let size_before = log.size_bytes();

        let mut corrupt = batch(2, 2, 10, 1_000);
        let last = corrupt.len() - 1;
        corrupt[last] ^= 1;
        let error = log.append_as_leader(corrupt, 0, 1_000).await.unwrap_err();
        assert_eq!(error.response_error().code(), 2, "CORRUPT_MESSAGE");

        let mut bad_crc = batch(2, 2, 10, 1_000);
        bad_crc[CRC_OFFSET] ^= 0xff;
        assert_eq!(
            log.append_as_leader(bad_crc, 0, 1_000)
                .await
                .unwrap_err()
                .response_error()
                .code(),
            2
        );

        let too_large = batch(2, 30, 100, 1_000);
        assert_eq!(
            log.append_as_leader(too_large, 0, 1_000)
                .await
                .unwrap_err()
                .response_error()
                .code(),
            10
        );

        // A client sends one batch per partition: two are refused, whole.
        let mut two = batch(2, 2, 10, 1_000);
        two.extend_from_slice(&batch(4, 2, 10, 1_000));
        assert_eq!(
            log.append_as_leader(two, 0, 1_000)
                .await
                .unwrap_err()
                .response_error()
                .code(),
            87
        );

        let future = batch(2, 1, 10, 1_000 + 2 * 3_600_000);
        assert_eq!(
            log.append_as_leader(future, 0, 1_000)
                .await
                .unwrap_err()
                .response_error()
                .code(),
            32
        );

        assert_eq!(log.log_end_offset(), 2);
        assert_eq!(log.size_bytes(), size_before);
        assert_eq!(read_all(&log).await.len(), 2);
    });
}

#[test]
fn log_append_time_replaces_the_timestamp() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = LogConfig::default();
        config
            .set("message.timestamp.type", "LogAppendTime")
            .unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        let info = log
            .append_as_leader(batch(0, 3, 10, 42), 0, 777_000)
            .await
            .unwrap();
        assert_eq!(info.log_append_time_ms, 777_000);
        let bytes = log
            .read(0, 1 << 20, 3, true)
            .await
            .unwrap()
            .records
            .unwrap()
            .read()
            .await
            .unwrap();
        let header = shards::log::record_batch::validate_batch(&bytes).unwrap();
        assert_eq!(header.max_timestamp, 777_000);
        let found = log
            .fetch_offset_by_timestamp(700_000)
            .await
            .unwrap()
            .unwrap();
        assert_eq!((found.offset, found.timestamp), (0, 777_000));
    });
}

#[test]
fn timestamp_lookup_finds_the_first_record_at_or_after() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_log(dir.path(), small_segments(), 0, false).await;
        for i in 0..40 {
            log.append_as_leader(batch(i * 5, 5, 200, 10_000 + i as i64 * 100), 0, 20_000)
                .await
                .unwrap();
        }
        let found = log
            .fetch_offset_by_timestamp(10_000 + 17 * 100)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.offset, 17 * 5);
        let found = log
            .fetch_offset_by_timestamp(10_000 + 17 * 100 - 50)
            .await
            .unwrap()
            .unwrap();
        assert_eq!(found.offset, 17 * 5);
        assert!(log
            .fetch_offset_by_timestamp(99_999)
            .await
            .unwrap()
            .is_none());
        let max = log.fetch_offset_of_max_timestamp().await.unwrap().unwrap();
        assert_eq!((max.offset, max.timestamp), (39 * 5, 10_000 + 39 * 100));
    });
}

/// A log of small segments with `retention.bytes` 45000, holding 100
/// batches of 10 records (about 100 KB), its high watermark still at 0.
async fn log_past_retention_bytes(dir: &std::path::Path) -> shards::log::Log {
    let mut config = small_segments();
    config.set("retention.bytes", "45000").unwrap();
    let log = open_log(dir, config, 0, false).await;
    for i in 0..100 {
        log.append_as_leader(batch(i * 10, 10, 100, 1_000 + i as i64), 0, 2_000)
            .await
            .unwrap();
    }
    log
}

#[test]
fn retention_deletes_whole_closed_segments_only() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = log_past_retention_bytes(dir.path()).await;
        let before = log.segment_count();
        // Nothing above the high watermark goes.
        assert_eq!(log.delete_retained_segments(2_000).await.unwrap(), 0);
        log.set_high_watermark(log.log_end_offset());
        let deleted = log.delete_retained_segments(2_000).await.unwrap();
        assert!(deleted > 0);
        assert_eq!(log.segment_count(), before - deleted);
        assert!(log.size_bytes() <= 45_000 + 20_000);
        let start = log.log_start_offset();
        assert!(start > 0);
        assert!(!segment_file_path(log.dir(), 0, LOG_FILE_SUFFIX).exists());
        assert!(!log.dir().join("00000000000000000000.index").exists());
        assert_eq!(read_all(&log).await.first().unwrap().offset, start);
        assert!(matches!(
            log.read(0, 100, 1000, true).await,
            Err(LogError::OffsetOutOfRange { .. })
        ));

        // Time retention: everything closed is old; the active segment stays.
        let mut config = small_segments();
        config.set("retention.ms", "1000").unwrap();
        log.update_config(std::rc::Rc::new(config));
        log.delete_retained_segments(1_000_000).await.unwrap();
        assert_eq!(log.segment_count(), 1);
        assert_eq!(log.log_start_offset(), log.active_segment().base_offset());
        assert_eq!(log.log_end_offset(), 1000);
    });
}

#[test]
fn a_topic_codec_recompresses_batches_produced_with_another() {
    use shards::log::record_batch::{BatchIter, RecordBatchBuilder, RecordIter};
    use shards::log::{compress, decompress, CompressionType};
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = small_segments();
        config.set("compression.type", "zstd").unwrap();
        config.set("compression.zstd.level", "19").unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        // A gzip batch, as a producer with compression.type=gzip sends it.
        let plain = batch(0, 20, 100, 1_000);
        let mut builder = RecordBatchBuilder::new(0, 1_000);
        for i in 0..20 {
            builder.append(
                1_000,
                Some(format!("key-{i}").as_bytes()),
                Some(&[(i % 251) as u8; 100]),
            );
        }
        builder.attributes = CompressionType::Gzip.id();
        let gzip = builder.build_with_section(
            &compress(CompressionType::Gzip, builder.records_section()).unwrap(),
        );
        let info = log.append_as_leader(gzip, 0, 2_000).await.unwrap();
        assert_eq!((info.first_offset, info.last_offset), (0, 19));
        // An uncompressed one is compressed too.
        log.append_as_leader(plain.clone(), 0, 2_000).await.unwrap();
        log.set_high_watermark(log.log_end_offset());
        let stored = log.read(0, 1 << 20, 40, true).await.unwrap();
        let bytes = stored.records.unwrap().read().await.unwrap();
        let mut batches = 0;
        for entry in BatchIter::new(&bytes) {
            let (header, raw) = entry.unwrap();
            shards::log::record_batch::validate_batch(raw).unwrap();
            assert_eq!(header.compression().unwrap(), CompressionType::Zstd);
            let section = decompress(CompressionType::Zstd, &raw[61..]).unwrap();
            let records: Vec<_> = RecordIter::new(&section)
                .map(|r| r.unwrap().key.unwrap().to_vec())
                .collect();
            assert_eq!(records.len(), 20);
            assert_eq!(records[3], b"key-3");
            batches += 1;
        }
        assert_eq!(batches, 2);
    });
}

#[test]
fn time_retention_without_a_size_limit_stops_at_the_first_segment_kept() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = small_segments();
        config.set("retention.ms", "10000").unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        // The first segment's records are old, every later one's are recent.
        for i in 0..100 {
            let timestamp = if i < 16 { 1_000 } else { 50_000 };
            log.append_as_leader(batch(i * 10, 10, 100, timestamp), 0, 60_000)
                .await
                .unwrap();
        }
        log.set_high_watermark(log.log_end_offset());
        assert_eq!(log.segments()[0].next_offset(), 160);
        assert_eq!(log.delete_retained_segments(55_000).await.unwrap(), 1);
        assert_eq!(log.log_start_offset(), 160);
    });
}

#[test]
fn delete_records_moves_the_log_start_and_retention_removes_what_is_below() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_log(dir.path(), small_segments(), 0, false).await;
        for i in 0..100 {
            log.append_as_leader(batch(i * 10, 10, 100, 1_000), 0, 2_000)
                .await
                .unwrap();
        }
        log.set_high_watermark(600);
        assert!(
            matches!(
                log.maybe_increment_log_start_offset(601).await,
                Err(LogError::OffsetOutOfRange { .. })
            ),
            "not past the high watermark"
        );
        let segments = log.segment_count();
        assert_eq!(
            log.maybe_increment_log_start_offset(455).await.unwrap(),
            455
        );
        assert_eq!(
            log.maybe_increment_log_start_offset(10).await.unwrap(),
            455,
            "never moves back"
        );
        assert_eq!(
            log.segment_count(),
            segments,
            "segments go in the background"
        );
        assert!(matches!(
            log.read(454, 100_000, 600, true).await,
            Err(LogError::OffsetOutOfRange { .. })
        ));
        // A read at the start gets the batch holding it, as from Kafka.
        let from_start = log.read(455, 100_000, 600, true).await.unwrap();
        assert!(from_start.records.is_some());
        assert_eq!(log.log_start_offset_checkpoint(), Some(455));

        // Retention is off (the default retention.ms is a week away), but the
        // segments wholly below the log start still go; the one holding it stays.
        let deleted = log.delete_retained_segments(2_000).await.unwrap();
        assert!(deleted > 0 && log.segment_count() == segments - deleted);
        let first_base = log.segments()[0].base_offset();
        assert!(first_base <= 455 && log.segments()[0].next_offset() > 455);
        assert_eq!(log.log_start_offset(), 455);
        assert_eq!(read_all(&log).await.first().unwrap().offset, 455);
        assert_eq!(log.delete_retained_segments(2_000).await.unwrap(), 0);
    });
}

#[test]
fn compaction_keeps_the_last_record_per_key_and_never_moves_offsets() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = small_segments();
        config.set("cleanup.policy", "compact").unwrap();
        config.set("segment.bytes", "2000").unwrap();
        config.set("delete.retention.ms", "1000").unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        let mut expected = std::collections::BTreeMap::new();
        for round in 0..20 {
            for k in 0..10 {
                let key = format!("k{k}");
                let value = format!("v{round}-{k}");
                let info = log
                    .append_as_leader(keyed_batch(&[(&key, Some(&value))], 5_000), 0, 5_000)
                    .await
                    .unwrap();
                expected.insert(key, (info.first_offset, Some(value)));
            }
        }
        // A tombstone for k3, then more traffic so it sits in a closed segment.
        let info = log
            .append_as_leader(keyed_batch(&[("k3", None)], 5_000), 0, 5_000)
            .await
            .unwrap();
        expected.insert("k3".into(), (info.first_offset, None));
        for k in 0..40 {
            let key = format!("z{k}");
            let info = log
                .append_as_leader(keyed_batch(&[(&key, Some("x"))], 5_000), 0, 5_000)
                .await
                .unwrap();
            expected.insert(key, (info.first_offset, Some("x".into())));
        }
        // Keyless records are refused on a compacted topic.
        let mut keyless = shards::log::record_batch::RecordBatchBuilder::new(0, 5_000);
        keyless.append(5_000, None, Some(b"v"));
        assert_eq!(
            log.append_as_leader(keyless.build(), 0, 5_000)
                .await
                .unwrap_err()
                .response_error()
                .code(),
            87
        );

        let end = log.log_end_offset();
        let active_base = log.active_segment().base_offset();
        // Nothing above the high watermark is cleaned.
        assert!(log.clean(5_500, 1 << 20).await.unwrap().is_none());
        log.set_high_watermark(end);
        let stats = log
            .clean(5_500, 1 << 20)
            .await
            .unwrap()
            .expect("dirty enough to clean");
        assert!(stats.records_removed > 100);
        assert_eq!(log.log_end_offset(), end);
        let records = read_all(&log).await;
        let mut seen = std::collections::BTreeMap::new();
        for record in &records {
            let key = String::from_utf8(record.key.clone().unwrap()).unwrap();
            if record.offset < active_base {
                assert!(
                    !seen.contains_key(&key),
                    "duplicate key {key} in the cleaned part"
                );
            }
            seen.insert(
                key,
                (
                    record.offset,
                    record.value.clone().map(|v| String::from_utf8(v).unwrap()),
                ),
            );
        }
        assert_eq!(
            seen, expected,
            "last value and offset per key survive; the tombstone is still young"
        );

        // Once the tombstone is older than delete.retention.ms, it goes too.
        log.set_first_dirty_offset(0);
        log.clean(100_000, 1 << 20).await.unwrap().unwrap();
        let keys: Vec<_> = read_all(&log)
            .await
            .into_iter()
            .map(|r| r.key.unwrap())
            .collect();
        assert!(!keys.contains(&b"k3".to_vec()));
        assert!(keys.contains(&b"k4".to_vec()));
        // No cleaner leftovers on disk, and the cleaned log reopens identically.
        let names: Vec<String> = fs::read_dir(log.dir())
            .unwrap()
            .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
            .collect();
        assert!(
            names
                .iter()
                .all(|n| !n.ends_with(".cleaned") && !n.ends_with(".swap")),
            "{names:?}"
        );
        let before = read_all(&log).await;
        log.close().await.unwrap();
        drop(log);
        let mut config = small_segments();
        config.set("cleanup.policy", "compact").unwrap();
        let reopened = open_log(dir.path(), config, 0, false).await;
        assert_eq!(read_all(&reopened).await, before);
        assert_eq!(reopened.log_end_offset(), end);
    });
}

/// The base offset of the first batch a read from `offset` returns.
async fn first_batch_read_from(log: &shards::log::Log, offset: i64) -> i64 {
    let info = log
        .read(offset, 1, log.log_end_offset(), true)
        .await
        .unwrap();
    let bytes = info.records.unwrap().read().await.unwrap();
    i64::from_be_bytes(bytes[0..8].try_into().unwrap())
}

#[test]
fn a_read_from_any_offset_starts_at_its_batch_near_the_end_or_not() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        // One segment of 40 batches: the last ones are found without reading
        // the file back, the earlier ones by the index and the file.
        let log = open_log(dir.path(), LogConfig::default(), 0, false).await;
        for i in 0..40 {
            log.append_as_leader(batch(i * 3, 3, 100, 1_000), 1, 1_000)
                .await
                .unwrap();
        }
        for offset in 0..120 {
            assert_eq!(first_batch_read_from(&log, offset).await, offset / 3 * 3);
        }
        // Truncated in the middle of the recent batches, and appended to.
        log.truncate_to(111).await.unwrap();
        assert_eq!(log.log_end_offset(), 111);
        assert_eq!(first_batch_read_from(&log, 110).await, 108);
        log.append_as_leader(batch(0, 3, 100, 1_000), 1, 1_000)
            .await
            .unwrap();
        for offset in [100, 110, 111, 113] {
            assert_eq!(
                first_batch_read_from(&log, offset).await,
                offset.min(111) / 3 * 3
            );
        }
    });
}

#[test]
fn truncate_to_removes_the_tail_and_later_epochs() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_log(dir.path(), small_segments(), 0, false).await;
        for i in 0..30 {
            log.append_as_leader(
                batch(i * 10, 10, 100, 1_000),
                if i < 20 { 1 } else { 2 },
                1_000,
            )
            .await
            .unwrap();
        }
        assert_eq!(log.end_offset_for_epoch(1), Some((1, 200)));
        log.truncate_to(150).await.unwrap();
        assert_eq!(log.log_end_offset(), 150);
        assert_eq!(log.latest_epoch(), Some(1));
        assert_eq!(read_all(&log).await.len(), 150);
        let info = log
            .append_as_leader(batch(0, 10, 100, 1_000), 3, 1_000)
            .await
            .unwrap();
        assert_eq!(info.first_offset, 150);
    });
}

#[test]
fn truncate_to_the_log_end_drops_an_epoch_started_there_with_nothing_appended() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_log(dir.path(), small_segments(), 0, false).await;
        log.append_as_leader(batch(0, 10, 100, 1_000), 1, 1_000)
            .await
            .unwrap();
        // Leader for epoch 2 a moment, then a follower of a leader that
        // never had epoch 2: its divergence is at this log end.
        log.assign_epoch_start_offset(2).await.unwrap();
        assert_eq!(log.latest_epoch(), Some(2));
        log.truncate_to(10).await.unwrap();
        assert_eq!(log.log_end_offset(), 10);
        assert_eq!(log.latest_epoch(), Some(1));
        assert_eq!(log.end_offset_for_epoch(1), Some((1, 10)));
        assert_eq!(read_all(&log).await.len(), 10);
    });
    // The checkpoint forgot it too.
    run(async {
        let log = open_log(dir.path(), small_segments(), 0, false).await;
        assert_eq!(log.latest_epoch(), Some(1));
    });
}

#[test]
fn segments_roll_on_time_and_on_a_full_index() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = LogConfig::default();
        config.set("segment.ms", "1000").unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        log.append_as_leader(batch(0, 1, 10, 10_000), 0, 10_000)
            .await
            .unwrap();
        log.append_as_leader(batch(1, 1, 10, 10_500), 0, 10_500)
            .await
            .unwrap();
        assert_eq!(log.segment_count(), 1);
        // segment.ms counts from the first batch's timestamp, as Kafka does.
        log.append_as_leader(batch(2, 1, 10, 11_001), 0, 11_001)
            .await
            .unwrap();
        assert_eq!(log.segment_count(), 2);
        assert_eq!(log.active_segment().base_offset(), 2);
    });
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = LogConfig::default();
        config.set("segment.index.bytes", "24").unwrap(); // three entries
        config.set("index.interval.bytes", "0").unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        for i in 0..10 {
            log.append_as_leader(batch(i, 1, 10, 1_000), 0, 1_000)
                .await
                .unwrap();
        }
        assert!(log.segment_count() >= 3, "a full index rolls the segment");
        for segment in log.segments() {
            assert!(segment.offset_index_entries().len() <= 3);
        }
        assert_eq!(read_all(&log).await.len(), 10);
    });
}

#[test]
fn flush_messages_moves_the_recovery_point() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = LogConfig::default();
        config.set("flush.messages", "3").unwrap();
        let log = open_log(dir.path(), config, 0, true).await;
        log.append_as_leader(batch(0, 2, 10, 1_000), 0, 1_000)
            .await
            .unwrap();
        assert_eq!(
            log.recovery_point(),
            0,
            "Kafka's default leaves flushing to the OS"
        );
        log.append_as_leader(batch(2, 2, 10, 1_000), 0, 1_000)
            .await
            .unwrap();
        assert_eq!(log.recovery_point(), 4, "flush.messages reached");
    });
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut config = LogConfig::default();
        config.set("flush.ms", "100").unwrap();
        let log = open_log(dir.path(), config, 0, true).await;
        log.append_as_leader(batch(0, 2, 10, 1_000), 0, 1_000)
            .await
            .unwrap();
        log.maybe_flush_on_time(1_050).await.unwrap();
        assert_eq!(log.recovery_point(), 0);
        log.maybe_flush_on_time(1_200).await.unwrap();
        assert_eq!(log.recovery_point(), 2, "flush.ms passed");
    });
}

/// Appended data is handed to writeback as it goes (a few MiB at a time), not
/// left dirty until the kernel's thresholds or its 30 s expiry; also after a
/// truncation moved the segment's end back.
#[test]
fn appended_data_is_written_back_as_it_goes() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let segment = segment_file_path(&dir.path().join("topic-0"), 0, LOG_FILE_SUFFIX);
    run(async {
        let log = open_log(dir.path(), LogConfig::default(), 0, false).await;
        // 48 batches of almost 1 MiB, 8 of them truncated away and appended again.
        for i in 0..40 {
            log.append_as_leader(batch(i * 16, 16, 60 * 1024, 5_000), 0, 5_000)
                .await
                .unwrap();
        }
        log.truncate_to(32 * 16).await.unwrap();
        for i in 32..48 {
            log.append_as_leader(batch(i * 16, 16, 60 * 1024, 5_000), 0, 5_000)
                .await
                .unwrap();
        }
        // All but the last few MiB are being or have been written back.
        let settled_bytes = 36 * 1024 * 1024;
        let deadline = std::time::Instant::now() + std::time::Duration::from_secs(10);
        loop {
            let file = fs::File::open(&segment).unwrap();
            let Some(stat) = page_cache_stat(&file, 0, settled_bytes) else {
                return; // no cachestat on this kernel: nothing to observe
            };
            let dirty = stat.dirty_pages;
            if dirty == 0 {
                break;
            }
            assert!(
                std::time::Instant::now() < deadline,
                "{dirty} pages of the first 36 MiB still dirty"
            );
            glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        }
    });
}

/// With `drop_behind_bytes`, what is written back is dropped from the page
/// cache once that far behind the end (read back in later, it stays); the
/// tail stays cached for the readers there.
#[test]
fn written_back_data_is_dropped_from_the_page_cache_behind_the_end() {
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let segment = segment_file_path(&dir.path().join("topic-0"), 0, LOG_FILE_SUFFIX);
    const MIB: u64 = 1024 * 1024;
    let config = LogConfig {
        drop_behind_bytes: Some(8 * MIB),
        ..LogConfig::default()
    };
    run(async {
        let log = open_log(dir.path(), config, 0, false).await;
        // 32 batches of almost 1 MiB, with a pause after each for the
        // writeback job to take them about a chunk at a time, as under a load.
        for i in 0..32 {
            log.append_as_leader(batch(i * 16, 16, 60 * 1024, 5_000), 0, 5_000)
                .await
                .unwrap();
            glommio::timer::sleep(std::time::Duration::from_millis(5)).await;
        }
        // The last writeback started at 20 MiB or later (its chunks are 4 MiB
        // and a batch), so everything 8 MiB before that is out of the cache.
        let cached_pages = |position: u64, len: u64| {
            let file = fs::File::open(&segment).unwrap();
            page_cache_stat(&file, position, len).map(|stat| stat.cached_pages)
        };
        if cached_pages(0, MIB).is_none() {
            return; // no cachestat on this kernel: nothing to observe
        }
        eventually("the first 12 MiB out of the page cache", || {
            cached_pages(0, 12 * MIB) == Some(0)
        })
        .await;
        assert_eq!(cached_pages(28 * MIB, 2 * MIB), Some(2 * MIB / 4096));
        // Every record is still there, read back from the disk.
        assert_eq!(read_all(&log).await.len(), 32 * 16);
    });
}

#[test]
fn preallocated_segments_keep_their_size_and_give_back_blocks_when_they_roll() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let partition_dir = dir.path().join("topic-0");
    let path = |base: i64, suffix: &str| segment_file_path(&partition_dir, base, suffix);
    // A segment file's size and the bytes of blocks it holds.
    let sizes = |base: i64| {
        let meta = fs::metadata(path(base, LOG_FILE_SUFFIX)).unwrap();
        (meta.len(), meta.blocks() * 512)
    };
    let prepared = |base: i64| prepared_files(&partition_dir, base);
    let config = preallocated_segments(SEGMENT_BYTES);
    run(async {
        let log = std::rc::Rc::new(open_log(dir.path(), config.clone(), 0, false).await);
        let (size, allocated) = sizes(0);
        assert_eq!(size, 0, "the size is the data's, not the preallocation's");
        assert!(allocated >= SEGMENT_BYTES, "{allocated} bytes allocated");
        log.append_as_leader(batch(0, 16, 60 * 1024, 5_000), 0, 5_000)
            .await
            .unwrap();
        glommio::timer::sleep(std::time::Duration::from_millis(50)).await;
        assert!(
            prepared(0).is_empty(),
            "a quarter full, the next segment is not made yet"
        );
        // Past half way to segment.bytes, the next segment is made ahead.
        for i in 1..3 {
            log.append_as_leader(batch(i * 16, 16, 60 * 1024, 5_000), 0, 5_000)
                .await
                .unwrap();
        }
        let inode = await_prepared(&partition_dir, 0, SEGMENT_BYTES).await;
        log.roll(5_000).await.unwrap();
        assert_eq!(
            fs::metadata(path(48, LOG_FILE_SUFFIX)).unwrap().ino(),
            inode,
            "the roll takes the prepared file"
        );
        assert!(prepared(0).is_empty());
        assert!(
            sizes(48).1 >= SEGMENT_BYTES,
            "the new segment is preallocated"
        );
        // The old segment's unused blocks go back in the background.
        assert!(sizes(0).0 > 2 * 900 * 1024, "{:?}", sizes(0));
        eventually("the closed segment's unused blocks given back", || {
            let (size, allocated) = sizes(0);
            allocated < size + 64 * 1024
        })
        .await;
        for i in 3..6 {
            log.append_as_leader(batch(i * 16, 16, 60 * 1024, 5_000), 0, 5_000)
                .await
                .unwrap();
        }
        await_prepared(&partition_dir, 48, SEGMENT_BYTES).await;
        log.close().await.unwrap();
        assert_eq!(
            sizes(48).1,
            sizes(48).0.div_ceil(4096) * 4096,
            "closing gives back the active segment's blocks"
        );
        assert!(
            prepared(48).is_empty(),
            "closing removes the next segment unused"
        );
    });
    // A crash leaves prepared files behind; loading removes them.
    for suffix in [LOG_FILE_SUFFIX, INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX] {
        fs::write(path(48, &format!("{suffix}.7{PREPARED_FILE_SUFFIX}")), b"").unwrap();
    }
    assert_eq!(prepared(48).len(), 3);
    run(async {
        let log = open_log(dir.path(), config, 0, true).await;
        assert!(
            sizes(48).1 >= SEGMENT_BYTES,
            "reopened, the active segment is preallocated again"
        );
        assert!(prepared(48).is_empty());
        assert_eq!(read_all(&log).await.len(), 96);
    });
}

/// The files of next segments prepared in `dir` and named after `base`
/// (`<base><suffix>.<n>.prepared`), by name.
fn prepared_files(dir: &std::path::Path, base: i64) -> Vec<std::path::PathBuf> {
    let prefix = format!("{base:020}.");
    let mut files: Vec<_> = fs::read_dir(dir)
        .unwrap()
        .map(|entry| entry.unwrap().path())
        .filter(|path| {
            let name = path.file_name().unwrap().to_string_lossy();
            name.starts_with(&prefix) && name.ends_with(PREPARED_FILE_SUFFIX)
        })
        .collect();
    files.sort();
    files
}

/// Waits for one next segment prepared after `base` with `size_bytes` of
/// blocks, made in the background; its `.log`'s inode.
async fn await_prepared(dir: &std::path::Path, base: i64, size_bytes: u64) -> u64 {
    use std::os::unix::fs::MetadataExt;
    let log = || {
        let files = prepared_files(dir, base);
        let log_suffix = format!("{LOG_FILE_SUFFIX}.");
        let log = files
            .iter()
            .find(|file| file.to_string_lossy().contains(&log_suffix))?;
        let metadata = fs::metadata(log).ok()?;
        (files.len() == 3 && metadata.blocks() * 512 >= size_bytes).then_some(metadata.ino())
    };
    eventually("the next segment prepared", || log().is_some()).await;
    log().unwrap()
}

/// The files under `dir` this process still has open though they are deleted.
fn open_deleted_files(dir: &std::path::Path) -> Vec<String> {
    let dir = dir.to_string_lossy().into_owned();
    fs::read_dir("/proc/self/fd")
        .unwrap()
        .filter_map(|fd| fs::read_link(fd.ok()?.path()).ok())
        .map(|target| target.to_string_lossy().into_owned())
        .filter(|target| target.starts_with(&dir) && target.ends_with(" (deleted)"))
        .collect()
}

#[test]
fn deleted_files_keep_their_blocks_past_the_last_use() {
    // Their last close frees the blocks, which can wait for the disk; it
    // comes later, on the blocking pool, not when the shard lets go of them.
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = log_past_retention_bytes(dir.path()).await;
        log.set_high_watermark(log.log_end_offset());
        let deleted = log.delete_retained_segments(2_000).await.unwrap();
        assert!(deleted > 0);
        // The segments' own descriptors close on the reactor's next turn.
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        let held = open_deleted_files(log.dir());
        assert_eq!(held.len(), 3 * deleted, "{held:?}");
        // The whole log deleted: its directory is renamed, then removed.
        let segments = log.segment_count();
        let doomed = log.mark_deleted().await.unwrap();
        fs::remove_dir_all(&doomed).unwrap();
        drop(log);
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        // Those retention deleted are still held too, under the renamed directory.
        let held = open_deleted_files(&doomed);
        assert_eq!(held.len(), 3 * (segments + deleted), "{held:?}");
    });
}

/// The hold is the topic's `file.delete.delay.ms`.
#[test]
fn deleted_files_are_let_go_after_file_delete_delay_ms() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = log_past_retention_bytes(dir.path()).await;
        let mut config = (*log.config()).clone();
        config.set("file.delete.delay.ms", "300").unwrap();
        log.update_config(std::rc::Rc::new(config));
        log.set_high_watermark(log.log_end_offset());
        let deleted = log.delete_retained_segments(2_000).await.unwrap();
        assert!(deleted > 0);
        glommio::timer::sleep(std::time::Duration::from_millis(20)).await;
        assert_eq!(open_deleted_files(log.dir()).len(), 3 * deleted);
        eventually("the deleted files let go", || {
            open_deleted_files(log.dir()).is_empty()
        })
        .await;
    });
}

#[test]
fn a_log_moved_to_another_dir_keeps_its_records_and_takes_appends_there() {
    use shards::log::{LogDirs, LogManager, LogManagerConfig, TopicPartition};
    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let paths = [first.path().to_owned(), second.path().to_owned()];
    // A move the last run did not finish is dropped at start.
    let stale_future = second.path().join("t-0.1a2b-future");
    fs::create_dir_all(&stale_future).unwrap();
    let dirs = LogDirs::open(&paths).unwrap();
    assert!(!stale_future.exists());
    run(async {
        let manager = LogManager::new(0, dirs.clone(), LogManagerConfig::default());
        let tp = TopicPartition::new("t", 0);
        let log = manager
            .get_or_create_log(
                &tp,
                std::rc::Rc::new(small_segments()),
                "AAAAAAAAAAAAAAAAAAAAAA",
            )
            .await
            .unwrap();
        assert!(log.dir().starts_with(first.path()));
        for i in 0..60 {
            log.append_as_leader(batch(i * 10, 10, 100, 5_000), 3, 5_000)
                .await
                .unwrap();
        }
        log.set_high_watermark(600);
        assert!(log.segment_count() > 2);
        let before = read_all(&log).await;
        let moved = manager.move_log(&tp, 1).await.unwrap();
        assert!(moved.dir().starts_with(second.path()));
        assert!(
            !first.path().join("t-0").exists(),
            "the old copy is removed"
        );
        assert!(log
            .append_as_leader(batch(600, 10, 100, 5_000), 3, 5_000)
            .await
            .is_err());
        assert_eq!(read_all(&moved).await, before);
        assert_eq!(moved.high_watermark(), 600);
        assert_eq!(dirs.find(&tp).map(|(dir, _)| dir), Some(1));
        let info = moved
            .append_as_leader(batch(600, 10, 100, 5_000), 3, 5_000)
            .await
            .unwrap();
        assert_eq!(info.first_offset, 600);
    });
}

const MOVED_TOPIC_ID: &str = "AAAAAAAAAAAAAAAAAAAAAA";

/// Two shards' log managers over `dirs`, as a shard move has them, and the
/// log of `t-0` (topic id `MOVED_TOPIC_ID`) made on the first.
async fn log_on_the_first_of_two_shards(
    dirs: &std::sync::Arc<shards::log::LogDirs>,
    config: &std::rc::Rc<LogConfig>,
) -> (
    std::rc::Rc<shards::log::LogManager>,
    std::rc::Rc<shards::log::LogManager>,
    std::rc::Rc<shards::log::Log>,
) {
    use shards::log::{LogManager, LogManagerConfig, TopicPartition};
    let shard = |id| LogManager::new(id, dirs.clone(), LogManagerConfig::default());
    let (from, to) = (shard(0), shard(1));
    let log = from
        .get_or_create_log(&TopicPartition::new("t", 0), config.clone(), MOVED_TOPIC_ID)
        .await
        .unwrap();
    (from, to, log)
}

#[test]
fn a_log_handed_off_while_its_next_segment_is_prepared_leaves_the_next_shard_its_own() {
    use shards::log::{LogDirs, TopicPartition};
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dirs = LogDirs::open(&[dir.path().to_owned()]).unwrap();
    let config = std::rc::Rc::new(preallocated_segments(SEGMENT_BYTES));
    run(async {
        let (from, to, log) = log_on_the_first_of_two_shards(&dirs, &config).await;
        let (tp, topic_id) = (TopicPartition::new("t", 0), MOVED_TOPIC_ID);
        let partition_dir = log.dir().to_owned();
        // Past half way to segment.bytes: the next segment is being made.
        for i in 0..3 {
            log.append_as_leader(batch(i * 16, 16, 60 * 1024, 5_000), 0, 5_000)
                .await
                .unwrap();
        }
        // Handed off without waiting for it; the preparation, named after
        // the same segment, removes only its own files when it ends.
        from.hand_off(&tp).await.unwrap();
        let taken = to
            .get_or_create_log(&tp, config.clone(), topic_id)
            .await
            .unwrap();
        taken
            .append_as_leader(batch(48, 16, 60 * 1024, 5_000), 0, 5_000)
            .await
            .unwrap();
        // The one set of prepared files left, still there a moment later,
        // is the next shard's.
        let mut inode = await_prepared(&partition_dir, 0, SEGMENT_BYTES).await;
        for attempt in 0.. {
            assert!(attempt < 20, "the prepared files still change after 4 s");
            glommio::timer::sleep(std::time::Duration::from_millis(200)).await;
            let again = await_prepared(&partition_dir, 0, SEGMENT_BYTES).await;
            if again == inode {
                break;
            }
            inode = again;
        }
        taken.roll(5_000).await.unwrap();
        let rolled = segment_file_path(&partition_dir, 64, LOG_FILE_SUFFIX);
        assert_eq!(
            fs::metadata(rolled).unwrap().ino(),
            inode,
            "the roll takes the next shard's prepared file"
        );
        assert!(prepared_files(&partition_dir, 0).is_empty());
        taken
            .append_as_leader(batch(64, 16, 60 * 1024, 5_000), 0, 5_000)
            .await
            .unwrap();
        assert_eq!(read_all(&taken).await.len(), 80);
    });
}

#[test]
fn a_log_handed_to_another_shard_keeps_its_records_producers_and_high_watermark() {
    use shards::log::record_batch::RecordBatchBuilder;
    use shards::log::{LogDirs, TopicPartition};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dirs = LogDirs::open(&[dir.path().to_owned()]).unwrap();
    let mut config = small_segments();
    config.set("preallocate", "true").unwrap();
    let config = std::rc::Rc::new(config);
    // Ten records of producer 7, its sequence starting at `first`.
    let idempotent = |first: usize| {
        let mut builder = RecordBatchBuilder::new(0, 5_000);
        (builder.producer_id, builder.producer_epoch) = (7, 0);
        builder.base_sequence = first as i32;
        for i in first..first + 10 {
            builder.append(5_000, Some(format!("key-{i}").as_bytes()), Some(&[1; 100]));
        }
        builder.build()
    };
    run(async {
        let (from, to, log) = log_on_the_first_of_two_shards(&dirs, &config).await;
        let (tp, topic_id) = (TopicPartition::new("t", 0), MOVED_TOPIC_ID);
        for i in 0..60 {
            log.append_as_leader(idempotent(i * 10), 3, 5_000)
                .await
                .unwrap();
        }
        assert!(log.segment_count() > 2);
        log.set_high_watermark(550);
        let before = read_all(&log).await;
        from.hand_off(&tp).await.unwrap();
        assert!(from.get_log(&tp).is_none());
        assert!(
            log.append_as_leader(idempotent(600), 3, 5_000)
                .await
                .is_err(),
            "the copy handed off takes nothing more"
        );
        let taken = to
            .get_or_create_log(&tp, config.clone(), topic_id)
            .await
            .unwrap();
        assert_eq!(read_all(&taken).await, before);
        assert_eq!((taken.high_watermark(), taken.log_end_offset()), (550, 600));
        // The producer's retry of its last batch is known there.
        let retried = taken
            .append_as_leader(idempotent(590), 3, 5_000)
            .await
            .unwrap();
        assert_eq!((retried.first_offset, taken.log_end_offset()), (590, 600));
        let next = taken
            .append_as_leader(idempotent(600), 3, 5_000)
            .await
            .unwrap();
        assert_eq!(next.first_offset, 600);
        // Handed back, it is the same log again.
        to.hand_off(&tp).await.unwrap();
        let back = from.get_or_create_log(&tp, config, topic_id).await.unwrap();
        assert_eq!(back.log_end_offset(), 610);
    });
}

#[test]
fn a_log_taken_up_from_another_shard_reads_none_of_its_files_and_still_removes_them() {
    use shards::log::{LogDirs, TopicPartition};
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let dirs = LogDirs::open(&[dir.path().to_owned()]).unwrap();
    let config = std::rc::Rc::new(small_segments());
    run(async {
        let (from, to, log) = log_on_the_first_of_two_shards(&dirs, &config).await;
        let (tp, topic_id) = (TopicPartition::new("t", 0), MOVED_TOPIC_ID);
        for i in 0..50 {
            log.append_as_leader(batch(i * 10, 10, 100, 1_000 + i as i64), 3, 5_000)
                .await
                .unwrap();
        }
        assert!(log.segment_count() > 3);
        log.set_high_watermark(log.log_end_offset());
        let before = read_all(&log).await;
        let partition_dir = log.dir().to_owned();
        let bases: Vec<i64> = log.segments().iter().map(|s| s.base_offset()).collect();
        let indexes: Vec<_> = bases
            .iter()
            .flat_map(|&base| {
                [INDEX_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX]
                    .map(|suffix| segment_file_path(&partition_dir, base, suffix))
            })
            .collect();
        from.hand_off(&tp).await.unwrap();
        // Zeroed indexes are insane: an open of the files would rebuild them
        // from the segments and write them again.
        for path in &indexes {
            let size_bytes = fs::metadata(path).unwrap().len() as usize;
            assert!(size_bytes > 0);
            fs::write(path, vec![0; size_bytes]).unwrap();
        }
        let taken = to
            .get_or_create_log(&tp, config.clone(), topic_id)
            .await
            .unwrap();
        for path in &indexes {
            assert!(
                fs::read(path).unwrap().iter().all(|&byte| byte == 0),
                "{} was read back or rebuilt",
                path.display()
            );
        }
        assert_eq!(read_all(&taken).await, before);
        // The indexes handed over answer lookups.
        let found = taken.fetch_offset_by_timestamp(1_025).await.unwrap();
        assert_eq!(found.unwrap().offset, 250);
        // The files are the next shard's to remove, by their paths.
        let mut config = small_segments();
        config.set("retention.ms", "1000").unwrap();
        taken.update_config(std::rc::Rc::new(config));
        taken.delete_retained_segments(1_000_000).await.unwrap();
        assert_eq!(taken.segment_count(), 1);
        for &base in &bases[..bases.len() - 1] {
            assert!(!segment_file_path(&partition_dir, base, LOG_FILE_SUFFIX).exists());
        }
        assert_eq!(taken.log_start_offset(), *bases.last().unwrap());
    });
}

#[test]
fn a_segment_rolled_for_size_keeps_its_last_unused_blocks_not_those_of_a_larger_preallocation() {
    use std::os::unix::fs::MetadataExt;
    let dir = tempfile::tempdir_in(env!("CARGO_TARGET_TMPDIR")).unwrap();
    let config = preallocated_segments(SEGMENT_BYTES);
    run(async {
        let log = open_log(dir.path(), config, 0, false).await;
        // Batches of about 960 KiB: the fifth does not fit, and rolls.
        for i in 0..5 {
            log.append_as_leader(batch(i * 16, 16, 60 * 1024, 5_000), 0, 5_000)
                .await
                .unwrap();
        }
        assert_eq!(log.segment_count(), 2);
        eventually("the closed segment flushed", || log.recovery_point() >= 64).await;
        let metadata = fs::metadata(segment_file_path(log.dir(), 0, LOG_FILE_SUFFIX)).unwrap();
        assert!(SEGMENT_BYTES - metadata.len() < 1024 * 1024);
        assert!(
            metadata.blocks() * 512 >= SEGMENT_BYTES,
            "less than a batch of blocks is not worth a truncate under the flush lock: {} of {}",
            metadata.blocks() * 512,
            metadata.len()
        );
        // With segment.bytes lowered, the next roll for size leaves most of
        // what was preallocated under the old setting: that goes back.
        log.update_config(std::rc::Rc::new(preallocated_segments(1024 * 1024)));
        log.append_as_leader(batch(80, 16, 60 * 1024, 5_000), 0, 5_000)
            .await
            .unwrap();
        assert_eq!(log.segment_count(), 3);
        let path = segment_file_path(log.dir(), 64, LOG_FILE_SUFFIX);
        eventually(
            "the unused blocks of the old preallocation given back",
            || {
                let metadata = fs::metadata(&path).unwrap();
                metadata.blocks() * 512 < metadata.len() + 64 * 1024
            },
        )
        .await;
    });
}
