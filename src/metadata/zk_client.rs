//! `ZkClient`: the ZooKeeper operations the broker and the controller use,
//! with ZooKeeper's semantics, behind one interface. The embedded store
//! (`store.rs`) is one implementation; ZooKeeper itself is the other. Both run
//! on the control thread only.

use std::fmt;

use glommio::channels::local_channel::{LocalReceiver, LocalSender};

/// What ZooKeeper's `Stat` says of a node that the broker uses.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct Stat {
    /// The transaction that created the node: a broker's epoch is its
    /// registration's czxid.
    pub czxid: i64,
    /// The data's version, for compare-and-set.
    pub version: i32,
    /// The session owning an ephemeral node, 0 for a persistent one.
    pub ephemeral_owner: i64,
}

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum CreateMode {
    Persistent,
    /// ZooKeeper appends the parent's ten-digit sequence number to the name.
    PersistentSequential,
    /// Gone when the session that created it ends.
    Ephemeral,
}

impl CreateMode {
    pub fn is_ephemeral(self) -> bool {
        self == CreateMode::Ephemeral
    }

    pub fn is_sequential(self) -> bool {
        self == CreateMode::PersistentSequential
    }
}

/// ZooKeeper's error codes, by ZooKeeper's names.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkError {
    NoNode(String),
    NodeExists(String),
    BadVersion(String),
    NotEmpty(String),
    NoChildrenForEphemerals(String),
    /// The session is gone, its ephemeral nodes and watches with it.
    SessionExpired,
    /// ZooKeeper could not be reached, or the connection dropped with the
    /// request in flight: its outcome is unknown.
    ConnectionLoss(String),
    /// The embedded store could not write its disk.
    Io(String),
}

impl fmt::Display for ZkError {
    fn fmt(&self, f: &mut fmt::Formatter<'_>) -> fmt::Result {
        match self {
            ZkError::NoNode(path) => write!(f, "no node {path}"),
            ZkError::NodeExists(path) => write!(f, "node {path} exists"),
            ZkError::BadVersion(path) => write!(f, "{path}: version moved on"),
            ZkError::NotEmpty(path) => write!(f, "{path} has children"),
            ZkError::NoChildrenForEphemerals(path) => {
                write!(f, "{path} is ephemeral and cannot have children")
            }
            ZkError::SessionExpired => write!(f, "ZooKeeper session expired"),
            ZkError::ConnectionLoss(why) => write!(f, "ZooKeeper connection lost: {why}"),
            ZkError::Io(why) => write!(f, "metadata store I/O: {why}"),
        }
    }
}

impl std::error::Error for ZkError {}

/// One operation of a `multi`.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum Op {
    /// Fails the whole `multi` unless the node is at `version`.
    Check {
        path: String,
        version: i32,
    },
    Create {
        path: String,
        data: Vec<u8>,
        mode: CreateMode,
    },
    SetData {
        path: String,
        data: Vec<u8>,
        version: Option<i32>,
    },
    Delete {
        path: String,
        version: Option<i32>,
    },
}

impl Op {
    pub fn path(&self) -> &str {
        match self {
            Op::Check { path, .. }
            | Op::Create { path, .. }
            | Op::SetData { path, .. }
            | Op::Delete { path, .. } => path,
        }
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum OpResult {
    Check,
    /// The created node's path (with its sequence number, if sequential).
    Create {
        path: String,
        stat: Stat,
    },
    SetData {
        stat: Stat,
    },
    Delete,
}

/// A `multi` that changed nothing: the first operation that failed and why.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct MultiError {
    /// None when the request itself failed (session, connection, disk).
    pub index: Option<usize>,
    pub error: ZkError,
}

impl From<ZkError> for MultiError {
    fn from(error: ZkError) -> Self {
        MultiError { index: None, error }
    }
}

/// What a one-shot watch reports, as ZooKeeper's `EventType`.
#[derive(Debug, Clone, Copy, PartialEq, Eq, PartialOrd, Ord)]
#[allow(clippy::enum_variant_names)] // ZooKeeper's names
pub enum EventType {
    NodeCreated,
    NodeDeleted,
    NodeDataChanged,
    NodeChildrenChanged,
}

/// A fired watch, or a new session after the last one expired (its
/// ephemeral nodes and watches are gone: the broker registers again).
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum ZkEvent {
    Watched { path: String, event: EventType },
    NewSession,
}

/// Where fired watches go: one queue, read in order by the control thread.
pub type ZkEventSender = LocalSender<ZkEvent>;
pub type ZkEventReceiver = LocalReceiver<ZkEvent>;

/// ZooKeeper's client operations. Watches are one-shot, as ZooKeeper's: the
/// next change after the read is sent once to the client's event queue.
#[allow(async_fn_in_trait)] // used on the control thread only: no Send needed
pub trait ZkClient {
    /// Returns the created path (a sequential node's with its number).
    async fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String, ZkError>;
    async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ZkError>;
    async fn exists(&self, path: &str) -> Result<Option<Stat>, ZkError>;
    async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        expected_version: Option<i32>,
    ) -> Result<Stat, ZkError>;
    /// Child names, sorted.
    async fn get_children(&self, path: &str) -> Result<Vec<String>, ZkError>;
    /// All operations or none.
    async fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>, MultiError>;
    /// `get_children`, watching the next child created or deleted.
    async fn get_children_and_watch(&self, path: &str) -> Result<Vec<String>, ZkError>;
    /// `exists`, watching the node's creation, change or deletion.
    async fn exists_and_watch(&self, path: &str) -> Result<Option<Stat>, ZkError>;
    /// This client's session, the owner of its ephemeral nodes.
    fn session_id(&self) -> i64;
}
