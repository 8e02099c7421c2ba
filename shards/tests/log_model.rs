//! Property test: random appends, reads, rolls, retention, compaction and
//! restarts (clean and crashed) against a simple in-memory model of the log.

mod common;

use std::collections::BTreeMap;
use std::rc::Rc;

use common::*;
use proptest::prelude::*;
use shards::log::record_batch::RecordBatchBuilder;
use shards::log::LogConfig;

#[derive(Debug, Clone)]
enum Op {
    Append { keys: Vec<u8>, value_bytes: usize },
    Read { at_permille: u16, max_bytes: usize },
    Roll,
    Retain { max_bytes: i64 },
    Compact,
    Restart { clean: bool },
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        6 => (prop::collection::vec(0u8..12, 1..8), 0usize..300)
            .prop_map(|(keys, value_bytes)| Op::Append { keys, value_bytes }),
        3 => (0u16..1000, 1usize..4000).prop_map(|(at_permille, max_bytes)| Op::Read { at_permille, max_bytes }),
        1 => Just(Op::Roll),
        1 => (2000i64..20_000).prop_map(|max_bytes| Op::Retain { max_bytes }),
        1 => Just(Op::Compact),
        1 => any::<bool>().prop_map(|clean| Op::Restart { clean }),
    ]
}

fn config(retention_bytes: i64) -> LogConfig {
    let mut config = LogConfig::default();
    config.set("segment.bytes", "3000").unwrap();
    config.set("index.interval.bytes", "300").unwrap();
    config.set("cleanup.policy", "compact,delete").unwrap();
    config.set("min.cleanable.dirty.ratio", "0").unwrap();
    config.retention_bytes = retention_bytes;
    config
}

/// The model: every record the log must hold, by offset.
type Model = BTreeMap<i64, StoredRecord>;

fn check(ops: Vec<Op>) {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let mut log = open_log(dir.path(), config(-1), 0, false).await;
        let mut model = Model::new();
        let mut counter = 0u64;
        for op in ops {
            match op {
                Op::Append { keys, value_bytes } => {
                    let mut builder = RecordBatchBuilder::new(0, 10_000);
                    for key in &keys {
                        counter += 1;
                        let value = format!("{counter:08}").repeat(value_bytes / 8 + 1);
                        builder.append(10_000, Some(&[*key]), Some(value.as_bytes()));
                    }
                    let info = log
                        .append_as_leader(builder.build(), 0, 10_000)
                        .await
                        .unwrap();
                    // As a leader that is its whole ISR.
                    log.set_high_watermark(log.log_end_offset());
                    let records = read_all_from(&log, info.first_offset).await;
                    for record in records {
                        model.insert(record.offset, record);
                    }
                    assert_eq!(info.last_offset - info.first_offset + 1, keys.len() as i64);
                }
                Op::Read {
                    at_permille,
                    max_bytes,
                } => {
                    let (start, end) = (log.log_start_offset(), log.log_end_offset());
                    let offset = start + (end - start) * at_permille as i64 / 1000;
                    let info = log.read(offset, max_bytes, end, true).await.unwrap();
                    if let Some(slice) = info.records {
                        let bytes = slice.read().await.unwrap();
                        let mut iter = shards::log::record_batch::BatchIter::new(&bytes);
                        let first = iter.next().unwrap().unwrap().0;
                        assert!(
                            first.last_offset() >= offset,
                            "batch ends before the fetch offset"
                        );
                        if first.base_offset > offset {
                            assert!(
                                model.range(offset..first.base_offset).next().is_none(),
                                "records skipped"
                            );
                        }
                        assert!(iter.all(|b| b.is_ok()), "whole batches only");
                    } else {
                        assert!(
                            model.range(offset..).next().is_none(),
                            "data at {offset} not returned"
                        );
                    }
                }
                Op::Roll => {
                    let rc = Rc::new(log);
                    rc.roll(10_000).await.unwrap();
                    log = Rc::try_unwrap(rc).ok().unwrap();
                }
                Op::Retain { max_bytes } => {
                    log.update_config(Rc::new(config(max_bytes)));
                    log.delete_retained_segments(10_000).await.unwrap();
                    log.update_config(Rc::new(config(-1)));
                    assert!(
                        log.size_bytes() as i64
                            <= max_bytes + 3000 + log.active_segment().size_bytes() as i64
                    );
                    model = model.split_off(&log.log_start_offset());
                }
                Op::Compact => {
                    let active_base = log.active_segment().base_offset();
                    log.clean(10_000, 1 << 20).await.unwrap();
                    let after: Model = read_all(&log)
                        .await
                        .into_iter()
                        .map(|r| (r.offset, r))
                        .collect();
                    // Nothing invented or moved; the newest record per key survives;
                    // the active segment is untouched.
                    for (offset, record) in &after {
                        assert_eq!(model.get(offset), Some(record));
                    }
                    let mut newest = BTreeMap::new();
                    for (offset, record) in &model {
                        newest.insert(record.key.clone(), *offset);
                    }
                    for offset in newest.values() {
                        assert!(
                            after.contains_key(offset),
                            "newest record at {offset} removed"
                        );
                    }
                    for offset in model.range(active_base..).map(|(o, _)| o) {
                        assert!(after.contains_key(offset));
                    }
                    model = after;
                }
                Op::Restart { clean } => {
                    if clean {
                        log.close().await.unwrap();
                    }
                    let recovery_point = if clean { log.recovery_point() } else { 0 };
                    let end = log.log_end_offset();
                    drop(log);
                    log = open_log(dir.path(), config(-1), recovery_point, clean).await;
                    log.set_high_watermark(log.log_end_offset());
                    assert_eq!(
                        log.log_end_offset(),
                        end,
                        "nothing written is lost on restart"
                    );
                }
            }
            assert_eq!(
                read_all(&log)
                    .await
                    .into_iter()
                    .map(|r| (r.offset, r))
                    .collect::<Model>(),
                model
            );
        }
    });
}

async fn read_all_from(log: &shards::log::Log, offset: i64) -> Vec<StoredRecord> {
    read_all(log)
        .await
        .into_iter()
        .filter(|r| r.offset >= offset)
        .collect()
}

proptest! {
    #![proptest_config(ProptestConfig { cases: 96, ..ProptestConfig::default() })]
    #[test]
    fn the_log_behaves_like_its_model(ops in prop::collection::vec(op(), 1..60)) {
        check(ops);
    }
}
