//! Leadership and placement across three real brokers and a real
//! ZooKeeper, driven by Kafka's own tools: the controller moves leadership
//! back to preferred replicas by itself (auto leader rebalance),
//! `kafka-leader-election` runs preferred and unclean elections on demand,
//! replicas are spread over racks, and a consumer reads from a follower in
//! its rack (KIP-392).

mod common;

use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::acked::{produce_until, replicas_agree};
use common::cluster::{kafka_topics, wait, ZooKeeper};
use common::kafka_tool_output;

fn create_topic(bootstrap: &str, topic: &str, layout: &[&str]) {
    let mut args = vec!["--create", "--topic", topic];
    args.extend_from_slice(layout);
    kafka_topics(bootstrap, &args);
}

/// Each partition's leader, from the state znodes.
fn leaders(zk: &ZooKeeper, chroot: &str, topic: &str, partitions: i32) -> Vec<i32> {
    (0..partitions)
        .map(|p| zk.partition_state(chroot, topic, p).0)
        .collect()
}

/// Each partition's preferred replica: the first assigned.
fn preferred(zk: &ZooKeeper, chroot: &str, topic: &str) -> Vec<i32> {
    let assignment = zk.assignment(chroot, topic);
    assignment.iter().map(|replicas| replicas[0]).collect()
}

fn full_isr(zk: &ZooKeeper, chroot: &str, topic: &str, partitions: i32, size: usize) -> bool {
    (0..partitions).all(|p| zk.partition_state(chroot, topic, p).1.len() == size)
}

/// `kafka-leader-election` against `bootstrap`: whether it succeeded, and
/// what it printed.
fn leader_election(bootstrap: &str, args: &[&str]) -> (bool, String) {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    let output = kafka_tool_output("org.apache.kafka.tools.LeaderElectionCommand", &all, None);
    let printed = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    (output.status.success(), printed)
}

/// `kafka-leader-election` for one partition.
fn elect_one(bootstrap: &str, election_type: &str, topic: &str, partition: i32) -> (bool, String) {
    let partition = partition.to_string();
    let args = [
        "--election-type",
        election_type,
        "--topic",
        topic,
        "--partition",
        &partition,
    ];
    leader_election(bootstrap, &args)
}

/// An idempotent acks=all producer writes to `topic` for `duration`, with
/// every record acknowledged.
fn produce_for(bootstrap: String, topic: &'static str, duration: Duration) {
    let producing = Arc::new(AtomicBool::new(true));
    let producer = produce_until(bootstrap, topic, producing.clone());
    std::thread::sleep(duration);
    producing.store(false, Ordering::Release);
    let (acked, errors) = producer.join().unwrap();
    assert!(errors.is_empty(), "{errors:?}");
    assert!(!acked.is_empty());
}

#[test]
fn leadership_returns_to_preferred_replicas_after_a_broker_returns() {
    const CHROOT: &str = "/auto-rebalance";
    let zk = ZooKeeper::start();
    let (mut brokers, all) = zk.start_brokers(
        CHROOT,
        1..=3,
        &["leader.imbalance.check.interval.seconds=2"],
    );
    let layout = ["--partitions", "12", "--replication-factor", "3"];
    create_topic(&all[0], "balanced", &layout);
    zk.wait_for(Duration::from_secs(30), "full ISRs", |zk| {
        full_isr(zk, CHROOT, "balanced", 12, 3)
    });
    let preferred = preferred(&zk, CHROOT, "balanced");
    assert_eq!(leaders(&zk, CHROOT, "balanced", 12), preferred);
    assert!(
        preferred.contains(&2),
        "broker 2 prefers some: {preferred:?}"
    );
    produce_for(all.join(","), "balanced", Duration::from_secs(1));

    // The brokers that stand in for broker 2 lead an epoch in which nothing
    // is appended, which broker 2 never has.
    brokers[1].kill();
    zk.wait_for(
        Duration::from_secs(20),
        "broker 2's leaderships moved",
        |zk| !leaders(zk, CHROOT, "balanced", 12).contains(&2),
    );
    brokers[1].restart();
    // Broker 2 rejoins the ISRs, then a check (every 2 s) hands it back its
    // partitions.
    zk.wait_for(Duration::from_secs(30), "preferred leaders again", |zk| {
        leaders(zk, CHROOT, "balanced", 12) == preferred
    });
    assert!(full_isr(&zk, CHROOT, "balanced", 12, 3));
    let controller = zk.json(&format!("{CHROOT}/controller")).unwrap()["brokerid"].clone();
    let controller_log = brokers[controller.as_i64().unwrap() as usize - 1].log();
    assert!(
        controller_log.contains("auto leader rebalance"),
        "{controller_log}"
    );
    // Following broker 2 again, they drop that epoch and replicate what
    // comes next (they used to truncate to their own log end without end).
    produce_for(all.join(","), "balanced", Duration::from_secs(1));
    replicas_agree(&brokers, "balanced", 12);
}

#[test]
fn kafka_leader_election_runs_preferred_and_unclean_elections() {
    const CHROOT: &str = "/leader-election";
    let zk = ZooKeeper::start();
    let (mut brokers, all) =
        zk.start_brokers(CHROOT, 1..=3, &["auto.leader.rebalance.enable=false"]);
    create_topic(
        &all[0],
        "balanced",
        &["--partitions", "12", "--replication-factor", "3"],
    );
    // One partition on brokers 1 and 3 only, preferring 1.
    create_topic(&all[0], "dirty", &["--replica-assignment", "1:3"]);
    zk.wait_for(Duration::from_secs(30), "full ISRs", |zk| {
        full_isr(zk, CHROOT, "balanced", 12, 3) && full_isr(zk, CHROOT, "dirty", 1, 2)
    });
    let preferred = preferred(&zk, CHROOT, "balanced");

    // Broker 1 goes and comes back: its partitions stay with the others,
    // since the controller does not rebalance by itself here.
    brokers[0].kill();
    zk.wait_for(
        Duration::from_secs(20),
        "broker 1's leaderships moved",
        |zk| {
            !leaders(zk, CHROOT, "balanced", 12).contains(&1)
                && zk.partition_state(CHROOT, "dirty", 0).0 == 3
        },
    );
    brokers[0].restart();
    zk.wait_for(
        Duration::from_secs(30),
        "broker 1 back in every ISR",
        |zk| full_isr(zk, CHROOT, "balanced", 12, 3) && full_isr(zk, CHROOT, "dirty", 1, 2),
    );
    std::thread::sleep(Duration::from_secs(1));
    assert_ne!(leaders(&zk, CHROOT, "balanced", 12), preferred);

    let (ok, printed) = leader_election(
        &all[1],
        &["--election-type", "preferred", "--all-topic-partitions"],
    );
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Successfully completed leader election (PREFERRED)"),
        "{printed}"
    );
    // The controller answers once the states are written.
    assert_eq!(leaders(&zk, CHROOT, "balanced", 12), preferred);
    assert_eq!(zk.partition_state(CHROOT, "dirty", 0).0, 1);
    wait(Duration::from_secs(10), "every broker told", || {
        all.iter()
            .all(|address| common::cluster::leaders(address, "balanced") == preferred)
    });

    // A partition already led by its preferred replica needs no election.
    let (ok, printed) = elect_one(&all[2], "preferred", "balanced", 0);
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Valid replica already elected for partitions balanced-0"),
        "{printed}"
    );
    let (ok, printed) = elect_one(&all[2], "preferred", "balanced", 99);
    assert!(!ok, "{printed}");
    assert!(printed.contains("UnknownTopicOrPartition"), "{printed}");

    // Both of dirty's replicas die, the last member of its ISR (1) first...
    brokers[2].kill();
    zk.wait_for(Duration::from_secs(20), "dirty's ISR shrinks to 1", |zk| {
        zk.partition_state(CHROOT, "dirty", 0) == (1, vec![1])
    });
    brokers[0].kill();
    zk.wait_for(Duration::from_secs(20), "dirty offline", |zk| {
        zk.partition_state(CHROOT, "dirty", 0).0 == -1
    });
    let (ok, printed) = elect_one(&all[1], "unclean", "dirty", 0);
    assert!(!ok, "no replica is live: {printed}");
    assert!(printed.contains("EligibleLeadersNotAvailable"), "{printed}");
    // ...and the out-of-sync one (3) returns: offline still, until an
    // operator accepts the loss.
    brokers[2].restart();
    zk.wait_for(Duration::from_secs(20), "broker 3 registered", |zk| {
        zk.children(&format!("{CHROOT}/brokers/ids"))
            .contains(&"3".into())
    });
    std::thread::sleep(Duration::from_secs(1));
    assert_eq!(zk.partition_state(CHROOT, "dirty", 0), (-1, vec![1]));
    let (ok, printed) = elect_one(&all[1], "unclean", "dirty", 0);
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Successfully completed leader election (UNCLEAN)"),
        "{printed}"
    );
    assert_eq!(zk.partition_state(CHROOT, "dirty", 0), (3, vec![3]));
    // A partition with a live leader needs no unclean election.
    let (ok, printed) = elect_one(&all[1], "unclean", "dirty", 0);
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Valid replica already elected"),
        "{printed}"
    );
}

/// Every partition of `topic` has a replica on broker 3 (rack b) and one on
/// broker 1 or 2 (rack a).
fn spans_both_racks(assignment: &[Vec<i32>]) -> bool {
    assignment
        .iter()
        .all(|replicas| replicas.contains(&3) && replicas.iter().any(|id| [1, 2].contains(id)))
}

#[test]
fn replicas_span_racks_and_a_consumer_reads_from_its_own_rack() {
    use rdkafka::consumer::{BaseConsumer, Consumer};
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};

    const CHROOT: &str = "/racks";
    let zk = ZooKeeper::start();
    let selector =
        "replica.selector.class=org.apache.kafka.common.replica.RackAwareReplicaSelector";
    let metrics_port = common::free_port();
    let metrics = format!("ringbroker.metrics.port={metrics_port}");
    let brokers: Vec<common::Broker> = [("a", None), ("a", None), ("b", Some(metrics.as_str()))]
        .iter()
        .zip(1..)
        .map(|((rack, metrics), id)| {
            let rack = format!("broker.rack={rack}");
            let mut extra = vec![rack.as_str(), selector];
            extra.extend(*metrics);
            zk.start_broker(CHROOT, id, &extra)
        })
        .collect();
    let all: Vec<String> = brokers.iter().map(common::Broker::address).collect();
    wait(Duration::from_secs(20), "three brokers registered", || {
        zk.children(&format!("{CHROOT}/brokers/ids")).len() == 3
    });

    // Created, grown, and as kafka-reassign-partitions --generate proposes.
    let layout = ["--partitions", "6", "--replication-factor", "2"];
    create_topic(&all[0], "racked", &layout);
    assert!(spans_both_racks(&zk.assignment(CHROOT, "racked")));
    kafka_topics(
        &all[0],
        &["--alter", "--topic", "racked", "--partitions", "9"],
    );
    let grown = zk.assignment(CHROOT, "racked");
    assert_eq!(grown.len(), 9);
    assert!(spans_both_racks(&grown), "{grown:?}");
    let topics = tempfile::NamedTempFile::new().unwrap();
    std::fs::write(
        topics.path(),
        r#"{"version":1,"topics":[{"topic":"racked"}]}"#,
    )
    .unwrap();
    let generated = common::kafka_tool(
        "org.apache.kafka.tools.reassign.ReassignPartitionsCommand",
        &[
            "--bootstrap-server",
            &all[0],
            "--topics-to-move-json-file",
            topics.path().to_str().unwrap(),
            "--broker-list",
            "1,2,3",
            "--generate",
        ],
        None,
    );
    let proposed = generated
        .split("Proposed partition reassignment configuration")
        .nth(1)
        .unwrap_or_else(|| panic!("{generated}"));
    let proposed: serde_json::Value = serde_json::from_str(proposed.trim()).unwrap();
    let proposed: Vec<Vec<i32>> = proposed["partitions"]
        .as_array()
        .unwrap()
        .iter()
        .map(|p| {
            let replicas = p["replicas"].as_array().unwrap();
            replicas
                .iter()
                .map(|id| id.as_i64().unwrap() as i32)
                .collect()
        })
        .collect();
    assert_eq!(proposed.len(), 9);
    assert!(spans_both_racks(&proposed), "{proposed:?}");

    // Led in rack a, followed in rack b: a consumer in rack b reads from 3.
    create_topic(&all[0], "near", &["--replica-assignment", "1:3"]);
    zk.wait_for(Duration::from_secs(20), "near's full ISR", |zk| {
        zk.partition_state(CHROOT, "near", 0) == (1, vec![1, 3])
    });
    let producer: BaseProducer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &all[0])
        .set("acks", "all")
        .create()
        .unwrap();
    for index in 0..100 {
        let value = index.to_string();
        producer
            .send(BaseRecord::<(), _>::to("near").payload(&value))
            .unwrap();
    }
    producer.flush(Duration::from_secs(30)).unwrap();
    let bytes_out = || {
        let (_, body) = common::http_get(metrics_port, "/metrics");
        body.lines()
            .find_map(|line| {
                let value = line.strip_prefix(
                    "kafka_server_brokertopicmetrics_bytesout_total{topic=\"near\"} ",
                )?;
                value.parse::<u64>().ok()
            })
            .unwrap_or(0)
    };
    assert_eq!(bytes_out(), 0, "broker 3 only follows near");
    let consumer: BaseConsumer = rdkafka::ClientConfig::new()
        .set("bootstrap.servers", &all[0])
        .set("group.id", "rack-b-readers")
        .set("client.rack", "b")
        .set("auto.offset.reset", "earliest")
        .create()
        .unwrap();
    consumer.subscribe(&["near"]).unwrap();
    let mut read = 0;
    let deadline = std::time::Instant::now() + Duration::from_secs(30);
    while read < 100 && std::time::Instant::now() < deadline {
        if let Some(Ok(_)) = consumer.poll(Duration::from_millis(100)) {
            read += 1;
        }
    }
    assert_eq!(read, 100);
    assert!(bytes_out() > 0, "the rack-b follower served the consumer");
}
