//! The records of `__consumer_offsets`, in Kafka's key and value schemas, so
//! Kafka's own tools (`kafka-dump-log --offsets-decoder`) read what we write.
//!
//! Keys: version 0/1 `OffsetCommitKey` (group, topic, partition); version 2
//! `GroupMetadataKey` (group). Values: `OffsetCommitValue` v0-4 and
//! `GroupMetadataValue` v0-4 are read; v3 of each is written, as Kafka does
//! (v4 is the flexible encoding of the same fields).

use bytes::Bytes;

const OFFSET_COMMIT_KEY_VERSION: i16 = 1;
const GROUP_METADATA_KEY_VERSION: i16 = 2;
const WRITTEN_VALUE_VERSION: i16 = 3;
const FIRST_FLEXIBLE_VALUE_VERSION: i16 = 4;

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum RecordKey {
    Offset {
        group: String,
        topic: String,
        partition: i32,
    },
    Group {
        group: String,
    },
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct OffsetCommitValue {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    /// Only v1 records carry one (an explicit retention from OffsetCommit v2-4).
    pub expire_timestamp_ms: Option<i64>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MemberValue {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    pub subscription: Bytes,
    pub assignment: Bytes,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct GroupMetadataValue {
    pub protocol_type: String,
    pub generation: i32,
    pub protocol: Option<String>,
    pub leader: Option<String>,
    pub current_state_timestamp_ms: i64,
    pub members: Vec<MemberValue>,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RecordError(pub String);

impl std::fmt::Display for RecordError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        f.write_str(&self.0)
    }
}

// ---- writing ----

fn put_string(out: &mut Vec<u8>, value: &str) {
    assert!(
        value.len() <= i16::MAX as usize,
        "the coordinator bounds record strings"
    );
    out.extend_from_slice(&(value.len() as i16).to_be_bytes());
    out.extend_from_slice(value.as_bytes());
}

fn put_nullable_string(out: &mut Vec<u8>, value: Option<&str>) {
    match value {
        Some(value) => put_string(out, value),
        None => out.extend_from_slice(&(-1i16).to_be_bytes()),
    }
}

fn put_bytes(out: &mut Vec<u8>, value: &[u8]) {
    out.extend_from_slice(&(value.len() as i32).to_be_bytes());
    out.extend_from_slice(value);
}

impl RecordKey {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self {
            RecordKey::Offset {
                group,
                topic,
                partition,
            } => {
                out.extend_from_slice(&OFFSET_COMMIT_KEY_VERSION.to_be_bytes());
                put_string(&mut out, group);
                put_string(&mut out, topic);
                out.extend_from_slice(&partition.to_be_bytes());
            }
            RecordKey::Group { group } => {
                out.extend_from_slice(&GROUP_METADATA_KEY_VERSION.to_be_bytes());
                put_string(&mut out, group);
            }
        }
        out
    }

    /// None for key versions this coordinator does not own (KIP-848's records).
    pub fn decode(buf: &[u8]) -> Result<Option<RecordKey>, RecordError> {
        let mut reader = Reader::new(buf, false);
        let version = reader.i16()?;
        let key = match version {
            0 | 1 => RecordKey::Offset {
                group: reader.string()?,
                topic: reader.string()?,
                partition: reader.i32()?,
            },
            2 => RecordKey::Group {
                group: reader.string()?,
            },
            _ => return Ok(None),
        };
        Ok(Some(key))
    }
}

impl OffsetCommitValue {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        match self.expire_timestamp_ms {
            // v1 is the only version with an expire timestamp, and has no epoch.
            Some(expire) => {
                out.extend_from_slice(&1i16.to_be_bytes());
                out.extend_from_slice(&self.offset.to_be_bytes());
                put_string(&mut out, &self.metadata);
                out.extend_from_slice(&self.commit_timestamp_ms.to_be_bytes());
                out.extend_from_slice(&expire.to_be_bytes());
            }
            None => {
                out.extend_from_slice(&WRITTEN_VALUE_VERSION.to_be_bytes());
                out.extend_from_slice(&self.offset.to_be_bytes());
                out.extend_from_slice(&self.leader_epoch.to_be_bytes());
                put_string(&mut out, &self.metadata);
                out.extend_from_slice(&self.commit_timestamp_ms.to_be_bytes());
            }
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<Self, RecordError> {
        let version = Reader::new(buf, false).i16()?;
        if !(0..=FIRST_FLEXIBLE_VALUE_VERSION).contains(&version) {
            return Err(RecordError(format!("offset commit value v{version}")));
        }
        let mut reader = Reader::new(&buf[2..], version >= FIRST_FLEXIBLE_VALUE_VERSION);
        let offset = reader.i64()?;
        let leader_epoch = if version >= 3 { reader.i32()? } else { -1 };
        let metadata = reader.string()?;
        let commit_timestamp_ms = reader.i64()?;
        let expire_timestamp_ms = if version == 1 {
            Some(reader.i64()?)
        } else {
            None
        };
        reader.tagged_fields()?;
        Ok(Self {
            offset,
            leader_epoch,
            metadata,
            commit_timestamp_ms,
            expire_timestamp_ms,
        })
    }
}

impl GroupMetadataValue {
    pub fn encode(&self) -> Vec<u8> {
        let mut out = Vec::new();
        out.extend_from_slice(&WRITTEN_VALUE_VERSION.to_be_bytes());
        put_string(&mut out, &self.protocol_type);
        out.extend_from_slice(&self.generation.to_be_bytes());
        put_nullable_string(&mut out, self.protocol.as_deref());
        put_nullable_string(&mut out, self.leader.as_deref());
        out.extend_from_slice(&self.current_state_timestamp_ms.to_be_bytes());
        out.extend_from_slice(&(self.members.len() as i32).to_be_bytes());
        for member in &self.members {
            put_string(&mut out, &member.member_id);
            put_nullable_string(&mut out, member.group_instance_id.as_deref());
            put_string(&mut out, &member.client_id);
            put_string(&mut out, &member.client_host);
            out.extend_from_slice(&member.rebalance_timeout_ms.to_be_bytes());
            out.extend_from_slice(&member.session_timeout_ms.to_be_bytes());
            put_bytes(&mut out, &member.subscription);
            put_bytes(&mut out, &member.assignment);
        }
        out
    }

    pub fn decode(buf: &[u8]) -> Result<Self, RecordError> {
        let version = Reader::new(buf, false).i16()?;
        if !(0..=FIRST_FLEXIBLE_VALUE_VERSION).contains(&version) {
            return Err(RecordError(format!("group metadata value v{version}")));
        }
        let mut reader = Reader::new(&buf[2..], version >= FIRST_FLEXIBLE_VALUE_VERSION);
        let protocol_type = reader.string()?;
        let generation = reader.i32()?;
        let protocol = reader.nullable_string()?;
        let leader = reader.nullable_string()?;
        let current_state_timestamp_ms = if version >= 2 { reader.i64()? } else { -1 };
        let count = reader.array_length()?;
        let mut members = Vec::new();
        for _ in 0..count {
            let member_id = reader.string()?;
            let group_instance_id = if version >= 3 {
                reader.nullable_string()?
            } else {
                None
            };
            let client_id = reader.string()?;
            let client_host = reader.string()?;
            let session_timeout_ms;
            let rebalance_timeout_ms = if version >= 1 {
                let rebalance = reader.i32()?;
                session_timeout_ms = reader.i32()?;
                rebalance
            } else {
                session_timeout_ms = reader.i32()?;
                session_timeout_ms
            };
            let subscription = reader.bytes()?;
            let assignment = reader.bytes()?;
            reader.tagged_fields()?;
            members.push(MemberValue {
                member_id,
                group_instance_id,
                client_id,
                client_host,
                rebalance_timeout_ms,
                session_timeout_ms,
                subscription,
                assignment,
            });
        }
        reader.tagged_fields()?;
        Ok(Self {
            protocol_type,
            generation,
            protocol,
            leader,
            current_state_timestamp_ms,
            members,
        })
    }
}

// ---- reading ----

/// Reads Kafka's primitive types; `flexible` switches strings, bytes and
/// arrays to their compact (unsigned varint) forms and enables tagged fields.
struct Reader<'a> {
    buf: &'a [u8],
    flexible: bool,
}

impl<'a> Reader<'a> {
    fn new(buf: &'a [u8], flexible: bool) -> Self {
        Self { buf, flexible }
    }

    fn take(&mut self, n: usize) -> Result<&'a [u8], RecordError> {
        if self.buf.len() < n {
            return Err(RecordError(format!(
                "record needs {n} more bytes, has {}",
                self.buf.len()
            )));
        }
        let (head, rest) = self.buf.split_at(n);
        self.buf = rest;
        Ok(head)
    }

    fn i16(&mut self) -> Result<i16, RecordError> {
        Ok(i16::from_be_bytes(self.take(2)?.try_into().unwrap()))
    }

    fn i32(&mut self) -> Result<i32, RecordError> {
        Ok(i32::from_be_bytes(self.take(4)?.try_into().unwrap()))
    }

    fn i64(&mut self) -> Result<i64, RecordError> {
        Ok(i64::from_be_bytes(self.take(8)?.try_into().unwrap()))
    }

    fn unsigned_varint(&mut self) -> Result<u32, RecordError> {
        let mut value = 0u32;
        for shift in (0..35).step_by(7) {
            let byte = self.take(1)?[0];
            value |= ((byte & 0x7f) as u32) << shift;
            if byte & 0x80 == 0 {
                return Ok(value);
            }
        }
        Err(RecordError("varint longer than 5 bytes".into()))
    }

    /// A length, or None for null.
    fn length(&mut self, wide: bool) -> Result<Option<usize>, RecordError> {
        let length = if self.flexible {
            self.unsigned_varint()? as i64 - 1
        } else if wide {
            self.i32()? as i64
        } else {
            self.i16()? as i64
        };
        Ok((length >= 0).then_some(length as usize))
    }

    fn nullable_string(&mut self) -> Result<Option<String>, RecordError> {
        match self.length(false)? {
            None => Ok(None),
            Some(length) => String::from_utf8(self.take(length)?.to_vec())
                .map(Some)
                .map_err(|_| RecordError("string is not UTF-8".into())),
        }
    }

    fn string(&mut self) -> Result<String, RecordError> {
        self.nullable_string()?
            .ok_or_else(|| RecordError("null where a string is required".into()))
    }

    fn bytes(&mut self) -> Result<Bytes, RecordError> {
        let length = self.length(true)?.unwrap_or(0);
        Ok(Bytes::copy_from_slice(self.take(length)?))
    }

    fn array_length(&mut self) -> Result<usize, RecordError> {
        let length = self.length(true)?.unwrap_or(0);
        // Each element takes at least one byte: a bound before any allocation.
        if length > self.buf.len() {
            return Err(RecordError(format!(
                "array of {length} overruns the record"
            )));
        }
        Ok(length)
    }

    fn tagged_fields(&mut self) -> Result<(), RecordError> {
        if !self.flexible {
            return Ok(());
        }
        for _ in 0..self.unsigned_varint()? {
            self.unsigned_varint()?;
            let size = self.unsigned_varint()? as usize;
            self.take(size)?;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn keys_and_values_round_trip() {
        for key in [
            RecordKey::Offset {
                group: "g".into(),
                topic: "t".into(),
                partition: 7,
            },
            RecordKey::Group { group: "g".into() },
        ] {
            assert_eq!(RecordKey::decode(&key.encode()).unwrap(), Some(key));
        }
        for expire_timestamp_ms in [None, Some(99)] {
            let value = OffsetCommitValue {
                offset: 42,
                leader_epoch: if expire_timestamp_ms.is_some() { -1 } else { 3 },
                metadata: "m".into(),
                commit_timestamp_ms: 1000,
                expire_timestamp_ms,
            };
            assert_eq!(OffsetCommitValue::decode(&value.encode()).unwrap(), value);
        }
        let group = GroupMetadataValue {
            protocol_type: "consumer".into(),
            generation: 5,
            protocol: Some("range".into()),
            leader: Some("m1".into()),
            current_state_timestamp_ms: 77,
            members: vec![MemberValue {
                member_id: "m1".into(),
                group_instance_id: Some("i1".into()),
                client_id: "c".into(),
                client_host: "/127.0.0.1".into(),
                rebalance_timeout_ms: 300_000,
                session_timeout_ms: 45_000,
                subscription: Bytes::from_static(b"sub"),
                assignment: Bytes::from_static(b"asg"),
            }],
        };
        assert_eq!(GroupMetadataValue::decode(&group.encode()).unwrap(), group);
    }

    #[test]
    fn flexible_v4_offset_value_is_read() {
        // v4: offset, epoch, compact string "ab", timestamp, no tagged fields.
        let mut buf = vec![0, 4];
        buf.extend_from_slice(&9i64.to_be_bytes());
        buf.extend_from_slice(&2i32.to_be_bytes());
        buf.extend_from_slice(&[3, b'a', b'b']);
        buf.extend_from_slice(&5i64.to_be_bytes());
        buf.push(0);
        let value = OffsetCommitValue::decode(&buf).unwrap();
        assert_eq!((value.offset, value.leader_epoch), (9, 2));
        assert_eq!(value.metadata, "ab");
    }

    #[test]
    fn garbage_is_an_error_not_a_panic() {
        for buf in [&[][..], &[0, 2, 0x7f], &[0, 3, 0, 0, 0]] {
            let _ = RecordKey::decode(buf);
            assert!(OffsetCommitValue::decode(buf).is_err());
            assert!(GroupMetadataValue::decode(buf).is_err());
        }
        let mut huge = vec![0, 3];
        put_string(&mut huge, "consumer");
        huge.extend_from_slice(&1i32.to_be_bytes());
        huge.extend_from_slice(&[0xff, 0xff, 0xff, 0xff]);
        huge.extend_from_slice(&0i64.to_be_bytes());
        huge.extend_from_slice(&i32::MAX.to_be_bytes());
        assert!(GroupMetadataValue::decode(&huge).is_err());
    }
}
