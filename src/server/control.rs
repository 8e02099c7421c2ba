//! The control plane: one thread (its own glommio executor) that owns the
//! `KafkaController` and the shard placement, serves metadata changes asked
//! for by the shards one at a time, and publishes each new image to every
//! shard, answering only once every shard has applied it.

use std::path::Path;
use std::rc::Rc;
use std::sync::Arc;

use futures_channel::oneshot;
use glommio::channels::local_channel;
use glommio::channels::shared_channel::{
    self, ConnectedReceiver, ConnectedSender, SharedReceiver, SharedSender,
};
use kafka_protocol::messages::{AlterPartitionRequest, AlterPartitionResponse};
use shards::log::{LogDirs, TopicPartition};
use shards::runtime::ShardPlacement;
use tracing::warn;

use crate::config::dynamic::DynamicBrokerConfigs;
use crate::config::LeaderRebalanceConfig;
use crate::controller::{
    alter_broker_config, alter_topic_config, create_topics_in_zk, ConfigEntity, ConfigOp,
    ControllerEvent, ElectionResult, ElectionType, KafkaController, NewTopic, OngoingReassignment,
    ReassignmentRequest, ReassignmentResult, TopicDefaults,
};
use crate::metadata::cache::MetadataCache;
use crate::metadata::image::{kafka_uuid_string, LocalReplica, MetadataImage};
use crate::metadata::kafka_zk_client::{KafkaZkClient, KafkaZkError};
use crate::metadata::store::EmbeddedStore;
use crate::metadata::topic_configs::TopicConfigs;
use crate::metadata::zk_client::{EventType, ZkClient, ZkEvent, ZkEventReceiver};
use crate::metadata::znodes::{
    BrokerIdZNode, BrokerIdsZNode, ConfigChangeZNode, ConfigEntityZNode, ControllerZNode,
    DeleteTopicsZNode, LogDirEventNotificationZNode, TopicsZNode,
};
use crate::metadata::zookeeper::{ZooKeeperClient, ZooKeeperConfig};
use crate::protocol::inter_broker::{
    broker_ids, LeaderAndIsrRequest, StopReplicaRequest, UpdateMetadataRequest,
};
use crate::protocol::{ApiError, ResponseError};
use crate::replication::hosted_partitions::{
    HostedPartitions, PartitionErrors, ReplicaState, StopReplicaPartition,
};
use crate::replication::partition_state::{LeaderAndIsr, RECOVERED};
use uuid::Uuid;

/// Requests that may wait in a shard's channel to the control plane.
const CONTROL_CHANNEL_CAPACITY: usize = 256;

pub enum ControlRequest {
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
        /// How long the answer may wait for this broker to learn the leaders.
        timeout_ms: i32,
        reply: oneshot::Sender<Vec<Result<(i32, i16), ApiError>>>,
    },
    /// Topics a client's Metadata or FindCoordinator creates, on any broker.
    AutoCreateTopics {
        topics: Vec<NewTopic>,
        reply: oneshot::Sender<Vec<Result<(i32, i16), ApiError>>>,
    },
    DeleteTopics {
        names: Vec<String>,
        reply: oneshot::Sender<Vec<Result<(), ApiError>>>,
    },
    CreatePartitions {
        topic: String,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    AlterConfigs {
        entity: ConfigEntity,
        changes: Vec<(String, ConfigOp, Option<String>)>,
        replace_all: bool,
        validate_only: bool,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    AllocateProducerId {
        reply: oneshot::Sender<Result<i64, ApiError>>,
    },
    /// From the shard balancer: a replica of this broker, its log handed
    /// off by its shard, now lives on `shard`.
    MoveReplicaToShard {
        tp: TopicPartition,
        shard: usize,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    /// From the shard balancer: the shard this broker gathers on while
    /// lightly loaded (None: it does not), where new replicas go.
    GatherOnShard {
        shard: Option<usize>,
        reply: oneshot::Sender<()>,
    },
    /// To the controller: a block of producer ids for a broker.
    AllocateProducerIds {
        broker_id: i32,
        broker_epoch: i64,
        reply: oneshot::Sender<Result<(i64, i32), ResponseError>>,
    },
    /// To the controller: a leader's ISR change.
    AlterPartition {
        request: Box<AlterPartitionRequest>,
        version: i16,
        reply: oneshot::Sender<AlterPartitionResponse>,
    },
    /// To the controller: an operator's election (ElectLeaders); None
    /// asks for every partition.
    ElectLeaders {
        election_type: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
        reply: oneshot::Sender<Result<Vec<ElectionResult>, ApiError>>,
    },
    /// To the controller: new targets for partitions' replicas, None
    /// cancelling (AlterPartitionReassignments).
    AlterPartitionReassignments {
        requests: Vec<ReassignmentRequest>,
        reply: oneshot::Sender<Result<Vec<ReassignmentResult>, ApiError>>,
    },
    /// To the controller: the reassignments in progress among these
    /// partitions (None: all).
    ListPartitionReassignments {
        partitions: Option<Vec<(String, i32)>>,
        reply: oneshot::Sender<Result<Vec<OngoingReassignment>, ApiError>>,
    },
    /// To the controller: a broker is stopping (ControlledShutdown).
    ControlledShutdown {
        broker_id: i32,
        broker_epoch: i64,
        reply: oneshot::Sender<Result<Vec<(String, i32)>, ResponseError>>,
    },
    /// From the controller, on the inter-broker listener.
    UpdateMetadata {
        request: Box<UpdateMetadataRequest>,
        reply: oneshot::Sender<Result<(), ResponseError>>,
    },
    LeaderAndIsr {
        request: Box<LeaderAndIsrRequest>,
        reply: oneshot::Sender<Result<PartitionErrors, ResponseError>>,
    },
    StopReplica {
        request: Box<StopReplicaRequest>,
        reply: oneshot::Sender<Result<PartitionErrors, ResponseError>>,
    },
}

/// A new image for a shard to apply; `applied` fires once it has.
pub struct ApplyImage {
    pub image: Arc<MetadataImage>,
    pub applied: oneshot::Sender<()>,
}

/// A shard's unconnected ends toward the control plane.
pub struct ShardControlEnds {
    pub requests: SharedSender<ControlRequest>,
    pub images: SharedReceiver<ApplyImage>,
}

/// The control plane's unconnected ends toward every shard.
pub struct ControlEnds {
    requests: Vec<SharedReceiver<ControlRequest>>,
    images: Vec<SharedSender<ApplyImage>>,
}

pub fn build_control_channels(nr_shards: usize) -> (ControlEnds, Vec<ShardControlEnds>) {
    let mut control = ControlEnds {
        requests: Vec::new(),
        images: Vec::new(),
    };
    let mut shards = Vec::new();
    for _ in 0..nr_shards {
        let (request_tx, request_rx) = shared_channel::new_bounded(CONTROL_CHANNEL_CAPACITY);
        let (image_tx, image_rx) = shared_channel::new_bounded(1);
        control.requests.push(request_rx);
        control.images.push(image_tx);
        shards.push(ShardControlEnds {
            requests: request_tx,
            images: image_rx,
        });
    }
    (control, shards)
}

/// A shard's handle for asking the control plane for metadata changes.
pub struct ControlClient {
    sender: ConnectedSender<ControlRequest>,
}

impl ControlClient {
    pub fn new(sender: ConnectedSender<ControlRequest>) -> Self {
        Self { sender }
    }

    /// Hangs up on the control plane (shutdown); it ends once every shard has.
    pub fn close(&self) {
        self.sender.close();
    }

    async fn ask<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<T>) -> ControlRequest,
    ) -> Result<T, ApiError> {
        let (reply, answer) = oneshot::channel();
        let unavailable = || {
            ApiError::new(
                ResponseError::UnknownServerError,
                "the control plane is shutting down",
            )
        };
        self.sender
            .send(make(reply))
            .await
            .map_err(|_| unavailable())?;
        answer.await.map_err(|_| unavailable())
    }

    /// `ask`, for a request answered with Kafka's error alone.
    async fn ask_kafka<T>(
        &self,
        make: impl FnOnce(oneshot::Sender<Result<T, ResponseError>>) -> ControlRequest,
    ) -> Result<T, ResponseError> {
        self.ask(make).await.map_err(|error| error.error)?
    }

    /// CreateTopics: answered once this broker knows every new partition's
    /// leader, or after `timeout_ms` (REQUEST_TIMED_OUT for the topics whose
    /// leaders it does not know yet).
    pub async fn create_topics(
        &self,
        topics: Vec<NewTopic>,
        validate_only: bool,
        timeout_ms: i32,
    ) -> Vec<Result<(i32, i16), ApiError>> {
        let count = topics.len();
        self.ask(|reply| ControlRequest::CreateTopics {
            topics,
            validate_only,
            timeout_ms,
            reply,
        })
        .await
        .unwrap_or_else(|error| vec![Err(error); count])
    }

    /// Creates topics for a client that needs them (Metadata's
    /// auto-creation, `__consumer_offsets`): through the controller here,
    /// or in ZooKeeper directly from any other broker, as Kafka does.
    pub async fn auto_create_topics(
        &self,
        topics: Vec<NewTopic>,
    ) -> Vec<Result<(i32, i16), ApiError>> {
        let count = topics.len();
        self.ask(|reply| ControlRequest::AutoCreateTopics { topics, reply })
            .await
            .unwrap_or_else(|error| vec![Err(error); count])
    }

    pub async fn delete_topics(&self, names: Vec<String>) -> Vec<Result<(), ApiError>> {
        let count = names.len();
        self.ask(|reply| ControlRequest::DeleteTopics { names, reply })
            .await
            .unwrap_or_else(|error| vec![Err(error); count])
    }

    pub async fn create_partitions(
        &self,
        topic: String,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.ask(|reply| ControlRequest::CreatePartitions {
            topic,
            count,
            assignments,
            validate_only,
            reply,
        })
        .await?
    }

    pub async fn update_metadata(
        &self,
        request: UpdateMetadataRequest,
    ) -> Result<(), ResponseError> {
        self.ask_kafka(|reply| ControlRequest::UpdateMetadata {
            request: Box::new(request),
            reply,
        })
        .await
    }

    pub async fn leader_and_isr(
        &self,
        request: LeaderAndIsrRequest,
    ) -> Result<PartitionErrors, ResponseError> {
        self.ask_kafka(|reply| ControlRequest::LeaderAndIsr {
            request: Box::new(request),
            reply,
        })
        .await
    }

    pub async fn stop_replica(
        &self,
        request: StopReplicaRequest,
    ) -> Result<PartitionErrors, ResponseError> {
        self.ask_kafka(|reply| ControlRequest::StopReplica {
            request: Box::new(request),
            reply,
        })
        .await
    }

    /// Asks this broker's controller for a block of producer ids for a broker:
    /// its first id and length.
    pub async fn allocate_producer_ids(
        &self,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<(i64, i32), ResponseError> {
        self.ask_kafka(|reply| ControlRequest::AllocateProducerIds {
            broker_id,
            broker_epoch,
            reply,
        })
        .await
    }

    /// Asks this broker's controller to commit a leader's ISR change.
    pub async fn alter_partition(
        &self,
        request: AlterPartitionRequest,
        version: i16,
    ) -> AlterPartitionResponse {
        let request = Box::new(request);
        self.ask(|reply| ControlRequest::AlterPartition {
            request,
            version,
            reply,
        })
        .await
        .unwrap_or_else(|error| {
            AlterPartitionResponse::default().with_error_code(error.error.code())
        })
    }

    /// Asks this broker's controller to move a stopping broker's leaderships;
    /// the replicated partitions it still leads.
    pub async fn controlled_shutdown(
        &self,
        broker_id: i32,
        broker_epoch: i64,
    ) -> Result<Vec<(String, i32)>, ResponseError> {
        self.ask_kafka(|reply| ControlRequest::ControlledShutdown {
            broker_id,
            broker_epoch,
            reply,
        })
        .await
    }

    pub async fn elect_leaders(
        &self,
        election_type: ElectionType,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<ElectionResult>, ApiError> {
        self.ask(|reply| ControlRequest::ElectLeaders {
            election_type,
            partitions,
            reply,
        })
        .await?
    }

    pub async fn alter_partition_reassignments(
        &self,
        requests: Vec<ReassignmentRequest>,
    ) -> Result<Vec<ReassignmentResult>, ApiError> {
        self.ask(|reply| ControlRequest::AlterPartitionReassignments { requests, reply })
            .await?
    }

    pub async fn list_partition_reassignments(
        &self,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<Vec<OngoingReassignment>, ApiError> {
        self.ask(|reply| ControlRequest::ListPartitionReassignments { partitions, reply })
            .await?
    }

    pub async fn allocate_producer_id(&self) -> Result<i64, ApiError> {
        self.ask(|reply| ControlRequest::AllocateProducerId { reply })
            .await?
    }

    /// A replica whose log its shard handed off moves to `shard`: answered
    /// once every shard applied the image that places it there.
    pub async fn move_replica_to_shard(
        &self,
        tp: TopicPartition,
        shard: usize,
    ) -> Result<(), ApiError> {
        self.ask(|reply| ControlRequest::MoveReplicaToShard { tp, shard, reply })
            .await?
    }

    /// New replicas go to `shard` from now on (None: to the least loaded).
    pub async fn gather_on_shard(&self, shard: Option<usize>) -> Result<(), ApiError> {
        self.ask(|reply| ControlRequest::GatherOnShard { shard, reply })
            .await
    }

    pub async fn alter_configs(
        &self,
        entity: ConfigEntity,
        changes: Vec<(String, ConfigOp, Option<String>)>,
        replace_all: bool,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.ask(|reply| ControlRequest::AlterConfigs {
            entity,
            changes,
            replace_all,
            validate_only,
            reply,
        })
        .await?
    }
}

/// Where this broker's replicas live: their shards and their log dirs.
pub struct LocalStorage {
    pub placement: Arc<ShardPlacement>,
    pub dirs: Arc<LogDirs>,
}

/// Starts the control plane of a single broker on the embedded store under
/// `metadata_dir`; the only broker always wins the election.
pub async fn start_embedded(
    metadata_dir: &Path,
    registration: BrokerIdZNode,
    defaults: TopicDefaults,
    leader_rebalance: LeaderRebalanceConfig,
    storage: LocalStorage,
) -> Result<(ControlPlane<EmbeddedStore>, ZkEventReceiver), KafkaZkError> {
    let (store, zk_events) = EmbeddedStore::open(metadata_dir)?;
    let plane = ControlPlane::start(
        store,
        None,
        registration,
        defaults,
        leader_rebalance,
        storage,
    )
    .await?;
    assert!(
        plane.controller.is_active(),
        "the only broker is the controller"
    );
    Ok((plane, zk_events))
}

/// Starts the control plane of a broker of a ZooKeeper-mode cluster.
/// Its image is what the controller tells it with UpdateMetadata; as
/// controller it tells every broker on `inter_broker_listener`.
pub async fn start_zookeeper(
    config: &ZooKeeperConfig,
    inter_broker_listener: String,
    registration: BrokerIdZNode,
    defaults: TopicDefaults,
    leader_rebalance: LeaderRebalanceConfig,
    storage: LocalStorage,
) -> Result<(ControlPlane<Rc<ZooKeeperClient>>, ZkEventReceiver), KafkaZkError> {
    let (client, zk_events) = ZooKeeperClient::connect(config.clone()).await?;
    let plane = ControlPlane::start(
        client,
        Some(inter_broker_listener),
        registration,
        defaults,
        leader_rebalance,
        storage,
    )
    .await?;
    Ok((plane, zk_events))
}

/// What the controller told a ZooKeeper-mode broker: the cluster with
/// UpdateMetadata, its replicas with LeaderAndIsr and StopReplica, and the
/// configs of the topics it knows, read from `/config/topics`.
struct ToldByController {
    cache: MetadataCache,
    hosted: HostedPartitions,
    configs: TopicConfigs,
    /// Logs StopReplica deleted, for the next image.
    deleted_replicas: Vec<TopicPartition>,
}

/// What the control plane processes, one at a time and in order (Kafka's
/// ControllerEventManager): the shards' requests and the store's watches.
enum ControlEvent {
    Request(ControlRequest),
    Zk(ZkEvent),
    /// What a broker answered the controller.
    Controller(ControllerEvent),
    /// A CreateTopics' wait for its leaders ran out.
    CreationExpired(u64),
    /// Time for the controller's auto leader rebalance check.
    AutoLeaderRebalance,
    /// One of this broker's log dirs went offline.
    LogDirFailed(std::path::PathBuf),
}

/// Kafka's first auto leader rebalance check after a failover.
const AUTO_LEADER_REBALANCE_FIRST_DELAY: std::time::Duration = std::time::Duration::from_secs(5);

/// Kafka's DelayedCreatePartitions: a CreateTopics answer waiting for this
/// broker's cache to know the leaders of the topics it created.
struct PendingCreation {
    id: u64,
    /// Each requested topic's name, with its result.
    names: Vec<String>,
    results: Vec<Result<(i32, i16), ApiError>>,
    reply: oneshot::Sender<Vec<Result<(i32, i16), ApiError>>>,
}

impl PendingCreation {
    /// Whether `cache` knows the leaders of every topic created.
    fn is_complete(&self, cache: &MetadataCache) -> bool {
        self.created()
            .all(|(name, partitions)| cache.has_leaders(name, partitions))
    }

    /// The created topics and their partition counts.
    fn created(&self) -> impl Iterator<Item = (&str, i32)> + '_ {
        self.names
            .iter()
            .zip(&self.results)
            .filter_map(|(name, result)| Some((name.as_str(), result.as_ref().ok()?.0)))
    }
}

pub struct ControlPlane<Z> {
    zk: Rc<KafkaZkClient<Z>>,
    /// This broker's `/brokers/ids/<id>`, registered again on a new session.
    registration: BrokerIdZNode,
    cluster_id: String,
    controller: KafkaController<Z>,
    /// ZooKeeper mode: what the controller told this broker, its image.
    told: Option<ToldByController>,
    /// What brokers answer this broker's controller, until `run` takes it.
    controller_events: Option<local_channel::LocalReceiver<ControllerEvent>>,
    /// CreateTopics answers waiting for their leaders, and the next one's id.
    pending_creations: Vec<PendingCreation>,
    next_creation_id: u64,
    /// The queue `run` processes, for timers; gone once it ends.
    events: std::rc::Weak<local_channel::LocalSender<ControlEvent>>,
    /// This broker's registration's czxid.
    broker_epoch: i64,
    placement: Arc<ShardPlacement>,
    /// This broker's log dirs: which are offline, and what lives in each.
    dirs: Arc<LogDirs>,
    broker_id: i32,
    image_version: u64,
    /// The shard the next image goes to before the others: a moved
    /// replica's new shard serves it before any other shard sends it there.
    apply_first: Option<usize>,
    /// Where new replicas go while the broker gathers on one shard.
    gathered_on: Option<usize>,
    leader_rebalance: LeaderRebalanceConfig,
    /// This broker's dynamic configs, for the images.
    dynamic_broker_configs: Arc<DynamicBrokerConfigs>,
    /// Whether an auto leader rebalance check is due (a timer runs).
    leader_rebalance_scheduled: bool,
    /// The newest `/config/changes` notification processed (Kafka's
    /// ZkConfigManager): configs are read at start, so the ones before it
    /// are done.
    config_changes_seen: Option<u64>,
}

impl<Z: ZkClient> ControlPlane<Z> {
    /// Kafka's broker startup against the store: its persistent paths and the
    /// cluster id, this broker's registration (refused while another broker
    /// holds the id), then the controller's startup, which runs the election.
    /// With `inter_broker_listener` (ZooKeeper mode), brokers learn the
    /// metadata with UpdateMetadata on it, this one included.
    async fn start(
        zk: Z,
        inter_broker_listener: Option<String>,
        registration: BrokerIdZNode,
        defaults: TopicDefaults,
        leader_rebalance: LeaderRebalanceConfig,
        storage: LocalStorage,
    ) -> Result<Self, KafkaZkError> {
        let zk = Rc::new(KafkaZkClient::new(zk));
        zk.create_top_level_paths().await?;
        let proposed = kafka_uuid_string(&Uuid::new_v4());
        let cluster_id = zk.get_or_create_cluster_id(&proposed).await?;
        let broker_id = registration.broker.id;
        let broker_epoch = zk.register_broker(&registration).await?;
        tracing::info!(broker = broker_id, broker_epoch, cluster_id, "registered");
        let log_defaults = Arc::new(defaults.log_config.clone());
        let mut controller =
            KafkaController::new(zk.clone(), broker_id, cluster_id.clone(), defaults);
        let (events_tx, events_rx) = local_channel::new_bounded(CONTROL_CHANNEL_CAPACITY);
        let told = match inter_broker_listener {
            Some(listener) => {
                controller = controller.sending_to_brokers(listener, events_tx);
                Some(ToldByController {
                    cache: MetadataCache::new(cluster_id.clone()),
                    hosted: HostedPartitions::default(),
                    configs: TopicConfigs::new(log_defaults),
                    deleted_replicas: Vec::new(),
                })
            }
            None => None,
        };
        controller.elect().await?;
        let config_changes_seen = newest_config_change(&zk.get_config_changes(true).await?);
        let mut plane = Self {
            leader_rebalance,
            dynamic_broker_configs: Arc::default(),
            leader_rebalance_scheduled: false,
            config_changes_seen,
            zk,
            registration,
            cluster_id,
            controller,
            told,
            controller_events: Some(events_rx),
            pending_creations: Vec::new(),
            next_creation_id: 0,
            events: std::rc::Weak::new(),
            broker_epoch,
            placement: storage.placement,
            dirs: storage.dirs,
            broker_id,
            image_version: 0,
            apply_first: None,
            gathered_on: None,
        };
        plane.load_dynamic_broker_configs().await;
        Ok(plane)
    }

    /// The image shards start with: the controller's, or on another broker
    /// what it knows before the controller has told it anything.
    pub fn initial_image(&mut self) -> Arc<MetadataImage> {
        self.next_image().unwrap_or_else(|| {
            let mut image = MetadataImage::empty();
            image.cluster_id = self.cluster_id.clone();
            Arc::new(image)
        })
    }

    /// A new session after the last expired: its ephemeral nodes and watches
    /// went with it, so this broker registers again (a new broker epoch) and
    /// the election runs again. Returns whether the image changed.
    async fn on_new_session(&mut self) -> bool {
        match self.zk.register_broker(&self.registration).await {
            Ok(broker_epoch) => {
                self.broker_epoch = broker_epoch;
                tracing::info!(broker = self.broker_id, broker_epoch, "registered again")
            }
            Err(error) => tracing::error!(%error, "cannot register again"),
        }
        let was_active = self.controller.is_active();
        if let Err(error) = self.controller.on_new_session().await {
            tracing::error!(%error, "controller election failed");
        }
        was_active != self.controller.is_active()
    }

    /// Builds the next image and places this broker's new replicas on
    /// shards; None while this broker is not the controller (single-node
    /// mode) or the shard placement cannot be persisted.
    pub fn next_image(&mut self) -> Option<Arc<MetadataImage>> {
        self.image_version += 1;
        let (mut image, replicas) = match self.told.as_mut() {
            Some(told) => {
                let mut image = told.cache.image(self.image_version, &told.configs);
                image.deleted_replicas = std::mem::take(&mut told.deleted_replicas)
                    .into_iter()
                    .map(|tp| {
                        // A log never opened since the start: any shard removes it.
                        let shard = self.placement.shard_of(&tp).unwrap_or(0);
                        (tp, shard)
                    })
                    .collect();
                let replicas: Vec<_> = told
                    .hosted
                    .iter()
                    .map(|(tp, state)| (tp.clone(), state.clone(), told.configs.get(&tp.topic).1))
                    .collect();
                (image, replicas)
            }
            None => {
                let image = self.controller.build_image(self.image_version)?;
                let replicas = assigned_replicas(&image, self.broker_id);
                (image, replicas)
            }
        };
        image.broker_epoch = self.broker_epoch;
        image.dynamic_broker_configs = self.dynamic_broker_configs.clone();
        let partitions: Vec<TopicPartition> = replicas.iter().map(|(tp, ..)| tp.clone()).collect();
        let shards = match self.placement.assign_all(&partitions, self.gathered_on) {
            Ok(shards) => shards,
            Err(error) => {
                warn!(%error, "cannot persist shard placement; replicas stay unplaced");
                return None;
            }
        };
        for ((tp, state, log_config), shard) in replicas.into_iter().zip(shards) {
            let replica = LocalReplica {
                shard,
                state,
                log_config,
            };
            image.insert_local_replica(tp, replica);
        }
        Some(Arc::new(image))
    }

    /// Serves the shards until every one of them has hung up.
    pub async fn run(mut self, ends: ControlEnds, zk_events: ZkEventReceiver) {
        let mut images: Vec<ConnectedSender<ApplyImage>> = Vec::new();
        let connecting: Vec<_> = ends
            .images
            .into_iter()
            .map(|s| glommio::spawn_local(s.connect()))
            .collect();
        let (merged_tx, merged_rx) =
            local_channel::new_bounded::<ControlEvent>(CONTROL_CHANNEL_CAPACITY);
        let merged_tx = std::rc::Rc::new(merged_tx);
        self.events = std::rc::Rc::downgrade(&merged_tx);
        let mut shards_left = Vec::new();
        // Closed once a shard hung up: an image sent to a shard that is
        // stopping can sit in its channel unread, with the answer it carries.
        let mut hung_up = Vec::new();
        for receiver in ends.requests {
            let merged_tx = merged_tx.clone();
            let (hung_up_tx, hung_up_rx) = local_channel::new_bounded::<()>(1);
            hung_up.push(hung_up_rx);
            shards_left.push(glommio::spawn_local(async move {
                let _hung_up = hung_up_tx;
                let receiver: ConnectedReceiver<ControlRequest> = receiver.connect().await;
                while let Some(request) = receiver.recv().await {
                    if merged_tx
                        .send(ControlEvent::Request(request))
                        .await
                        .is_err()
                    {
                        break;
                    }
                }
            }));
        }
        let controller_events = self.controller_events.take().expect("run once");
        let mut failed_dirs = self.dirs.take_failures().expect("run once");
        let watches = glommio::spawn_local({
            let merged_tx = merged_tx.clone();
            async move {
                let zk = async {
                    while let Some(event) = zk_events.recv().await {
                        if merged_tx.send(ControlEvent::Zk(event)).await.is_err() {
                            break;
                        }
                    }
                };
                let answers = async {
                    while let Some(event) = controller_events.recv().await {
                        if merged_tx
                            .send(ControlEvent::Controller(event))
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                };
                let failures = async {
                    use futures_lite::StreamExt;
                    while let Some(dir) = failed_dirs.next().await {
                        if merged_tx
                            .send(ControlEvent::LogDirFailed(dir))
                            .await
                            .is_err()
                        {
                            break;
                        }
                    }
                };
                futures_lite::future::zip(futures_lite::future::zip(zk, answers), failures).await;
            }
        });
        drop(merged_tx);
        // The queue ends once every shard hung up, whatever the store still sends.
        glommio::spawn_local(async move {
            for shard in shards_left {
                shard.await;
            }
            watches.cancel().await;
        })
        .detach();
        for task in connecting {
            images.push(task.await);
        }
        while let Some(event) = merged_rx.recv().await {
            let (changed, reply) = match event {
                ControlEvent::Request(request) => self.serve(request).await,
                ControlEvent::Zk(event) => (self.on_zk_event(event).await, Box::new(|| ()) as _),
                ControlEvent::Controller(ControllerEvent::StopReplicaAnswered {
                    broker,
                    answers,
                }) => {
                    self.controller
                        .on_stop_replica_answered(broker, answers)
                        .await;
                    (false, Box::new(|| ()) as _)
                }
                ControlEvent::CreationExpired(id) => {
                    self.expire_creation(id);
                    (false, Box::new(|| ()) as _)
                }
                ControlEvent::AutoLeaderRebalance => {
                    (self.on_auto_leader_rebalance().await, Box::new(|| ()) as _)
                }
                ControlEvent::LogDirFailed(dir) => {
                    (self.on_log_dir_failure(&dir).await, Box::new(|| ()) as _)
                }
                ControlEvent::Controller(ControllerEvent::ReplicasOnOfflineDirs {
                    broker,
                    partitions,
                }) => {
                    let handled = self
                        .controller
                        .on_replicas_on_offline_dirs(broker, partitions)
                        .await;
                    if let Err(error) = handled {
                        tracing::error!(%error, "cannot take replicas on an offline log dir offline");
                    }
                    (self.told.is_none(), Box::new(|| ()) as _)
                }
            };
            // A controller (just elected, or re-elected) checks the balance
            // of leaders a while after it took office, then periodically.
            if self.controller.is_active() {
                self.schedule_auto_leader_rebalance(AUTO_LEADER_REBALANCE_FIRST_DELAY);
            }
            let first = self.apply_first.take();
            if let Some(image) = changed.then(|| self.next_image()).flatten() {
                let mut order: Vec<usize> = (0..images.len()).collect();
                order.sort_by_key(|shard| Some(*shard) != first);
                for (shard, hung_up) in order.into_iter().map(|s| (&images[s], &hung_up[s])) {
                    let (applied, done) = oneshot::channel();
                    if shard
                        .send(ApplyImage {
                            image: image.clone(),
                            applied,
                        })
                        .await
                        .is_ok()
                    {
                        futures_lite::future::or(
                            async {
                                let _ = done.await;
                            },
                            async {
                                assert!(hung_up.recv().await.is_none(), "never sent");
                            },
                        )
                        .await;
                    }
                }
            }
            reply();
            self.complete_creations();
        }
    }

    /// Applies one request. Returns whether the metadata changed and the reply,
    /// which `run` sends only after every shard applied the change.
    async fn serve(&mut self, request: ControlRequest) -> (bool, Box<dyn FnOnce()>) {
        match request {
            ControlRequest::CreateTopics {
                topics,
                validate_only,
                timeout_ms,
                reply,
            } => {
                let results = self.controller.create_topics(&topics, validate_only).await;
                let changed = !validate_only && results.iter().any(Result::is_ok);
                if changed && timeout_ms > 0 && self.told.is_some() {
                    self.delay_creation(&topics, results, timeout_ms, reply);
                    return (changed, Box::new(|| ()));
                }
                (changed, Box::new(move || drop(reply.send(results))))
            }
            ControlRequest::AutoCreateTopics { topics, reply } => {
                let results = match &self.told {
                    Some(told) if !self.controller.is_active() => {
                        let brokers: Vec<_> = told.cache.brokers().cloned().collect();
                        let defaults = self.controller.topic_defaults();
                        create_topics_in_zk(&self.zk, defaults, &brokers, &topics).await
                    }
                    _ => self.controller.create_topics(&topics, false).await,
                };
                let changed = results.iter().any(Result::is_ok);
                (changed, Box::new(move || drop(reply.send(results))))
            }
            ControlRequest::DeleteTopics { names, reply } => {
                let results = self.controller.delete_topics(&names).await;
                let changed = results.iter().any(Result::is_ok);
                (changed, Box::new(move || drop(reply.send(results))))
            }
            ControlRequest::CreatePartitions {
                topic,
                count,
                assignments,
                validate_only,
                reply,
            } => {
                let result = self
                    .controller
                    .create_partitions(&topic, count, assignments, validate_only)
                    .await;
                let changed = !validate_only && result.is_ok();
                (changed, Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::AlterConfigs {
                entity,
                changes,
                replace_all,
                validate_only,
                reply,
            } => {
                let result = match &entity {
                    ConfigEntity::Topic(topic) => {
                        alter_topic_config(
                            &self.zk,
                            self.controller.log_defaults(),
                            topic,
                            &changes,
                            replace_all,
                            validate_only,
                        )
                        .await
                    }
                    ConfigEntity::Broker(broker) => {
                        alter_broker_config(&self.zk, broker, &changes, replace_all, validate_only)
                            .await
                    }
                };
                // This broker serves the change at once; the others on the notification.
                let changed = !validate_only && result.is_ok();
                if changed {
                    match &entity {
                        ConfigEntity::Topic(topic) => self.on_topic_config_change(topic).await,
                        ConfigEntity::Broker(_) => self.load_dynamic_broker_configs().await,
                    }
                }
                (changed, Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::UpdateMetadata { request, reply } => {
                let result = self.on_update_metadata(&request).await;
                let changed = result.is_ok();
                (
                    changed,
                    Box::new(move || {
                        let _ = reply.send(result);
                    }),
                )
            }
            ControlRequest::LeaderAndIsr { request, reply } => {
                let result = self.on_leader_and_isr(&request).await;
                (result.is_ok(), Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::StopReplica { request, reply } => {
                let result = self.on_stop_replica(&request);
                (result.is_ok(), Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::AllocateProducerIds {
                broker_id,
                broker_epoch,
                reply,
            } => {
                let result = self
                    .controller
                    .allocate_producer_ids(broker_id, broker_epoch)
                    .await;
                (
                    false,
                    Box::new(move || {
                        let _ = reply.send(result);
                    }),
                )
            }
            ControlRequest::AlterPartition {
                request,
                version,
                reply,
            } => {
                let response = self.controller.alter_partition(*request, version).await;
                (false, Box::new(move || drop(reply.send(response))))
            }
            ControlRequest::ControlledShutdown {
                broker_id,
                broker_epoch,
                reply,
            } => {
                let result = self
                    .controller
                    .controlled_shutdown(broker_id, broker_epoch)
                    .await;
                (false, Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::ElectLeaders {
                election_type,
                partitions,
                reply,
            } => {
                let result = self
                    .controller
                    .elect_leaders(election_type, partitions)
                    .await;
                let changed = result
                    .as_ref()
                    .is_ok_and(|results| results.iter().any(|(_, r)| r.is_ok()));
                (changed, Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::AlterPartitionReassignments { requests, reply } => {
                let result = self
                    .controller
                    .alter_partition_reassignments(requests)
                    .await;
                (result.is_ok(), Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::ListPartitionReassignments { partitions, reply } => {
                let result = self.controller.list_partition_reassignments(partitions);
                (false, Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::AllocateProducerId { reply } => {
                let result = self.controller.allocate_producer_id().await;
                (false, Box::new(move || drop(reply.send(result))))
            }
            ControlRequest::GatherOnShard { shard, reply } => {
                self.gathered_on = shard;
                (
                    false,
                    Box::new(move || {
                        let _ = reply.send(());
                    }),
                )
            }
            ControlRequest::MoveReplicaToShard { tp, shard, reply } => {
                let result = self.placement.move_to(&tp, shard).map_err(|error| {
                    ApiError::new(ResponseError::KafkaStorageError, error.to_string())
                });
                let moved = result.is_ok();
                if moved {
                    self.apply_first = Some(shard);
                    // On the blocking pool: the next move's partition, already
                    // handed off, waits for this loop, not for the disk.
                    let placement = self.placement.clone();
                    glommio::spawn_local(async move {
                        let persisted = glommio::executor()
                            .spawn_blocking(move || placement.persist())
                            .await;
                        if let Err(error) = persisted {
                            warn!(%error, "cannot persist shard placement");
                        }
                    })
                    .detach();
                }
                (moved, Box::new(move || drop(reply.send(result))))
            }
        }
    }

    /// Holds a CreateTopics answer until this broker knows the leaders of
    /// the topics it created, at most `timeout_ms`.
    fn delay_creation(
        &mut self,
        topics: &[NewTopic],
        results: Vec<Result<(i32, i16), ApiError>>,
        timeout_ms: i32,
        reply: oneshot::Sender<Vec<Result<(i32, i16), ApiError>>>,
    ) {
        let id = self.next_creation_id;
        self.next_creation_id += 1;
        self.pending_creations.push(PendingCreation {
            id,
            names: topics.iter().map(|topic| topic.name.clone()).collect(),
            results,
            reply,
        });
        let events = self.events.clone();
        let timeout = std::time::Duration::from_millis(timeout_ms as u64);
        glommio::spawn_local(async move {
            glommio::timer::sleep(timeout).await;
            if let Some(events) = events.upgrade() {
                let _ = events.send(ControlEvent::CreationExpired(id)).await;
            }
        })
        .detach();
    }

    /// Kafka's `handleLogDirFailure`: the replicas in `dir` stop being
    /// hosted here (the next image stops their fetchers and leaders; the
    /// logs stay on disk) and the controller is told, to move their
    /// leaderships. A single broker keeps them, answering KAFKA_STORAGE_ERROR.
    /// Returns whether the image changed.
    async fn on_log_dir_failure(&mut self, dir: &Path) -> bool {
        let Some(told) = self.told.as_mut() else {
            return false;
        };
        let dirs = &self.dirs;
        let stopped = told.hosted.remove_offline(|tp| dirs.is_offline(tp));
        tracing::error!(dir = %dir.display(), replicas = ?stopped, "log dir offline: its replicas stop here");
        if let Err(error) = self.zk.propagate_log_dir_event(self.broker_id).await {
            tracing::error!(%error, "cannot tell the controller of the failed log dir");
        }
        true
    }

    /// Arms the auto leader rebalance timer, unless it is off or armed.
    fn schedule_auto_leader_rebalance(&mut self, delay: std::time::Duration) {
        if !self.leader_rebalance.enable || self.leader_rebalance_scheduled {
            return;
        }
        self.leader_rebalance_scheduled = true;
        let events = self.events.clone();
        glommio::spawn_local(async move {
            glommio::timer::sleep(delay).await;
            if let Some(events) = events.upgrade() {
                let _ = events.send(ControlEvent::AutoLeaderRebalance).await;
            }
        })
        .detach();
    }

    /// The timer fired: the controller checks the leaders' balance and the
    /// next check is `leader.imbalance.check.interval.seconds` away; a
    /// broker no longer controller stops checking. Returns whether this
    /// broker's image changed (single-node mode).
    async fn on_auto_leader_rebalance(&mut self) -> bool {
        self.leader_rebalance_scheduled = false;
        if !self.controller.is_active() {
            return false;
        }
        let percentage = self.leader_rebalance.imbalance_per_broker_percentage;
        self.controller
            .check_and_trigger_auto_leader_rebalance(percentage)
            .await;
        let interval = self.leader_rebalance.check_interval_seconds;
        self.schedule_auto_leader_rebalance(std::time::Duration::from_secs(interval));
        self.told.is_none()
    }

    /// Answers every waiting CreateTopics whose leaders this broker knows.
    fn complete_creations(&mut self) {
        let Some(told) = self.told.as_ref() else {
            return;
        };
        let (done, waiting): (Vec<_>, Vec<_>) = std::mem::take(&mut self.pending_creations)
            .into_iter()
            .partition(|pending| pending.is_complete(&told.cache));
        self.pending_creations = waiting;
        for pending in done {
            let _ = pending.reply.send(pending.results);
        }
    }

    /// A waiting CreateTopics ran out of time: REQUEST_TIMED_OUT for each
    /// topic whose leaders this broker does not know yet (Kafka's answer).
    fn expire_creation(&mut self, id: u64) {
        let Some(index) = self.pending_creations.iter().position(|p| p.id == id) else {
            return;
        };
        let mut pending = self.pending_creations.remove(index);
        let cache = &self.told.as_ref().expect("ZooKeeper mode").cache;
        for (name, result) in pending.names.iter().zip(pending.results.iter_mut()) {
            let known = match result {
                Ok((partitions, _)) => cache.has_leaders(name, *partitions),
                Err(_) => true,
            };
            if !known {
                *result = Err(ApiError::new(
                    ResponseError::RequestTimedOut,
                    format!("the leaders of topic '{name}' are not known yet"),
                ));
            }
        }
        let _ = pending.reply.send(pending.results);
    }

    /// UpdateMetadata from the controller: merged into the cache, with the
    /// configs of topics new to it read from `/config/topics`.
    async fn on_update_metadata(
        &mut self,
        request: &UpdateMetadataRequest,
    ) -> Result<(), ResponseError> {
        let broker_epoch = self.broker_epoch;
        let told = self.told_by_controller()?;
        told.cache.update(request, broker_epoch)?;
        self.load_topic_configs().await;
        Ok(())
    }

    /// LeaderAndIsr: the partitions this broker now leads or follows (their
    /// logs opened once every shard applied the image).
    async fn on_leader_and_isr(
        &mut self,
        request: &LeaderAndIsrRequest,
    ) -> Result<PartitionErrors, ResponseError> {
        let (broker_id, broker_epoch) = (self.broker_id, self.broker_epoch);
        let dirs = self.dirs.clone();
        let told = self.told_by_controller()?;
        // v0-1 list partitions ungrouped; v2+ by topic, with topic ids from v5.
        let grouped = request.topic_states.iter().flat_map(|topic| {
            topic
                .partition_states
                .iter()
                .map(move |state| (topic.topic_name.to_string(), topic.topic_id, state))
        });
        let ungrouped = request
            .ungrouped_partition_states
            .iter()
            .map(|state| (state.topic_name.to_string(), Uuid::nil(), state));
        // A replica in a failed log dir is not hosted: KAFKA_STORAGE_ERROR.
        let (offline, states): (Vec<_>, Vec<_>) = grouped
            .chain(ungrouped)
            .map(|(topic, topic_id, state)| {
                let replica = ReplicaState {
                    topic_id,
                    leader_and_isr: LeaderAndIsr {
                        leader: state.leader.0,
                        leader_epoch: state.leader_epoch,
                        isr: broker_ids(&state.isr),
                        replicas: broker_ids(&state.replicas),
                        partition_epoch: state.partition_epoch,
                        leader_recovery_state: state.leader_recovery_state,
                    },
                };
                (TopicPartition::new(topic, state.partition_index), replica)
            })
            .partition(|(tp, _)| dirs.is_offline(tp));
        let mut answers = told.hosted.become_leader_or_follower(
            broker_id,
            request.controller_epoch,
            request.broker_epoch,
            broker_epoch,
            states,
        )?;
        answers.extend(
            offline
                .into_iter()
                .map(|(tp, _)| (tp, Err(ResponseError::KafkaStorageError))),
        );
        self.load_topic_configs().await;
        Ok(answers)
    }

    /// StopReplica: the partitions this broker no longer holds, their logs
    /// deleted with `delete_partition` (once every shard applied the image).
    fn on_stop_replica(
        &mut self,
        request: &StopReplicaRequest,
    ) -> Result<PartitionErrors, ResponseError> {
        let broker_epoch = self.broker_epoch;
        let told = self.told_by_controller()?;
        // v3+ carry a deletion flag and leader epoch per partition; before, one flag.
        let grouped = request.topic_states.iter().flat_map(|topic| {
            topic
                .partition_states
                .iter()
                .map(|state| StopReplicaPartition {
                    tp: TopicPartition::new(topic.topic_name.to_string(), state.partition_index),
                    leader_epoch: state.leader_epoch,
                    delete: state.delete_partition,
                })
        });
        let by_topic = request.topics.iter().flat_map(|topic| {
            topic
                .partition_indexes
                .iter()
                .map(|partition| StopReplicaPartition {
                    tp: TopicPartition::new(topic.name.to_string(), *partition),
                    leader_epoch: crate::protocol::inter_broker::NO_EPOCH,
                    delete: request.delete_partitions,
                })
        });
        let ungrouped = request
            .ungrouped_partitions
            .iter()
            .map(|p| StopReplicaPartition {
                tp: TopicPartition::new(p.topic_name.to_string(), p.partition_index),
                leader_epoch: crate::protocol::inter_broker::NO_EPOCH,
                delete: request.delete_partitions,
            });
        let stops = grouped.chain(by_topic).chain(ungrouped).collect();
        let (answers, deleted) = told.hosted.stop_replicas(
            request.controller_epoch,
            request.broker_epoch,
            broker_epoch,
            stops,
        )?;
        told.deleted_replicas.extend(deleted);
        Ok(answers)
    }

    /// A request only a controller sends reached a single broker, which is
    /// its own controller: nobody else sends it.
    fn told_by_controller(&mut self) -> Result<&mut ToldByController, ResponseError> {
        self.told
            .as_mut()
            .ok_or(ResponseError::StaleControllerEpoch)
    }

    /// Reads the configs of topics this broker newly knows or hosts.
    async fn load_topic_configs(&mut self) {
        let told = self.told.as_mut().expect("ZooKeeper mode");
        let mut known: Vec<&String> = told.cache.topic_names().collect();
        known.extend(told.hosted.iter().map(|(tp, _)| &tp.topic));
        known.sort();
        known.dedup();
        told.configs.load(&self.zk, &known).await;
    }

    /// New `/config/changes` notifications: each topic they name has its
    /// config read again (the watch is set again). Returns whether any did.
    async fn on_config_changes(&mut self) -> bool {
        let children = match self.zk.get_config_changes(true).await {
            Ok(children) => children,
            Err(error) => {
                warn!(%error, "cannot read the config change notifications");
                return false;
            }
        };
        let mut new: Vec<(u64, String)> = children
            .into_iter()
            .filter_map(|child| Some((ConfigChangeZNode::sequence(&child)?, child)))
            .filter(|(sequence, _)| self.config_changes_seen.is_none_or(|seen| *sequence > seen))
            .collect();
        new.sort();
        let mut changed = false;
        for (sequence, child) in new {
            match self.zk.get_config_change(&child).await {
                Ok(entity_path) => {
                    if let Some(topic) = ConfigChangeZNode::topic(&entity_path) {
                        self.on_topic_config_change(topic).await;
                        changed = true;
                    }
                    let own = self.broker_id.to_string();
                    let broker = ConfigChangeZNode::broker(&entity_path);
                    if broker.is_some_and(|b| b == own || b == ConfigEntityZNode::DEFAULT_BROKER) {
                        self.load_dynamic_broker_configs().await;
                        changed = true;
                    }
                }
                Err(error) => warn!(child, %error, "cannot read a config change notification"),
            }
            self.config_changes_seen = Some(sequence);
        }
        changed
    }

    /// This broker's dynamic configs (its own, then `<default>`'s), read
    /// again, for the next image.
    async fn load_dynamic_broker_configs(&mut self) {
        let brokers = ConfigEntityZNode::BROKERS;
        let own = self.broker_id.to_string();
        let read = async {
            let (defaults, _) = self
                .zk
                .get_entity_config(brokers, ConfigEntityZNode::DEFAULT_BROKER)
                .await?;
            let (own, _) = self.zk.get_entity_config(brokers, &own).await?;
            Ok::<_, KafkaZkError>(DynamicBrokerConfigs { defaults, own })
        };
        match read.await {
            Ok(configs) => {
                if configs != *self.dynamic_broker_configs {
                    let throttles = configs.replication_throttles();
                    tracing::info!(?throttles, "dynamic broker configs");
                }
                self.dynamic_broker_configs = Arc::new(configs);
            }
            Err(error) => warn!(%error, "cannot read the dynamic broker configs"),
        }
    }

    /// A topic's config changed: the controller's context and this broker's
    /// own view read it again.
    async fn on_topic_config_change(&mut self, topic: &str) {
        if let Err(error) = self.controller.on_topic_config_change(topic).await {
            warn!(topic, %error, "the controller cannot read the topic's config");
        }
        if let Some(told) = self.told.as_mut() {
            told.configs.reload(&self.zk, topic).await;
        }
    }

    /// A fired watch or a new session; returns whether the metadata changed.
    async fn on_zk_event(&mut self, event: ZkEvent) -> bool {
        let (path, event) = match event {
            ZkEvent::NewSession => return self.on_new_session().await,
            ZkEvent::Watched { path, event } => (path, event),
        };
        match (path.as_str(), event) {
            (DeleteTopicsZNode::PATH, EventType::NodeChildrenChanged) => {
                self.controller.on_topic_deletion().await
            }
            (ConfigChangeZNode::PATH, EventType::NodeChildrenChanged) => {
                self.on_config_changes().await
            }
            (TopicsZNode::PATH, EventType::NodeChildrenChanged) => {
                if let Err(error) = self.controller.on_topic_change().await {
                    tracing::error!(%error, "cannot read the topics");
                }
                self.told.is_none()
            }
            (LogDirEventNotificationZNode::PATH, EventType::NodeChildrenChanged) => {
                if let Err(error) = self.controller.on_log_dir_event().await {
                    tracing::error!(%error, "cannot read the log dir events");
                }
                self.told.is_none()
            }
            (BrokerIdsZNode::PATH, EventType::NodeChildrenChanged) => {
                if let Err(error) = self.controller.on_broker_change().await {
                    tracing::error!(%error, "cannot read the live brokers");
                }
                self.told.is_none()
            }
            (ControllerZNode::PATH, _) => {
                let was_active = self.controller.is_active();
                if let Err(error) = self.controller.elect().await {
                    tracing::error!(%error, "controller election failed");
                }
                was_active != self.controller.is_active()
            }
            (path, event) => {
                tracing::debug!(path, ?event, "watch fired with nothing to do");
                false
            }
        }
    }
}

/// The newest notification's sequence number among `children` of
/// `/config/changes`.
fn newest_config_change(children: &[String]) -> Option<u64> {
    children
        .iter()
        .filter_map(|child| ConfigChangeZNode::sequence(child))
        .max()
}

/// The replicas the controller's own image assigns this broker (single-node
/// mode: the controller is in this process), with their topics' configs.
fn assigned_replicas(
    image: &MetadataImage,
    broker_id: i32,
) -> Vec<(TopicPartition, ReplicaState, Arc<shards::log::LogConfig>)> {
    image
        .topics
        .values()
        .flat_map(|topic| {
            topic
                .partitions
                .iter()
                .enumerate()
                .filter(|(_, p)| p.replicas.contains(&broker_id))
                .map(|(index, p)| {
                    let state = ReplicaState {
                        topic_id: topic.id,
                        leader_and_isr: LeaderAndIsr {
                            leader: p.leader,
                            leader_epoch: p.leader_epoch,
                            isr: p.isr.clone(),
                            replicas: p.replicas.clone(),
                            partition_epoch: 0,
                            leader_recovery_state: RECOVERED,
                        },
                    };
                    let tp = TopicPartition::new(topic.name.clone(), index as i32);
                    (tp, state, topic.log_config.clone())
                })
        })
        .collect()
}
