//! Partition -> shard placement: decided when a replica is created (the shard
//! holding the fewest partitions), persisted, and stable across restarts.

use std::collections::BTreeMap;
use std::io;
use std::path::{Path, PathBuf};
use std::sync::Mutex;

use tracing::warn;

use crate::log::{read_checkpoint_file, write_checkpoint_file, TopicPartition};

pub const SHARD_PLACEMENT_FILE: &str = "shard-placement-checkpoint";

pub struct ShardPlacement {
    nr_shards: usize,
    /// Copies of the table are kept in every log directory.
    files: Vec<PathBuf>,
    table: Mutex<BTreeMap<TopicPartition, usize>>,
    /// Held while the files are written (the table is not: its readers never
    /// wait for a disk), so writes land in the order of their snapshots.
    writing: Mutex<()>,
}

impl ShardPlacement {
    /// Loads the table from the first log directory that has one. Entries for
    /// shards that no longer exist (fewer cores configured) are placed again.
    pub fn load(log_dirs: &[PathBuf], nr_shards: usize) -> io::Result<Self> {
        assert!(nr_shards > 0);
        let files: Vec<PathBuf> = log_dirs
            .iter()
            .map(|d| d.join(SHARD_PLACEMENT_FILE))
            .collect();
        let mut table = BTreeMap::new();
        for file in &files {
            match read_checkpoint_file(file) {
                Ok(Some(lines)) => {
                    for line in lines {
                        let parts: Vec<&str> = line.split_whitespace().collect();
                        if let [topic, partition, shard] = parts.as_slice() {
                            if let (Ok(partition), Ok(shard)) =
                                (partition.parse(), shard.parse::<usize>())
                            {
                                if shard < nr_shards {
                                    table.insert(TopicPartition::new(*topic, partition), shard);
                                }
                            }
                        }
                    }
                    break;
                }
                Ok(None) => continue,
                Err(error) => warn!(file = %file.display(), %error, "unreadable shard placement"),
            }
        }
        Ok(Self {
            nr_shards,
            files,
            table: Mutex::new(table),
            writing: Mutex::new(()),
        })
    }

    pub fn nr_shards(&self) -> usize {
        self.nr_shards
    }

    pub fn shard_of(&self, tp: &TopicPartition) -> Option<usize> {
        self.table.lock().unwrap().get(tp).copied()
    }

    /// The partition's shard, placing it on the least loaded shard (lowest id on
    /// ties) and persisting the table if it is new.
    pub fn assign(&self, tp: &TopicPartition) -> io::Result<usize> {
        Ok(self.assign_all(std::slice::from_ref(tp), None)?[0])
    }

    /// Places every partition not placed yet, on `preferred` if given (the
    /// shard a lightly loaded broker gathers on), else each on the least
    /// loaded shard; persists the table once.
    pub fn assign_all(
        &self,
        partitions: &[TopicPartition],
        preferred: Option<usize>,
    ) -> io::Result<Vec<usize>> {
        assert!(preferred.is_none_or(|shard| shard < self.nr_shards));
        let mut table = self.table.lock().unwrap();
        let mut counts = vec![0usize; self.nr_shards];
        for shard in table.values() {
            counts[*shard] += 1;
        }
        let mut changed = false;
        let shards = partitions
            .iter()
            .map(|tp| {
                *table.entry(tp.clone()).or_insert_with(|| {
                    let shard = preferred
                        .unwrap_or_else(|| (0..self.nr_shards).min_by_key(|&s| counts[s]).unwrap());
                    counts[shard] += 1;
                    changed = true;
                    shard
                })
            })
            .collect();
        drop(table);
        if changed {
            self.persist()?;
        }
        Ok(shards)
    }

    /// Places an already placed partition on `shard` (a shard move). Not
    /// persisted: `persist` follows, off the path of the move, and a restart
    /// before it only starts the partition on its old shard.
    pub fn move_to(&self, tp: &TopicPartition, shard: usize) -> io::Result<()> {
        assert!(shard < self.nr_shards);
        match self.table.lock().unwrap().get_mut(tp) {
            Some(placed) => {
                *placed = shard;
                Ok(())
            }
            None => Err(io::Error::new(
                io::ErrorKind::NotFound,
                format!("{tp} is not placed"),
            )),
        }
    }

    /// Writes the table as it is.
    pub fn persist(&self) -> io::Result<()> {
        let _writing = self.writing.lock().unwrap();
        let table = self.table.lock().unwrap().clone();
        self.persist_table(&table)
    }

    pub fn remove(&self, tp: &TopicPartition) -> io::Result<()> {
        let removed = self.table.lock().unwrap().remove(tp).is_some();
        if removed {
            self.persist()?;
        }
        Ok(())
    }

    fn persist_table(&self, table: &BTreeMap<TopicPartition, usize>) -> io::Result<()> {
        let lines: Vec<String> = table
            .iter()
            .map(|(tp, shard)| format!("{} {} {shard}", tp.topic, tp.partition))
            .collect();
        let mut written = 0;
        let mut last_error = None;
        for file in &self.files {
            if file.parent().is_some_and(Path::exists) {
                match write_checkpoint_file(file, &lines) {
                    Ok(()) => written += 1,
                    Err(error) => last_error = Some(error),
                }
            }
        }
        match (written, last_error) {
            (0, Some(error)) => Err(error),
            _ => Ok(()),
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn fewest_first_and_stable_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().to_owned()];
        let placement = ShardPlacement::load(&dirs, 3).unwrap();
        let shards: Vec<usize> = (0..7)
            .map(|p| placement.assign(&TopicPartition::new("t", p)).unwrap())
            .collect();
        assert_eq!(shards, vec![0, 1, 2, 0, 1, 2, 0]);
        placement.remove(&TopicPartition::new("t", 1)).unwrap();
        assert_eq!(placement.assign(&TopicPartition::new("u", 0)).unwrap(), 1);

        // A broker gathered on one shard places new partitions there.
        let gathered = [TopicPartition::new("v", 0), TopicPartition::new("v", 1)];
        assert_eq!(
            placement.assign_all(&gathered, Some(2)).unwrap(),
            vec![2, 2]
        );

        let reloaded = ShardPlacement::load(&dirs, 3).unwrap();
        for p in [0, 2, 3, 4, 5, 6] {
            let tp = TopicPartition::new("t", p);
            assert_eq!(reloaded.shard_of(&tp), placement.shard_of(&tp));
        }
        // With fewer shards, partitions on vanished shards are placed again.
        let shrunk = ShardPlacement::load(&dirs, 2).unwrap();
        assert_eq!(shrunk.shard_of(&TopicPartition::new("t", 2)), None);
        assert_eq!(shrunk.shard_of(&TopicPartition::new("t", 3)), Some(0));
    }

    #[test]
    fn a_moved_partition_stays_moved_across_restarts() {
        let dir = tempfile::tempdir().unwrap();
        let dirs = vec![dir.path().to_owned()];
        let placement = ShardPlacement::load(&dirs, 2).unwrap();
        let tp = TopicPartition::new("t", 0);
        assert_eq!(placement.assign(&tp).unwrap(), 0);
        placement.move_to(&tp, 1).unwrap();
        assert_eq!(placement.shard_of(&tp), Some(1));
        placement.persist().unwrap();
        let unplaced = TopicPartition::new("t", 1);
        assert!(placement.move_to(&unplaced, 1).is_err());
        assert_eq!(placement.shard_of(&unplaced), None);
        let reloaded = ShardPlacement::load(&dirs, 2).unwrap();
        assert_eq!(reloaded.shard_of(&tp), Some(1));
    }
}
