//! Replicas of partitions on this shard: Kafka's `ReplicaManager` and
//! `Partition`. Handlers and the group coordinator read and write partitions
//! only through them; nothing else calls a `Log`'s append or read.
//! `HostedPartitions` is the broker-wide half: which replicas the controller
//! gave this broker (LeaderAndIsr, StopReplica), held by the control plane.

pub mod hosted_partitions;
mod partition;
mod replica_manager;

pub use partition::{AppendResult, OffsetAndEpoch, Partition, ReadResult};
pub use replica_manager::ReplicaManager;
