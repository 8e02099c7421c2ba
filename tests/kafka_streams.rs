//! Kafka Streams unchanged against ringbroker: an at-least-once application
//! with a repartition topic (tests/support/kafka/StreamsPurge.java) counts its
//! input, and Streams' own purge (DeleteRecords after each commit) moves the
//! repartition topic's log start up to the committed offsets, so it does not
//! grow forever.

mod common;

use std::process::Command;

use common::{fetch_kafka_jars, repo_root, Broker, Client};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, ListOffsetsRequest, ListOffsetsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

fn earliest_offset(client: &mut Client, topic: &str, partition: i32) -> i64 {
    let request = ListOffsetsRequest::default()
        .with_replica_id(BrokerId(-1))
        .with_topics(vec![ListOffsetsTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_partitions(vec![ListOffsetsPartition::default()
                .with_partition_index(partition)
                .with_timestamp(-2)])]);
    let response: ListOffsetsResponse = client.call(ApiKey::ListOffsets, 7, &request).unwrap();
    response.topics[0].partitions[0].offset
}

#[test]
fn streams_purges_its_repartition_topic_below_the_committed_offsets() {
    fetch_kafka_jars("kafka");
    let broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    client.create_topic("words", 2);
    client.create_topic("counts", 2);
    let state = tempfile::tempdir().unwrap();
    let output = Command::new("timeout")
        .arg("150")
        .arg(repo_root().join("tests/support/kafka/kafka-run-class.sh"))
        .arg(repo_root().join("tests/support/kafka/StreamsPurge.java"))
        .arg(broker.address())
        .arg(state.path())
        .arg("2000")
        .output()
        .unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout);
    assert!(
        output.status.success(),
        "{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    let purged: Vec<(String, i32, i64, i64)> = stdout
        .lines()
        .filter_map(|line| line.strip_prefix("purged "))
        .map(|line| {
            let fields: Vec<&str> = line.split(' ').collect();
            (
                fields[0].to_owned(),
                fields[1].parse().unwrap(),
                fields[2].parse().unwrap(),
                fields[3].parse().unwrap(),
            )
        })
        .collect();
    assert_eq!(purged.len(), 2, "{stdout}");
    assert_eq!(purged.iter().map(|p| p.3).sum::<i64>(), 2000, "{stdout}");
    for (topic, partition, earliest, committed) in purged {
        assert!(topic.ends_with("-repartition"), "{topic}");
        assert_eq!(earliest, committed);
        assert_eq!(earliest_offset(&mut client, &topic, partition), committed);
    }
}
