//! What DescribeConfigs says of each key, by Kafka's rules (its ConfigHelper):
//! the value in effect, where it comes from (the topic's override, the
//! broker's server.properties, or the default), and the synonyms behind it,
//! most specific first. Pure: the handler hands in the broker's properties and
//! the topic's state.

use std::collections::BTreeMap;

use shards::log::{LogConfig, TOPIC_CONFIG_NAMES};

use super::definitions::{broker_synonyms, kafka_config_defs, ConfigKey, ConfigType};
use super::dynamic::{DynamicBrokerConfigs, DYNAMIC_BROKER_KEYS};

/// Kafka's DescribeConfigsResponse.ConfigSource, by Kafka's names.
#[allow(clippy::enum_variant_names)]
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigSource {
    TopicConfig = 1,
    DynamicBrokerConfig = 2,
    DynamicDefaultBrokerConfig = 3,
    StaticBrokerConfig = 4,
    DefaultConfig = 5,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigSynonym {
    pub name: String,
    pub value: Option<String>,
    pub source: ConfigSource,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ConfigEntry {
    pub name: String,
    /// None for sensitive keys and null values.
    pub value: Option<String>,
    pub source: ConfigSource,
    pub is_sensitive: bool,
    pub read_only: bool,
    pub config_type: ConfigType,
    pub synonyms: Vec<ConfigSynonym>,
    pub documentation: String,
}

impl ConfigEntry {
    /// Its source is its first synonym's, as in Kafka; the default without one.
    fn new(
        key: &ConfigKey,
        value: Option<String>,
        synonyms: Vec<ConfigSynonym>,
        read_only: bool,
    ) -> Self {
        Self {
            name: key.name.to_owned(),
            value,
            source: synonyms
                .first()
                .map_or(ConfigSource::DefaultConfig, |s| s.source),
            is_sensitive: key.config_type.is_sensitive(),
            read_only,
            config_type: key.config_type,
            synonyms,
            documentation: key.documentation.clone(),
        }
    }
}

/// Where ringbroker's default differs from Kafka 3.9's: Kafka 4's bound on
/// future timestamps (KIP-1030), which `LogConfig` keeps; the ZooKeeper
/// session (`DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS`), and the connection
/// timeout Kafka ships in server.properties instead of the session's.
const RINGBROKER_DEFAULTS: &[(&str, &str)] = &[
    ("log.message.timestamp.after.max.ms", "3600000"),
    ("zookeeper.session.timeout.ms", "2000"),
    ("zookeeper.connection.timeout.ms", "18000"),
];

/// A broker key's default as this broker has it.
fn broker_default(key: &ConfigKey) -> Option<String> {
    RINGBROKER_DEFAULTS
        .iter()
        .find(|(name, _)| *name == key.name)
        .map(|(_, value)| (*value).to_owned())
        .or_else(|| key.default.clone())
}

/// Kafka's configSynonyms: each name's static value, then each name's default,
/// from the first entry named `name` on.
fn synonyms_of(
    name: &str,
    properties: &BTreeMap<String, String>,
    sensitive: bool,
) -> Vec<ConfigSynonym> {
    let defs = kafka_config_defs();
    let names = broker_synonyms(name);
    let hide = |value: Option<String>| if sensitive { None } else { value };
    let statics = names.iter().filter_map(|n| {
        properties.get(*n).map(|value| ConfigSynonym {
            name: (*n).to_owned(),
            value: hide(Some(value.clone())),
            source: ConfigSource::StaticBrokerConfig,
        })
    });
    let defaults = names.iter().filter_map(|n| {
        let default = broker_default(defs.broker.get(*n)?)?;
        Some(ConfigSynonym {
            name: (*n).to_owned(),
            value: hide(Some(default)),
            source: ConfigSource::DefaultConfig,
        })
    });
    statics
        .chain(defaults)
        .skip_while(|synonym| synonym.name != name)
        .collect()
}

/// Every topic key Kafka defines (or those `wanted`), for a topic with these
/// overrides and this effective log config.
pub fn topic_entries(
    overrides: &BTreeMap<String, String>,
    log_config: &LogConfig,
    properties: &BTreeMap<String, String>,
    wanted: impl Fn(&str) -> bool,
) -> Vec<ConfigEntry> {
    let defs = kafka_config_defs();
    defs.topic
        .values()
        .filter(|key| wanted(key.name))
        .map(|key| {
            let sensitive = key.config_type.is_sensitive();
            let mut synonyms = defs
                .topic_synonyms(key.name)
                .first()
                .map(|primary| synonyms_of(primary, properties, sensitive))
                .unwrap_or_default();
            let value = if TOPIC_CONFIG_NAMES.contains(&key.name) {
                log_config.value_of(key.name)
            } else {
                overrides
                    .get(key.name)
                    .cloned()
                    .or_else(|| synonyms.first().and_then(|s| s.value.clone()))
                    .or_else(|| key.default.clone())
            };
            let value = if sensitive { None } else { value };
            if overrides.contains_key(key.name) {
                synonyms.insert(
                    0,
                    ConfigSynonym {
                        name: key.name.to_owned(),
                        value: value.clone(),
                        source: ConfigSource::TopicConfig,
                    },
                );
            }
            ConfigEntry::new(key, value, synonyms, false)
        })
        .collect()
}

/// Every broker key Kafka 3.9 defines (or those `wanted`), from this broker's
/// properties. None is dynamic here, so all are read-only.
pub fn broker_entries(
    properties: &BTreeMap<String, String>,
    wanted: impl Fn(&str) -> bool,
) -> Vec<ConfigEntry> {
    kafka_config_defs()
        .broker
        .values()
        .filter(|key| wanted(key.name))
        .map(|key| {
            let sensitive = key.config_type.is_sensitive();
            let synonyms = synonyms_of(key.name, properties, sensitive);
            let value = properties
                .get(key.name)
                .cloned()
                .or_else(|| broker_default(key))
                .filter(|_| !sensitive);
            ConfigEntry::new(key, value, synonyms, true)
        })
        .collect()
}

/// The dynamic configs set for a broker (`per_broker`: its own, then the
/// `<default>` entity's) or, without it, for every broker: each with its
/// synonyms, most specific first. Kafka's DynamicConfig keys are LONGs.
pub fn dynamic_broker_entries(
    configs: &DynamicBrokerConfigs,
    per_broker: bool,
    wanted: impl Fn(&str) -> bool,
) -> Vec<ConfigEntry> {
    DYNAMIC_BROKER_KEYS
        .iter()
        .filter(|key| wanted(key))
        .filter_map(|key| {
            let own = per_broker
                .then(|| configs.own.get(*key))
                .flatten()
                .map(|value| (value, ConfigSource::DynamicBrokerConfig));
            let default = configs
                .defaults
                .get(*key)
                .map(|value| (value, ConfigSource::DynamicDefaultBrokerConfig));
            let synonyms: Vec<ConfigSynonym> = own
                .into_iter()
                .chain(default)
                .map(|(value, source)| ConfigSynonym {
                    name: key.to_string(),
                    value: Some(value.clone()),
                    source,
                })
                .collect();
            let first = synonyms.first()?;
            Some(ConfigEntry {
                name: key.to_string(),
                value: first.value.clone(),
                source: first.source,
                is_sensitive: false,
                read_only: false,
                config_type: ConfigType::Long,
                documentation: "A dynamic broker config (replication quotas).".into(),
                synonyms,
            })
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn properties(text: &str) -> BTreeMap<String, String> {
        super::super::parse_properties(text)
    }

    #[test]
    fn a_topic_key_comes_from_its_override_then_the_broker_then_the_default() {
        let broker = properties("log.retention.ms=7200000\nlog.retention.hours=24\n");
        let mut log_config = LogConfig::default();
        log_config.set("retention.ms", "7200000").unwrap();
        let entries = topic_entries(&BTreeMap::new(), &log_config, &broker, |_| true);
        let retention = entries.iter().find(|e| e.name == "retention.ms").unwrap();
        assert_eq!(retention.value.as_deref(), Some("7200000"));
        assert_eq!(retention.source, ConfigSource::StaticBrokerConfig);
        let names: Vec<(&str, ConfigSource)> = retention
            .synonyms
            .iter()
            .map(|s| (s.name.as_str(), s.source))
            .collect();
        assert_eq!(
            names,
            [
                ("log.retention.ms", ConfigSource::StaticBrokerConfig),
                ("log.retention.hours", ConfigSource::StaticBrokerConfig),
                ("log.retention.hours", ConfigSource::DefaultConfig),
            ]
        );

        let overrides = BTreeMap::from([
            ("retention.ms".to_owned(), "1000".to_owned()),
            (
                "message.downconversion.enable".to_owned(),
                "false".to_owned(),
            ),
        ]);
        log_config.set("retention.ms", "1000").unwrap();
        let entries = topic_entries(&overrides, &log_config, &broker, |_| true);
        let retention = entries.iter().find(|e| e.name == "retention.ms").unwrap();
        assert_eq!(retention.source, ConfigSource::TopicConfig);
        assert_eq!(retention.synonyms[0].value.as_deref(), Some("1000"));
        // A key this broker does not act on is stored and described all the same.
        let downconversion = entries
            .iter()
            .find(|e| e.name == "message.downconversion.enable")
            .unwrap();
        assert_eq!(
            (downconversion.value.as_deref(), downconversion.source),
            (Some("false"), ConfigSource::TopicConfig)
        );
        let defaulted = entries
            .iter()
            .find(|e| e.name == "segment.jitter.ms")
            .unwrap();
        assert_eq!(
            (defaulted.value.as_deref(), defaulted.source),
            (Some("0"), ConfigSource::DefaultConfig)
        );
        assert_eq!(entries.len(), kafka_config_defs().topic.len());
    }

    #[test]
    fn the_zookeeper_defaults_described_are_the_ones_in_effect() {
        let defs = kafka_config_defs();
        let described = |name: &str| broker_default(defs.broker.get(name).unwrap());
        let session_ms = crate::config::DEFAULT_ZOOKEEPER_SESSION_TIMEOUT_MS.to_string();
        assert_eq!(described("zookeeper.session.timeout.ms"), Some(session_ms));
        assert_eq!(
            described("zookeeper.connection.timeout.ms").as_deref(),
            Some("18000")
        );
    }

    #[test]
    fn broker_keys_are_static_or_default_and_secrets_are_hidden() {
        let broker = properties("broker.id=3\nssl.keystore.password=secret\n");
        let entries = broker_entries(&broker, |_| true);
        let by_name = |name: &str| entries.iter().find(|e| e.name == name).unwrap();
        assert_eq!(by_name("broker.id").value.as_deref(), Some("3"));
        assert_eq!(
            by_name("broker.id").source,
            ConfigSource::StaticBrokerConfig
        );
        let password = by_name("ssl.keystore.password");
        assert!(password.is_sensitive && password.value.is_none());
        assert!(password.synonyms.iter().all(|s| s.value.is_none()));
        assert_eq!(
            by_name("num.io.threads").source,
            ConfigSource::DefaultConfig
        );
        assert_eq!(by_name("num.io.threads").value.as_deref(), Some("8"));
        assert!(entries.iter().all(|e| e.read_only));
        assert_eq!(entries.len(), kafka_config_defs().broker.len());
    }

    /// The defaults the log acts on are Kafka's (3.9's definition where it has
    /// the key), but for those `RINGBROKER_DEFAULTS` names.
    #[test]
    fn the_log_defaults_are_kafkas() {
        let defs = kafka_config_defs();
        let defaults = LogConfig::default();
        for name in TOPIC_CONFIG_NAMES {
            let primary = defs.topic_synonyms(name).first().copied();
            let expected = primary
                .and_then(|p| RINGBROKER_DEFAULTS.iter().find(|(n, _)| *n == p))
                .map(|(_, v)| (*v).to_owned())
                .or_else(|| defs.topic[name].default.clone());
            assert_eq!(defaults.value_of(name), expected, "{name}");
        }
    }

    #[test]
    fn dynamic_configs_come_from_the_broker_then_the_default_entity() {
        let configs = DynamicBrokerConfigs {
            defaults: [("leader.replication.throttled.rate".into(), "100".into())].into(),
            own: [
                ("leader.replication.throttled.rate".into(), "50".into()),
                ("follower.replication.throttled.rate".into(), "70".into()),
            ]
            .into(),
        };
        let entries = dynamic_broker_entries(&configs, true, |_| true);
        let leader = &entries[0];
        assert_eq!(leader.name, "leader.replication.throttled.rate");
        assert_eq!(leader.value.as_deref(), Some("50"));
        assert_eq!(leader.source, ConfigSource::DynamicBrokerConfig);
        assert_eq!(
            leader.synonyms[1].source,
            ConfigSource::DynamicDefaultBrokerConfig
        );
        assert_eq!(entries.len(), 2, "unset keys are not described");
        // The cluster's defaults alone.
        let defaults = dynamic_broker_entries(&configs, false, |_| true);
        assert_eq!(defaults.len(), 1);
        assert_eq!(defaults[0].value.as_deref(), Some("100"));
        assert_eq!(defaults[0].source, ConfigSource::DynamicDefaultBrokerConfig);
    }
}
