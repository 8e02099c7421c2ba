//! Log compaction for `cleanup.policy=compact` (and `compact,delete`), Kafka's
//! LogCleaner: keep the last record per key, drop tombstones once they are older
//! than `delete.retention.ms`, never touch the active segment, never change an
//! offset. Cleaned segments are written under `.cleaned`, renamed to `.swap`, and
//! only then replace the originals, so a crash at any point recovers.

use std::collections::HashMap;
use std::rc::Rc;

use tracing::info;

use super::compression::{compress, decompress};
use super::file_names::{CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX};
use super::log::rename_segment_files;
use super::record_batch::{
    RecordBatchBuilder, RecordBatchHeader, RecordIter, TimestampType, RECORD_BATCH_OVERHEAD,
};
use super::segment::{AppendedBatch, LogSegment};
use super::{Log, LogError};

/// Bookkeeping bytes per key in the offset map, on top of the key itself.
const OFFSET_MAP_ENTRY_OVERHEAD_BYTES: usize = 48;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct CleanerStats {
    pub segments_cleaned: usize,
    pub records_removed: u64,
    pub bytes_before: u64,
    pub bytes_after: u64,
    /// Where the next pass starts looking for duplicates.
    pub first_dirty_offset: i64,
}

enum Filtered {
    KeepAll,
    DropAll(u64),
    Rewrite { batch: Vec<u8>, removed: u64 },
}

impl Log {
    /// One cleaning pass if the log is compacted and dirty enough
    /// (`min.cleanable.dirty.ratio`). `dedupe_buffer_bytes` bounds the key map
    /// (`log.cleaner.dedupe.buffer.size`); a pass maps whole segments until full.
    pub async fn clean(
        &self,
        now_ms: i64,
        dedupe_buffer_bytes: usize,
    ) -> Result<Option<CleanerStats>, LogError> {
        let config = self.config();
        if !config.cleanup_policy.compact {
            return Ok(None);
        }
        self.health().check()?;
        let _permit = self.maintenance_permit().await;
        if self.is_deleted() {
            return Ok(None);
        }
        let segments = self.segments();
        // Never past the high watermark: those records may still be truncated.
        let closed: Vec<Rc<LogSegment>> = segments[..segments.len() - 1]
            .iter()
            .take_while(|s| s.next_offset() <= self.high_watermark())
            .cloned()
            .collect();
        // Segments younger than min.compaction.lag.ms are not cleanable yet.
        let cleanable_count = closed
            .iter()
            .position(|s| {
                s.max_timestamp() >= 0 && now_ms - s.max_timestamp() < config.min_compaction_lag_ms
            })
            .unwrap_or(closed.len());
        let cleanable = &closed[..cleanable_count];
        let first_dirty = self.first_dirty_offset();
        let total_bytes: u64 = cleanable.iter().map(|s| s.size_bytes()).sum();
        let dirty: Vec<&Rc<LogSegment>> = cleanable
            .iter()
            .filter(|s| s.next_offset() > first_dirty)
            .collect();
        let dirty_bytes: u64 = dirty.iter().map(|s| s.size_bytes()).sum();
        if dirty.is_empty()
            || total_bytes == 0
            || (dirty_bytes as f64 / total_bytes as f64) < config.min_cleanable_dirty_ratio
        {
            return Ok(None);
        }

        let mut offset_map: HashMap<Vec<u8>, i64> = HashMap::new();
        let mut map_bytes = 0usize;
        let mut mapped_end = first_dirty;
        for segment in dirty {
            if map_bytes >= dedupe_buffer_bytes && mapped_end > first_dirty {
                break;
            }
            let mut reader = segment.batches();
            while let Some((header, batch)) = reader
                .next()
                .await
                .map_err(|e| self.health().on_error(e.into()))?
            {
                if header.is_control() || header.last_offset() < first_dirty {
                    continue;
                }
                let section = decompress(header.compression()?, &batch[RECORD_BATCH_OVERHEAD..])?;
                for record in RecordIter::new(&section) {
                    let record = record?;
                    let Some(key) = record.key else { continue };
                    let offset = header.base_offset + record.offset_delta as i64;
                    if offset_map.insert(key.to_vec(), offset).is_none() {
                        map_bytes += key.len() + OFFSET_MAP_ENTRY_OVERHEAD_BYTES;
                    }
                }
            }
            mapped_end = segment.next_offset();
        }

        let mut stats = CleanerStats {
            first_dirty_offset: mapped_end,
            ..CleanerStats::default()
        };
        let to_clean: Vec<Rc<LogSegment>> = cleanable
            .iter()
            .filter(|s| s.base_offset() < mapped_end)
            .cloned()
            .collect();
        for group in group_segments(&to_clean, config.segment_bytes, config.max_index_entries()) {
            self.clean_group(group, &offset_map, now_ms, &mut stats)
                .await?;
        }
        self.set_first_dirty_offset(mapped_end);
        info!(
            partition = %self.topic_partition(),
            segments = stats.segments_cleaned,
            records_removed = stats.records_removed,
            bytes_before = stats.bytes_before,
            bytes_after = stats.bytes_after,
            "cleaned log"
        );
        Ok(Some(stats))
    }

    async fn clean_group(
        &self,
        group: &[Rc<LogSegment>],
        offset_map: &HashMap<Vec<u8>, i64>,
        now_ms: i64,
        stats: &mut CleanerStats,
    ) -> Result<(), LogError> {
        let config = self.config();
        let dir = self.dir().to_owned();
        let base = group[0].base_offset();
        let io = |error: std::io::Error| self.health().on_error(error.into());
        let cleaned = LogSegment::create(&dir, base, CLEANED_FILE_SUFFIX, &config, now_ms)
            .await
            .map_err(io)?;
        for segment in group {
            stats.bytes_before += segment.size_bytes();
            let retain_tombstones = segment.max_timestamp() < 0
                || now_ms - segment.max_timestamp() <= config.delete_retention_ms;
            let mut reader = segment.batches();
            while let Some((header, batch)) = reader.next().await.map_err(io)? {
                let rewritten;
                let kept: &[u8] = match filter_batch(&header, batch, offset_map, retain_tombstones)?
                {
                    Filtered::KeepAll => batch,
                    Filtered::DropAll(removed) => {
                        stats.records_removed += removed;
                        continue;
                    }
                    Filtered::Rewrite { batch, removed } => {
                        stats.records_removed += removed;
                        rewritten = batch;
                        &rewritten
                    }
                };
                let header = RecordBatchHeader::parse(kept)?;
                cleaned
                    .append(
                        &[kept],
                        &[AppendedBatch {
                            position_in_buffer: 0,
                            header,
                        }],
                    )
                    .map_err(io)?;
            }
        }
        cleaned.on_become_inactive().map_err(io)?;
        cleaned.flush().await.map_err(io)?;
        stats.bytes_after += cleaned.size_bytes();
        drop(cleaned);
        rename_segment_files(&dir, base, CLEANED_FILE_SUFFIX, SWAP_FILE_SUFFIX)
            .await
            .map_err(io)?;
        for segment in group {
            segment
                .delete_files(config.file_delete_delay())
                .await
                .map_err(io)?;
        }
        rename_segment_files(&dir, base, SWAP_FILE_SUFFIX, "")
            .await
            .map_err(io)?;
        let (replacement, _) = LogSegment::open(&dir, base, "", &config, false, now_ms)
            .await
            .map_err(io)?;
        self.replace_segments(group, Rc::new(replacement));
        stats.segments_cleaned += group.len();
        Ok(())
    }
}

/// Consecutive segments whose data fits one segment and one index.
fn group_segments(
    segments: &[Rc<LogSegment>],
    max_size_bytes: u64,
    max_index_entries: usize,
) -> Vec<&[Rc<LogSegment>]> {
    let mut groups = Vec::new();
    let mut start = 0;
    while start < segments.len() {
        let mut end = start + 1;
        let mut size = segments[start].size_bytes();
        let mut entries = segments[start].offset_index_entries().len();
        while let Some(next) = segments.get(end) {
            let next_entries = next.offset_index_entries().len();
            if size + next.size_bytes() > max_size_bytes
                || entries + next_entries > max_index_entries
                || next.next_offset() - segments[start].base_offset() > i32::MAX as i64
            {
                break;
            }
            size += next.size_bytes();
            entries += next_entries;
            end += 1;
        }
        groups.push(&segments[start..end]);
        start = end;
    }
    groups
}

/// Applies the offset map to one batch. Kept records are copied verbatim, so
/// offsets and timestamps do not move; a rewritten batch keeps every header field
/// (last offset delta included, as Kafka does for producer state).
fn filter_batch(
    header: &RecordBatchHeader,
    batch: &[u8],
    offset_map: &HashMap<Vec<u8>, i64>,
    retain_tombstones: bool,
) -> Result<Filtered, LogError> {
    if header.is_control() {
        return Ok(Filtered::KeepAll);
    }
    let codec = header.compression()?;
    let section = decompress(codec, &batch[RECORD_BATCH_OVERHEAD..])?;
    let mut builder = RecordBatchBuilder::like(header);
    let mut total = 0u64;
    let mut kept_max_timestamp = -1;
    for record in RecordIter::new(&section) {
        let record = record?;
        total += 1;
        let offset = header.base_offset + record.offset_delta as i64;
        let keep = match record.key {
            None => false,
            Some(key) => {
                let latest = offset_map.get(key).is_none_or(|&latest| latest <= offset);
                latest && (record.value.is_some() || retain_tombstones)
            }
        };
        if keep {
            builder.append_raw(&record);
            kept_max_timestamp =
                kept_max_timestamp.max(header.base_timestamp + record.timestamp_delta);
        }
    }
    // Kafka recomputes a rewritten batch's max timestamp from what it kept
    // (LogAppendTime batches keep the broker's stamp).
    if header.timestamp_type() == TimestampType::CreateTime {
        builder.max_timestamp = kept_max_timestamp;
    }
    let kept = builder.records_count() as u64;
    Ok(if kept == total {
        Filtered::KeepAll
    } else if kept == 0 {
        Filtered::DropAll(total)
    } else {
        let section = compress(codec, builder.records_section())?;
        Filtered::Rewrite {
            batch: builder.build_with_section(&section),
            removed: total - kept,
        }
    })
}
