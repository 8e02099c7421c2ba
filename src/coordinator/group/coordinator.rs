//! `GroupCoordinator`: one per shard, serving the groups whose
//! `__consumer_offsets` partition that shard leads. Groups live in memory;
//! every change that must survive (offset commits, a generation's members and
//! assignment, deletions) is a record appended to that partition first, and a
//! coordinator taking a partition over replays it.

use std::cell::RefCell;
use std::collections::{BTreeMap, HashMap};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_channel::oneshot;
use kafka_protocol::messages::{
    JoinGroupRequest, JoinGroupResponse, SyncGroupRequest, SyncGroupResponse,
};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::{BatchIter, RecordBatchBuilder, RecordIter, RECORD_BATCH_OVERHEAD};
use shards::log::{decompress, wall_clock_ms, TopicPartition};
use shards::runtime::activity::{self, ActivityKind};
use tracing::{info, warn};

use super::group::{
    join_error, sync_error, CommittedOffset, Group, GroupState, InitialDelay, Member,
    CONSUMER_PROTOCOL_TYPE,
};
use super::records::{GroupMetadataValue, OffsetCommitValue, RecordKey};
use crate::protocol::ResponseError;
use crate::replication::{Partition, ReplicaManager};

pub const GROUP_METADATA_TOPIC_NAME: &str = "__consumer_offsets";

/// Strings in `__consumer_offsets` records carry an int16 length.
const MAX_RECORD_STRING_BYTES: usize = i16::MAX as usize;

/// How often deadlines (sessions, joins, initial delays) are looked at.
/// Kafka's `offsets.commit.timeout.ms`: how long a commit waits for the
/// ISR of its `__consumer_offsets` partition.
const OFFSET_COMMIT_TIMEOUT_MS: u64 = 5_000;
const TICK_INTERVAL: Duration = Duration::from_millis(100);

/// The group settings of `server.properties`, with Kafka's names and defaults.
#[derive(Debug, Clone)]
pub struct GroupConfig {
    /// `group.min.session.timeout.ms`
    pub min_session_timeout_ms: i32,
    /// `group.max.session.timeout.ms`
    pub max_session_timeout_ms: i32,
    /// `group.initial.rebalance.delay.ms`
    pub initial_rebalance_delay_ms: i64,
    /// `group.max.size`
    pub max_size: usize,
    /// `offsets.retention.minutes`, in ms
    pub offsets_retention_ms: i64,
    /// `offsets.retention.check.interval.ms`
    pub offsets_retention_check_interval_ms: i64,
    /// `offset.metadata.max.bytes`
    pub offset_metadata_max_bytes: usize,
    /// `offsets.load.buffer.size`
    pub load_buffer_bytes: usize,
}

impl Default for GroupConfig {
    fn default() -> Self {
        Self {
            min_session_timeout_ms: 6_000,
            max_session_timeout_ms: 1_800_000,
            initial_rebalance_delay_ms: 3_000,
            max_size: i32::MAX as usize,
            offsets_retention_ms: 10_080 * 60_000,
            offsets_retention_check_interval_ms: 600_000,
            offset_metadata_max_bytes: 4096,
            load_buffer_bytes: 5 * 1024 * 1024,
        }
    }
}

/// Kafka's `partitionFor`: Java's `String.hashCode` of the group id, made
/// non-negative, modulo the partition count, so every Kafka client and tool
/// agrees on where a group lives.
pub fn partition_for(group_id: &str, partitions: i32) -> i32 {
    assert!(partitions > 0);
    let hash = group_id.encode_utf16().fold(0i32, |hash, unit| {
        hash.wrapping_mul(31).wrapping_add(unit as i32)
    });
    (hash & 0x7fff_ffff) % partitions
}

/// One record for `__consumer_offsets`: a key and a value, None to delete.
type OffsetsRecord = (Vec<u8>, Option<Vec<u8>>);

struct OffsetsPartition {
    loaded: bool,
    leader_epoch: i32,
    /// Which load owns this partition: a load finishing after the partition
    /// was lost and taken again is discarded.
    load_id: u64,
}

#[derive(Default)]
struct CoordinatorState {
    partitions: HashMap<i32, OffsetsPartition>,
    groups: HashMap<String, Group>,
    last_offsets_expiry_ms: i64,
    next_load_id: u64,
}

impl CoordinatorState {
    fn check_partition(&self, partition: i32) -> Result<(), ResponseError> {
        match self.partitions.get(&partition) {
            None => Err(ResponseError::NotCoordinator),
            Some(p) if !p.loaded => Err(ResponseError::CoordinatorLoadInProgress),
            Some(_) => Ok(()),
        }
    }
}

pub struct GroupCoordinator {
    config: GroupConfig,
    replica_manager: Rc<ReplicaManager>,
    state: RefCell<CoordinatorState>,
}

/// What a member learns about one partition's committed offset.
pub struct FetchedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
}

/// A group as DescribeGroups and ListGroups show it.
pub struct GroupSummary {
    pub group_id: String,
    pub state: GroupState,
    pub protocol_type: String,
    pub protocol: String,
    pub members: Vec<MemberSummary>,
}

pub struct MemberSummary {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub metadata: Bytes,
    pub assignment: Bytes,
}

/// What a joining member asks for, decoded once by the handler.
pub struct JoinParams {
    pub version: i16,
    pub client_id: String,
    pub client_host: String,
    pub request: JoinGroupRequest,
}

/// One member named in a LeaveGroup.
pub struct LeavingMember {
    pub member_id: String,
    pub group_instance_id: Option<String>,
}

/// An OffsetCommit's group fields and partitions.
pub struct CommitParams {
    pub generation_id: i32,
    pub member_id: String,
    pub group_instance_id: Option<String>,
    /// -1: `offsets.retention.minutes` from when the group empties (KIP-211).
    pub retention_time_ms: i64,
    pub offsets: Vec<OffsetToCommit>,
}

pub struct OffsetToCommit {
    pub topic: String,
    pub partition: i32,
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: Option<String>,
}

/// Committed offsets by (topic, partition), as OffsetFetch returns them.
pub type FetchedOffsets = Vec<((String, i32), FetchedOffset)>;

/// How a join goes on: answered now, or when the join phase ends.
enum JoinStep {
    Answer(JoinGroupResponse),
    Wait(oneshot::Receiver<JoinGroupResponse>),
}

impl GroupCoordinator {
    pub fn new(config: GroupConfig, replica_manager: Rc<ReplicaManager>) -> Rc<Self> {
        Rc::new(Self {
            config,
            replica_manager,
            state: RefCell::new(CoordinatorState::default()),
        })
    }

    /// Starts the deadline ticker.
    pub fn start(self: &Rc<Self>) {
        let weak = Rc::downgrade(self);
        glommio::spawn_local(async move {
            loop {
                glommio::timer::sleep(TICK_INTERVAL).await;
                let Some(coordinator) = weak.upgrade() else {
                    return;
                };
                let started = Instant::now();
                coordinator.tick(wall_clock_ms());
                activity::record(ActivityKind::CoordinatorTick, started);
            }
        })
        .detach();
    }

    /// This shard now leads `partition` of `__consumer_offsets`: load it.
    pub fn on_partition_led(self: &Rc<Self>, partition: i32, leader_epoch: i32) {
        let load_id = {
            let mut state = self.state.borrow_mut();
            if let Some(known) = state.partitions.get_mut(&partition) {
                known.leader_epoch = leader_epoch;
                return;
            }
            state.next_load_id += 1;
            let load_id = state.next_load_id;
            state.partitions.insert(
                partition,
                OffsetsPartition {
                    loaded: false,
                    leader_epoch,
                    load_id,
                },
            );
            load_id
        };
        let coordinator = self.clone();
        glommio::spawn_local(async move { coordinator.load(partition, load_id).await }).detach();
    }

    /// Topics deleted from the cluster: their committed offsets go too
    /// (tombstones), so a topic created again under the name starts afresh.
    pub fn on_topics_deleted(self: &Rc<Self>, topics: &[String]) {
        let mut state = self.state.borrow_mut();
        for group in state.groups.values_mut() {
            let gone: Vec<(String, i32)> = group
                .offsets
                .keys()
                .filter(|(topic, _)| topics.contains(topic))
                .cloned()
                .collect();
            if gone.is_empty() {
                continue;
            }
            let records = gone
                .into_iter()
                .map(|(topic, partition)| {
                    group.offsets.remove(&(topic.clone(), partition));
                    let key = RecordKey::Offset {
                        group: group.group_id.clone(),
                        topic,
                        partition,
                    };
                    (key.encode(), None)
                })
                .collect();
            self.spawn_store(group.partition, records);
        }
    }

    /// This shard no longer leads `partition`: its groups go, and members
    /// waiting on them are sent to find the new coordinator.
    pub fn on_partition_gone(&self, partition: i32) {
        let mut state = self.state.borrow_mut();
        if state.partitions.remove(&partition).is_none() {
            return;
        }
        let gone: Vec<String> = state
            .groups
            .values()
            .filter(|g| g.partition == partition)
            .map(|g| g.group_id.clone())
            .collect();
        for group_id in gone {
            if let Some(mut group) = state.groups.remove(&group_id) {
                fail_waiters(&mut group, ResponseError::NotCoordinator);
            }
        }
    }

    pub fn led_partitions(&self) -> Vec<i32> {
        self.state.borrow().partitions.keys().copied().collect()
    }

    /// Shutdown: whoever waits on a join or sync is told to look elsewhere.
    pub fn shutdown(&self) {
        let partitions = self.led_partitions();
        for partition in partitions {
            self.on_partition_gone(partition);
        }
    }

    fn offsets_partition(&self, partition: i32) -> Result<Rc<Partition>, ResponseError> {
        self.replica_manager
            .leader_partition(&TopicPartition::new(GROUP_METADATA_TOPIC_NAME, partition))
    }

    /// Replays the partition: the last record per key wins, a null value deletes.
    async fn load(self: Rc<Self>, partition: i32, load_id: u64) {
        let started = std::time::Instant::now();
        let mut offsets: HashMap<String, HashMap<(String, i32), CommittedOffset>> = HashMap::new();
        let mut groups: HashMap<String, Option<GroupMetadataValue>> = HashMap::new();
        let mut records = 0u64;
        if let Ok(stored) = self.offsets_partition(partition) {
            let mut position = stored.log_start_offset();
            // To the log end, as Kafka loads: a new leader has every
            // acknowledged record, its high watermark may not show it yet.
            let end = stored.log().log_end_offset();
            while position < end {
                let chunk = match stored
                    .read_records(position, self.config.load_buffer_bytes, true)
                    .await
                {
                    Ok(info) => match info.records {
                        Some(slice) => match slice.read().await {
                            Ok(bytes) => bytes,
                            Err(error) => {
                                warn!(partition, %error, "cannot read __consumer_offsets");
                                break;
                            }
                        },
                        None => break,
                    },
                    Err(error) => {
                        warn!(partition, %error, "cannot read __consumer_offsets");
                        break;
                    }
                };
                let before = position;
                for batch in BatchIter::new(&chunk) {
                    let Ok((header, batch)) = batch else { break };
                    position = header.next_offset();
                    if header.is_control() {
                        continue;
                    }
                    let section = match header
                        .compression()
                        .and_then(|codec| decompress(codec, &batch[RECORD_BATCH_OVERHEAD..]))
                    {
                        Ok(section) => section,
                        Err(error) => {
                            warn!(partition, %error, "skipping an unreadable batch");
                            continue;
                        }
                    };
                    for record in RecordIter::new(&section) {
                        let Ok(record) = record else { break };
                        records += 1;
                        replay(record.key, record.value, &mut offsets, &mut groups);
                    }
                }
                if position == before {
                    break;
                }
            }
        }
        let now_ms = wall_clock_ms();
        let mut state = self.state.borrow_mut();
        let Some(known) = state
            .partitions
            .get_mut(&partition)
            .filter(|p| p.load_id == load_id)
        else {
            return; // lost (and perhaps taken again) while loading
        };
        known.loaded = true;
        let mut loaded_groups = 0usize;
        let names: Vec<String> = groups
            .keys()
            .chain(offsets.keys())
            .cloned()
            .collect::<std::collections::BTreeSet<_>>()
            .into_iter()
            .collect();
        for group_id in names {
            let metadata = groups.remove(&group_id).flatten();
            let group_offsets = offsets.remove(&group_id).unwrap_or_default();
            // Deleted (tombstones only): nothing to load.
            if metadata.is_none() && group_offsets.is_empty() {
                continue;
            }
            let mut group = match metadata {
                Some(value) => Group::loaded(group_id.clone(), partition, value, now_ms),
                None => Group::new(group_id.clone(), partition, now_ms),
            };
            group.offsets = group_offsets;
            state.groups.insert(group_id, group);
            loaded_groups += 1;
        }
        if loaded_groups == 0 {
            return;
        }
        info!(
            partition,
            records,
            groups = loaded_groups,
            elapsed_ms = started.elapsed().as_millis() as u64,
            "loaded __consumer_offsets partition"
        );
    }

    /// Appends records to the group's partition of `__consumer_offsets`;
    /// the error is the log's.
    async fn append(
        &self,
        partition: i32,
        records: Vec<OffsetsRecord>,
    ) -> Result<(), ResponseError> {
        if !self.state.borrow().partitions.contains_key(&partition) {
            return Err(ResponseError::NotCoordinator);
        }
        let offsets = self
            .offsets_partition(partition)
            .map_err(|_| ResponseError::NotCoordinator)?;
        let now_ms = wall_clock_ms();
        let mut builder = RecordBatchBuilder::new(0, now_ms);
        for (key, value) in &records {
            builder.append(now_ms, Some(key), value.as_deref());
        }
        // acks=all, as Kafka's coordinator writes: done once the ISR has it.
        let info = offsets
            .append_records_to_leader(builder.build(), -1)
            .await
            .map_err(|error| error.response_error())?;
        let deadline = Instant::now() + Duration::from_millis(OFFSET_COMMIT_TIMEOUT_MS);
        offsets
            .wait_for_replication(info.last_offset, deadline)
            .await
    }

    /// Writes a group's metadata record, logging rather than failing: used
    /// where Kafka also writes without anyone waiting (a group emptied).
    fn spawn_store(self: &Rc<Self>, partition: i32, records: Vec<OffsetsRecord>) {
        let coordinator = self.clone();
        glommio::spawn_local(async move {
            // glommio may poll a new task at once: let the caller, which holds
            // the group state, finish first.
            futures_lite::future::yield_now().await;
            if let Err(code) = coordinator.append(partition, records).await {
                warn!(partition, %code, "cannot write group metadata");
            }
        })
        .detach();
    }

    /// Ends a join phase that can end; an emptied group's new generation is
    /// written, as Kafka writes it.
    fn settle(self: &Rc<Self>, group: &mut Group, now_ms: i64) {
        if group.join_can_complete(now_ms)
            && group.complete_join(now_ms)
            && group.is(GroupState::Empty)
        {
            let key = RecordKey::Group {
                group: group.group_id.clone(),
            };
            self.spawn_store(
                group.partition,
                vec![(key.encode(), Some(group.metadata_value().encode()))],
            );
        }
    }

    fn remove_member_and_update(self: &Rc<Self>, group: &mut Group, member_id: &str, now_ms: i64) {
        if group.remove_member(member_id).is_none() {
            return;
        }
        match group.state {
            GroupState::Stable | GroupState::CompletingRebalance => {
                group.maybe_prepare_rebalance(self.config.initial_rebalance_delay_ms, now_ms)
            }
            GroupState::PreparingRebalance => self.settle(group, now_ms),
            GroupState::Empty | GroupState::Dead => {}
        }
    }

    fn tick(self: &Rc<Self>, now_ms: i64) {
        let expire_offsets = now_ms - self.state.borrow().last_offsets_expiry_ms
            >= self.config.offsets_retention_check_interval_ms;
        let mut state = self.state.borrow_mut();
        let mut emptied = Vec::new();
        for group in state.groups.values_mut() {
            group
                .pending_members
                .retain(|_, deadline| now_ms < *deadline);
            let expired: Vec<String> = group
                .members
                .values()
                .filter(|m| m.has_expired(now_ms))
                .map(|m| m.member_id.clone())
                .collect();
            for member_id in expired {
                info!(group = %group.group_id, member = %member_id, "member session expired");
                self.remove_member_and_update(group, &member_id, now_ms);
            }
            if let Some(delay) = &group.initial_delay {
                if now_ms >= delay.deadline_ms {
                    group.initial_delay = if group.new_member_added && delay.remaining_ms > 0 {
                        let next = self
                            .config
                            .initial_rebalance_delay_ms
                            .min(delay.remaining_ms);
                        group.new_member_added = false;
                        Some(InitialDelay {
                            deadline_ms: now_ms + next,
                            remaining_ms: delay.remaining_ms - next,
                        })
                    } else {
                        // Over: the join phase ends now, as Kafka's
                        // InitialDelayedJoin ends it, pending ids or not.
                        group.rebalance_deadline_ms = now_ms;
                        None
                    };
                }
            }
            self.settle(group, now_ms);
            if expire_offsets {
                let expired = group.expired_offsets(self.config.offsets_retention_ms, now_ms);
                let mut records: Vec<OffsetsRecord> = Vec::new();
                for (topic, partition) in expired {
                    group.offsets.remove(&(topic.clone(), partition));
                    let key = RecordKey::Offset {
                        group: group.group_id.clone(),
                        topic,
                        partition,
                    };
                    records.push((key.encode(), None));
                }
                // As Kafka: an empty group with no offsets left goes (unless a
                // member is between MEMBER_ID_REQUIRED and its join).
                if group.is(GroupState::Empty)
                    && group.offsets.is_empty()
                    && group.pending_members.is_empty()
                    && group.pending_offset_commits.is_empty()
                {
                    let key = RecordKey::Group {
                        group: group.group_id.clone(),
                    };
                    records.push((key.encode(), None));
                    group.transition_to(GroupState::Dead, now_ms);
                    emptied.push(group.group_id.clone());
                }
                if !records.is_empty() {
                    info!(group = %group.group_id, records = records.len(), "expired offsets");
                    self.spawn_store(group.partition, records);
                }
            }
        }
        for group_id in emptied {
            state.groups.remove(&group_id);
        }
        if expire_offsets {
            state.last_offsets_expiry_ms = now_ms;
        }
    }

    pub async fn join_group(
        self: &Rc<Self>,
        partition: i32,
        params: JoinParams,
    ) -> JoinGroupResponse {
        let answer = match self.join_group_now(partition, params) {
            JoinStep::Wait(answer) => answer,
            JoinStep::Answer(response) => return response,
        };
        answer
            .await
            .unwrap_or_else(|_| join_error(ResponseError::NotCoordinator, ""))
    }

    /// The synchronous part of a join: an immediate answer or the channel on
    /// which the join phase's end will answer.
    fn join_group_now(self: &Rc<Self>, partition: i32, params: JoinParams) -> JoinStep {
        let JoinParams {
            version,
            client_id,
            client_host,
            request,
        } = params;
        let now_ms = wall_clock_ms();
        let member_id = request.member_id.to_string();
        let fail = |code: ResponseError| JoinStep::Answer(join_error(code, &member_id));
        let mut state = self.state.borrow_mut();
        if let Err(code) = state.check_partition(partition) {
            return fail(code);
        }
        let group_id = request.group_id.to_string();
        if group_id.is_empty() || group_id.len() > MAX_RECORD_STRING_BYTES {
            return fail(ResponseError::InvalidGroupId);
        }
        // What goes into the group's metadata record must fit its strings.
        let too_long = [
            Some(request.member_id.as_str()),
            request.group_instance_id.as_deref(),
            Some(request.protocol_type.as_str()),
            Some(client_id.as_str()),
        ]
        .into_iter()
        .flatten()
        .chain(request.protocols.iter().map(|p| p.name.as_str()))
        .any(|s| s.len() > MAX_RECORD_STRING_BYTES);
        if too_long {
            return fail(ResponseError::InvalidRequest);
        }
        let session_timeout_ms = request.session_timeout_ms;
        if session_timeout_ms < self.config.min_session_timeout_ms
            || session_timeout_ms > self.config.max_session_timeout_ms
        {
            return fail(ResponseError::InvalidSessionTimeout);
        }
        let rebalance_timeout_ms = if version == 0 {
            session_timeout_ms
        } else {
            request.rebalance_timeout_ms
        };
        let instance = request.group_instance_id.as_ref().map(|i| i.to_string());
        let protocol_type = request.protocol_type.to_string();
        let protocols: Vec<(String, Bytes)> = request
            .protocols
            .iter()
            .map(|p| (p.name.to_string(), p.metadata.clone()))
            .collect();
        if !state.groups.contains_key(&group_id) {
            if !member_id.is_empty() {
                return fail(ResponseError::UnknownMemberId);
            }
            state.groups.insert(
                group_id.clone(),
                Group::new(group_id.clone(), partition, now_ms),
            );
        }
        let group = state.groups.get_mut(&group_id).expect("inserted above");
        if group.is(GroupState::Dead) {
            return fail(ResponseError::CoordinatorNotAvailable);
        }
        let known = group.members.contains_key(&member_id);
        if !known && !group.supports_protocols(&protocol_type, &protocols) {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        let (reply, answer) = oneshot::channel();
        let new_member = |member_id: String| Member {
            member_id,
            group_instance_id: instance.clone(),
            client_id: client_id.clone(),
            client_host: client_host.clone(),
            rebalance_timeout_ms,
            session_timeout_ms,
            protocols: protocols.clone(),
            assignment: Bytes::new(),
            awaiting_join: None,
            awaiting_sync: None,
            last_heartbeat_ms: now_ms,
        };
        if member_id.is_empty() || (!known && group.pending_members.contains_key(&member_id)) {
            // A new member, or one coming back with the id MEMBER_ID_REQUIRED gave it.
            if member_id.is_empty()
                && group.members.len() + group.pending_members.len() >= self.config.max_size
            {
                return fail(ResponseError::GroupMaxSizeReached);
            }
            let id = if member_id.is_empty() {
                format!(
                    "{}-{}",
                    instance.as_deref().unwrap_or(&client_id),
                    uuid::Uuid::new_v4()
                )
            } else {
                member_id.clone()
            };
            if let Some(instance) = &instance {
                let old_id = group
                    .static_members
                    .get(instance)
                    .filter(|old_id| group.members.contains_key(*old_id))
                    .cloned();
                if let Some(old_id) = old_id {
                    return self.replace_static_member(
                        group,
                        &old_id,
                        new_member(id),
                        version,
                        now_ms,
                    );
                }
            } else if member_id.is_empty() && version >= 4 {
                // KIP-394: the member learns its id first and joins with it.
                group
                    .pending_members
                    .insert(id.clone(), now_ms + session_timeout_ms as i64);
                return JoinStep::Answer(join_error(ResponseError::MemberIdRequired, &id));
            }
            if group.members.is_empty() {
                group.protocol_type = Some(protocol_type);
            }
            let mut member = new_member(id);
            member.awaiting_join = Some(reply);
            // Extends a running initial delay (Kafka's InitialDelayedJoin).
            if group.is(GroupState::PreparingRebalance) && group.generation_id == 0 {
                group.new_member_added = true;
            }
            group.add_member(member);
            group.maybe_prepare_rebalance(self.config.initial_rebalance_delay_ms, now_ms);
            self.settle(group, now_ms);
            return JoinStep::Wait(answer);
        }
        if let Err(code) = group.validate_current_member(&member_id, instance.as_deref()) {
            return fail(code);
        }
        if !group.supports_protocols(&protocol_type, &protocols) && group.members.len() > 1 {
            return fail(ResponseError::InconsistentGroupProtocol);
        }
        let is_leader = group.leader_id.as_deref() == Some(member_id.as_str());
        let stable = group.is(GroupState::Stable);
        let member = group.members.get_mut(&member_id).expect("known member");
        let unchanged = member.protocols == protocols;
        match group.state {
            GroupState::CompletingRebalance | GroupState::Stable
                if unchanged && !(stable && is_leader) =>
            {
                member.last_heartbeat_ms = now_ms;
                JoinStep::Answer(group.current_join_response(&member_id))
            }
            GroupState::PreparingRebalance
            | GroupState::CompletingRebalance
            | GroupState::Stable => {
                member.protocols = protocols;
                member.rebalance_timeout_ms = rebalance_timeout_ms;
                member.session_timeout_ms = session_timeout_ms;
                member.awaiting_join = Some(reply);
                group.maybe_prepare_rebalance(self.config.initial_rebalance_delay_ms, now_ms);
                self.settle(group, now_ms);
                JoinStep::Wait(answer)
            }
            GroupState::Empty | GroupState::Dead => fail(ResponseError::UnknownMemberId),
        }
    }

    /// KIP-345: a static member rejoining without its member id takes over
    /// its instance's slot; the old id is fenced. A stable group whose
    /// protocol choice stands keeps its generation and assignment (no
    /// rebalance; a leader is told to skip the assignment), else it rebalances.
    fn replace_static_member(
        self: &Rc<Self>,
        group: &mut Group,
        old_id: &str,
        mut member: Member,
        version: i16,
        now_ms: i64,
    ) -> JoinStep {
        let mut old = group
            .members
            .remove(old_id)
            .expect("static members are members");
        if let Some(waiting) = old.awaiting_join.take() {
            let _ = waiting.send(join_error(ResponseError::FencedInstanceId, old_id));
        }
        if let Some(waiting) = old.awaiting_sync.take() {
            let _ = waiting.send(sync_error(ResponseError::FencedInstanceId));
        }
        let new_id = member.member_id.clone();
        member.assignment = old.assignment;
        if group.leader_id.as_deref() == Some(old_id) {
            group.leader_id = Some(new_id.clone());
        }
        group.add_member(member);
        if group.is(GroupState::Stable) && group.select_protocol() == group.protocol_name {
            let key = RecordKey::Group {
                group: group.group_id.clone(),
            };
            self.spawn_store(
                group.partition,
                vec![(key.encode(), Some(group.metadata_value().encode()))],
            );
            let is_leader = group.leader_id.as_deref() == Some(new_id.as_str());
            return JoinStep::Answer(
                group
                    .current_join_response(&new_id)
                    .with_skip_assignment(is_leader && version >= 9),
            );
        }
        let (reply, answer) = oneshot::channel();
        group
            .members
            .get_mut(&new_id)
            .expect("just added")
            .awaiting_join = Some(reply);
        group.maybe_prepare_rebalance(self.config.initial_rebalance_delay_ms, now_ms);
        self.settle(group, now_ms);
        JoinStep::Wait(answer)
    }

    pub async fn sync_group(
        self: &Rc<Self>,
        partition: i32,
        request: SyncGroupRequest,
    ) -> SyncGroupResponse {
        let now_ms = wall_clock_ms();
        let group_id = request.group_id.to_string();
        let member_id = request.member_id.to_string();
        let (answer, store) = {
            let mut state = self.state.borrow_mut();
            if let Err(code) = state.check_partition(partition) {
                // As Kafka: a loading coordinator makes the member rejoin.
                return sync_error(match code {
                    ResponseError::CoordinatorLoadInProgress => ResponseError::RebalanceInProgress,
                    code => code,
                });
            }
            let Some(group) = state.groups.get_mut(&group_id) else {
                return sync_error(ResponseError::UnknownMemberId);
            };
            let instance = request.group_instance_id.as_ref().map(|i| i.to_string());
            if group.is(GroupState::Dead) {
                return sync_error(ResponseError::CoordinatorNotAvailable);
            }
            if let Err(code) = group.validate_current_member(&member_id, instance.as_deref()) {
                return sync_error(code);
            }
            if request.generation_id != group.generation_id {
                return sync_error(ResponseError::IllegalGeneration);
            }
            let type_mismatch = request
                .protocol_type
                .as_ref()
                .is_some_and(|t| group.protocol_type.as_deref() != Some(t.as_str()));
            let name_mismatch = request
                .protocol_name
                .as_ref()
                .is_some_and(|n| group.protocol_name.as_deref() != Some(n.as_str()));
            if type_mismatch || name_mismatch {
                return sync_error(ResponseError::InconsistentGroupProtocol);
            }
            match group.state {
                GroupState::Empty => return sync_error(ResponseError::UnknownMemberId),
                GroupState::PreparingRebalance => {
                    return sync_error(ResponseError::RebalanceInProgress)
                }
                GroupState::Stable => {
                    let member = group.members.get_mut(&member_id).expect("checked");
                    member.last_heartbeat_ms = now_ms;
                    return self.sync_response(group, &member_id);
                }
                GroupState::Dead => unreachable!("checked above"),
                GroupState::CompletingRebalance => {}
            }
            let (reply, answer) = oneshot::channel();
            let member = group.members.get_mut(&member_id).expect("checked");
            member.awaiting_sync = Some(reply);
            member.last_heartbeat_ms = now_ms;
            let mut store = None;
            if group.leader_id.as_deref() == Some(member_id.as_str()) {
                let mut assignments: BTreeMap<String, Bytes> = request
                    .assignments
                    .into_iter()
                    .map(|a| (a.member_id.to_string(), a.assignment))
                    .collect();
                let mut value = group.metadata_value();
                for member in &mut value.members {
                    member.assignment = assignments.remove(&member.member_id).unwrap_or_default();
                }
                store = Some((group.generation_id, value));
            }
            (answer, store)
        };
        if let Some((generation, value)) = store {
            let key = RecordKey::Group {
                group: group_id.clone(),
            };
            let stored = self
                .append(partition, vec![(key.encode(), Some(value.encode()))])
                .await;
            let mut state = self.state.borrow_mut();
            if let Some(group) = state.groups.get_mut(&group_id) {
                // Only if no rebalance started meanwhile.
                if group.is(GroupState::CompletingRebalance) && group.generation_id == generation {
                    match stored {
                        Ok(()) => {
                            let assignments: HashMap<String, Bytes> = value
                                .members
                                .into_iter()
                                .map(|m| (m.member_id, m.assignment))
                                .collect();
                            for member in group.members.values_mut() {
                                member.assignment = assignments
                                    .get(&member.member_id)
                                    .cloned()
                                    .unwrap_or_default();
                            }
                            let now_ms = wall_clock_ms();
                            group.transition_to(GroupState::Stable, now_ms);
                            let protocol_type = group.protocol_type.clone();
                            let protocol_name = group.protocol_name.clone();
                            for member in group.members.values_mut() {
                                if let Some(reply) = member.awaiting_sync.take() {
                                    // Answered: its session runs from now.
                                    member.last_heartbeat_ms = now_ms;
                                    let _ = reply.send(
                                        SyncGroupResponse::default()
                                            .with_protocol_type(
                                                protocol_type.clone().map(StrBytes::from_string),
                                            )
                                            .with_protocol_name(
                                                protocol_name.clone().map(StrBytes::from_string),
                                            )
                                            .with_assignment(member.assignment.clone()),
                                    );
                                }
                            }
                        }
                        Err(code) => {
                            let code = store_error(code);
                            let now_ms = wall_clock_ms();
                            for member in group.members.values_mut() {
                                member.assignment = Bytes::new();
                                if let Some(reply) = member.awaiting_sync.take() {
                                    member.last_heartbeat_ms = now_ms;
                                    let _ = reply.send(sync_error(code));
                                }
                            }
                            group.maybe_prepare_rebalance(
                                self.config.initial_rebalance_delay_ms,
                                now_ms,
                            );
                        }
                    }
                }
            }
        }
        answer
            .await
            .unwrap_or_else(|_| sync_error(ResponseError::NotCoordinator))
    }

    fn sync_response(&self, group: &Group, member_id: &str) -> SyncGroupResponse {
        SyncGroupResponse::default()
            .with_protocol_type(group.protocol_type.clone().map(StrBytes::from_string))
            .with_protocol_name(group.protocol_name.clone().map(StrBytes::from_string))
            .with_assignment(
                group
                    .members
                    .get(member_id)
                    .map(|m| m.assignment.clone())
                    .unwrap_or_default(),
            )
    }

    pub fn heartbeat(
        &self,
        partition: i32,
        group_id: &str,
        member_id: &str,
        group_instance_id: Option<&str>,
        generation_id: i32,
    ) -> Result<(), ResponseError> {
        let mut state = self.state.borrow_mut();
        match state.check_partition(partition) {
            // As Kafka: a member heartbeating a loading coordinator carries on.
            Err(ResponseError::CoordinatorLoadInProgress) => return Ok(()),
            other => other?,
        }
        let group = state
            .groups
            .get_mut(group_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        match group.state {
            GroupState::Dead => return Err(ResponseError::CoordinatorNotAvailable),
            GroupState::Empty => return Err(ResponseError::UnknownMemberId),
            _ => {}
        }
        group.validate_current_member(member_id, group_instance_id)?;
        if generation_id != group.generation_id {
            return Err(ResponseError::IllegalGeneration);
        }
        let preparing = group.is(GroupState::PreparingRebalance);
        let member = group
            .members
            .get_mut(member_id)
            .ok_or(ResponseError::UnknownMemberId)?;
        member.last_heartbeat_ms = wall_clock_ms();
        if preparing {
            Err(ResponseError::RebalanceInProgress)
        } else {
            Ok(())
        }
    }

    /// LeaveGroup: the group-level error, and each member's.
    pub fn leave_group(
        self: &Rc<Self>,
        partition: i32,
        group_id: &str,
        members: &[LeavingMember],
    ) -> Result<Vec<Result<(), ResponseError>>, ResponseError> {
        let now_ms = wall_clock_ms();
        let mut state = self.state.borrow_mut();
        state.check_partition(partition)?;
        let Some(group) = state.groups.get_mut(group_id) else {
            return Ok(vec![Err(ResponseError::UnknownMemberId); members.len()]);
        };
        if group.is(GroupState::Dead) {
            return Err(ResponseError::CoordinatorNotAvailable);
        }
        let mut errors = Vec::with_capacity(members.len());
        for leaving in members {
            let code = match &leaving.group_instance_id {
                Some(instance) => match group.static_members.get(instance).cloned() {
                    None => Err(ResponseError::UnknownMemberId),
                    // An admin removing an instance names no member id.
                    Some(known) if leaving.member_id.is_empty() || known == leaving.member_id => {
                        self.remove_member_and_update(group, &known, now_ms);
                        Ok(())
                    }
                    Some(_) => Err(ResponseError::FencedInstanceId),
                },
                None if group.pending_members.remove(&leaving.member_id).is_some() => {
                    self.settle(group, now_ms);
                    Ok(())
                }
                None if group.members.contains_key(&leaving.member_id) => {
                    self.remove_member_and_update(group, &leaving.member_id, now_ms);
                    Ok(())
                }
                None => Err(ResponseError::UnknownMemberId),
            };
            errors.push(code);
        }
        Ok(errors)
    }

    /// OffsetCommit: one error per partition, in the request's order.
    pub async fn commit_offsets(
        self: &Rc<Self>,
        partition: i32,
        group_id: &str,
        params: CommitParams,
    ) -> Vec<Result<(), ResponseError>> {
        let now_ms = wall_clock_ms();
        let count = params.offsets.len();
        let mut errors = vec![Ok(()); count];
        let mut records = Vec::new();
        let mut committed = Vec::new();
        {
            let mut state = self.state.borrow_mut();
            if let Err(code) = state.check_partition(partition) {
                return vec![Err(code); count];
            }
            if group_id.is_empty() || group_id.len() > MAX_RECORD_STRING_BYTES {
                return vec![Err(ResponseError::InvalidGroupId); count];
            }
            let group = match state.groups.get_mut(group_id) {
                Some(group) => group,
                // A group not managed by the coordinator (assign() and commit).
                None if params.generation_id < 0 => state
                    .groups
                    .entry(group_id.to_owned())
                    .or_insert_with(|| Group::new(group_id.to_owned(), partition, now_ms)),
                None => return vec![Err(ResponseError::IllegalGeneration); count],
            };
            // Kafka's validateOffsetCommit: a member is checked as a member;
            // a commit without one (generation -1, no member id) only goes
            // into an empty group.
            let names_member = params.generation_id >= 0
                || !params.member_id.is_empty()
                || params.group_instance_id.is_some();
            let allowed = if group.is(GroupState::Dead) {
                Err(ResponseError::CoordinatorNotAvailable)
            } else if names_member {
                match group
                    .validate_current_member(&params.member_id, params.group_instance_id.as_deref())
                {
                    Err(code) => Err(code),
                    Ok(()) if params.generation_id != group.generation_id => {
                        Err(ResponseError::IllegalGeneration)
                    }
                    Ok(()) if group.is(GroupState::CompletingRebalance) => {
                        Err(ResponseError::RebalanceInProgress)
                    }
                    Ok(()) => Ok(()),
                }
            } else if !group.is(GroupState::Empty) {
                Err(ResponseError::UnknownMemberId)
            } else {
                Ok(())
            };
            if allowed.is_err() {
                return vec![allowed; count];
            }
            if let Some(member) = group.members.get_mut(&params.member_id) {
                member.last_heartbeat_ms = now_ms;
            }
            for (i, commit) in params.offsets.into_iter().enumerate() {
                let OffsetToCommit {
                    topic,
                    partition: index,
                    offset,
                    leader_epoch,
                    metadata,
                } = commit;
                let metadata = metadata.unwrap_or_default();
                if metadata.len()
                    > self
                        .config
                        .offset_metadata_max_bytes
                        .min(MAX_RECORD_STRING_BYTES)
                {
                    errors[i] = Err(ResponseError::OffsetMetadataTooLarge);
                    continue;
                }
                let value = CommittedOffset {
                    offset,
                    leader_epoch,
                    metadata,
                    commit_timestamp_ms: now_ms,
                    expire_timestamp_ms: (params.retention_time_ms >= 0)
                        .then(|| now_ms.saturating_add(params.retention_time_ms)),
                };
                let key = RecordKey::Offset {
                    group: group_id.to_owned(),
                    topic: topic.clone(),
                    partition: index,
                };
                records.push((key.encode(), Some(offset_value(&value).encode())));
                committed.push((i, (topic, index), value));
            }
        }
        if records.is_empty() {
            return errors;
        }
        if let Some(group) = self.state.borrow_mut().groups.get_mut(group_id) {
            for (_, key, _) in &committed {
                *group.pending_offset_commits.entry(key.clone()).or_default() += 1;
            }
        }
        let stored = self.append(partition, records).await;
        if let Some(group) = self.state.borrow_mut().groups.get_mut(group_id) {
            for (_, key, value) in &committed {
                if let Some(pending) = group.pending_offset_commits.get_mut(key) {
                    *pending -= 1;
                    if *pending == 0 {
                        group.pending_offset_commits.remove(key);
                    }
                }
                if stored.is_ok() {
                    group.offsets.insert(key.clone(), value.clone());
                }
            }
        }
        if let Err(code) = stored {
            let code = match code {
                ResponseError::MessageTooLarge
                | ResponseError::RecordListTooLarge
                | ResponseError::InvalidFetchSize => ResponseError::InvalidCommitOffsetSize,
                other => store_error(other),
            };
            for (i, _, _) in committed {
                errors[i] = Err(code);
            }
        }
        errors
    }

    /// OffsetFetch for one group: every committed offset when `partitions` is
    /// None, else those asked for (-1 where none is committed).
    pub fn fetch_offsets(
        &self,
        partition: i32,
        group_id: &str,
        partitions: Option<Vec<(String, i32)>>,
    ) -> Result<FetchedOffsets, ResponseError> {
        let state = self.state.borrow();
        state.check_partition(partition)?;
        let group = state
            .groups
            .get(group_id)
            .filter(|g| !g.is(GroupState::Dead));
        let lookup = |key: &(String, i32)| {
            group.and_then(|g| g.offsets.get(key)).map_or(
                FetchedOffset {
                    offset: -1,
                    leader_epoch: -1,
                    metadata: String::new(),
                },
                |o| FetchedOffset {
                    offset: o.offset,
                    leader_epoch: o.leader_epoch,
                    metadata: o.metadata.clone(),
                },
            )
        };
        Ok(match partitions {
            Some(keys) => keys
                .into_iter()
                .map(|key| {
                    let value = lookup(&key);
                    (key, value)
                })
                .collect(),
            None => {
                let mut keys: Vec<(String, i32)> = group
                    .map(|g| g.offsets.keys().cloned().collect())
                    .unwrap_or_default();
                keys.sort();
                keys.into_iter()
                    .map(|key| {
                        let value = lookup(&key);
                        (key, value)
                    })
                    .collect()
            }
        })
    }

    pub fn describe_group(
        &self,
        partition: i32,
        group_id: &str,
    ) -> Result<GroupSummary, ResponseError> {
        let state = self.state.borrow();
        state.check_partition(partition)?;
        let Some(group) = state.groups.get(group_id) else {
            return Ok(GroupSummary {
                group_id: group_id.to_owned(),
                state: GroupState::Dead,
                protocol_type: String::new(),
                protocol: String::new(),
                members: Vec::new(),
            });
        };
        Ok(summarize(group, true))
    }

    /// Every loaded group on this shard; Err while a partition still loads.
    pub fn list_groups(&self) -> Result<Vec<GroupSummary>, ResponseError> {
        let state = self.state.borrow();
        if state.partitions.values().any(|p| !p.loaded) {
            return Err(ResponseError::CoordinatorLoadInProgress);
        }
        Ok(state
            .groups
            .values()
            .filter(|g| !g.is(GroupState::Dead))
            .map(|g| summarize(g, false))
            .collect())
    }

    /// DeleteGroups for one group: only an empty group goes; its offsets and
    /// metadata are deleted with tombstones.
    pub async fn delete_group(&self, partition: i32, group_id: &str) -> Result<(), ResponseError> {
        let records = {
            let mut state = self.state.borrow_mut();
            state.check_partition(partition)?;
            let group = state
                .groups
                .get_mut(group_id)
                .ok_or(ResponseError::GroupIdNotFound)?;
            match group.state {
                GroupState::Dead => return Err(ResponseError::GroupIdNotFound),
                GroupState::Empty => {}
                _ => return Err(ResponseError::NonEmptyGroup),
            }
            // Dead while the tombstones are written: no join or commit gets in.
            group.transition_to(GroupState::Dead, wall_clock_ms());
            let mut records: Vec<OffsetsRecord> = group
                .offsets
                .keys()
                .map(|(topic, index)| {
                    let key = RecordKey::Offset {
                        group: group_id.to_owned(),
                        topic: topic.clone(),
                        partition: *index,
                    };
                    (key.encode(), None)
                })
                .collect();
            records.push((
                RecordKey::Group {
                    group: group_id.to_owned(),
                }
                .encode(),
                None,
            ));
            records
        };
        let stored = self.append(partition, records).await;
        let mut state = self.state.borrow_mut();
        match stored {
            Ok(()) => {
                state.groups.remove(group_id);
                Ok(())
            }
            Err(code) => {
                if let Some(group) = state.groups.get_mut(group_id) {
                    group.transition_to(GroupState::Empty, wall_clock_ms());
                }
                Err(store_error(code))
            }
        }
    }

    /// OffsetDelete: the group-level error, and each partition's.
    pub async fn delete_offsets(
        &self,
        partition: i32,
        group_id: &str,
        partitions: Vec<(String, i32)>,
    ) -> Result<Vec<Result<(), ResponseError>>, ResponseError> {
        let mut errors = vec![Ok(()); partitions.len()];
        let mut records = Vec::new();
        let mut deleted = Vec::new();
        {
            let state = self.state.borrow();
            state.check_partition(partition)?;
            let group = state
                .groups
                .get(group_id)
                .filter(|g| !g.is(GroupState::Dead))
                .ok_or(ResponseError::GroupIdNotFound)?;
            // None: a consumer group whose subscriptions cannot be read
            // counts as subscribed to everything, as in Kafka.
            let subscribed = if group.is(GroupState::Empty) {
                Some(Default::default())
            } else if group.protocol_type.as_deref() == Some(CONSUMER_PROTOCOL_TYPE) {
                group.subscribed_topics()
            } else {
                return Err(ResponseError::NonEmptyGroup);
            };
            for (i, (topic, index)) in partitions.into_iter().enumerate() {
                if subscribed.as_ref().is_none_or(|s| s.contains(&topic)) {
                    errors[i] = Err(ResponseError::GroupSubscribedToTopic);
                    continue;
                }
                if group.offsets.contains_key(&(topic.clone(), index)) {
                    let key = RecordKey::Offset {
                        group: group_id.to_owned(),
                        topic: topic.clone(),
                        partition: index,
                    };
                    records.push((key.encode(), None));
                    deleted.push((topic, index));
                }
            }
        }
        if !records.is_empty() {
            self.append(partition, records).await.map_err(store_error)?;
            let mut state = self.state.borrow_mut();
            if let Some(group) = state.groups.get_mut(group_id) {
                for key in deleted {
                    group.offsets.remove(&key);
                }
            }
        }
        Ok(errors)
    }
}

fn offset_value(offset: &CommittedOffset) -> OffsetCommitValue {
    OffsetCommitValue {
        offset: offset.offset,
        leader_epoch: offset.leader_epoch,
        metadata: offset.metadata.clone(),
        commit_timestamp_ms: offset.commit_timestamp_ms,
        expire_timestamp_ms: offset.expire_timestamp_ms,
    }
}

/// Kafka's mapping of a failed `__consumer_offsets` append to what a group
/// member is told.
fn store_error(code: ResponseError) -> ResponseError {
    match code {
        ResponseError::UnknownTopicOrPartition
        | ResponseError::NotEnoughReplicas
        | ResponseError::NotEnoughReplicasAfterAppend
        | ResponseError::RequestTimedOut => ResponseError::CoordinatorNotAvailable,
        ResponseError::NotLeaderOrFollower
        | ResponseError::KafkaStorageError
        | ResponseError::NotCoordinator => ResponseError::NotCoordinator,
        _ => ResponseError::UnknownServerError,
    }
}

fn fail_waiters(group: &mut Group, code: ResponseError) {
    for member in group.members.values_mut() {
        if let Some(reply) = member.awaiting_join.take() {
            let _ = reply.send(join_error(code, &member.member_id));
        }
        if let Some(reply) = member.awaiting_sync.take() {
            let _ = reply.send(sync_error(code));
        }
    }
}

/// Kafka's group summary: metadata and assignments only once Stable.
fn summarize(group: &Group, with_members: bool) -> GroupSummary {
    let stable = group.is(GroupState::Stable);
    let protocol = group.protocol_name.clone().unwrap_or_default();
    GroupSummary {
        group_id: group.group_id.clone(),
        state: group.state,
        protocol_type: group.protocol_type.clone().unwrap_or_default(),
        protocol: if stable {
            protocol.clone()
        } else {
            String::new()
        },
        members: if with_members {
            group
                .members
                .values()
                .map(|m| MemberSummary {
                    member_id: m.member_id.clone(),
                    group_instance_id: m.group_instance_id.clone(),
                    client_id: m.client_id.clone(),
                    client_host: m.client_host.clone(),
                    metadata: if stable {
                        m.protocols
                            .iter()
                            .find(|(name, _)| *name == protocol)
                            .map(|(_, metadata)| metadata.clone())
                            .unwrap_or_default()
                    } else {
                        Bytes::new()
                    },
                    assignment: if stable {
                        m.assignment.clone()
                    } else {
                        Bytes::new()
                    },
                })
                .collect()
        } else {
            Vec::new()
        },
    }
}

/// Applies one `__consumer_offsets` record during a load.
fn replay(
    key: Option<&[u8]>,
    value: Option<&[u8]>,
    offsets: &mut HashMap<String, HashMap<(String, i32), CommittedOffset>>,
    groups: &mut HashMap<String, Option<GroupMetadataValue>>,
) {
    let Some(key) = key else { return };
    let key = match RecordKey::decode(key) {
        Ok(Some(key)) => key,
        Ok(None) => return,
        Err(error) => {
            warn!(%error, "skipping an unreadable __consumer_offsets key");
            return;
        }
    };
    match key {
        RecordKey::Offset {
            group,
            topic,
            partition,
        } => {
            let entry = offsets.entry(group).or_default();
            match value.map(OffsetCommitValue::decode) {
                None => {
                    entry.remove(&(topic, partition));
                }
                Some(Ok(value)) => {
                    entry.insert(
                        (topic, partition),
                        CommittedOffset {
                            offset: value.offset,
                            leader_epoch: value.leader_epoch,
                            metadata: value.metadata,
                            commit_timestamp_ms: value.commit_timestamp_ms,
                            expire_timestamp_ms: value.expire_timestamp_ms,
                        },
                    );
                }
                Some(Err(error)) => warn!(%error, "skipping an unreadable offset commit"),
            }
        }
        RecordKey::Group { group } => match value.map(GroupMetadataValue::decode) {
            None => {
                groups.insert(group, None);
            }
            Some(Ok(value)) => {
                groups.insert(group, Some(value));
            }
            Some(Err(error)) => warn!(%error, "skipping an unreadable group metadata record"),
        },
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn partition_for_matches_kafka() {
        // Java: Math.abs-free `"my-group".hashCode() & 0x7fffffff % 50`.
        assert_eq!("my-group".encode_utf16().count(), 8);
        let java_hash = |s: &str| {
            s.encode_utf16()
                .fold(0i32, |h, c| h.wrapping_mul(31).wrapping_add(c as i32))
        };
        assert_eq!(java_hash("a"), 97);
        assert_eq!(java_hash("ab"), 97 * 31 + 98);
        assert_eq!(partition_for("a", 50), 97 % 50);
        for group in ["", "g", "console-consumer-12345", "ユニコード"] {
            let p = partition_for(group, 50);
            assert!((0..50).contains(&p));
        }
    }
}
