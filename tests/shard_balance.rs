//! The shard balancer: at low load a partition follows its requests to the
//! shard of the connection they arrive on, while an idempotent acks=all
//! producer writes on and a consumer reads; nothing acknowledged is lost or
//! written twice, neither client is answered with an error, and the
//! placement holds across a restart.

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
/// cleared, on the producer's connection's shard or the other; how many
/// records it read. Its fetches wait for a lot or for half a second: the
/// producer's requests are most of each partition's, so the partitions
/// follow the producer wherever the consumer's connection is.
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
            .set("fetch.min.bytes", "1000000")
            .set("fetch.wait.max.ms", "500")
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
fn partitions_follow_their_producer_to_its_shard_and_lose_nothing() {
    let metrics_port = free_port();
    let mut broker = Broker::start(&[
        "ringbroker.cores=0,1",
        "ringbroker.shard.balance.interval.ms=500",
        &format!("ringbroker.metrics.port={metrics_port}"),
    ]);
    let mut client = Client::connect(&broker.address());
    client.create_topic("balanced", 4);
    let placed = placement(&broker, "balanced");
    assert_eq!(
        placed.values().filter(|shard| **shard == 0).count(),
        2,
        "placed two a shard: {placed:?}"
    );

    // One producer: one connection, on one shard.
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
    // Writes go on where the partitions now live.
    std::thread::sleep(Duration::from_secs(2));
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
}
