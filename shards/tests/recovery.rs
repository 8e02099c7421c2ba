//! Crash and corruption: what recovery keeps, and that nothing corrupt is ever
//! returned.

mod common;

use std::fs::{self, OpenOptions};
use std::path::Path;

use common::*;
use shards::log::{LogConfig, LogManager, LogManagerConfig, TopicPartition};

fn config() -> LogConfig {
    let mut config = LogConfig::default();
    config.set("segment.bytes", "10000").unwrap();
    config.set("index.interval.bytes", "500").unwrap();
    config
}

/// Fills a log with 60 batches of 5 records over several segments and leaves it
/// without a clean shutdown. Returns the segment base offsets.
fn fill(dir: &Path) -> Vec<i64> {
    run(async {
        let log = open_log(dir, config(), 0, false).await;
        for i in 0..60 {
            log.append_as_leader(batch(i * 5, 5, 100, 1_000 + i as i64), 0, 2_000)
                .await
                .unwrap();
        }
        log.segments().iter().map(|s| s.base_offset()).collect()
    })
}

fn segment(dir: &Path, base: i64, suffix: &str) -> std::path::PathBuf {
    dir.join("topic-0").join(format!("{base:020}{suffix}"))
}

#[test]
fn a_torn_tail_is_cut_at_the_last_whole_batch() {
    let dir = tempfile::tempdir().unwrap();
    let bases = fill(dir.path());
    let last = segment(dir.path(), *bases.last().unwrap(), ".log");
    let len = fs::metadata(&last).unwrap().len();
    OpenOptions::new()
        .write(true)
        .open(&last)
        .unwrap()
        .set_len(len - 30)
        .unwrap();
    run(async {
        let log = open_log(dir.path(), config(), 0, false).await;
        assert_eq!(log.log_end_offset(), 295, "the torn last batch is gone");
        let records = read_all(&log).await;
        assert_eq!(records.len(), 295);
        assert!(records
            .iter()
            .enumerate()
            .all(|(i, r)| r.offset == i as i64));
        let info = log
            .append_as_leader(batch(0, 5, 100, 3_000), 0, 3_000)
            .await
            .unwrap();
        assert_eq!(info.first_offset, 295);
    });
}

#[test]
fn a_corrupt_old_batch_cuts_the_log_there_and_drops_later_segments() {
    let dir = tempfile::tempdir().unwrap();
    let bases = fill(dir.path());
    assert!(bases.len() >= 4);
    let victim = segment(dir.path(), bases[1], ".log");
    let mut bytes = fs::read(&victim).unwrap();
    let at = bytes.len() / 2;
    bytes[at] ^= 0x5a;
    fs::write(&victim, &bytes).unwrap();
    run(async {
        let log = open_log(dir.path(), config(), 0, false).await;
        assert!(log.log_end_offset() > bases[1] && log.log_end_offset() < bases[2]);
        assert_eq!(log.segment_count(), 2);
        assert!(!segment(dir.path(), bases[2], ".log").exists());
        let records = read_all(&log).await; // validates every batch it gets
        assert_eq!(records.len() as i64, log.log_end_offset());
    });
}

#[test]
fn a_missing_or_garbled_index_is_rebuilt() {
    let dir = tempfile::tempdir().unwrap();
    let bases = fill(dir.path());
    let (original_index, original_time_index) = (
        fs::read(segment(dir.path(), bases[1], ".index")).unwrap(),
        fs::read(segment(dir.path(), bases[1], ".timeindex")).unwrap(),
    );
    assert!(!original_index.is_empty());
    fs::remove_file(segment(dir.path(), bases[1], ".index")).unwrap();
    fs::write(segment(dir.path(), bases[2], ".index"), vec![0xabu8; 64]).unwrap();
    fs::write(segment(dir.path(), bases[0], ".index"), vec![1u8; 13]).unwrap();
    fs::write(
        segment(dir.path(), bases[0], ".timeindex"),
        vec![0xffu8; 24],
    )
    .unwrap();
    run(async {
        // Even after a clean shutdown (no recovery scan) a bad index is caught.
        let log = open_log(dir.path(), config(), i64::MAX, true).await;
        let records = read_all(&log).await;
        assert_eq!(records.len(), 300);
        assert!(records
            .iter()
            .enumerate()
            .all(|(i, r)| r.offset == i as i64));
        for offset in [0, 7, 61, 149, 222, 299] {
            let info = log.read(offset, 1, 300, true).await.unwrap();
            let bytes = info.records.unwrap().read().await.unwrap();
            let header = shards::log::record_batch::validate_batch(&bytes).unwrap();
            assert!(header.base_offset <= offset && offset <= header.last_offset());
        }
    });
    assert_eq!(
        fs::read(segment(dir.path(), bases[1], ".index")).unwrap(),
        original_index
    );
    assert_eq!(
        fs::read(segment(dir.path(), bases[1], ".timeindex")).unwrap(),
        original_time_index
    );
    assert_eq!(
        fs::metadata(segment(dir.path(), bases[0], ".index"))
            .unwrap()
            .len()
            % 8,
        0
    );
}

#[test]
fn an_interrupted_cleaner_swap_is_completed() {
    let dir = tempfile::tempdir().unwrap();
    let bases = fill(dir.path());
    for suffix in [".log", ".index", ".timeindex"] {
        fs::copy(
            segment(dir.path(), bases[0], suffix),
            segment(dir.path(), bases[0], &format!("{suffix}.swap")),
        )
        .unwrap();
    }
    fs::write(
        segment(dir.path(), bases[1], ".log.cleaned"),
        b"half-written",
    )
    .unwrap();
    // An index left under `.swap` by a swap whose segment already came in.
    fs::write(segment(dir.path(), bases[1], ".index.swap"), b"stale").unwrap();
    run(async {
        let log = open_log(dir.path(), config(), 0, false).await;
        assert_eq!(read_all(&log).await.len(), 300);
    });
    let leftovers: Vec<_> = fs::read_dir(dir.path().join("topic-0"))
        .unwrap()
        .map(|e| e.unwrap().file_name().to_string_lossy().into_owned())
        .filter(|n| n.ends_with(".swap") || n.ends_with(".cleaned"))
        .collect();
    assert!(leftovers.is_empty(), "{leftovers:?}");
}

#[test]
fn index_files_without_their_segment_are_deleted() {
    // A crash between a roll's renames can leave a new segment's indexes alone.
    let dir = tempfile::tempdir().unwrap();
    let bases = fill(dir.path());
    let orphan = bases.last().unwrap() + 1_000;
    for suffix in [".index", ".timeindex"] {
        fs::write(segment(dir.path(), orphan, suffix), b"").unwrap();
    }
    run(async {
        let log = open_log(dir.path(), config(), 0, false).await;
        assert_eq!(log.log_end_offset(), 300);
    });
    for suffix in [".index", ".timeindex"] {
        assert!(!segment(dir.path(), orphan, suffix).exists());
        for base in &bases {
            assert!(segment(dir.path(), *base, suffix).exists());
        }
    }
}

#[test]
fn a_clean_shutdown_leaves_checkpoints_and_a_marker() {
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_owned()];
    let tp = TopicPartition::new("events", 3);
    let log_dirs = open_log_dirs(&dirs);
    assert!(!log_dirs.dirs()[0].had_clean_shutdown);
    run({
        let log_dirs = log_dirs.clone();
        let tp = tp.clone();
        async move {
            let manager = LogManager::new(0, log_dirs, LogManagerConfig::default());
            let log = manager
                .get_or_create_log(&tp, std::rc::Rc::new(config()), "topic-id-a")
                .await
                .unwrap();
            for i in 0..10 {
                log.append_as_leader(batch(i * 5, 5, 100, 1_000), 0, 2_000)
                    .await
                    .unwrap();
            }
            log.set_high_watermark(40);
            manager.shutdown().await;
        }
    });
    log_dirs.write_checkpoints().unwrap();
    log_dirs.mark_clean_shutdown().unwrap();
    let text = fs::read_to_string(dir.path().join("recovery-point-offset-checkpoint")).unwrap();
    assert_eq!(text, "0\n1\nevents 3 50\n");
    let text = fs::read_to_string(dir.path().join("replication-offset-checkpoint")).unwrap();
    assert_eq!(text, "0\n1\nevents 3 40\n");

    drop(log_dirs); // releases the directory's lock
    let reopened = open_log_dirs(&dirs);
    assert!(reopened.dirs()[0].had_clean_shutdown);
    assert!(
        !dir.path().join(".kafka_cleanshutdown").exists(),
        "the marker is consumed"
    );
    let (_, checkpoint) = reopened.find(&tp).unwrap();
    assert_eq!(
        (checkpoint.recovery_point, checkpoint.high_watermark),
        (50, Some(40))
    );
    run(async move {
        let manager = LogManager::new(0, reopened, LogManagerConfig::default());
        let log = manager
            .get_or_create_log(&tp, std::rc::Rc::new(config()), "topic-id-a")
            .await
            .unwrap();
        assert_eq!((log.log_end_offset(), log.high_watermark()), (50, 40));
    });
}

#[test]
fn the_log_start_offset_survives_a_restart() {
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_owned()];
    let tp = TopicPartition::new("purged", 0);
    let open_and = |body: fn(std::rc::Rc<shards::log::Log>) -> _| {
        let log_dirs = open_log_dirs(&dirs);
        let tp = tp.clone();
        run(async move {
            let manager = LogManager::new(0, log_dirs.clone(), LogManagerConfig::default());
            let log = manager
                .get_or_create_log(&tp, std::rc::Rc::new(config()), "topic-id-a")
                .await
                .unwrap();
            let result: i64 = body(log).await;
            manager.shutdown().await;
            log_dirs.write_checkpoints().unwrap();
            result
        })
    };
    let moved = open_and(|log| {
        Box::pin(async move {
            for i in 0..10 {
                log.append_as_leader(batch(i * 5, 5, 100, 1_000), 0, 2_000)
                    .await
                    .unwrap();
            }
            log.set_high_watermark(50);
            log.maybe_increment_log_start_offset(23).await.unwrap()
        }) as std::pin::Pin<Box<dyn std::future::Future<Output = i64>>>
    });
    assert_eq!(moved, 23);
    let text = fs::read_to_string(dir.path().join("log-start-offset-checkpoint")).unwrap();
    assert_eq!(text, "0\n1\npurged 0 23\n");
    let after_restart = open_and(|log| Box::pin(async move { log.log_start_offset() }));
    assert_eq!(after_restart, 23);
}

/// A directory whose disk fills up goes offline; the broker keeps serving the
/// partitions in its other directories and places new ones there.
#[test]
fn a_failing_log_dir_goes_offline_and_the_others_keep_serving() {
    let root = tempfile::tempdir().unwrap();
    let small = root.path().join("small");
    let big = root.path().join("big");
    fs::create_dir_all(&small).unwrap();
    let status = std::process::Command::new("mount")
        .args(["-t", "tmpfs", "-o", "size=64k", "tmpfs"])
        .arg(&small)
        .status()
        .expect("mount(8) is needed for this test");
    assert!(status.success(), "mounting a tmpfs needs root");
    struct Unmount(std::path::PathBuf);
    impl Drop for Unmount {
        fn drop(&mut self) {
            let _ = std::process::Command::new("umount")
                .arg("-l")
                .arg(&self.0)
                .status();
        }
    }
    let _unmount = Unmount(small.clone());

    let log_dirs = open_log_dirs(&[small.clone(), big.clone()]);
    run(async move {
        let manager = LogManager::new(0, log_dirs.clone(), LogManagerConfig::default());
        let on_small = manager
            .get_or_create_log(
                &TopicPartition::new("a", 0),
                std::rc::Rc::new(config()),
                "id-a",
            )
            .await
            .unwrap();
        let on_big = manager
            .get_or_create_log(
                &TopicPartition::new("b", 0),
                std::rc::Rc::new(config()),
                "id-b",
            )
            .await
            .unwrap();
        assert!(on_small.dir().starts_with(&small) && on_big.dir().starts_with(&big));
        let mut failed = None;
        for i in 0..200 {
            if let Err(error) = on_small
                .append_as_leader(batch(i * 5, 5, 1000, 1_000), 0, 2_000)
                .await
            {
                failed = Some(error);
                break;
            }
        }
        assert_eq!(
            failed.expect("the tmpfs fills up").response_error().code(),
            56,
            "KAFKA_STORAGE_ERROR"
        );
        assert!(log_dirs.dirs()[0].health.is_offline());
        assert_eq!(
            on_small
                .read(0, 100, 10, true)
                .await
                .unwrap_err()
                .response_error()
                .code(),
            56
        );
        for i in 0..20 {
            on_big
                .append_as_leader(batch(i * 5, 5, 1000, 1_000), 0, 2_000)
                .await
                .unwrap();
        }
        assert_eq!(read_all(&on_big).await.len(), 100);
        let new_log = manager
            .get_or_create_log(
                &TopicPartition::new("c", 0),
                std::rc::Rc::new(config()),
                "id-c",
            )
            .await
            .unwrap();
        assert!(new_log.dir().starts_with(&big));
    });
}

#[test]
fn an_unclean_restart_keeps_the_leader_epoch_history() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_log(dir.path(), config(), 0, false).await;
        for i in 0..60 {
            let epoch = match i {
                0..=19 => 0,
                20..=39 => 3,
                _ => 5,
            };
            log.append_as_leader(batch(i * 5, 5, 100, 1_000), epoch, 2_000)
                .await
                .unwrap();
        }
        log.flush().await.unwrap();
    });
    let before = fs::read_to_string(dir.path().join("topic-0/leader-epoch-checkpoint")).unwrap();
    assert_eq!(before, "0\n3\n0 0\n3 100\n5 200\n");
    run(async {
        // Recovery starts inside epoch 3 and replays its batches.
        let log = open_log(dir.path(), config(), 150, false).await;
        assert_eq!(log.end_offset_for_epoch(0), Some((0, 100)));
        assert_eq!(log.end_offset_for_epoch(3), Some((3, 200)));
    });
    assert_eq!(
        fs::read_to_string(dir.path().join("topic-0/leader-epoch-checkpoint")).unwrap(),
        before
    );
}

#[test]
fn a_corrupt_batch_below_the_recovery_point_cuts_only_its_segment() {
    let dir = tempfile::tempdir().unwrap();
    let bases = fill(dir.path());
    // An old, flushed segment loses its index and has a flipped byte.
    fs::remove_file(segment(dir.path(), bases[1], ".index")).unwrap();
    let victim = segment(dir.path(), bases[1], ".log");
    let mut bytes = fs::read(&victim).unwrap();
    let at = bytes.len() - 20;
    bytes[at] ^= 0x5a;
    fs::write(&victim, &bytes).unwrap();
    run(async {
        let log = open_log(dir.path(), config(), 300, true).await;
        assert_eq!(log.segment_count(), bases.len(), "later segments are kept");
        assert_eq!(log.log_end_offset(), 300);
        // Everything returned is valid; only the cut batch is missing.
        assert_eq!(read_all(&log).await.len(), 295);
    });
}

#[test]
fn produced_batches_must_fill_their_offset_range() {
    let dir = tempfile::tempdir().unwrap();
    run(async {
        let log = open_log(dir.path(), config(), 0, false).await;
        let mut sparse = batch(0, 3, 10, 1_000);
        let delta = shards::log::record_batch::LAST_OFFSET_DELTA_OFFSET;
        sparse[delta..delta + 4].copy_from_slice(&i32::MAX.to_be_bytes());
        let crc = shards::log::record_batch::compute_crc(&sparse);
        let at = shards::log::record_batch::CRC_OFFSET;
        sparse[at..at + 4].copy_from_slice(&crc.to_be_bytes());
        let error = log.append_as_leader(sparse, 0, 2_000).await.unwrap_err();
        assert_eq!(error.response_error().code(), 87, "INVALID_RECORD");
        assert_eq!(log.log_end_offset(), 0);
    });
}

#[test]
fn a_directory_of_an_earlier_topic_with_the_same_name_is_not_served() {
    let dir = tempfile::tempdir().unwrap();
    let dirs = vec![dir.path().to_owned()];
    let tp = TopicPartition::new("reused", 0);
    {
        let log_dirs = open_log_dirs(&dirs);
        let tp = tp.clone();
        run(async move {
            let manager = LogManager::new(0, log_dirs, LogManagerConfig::default());
            let log = manager
                .get_or_create_log(&tp, std::rc::Rc::new(config()), "first-id")
                .await
                .unwrap();
            log.append_as_leader(batch(0, 5, 10, 1_000), 0, 2_000)
                .await
                .unwrap();
            manager.shutdown().await;
        });
    }
    let text = fs::read_to_string(dir.path().join("reused-0/partition.metadata")).unwrap();
    assert_eq!(text, "version: 0\ntopic_id: first-id\n");
    let log_dirs = open_log_dirs(&dirs);
    run(async move {
        let manager = LogManager::new(0, log_dirs, LogManagerConfig::default());
        // Same topic: the data is there.
        let same = manager
            .get_or_create_log(&tp, std::rc::Rc::new(config()), "first-id")
            .await
            .unwrap();
        assert_eq!(same.log_end_offset(), 5);
        manager.shutdown().await;
        let manager = LogManager::new(0, manager.dirs().clone(), LogManagerConfig::default());
        // A new topic under the old name starts empty.
        let fresh = manager
            .get_or_create_log(&tp, std::rc::Rc::new(config()), "second-id")
            .await
            .unwrap();
        assert_eq!((fresh.log_start_offset(), fresh.log_end_offset()), (0, 0));
    });
}

/// The dir a child process of `the_high_watermark_checkpoint_and_epochs_survive_a_kill`
/// leads its partition in, until it is killed.
const LEADER_DIR_ENV: &str = "RECOVERY_TEST_LEADER_DIR";

/// How long the leader child waits to be killed before it gives up (its
/// parent failed).
const LEADER_LIFETIME: std::time::Duration = std::time::Duration::from_secs(60);

/// As the killed leader: appends in two epochs, moves the high watermark,
/// begins a third epoch, says so in `ready`, and runs its periodic
/// checkpoints until killed, or for `LEADER_LIFETIME` at most.
fn lead_until_killed(dir: &Path) -> ! {
    let log_dirs = open_log_dirs(&[dir.to_owned()]);
    run(async move {
        let manager = LogManager::new(
            0,
            log_dirs,
            LogManagerConfig {
                high_watermark_checkpoint_interval_ms: 20,
                ..LogManagerConfig::default()
            },
        );
        manager.start_background_tasks();
        let log = manager
            .get_or_create_log(
                &TopicPartition::new("led", 0),
                std::rc::Rc::new(config()),
                "id",
            )
            .await
            .unwrap();
        for (epoch, batches) in [(0, 0..4), (2, 4..10)] {
            log.assign_epoch_start_offset(epoch).await.unwrap();
            for i in batches {
                log.append_as_leader(batch(i * 5, 5, 100, 1_000), epoch, 2_000)
                    .await
                    .unwrap();
            }
        }
        log.set_high_watermark(35);
        log.assign_epoch_start_offset(4).await.unwrap();
        // A few checkpoint intervals before saying so.
        glommio::timer::sleep(std::time::Duration::from_millis(200)).await;
        fs::write(dir.join("ready"), b"").unwrap();
        glommio::timer::sleep(LEADER_LIFETIME).await;
        panic!("the leader was never killed");
    })
}

/// A leader killed with kill -9 (no shutdown, no final checkpoint) comes
/// back with the high watermark of its last periodic checkpoint and the
/// leader epochs of its records. An epoch begun at the log end with nothing
/// appended is dropped on load, as Kafka's `truncateFromEnd(logEndOffset)`
/// drops it: the controller gives a returning leader a new epoch anyway.
#[test]
fn the_high_watermark_checkpoint_and_epochs_survive_a_kill() {
    if let Some(dir) = std::env::var_os(LEADER_DIR_ENV) {
        lead_until_killed(Path::new(&dir));
    }
    let dir = tempfile::tempdir().unwrap();
    let mut leader = std::process::Command::new(std::env::current_exe().unwrap())
        .args([
            "--exact",
            "the_high_watermark_checkpoint_and_epochs_survive_a_kill",
        ])
        .env(LEADER_DIR_ENV, dir.path())
        .stdout(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = std::time::Instant::now() + std::time::Duration::from_secs(30);
    while !dir.path().join("ready").exists() {
        assert!(
            std::time::Instant::now() < deadline,
            "the leader never got ready"
        );
        assert!(leader.try_wait().unwrap().is_none(), "the leader exited");
        std::thread::sleep(std::time::Duration::from_millis(10));
    }
    leader.kill().unwrap(); // SIGKILL
    leader.wait().unwrap();
    // Each new epoch reached the checkpoint file when it began.
    let epochs = fs::read_to_string(dir.path().join("led-0/leader-epoch-checkpoint")).unwrap();
    assert_eq!(epochs, "0\n3\n0 0\n2 20\n4 50\n");

    let reopened = open_log_dirs(&[dir.path().to_owned()]);
    assert!(!reopened.dirs()[0].had_clean_shutdown);
    let tp = TopicPartition::new("led", 0);
    let (_, checkpoint) = reopened.find(&tp).unwrap();
    assert_eq!(checkpoint.high_watermark, Some(35));
    run(async move {
        let manager = LogManager::new(0, reopened, LogManagerConfig::default());
        let log = manager
            .get_or_create_log(&tp, std::rc::Rc::new(config()), "id")
            .await
            .unwrap();
        assert_eq!((log.log_end_offset(), log.high_watermark()), (50, 35));
        assert_eq!(log.end_offset_for_epoch(0), Some((0, 20)));
        assert_eq!(log.end_offset_for_epoch(2), Some((2, 50)));
        assert_eq!(log.latest_epoch(), Some(2));
    });
}
