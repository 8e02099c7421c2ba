//! ISR replication across three real brokers and a real ZooKeeper: followers
//! fetch from leaders, acks=all waits for the ISR, the ISR shrinks and
//! expands, and leader epochs make a returning broker truncate what the
//! new leader never had. Nothing acknowledged is ever lost.

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::acked::{check_acknowledged, produce_until, read_all, replica_bytes, replicas_agree};
use common::cluster::{find_coordinator, kafka_topics, wait, ZooKeeper};
use common::{committed_offsets, free_port, http_get, kcat, Client};
use rdkafka::Message;
use shards::log::record_batch::RecordBatchBuilder;

const CHROOT: &str = "/replication";

/// A partition's state znode: leader and ISR.
fn state(zk: &ZooKeeper, topic: &str, partition: i32) -> (i32, Vec<i32>) {
    zk.partition_state(CHROOT, topic, partition)
}

fn create_topic(bootstrap: &str, topic: &str, partitions: u32, min_insync: u32) {
    kafka_topics(
        bootstrap,
        &[
            "--create",
            "--topic",
            topic,
            "--partitions",
            &partitions.to_string(),
            "--replication-factor",
            "3",
            "--config",
            &format!("min.insync.replicas={min_insync}"),
        ],
    );
}

fn full_isr(zk: &ZooKeeper, topic: &str, partitions: i32) -> bool {
    (0..partitions).all(|p| state(zk, topic, p).1.len() == 3)
}

#[test]
fn acknowledged_records_survive_leaders_killed_and_restarted() {
    kill_and_restart_leaders(20);
}

/// The same, for longer: `cargo test --release --test replication -- --ignored`
/// (with `RDKAFKA_DEBUG=eos,broker,topic`, the producer's librdkafka log).
#[test]
#[ignore = "a long fault loop, run outside CI"]
fn acknowledged_records_survive_200_leader_kills() {
    kill_and_restart_leaders(200);
}

/// `cycles` times, kill -9 the leader of a partition (each in turn) while an
/// idempotent acks=all producer writes without pause, and restart it once
/// it has lost its leadership; then every acknowledged record is there once,
/// in order, and the replicas are byte for byte the same.
fn kill_and_restart_leaders(cycles: usize) {
    let zk = ZooKeeper::start();
    let extra = ["replica.fetch.backoff.ms=200"];
    let (mut brokers, all) = three_brokers(&zk, &extra);
    create_topic(&all[0], "acked", 3, 2);
    wait(Duration::from_secs(20), "full ISRs", || {
        full_isr(&zk, "acked", 3)
    });
    let producing = Arc::new(AtomicBool::new(true));
    let producer = produce_until(all.join(","), "acked", producing.clone());
    std::thread::sleep(Duration::from_millis(500));
    for cycle in 0..cycles {
        let partition = (cycle % 3) as i32;
        let (leader, _) = state(&zk, "acked", partition);
        let victim = &mut brokers[(leader - 1) as usize];
        victim.kill();
        wait(Duration::from_secs(20), "a new leader", || {
            let (now, isr) = state(&zk, "acked", partition);
            now != leader && now > 0 && !isr.contains(&leader)
        });
        std::thread::sleep(Duration::from_millis(300));
        brokers[(leader - 1) as usize].restart();
        wait(Duration::from_secs(30), "the ISRs full again", || {
            full_isr(&zk, "acked", 3)
        });
    }
    std::thread::sleep(Duration::from_millis(500));
    producing.store(false, Ordering::Release);
    let (acked, errors) = producer.join().unwrap();
    assert!(acked.len() > 1_000, "{} acknowledged", acked.len());
    // What was acknowledged is checked before the delivery errors, so a run
    // with errors still says whether anything acknowledged was lost.
    check_acknowledged(&acked, &read_all(&all.join(","), "acked"));
    replicas_agree(&brokers, "acked", 3);
    assert!(errors.is_empty(), "{}", error_counts(&errors));
}

/// Each distinct delivery error once, with how often it came.
fn error_counts(errors: &[String]) -> String {
    let mut counts: std::collections::BTreeMap<&str, usize> = Default::default();
    for error in errors {
        *counts.entry(error.as_str()).or_default() += 1;
    }
    format!("delivery errors: {counts:?}")
}

#[test]
fn a_paused_follower_leaves_the_isr_and_rejoins_once_caught_up() {
    let zk = ZooKeeper::start();
    let extra = [
        "zookeeper.session.timeout.ms=12000",
        "replica.lag.time.max.ms=2000",
    ];
    let (brokers, all, metrics_ports) = brokers_with_metrics(&zk, &extra);
    create_topic(&all[0], "paused", 1, 2);
    wait(Duration::from_secs(20), "a full ISR", || {
        full_isr(&zk, "paused", 1)
    });
    let (leader, isr) = state(&zk, "paused", 0);
    // Not the controller: the shrink goes through it (AlterPartition).
    let controller = zk.json(&format!("{CHROOT}/controller")).unwrap()["brokerid"]
        .as_i64()
        .unwrap() as i32;
    let follower = *isr
        .iter()
        .find(|id| **id != leader && **id != controller)
        .unwrap();
    brokers[(follower - 1) as usize].pause();
    // acks=all goes on with two: the paused follower is dropped from the ISR.
    let input: String = (0..200).map(|i| format!("{i}\n")).collect();
    kcat(
        &[
            "-b",
            &all[(leader - 1) as usize],
            "-t",
            "paused",
            "-P",
            "-X",
            "acks=all",
        ],
        Some(&input),
    );
    let (_, shrunk) = state(&zk, "paused", 0);
    assert!(
        !shrunk.contains(&follower) && shrunk.len() == 2,
        "{shrunk:?}"
    );
    let leader_metrics = metrics_ports[(leader - 1) as usize];
    let shrinks = "kafka_server_replicamanager_isrshrinks_total";
    let expands = "kafka_server_replicamanager_isrexpands_total";
    assert!(metric(leader_metrics, shrinks) >= 1.0);
    assert_eq!(
        metric(
            leader_metrics,
            "kafka_server_replicamanager_underreplicatedpartitions"
        ),
        1.0
    );
    brokers[(follower - 1) as usize].resume();
    wait(
        Duration::from_secs(20),
        "the follower back in the ISR",
        || state(&zk, "paused", 0).1.contains(&follower),
    );
    wait(Duration::from_secs(5), "the expansion counted", || {
        metric(leader_metrics, expands) >= 1.0
    });
    replicas_agree(&brokers, "paused", 1);
    assert_eq!(read_all(&all[0], "paused").len(), 200);
}

/// A metric without labels from a broker's `/metrics`, 0 if absent.
fn metric(port: u16, name: &str) -> f64 {
    let (_, body) = http_get(port, "/metrics");
    body.lines()
        .find_map(|line| line.strip_prefix(name)?.strip_prefix(' ')?.parse().ok())
        .unwrap_or(0.0)
}

/// Brokers 1-3 of the cluster under `CHROOT`, with `extra` overrides, and
/// their addresses.
fn three_brokers(zk: &ZooKeeper, extra: &[&str]) -> (Vec<common::Broker>, Vec<String>) {
    zk.start_brokers(CHROOT, 1..=3, extra)
}

/// `three_brokers`, each also serving `/metrics` on the port it is given;
/// the brokers, their addresses and those ports.
type BrokersWithMetrics = (Vec<common::Broker>, Vec<String>, Vec<u16>);

fn brokers_with_metrics(zk: &ZooKeeper, extra: &[&str]) -> BrokersWithMetrics {
    let ports: Vec<u16> = (0..3).map(|_| free_port()).collect();
    let brokers: Vec<common::Broker> = (1..=3)
        .map(|id| {
            let metrics = format!("ringbroker.metrics.port={}", ports[id as usize - 1]);
            let mut overrides = extra.to_vec();
            overrides.push(&metrics);
            zk.start_broker(CHROOT, id, &overrides)
        })
        .collect();
    let all = brokers.iter().map(|b| b.address()).collect();
    (brokers, all, ports)
}

/// A batch of one record, as a producer sends it.
fn batch(value: &str) -> Vec<u8> {
    let now = shards::log::wall_clock_ms();
    let mut builder = RecordBatchBuilder::new(0, now);
    builder.append(now, None, Some(value.as_bytes()));
    builder.build()
}

/// `kafka-topics --describe --under-replicated-partitions` and
/// `--under-min-isr-partitions`, asked of `bootstrap`.
fn under_replicated_and_min_isr(bootstrap: &str) -> (String, String) {
    let describe = |filter| kafka_topics(bootstrap, &["--describe", filter]);
    (
        describe("--under-replicated-partitions"),
        describe("--under-min-isr-partitions"),
    )
}

#[test]
fn acks_all_is_refused_below_min_insync_replicas_and_resumes() {
    let zk = ZooKeeper::start();
    let (mut brokers, all) = three_brokers(&zk, &[]);
    create_topic(&all[0], "guarded", 1, 2);
    wait(Duration::from_secs(20), "a full ISR", || {
        full_isr(&zk, "guarded", 1)
    });
    let (leader, _) = state(&zk, "guarded", 0);
    let others: Vec<i32> = (1..=3).filter(|id| *id != leader).collect();
    for id in &others {
        brokers[(*id - 1) as usize].kill();
    }
    wait(
        Duration::from_secs(20),
        "the ISR down to the leader",
        || state(&zk, "guarded", 0).1 == [leader],
    );
    let leader_address = &all[(leader - 1) as usize];
    let (under_replicated, under_min_isr) = under_replicated_and_min_isr(leader_address);
    assert!(
        under_replicated.contains("Topic: guarded\tPartition: 0"),
        "{under_replicated}"
    );
    assert!(
        under_min_isr.contains("Topic: guarded\tPartition: 0"),
        "{under_min_isr}"
    );
    let before = read_all(leader_address, "guarded").len();
    let mut client = Client::connect(leader_address);
    let refused = client.produce("guarded", 0, batch("refused")).unwrap();
    assert_eq!(refused.error_code, 19, "NOT_ENOUGH_REPLICAS");
    brokers[(others[0] - 1) as usize].restart();
    wait(Duration::from_secs(30), "two in the ISR", || {
        state(&zk, "guarded", 0).1.len() == 2
    });
    let accepted = client.produce("guarded", 0, batch("accepted")).unwrap();
    assert_eq!(accepted.error_code, 0);
    // Two of three in the ISR: under-replicated, no longer under min ISR.
    wait(
        Duration::from_secs(10),
        "the metadata of two in sync",
        || {
            let (under_replicated, under_min_isr) = under_replicated_and_min_isr(leader_address);
            under_replicated.contains("Topic: guarded\tPartition: 0") && under_min_isr.is_empty()
        },
    );
    let read = read_all(leader_address, "guarded");
    assert_eq!(read.len(), before + 1);
    assert_eq!(read.last().unwrap().1, "accepted");
}

#[test]
fn a_returning_leader_truncates_what_the_new_leader_never_had() {
    let zk = ZooKeeper::start();
    let (mut brokers, all) = three_brokers(&zk, &[]);
    create_topic(&all[0], "diverged", 1, 1);
    wait(Duration::from_secs(20), "a full ISR", || {
        full_isr(&zk, "diverged", 1)
    });
    let acked: String = (0..100).map(|i| format!("acked-{i}\n")).collect();
    kcat(
        &["-b", &all[0], "-t", "diverged", "-P", "-X", "acks=all"],
        Some(&acked),
    );
    let (old_leader, _) = state(&zk, "diverged", 0);
    let old_epoch = state_json(&zk, "diverged", 0)["leader_epoch"]
        .as_i64()
        .unwrap() as i32;
    let followers: Vec<i32> = (1..=3).filter(|id| *id != old_leader).collect();
    // The followers are paused: what the leader takes now (acks=1) it alone has.
    for id in &followers {
        brokers[(*id - 1) as usize].pause();
    }
    // Their fetches parked on the leader are answered (empty) within
    // replica.fetch.wait.max.ms; none is parked when the leader appends.
    std::thread::sleep(Duration::from_millis(1_000));
    let lost: String = (0..50).map(|i| format!("unreplicated-{i}\n")).collect();
    kcat(
        &[
            "-b",
            &all[(old_leader - 1) as usize],
            "-t",
            "diverged",
            "-P",
            "-X",
            "acks=1",
        ],
        Some(&lost),
    );
    brokers[(old_leader - 1) as usize].kill();
    for id in &followers {
        brokers[(*id - 1) as usize].resume();
    }
    wait(Duration::from_secs(30), "a new leader", || {
        let (leader, _) = state(&zk, "diverged", 0);
        leader != old_leader && leader > 0
    });
    let (new_leader, _) = state(&zk, "diverged", 0);
    let more: String = (0..100).map(|i| format!("after-{i}\n")).collect();
    kcat(
        &[
            "-b",
            &all[(new_leader - 1) as usize],
            "-t",
            "diverged",
            "-P",
            "-X",
            "acks=all",
        ],
        Some(&more),
    );
    brokers[(old_leader - 1) as usize].restart();
    wait(
        Duration::from_secs(30),
        "the old leader back in the ISR",
        || full_isr(&zk, "diverged", 1),
    );
    replicas_agree(&brokers, "diverged", 1);
    // Where the old leader's epoch ended on the leader: after the
    // acknowledged records, at every version (v0-1 are Kafka 3.9's codecs).
    // The returned broker is the preferred replica, and the controller's
    // first rebalance check (5 s after it took office) may hand it the
    // leadership back meanwhile: ask whichever broker leads, again while the
    // answer is NOT_LEADER_OR_FOLLOWER.
    for version in 0..=4 {
        let mut answer = (0, 0);
        wait(Duration::from_secs(10), "an answer from the leader", || {
            let (leader, _) = state(&zk, "diverged", 0);
            if leader <= 0 {
                return false;
            }
            answer = offset_for_leader_epoch(
                &all[(leader - 1) as usize],
                version,
                "diverged",
                old_epoch,
            );
            answer.0 != 6
        });
        assert_eq!(answer, (0, 100), "v{version}");
    }
    let returned_log = brokers[(old_leader - 1) as usize].log();
    assert!(
        returned_log.contains("truncating to the leader's log"),
        "the returning broker truncated:\n{returned_log}"
    );
    let read: Vec<String> = read_all(&all[(new_leader - 1) as usize], "diverged")
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    let expected: Vec<String> = (0..100)
        .map(|i| format!("acked-{i}"))
        .chain((0..100).map(|i| format!("after-{i}")))
        .collect();
    assert_eq!(read, expected);
}

/// OffsetForLeaderEpoch at `version` for partition 0 of `topic`: (error
/// code, end offset of `epoch`), through Kafka 3.9's codecs.
fn offset_for_leader_epoch(address: &str, version: i16, topic: &str, epoch: i32) -> (i16, i64) {
    use bytes::{BufMut, BytesMut};
    use kafka_protocol_legacy::messages::offset_for_leader_epoch_request::{
        OffsetForLeaderPartition, OffsetForLeaderTopic,
    };
    use kafka_protocol_legacy::messages::{
        OffsetForLeaderEpochRequest, OffsetForLeaderEpochResponse, TopicName,
    };
    use kafka_protocol_legacy::protocol::{Decodable, Encodable, StrBytes};
    let request =
        OffsetForLeaderEpochRequest::default().with_topics(vec![OffsetForLeaderTopic::default()
            .with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![OffsetForLeaderPartition::default()
                .with_partition(0)
                .with_leader_epoch(epoch)])]);
    let flexible = version >= 4;
    let mut body = BytesMut::new();
    body.put_i16(23);
    body.put_i16(version);
    body.put_i32(7);
    body.put_i16(4);
    body.put_slice(b"test");
    if flexible {
        body.put_u8(0);
    }
    request.encode(&mut body, version).unwrap();
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut client = Client::connect(address);
    client.send_frame(&frame).unwrap();
    let mut response = client.read_frame().unwrap();
    assert_eq!(bytes::Buf::get_i32(&mut response), 7, "correlation id");
    if flexible {
        bytes::Buf::get_u8(&mut response);
    }
    let response = OffsetForLeaderEpochResponse::decode(&mut response, version).unwrap();
    let answer = &response.topics[0].partitions[0];
    (answer.error_code, answer.end_offset)
}

/// The raw state znode of a partition.
fn state_json(zk: &ZooKeeper, topic: &str, partition: i32) -> serde_json::Value {
    zk.json(&format!(
        "{CHROOT}/brokers/topics/{topic}/partitions/{partition}/state"
    ))
    .unwrap()
}

#[test]
fn an_offline_partition_stays_offline_until_unclean_election_is_enabled() {
    let zk = ZooKeeper::start();
    let (mut brokers, all, metrics_ports) = brokers_with_metrics(&zk, &[]);
    create_topic(&all[0], "unclean", 1, 1);
    wait(Duration::from_secs(20), "a full ISR", || {
        full_isr(&zk, "unclean", 1)
    });
    let replicated: String = (0..100).map(|i| format!("replicated-{i}\n")).collect();
    kcat(
        &["-b", &all[0], "-t", "unclean", "-P", "-X", "acks=all"],
        Some(&replicated),
    );
    replicas_agree(&brokers, "unclean", 1);
    let (leader, _) = state(&zk, "unclean", 0);
    let followers: Vec<i32> = (1..=3).filter(|id| *id != leader).collect();
    for id in &followers {
        brokers[(*id - 1) as usize].kill();
    }
    wait(
        Duration::from_secs(20),
        "the ISR down to the leader",
        || state(&zk, "unclean", 0).1 == [leader],
    );
    // Acknowledged by the ISR, which is the leader alone.
    let mut client = Client::connect(&all[(leader - 1) as usize]);
    let only_leader = client.produce("unclean", 0, batch("only-leader")).unwrap();
    assert_eq!(only_leader.error_code, 0);
    brokers[(leader - 1) as usize].kill();
    let survivor = followers[0];
    brokers[(survivor - 1) as usize].restart();
    wait(Duration::from_secs(20), "the survivor registered", || {
        zk.get(&format!("{CHROOT}/brokers/ids/{survivor}"))
            .is_some()
            && zk.get(&format!("{CHROOT}/brokers/ids/{leader}")).is_none()
    });
    // The only live replica is out of sync: the partition stays offline.
    let survivor_address = &all[(survivor - 1) as usize];
    let unavailable = |address: &str| {
        kafka_topics(
            address,
            &[
                "--describe",
                "--unavailable-partitions",
                "--topic",
                "unclean",
            ],
        )
    };
    wait(Duration::from_secs(10), "the survivor's metadata", || {
        unavailable(survivor_address).contains("Leader: none")
    });
    std::thread::sleep(Duration::from_secs(2));
    assert_eq!(state(&zk, "unclean", 0), (-1, vec![leader]));
    let mut client = Client::connect(survivor_address);
    let refused = client.produce("unclean", 0, batch("refused")).unwrap();
    assert_eq!(refused.error_code, 6, "NOT_LEADER_OR_FOLLOWER");
    // The survivor is the only broker, so the controller: it counts it.
    let survivor_metrics = metrics_ports[(survivor - 1) as usize];
    let offline = "kafka_controller_kafkacontroller_offlinepartitionscount";
    assert_eq!(metric(survivor_metrics, offline), 1.0);
    common::kafka_tool(
        "org.apache.kafka.tools.ConfigCommand",
        &[
            "--bootstrap-server",
            survivor_address,
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "unclean",
            "--add-config",
            "unclean.leader.election.enable=true",
        ],
        None,
    );
    wait(Duration::from_secs(20), "an unclean leader", || {
        state(&zk, "unclean", 0) == (survivor, vec![survivor])
    });
    assert_eq!(state_json(&zk, "unclean", 0)["leader_recovery_state"], 1);
    wait(Duration::from_secs(5), "no partition offline", || {
        metric(survivor_metrics, offline) == 0.0
    });
    wait(Duration::from_secs(10), "produce accepted", || {
        let accepted = client.produce("unclean", 0, batch("after")).unwrap();
        accepted.error_code == 0
    });
    // The old leader returns: it gives up what only it had, joins the ISR,
    // and the partition is recovered.
    brokers[(leader - 1) as usize].restart();
    wait(Duration::from_secs(30), "two in the ISR", || {
        state(&zk, "unclean", 0).1.len() == 2
    });
    assert!(state_json(&zk, "unclean", 0)
        .get("leader_recovery_state")
        .is_none());
    let read: Vec<String> = read_all(survivor_address, "unclean")
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    let expected: Vec<String> = (0..100)
        .map(|i| format!("replicated-{i}"))
        .chain(["after".to_owned()])
        .collect();
    assert_eq!(read, expected, "unclean election loses only-leader");
    brokers[(followers[1] - 1) as usize].restart();
    wait(Duration::from_secs(30), "a full ISR again", || {
        full_isr(&zk, "unclean", 1)
    });
    replicas_agree(&brokers, "unclean", 1);
}

#[test]
fn committed_offsets_survive_the_loss_of_their_coordinator() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::{Offset, TopicPartitionList};

    let zk = ZooKeeper::start();
    let extra = [
        "offsets.topic.replication.factor=3",
        "offsets.topic.num.partitions=3",
    ];
    let (mut brokers, all) = three_brokers(&zk, &extra);
    create_topic(&all[0], "orders", 1, 2);
    let input: String = (0..100).map(|i| format!("order-{i}\n")).collect();
    kcat(
        &["-b", &all[0], "-t", "orders", "-P", "-X", "acks=all"],
        Some(&input),
    );
    let mut coordinator = None;
    wait(Duration::from_secs(20), "a coordinator", || {
        coordinator = find_coordinator(&all[0], "survivors");
        coordinator.is_some()
    });
    let coordinator = coordinator.unwrap();
    // Committed through the coordinator: answered once the offsets
    // partition's ISR (all three) has it.
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", all.join(","))
        .set("group.id", "survivors")
        .set("enable.auto.commit", "false")
        .create()
        .unwrap();
    let mut offsets = TopicPartitionList::new();
    offsets
        .add_partition_offset("orders", 0, Offset::Offset(60))
        .unwrap();
    consumer.commit(&offsets, CommitMode::Sync).unwrap();
    drop(consumer);
    wait(
        Duration::from_secs(20),
        "the offsets partitions in sync",
        || full_isr(&zk, "__consumer_offsets", 3),
    );

    brokers[(coordinator - 1) as usize].kill();
    let survivor = &all[(1..=3).find(|id| *id != coordinator).unwrap() as usize - 1];
    let mut moved = None;
    wait(Duration::from_secs(20), "a new coordinator", || {
        moved = find_coordinator(survivor, "survivors").filter(|id| *id != coordinator);
        moved.is_some()
    });
    let mut client = Client::connect(&all[(moved.unwrap() - 1) as usize]);
    assert_eq!(
        committed_offsets(&mut client, "survivors"),
        [("orders".to_owned(), 0, 60)]
    );
    // A member of the group goes on from the committed offset.
    let survivors: Vec<&str> = all
        .iter()
        .enumerate()
        .filter(|(i, _)| *i as i32 + 1 != coordinator)
        .map(|(_, a)| a.as_str())
        .collect();
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", survivors.join(","))
        .set("group.id", "survivors")
        .set("enable.auto.commit", "false")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&["orders"]).unwrap();
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    let first = loop {
        assert!(std::time::Instant::now() < deadline, "no record read");
        if let Some(message) = consumer.poll(Duration::from_millis(200)) {
            break message.unwrap().offset();
        }
    };
    assert_eq!(first, 60);
}

/// A batch of `count` records, as one produce sends them.
fn batch_of(count: usize, prefix: &str) -> Vec<u8> {
    let now = shards::log::wall_clock_ms();
    let mut builder = RecordBatchBuilder::new(0, now);
    for i in 0..count {
        builder.append(now, None, Some(format!("{prefix}-{i}").as_bytes()));
    }
    builder.build()
}

#[test]
fn a_follower_behind_the_leaders_log_start_starts_again_there() {
    let zk = ZooKeeper::start();
    let (mut brokers, all) = three_brokers(&zk, &[]);
    create_topic(&all[0], "purged", 1, 1);
    wait(Duration::from_secs(20), "a full ISR", || {
        full_isr(&zk, "purged", 1)
    });
    let (leader, _) = state(&zk, "purged", 0);
    let leader_address = &all[(leader - 1) as usize];
    let mut client = Client::connect(leader_address);
    assert_eq!(
        client
            .produce("purged", 0, batch_of(100, "early"))
            .unwrap()
            .error_code,
        0
    );
    let away = (1..=3).find(|id| *id != leader).unwrap();
    brokers[(away - 1) as usize].kill();
    wait(Duration::from_secs(20), "the ISR without it", || {
        !state(&zk, "purged", 0).1.contains(&away)
    });
    // Offsets 100-199 in one batch; DeleteRecords moves the leader's log
    // start into it, past everything the stopped follower has.
    assert_eq!(
        client
            .produce("purged", 0, batch_of(100, "late"))
            .unwrap()
            .error_code,
        0
    );
    let offsets = brokers[0]
        .data_dir()
        .parent()
        .unwrap()
        .join("delete-records.json");
    std::fs::write(
        &offsets,
        r#"{"version":1,"partitions":[{"topic":"purged","partition":0,"offset":150}]}"#,
    )
    .unwrap();
    let output = common::kafka_tool(
        "org.apache.kafka.tools.DeleteRecordsCommand",
        &[
            "--bootstrap-server",
            leader_address,
            "--offset-json-file",
            offsets.to_str().unwrap(),
        ],
        None,
    );
    assert!(output.contains("low_watermark: 150"), "{output}");
    brokers[(away - 1) as usize].restart();
    wait(
        Duration::from_secs(30),
        "the follower back in the ISR",
        || full_isr(&zk, "purged", 1),
    );
    // It emptied its log and started again at the batch the leader's log
    // start is in: its only segment holds exactly that batch of the leader's.
    let log = brokers[(away - 1) as usize].log();
    assert!(log.contains("behind the leader's log start"), "{log}");
    let dir = brokers[(away - 1) as usize].data_dir().join("purged-0");
    assert!(dir.join("00000000000000000100.log").exists());
    assert!(!dir.join("00000000000000000000.log").exists());
    let followed = replica_bytes(&brokers[(away - 1) as usize], "purged", 0);
    let led = replica_bytes(&brokers[(leader - 1) as usize], "purged", 0);
    assert!(!followed.is_empty() && led.ends_with(&followed));
    let read: Vec<String> = read_all(leader_address, "purged")
        .into_iter()
        .map(|(_, value)| value)
        .collect();
    let expected: Vec<String> = (50..100).map(|i| format!("late-{i}")).collect();
    assert_eq!(read, expected);
}
