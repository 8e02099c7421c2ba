//! Cluster metadata: the `ZkClient` interface and its embedded store,
//! Kafka's znodes typed and read and written through `KafkaZkClient`, and the
//! image the shards read.

pub mod cache;
pub mod image;
pub mod kafka_zk_client;
pub mod store;
pub mod topic_configs;
pub mod zk_client;
pub mod znodes;
pub mod zookeeper;
