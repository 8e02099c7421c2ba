//! Partition reassignment (KIP-455) across real brokers and a real
//! ZooKeeper, driven by Kafka's `kafka-reassign-partitions`: a partition
//! moves to a broker that joined while acks=all producers and a consumer
//! group run, and nothing acknowledged is lost.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::acked::{check_acknowledged, produce_until, read_all, replica_bytes};
use common::cluster::{kafka_topics, wait, ZooKeeper};
use common::kafka_tool_output;
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Message;

/// `kafka-reassign-partitions` against `bootstrap` with `args`, a JSON file
/// holding `json` given after `file_flag`: whether it succeeded, and what
/// it printed.
fn reassign_partitions(
    bootstrap: &str,
    file_flag: &str,
    json: &str,
    args: &[&str],
) -> (bool, String) {
    let file = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(file.path(), json).unwrap();
    let path = file.path().to_str().unwrap();
    let mut all = vec!["--bootstrap-server", bootstrap, file_flag, path];
    all.extend_from_slice(args);
    let output = kafka_tool_output(
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        &all,
        None,
    );
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

fn moves(topic: &str, partition: i32, replicas: &[i32]) -> String {
    format!(
        r#"{{"version":1,"partitions":[{{"topic":"{topic}","partition":{partition},"replicas":{replicas:?}}}]}}"#
    )
}

/// A consumer group member reading `topic` until `consuming` is cleared;
/// every record's (partition, offset).
fn consume_until(
    bootstrap: String,
    topic: &'static str,
    consuming: Arc<AtomicBool>,
) -> std::thread::JoinHandle<Vec<(i32, i64)>> {
    std::thread::spawn(move || {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "reassignment-readers")
            .set("auto.offset.reset", "earliest")
            .set("enable.partition.eof", "false")
            .create()
            .unwrap();
        consumer.subscribe(&[topic]).unwrap();
        let mut seen = Vec::new();
        while consuming.load(Ordering::Acquire) {
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
                seen.push((message.partition(), message.offset()));
            }
        }
        seen
    })
}

#[test]
fn a_partition_moves_to_a_new_broker_while_producers_and_a_group_run() {
    const CHROOT: &str = "/reassignment";
    let zk = ZooKeeper::start();
    let (mut brokers, all) = zk.start_brokers(CHROOT, 1..=3, &[]);
    kafka_topics(
        &all[0],
        &[
            "--create",
            "--topic",
            "moving",
            "--replica-assignment",
            "1:2:3,1:2:3",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    zk.wait_for(Duration::from_secs(30), "full ISRs", |zk| {
        (0..2).all(|p| zk.partition_state(CHROOT, "moving", p).1.len() == 3)
    });
    let (joined, _) = zk.start_brokers(CHROOT, [4], &[]);
    brokers.extend(joined);
    let bootstrap = all.join(",");
    let producing = Arc::new(AtomicBool::new(true));
    let consuming = Arc::new(AtomicBool::new(true));
    let producer = produce_until(bootstrap.clone(), "moving", producing.clone());
    let consumer = consume_until(bootstrap.clone(), "moving", consuming.clone());
    std::thread::sleep(Duration::from_secs(2));

    let target = moves("moving", 0, &[2, 3, 4]);
    let (ok, printed) =
        reassign_partitions(&all[1], "--reassignment-json-file", &target, &["--execute"]);
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Successfully started partition reassignment"),
        "{printed}"
    );
    wait(
        Duration::from_secs(60),
        "the reassignment completes",
        || {
            let (ok, printed) = reassign_partitions(
                &all[1],
                "--reassignment-json-file",
                &target,
                &["--verify", "--preserve-throttles"],
            );
            assert!(ok, "{printed}");
            printed.contains("Reassignment of partition moving-0 is completed")
        },
    );
    assert_eq!(
        zk.assignment(CHROOT, "moving"),
        [vec![2, 3, 4], vec![1, 2, 3]]
    );
    let znode = zk.json(&format!("{CHROOT}/brokers/topics/moving")).unwrap();
    assert_eq!(znode["adding_replicas"], serde_json::json!({}));
    assert_eq!(znode["removing_replicas"], serde_json::json!({}));
    let (leader, isr) = zk.partition_state(CHROOT, "moving", 0);
    assert!([2, 3, 4].contains(&leader), "leader {leader}");
    assert_eq!(
        isr.iter()
            .copied()
            .collect::<std::collections::BTreeSet<_>>(),
        [2, 3, 4].into()
    );
    // The removed replica's log is deleted.
    wait(Duration::from_secs(20), "broker 1 drops moving-0", || {
        !brokers[0].data_dir().join("moving-0").exists()
    });
    std::thread::sleep(Duration::from_secs(1));
    producing.store(false, Ordering::Release);
    let (acked, errors) = producer.join().unwrap();
    assert!(errors.is_empty(), "delivery errors: {errors:?}");
    assert!(acked.len() > 100, "{} acknowledged", acked.len());
    let read = read_all(&bootstrap, "moving");
    check_acknowledged(&acked, &read);

    // The group read every acknowledged record, with no offset skipped.
    let mut last_acked: BTreeMap<i32, i64> = BTreeMap::new();
    for (partition, offset, _) in &acked {
        let last = last_acked.entry(*partition).or_default();
        *last = (*last).max(*offset);
    }
    std::thread::sleep(Duration::from_secs(3));
    consuming.store(false, Ordering::Release);
    let seen = consumer.join().unwrap();
    for (partition, last) in last_acked {
        let mut offsets: Vec<i64> = seen
            .iter()
            .filter(|(p, _)| *p == partition)
            .map(|(_, o)| *o)
            .collect();
        offsets.sort_unstable();
        offsets.dedup();
        let expected: Vec<i64> = (0..=last).collect();
        assert!(
            offsets.starts_with(&expected),
            "partition {partition}: the group saw {} of {} offsets",
            offsets.len(),
            last + 1
        );
    }
    // The new replica holds exactly the leader's bytes.
    wait(Duration::from_secs(20), "identical replicas", || {
        let first = replica_bytes(&brokers[1], "moving", 0);
        [2, 3]
            .iter()
            .all(|i| replica_bytes(&brokers[*i], "moving", 0) == first)
    });
}
