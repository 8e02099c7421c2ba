//! Kafka's sparse segment indexes: `.index` (relative offset u32, position u32) and
//! `.timeindex` (timestamp i64, relative offset u32), big-endian, exactly
//! `entries * entry_size` bytes long so Kafka's own tools read them.
//!
//! Entries live in memory for lookups. New entries reach the file in batches
//! (like Kafka's mmap, the file may lag the log until a flush or roll); after a
//! crash, recovery rebuilds the index of every segment past the recovery point,
//! and a missing or insane file is rebuilt from its segment.

use std::io;
use std::path::Path;
use std::rc::Rc;

use super::file::{FileHandoff, SegmentFile};

pub trait IndexEntry: Copy + std::fmt::Debug {
    const SIZE_BYTES: usize;
    fn encode(&self, base_offset: i64, out: &mut Vec<u8>);
    fn decode(buf: &[u8], base_offset: i64) -> Self;
    fn offset(&self) -> i64;
}

/// An `.index` entry: the last offset of a batch and the batch's file position.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct OffsetPosition {
    pub offset: i64,
    pub position: u32,
}

/// A `.timeindex` entry: the largest timestamp so far and the offset holding it.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct TimestampOffset {
    pub timestamp: i64,
    pub offset: i64,
}

impl IndexEntry for OffsetPosition {
    const SIZE_BYTES: usize = 8;
    fn encode(&self, base_offset: i64, out: &mut Vec<u8>) {
        out.extend_from_slice(&((self.offset - base_offset) as u32).to_be_bytes());
        out.extend_from_slice(&self.position.to_be_bytes());
    }
    fn decode(buf: &[u8], base_offset: i64) -> Self {
        Self {
            offset: base_offset + u32::from_be_bytes(buf[0..4].try_into().unwrap()) as i64,
            position: u32::from_be_bytes(buf[4..8].try_into().unwrap()),
        }
    }
    fn offset(&self) -> i64 {
        self.offset
    }
}

impl IndexEntry for TimestampOffset {
    const SIZE_BYTES: usize = 12;
    fn encode(&self, base_offset: i64, out: &mut Vec<u8>) {
        out.extend_from_slice(&self.timestamp.to_be_bytes());
        out.extend_from_slice(&((self.offset - base_offset) as u32).to_be_bytes());
    }
    fn decode(buf: &[u8], base_offset: i64) -> Self {
        Self {
            timestamp: i64::from_be_bytes(buf[0..8].try_into().unwrap()),
            offset: base_offset + u32::from_be_bytes(buf[8..12].try_into().unwrap()) as i64,
        }
    }
    fn offset(&self) -> i64 {
        self.offset
    }
}

/// A pending write produced by a mutation; the caller applies it after
/// releasing its borrow of the index.
pub struct IndexWrite {
    pub file: Rc<SegmentFile>,
    pub bytes: Vec<u8>,
    pub position: u64,
}

impl IndexWrite {
    pub fn apply(self) -> io::Result<()> {
        self.file.write_all_at(&self.bytes, self.position)
    }
}

/// An index as one shard hands it to another with its log: the file and
/// its entries, every one written.
#[derive(Debug)]
pub struct IndexHandoff<E> {
    file: FileHandoff,
    entries: Vec<E>,
    max_entries: usize,
}

pub struct IndexFile<E: IndexEntry> {
    base_offset: i64,
    file: Rc<SegmentFile>,
    entries: Vec<E>,
    /// Entries already handed out to be written to the file.
    written_entries: usize,
    max_entries: usize,
}

impl<E: IndexEntry> IndexFile<E> {
    pub async fn create(path: &Path, base_offset: i64, max_entries: usize) -> io::Result<Self> {
        Ok(Self::empty(
            SegmentFile::create(path).await?,
            base_offset,
            max_entries,
        ))
    }

    /// An index with no entries, in `file` (created empty).
    pub fn empty(file: SegmentFile, base_offset: i64, max_entries: usize) -> Self {
        Self {
            base_offset,
            file: Rc::new(file),
            entries: Vec::new(),
            written_entries: 0,
            max_entries: max_entries.max(1),
        }
    }

    /// Opens an existing index; Ok(None) when its length is not a whole number of
    /// entries (Kafka's first sanity check), so the caller rebuilds it.
    pub async fn open(
        path: &Path,
        base_offset: i64,
        max_entries: usize,
    ) -> io::Result<Option<Self>> {
        let file = SegmentFile::open(path).await?;
        let size = file.size_bytes().await? as usize;
        if size % E::SIZE_BYTES != 0 {
            return Ok(None);
        }
        let bytes = file.read_exact_at(0, size).await?;
        let entries: Vec<E> = bytes
            .chunks_exact(E::SIZE_BYTES)
            .map(|chunk| E::decode(chunk, base_offset))
            .collect();
        Ok(Some(Self {
            base_offset,
            file: Rc::new(file),
            written_entries: entries.len(),
            entries,
            max_entries: max_entries.max(1),
        }))
    }

    /// Gives the file (a duplicate descriptor) and the entries to another
    /// shard; this index is left empty, its log out of service.
    pub fn hand_off(&mut self) -> io::Result<IndexHandoff<E>> {
        assert_eq!(self.pending_entries(), 0, "an index is handed off written");
        let file = self.file.hand_off()?;
        self.written_entries = 0;
        Ok(IndexHandoff {
            file,
            entries: std::mem::take(&mut self.entries),
            max_entries: self.max_entries,
        })
    }

    /// The index another shard handed off, on this shard.
    pub fn take_up(handoff: IndexHandoff<E>, base_offset: i64) -> Self {
        Self {
            base_offset,
            file: Rc::new(SegmentFile::take_up(handoff.file)),
            written_entries: handoff.entries.len(),
            entries: handoff.entries,
            max_entries: handoff.max_entries,
        }
    }

    pub fn entries(&self) -> &[E] {
        &self.entries
    }
    pub fn last(&self) -> Option<E> {
        self.entries.last().copied()
    }
    pub fn is_full(&self) -> bool {
        self.entries.len() >= self.max_entries
    }
    pub fn file(&self) -> &Rc<SegmentFile> {
        &self.file
    }
    pub fn size_bytes(&self) -> u64 {
        (self.entries.len() * E::SIZE_BYTES) as u64
    }

    pub fn push(&mut self, entry: E) {
        assert!(entry.offset() >= self.base_offset);
        assert!(entry.offset() - self.base_offset <= u32::MAX as i64);
        assert!(self
            .last()
            .is_none_or(|last| last.offset() < entry.offset()));
        self.entries.push(entry);
    }

    /// Entries not yet written to the file.
    pub fn pending_entries(&self) -> usize {
        self.entries.len() - self.written_entries
    }

    /// The write that brings the file up to date with the entries, if any.
    pub fn take_pending_write(&mut self) -> Option<IndexWrite> {
        if self.pending_entries() == 0 {
            return None;
        }
        let mut bytes = Vec::with_capacity(self.pending_entries() * E::SIZE_BYTES);
        for entry in &self.entries[self.written_entries..] {
            entry.encode(self.base_offset, &mut bytes);
        }
        let position = (self.written_entries * E::SIZE_BYTES) as u64;
        self.written_entries = self.entries.len();
        Some(IndexWrite {
            file: self.file.clone(),
            bytes,
            position,
        })
    }

    /// Drops every entry whose offset is `>= offset`; returns the new file size.
    pub fn truncate_from_offset(&mut self, offset: i64) -> u64 {
        let keep = self
            .entries
            .partition_point(|entry| entry.offset() < offset);
        self.entries.truncate(keep);
        self.written_entries = self.written_entries.min(keep);
        self.size_bytes()
    }

    pub fn clear(&mut self) {
        self.entries.clear();
        self.written_entries = 0;
    }

    /// Largest entry satisfying `is_at_or_before` (entries are sorted on it).
    fn floor(&self, is_at_or_before: impl Fn(&E) -> bool) -> Option<E> {
        let count = self.entries.partition_point(is_at_or_before);
        count.checked_sub(1).map(|at| self.entries[at])
    }
}

pub type OffsetIndex = IndexFile<OffsetPosition>;
pub type TimeIndex = IndexFile<TimestampOffset>;

impl IndexFile<OffsetPosition> {
    /// Where to start scanning for `target`: the last indexed batch ending at or
    /// before it, or the start of the segment.
    pub fn lookup(&self, target: i64) -> OffsetPosition {
        self.floor(|entry| entry.offset <= target)
            .unwrap_or(OffsetPosition {
                offset: self.base_offset,
                position: 0,
            })
    }

    /// The last indexed batch starting at or before `position`.
    pub fn lookup_by_position(&self, position: u32) -> Option<OffsetPosition> {
        self.floor(|entry| entry.position <= position)
    }

    /// Entries strictly increase in offset and position, and point inside the segment.
    pub fn is_sane(&self, segment_size_bytes: u64) -> bool {
        self.entries
            .windows(2)
            .all(|pair| pair[0].offset < pair[1].offset && pair[0].position < pair[1].position)
            && self.entries.iter().all(|entry| {
                entry.offset >= self.base_offset && (entry.position as u64) < segment_size_bytes
            })
    }
}

impl IndexFile<TimestampOffset> {
    /// Adds an entry only when the timestamp moves forward, as Kafka does.
    pub fn maybe_push(&mut self, entry: TimestampOffset) -> bool {
        match self.last() {
            Some(last) if entry.timestamp <= last.timestamp || entry.offset <= last.offset => false,
            _ => {
                self.push(entry);
                true
            }
        }
    }

    /// The last entry whose timestamp is at or before `timestamp`.
    pub fn lookup(&self, timestamp: i64) -> Option<TimestampOffset> {
        self.floor(|entry| entry.timestamp <= timestamp)
    }

    pub fn is_sane(&self, next_offset: i64) -> bool {
        self.entries
            .windows(2)
            .all(|pair| pair[0].timestamp < pair[1].timestamp && pair[0].offset < pair[1].offset)
            && self.entries.iter().all(|entry| {
                entry.offset >= self.base_offset
                    && entry.offset < next_offset.max(self.base_offset + 1)
            })
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn offset_index_round_trips_and_looks_up() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000100.index");
        crate::test_support::run(async move {
            let mut index = OffsetIndex::create(&path, 100, 4).await.unwrap();
            for (offset, position) in [(104, 0u32), (110, 4096), (120, 8200)] {
                index.push(OffsetPosition { offset, position });
            }
            assert_eq!(index.pending_entries(), 3);
            index.take_pending_write().unwrap().apply().unwrap();
            assert!(index.take_pending_write().is_none());
            assert_eq!(index.lookup(99).position, 0);
            assert_eq!(index.lookup(110).position, 4096);
            assert_eq!(index.lookup(119).position, 4096);
            assert_eq!(index.lookup(1_000).position, 8200);
            assert_eq!(index.lookup_by_position(5000).unwrap().offset, 110);
            assert!(index.is_sane(9000));
            assert!(!index.is_sane(8200));
            let reopened = OffsetIndex::open(&path, 100, 4).await.unwrap().unwrap();
            assert_eq!(reopened.entries(), index.entries());
            assert_eq!(std::fs::metadata(&path).unwrap().len(), 24);
        });
    }

    #[test]
    fn time_index_only_moves_forward() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("00000000000000000000.timeindex");
        crate::test_support::run(async move {
            let mut index = TimeIndex::create(&path, 0, 10).await.unwrap();
            let entry = |timestamp, offset| TimestampOffset { timestamp, offset };
            assert!(index.maybe_push(entry(10, 3)));
            assert!(!index.maybe_push(entry(10, 5)));
            assert!(index.maybe_push(entry(20, 9)));
            assert_eq!(index.lookup(15).unwrap().offset, 3);
            assert_eq!(index.lookup(5), None);
            assert!(index.is_sane(10));
        });
    }
}
