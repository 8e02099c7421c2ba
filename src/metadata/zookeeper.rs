//! `ZkClient` over a real ZooKeeper ensemble, through the `zookeeper-client`
//! crate. Everything runs on the control thread: the crate's session task is
//! spawned on that thread's glommio executor (`ControlThreadSpawner`), so the
//! futures the broker awaits are only ever woken from their own thread.
//!
//! An expired session is terminal for a ZooKeeper client: this one opens a
//! new session (with the same bounded retries as at start) and announces it
//! with `ZkEvent::NewSession`, so the broker re-registers and the election
//! runs again, as Kafka's ZooKeeperClient reinitializes. A lost connection is
//! not: the session reconnects, and the requests it had in flight are sent
//! again (`ZooKeeperClient::until_answered`).

use std::cell::RefCell;
use std::fmt::Display;
use std::future::Future;
use std::rc::Rc;
use std::time::Duration;

use glommio::channels::local_channel;
use glommio::sync::Semaphore;
use tracing::{info, warn};
use zookeeper_client as zk;

use super::zk_client::{
    CreateMode, EventType, MultiError, Op, OpResult, Stat, ZkClient, ZkError, ZkEvent,
    ZkEventReceiver, ZkEventSender,
};

/// `zookeeper.*` of the broker's config.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ZooKeeperConfig {
    /// `zookeeper.connect`: `host:port,...` and an optional chroot.
    pub connect: String,
    /// `zookeeper.session.timeout.ms`
    pub session_timeout: Duration,
    /// `zookeeper.connection.timeout.ms`: how long a start waits for a session.
    pub connection_timeout: Duration,
    /// `zookeeper.max.in.flight.requests`
    pub max_in_flight_requests: usize,
}

impl ZooKeeperConfig {
    /// The hosts, and the chroot (None for the root).
    fn hosts_and_chroot(&self) -> (&str, Option<&str>) {
        match self.connect.find('/') {
            Some(at) if at + 1 < self.connect.len() => {
                (&self.connect[..at], Some(&self.connect[at..]))
            }
            Some(at) => (&self.connect[..at], None),
            None => (&self.connect, None),
        }
    }
}

/// Spawns the crate's tasks on the control thread's executor.
struct ControlThreadSpawner;

impl asyncs::task::Spawn for ControlThreadSpawner {
    fn spawn(&self, task: asyncs::task::Task) {
        glommio::spawn_local(Box::into_pin(task.future)).detach();
    }
}

static SPAWNER: ControlThreadSpawner = ControlThreadSpawner;

pub struct ZooKeeperClient {
    config: ZooKeeperConfig,
    /// The current session's client; replaced when a session expires.
    session: RefCell<zk::Client>,
    events: Rc<ZkEventSender>,
    /// `zookeeper.max.in.flight.requests`: the crate's queue has no bound.
    in_flight: Semaphore,
}

fn open_acl() -> zk::Acls<'static> {
    zk::Acls::anyone_all()
}

fn zk_error(error: zk::Error, path: &str) -> ZkError {
    match error {
        zk::Error::NoNode => ZkError::NoNode(path.to_owned()),
        zk::Error::NodeExists => ZkError::NodeExists(path.to_owned()),
        zk::Error::BadVersion => ZkError::BadVersion(path.to_owned()),
        zk::Error::NotEmpty => ZkError::NotEmpty(path.to_owned()),
        zk::Error::NoChildrenForEphemerals => ZkError::NoChildrenForEphemerals(path.to_owned()),
        zk::Error::SessionExpired | zk::Error::ClientClosed => ZkError::SessionExpired,
        // The outcome of a request in flight when the connection dropped is unknown.
        error => ZkError::ConnectionLoss(error.to_string()),
    }
}

/// Whether a request failed on its connection rather than on ZooKeeper's
/// answer: its outcome is unknown (the crate reports a silent or broken
/// connection as `ConnectionLoss` or with its own message).
fn lost_connection(error: &zk::Error) -> bool {
    matches!(error, zk::Error::ConnectionLoss | zk::Error::Custom(_))
}

fn multi_lost_connection(error: &zk::MultiWriteError) -> bool {
    matches!(error, zk::MultiWriteError::RequestFailed { source } if lost_connection(source))
}

fn stat_of(stat: &zk::Stat) -> Stat {
    Stat {
        czxid: stat.czxid,
        version: stat.version,
        ephemeral_owner: stat.ephemeral_owner,
    }
}

/// Whether ZooKeeper holds what `op`'s first attempt would have made, for a
/// retried write that failed on it (NodeExists, BadVersion, NoNode): the
/// node with our data (and our session as an ephemeral's owner), at the next
/// version for a versioned set, gone for a delete. Then `op`'s result as the
/// first attempt would have answered it; None when it cannot be ours (and a
/// sequential create cannot be told from another).
async fn applied_before(session: &zk::Client, op: &Op) -> Result<Option<OpResult>, zk::Error> {
    let read = |path| async move {
        match session.get_data(path).await {
            Ok((data, stat)) => Ok(Some((data, stat))),
            Err(zk::Error::NoNode) => Ok(None),
            Err(error) => Err(error),
        }
    };
    let applied = match op {
        Op::Check { path, version } => read(path)
            .await?
            .filter(|(_, stat)| stat.version == *version)
            .map(|_| OpResult::Check),
        Op::Create { mode, .. } if mode.is_sequential() => None,
        Op::Create { path, data, mode } => {
            let owner = match mode {
                CreateMode::Ephemeral => session.session_id().0,
                _ => 0,
            };
            read(path)
                .await?
                .filter(|(found, stat)| found == data && stat.ephemeral_owner == owner)
                .map(|(_, stat)| OpResult::Create {
                    path: path.clone(),
                    stat: stat_of(&stat),
                })
        }
        Op::SetData {
            path,
            data,
            version,
        } => read(path)
            .await?
            .filter(|(found, stat)| {
                found == data && version.is_none_or(|version| stat.version == version + 1)
            })
            .map(|(_, stat)| OpResult::SetData {
                stat: stat_of(&stat),
            }),
        Op::Delete { path, .. } => read(path).await?.is_none().then_some(OpResult::Delete),
    };
    if applied.is_some() {
        info!(
            path = op.path(),
            "a retried ZooKeeper write found its first attempt applied"
        );
    }
    Ok(applied)
}

fn op_result(result: zk::MultiWriteResult) -> OpResult {
    match result {
        zk::MultiWriteResult::Check => OpResult::Check,
        zk::MultiWriteResult::Delete => OpResult::Delete,
        zk::MultiWriteResult::Create { path, stat } => OpResult::Create {
            path,
            stat: stat_of(&stat),
        },
        zk::MultiWriteResult::SetData { stat } => OpResult::SetData {
            stat: stat_of(&stat),
        },
        other => unreachable!("no operation of ours answers {other:?}"),
    }
}

/// Whether a retried write's failure may be its first attempt's doing.
fn maybe_applied_before(error: &zk::Error) -> bool {
    matches!(
        error,
        zk::Error::NodeExists | zk::Error::BadVersion | zk::Error::NoNode
    )
}

fn zk_mode(mode: CreateMode) -> zk::CreateMode {
    match mode {
        CreateMode::Persistent => zk::CreateMode::Persistent,
        CreateMode::PersistentSequential => zk::CreateMode::PersistentSequential,
        CreateMode::Ephemeral => zk::CreateMode::Ephemeral,
    }
}

fn event_type(event: zk::EventType) -> Option<EventType> {
    match event {
        zk::EventType::NodeCreated => Some(EventType::NodeCreated),
        zk::EventType::NodeDeleted => Some(EventType::NodeDeleted),
        zk::EventType::NodeDataChanged => Some(EventType::NodeDataChanged),
        zk::EventType::NodeChildrenChanged => Some(EventType::NodeChildrenChanged),
        // The session ended: `ZkEvent::NewSession` follows.
        zk::EventType::Session => None,
    }
}

/// Opens a session within `zookeeper.connection.timeout.ms`, creating the
/// chroot first if it is missing, as Kafka does.
async fn open_session(config: &ZooKeeperConfig) -> Result<zk::Client, ZkError> {
    let (hosts, chroot) = config.hosts_and_chroot();
    let connect = async {
        let connector = || {
            zk::Client::connector()
                .with_session_timeout(config.session_timeout)
                .with_connection_timeout(config.connection_timeout.min(config.session_timeout))
        };
        let root = connector().connect(hosts).await?;
        let Some(chroot) = chroot else {
            return Ok(root);
        };
        let options = zk::CreateMode::Persistent.with_acls(open_acl());
        let mut prefix = String::new();
        for part in chroot.split('/').filter(|part| !part.is_empty()) {
            prefix.push('/');
            prefix.push_str(part);
            match root.create(&prefix, b"", &options).await {
                Ok(_) | Err(zk::Error::NodeExists) => {}
                Err(error) => return Err(error),
            }
        }
        drop(root);
        connector().connect(&config.connect).await
    };
    let timeout = async {
        glommio::timer::sleep(config.connection_timeout).await;
        Err(zk::Error::Timeout)
    };
    futures_lite::future::or(connect, timeout)
        .await
        .map_err(|error| {
            ZkError::ConnectionLoss(format!(
                "cannot open a ZooKeeper session at {} (zookeeper.connect) within {} ms \
                 (zookeeper.connection.timeout.ms): {error}",
                config.connect,
                config.connection_timeout.as_millis()
            ))
        })
}

impl ZooKeeperClient {
    /// Connects, and keeps a session for as long as the returned client
    /// lives. Must run on the control thread; `_spawner_scope` in the caller
    /// keeps the crate's tasks on it.
    pub async fn connect(config: ZooKeeperConfig) -> Result<(Rc<Self>, ZkEventReceiver), ZkError> {
        assert!(config.max_in_flight_requests > 0, "checked with the config");
        let session = open_session(&config).await?;
        info!(
            connect = config.connect,
            session_id = %session.session_id(),
            session_timeout_ms = session.session_timeout().as_millis() as u64,
            "ZooKeeper session opened"
        );
        let (events, receiver) = local_channel::new_unbounded();
        let client = Rc::new(Self {
            in_flight: Semaphore::new(config.max_in_flight_requests as u64),
            config,
            session: RefCell::new(session),
            events: Rc::new(events),
        });
        glommio::spawn_local(Self::keep_session(Rc::downgrade(&client))).detach();
        Ok((client, receiver))
    }

    /// Waits for the session to end, then opens the next one, until the
    /// client is dropped.
    async fn keep_session(client: std::rc::Weak<Self>) {
        loop {
            let Some(mut state) = client.upgrade().map(|c| c.session.borrow().state_watcher())
            else {
                return;
            };
            loop {
                let current = state.changed().await;
                if current.is_terminated() {
                    warn!(?current, "ZooKeeper session ended");
                    break;
                }
            }
            loop {
                let Some(this) = client.upgrade() else { return };
                match open_session(&this.config).await {
                    Ok(session) => {
                        info!(session_id = %session.session_id(), "new ZooKeeper session");
                        *this.session.borrow_mut() = session;
                        let _ = this.events.try_send(ZkEvent::NewSession);
                        break;
                    }
                    Err(error) => warn!(%error, "cannot open a new ZooKeeper session"),
                }
            }
        }
    }

    fn session(&self) -> zk::Client {
        self.session.borrow().clone()
    }

    /// Sends `request` on the current session until ZooKeeper answers it, as
    /// Kafka's `KafkaZkClient.retryRequestsUntilConnected` does: a request
    /// whose connection dropped is sent again once the session has
    /// reconnected. `request` is told when it is a retry: a write's first
    /// attempt may have been applied before its connection dropped.
    /// Bounded by the session: one that cannot reconnect expires (the crate's
    /// deadline, 7/5 of the session timeout) and the request fails with that.
    async fn until_answered<T, E, F, Fut>(
        &self,
        lost: fn(&E) -> bool,
        mut request: F,
    ) -> Result<T, E>
    where
        E: Display,
        F: FnMut(zk::Client, bool) -> Fut,
        Fut: Future<Output = Result<T, E>>,
    {
        let session = self.session();
        let mut state = session.state_watcher();
        let mut retry = false;
        loop {
            let result = request(session.clone(), retry).await;
            retry = true;
            let Err(error) = &result else { return result };
            if !lost(error) || session.state().is_terminated() {
                return result;
            }
            warn!(%error, "ZooKeeper connection lost with a request in flight: sending it again once reconnected");
            loop {
                match state.state() {
                    zk::SessionState::SyncConnected | zk::SessionState::ConnectedReadOnly => break,
                    current if current.is_terminated() => break,
                    _ => {
                        state.changed().await;
                    }
                }
            }
        }
    }

    async fn permit(&self) -> glommio::sync::Permit<'_> {
        self.in_flight
            .acquire_permit(1)
            .await
            .expect("the semaphore is never closed")
    }

    /// Sends the watch's one event to the queue once it fires.
    fn forward(&self, path: &str, watcher: zk::OneshotWatcher) {
        let (events, path) = (self.events.clone(), path.to_owned());
        glommio::spawn_local(async move {
            let fired = watcher.changed().await;
            if let Some(event) = event_type(fired.event_type) {
                let _ = events.try_send(ZkEvent::Watched { path, event });
            }
        })
        .detach();
    }
}

/// The scope in which the crate spawns its tasks on the calling thread:
/// held by the control thread for its whole life.
pub fn enter_control_thread() -> asyncs::task::SpawnScope<'static> {
    asyncs::task::enter(&SPAWNER)
}

impl ZkClient for Rc<ZooKeeperClient> {
    async fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String, ZkError> {
        let _permit = self.permit().await;
        let options = zk_mode(mode).with_acls(open_acl());
        let options = &options;
        let sequence = self
            .until_answered(lost_connection, |session, retry| async move {
                match session.create(path, data, options).await {
                    Ok((_, sequence)) => Ok(Some(sequence)),
                    Err(error) if retry && maybe_applied_before(&error) => {
                        let op = Op::Create {
                            path: path.to_owned(),
                            data: data.to_vec(),
                            mode,
                        };
                        match applied_before(&session, &op).await? {
                            Some(_) => Ok(None),
                            None => Err(error),
                        }
                    }
                    Err(error) => Err(error),
                }
            })
            .await
            .map_err(|error| zk_error(error, path))?;
        Ok(match sequence {
            Some(sequence) if mode.is_sequential() => format!("{path}{sequence}"),
            _ => path.to_owned(),
        })
    }

    async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ZkError> {
        let _permit = self.permit().await;
        let (data, stat) = self
            .until_answered(lost_connection, |session, _| async move {
                session.get_data(path).await
            })
            .await
            .map_err(|error| zk_error(error, path))?;
        Ok((data, stat_of(&stat)))
    }

    async fn exists(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        let _permit = self.permit().await;
        let stat = self
            .until_answered(lost_connection, |session, _| async move {
                session.check_stat(path).await
            })
            .await
            .map_err(|error| zk_error(error, path))?;
        Ok(stat.as_ref().map(stat_of))
    }

    async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        expected_version: Option<i32>,
    ) -> Result<Stat, ZkError> {
        let _permit = self.permit().await;
        let stat = self
            .until_answered(lost_connection, |session, retry| async move {
                match session.set_data(path, data, expected_version).await {
                    Ok(stat) => Ok(stat_of(&stat)),
                    Err(error) if retry && maybe_applied_before(&error) => {
                        let op = Op::SetData {
                            path: path.to_owned(),
                            data: data.to_vec(),
                            version: expected_version,
                        };
                        match applied_before(&session, &op).await? {
                            Some(OpResult::SetData { stat }) => Ok(stat),
                            _ => Err(error),
                        }
                    }
                    Err(error) => Err(error),
                }
            })
            .await
            .map_err(|error| zk_error(error, path))?;
        Ok(stat)
    }

    async fn get_children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        let _permit = self.permit().await;
        let mut children = self
            .until_answered(lost_connection, |session, _| async move {
                session.list_children(path).await
            })
            .await
            .map_err(|error| zk_error(error, path))?;
        children.sort_unstable();
        Ok(children)
    }

    async fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>, MultiError> {
        let _permit = self.permit().await;
        self.until_answered(multi_lost_connection, |session, retry| async move {
            let mut writer = session.new_multi_writer();
            for op in ops {
                match op {
                    Op::Check { path, version } => writer.add_check_version(path, *version),
                    Op::Create { path, data, mode } => {
                        writer.add_create(path, data, &zk_mode(*mode).with_acls(open_acl()))
                    }
                    Op::SetData {
                        path,
                        data,
                        version,
                    } => writer.add_set_data(path, data, *version),
                    Op::Delete { path, version } => writer.add_delete(path, *version),
                }?;
            }
            match writer.commit().await {
                Ok(results) => Ok(results.into_iter().map(op_result).collect()),
                Err(zk::MultiWriteError::OperationFailed { index, source })
                    if retry && maybe_applied_before(&source) =>
                {
                    // Applied whole or not at all: ours if every op's result is there.
                    let mut results = Vec::with_capacity(ops.len());
                    for op in ops {
                        match applied_before(&session, op).await? {
                            Some(result) => results.push(result),
                            None => {
                                return Err(zk::MultiWriteError::OperationFailed { index, source })
                            }
                        }
                    }
                    Ok(results)
                }
                Err(error) => Err(error),
            }
        })
        .await
        .map_err(|error| match error {
            zk::MultiWriteError::OperationFailed { index, source } => MultiError {
                index: Some(index),
                error: zk_error(source, ops[index].path()),
            },
            zk::MultiWriteError::RequestFailed { source } => {
                MultiError::from(zk_error(source, "multi"))
            }
        })
    }

    async fn get_children_and_watch(&self, path: &str) -> Result<Vec<String>, ZkError> {
        let _permit = self.permit().await;
        let (mut children, watcher) = self
            .until_answered(lost_connection, |session, _| async move {
                session.list_and_watch_children(path).await
            })
            .await
            .map_err(|error| zk_error(error, path))?;
        self.forward(path, watcher);
        children.sort_unstable();
        Ok(children)
    }

    async fn exists_and_watch(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        let _permit = self.permit().await;
        let (stat, watcher) = self
            .until_answered(lost_connection, |session, _| async move {
                session.check_and_watch_stat(path).await
            })
            .await
            .map_err(|error| zk_error(error, path))?;
        self.forward(path, watcher);
        Ok(stat.as_ref().map(stat_of))
    }

    fn session_id(&self) -> i64 {
        self.session.borrow().session_id().0
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn the_chroot_is_split_from_the_hosts() {
        let config = |connect: &str| ZooKeeperConfig {
            connect: connect.into(),
            session_timeout: Duration::from_secs(18),
            connection_timeout: Duration::from_secs(18),
            max_in_flight_requests: 10,
        };
        assert_eq!(
            config("a:2181,b:2181/kafka/one").hosts_and_chroot(),
            ("a:2181,b:2181", Some("/kafka/one"))
        );
        assert_eq!(config("a:2181/").hosts_and_chroot(), ("a:2181", None));
        assert_eq!(config("a:2181").hosts_and_chroot(), ("a:2181", None));
    }
}
