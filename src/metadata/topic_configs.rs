//! `TopicConfigs`: the topic overrides a ZooKeeper-mode broker read from
//! `/config/topics/<t>` (Kafka's ZkConfigRepository), for the topics it knows
//! from UpdateMetadata or hosts by LeaderAndIsr.

use std::collections::BTreeMap;
use std::sync::Arc;

use shards::log::LogConfig;

use super::kafka_zk_client::KafkaZkClient;
use super::zk_client::ZkClient;
use crate::controller::stored_log_config;

#[derive(Debug, Clone)]
struct TopicConfig {
    overrides: BTreeMap<String, String>,
    log_config: Arc<LogConfig>,
}

#[derive(Debug, Clone)]
pub struct TopicConfigs {
    defaults: Arc<LogConfig>,
    topics: BTreeMap<String, TopicConfig>,
}

impl TopicConfigs {
    pub fn new(defaults: Arc<LogConfig>) -> Self {
        Self {
            defaults,
            topics: BTreeMap::new(),
        }
    }

    /// A topic's overrides and its log config; the broker's defaults for a
    /// topic whose config is not read yet.
    pub fn get(&self, topic: &str) -> (BTreeMap<String, String>, Arc<LogConfig>) {
        match self.topics.get(topic) {
            Some(config) => (config.overrides.clone(), config.log_config.clone()),
            None => (BTreeMap::new(), self.defaults.clone()),
        }
    }

    /// Reads the config of every topic of `known` not read yet, and forgets
    /// topics no longer known.
    pub async fn load<Z: ZkClient>(&mut self, zk: &KafkaZkClient<Z>, known: &[&String]) {
        self.topics.retain(|topic, _| known.contains(&topic));
        for topic in known {
            if !self.topics.contains_key(*topic) {
                self.reload(zk, topic).await;
            }
        }
    }

    /// Reads a topic's config again (a `/config/changes` notification named it).
    pub async fn reload<Z: ZkClient>(&mut self, zk: &KafkaZkClient<Z>, topic: &str) {
        match zk.get_topic_config(topic).await {
            Ok((overrides, _)) => {
                let log_config = Arc::new(stored_log_config(&self.defaults, &overrides));
                let config = TopicConfig {
                    overrides,
                    log_config,
                };
                self.topics.insert(topic.to_owned(), config);
            }
            Err(error) => tracing::warn!(topic, %error, "cannot read the topic's config"),
        }
    }
}
