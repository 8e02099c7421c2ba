//! Incremental fetch sessions (KIP-227) as a client sees them.

mod common;

use common::{Broker, Client};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{ApiKey, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::RecordBatchBuilder;

fn topic() -> TopicName {
    TopicName(StrBytes::from_static_str("sessions"))
}

fn fetch(
    client: &mut Client,
    session_id: i32,
    epoch: i32,
    partitions: &[(i32, i64)],
) -> FetchResponse {
    let topics = if partitions.is_empty() {
        Vec::new()
    } else {
        vec![FetchTopic::default().with_topic(topic()).with_partitions(
            partitions
                .iter()
                .map(|(p, offset)| {
                    FetchPartition::default()
                        .with_partition(*p)
                        .with_fetch_offset(*offset)
                        .with_partition_max_bytes(1 << 20)
                })
                .collect(),
        )]
    };
    let request = FetchRequest::default()
        .with_max_wait_ms(0)
        .with_max_bytes(1 << 20)
        .with_session_id(session_id)
        .with_session_epoch(epoch)
        .with_topics(topics);
    client.call(ApiKey::Fetch, 12, &request).unwrap()
}

fn produce(client: &mut Client, partition: i32) {
    let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
    builder.append(shards::log::wall_clock_ms(), Some(b"k"), Some(b"v"));
    assert_eq!(
        client
            .produce("sessions", partition, builder.build())
            .unwrap()
            .error_code,
        0
    );
}

fn answered(response: &FetchResponse) -> Vec<i32> {
    response
        .responses
        .iter()
        .flat_map(|t| t.partitions.iter().map(|p| p.partition_index))
        .collect()
}

#[test]
fn sessions_send_only_what_changed() {
    let broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    client.create_topic("sessions", 3);
    produce(&mut client, 0);

    // Opening a session: a full answer and a session id.
    let opened = fetch(&mut client, 0, 0, &[(0, 0), (1, 0), (2, 0)]);
    assert_eq!(opened.error_code, 0);
    assert_ne!(opened.session_id, 0);
    assert_eq!(answered(&opened), vec![0, 1, 2]);
    let id = opened.session_id;

    // Partition 0 moved on; nothing changed since: an empty incremental answer.
    let quiet = fetch(&mut client, id, 1, &[(0, 1)]);
    assert_eq!((quiet.error_code, quiet.session_id), (0, id));
    assert!(answered(&quiet).is_empty(), "{:?}", answered(&quiet));

    // New data on partition 2 only: only partition 2 comes back, with it.
    produce(&mut client, 2);
    let changed = fetch(&mut client, id, 2, &[]);
    assert_eq!(answered(&changed), vec![2]);
    assert!(!changed.responses[0].partitions[0]
        .records
        .as_ref()
        .unwrap()
        .is_empty());

    // A stale epoch and an unknown session are refused.
    assert_eq!(
        fetch(&mut client, id, 2, &[]).error_code,
        71,
        "INVALID_FETCH_SESSION_EPOCH"
    );
    assert_eq!(
        fetch(&mut client, id + 1000, 1, &[]).error_code,
        70,
        "FETCH_SESSION_ID_NOT_FOUND"
    );

    // "Close this session, open a new one", as clients do after an error.
    let reopened = fetch(&mut client, id, 0, &[(0, 1), (1, 0), (2, 1)]);
    assert_eq!(reopened.error_code, 0);
    assert_ne!(reopened.session_id, 0);
    assert_ne!(reopened.session_id, id);
    assert_eq!(answered(&reopened), vec![0, 1, 2]);
    assert_eq!(
        fetch(&mut client, id, 3, &[]).error_code,
        70,
        "the old session is gone"
    );
    let id = reopened.session_id;

    // Closing it: a sessionless full answer, and the session is gone.
    let closed = fetch(&mut client, id, -1, &[(0, 0)]);
    assert_eq!((closed.error_code, closed.session_id), (0, 0));
    assert_eq!(answered(&closed), vec![0]);
    assert_eq!(fetch(&mut client, id, 1, &[]).error_code, 70);
}
