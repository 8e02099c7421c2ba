//! Fetch responses carry stored batches byte for byte, whether a range is
//! copied into the response or sent from the page cache with sendfile: in
//! every Fetch version, past a full socket, and after the topic is deleted
//! mid-response; and a consumer that stops reading does not hold up others.

mod common;

use std::time::Duration;

use bytes::{Buf, Bytes};
use common::{Broker, Client};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DeleteTopicsRequest, DeleteTopicsResponse,
    FetchRequest, FetchResponse, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use shards::log::record_batch::RecordBatchBuilder;

const PARTITIONS: i32 = 3;

/// Creates `topic` and returns its id.
fn create_topic(client: &mut Client, topic: &str) -> uuid::Uuid {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![
            kafka_protocol::messages::create_topics_request::CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(PARTITIONS)
                .with_replication_factor(1),
        ]);
    let created: CreateTopicsResponse = client.call(ApiKey::CreateTopics, 7, &request).unwrap();
    assert_eq!(created.topics[0].error_code, 0);
    created.topics[0].topic_id
}

/// One record of `value_bytes` bytes, each byte telling partition and batch apart.
fn batch(partition: i32, index: usize, value_bytes: usize) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
    let value: Vec<u8> = (0..value_bytes)
        .map(|i| (i as u8).wrapping_add(partition as u8 * 31 + index as u8 * 7))
        .collect();
    builder.append(shards::log::wall_clock_ms(), None, Some(&value));
    builder.build()
}

/// Produces batches of these value sizes to every partition.
fn fill(client: &mut Client, topic: &str, value_sizes: &[usize]) {
    for partition in 0..PARTITIONS {
        for (index, size) in value_sizes.iter().enumerate() {
            let response = client
                .produce(topic, partition, batch(partition, index, *size))
                .unwrap();
            assert_eq!(response.error_code, 0);
        }
    }
}

/// A partition's first (and here only) segment file.
fn first_segment(broker: &Broker, topic: &str, partition: i32) -> std::path::PathBuf {
    broker
        .data_dir()
        .join(format!("{topic}-{partition}"))
        .join("00000000000000000000.log")
}

/// What each partition's segment file holds: what a fetch from 0 must return.
fn stored(broker: &Broker, topic: &str) -> Vec<Vec<u8>> {
    (0..PARTITIONS)
        .map(|p| std::fs::read(first_segment(broker, topic, p)).unwrap())
        .collect()
}

/// A sessionless fetch of every partition from offset 0, naming the topic as
/// `version` does (by id from v13).
fn fetch_request(
    version: i16,
    topic: &str,
    topic_id: uuid::Uuid,
    partition_max_bytes: i32,
) -> FetchRequest {
    let partitions = (0..PARTITIONS)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(0)
                .with_partition_max_bytes(partition_max_bytes)
        })
        .collect();
    let fetched = FetchTopic::default().with_partitions(partitions);
    let fetched = if version >= 13 {
        fetched.with_topic_id(topic_id)
    } else {
        fetched.with_topic(TopicName(StrBytes::from_string(topic.to_owned())))
    };
    FetchRequest::default()
        .with_max_wait_ms(0)
        .with_min_bytes(1)
        .with_max_bytes(i32::MAX)
        .with_topics(vec![fetched])
}

/// Each partition's records, by partition index.
fn records(response: &FetchResponse) -> Vec<Vec<u8>> {
    let mut out = vec![Vec::new(); PARTITIONS as usize];
    for partition in response.responses.iter().flat_map(|t| &t.partitions) {
        assert_eq!(partition.error_code, 0);
        out[partition.partition_index as usize] = partition
            .records
            .as_ref()
            .map_or(Vec::new(), |r| r.to_vec());
    }
    out
}

/// Decodes a Fetch response frame (without its size) of `version`.
fn decode(mut frame: Bytes, version: i16) -> FetchResponse {
    ResponseHeader::decode(&mut frame, ApiKey::Fetch.response_header_version(version)).unwrap();
    let response = FetchResponse::decode(&mut frame, version).unwrap();
    assert!(!frame.has_remaining(), "trailing bytes in the response");
    response
}

#[test]
fn every_fetch_version_returns_the_stored_batches() {
    let broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    let topic = "versions";
    let topic_id = create_topic(&mut client, topic);
    // Large ranges go out with sendfile, small ones are copied: both, in turn.
    fill(&mut client, topic, &[200_000, 3_000, 300_000, 100]);
    let expected = stored(&broker, topic);
    for version in 4..=18 {
        let response: FetchResponse = client
            .call(
                ApiKey::Fetch,
                version,
                &fetch_request(version, topic, topic_id, 4 << 20),
            )
            .unwrap();
        assert_eq!(records(&response), expected, "Fetch v{version}");
    }
    // 64 KiB per partition asked for: the first partition's first batch still
    // comes whole (KIP-74), the others wait for a fetch that allows theirs.
    let response: FetchResponse = client
        .call(
            ApiKey::Fetch,
            12,
            &fetch_request(12, topic, topic_id, 64 << 10),
        )
        .unwrap();
    let got = records(&response);
    assert!(got[0].len() > 200_000 && expected[0].starts_with(&got[0]));
    assert!(got[1..].iter().all(Vec::is_empty));
}

/// With `ringbroker.log.drop.behind.bytes`, what producers wrote leaves the
/// page cache once that far behind each log's end (the broker's setting
/// reaches every topic's segments), and a fetch from the start reads it back
/// from the disk, byte for byte.
#[test]
fn pages_dropped_behind_the_end_are_fetched_from_the_disk() {
    const MIB: u64 = 1024 * 1024;
    let broker = Broker::start(&["ringbroker.log.drop.behind.bytes=1048576"]);
    let mut client = Client::connect(&broker.address());
    let topic = "dropped";
    let topic_id = create_topic(&mut client, topic);
    // 12 MB a partition: writeback starts on a third 4 MiB chunk, and what
    // lies 1 MiB behind the second one's start goes.
    fill(&mut client, topic, &[1_000_000; 12]);
    let segments: Vec<std::fs::File> = (0..PARTITIONS)
        .map(|p| std::fs::File::open(first_segment(&broker, topic, p)).unwrap())
        .collect();
    let cached_pages = |file: &std::fs::File| {
        shards::log::page_cache_stat(file, 0, 2 * MIB).map(|stat| stat.cached_pages)
    };
    if cached_pages(&segments[0]).is_some() {
        let deadline = std::time::Instant::now() + Duration::from_secs(10);
        while segments.iter().any(|file| cached_pages(file) != Some(0)) {
            assert!(
                std::time::Instant::now() < deadline,
                "each segment's first 2 MiB still cached"
            );
            std::thread::sleep(Duration::from_millis(50));
        }
    } // else no cachestat on this kernel: nothing to observe
    let response: FetchResponse = client
        .call(
            ApiKey::Fetch,
            12,
            &fetch_request(12, topic, topic_id, 64 << 20),
        )
        .unwrap();
    assert_eq!(records(&response), stored(&broker, topic));
}

/// A response far larger than the socket buffers, to a consumer that reads
/// nothing for a while: the rest of the shard's clients are served meanwhile
/// (and a consumer hanging up mid-response costs only its connection), the
/// topic can even be deleted, and the response then arrives whole.
#[test]
fn a_response_larger_than_the_socket_arrives_whole() {
    let broker = Broker::start(&[]);
    let mut admin = Client::connect(&broker.address());
    let topic = "large";
    let topic_id = create_topic(&mut admin, topic);
    fill(&mut admin, topic, &[1_000_000; 10]);
    let expected = stored(&broker, topic);
    let total_bytes: usize = expected.iter().map(Vec::len).sum();
    assert!(total_bytes > 28_000_000);

    // Every shard gets a stalled consumer: connections land on shards as the
    // kernel spreads them, so several make it likely each shard has one. A
    // fifth hangs up without reading its response.
    let mut stalled: Vec<Client> = (0..5).map(|_| Client::connect(&broker.address())).collect();
    for consumer in &mut stalled {
        let frame = consumer.request_frame(
            ApiKey::Fetch,
            12,
            &fetch_request(12, topic, topic_id, 16 << 20),
        );
        consumer.send_frame(&frame).unwrap();
    }
    std::thread::sleep(Duration::from_millis(500));
    drop(stalled.pop());

    // Meanwhile: other requests are answered, and the topic is deleted.
    let mut other = Client::connect(&broker.address());
    for _ in 0..4 {
        let small: FetchResponse = other
            .call(
                ApiKey::Fetch,
                12,
                &fetch_request(12, topic, topic_id, 1_000),
            )
            .unwrap();
        // The first partition's first batch, whole (KIP-74), the rest later.
        let got = records(&small);
        assert!(!got[0].is_empty() && expected[0].starts_with(&got[0]));
    }
    let request = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(StrBytes::from_static_str(topic))])
        .with_timeout_ms(5_000);
    let deleted: DeleteTopicsResponse = admin.call(ApiKey::DeleteTopics, 5, &request).unwrap();
    assert_eq!(deleted.responses[0].error_code, 0);

    for consumer in &mut stalled {
        consumer
            .stream
            .set_read_timeout(Some(Duration::from_secs(30)))
            .unwrap();
        let frame = consumer.read_frame().unwrap();
        assert_eq!(records(&decode(frame, 12)), expected);
    }
}
