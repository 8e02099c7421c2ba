//! Every znode the controller and brokers read or write, one type each with
//! its path, encoder and decoder: Kafka's `ZkData`. The JSON is Kafka 3.9's
//! (key order does not matter to Kafka's readers; unknown keys are ignored).

use std::collections::BTreeMap;

use serde_json::{json, Map, Value};
use uuid::Uuid;

use super::image::{kafka_uuid_string, parse_kafka_uuid, Broker, EndPoint};

/// Why a znode's data could not be read as its type.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct DecodeError {
    pub path: String,
    pub why: String,
}

impl std::fmt::Display for DecodeError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(f, "{}: {}", self.path, self.why)
    }
}

impl std::error::Error for DecodeError {}

fn json_of(path: &str, data: &[u8]) -> Result<Value, DecodeError> {
    serde_json::from_slice(data).map_err(|error| DecodeError {
        path: path.to_owned(),
        why: error.to_string(),
    })
}

fn missing(path: &str, field: &str) -> DecodeError {
    DecodeError {
        path: path.to_owned(),
        why: format!("no valid {field:?}"),
    }
}

fn int_list(value: &Value) -> Option<Vec<i32>> {
    value
        .as_array()?
        .iter()
        .map(|id| id.as_i64().and_then(|id| i32::try_from(id).ok()))
        .collect()
}

/// What a ZooKeeper-mode Kafka 3.9 broker creates at start
/// (`ZkData.PersistentZkPaths`).
pub const PERSISTENT_ZK_PATHS: [&str; 14] = [
    "/consumers",
    BrokerIdsZNode::PATH,
    TopicsZNode::PATH,
    "/config/changes",
    DeleteTopicsZNode::PATH,
    "/brokers/seqid",
    "/isr_change_notification",
    ProducerIdBlockZNode::PATH,
    "/log_dir_event_notification",
    "/config/topics",
    "/config/clients",
    "/config/users",
    "/config/brokers",
    "/config/ips",
];

/// `/brokers/ids`: one ephemeral child per live broker.
pub struct BrokerIdsZNode;

impl BrokerIdsZNode {
    pub const PATH: &'static str = "/brokers/ids";
}

/// `/brokers/ids/<id>`: a broker's registration, Kafka 3.9's version 5.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerIdZNode {
    pub broker: Broker,
    pub timestamp_ms: i64,
}

impl BrokerIdZNode {
    pub fn path(id: i32) -> String {
        format!("{}/{id}", BrokerIdsZNode::PATH)
    }

    /// Every endpoint, and `host`/`port` of the first PLAINTEXT one (null and
    /// -1 without one), `features` empty as a ZooKeeper-mode broker registers.
    pub fn encode(&self) -> Vec<u8> {
        let endpoints = &self.broker.endpoints;
        let plaintext = endpoints
            .iter()
            .find(|endpoint| endpoint.security_protocol == "PLAINTEXT");
        let protocols: Map<String, Value> = endpoints
            .iter()
            .map(|e| (e.listener_name.clone(), json!(e.security_protocol)))
            .collect();
        let mut registration = json!({
            "listener_security_protocol_map": protocols,
            "endpoints": endpoints.iter().map(EndPoint::connection_string).collect::<Vec<_>>(),
            "jmx_port": -1,
            "features": {},
            "host": plaintext.map(|e| e.host.clone()),
            "port": plaintext.map_or(-1, |e| i32::from(e.port)),
            "timestamp": self.timestamp_ms.to_string(),
            "version": 5,
        });
        if let Some(rack) = &self.broker.rack {
            registration["rack"] = json!(rack);
        }
        registration.to_string().into_bytes()
    }

    /// Versions 4 and 5 (`endpoints` with `listener_security_protocol_map`).
    pub fn decode(id: i32, data: &[u8]) -> Result<Self, DecodeError> {
        let path = Self::path(id);
        let value = json_of(&path, data)?;
        let protocols = value["listener_security_protocol_map"].as_object();
        let endpoints = value["endpoints"]
            .as_array()
            .ok_or_else(|| missing(&path, "endpoints"))?
            .iter()
            .map(|entry| {
                let (name, address) = entry.as_str()?.split_once("://")?;
                let (host, port) = address.rsplit_once(':')?;
                let protocol = match protocols {
                    Some(map) => map.get(name)?.as_str()?,
                    // Version 4 without a map: the listener is named for its protocol.
                    None => name,
                };
                Some(EndPoint {
                    listener_name: name.to_owned(),
                    security_protocol: protocol.to_owned(),
                    host: host.trim_matches(['[', ']']).to_owned(),
                    port: port.parse().ok()?,
                })
            })
            .collect::<Option<Vec<_>>>()
            .ok_or_else(|| missing(&path, "endpoints"))?;
        Ok(Self {
            broker: Broker {
                id,
                endpoints,
                rack: value["rack"].as_str().map(str::to_owned),
            },
            timestamp_ms: value["timestamp"]
                .as_str()
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(-1),
        })
    }
}

/// `/brokers/topics`: one child per topic.
pub struct TopicsZNode;

impl TopicsZNode {
    pub const PATH: &'static str = "/brokers/topics";
}

/// `/brokers/topics/<t>`: the topic's id and replica assignment, version 3.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicZNode {
    pub topic_id: Uuid,
    /// Replicas by partition, every partition from 0.
    pub partitions: Vec<Vec<i32>>,
    /// Replicas being added or removed by a reassignment, by partition.
    pub adding_replicas: BTreeMap<i32, Vec<i32>>,
    pub removing_replicas: BTreeMap<i32, Vec<i32>>,
}

fn replica_map<'a>(entries: impl Iterator<Item = (i32, &'a Vec<i32>)>) -> Map<String, Value> {
    entries
        .map(|(partition, replicas)| (partition.to_string(), json!(replicas)))
        .collect()
}

fn decode_replica_map(path: &str, value: &Value) -> Result<BTreeMap<i32, Vec<i32>>, DecodeError> {
    let Some(map) = value.as_object() else {
        return Ok(BTreeMap::new());
    };
    map.iter()
        .map(|(partition, replicas)| Some((partition.parse().ok()?, int_list(replicas)?)))
        .collect::<Option<_>>()
        .ok_or_else(|| missing(path, "replicas"))
}

impl TopicZNode {
    pub fn path(topic: &str) -> String {
        format!("{}/{topic}", TopicsZNode::PATH)
    }

    pub fn encode(&self) -> Vec<u8> {
        json!({
            "version": 3,
            "topic_id": kafka_uuid_string(&self.topic_id),
            "partitions": replica_map(self.partitions.iter().enumerate().map(|(p, r)| (p as i32, r))),
            "adding_replicas": replica_map(self.adding_replicas.iter().map(|(p, r)| (*p, r))),
            "removing_replicas": replica_map(self.removing_replicas.iter().map(|(p, r)| (*p, r))),
        })
        .to_string()
        .into_bytes()
    }

    /// Versions 1 to 3; a topic written without an id gets the nil id.
    pub fn decode(topic: &str, data: &[u8]) -> Result<Self, DecodeError> {
        let path = Self::path(topic);
        let value = json_of(&path, data)?;
        let by_partition = decode_replica_map(&path, &value["partitions"])?;
        if !by_partition
            .keys()
            .copied()
            .eq(0..by_partition.len() as i32)
        {
            return Err(missing(&path, "partitions numbered from 0"));
        }
        let partitions: Vec<Vec<i32>> = by_partition.into_values().collect();
        Ok(Self {
            topic_id: value["topic_id"]
                .as_str()
                .and_then(parse_kafka_uuid)
                .unwrap_or_else(Uuid::nil),
            partitions,
            adding_replicas: decode_replica_map(&path, &value["adding_replicas"])?,
            removing_replicas: decode_replica_map(&path, &value["removing_replicas"])?,
        })
    }
}

/// `/brokers/topics/<t>/partitions/<p>/state`: the partition's leader, leader
/// epoch, ISR and the epoch of the controller that wrote it, version 1. Its
/// znode version is the partition epoch LeaderAndIsr carries.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct TopicPartitionStateZNode {
    pub leader: i32,
    pub leader_epoch: i32,
    pub isr: Vec<i32>,
    pub controller_epoch: i32,
    /// Kafka's `LeaderRecoveryState`: 0 recovered, 1 recovering (after an
    /// unclean election); written only when recovering.
    pub leader_recovery_state: i8,
}

impl TopicPartitionStateZNode {
    pub fn partitions_path(topic: &str) -> String {
        format!("{}/partitions", TopicZNode::path(topic))
    }

    pub fn path(topic: &str, partition: i32) -> String {
        format!("{}/{partition}/state", Self::partitions_path(topic))
    }

    pub fn encode(&self) -> Vec<u8> {
        let mut state = json!({
            "version": 1,
            "leader": self.leader,
            "leader_epoch": self.leader_epoch,
            "controller_epoch": self.controller_epoch,
            "isr": self.isr,
        });
        if self.leader_recovery_state != 0 {
            state["leader_recovery_state"] = json!(self.leader_recovery_state);
        }
        state.to_string().into_bytes()
    }

    pub fn decode(topic: &str, partition: i32, data: &[u8]) -> Result<Self, DecodeError> {
        let path = Self::path(topic, partition);
        let value = json_of(&path, data)?;
        let int = |field: &str| {
            value[field]
                .as_i64()
                .and_then(|v| i32::try_from(v).ok())
                .ok_or_else(|| missing(&path, field))
        };
        Ok(Self {
            leader: int("leader")?,
            leader_epoch: int("leader_epoch")?,
            controller_epoch: int("controller_epoch")?,
            isr: int_list(&value["isr"]).ok_or_else(|| missing(&path, "isr"))?,
            leader_recovery_state: value["leader_recovery_state"].as_i64().unwrap_or(0) as i8,
        })
    }
}

/// `/controller`: the elected controller, ephemeral, version 2.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ControllerZNode {
    pub broker_id: i32,
    pub timestamp_ms: i64,
}

impl ControllerZNode {
    pub const PATH: &'static str = "/controller";

    pub fn encode(&self) -> Vec<u8> {
        json!({
            "version": 2,
            "brokerid": self.broker_id,
            "timestamp": self.timestamp_ms.to_string(),
            "kraftControllerEpoch": -1,
        })
        .to_string()
        .into_bytes()
    }

    pub fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        let value = json_of(Self::PATH, data)?;
        Ok(Self {
            broker_id: value["brokerid"]
                .as_i64()
                .and_then(|id| i32::try_from(id).ok())
                .ok_or_else(|| missing(Self::PATH, "brokerid"))?,
            timestamp_ms: value["timestamp"]
                .as_str()
                .and_then(|ms| ms.parse().ok())
                .unwrap_or(-1),
        })
    }
}

/// `/controller_epoch`: the controller epoch as ASCII digits. Its znode
/// version fences every write of the controller that set it.
pub struct ControllerEpochZNode;

impl ControllerEpochZNode {
    pub const PATH: &'static str = "/controller_epoch";

    pub fn encode(epoch: i32) -> Vec<u8> {
        epoch.to_string().into_bytes()
    }

    pub fn decode(data: &[u8]) -> Result<i32, DecodeError> {
        std::str::from_utf8(data)
            .ok()
            .and_then(|text| text.trim().parse().ok())
            .ok_or_else(|| missing(Self::PATH, "epoch"))
    }
}

/// `/config/changes/config_change_<seq>`: an entity's config changed
/// (Kafka's ConfigEntityChangeNotificationSequenceZNode), version 2 with the
/// entity's path under `/config` (`topics/<t>`). Every broker watches them.
pub struct ConfigChangeZNode;

impl ConfigChangeZNode {
    pub const PATH: &'static str = "/config/changes";
    pub const PREFIX: &'static str = "config_change_";

    /// The path a sequential create appends the sequence number to.
    pub fn path_prefix() -> String {
        format!("{}/{}", Self::PATH, Self::PREFIX)
    }

    pub fn encode(entity_path: &str) -> Vec<u8> {
        json!({"version": 2, "entity_path": entity_path})
            .to_string()
            .into_bytes()
    }

    pub fn decode(data: &[u8]) -> Result<String, DecodeError> {
        let path = Self::PATH;
        json_of(path, data)?["entity_path"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| missing(path, "entity_path"))
    }

    /// A notification's sequence number, from its name.
    pub fn sequence(child: &str) -> Option<u64> {
        child.strip_prefix(Self::PREFIX)?.parse().ok()
    }

    /// The topic a notification's entity path names, if it is a topic's.
    pub fn topic(entity_path: &str) -> Option<&str> {
        entity_path.strip_prefix("topics/")
    }

    /// The broker (an id, or `<default>`) a notification's entity path
    /// names, if it is a broker's.
    pub fn broker(entity_path: &str) -> Option<&str> {
        entity_path.strip_prefix("brokers/")
    }
}

/// `/config/<type>/<name>`: an entity's config overrides, version 1: a
/// topic's (`topics/<t>`), a broker's dynamic configs (`brokers/<id>`, and
/// for every broker `brokers/<default>`).
pub struct ConfigEntityZNode;

impl ConfigEntityZNode {
    pub const TOPICS: &'static str = "topics";
    pub const BROKERS: &'static str = "brokers";
    /// The broker entity whose configs every broker takes.
    pub const DEFAULT_BROKER: &'static str = "<default>";

    pub fn path(entity_type: &str, name: &str) -> String {
        format!("/config/{entity_type}/{name}")
    }

    pub fn topic_path(topic: &str) -> String {
        Self::path(Self::TOPICS, topic)
    }

    pub fn encode(config: &BTreeMap<String, String>) -> Vec<u8> {
        json!({"version": 1, "config": config})
            .to_string()
            .into_bytes()
    }

    pub fn decode(path: &str, data: &[u8]) -> Result<BTreeMap<String, String>, DecodeError> {
        let value = json_of(path, data)?;
        match value["config"].as_object() {
            None => Ok(BTreeMap::new()),
            Some(config) => config
                .iter()
                .map(|(key, value)| Some((key.clone(), value.as_str()?.to_owned())))
                .collect::<Option<_>>()
                .ok_or_else(|| missing(path, "config")),
        }
    }
}

/// `/log_dir_event_notification/log_dir_event_<seq>`: a broker's log dir
/// failed (Kafka's LogDirEventNotificationSequenceZNode), version 1 with
/// event 1 (LogDirFailure). The controller deletes each once processed.
pub struct LogDirEventNotificationZNode;

impl LogDirEventNotificationZNode {
    pub const PATH: &'static str = "/log_dir_event_notification";
    pub const PREFIX: &'static str = "log_dir_event_";
    const LOG_DIR_FAILURE: i64 = 1;

    /// The path a sequential create appends the sequence number to.
    pub fn path_prefix() -> String {
        format!("{}/{}", Self::PATH, Self::PREFIX)
    }

    pub fn child_path(child: &str) -> String {
        format!("{}/{child}", Self::PATH)
    }

    pub fn encode(broker: i32) -> Vec<u8> {
        json!({"version": 1, "broker": broker, "event": Self::LOG_DIR_FAILURE})
            .to_string()
            .into_bytes()
    }

    /// The broker whose log dir failed.
    pub fn decode(data: &[u8]) -> Result<i32, DecodeError> {
        let path = Self::PATH;
        json_of(path, data)?["broker"]
            .as_i64()
            .map(|id| id as i32)
            .ok_or_else(|| missing(path, "broker"))
    }
}

/// `/admin/delete_topics`: one empty child per topic to delete.
pub struct DeleteTopicsZNode;

impl DeleteTopicsZNode {
    pub const PATH: &'static str = "/admin/delete_topics";

    pub fn topic_path(topic: &str) -> String {
        format!("{}/{topic}", Self::PATH)
    }
}

/// `/cluster/id`: the cluster id, its `version` a string as Kafka writes it.
pub struct ClusterIdZNode;

impl ClusterIdZNode {
    pub const PATH: &'static str = "/cluster/id";

    pub fn encode(id: &str) -> Vec<u8> {
        json!({"version": "1", "id": id}).to_string().into_bytes()
    }

    pub fn decode(data: &[u8]) -> Result<String, DecodeError> {
        json_of(Self::PATH, data)?["id"]
            .as_str()
            .map(str::to_owned)
            .ok_or_else(|| missing(Self::PATH, "id"))
    }
}

/// `/feature`: finalized features, none in ZooKeeper mode, status enabled.
pub struct FeatureZNode;

impl FeatureZNode {
    pub const PATH: &'static str = "/feature";

    pub fn encode_enabled() -> Vec<u8> {
        json!({"features": {}, "version": 2, "status": 1})
            .to_string()
            .into_bytes()
    }
}

/// `/latest_producer_id_block`: the last block of producer ids claimed,
/// its bounds strings as Kafka writes them.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ProducerIdBlockZNode {
    pub broker_id: i32,
    pub block_start: i64,
    pub block_end: i64,
}

impl ProducerIdBlockZNode {
    pub const PATH: &'static str = "/latest_producer_id_block";

    pub fn encode(&self) -> Vec<u8> {
        json!({
            "version": 1,
            "broker": self.broker_id,
            "block_start": self.block_start.to_string(),
            "block_end": self.block_end.to_string(),
        })
        .to_string()
        .into_bytes()
    }

    pub fn decode(data: &[u8]) -> Result<Self, DecodeError> {
        let value = json_of(Self::PATH, data)?;
        let bound = |field: &str| {
            value[field]
                .as_str()
                .and_then(|text| text.parse().ok())
                .ok_or_else(|| missing(Self::PATH, field))
        };
        Ok(Self {
            broker_id: value["broker"].as_i64().unwrap_or(-1) as i32,
            block_start: bound("block_start")?,
            block_end: bound("block_end")?,
        })
    }
}

#[cfg(test)]
mod tests {
    #[test]
    fn config_change_notifications_are_kafkas() {
        let data = ConfigChangeZNode::encode("topics/t1");
        assert_eq!(
            serde_json::from_slice::<serde_json::Value>(&data).unwrap(),
            serde_json::json!({"version": 2, "entity_path": "topics/t1"})
        );
        assert_eq!(ConfigChangeZNode::decode(&data).unwrap(), "topics/t1");
        assert_eq!(
            ConfigChangeZNode::sequence("config_change_0000000012"),
            Some(12)
        );
        assert_eq!(ConfigChangeZNode::topic("topics/t1"), Some("t1"));
        assert_eq!(ConfigChangeZNode::topic("clients/c1"), None);
        assert_eq!(
            ConfigChangeZNode::path_prefix(),
            "/config/changes/config_change_"
        );
    }

    use super::*;

    fn endpoint(name: &str, host: &str, port: u16) -> EndPoint {
        EndPoint {
            listener_name: name.into(),
            security_protocol: "PLAINTEXT".into(),
            host: host.into(),
            port,
        }
    }

    #[test]
    fn broker_registration_is_kafka_3_9_version_5() {
        let registration = BrokerIdZNode {
            broker: Broker {
                id: 1,
                endpoints: vec![
                    endpoint("INTERNAL", "::1", 19093),
                    endpoint("CLIENTS", "127.0.0.1", 19092),
                ],
                rack: Some("r1".into()),
            },
            timestamp_ms: 1_796_110_880_931,
        };
        let value: Value = serde_json::from_slice(&registration.encode()).unwrap();
        assert_eq!(
            value,
            json!({
                "version": 5,
                "endpoints": ["INTERNAL://[::1]:19093", "CLIENTS://127.0.0.1:19092"],
                "listener_security_protocol_map": {"INTERNAL": "PLAINTEXT", "CLIENTS": "PLAINTEXT"},
                // host/port: the first endpoint whose protocol is PLAINTEXT.
                "host": "::1",
                "port": 19093,
                "jmx_port": -1,
                "features": {},
                "rack": "r1",
                "timestamp": "1796110880931",
            })
        );
        assert_eq!(
            BrokerIdZNode::decode(1, &registration.encode()),
            Ok(registration)
        );
        // Kafka 3.9.1's own registration, as observed.
        let kafka = br#"{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://127.0.0.1:19092"],"rack":"r1","jmx_port":-1,"port":19092,"host":"127.0.0.1","version":5,"timestamp":"1796110880931"}"#;
        assert_eq!(
            BrokerIdZNode::decode(1, kafka),
            Ok(BrokerIdZNode {
                broker: Broker {
                    id: 1,
                    endpoints: vec![endpoint("PLAINTEXT", "127.0.0.1", 19092)],
                    rack: Some("r1".into()),
                },
                timestamp_ms: 1_796_110_880_931,
            })
        );
        let mut no_rack = BrokerIdZNode::decode(1, kafka).unwrap();
        no_rack.broker.rack = None;
        let value: Value = serde_json::from_slice(&no_rack.encode()).unwrap();
        assert!(value.get("rack").is_none(), "rack only when configured");
    }

    #[test]
    fn topic_is_kafka_3_9_version_3() {
        let event = br#"{"version":1,"broker":3,"event":1}"#;
        assert_eq!(LogDirEventNotificationZNode::decode(event).unwrap(), 3);
        let written: Value =
            serde_json::from_slice(&LogDirEventNotificationZNode::encode(3)).unwrap();
        assert_eq!(written, serde_json::from_slice::<Value>(event).unwrap());
        let kafka = br#"{"partitions":{"0":[1],"1":[1],"2":[1]},"topic_id":"B7qH_Eh3QTukeMy-Tj_zjQ","adding_replicas":{},"removing_replicas":{},"version":3}"#;
        let topic = TopicZNode::decode("t", kafka).unwrap();
        assert_eq!(topic.partitions, vec![vec![1], vec![1], vec![1]]);
        assert_eq!(kafka_uuid_string(&topic.topic_id), "B7qH_Eh3QTukeMy-Tj_zjQ");
        assert_eq!(
            serde_json::from_slice::<Value>(&topic.encode()).unwrap(),
            serde_json::from_slice::<Value>(kafka).unwrap()
        );
        // Partitions past 9 sort by number, not as text.
        let many = TopicZNode {
            partitions: (0..12).map(|p| vec![p]).collect(),
            ..topic
        };
        assert_eq!(TopicZNode::decode("t", &many.encode()).unwrap(), many);
        assert_eq!(
            TopicPartitionStateZNode::path("t", 3),
            "/brokers/topics/t/partitions/3/state"
        );
    }

    #[test]
    fn partition_state_is_kafka_3_9_version_1() {
        let kafka = br#"{"controller_epoch":1,"leader":1,"version":1,"leader_epoch":0,"isr":[1]}"#;
        let state = TopicPartitionStateZNode::decode("t", 0, kafka).unwrap();
        assert_eq!(
            state,
            TopicPartitionStateZNode {
                leader: 1,
                leader_epoch: 0,
                isr: vec![1],
                controller_epoch: 1,
                leader_recovery_state: 0,
            }
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&state.encode()).unwrap(),
            serde_json::from_slice::<Value>(kafka).unwrap()
        );
        let recovering = TopicPartitionStateZNode {
            leader_recovery_state: 1,
            ..state
        };
        let value: Value = serde_json::from_slice(&recovering.encode()).unwrap();
        assert_eq!(value["leader_recovery_state"], 1);
        assert_eq!(
            TopicPartitionStateZNode::decode("t", 0, &recovering.encode()),
            Ok(recovering)
        );
    }

    #[test]
    fn controller_cluster_feature_and_config_nodes_are_kafka_3_9s() {
        let kafka =
            br#"{"version":2,"brokerid":1,"timestamp":"1796110881051","kraftControllerEpoch":-1}"#;
        let controller = ControllerZNode::decode(kafka).unwrap();
        assert_eq!(
            controller,
            ControllerZNode {
                broker_id: 1,
                timestamp_ms: 1_796_110_881_051
            }
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&controller.encode()).unwrap(),
            serde_json::from_slice::<Value>(kafka).unwrap()
        );
        assert_eq!(ControllerEpochZNode::decode(b"1"), Ok(1));
        assert_eq!(ControllerEpochZNode::encode(12), b"12");

        let cluster = br#"{"version":"1","id":"Frrn4MFERc6ziAA8S75Ejg"}"#;
        assert_eq!(
            ClusterIdZNode::decode(cluster).as_deref(),
            Ok("Frrn4MFERc6ziAA8S75Ejg")
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&ClusterIdZNode::encode("Frrn4MFERc6ziAA8S75Ejg"))
                .unwrap(),
            serde_json::from_slice::<Value>(cluster).unwrap()
        );
        assert_eq!(
            serde_json::from_slice::<Value>(&FeatureZNode::encode_enabled()).unwrap(),
            json!({"features": {}, "version": 2, "status": 1})
        );

        let config =
            br#"{"version":1,"config":{"min.insync.replicas":"1","retention.ms":"3600000"}}"#;
        let overrides = ConfigEntityZNode::decode("/config/topics/t", config).unwrap();
        assert_eq!(overrides["retention.ms"], "3600000");
        assert_eq!(
            serde_json::from_slice::<Value>(&ConfigEntityZNode::encode(&overrides)).unwrap(),
            serde_json::from_slice::<Value>(config).unwrap()
        );
    }

    #[test]
    fn producer_id_block_bounds_are_strings() {
        let block = ProducerIdBlockZNode {
            broker_id: 1,
            block_start: 0,
            block_end: 999,
        };
        assert_eq!(
            serde_json::from_slice::<Value>(&block.encode()).unwrap(),
            json!({"version": 1, "broker": 1, "block_start": "0", "block_end": "999"})
        );
        assert_eq!(ProducerIdBlockZNode::decode(&block.encode()), Ok(block));
    }
}
