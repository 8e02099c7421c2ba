//! Cluster mode on a real ZooKeeper: brokers register under `/brokers/ids`
//! in Kafka 3.9's JSON, one of them is elected through `/controller` and
//! `/controller_epoch`, a dead controller is replaced within the session
//! timeout, and a paused one that wakes up steps down. Topics made and
//! deleted with Kafka's CLI reach every broker through LeaderAndIsr and
//! StopReplica.

mod common;

use std::time::Duration;

use common::cluster::{find_coordinator, kafka_topics, leaders, wait, ZooKeeper, SESSION_TIMEOUT};
use common::{kafka_tool, kcat};
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
    zk.controller_epoch(CHROOT)
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
#[test]
fn topics_spread_over_brokers_and_clients_follow_a_killed_leader() {
    const RECORDS: usize = 1200;
    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let controller = controller_id(&zk).unwrap();
    let index = |id: i32| (id - 1) as usize;
    let controller_address = brokers[index(controller as i32)].address();
    common::Client::connect(&controller_address).create_topic("spread", 12);
    // CreateTopics is answered once the broker asked knows every leader.
    let known = leaders(&controller_address, "spread");
    assert!(
        known.len() == 12 && known.iter().all(|leader| *leader > 0),
        "{known:?}"
    );
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
    // Every broker told, the one the reader bootstraps from included.
    for broker in &brokers {
        wait(
            Duration::from_secs(15),
            "the partitions back with their broker",
            || {
                let now = leaders(&broker.address(), "spread");
                now.len() == 12 && led.iter().all(|p| now[*p] == victim)
            },
        );
    }

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

/// Produces `count` keyed records to `topic` through `bootstrap` with kcat
/// (acks=all) and reads the topic back from the beginning: the lines read.
fn produce_and_read_back(bootstrap: &str, topic: &str, count: usize) -> Vec<String> {
    let input: String = (0..count).map(|i| format!("k{i}:v{i}\n")).collect();
    kcat(
        &["-b", bootstrap, "-t", topic, "-P", "-K:", "-X", "acks=all"],
        Some(&input),
    );
    let read = kcat(
        &[
            "-b", bootstrap, "-t", topic, "-C", "-e", "-q", "-f", "%k:%s\n",
        ],
        None,
    );
    read.lines().map(str::to_owned).collect()
}

/// The partition directories of `topic` in a broker's log dir.
fn partition_dirs(broker: &common::Broker, topic: &str) -> Vec<String> {
    let prefix = format!("{topic}-");
    let mut dirs: Vec<String> = std::fs::read_dir(broker.data_dir())
        .map(|entries| {
            entries
                .filter_map(|entry| entry.ok()?.file_name().into_string().ok())
                .filter(|name| name.starts_with(&prefix))
                .collect()
        })
        .unwrap_or_default();
    dirs.sort();
    dirs
}

#[test]
fn a_deleted_topic_leaves_every_broker_even_one_down_meanwhile() {
    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let index = |id: i32| (id - 1) as usize;
    let controller = controller_id(&zk).unwrap() as i32;
    let down = (1..=3).find(|id| *id != controller).unwrap();
    // Not the controller: the admin client sends CreateTopics there itself.
    let up = (1..=3).find(|id| *id != controller && *id != down).unwrap();
    let bootstrap = brokers[index(up)].address();
    let topics = |args: &[&str]| kafka_topics(&bootstrap, args);
    topics(&[
        "--create",
        "--topic",
        "doomed",
        "--partitions",
        "4",
        "--replication-factor",
        "3",
    ]);
    let expected: Vec<String> = (0..4).map(|p| format!("doomed-{p}")).collect();
    // LeaderAndIsr opened a replica of every partition on every broker.
    for broker in &brokers {
        wait(Duration::from_secs(10), "every replica's log", || {
            partition_dirs(broker, "doomed") == expected
        });
    }
    let described = topics(&["--describe", "--topic", "doomed"]);
    assert_eq!(
        described.matches("ReplicationFactor: 3").count(),
        1,
        "{described}"
    );
    for line in described.lines().filter(|l| l.contains("Partition: ")) {
        let field = |name: &str| {
            let value = line.split(name).nth(1).unwrap();
            value.split('\t').next().unwrap().split(',').count()
        };
        assert_eq!((field("Replicas: "), field("Isr: ")), (3, 3), "{line}");
    }

    // A broker that is down when the topic is deleted holds the deletion
    // up: the topic's znodes stay until it is back and has deleted its logs.
    brokers[index(down)].kill();
    zk.wait_for(
        SESSION_TIMEOUT + Duration::from_secs(3),
        "the killed broker's registration gone",
        |zk| !registered(zk).contains(&down.to_string()),
    );
    topics(&["--delete", "--topic", "doomed"]);
    for id in (1..=3).filter(|id| *id != down) {
        wait(Duration::from_secs(10), "the logs deleted", || {
            partition_dirs(&brokers[index(id)], "doomed").is_empty()
        });
    }
    assert!(zk.get(&path("/brokers/topics/doomed")).is_some());
    assert!(zk.get(&path("/admin/delete_topics/doomed")).is_some());
    assert_eq!(partition_dirs(&brokers[index(down)], "doomed"), expected);

    brokers[index(down)].restart();
    wait(
        Duration::from_secs(15),
        "the returning broker's logs deleted",
        || partition_dirs(&brokers[index(down)], "doomed").is_empty(),
    );
    zk.wait_for(Duration::from_secs(10), "the topic's znodes gone", |zk| {
        zk.get(&path("/brokers/topics/doomed")).is_none()
            && zk.get(&path("/admin/delete_topics/doomed")).is_none()
            && zk.get(&path("/config/topics/doomed")).is_none()
    });
    assert!(!topics(&["--list"]).lines().any(|l| l == "doomed"));
}

/// Counts a producer's deliveries and keeps its delivery errors.
#[derive(Default)]
struct Deliveries {
    delivered: std::sync::atomic::AtomicUsize,
    errors: std::sync::Mutex<Vec<String>>,
}

struct DeliveryContext(std::sync::Arc<Deliveries>);

impl rdkafka::ClientContext for DeliveryContext {}

impl rdkafka::producer::ProducerContext for DeliveryContext {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        match result {
            Ok(_) => {
                self.0
                    .delivered
                    .fetch_add(1, std::sync::atomic::Ordering::Relaxed);
            }
            Err((error, _)) => self.0.errors.lock().unwrap().push(error.to_string()),
        }
    }
}

#[test]
fn a_stopping_broker_hands_its_leaderships_over_before_it_exits() {
    use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let index = |id: i32| (id - 1) as usize;
    let controller = controller_id(&zk).unwrap() as i32;
    let stopping = (1..=3).find(|id| *id != controller).unwrap();
    let bootstrap = brokers[index(controller)].address();
    kafka_topics(
        &bootstrap,
        &[
            "--create",
            "--topic",
            "handover",
            "--partitions",
            "6",
            "--replication-factor",
            "3",
        ],
    );
    for broker in &brokers {
        wait(Duration::from_secs(10), "the topic on every broker", || {
            let leaders = leaders(&broker.address(), "handover");
            leaders.len() == 6 && (1..=3).all(|id| leaders.contains(&id))
        });
    }
    let led: Vec<usize> = leaders(&bootstrap, "handover")
        .iter()
        .enumerate()
        .filter(|(_, leader)| **leader == stopping)
        .map(|(partition, _)| partition)
        .collect();
    assert!(!led.is_empty());

    // A producer with acks=1 keeps writing to every partition meanwhile.
    let deliveries = Arc::new(Deliveries::default());
    let producing = Arc::new(AtomicBool::new(true));
    let producer_thread = std::thread::spawn({
        let (deliveries, producing) = (deliveries.clone(), producing.clone());
        let all: Vec<String> = brokers.iter().map(|b| b.address()).collect();
        move || {
            let producer: BaseProducer<DeliveryContext> = rdkafka::ClientConfig::new()
                .set("bootstrap.servers", all.join(","))
                .set("acks", "1")
                .set("linger.ms", "5")
                .create_with_context(DeliveryContext(deliveries))
                .unwrap();
            let mut sent = 0usize;
            while producing.load(Ordering::Acquire) {
                let key = sent.to_string();
                let record = BaseRecord::to("handover").key(&key).payload("value");
                if producer.send(record).is_ok() {
                    sent += 1;
                }
                producer.poll(Duration::from_millis(2));
            }
            producer.flush(Duration::from_secs(30)).unwrap();
            sent
        }
    });
    std::thread::sleep(Duration::from_secs(1));

    // SIGTERM: the controller moves the leaderships before the broker exits.
    brokers[index(stopping)].stop();
    assert!(
        brokers[index(stopping)]
            .log()
            .contains("controlled shutdown succeeded"),
        "{}",
        brokers[index(stopping)].log()
    );
    for partition in &led {
        let state = zk
            .json(&path(&format!(
                "/brokers/topics/handover/partitions/{partition}/state"
            )))
            .unwrap();
        let leader = state["leader"].as_i64().unwrap() as i32;
        let isr: Vec<i64> = state["isr"]
            .as_array()
            .unwrap()
            .iter()
            .map(|id| id.as_i64().unwrap())
            .collect();
        assert!(leader != stopping && leader != -1, "{state}");
        assert!(!isr.contains(&(stopping as i64)), "{state}");
    }
    std::thread::sleep(Duration::from_secs(1));
    producing.store(false, Ordering::Release);
    let sent = producer_thread.join().unwrap();
    let errors = deliveries.errors.lock().unwrap().clone();
    assert!(errors.is_empty(), "{errors:?}");
    assert_eq!(deliveries.delivered.load(Ordering::Relaxed), sent);
    assert!(sent > 0);
}

/// InitProducerId on `address` for an idempotent producer; None while the
/// broker answers with a retriable error.
fn init_producer_id(address: &str) -> Option<i64> {
    use kafka_protocol::messages::{ApiKey, InitProducerIdRequest, InitProducerIdResponse};
    let mut client = common::Client::connect(address);
    let request = InitProducerIdRequest::default()
        .with_transactional_id(None)
        .with_transaction_timeout_ms(60_000);
    let response: InitProducerIdResponse = client.call(ApiKey::InitProducerId, 4, &request).ok()?;
    (response.error_code == 0).then_some(response.producer_id.0)
}

#[test]
fn producer_ids_come_from_controller_blocks_and_are_never_handed_out_twice() {
    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let first_id = |broker: &common::Broker| {
        let mut id = None;
        wait(Duration::from_secs(10), "a producer id", || {
            id = init_producer_id(&broker.address());
            id.is_some()
        });
        id.unwrap()
    };
    let mut ids: Vec<i64> = brokers
        .iter()
        .flat_map(|b| [first_id(b), first_id(b)])
        .collect();
    // A broker restarted from scratch asks for a new block.
    let controller = controller_id(&zk).unwrap() as usize;
    let other = (1..=3).find(|id| *id != controller).unwrap();
    brokers[other - 1].kill();
    zk.wait_for(
        SESSION_TIMEOUT + Duration::from_secs(3),
        "the killed broker's registration gone",
        |zk| !registered(zk).contains(&other.to_string()),
    );
    brokers[other - 1].restart();
    ids.push(first_id(&brokers[other - 1]));
    let mut distinct = ids.clone();
    distinct.sort_unstable();
    distinct.dedup();
    assert_eq!(distinct.len(), ids.len(), "{ids:?}");
    let block = zk.json(&path("/latest_producer_id_block")).unwrap();
    assert_eq!(block["version"], 1);
    let end: i64 = block["block_end"].as_str().unwrap().parse().unwrap();
    let start: i64 = block["block_start"].as_str().unwrap().parse().unwrap();
    assert_eq!(end - start + 1, 1000);
    assert!(ids.iter().all(|id| *id <= end), "{ids:?} {block}");
    assert!((1..=3).contains(&block["broker"].as_i64().unwrap()));
}

/// A topic config's value as `address` describes it (DescribeConfigs).
fn described_config(address: &str, topic: &str, key: &str) -> Option<String> {
    use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
    use kafka_protocol::messages::{ApiKey, DescribeConfigsRequest, DescribeConfigsResponse};
    use kafka_protocol::protocol::StrBytes;
    let mut client = common::Client::connect(address);
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_string(topic.to_owned()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(key.to_owned())]))]);
    let response: DescribeConfigsResponse =
        client.call(ApiKey::DescribeConfigs, 4, &request).ok()?;
    let result = response.results.first()?;
    (result.error_code == 0).then_some(())?;
    Some(result.configs.first()?.value.as_ref()?.to_string())
}

#[test]
fn a_config_change_on_any_broker_reaches_every_broker() {
    let zk = ZooKeeper::start();
    let brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let controller = controller_id(&zk).unwrap() as usize;
    let other = (1..=3).find(|id| *id != controller).unwrap();
    common::Client::connect(&brokers[controller - 1].address()).create_topic("configured", 3);
    // kafka-configs against a broker that is not the controller, which
    // writes the change and its notification itself.
    kafka_tool(
        "org.apache.kafka.tools.ConfigCommand",
        &[
            "--bootstrap-server",
            &brokers[other - 1].address(),
            "--alter",
            "--entity-type",
            "topics",
            "--entity-name",
            "configured",
            "--add-config",
            "retention.ms=123456",
        ],
        None,
    );
    let stored = zk.json(&path("/config/topics/configured")).unwrap();
    assert_eq!(stored["config"]["retention.ms"], "123456");
    let notifications = zk.children(&path("/config/changes"));
    assert!(!notifications.is_empty());
    for broker in &brokers {
        wait(
            Duration::from_secs(10),
            "the new config on every broker",
            || {
                described_config(&broker.address(), "configured", "retention.ms").as_deref()
                    == Some("123456")
            },
        );
    }
}

/// A ZooKeeper that stops answering for longer than the broker's connection
/// timeout (2/5 of the session's) but not the session's (SIGSTOP): the broker drops the
/// connection with a request in flight, the session reconnects, and the
/// request is sent again (Kafka's `retryRequestsUntilConnected`), so the
/// clients' AlterConfigs and CreateTopics succeed (a create whose first
/// attempt ZooKeeper applied finds its own node) and the session, with the
/// registration it owns, is kept.
#[test]
fn a_request_in_flight_when_zookeeper_stalls_is_sent_again_once_reconnected() {
    use kafka_protocol::messages::alter_configs_request::{AlterConfigsResource, AlterableConfig};
    use kafka_protocol::messages::{AlterConfigsRequest, AlterConfigsResponse, ApiKey};
    use kafka_protocol::protocol::StrBytes;
    // The connection is dropped after 800 ms without an answer; the session
    // expires at ZooKeeper 2 s after its last ping, which can precede the
    // pause by up to 300 ms. So the stall ends as soon as the drop is seen.
    const DROP_SEEN_WITHIN: Duration = Duration::from_millis(1_500);
    let zk = ZooKeeper::start();
    let broker = zk.start_broker(CHROOT, 1, &[]);
    let mut client = common::Client::connect(&broker.address());
    client.create_topic("stalled", 1);
    let mut creator = common::Client::connect(&broker.address());
    let registration = zk.get(&path("/brokers/ids/1")).unwrap().1;
    let drops = |broker: &common::Broker| {
        broker
            .log()
            .matches("sending it again once reconnected")
            .count()
    };

    let request =
        AlterConfigsRequest::default().with_resources(vec![AlterConfigsResource::default()
            .with_resource_type(2)
            .with_resource_name(StrBytes::from_static_str("stalled"))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_static_str("retention.ms"))
                .with_value(Some(StrBytes::from_static_str("654321")))])]);
    zk.pause();
    let altering = std::thread::spawn(move || {
        let response: AlterConfigsResponse =
            client.call(ApiKey::AlterConfigs, 1, &request).unwrap();
        response.responses[0].error_code
    });
    let creating = std::thread::spawn(move || creator.create_topic("made-while-stalled", 1));
    wait(
        DROP_SEEN_WITHIN,
        "the broker to drop its connection",
        || drops(&broker) > 0,
    );
    zk.resume();
    assert_eq!(altering.join().unwrap(), 0, "{}", broker.log());
    creating.join().unwrap();

    let stored = zk.json(&path("/config/topics/stalled")).unwrap();
    assert_eq!(stored["config"]["retention.ms"], "654321");
    // A write in flight: ZooKeeper may apply the first attempt, read from the
    // dropped connection, before the retry arrives.
    let dropped_before = drops(&broker);
    let mut creator = common::Client::connect(&broker.address());
    zk.pause();
    let creating = std::thread::spawn(move || creator.create_topic("created-while-stalled", 1));
    wait(
        DROP_SEEN_WITHIN,
        "the broker to drop its connection again",
        || drops(&broker) > dropped_before,
    );
    zk.resume();
    creating.join().unwrap();

    let log = broker.log();
    assert!(!log.contains("ZooKeeper session ended"), "{log}");
    assert_eq!(zk.get(&path("/brokers/ids/1")).unwrap().1, registration);
}

/// How many brokers `address` lists in its Metadata answer.
fn brokers_seen(address: &str) -> usize {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
    let mut client = common::Client::connect(address);
    let request = MetadataRequest::default().with_topics(Some(Vec::new()));
    client
        .call::<_, MetadataResponse>(ApiKey::Metadata, 12, &request)
        .map_or(0, |response| response.brokers.len())
}

#[test]
fn brokers_other_than_the_controller_create_topics_and_serve_groups() {
    use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
    use rdkafka::Message;

    const RECORDS: usize = 600;
    let zk = ZooKeeper::start();
    let brokers: Vec<_> = (1..=3)
        .map(|id| zk.start_broker(CHROOT, id, &["num.partitions=6"]))
        .collect();
    let controller = controller_id(&zk).unwrap() as usize;
    let others: Vec<usize> = (1..=3).filter(|id| *id != controller).collect();
    let address = |id: usize| brokers[id - 1].address();

    // Each broker lists the others once the controller told it.
    for id in 1..=3 {
        wait(Duration::from_secs(10), "every broker known", || {
            brokers_seen(&address(id)) == 3
        });
    }
    // Auto-creation through a broker that is not the controller: it writes
    // the topic's znodes, the controller's watch does the rest.
    let input: String = (0..RECORDS).map(|i| format!("k{i}:v{i}\n")).collect();
    kcat(
        &[
            "-b",
            &address(others[0]),
            "-t",
            "auto",
            "-P",
            "-K:",
            "-X",
            "acks=all",
        ],
        Some(&input),
    );
    assert!(zk.get(&path("/brokers/topics/auto")).is_some());
    assert!(zk
        .get(&path("/brokers/topics/auto/partitions/0/state"))
        .is_some());

    // Every broker names the same coordinator, whichever broker created
    // __consumer_offsets (here, one that is not the controller).
    let mut coordinator = None;
    wait(Duration::from_secs(15), "a coordinator", || {
        coordinator = find_coordinator(&address(others[1]), "spread-group");
        coordinator.is_some()
    });
    for id in 1..=3 {
        wait(Duration::from_secs(10), "the same coordinator", || {
            find_coordinator(&address(id), "spread-group") == coordinator
        });
    }

    // The others answer NOT_COORDINATOR.
    {
        use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
        use kafka_protocol::messages::{ApiKey, GroupId, JoinGroupRequest, JoinGroupResponse};
        use kafka_protocol::protocol::StrBytes;
        const NOT_COORDINATOR: i16 = 16;
        let elsewhere = (1..=3).find(|id| Some(*id) != coordinator).unwrap() as usize;
        let request = JoinGroupRequest::default()
            .with_group_id(GroupId(StrBytes::from_static_str("spread-group")))
            .with_session_timeout_ms(10_000)
            .with_rebalance_timeout_ms(10_000)
            .with_protocol_type(StrBytes::from_static_str("consumer"))
            .with_protocols(vec![
                JoinGroupRequestProtocol::default().with_name(StrBytes::from_static_str("range"))
            ]);
        let mut client = common::Client::connect(&address(elsewhere));
        let joined: JoinGroupResponse = client.call(ApiKey::JoinGroup, 5, &request).unwrap();
        assert_eq!(joined.error_code, NOT_COORDINATOR);
    }

    // Two members, each bootstrapped from a different broker, share the
    // topic and commit what they read.
    let consumer = |id: usize| -> BaseConsumer {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", address(id))
            .set("group.id", "spread-group")
            .set("auto.offset.reset", "earliest")
            .set("enable.auto.commit", "false")
            .create()
            .unwrap();
        consumer.subscribe(&["auto"]).unwrap();
        consumer
    };
    let members = [consumer(others[0]), consumer(others[1])];
    let mut read = std::collections::BTreeSet::new();
    let mut read_by = [0usize; 2];
    let deadline = std::time::Instant::now() + Duration::from_secs(60);
    while read.len() < RECORDS {
        assert!(std::time::Instant::now() < deadline, "read {}", read.len());
        for (member, count) in members.iter().zip(&mut read_by) {
            let mut wait_ms = 100;
            while let Some(Ok(message)) = member.poll(Duration::from_millis(wait_ms)) {
                let key = String::from_utf8(message.key().unwrap().to_vec()).unwrap();
                read.insert(key);
                *count += 1;
                wait_ms = 0;
            }
        }
    }
    assert!(read_by.iter().all(|count| *count > 0), "{read_by:?}");
    for member in &members {
        member.commit_consumer_state(CommitMode::Sync).unwrap();
    }
    let mut client = common::Client::connect(&address(coordinator.unwrap() as usize));
    let committed: i64 = common::committed_offsets(&mut client, "spread-group")
        .iter()
        .map(|(_, _, offset)| offset)
        .sum();
    assert_eq!(committed, RECORDS as i64);
}

#[test]
fn racks_are_reported_and_replicas_spread_over_them() {
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse};
    let zk = ZooKeeper::start();
    let rack = |id: i32| format!("broker.rack=r{}", id % 2);
    let brokers: Vec<_> = (1..=3)
        .map(|id| zk.start_broker(CHROOT, id, &[&rack(id)]))
        .collect();
    let controller = controller_id(&zk).unwrap() as usize;
    let bootstrap = brokers[controller - 1].address();
    kafka_topics(
        &bootstrap,
        &[
            "--create",
            "--topic",
            "racked",
            "--partitions",
            "6",
            "--replication-factor",
            "2",
        ],
    );
    let rack_of = |id: i32| format!("r{}", id % 2);
    for broker in &brokers {
        let mut metadata: Option<MetadataResponse> = None;
        wait(Duration::from_secs(10), "the topic and racks", || {
            let mut client = common::Client::connect(&broker.address());
            let response: MetadataResponse = client
                .call(
                    ApiKey::Metadata,
                    12,
                    &MetadataRequest::default().with_topics(None),
                )
                .unwrap();
            let ready = response.brokers.len() == 3
                && response.topics.iter().any(|t| t.partitions.len() == 6);
            metadata = Some(response);
            ready
        });
        let metadata = metadata.unwrap();
        for listed in &metadata.brokers {
            assert_eq!(
                listed.rack.as_deref(),
                Some(rack_of(listed.node_id.0).as_str())
            );
        }
        let topic = metadata
            .topics
            .iter()
            .find(|t| t.partitions.len() == 6)
            .unwrap();
        for partition in &topic.partitions {
            let racks: std::collections::BTreeSet<String> = partition
                .replica_nodes
                .iter()
                .map(|id| rack_of(id.0))
                .collect();
            assert_eq!(racks.len(), 2, "{partition:?}: one replica per rack");
        }
    }
}

#[test]
fn the_java_client_and_cli_grow_a_topic_and_follow_a_killed_broker() {
    let zk = ZooKeeper::start();
    let mut brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let controller = controller_id(&zk).unwrap() as usize;
    let down = (1..=3).find(|id| *id != controller).unwrap();
    let all = brokers
        .iter()
        .map(|b| b.address())
        .collect::<Vec<_>>()
        .join(",");
    let topics = |args: &[&str]| kafka_topics(&all, args);
    topics(&[
        "--create",
        "--topic",
        "java",
        "--partitions",
        "6",
        "--replication-factor",
        "1",
    ]);
    topics(&["--alter", "--topic", "java", "--partitions", "12"]);
    // Every partition has its log on exactly one broker.
    wait(Duration::from_secs(10), "12 partition logs", || {
        brokers
            .iter()
            .map(|b| partition_dirs(b, "java").len())
            .sum::<usize>()
            == 12
    });
    let described = topics(&["--describe", "--topic", "java"]);
    assert!(described.contains("PartitionCount: 12"), "{described}");

    let produce = |bootstrap: &str, from: usize| {
        let lines: String = (from..from + 300).map(|i| format!("line-{i}\n")).collect();
        kafka_tool(
            "org.apache.kafka.tools.ConsoleProducer",
            &["--bootstrap-server", bootstrap, "--topic", "java"],
            Some(&lines),
        );
    };
    produce(&all, 0);
    // kill -9 a broker: the Java producer keeps to the partitions with a leader.
    brokers[down - 1].kill();
    let survivor = brokers[controller - 1].address();
    wait(
        SESSION_TIMEOUT + Duration::from_secs(3),
        "its partitions leaderless",
        || leaders(&survivor, "java").contains(&-1),
    );
    produce(&survivor, 300);
    brokers[down - 1].restart();
    wait(Duration::from_secs(15), "every partition led again", || {
        let now = leaders(&survivor, "java");
        now.len() == 12 && now.iter().all(|leader| *leader > 0)
    });
    let consumed = kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &all,
            "--topic",
            "java",
            "--from-beginning",
            "--max-messages",
            "600",
            "--timeout-ms",
            "30000",
        ],
        None,
    );
    let mut got: Vec<&str> = consumed.lines().collect();
    got.sort_unstable();
    let mut want: Vec<String> = (0..600).map(|i| format!("line-{i}")).collect();
    want.sort_unstable();
    assert_eq!(got, want);
}

/// A mixed cluster: Kafka 3.9.1 as the controller, a ringbroker as a broker.
/// Kafka's own LeaderAndIsr, UpdateMetadata and StopReplica reach ringbroker,
/// and ringbroker's ControlledShutdown reaches Kafka: the oracle for the
/// inter-broker bytes in both directions.
#[test]
fn a_kafka_3_9_controller_runs_a_ringbroker() {
    let zk = ZooKeeper::start();
    let kafka = zk.start_kafka_broker(CHROOT, 1);
    zk.wait_for(Duration::from_secs(60), "Kafka as controller", |zk| {
        controller_id(zk) == Some(1)
    });
    let mut ours = zk.start_broker(CHROOT, 2, &[]);
    let bootstrap = kafka.address();
    let topics = |args: &[&str]| kafka_topics(&bootstrap, args);
    wait(Duration::from_secs(30), "both brokers registered", || {
        registered(&zk) == ["1", "2"]
    });
    // Every partition on ringbroker: Kafka's controller tells it with
    // LeaderAndIsr v7 and UpdateMetadata v8.
    topics(&[
        "--create",
        "--topic",
        "mixed",
        "--replica-assignment",
        "2,2,2",
    ]);
    wait(
        Duration::from_secs(20),
        "ringbroker leading the topic",
        || {
            leaders(&ours.address(), "mixed") == [2, 2, 2]
                && partition_dirs(&ours, "mixed").len() == 3
        },
    );
    let read = produce_and_read_back(&bootstrap, "mixed", 300);
    assert_eq!(read.len(), 300, "{read:?}");

    // Kafka deletes the topic with StopReplica; it waits for ringbroker's answers.
    topics(&["--delete", "--topic", "mixed"]);
    wait(Duration::from_secs(30), "ringbroker's logs deleted", || {
        partition_dirs(&ours, "mixed").is_empty()
    });
    zk.wait_for(Duration::from_secs(30), "the topic's znodes gone", |zk| {
        zk.get(&path("/brokers/topics/mixed")).is_none()
            && zk.get(&path("/admin/delete_topics/mixed")).is_none()
    });

    // ControlledShutdown v3 to Kafka's controller, answered.
    ours.stop();
    assert!(
        ours.log().contains("controlled shutdown succeeded"),
        "{}",
        ours.log()
    );
}

/// The other way round: a ringbroker as the controller, a Kafka 3.9.1
/// broker leading the topic it creates, deleting it and stopping under it.
#[test]
fn a_ringbroker_controller_runs_a_kafka_3_9_broker() {
    let zk = ZooKeeper::start();
    let ours = zk.start_broker(CHROOT, 1, &[]);
    assert_eq!(controller_id(&zk), Some(1));
    let kafka = zk.start_kafka_broker(CHROOT, 2);
    wait(Duration::from_secs(60), "both brokers registered", || {
        registered(&zk) == ["1", "2"]
    });
    let bootstrap = ours.address();
    let topics = |args: &[&str]| kafka_topics(&bootstrap, args);
    topics(&[
        "--create",
        "--topic",
        "theirs",
        "--replica-assignment",
        "2,2,2",
    ]);
    // Kafka leads what ringbroker's LeaderAndIsr and UpdateMetadata told it.
    wait(Duration::from_secs(20), "Kafka leading the topic", || {
        leaders(&kafka.address(), "theirs") == [2, 2, 2]
    });
    let read = produce_and_read_back(&bootstrap, "theirs", 300);
    assert_eq!(read.len(), 300, "{read:?}");

    // ringbroker's StopReplica deletes Kafka's logs; the znodes go once it answered.
    topics(&["--delete", "--topic", "theirs"]);
    zk.wait_for(Duration::from_secs(30), "the topic's znodes gone", |zk| {
        zk.get(&path("/brokers/topics/theirs")).is_none()
            && zk.get(&path("/admin/delete_topics/theirs")).is_none()
    });
    assert!(!kafka.log().contains("ERROR"), "{}", kafka.log());
}
