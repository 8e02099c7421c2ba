//! kill -9 during a produce stream: after a restart every acknowledged record
//! is there, in order.

mod common;

use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use common::{Broker, Client};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::{BatchIter, RecordBatchBuilder, RecordIter, RECORD_BATCH_OVERHEAD};

const PARTITIONS: i32 = 3;

/// Acknowledged batches: partition -> [(base offset, first key index)].
type Acknowledged = BTreeMap<i32, Vec<(i64, usize)>>;
const RECORDS_PER_BATCH: usize = 10;

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str("stream"))
}

/// Every record of a partition, as (offset, key).
fn fetch_all(client: &mut Client, partition: i32) -> Vec<(i64, String)> {
    let mut records = Vec::new();
    let mut offset = 0;
    loop {
        let request = FetchRequest::default()
            .with_max_wait_ms(0)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(topic())
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(partition)
                    .with_fetch_offset(offset)
                    .with_partition_max_bytes(1 << 20)])]);
        let response: FetchResponse = client
            .call(ApiKey::Fetch, 11, &request)
            .unwrap_or_else(|e| panic!("fetch failed: {e}"));
        let data = &response.responses[0].partitions[0];
        assert_eq!(data.error_code, 0);
        let bytes = data.records.clone().unwrap_or_default();
        if bytes.is_empty() {
            assert_eq!(
                offset, data.high_watermark,
                "stopped short of the high watermark"
            );
            return records;
        }
        for batch in BatchIter::new(&bytes) {
            let (header, raw) = batch.expect("whole, valid batches");
            shards::log::record_batch::validate_batch(raw).unwrap();
            for record in RecordIter::new(&raw[RECORD_BATCH_OVERHEAD..]) {
                let record = record.unwrap();
                records.push((
                    header.base_offset + record.offset_delta as i64,
                    String::from_utf8(record.key.unwrap().to_vec()).unwrap(),
                ));
            }
            offset = header.next_offset();
        }
    }
}

#[test]
fn acknowledged_records_survive_kill_9() {
    let mut broker = Broker::start(&[]);
    let mut admin = Client::connect(&broker.address());
    admin.create_topic("stream", PARTITIONS);

    let acked: Arc<Mutex<Acknowledged>> = Arc::default();
    let stop = Arc::new(AtomicBool::new(false));
    let producer = {
        let (address, acked, stop) = (broker.address(), acked.clone(), stop.clone());
        std::thread::spawn(move || {
            let mut client = Client::connect(&address);
            for i in 0..1_000_000usize {
                if stop.load(Ordering::Relaxed) {
                    return;
                }
                let partition = (i % PARTITIONS as usize) as i32;
                let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
                for j in 0..RECORDS_PER_BATCH {
                    builder.append(
                        shards::log::wall_clock_ms(),
                        Some(format!("k{}", i * RECORDS_PER_BATCH + j).as_bytes()),
                        Some(&[7u8; 200]),
                    );
                }
                let Ok(result) = client.produce("stream", partition, builder.build()) else {
                    return; // the broker died: nothing after this was acknowledged
                };
                assert_eq!(result.error_code, 0);
                acked
                    .lock()
                    .unwrap()
                    .entry(partition)
                    .or_default()
                    .push((result.base_offset, i * RECORDS_PER_BATCH));
            }
        })
    };
    std::thread::sleep(Duration::from_millis(1_500));
    broker.kill();
    stop.store(true, Ordering::Relaxed);
    producer.join().unwrap();
    let acked = acked.lock().unwrap().clone();
    let total: usize = acked.values().map(Vec::len).sum();
    assert!(total > 50, "the stream barely ran ({total} batches)");

    broker.restart();
    let mut client = Client::connect(&broker.address());

    for (partition, batches) in acked {
        let stored = fetch_all(&mut client, partition);
        let by_offset: BTreeMap<i64, String> = stored.iter().cloned().collect();
        assert!(
            stored.windows(2).all(|w| w[0].0 < w[1].0),
            "offsets in order"
        );
        for (base_offset, first_key) in batches {
            for j in 0..RECORDS_PER_BATCH {
                let expected = format!("k{}", first_key + j);
                assert_eq!(
                    by_offset.get(&(base_offset + j as i64)),
                    Some(&expected),
                    "acknowledged record lost on partition {partition}"
                );
            }
        }
    }
}
