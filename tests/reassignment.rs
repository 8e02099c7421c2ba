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

/// Writes `count` records of 1 KiB to each of `partitions` of `topic`.
fn fill(bootstrap: &str, topic: &str, partitions: i32, count: usize) {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("acks", "all")
        .set("linger.ms", "5")
        .create()
        .unwrap();
    let value = vec![b'x'; 1024];
    for partition in 0..partitions {
        for _ in 0..count {
            let mut record = BaseRecord::<(), _>::to(topic)
                .partition(partition)
                .payload(&value);
            loop {
                match producer.send(record) {
                    Ok(()) => break,
                    Err((_, back)) => {
                        record = back;
                        producer.poll(Duration::from_millis(10));
                    }
                }
            }
        }
    }
    producer.flush(Duration::from_secs(60)).unwrap();
}

/// The size of a partition's log on a broker, all segments.
fn log_bytes(broker: &common::Broker, topic: &str, partition: i32) -> u64 {
    replica_bytes(broker, topic, partition).len() as u64
}

fn controller(zk: &ZooKeeper, chroot: &str) -> i32 {
    zk.json(&format!("{chroot}/controller")).unwrap()["brokerid"]
        .as_i64()
        .unwrap() as i32
}

#[test]
fn a_throttled_reassignment_can_be_cancelled_or_outlive_its_controller() {
    const CHROOT: &str = "/throttled";
    let zk = ZooKeeper::start();
    let (mut brokers, all) = zk.start_brokers(CHROOT, 1..=3, &[]);
    let (joined, joined_address) = zk.start_brokers(CHROOT, [4], &[]);
    brokers.extend(joined);
    let bootstrap = [all.clone(), joined_address].concat().join(",");
    kafka_topics(
        &all[0],
        &[
            "--create",
            "--topic",
            "slow",
            "--replica-assignment",
            "1:2:3,1:2:3",
        ],
    );
    // 6 MiB a partition: at 20 kB/s that is minutes.
    fill(&bootstrap, "slow", 2, 6_000);
    zk.wait_for(Duration::from_secs(30), "full ISRs", |zk| {
        (0..2).all(|p| zk.partition_state(CHROOT, "slow", p).1.len() == 3)
    });
    let both = r#"{"version":1,"partitions":[
        {"topic":"slow","partition":0,"replicas":[1,2,4]},
        {"topic":"slow","partition":1,"replicas":[4,2,3]}]}"#;
    let (ok, printed) = reassign_partitions(
        &all[0],
        "--reassignment-json-file",
        both,
        &["--execute", "--throttle", "20000"],
    );
    assert!(ok, "{printed}");
    assert!(
        printed.contains("The inter-broker throttle limit was set to 20000 B/s"),
        "{printed}"
    );
    let topic_config = zk.json(&format!("{CHROOT}/config/topics/slow")).unwrap();
    assert_eq!(
        topic_config["config"]["follower.replication.throttled.replicas"], "0:4,1:4",
        "{topic_config}"
    );
    let broker_config = zk.json(&format!("{CHROOT}/config/brokers/4")).unwrap();
    assert_eq!(
        broker_config["config"]["follower.replication.throttled.rate"],
        "20000"
    );
    let described = common::kafka_tool(
        "org.apache.kafka.tools.ConfigCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--entity-type",
            "brokers",
            "--entity-name",
            "4",
            "--describe",
        ],
        None,
    );
    assert!(
        described.contains("follower.replication.throttled.rate=20000"),
        "{described}"
    );
    // Held back: after 5 s broker 4 has at most the first fetch of each (1 MiB).
    std::thread::sleep(Duration::from_secs(5));
    let (ok, printed) = reassign_partitions(
        &all[0],
        "--reassignment-json-file",
        both,
        &["--verify", "--preserve-throttles"],
    );
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Reassignment of partition slow-0 is still in progress"),
        "{printed}"
    );
    assert!(
        printed.contains("Reassignment of partition slow-1 is still in progress"),
        "{printed}"
    );
    let leader_bytes = log_bytes(&brokers[1], "slow", 1);
    for partition in 0..2 {
        let copied = log_bytes(&brokers[3], "slow", partition);
        assert!(
            copied <= leader_bytes / 2,
            "slow-{partition}: {copied} of {leader_bytes} bytes copied despite the throttle"
        );
    }
    let znode = zk.json(&format!("{CHROOT}/brokers/topics/slow")).unwrap();
    assert_eq!(
        znode["adding_replicas"],
        serde_json::json!({"0": [4], "1": [4]})
    );
    assert_eq!(
        znode["removing_replicas"],
        serde_json::json!({"0": [3], "1": [1]})
    );

    // Cancelled half way: slow-0 goes back to 1,2,3 and broker 4 drops it.
    let first = moves("slow", 0, &[1, 2, 4]);
    let (ok, printed) = reassign_partitions(
        &all[0],
        "--reassignment-json-file",
        &first,
        &["--cancel", "--preserve-throttles"],
    );
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Successfully cancelled partition reassignment"),
        "{printed}"
    );
    assert_eq!(zk.assignment(CHROOT, "slow")[0], [1, 2, 3]);
    wait(Duration::from_secs(20), "broker 4 drops slow-0", || {
        !brokers[3].data_dir().join("slow-0").exists()
    });
    assert_eq!(zk.partition_state(CHROOT, "slow", 0).1.len(), 3);

    // The controller dies with slow-1 half way; the next one finishes it
    // once the throttle is lifted.
    let old_controller = controller(&zk, CHROOT);
    assert_ne!(old_controller, 4, "broker 4 started last");
    brokers[old_controller as usize - 1].kill();
    zk.wait_for(Duration::from_secs(20), "a new controller", |zk| {
        zk.json(&format!("{CHROOT}/controller"))
            .is_some_and(|c| c["brokerid"].as_i64() != Some(old_controller as i64))
    });
    brokers[old_controller as usize - 1].restart();
    let live = brokers[3].address();
    for broker in 1..=4 {
        common::kafka_tool(
            "org.apache.kafka.tools.ConfigCommand",
            &[
                "--bootstrap-server",
                &live,
                "--entity-type",
                "brokers",
                "--entity-name",
                &broker.to_string(),
                "--alter",
                "--delete-config",
                "leader.replication.throttled.rate,follower.replication.throttled.rate",
            ],
            None,
        );
    }
    wait(
        Duration::from_secs(60),
        "slow-1's reassignment completes",
        || zk.assignment(CHROOT, "slow")[1] == [4, 2, 3],
    );
    let (ok, printed) = reassign_partitions(
        &live,
        "--reassignment-json-file",
        &moves("slow", 1, &[4, 2, 3]),
        &["--verify"],
    );
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Reassignment of partition slow-1 is completed"),
        "{printed}"
    );
    assert!(
        printed.contains("Clearing topic-level throttles on topic slow"),
        "{printed}"
    );
    let topic_config = zk.json(&format!("{CHROOT}/config/topics/slow")).unwrap();
    assert!(
        topic_config["config"]
            .get("follower.replication.throttled.replicas")
            .is_none(),
        "{topic_config}"
    );
    wait(Duration::from_secs(20), "broker 1 drops slow-1", || {
        !brokers[0].data_dir().join("slow-1").exists()
    });
    wait(
        Duration::from_secs(20),
        "identical replicas of slow-1",
        || {
            let first = replica_bytes(&brokers[3], "slow", 1);
            first.len() as u64 == leader_bytes
                && [1, 2]
                    .iter()
                    .all(|i| replica_bytes(&brokers[*i], "slow", 1) == first)
        },
    );
}

#[test]
fn a_replica_moves_between_the_log_dirs_of_its_broker() {
    use kafka_protocol::messages::alter_replica_log_dirs_request::{
        AlterReplicaLogDir, AlterReplicaLogDirTopic,
    };
    use kafka_protocol::messages::{
        AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse, ApiKey, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;

    let (first, second) = (tempfile::tempdir().unwrap(), tempfile::tempdir().unwrap());
    let dirs = format!(
        "log.dirs={},{}",
        first.path().display(),
        second.path().display()
    );
    let broker = common::Broker::start(&[&dirs]);
    let bootstrap = broker.address();
    kafka_topics(
        &bootstrap,
        &["--create", "--topic", "spread", "--partitions", "1"],
    );
    let values: String = (0..2_000).map(|i| format!("v-{i}\n")).collect();
    common::kcat(&["-b", &bootstrap, "-t", "spread", "-P"], Some(&values));
    let (from, to) = if first.path().join("spread-0").exists() {
        (first.path(), second.path())
    } else {
        (second.path(), first.path())
    };

    // A dir outside log.dirs is refused.
    let mut client = common::Client::connect(&bootstrap);
    let request =
        AlterReplicaLogDirsRequest::default().with_dirs(vec![AlterReplicaLogDir::default()
            .with_path(StrBytes::from_static_str("/nowhere"))
            .with_topics(vec![AlterReplicaLogDirTopic::default()
                .with_name(TopicName(StrBytes::from_static_str("spread")))
                .with_partitions(vec![0])])]);
    let response: AlterReplicaLogDirsResponse = client
        .call(ApiKey::AlterReplicaLogDirs, 2, &request)
        .unwrap();
    assert_eq!(
        response.results[0].partitions[0].error_code, 57,
        "LOG_DIR_NOT_FOUND"
    );

    let target = format!(
        r#"{{"version":1,"partitions":[{{"topic":"spread","partition":0,"replicas":[0],"log_dirs":["{}"]}}]}}"#,
        to.display()
    );
    let (ok, printed) = reassign_partitions(
        &bootstrap,
        "--reassignment-json-file",
        &target,
        &["--execute"],
    );
    assert!(ok, "{printed}");
    wait(Duration::from_secs(30), "the replica moves", || {
        let (ok, printed) = reassign_partitions(
            &bootstrap,
            "--reassignment-json-file",
            &target,
            &["--verify"],
        );
        assert!(ok, "{printed}");
        printed.contains("Reassignment of replica spread-0-0 completed")
    });
    assert!(to.join("spread-0").exists());
    wait(Duration::from_secs(10), "the old copy is removed", || {
        !from.join("spread-0").exists()
    });
    // Served from there: what was written, and what is written now.
    let more: String = (2_000..2_100).map(|i| format!("v-{i}\n")).collect();
    common::kcat(&["-b", &bootstrap, "-t", "spread", "-P"], Some(&more));
    let read: Vec<String> = read_all(&bootstrap, "spread")
        .into_iter()
        .map(|(_, v)| v)
        .collect();
    let expected: Vec<String> = (0..2_100).map(|i| format!("v-{i}")).collect();
    assert_eq!(read, expected);
    let described = common::kafka_tool(
        "org.apache.kafka.tools.LogDirsCommand",
        &[
            "--bootstrap-server",
            &bootstrap,
            "--broker-list",
            "0",
            "--describe",
        ],
        None,
    );
    let json: serde_json::Value = serde_json::from_str(described.lines().last().unwrap()).unwrap();
    let holding: Vec<&str> = json["brokers"][0]["logDirs"]
        .as_array()
        .unwrap()
        .iter()
        .filter(|d| {
            d["partitions"]
                .as_array()
                .unwrap()
                .iter()
                .any(|p| p["partition"] == "spread-0")
        })
        .map(|d| d["logDir"].as_str().unwrap())
        .collect();
    assert_eq!(holding, [to.to_str().unwrap()], "{described}");
}
