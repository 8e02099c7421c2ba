//! The embedded metadata store: ZooKeeper's data model and semantics (znodes
//! with versions for compare-and-set, a zxid per transaction and each node's
//! czxid, ephemeral nodes owned by this process's session, sequential nodes,
//! atomic `multi`, one-shot watches) for a broker with no `zookeeper.connect`,
//! persisted under its first log dir. The controller drives it through
//! `ZkClient`, exactly as it drives ZooKeeper.
//!
//! A write is answered once it is on disk. Writes issued together (pipelined,
//! as the controller issues a topic's partition states) share one snapshot:
//! each applies in memory at once, then yields once before the first of them
//! writes the tree for all.

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, BTreeSet};
use std::path::{Path, PathBuf};

use glommio::channels::local_channel;
use shards::log::{read_checkpoint_file, write_checkpoint_file};

use super::zk_client::{
    CreateMode, EventType, MultiError, Op, OpResult, Stat, ZkClient, ZkError, ZkEvent,
    ZkEventReceiver, ZkEventSender,
};

pub const METADATA_DIR: &str = "__embedded_metadata";
const SNAPSHOT_FILE: &str = "znodes";
/// The snapshot's first entry: the last zxid handed out, so epochs taken
/// from czxids grow across restarts even when the node is gone.
const ZXID_ENTRY: &str = "zxid";

#[derive(Debug, Clone, PartialEq, Eq)]
struct Znode {
    data: Vec<u8>,
    version: i32,
    /// Children created so far: the next sequential child's number.
    cversion: i32,
    czxid: i64,
    ephemeral: bool,
}

fn parent_of(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(at) => Some(&path[..at]),
    }
}

fn hex(bytes: &[u8]) -> String {
    bytes.iter().map(|b| format!("{b:02x}")).collect()
}

fn unhex(text: &str) -> Option<Vec<u8>> {
    if text.len() % 2 != 0 {
        return None;
    }
    (0..text.len())
        .step_by(2)
        .map(|i| u8::from_str_radix(&text[i..i + 2], 16).ok())
        .collect()
}

/// The tree itself, changed only by `apply`.
struct Tree {
    nodes: BTreeMap<String, Znode>,
    last_zxid: i64,
    session_id: i64,
    data_watches: BTreeSet<String>,
    child_watches: BTreeSet<String>,
}

impl Tree {
    fn children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        if !self.nodes.contains_key(path) {
            return Err(ZkError::NoNode(path.to_owned()));
        }
        let prefix = if path == "/" {
            "/".to_owned()
        } else {
            format!("{path}/")
        };
        Ok(self
            .nodes
            .range(prefix.clone()..)
            .take_while(|(p, _)| p.starts_with(&prefix))
            .filter(|(p, _)| p.len() > prefix.len() && !p[prefix.len()..].contains('/'))
            .map(|(p, _)| p[prefix.len()..].to_owned())
            .collect())
    }

    fn stat(&self, node: &Znode) -> Stat {
        Stat {
            czxid: node.czxid,
            version: node.version,
            ephemeral_owner: if node.ephemeral { self.session_id } else { 0 },
        }
    }

    fn check_version(path: &str, node: &Znode, expected: Option<i32>) -> Result<(), ZkError> {
        match expected {
            Some(expected) if expected != node.version => Err(ZkError::BadVersion(path.to_owned())),
            _ => Ok(()),
        }
    }

    /// Applies one operation of transaction `zxid`, remembering in `undo`
    /// what it changed and in `events` the watches it fires.
    fn apply(
        &mut self,
        op: &Op,
        zxid: i64,
        undo: &mut Vec<(String, Option<Znode>)>,
        events: &mut Vec<(String, EventType)>,
    ) -> Result<OpResult, ZkError> {
        match op {
            Op::Check { path, version } => {
                let node = self
                    .nodes
                    .get(path)
                    .ok_or_else(|| ZkError::NoNode(path.clone()))?;
                Self::check_version(path, node, Some(*version))?;
                Ok(OpResult::Check)
            }
            Op::Create { path, data, mode } => {
                let parent_path = parent_of(path).ok_or_else(|| ZkError::NoNode(path.clone()))?;
                let parent = self
                    .nodes
                    .get(parent_path)
                    .ok_or_else(|| ZkError::NoNode(parent_path.to_owned()))?;
                if parent.ephemeral {
                    return Err(ZkError::NoChildrenForEphemerals(parent_path.to_owned()));
                }
                let path = if mode.is_sequential() {
                    format!("{path}{:010}", parent.cversion)
                } else {
                    path.clone()
                };
                if self.nodes.contains_key(&path) {
                    return Err(ZkError::NodeExists(path));
                }
                let parent_path = parent_path.to_owned();
                undo.push((parent_path.clone(), Some(parent.clone())));
                self.nodes
                    .get_mut(&parent_path)
                    .expect("the parent was just read")
                    .cversion += 1;
                let node = Znode {
                    data: data.clone(),
                    version: 0,
                    cversion: 0,
                    czxid: zxid,
                    ephemeral: mode.is_ephemeral(),
                };
                let stat = self.stat(&node);
                undo.push((path.clone(), None));
                self.nodes.insert(path.clone(), node);
                events.push((path.clone(), EventType::NodeCreated));
                events.push((parent_path, EventType::NodeChildrenChanged));
                Ok(OpResult::Create { path, stat })
            }
            Op::SetData {
                path,
                data,
                version,
            } => {
                let node = self
                    .nodes
                    .get(path)
                    .ok_or_else(|| ZkError::NoNode(path.clone()))?;
                Self::check_version(path, node, *version)?;
                undo.push((path.clone(), Some(node.clone())));
                let node = self.nodes.get_mut(path).expect("the node was just read");
                node.data = data.clone();
                node.version += 1;
                let node = node.clone();
                events.push((path.clone(), EventType::NodeDataChanged));
                Ok(OpResult::SetData {
                    stat: self.stat(&node),
                })
            }
            Op::Delete { path, version } => {
                let node = self
                    .nodes
                    .get(path)
                    .ok_or_else(|| ZkError::NoNode(path.clone()))?;
                Self::check_version(path, node, *version)?;
                if !self.children(path)?.is_empty() {
                    return Err(ZkError::NotEmpty(path.clone()));
                }
                let node = self.nodes.remove(path).expect("the node was just read");
                undo.push((path.clone(), Some(node)));
                events.push((path.clone(), EventType::NodeDeleted));
                if let Some(parent) = parent_of(path) {
                    events.push((parent.to_owned(), EventType::NodeChildrenChanged));
                }
                Ok(OpResult::Delete)
            }
        }
    }

    fn restore(&mut self, undo: Vec<(String, Option<Znode>)>) {
        for (path, node) in undo.into_iter().rev() {
            match node {
                Some(node) => self.nodes.insert(path, node),
                None => self.nodes.remove(&path),
            };
        }
    }

    /// One-shot watches that `events` fire, removed as they fire.
    fn fire(&mut self, events: Vec<(String, EventType)>) -> Vec<ZkEvent> {
        let mut fired = Vec::new();
        for (path, event) in events {
            let watches = match event {
                EventType::NodeChildrenChanged => &mut self.child_watches,
                _ => &mut self.data_watches,
            };
            if watches.remove(&path) {
                fired.push(ZkEvent::Watched {
                    path: path.clone(),
                    event,
                });
            }
            // A deleted node's child watch fires too, as ZooKeeper's does.
            if event == EventType::NodeDeleted && self.child_watches.remove(&path) {
                fired.push(ZkEvent::Watched { path, event });
            }
        }
        fired
    }

    fn snapshot(&self) -> Vec<String> {
        let mut lines = vec![format!("{ZXID_ENTRY} {}", self.last_zxid)];
        lines.extend(
            self.nodes
                .iter()
                .filter(|(_, node)| !node.ephemeral)
                .map(|(path, node)| {
                    format!(
                        "{} {} {} {path} {}",
                        node.version,
                        node.cversion,
                        node.czxid,
                        hex(&node.data)
                    )
                }),
        );
        lines
    }
}

pub struct EmbeddedStore {
    snapshot_path: PathBuf,
    tree: RefCell<Tree>,
    events: ZkEventSender,
    /// Writes applied in memory, and how many of them are on disk.
    writes_applied: Cell<u64>,
    writes_persisted: Cell<u64>,
    snapshots_written: Cell<u64>,
    /// Why a snapshot could not be written: the tree in memory is then ahead
    /// of the disk, so the store refuses everything after.
    failed: RefCell<Option<String>>,
}

/// `version cversion czxid path data`, or `version path data` as snapshots
/// were written before czxids were kept.
fn parse_entry(line: &str) -> Option<(String, Znode)> {
    let legacy = line.split(' ').nth(1)?.starts_with('/');
    let mut parts = line.splitn(if legacy { 3 } else { 5 }, ' ');
    let version = parts.next()?.parse().ok()?;
    let (cversion, czxid) = if legacy {
        (0, 0)
    } else {
        (parts.next()?.parse().ok()?, parts.next()?.parse().ok()?)
    };
    let path = parts.next()?.to_owned();
    let data = unhex(parts.next().unwrap_or(""))?;
    Some((
        path,
        Znode {
            data,
            version,
            cversion,
            czxid,
            ephemeral: false,
        },
    ))
}

impl EmbeddedStore {
    /// Opens (or starts) the store kept under `log_dir`, with a new session:
    /// ephemeral nodes never survive a restart, they belonged to the previous
    /// process. Fired watches go to the returned queue.
    pub fn open(log_dir: &Path) -> Result<(Self, ZkEventReceiver), ZkError> {
        let io = |error: std::io::Error| ZkError::Io(error.to_string());
        let dir = log_dir.join(METADATA_DIR);
        std::fs::create_dir_all(&dir).map_err(io)?;
        let snapshot_path = dir.join(SNAPSHOT_FILE);
        let root = Znode {
            data: Vec::new(),
            version: 0,
            cversion: 0,
            czxid: 0,
            ephemeral: false,
        };
        let mut nodes = BTreeMap::from([("/".to_owned(), root)]);
        let mut last_zxid = 0;
        let entries = read_checkpoint_file(&snapshot_path)
            .map_err(io)?
            .unwrap_or_default();
        for line in entries {
            if let Some(zxid) = line.strip_prefix(ZXID_ENTRY).map(str::trim) {
                last_zxid = zxid.parse().map_err(|_| {
                    ZkError::Io(format!("{}: bad zxid {line:?}", snapshot_path.display()))
                })?;
                continue;
            }
            let (path, node) = parse_entry(&line).ok_or_else(|| {
                ZkError::Io(format!("{}: bad entry {line:?}", snapshot_path.display()))
            })?;
            last_zxid = last_zxid.max(node.czxid);
            nodes.insert(path, node);
        }
        // A session id no earlier process had: the next zxid is past theirs.
        let session_id = last_zxid + 1;
        let (events, receiver) = local_channel::new_unbounded();
        let store = Self {
            snapshot_path,
            tree: RefCell::new(Tree {
                nodes,
                last_zxid,
                session_id,
                data_watches: BTreeSet::new(),
                child_watches: BTreeSet::new(),
            }),
            events,
            writes_applied: Cell::new(0),
            writes_persisted: Cell::new(0),
            snapshots_written: Cell::new(0),
            failed: RefCell::new(None),
        };
        Ok((store, receiver))
    }

    /// Applies `ops` as one transaction, all or none, and fires its watches.
    /// Returns the number of the write, for `durable`.
    fn transact(&self, ops: &[Op]) -> Result<(Vec<OpResult>, u64), MultiError> {
        self.check_failed()?;
        let mut tree = self.tree.borrow_mut();
        let zxid = tree.last_zxid + 1;
        let mut undo = Vec::new();
        let mut events = Vec::new();
        let mut results = Vec::with_capacity(ops.len());
        for (index, op) in ops.iter().enumerate() {
            match tree.apply(op, zxid, &mut undo, &mut events) {
                Ok(result) => results.push(result),
                Err(error) => {
                    tree.restore(undo);
                    return Err(MultiError {
                        index: Some(index),
                        error,
                    });
                }
            }
        }
        let writes = ops.iter().any(|op| !matches!(op, Op::Check { .. }));
        if writes {
            tree.last_zxid = zxid;
        }
        for event in tree.fire(events) {
            // Unbounded, yet never longer than the watches registered; an
            // event nobody receives (the control plane stopped) is dropped.
            let _ = self.events.try_send(event);
        }
        let write = self.writes_applied.get() + u64::from(writes);
        self.writes_applied.set(write);
        Ok((results, write))
    }

    /// Returns once write number `write` is on disk. Writes issued in the
    /// same turn of the executor share the snapshot the first one takes.
    async fn durable(&self, write: u64) -> Result<(), ZkError> {
        if self.writes_persisted.get() >= write {
            return Ok(());
        }
        futures_lite::future::yield_now().await;
        if self.writes_persisted.get() >= write {
            return Ok(());
        }
        self.check_failed()?;
        let applied = self.writes_applied.get();
        let lines = self.tree.borrow().snapshot();
        if let Err(error) = write_checkpoint_file(&self.snapshot_path, &lines) {
            let why = format!("{}: {error}", self.snapshot_path.display());
            tracing::error!(
                why,
                "cannot write the embedded metadata; refusing every change"
            );
            *self.failed.borrow_mut() = Some(why.clone());
            return Err(ZkError::Io(why));
        }
        self.writes_persisted.set(applied);
        self.snapshots_written.set(self.snapshots_written.get() + 1);
        tracing::debug!(
            writes = applied,
            snapshots = self.snapshots_written.get(),
            "embedded metadata written"
        );
        Ok(())
    }

    fn check_failed(&self) -> Result<(), ZkError> {
        match &*self.failed.borrow() {
            Some(why) => Err(ZkError::Io(why.clone())),
            None => Ok(()),
        }
    }

    async fn write(&self, op: Op) -> Result<OpResult, ZkError> {
        let (mut results, write) = self
            .transact(std::slice::from_ref(&op))
            .map_err(|failed| failed.error)?;
        self.durable(write).await?;
        Ok(results.pop().expect("one result per operation"))
    }

    fn read<T>(&self, path: &str, read: impl FnOnce(&Tree, &Znode) -> T) -> Result<T, ZkError> {
        let tree = self.tree.borrow();
        let node = tree
            .nodes
            .get(path)
            .ok_or_else(|| ZkError::NoNode(path.to_owned()))?;
        Ok(read(&tree, node))
    }
}

impl ZkClient for EmbeddedStore {
    async fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String, ZkError> {
        let op = Op::Create {
            path: path.to_owned(),
            data: data.to_vec(),
            mode,
        };
        match self.write(op).await? {
            OpResult::Create { path, .. } => Ok(path),
            other => unreachable!("a create answered {other:?}"),
        }
    }

    async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ZkError> {
        self.read(path, |tree, node| (node.data.clone(), tree.stat(node)))
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        match self.read(path, |tree, node| tree.stat(node)) {
            Ok(stat) => Ok(Some(stat)),
            Err(ZkError::NoNode(_)) => Ok(None),
            Err(error) => Err(error),
        }
    }

    async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        expected_version: Option<i32>,
    ) -> Result<Stat, ZkError> {
        let op = Op::SetData {
            path: path.to_owned(),
            data: data.to_vec(),
            version: expected_version,
        };
        match self.write(op).await? {
            OpResult::SetData { stat } => Ok(stat),
            other => unreachable!("a set answered {other:?}"),
        }
    }

    async fn get_children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        self.tree.borrow().children(path)
    }

    async fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>, MultiError> {
        let (results, write) = self.transact(ops)?;
        self.durable(write).await?;
        Ok(results)
    }

    async fn get_children_and_watch(&self, path: &str) -> Result<Vec<String>, ZkError> {
        let children = self.get_children(path).await?;
        self.tree.borrow_mut().child_watches.insert(path.to_owned());
        Ok(children)
    }

    async fn exists_and_watch(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        let stat = self.exists(path).await?;
        self.tree.borrow_mut().data_watches.insert(path.to_owned());
        Ok(stat)
    }

    fn session_id(&self) -> i64 {
        self.tree.borrow().session_id
    }
}

#[cfg(test)]
mod tests {
    use super::*;
    use crate::test_support::run_local as run;

    fn delete(path: &str) -> Op {
        Op::Delete {
            path: path.into(),
            version: None,
        }
    }

    fn create(path: &str) -> Op {
        Op::Create {
            path: path.into(),
            data: Vec::new(),
            mode: CreateMode::Persistent,
        }
    }

    #[test]
    fn versions_czxids_sequences_and_ephemerals() {
        run(|| async {
            let dir = tempfile::tempdir().unwrap();
            let (store, _events) = EmbeddedStore::open(dir.path()).unwrap();
            store
                .create("/brokers", b"", CreateMode::Persistent)
                .await
                .unwrap();
            assert_eq!(
                store.create("/brokers", b"", CreateMode::Persistent).await,
                Err(ZkError::NodeExists("/brokers".into()))
            );
            assert_eq!(
                store.create("/nope/x", b"", CreateMode::Persistent).await,
                Err(ZkError::NoNode("/nope".into()))
            );
            store
                .create("/brokers/0", b"me", CreateMode::Ephemeral)
                .await
                .unwrap();
            assert_eq!(
                store
                    .create("/brokers/0/x", b"", CreateMode::Persistent)
                    .await,
                Err(ZkError::NoChildrenForEphemerals("/brokers/0".into()))
            );
            let (data, stat) = store.get_data("/brokers/0").await.unwrap();
            assert_eq!((data.as_slice(), stat.version), (&b"me"[..], 0));
            assert_eq!(stat.ephemeral_owner, store.session_id());
            let first_czxid = stat.czxid;

            let stat = store.set_data("/brokers", b"v1", Some(0)).await.unwrap();
            assert_eq!(stat.version, 1);
            assert_eq!(
                store.set_data("/brokers", b"v2", Some(0)).await,
                Err(ZkError::BadVersion("/brokers".into()))
            );
            store
                .create("/changes", b"", CreateMode::Persistent)
                .await
                .unwrap();
            let first = store
                .create("/changes/change_", b"a", CreateMode::PersistentSequential)
                .await
                .unwrap();
            let second = store
                .create("/changes/change_", b"b", CreateMode::PersistentSequential)
                .await
                .unwrap();
            assert_eq!(
                (first.as_str(), second.as_str()),
                ("/changes/change_0000000000", "/changes/change_0000000001")
            );
            assert_eq!(
                store.multi(&[delete("/brokers")]).await.unwrap_err().error,
                ZkError::NotEmpty("/brokers".into())
            );
            drop(store);

            let (reopened, _events) = EmbeddedStore::open(dir.path()).unwrap();
            assert_eq!(reopened.get_data("/brokers").await.unwrap().0, b"v1");
            assert_eq!(
                reopened.exists("/brokers/0").await,
                Ok(None),
                "ephemeral nodes die with the session"
            );
            let path = reopened
                .create("/brokers/0", b"me", CreateMode::Ephemeral)
                .await
                .unwrap();
            let czxid = reopened.exists(&path).await.unwrap().unwrap().czxid;
            assert!(czxid > first_czxid, "a new registration has a larger czxid");
            assert_eq!(
                reopened
                    .create("/changes/change_", b"c", CreateMode::PersistentSequential)
                    .await
                    .unwrap(),
                "/changes/change_0000000002",
                "sequence numbers never repeat"
            );
        });
    }

    #[test]
    fn reads_snapshots_written_before_czxids() {
        run(|| async {
            let dir = tempfile::tempdir().unwrap();
            let snapshot = dir.path().join(METADATA_DIR).join(SNAPSHOT_FILE);
            std::fs::create_dir_all(snapshot.parent().unwrap()).unwrap();
            std::fs::write(&snapshot, "0\n2\n0 /brokers \n3 /cluster 7b7d\n").unwrap();
            let (store, _events) = EmbeddedStore::open(dir.path()).unwrap();
            let (data, stat) = store.get_data("/cluster").await.unwrap();
            assert_eq!((data.as_slice(), stat.version), (&b"{}"[..], 3));
            store
                .create("/brokers/0", b"", CreateMode::Ephemeral)
                .await
                .unwrap();
        });
    }

    #[test]
    fn a_snapshot_that_cannot_be_written_stops_every_later_change() {
        run(|| async {
            let dir = tempfile::tempdir().unwrap();
            let (store, _events) = EmbeddedStore::open(dir.path()).unwrap();
            store
                .create("/a", b"", CreateMode::Persistent)
                .await
                .unwrap();
            // The snapshot's directory gone: the next write cannot reach the disk.
            std::fs::remove_dir_all(dir.path().join(METADATA_DIR)).unwrap();
            assert!(matches!(
                store.create("/b", b"", CreateMode::Persistent).await,
                Err(ZkError::Io(_))
            ));
            std::fs::create_dir_all(dir.path().join(METADATA_DIR)).unwrap();
            assert!(
                matches!(
                    store.create("/c", b"", CreateMode::Persistent).await,
                    Err(ZkError::Io(_))
                ),
                "the tree in memory is ahead of the disk: nothing more is changed"
            );
        });
    }

    #[test]
    fn multi_is_all_or_nothing() {
        run(|| async {
            let dir = tempfile::tempdir().unwrap();
            let (store, _events) = EmbeddedStore::open(dir.path()).unwrap();
            store
                .create("/epoch", b"1", CreateMode::Persistent)
                .await
                .unwrap();
            let fenced = [
                Op::Check {
                    path: "/epoch".into(),
                    version: 7,
                },
                create("/a"),
            ];
            assert_eq!(
                store.multi(&fenced).await,
                Err(MultiError {
                    index: Some(0),
                    error: ZkError::BadVersion("/epoch".into())
                })
            );
            let half = [create("/b"), create("/b")];
            assert_eq!(
                store.multi(&half).await.unwrap_err().index,
                Some(1),
                "the first failing operation is named"
            );
            assert_eq!(store.exists("/b").await, Ok(None), "nothing of it stays");
            let ok = [
                Op::Check {
                    path: "/epoch".into(),
                    version: 0,
                },
                create("/b"),
                Op::SetData {
                    path: "/epoch".into(),
                    data: b"2".to_vec(),
                    version: Some(0),
                },
            ];
            let results = store.multi(&ok).await.unwrap();
            assert_eq!(results.len(), 3);
            assert_eq!(store.get_data("/epoch").await.unwrap().1.version, 1);
        });
    }

    #[test]
    fn watches_fire_once_in_order() {
        run(|| async {
            let dir = tempfile::tempdir().unwrap();
            let (store, events) = EmbeddedStore::open(dir.path()).unwrap();
            store
                .create("/topics", b"", CreateMode::Persistent)
                .await
                .unwrap();
            store.get_children_and_watch("/topics").await.unwrap();
            assert_eq!(store.exists_and_watch("/controller").await, Ok(None));
            store
                .create("/topics/t", b"", CreateMode::Persistent)
                .await
                .unwrap();
            store
                .create("/topics/u", b"", CreateMode::Persistent)
                .await
                .unwrap();
            store
                .create("/controller", b"0", CreateMode::Ephemeral)
                .await
                .unwrap();
            assert!(store
                .exists_and_watch("/controller")
                .await
                .unwrap()
                .is_some());
            store.multi(&[delete("/controller")]).await.unwrap();
            let watched = |path: &str, event| ZkEvent::Watched {
                path: path.into(),
                event,
            };
            drop(store); // the sender: the queue ends after what was sent
            let mut fired = Vec::new();
            while let Some(event) = events.recv().await {
                fired.push(event);
            }
            assert_eq!(
                fired,
                vec![
                    watched("/topics", EventType::NodeChildrenChanged),
                    watched("/controller", EventType::NodeCreated),
                    watched("/controller", EventType::NodeDeleted),
                ],
                "one-shot: the second child fires nothing"
            );
        });
    }

    #[test]
    fn writes_issued_together_share_one_snapshot() {
        run(|| async {
            let dir = tempfile::tempdir().unwrap();
            let (store, _events) = EmbeddedStore::open(dir.path()).unwrap();
            store
                .create("/p", b"", CreateMode::Persistent)
                .await
                .unwrap();
            let snapshots = store.snapshots_written.get();
            let paths: Vec<String> = (0..100).map(|p| format!("/p/{p}")).collect();
            let writes = paths
                .iter()
                .map(|path| store.create(path, b"", CreateMode::Persistent));
            for created in futures_util::future::join_all(writes).await {
                created.unwrap();
            }
            assert_eq!(store.writes_persisted.get(), store.writes_applied.get());
            assert_eq!(store.snapshots_written.get(), snapshots + 1);
            assert_eq!(store.get_children("/p").await.unwrap().len(), 100);
            let (reopened, _events) = EmbeddedStore::open(dir.path()).unwrap();
            assert_eq!(reopened.get_children("/p").await.unwrap().len(), 100);
        });
    }
}
