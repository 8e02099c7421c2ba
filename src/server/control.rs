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
use shards::log::TopicPartition;
use shards::runtime::ShardPlacement;
use tracing::warn;

use crate::controller::{stored_log_config, ConfigOp, KafkaController, NewTopic, TopicDefaults};
use crate::metadata::cache::{MetadataCache, TopicConfig};
use crate::metadata::image::kafka_uuid_string;
use crate::metadata::image::MetadataImage;
use crate::metadata::kafka_zk_client::{KafkaZkClient, KafkaZkError};
use crate::metadata::store::EmbeddedStore;
use crate::metadata::zk_client::{EventType, ZkClient, ZkEvent, ZkEventReceiver};
use crate::metadata::znodes::{BrokerIdZNode, BrokerIdsZNode, ControllerZNode, DeleteTopicsZNode};
use crate::metadata::zookeeper::{ZooKeeperClient, ZooKeeperConfig};
use crate::protocol::inter_broker::UpdateMetadataRequest;
use crate::protocol::{ApiError, ResponseError};
use uuid::Uuid;

/// Requests that may wait in a shard's channel to the control plane.
const CONTROL_CHANNEL_CAPACITY: usize = 256;

pub enum ControlRequest {
    CreateTopics {
        topics: Vec<NewTopic>,
        validate_only: bool,
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
        topic: String,
        changes: Vec<(String, ConfigOp, Option<String>)>,
        replace_all: bool,
        validate_only: bool,
        reply: oneshot::Sender<Result<(), ApiError>>,
    },
    AllocateProducerId {
        reply: oneshot::Sender<Result<i64, ApiError>>,
    },
    /// From the controller, on the inter-broker listener.
    UpdateMetadata {
        request: Box<UpdateMetadataRequest>,
        reply: oneshot::Sender<Result<(), ResponseError>>,
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

    pub async fn create_topics(
        &self,
        topics: Vec<NewTopic>,
        validate_only: bool,
    ) -> Vec<Result<(i32, i16), ApiError>> {
        let count = topics.len();
        self.ask(|reply| ControlRequest::CreateTopics {
            topics,
            validate_only,
            reply,
        })
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
        self.ask(|reply| ControlRequest::UpdateMetadata {
            request: Box::new(request),
            reply,
        })
        .await
        .map_err(|error| error.error)?
    }

    pub async fn allocate_producer_id(&self) -> Result<i64, ApiError> {
        self.ask(|reply| ControlRequest::AllocateProducerId { reply })
            .await?
    }

    pub async fn alter_configs(
        &self,
        topic: String,
        changes: Vec<(String, ConfigOp, Option<String>)>,
        replace_all: bool,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        self.ask(|reply| ControlRequest::AlterConfigs {
            topic,
            changes,
            replace_all,
            validate_only,
            reply,
        })
        .await?
    }
}

/// Starts the control plane of a single broker on the embedded store under
/// `metadata_dir`; the only broker always wins the election.
pub async fn start_embedded(
    metadata_dir: &Path,
    registration: BrokerIdZNode,
    defaults: TopicDefaults,
    placement: Arc<ShardPlacement>,
) -> Result<(ControlPlane<EmbeddedStore>, ZkEventReceiver), KafkaZkError> {
    let (store, zk_events) = EmbeddedStore::open(metadata_dir)?;
    let plane = ControlPlane::start(store, None, registration, defaults, placement).await?;
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
    placement: Arc<ShardPlacement>,
) -> Result<(ControlPlane<Rc<ZooKeeperClient>>, ZkEventReceiver), KafkaZkError> {
    let (client, zk_events) = ZooKeeperClient::connect(config.clone()).await?;
    let plane = ControlPlane::start(
        client,
        Some(inter_broker_listener),
        registration,
        defaults,
        placement,
    )
    .await?;
    Ok((plane, zk_events))
}

/// What the control plane processes, one at a time and in order (Kafka's
/// ControllerEventManager): the shards' requests and the store's watches.
enum ControlEvent {
    Request(ControlRequest),
    Zk(ZkEvent),
}

pub struct ControlPlane<Z> {
    zk: Rc<KafkaZkClient<Z>>,
    /// This broker's `/brokers/ids/<id>`, registered again on a new session.
    registration: BrokerIdZNode,
    cluster_id: String,
    controller: KafkaController<Z>,
    /// ZooKeeper mode: what the controller told this broker, its image.
    cache: Option<MetadataCache>,
    /// This broker's registration's czxid.
    broker_epoch: i64,
    defaults: Arc<shards::log::LogConfig>,
    placement: Arc<ShardPlacement>,
    broker_id: i32,
    image_version: u64,
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
        placement: Arc<ShardPlacement>,
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
        let cache = match inter_broker_listener {
            Some(listener) => {
                controller = controller.sending_update_metadata(listener);
                Some(MetadataCache::new(cluster_id.clone()))
            }
            None => None,
        };
        controller.elect().await?;
        Ok(Self {
            zk,
            registration,
            cluster_id,
            controller,
            cache,
            broker_epoch,
            defaults: log_defaults,
            placement,
            broker_id,
            image_version: 0,
        })
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

    /// Builds the next image and places this broker's new partitions on
    /// shards; None while this broker is not the controller.
    pub fn next_image(&mut self) -> Option<Arc<MetadataImage>> {
        self.image_version += 1;
        let mut image = match &self.cache {
            Some(cache) => cache.image(self.image_version, &self.defaults),
            None => self.controller.build_image(self.image_version)?,
        };
        let mine: Vec<TopicPartition> = image
            .topics
            .values()
            .flat_map(|topic| {
                topic
                    .partitions
                    .iter()
                    .enumerate()
                    .filter(|(_, p)| p.replicas.contains(&self.broker_id))
                    .map(|(index, _)| TopicPartition::new(topic.name.clone(), index as i32))
            })
            .collect();
        let shards = match self.placement.assign_all(&mine) {
            Ok(shards) => shards,
            Err(error) => {
                warn!(%error, "cannot persist shard placement; partitions stay unplaced");
                return Some(Arc::new(image));
            }
        };
        for (tp, shard) in mine.iter().zip(shards) {
            let topic = Arc::make_mut(image.topics.get_mut(&tp.topic).unwrap());
            topic.partitions[tp.partition as usize].shard = Some(shard);
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
        let mut shards_left = Vec::new();
        for receiver in ends.requests {
            let merged_tx = merged_tx.clone();
            shards_left.push(glommio::spawn_local(async move {
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
        let watches = glommio::spawn_local({
            let merged_tx = merged_tx.clone();
            async move {
                while let Some(event) = zk_events.recv().await {
                    if merged_tx.send(ControlEvent::Zk(event)).await.is_err() {
                        break;
                    }
                }
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
            };
            if let Some(image) = changed.then(|| self.next_image()).flatten() {
                for shard in &images {
                    let (applied, done) = oneshot::channel();
                    if shard
                        .send(ApplyImage {
                            image: image.clone(),
                            applied,
                        })
                        .await
                        .is_ok()
                    {
                        let _ = done.await;
                    }
                }
            }
            reply();
        }
    }

    /// Applies one request. Returns whether the metadata changed and the reply,
    /// which `run` sends only after every shard applied the change.
    async fn serve(&mut self, request: ControlRequest) -> (bool, Box<dyn FnOnce()>) {
        match request {
            ControlRequest::CreateTopics {
                topics,
                validate_only,
                reply,
            } => {
                let results = self.controller.create_topics(&topics, validate_only).await;
                let changed = !validate_only && results.iter().any(Result::is_ok);
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
                topic,
                changes,
                replace_all,
                validate_only,
                reply,
            } => {
                let result = self
                    .controller
                    .alter_topic_config(&topic, &changes, replace_all, validate_only)
                    .await;
                let changed = !validate_only && result.is_ok();
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
            ControlRequest::AllocateProducerId { reply } => {
                let result = self.controller.allocate_producer_id().await;
                (false, Box::new(move || drop(reply.send(result))))
            }
        }
    }

    /// UpdateMetadata from the controller: merged into the cache, with the
    /// configs of topics new to it read from `/config/topics`.
    async fn on_update_metadata(
        &mut self,
        request: &UpdateMetadataRequest,
    ) -> Result<(), ResponseError> {
        let Some(cache) = self.cache.as_mut() else {
            // A single broker is its own controller: nobody else sends this.
            return Err(ResponseError::StaleControllerEpoch);
        };
        let new_topics = cache.update(request, self.broker_epoch)?;
        for topic in new_topics {
            match self.zk.get_topic_config(&topic).await {
                Ok((overrides, _)) => {
                    let log_config = Arc::new(stored_log_config(&self.defaults, &overrides));
                    let config = TopicConfig {
                        overrides,
                        log_config,
                    };
                    self.cache
                        .as_mut()
                        .expect("ZooKeeper mode")
                        .set_topic_config(&topic, config);
                }
                Err(error) => warn!(topic, %error, "cannot read the topic's config"),
            }
        }
        Ok(())
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
            (BrokerIdsZNode::PATH, EventType::NodeChildrenChanged) => {
                if let Err(error) = self.controller.on_broker_change().await {
                    tracing::error!(%error, "cannot read the live brokers");
                }
                self.cache.is_none()
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
