//! Kafka's classic group protocol: membership, rebalances, committed offsets,
//! all kept in the internal topic `__consumer_offsets`.

mod coordinator;
#[allow(clippy::module_inception)]
mod group;
mod records;

pub use coordinator::{
    partition_for, CommitParams, FetchedOffset, FetchedOffsets, GroupConfig, GroupCoordinator,
    JoinParams, LeavingMember, OffsetToCommit, GROUP_METADATA_TOPIC_NAME,
};
