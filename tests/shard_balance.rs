//! The shard balancer: a lightly loaded broker gathers its partitions and
//! its connections on one shard, while an idempotent acks=all producer
//! writes on and a consumer reads; then no request hops between shards,
//! nothing acknowledged is lost or written twice, neither client is
//! answered with an error, and the placement holds across a restart, after
//! which a new topic is placed on the shard the broker gathered on.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::Arc;
use std::time::Duration;

use common::acked::{check_acknowledged, produce_until, read_all};
use common::cluster::wait;
use common::{free_port, http_get, Broker, Client};
use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::Message;

/// Each partition of `topic` and its shard, from the broker's placement file.
fn placement(broker: &Broker, topic: &str) -> BTreeMap<i32, usize> {
    let file = broker.data_dir().join("shard-placement-checkpoint");
    std::fs::read_to_string(file)
        .unwrap_or_default()
        .lines()
        .filter_map(
            |line| match line.split_whitespace().collect::<Vec<_>>()[..] {
                [name, partition, shard] if name == topic => {
                    Some((partition.parse().ok()?, shard.parse().ok()?))
                }
                _ => None,
            },
        )
        .collect()
}

/// Reads every partition of `topic` from the start until `consuming` is
/// cleared, on the producer's connection's shard or the other, in an
/// incremental fetch session; how many records it read.
fn consume_until(
    bootstrap: String,
    topic: &'static str,
    partitions: i32,
    consuming: Arc<AtomicBool>,
) -> std::thread::JoinHandle<usize> {
    std::thread::spawn(move || {
        let consumer: BaseConsumer = rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("group.id", "shard-balance")
            .set("enable.partition.eof", "false")
            .create()
            .unwrap();
        let mut assignment = rdkafka::TopicPartitionList::new();
        for partition in 0..partitions {
            assignment
                .add_partition_offset(topic, partition, rdkafka::Offset::Beginning)
                .unwrap();
        }
        consumer.assign(&assignment).unwrap();
        let mut read = 0;
        while consuming.load(Ordering::Acquire) {
            if let Some(message) = consumer.poll(Duration::from_millis(100)) {
                assert!(message.unwrap().offset() >= 0);
                read += 1;
            }
        }
        read
    })
}

/// The sum of a metric's series whose labels include `labels`.
fn metric(metrics_port: u16, name: &str, labels: &str) -> f64 {
    let (_, body) = http_get(metrics_port, "/metrics");
    body.lines()
        .filter(|line| line.starts_with(&format!("{name}{{")) && line.contains(labels))
        .filter_map(|line| line.rsplit(' ').next()?.parse::<f64>().ok())
        .sum()
}

/// Produce and Fetch requests so far, and their partitions' hops to
/// another shard.
fn requests_and_hops(metrics_port: u16) -> (f64, f64) {
    let count = |name, api| metric(metrics_port, name, &format!("request=\"{api}\""));
    let requests = count("kafka_network_requestmetrics_requests_total", "Produce");
    let hops = ["Produce", "Fetch"]
        .iter()
        .map(|api| count("ringbroker_requestmetrics_meshwaittimems_count", api))
        .sum();
    (requests, hops)
}

/// The error codes other than NONE in Produce and Fetch responses so far.
fn produce_and_fetch_errors(metrics_port: u16) -> Vec<String> {
    let (_, body) = http_get(metrics_port, "/metrics");
    body.lines()
        .filter(|line| line.starts_with("kafka_network_requestmetrics_errors_total"))
        .filter(|line| line.contains("request=\"Produce\"") || line.contains("request=\"Fetch\""))
        .filter(|line| !line.contains("error=\"NONE\""))
        .map(str::to_owned)
        .collect()
}

#[test]
fn a_lightly_loaded_broker_gathers_on_one_shard_and_loses_nothing() {
    let metrics_port = free_port();
    let metrics = format!("ringbroker.metrics.port={metrics_port}");
    // Placed while nothing balances: two a shard. (A broker gathered on a
    // shard would place them all there.)
    let mut broker = Broker::start(&[
        "ringbroker.cores=0,1",
        "ringbroker.shard.balance.interval.ms=0",
    ]);
    Client::connect(&broker.address()).create_topic("balanced", 4);
    let placed = placement(&broker, "balanced");
    assert_eq!(
        placed.values().filter(|shard| **shard == 0).count(),
        2,
        "placed two a shard: {placed:?}"
    );
    broker.stop();
    broker.restart_with(&[
        "ringbroker.cores=0,1",
        "ringbroker.shard.balance.interval.ms=500",
        &metrics,
    ]);

    // The producer's and the consumer's connections each on either shard.
    let producing = Arc::new(AtomicBool::new(true));
    let producer = produce_until(broker.address(), "balanced", producing.clone());
    let consuming = Arc::new(AtomicBool::new(true));
    let consumer = consume_until(broker.address(), "balanced", 4, consuming.clone());
    wait(
        Duration::from_secs(30),
        "the partitions on one shard",
        || {
            let placed = placement(&broker, "balanced");
            placed.len() == 4 && placed.values().all(|shard| Some(shard) == placed.get(&0))
        },
    );
    assert!(broker.log().contains("moved partition to another shard"));
    // The connections gather there too, each after its request in flight:
    // from then on no request's partitions are on another shard.
    std::thread::sleep(Duration::from_secs(2));
    let (requests_before, hops_before) = requests_and_hops(metrics_port);
    std::thread::sleep(Duration::from_secs(2));
    let (requests, hops) = requests_and_hops(metrics_port);
    assert!(requests > requests_before, "the producer writes on");
    assert_eq!(hops, hops_before, "no request hops between shards");
    producing.store(false, Ordering::Release);
    let (acked, errors) = producer.join().unwrap();
    assert!(errors.is_empty(), "delivery errors: {errors:?}");
    consuming.store(false, Ordering::Release);
    assert!(consumer.join().unwrap() > 0, "the consumer read along");
    assert_eq!(produce_and_fetch_errors(metrics_port), Vec::<String>::new());
    assert!(acked.len() > 500, "{} acknowledged", acked.len());
    let read = read_all(&broker.address(), "balanced");
    check_acknowledged(&acked, &read);
    assert_eq!(read.len(), acked.len(), "each record once");

    let moved = placement(&broker, "balanced");
    broker.stop();
    broker.restart();
    assert_eq!(placement(&broker, "balanced"), moved);
    check_acknowledged(&acked, &read_all(&broker.address(), "balanced"));

    // Gathered again where its partitions are, the broker places a new
    // topic's partitions on that shard.
    wait(
        Duration::from_secs(10),
        "gathering after the restart",
        || broker.log().contains("gathering on one shard"),
    );
    Client::connect(&broker.address()).create_topic("gathered", 4);
    let placed = placement(&broker, "gathered");
    let shard = moved[&0];
    assert!(
        placed.values().all(|s| *s == shard),
        "{placed:?} on {shard}"
    );
}
