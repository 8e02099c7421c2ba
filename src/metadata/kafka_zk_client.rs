//! `KafkaZkClient`: Kafka's reads and writes of its znodes over any
//! `ZkClient`, typed (`znodes.rs`), as Kafka's class of that name. Every write
//! of the controller is fenced: one `multi` with a check that
//! `/controller_epoch` is still at the version this controller set, so a
//! controller that lost its office cannot change anything.

use std::collections::BTreeMap;

use futures_util::future::join_all;

use super::zk_client::{CreateMode, MultiError, Op, OpResult, ZkClient, ZkError};
use super::znodes::{
    BrokerIdZNode, BrokerIdsZNode, ClusterIdZNode, ConfigChangeZNode, ConfigEntityZNode,
    ControllerEpochZNode, ControllerZNode, DecodeError, DeleteTopicsZNode, FeatureZNode,
    LogDirEventNotificationZNode, ProducerIdBlockZNode, TopicPartitionStateZNode, TopicZNode,
    TopicsZNode, PERSISTENT_ZK_PATHS,
};

#[derive(Debug, Clone, PartialEq, Eq)]
pub enum KafkaZkError {
    /// `/controller_epoch` moved past this controller's: another broker is
    /// controller now (Kafka's ControllerMovedException).
    ControllerMoved,
    /// Another live broker registered this broker's id.
    BrokerIdTaken {
        path: String,
        owner: i64,
        session: i64,
    },
    Zk(ZkError),
    Decode(DecodeError),
}

impl std::fmt::Display for KafkaZkError {
    fn fmt(&self, f: &mut std::fmt::Formatter<'_>) -> std::fmt::Result {
        match self {
            KafkaZkError::ControllerMoved => write!(f, "the controller moved"),
            KafkaZkError::BrokerIdTaken {
                path,
                owner,
                session,
            } => write!(
                f,
                "Error while creating ephemeral at {path}, node already exists and owner \
                 '0x{owner:x}' does not match current session '0x{session:x}' \
                 (another broker is registered with this broker.id)"
            ),
            KafkaZkError::Zk(error) => error.fmt(f),
            KafkaZkError::Decode(error) => error.fmt(f),
        }
    }
}

impl std::error::Error for KafkaZkError {}

impl From<ZkError> for KafkaZkError {
    fn from(error: ZkError) -> Self {
        KafkaZkError::Zk(error)
    }
}

impl From<DecodeError> for KafkaZkError {
    fn from(error: DecodeError) -> Self {
        KafkaZkError::Decode(error)
    }
}

/// The controller's office: its epoch and the version of `/controller_epoch`
/// that fences its writes.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ControllerEpoch {
    pub epoch: i32,
    pub zk_version: i32,
}

/// A znode's decoded data and its version.
pub type Versioned<T> = (T, i32);

pub struct KafkaZkClient<Z> {
    zk: Z,
}

impl<Z: ZkClient> KafkaZkClient<Z> {
    pub fn new(zk: Z) -> Self {
        Self { zk }
    }

    #[cfg(test)]
    pub fn zk(&self) -> &Z {
        &self.zk
    }

    /// Creates `path` and any missing parent (persistent, empty); an
    /// existing `path` is NodeExists, an existing parent is fine.
    pub async fn create_recursive(
        &self,
        path: &str,
        data: &[u8],
        mode: CreateMode,
    ) -> Result<String, ZkError> {
        match self.zk.create(path, data, mode).await {
            Err(ZkError::NoNode(_)) => {
                let parent = &path[..path.rfind('/').expect("an absolute path")];
                match Box::pin(self.create_recursive(parent, b"", CreateMode::Persistent)).await {
                    Ok(_) | Err(ZkError::NodeExists(_)) => {}
                    Err(error) => return Err(error),
                }
                self.zk.create(path, data, mode).await
            }
            created => created,
        }
    }

    /// What a Kafka broker creates at start (`makeSurePersistentPathExists`).
    pub async fn create_top_level_paths(&self) -> Result<(), ZkError> {
        for path in PERSISTENT_ZK_PATHS {
            match self
                .create_recursive(path, b"", CreateMode::Persistent)
                .await
            {
                Ok(_) | Err(ZkError::NodeExists(_)) => {}
                Err(error) => return Err(error),
            }
        }
        Ok(())
    }

    /// The cluster's id, written by the first broker to start.
    pub async fn get_or_create_cluster_id(&self, proposed: &str) -> Result<String, KafkaZkError> {
        match self.zk.get_data(ClusterIdZNode::PATH).await {
            Ok((data, _)) => return Ok(ClusterIdZNode::decode(&data)?),
            Err(ZkError::NoNode(_)) => {}
            Err(error) => return Err(error.into()),
        }
        let data = ClusterIdZNode::encode(proposed);
        match self
            .create_recursive(ClusterIdZNode::PATH, &data, CreateMode::Persistent)
            .await
        {
            Ok(_) => Ok(proposed.to_owned()),
            // Another broker was first.
            Err(ZkError::NodeExists(_)) => {
                let (data, _) = self.zk.get_data(ClusterIdZNode::PATH).await?;
                Ok(ClusterIdZNode::decode(&data)?)
            }
            Err(error) => Err(error.into()),
        }
    }

    /// Registers the broker (ephemeral) and returns its epoch, the node's
    /// czxid. Kafka creates the node empty and sets its data in one `multi`.
    /// An id registered by another session is refused with Kafka's message.
    pub async fn register_broker(&self, info: &BrokerIdZNode) -> Result<i64, KafkaZkError> {
        let path = BrokerIdZNode::path(info.broker.id);
        let ops = [
            Op::Create {
                path: path.clone(),
                data: Vec::new(),
                mode: CreateMode::Ephemeral,
            },
            Op::SetData {
                path: path.clone(),
                data: info.encode(),
                version: Some(0),
            },
        ];
        match self.zk.multi(&ops).await {
            Ok(results) => match &results[0] {
                OpResult::Create { stat, .. } => Ok(stat.czxid),
                other => unreachable!("a create answered {other:?}"),
            },
            Err(MultiError {
                error: ZkError::NodeExists(_),
                ..
            }) => match self.zk.exists(&path).await? {
                // Ours already: a retried registration (Kafka's CheckedEphemeral).
                Some(stat) if stat.ephemeral_owner == self.zk.session_id() => Ok(stat.czxid),
                Some(stat) => Err(KafkaZkError::BrokerIdTaken {
                    path,
                    owner: stat.ephemeral_owner,
                    session: self.zk.session_id(),
                }),
                None => Box::pin(self.register_broker(info)).await,
            },
            Err(MultiError { error, .. }) => Err(error.into()),
        }
    }

    /// Every registered broker with its epoch; with `watch`, the next broker
    /// to come or go is an event.
    pub async fn get_all_brokers_in_cluster(
        &self,
        watch: bool,
    ) -> Result<Vec<(BrokerIdZNode, i64)>, KafkaZkError> {
        let ids = if watch {
            self.zk.get_children_and_watch(BrokerIdsZNode::PATH).await?
        } else {
            self.zk.get_children(BrokerIdsZNode::PATH).await?
        };
        let mut brokers = Vec::with_capacity(ids.len());
        for id in ids.iter().filter_map(|id| id.parse::<i32>().ok()) {
            match self.zk.get_data(&BrokerIdZNode::path(id)).await {
                Ok((data, stat)) => brokers.push((BrokerIdZNode::decode(id, &data)?, stat.czxid)),
                // Gone since the listing.
                Err(ZkError::NoNode(_)) => {}
                Err(error) => return Err(error.into()),
            }
        }
        Ok(brokers)
    }

    /// Kafka's `registerControllerAndIncrementControllerEpoch`: one `multi`
    /// creates `/controller` and bumps `/controller_epoch`.
    pub async fn register_controller_and_increment_controller_epoch(
        &self,
        broker_id: i32,
        timestamp_ms: i64,
    ) -> Result<ControllerEpoch, KafkaZkError> {
        let (epoch, version) = match self.zk.get_data(ControllerEpochZNode::PATH).await {
            Ok((data, stat)) => (ControllerEpochZNode::decode(&data)?, stat.version),
            Err(ZkError::NoNode(_)) => {
                match self
                    .zk
                    .create(
                        ControllerEpochZNode::PATH,
                        &ControllerEpochZNode::encode(0),
                        CreateMode::Persistent,
                    )
                    .await
                {
                    Ok(_) | Err(ZkError::NodeExists(_)) => {}
                    Err(error) => return Err(error.into()),
                }
                let (data, stat) = self.zk.get_data(ControllerEpochZNode::PATH).await?;
                (ControllerEpochZNode::decode(&data)?, stat.version)
            }
            Err(error) => return Err(error.into()),
        };
        let controller = ControllerZNode {
            broker_id,
            timestamp_ms,
        };
        let ops = [
            Op::Create {
                path: ControllerZNode::PATH.to_owned(),
                data: controller.encode(),
                mode: CreateMode::Ephemeral,
            },
            Op::SetData {
                path: ControllerEpochZNode::PATH.to_owned(),
                data: ControllerEpochZNode::encode(epoch + 1),
                version: Some(version),
            },
        ];
        match self.zk.multi(&ops).await {
            Ok(results) => match &results[1] {
                OpResult::SetData { stat } => Ok(ControllerEpoch {
                    epoch: epoch + 1,
                    zk_version: stat.version,
                }),
                other => unreachable!("a set answered {other:?}"),
            },
            Err(MultiError {
                error: ZkError::NodeExists(_) | ZkError::BadVersion(_),
                ..
            }) => {
                // Kafka checks whether this broker won all the same (a retry
                // after a lost answer).
                let controller = self.get_controller_id().await?;
                let (data, stat) = self.zk.get_data(ControllerEpochZNode::PATH).await?;
                if controller == Some(broker_id)
                    && ControllerEpochZNode::decode(&data)? == epoch + 1
                {
                    Ok(ControllerEpoch {
                        epoch: epoch + 1,
                        zk_version: stat.version,
                    })
                } else {
                    Err(KafkaZkError::ControllerMoved)
                }
            }
            Err(MultiError { error, .. }) => Err(error.into()),
        }
    }

    /// The elected controller, if there is one.
    pub async fn get_controller_id(&self) -> Result<Option<i32>, KafkaZkError> {
        match self.zk.get_data(ControllerZNode::PATH).await {
            Ok((data, _)) => Ok(Some(ControllerZNode::decode(&data)?.broker_id)),
            Err(ZkError::NoNode(_)) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Watches `/controller`: its creation, change or deletion is an event.
    pub async fn watch_controller(&self) -> Result<(), ZkError> {
        self.zk
            .exists_and_watch(ControllerZNode::PATH)
            .await
            .map(|_| ())
    }

    /// `/feature` with no finalized features, enabled, as a ZooKeeper-mode
    /// controller of Kafka 3.9 writes it when it takes office.
    pub async fn enable_feature_versioning(&self) -> Result<(), ZkError> {
        let enabled = FeatureZNode::encode_enabled();
        match self.zk.get_data(FeatureZNode::PATH).await {
            Ok((data, _)) if data == enabled => Ok(()),
            Ok((_, stat)) => self
                .zk
                .set_data(FeatureZNode::PATH, &enabled, Some(stat.version))
                .await
                .map(|_| ()),
            Err(ZkError::NoNode(_)) => self
                .zk
                .create(FeatureZNode::PATH, &enabled, CreateMode::Persistent)
                .await
                .map(|_| ()),
            Err(error) => Err(error),
        }
    }

    /// One controller write, fenced by its epoch's version.
    pub async fn fenced(&self, epoch: ControllerEpoch, op: Op) -> Result<OpResult, KafkaZkError> {
        let ops = [
            Op::Check {
                path: ControllerEpochZNode::PATH.to_owned(),
                version: epoch.zk_version,
            },
            op,
        ];
        match self.zk.multi(&ops).await {
            Ok(mut results) => Ok(results.pop().expect("two results")),
            Err(MultiError { index: Some(0), .. }) => Err(KafkaZkError::ControllerMoved),
            Err(MultiError { error, .. }) => Err(error.into()),
        }
    }

    /// Fenced writes issued together (pipelined, as Kafka's controller issues
    /// them), answered in order.
    pub async fn fenced_all(
        &self,
        epoch: ControllerEpoch,
        ops: Vec<Op>,
    ) -> Vec<Result<OpResult, KafkaZkError>> {
        join_all(ops.into_iter().map(|op| self.fenced(epoch, op))).await
    }

    /// Every topic; the controller watches them for topics other brokers
    /// create (Kafka's TopicChange).
    pub async fn get_all_topics_in_cluster_and_watch(&self) -> Result<Vec<String>, ZkError> {
        self.zk.get_children_and_watch(TopicsZNode::PATH).await
    }

    pub async fn get_topic(
        &self,
        topic: &str,
    ) -> Result<Option<Versioned<TopicZNode>>, KafkaZkError> {
        match self.zk.get_data(&TopicZNode::path(topic)).await {
            Ok((data, stat)) => Ok(Some((TopicZNode::decode(topic, &data)?, stat.version))),
            Err(ZkError::NoNode(_)) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// Kafka's topic creation order: the config first, then the assignment;
    /// an existing topic is NodeExists.
    pub async fn create_topic(
        &self,
        topic: &str,
        assignment: &TopicZNode,
        config: &BTreeMap<String, String>,
    ) -> Result<(), ZkError> {
        let config_path = ConfigEntityZNode::topic_path(topic);
        let config = ConfigEntityZNode::encode(config);
        match self
            .create_recursive(&config_path, &config, CreateMode::Persistent)
            .await
        {
            Ok(_) => {}
            Err(ZkError::NodeExists(_)) => {
                self.zk.set_data(&config_path, &config, None).await?;
            }
            Err(error) => return Err(error),
        }
        self.create_recursive(
            &TopicZNode::path(topic),
            &assignment.encode(),
            CreateMode::Persistent,
        )
        .await
        .map(|_| ())
    }

    /// Rewrites a topic's assignment (new partitions), fenced, if it is still
    /// at `version`.
    pub async fn set_topic_assignment(
        &self,
        epoch: ControllerEpoch,
        topic: &str,
        assignment: &TopicZNode,
        version: i32,
    ) -> Result<(), KafkaZkError> {
        self.fenced(
            epoch,
            Op::SetData {
                path: TopicZNode::path(topic),
                data: assignment.encode(),
                version: Some(version),
            },
        )
        .await
        .map(|_| ())
    }

    /// Creates the state znodes (and their `partitions/<p>` parents) of new
    /// partitions, fenced, all issued together. Returns each one's version.
    pub async fn create_topic_partition_states(
        &self,
        epoch: ControllerEpoch,
        topic: &str,
        states: &[(i32, TopicPartitionStateZNode)],
    ) -> Result<Vec<i32>, KafkaZkError> {
        match self
            .zk
            .create(
                &TopicPartitionStateZNode::partitions_path(topic),
                b"",
                CreateMode::Persistent,
            )
            .await
        {
            Ok(_) | Err(ZkError::NodeExists(_)) => {}
            Err(error) => return Err(error.into()),
        }
        // The parents first, all answered, then the states: requests issued
        // together may reach the server in any order.
        let parents = states
            .iter()
            .map(|(partition, _)| Op::Create {
                path: format!(
                    "{}/{partition}",
                    TopicPartitionStateZNode::partitions_path(topic)
                ),
                data: Vec::new(),
                mode: CreateMode::Persistent,
            })
            .collect();
        for created in self.fenced_all(epoch, parents).await {
            match created {
                Ok(_) | Err(KafkaZkError::Zk(ZkError::NodeExists(_))) => {}
                Err(error) => return Err(error),
            }
        }
        let nodes = states
            .iter()
            .map(|(partition, state)| Op::Create {
                path: TopicPartitionStateZNode::path(topic, *partition),
                data: state.encode(),
                mode: CreateMode::Persistent,
            })
            .collect();
        let mut versions = Vec::with_capacity(states.len());
        for created in self.fenced_all(epoch, nodes).await {
            match created? {
                OpResult::Create { stat, .. } => versions.push(stat.version),
                other => unreachable!("a create answered {other:?}"),
            }
        }
        Ok(versions)
    }

    /// A partition's leader, ISR and epochs, with the znode's version.
    pub async fn get_topic_partition_state(
        &self,
        topic: &str,
        partition: i32,
    ) -> Result<Option<Versioned<TopicPartitionStateZNode>>, KafkaZkError> {
        match self
            .zk
            .get_data(&TopicPartitionStateZNode::path(topic, partition))
            .await
        {
            Ok((data, stat)) => Ok(Some((
                TopicPartitionStateZNode::decode(topic, partition, &data)?,
                stat.version,
            ))),
            Err(ZkError::NoNode(_)) => Ok(None),
            Err(error) => Err(error.into()),
        }
    }

    /// A topic's config overrides, with the znode's version (None: no node).
    pub async fn get_topic_config(
        &self,
        topic: &str,
    ) -> Result<(BTreeMap<String, String>, Option<i32>), KafkaZkError> {
        self.get_entity_config(ConfigEntityZNode::TOPICS, topic)
            .await
    }

    /// An entity's config overrides (`/config/<type>/<name>`), with the
    /// znode's version (None: no node).
    pub async fn get_entity_config(
        &self,
        entity_type: &str,
        name: &str,
    ) -> Result<(BTreeMap<String, String>, Option<i32>), KafkaZkError> {
        let path = ConfigEntityZNode::path(entity_type, name);
        match self.zk.get_data(&path).await {
            Ok((data, stat)) => Ok((ConfigEntityZNode::decode(&path, &data)?, Some(stat.version))),
            Err(ZkError::NoNode(_)) => Ok((BTreeMap::new(), None)),
            Err(error) => Err(error.into()),
        }
    }

    /// Writes an entity's overrides: compare-and-set on `version`, created
    /// when there is none.
    pub async fn set_entity_config(
        &self,
        entity_type: &str,
        name: &str,
        config: &BTreeMap<String, String>,
        version: Option<i32>,
    ) -> Result<(), ZkError> {
        let path = ConfigEntityZNode::path(entity_type, name);
        let data = ConfigEntityZNode::encode(config);
        match version {
            Some(version) => self
                .zk
                .set_data(&path, &data, Some(version))
                .await
                .map(|_| ())?,
            None => self
                .create_recursive(&path, &data, CreateMode::Persistent)
                .await
                .map(|_| ())?,
        }
        Ok(())
    }

    /// Announces that `entity_path`'s config changed (`topics/<t>`,
    /// `brokers/<id>`), for every broker's watch on `/config/changes`.
    pub async fn create_config_change_notification(
        &self,
        entity_path: &str,
    ) -> Result<(), ZkError> {
        self.create_recursive(
            &ConfigChangeZNode::path_prefix(),
            &ConfigChangeZNode::encode(entity_path),
            CreateMode::PersistentSequential,
        )
        .await
        .map(|_| ())
    }

    /// The config change notifications, named by sequence; with `watch`,
    /// the next one is an event.
    pub async fn get_config_changes(&self, watch: bool) -> Result<Vec<String>, ZkError> {
        if watch {
            self.zk
                .get_children_and_watch(ConfigChangeZNode::PATH)
                .await
        } else {
            self.zk.get_children(ConfigChangeZNode::PATH).await
        }
    }

    /// The entity path of one notification (a child of `/config/changes`).
    pub async fn get_config_change(&self, child: &str) -> Result<String, KafkaZkError> {
        let path = format!("{}/{child}", ConfigChangeZNode::PATH);
        let (data, _) = self.zk.get_data(&path).await?;
        Ok(ConfigChangeZNode::decode(&data)?)
    }

    /// Marks a topic for deletion, as the DeleteTopics handler does.
    pub async fn create_delete_topic_path(&self, topic: &str) -> Result<(), ZkError> {
        match self
            .create_recursive(
                &DeleteTopicsZNode::topic_path(topic),
                b"",
                CreateMode::Persistent,
            )
            .await
        {
            Ok(_) | Err(ZkError::NodeExists(_)) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// Topics marked for deletion; with `watch`, the next mark is an event.
    pub async fn get_topic_deletions(&self, watch: bool) -> Result<Vec<String>, ZkError> {
        if watch {
            self.zk
                .get_children_and_watch(DeleteTopicsZNode::PATH)
                .await
        } else {
            self.zk.get_children(DeleteTopicsZNode::PATH).await
        }
    }

    /// Kafka's `propagateLogDirEvent`: tells the controller one of this
    /// broker's log dirs failed.
    pub async fn propagate_log_dir_event(&self, broker: i32) -> Result<(), ZkError> {
        self.create_recursive(
            &LogDirEventNotificationZNode::path_prefix(),
            &LogDirEventNotificationZNode::encode(broker),
            CreateMode::PersistentSequential,
        )
        .await
        .map(|_| ())
    }

    /// The log dir event notifications, watched: the next one is an event.
    pub async fn get_log_dir_events_and_watch(&self) -> Result<Vec<String>, ZkError> {
        self.zk
            .get_children_and_watch(LogDirEventNotificationZNode::PATH)
            .await
    }

    /// The broker a notification names, and the notification deleted
    /// (fenced): the controller processes each once.
    pub async fn take_log_dir_event(
        &self,
        epoch: ControllerEpoch,
        child: &str,
    ) -> Result<i32, KafkaZkError> {
        let path = LogDirEventNotificationZNode::child_path(child);
        let (data, _) = self.zk.get_data(&path).await?;
        let broker = LogDirEventNotificationZNode::decode(&data)?;
        self.fenced(
            epoch,
            Op::Delete {
                path,
                version: None,
            },
        )
        .await?;
        Ok(broker)
    }

    /// Removes a deleted topic's znodes (its assignment and partition states,
    /// its config) and then its deletion mark, each write fenced.
    pub async fn delete_topic_znodes(
        &self,
        epoch: ControllerEpoch,
        topic: &str,
    ) -> Result<(), KafkaZkError> {
        self.delete_recursive_fenced(epoch, &TopicZNode::path(topic))
            .await?;
        self.delete_recursive_fenced(epoch, &ConfigEntityZNode::topic_path(topic))
            .await?;
        self.delete_recursive_fenced(epoch, &DeleteTopicsZNode::topic_path(topic))
            .await
    }

    async fn delete_recursive_fenced(
        &self,
        epoch: ControllerEpoch,
        path: &str,
    ) -> Result<(), KafkaZkError> {
        let children = match self.zk.get_children(path).await {
            Ok(children) => children,
            Err(ZkError::NoNode(_)) => return Ok(()),
            Err(error) => return Err(error.into()),
        };
        let paths: Vec<String> = children
            .iter()
            .map(|child| format!("{path}/{child}"))
            .collect();
        let deletions = paths
            .iter()
            .map(|path| Box::pin(self.delete_recursive_fenced(epoch, path)));
        for deleted in join_all(deletions).await {
            deleted?;
        }
        let op = Op::Delete {
            path: path.to_owned(),
            version: None,
        };
        match self.fenced(epoch, op).await {
            Ok(_) | Err(KafkaZkError::Zk(ZkError::NoNode(_))) => Ok(()),
            Err(error) => Err(error),
        }
    }

    /// The last claimed block of producer ids (None before the first) and
    /// the node's version (None: no node yet).
    pub async fn get_producer_id_block(
        &self,
    ) -> Result<(Option<ProducerIdBlockZNode>, Option<i32>), KafkaZkError> {
        match self.zk.get_data(ProducerIdBlockZNode::PATH).await {
            // Created empty among the persistent paths.
            Ok((data, stat)) if data.is_empty() => Ok((None, Some(stat.version))),
            Ok((data, stat)) => Ok((
                Some(ProducerIdBlockZNode::decode(&data)?),
                Some(stat.version),
            )),
            Err(ZkError::NoNode(_)) => Ok((None, None)),
            Err(error) => Err(error.into()),
        }
    }

    /// Claims the next block with a compare-and-set on `version` (None: the
    /// node does not exist yet).
    pub async fn set_producer_id_block(
        &self,
        block: &ProducerIdBlockZNode,
        version: Option<i32>,
    ) -> Result<(), ZkError> {
        match version {
            Some(version) => self
                .zk
                .set_data(ProducerIdBlockZNode::PATH, &block.encode(), Some(version))
                .await
                .map(|_| ()),
            None => self
                .zk
                .create(
                    ProducerIdBlockZNode::PATH,
                    &block.encode(),
                    CreateMode::Persistent,
                )
                .await
                .map(|_| ()),
        }
    }
}
