//! Leadership across three real brokers and a real ZooKeeper, driven by
//! Kafka's own tools: the controller moves leadership back to preferred
//! replicas by itself (auto leader rebalance), and `kafka-leader-election`
//! runs preferred and unclean elections on demand.

mod common;

use std::time::Duration;

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
    let (ok, printed) = leader_election(
        &all[2],
        &[
            "--election-type",
            "preferred",
            "--topic",
            "balanced",
            "--partition",
            "0",
        ],
    );
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Valid replica already elected for partitions balanced-0"),
        "{printed}"
    );
    let (ok, printed) = leader_election(
        &all[2],
        &[
            "--election-type",
            "preferred",
            "--topic",
            "balanced",
            "--partition",
            "99",
        ],
    );
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
    let unclean = [
        "--election-type",
        "unclean",
        "--topic",
        "dirty",
        "--partition",
        "0",
    ];
    let (ok, printed) = leader_election(&all[1], &unclean);
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
    let (ok, printed) = leader_election(&all[1], &unclean);
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Successfully completed leader election (UNCLEAN)"),
        "{printed}"
    );
    assert_eq!(zk.partition_state(CHROOT, "dirty", 0), (3, vec![3]));
    // A partition with a live leader needs no unclean election.
    let (ok, printed) = leader_election(&all[1], &unclean);
    assert!(ok, "{printed}");
    assert!(
        printed.contains("Valid replica already elected"),
        "{printed}"
    );
}
