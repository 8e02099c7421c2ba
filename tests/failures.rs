//! Failures the controller must ride out, across real brokers and a real
//! ZooKeeper: a log dir that fills up takes its replicas offline on its
//! broker and their leaderships move while the broker's other replicas go
//! on serving; a topic deleted while one of its brokers is down is deleted
//! there when it returns, and a topic created again under the same name
//! never serves the old records.

mod common;

use std::io::Write;
use std::path::{Path, PathBuf};
use std::process::Command;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::acked::{check_acknowledged, produce_until, read_all, replica_bytes};
use common::cluster::{kafka_topics, wait, ZooKeeper};

/// A tmpfs of `size` mounted on a fresh directory, unmounted when dropped.
struct Tmpfs {
    dir: tempfile::TempDir,
}

impl Tmpfs {
    fn mount(size: &str) -> Tmpfs {
        let dir = tempfile::tempdir().unwrap();
        let mounted = Command::new("mount")
            .args(["-t", "tmpfs", "-o", &format!("size={size}"), "tmpfs"])
            .arg(dir.path())
            .status()
            .unwrap();
        assert!(mounted.success(), "mounting a tmpfs needs root");
        Tmpfs { dir }
    }

    fn path(&self) -> &Path {
        self.dir.path()
    }

    /// Fills the file system but for about `left_bytes`.
    fn fill(&self, left_bytes: u64) {
        let junk = self.path().join("junk");
        let mut file = std::fs::File::create(&junk).unwrap();
        let chunk = vec![0u8; 64 * 1024];
        let mut written = 0u64;
        while file.write_all(&chunk).is_ok() {
            written += chunk.len() as u64;
        }
        file.set_len(written.saturating_sub(left_bytes)).unwrap();
    }
}

impl Drop for Tmpfs {
    fn drop(&mut self) {
        let _ = Command::new("umount")
            .arg("-l")
            .arg(self.dir.path())
            .status();
    }
}

fn partitions_in(dir: &Path, topic: &str) -> Vec<i32> {
    let mut partitions: Vec<i32> = std::fs::read_dir(dir)
        .unwrap()
        .filter_map(|entry| {
            let name = entry.ok()?.file_name().into_string().ok()?;
            name.strip_prefix(&format!("{topic}-"))?.parse().ok()
        })
        .collect();
    partitions.sort_unstable();
    partitions
}

#[test]
fn a_full_log_dir_moves_its_leaderships_and_the_broker_serves_the_rest() {
    const CHROOT: &str = "/log-dirs";
    let zk = ZooKeeper::start();
    let (mut brokers, mut all) = zk.start_brokers(CHROOT, 1..=2, &[]);
    let healthy = tempfile::tempdir().unwrap();
    let small = Tmpfs::mount("8m");
    let dirs = format!(
        "log.dirs={},{}",
        healthy.path().display(),
        small.path().display()
    );
    let (third, address) = zk.start_brokers(CHROOT, [3], &[&dirs]);
    brokers.extend(third);
    all.extend(address);
    kafka_topics(
        &all[0],
        &[
            "--create",
            "--topic",
            "disks",
            "--replica-assignment",
            "3:1:2,3:2:1,3:1:2,3:2:1",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    zk.wait_for(Duration::from_secs(30), "full ISRs", |zk| {
        (0..4).all(|p| zk.partition_state(CHROOT, "disks", p).1.len() == 3)
    });
    let failing = partitions_in(small.path(), "disks");
    let serving = partitions_in(healthy.path(), "disks");
    assert!(
        !failing.is_empty() && !serving.is_empty(),
        "{failing:?} {serving:?}"
    );

    small.fill(256 * 1024);
    let bootstrap = all.join(",");
    let producing = Arc::new(AtomicBool::new(true));
    let producer = produce_until(bootstrap.clone(), "disks", producing.clone());
    zk.wait_for(
        Duration::from_secs(30),
        "the failed dir's leaderships move",
        |zk| {
            failing.iter().all(|p| {
                let (leader, isr) = zk.partition_state(CHROOT, "disks", *p);
                leader != 3 && leader != -1 && !isr.contains(&3)
            })
        },
    );
    for partition in &serving {
        let (leader, isr) = zk.partition_state(CHROOT, "disks", *partition);
        assert_eq!(leader, 3, "disks-{partition} stays with broker 3");
        assert_eq!(isr.len(), 3);
    }
    zk.wait_for(
        Duration::from_secs(10),
        "the notification is processed",
        |zk| {
            zk.children(&format!("{CHROOT}/log_dir_event_notification"))
                .is_empty()
        },
    );
    std::thread::sleep(Duration::from_secs(2));
    producing.store(false, Ordering::Release);
    let (acked, errors) = producer.join().unwrap();
    assert!(errors.is_empty(), "delivery errors: {errors:?}");
    check_acknowledged(&acked, &read_all(&bootstrap, "disks"));
    for partition in &serving {
        assert!(
            acked.iter().any(|(p, ..)| p == partition),
            "disks-{partition} took records on broker 3 after the failure"
        );
    }

    let described = common::kafka_tool(
        "org.apache.kafka.tools.LogDirsCommand",
        &[
            "--bootstrap-server",
            &all[2],
            "--broker-list",
            "3",
            "--describe",
        ],
        None,
    );
    let json = described.lines().last().unwrap();
    let json: serde_json::Value = serde_json::from_str(json).unwrap();
    let dirs = json["brokers"][0]["logDirs"].as_array().unwrap();
    let dir_error = |path: &Path| {
        dirs.iter()
            .find(|d| Path::new(d["logDir"].as_str().unwrap()) == path)
            .map(|d| d["error"].clone())
    };
    assert_eq!(
        dir_error(small.path()),
        Some(serde_json::json!(
            "org.apache.kafka.common.errors.KafkaStorageException"
        )),
        "{described}"
    );
    assert_eq!(
        dir_error(healthy.path()),
        Some(serde_json::Value::Null),
        "{described}"
    );
    drop(brokers);
}

#[test]
fn a_topic_deleted_while_a_broker_is_down_goes_when_it_returns() {
    const CHROOT: &str = "/deletion";
    let zk = ZooKeeper::start();
    let (mut brokers, all) = zk.start_brokers(CHROOT, 1..=3, &[]);
    let create = [
        "--create",
        "--topic",
        "doomed",
        "--partitions",
        "3",
        "--replication-factor",
        "3",
    ];
    kafka_topics(&all[0], &create);
    zk.wait_for(Duration::from_secs(30), "full ISRs", |zk| {
        (0..3).all(|p| zk.partition_state(CHROOT, "doomed", p).1.len() == 3)
    });
    let old: String = (0..90).map(|i| format!("old-{i}\n")).collect();
    common::kcat(
        &["-b", &all[0], "-t", "doomed", "-P", "-X", "acks=all"],
        Some(&old),
    );
    let dirs: Vec<PathBuf> = brokers.iter().map(|b| b.data_dir().to_owned()).collect();
    let has_logs = |dir: &Path| (0..3).any(|p| dir.join(format!("doomed-{p}")).exists());
    assert!(dirs.iter().all(|dir| has_logs(dir)));

    brokers[2].kill();
    zk.wait_for(Duration::from_secs(20), "broker 3 out of the ISRs", |zk| {
        (0..3).all(|p| !zk.partition_state(CHROOT, "doomed", p).1.contains(&3))
    });
    kafka_topics(&all[0], &["--delete", "--topic", "doomed"]);
    wait(
        Duration::from_secs(20),
        "the live brokers delete their logs",
        || !has_logs(&dirs[0]) && !has_logs(&dirs[1]),
    );
    // Ineligible while broker 3 is down: the topic and its mark stay.
    std::thread::sleep(Duration::from_secs(2));
    assert!(zk.get(&format!("{CHROOT}/brokers/topics/doomed")).is_some());
    assert!(zk
        .get(&format!("{CHROOT}/admin/delete_topics/doomed"))
        .is_some());
    assert!(has_logs(&dirs[2]), "broker 3 was down");

    brokers[2].restart();
    wait(Duration::from_secs(30), "broker 3 deletes its logs", || {
        !has_logs(&dirs[2])
    });
    zk.wait_for(Duration::from_secs(20), "the deletion completes", |zk| {
        zk.get(&format!("{CHROOT}/brokers/topics/doomed")).is_none()
            && zk
                .get(&format!("{CHROOT}/admin/delete_topics/doomed"))
                .is_none()
    });

    // The same name again: empty, with none of the old records anywhere.
    kafka_topics(&all[0], &create);
    zk.wait_for(Duration::from_secs(30), "full ISRs again", |zk| {
        (0..3).all(|p| zk.partition_state(CHROOT, "doomed", p).1.len() == 3)
    });
    let new: String = (0..30).map(|i| format!("new-{i}\n")).collect();
    common::kcat(
        &["-b", &all[0], "-t", "doomed", "-P", "-X", "acks=all"],
        Some(&new),
    );
    let read = read_all(&all.join(","), "doomed");
    assert_eq!(read.len(), 30, "{read:?}");
    assert!(
        read.iter().all(|(_, value)| value.starts_with("new-")),
        "{read:?}"
    );
    wait(Duration::from_secs(20), "identical replicas", || {
        (0..3).all(|p| {
            let first = replica_bytes(&brokers[0], "doomed", p);
            brokers[1..]
                .iter()
                .all(|b| replica_bytes(b, "doomed", p) == first)
        })
    });
}
