//! Garbage on the wire: each bad request gets Kafka's error or a closed
//! connection, and a well-behaved client is served throughout.

mod common;

use std::io::Write;

use common::{Broker, Client};
use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, ApiVersionsResponse, MetadataRequest, MetadataResponse,
    ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, StrBytes};
use shards::log::record_batch::{RecordBatchBuilder, CRC_OFFSET};

fn still_served(client: &mut Client) {
    let versions: ApiVersionsResponse = client
        .call(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default())
        .expect("served");
    assert_eq!(versions.error_code, 0);
    let metadata: MetadataResponse = client
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .expect("served");
    assert_eq!(metadata.brokers.len(), 1);
}

/// Sends raw bytes on a fresh connection and expects the broker to hang up.
fn expect_closed(broker: &Broker, bytes: &[u8], half_close: bool) {
    let mut client = Client::connect(&broker.address());
    // The broker may hang up before all of it is sent: that is the answer too.
    if client.send_frame(bytes).is_err() {
        return;
    }
    if half_close {
        let _ = client.stream.shutdown(std::net::Shutdown::Write);
    }
    assert!(
        client.read_frame().is_err(),
        "the broker answered {bytes:02x?}"
    );
}

fn produce(client: &mut Client, topic: &str, partition: i32, records: Vec<u8>) -> i16 {
    client
        .produce(topic, partition, records)
        .unwrap()
        .error_code
}

fn batch() -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
    builder.append(shards::log::wall_clock_ms(), Some(b"k"), Some(b"v"));
    builder.build()
}

#[test]
fn bad_requests_get_kafkas_errors_or_a_closed_connection() {
    let broker = Broker::start(&["auto.create.topics.enable=false"]);
    let mut good = Client::connect(&broker.address());
    still_served(&mut good);

    // Random bytes, seeded so a failure reproduces.
    let mut seed = 0x2545_f491_4f6c_dd1du64;
    let random: Vec<u8> = (0..4096)
        .map(|_| {
            seed ^= seed << 13;
            seed ^= seed >> 7;
            seed ^= seed << 17;
            seed as u8
        })
        .collect();
    expect_closed(&broker, &random, true);
    still_served(&mut good);

    // A frame cut short, then the client hangs up its side.
    expect_closed(&broker, &[0, 0, 0, 100, 0, 3, 0, 12, 0, 0], true);
    // A frame claiming 2 GiB, and a negative length: refused before any allocation.
    expect_closed(&broker, &0x7fff_ffffi32.to_be_bytes(), false);
    expect_closed(&broker, &(-5i32).to_be_bytes(), false);
    still_served(&mut good);

    // A tiny request claiming two billion topics: refused, nothing reserved for real.
    let mut claim = Vec::new();
    claim.extend_from_slice(&3i16.to_be_bytes()); // Metadata
    claim.extend_from_slice(&0i16.to_be_bytes()); // v0
    claim.extend_from_slice(&7i32.to_be_bytes()); // correlation id
    claim.extend_from_slice(&(-1i16).to_be_bytes()); // null client id
    claim.extend_from_slice(&0x7fff_ffffi32.to_be_bytes()); // topics array length
    let mut frame = (claim.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&claim);
    expect_closed(&broker, &frame, false);
    still_served(&mut good);

    // An unknown API key, and a version we do not serve.
    let mut unknown = good.request_frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    unknown[4..6].copy_from_slice(&999i16.to_be_bytes());
    expect_closed(&broker, &unknown, false);
    let mut too_new = good.request_frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    too_new[6..8].copy_from_slice(&99i16.to_be_bytes());
    expect_closed(&broker, &too_new, false);
    // ApiVersions itself answers an unsupported version (KIP-511) in v0.
    let mut client = Client::connect(&broker.address());
    let mut frame = client.request_frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default());
    frame[6..8].copy_from_slice(&99i16.to_be_bytes());
    client.send_frame(&frame).unwrap();
    let mut response = client.read_frame().unwrap();
    let _correlation = bytes::Buf::get_i32(&mut response);
    let versions =
        <ApiVersionsResponse as kafka_protocol::protocol::Decodable>::decode(&mut response, 0)
            .unwrap();
    assert_eq!(versions.error_code, 35, "UNSUPPORTED_VERSION");
    assert!(versions
        .api_keys
        .iter()
        .any(|k| k.api_key == ApiKey::Produce as i16));
    still_served(&mut good);

    // A produce with a wrong CRC is refused with CORRUPT_MESSAGE and not written.
    good.create_topic("target", 2);
    let mut corrupt = batch();
    corrupt[CRC_OFFSET] ^= 0xff;
    assert_eq!(
        produce(&mut good, "target", 0, corrupt),
        2,
        "CORRUPT_MESSAGE"
    );
    let mut garbage = batch();
    let last = garbage.len() - 1;
    garbage[last] ^= 0x01;
    assert_eq!(
        produce(&mut good, "target", 1, garbage),
        2,
        "CORRUPT_MESSAGE"
    );
    // Unknown topic or partition.
    assert_eq!(
        produce(&mut good, "nope", 0, batch()),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    assert_eq!(
        produce(&mut good, "target", 7, batch()),
        3,
        "UNKNOWN_TOPIC_OR_PARTITION"
    );
    // And a good one still lands at offset 0: nothing of the bad ones was written.
    assert_eq!(produce(&mut good, "target", 0, batch()), 0);
    still_served(&mut good);

    // Many pipelined requests on one connection are answered in order.
    let mut frames = Vec::new();
    for _ in 0..50 {
        frames.extend(good.request_frame(ApiKey::ApiVersions, 3, &ApiVersionsRequest::default()));
    }
    good.stream.write_all(&frames).unwrap();
    let first = good.read_frame().expect("every pipelined request answered");
    let first_id = i32::from_be_bytes(first[..4].try_into().unwrap());
    for id in first_id + 1..first_id + 50 {
        let response = good.read_frame().expect("every pipelined request answered");
        assert_eq!(response[..4], id.to_be_bytes(), "answered in order");
    }
}

#[test]
fn idle_connections_are_closed_after_connections_max_idle_ms() {
    let broker = Broker::start(&["connections.max.idle.ms=300"]);
    let mut idle = Client::connect(&broker.address());
    still_served(&mut idle);
    std::thread::sleep(std::time::Duration::from_millis(1_000));
    assert!(idle.read_frame().is_err(), "an idle connection stays open");
    let mut fresh = Client::connect(&broker.address());
    still_served(&mut fresh);
}

/// The answer to a Metadata v12 request sent by hand, with its correlation id.
fn read_metadata_response(client: &mut Client, correlation_id: i32) -> MetadataResponse {
    let mut response = client.read_frame().expect("answered");
    let header =
        ResponseHeader::decode(&mut response, ApiKey::Metadata.response_header_version(12))
            .unwrap();
    assert_eq!(header.correlation_id, correlation_id);
    MetadataResponse::decode(&mut response, 12).unwrap()
}

/// A request that arrives a few bytes at a time is read whole and answered;
/// one whose sender hangs up halfway costs only its connection.
#[test]
fn requests_arriving_in_pieces_are_read_whole() {
    let broker = Broker::start(&[]);
    let mut slow = Client::connect(&broker.address());
    let mut good = Client::connect(&broker.address());
    let frame = slow.request_frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    for piece in frame.chunks(7) {
        slow.stream.write_all(piece).unwrap();
        slow.stream.flush().unwrap();
        std::thread::sleep(std::time::Duration::from_millis(20));
        still_served(&mut good);
    }
    let metadata = read_metadata_response(&mut slow, 1);
    assert_eq!(metadata.brokers.len(), 1);

    // The broker waits for the rest of a frame at once (a low-water mark on
    // the socket); the smaller request that follows is still read.
    let topics = (0..200)
        .map(|i| {
            MetadataRequestTopic::default().with_name(Some(TopicName(StrBytes::from_string(
                format!("no-such-topic-{i:04}"),
            ))))
        })
        .collect();
    let request = MetadataRequest::default()
        .with_topics(Some(topics))
        .with_allow_auto_topic_creation(false);
    let frame = slow.request_frame(ApiKey::Metadata, 12, &request);
    let (first, rest) = frame.split_at(frame.len() / 4);
    slow.stream.write_all(first).unwrap();
    slow.stream.flush().unwrap();
    std::thread::sleep(std::time::Duration::from_millis(100));
    slow.stream.write_all(rest).unwrap();
    let metadata = read_metadata_response(&mut slow, 2);
    assert_eq!(metadata.topics.len(), 200);
    still_served(&mut slow);

    let mut cut = Client::connect(&broker.address());
    let frame = cut.request_frame(ApiKey::Metadata, 12, &MetadataRequest::default());
    cut.stream.write_all(&frame[..frame.len() / 2]).unwrap();
    drop(cut);
    still_served(&mut good);
}
