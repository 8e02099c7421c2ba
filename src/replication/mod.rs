//! Replicas of partitions on this shard: Kafka's `ReplicaManager` and
//! `Partition`. Handlers and the group coordinator read and write partitions
//! only through them; nothing else calls a `Log`'s append or read.
//! `HostedPartitions` is the broker-wide half: which replicas the controller
//! gave this broker (LeaderAndIsr, StopReplica), held by the control plane.
//! `PartitionState` holds Kafka's replication rules as pure functions; a
//! follower's `ReplicaFetcher` fetches from its leader, and a leader's ISR
//! changes go to the controller through the `AlterPartitionManager`.
//! `SharedPartitionOffsets` publishes every held partition's high watermark to
//! all shards.

mod alter_partition_manager;
pub mod hosted_partitions;
mod partition;
pub mod partition_state;
pub mod quota;
mod replica_fetcher;
mod replica_manager;
mod shared_offsets;

pub use partition::{
    AppendError, AppendResult, AppendTiming, OffsetAndEpoch, Partition, PartitionFetch, ReadResult,
    REQUEST_SHARE_UNITS,
};
pub use replica_manager::{Handoff, ReplicaManager};
pub use shared_offsets::SharedPartitionOffsets;
