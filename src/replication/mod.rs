//! Replicas of partitions on this shard: Kafka's `ReplicaManager` and
//! `Partition`. Handlers and the group coordinator read and write partitions
//! only through them; nothing else calls a `Log`'s append or read.

mod partition;
mod replica_manager;

pub use partition::{AppendResult, OffsetAndEpoch, Partition, ReadResult};
pub use replica_manager::ReplicaManager;
