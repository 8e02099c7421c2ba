//! Cluster mode on a real ZooKeeper: brokers register under `/brokers/ids`
//! in Kafka 3.9's JSON, one of them is elected through `/controller` and
//! `/controller_epoch`, a dead controller is replaced within the session
//! timeout, and a paused one that wakes up steps down.

mod common;

use std::time::Duration;

use common::cluster::{ZooKeeper, SESSION_TIMEOUT};
use common::kcat;
use serde_json::json;

const CHROOT: &str = "/ringbroker";

fn path(znode: &str) -> String {
    format!("{CHROOT}{znode}")
}

fn controller_id(zk: &ZooKeeper) -> Option<i64> {
    zk.json(&path("/controller"))
        .map(|controller| controller["brokerid"].as_i64().expect("a broker id"))
}

fn controller_epoch(zk: &ZooKeeper) -> i64 {
    let (data, _) = zk.get(&path("/controller_epoch")).expect("an epoch");
    String::from_utf8(data).unwrap().parse().unwrap()
}

fn registered(zk: &ZooKeeper) -> Vec<String> {
    zk.children(&path("/brokers/ids"))
}

#[test]
fn brokers_register_as_kafka_does_and_come_back_with_a_new_epoch() {
    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3)
        .map(|id| zk.start_broker(CHROOT, id, &["broker.rack=r1"]))
        .collect();
    assert_eq!(registered(&zk), ["1", "2", "3"]);
    let broker = &brokers[1];
    let registration = zk.json(&path("/brokers/ids/2")).unwrap();
    assert_eq!(
        registration["endpoints"],
        json!([format!("PLAINTEXT://127.0.0.1:{}", broker.port)])
    );
    assert_eq!(registration["version"], 5);
    assert_eq!(registration["host"], "127.0.0.1");
    assert_eq!(registration["port"], broker.port);
    assert_eq!(
        registration["listener_security_protocol_map"],
        json!({"PLAINTEXT": "PLAINTEXT"})
    );
    assert_eq!(registration["rack"], "r1");
    assert_eq!(registration["features"], json!({}));
    assert!(registration["timestamp"].is_string());
    // Kafka's persistent paths and cluster-wide nodes.
    for znode in [
        "/brokers/topics",
        "/admin/delete_topics",
        "/config/topics",
        "/config/changes",
        "/isr_change_notification",
        "/latest_producer_id_block",
        "/cluster/id",
    ] {
        assert!(zk.get(&path(znode)).is_some(), "{znode}");
    }
    assert_eq!(
        zk.json(&path("/feature")).unwrap(),
        json!({"features": {}, "version": 2, "status": 1})
    );
    let cluster = zk.json(&path("/cluster/id")).unwrap();
    assert_eq!(cluster["version"], "1");
    assert_eq!(cluster["id"].as_str().unwrap().len(), 22);

    // Broker epochs are the registrations' czxids; one that dies is gone
    // within the session timeout, and comes back with a larger epoch.
    let (_, first_epoch) = zk.get(&path("/brokers/ids/2")).unwrap();
    brokers[1].kill();
    zk.wait_for(
        SESSION_TIMEOUT + Duration::from_secs(2),
        "the dead broker's registration goes",
        |zk| registered(zk) == ["1", "3"],
    );
    brokers[1].restart();
    assert_eq!(registered(&zk), ["1", "2", "3"]);
    let (_, second_epoch) = zk.get(&path("/brokers/ids/2")).unwrap();
    assert!(second_epoch > first_epoch, "{second_epoch} > {first_epoch}");
}

#[test]
fn a_broker_id_registered_by_a_live_broker_is_refused() {
    let zk = ZooKeeper::start();
    let _first = zk.start_broker(CHROOT, 7, &[]);
    let dir = tempfile::tempdir().unwrap();
    let mut command = std::process::Command::new(env!("CARGO_BIN_EXE_ringbroker"));
    command.arg("start");
    for entry in zk.broker_overrides(CHROOT, 7) {
        command.arg("--override").arg(entry);
    }
    let output = command
        .arg("--override")
        .arg(format!(
            "listeners=PLAINTEXT://127.0.0.1:{}",
            common::free_port()
        ))
        .arg("--override")
        .arg(format!("log.dirs={}", dir.path().display()))
        .output()
        .unwrap();
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains("/brokers/ids/7, node already exists"),
        "{stderr}"
    );
}

#[test]
fn one_controller_replaced_when_it_dies_and_fenced_when_it_wakes_up() {
    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let first = controller_id(&zk).expect("a controller");
    assert_eq!(controller_epoch(&zk), 1);
    let index = |id: i64| (id - 1) as usize;

    // kill -9 the controller: another broker takes over within the session
    // timeout plus a second, and the epoch grows by one.
    brokers[index(first)].kill();
    zk.wait_for(
        SESSION_TIMEOUT + Duration::from_secs(1),
        "another controller",
        |zk| controller_id(zk).is_some_and(|id| id != first),
    );
    assert_eq!(controller_epoch(&zk), 2);
    brokers[index(first)].restart();

    // Pause the new controller until its session expires and another broker
    // is elected; once it resumes, it finds itself out of office and steps
    // down: still one controller, at the same epoch.
    let second = controller_id(&zk).unwrap();
    let (_, paused_epoch) = zk.get(&path(&format!("/brokers/ids/{second}"))).unwrap();
    brokers[index(second)].pause();
    zk.wait_for(
        SESSION_TIMEOUT + Duration::from_secs(2),
        "a third controller",
        |zk| controller_id(zk).is_some_and(|id| id != second),
    );
    let third = controller_id(&zk).unwrap();
    assert_eq!(controller_epoch(&zk), 3);
    brokers[index(second)].resume();
    zk.wait_for(
        Duration::from_secs(10),
        "the woken broker registered again",
        |zk| {
            zk.get(&path(&format!("/brokers/ids/{second}")))
                .is_some_and(|(_, epoch)| epoch > paused_epoch)
        },
    );
    let woken = &brokers[index(second)];
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while !woken.log().contains("resigned as controller") {
        assert!(
            std::time::Instant::now() < deadline,
            "the woken controller did not step down:\n{}",
            woken.log()
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    assert_eq!(controller_id(&zk), Some(third));
    assert_eq!(controller_epoch(&zk), 3);
    assert_eq!(registered(&zk), ["1", "2", "3"]);
}

/// Each partition's leader, as `broker` answers Metadata.
fn leaders(address: &str, topic: &str) -> Vec<i32> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut client = common::Client::connect(address);
    let request =
        MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_owned()))))]));
    let Ok(response) = client.call::<_, MetadataResponse>(ApiKey::Metadata, 12, &request) else {
        return Vec::new();
    };
    let mut partitions: Vec<(i32, i32)> = response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.leader_id.0))
        })
        .collect();
    partitions.sort();
    partitions.into_iter().map(|(_, leader)| leader).collect()
}

fn wait(within: Duration, what: &str, condition: impl Fn() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn topics_spread_over_brokers_and_clients_follow_a_killed_leader() {
    const RECORDS: usize = 1200;
    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let controller = controller_id(&zk).unwrap();
    let index = |id: i32| (id - 1) as usize;
    common::Client::connect(&brokers[index(controller as i32)].address())
        .create_topic("spread", 12);
    // Every broker learns the topic from the controller, leaders on all three.
    for broker in &brokers {
        wait(Duration::from_secs(10), "the topic on every broker", || {
            let leaders = leaders(&broker.address(), "spread");
            leaders.len() == 12 && (1..=3).all(|id| leaders.contains(&id))
        });
    }
    let input: String = (0..RECORDS)
        .map(|i| format!("key-{i}:value-{i}\n"))
        .collect();
    let bootstrap = brokers[0].address();
    kcat(
        &[
            "-b", &bootstrap, "-t", "spread", "-P", "-K:", "-X", "acks=all",
        ],
        Some(&input),
    );

    // kill -9 a broker that is not the controller: with one replica each,
    // its partitions lose their leader (-1) and come back with it.
    let victim = (1..=3).find(|id| *id as i64 != controller).unwrap();
    let led: Vec<usize> = leaders(&brokers[0].address(), "spread")
        .iter()
        .enumerate()
        .filter(|(_, leader)| **leader == victim)
        .map(|(partition, _)| partition)
        .collect();
    assert!(!led.is_empty());
    brokers[index(victim)].kill();
    let survivor = brokers[index(controller as i32)].address();
    wait(
        SESSION_TIMEOUT + Duration::from_secs(3),
        "leaderless partitions",
        || {
            let now = leaders(&survivor, "spread");
            now.len() == 12 && led.iter().all(|p| now[*p] == -1)
        },
    );
    brokers[index(victim)].restart();
    wait(
        Duration::from_secs(15),
        "the partitions back with their broker",
        || {
            let now = leaders(&survivor, "spread");
            now.len() == 12 && led.iter().all(|p| now[*p] == victim)
        },
    );

    // Nothing acknowledged is lost: every record is read back, from any broker.
    let read = kcat(
        &[
            "-b",
            &brokers[2].address(),
            "-t",
            "spread",
            "-C",
            "-e",
            "-q",
            "-f",
            "%k:%s\n",
        ],
        None,
    );
    let mut got: Vec<&str> = read.lines().collect();
    got.sort_unstable();
    let mut expected: Vec<String> = (0..RECORDS).map(|i| format!("key-{i}:value-{i}")).collect();
    expected.sort_unstable();
    assert_eq!(got, expected);
}
