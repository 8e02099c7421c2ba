//! `KafkaController`: the one place cluster metadata changes. It keeps Kafka's
//! ZooKeeper layout (`/brokers/ids`, `/brokers/topics/<t>`, partition `state`
//! znodes, `/config/topics`, `/admin/delete_topics`, `/controller`,
//! `/controller_epoch`, `/cluster/id`) in the metadata store and builds the
//! metadata image from it.

use std::collections::BTreeMap;
use std::sync::Arc;

use serde_json::{json, Value};
use shards::log::{LogConfig, TOPIC_CONFIG_NAMES};
use tracing::info;
use uuid::Uuid;

use crate::config::definitions::{kafka_config_defs, list_items, ConfigType};
use crate::metadata::image::{
    kafka_uuid_string, parse_kafka_uuid, Broker, EndPoint, MetadataImage, PartitionImage,
    TopicImage,
};
use crate::metadata::store::{CreateMode, EmbeddedStore, StoreError, WatchKind};
use crate::protocol::{ApiError, ResponseError};

impl From<StoreError> for ApiError {
    fn from(error: StoreError) -> Self {
        ApiError::new(ResponseError::UnknownServerError, error.to_string())
    }
}

/// Broker-wide defaults for new topics.
#[derive(Debug, Clone)]
pub struct TopicDefaults {
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub log_config: LogConfig,
}

#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    /// -1: `num.partitions`.
    pub num_partitions: i32,
    /// -1: `default.replication.factor`.
    pub replication_factor: i16,
    /// Explicit replica assignment, partition by partition.
    pub assignments: Vec<Vec<i32>>,
    pub configs: Vec<(String, Option<String>)>,
}

/// How a config alteration applies (IncrementalAlterConfigs' operations).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigOp {
    Set,
    Delete,
    /// Adds items missing from a LIST config.
    Append,
    /// Removes items from a LIST config.
    Subtract,
}

const MAX_TOPIC_NAME_LENGTH: usize = 249;
/// Partitions a topic may have: its assignment znode must stay under
/// ZooKeeper's default 1 MiB node limit (`jute.maxbuffer`), and a request must
/// never make the broker allocate without bound.
const MAX_PARTITIONS_PER_TOPIC: i32 = 100_000;

fn check_partition_count(count: i32) -> Result<(), ApiError> {
    if count > MAX_PARTITIONS_PER_TOPIC {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!("{count} partitions exceed the limit of {MAX_PARTITIONS_PER_TOPIC} per topic"),
        ));
    }
    Ok(())
}

pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let legal = !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= MAX_TOPIC_NAME_LENGTH
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if legal {
        Ok(())
    } else {
        Err(ApiError::new(
            ResponseError::InvalidTopicException,
            format!("topic name {name:?} is illegal: up to 249 of [a-zA-Z0-9._-], not '.' or '..'"),
        ))
    }
}

/// Producer ids claimed from the store at a time, as Kafka's ZooKeeper mode.
const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;
const PRODUCER_ID_BLOCK_PATH: &str = "/latest_producer_id_block";

/// Replica assignments must name known brokers, once each, with one
/// replication factor for every partition.
fn check_assignments(
    assignments: &[Vec<i32>],
    live_brokers: &[i32],
    replication_factor: Option<usize>,
) -> Result<(), ApiError> {
    let invalid = |why: String| Err(ApiError::new(ResponseError::InvalidReplicaAssignment, why));
    let factor = replication_factor
        .or(assignments.first().map(Vec::len))
        .unwrap_or(0);
    for (partition, replicas) in assignments.iter().enumerate() {
        if replicas.is_empty() || replicas.len() != factor {
            return invalid(format!(
                "partition {partition} has {} replicas, expected {factor}",
                replicas.len()
            ));
        }
        if let Some(unknown) = replicas.iter().find(|b| !live_brokers.contains(b)) {
            return invalid(format!(
                "partition {partition} names unknown broker {unknown}"
            ));
        }
        let mut sorted = replicas.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != replicas.len() {
            return invalid(format!(
                "partition {partition} repeats a broker: {replicas:?}"
            ));
        }
    }
    Ok(())
}

pub struct KafkaController {
    store: EmbeddedStore,
    broker: Broker,
    defaults: TopicDefaults,
    controller_epoch: i32,
    cluster_id: String,
    /// The next producer id to hand out, and the last of the claimed block.
    next_producer_id: i64,
    producer_id_block_end: i64,
}

fn topic_path(topic: &str) -> String {
    format!("/brokers/topics/{topic}")
}
fn partition_state_path(topic: &str, partition: usize) -> String {
    format!("/brokers/topics/{topic}/partitions/{partition}/state")
}
fn config_path(topic: &str) -> String {
    format!("/config/topics/{topic}")
}
fn now_ms_string() -> String {
    shards::log::wall_clock_ms().to_string()
}

impl KafkaController {
    /// Registers this broker, becomes the controller (the only broker of an
    /// embedded store always wins the election) and bumps the controller epoch.
    pub fn startup(
        mut store: EmbeddedStore,
        broker: Broker,
        defaults: TopicDefaults,
    ) -> Result<Self, StoreError> {
        for path in [
            "/brokers/ids",
            "/brokers/topics",
            "/config/topics",
            "/admin/delete_topics",
            "/isr_change_notification",
        ] {
            if !store.exists(path) {
                store.create_recursive(path, b"", CreateMode::Persistent)?;
            }
        }
        let cluster_id = match store.get("/cluster/id") {
            Some((data, _)) => serde_json::from_slice::<Value>(&data)
                .ok()
                .and_then(|v| v["id"].as_str().map(str::to_owned))
                .unwrap_or_default(),
            None => {
                let id = kafka_uuid_string(&Uuid::new_v4());
                let data = json!({"version": "1", "id": id}).to_string();
                store.create_recursive("/cluster/id", data.as_bytes(), CreateMode::Persistent)?;
                id
            }
        };
        let registration = broker_registration(&broker);
        store.create(
            &format!("/brokers/ids/{}", broker.id),
            registration.to_string().as_bytes(),
            CreateMode::Ephemeral,
        )?;
        let controller = json!({"version": 2, "brokerid": broker.id, "timestamp": now_ms_string(), "kraftControllerEpoch": -1});
        store.create(
            "/controller",
            controller.to_string().as_bytes(),
            CreateMode::Ephemeral,
        )?;
        let controller_epoch = match store.get("/controller_epoch") {
            Some((data, version)) => {
                let epoch = String::from_utf8_lossy(&data)
                    .trim()
                    .parse::<i32>()
                    .unwrap_or(0)
                    + 1;
                store.set_data(
                    "/controller_epoch",
                    epoch.to_string().as_bytes(),
                    Some(version),
                )?;
                epoch
            }
            None => {
                store.create("/controller_epoch", b"1", CreateMode::Persistent)?;
                1
            }
        };
        store.watch("/admin/delete_topics", WatchKind::Children);
        info!(
            broker = broker.id,
            controller_epoch, cluster_id, "became the controller"
        );
        let mut controller = Self {
            store,
            broker,
            defaults,
            controller_epoch,
            cluster_id,
            next_producer_id: 0,
            producer_id_block_end: -1,
        };
        // Finish deletions a crash interrupted; a failure here is not fatal.
        if let Err(error) = controller.process_topic_deletions() {
            tracing::error!(%error, "cannot finish pending topic deletions");
        }
        controller.store.commit()?;
        Ok(controller)
    }

    pub fn create_topics(
        &mut self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Vec<Result<(i32, i16), ApiError>> {
        topics
            .iter()
            .map(|topic| self.create_topic(topic, validate_only))
            .collect()
    }

    fn create_topic(
        &mut self,
        topic: &NewTopic,
        validate_only: bool,
    ) -> Result<(i32, i16), ApiError> {
        validate_topic_name(&topic.name)?;
        if self.store.exists(&topic_path(&topic.name)) {
            return Err(ApiError::new(
                ResponseError::TopicAlreadyExists,
                format!("topic '{}' already exists", topic.name),
            ));
        }
        let live_brokers = self.store.children("/brokers/ids")?.len();
        let assignments: Vec<Vec<i32>> = if topic.assignments.is_empty() {
            let partitions = if topic.num_partitions == -1 {
                self.defaults.num_partitions
            } else {
                topic.num_partitions
            };
            let replication_factor = if topic.replication_factor == -1 {
                self.defaults.default_replication_factor
            } else {
                topic.replication_factor
            };
            if partitions <= 0 {
                return Err(ApiError::new(
                    ResponseError::InvalidPartitions,
                    "number of partitions must be larger than 0",
                ));
            }
            check_partition_count(partitions)?;
            if replication_factor <= 0 || replication_factor as usize > live_brokers {
                return Err(ApiError::new(
                    ResponseError::InvalidReplicationFactor,
                    format!("replication factor: {replication_factor} larger than available brokers: {live_brokers}"),
                ));
            }
            (0..partitions)
                .map(|_| vec![self.broker.id; replication_factor as usize])
                .collect()
        } else {
            if topic.num_partitions != -1 || topic.replication_factor != -1 {
                return Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    "both replica assignment and partitions/replication factor were given",
                ));
            }
            check_partition_count(topic.assignments.len().try_into().unwrap_or(i32::MAX))?;
            check_assignments(&topic.assignments, &self.live_brokers()?, None)?;
            topic.assignments.clone()
        };
        let mut overrides = BTreeMap::new();
        let mut log_config = self.defaults.log_config.clone();
        for (key, value) in &topic.configs {
            let Some(value) = value else { continue };
            apply_topic_config(&mut log_config, key, value)?;
            overrides.insert(key.clone(), value.clone());
        }
        let replication_factor = assignments[0].len() as i16;
        if validate_only {
            return Ok((assignments.len() as i32, replication_factor));
        }
        let id = Uuid::new_v4();
        let partitions: serde_json::Map<String, Value> = assignments
            .iter()
            .enumerate()
            .map(|(p, replicas)| (p.to_string(), json!(replicas)))
            .collect();
        let config = json!({"version": 1, "config": overrides});
        self.store.create_recursive(
            &config_path(&topic.name),
            config.to_string().as_bytes(),
            CreateMode::Persistent,
        )?;
        let assignment = json!({
            "version": 3,
            "topic_id": kafka_uuid_string(&id),
            "partitions": partitions,
            "adding_replicas": {},
            "removing_replicas": {},
        });
        // The topic znode first: partition states are its children.
        self.store.create(
            &topic_path(&topic.name),
            assignment.to_string().as_bytes(),
            CreateMode::Persistent,
        )?;
        self.write_partition_states(&topic.name, &assignments, 0)?;
        info!(
            topic = topic.name,
            partitions = assignments.len(),
            replication_factor,
            "created topic"
        );
        Ok((assignments.len() as i32, replication_factor))
    }

    /// Writes a leader-and-ISR state for partitions `from..`, the first live
    /// replica leading, as the controller does for new partitions.
    fn write_partition_states(
        &mut self,
        topic: &str,
        assignments: &[Vec<i32>],
        from: usize,
    ) -> Result<(), StoreError> {
        for (partition, replicas) in assignments.iter().enumerate().skip(from) {
            let state = json!({
                "controller_epoch": self.controller_epoch,
                "leader": replicas[0],
                "version": 1,
                "leader_epoch": 0,
                "isr": replicas,
            });
            self.store.create_recursive(
                &partition_state_path(topic, partition),
                state.to_string().as_bytes(),
                CreateMode::Persistent,
            )?;
        }
        Ok(())
    }

    fn live_brokers(&self) -> Result<Vec<i32>, ApiError> {
        Ok(self
            .store
            .children("/brokers/ids")?
            .iter()
            .filter_map(|id| id.parse().ok())
            .collect())
    }

    /// The topic exists under a legal name (names become znode paths).
    fn existing_topic(&self, topic: &str) -> Result<(), ApiError> {
        validate_topic_name(topic)?;
        if !self.store.exists(&topic_path(topic)) {
            return Err(ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic '{topic}' does not exist"),
            ));
        }
        Ok(())
    }

    /// Writes the request's changes to disk, all together.
    pub fn commit(&mut self) -> Result<(), ApiError> {
        self.store.commit().map_err(ApiError::from)
    }

    /// Marks topics for deletion under `/admin/delete_topics` and lets the
    /// deletion watch do the work, as Kafka's controller does.
    pub fn delete_topics(&mut self, names: &[String]) -> Vec<Result<(), ApiError>> {
        let results = names
            .iter()
            .map(|name| {
                self.existing_topic(name)?;
                let marker = format!("/admin/delete_topics/{name}");
                match self.store.create(&marker, b"", CreateMode::Persistent) {
                    Ok(()) | Err(StoreError::NodeExists(_)) => Ok(()),
                    Err(error) => Err(error.into()),
                }
            })
            .collect();
        if let Err(error) = self.process_topic_deletions() {
            tracing::error!(%error, "topic deletion failed");
        }
        results
    }

    fn process_topic_deletions(&mut self) -> Result<(), StoreError> {
        let fired = self.store.take_fired_watches();
        let pending = self.store.children("/admin/delete_topics")?;
        if !fired.is_empty() || !pending.is_empty() {
            for name in pending {
                if self.store.exists(&topic_path(&name)) {
                    self.store.delete_recursive(&topic_path(&name))?;
                }
                if self.store.exists(&config_path(&name)) {
                    self.store.delete_recursive(&config_path(&name))?;
                }
                self.store
                    .delete(&format!("/admin/delete_topics/{name}"), None)?;
                info!(topic = name, "deleted topic");
            }
            self.store.take_fired_watches();
        }
        self.store
            .watch("/admin/delete_topics", WatchKind::Children);
        Ok(())
    }

    /// Grows a topic to `count` partitions.
    pub fn create_partitions(
        &mut self,
        topic: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.existing_topic(topic)?;
        let (data, version) = self.store.get(&topic_path(topic)).unwrap_or_default();
        let mut assignment: Value = serde_json::from_slice(&data)
            .map_err(|e| ApiError::new(ResponseError::UnknownServerError, e.to_string()))?;
        let current = assignment["partitions"].as_object().map_or(0, |p| p.len());
        check_partition_count(count)?;
        if count <= 0 || count as usize <= current {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!(
                    "topic currently has {current} partitions, {count} would not be an increase"
                ),
            ));
        }
        let replication_factor = assignment["partitions"]["0"]
            .as_array()
            .map_or(1, |r| r.len());
        let new: Vec<Vec<i32>> = match assignments {
            Some(explicit) => {
                if explicit.len() != count as usize - current {
                    return Err(ApiError::new(
                        ResponseError::InvalidReplicaAssignment,
                        "assignment count does not match the new partitions",
                    ));
                }
                check_assignments(&explicit, &self.live_brokers()?, Some(replication_factor))?;
                explicit
            }
            None => (current..count as usize)
                .map(|_| vec![self.broker.id; replication_factor])
                .collect(),
        };
        if validate_only {
            return Ok(());
        }
        let mut all: Vec<Vec<i32>> = vec![Vec::new(); current];
        for (offset, replicas) in new.iter().enumerate() {
            assignment["partitions"][(current + offset).to_string()] = json!(replicas);
            all.push(replicas.clone());
        }
        self.write_partition_states(topic, &all, current)?;
        self.store.set_data(
            &topic_path(topic),
            assignment.to_string().as_bytes(),
            Some(version),
        )?;
        info!(topic, partitions = count, "added partitions");
        Ok(())
    }

    /// Applies config changes to a topic (AlterConfigs replaces all overrides;
    /// IncrementalAlterConfigs applies each operation).
    pub fn alter_topic_config(
        &mut self,
        topic: &str,
        changes: &[(String, ConfigOp, Option<String>)],
        replace_all: bool,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.existing_topic(topic)?;
        let (data, version) = self.store.get(&config_path(topic)).unwrap_or_default();
        let mut overrides: BTreeMap<String, String> = if replace_all {
            BTreeMap::new()
        } else {
            serde_json::from_slice::<Value>(&data)
                .ok()
                .and_then(|v| serde_json::from_value(v["config"].clone()).ok())
                .unwrap_or_default()
        };
        for (key, op, value) in changes {
            match (op, value) {
                (ConfigOp::Set, Some(value)) => {
                    overrides.insert(key.clone(), value.clone());
                }
                (ConfigOp::Set, None) | (ConfigOp::Delete, _) => {
                    overrides.remove(key);
                }
                (ConfigOp::Append | ConfigOp::Subtract, value) => {
                    let list = alter_list_config(&overrides, key, *op, value.as_deref())?;
                    overrides.insert(key.clone(), list);
                }
            }
        }
        let mut log_config = self.defaults.log_config.clone();
        for (key, value) in &overrides {
            apply_topic_config(&mut log_config, key, value)?;
        }
        if validate_only {
            return Ok(());
        }
        let config = json!({"version": 1, "config": overrides});
        if self.store.exists(&config_path(topic)) {
            self.store.set_data(
                &config_path(topic),
                config.to_string().as_bytes(),
                Some(version),
            )?;
        } else {
            self.store.create_recursive(
                &config_path(topic),
                config.to_string().as_bytes(),
                CreateMode::Persistent,
            )?;
        }
        Ok(())
    }

    /// A producer id never handed out before, by this or any earlier run:
    /// blocks of ids are claimed in `/latest_producer_id_block` with a
    /// compare-and-set, as Kafka's ZooKeeper-mode brokers do.
    pub fn allocate_producer_id(&mut self) -> Result<i64, ApiError> {
        if self.next_producer_id > self.producer_id_block_end {
            let (start, version) = match self.store.get(PRODUCER_ID_BLOCK_PATH) {
                Some((data, version)) => {
                    let block: Value = serde_json::from_slice(&data).map_err(|e| {
                        ApiError::new(ResponseError::UnknownServerError, e.to_string())
                    })?;
                    let end: i64 = block["block_end"]
                        .as_str()
                        .and_then(|s| s.parse().ok())
                        .unwrap_or(-1);
                    (end + 1, Some(version))
                }
                None => (0, None),
            };
            let end = start + PRODUCER_ID_BLOCK_SIZE - 1;
            let block = json!({"version": 1, "broker": self.broker.id, "block_start": start.to_string(), "block_end": end.to_string()});
            match version {
                Some(version) => {
                    self.store.set_data(
                        PRODUCER_ID_BLOCK_PATH,
                        block.to_string().as_bytes(),
                        Some(version),
                    )?;
                }
                None => self.store.create(
                    PRODUCER_ID_BLOCK_PATH,
                    block.to_string().as_bytes(),
                    CreateMode::Persistent,
                )?,
            }
            self.next_producer_id = start;
            self.producer_id_block_end = end;
        }
        let id = self.next_producer_id;
        self.next_producer_id += 1;
        Ok(id)
    }

    /// Reads the whole tree into an image.
    pub fn build_image(&self, version: u64) -> MetadataImage {
        let mut image = MetadataImage::empty();
        image.version = version;
        image.cluster_id = self.cluster_id.clone();
        image.controller_id = self.broker.id;
        for id in self.store.children("/brokers/ids").unwrap_or_default() {
            let Some((data, _)) = self.store.get(&format!("/brokers/ids/{id}")) else {
                continue;
            };
            let Ok(value) = serde_json::from_slice::<Value>(&data) else {
                continue;
            };
            if let (Ok(id), Some(endpoints)) = (id.parse::<i32>(), parse_endpoints(&value)) {
                image.brokers.insert(id, Broker { id, endpoints });
            }
        }
        for name in self.store.children("/brokers/topics").unwrap_or_default() {
            let Some((data, _)) = self.store.get(&topic_path(&name)) else {
                continue;
            };
            let Ok(assignment) = serde_json::from_slice::<Value>(&data) else {
                continue;
            };
            let id = assignment["topic_id"]
                .as_str()
                .and_then(parse_kafka_uuid)
                .unwrap_or_else(Uuid::nil);
            let count = assignment["partitions"].as_object().map_or(0, |p| p.len());
            let mut partitions = Vec::with_capacity(count);
            for p in 0..count {
                let replicas: Vec<i32> =
                    serde_json::from_value(assignment["partitions"][p.to_string()].clone())
                        .unwrap_or_default();
                let state = self
                    .store
                    .get(&partition_state_path(&name, p))
                    .and_then(|(data, _)| serde_json::from_slice::<Value>(&data).ok())
                    .unwrap_or(Value::Null);
                partitions.push(PartitionImage {
                    leader: state["leader"].as_i64().unwrap_or(-1) as i32,
                    leader_epoch: state["leader_epoch"].as_i64().unwrap_or(0) as i32,
                    isr: serde_json::from_value(state["isr"].clone()).unwrap_or_default(),
                    replicas,
                    shard: None,
                });
            }
            let config_overrides: BTreeMap<String, String> = self
                .store
                .get(&config_path(&name))
                .and_then(|(data, _)| serde_json::from_slice::<Value>(&data).ok())
                .and_then(|v| serde_json::from_value(v["config"].clone()).ok())
                .unwrap_or_default();
            let mut log_config = self.defaults.log_config.clone();
            for (key, value) in &config_overrides {
                // Validated when written; a key this version does not know is kept
                // for DescribeConfigs but has no effect.
                let _ = log_config.set(key, value);
            }
            image.topic_ids.insert(id, name.clone());
            image.topics.insert(
                name.clone(),
                Arc::new(TopicImage {
                    name,
                    id,
                    partitions,
                    config_overrides,
                    log_config: Arc::new(log_config),
                }),
            );
        }
        image
    }
}

/// APPEND or SUBTRACT on a LIST topic config: the items of its override (or of
/// Kafka's default) with `value`'s items added or removed, as Kafka does.
fn alter_list_config(
    overrides: &BTreeMap<String, String>,
    key: &str,
    op: ConfigOp,
    value: Option<&str>,
) -> Result<String, ApiError> {
    let verb = if op == ConfigOp::Append {
        "append"
    } else {
        "subtract"
    };
    let definition = kafka_config_defs()
        .topic
        .get(key)
        .filter(|definition| definition.config_type == ConfigType::List)
        .ok_or_else(|| {
            ApiError::new(
                ResponseError::InvalidConfig,
                format!("Config value {verb} is not allowed for config key: {key}"),
            )
        })?;
    let current = overrides
        .get(key)
        .cloned()
        .or_else(|| definition.default.clone())
        .unwrap_or_default();
    let mut items: Vec<&str> = list_items(&current).collect();
    for item in list_items(value.unwrap_or("")) {
        if op == ConfigOp::Append && !items.contains(&item) {
            items.push(item);
        } else if op == ConfigOp::Subtract {
            items.retain(|existing| *existing != item);
        }
    }
    Ok(items.join(","))
}

/// Checks one topic config as Kafka does (a key Kafka defines, a value its type
/// and validator accept, with Kafka's messages) and applies it to `log_config`
/// where this broker acts on the key; the others are kept and described only.
fn apply_topic_config(log_config: &mut LogConfig, key: &str, value: &str) -> Result<(), ApiError> {
    let invalid = |why: String| ApiError::new(ResponseError::InvalidConfig, why);
    let definition = kafka_config_defs()
        .topic
        .get(key)
        .ok_or_else(|| invalid(format!("Unknown topic config name: {key}")))?;
    definition.validate(value).map_err(|why| {
        invalid(format!(
            "Invalid value {value} for configuration {key}: {why}"
        ))
    })?;
    if TOPIC_CONFIG_NAMES.contains(&key) {
        log_config
            .set(key, value)
            .map_err(|error| invalid(error.to_string()))?;
    }
    Ok(())
}

/// `/brokers/ids/<id>`, Kafka 3.9's version 5: every endpoint, and `host`/`port`
/// of the first PLAINTEXT one (null and -1 without one).
fn broker_registration(broker: &Broker) -> Value {
    let plaintext = broker
        .endpoints
        .iter()
        .find(|endpoint| endpoint.security_protocol == "PLAINTEXT");
    let protocols: serde_json::Map<String, Value> = broker
        .endpoints
        .iter()
        .map(|e| (e.listener_name.clone(), json!(e.security_protocol)))
        .collect();
    json!({
        "listener_security_protocol_map": protocols,
        "endpoints": broker.endpoints.iter().map(EndPoint::connection_string).collect::<Vec<_>>(),
        "jmx_port": -1,
        "features": {},
        "host": plaintext.map(|e| e.host.clone()),
        "port": plaintext.map_or(-1, |e| i32::from(e.port)),
        "timestamp": now_ms_string(),
        "version": 5,
    })
}

/// The endpoints of a `/brokers/ids/<id>` registration.
fn parse_endpoints(registration: &Value) -> Option<Vec<EndPoint>> {
    let protocols = registration["listener_security_protocol_map"].as_object()?;
    registration["endpoints"]
        .as_array()?
        .iter()
        .map(|entry| {
            let (name, address) = entry.as_str()?.split_once("://")?;
            let (host, port) = address.rsplit_once(':')?;
            Some(EndPoint {
                listener_name: name.to_owned(),
                security_protocol: protocols.get(name)?.as_str()?.to_owned(),
                host: host.trim_matches(['[', ']']).to_owned(),
                port: port.parse().ok()?,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn registration_is_kafka_3_9_version_5_with_every_endpoint() {
        let endpoint = |name: &str, host: &str, port| EndPoint {
            listener_name: name.into(),
            security_protocol: "PLAINTEXT".into(),
            host: host.into(),
            port,
        };
        let broker = Broker {
            id: 1,
            endpoints: vec![
                endpoint("INTERNAL", "::1", 19093),
                endpoint("CLIENTS", "127.0.0.1", 19092),
            ],
        };
        let registration = broker_registration(&broker);
        assert_eq!(registration["version"], 5);
        assert_eq!(
            registration["endpoints"],
            json!(["INTERNAL://[::1]:19093", "CLIENTS://127.0.0.1:19092"])
        );
        assert_eq!(
            registration["listener_security_protocol_map"],
            json!({"INTERNAL": "PLAINTEXT", "CLIENTS": "PLAINTEXT"})
        );
        // host/port: the first endpoint whose protocol is PLAINTEXT.
        assert_eq!(
            (registration["host"].clone(), registration["port"].clone()),
            (json!("::1"), json!(19093))
        );
        assert_eq!(registration["features"], json!({}));
        assert_eq!(parse_endpoints(&registration), Some(broker.endpoints));
        // Kafka 3.9's own registration (observed), read the same way.
        let kafka: Value = serde_json::from_str(r#"{"features":{},"listener_security_protocol_map":{"PLAINTEXT":"PLAINTEXT"},"endpoints":["PLAINTEXT://127.0.0.1:19092"],"rack":"r1","jmx_port":-1,"port":19092,"host":"127.0.0.1","version":5,"timestamp":"1796110880931"}"#).unwrap();
        assert_eq!(
            parse_endpoints(&kafka),
            Some(vec![endpoint("PLAINTEXT", "127.0.0.1", 19092)])
        );
    }

    fn controller(dir: &std::path::Path) -> KafkaController {
        let store = EmbeddedStore::open(dir).unwrap();
        KafkaController::startup(
            store,
            Broker {
                id: 0,
                endpoints: vec![EndPoint {
                    listener_name: "PLAINTEXT".into(),
                    security_protocol: "PLAINTEXT".into(),
                    host: "127.0.0.1".into(),
                    port: 9092,
                }],
            },
            TopicDefaults {
                num_partitions: 1,
                default_replication_factor: 1,
                log_config: LogConfig::default(),
            },
        )
        .unwrap()
    }

    #[test]
    fn topics_are_created_altered_grown_and_deleted_in_kafkas_layout() {
        let dir = tempfile::tempdir().unwrap();
        let mut c = controller(dir.path());
        let topic = NewTopic {
            name: "orders".into(),
            num_partitions: 3,
            replication_factor: -1,
            configs: vec![("cleanup.policy".into(), Some("compact".into()))],
            ..NewTopic::default()
        };
        assert_eq!(
            c.create_topics(std::slice::from_ref(&topic), false),
            vec![Ok((3, 1))]
        );
        assert_eq!(
            c.create_topics(&[topic], false)[0]
                .as_ref()
                .unwrap_err()
                .error,
            ResponseError::TopicAlreadyExists
        );
        let bad = NewTopic {
            name: "bad/name".into(),
            num_partitions: 1,
            replication_factor: 1,
            ..NewTopic::default()
        };
        assert_eq!(
            c.create_topics(&[bad], false)[0]
                .as_ref()
                .unwrap_err()
                .error,
            ResponseError::InvalidTopicException
        );
        let too_many = NewTopic {
            name: "rf".into(),
            num_partitions: 1,
            replication_factor: 3,
            ..NewTopic::default()
        };
        assert_eq!(
            c.create_topics(&[too_many], false)[0]
                .as_ref()
                .unwrap_err()
                .error,
            ResponseError::InvalidReplicationFactor
        );
        let bad_config = NewTopic {
            name: "cfg".into(),
            num_partitions: 1,
            replication_factor: 1,
            configs: vec![("retention.ms".into(), Some("soon".into()))],
            ..NewTopic::default()
        };
        assert_eq!(
            c.create_topics(&[bad_config], false)[0]
                .as_ref()
                .unwrap_err()
                .error,
            ResponseError::InvalidConfig
        );

        let state: Value = serde_json::from_slice(
            &c.store
                .get("/brokers/topics/orders/partitions/2/state")
                .unwrap()
                .0,
        )
        .unwrap();
        assert_eq!(state["leader"], 0);
        assert_eq!(state["isr"], json!([0]));

        c.create_partitions("orders", 5, None, false).unwrap();
        assert_eq!(
            c.create_partitions("orders", 4, None, false)
                .unwrap_err()
                .error,
            ResponseError::InvalidPartitions
        );
        assert_eq!(
            c.create_partitions("orders", i32::MAX, None, false)
                .unwrap_err()
                .error,
            ResponseError::InvalidPartitions,
            "no unbounded allocation from a request"
        );
        for bad in [vec![vec![]], vec![vec![7]], vec![vec![0, 0]]] {
            assert_eq!(
                c.create_partitions("orders", 6, Some(bad), false)
                    .unwrap_err()
                    .error,
                ResponseError::InvalidReplicaAssignment
            );
        }
        assert_eq!(
            c.alter_topic_config("orders/partitions", &[], false, false)
                .unwrap_err()
                .error,
            ResponseError::InvalidTopicException,
            "names become znode paths: never a path"
        );
        c.alter_topic_config(
            "orders",
            &[("retention.ms".into(), ConfigOp::Set, Some("1000".into()))],
            false,
            false,
        )
        .unwrap();
        let image = c.build_image(1);
        let orders = image.topic("orders").unwrap();
        assert_eq!(orders.partitions.len(), 5);
        assert!(orders.log_config.cleanup_policy.compact);
        assert_eq!(orders.log_config.retention_ms, 1000);
        assert_eq!(image.topic_by_id(&orders.id).unwrap().name, "orders");

        assert_eq!(
            c.delete_topics(&["orders".into(), "nope".into()])[1]
                .as_ref()
                .unwrap_err()
                .error,
            ResponseError::UnknownTopicOrPartition
        );
        assert!(c.build_image(2).topic("orders").is_none());
        assert!(c.store.children("/admin/delete_topics").unwrap().is_empty());

        // Producer ids are never reused, across restarts too.
        let first = c.allocate_producer_id().unwrap();
        assert_eq!(c.allocate_producer_id().unwrap(), first + 1);

        // The tree survives a restart; the controller epoch moves on.
        c.create_topics(
            &[NewTopic {
                name: "kept".into(),
                num_partitions: 2,
                replication_factor: 1,
                ..NewTopic::default()
            }],
            false,
        );
        c.commit().unwrap();
        drop(c);
        let c = controller(dir.path());
        assert_eq!(c.controller_epoch, 2);
        assert_eq!(c.build_image(1).topic("kept").unwrap().partitions.len(), 2);
        let mut c = c;
        assert!(c.allocate_producer_id().unwrap() > first + 1);
    }
}
