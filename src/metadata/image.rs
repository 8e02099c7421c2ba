//! The metadata image: an immutable, versioned view of the cluster that the
//! control thread publishes to every shard. Shards read it, never the store.

use crate::config::dynamic::DynamicBrokerConfigs;
use std::collections::{BTreeMap, HashMap};
use std::sync::Arc;

use shards::log::{LogConfig, TopicPartition};
use uuid::Uuid;

use crate::replication::hosted_partitions::ReplicaState;

/// One advertised listener of a broker (Kafka's `EndPoint`).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct EndPoint {
    pub listener_name: String,
    pub security_protocol: String,
    pub host: String,
    pub port: u16,
}

impl EndPoint {
    /// `NAME://host:port`, as `/brokers/ids/<id>` lists it (IPv6 in brackets).
    pub fn connection_string(&self) -> String {
        if self.host.contains(':') {
            format!("{}://[{}]:{}", self.listener_name, self.host, self.port)
        } else {
            format!("{}://{}:{}", self.listener_name, self.host, self.port)
        }
    }
}

/// A registered broker (Kafka's `Broker`): its id, advertised listeners and
/// `broker.rack`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct Broker {
    pub id: i32,
    pub endpoints: Vec<EndPoint>,
    pub rack: Option<String>,
}

impl Broker {
    /// The endpoint clients of `listener_name` connect to.
    pub fn endpoint(&self, listener_name: &str) -> Option<&EndPoint> {
        self.endpoints
            .iter()
            .find(|endpoint| endpoint.listener_name == listener_name)
    }
}

#[derive(Debug, Clone, PartialEq)]
pub struct PartitionImage {
    pub leader: i32,
    pub leader_epoch: i32,
    pub replicas: Vec<i32>,
    pub isr: Vec<i32>,
}

/// A replica this broker holds: the shard owning it, its state as the
/// controller last gave it (LeaderAndIsr in ZooKeeper mode) and its topic's
/// config.
#[derive(Debug, Clone, PartialEq)]
pub struct LocalReplica {
    pub shard: usize,
    pub state: ReplicaState,
    pub log_config: Arc<LogConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct TopicImage {
    pub name: String,
    pub id: Uuid,
    pub partitions: Vec<PartitionImage>,
    /// Only the topic's overrides, as stored in `/config/topics/<t>`.
    pub config_overrides: BTreeMap<String, String>,
    /// Broker defaults with the overrides applied.
    pub log_config: Arc<LogConfig>,
}

#[derive(Debug, Clone, PartialEq)]
pub struct MetadataImage {
    pub version: u64,
    pub cluster_id: String,
    pub controller_id: i32,
    /// This broker's registration's czxid, for its requests to the controller.
    pub broker_epoch: i64,
    /// This broker's dynamic configs (the replication throttles).
    pub dynamic_broker_configs: Arc<DynamicBrokerConfigs>,
    pub brokers: BTreeMap<i32, Broker>,
    pub topics: BTreeMap<String, Arc<TopicImage>>,
    pub topic_ids: HashMap<Uuid, String>,
    /// The replicas this broker holds, by topic and partition (looked up by
    /// `&str` on the produce and fetch path); a shard serves the ones placed
    /// on it.
    local_replicas: BTreeMap<String, BTreeMap<i32, LocalReplica>>,
    /// Logs StopReplica deleted since the previous image, opened or only on
    /// disk, each with the shard that deletes it.
    pub deleted_replicas: Vec<(TopicPartition, usize)>,
    /// Every topic of the cluster is here (the controller's own view), so a
    /// local log of a topic it lacks is a deleted topic's. False before the
    /// controller has told this broker anything, and in ZooKeeper mode
    /// (StopReplica deletes logs there): logs are kept.
    pub complete: bool,
}

impl MetadataImage {
    pub fn empty() -> Self {
        Self {
            version: 0,
            cluster_id: String::new(),
            controller_id: -1,
            broker_epoch: -1,
            dynamic_broker_configs: Arc::default(),
            brokers: BTreeMap::new(),
            topics: BTreeMap::new(),
            topic_ids: HashMap::new(),
            local_replicas: BTreeMap::new(),
            deleted_replicas: Vec::new(),
            complete: false,
        }
    }

    /// Every broker's endpoint for `listener_name`; a broker without one is
    /// left out, as Kafka leaves it out of the answers on that listener.
    pub fn broker_endpoints<'a>(
        &'a self,
        listener_name: &'a str,
    ) -> impl Iterator<Item = (&'a Broker, &'a EndPoint)> + 'a {
        self.brokers
            .values()
            .filter_map(move |broker| Some((broker, broker.endpoint(listener_name)?)))
    }

    /// Adds a topic, findable by name and by id.
    pub fn insert_topic(&mut self, topic: TopicImage) {
        self.topic_ids.insert(topic.id, topic.name.clone());
        self.topics.insert(topic.name.clone(), Arc::new(topic));
    }

    pub fn topic(&self, name: &str) -> Option<&Arc<TopicImage>> {
        self.topics.get(name)
    }

    pub fn topic_by_id(&self, id: &Uuid) -> Option<&Arc<TopicImage>> {
        self.topic_ids
            .get(id)
            .and_then(|name| self.topics.get(name))
    }

    pub fn local_replica(&self, topic: &str, partition: i32) -> Option<&LocalReplica> {
        self.local_replicas.get(topic)?.get(&partition)
    }

    pub fn insert_local_replica(&mut self, tp: TopicPartition, replica: LocalReplica) {
        let partitions = self.local_replicas.entry(tp.topic).or_default();
        partitions.insert(tp.partition, replica);
    }

    /// Every replica this broker holds: topic, partition, replica.
    pub fn local_replicas(&self) -> impl Iterator<Item = (&str, i32, &LocalReplica)> {
        self.local_replicas.iter().flat_map(|(topic, partitions)| {
            partitions
                .iter()
                .map(move |(partition, replica)| (topic.as_str(), *partition, replica))
        })
    }

    pub fn partition(&self, topic: &str, partition: i32) -> Option<&PartitionImage> {
        let index = usize::try_from(partition).ok()?;
        self.topic(topic)?.partitions.get(index)
    }
}

/// Kafka prints topic and cluster ids as URL-safe base64 of the 16 bytes,
/// without padding.
pub fn kafka_uuid_string(id: &Uuid) -> String {
    const ALPHABET: &[u8; 64] = b"ABCDEFGHIJKLMNOPQRSTUVWXYZabcdefghijklmnopqrstuvwxyz0123456789-_";
    let bytes = id.as_bytes();
    let mut out = String::with_capacity(22);
    for chunk in bytes.chunks(3) {
        let n = chunk
            .iter()
            .enumerate()
            .fold(0u32, |n, (i, b)| n | (*b as u32) << (16 - 8 * i));
        for i in 0..=chunk.len() {
            out.push(ALPHABET[((n >> (18 - 6 * i)) & 63) as usize] as char);
        }
    }
    out
}

pub fn parse_kafka_uuid(text: &str) -> Option<Uuid> {
    let mut bits = 0u32;
    let mut count = 0;
    let mut bytes = Vec::with_capacity(16);
    for c in text.bytes() {
        let value = match c {
            b'A'..=b'Z' => c - b'A',
            b'a'..=b'z' => c - b'a' + 26,
            b'0'..=b'9' => c - b'0' + 52,
            b'-' => 62,
            b'_' => 63,
            _ => return None,
        } as u32;
        bits = (bits << 6) | value;
        count += 6;
        if count >= 8 {
            count -= 8;
            bytes.push((bits >> count) as u8);
            bits &= (1 << count) - 1;
        }
    }
    Uuid::from_slice(&bytes).ok()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn kafka_uuid_text_round_trips() {
        for _ in 0..100 {
            let id = Uuid::new_v4();
            let text = kafka_uuid_string(&id);
            assert_eq!(text.len(), 22);
            assert_eq!(parse_kafka_uuid(&text), Some(id));
        }
        assert_eq!(kafka_uuid_string(&Uuid::nil()), "AAAAAAAAAAAAAAAAAAAAAA");
    }
}
