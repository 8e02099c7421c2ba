//! `SharedPartitionOffsets`: the high watermark and log start of every
//! partition this broker holds, readable from any shard. A consumer's fetch
//! arriving on one shard answers a partition of another shard that has nothing
//! new for it (its fetch offset at the high watermark) without a hop there;
//! Kafka's handler threads read a partition's high watermark the same way.

use std::collections::HashMap;
use std::sync::RwLock;

use shards::log::{SharedLogOffsets, TopicPartition};

#[derive(Default)]
pub struct SharedPartitionOffsets {
    table: RwLock<HashMap<TopicPartition, SharedLogOffsets>>,
}

impl SharedPartitionOffsets {
    /// The owning shard publishes a partition's log as it opens it.
    pub fn publish(&self, tp: &TopicPartition, offsets: SharedLogOffsets) {
        self.table.write().unwrap().insert(tp.clone(), offsets);
    }

    /// Takes `tp` out, unless a newer log of it replaced `offsets` already.
    pub fn withdraw(&self, tp: &TopicPartition, offsets: &SharedLogOffsets) {
        let mut table = self.table.write().unwrap();
        if table
            .get(tp)
            .is_some_and(|published| published.high_watermark.is(&offsets.high_watermark))
        {
            table.remove(tp);
        }
    }

    /// `tp`'s high watermark and log start offset, as its shard last moved
    /// them; None if its log's directory is offline (a read there says why).
    pub fn get(&self, tp: &TopicPartition) -> Option<(i64, i64)> {
        let table = self.table.read().unwrap();
        let offsets = table.get(tp)?;
        (!offsets.health.is_offline())
            .then(|| (offsets.high_watermark.get(), offsets.log_start_offset.get()))
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use shards::log::{LogDirHealth, LogError, SharedOffset};
    use std::path::Path;

    fn offsets(high_watermark: i64, log_start_offset: i64) -> SharedLogOffsets {
        SharedLogOffsets {
            high_watermark: SharedOffset::new(high_watermark),
            log_start_offset: SharedOffset::new(log_start_offset),
            health: LogDirHealth::new(Path::new("/data")),
        }
    }

    #[test]
    fn a_withdrawn_log_leaves_a_newer_one_of_the_same_partition_published() {
        let shared = SharedPartitionOffsets::default();
        let tp = TopicPartition::new("t", 0);
        assert_eq!(shared.get(&tp), None);
        let old = offsets(10, 2);
        shared.publish(&tp, old.clone());
        assert_eq!(shared.get(&tp), Some((10, 2)));
        // The log reopened (moved between dirs): the new one replaces it,
        // and the old one's withdrawal leaves it.
        let new = offsets(12, 2);
        shared.publish(&tp, new.clone());
        shared.withdraw(&tp, &old);
        assert_eq!(shared.get(&tp), Some((12, 2)));
        // Its directory goes offline: a read on its shard says so.
        new.health
            .on_error(LogError::KafkaStorage("disk gone".to_owned()));
        assert_eq!(shared.get(&tp), None);
        shared.withdraw(&tp, &new);
        assert_eq!(shared.get(&tp), None);
    }
}
