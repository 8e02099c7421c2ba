//! The leader epoch cache behind `leader-epoch-checkpoint`: for each leader epoch,
//! the first offset written in it. Replicas use it (OffsetForLeaderEpoch) to find
//! where their log diverges from the leader's, instead of trusting the high
//! watermark, which is how Kafka closes the data-loss window of KIP-101.

use std::io;
use std::path::{Path, PathBuf};

use super::checkpoint::{read_checkpoint_file, write_checkpoint_file};
use super::file_names::LEADER_EPOCH_CHECKPOINT_FILE;

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct EpochEntry {
    pub epoch: i32,
    pub start_offset: i64,
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderEpochFileCache {
    path: PathBuf,
    entries: Vec<EpochEntry>,
}

impl LeaderEpochFileCache {
    pub fn load(partition_dir: &Path) -> io::Result<Self> {
        let path = partition_dir.join(LEADER_EPOCH_CHECKPOINT_FILE);
        let mut entries = Vec::new();
        for line in read_checkpoint_file(&path)?.unwrap_or_default() {
            let mut parts = line.split_whitespace();
            let parsed = (|| {
                Some(EpochEntry {
                    epoch: parts.next()?.parse().ok()?,
                    start_offset: parts.next()?.parse().ok()?,
                })
            })();
            let entry = parsed.ok_or_else(|| {
                io::Error::new(
                    io::ErrorKind::InvalidData,
                    format!("{}: bad entry {line:?}", path.display()),
                )
            })?;
            entries.push(entry);
        }
        Ok(Self { path, entries })
    }

    pub fn entries(&self) -> &[EpochEntry] {
        &self.entries
    }

    pub fn latest_epoch(&self) -> Option<i32> {
        self.entries.last().map(|entry| entry.epoch)
    }

    /// Records that `epoch` starts at `start_offset`. Entries that the new one
    /// contradicts (same or later epoch, same or later offset) are dropped.
    /// Returns whether anything changed.
    pub fn assign(&mut self, epoch: i32, start_offset: i64) -> bool {
        if epoch < 0 {
            return false;
        }
        if let Some(last) = self.entries.last() {
            if last.epoch == epoch && last.start_offset <= start_offset {
                return false;
            }
        }
        self.entries
            .retain(|entry| entry.epoch < epoch && entry.start_offset < start_offset);
        self.entries.push(EpochEntry {
            epoch,
            start_offset,
        });
        true
    }

    /// Forgets epochs starting at or after `end_offset` (the log was truncated there).
    pub fn truncate_from_end(&mut self, end_offset: i64) -> bool {
        let before = self.entries.len();
        self.entries.retain(|entry| entry.start_offset < end_offset);
        before != self.entries.len()
    }

    /// Forgets every epoch (the log was emptied). Returns whether any was known.
    pub fn clear(&mut self) -> bool {
        let had_any = !self.entries.is_empty();
        self.entries.clear();
        had_any
    }

    /// Moves the first kept epoch's start up to `start_offset` (old segments were
    /// deleted), dropping epochs that ended before it.
    pub fn truncate_from_start(&mut self, start_offset: i64) -> bool {
        let first_kept = self
            .entries
            .partition_point(|entry| entry.start_offset <= start_offset)
            .saturating_sub(1);
        let mut changed = first_kept > 0;
        self.entries.drain(..first_kept);
        if let Some(first) = self.entries.first_mut() {
            if first.start_offset < start_offset {
                first.start_offset = start_offset;
                changed = true;
            }
        }
        changed
    }

    /// OffsetForLeaderEpoch, as Kafka's `endOffsetFor`: for the latest epoch
    /// the log end; else the largest epoch at or below `requested` (or
    /// `requested` itself when every known epoch is later) and where the next
    /// epoch starts. None when `requested` is undefined or later than any epoch
    /// known here.
    pub fn end_offset_for(&self, requested: i32, log_end_offset: i64) -> Option<(i32, i64)> {
        if requested < 0 {
            return None;
        }
        if self.latest_epoch() == Some(requested) {
            return Some((requested, log_end_offset));
        }
        let at = self
            .entries
            .partition_point(|entry| entry.epoch <= requested);
        let higher = self.entries.get(at)?;
        let epoch = at
            .checked_sub(1)
            .map_or(requested, |floor| self.entries[floor].epoch);
        Some((epoch, higher.start_offset))
    }

    pub fn write(&self) -> io::Result<()> {
        let lines: Vec<String> = self
            .entries
            .iter()
            .map(|entry| format!("{} {}", entry.epoch, entry.start_offset))
            .collect();
        write_checkpoint_file(&self.path, &lines)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn assigns_truncates_and_answers_end_offsets() {
        let dir = tempfile::tempdir().unwrap();
        let mut cache = LeaderEpochFileCache::load(dir.path()).unwrap();
        assert!(cache.assign(0, 0));
        assert!(!cache.assign(0, 5));
        assert!(cache.assign(2, 10));
        assert!(cache.assign(3, 20));
        assert_eq!(cache.end_offset_for(2, 30), Some((2, 20)));
        assert_eq!(cache.end_offset_for(1, 30), Some((0, 10)));
        assert_eq!(cache.end_offset_for(3, 30), Some((3, 30)));
        assert_eq!(cache.end_offset_for(7, 30), None);
        assert_eq!(cache.end_offset_for(-1, 30), None);
        cache.write().unwrap();
        assert_eq!(LeaderEpochFileCache::load(dir.path()).unwrap(), cache);
        assert!(cache.truncate_from_end(15));
        assert_eq!(cache.latest_epoch(), Some(2));
        assert!(cache.truncate_from_start(12));
        assert_eq!(
            cache.entries(),
            &[EpochEntry {
                epoch: 2,
                start_offset: 12
            }]
        );
        // A new leader with a lower start offset replaces contradicting entries.
        assert!(cache.assign(4, 11));
        assert_eq!(cache.entries().len(), 1);
    }
}
