//! Cluster metadata: the store (embedded, ZooKeeper's model) and the image the
//! shards read.

pub mod image;
pub mod store;
