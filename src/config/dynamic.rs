//! Kafka's dynamic broker configs (DynamicBrokerConfig), the part ringbroker
//! updates while it runs: the replication throttles. They live in
//! `/config/brokers/<id>` and, for every broker, `/config/brokers/<default>`
//! (the broker's own wins), are changed with AlterConfigs and
//! IncrementalAlterConfigs on a BROKER resource, and every broker reads them
//! again on the `/config/changes` notification.

use std::collections::BTreeMap;

use crate::protocol::{ApiError, ResponseError};

pub const LEADER_REPLICATION_THROTTLED_RATE: &str = "leader.replication.throttled.rate";
pub const FOLLOWER_REPLICATION_THROTTLED_RATE: &str = "follower.replication.throttled.rate";

/// The keys this broker takes dynamically. `replica.alter.log.dirs.io.max.bytes.per.second`
/// is kept (kafka-reassign-partitions sets and clears it) but moves no replica.
pub const DYNAMIC_BROKER_KEYS: &[&str] = &[
    LEADER_REPLICATION_THROTTLED_RATE,
    FOLLOWER_REPLICATION_THROTTLED_RATE,
    "replica.alter.log.dirs.io.max.bytes.per.second",
];

/// Checks a broker entity's overrides as Kafka does: each key one that
/// can change dynamically, each value a LONG of at least 0 (Kafka's
/// DynamicConfig.Broker definitions, which KafkaConfig does not list).
pub fn check_dynamic_broker_config(overrides: &BTreeMap<String, String>) -> Result<(), ApiError> {
    let fixed: Vec<&str> = overrides
        .keys()
        .map(String::as_str)
        .filter(|key| !DYNAMIC_BROKER_KEYS.contains(key))
        .collect();
    if !fixed.is_empty() {
        return Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!("Cannot update these configs dynamically: {fixed:?}"),
        ));
    }
    for (key, value) in overrides {
        let why = match value.trim().parse::<i64>() {
            Ok(rate) if rate >= 0 => continue,
            Ok(_) => "Value must be at least 0",
            Err(_) => "Not a number of type LONG",
        };
        return Err(ApiError::new(
            ResponseError::InvalidConfig,
            format!("Invalid value {value} for configuration {key}: {why}"),
        ));
    }
    Ok(())
}

/// A broker's dynamic configs: the `<default>` entity's and its own.
#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct DynamicBrokerConfigs {
    pub defaults: BTreeMap<String, String>,
    pub own: BTreeMap<String, String>,
}

impl DynamicBrokerConfigs {
    pub fn replication_throttles(&self) -> ReplicationThrottles {
        ReplicationThrottles::of(&self.defaults, &self.own)
    }
}

/// The replication rates in effect, in bytes per second (None: unbounded,
/// Kafka's Long.MAX_VALUE default).
#[derive(Debug, Clone, Copy, Default, PartialEq, Eq)]
pub struct ReplicationThrottles {
    pub leader_bytes_per_second: Option<u64>,
    pub follower_bytes_per_second: Option<u64>,
}

impl ReplicationThrottles {
    /// From the `<default>` broker entity's overrides and this broker's own.
    pub fn of(defaults: &BTreeMap<String, String>, own: &BTreeMap<String, String>) -> Self {
        let rate = |key: &str| {
            let value = own.get(key).or_else(|| defaults.get(key))?;
            value
                .trim()
                .parse::<u64>()
                .ok()
                .filter(|rate| *rate < i64::MAX as u64)
        };
        Self {
            leader_bytes_per_second: rate(LEADER_REPLICATION_THROTTLED_RATE),
            follower_bytes_per_second: rate(FOLLOWER_REPLICATION_THROTTLED_RATE),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn overrides(entries: &[(&str, &str)]) -> BTreeMap<String, String> {
        entries
            .iter()
            .map(|(k, v)| (k.to_string(), v.to_string()))
            .collect()
    }

    #[test]
    fn only_the_throttles_change_dynamically_and_are_checked() {
        let ok = overrides(&[(LEADER_REPLICATION_THROTTLED_RATE, "1000")]);
        assert!(check_dynamic_broker_config(&ok).is_ok());
        let fixed = overrides(&[("log.retention.ms", "1000")]);
        let error = check_dynamic_broker_config(&fixed).unwrap_err();
        assert_eq!(error.error, ResponseError::InvalidRequest);
        let bad = overrides(&[(FOLLOWER_REPLICATION_THROTTLED_RATE, "fast")]);
        let error = check_dynamic_broker_config(&bad).unwrap_err();
        assert_eq!(error.error, ResponseError::InvalidConfig);
    }

    #[test]
    fn the_brokers_own_rate_wins_over_the_default_entity() {
        let defaults = overrides(&[
            (LEADER_REPLICATION_THROTTLED_RATE, "100"),
            (FOLLOWER_REPLICATION_THROTTLED_RATE, "200"),
        ]);
        let own = overrides(&[(LEADER_REPLICATION_THROTTLED_RATE, "50")]);
        let throttles = ReplicationThrottles::of(&defaults, &own);
        assert_eq!(throttles.leader_bytes_per_second, Some(50));
        assert_eq!(throttles.follower_bytes_per_second, Some(200));
        let unbounded = ReplicationThrottles::of(&BTreeMap::new(), &BTreeMap::new());
        assert_eq!(unbounded, ReplicationThrottles::default());
    }
}
