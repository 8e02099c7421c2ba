//! Topic configs as Kafka checks and alters them: every key Kafka defines,
//! validated with Kafka's types, validators and messages, and the
//! IncrementalAlterConfigs operations on LIST configs.

use std::collections::BTreeMap;

use shards::log::{LogConfig, TOPIC_CONFIG_NAMES};

use super::replica_assignment::validate_topic_name;
use crate::config::definitions::{kafka_config_defs, list_items, ConfigType};
use crate::config::dynamic::check_dynamic_broker_config;
use crate::metadata::kafka_zk_client::KafkaZkClient;
use crate::metadata::zk_client::{ZkClient, ZkError};
use crate::metadata::znodes::ConfigEntityZNode;
use crate::protocol::{ApiError, ResponseError};

/// A resource whose configs AlterConfigs changes.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ConfigEntity {
    Topic(String),
    /// A broker id, or `<default>` for every broker.
    Broker(String),
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

/// The overrides after `changes` (AlterConfigs replaces them all,
/// IncrementalAlterConfigs applies each operation); APPEND and SUBTRACT
/// only on a topic's LIST configs.
fn altered_overrides(
    current: BTreeMap<String, String>,
    changes: &[(String, ConfigOp, Option<String>)],
    replace_all: bool,
) -> Result<BTreeMap<String, String>, ApiError> {
    let mut overrides = if replace_all {
        BTreeMap::new()
    } else {
        current
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
    Ok(overrides)
}

/// Read-modify-write rounds before a config change gives up on writers
/// racing it.
const CONFIG_WRITE_ATTEMPTS: u32 = 5;

/// Kafka's `AdminZkClient.changeTopicConfig`, which any broker runs for
/// AlterConfigs and IncrementalAlterConfigs: the topic's overrides in
/// `/config/topics/<t>` altered and checked, then written.
pub async fn alter_topic_config<Z: ZkClient>(
    zk: &KafkaZkClient<Z>,
    defaults: &LogConfig,
    topic: &str,
    changes: &[(String, ConfigOp, Option<String>)],
    replace_all: bool,
    validate_only: bool,
) -> Result<(), ApiError> {
    validate_topic_name(topic)?;
    if zk.get_topic(topic).await?.is_none() {
        return Err(ApiError::new(
            ResponseError::UnknownTopicOrPartition,
            format!("topic '{topic}' does not exist"),
        ));
    }
    let alter = |current| {
        let overrides = altered_overrides(current, changes, replace_all)?;
        log_config_with(defaults, &overrides)?;
        Ok(overrides)
    };
    change_entity_config(zk, ConfigEntityZNode::TOPICS, topic, alter, validate_only).await
}

/// Kafka's `AdminZkClient.changeBrokerConfig`: the dynamic configs of
/// `broker` (an id, or `<default>` for every broker) altered, checked and
/// written.
pub async fn alter_broker_config<Z: ZkClient>(
    zk: &KafkaZkClient<Z>,
    broker: &str,
    changes: &[(String, ConfigOp, Option<String>)],
    replace_all: bool,
    validate_only: bool,
) -> Result<(), ApiError> {
    let alter = |current| {
        let overrides = altered_overrides(current, changes, replace_all)?;
        check_dynamic_broker_config(&overrides)?;
        Ok(overrides)
    };
    change_entity_config(zk, ConfigEntityZNode::BROKERS, broker, alter, validate_only).await
}

/// An entity's overrides in `/config/<type>/<name>` replaced by what
/// `alter` makes of them (compare-and-set on the version read, read again
/// when another broker wrote between), then a `/config/changes`
/// notification so every broker reads them again.
async fn change_entity_config<Z: ZkClient>(
    zk: &KafkaZkClient<Z>,
    entity_type: &str,
    name: &str,
    alter: impl Fn(BTreeMap<String, String>) -> Result<BTreeMap<String, String>, ApiError>,
    validate_only: bool,
) -> Result<(), ApiError> {
    let mut attempts_left = CONFIG_WRITE_ATTEMPTS;
    loop {
        let (current, version) = zk.get_entity_config(entity_type, name).await?;
        let overrides = alter(current)?;
        if validate_only {
            return Ok(());
        }
        attempts_left -= 1;
        match zk
            .set_entity_config(entity_type, name, &overrides, version)
            .await
        {
            Err(ZkError::BadVersion(_) | ZkError::NodeExists(_)) if attempts_left > 0 => continue,
            written => break written?,
        }
    }
    zk.create_config_change_notification(&format!("{entity_type}/{name}"))
        .await?;
    Ok(())
}

/// The log config of overrides read back from the store: checked when they
/// were written, so a key this version does not act on is kept (for
/// DescribeConfigs) without effect.
pub fn stored_log_config(defaults: &LogConfig, overrides: &BTreeMap<String, String>) -> LogConfig {
    let mut log_config = defaults.clone();
    for (key, value) in overrides {
        let _ = log_config.set(key, value);
    }
    log_config
}

/// The broker's defaults with `overrides` applied, each one checked.
pub fn log_config_with(
    defaults: &LogConfig,
    overrides: &BTreeMap<String, String>,
) -> Result<LogConfig, ApiError> {
    let mut log_config = defaults.clone();
    for (key, value) in overrides {
        apply_topic_config(&mut log_config, key, value)?;
    }
    Ok(log_config)
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
