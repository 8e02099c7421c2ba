//! Fetch's long poll (`max_wait_ms`, `min_bytes`): a fetch that finds too
//! little is parked until an append reaches one of its partitions, on
//! whichever shard owns it, and answers then rather than at the deadline.

mod common;

use std::time::{Duration, Instant};

use common::{Broker, Client};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, DeleteTopicsRequest, DeleteTopicsResponse, FetchRequest,
    FetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::RecordBatchBuilder;

const TOPIC: &str = "long-poll";
const PARTITIONS: i32 = 4;

/// Fetches every partition from offset `from` (sessionless).
fn fetch(client: &mut Client, from: &[i64], max_wait_ms: i32, min_bytes: i32) -> FetchResponse {
    client
        .call(
            ApiKey::Fetch,
            12,
            &fetch_request(from, max_wait_ms, min_bytes),
        )
        .unwrap()
}

fn fetch_request(from: &[i64], max_wait_ms: i32, min_bytes: i32) -> FetchRequest {
    let partitions = (0..PARTITIONS)
        .map(|p| {
            FetchPartition::default()
                .with_partition(p)
                .with_fetch_offset(from[p as usize])
                .with_partition_max_bytes(1 << 20)
        })
        .collect();
    FetchRequest::default()
        .with_max_wait_ms(max_wait_ms)
        .with_min_bytes(min_bytes)
        .with_max_bytes(1 << 20)
        .with_session_epoch(-1)
        .with_topics(vec![FetchTopic::default()
            .with_topic(TopicName(StrBytes::from_static_str(TOPIC)))
            .with_partitions(partitions)])
}

/// Record bytes returned per partition.
fn returned_bytes(response: &FetchResponse) -> Vec<usize> {
    let mut bytes = vec![0; PARTITIONS as usize];
    for partition in response.responses.iter().flat_map(|t| &t.partitions) {
        assert_eq!(partition.error_code, 0);
        bytes[partition.partition_index as usize] =
            partition.records.as_ref().map_or(0, |r| r.len());
    }
    bytes
}

/// Every partition's high watermark (a sessionless fetch answers them all).
fn high_watermarks(response: &FetchResponse) -> Vec<i64> {
    let mut watermarks = vec![-1; PARTITIONS as usize];
    for partition in response.responses.iter().flat_map(|t| &t.partitions) {
        watermarks[partition.partition_index as usize] = partition.high_watermark;
    }
    watermarks
}

fn batch(value_bytes: usize) -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
    builder.append(
        shards::log::wall_clock_ms(),
        None,
        Some(&vec![b'v'; value_bytes]),
    );
    builder.build()
}

/// Produces `batches` on `partition` from another connection, `delay` apart.
fn produce_later(
    address: String,
    partition: i32,
    batches: Vec<Vec<u8>>,
    delay: Duration,
) -> std::thread::JoinHandle<()> {
    std::thread::spawn(move || {
        let mut producer = Client::connect(&address);
        for batch in batches {
            std::thread::sleep(delay);
            assert_eq!(
                producer
                    .produce(TOPIC, partition, batch)
                    .unwrap()
                    .error_code,
                0
            );
        }
    })
}

#[test]
fn a_parked_fetch_answers_when_data_arrives() {
    // One shard per core: with more than one, the partitions are spread over
    // them, and a fetch arriving on one shard waits on the others' too.
    let broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    client.create_topic(TOPIC, PARTITIONS);
    let mut from = vec![0i64; PARTITIONS as usize];

    // Nothing to read: the fetch waits out its max wait and comes back empty.
    let started = Instant::now();
    let empty = fetch(&mut client, &from, 500, 1);
    assert!(
        started.elapsed() >= Duration::from_millis(450),
        "{:?}",
        started.elapsed()
    );
    assert_eq!(returned_bytes(&empty), vec![0; PARTITIONS as usize]);

    // A fetch willing to wait 30 s answers once an append lands, on each
    // partition in turn (so on both shards), with that append in it.
    for partition in 0..PARTITIONS {
        let producer = produce_later(
            broker.address(),
            partition,
            vec![batch(100)],
            Duration::from_millis(300),
        );
        let started = Instant::now();
        let response = fetch(&mut client, &from, 30_000, 1);
        let waited = started.elapsed();
        producer.join().unwrap();
        let bytes = returned_bytes(&response);
        assert!(
            bytes[partition as usize] > 0,
            "partition {partition}: {bytes:?}"
        );
        assert!(
            waited >= Duration::from_millis(250) && waited < Duration::from_secs(10),
            "partition {partition}: answered after {waited:?}"
        );
        from[partition as usize] += 1;
        // The partitions that did not move answer too, with where they stand.
        assert_eq!(high_watermarks(&response), from, "partition {partition}");
    }

    // min_bytes: one small append is not enough; the fetch stays parked until
    // a second append brings it over, and then returns both.
    let small = batch(100).len() as i32;
    let producer = produce_later(
        broker.address(),
        1,
        vec![batch(100), batch(100)],
        Duration::from_millis(700),
    );
    let started = Instant::now();
    let response = fetch(&mut client, &from, 30_000, small + 1);
    let waited = started.elapsed();
    producer.join().unwrap();
    assert!(
        waited >= Duration::from_millis(1_300) && waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
    assert_eq!(returned_bytes(&response)[1], 2 * small as usize);
}

/// An answer never waits for a request after it that waits: one pipelined
/// ahead of a parked fetch arrives while the fetch is parked (the client's
/// read gives up after 15 s, the fetch would wait 30 s).
#[test]
fn an_answer_pipelined_ahead_of_a_parked_fetch_does_not_wait_for_it() {
    let broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    client.create_topic(TOPIC, PARTITIONS);
    let mut frames = client.request_frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    let from = vec![0i64; PARTITIONS as usize];
    frames.extend(client.request_frame(ApiKey::Fetch, 12, &fetch_request(&from, 30_000, 1)));
    client.send_frame(&frames).unwrap();
    let versions = client.read_frame().expect("answered while the fetch waits");
    assert_eq!(versions[..4], 2i32.to_be_bytes(), "the ApiVersions answer");
    // The fetch, parked meanwhile, answers once an append lands.
    produce_later(broker.address(), 0, vec![batch(100)], Duration::ZERO)
        .join()
        .unwrap();
    let fetched = client.read_frame().expect("the fetch answered");
    assert_eq!(fetched[..4], 3i32.to_be_bytes(), "the Fetch answer");
}

#[test]
fn a_parked_fetch_answers_when_its_topic_is_deleted() {
    let broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    client.create_topic(TOPIC, PARTITIONS);
    let address = broker.address();
    let deleter = std::thread::spawn(move || {
        std::thread::sleep(Duration::from_millis(300));
        let request = DeleteTopicsRequest::default()
            .with_topic_names(vec![TopicName(StrBytes::from_static_str(TOPIC))])
            .with_timeout_ms(5_000);
        let deleted: DeleteTopicsResponse = Client::connect(&address)
            .call(ApiKey::DeleteTopics, 5, &request)
            .unwrap();
        assert_eq!(deleted.responses[0].error_code, 0);
    });
    let started = Instant::now();
    let response = fetch(&mut client, &[0; PARTITIONS as usize], 30_000, 1);
    let waited = started.elapsed();
    deleter.join().unwrap();
    assert!(
        waited < Duration::from_secs(10),
        "answered after {waited:?}"
    );
    let errors: Vec<i16> = response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.error_code))
        .collect();
    assert!(
        errors.iter().any(|code| *code != 0),
        "the partitions are gone: {errors:?}"
    );
}
