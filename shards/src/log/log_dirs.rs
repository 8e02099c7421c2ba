//! The broker's `log.dirs`, shared by every shard: which partitions live where,
//! which directories are offline, and the per-directory checkpoint files
//! (`recovery-point-offset-checkpoint`, `replication-offset-checkpoint`,
//! `log-start-offset-checkpoint`, `cleaner-offset-checkpoint`) and
//! clean-shutdown marker. Each directory is
//! locked through its `.lock` file for the life of the process, so two brokers
//! never share one.

use std::collections::BTreeMap;
use std::fs::File;
use std::io;
use std::os::fd::AsRawFd;
use std::path::{Path, PathBuf};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex, OnceLock};

use futures_channel::mpsc;
use tracing::{error, warn};

use super::checkpoint::{read_checkpoint_file, write_checkpoint_file};
use super::file_names::{
    CLEANER_CHECKPOINT_FILE, CLEAN_SHUTDOWN_FILE, DELETE_DIR_SUFFIX, FUTURE_DIR_SUFFIX, LOCK_FILE,
    LOG_START_OFFSET_CHECKPOINT_FILE, RECOVERY_POINT_CHECKPOINT_FILE, REPLICATION_CHECKPOINT_FILE,
};
use super::{HandedOffLog, LogError, TopicPartition};

/// One log directory's health, shared by every log in it. The first I/O error
/// takes the whole directory offline, as in Kafka; its partitions then answer
/// KAFKA_STORAGE_ERROR while the rest of the broker keeps serving.
#[derive(Clone, Debug)]
pub struct LogDirHealth {
    inner: Arc<LogDirHealthInner>,
}

#[derive(Debug)]
struct LogDirHealthInner {
    path: PathBuf,
    offline: AtomicBool,
    /// Why the directory went offline, set once with `offline`.
    reason: OnceLock<String>,
    /// Kafka's LogDirFailureChannel: told once, when the directory goes offline.
    failures: Option<mpsc::Sender<PathBuf>>,
}

impl LogDirHealth {
    pub fn new(path: &Path) -> Self {
        Self::reporting_to(path, None)
    }

    fn reporting_to(path: &Path, failures: Option<mpsc::Sender<PathBuf>>) -> Self {
        Self {
            inner: Arc::new(LogDirHealthInner {
                path: path.to_owned(),
                offline: AtomicBool::new(false),
                reason: OnceLock::new(),
                failures,
            }),
        }
    }
    pub fn path(&self) -> &Path {
        &self.inner.path
    }
    pub fn is_offline(&self) -> bool {
        self.inner.offline.load(Ordering::Acquire)
    }
    /// The error that took the directory offline.
    pub fn offline_reason(&self) -> Option<&str> {
        self.inner.reason.get().map(String::as_str)
    }
    pub fn check(&self) -> Result<(), LogError> {
        if self.is_offline() {
            return Err(LogError::KafkaStorage(format!(
                "log directory {} is offline",
                self.path().display()
            )));
        }
        Ok(())
    }
    /// Passes `error` through; a storage error takes the directory offline.
    pub fn on_error(&self, error: LogError) -> LogError {
        if let LogError::KafkaStorage(reason) = &error {
            let _ = self.inner.reason.set(reason.clone());
            if !self.inner.offline.swap(true, Ordering::AcqRel) {
                error!(dir = %self.path().display(), %error, "log directory failed; taking it offline");
                if let Some(failures) = &self.inner.failures {
                    // One message per directory: the channel holds them all.
                    failures
                        .clone()
                        .try_send(self.path().to_owned())
                        .expect("room for every directory's failure");
                }
            }
        }
        error
    }
}

/// What the checkpoint files remember of one partition.
#[derive(Debug, Clone, Copy, PartialEq, Eq, Default)]
pub struct PartitionCheckpoint {
    pub recovery_point: i64,
    pub high_watermark: Option<i64>,
    /// Only where DeleteRecords moved it past the first segment's base.
    pub log_start_offset: Option<i64>,
    pub first_dirty_offset: Option<i64>,
}

#[derive(Debug, Default)]
struct DirState {
    partitions: BTreeMap<TopicPartition, PartitionCheckpoint>,
    /// What the checkpoint files hold, once written: an unchanged dir is not
    /// written again (an idle broker does no disk work).
    written: Option<BTreeMap<TopicPartition, PartitionCheckpoint>>,
}

pub struct LogDir {
    pub health: LogDirHealth,
    pub had_clean_shutdown: bool,
    /// Holds the directory's `.lock` until the process ends; None when offline.
    _lock: Option<File>,
}

pub struct LogDirs {
    dirs: Vec<LogDir>,
    state: Mutex<Vec<DirState>>,
    /// The directories that went offline, in order, until taken.
    failures: Mutex<Option<mpsc::Receiver<PathBuf>>>,
    /// Logs one shard handed off (`LogManager::hand_off`; their checkpoints
    /// are in `state`), for the shard the partition moves to to take up.
    handoffs: Mutex<BTreeMap<TopicPartition, HandedOffLog>>,
}

/// Why the broker cannot start on its `log.dirs`.
#[derive(Debug)]
pub enum LogDirsError {
    /// Another process holds the directory's `.lock`.
    Locked(PathBuf),
    /// Every directory is unusable: each with its reason.
    NoneUsable(Vec<(PathBuf, String)>),
}

impl std::fmt::Display for LogDirsError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            // Kafka's own words (LogManager.lockLogDirs).
            LogDirsError::Locked(dir) => write!(
                f,
                "Failed to acquire lock on file {LOCK_FILE} in {}. A Kafka instance in another \
                 process or thread is using this directory.",
                dir.display()
            ),
            LogDirsError::NoneUsable(dirs) => {
                f.write_str("none of the log dirs can be used:")?;
                for (dir, reason) in dirs {
                    write!(f, " {}: {reason};", dir.display())?;
                }
                Ok(())
            }
        }
    }
}

impl std::error::Error for LogDirsError {}

impl LogDirs {
    /// Locks every directory (creating it if needed), then reads its checkpoints
    /// and consumes its clean-shutdown marker. A directory that cannot be created,
    /// written or read starts offline; one locked by another process, or no usable
    /// directory at all, stops the start before anything in a directory is touched.
    pub fn open(paths: &[PathBuf]) -> Result<Arc<Self>, LogDirsError> {
        assert!(
            !paths.is_empty(),
            "log.dirs must name at least one directory"
        );
        let mut locks = Vec::new();
        for path in paths {
            match lock_dir(path) {
                Ok(Some(lock)) => locks.push(Ok(lock)),
                Ok(None) => return Err(LogDirsError::Locked(path.clone())),
                Err(error) => locks.push(Err(error)),
            }
        }
        let mut dirs = Vec::new();
        let mut states = Vec::new();
        let (failures, failed) = mpsc::channel(paths.len());
        for (path, lock) in paths.iter().zip(locks) {
            let health = LogDirHealth::reporting_to(path, Some(failures.clone()));
            match lock.and_then(|lock| Ok((lock, Self::open_dir(path)?))) {
                Ok((lock, (had_clean_shutdown, state))) => {
                    dirs.push(LogDir {
                        health,
                        had_clean_shutdown,
                        _lock: Some(lock),
                    });
                    states.push(state);
                }
                Err(error) => {
                    // Logged by on_error, with the directory and the reason.
                    health.on_error(error.into());
                    dirs.push(LogDir {
                        health,
                        had_clean_shutdown: false,
                        _lock: None,
                    });
                    states.push(DirState::default());
                }
            }
        }
        if dirs.iter().all(|dir| dir.health.is_offline()) {
            return Err(LogDirsError::NoneUsable(
                dirs.iter()
                    .map(|dir| {
                        let reason = dir.health.offline_reason().unwrap_or("offline");
                        (dir.health.path().to_owned(), reason.to_owned())
                    })
                    .collect(),
            ));
        }
        Ok(Arc::new(Self {
            dirs,
            state: Mutex::new(states),
            failures: Mutex::new(Some(failed)),
            handoffs: Mutex::default(),
        }))
    }

    /// Every directory that goes offline (those that started offline
    /// first), for the one that handles it (Kafka's LogDirFailureHandler).
    pub fn take_failures(&self) -> Option<mpsc::Receiver<PathBuf>> {
        self.failures
            .lock()
            .expect("no panics under the lock")
            .take()
    }

    /// Whether `tp`'s log is in a directory that is offline.
    pub fn is_offline(&self, tp: &TopicPartition) -> bool {
        self.find(tp)
            .is_some_and(|(dir, _)| self.dirs[dir].health.is_offline())
    }

    fn open_dir(path: &Path) -> io::Result<(bool, DirState)> {
        let marker = path.join(CLEAN_SHUTDOWN_FILE);
        let had_clean_shutdown = marker.exists();
        if had_clean_shutdown {
            std::fs::remove_file(&marker)?;
            // A marker that reappears after a power loss would skip recovery.
            std::fs::File::open(path)?.sync_all()?;
        }
        let mut state = DirState::default();
        for entry in std::fs::read_dir(path)? {
            let entry = entry?;
            if !entry.file_type()?.is_dir() {
                continue;
            }
            let name = entry.file_name().to_string_lossy().into_owned();
            if name.ends_with(DELETE_DIR_SUFFIX) || name.ends_with(FUTURE_DIR_SUFFIX) {
                // A deletion, or a move to this dir, the last run did not
                // finish (a move's source is still whole).
                std::fs::remove_dir_all(entry.path())?;
            } else if let Some(tp) = TopicPartition::from_dir_name(&name) {
                state.partitions.insert(tp, PartitionCheckpoint::default());
            }
        }
        let read = |file: &str| -> io::Result<Vec<(TopicPartition, i64)>> {
            // Kafka's answer to an unreadable checkpoint: warn and start from zero
            // (recovery then rescans), never refuse the directory.
            let lines = match read_checkpoint_file(&path.join(file)) {
                Ok(lines) => lines.unwrap_or_default(),
                Err(error) => {
                    warn!(dir = %path.display(), file, %error, "unreadable checkpoint; ignoring it");
                    Vec::new()
                }
            };
            lines
                .iter()
                .map(|line| {
                    let parts: Vec<&str> = line.split_whitespace().collect();
                    match parts.as_slice() {
                        [topic, partition, offset] => Ok((
                            TopicPartition::new(*topic, partition.parse().map_err(bad_line)?),
                            offset.parse().map_err(bad_line)?,
                        )),
                        _ => Err(bad_line(line)),
                    }
                })
                .collect::<io::Result<Vec<_>>>()
                .or_else(|error| {
                    warn!(dir = %path.display(), file, %error, "unreadable checkpoint; ignoring it");
                    Ok(Vec::new())
                })
        };
        for (tp, offset) in read(RECOVERY_POINT_CHECKPOINT_FILE)? {
            if let Some(checkpoint) = state.partitions.get_mut(&tp) {
                checkpoint.recovery_point = offset;
            }
        }
        for (tp, offset) in read(REPLICATION_CHECKPOINT_FILE)? {
            if let Some(checkpoint) = state.partitions.get_mut(&tp) {
                checkpoint.high_watermark = Some(offset);
            }
        }
        for (tp, offset) in read(LOG_START_OFFSET_CHECKPOINT_FILE)? {
            if let Some(checkpoint) = state.partitions.get_mut(&tp) {
                checkpoint.log_start_offset = Some(offset);
            }
        }
        for (tp, offset) in read(CLEANER_CHECKPOINT_FILE)? {
            if let Some(checkpoint) = state.partitions.get_mut(&tp) {
                checkpoint.first_dirty_offset = Some(offset);
            }
        }
        Ok((had_clean_shutdown, state))
    }

    pub fn dirs(&self) -> &[LogDir] {
        &self.dirs
    }

    /// Every partition found on disk, with the index of its directory.
    pub fn partitions(&self) -> Vec<(usize, TopicPartition)> {
        let state = self.state.lock().unwrap();
        state
            .iter()
            .enumerate()
            .flat_map(|(dir, s)| s.partitions.keys().map(move |tp| (dir, tp.clone())))
            .collect()
    }

    pub fn find(&self, tp: &TopicPartition) -> Option<(usize, PartitionCheckpoint)> {
        let state = self.state.lock().unwrap();
        state
            .iter()
            .enumerate()
            .find_map(|(dir, s)| s.partitions.get(tp).map(|c| (dir, *c)))
    }

    /// Places a new partition in the online directory holding the fewest.
    pub fn assign_dir(&self, tp: &TopicPartition) -> Result<usize, LogError> {
        if let Some((dir, _)) = self.find(tp) {
            return Ok(dir);
        }
        let mut state = self.state.lock().unwrap();
        let dir = (0..self.dirs.len())
            .filter(|&i| !self.dirs[i].health.is_offline())
            .min_by_key(|&i| state[i].partitions.len())
            .ok_or_else(|| LogError::KafkaStorage("every log directory is offline".into()))?;
        state[dir]
            .partitions
            .insert(tp.clone(), PartitionCheckpoint::default());
        Ok(dir)
    }

    pub fn partition_dir(&self, dir: usize, tp: &TopicPartition) -> PathBuf {
        self.dirs[dir].health.path().join(tp.to_string())
    }

    pub fn update(&self, tp: &TopicPartition, checkpoint: PartitionCheckpoint) {
        let mut state = self.state.lock().unwrap();
        if let Some(entry) = state.iter_mut().find_map(|s| s.partitions.get_mut(tp)) {
            *entry = checkpoint;
        }
    }

    pub fn hand_over(&self, tp: TopicPartition, log: HandedOffLog) {
        let displaced = self.handoffs.lock().unwrap().insert(tp, log);
        assert!(
            displaced.is_none(),
            "a log is handed off once before it is taken"
        );
    }

    pub fn take_handoff(&self, tp: &TopicPartition) -> Option<HandedOffLog> {
        self.handoffs.lock().unwrap().remove(tp)
    }

    /// The partition now lives in directory `dir`, at `checkpoint`.
    pub fn move_to(&self, tp: &TopicPartition, dir: usize, checkpoint: PartitionCheckpoint) {
        let mut state = self.state.lock().unwrap();
        for s in state.iter_mut() {
            s.partitions.remove(tp);
        }
        state[dir].partitions.insert(tp.clone(), checkpoint);
    }

    pub fn remove(&self, tp: &TopicPartition) {
        self.handoffs.lock().unwrap().remove(tp);
        let mut state = self.state.lock().unwrap();
        for s in state.iter_mut() {
            s.partitions.remove(tp);
        }
    }

    /// Writes every online directory's checkpoint files.
    pub fn write_checkpoints(&self) -> io::Result<()> {
        let snapshot: Vec<Option<BTreeMap<TopicPartition, PartitionCheckpoint>>> = {
            let state = self.state.lock().unwrap();
            state
                .iter()
                .map(|s| (s.written.as_ref() != Some(&s.partitions)).then(|| s.partitions.clone()))
                .collect()
        };
        for (index, (dir, partitions)) in self.dirs.iter().zip(snapshot).enumerate() {
            let Some(partitions) = partitions else {
                continue;
            };
            if dir.health.is_offline() {
                continue;
            }
            let path = dir.health.path();
            let lines = |pick: &dyn Fn(&PartitionCheckpoint) -> Option<i64>| -> Vec<String> {
                partitions
                    .iter()
                    .filter_map(|(tp, c)| {
                        pick(c).map(|o| format!("{} {} {o}", tp.topic, tp.partition))
                    })
                    .collect()
            };
            let result = write_checkpoint_file(
                &path.join(RECOVERY_POINT_CHECKPOINT_FILE),
                &lines(&|c| Some(c.recovery_point)),
            )
            .and_then(|_| {
                write_checkpoint_file(
                    &path.join(REPLICATION_CHECKPOINT_FILE),
                    &lines(&|c| c.high_watermark),
                )
            })
            .and_then(|_| {
                write_checkpoint_file(
                    &path.join(LOG_START_OFFSET_CHECKPOINT_FILE),
                    &lines(&|c| c.log_start_offset),
                )
            })
            .and_then(|_| {
                write_checkpoint_file(
                    &path.join(CLEANER_CHECKPOINT_FILE),
                    &lines(&|c| c.first_dirty_offset),
                )
            });
            match result {
                Ok(()) => self.state.lock().unwrap()[index].written = Some(partitions),
                Err(error) => {
                    dir.health.on_error(error.into());
                }
            }
        }
        Ok(())
    }

    /// Leaves the marker that lets the next start skip recovery. Only after every
    /// log is flushed and the checkpoints are written; none while a log handed
    /// off between shards (never flushed by its old shard) is in nobody's hands.
    pub fn mark_clean_shutdown(&self) -> io::Result<()> {
        if !self.handoffs.lock().unwrap().is_empty() {
            warn!("a partition was moving between shards; the next start recovers");
            return Ok(());
        }
        for dir in &self.dirs {
            if !dir.health.is_offline() {
                std::fs::write(dir.health.path().join(CLEAN_SHUTDOWN_FILE), b"")?;
            }
        }
        Ok(())
    }
}

/// Creates `path` if needed and locks its `.lock` file. Creating that file is
/// also the check that the directory can be written. The lock is an
/// open-file-description lock, which conflicts with the POSIX lock a Kafka
/// broker (Java's FileChannel.tryLock) takes on the same file, so neither
/// broker can start on the other's directory. None: another process holds it.
fn lock_dir(path: &Path) -> io::Result<Option<File>> {
    std::fs::create_dir_all(path)?;
    let file = std::fs::OpenOptions::new()
        .read(true)
        .write(true)
        .create(true)
        .truncate(false)
        .open(path.join(LOCK_FILE))?;
    // SAFETY: a zeroed flock is a valid "whole file" range; the descriptor is
    // open for the duration of the call.
    let result = unsafe {
        let mut lock: libc::flock = std::mem::zeroed();
        lock.l_type = libc::F_WRLCK as libc::c_short;
        lock.l_whence = libc::SEEK_SET as libc::c_short;
        libc::fcntl(file.as_raw_fd(), libc::F_OFD_SETLK, &lock)
    };
    if result == 0 {
        return Ok(Some(file));
    }
    let error = io::Error::last_os_error();
    match error.raw_os_error() {
        Some(libc::EAGAIN | libc::EACCES) => Ok(None),
        _ => Err(error),
    }
}

fn bad_line(what: impl std::fmt::Display) -> io::Error {
    io::Error::new(
        io::ErrorKind::InvalidData,
        format!("bad checkpoint entry: {what}"),
    )
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_locked_dir_stops_the_start_before_anything_in_it_is_touched() {
        let root = tempfile::tempdir().unwrap();
        let (first, second) = (root.path().join("a"), root.path().join("b"));
        let running = LogDirs::open(std::slice::from_ref(&first)).unwrap();
        running.mark_clean_shutdown().unwrap();
        let error = match LogDirs::open(&[second.clone(), first.clone()]) {
            Err(error) => error,
            Ok(_) => panic!("a locked dir was opened twice"),
        };
        assert!(matches!(&error, LogDirsError::Locked(dir) if *dir == first));
        assert!(error.to_string().contains(&*first.to_string_lossy()));
        assert!(
            first.join(CLEAN_SHUTDOWN_FILE).exists(),
            "the running broker's marker is left alone"
        );
        drop(running);
        let reopened = LogDirs::open(std::slice::from_ref(&first)).unwrap();
        assert!(reopened.dirs()[0].had_clean_shutdown);
    }

    #[test]
    fn an_uncreatable_dir_starts_offline_and_none_usable_names_each() {
        let root = tempfile::tempdir().unwrap();
        let file = root.path().join("a-file");
        std::fs::write(&file, b"").unwrap();
        let (bad, good) = (file.join("logs"), root.path().join("good"));
        let dirs = LogDirs::open(&[bad.clone(), good.clone()]).unwrap();
        assert!(dirs.dirs()[0].health.is_offline());
        assert!(dirs.dirs()[0].health.offline_reason().is_some());
        assert!(!dirs.dirs()[1].health.is_offline());
        assert_eq!(
            dirs.assign_dir(&TopicPartition::new("t", 0)).unwrap(),
            1,
            "nothing is placed in an offline dir"
        );
        let other_bad = file.join("more");
        match LogDirs::open(&[bad.clone(), other_bad.clone()]) {
            Err(LogDirsError::NoneUsable(reasons)) => {
                let named: Vec<&PathBuf> = reasons.iter().map(|(dir, _)| dir).collect();
                assert_eq!(named, vec![&bad, &other_bad]);
                assert!(reasons.iter().all(|(_, reason)| !reason.is_empty()));
            }
            other => panic!("expected NoneUsable, got {:?}", other.err()),
        }
    }
}
