//! Fetch response frames, laid out here rather than by kafka-protocol so that a
//! partition's records can be a range of a segment file: the frame becomes
//! parts, bytes and file ranges, and the connection sends each range with
//! sendfile(2) (Kafka's `FileRecords.writeTo`). Stored batches then reach the
//! socket without a copy in user space; so do records already in memory, a
//! part each, which the connection gathers into one sendmsg(2) with the
//! fields around them. Every other field is laid out as
//! kafka-protocol (and Kafka) lay out FetchResponse v4-v18; a test below holds
//! the two byte for byte.

use bytes::{BufMut, Bytes, BytesMut};
use kafka_protocol::messages::fetch_response::PartitionData;
use kafka_protocol::messages::FetchResponse;
use kafka_protocol::protocol::Encodable;
use shards::log::FileRecords;

/// The first version with flexible fields (compact arrays, tagged fields).
const FIRST_FLEXIBLE_VERSION: i16 = 12;
/// The first version naming topics by id.
const FIRST_TOPIC_ID_VERSION: i16 = 13;
/// About what a partition's fields (and its topic's, amortised) take.
const FIELD_BYTES_PER_PARTITION: usize = 64;

/// One partition's fetched batches, as stored.
#[derive(Debug)]
pub enum Records {
    /// Copied into memory: small ranges, and ranges not in the page cache.
    Memory(Bytes),
    /// Sent from the page cache by the connection.
    File(FileRecords),
}

impl Records {
    pub fn size_bytes(&self) -> usize {
        match self {
            Records::Memory(bytes) => bytes.len(),
            Records::File(file) => file.size_bytes(),
        }
    }
}

/// A piece of a response frame, in the order it goes on the wire.
#[derive(Debug)]
pub enum FramePart {
    Bytes(Bytes),
    File(FileRecords),
}

impl FramePart {
    pub fn size_bytes(&self) -> usize {
        match self {
            FramePart::Bytes(bytes) => bytes.len(),
            FramePart::File(records) => records.size_bytes(),
        }
    }
}

/// The frame (size, response header, body) of `response` in version `version`,
/// each partition's records taken from `records` in order (the partitions'
/// own `records` must be unset). Records become parts of their own between
/// the bytes around them.
pub fn encode_fetch_response(
    version: i16,
    correlation_id: i32,
    response: &FetchResponse,
    records: Vec<Records>,
) -> Vec<FramePart> {
    assert!((4..=18).contains(&version), "Fetch v{version}");
    let flexible = version >= FIRST_FLEXIBLE_VERSION;
    // Fields this encoder does not lay out are never set by the broker.
    assert!(response.node_endpoints.is_empty() && response.unknown_tagged_fields.is_empty());
    // Room for the fields, so the buffer is not regrown while they go in.
    let mut frame = FrameBuilder {
        buf: BytesMut::with_capacity(FIELD_BYTES_PER_PARTITION * (records.len() + 1)),
        ..FrameBuilder::default()
    };
    frame.buf.put_i32(0); // the size, set by `finish`
    frame.buf.put_i32(correlation_id);
    if flexible {
        put_uvarint(&mut frame.buf, 0); // response header tagged fields
    }
    frame.buf.put_i32(response.throttle_time_ms);
    if version >= 7 {
        frame.buf.put_i16(response.error_code);
        frame.buf.put_i32(response.session_id);
    } else {
        assert_eq!(response.session_id, 0);
    }
    let mut records = records.into_iter();
    put_array_len(&mut frame.buf, flexible, response.responses.len());
    for topic in &response.responses {
        assert!(topic.unknown_tagged_fields.is_empty());
        if version >= FIRST_TOPIC_ID_VERSION {
            frame.buf.put_slice(topic.topic_id.as_bytes());
        } else {
            put_string(&mut frame.buf, flexible, topic.topic.0.as_str());
        }
        put_array_len(&mut frame.buf, flexible, topic.partitions.len());
        for partition in &topic.partitions {
            let partition_records = records.next().expect("records for every partition");
            put_partition(&mut frame, version, partition, partition_records);
        }
        if flexible {
            put_uvarint(&mut frame.buf, 0);
        }
    }
    assert!(
        records.next().is_none(),
        "records for partitions not answered"
    );
    if flexible {
        put_uvarint(&mut frame.buf, 0);
    }
    frame.finish()
}

fn put_partition(
    frame: &mut FrameBuilder,
    version: i16,
    partition: &PartitionData,
    records: Records,
) {
    let flexible = version >= FIRST_FLEXIBLE_VERSION;
    assert!(partition.records.is_none(), "records come separately");
    assert!(
        partition.current_leader == Default::default()
            && partition.snapshot_id == Default::default()
            && partition.unknown_tagged_fields.is_empty()
    );
    let buf = &mut frame.buf;
    buf.put_i32(partition.partition_index);
    buf.put_i16(partition.error_code);
    buf.put_i64(partition.high_watermark);
    buf.put_i64(partition.last_stable_offset);
    if version >= 5 {
        buf.put_i64(partition.log_start_offset);
    }
    match &partition.aborted_transactions {
        None if flexible => put_uvarint(buf, 0),
        None => buf.put_i32(-1),
        Some(aborted) => {
            put_array_len(buf, flexible, aborted.len());
            for transaction in aborted {
                transaction
                    .encode(buf, version)
                    .expect("an aborted transaction encodes");
            }
        }
    }
    if version >= 11 {
        buf.put_i32(partition.preferred_read_replica.0);
    } else {
        assert_eq!(partition.preferred_read_replica.0, -1);
    }
    let size_bytes = records.size_bytes();
    if flexible {
        put_uvarint(buf, size_bytes as u32 + 1);
    } else {
        buf.put_i32(size_bytes as i32);
    }
    frame.put_records(records);
    if flexible {
        // The partition's tagged fields: DivergingEpoch (tag 0) when set.
        if partition.diverging_epoch == Default::default() {
            put_uvarint(&mut frame.buf, 0);
        } else {
            let epoch = &partition.diverging_epoch;
            let size = epoch
                .compute_size(version)
                .expect("an epoch end offset has a size");
            put_uvarint(&mut frame.buf, 1);
            put_uvarint(&mut frame.buf, 0);
            put_uvarint(&mut frame.buf, size as u32);
            epoch
                .encode(&mut frame.buf, version)
                .expect("an epoch end offset encodes");
        }
    } else {
        assert!(partition.diverging_epoch == Default::default());
    }
}

fn put_array_len(buf: &mut BytesMut, flexible: bool, len: usize) {
    if flexible {
        put_uvarint(buf, len as u32 + 1);
    } else {
        buf.put_i32(len as i32);
    }
}

fn put_string(buf: &mut BytesMut, flexible: bool, value: &str) {
    if flexible {
        put_uvarint(buf, value.len() as u32 + 1);
    } else {
        buf.put_i16(value.len() as i16);
    }
    buf.put_slice(value.as_bytes());
}

fn put_uvarint(buf: &mut BytesMut, mut value: u32) {
    while value >= 0x80 {
        buf.put_u8(value as u8 | 0x80);
        value >>= 7;
    }
    buf.put_u8(value as u8);
}

/// The frame's bytes so far and the parts already cut before file ranges.
#[derive(Default)]
struct FrameBuilder {
    parts: Vec<Pending>,
    buf: BytesMut,
    size_bytes: usize,
}

enum Pending {
    Fields(BytesMut),
    Records(Records),
}

impl FrameBuilder {
    fn put_records(&mut self, records: Records) {
        if records.size_bytes() == 0 {
            return;
        }
        self.size_bytes += self.buf.len() + records.size_bytes();
        self.parts.push(Pending::Fields(self.buf.split()));
        self.parts.push(Pending::Records(records));
    }

    /// Sets the size at the front of the frame and hands the parts out.
    fn finish(mut self) -> Vec<FramePart> {
        self.size_bytes += self.buf.len();
        if !self.buf.is_empty() {
            self.parts.push(Pending::Fields(self.buf.split()));
        }
        let size = i32::try_from(self.size_bytes - 4).expect("a frame under 2 GiB");
        let Some(Pending::Fields(first)) = self.parts.first_mut() else {
            unreachable!("a frame starts with its size");
        };
        first[..4].copy_from_slice(&size.to_be_bytes());
        self.parts
            .into_iter()
            .map(|part| match part {
                Pending::Fields(bytes) => FramePart::Bytes(bytes.freeze()),
                Pending::Records(Records::Memory(bytes)) => FramePart::Bytes(bytes),
                Pending::Records(Records::File(file)) => FramePart::File(file),
            })
            .collect()
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;

    use kafka_protocol::messages::fetch_response::{AbortedTransaction, FetchableTopicResponse};
    use kafka_protocol::messages::{ApiKey, TopicName};
    use kafka_protocol::protocol::StrBytes;

    use super::*;
    use crate::protocol::encode_response;

    fn response(version: i16, records: &[Bytes]) -> FetchResponse {
        let mut partitions = records.iter().enumerate().map(|(index, bytes)| {
            let mut partition = PartitionData::default()
                .with_partition_index(index as i32)
                .with_error_code(if index == 1 { 6 } else { 0 })
                .with_high_watermark(1_000 + index as i64)
                .with_last_stable_offset(1_000 + index as i64)
                .with_records(Some(bytes.clone()));
            if version >= 5 {
                partition = partition.with_log_start_offset(7);
            }
            if index == 2 {
                partition =
                    partition.with_aborted_transactions(Some(vec![AbortedTransaction::default()
                        .with_producer_id(42.into())
                        .with_first_offset(9)]));
            } else if index == 0 {
                partition = partition.with_aborted_transactions(Some(Vec::new()));
            }
            if index == 3 && version >= FIRST_FLEXIBLE_VERSION {
                partition = partition.with_diverging_epoch(
                    kafka_protocol::messages::fetch_response::EpochEndOffset::default()
                        .with_epoch(4)
                        .with_end_offset(812),
                );
            }
            partition
        });
        let mut topics = Vec::new();
        for (name, count) in [("orders", 2), ("payments-with-a-longer-name", 2)] {
            let topic = FetchableTopicResponse::default()
                .with_partitions(partitions.by_ref().take(count).collect());
            topics.push(if version >= FIRST_TOPIC_ID_VERSION {
                topic.with_topic_id(uuid::Uuid::from_u128(count as u128 + name.len() as u128))
            } else {
                topic.with_topic(TopicName(StrBytes::from_static_str(name)))
            });
        }
        let mut response = FetchResponse::default()
            .with_throttle_time_ms(3)
            .with_responses(topics);
        if version >= 7 {
            response = response.with_error_code(0).with_session_id(77);
        }
        response
    }

    fn flatten(parts: &[FramePart]) -> Vec<u8> {
        let mut out = Vec::new();
        for part in parts {
            match part {
                FramePart::Bytes(bytes) => out.extend_from_slice(bytes),
                FramePart::File(file) => {
                    let mut buf = vec![0u8; file.size_bytes()];
                    assert_eq!(file.read_at(0, &mut buf).unwrap(), buf.len());
                    out.extend_from_slice(&buf);
                }
            }
        }
        out
    }

    /// Partitions' records taken out of `response`, each as a range of `file`
    /// when `from_file` says so.
    fn take_records(
        response: &mut FetchResponse,
        file: &shards::log::SegmentFile,
        from_file: impl Fn(usize) -> bool,
    ) -> Vec<Records> {
        let mut position = 0u64;
        let mut out = Vec::new();
        let mut contents = Vec::new();
        for partition in response
            .responses
            .iter_mut()
            .flat_map(|t| &mut t.partitions)
        {
            let bytes = partition.records.take().unwrap();
            let index = out.len();
            if from_file(index) {
                out.push(Records::File(
                    file.file_records(position, bytes.len()).unwrap(),
                ));
            } else {
                out.push(Records::Memory(bytes.clone()));
            }
            position += bytes.len() as u64;
            contents.extend_from_slice(&bytes);
        }
        file.write_all_at(&contents, 0).unwrap();
        out
    }

    /// Every version, with records in memory, in files, and both; empty records,
    /// an aborted transaction and a diverging epoch: the same bytes
    /// kafka-protocol encodes.
    #[test]
    fn frames_match_kafka_protocol() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.log");
        std::fs::File::create(&path).unwrap().flush().unwrap();
        shards::runtime::local_executor().run(async move {
            let file = shards::log::SegmentFile::open(&path).await.unwrap();
            let records: Vec<Bytes> = [300usize, 0, 129, 70_000]
                .iter()
                .enumerate()
                .map(|(i, len)| Bytes::from(vec![i as u8 + 1; *len]))
                .collect();
            for version in 4..=18 {
                let expected =
                    encode_response(ApiKey::Fetch, version, 12345, &response(version, &records))
                        .unwrap();
                let modes: [&dyn Fn(usize) -> bool; 3] =
                    [&|_| false, &|_| true, &|index| index % 2 == 1];
                for (mode, from_file) in modes.iter().enumerate() {
                    let mut response = response(version, &records);
                    let taken = take_records(&mut response, &file, from_file);
                    let parts = encode_fetch_response(version, 12345, &response, taken);
                    assert_eq!(
                        flatten(&parts),
                        expected.to_vec(),
                        "v{version}, mode {mode}"
                    );
                }
            }
        });
    }
}
