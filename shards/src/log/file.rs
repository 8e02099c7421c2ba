//! Files of the log, in the page cache as with Kafka: written with `pwrite` on
//! the shard's thread, read through the shard's io_uring (glommio's buffered
//! files) or straight from the page cache when it holds the range.

use std::cell::Cell;
use std::io;
use std::os::fd::{AsRawFd, BorrowedFd, OwnedFd, RawFd};
use std::path::{Path, PathBuf};
use std::time::Duration;

use glommio::io::{BufferedFile, OpenOptions, ReadResult};

use crate::runtime::disk_bound;
use crate::runtime::iovecs::{remaining_iovecs, EMPTY_IOVEC};

/// cachestat(2) (Linux 6.5), the same number on every architecture; the libc
/// crate does not name it for x86_64 yet.
const SYS_CACHESTAT: libc::c_long = 451;
pub(crate) const PAGE_SIZE_BYTES: u64 = 4096;

/// Parts one vectored write takes (a batch header and its records, say); far
/// below the kernel's IOV_MAX.
const MAX_WRITE_PARTS: usize = 16;

/// Deleted files a shard holds at once; past it, one is freed by its own
/// descriptor's close, as if not held.
const MAX_HELD_DELETED_FILES: usize = 3 * 1024;

thread_local! {
    static HELD_DELETED_FILES: Cell<usize> = const { Cell::new(0) };
}

pub struct SegmentFile {
    file: BufferedFile,
    path: PathBuf,
}

/// A file's descriptor, duplicated for another shard to take up with its log
/// (`SegmentFile::hand_off`, `SegmentFile::take_up`): no open to wait for there.
#[derive(Debug)]
pub struct FileHandoff {
    fd: OwnedFd,
    path: PathBuf,
}

fn to_io(error: glommio::GlommioError<()>) -> io::Error {
    error.into()
}

impl SegmentFile {
    /// Creates (or truncates) a file for writing and reading.
    pub async fn create(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .create(true)
            .truncate(true)
            .buffered_open(path)
            .await
            .map_err(to_io)?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    /// Opens an existing file for writing and reading.
    pub async fn open(path: &Path) -> io::Result<Self> {
        let file = OpenOptions::new()
            .read(true)
            .write(true)
            .buffered_open(path)
            .await
            .map_err(to_io)?;
        Ok(Self {
            file,
            path: path.to_owned(),
        })
    }

    pub fn path(&self) -> &Path {
        &self.path
    }

    /// A duplicate of the descriptor, for another shard; fails only when the
    /// process is out of descriptors.
    pub fn hand_off(&self) -> io::Result<FileHandoff> {
        Ok(FileHandoff {
            fd: self.duplicate_fd()?,
            path: self.path.clone(),
        })
    }

    /// A descriptor of the file of its own (dup), which outlives this handle.
    fn duplicate_fd(&self) -> io::Result<OwnedFd> {
        // SAFETY: the descriptor is open for as long as `self` is.
        unsafe { BorrowedFd::borrow_raw(self.as_raw_fd()) }.try_clone_to_owned()
    }

    /// The file another shard handed off, on this shard's executor.
    pub fn take_up(handoff: FileHandoff) -> Self {
        Self {
            file: BufferedFile::from_fd_and_path(handoff.fd, handoff.path.clone()),
            path: handoff.path,
        }
    }

    /// Writes all of `buf` at `position`; see `write_all_vectored_at`.
    pub fn write_all_at(&self, buf: &[u8], position: u64) -> io::Result<()> {
        self.write_all_vectored_at(&[buf], position)
    }

    /// Writes `parts` back to back from `position` with `pwritev` on the
    /// calling (shard) thread, as Kafka's request handlers write: a buffered
    /// write only copies into the page cache. Through io_uring, ext4 (no
    /// nonblocking buffered writes: RWF_NOWAIT is EOPNOTSUPP) hands every write
    /// to an io-wq worker, a thread wake-up and a cross-core copy per append;
    /// side by side that cost 7% of W1's throughput, 14% more broker CPU and
    /// 40% of W4's throughput. A buffered write to a regular file only comes
    /// back short when the disk is full, so a short write is an error.
    pub fn write_all_vectored_at(&self, parts: &[&[u8]], position: u64) -> io::Result<()> {
        assert!(parts.len() <= MAX_WRITE_PARTS);
        let len: usize = parts.iter().map(|part| part.len()).sum();
        let mut written = 0usize;
        while written < len {
            // What is left of the parts, in iovecs on the stack: no
            // allocation per append.
            let mut iovecs = [EMPTY_IOVEC; MAX_WRITE_PARTS];
            let count = remaining_iovecs(parts.iter().copied(), written, &mut iovecs);
            let at = (position + written as u64) as libc::off_t;
            // SAFETY: the first `count` iovecs cover live slices of `parts`.
            let n = unsafe {
                libc::pwritev(self.as_raw_fd(), iovecs.as_ptr(), count as libc::c_int, at)
            };
            match n {
                n if n > 0 => written += n as usize,
                0 => break,
                _ => {
                    let error = io::Error::last_os_error();
                    if error.kind() != io::ErrorKind::Interrupted {
                        return Err(error);
                    }
                }
            }
        }
        if written != len {
            return Err(io::Error::new(
                io::ErrorKind::WriteZero,
                format!(
                    "{}: wrote {written} of {len} bytes at {position}",
                    self.path.display()
                ),
            ));
        }
        Ok(())
    }

    /// Reads up to `len` bytes at `position`; fewer at the end of the file.
    pub async fn read_at(&self, position: u64, len: usize) -> io::Result<ReadResult> {
        self.file.read_at(position, len).await.map_err(to_io)
    }

    /// Reads up to `len` bytes at `position` into an owned buffer (fewer at
    /// the end of the file). What the page cache holds is copied straight in
    /// by `preadv2(RWF_NOWAIT)`, which never blocks the shard; the rest comes
    /// through io_uring. One copy instead of io_uring's buffer and a second.
    pub async fn read_owned(&self, position: u64, len: usize) -> io::Result<Vec<u8>> {
        let mut buf: Vec<u8> = Vec::with_capacity(len);
        while buf.len() < len {
            let iov = libc::iovec {
                iov_base: buf.spare_capacity_mut().as_mut_ptr().cast(),
                iov_len: len - buf.len(),
            };
            let at = (position + buf.len() as u64) as libc::off_t;
            // SAFETY: the iovec covers the vector's spare capacity, alive for the call.
            let read = unsafe { libc::preadv2(self.as_raw_fd(), &iov, 1, at, libc::RWF_NOWAIT) };
            if read <= 0 {
                // End of file, not cached (EAGAIN), or an error io_uring reports.
                break;
            }
            // SAFETY: the kernel initialised `read` more bytes.
            unsafe { buf.set_len(buf.len() + read as usize) };
        }
        if buf.len() < len {
            let rest = self
                .read_at(position + buf.len() as u64, len - buf.len())
                .await?;
            buf.extend_from_slice(&rest);
        }
        Ok(buf)
    }

    /// Whether the page cache holds every page of `[position, position + len)`:
    /// sending such a range never waits for the disk. False where the kernel
    /// cannot tell, and for a range past the end of the file.
    pub fn is_cached(&self, position: u64, len: usize) -> bool {
        if len == 0 {
            return true;
        }
        let first_page = position / PAGE_SIZE_BYTES;
        let end_page = (position + len as u64).div_ceil(PAGE_SIZE_BYTES);
        page_cache_stat(self, position, len as u64)
            .is_some_and(|stat| stat.cached_pages >= end_page - first_page)
    }

    /// `[position, position + size_bytes)` as `FileRecords`: a descriptor of
    /// its own (dup), so any shard can send it and it outlives this handle.
    pub fn file_records(&self, position: u64, size_bytes: usize) -> io::Result<FileRecords> {
        Ok(FileRecords {
            fd: self.duplicate_fd()?,
            position,
            size_bytes,
        })
    }

    /// Reads exactly `len` bytes at `position`, failing with UnexpectedEof.
    pub async fn read_exact_at(&self, position: u64, len: usize) -> io::Result<ReadResult> {
        let read = self.read_at(position, len).await?;
        if read.len() != len {
            return Err(io::Error::new(
                io::ErrorKind::UnexpectedEof,
                format!(
                    "{}: wanted {len} bytes at {position}, read {}",
                    self.path.display(),
                    read.len()
                ),
            ));
        }
        Ok(read)
    }

    pub async fn size_bytes(&self) -> io::Result<u64> {
        self.file.file_size().await.map_err(to_io)
    }

    /// Allocates the blocks of `[0, size_bytes)` ahead of the appends without
    /// changing the file's size (fallocate KEEP_SIZE, through io_uring): an
    /// append then lands in allocated extents, so neither it nor the writeback
    /// of the pages before it takes ext4's block-map lock to allocate, and an
    /// append no longer waits behind a writeback that waits for the disk.
    /// `truncate` to the file's size gives back what was not used. A file
    /// system without fallocate leaves the appends as they were.
    pub async fn preallocate(&self, size_bytes: u64) -> io::Result<()> {
        match self
            .file
            .pre_allocate(size_bytes, true)
            .await
            .map_err(to_io)
        {
            Err(error) if error.raw_os_error() == Some(libc::EOPNOTSUPP) => Ok(()),
            result => result,
        }
    }

    pub async fn truncate(&self, size_bytes: u64) -> io::Result<()> {
        self.file.truncate(size_bytes).await.map_err(to_io)
    }

    pub async fn fdatasync(&self) -> io::Result<()> {
        self.file.fdatasync().await.map_err(to_io)
    }

    pub async fn rename(&mut self, new_path: &Path) -> io::Result<()> {
        self.file.rename(new_path).await.map_err(to_io)?;
        self.path = new_path.to_owned();
        Ok(())
    }

    /// Unlinks the file, its blocks held past the deletion (`hold_past_deletion`).
    pub async fn remove(&self, hold: Duration) -> io::Result<()> {
        self.hold_past_deletion(hold);
        self.file.remove().await.map_err(to_io)
    }

    /// Before the file is unlinked (here or with its directory): a duplicate
    /// descriptor keeps its blocks for `hold` (the topic's
    /// `file.delete.delay.ms`, by when reads begun before the deletion are long
    /// done), then is closed on the blocking pool. A deleted file's blocks are freed by its last close,
    /// and on ext4 mounted with `discard` that close waits for the disk to
    /// discard them: 20-1000 ms seen per segment, in whichever thread closes.
    /// Held past every other descriptor (the segment's, a fetch's sendfile
    /// range), this one is the last; a hold shorter than those (a small
    /// `file.delete.delay.ms`) leaves the freeing to the one closed last.
    pub fn hold_past_deletion(&self, hold: Duration) {
        if HELD_DELETED_FILES.get() >= MAX_HELD_DELETED_FILES {
            return; // its own descriptor's close frees it, on this thread
        }
        let Ok(held) = self.duplicate_fd() else {
            return; // out of descriptors: as above
        };
        HELD_DELETED_FILES.set(HELD_DELETED_FILES.get() + 1);
        glommio::spawn_local(async move {
            glommio::timer::sleep(hold).await;
            let _ = disk_bound(glommio::executor().spawn_blocking(move || drop(held))).await;
            HELD_DELETED_FILES.set(HELD_DELETED_FILES.get() - 1);
        })
        .detach();
    }
}

/// What the page cache holds of a file's range, in pages.
#[derive(Debug, Clone, Copy)]
pub struct PageCacheStat {
    pub cached_pages: u64,
    pub dirty_pages: u64,
}

/// cachestat(2) of `[position, position + len)`; None where the kernel has none.
pub fn page_cache_stat(file: &impl AsRawFd, position: u64, len: u64) -> Option<PageCacheStat> {
    #[repr(C)]
    struct CachestatRange {
        off: u64,
        len: u64,
    }
    #[repr(C)]
    #[derive(Default)]
    struct Cachestat {
        nr_cache: u64,
        nr_dirty: u64,
        nr_writeback: u64,
        nr_evicted: u64,
        nr_recently_evicted: u64,
    }
    let range = CachestatRange { off: position, len };
    let mut stat = Cachestat::default();
    // SAFETY: both structs are live and laid out as the kernel's.
    let status = unsafe {
        libc::syscall(
            SYS_CACHESTAT,
            file.as_raw_fd(),
            &range as *const CachestatRange,
            &mut stat as *mut Cachestat,
            0,
        )
    };
    (status == 0).then_some(PageCacheStat {
        cached_pages: stat.nr_cache,
        dirty_pages: stat.nr_dirty,
    })
}

/// Stored batches a fetch response sends straight from the page cache with
/// sendfile(2), as Kafka's `FileRecords.writeTo` does: no copy in user space.
/// The descriptor is the range's own, so the range stays readable after its
/// segment is deleted or replaced, and it may cross to another shard.
#[derive(Debug)]
pub struct FileRecords {
    fd: OwnedFd,
    position: u64,
    size_bytes: usize,
}

impl FileRecords {
    pub fn size_bytes(&self) -> usize {
        self.size_bytes
    }

    pub fn position(&self) -> u64 {
        self.position
    }

    /// Starts writeback of the range's dirty pages without waiting for it
    /// (sync_file_range SYNC_FILE_RANGE_WRITE). WAIT_BEFORE first waits out the
    /// writeback already running on the range's pages: WRITE alone skips a page
    /// under writeback, so the page an earlier chunk ended in, dirtied again by
    /// the next append, stayed dirty until the kernel's own flusher (30 s).
    /// Blocking: for the blocking pool.
    pub fn start_writeback(&self) -> io::Result<()> {
        self.sync_range(libc::SYNC_FILE_RANGE_WAIT_BEFORE | libc::SYNC_FILE_RANGE_WRITE)
    }

    /// Drops the range's pages from the page cache: written back first and
    /// waited for (POSIX_FADV_DONTNEED leaves dirty pages and pages under
    /// writeback in the cache). Blocking: for the blocking pool.
    pub fn drop_from_page_cache(&self) -> io::Result<()> {
        self.sync_range(
            libc::SYNC_FILE_RANGE_WAIT_BEFORE
                | libc::SYNC_FILE_RANGE_WRITE
                | libc::SYNC_FILE_RANGE_WAIT_AFTER,
        )?;
        // SAFETY: a plain fadvise on a descriptor this value owns.
        let error = unsafe {
            libc::posix_fadvise(
                self.fd.as_raw_fd(),
                self.position as libc::off64_t,
                self.size_bytes as libc::off64_t,
                libc::POSIX_FADV_DONTNEED,
            )
        };
        if error != 0 {
            return Err(io::Error::from_raw_os_error(error));
        }
        Ok(())
    }

    fn sync_range(&self, flags: libc::c_uint) -> io::Result<()> {
        // SAFETY: a plain syscall on a descriptor this value owns.
        let status = unsafe {
            libc::sync_file_range(
                self.fd.as_raw_fd(),
                self.position as libc::off64_t,
                self.size_bytes as libc::off64_t,
                flags,
            )
        };
        if status < 0 {
            return Err(io::Error::last_os_error());
        }
        Ok(())
    }

    /// Copies the range's bytes from `offset` (within the range) into `buf`;
    /// how many, 0 at the end of the range or of the file. A blocking pread:
    /// for ranges the page cache holds.
    pub fn read_at(&self, offset: usize, buf: &mut [u8]) -> io::Result<usize> {
        let len = buf.len().min(self.size_bytes.saturating_sub(offset));
        loop {
            // SAFETY: the pointer and length stay within `buf`.
            let read = unsafe {
                libc::pread(
                    self.fd.as_raw_fd(),
                    buf.as_mut_ptr().cast(),
                    len,
                    (self.position + offset as u64) as libc::off_t,
                )
            };
            if read >= 0 {
                return Ok(read as usize);
            }
            let error = io::Error::last_os_error();
            if error.kind() != io::ErrorKind::Interrupted {
                return Err(error);
            }
        }
    }
}

impl AsRawFd for FileRecords {
    fn as_raw_fd(&self) -> RawFd {
        self.fd.as_raw_fd()
    }
}

impl AsRawFd for SegmentFile {
    fn as_raw_fd(&self) -> RawFd {
        self.file.as_raw_fd()
    }
}
