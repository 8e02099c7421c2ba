//! `KafkaController`: the one place cluster metadata changes, in Kafka's
//! ZooKeeper layout (`/brokers/topics/<t>`, partition `state` znodes,
//! `/config/topics`, `/admin/delete_topics`, `/controller`,
//! `/controller_epoch`), over any `ZkClient` through `KafkaZkClient`. It takes
//! office by election, loads its `ControllerContext` from the store, fences
//! every write with its epoch and builds the metadata image from the context.
//!
//! Split as Kafka's: `context.rs` (what it knows), `replica_assignment.rs`
//! (where replicas go), `election.rs` (who leads), `replica_election.rs`
//! (preferred and unclean elections, the auto rebalance), `topic_config.rs` (config checks), `topic_deletion.rs`
//! (Kafka's TopicDeletionManager).

mod alter_partition;
mod broker_requests;
mod channel_manager;
mod context;
mod election;
mod log_dir_events;
mod reassignment;
mod replica_assignment;
mod replica_election;
mod topic_config;
mod topic_creation;
mod topic_deletion;

use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;

use glommio::channels::local_channel::LocalSender;
use shards::log::{wall_clock_ms, LogConfig};
use tracing::{info, warn};
use uuid::Uuid;

pub use self::channel_manager::ControllerEvent;
use self::channel_manager::{BrokerRequest, ControllerChannelManager};
pub use self::context::{ControllerContext, TopicContext};
pub use self::election::ElectionType;
use self::election::LeaderChange;
pub use self::reassignment::{OngoingReassignment, ReassignmentRequest, ReassignmentResult};
pub use self::replica_assignment::validate_topic_name;
use self::replica_assignment::{
    assign_replicas_to_brokers, check_assignments, check_partition_count, AssignmentStart,
    BrokerMetadata,
};
pub use self::replica_election::ElectionResult;
pub use self::topic_config::{
    alter_broker_config, alter_topic_config, stored_log_config, ConfigEntity, ConfigOp,
};
pub use self::topic_creation::create_topics_in_zk;
use self::topic_creation::{plan_topic, write_topic};
use crate::metadata::image::MetadataImage;
use crate::metadata::kafka_zk_client::{ControllerEpoch, KafkaZkClient, KafkaZkError};
use crate::metadata::zk_client::{Op, OpResult, ZkClient, ZkError};
use crate::metadata::znodes::{ProducerIdBlockZNode, TopicPartitionStateZNode};
use crate::protocol::{ApiError, ResponseError};

impl From<KafkaZkError> for ApiError {
    fn from(error: KafkaZkError) -> Self {
        match error {
            KafkaZkError::ControllerMoved => {
                ApiError::new(ResponseError::NotController, error.to_string())
            }
            error => ApiError::new(ResponseError::UnknownServerError, error.to_string()),
        }
    }
}

impl From<ZkError> for ApiError {
    fn from(error: ZkError) -> Self {
        KafkaZkError::Zk(error).into()
    }
}

/// Broker-wide defaults for new topics.
#[derive(Debug, Clone)]
pub struct TopicDefaults {
    pub num_partitions: i32,
    pub default_replication_factor: i16,
    pub log_config: LogConfig,
}

#[derive(Debug, Clone, Default)]
pub struct NewTopic {
    pub name: String,
    /// -1: `num.partitions`.
    pub num_partitions: i32,
    /// -1: `default.replication.factor`.
    pub replication_factor: i16,
    /// Explicit replica assignment, partition by partition.
    pub assignments: Vec<Vec<i32>>,
    pub configs: Vec<(String, Option<String>)>,
}

/// Producer ids claimed from the store at a time, as Kafka's ZooKeeper mode.
const PRODUCER_ID_BLOCK_SIZE: i64 = 1000;

/// Rounds of elections after a broker change while states moved on under
/// the controller (`elect_after_broker_change`).
const ELECTION_ROUNDS: usize = 3;

/// What a batch of partition state writes did (`write_states`).
#[derive(Debug, Default)]
struct StatesWritten {
    /// Written, or found holding the very state written.
    written: Vec<(String, usize)>,
    /// Found past the held version with another state: read again into
    /// the context, and their replicas told.
    read_again: Vec<(String, usize)>,
}

/// A random rotation start, as Kafka picks one for every new topic.
fn random_start(brokers: usize) -> AssignmentStart {
    let random = Uuid::new_v4().as_u128();
    AssignmentStart {
        start_index: (random % brokers as u128) as usize,
        replica_shift: ((random >> 64) % brokers as u128) as usize,
    }
}

pub struct KafkaController<Z> {
    zk: Rc<KafkaZkClient<Z>>,
    broker_id: i32,
    cluster_id: String,
    defaults: TopicDefaults,
    /// What this broker knows as controller; None while another broker is.
    context: Option<ControllerContext>,
    /// The next producer id to hand out, and the last of the claimed block.
    next_producer_id: i64,
    producer_id_block_end: i64,
    /// How brokers learn the metadata from this controller, when they do not
    /// share its process (ZooKeeper mode).
    propagation: Option<Propagation>,
}

/// Requests to every live broker, on its inter-broker listener.
struct Propagation {
    inter_broker_listener: String,
    channels: ControllerChannelManager,
}

fn not_controller() -> ApiError {
    ApiError::new(
        ResponseError::NotController,
        "this broker is not the controller",
    )
}

impl<Z: ZkClient> KafkaController<Z> {
    pub fn new(
        zk: Rc<KafkaZkClient<Z>>,
        broker_id: i32,
        cluster_id: String,
        defaults: TopicDefaults,
    ) -> Self {
        Self {
            zk,
            broker_id,
            cluster_id,
            defaults,
            context: None,
            next_producer_id: 0,
            producer_id_block_end: -1,
            propagation: None,
        }
    }

    /// Tells every live broker (itself included) the metadata with
    /// UpdateMetadata, LeaderAndIsr and StopReplica on
    /// `inter_broker_listener`, as Kafka's controller does; what brokers
    /// answer comes back on `events`.
    pub fn sending_to_brokers(
        mut self,
        inter_broker_listener: String,
        events: LocalSender<ControllerEvent>,
    ) -> Self {
        self.propagation = Some(Propagation {
            channels: ControllerChannelManager::new(self.broker_id, events),
            inter_broker_listener,
        });
        self
    }

    pub fn is_active(&self) -> bool {
        self.context.is_some()
    }

    /// Kafka's `elect`, run at startup and whenever `/controller` changes:
    /// watch `/controller`; if nobody holds it, take it in one `multi` that
    /// also bumps `/controller_epoch`; resign if another broker holds it.
    pub async fn elect(&mut self) -> Result<(), KafkaZkError> {
        self.zk.watch_controller().await?;
        match self.zk.get_controller_id().await? {
            Some(id) if id == self.broker_id && self.is_active() => return Ok(()),
            Some(_) => {
                self.resign();
                return Ok(());
            }
            None => {}
        }
        match self
            .zk
            .register_controller_and_increment_controller_epoch(self.broker_id, wall_clock_ms())
            .await
        {
            Ok(epoch) => self.on_controller_failover(epoch).await,
            Err(KafkaZkError::ControllerMoved) => {
                self.resign();
                Ok(())
            }
            Err(error) => Err(error),
        }
    }

    /// Kafka's `onControllerFailover`: `/feature`, the context loaded from
    /// the store, and deletions a crash interrupted finished.
    async fn on_controller_failover(&mut self, epoch: ControllerEpoch) -> Result<(), KafkaZkError> {
        info!(
            broker = self.broker_id,
            controller_epoch = epoch.epoch,
            cluster_id = self.cluster_id,
            "became the controller"
        );
        self.zk.enable_feature_versioning().await?;
        let mut context = ControllerContext::new(epoch, self.cluster_id.clone());
        self.load_context(&mut context).await?;
        self.context = Some(context);
        self.clear_log_dir_events().await?;
        // Topics another broker created while no broker was controller.
        self.create_missing_partition_states().await?;
        // Brokers may have come or gone while no broker was controller.
        self.elect_after_broker_change().await?;
        self.send_update_metadata();
        let all = self.partitions_of(|_| true);
        self.send_leader_and_isr(&all, false);
        self.resume_reassignments().await?;
        self.on_topic_deletion().await;
        Ok(())
    }

    /// `/brokers/ids` changed: the live brokers are read again (and watched),
    /// and every live broker is told.
    pub async fn on_broker_change(&mut self) -> Result<(), KafkaZkError> {
        if !self.is_active() {
            return Ok(());
        }
        let brokers = self.zk.get_all_brokers_in_cluster(true).await?;
        let before = self.context_mut().live_brokers.clone();
        let context = self.context_mut();
        context.set_live_brokers(brokers);
        // New, or back with a new registration (Kafka's bounced brokers).
        let joined: Vec<i32> = context
            .live_brokers
            .iter()
            .filter(|(id, live)| before.get(id).is_none_or(|was| was.epoch != live.epoch))
            .map(|(id, _)| *id)
            .collect();
        info!(live = ?context.live_broker_ids(), ?joined, "live brokers changed");
        self.elect_after_broker_change().await?;
        self.send_update_metadata();
        self.send_whole_state(&joined);
        self.maybe_complete_reassignments().await
    }

    /// `/brokers/topics` changed (Kafka's TopicChange): topics another
    /// broker created (auto-creation) join the context, get their partition
    /// states and are told to every broker.
    pub async fn on_topic_change(&mut self) -> Result<(), KafkaZkError> {
        if !self.is_active() {
            return Ok(());
        }
        let names = self.zk.get_all_topics_in_cluster_and_watch().await?;
        let mut added = false;
        for name in names {
            if self.context_mut().topics.contains_key(&name) {
                continue;
            }
            if let Some(topic) = self.read_topic(&name).await? {
                info!(topic = name, "a topic another broker created");
                self.context_mut().topics.insert(name, topic);
                added = true;
            }
        }
        if added {
            self.create_missing_partition_states().await?;
            self.send_update_metadata();
        }
        Ok(())
    }

    /// The partitions with no state znode yet (a topic whose creator was not
    /// the controller) go online as new partitions.
    async fn create_missing_partition_states(&mut self) -> Result<(), KafkaZkError> {
        let context = self.context_mut();
        let missing: Vec<(String, usize)> = context
            .topics
            .iter()
            .filter(|(name, _)| !context.is_being_deleted(name))
            .filter_map(|(name, topic)| {
                let from = (0..topic.assignment.len())
                    .find(|p| topic.states.get(*p).is_none_or(Option::is_none))?;
                Some((name.clone(), from))
            })
            .collect();
        for (name, from) in missing {
            self.on_new_partitions(&name, from).await?;
        }
        Ok(())
    }

    /// Every partition (topic and index) of the topics not being deleted
    /// whose replicas satisfy `include`.
    fn partitions_of(&self, include: impl Fn(&[i32]) -> bool) -> Vec<(String, usize)> {
        let Some(context) = self.context.as_ref() else {
            return Vec::new();
        };
        context
            .topics
            .iter()
            .filter(|(name, _)| !context.is_being_deleted(name))
            .flat_map(|(name, topic)| {
                topic
                    .assignment
                    .iter()
                    .enumerate()
                    .filter(|(_, replicas)| include(replicas))
                    .map(|(partition, _)| (name.clone(), partition))
            })
            .collect()
    }

    /// LeaderAndIsr with these partitions' states to their live replicas.
    fn send_leader_and_isr(&self, partitions: &[(String, usize)], is_new: bool) {
        let (Some(propagation), Some(context)) = (self.propagation.as_ref(), self.context.as_ref())
        else {
            return;
        };
        let requests = broker_requests::leader_and_isr(
            context,
            self.broker_id,
            &propagation.inter_broker_listener,
            partitions
                .iter()
                .map(|(name, partition)| (name.as_str(), *partition)),
            is_new,
        );
        let mut overflowed = Vec::new();
        for (broker, request) in requests {
            if !propagation
                .channels
                .send(broker, BrokerRequest::LeaderAndIsr(request))
            {
                overflowed.push(broker);
            }
        }
        self.send_whole_state(&overflowed);
    }

    /// LeaderAndIsr for every replica `brokers` hold and StopReplica for
    /// those of topics being deleted: for brokers that join, or whose queue
    /// overflowed (emptied, so this fits).
    pub(super) fn send_whole_state(&self, brokers: &[i32]) {
        if brokers.is_empty() {
            return;
        }
        let theirs = self.partitions_of(|replicas| replicas.iter().any(|id| brokers.contains(id)));
        self.send_leader_and_isr(&theirs, false);
        let Some(context) = self.context.as_ref() else {
            return;
        };
        let deleting: Vec<String> = context.topics_being_deleted.keys().cloned().collect();
        self.send_stop_replica_deletions(&deleting, brokers);
    }

    /// Every partition a broker's coming or going changes: dead replicas out
    /// of the ISR, leaders elected from it (`election.rs`), each state znode
    /// written fenced and with its version, all issued together.
    ///
    /// A state whose write found the znode moved on is read again
    /// (`write_states`) and elected anew, as Kafka retries its
    /// `partitionsToRetry`, for at most `ELECTION_ROUNDS` rounds: no later
    /// event would elect it otherwise.
    pub(super) async fn elect_after_broker_change(&mut self) -> Result<(), KafkaZkError> {
        for _ in 0..ELECTION_ROUNDS {
            let context = self.context_mut();
            let changes = context.partition_changes(|(name, partition), topic, replicas, state| {
                let allow_unclean = topic.log_config.unclean_leader_election_enable;
                let online = |id| context.is_replica_online(id, name, partition);
                election::after_broker_change(replicas, state, online, allow_unclean)
            });
            let outcome = self.write_partition_states(changes).await?;
            if outcome.read_again.is_empty() {
                return Ok(());
            }
        }
        warn!(
            rounds = ELECTION_ROUNDS,
            "partition states kept changing under the controller: left as read"
        );
        Ok(())
    }

    /// Writes each changed partition state (the leader epoch bumped) fenced
    /// and with its znode's version, all issued together, then tells the
    /// partitions' replicas with LeaderAndIsr.
    async fn write_partition_states(
        &mut self,
        changes: Vec<(String, usize, LeaderChange)>,
    ) -> Result<StatesWritten, KafkaZkError> {
        let context = self.context_mut();
        let epoch = context.epoch;
        let changes: Vec<_> = changes
            .into_iter()
            .map(|(topic, partition, change)| {
                let (held, _) = context.topics[&topic].states[partition]
                    .as_ref()
                    .expect("only written states change");
                if change.unclean {
                    warn!(
                        topic,
                        partition,
                        leader = change.leader,
                        isr = ?held.isr,
                        "unclean leader election: a replica outside the ISR leads, \
                         records only the ISR had are lost"
                    );
                }
                let state = TopicPartitionStateZNode {
                    leader: change.leader,
                    leader_epoch: held.leader_epoch + 1,
                    isr: change.isr,
                    controller_epoch: epoch.epoch,
                    leader_recovery_state: change.leader_recovery_state,
                };
                (topic, partition, state)
            })
            .collect();
        let outcome = self.write_states(changes).await?;
        self.send_leader_and_isr(&outcome.written, false);
        Ok(outcome)
    }

    /// Writes partition states fenced and each with the version the context
    /// holds, all issued together. A znode that moved past that version
    /// (someone else wrote it, or a first attempt whose answer was lost did),
    /// or whose write's outcome is unknown, is read again into the context:
    /// if it holds the state written, that write took; otherwise its
    /// replicas are told what it holds, as after a failover (a leader's next
    /// AlterPartition carries its version), and the next change starts from
    /// that.
    async fn write_states(
        &mut self,
        changes: Vec<(String, usize, TopicPartitionStateZNode)>,
    ) -> Result<StatesWritten, KafkaZkError> {
        let context = self.context_mut();
        let epoch = context.epoch;
        let ops = changes
            .iter()
            .map(|(topic, partition, state)| {
                let (_, version) = context.topics[topic].states[*partition]
                    .clone()
                    .expect("only written states change");
                Op::SetData {
                    path: TopicPartitionStateZNode::path(topic, *partition as i32),
                    data: state.encode(),
                    version: Some(version),
                }
            })
            .collect();
        let results = self.zk.fenced_all(epoch, ops).await;
        let mut outcome = StatesWritten::default();
        for ((topic, partition, state), result) in changes.into_iter().zip(results) {
            match result {
                Ok(OpResult::SetData { stat }) => {
                    info!(
                        topic,
                        partition,
                        leader = state.leader,
                        isr = ?state.isr,
                        "partition state changed"
                    );
                    self.topic_mut(&topic).states[partition] = Some((state, stat.version));
                    outcome.written.push((topic, partition));
                }
                Ok(other) => unreachable!("a set answered {other:?}"),
                Err(KafkaZkError::ControllerMoved) => {
                    self.resign();
                    return Err(KafkaZkError::ControllerMoved);
                }
                Err(KafkaZkError::Zk(ZkError::BadVersion(_) | ZkError::ConnectionLoss(_))) => {
                    match self.read_state_again(&topic, partition).await {
                        Some(held) if held == state => outcome.written.push((topic, partition)),
                        Some(_) => outcome.read_again.push((topic, partition)),
                        None => {}
                    }
                }
                Err(error) => warn!(topic, partition, %error, "cannot write the state"),
            }
        }
        self.send_leader_and_isr(&outcome.read_again, false);
        Ok(outcome)
    }

    /// A partition's state znode read into the context; returns the state it
    /// holds, `None` when it cannot be read (the context keeps what it had).
    async fn read_state_again(
        &mut self,
        topic: &str,
        partition: usize,
    ) -> Option<TopicPartitionStateZNode> {
        match self
            .zk
            .get_topic_partition_state(topic, partition as i32)
            .await
        {
            Ok(Some((state, version))) => {
                warn!(
                    topic,
                    partition,
                    version,
                    leader = state.leader,
                    isr = ?state.isr,
                    "a partition state changed since the controller read it: read again"
                );
                self.topic_mut(topic).states[partition] = Some((state.clone(), version));
                Some(state)
            }
            Ok(None) => None,
            Err(error) => {
                warn!(topic, partition, %error, "cannot read the state again");
                None
            }
        }
    }

    /// Kafka's `doControlledShutdown`: `broker` (at `broker_epoch`) is
    /// stopping. Each replicated partition it leads gets a leader from the
    /// rest of its ISR, and it leaves the ISR of those it follows; every
    /// broker is told. Returns the replicated partitions it still leads.
    pub async fn controlled_shutdown(
        &mut self,
        broker: i32,
        broker_epoch: i64,
    ) -> Result<Vec<(String, i32)>, ResponseError> {
        let context = self.context.as_mut().ok_or(ResponseError::NotController)?;
        let live = context
            .live_brokers
            .get(&broker)
            .ok_or(ResponseError::BrokerNotAvailable)?;
        if broker_epoch != -1 && broker_epoch < live.epoch {
            return Err(ResponseError::StaleBrokerEpoch);
        }
        context.shutting_down_broker_ids.insert(broker);
        info!(broker, "controlled shutdown");
        let eligible = |id| context.is_eligible(id);
        let changes = context.partition_changes(|_, _, replicas, state| {
            if replicas.len() < 2 || !replicas.contains(&broker) {
                return None;
            }
            election::on_controlled_shutdown(replicas, state, broker, eligible)
        });
        let written = self.write_partition_states(changes).await;
        if let Err(error) = written {
            tracing::error!(%error, "cannot move the leaderships of a stopping broker");
            return Err(ResponseError::NotController);
        }
        self.send_update_metadata();
        let context = self.context.as_ref().ok_or(ResponseError::NotController)?;
        let still_led = context
            .topics
            .iter()
            .flat_map(|(name, topic)| {
                topic
                    .assignment
                    .iter()
                    .zip(&topic.states)
                    .enumerate()
                    .filter(move |(_, (replicas, state))| {
                        replicas.len() > 1
                            && state.as_ref().is_some_and(|(s, _)| s.leader == broker)
                    })
                    .map(move |(partition, _)| (name.clone(), partition as i32))
            })
            .collect();
        Ok(still_led)
    }

    /// UpdateMetadata with everything the controller knows (the partitions
    /// of topics being deleted leaderless) to every live broker.
    fn send_update_metadata(&mut self) {
        let (Some(propagation), Some(context)) = (self.propagation.as_mut(), self.context.as_ref())
        else {
            return;
        };
        let endpoints = context
            .live_brokers
            .iter()
            .filter_map(|(id, live)| {
                let endpoint = live
                    .info
                    .broker
                    .endpoint(&propagation.inter_broker_listener);
                if endpoint.is_none() {
                    warn!(
                        broker = id,
                        listener = propagation.inter_broker_listener,
                        "a live broker without the inter-broker listener"
                    );
                }
                Some((*id, endpoint?.clone()))
            })
            .collect();
        propagation.channels.set_brokers(&endpoints);
        let requests = broker_requests::update_metadata(context, self.broker_id);
        propagation.channels.send_update_metadata(requests);
    }

    /// The session that held `/controller` (if this broker did) is gone:
    /// step down, then run the election on the new session.
    pub async fn on_new_session(&mut self) -> Result<(), KafkaZkError> {
        self.resign();
        self.elect().await
    }

    fn resign(&mut self) {
        if let Some(propagation) = self.propagation.as_mut() {
            propagation.channels.shutdown();
        }
        if let Some(context) = self.context.take() {
            info!(
                broker = self.broker_id,
                controller_epoch = context.epoch.epoch,
                "resigned as controller"
            );
        }
    }

    fn context(&self) -> Result<&ControllerContext, ApiError> {
        self.context.as_ref().ok_or_else(not_controller)
    }

    fn context_mut(&mut self) -> &mut ControllerContext {
        self.context
            .as_mut()
            .expect("checked active before writing")
    }

    fn topic_mut(&mut self, topic: &str) -> &mut TopicContext {
        self.context_mut()
            .topics
            .get_mut(topic)
            .expect("a topic the controller just wrote")
    }

    /// A write found another controller in office: this one steps down.
    fn resign_if_moved<T>(&mut self, result: &Result<T, ApiError>) {
        if matches!(result, Err(error) if error.error == ResponseError::NotController) {
            self.resign();
        }
    }

    /// Kafka's `initializeControllerContext`: live brokers and every topic's
    /// assignment, partition states and config.
    async fn load_context(&self, context: &mut ControllerContext) -> Result<(), KafkaZkError> {
        context.set_live_brokers(self.zk.get_all_brokers_in_cluster(true).await?);
        for name in self.zk.get_all_topics_in_cluster_and_watch().await? {
            if let Some(topic) = self.read_topic(&name).await? {
                context.topics.insert(name, topic);
            }
        }
        Ok(())
    }

    async fn read_topic(&self, name: &str) -> Result<Option<TopicContext>, KafkaZkError> {
        let Some((assignment, assignment_version)) = self.zk.get_topic(name).await? else {
            return Ok(None);
        };
        let mut states = Vec::with_capacity(assignment.partitions.len());
        for partition in 0..assignment.partitions.len() as i32 {
            states.push(self.zk.get_topic_partition_state(name, partition).await?);
        }
        let (config_overrides, _) = self.zk.get_topic_config(name).await?;
        Ok(Some(TopicContext {
            reassignments: reassignment::reassignments_of(&assignment),
            id: assignment.topic_id,
            log_config: Arc::new(stored_log_config(
                &self.defaults.log_config,
                &config_overrides,
            )),
            assignment: assignment.partitions,
            assignment_version,
            states,
            config_overrides,
        }))
    }

    fn brokers_for_assignment(context: &ControllerContext) -> Vec<BrokerMetadata> {
        context
            .live_brokers
            .values()
            .map(|broker| BrokerMetadata {
                id: broker.info.broker.id,
                rack: broker.info.broker.rack.clone(),
            })
            .collect()
    }

    pub async fn create_topics(
        &mut self,
        topics: &[NewTopic],
        validate_only: bool,
    ) -> Vec<Result<(i32, i16), ApiError>> {
        let mut results = Vec::with_capacity(topics.len());
        for topic in topics {
            let created = self.create_topic(topic, validate_only).await;
            self.resign_if_moved(&created);
            results.push(created);
        }
        results
    }

    async fn create_topic(
        &mut self,
        topic: &NewTopic,
        validate_only: bool,
    ) -> Result<(i32, i16), ApiError> {
        validate_topic_name(&topic.name)?;
        let context = self.context()?;
        if context.is_being_deleted(&topic.name) {
            return Err(ApiError::new(
                ResponseError::TopicAlreadyExists,
                format!("Topic '{}' is marked for deletion.", topic.name),
            ));
        }
        if context.topics.contains_key(&topic.name) {
            return Err(ApiError::new(
                ResponseError::TopicAlreadyExists,
                format!("topic '{}' already exists", topic.name),
            ));
        }
        let brokers = Self::brokers_for_assignment(context);
        let plan = plan_topic(topic, &self.defaults, &brokers)?;
        if validate_only {
            return Ok(plan.counts());
        }
        write_topic(&self.zk, &topic.name, &plan).await?;
        let (assignment, overrides, log_config) =
            (plan.assignment, plan.overrides, plan.log_config);
        let replication_factor = assignment.partitions[0].len() as i16;
        let partitions = assignment.partitions.len() as i32;
        self.context_mut().topics.insert(
            topic.name.clone(),
            TopicContext {
                id: assignment.topic_id,
                assignment: assignment.partitions,
                assignment_version: 0,
                states: Vec::new(),
                config_overrides: overrides,
                log_config: Arc::new(log_config),
                reassignments: BTreeMap::new(),
            },
        );
        self.on_new_partitions(&topic.name, 0).await?;
        self.send_update_metadata();
        info!(
            topic = topic.name,
            partitions, replication_factor, "created topic"
        );
        Ok((partitions, replication_factor))
    }

    /// New partitions `from..` go online: the first live replica leads, all
    /// live replicas in the ISR, as Kafka's PartitionStateMachine does.
    async fn on_new_partitions(&mut self, topic: &str, from: usize) -> Result<(), KafkaZkError> {
        let context = self.context_mut();
        let (live, epoch) = (context.live_broker_ids(), context.epoch);
        let context = context.topics.get(topic).expect("a known topic");
        let states: Vec<(i32, TopicPartitionStateZNode)> = context
            .assignment
            .iter()
            .enumerate()
            .skip(from)
            .map(|(partition, replicas)| {
                let isr: Vec<i32> = replicas
                    .iter()
                    .copied()
                    .filter(|id| live.contains(id))
                    .collect();
                let state = TopicPartitionStateZNode {
                    leader: isr.first().copied().unwrap_or(-1),
                    leader_epoch: 0,
                    isr,
                    controller_epoch: epoch.epoch,
                    leader_recovery_state: 0,
                };
                (partition as i32, state)
            })
            .collect();
        let versions = self
            .zk
            .create_topic_partition_states(epoch, topic, &states)
            .await?;
        let context = self.topic_mut(topic);
        context.states.truncate(from);
        context.states.extend(
            states
                .into_iter()
                .zip(versions)
                .map(|((_, state), version)| Some((state, version))),
        );
        let new: Vec<(String, usize)> = (from..context.assignment.len())
            .map(|partition| (topic.to_owned(), partition))
            .collect();
        self.send_leader_and_isr(&new, true);
        Ok(())
    }

    /// The topic exists under a legal name (names become znode paths) and is
    /// not being deleted.
    fn existing_topic(&self, topic: &str) -> Result<&TopicContext, ApiError> {
        validate_topic_name(topic)?;
        let context = self.context()?;
        if context.is_being_deleted(topic) {
            return Err(ApiError::new(
                ResponseError::InvalidTopicException,
                format!("topic '{topic}' is queued for deletion"),
            ));
        }
        context.topics.get(topic).ok_or_else(|| {
            ApiError::new(
                ResponseError::UnknownTopicOrPartition,
                format!("topic '{topic}' does not exist"),
            )
        })
    }

    /// Marks topics for deletion under `/admin/delete_topics` and deletes
    /// them, as Kafka's controller does on the marks' watch.
    pub async fn delete_topics(&mut self, names: &[String]) -> Vec<Result<(), ApiError>> {
        let mut results = Vec::with_capacity(names.len());
        for name in names {
            let already_marked = self
                .context
                .as_ref()
                .is_some_and(|c| c.is_being_deleted(name));
            let marked = match self.existing_topic(name) {
                // Kafka answers a second deletion as the first.
                _ if already_marked => Ok(()),
                Ok(_) => self
                    .zk
                    .create_delete_topic_path(name)
                    .await
                    .map_err(ApiError::from),
                Err(error) => Err(error),
            };
            self.resign_if_moved(&marked);
            results.push(marked);
        }
        if self.is_active() {
            self.on_topic_deletion().await;
        }
        results
    }

    /// Grows a topic to `count` partitions.
    pub async fn create_partitions(
        &mut self,
        topic: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let grown = self
            .grow_topic(topic, count, assignments, validate_only)
            .await;
        self.resign_if_moved(&grown);
        grown
    }

    async fn grow_topic(
        &mut self,
        topic: &str,
        count: i32,
        assignments: Option<Vec<Vec<i32>>>,
        validate_only: bool,
    ) -> Result<(), ApiError> {
        let context = self.existing_topic(topic)?;
        let current = context.assignment.len();
        check_partition_count(count)?;
        if count <= 0 || count as usize <= current {
            return Err(ApiError::new(
                ResponseError::InvalidPartitions,
                format!(
                    "topic currently has {current} partitions, {count} would not be an increase"
                ),
            ));
        }
        let replication_factor = context.assignment[0].len();
        let new: Vec<Vec<i32>> = match assignments {
            Some(explicit) => {
                if explicit.len() != count as usize - current {
                    return Err(ApiError::new(
                        ResponseError::InvalidReplicaAssignment,
                        "assignment count does not match the new partitions",
                    ));
                }
                check_assignments(
                    &explicit,
                    &self.context()?.live_broker_ids(),
                    Some(replication_factor),
                )?;
                explicit
            }
            None => {
                // Kafka's rotation continues from partition 0's first replica.
                let brokers = Self::brokers_for_assignment(self.context()?);
                let first = context.assignment[0][0];
                let start = brokers.iter().position(|b| b.id >= first).unwrap_or(0);
                assign_replicas_to_brokers(
                    &brokers,
                    count - current as i32,
                    replication_factor as i16,
                    AssignmentStart {
                        start_index: start,
                        replica_shift: start,
                    },
                    current as i32,
                )?
            }
        };
        if validate_only {
            return Ok(());
        }
        let mut assignment = context.znode();
        assignment.partitions.extend(new);
        let version = context.assignment_version;
        let epoch = self.context()?.epoch;
        self.zk
            .set_topic_assignment(epoch, topic, &assignment, version)
            .await?;
        let context = self.topic_mut(topic);
        context.assignment = assignment.partitions;
        context.assignment_version = version + 1;
        self.on_new_partitions(topic, current).await?;
        self.send_update_metadata();
        info!(topic, partitions = count, "added partitions");
        Ok(())
    }

    /// A topic's config changed (`/config/changes`): read it again.
    pub async fn on_topic_config_change(&mut self, topic: &str) -> Result<(), KafkaZkError> {
        if !self
            .context
            .as_ref()
            .is_some_and(|c| c.topics.contains_key(topic))
        {
            return Ok(());
        }
        let (overrides, _) = self.zk.get_topic_config(topic).await?;
        let log_config = Arc::new(stored_log_config(&self.defaults.log_config, &overrides));
        let allow_unclean = log_config.unclean_leader_election_enable;
        let context = self.topic_mut(topic);
        context.log_config = log_config;
        context.config_overrides = overrides;
        // Kafka's TopicUncleanLeaderElectionEnable: offline partitions may
        // now take an out-of-sync leader.
        if allow_unclean && self.is_active() {
            self.elect_after_broker_change().await?;
            self.send_update_metadata();
        }
        Ok(())
    }

    pub fn log_defaults(&self) -> &LogConfig {
        &self.defaults.log_config
    }

    pub fn topic_defaults(&self) -> &TopicDefaults {
        &self.defaults
    }

    /// A producer id never handed out before, by this or any earlier run,
    /// for a broker that is its own controller (single-node mode).
    pub async fn allocate_producer_id(&mut self) -> Result<i64, ApiError> {
        self.context()?;
        if self.next_producer_id > self.producer_id_block_end {
            let block = self.claim_producer_id_block(self.broker_id).await?;
            self.next_producer_id = block.block_start;
            self.producer_id_block_end = block.block_end;
        }
        let id = self.next_producer_id;
        self.next_producer_id += 1;
        Ok(id)
    }

    /// AllocateProducerIds from `broker` at `broker_epoch`: the first id and
    /// length of a block no broker had before.
    pub async fn allocate_producer_ids(
        &mut self,
        broker: i32,
        broker_epoch: i64,
    ) -> Result<(i64, i32), ResponseError> {
        let context = self.context().map_err(|error| error.error)?;
        match context.live_brokers.get(&broker) {
            None => return Err(ResponseError::BrokerIdNotRegistered),
            Some(live) if live.epoch != broker_epoch => {
                return Err(ResponseError::StaleBrokerEpoch)
            }
            Some(_) => {}
        }
        let claimed = self.claim_producer_id_block(broker).await;
        self.resign_if_moved(&claimed);
        let block = claimed.map_err(|error| error.error)?;
        Ok((block.block_start, PRODUCER_ID_BLOCK_SIZE as i32))
    }

    /// Claims the block after the last one in `/latest_producer_id_block`
    /// for `broker`, with a compare-and-set, as Kafka's ZooKeeper mode does.
    async fn claim_producer_id_block(
        &mut self,
        broker: i32,
    ) -> Result<ProducerIdBlockZNode, ApiError> {
        let (latest, version) = self.zk.get_producer_id_block().await?;
        let start = latest.map_or(0, |block| block.block_end + 1);
        let block = ProducerIdBlockZNode {
            broker_id: broker,
            block_start: start,
            block_end: start + PRODUCER_ID_BLOCK_SIZE - 1,
        };
        self.zk.set_producer_id_block(&block, version).await?;
        Ok(block)
    }

    /// The image of what the controller knows; None while it is not the
    /// controller.
    pub fn build_image(&self, version: u64) -> Option<MetadataImage> {
        let context = self.context.as_ref()?;
        Some(context.image(version, self.broker_id))
    }
}

#[cfg(test)]
mod tests;
