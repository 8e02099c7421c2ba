//! One segment of a partition log: `<base>.log` with its `.index` and `.timeindex`.

use std::cell::{Cell, RefCell};
use std::collections::VecDeque;
use std::io;
use std::ops::ControlFlow;
use std::path::{Path, PathBuf};
use std::rc::Rc;
use std::sync::atomic::{AtomicU64, Ordering};
use std::time::{Duration, Instant};

use tracing::warn;

use crate::runtime::activity::{self, ActivityKind};
use crate::runtime::disk_bound;
use crate::runtime::memory_cgroup::MemoryCgroup;

use super::file::{FileHandoff, SegmentFile, PAGE_SIZE_BYTES};
use super::file_names::{
    INDEX_FILE_SUFFIX, LOG_FILE_SUFFIX, PREPARED_FILE_SUFFIX, TIME_INDEX_FILE_SUFFIX,
};
use super::index::{IndexHandoff, OffsetIndex, OffsetPosition, TimeIndex, TimestampOffset};
use super::record_batch::{
    validate_batch, BatchIter, RecordBatchHeader, NO_TIMESTAMP, RECORD_BATCH_OVERHEAD,
};
use super::LogConfig;

/// Bytes read at a time when walking batch headers.
const HEADER_SCAN_CHUNK_BYTES: usize = 16 * 1024;
/// Index entries buffered before they are written out (4 KiB of `.index`).
const INDEX_WRITE_BATCH_ENTRIES: usize = 512;
/// Appended bytes handed to writeback at a time.
const WRITEBACK_CHUNK_BYTES: u64 = 4 * 1024 * 1024;
/// The most one writeback job drops: twice what it writes back, so a backlog
/// held until the memory cgroup was half full goes at the rate the segment
/// grows, not at once (dropping 300 MB a partition at once took the
/// machine's kernel time to 850 ms in that second and held appends 22 ms).
const DROP_MAX_BYTES: u64 = 2 * WRITEBACK_CHUNK_BYTES;
/// The page cache's largest folio (a PMD's 2 MiB; ext4 caches a file in
/// folios of up to that), each aligned to its size.
const LARGEST_FOLIO_BYTES: u64 = 2 * 1024 * 1024;
/// Bytes read at a time when validating whole batches during recovery.
const RECOVERY_CHUNK_BYTES: usize = 1024 * 1024;

/// A segment file under a stage suffix (`""`, `.cleaned` or `.swap`).
fn staged_path(dir: &Path, base_offset: i64, suffix: &str, stage: &str) -> PathBuf {
    dir.join(format!("{base_offset:020}{suffix}{stage}"))
}

/// A batch inside a buffer being appended: where it starts in the buffer and its
/// (already stamped) header.
#[derive(Debug, Clone, Copy)]
pub struct AppendedBatch {
    pub position_in_buffer: usize,
    pub header: RecordBatchHeader,
}

/// A byte range of a segment file, served to fetchers without decoding
/// (sendfile-style). Holding it keeps the file open even if retention deletes it.
#[derive(Clone)]
pub struct FileSlice {
    pub file: Rc<SegmentFile>,
    pub position: u64,
    pub size_bytes: usize,
}

impl FileSlice {
    /// The slice's bytes. If the file shrank since the slice was taken (a
    /// truncation), only the whole batches still there are returned.
    pub async fn read(&self) -> io::Result<Vec<u8>> {
        let mut bytes = self.file.read_owned(self.position, self.size_bytes).await?;
        if bytes.len() < self.size_bytes {
            let mut batches = BatchIter::new(&bytes);
            while let Some(Ok(_)) = batches.next() {}
            let whole = batches.position();
            bytes.truncate(whole);
        }
        Ok(bytes)
    }
}

impl std::fmt::Debug for FileSlice {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        write!(
            f,
            "FileSlice({}@{}+{})",
            self.file.path().display(),
            self.position,
            self.size_bytes
        )
    }
}

/// What a full scan of a segment found.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct SegmentRecovery {
    pub valid_bytes: u64,
    pub truncated_bytes: u64,
    /// (leader epoch, base offset) of every batch, in order, for the epoch cache.
    pub epochs: Vec<(i32, i64)>,
}

/// A segment as one shard hands it to another with its log (`Log::hand_off`):
/// its files' descriptors, and what its files would give only after reads
/// (indexes, the tail's last batch), which on a busy shard wait behind its
/// other I/O for tens of milliseconds each.
#[derive(Debug)]
pub struct SegmentHandoff {
    base_offset: i64,
    log: FileHandoff,
    offset_index: IndexHandoff<OffsetPosition>,
    time_index: IndexHandoff<TimestampOffset>,
    size_bytes: u64,
    next_offset: i64,
    bytes_since_last_index_entry: u64,
    max_timestamp_so_far: TimestampOffset,
    rolling_based_timestamp: Option<i64>,
    created_ms: i64,
    writeback_started_bytes: u64,
    preallocated_bytes: u64,
    recent_batches: VecDeque<(u64, RecordBatchHeader)>,
}

impl SegmentHandoff {
    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
}

pub struct LogSegment {
    base_offset: i64,
    dir: PathBuf,
    log: Rc<SegmentFile>,
    offset_index: RefCell<OffsetIndex>,
    time_index: RefCell<TimeIndex>,
    size_bytes: Cell<u64>,
    next_offset: Cell<i64>,
    bytes_since_last_index_entry: Cell<u64>,
    max_timestamp_so_far: Cell<TimestampOffset>,
    /// Max timestamp of the first batch, which `segment.ms` rolls count from.
    rolling_based_timestamp: Cell<Option<i64>>,
    created_ms: i64,
    index_interval_bytes: u64,
    writeback: Rc<Writeback>,
    /// The blocks allocated ahead of the appends from the file's start
    /// (`preallocate`), for a roll or a close to give back what is past the
    /// data; 0 once given back.
    preallocated_bytes: Cell<u64>,
    recent_batches: RefCell<RecentBatches>,
}

/// The last batches appended to a segment, with their positions, back to
/// back up to its end: a fetch at the log's end (every caught-up consumer and
/// follower) finds its batch here instead of reading headers back from the
/// file, an io_uring read of up to `HEADER_SCAN_CHUNK_BYTES` a fetch.
#[derive(Default)]
struct RecentBatches(VecDeque<(u64, RecordBatchHeader)>);

/// Batches `RecentBatches` keeps: a caught-up reader is a few batches behind.
const RECENT_BATCHES: usize = 16;

impl RecentBatches {
    fn push(&mut self, position: u64, header: RecordBatchHeader) {
        if let Some((last_position, last)) = self.0.back() {
            assert_eq!(
                last_position + last.size_bytes() as u64,
                position,
                "recent batches lie back to back"
            );
        }
        if self.0.len() == RECENT_BATCHES {
            self.0.pop_front();
        }
        self.0.push_back((position, header));
    }

    /// The first batch whose last offset is at or past `target`, if `target`
    /// is not below the first recent batch (and not past the segment).
    fn find(&self, target: i64) -> Option<(u64, RecordBatchHeader)> {
        let (_, first) = self.0.front()?;
        if target < first.base_offset {
            return None;
        }
        self.0
            .iter()
            .find(|(_, header)| header.last_offset() >= target)
            .copied()
    }

    fn clear(&mut self) {
        self.0.clear();
    }
}

/// Whether a writeback job drops what lies behind it now: in a memory cgroup
/// with a limit, once it is more than half full. Until then the pages cost
/// nothing and serve readers that fall behind (at 10% of Kafka's maximum in
/// the bench's 4 GiB cgroup, which never fills, dropping was about 5% of the
/// broker's CPU); once it is full, every append reclaims pages inside its
/// `pwritev`, which the drop is for. Without a limit to measure, or when the
/// cgroup cannot be read, always: the setting asked for it.
fn drop_behind_due(cgroup: Option<&MemoryCgroup>) -> bool {
    match cgroup.map(MemoryCgroup::usage_and_limit) {
        Some(Ok((usage, Some(limit)))) => usage > limit / 2,
        _ => true,
    }
}

/// What of a segment's appended bytes was handed to the kernel's writeback
/// (see `LogSegment::start_writeback`), and dropped from the page cache
/// behind it (when due: `drop_behind_due`); one job at a time per segment.
#[derive(Default)]
struct Writeback {
    /// The segment's size as of the last append.
    appended_bytes: Cell<u64>,
    /// Where the writeback started so far ends.
    started_bytes: Cell<u64>,
    /// `LogConfig::drop_behind_bytes`.
    drop_behind_bytes: Option<u64>,
    /// Where the pages dropped so far end.
    dropped_bytes: Cell<u64>,
    running: Cell<bool>,
}

impl Writeback {
    /// The next range to hand to writeback, `[from, to)`, once a chunk is
    /// appended. It ends where the page the appends are writing into begins:
    /// writeback keeps a page locked while ext4 maps its blocks (at times
    /// behind a journal commit), and the next append into that partly written
    /// page waited for the lock in pwritev, blocking the shard 5-56 ms.
    fn next_range(&self) -> Option<(u64, u64)> {
        let (from, appended) = (self.started_bytes.get(), self.appended_bytes.get());
        assert!(from <= appended);
        if appended - from < WRITEBACK_CHUNK_BYTES {
            return None;
        }
        let to = appended / PAGE_SIZE_BYTES * PAGE_SIZE_BYTES;
        assert!(to > from);
        Some((from, to))
    }

    /// What to drop from the page cache, `[from, to)`, when writeback of the
    /// range starting at `writeback_from` starts: the pages more than
    /// `drop_behind_bytes` behind it not dropped yet. Their writeback started
    /// at least a chunk before, so dropping them rarely waits for the disk.
    /// It starts a little before the last one ended: a folio of the page
    /// cache that the last range ended inside was left there whole. At most
    /// `DROP_MAX_BYTES` at a time.
    fn next_drop_range(&self, writeback_from: u64) -> Option<(u64, u64)> {
        let behind = self.drop_behind_bytes?;
        let to = writeback_from.saturating_sub(behind) / PAGE_SIZE_BYTES * PAGE_SIZE_BYTES;
        let dropped = self.dropped_bytes.get();
        let from = dropped / LARGEST_FOLIO_BYTES * LARGEST_FOLIO_BYTES;
        (to > dropped).then_some((from, to.min(from + DROP_MAX_BYTES)))
    }

    /// Starts writeback of whole chunks until appends stop adding them, and
    /// drops what is far enough behind: a broker whose page cache stays
    /// bounded never has its appends reclaim pages in a full memory cgroup.
    async fn run(self: Rc<Self>, file: Rc<SegmentFile>) {
        while let Some((from, to)) = self.next_range() {
            let Ok(range) = file.file_records(from, (to - from) as usize) else {
                break; // out of descriptors: the kernel's own writeback remains
            };
            self.started_bytes.set(to);
            let behind = self.next_drop_range(from).and_then(|(drop_from, drop_to)| {
                // Out of descriptors, the kernel's eviction remains.
                file.file_records(drop_from, (drop_to - drop_from) as usize)
                    .ok()
                    .map(|records| (drop_to, records))
            });
            let started = Instant::now();
            let dropped = disk_bound(glommio::executor().spawn_blocking(move || {
                range.start_writeback()?;
                match behind {
                    Some((drop_to, behind)) if drop_behind_due(MemoryCgroup::of_this_process()) => {
                        behind.drop_from_page_cache()?;
                        Ok(Some(drop_to))
                    }
                    _ => io::Result::Ok(None),
                }
            }))
            .await;
            // Not due yet, or failed: the next job's range starts here again.
            if let Ok(Some(drop_to)) = dropped {
                self.dropped_bytes.set(drop_to);
            }
            activity::record(ActivityKind::Writeback, started);
        }
        self.running.set(false);
    }
}

/// A log's next segment made ahead of its roll (`preallocate`): its three
/// files created and its `.log` given `segment.bytes` of blocks under the
/// `.prepared` stage. Creating files and allocating blocks wait for ext4 to
/// read its bitmaps from the disk, at times for hundreds of milliseconds
/// behind an fsync; done at the roll, that wait held the partition's appends.
/// The roll only renames these.
pub struct PreparedSegment {
    log: SegmentFile,
    offset_index: SegmentFile,
    time_index: SegmentFile,
    /// The `.log`'s blocks allocated.
    size_bytes: u64,
}

/// Numbers each preparation of the process, for its files' names.
static PREPARATIONS: AtomicU64 = AtomicU64::new(0);

impl PreparedSegment {
    /// Makes the files, named after `name_offset` (the active segment's base)
    /// and a number no other preparation of the process has, with
    /// `size_bytes` of the `.log`'s blocks allocated. The number lets a
    /// preparation that a shard move left behind remove its own files while
    /// the partition's next shard prepares its own.
    pub async fn create(dir: &Path, name_offset: i64, size_bytes: u64) -> io::Result<Self> {
        let stage = format!(
            ".{}{PREPARED_FILE_SUFFIX}",
            PREPARATIONS.fetch_add(1, Ordering::Relaxed)
        );
        let path = |suffix| staged_path(dir, name_offset, suffix, &stage);
        let log = SegmentFile::create(&path(LOG_FILE_SUFFIX)).await?;
        log.preallocate(size_bytes).await?;
        Ok(Self {
            log,
            offset_index: SegmentFile::create(&path(INDEX_FILE_SUFFIX)).await?,
            time_index: SegmentFile::create(&path(TIME_INDEX_FILE_SUFFIX)).await?,
            size_bytes,
        })
    }

    /// Removes the files (a log closing or handed off with its next segment
    /// unused). A file already gone is fine: a preparation finished after its
    /// log was handed off may find them removed by the next shard's load (out
    /// of descriptors, the next shard opens the files).
    pub async fn remove(self, hold: Duration) -> io::Result<()> {
        for file in [self.log, self.offset_index, self.time_index] {
            match file.remove(hold).await {
                Err(error) if error.kind() == io::ErrorKind::NotFound => {}
                result => result?,
            }
        }
        Ok(())
    }

    /// See `SegmentFile::hold_past_deletion`; for a log whose directory goes.
    pub fn hold_files_past_deletion(&self, hold: Duration) {
        for file in [&self.log, &self.offset_index, &self.time_index] {
            file.hold_past_deletion(hold);
        }
    }
}

const NO_MAX_TIMESTAMP: TimestampOffset = TimestampOffset {
    timestamp: NO_TIMESTAMP,
    offset: -1,
};

impl LogSegment {
    /// Creates an empty segment; `stage` is `""` for a segment of the log or a
    /// suffix for one the cleaner is still writing.
    pub async fn create(
        dir: &Path,
        base_offset: i64,
        stage: &str,
        config: &LogConfig,
        now_ms: i64,
    ) -> io::Result<Self> {
        let log =
            SegmentFile::create(&staged_path(dir, base_offset, LOG_FILE_SUFFIX, stage)).await?;
        let offset_index = OffsetIndex::create(
            &staged_path(dir, base_offset, INDEX_FILE_SUFFIX, stage),
            base_offset,
            config.max_index_entries(),
        )
        .await?;
        let time_index = TimeIndex::create(
            &staged_path(dir, base_offset, TIME_INDEX_FILE_SUFFIX, stage),
            base_offset,
            config.max_time_index_entries(),
        )
        .await?;
        let segment = Self::assemble(
            dir,
            base_offset,
            log,
            offset_index,
            time_index,
            config,
            now_ms,
        );
        // The cleaner's segments are written whole and never appended to.
        if config.preallocate && stage.is_empty() {
            segment.preallocate(config.segment_bytes).await?;
        }
        Ok(segment)
    }

    /// A new active segment at `base_offset` from files prepared ahead: renamed
    /// to their final names, the `.log` last so that a crash between the renames
    /// leaves no `.log` without its indexes.
    pub async fn from_prepared(
        dir: &Path,
        base_offset: i64,
        prepared: PreparedSegment,
        config: &LogConfig,
        now_ms: i64,
    ) -> io::Result<Self> {
        let PreparedSegment {
            mut log,
            mut offset_index,
            mut time_index,
            size_bytes,
        } = prepared;
        for (file, suffix) in [
            (&mut offset_index, INDEX_FILE_SUFFIX),
            (&mut time_index, TIME_INDEX_FILE_SUFFIX),
            (&mut log, LOG_FILE_SUFFIX),
        ] {
            file.rename(&staged_path(dir, base_offset, suffix, ""))
                .await?;
        }
        let segment = Self::assemble(
            dir,
            base_offset,
            log,
            OffsetIndex::empty(offset_index, base_offset, config.max_index_entries()),
            TimeIndex::empty(time_index, base_offset, config.max_time_index_entries()),
            config,
            now_ms,
        );
        segment.preallocated_bytes.set(size_bytes);
        Ok(segment)
    }

    /// See `preallocated_bytes` on the struct.
    pub fn preallocated_bytes(&self) -> u64 {
        self.preallocated_bytes.get()
    }

    /// Allocates the log file's blocks up to `size_bytes` for the appends to
    /// come (Kafka's `preallocate`); the file's size stays its data's.
    pub async fn preallocate(&self, size_bytes: u64) -> io::Result<()> {
        self.log.preallocate(size_bytes).await?;
        self.preallocated_bytes.set(size_bytes);
        Ok(())
    }

    /// Gives back the blocks preallocated past the data, when the segment stops
    /// being active or its log closes. The caller holds the log's append lock:
    /// a truncation must not race this one.
    pub async fn trim_preallocated(&self) -> io::Result<()> {
        if self.preallocated_bytes.replace(0) > 0 {
            disk_bound(self.log.truncate(self.size_bytes())).await?;
        }
        Ok(())
    }

    fn assemble(
        dir: &Path,
        base_offset: i64,
        log: SegmentFile,
        offset_index: OffsetIndex,
        time_index: TimeIndex,
        config: &LogConfig,
        now_ms: i64,
    ) -> Self {
        Self {
            base_offset,
            dir: dir.to_owned(),
            log: Rc::new(log),
            offset_index: RefCell::new(offset_index),
            time_index: RefCell::new(time_index),
            size_bytes: Cell::new(0),
            next_offset: Cell::new(base_offset),
            bytes_since_last_index_entry: Cell::new(0),
            max_timestamp_so_far: Cell::new(NO_MAX_TIMESTAMP),
            rolling_based_timestamp: Cell::new(None),
            created_ms: now_ms,
            index_interval_bytes: config.index_interval_bytes,
            writeback: Rc::new(Writeback {
                drop_behind_bytes: config.drop_behind_bytes,
                ..Writeback::default()
            }),
            preallocated_bytes: Cell::new(0),
            recent_batches: RefCell::default(),
        }
    }

    /// Gives the segment to another shard; its index entries must all be
    /// written, and this one's indexes are left empty (its log is leaving
    /// service). Fails only when the process is out of descriptors.
    pub fn hand_off(&self) -> io::Result<SegmentHandoff> {
        let log = self.log.hand_off()?;
        let offset_index = self.offset_index.borrow_mut().hand_off()?;
        let time_index = self.time_index.borrow_mut().hand_off()?;
        Ok(SegmentHandoff {
            base_offset: self.base_offset,
            log,
            offset_index,
            time_index,
            size_bytes: self.size_bytes(),
            next_offset: self.next_offset(),
            bytes_since_last_index_entry: self.bytes_since_last_index_entry.get(),
            max_timestamp_so_far: self.max_timestamp_so_far.get(),
            rolling_based_timestamp: self.rolling_based_timestamp.get(),
            created_ms: self.created_ms,
            writeback_started_bytes: self.writeback.started_bytes.get(),
            preallocated_bytes: self.preallocated_bytes.get(),
            recent_batches: self.recent_batches.borrow().0.clone(),
        })
    }

    /// The segment another shard handed off, on this shard, without a read.
    pub fn take_up(dir: &Path, handoff: SegmentHandoff, config: &LogConfig) -> Self {
        let base_offset = handoff.base_offset;
        let segment = Self::assemble(
            dir,
            base_offset,
            SegmentFile::take_up(handoff.log),
            OffsetIndex::take_up(handoff.offset_index, base_offset),
            TimeIndex::take_up(handoff.time_index, base_offset),
            config,
            handoff.created_ms,
        );
        segment.size_bytes.set(handoff.size_bytes);
        segment.next_offset.set(handoff.next_offset);
        segment
            .bytes_since_last_index_entry
            .set(handoff.bytes_since_last_index_entry);
        segment
            .max_timestamp_so_far
            .set(handoff.max_timestamp_so_far);
        segment
            .rolling_based_timestamp
            .set(handoff.rolling_based_timestamp);
        segment
            .writeback
            .started_bytes
            .set(handoff.writeback_started_bytes);
        segment.writeback.appended_bytes.set(handoff.size_bytes);
        segment.preallocated_bytes.set(handoff.preallocated_bytes);
        segment.recent_batches.borrow_mut().0 = handoff.recent_batches;
        segment
    }

    /// Opens an existing segment. With `recover` set (or when an index is missing or
    /// fails its sanity check) every batch is validated and the indexes rebuilt;
    /// otherwise the indexes are trusted and only the tail after the last index
    /// entry is walked to find the next offset.
    pub async fn open(
        dir: &Path,
        base_offset: i64,
        stage: &str,
        config: &LogConfig,
        recover: bool,
        now_ms: i64,
    ) -> io::Result<(Self, Option<SegmentRecovery>)> {
        let log_path = staged_path(dir, base_offset, LOG_FILE_SUFFIX, stage);
        let log = SegmentFile::open(&log_path).await?;
        let log_size = log.size_bytes().await?;
        let index_path = staged_path(dir, base_offset, INDEX_FILE_SUFFIX, stage);
        let time_index_path = staged_path(dir, base_offset, TIME_INDEX_FILE_SUFFIX, stage);
        let max_entries = config.max_index_entries();
        let max_time_entries = config.max_time_index_entries();
        let offset_index = match OffsetIndex::open(&index_path, base_offset, max_entries).await {
            Ok(Some(index)) if index.is_sane(log_size) => Some(index),
            Ok(_) => None,
            Err(error) if error.kind() == io::ErrorKind::NotFound => None,
            Err(error) => return Err(error),
        };
        let time_index =
            match TimeIndex::open(&time_index_path, base_offset, max_time_entries).await {
                Ok(Some(index)) => Some(index),
                Ok(None) => None,
                Err(error) if error.kind() == io::ErrorKind::NotFound => None,
                Err(error) => return Err(error),
            };
        let needs_rebuild = offset_index.is_none() || time_index.is_none();
        if needs_rebuild && !recover {
            warn!(segment = %log_path.display(), "missing or corrupt index; rebuilding it");
        }
        let offset_index = match offset_index {
            Some(index) => index,
            None => OffsetIndex::create(&index_path, base_offset, max_entries).await?,
        };
        let time_index = match time_index {
            Some(index) => index,
            None => TimeIndex::create(&time_index_path, base_offset, max_time_entries).await?,
        };
        let segment = Self::assemble(
            dir,
            base_offset,
            log,
            offset_index,
            time_index,
            config,
            now_ms,
        );
        segment.size_bytes.set(log_size);
        if recover || needs_rebuild {
            let recovery = segment.recover().await?;
            return Ok((segment, Some(recovery)));
        }
        let trusted = match segment.load_tail_state().await {
            Ok(()) => segment.time_index.borrow().is_sane(segment.next_offset()),
            Err(error) if error.kind() == io::ErrorKind::InvalidData => false,
            Err(error) => return Err(error),
        };
        if !trusted {
            warn!(segment = %log_path.display(), "batches and indexes disagree; rebuilding");
            let recovery = segment.recover().await?;
            return Ok((segment, Some(recovery)));
        }
        Ok((segment, None))
    }

    /// For a trusted segment: finds the next offset by walking headers from the last
    /// index entry, and takes the max timestamp from the time index.
    async fn load_tail_state(&self) -> io::Result<()> {
        if self.size_bytes() >= RECORD_BATCH_OVERHEAD as u64 {
            // segment.ms counts from the first batch, across restarts too.
            let first = self.log.read_exact_at(0, RECORD_BATCH_OVERHEAD).await?;
            let header = RecordBatchHeader::parse(&first)
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error.to_string()))?;
            self.rolling_based_timestamp.set(Some(header.max_timestamp));
        }
        let start = self.offset_index.borrow().last().map_or(0, |e| e.position);
        let mut next_offset = self.base_offset;
        let mut last_position = start as u64;
        let mut tail_max = NO_MAX_TIMESTAMP;
        self.scan_headers(start as u64, self.size_bytes(), |position, header| {
            next_offset = header.next_offset();
            last_position = position + header.size_bytes() as u64;
            if header.max_timestamp > tail_max.timestamp {
                tail_max = TimestampOffset {
                    timestamp: header.max_timestamp,
                    offset: header.last_offset(),
                };
            }
            ControlFlow::Continue(())
        })
        .await?;
        if last_position != self.size_bytes() {
            return Err(io::Error::new(
                io::ErrorKind::InvalidData,
                format!(
                    "{}: batches end at {last_position}, file is {} bytes",
                    self.log.path().display(),
                    self.size_bytes()
                ),
            ));
        }
        self.next_offset.set(next_offset);
        let indexed_max = self.time_index.borrow().last().unwrap_or(NO_MAX_TIMESTAMP);
        self.max_timestamp_so_far
            .set(if tail_max.timestamp > indexed_max.timestamp {
                tail_max
            } else {
                indexed_max
            });
        Ok(())
    }

    pub fn base_offset(&self) -> i64 {
        self.base_offset
    }
    /// One past the last offset stored here (the base offset when empty).
    pub fn next_offset(&self) -> i64 {
        self.next_offset.get()
    }
    pub fn size_bytes(&self) -> u64 {
        self.size_bytes.get()
    }
    pub fn is_empty(&self) -> bool {
        self.size_bytes() == 0
    }
    pub fn max_timestamp(&self) -> i64 {
        self.max_timestamp_so_far.get().timestamp
    }
    pub fn max_timestamp_and_offset(&self) -> TimestampOffset {
        self.max_timestamp_so_far.get()
    }
    pub fn log_file(&self) -> &Rc<SegmentFile> {
        &self.log
    }
    pub fn offset_index_entries(&self) -> Vec<OffsetPosition> {
        self.offset_index.borrow().entries().to_vec()
    }
    pub fn time_index_entries(&self) -> Vec<TimestampOffset> {
        self.time_index.borrow().entries().to_vec()
    }

    /// Kafka's roll test for an append of `size_bytes` ending at `last_offset`
    /// with largest timestamp `max_timestamp`.
    pub fn should_roll(
        &self,
        config: &LogConfig,
        size_bytes: u64,
        max_timestamp: i64,
        last_offset: i64,
        now_ms: i64,
    ) -> bool {
        if self.is_empty() {
            return false;
        }
        self.size_bytes() + size_bytes > config.segment_bytes
            || self.rolling_waited_ms(max_timestamp, now_ms) > config.segment_ms
            || self.offset_index.borrow().is_full()
            || self.time_index.borrow().is_full()
            || last_offset - self.base_offset > i32::MAX as i64
    }

    /// Whether the segment is half way to its size or time roll: when its log
    /// prepares the next one, with time to spare before it is needed.
    pub fn is_half_way_to_roll(&self, config: &LogConfig, now_ms: i64) -> bool {
        !self.is_empty()
            && (self.size_bytes() >= config.segment_bytes / 2
                || self.rolling_waited_ms(self.max_timestamp(), now_ms) >= config.segment_ms / 2)
    }

    /// How long `segment.ms` counts this segment has lasted: from its first
    /// batch's timestamp to `max_timestamp`, or since its creation when either
    /// has none.
    fn rolling_waited_ms(&self, max_timestamp: i64, now_ms: i64) -> i64 {
        match self.rolling_based_timestamp.get() {
            Some(first) if first >= 0 && max_timestamp >= 0 => max_timestamp - first,
            _ => now_ms - self.created_ms,
        }
    }

    /// Appends stamped batches, given in `parts` written back to back (one
    /// write), indexing a batch whenever more than `index.interval.bytes` were
    /// written since the last entry.
    pub fn append(&self, parts: &[&[u8]], batches: &[AppendedBatch]) -> io::Result<()> {
        assert!(!batches.is_empty());
        assert!(
            batches[0].header.base_offset >= self.next_offset(),
            "offsets go backwards"
        );
        let start = self.size_bytes();
        let len: u64 = parts.iter().map(|part| part.len() as u64).sum();
        self.log.write_all_vectored_at(parts, start)?;
        // Only written bytes become visible: readers bound themselves by the
        // segment's size and next offset.
        for batch in batches {
            self.account_batch(&batch.header, start + batch.position_in_buffer as u64);
        }
        self.size_bytes.set(start + len);
        if self.offset_index.borrow().pending_entries() >= INDEX_WRITE_BATCH_ENTRIES {
            self.write_pending_index_entries()?;
        }
        self.start_writeback();
        Ok(())
    }

    /// Hands appended data to the kernel's writeback `WRITEBACK_CHUNK_BYTES`
    /// at a time (sync_file_range WRITE, on the blocking pool: it allocates
    /// blocks and may wait for the disk queue), so dirty pages never pile up
    /// until the kernel's background threshold. Left to the kernel, gigabytes
    /// are written back at once; ext4 then holds a file's block-map lock while
    /// it waits behind that flood for bitmap reads, and an append to the file
    /// waits as long (pwrites of 10-26 ms, W2 acknowledgements up to 270 ms).
    /// Not a flush: nothing waits for it, durability stays with `flush.*`.
    fn start_writeback(&self) {
        let writeback = &self.writeback;
        writeback.appended_bytes.set(self.size_bytes());
        if writeback.running.get() || writeback.next_range().is_none() {
            return;
        }
        writeback.running.set(true);
        glommio::spawn_local(writeback.clone().run(self.log.clone())).detach();
    }

    /// Kafka's per-batch bookkeeping: timestamps, and an index entry once more
    /// than `index.interval.bytes` went by since the last one.
    fn account_batch(&self, header: &RecordBatchHeader, position: u64) {
        if self.rolling_based_timestamp.get().is_none() {
            self.rolling_based_timestamp.set(Some(header.max_timestamp));
        }
        if header.max_timestamp > self.max_timestamp() {
            self.max_timestamp_so_far.set(TimestampOffset {
                timestamp: header.max_timestamp,
                offset: header.last_offset(),
            });
        }
        if self.bytes_since_last_index_entry.get() > self.index_interval_bytes {
            self.offset_index.borrow_mut().push(OffsetPosition {
                offset: header.last_offset(),
                position: position as u32,
            });
            self.time_index
                .borrow_mut()
                .maybe_push(self.max_timestamp_and_offset());
            self.bytes_since_last_index_entry.set(0);
        }
        self.bytes_since_last_index_entry
            .set(self.bytes_since_last_index_entry.get() + header.size_bytes() as u64);
        self.next_offset.set(header.next_offset());
        self.recent_batches.borrow_mut().push(position, *header);
    }

    /// Brings both index files up to date with the in-memory entries.
    pub fn write_pending_index_entries(&self) -> io::Result<()> {
        let started = Instant::now();
        let offset_write = self.offset_index.borrow_mut().take_pending_write();
        let time_write = self.time_index.borrow_mut().take_pending_write();
        for write in [offset_write, time_write].into_iter().flatten() {
            write.apply()?;
        }
        activity::record(ActivityKind::IndexWrite, started);
        Ok(())
    }

    /// Adds the final time index entry when the segment stops being active.
    pub fn on_become_inactive(&self) -> io::Result<()> {
        let max = self.max_timestamp_and_offset();
        if max.timestamp == NO_TIMESTAMP {
            return Ok(());
        }
        self.time_index.borrow_mut().maybe_push(max);
        self.write_pending_index_entries()
    }

    pub async fn flush(&self) -> io::Result<()> {
        self.write_pending_index_entries()?;
        let started = Instant::now();
        self.log.fdatasync().await?;
        let offset_file = self.offset_index.borrow().file().clone();
        let time_file = self.time_index.borrow().file().clone();
        offset_file.fdatasync().await?;
        time_file.fdatasync().await?;
        activity::record(ActivityKind::Flush, started);
        Ok(())
    }

    /// Walks batch headers in `[start, end)`, calling `visit(position, header)`.
    /// Stops quietly at a header that is torn or runs past `end`.
    pub async fn scan_headers(
        &self,
        start: u64,
        end: u64,
        mut visit: impl FnMut(u64, &RecordBatchHeader) -> ControlFlow<()>,
    ) -> io::Result<()> {
        let mut window = ReadWindow::new(HEADER_SCAN_CHUNK_BYTES);
        let mut position = start;
        while position + RECORD_BATCH_OVERHEAD as u64 <= end {
            let bytes = window
                .bytes(&self.log, position, RECORD_BATCH_OVERHEAD, end - position)
                .await?;
            let Ok(header) = RecordBatchHeader::parse(bytes) else {
                return Ok(());
            };
            if position + header.size_bytes() as u64 > end {
                return Ok(());
            }
            if visit(position, &header).is_break() {
                return Ok(());
            }
            position += header.size_bytes() as u64;
        }
        Ok(())
    }

    /// The first batch whose last offset is at or past `target`, with its position.
    pub async fn translate_offset(
        &self,
        target: i64,
    ) -> io::Result<Option<(u64, RecordBatchHeader)>> {
        if target >= self.next_offset() {
            return Ok(None);
        }
        if let Some(recent) = self.recent_batches.borrow().find(target) {
            return Ok(Some(recent));
        }
        let start = self.offset_index.borrow().lookup(target).position as u64;
        self.find_batch(start, |header| header.last_offset() >= target)
            .await
    }

    /// The first batch from `start` on that satisfies `wanted`, with its position.
    async fn find_batch(
        &self,
        start: u64,
        wanted: impl Fn(&RecordBatchHeader) -> bool,
    ) -> io::Result<Option<(u64, RecordBatchHeader)>> {
        let mut found = None;
        self.scan_headers(start, self.size_bytes(), |position, header| {
            if wanted(header) {
                found = Some((position, *header));
                ControlFlow::Break(())
            } else {
                ControlFlow::Continue(())
            }
        })
        .await?;
        Ok(found)
    }

    /// Whole batches from the one holding `start_offset`, ending at or before
    /// `max_position`, at most `max_bytes` unless the first batch alone is larger
    /// and `min_one_batch` is set.
    pub async fn read(
        &self,
        start_offset: i64,
        max_bytes: usize,
        max_position: u64,
        min_one_batch: bool,
    ) -> io::Result<Option<FileSlice>> {
        let Some((start, first)) = self.translate_offset(start_offset).await? else {
            return Ok(None);
        };
        let limit = max_position.min(self.size_bytes());
        if start >= limit {
            return Ok(None);
        }
        let budget_end = (start + max_bytes as u64).min(limit);
        let mut end = start;
        if budget_end == limit {
            end = limit;
        } else {
            let scan_from = self
                .offset_index
                .borrow()
                .lookup_by_position(budget_end as u32)
                .map_or(start, |entry| (entry.position as u64).max(start));
            end = end.max(scan_from);
            self.scan_headers(scan_from, budget_end, |position, header| {
                end = position + header.size_bytes() as u64;
                ControlFlow::Continue(())
            })
            .await?;
        }
        if end == start {
            if !min_one_batch {
                return Ok(None);
            }
            end = start + first.size_bytes() as u64;
        }
        Ok(Some(FileSlice {
            file: self.log.clone(),
            position: start,
            size_bytes: (end - start) as usize,
        }))
    }

    /// The first batch from `start_offset` on whose max timestamp reaches `timestamp`.
    pub async fn find_batch_by_timestamp(
        &self,
        timestamp: i64,
        start_offset: i64,
    ) -> io::Result<Option<(u64, RecordBatchHeader)>> {
        if self.max_timestamp() < timestamp {
            return Ok(None);
        }
        let from_offset = self
            .time_index
            .borrow()
            .lookup(timestamp)
            .map_or(self.base_offset, |entry| entry.offset)
            .max(start_offset);
        let start = self.offset_index.borrow().lookup(from_offset).position as u64;
        self.find_batch(start, |header| {
            header.max_timestamp >= timestamp && header.last_offset() >= start_offset
        })
        .await
    }

    /// Validates every batch from the start, rebuilds both indexes, and cuts the
    /// file at the first batch that is torn or corrupt.
    pub async fn recover(&self) -> io::Result<SegmentRecovery> {
        self.recent_batches.borrow_mut().clear();
        self.offset_index.borrow_mut().clear();
        self.time_index.borrow_mut().clear();
        self.next_offset.set(self.base_offset);
        self.max_timestamp_so_far.set(NO_MAX_TIMESTAMP);
        self.rolling_based_timestamp.set(None);
        self.bytes_since_last_index_entry.set(0);
        let file_size = self.log.size_bytes().await?;
        self.size_bytes.set(file_size);
        let mut reader = self.batches();
        let mut position = 0u64;
        let mut epochs = Vec::new();
        while let Some((header, batch)) = reader.next().await? {
            // The base offset is outside the CRC: check it fits this segment too.
            let in_range = header.base_offset >= self.next_offset()
                && header
                    .last_offset()
                    .checked_sub(self.base_offset)
                    .is_some_and(|relative| relative <= i32::MAX as i64);
            if !in_range || validate_batch(batch).is_err() {
                break;
            }
            self.account_batch(&header, position);
            epochs.push((header.partition_leader_epoch, header.base_offset));
            position += header.size_bytes() as u64;
        }
        let valid_bytes = position;
        let offset_file = self.offset_index.borrow().file().clone();
        let time_file = self.time_index.borrow().file().clone();
        offset_file.truncate(0).await?;
        time_file.truncate(0).await?;
        self.write_pending_index_entries()?;
        let truncated_bytes = file_size - valid_bytes;
        if truncated_bytes > 0 {
            warn!(
                segment = %self.log.path().display(),
                valid_bytes, truncated_bytes, "truncating an invalid or torn tail"
            );
            self.log.truncate(valid_bytes).await?;
        }
        self.size_bytes.set(valid_bytes);
        Ok(SegmentRecovery {
            valid_bytes,
            truncated_bytes,
            epochs,
        })
    }

    /// Drops every batch at or after `offset`; returns the bytes removed.
    pub async fn truncate_to(&self, offset: i64) -> io::Result<u64> {
        let Some((position, _)) = self.translate_offset(offset).await? else {
            return Ok(0);
        };
        self.write_pending_index_entries()?;
        self.recent_batches.borrow_mut().clear();
        // Batches are whole: `offset` falls on the first batch we drop.
        let removed = self.size_bytes() - position;
        let index_size = self.offset_index.borrow_mut().truncate_from_offset(offset);
        let time_size = self.time_index.borrow_mut().truncate_from_offset(offset);
        let offset_file = self.offset_index.borrow().file().clone();
        let time_file = self.time_index.borrow().file().clone();
        offset_file.truncate(index_size).await?;
        time_file.truncate(time_size).await?;
        self.log.truncate(position).await?;
        self.preallocated_bytes.set(0); // what was past `position` is gone too
        self.size_bytes.set(position);
        // What was handed to writeback past the new end is gone.
        let writeback = &self.writeback;
        writeback.appended_bytes.set(position);
        writeback
            .started_bytes
            .set(writeback.started_bytes.get().min(position));
        writeback
            .dropped_bytes
            .set(writeback.dropped_bytes.get().min(position));
        // Recompute what the removed batches contributed.
        self.next_offset.set(self.base_offset);
        self.max_timestamp_so_far
            .set(self.time_index.borrow().last().unwrap_or(NO_MAX_TIMESTAMP));
        self.bytes_since_last_index_entry.set(0);
        if position == 0 {
            self.rolling_based_timestamp.set(None);
        }
        self.load_tail_state().await?;
        Ok(removed)
    }

    /// See `SegmentFile::hold_past_deletion`; for a log whose directory goes.
    pub fn hold_files_past_deletion(&self, hold: Duration) {
        self.log.hold_past_deletion(hold);
        self.offset_index.borrow().file().hold_past_deletion(hold);
        self.time_index.borrow().file().hold_past_deletion(hold);
    }

    /// Deletes the segment's files, held for `hold` past the deletion.
    pub async fn delete_files(&self, hold: Duration) -> io::Result<()> {
        self.log.remove(hold).await?;
        let offset_file = self.offset_index.borrow().file().clone();
        let time_file = self.time_index.borrow().file().clone();
        for file in [offset_file, time_file] {
            match file.remove(hold).await {
                Err(error) if error.kind() != io::ErrorKind::NotFound => return Err(error),
                _ => {}
            }
        }
        Ok(())
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// Every batch of the segment, in order.
    pub fn batches(&self) -> BatchReader<'_> {
        BatchReader {
            segment: self,
            window: ReadWindow::new(RECOVERY_CHUNK_BYTES),
            position: 0,
        }
    }
}

/// Reads a segment's batches in order, each whole, from large sequential reads.
/// Stops at the end or at the first batch that cannot be framed (a torn tail).
pub struct BatchReader<'a> {
    segment: &'a LogSegment,
    window: ReadWindow,
    position: u64,
}

impl BatchReader<'_> {
    pub async fn next(&mut self) -> io::Result<Option<(RecordBatchHeader, &[u8])>> {
        let remaining = self.segment.size_bytes() - self.position;
        if remaining < RECORD_BATCH_OVERHEAD as u64 {
            return Ok(None);
        }
        let file = &self.segment.log;
        let header_bytes = self
            .window
            .bytes(file, self.position, RECORD_BATCH_OVERHEAD, remaining)
            .await?;
        let Ok(header) = RecordBatchHeader::parse(header_bytes) else {
            return Ok(None);
        };
        if header.size_bytes() as u64 > remaining {
            return Ok(None);
        }
        let position = self.position;
        self.position += header.size_bytes() as u64;
        let batch = self
            .window
            .bytes(file, position, header.size_bytes(), remaining)
            .await?;
        Ok(Some((header, batch)))
    }
}

/// A buffered window over a file for sequential scans: serves byte ranges from
/// one large read and rereads only when a range leaves the window.
struct ReadWindow {
    chunk_bytes: usize,
    start: u64,
    bytes: Option<glommio::io::ReadResult>,
}

impl ReadWindow {
    fn new(chunk_bytes: usize) -> Self {
        Self {
            chunk_bytes,
            start: 0,
            bytes: None,
        }
    }

    /// `len` bytes at `position`; `remaining` is what the file holds from there.
    async fn bytes(
        &mut self,
        file: &SegmentFile,
        position: u64,
        len: usize,
        remaining: u64,
    ) -> io::Result<&[u8]> {
        let covered = self.bytes.as_ref().is_some_and(|bytes| {
            position >= self.start && position + len as u64 <= self.start + bytes.len() as u64
        });
        if !covered {
            let want = (len as u64).max(remaining.min(self.chunk_bytes as u64)) as usize;
            self.bytes = Some(file.read_exact_at(position, want).await?);
            self.start = position;
        }
        let at = (position - self.start) as usize;
        Ok(&self.bytes.as_ref().unwrap()[at..at + len])
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn writeback_stops_short_of_the_page_appends_write_into() {
        let writeback = Writeback::default();
        writeback.appended_bytes.set(WRITEBACK_CHUNK_BYTES - 1);
        assert_eq!(writeback.next_range(), None);
        writeback.appended_bytes.set(WRITEBACK_CHUNK_BYTES + 100);
        assert_eq!(writeback.next_range(), Some((0, WRITEBACK_CHUNK_BYTES)));
        // The next range starts where the last ended, before the partly written page.
        writeback.started_bytes.set(WRITEBACK_CHUNK_BYTES);
        writeback
            .appended_bytes
            .set(2 * WRITEBACK_CHUNK_BYTES + 3 * PAGE_SIZE_BYTES + 7);
        assert_eq!(
            writeback.next_range(),
            Some((
                WRITEBACK_CHUNK_BYTES,
                2 * WRITEBACK_CHUNK_BYTES + 3 * PAGE_SIZE_BYTES
            ))
        );
    }

    #[test]
    fn the_drop_is_due_past_half_a_cgroup_limit_or_without_one() {
        let root = tempfile::tempdir().unwrap();
        let cgroup = MemoryCgroup::named("0::/broker\n", root.path()).unwrap();
        assert!(drop_behind_due(None));
        assert!(drop_behind_due(Some(&cgroup)), "unreadable");
        std::fs::create_dir_all(cgroup.dir()).unwrap();
        let usage = cgroup.dir().join("memory.current");
        std::fs::write(cgroup.limit_file(), "1000").unwrap();
        std::fs::write(&usage, "500").unwrap();
        assert!(!drop_behind_due(Some(&cgroup)));
        std::fs::write(&usage, "501").unwrap();
        assert!(drop_behind_due(Some(&cgroup)));
        std::fs::write(&usage, "0").unwrap();
        std::fs::write(cgroup.limit_file(), "max").unwrap();
        assert!(drop_behind_due(Some(&cgroup)));
    }

    #[test]
    fn pages_are_dropped_only_far_enough_behind_the_writeback() {
        let kept = Writeback::default();
        assert_eq!(kept.next_drop_range(100 * WRITEBACK_CHUNK_BYTES), None);
        let behind = 3 * PAGE_SIZE_BYTES + 1;
        let writeback = Writeback {
            drop_behind_bytes: Some(behind),
            ..Writeback::default()
        };
        assert_eq!(writeback.next_drop_range(behind), None);
        // Whole pages, behind by at least `behind`.
        let from = WRITEBACK_CHUNK_BYTES + 2 * PAGE_SIZE_BYTES;
        let to = WRITEBACK_CHUNK_BYTES - 2 * PAGE_SIZE_BYTES;
        assert_eq!(writeback.next_drop_range(from), Some((0, to)));
        // The next drop starts at the folio the last one ended in.
        writeback.dropped_bytes.set(to);
        assert_eq!(writeback.next_drop_range(from), None);
        assert_eq!(
            writeback.next_drop_range(from + WRITEBACK_CHUNK_BYTES),
            Some((
                WRITEBACK_CHUNK_BYTES - LARGEST_FOLIO_BYTES,
                to + WRITEBACK_CHUNK_BYTES
            ))
        );
        // Far behind (the drop held back until it was due): a bounded bite.
        assert_eq!(
            writeback.next_drop_range(from + 100 * WRITEBACK_CHUNK_BYTES),
            Some((
                WRITEBACK_CHUNK_BYTES - LARGEST_FOLIO_BYTES,
                WRITEBACK_CHUNK_BYTES - LARGEST_FOLIO_BYTES + DROP_MAX_BYTES
            ))
        );
    }
}
