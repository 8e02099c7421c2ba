//! The embedded metadata store: ZooKeeper's data model (a tree of znodes with
//! versions for compare-and-set, ephemeral nodes, one-shot watches) for a single
//! broker with no `zookeeper.connect`, persisted under its first log dir.
//! The controller drives it exactly as it drives ZooKeeper.

use std::collections::{BTreeMap, BTreeSet};
use std::fmt;
use std::io;
use std::path::{Path, PathBuf};

use shards::log::{read_checkpoint_file, write_checkpoint_file};

pub const METADATA_DIR: &str = "__embedded_metadata";
const SNAPSHOT_FILE: &str = "znodes";

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum StoreError {
    NoNode(String),
    NodeExists(String),
    BadVersion {
        path: String,
        expected: i32,
        actual: i32,
    },
    NotEmpty(String),
    Io(String),
}

impl fmt::Display for StoreError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            StoreError::NoNode(path) => write!(f, "no node {path}"),
            StoreError::NodeExists(path) => write!(f, "node {path} exists"),
            StoreError::BadVersion {
                path,
                expected,
                actual,
            } => {
                write!(f, "{path}: expected version {expected}, found {actual}")
            }
            StoreError::NotEmpty(path) => write!(f, "{path} has children"),
            StoreError::Io(why) => write!(f, "metadata store I/O: {why}"),
        }
    }
}

impl std::error::Error for StoreError {}

impl From<io::Error> for StoreError {
    fn from(error: io::Error) -> Self {
        StoreError::Io(error.to_string())
    }
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    /// Gone when the session (this process) ends, as in ZooKeeper.
    Ephemeral,
}

#[derive(Debug, Clone, PartialEq, Eq)]
struct Znode {
    data: Vec<u8>,
    version: i32,
    ephemeral: bool,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
pub enum WatchKind {
    Data,
    Children,
}

/// A fired watch: something changed at `path`.
#[derive(Debug, Clone, PartialEq, Eq, PartialOrd, Ord)]
pub struct WatchedEvent {
    pub path: String,
    pub kind: WatchKind,
}

pub struct EmbeddedStore {
    snapshot_path: PathBuf,
    /// Changes since the last commit: the snapshot is rewritten once per
    /// commit, so a request's changes reach the disk together or not at all.
    dirty: bool,
    nodes: BTreeMap<String, Znode>,
    watches: BTreeSet<WatchedEvent>,
    fired: Vec<WatchedEvent>,
}

fn parent_of(path: &str) -> Option<&str> {
    match path.rfind('/') {
        Some(0) if path.len() > 1 => Some("/"),
        Some(0) | None => None,
        Some(at) => Some(&path[..at]),
    }
}

/// Compare-and-set: `expected`, when given, must be the node's version.
fn check_version(path: &str, actual: i32, expected: Option<i32>) -> Result<(), StoreError> {
    match expected {
        Some(expected) if expected != actual => Err(StoreError::BadVersion {
            path: path.to_owned(),
            expected,
            actual,
        }),
        _ => Ok(()),
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

impl EmbeddedStore {
    /// Opens (or starts) the store kept under `log_dir`. Ephemeral nodes never
    /// survive a restart: they belonged to the previous process.
    pub fn open(log_dir: &Path) -> Result<Self, StoreError> {
        let dir = log_dir.join(METADATA_DIR);
        std::fs::create_dir_all(&dir)?;
        let snapshot_path = dir.join(SNAPSHOT_FILE);
        let mut nodes = BTreeMap::new();
        nodes.insert(
            "/".to_owned(),
            Znode {
                data: Vec::new(),
                version: 0,
                ephemeral: false,
            },
        );
        for line in read_checkpoint_file(&snapshot_path)?.unwrap_or_default() {
            let mut parts = line.splitn(3, ' ');
            let parsed = (|| {
                let version = parts.next()?.parse().ok()?;
                let path = parts.next()?.to_owned();
                let data = unhex(parts.next().unwrap_or(""))?;
                Some((path, version, data))
            })();
            let (path, version, data) = parsed.ok_or_else(|| {
                StoreError::Io(format!("{}: bad entry {line:?}", snapshot_path.display()))
            })?;
            nodes.insert(
                path,
                Znode {
                    data,
                    version,
                    ephemeral: false,
                },
            );
        }
        Ok(Self {
            snapshot_path,
            dirty: false,
            nodes,
            watches: BTreeSet::new(),
            fired: Vec::new(),
        })
    }

    /// Writes the tree if it changed since the last commit.
    pub fn commit(&mut self) -> Result<(), StoreError> {
        if !self.dirty {
            return Ok(());
        }
        self.persist()?;
        self.dirty = false;
        Ok(())
    }

    fn persist(&self) -> Result<(), StoreError> {
        let lines: Vec<String> = self
            .nodes
            .iter()
            .filter(|(path, node)| !node.ephemeral && path.as_str() != "/")
            .map(|(path, node)| format!("{} {path} {}", node.version, hex(&node.data)))
            .collect();
        write_checkpoint_file(&self.snapshot_path, &lines)?;
        Ok(())
    }

    fn fire(&mut self, path: &str, kind: WatchKind) {
        let event = WatchedEvent {
            path: path.to_owned(),
            kind,
        };
        if self.watches.remove(&event) {
            self.fired.push(event);
        }
    }

    pub fn create(&mut self, path: &str, data: &[u8], mode: CreateMode) -> Result<(), StoreError> {
        if self.nodes.contains_key(path) {
            return Err(StoreError::NodeExists(path.to_owned()));
        }
        let parent = parent_of(path).ok_or_else(|| StoreError::NoNode(path.to_owned()))?;
        if !self.nodes.contains_key(parent) {
            return Err(StoreError::NoNode(parent.to_owned()));
        }
        self.nodes.insert(
            path.to_owned(),
            Znode {
                data: data.to_vec(),
                version: 0,
                ephemeral: mode == CreateMode::Ephemeral,
            },
        );
        self.dirty = true;
        self.fire(path, WatchKind::Data);
        let parent = parent.to_owned();
        self.fire(&parent, WatchKind::Children);
        Ok(())
    }

    /// Creates `path` and any missing parents (persistent, empty).
    pub fn create_recursive(
        &mut self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<(), StoreError> {
        let mut ancestors = Vec::new();
        let mut at = parent_of(path);
        while let Some(parent) = at {
            if self.nodes.contains_key(parent) {
                break;
            }
            ancestors.push(parent.to_owned());
            at = parent_of(parent);
        }
        for ancestor in ancestors.iter().rev() {
            self.create(ancestor, b"", CreateMode::Persistent)?;
        }
        self.create(path, data, mode)
    }

    pub fn get(&self, path: &str) -> Option<(Vec<u8>, i32)> {
        self.nodes
            .get(path)
            .map(|node| (node.data.clone(), node.version))
    }

    pub fn exists(&self, path: &str) -> bool {
        self.nodes.contains_key(path)
    }

    /// Compare-and-set: with `expected_version`, fails with BadVersion if the node
    /// moved on. Returns the new version.
    pub fn set_data(
        &mut self,
        path: &str,
        data: &[u8],
        expected_version: Option<i32>,
    ) -> Result<i32, StoreError> {
        let node = self
            .nodes
            .get_mut(path)
            .ok_or_else(|| StoreError::NoNode(path.to_owned()))?;
        check_version(path, node.version, expected_version)?;
        node.data = data.to_vec();
        node.version += 1;
        let version = node.version;
        self.dirty = true;
        self.fire(path, WatchKind::Data);
        Ok(version)
    }

    pub fn children(&self, path: &str) -> Result<Vec<String>, StoreError> {
        if !self.nodes.contains_key(path) {
            return Err(StoreError::NoNode(path.to_owned()));
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
            .filter(|(p, _)| !p[prefix.len()..].contains('/') && p.len() > prefix.len())
            .map(|(p, _)| p[prefix.len()..].to_owned())
            .collect())
    }

    pub fn delete(&mut self, path: &str, expected_version: Option<i32>) -> Result<(), StoreError> {
        let node = self
            .nodes
            .get(path)
            .ok_or_else(|| StoreError::NoNode(path.to_owned()))?;
        check_version(path, node.version, expected_version)?;
        if !self.children(path)?.is_empty() {
            return Err(StoreError::NotEmpty(path.to_owned()));
        }
        self.nodes.remove(path);
        self.dirty = true;
        self.fire(path, WatchKind::Data);
        if let Some(parent) = parent_of(path) {
            let parent = parent.to_owned();
            self.fire(&parent, WatchKind::Children);
        }
        Ok(())
    }

    pub fn delete_recursive(&mut self, path: &str) -> Result<(), StoreError> {
        for child in self.children(path)? {
            self.delete_recursive(&format!("{path}/{child}"))?;
        }
        self.delete(path, None)
    }

    /// Registers a one-shot watch, as ZooKeeper's getData/getChildren with watch.
    pub fn watch(&mut self, path: &str, kind: WatchKind) {
        self.watches.insert(WatchedEvent {
            path: path.to_owned(),
            kind,
        });
    }

    /// Watches that fired since the last call, in order.
    pub fn take_fired_watches(&mut self) -> Vec<WatchedEvent> {
        std::mem::take(&mut self.fired)
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn znodes_versions_ephemerals_watches_and_persistence() {
        let dir = tempfile::tempdir().unwrap();
        let mut store = EmbeddedStore::open(dir.path()).unwrap();
        store
            .create_recursive("/brokers/topics/t", b"{}", CreateMode::Persistent)
            .unwrap();
        assert_eq!(
            store.create("/brokers/topics/t", b"", CreateMode::Persistent),
            Err(StoreError::NodeExists("/brokers/topics/t".into()))
        );
        assert!(matches!(
            store.create("/nope/x", b"", CreateMode::Persistent),
            Err(StoreError::NoNode(_))
        ));
        store
            .create_recursive("/brokers/ids/0", b"me", CreateMode::Ephemeral)
            .unwrap();
        assert_eq!(store.children("/brokers").unwrap(), vec!["ids", "topics"]);

        assert_eq!(store.set_data("/brokers/topics/t", b"v1", Some(0)), Ok(1));
        assert!(matches!(
            store.set_data("/brokers/topics/t", b"v2", Some(0)),
            Err(StoreError::BadVersion { .. })
        ));
        assert_eq!(store.get("/brokers/topics/t"), Some((b"v1".to_vec(), 1)));

        store.watch("/brokers/topics", WatchKind::Children);
        store.watch("/brokers/topics/t", WatchKind::Data);
        store
            .create("/brokers/topics/u", b"", CreateMode::Persistent)
            .unwrap();
        store
            .create("/brokers/topics/w", b"", CreateMode::Persistent)
            .unwrap();
        assert_eq!(
            store.take_fired_watches(),
            vec![WatchedEvent {
                path: "/brokers/topics".into(),
                kind: WatchKind::Children
            }],
            "watches are one-shot"
        );
        assert!(matches!(
            store.delete("/brokers", None),
            Err(StoreError::NotEmpty(_))
        ));
        store.delete("/brokers/topics/w", None).unwrap();
        let uncommitted = EmbeddedStore::open(dir.path()).unwrap();
        assert!(
            !uncommitted.exists("/brokers/topics/t"),
            "nothing reaches the disk before a commit"
        );
        store.commit().unwrap();

        let reopened = EmbeddedStore::open(dir.path()).unwrap();
        assert_eq!(reopened.get("/brokers/topics/t"), Some((b"v1".to_vec(), 1)));
        assert!(reopened.exists("/brokers/topics/u") && !reopened.exists("/brokers/topics/w"));
        assert!(
            !reopened.exists("/brokers/ids/0"),
            "ephemeral nodes die with the session"
        );
    }
}
