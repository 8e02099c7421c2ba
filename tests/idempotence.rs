//! The idempotent producer: InitProducerId, a retried batch acknowledged with
//! its first offset and not written again, OUT_OF_ORDER_SEQUENCE_NUMBER on a
//! gap, INVALID_PRODUCER_EPOCH when fenced, producer state across a restart, and
//! a producer without state taken at any sequence.

mod common;

use common::{Broker, Client};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    ApiKey, InitProducerIdRequest, InitProducerIdResponse, MetadataRequest, MetadataResponse,
    ProducerId, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::RecordBatchBuilder;

fn produce(
    client: &mut Client,
    producer_id: i64,
    epoch: i16,
    sequence: i32,
    records: usize,
) -> PartitionProduceResponse {
    let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
    builder.producer_id = producer_id;
    builder.producer_epoch = epoch;
    builder.base_sequence = sequence;
    for i in 0..records {
        builder.append(
            shards::log::wall_clock_ms(),
            Some(format!("k{i}").as_bytes()),
            Some(b"v"),
        );
    }
    client.produce("idem", 0, builder.build()).unwrap()
}

#[test]
fn retries_are_deduplicated_and_gaps_refused_across_a_restart() {
    let mut broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    let metadata: MetadataResponse = client
        .call(
            ApiKey::Metadata,
            12,
            &MetadataRequest::default()
                .with_topics(Some(vec![
                    kafka_protocol::messages::metadata_request::MetadataRequestTopic::default()
                        .with_name(Some(TopicName(StrBytes::from_static_str("idem")))),
                ]))
                .with_allow_auto_topic_creation(true),
        )
        .unwrap();
    assert_eq!(metadata.topics[0].error_code, 0);

    let init: InitProducerIdResponse = client
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_transaction_timeout_ms(60_000)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap();
    assert_eq!(init.error_code, 0);
    let (pid, epoch) = (init.producer_id.0, init.producer_epoch);
    let other: InitProducerIdResponse = client
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(ProducerId(-1))
                .with_producer_epoch(-1),
        )
        .unwrap();
    assert_ne!(other.producer_id.0, pid, "every producer gets its own id");

    let first = produce(&mut client, pid, epoch, 0, 3);
    assert_eq!((first.error_code, first.base_offset), (0, 0));
    let second = produce(&mut client, pid, epoch, 3, 2);
    assert_eq!((second.error_code, second.base_offset), (0, 3));
    // A retry of the first batch: acknowledged at its original offset, not written.
    let retry = produce(&mut client, pid, epoch, 0, 3);
    assert_eq!((retry.error_code, retry.base_offset), (0, 0));
    // A gap in sequence numbers.
    assert_eq!(
        produce(&mut client, pid, epoch, 9, 1).error_code,
        45,
        "OUT_OF_ORDER_SEQUENCE_NUMBER"
    );

    // Producer state survives a restart.
    broker.stop();
    broker.restart();
    let mut client = Client::connect(&broker.address());
    let retry = produce(&mut client, pid, epoch, 3, 2);
    assert_eq!(
        (retry.error_code, retry.base_offset),
        (0, 3),
        "the retry after a restart is still recognised"
    );
    let next = produce(&mut client, pid, epoch, 5, 1);
    assert_eq!(
        (next.error_code, next.base_offset),
        (0, 5),
        "nothing was written twice"
    );
    // A producer this partition has no state for is taken at any sequence,
    // as by Kafka: its batches may be gone (retention, DeleteRecords) while
    // it goes on. `other` never wrote here.
    let unknown = produce(&mut client, other.producer_id.0, other.producer_epoch, 7, 1);
    assert_eq!((unknown.error_code, unknown.base_offset), (0, 6));

    // Asking again with the old id gets a fresh id (no transaction coordinator
    // here), and a producer's newer epoch fences its older one.
    let again: InitProducerIdResponse = client
        .call(
            ApiKey::InitProducerId,
            4,
            &InitProducerIdRequest::default()
                .with_transactional_id(None)
                .with_producer_id(ProducerId(pid))
                .with_producer_epoch(epoch),
        )
        .unwrap();
    assert_eq!(again.error_code, 0);
    assert_ne!(again.producer_id.0, pid);
    assert_eq!(produce(&mut client, pid, epoch + 1, 0, 1).error_code, 0);
    assert_eq!(
        produce(&mut client, pid, epoch, 6, 1).error_code,
        47,
        "INVALID_PRODUCER_EPOCH"
    );
}
