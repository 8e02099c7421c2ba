//! Kafka's own config definitions: every topic and broker key with its type,
//! default, importance, validator and documentation, as Kafka's jars define
//! them (`config/kafka-config-defs.tsv`, written by
//! tests/support/kafka/config-defs.sh from Kafka 4.4's and 3.9's jars; a test
//! holds the two to each other). DescribeConfigs lists these keys, and
//! CreateTopics and AlterConfigs accept a topic key only if Kafka defines it
//! and its value passes Kafka's type and validator.

use std::collections::BTreeMap;
use std::sync::OnceLock;

const DEFINITIONS: &str = include_str!("../../config/kafka-config-defs.tsv");

/// Kafka's ConfigDef.Type, with the id DescribeConfigs v3+ reports.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ConfigType {
    Boolean,
    String,
    Int,
    Short,
    Long,
    Double,
    List,
    Class,
    Password,
}

impl ConfigType {
    fn parse(name: &str) -> Self {
        match name {
            "BOOLEAN" => Self::Boolean,
            "STRING" => Self::String,
            "INT" => Self::Int,
            "SHORT" => Self::Short,
            "LONG" => Self::Long,
            "DOUBLE" => Self::Double,
            "LIST" => Self::List,
            "CLASS" => Self::Class,
            "PASSWORD" => Self::Password,
            other => panic!("kafka-config-defs.tsv: unknown type {other}"),
        }
    }

    /// DescribeConfigsResponse.ConfigType.
    pub fn response_id(self) -> i8 {
        match self {
            Self::Boolean => 1,
            Self::String => 2,
            Self::Int => 3,
            Self::Short => 4,
            Self::Long => 5,
            Self::Double => 6,
            Self::List => 7,
            Self::Class => 8,
            Self::Password => 9,
        }
    }

    pub fn is_sensitive(self) -> bool {
        self == Self::Password
    }
}

/// What Kafka's validator of a key allows, read from its `toString`.
#[derive(Debug, Clone, PartialEq)]
enum Validator {
    None,
    /// ConfigDef.Range: `[min,...]`, `[...,max]`, `[min,...,max]`.
    Range {
        min: Option<f64>,
        max: Option<f64>,
    },
    /// ValidString / ValidList: `[a, b, c]` (a LIST's every item).
    OneOf(Vec<String>),
    /// A range or one extra value, e.g. `[1,...,9] or -1`.
    RangeOr(Box<Validator>, f64),
}

impl Validator {
    fn parse(text: &str) -> Self {
        if let Some((range, extra)) = text.split_once("] or ") {
            let range = Self::parse(&format!("{range}]"));
            if let (Self::Range { .. }, Ok(extra)) = (&range, extra.trim().parse()) {
                return Self::RangeOr(Box::new(range), extra);
            }
        }
        let Some(inner) = text.strip_prefix('[').and_then(|t| t.strip_suffix(']')) else {
            return Self::None;
        };
        if inner.contains(",...") || inner.starts_with("...,") {
            let parts: Vec<&str> = inner.split(',').collect();
            let number = |s: &str| s.trim().parse::<f64>().ok();
            return match parts.as_slice() {
                [min, "..."] => Self::Range {
                    min: number(min),
                    max: None,
                },
                ["...", max] => Self::Range {
                    min: None,
                    max: number(max),
                },
                [min, "...", max] => Self::Range {
                    min: number(min),
                    max: number(max),
                },
                _ => Self::None,
            };
        }
        // Free-form descriptions ("[partitionId]:[brokerId],...") are not sets.
        if inner.contains(':') || inner.is_empty() {
            return Self::None;
        }
        Self::OneOf(inner.split(", ").map(str::to_owned).collect())
    }

    fn check(&self, number: Option<f64>, text: &str) -> Result<(), String> {
        match self {
            Self::None => Ok(()),
            Self::Range { min, max } => {
                let value = number.ok_or_else(|| format!("{text:?} is not a number"))?;
                if min.is_some_and(|min| value < min) {
                    return Err(format!("Value must be at least {}", min.unwrap()));
                }
                if max.is_some_and(|max| value > max) {
                    return Err(format!("Value must be no more than {}", max.unwrap()));
                }
                Ok(())
            }
            Self::RangeOr(range, extra) if number == Some(*extra) => Ok(()),
            Self::RangeOr(range, _) => range.check(number, text),
            Self::OneOf(allowed) => {
                if allowed.iter().any(|a| a == text) {
                    Ok(())
                } else {
                    Err(format!("String must be one of: {}", allowed.join(", ")))
                }
            }
        }
    }
}

/// One key as Kafka defines it.
#[derive(Debug, Clone)]
pub struct ConfigKey {
    pub name: &'static str,
    pub config_type: ConfigType,
    /// The default as DescribeConfigs prints it; None when Kafka's is null or
    /// the key has none.
    pub default: Option<String>,
    pub documentation: String,
    validator: Validator,
}

impl ConfigKey {
    /// Kafka's parse of `value` for this key's type and validator; the error is
    /// what Kafka's ConfigException says after "Invalid value X for configuration Y: ".
    pub fn validate(&self, value: &str) -> Result<(), String> {
        let trimmed = value.trim();
        let number = match self.config_type {
            ConfigType::Boolean => {
                if !trimmed.eq_ignore_ascii_case("true") && !trimmed.eq_ignore_ascii_case("false") {
                    return Err("Expected value to be either true or false".into());
                }
                None
            }
            ConfigType::Int => Some(
                trimmed
                    .parse::<i32>()
                    .map_err(|_| "Not a number of type INT".to_owned())? as f64,
            ),
            ConfigType::Short => Some(
                trimmed
                    .parse::<i16>()
                    .map_err(|_| "Not a number of type SHORT".to_owned())? as f64,
            ),
            ConfigType::Long => Some(
                trimmed
                    .parse::<i64>()
                    .map_err(|_| "Not a number of type LONG".to_owned())? as f64,
            ),
            ConfigType::Double => Some(
                trimmed
                    .parse::<f64>()
                    .map_err(|_| "Not a number of type DOUBLE".to_owned())?,
            ),
            ConfigType::String | ConfigType::Class | ConfigType::Password | ConfigType::List => {
                None
            }
        };
        if self.config_type == ConfigType::List {
            return list_items(trimmed)
                .try_for_each(|item| self.validator.check(item.parse().ok(), item));
        }
        self.validator.check(number, trimmed)
    }
}

/// A LIST value's items, as Kafka splits them (commas, spaces trimmed).
pub fn list_items(value: &str) -> impl Iterator<Item = &str> {
    value
        .split(',')
        .map(str::trim)
        .filter(|item| !item.is_empty())
}

/// Every topic and broker key Kafka defines.
pub struct ConfigDefs {
    /// Kafka 4's topic keys, and those only Kafka 3.9 still has (with 3.9's
    /// definition where both have a key: this broker is a 3.9 ZooKeeper-mode one).
    pub topic: BTreeMap<&'static str, ConfigKey>,
    /// Kafka 3.9's broker keys (ZooKeeper mode).
    pub broker: BTreeMap<&'static str, ConfigKey>,
    /// Topic key -> its broker synonyms, most specific first.
    topic_synonyms: BTreeMap<&'static str, Vec<&'static str>>,
}

impl ConfigDefs {
    fn parse(text: &'static str) -> Self {
        // Sections as config-defs.sh writes them: "# topic 4.4.0", "# topic 3.9.1",
        // "# broker 3.9.1", "# synonyms 4.4.0".
        let mut sections: Vec<(&str, Vec<&'static str>)> = Vec::new();
        for line in text.lines() {
            match line.strip_prefix("# ") {
                Some(header) => sections.push((header, Vec::new())),
                None => sections
                    .last_mut()
                    .expect("kafka-config-defs.tsv starts with a section header")
                    .1
                    .push(line),
            }
        }
        let section = |kind: &str, index: usize| -> &[&'static str] {
            sections
                .iter()
                .filter(|(header, _)| header.split(' ').next() == Some(kind))
                .nth(index)
                .unwrap_or_else(|| panic!("kafka-config-defs.tsv has no {kind} section {index}"))
                .1
                .as_slice()
        };
        let keys = |lines: &[&'static str]| -> BTreeMap<&'static str, ConfigKey> {
            lines
                .iter()
                .map(|line| {
                    let fields: Vec<&'static str> = line.splitn(6, '\t').collect();
                    let [name, config_type, default, _importance, validator, doc] = fields[..]
                    else {
                        panic!("kafka-config-defs.tsv: bad line {line:?}");
                    };
                    let key = ConfigKey {
                        name,
                        config_type: ConfigType::parse(config_type),
                        default: match default {
                            "<null>" | "<none>" => None,
                            default => Some(unescape(default)),
                        },
                        documentation: unescape(doc),
                        validator: Validator::parse(&unescape(validator)),
                    };
                    (name, key)
                })
                .collect()
        };
        // Kafka 4's topic keys, then 3.9's (its definitions win where both have one).
        let mut topic = keys(section("topic", 0));
        topic.extend(keys(section("topic", 1)));
        let topic_synonyms = section("synonyms", 0)
            .iter()
            .map(|line| {
                let (name, synonyms) = line
                    .split_once('\t')
                    .unwrap_or_else(|| panic!("kafka-config-defs.tsv: bad synonym {line:?}"));
                (
                    name,
                    synonyms.split(',').filter(|s| !s.is_empty()).collect(),
                )
            })
            .collect();
        Self {
            topic,
            broker: keys(section("broker", 0)),
            topic_synonyms,
        }
    }

    /// The broker keys that set a topic key's default, most specific first.
    pub fn topic_synonyms(&self, topic_key: &str) -> &[&'static str] {
        self.topic_synonyms
            .get(topic_key)
            .map_or(&[], Vec::as_slice)
    }
}

/// Kafka's DynamicBrokerConfig.brokerConfigSynonyms: the keys that set the same
/// broker setting, most specific first.
pub fn broker_synonyms(name: &str) -> Vec<&str> {
    const FAMILIES: &[&[&str]] = &[
        &["log.roll.ms", "log.roll.hours"],
        &["log.roll.jitter.ms", "log.roll.jitter.hours"],
        &["log.flush.interval.ms", "log.flush.scheduler.interval.ms"],
        &[
            "log.retention.ms",
            "log.retention.minutes",
            "log.retention.hours",
        ],
    ];
    match FAMILIES.iter().find(|family| family.contains(&name)) {
        // log.flush.scheduler.interval.ms is only a synonym of log.flush.interval.ms.
        Some(family) if family[0] == "log.flush.interval.ms" && name != family[0] => vec![name],
        Some(family) => family.to_vec(),
        None => vec![name],
    }
}

fn unescape(text: &str) -> String {
    let mut out = String::with_capacity(text.len());
    let mut chars = text.chars();
    while let Some(c) = chars.next() {
        if c != '\\' {
            out.push(c);
            continue;
        }
        match chars.next() {
            Some('n') => out.push('\n'),
            Some('t') => out.push('\t'),
            Some('r') => out.push('\r'),
            Some(other) => out.push(other),
            None => out.push('\\'),
        }
    }
    out
}

/// The definitions, parsed once.
pub fn kafka_config_defs() -> &'static ConfigDefs {
    static DEFS: OnceLock<ConfigDefs> = OnceLock::new();
    DEFS.get_or_init(|| ConfigDefs::parse(DEFINITIONS))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_kafka_key_with_kafkas_types_defaults_and_validators() {
        let defs = kafka_config_defs();
        assert!(
            defs.topic.len() >= 40,
            "4.x and 3.9 topic keys: {}",
            defs.topic.len()
        );
        assert!(
            defs.broker.len() >= 300,
            "3.9 broker keys: {}",
            defs.broker.len()
        );
        let topic = |name: &str| &defs.topic[name];
        // 3.9's definition where both have the key: small segments are allowed.
        assert!(topic("segment.bytes").validate("16384").is_ok());
        assert!(topic("segment.bytes").validate("13").is_err());
        assert!(topic("segment.bytes").validate("lots").is_err());
        assert!(topic("compression.type").validate("zstd").is_ok());
        assert!(topic("compression.type").validate("brotli").is_err());
        assert!(topic("compression.gzip.level").validate("-1").is_ok());
        assert!(topic("compression.gzip.level").validate("9").is_ok());
        assert!(topic("compression.gzip.level").validate("0").is_err());
        assert!(topic("cleanup.policy").validate("compact, delete").is_ok());
        assert!(topic("cleanup.policy").validate("compact,forever").is_err());
        assert!(topic("min.insync.replicas").validate("0").is_err());
        assert!(topic("unclean.leader.election.enable")
            .validate("TRUE")
            .is_ok());
        assert!(topic("unclean.leader.election.enable")
            .validate("yes")
            .is_err());
        assert!(topic("min.cleanable.dirty.ratio").validate("1.5").is_err());
        // Keys only one of the two versions has are both there.
        assert!(defs.topic.contains_key("message.format.version"));
        assert!(defs.topic.contains_key("remote.copy.lag.ms"));
        assert_eq!(topic("retention.ms").default.as_deref(), Some("604800000"));
        assert_eq!(topic("retention.ms").config_type, ConfigType::Long);
        assert!(topic("retention.ms").documentation.contains("retain a log"));
        assert_eq!(
            defs.topic_synonyms("retention.ms"),
            [
                "log.retention.ms",
                "log.retention.minutes",
                "log.retention.hours"
            ]
        );
        assert!(defs.broker["zookeeper.connect"].default.is_none());
        assert_eq!(
            defs.broker["ssl.keystore.password"].config_type,
            ConfigType::Password
        );
        assert_eq!(broker_synonyms("log.retention.hours").len(), 3);
        assert_eq!(
            broker_synonyms("log.flush.scheduler.interval.ms"),
            ["log.flush.scheduler.interval.ms"]
        );
        assert_eq!(broker_synonyms("num.io.threads"), ["num.io.threads"]);
    }
}
