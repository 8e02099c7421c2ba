//! One consumer group: its members, generation and committed offsets, and the
//! classic protocol's state machine (Kafka's `GroupMetadata`). Pure state: the
//! coordinator does the I/O and hands the clock in.

use std::collections::{BTreeMap, BTreeSet, HashMap};

use bytes::Bytes;
use futures_channel::oneshot;
use kafka_protocol::messages::join_group_response::JoinGroupResponseMember;
use kafka_protocol::messages::{
    ConsumerProtocolSubscription, JoinGroupResponse, SyncGroupResponse,
};
use kafka_protocol::protocol::{Decodable, StrBytes};

use super::records::{GroupMetadataValue, MemberValue};
use crate::protocol::ResponseError;

/// The protocol type of Kafka's consumers; their metadata names the topics.
pub const CONSUMER_PROTOCOL_TYPE: &str = "consumer";

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum GroupState {
    Empty,
    PreparingRebalance,
    CompletingRebalance,
    Stable,
    Dead,
}

impl GroupState {
    /// The names Kafka's tools print and ListGroups filters on.
    pub fn name(self) -> &'static str {
        match self {
            GroupState::Empty => "Empty",
            GroupState::PreparingRebalance => "PreparingRebalance",
            GroupState::CompletingRebalance => "CompletingRebalance",
            GroupState::Stable => "Stable",
            GroupState::Dead => "Dead",
        }
    }
}

pub struct Member {
    pub member_id: String,
    pub group_instance_id: Option<String>,
    pub client_id: String,
    pub client_host: String,
    pub rebalance_timeout_ms: i32,
    pub session_timeout_ms: i32,
    /// (protocol name, metadata), in the member's order of preference.
    pub protocols: Vec<(String, Bytes)>,
    pub assignment: Bytes,
    pub awaiting_join: Option<oneshot::Sender<JoinGroupResponse>>,
    pub awaiting_sync: Option<oneshot::Sender<SyncGroupResponse>>,
    pub last_heartbeat_ms: i64,
}

impl Member {
    fn metadata(&self, protocol: &str) -> Bytes {
        self.protocols
            .iter()
            .find(|(name, _)| name == protocol)
            .map(|(_, metadata)| metadata.clone())
            .unwrap_or_default()
    }

    /// Kafka's `shouldKeepAlive`: a member waiting on a join or sync answer is
    /// alive; otherwise it must have heartbeated within its session timeout.
    pub fn has_expired(&self, now_ms: i64) -> bool {
        self.awaiting_join.is_none()
            && self.awaiting_sync.is_none()
            && now_ms >= self.last_heartbeat_ms + self.session_timeout_ms as i64
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct CommittedOffset {
    pub offset: i64,
    pub leader_epoch: i32,
    pub metadata: String,
    pub commit_timestamp_ms: i64,
    pub expire_timestamp_ms: Option<i64>,
}

/// `group.initial.rebalance.delay.ms` in progress: the first join into an
/// empty group waits, and waits again while new members keep arriving.
pub struct InitialDelay {
    pub deadline_ms: i64,
    pub remaining_ms: i64,
}

pub struct Group {
    pub group_id: String,
    /// The `__consumer_offsets` partition holding it.
    pub partition: i32,
    pub state: GroupState,
    pub state_timestamp_ms: i64,
    pub generation_id: i32,
    pub protocol_type: Option<String>,
    pub protocol_name: Option<String>,
    pub leader_id: Option<String>,
    pub members: BTreeMap<String, Member>,
    /// group.instance.id -> member id (KIP-345).
    pub static_members: HashMap<String, String>,
    /// Member ids handed out with MEMBER_ID_REQUIRED (KIP-394), with the
    /// deadline by which they must join with it.
    pub pending_members: HashMap<String, i64>,
    pub offsets: HashMap<(String, i32), CommittedOffset>,
    /// Commits being appended, per partition: expiry and deletion leave
    /// those partitions (and the group) alone until they land.
    pub pending_offset_commits: HashMap<(String, i32), usize>,
    /// When a PreparingRebalance gives up on members that did not rejoin.
    pub rebalance_deadline_ms: i64,
    pub initial_delay: Option<InitialDelay>,
    pub new_member_added: bool,
}

impl Group {
    pub fn new(group_id: String, partition: i32, now_ms: i64) -> Self {
        Self {
            group_id,
            partition,
            state: GroupState::Empty,
            state_timestamp_ms: now_ms,
            generation_id: 0,
            protocol_type: None,
            protocol_name: None,
            leader_id: None,
            members: BTreeMap::new(),
            static_members: HashMap::new(),
            pending_members: HashMap::new(),
            offsets: HashMap::new(),
            pending_offset_commits: HashMap::new(),
            rebalance_deadline_ms: 0,
            initial_delay: None,
            new_member_added: false,
        }
    }

    /// A group as its last metadata record left it: Stable with its members
    /// (who must heartbeat within their session timeout), or Empty.
    pub fn loaded(
        group_id: String,
        partition: i32,
        value: GroupMetadataValue,
        now_ms: i64,
    ) -> Self {
        let mut group = Group::new(group_id, partition, now_ms);
        group.generation_id = value.generation;
        group.protocol_type = (!value.protocol_type.is_empty()).then_some(value.protocol_type);
        group.protocol_name = value.protocol;
        group.leader_id = value.leader;
        if value.current_state_timestamp_ms >= 0 {
            group.state_timestamp_ms = value.current_state_timestamp_ms;
        }
        let protocol = group.protocol_name.clone().unwrap_or_default();
        for member in value.members {
            if let Some(instance) = &member.group_instance_id {
                group
                    .static_members
                    .insert(instance.clone(), member.member_id.clone());
            }
            group.members.insert(
                member.member_id.clone(),
                Member {
                    member_id: member.member_id,
                    group_instance_id: member.group_instance_id,
                    client_id: member.client_id,
                    client_host: member.client_host,
                    rebalance_timeout_ms: member.rebalance_timeout_ms,
                    session_timeout_ms: member.session_timeout_ms,
                    protocols: vec![(protocol.clone(), member.subscription)],
                    assignment: member.assignment,
                    awaiting_join: None,
                    awaiting_sync: None,
                    last_heartbeat_ms: now_ms,
                },
            );
        }
        group.state = if group.members.is_empty() {
            GroupState::Empty
        } else {
            GroupState::Stable
        };
        group
    }

    /// The record Kafka writes for this group's current generation.
    pub fn metadata_value(&self) -> GroupMetadataValue {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        GroupMetadataValue {
            protocol_type: self.protocol_type.clone().unwrap_or_default(),
            generation: self.generation_id,
            protocol: self.protocol_name.clone(),
            leader: self.leader_id.clone(),
            current_state_timestamp_ms: self.state_timestamp_ms,
            members: self
                .members
                .values()
                .map(|member| MemberValue {
                    member_id: member.member_id.clone(),
                    group_instance_id: member.group_instance_id.clone(),
                    client_id: member.client_id.clone(),
                    client_host: member.client_host.clone(),
                    rebalance_timeout_ms: member.rebalance_timeout_ms,
                    session_timeout_ms: member.session_timeout_ms,
                    subscription: member.metadata(&protocol),
                    assignment: member.assignment.clone(),
                })
                .collect(),
        }
    }

    pub fn is(&self, state: GroupState) -> bool {
        self.state == state
    }

    pub fn transition_to(&mut self, state: GroupState, now_ms: i64) {
        self.state = state;
        self.state_timestamp_ms = now_ms;
    }

    /// Kafka's `validateCurrentMember`: a static member is checked by its
    /// instance (unknown: UNKNOWN_MEMBER_ID; another id holds it:
    /// FENCED_INSTANCE_ID), a dynamic one by its id.
    pub fn validate_current_member(
        &self,
        member_id: &str,
        instance: Option<&str>,
    ) -> Result<(), ResponseError> {
        match instance {
            Some(instance) => match self.static_members.get(instance) {
                None => Err(ResponseError::UnknownMemberId),
                Some(known) if known != member_id => Err(ResponseError::FencedInstanceId),
                Some(_) => Ok(()),
            },
            None if self.members.contains_key(member_id) => Ok(()),
            None => Err(ResponseError::UnknownMemberId),
        }
    }

    /// Protocols every current member supports, in the first member's order.
    fn candidate_protocols(&self) -> Vec<String> {
        let mut members = self.members.values();
        let Some(first) = members.next() else {
            return Vec::new();
        };
        let rest: Vec<&Member> = members.collect();
        first
            .protocols
            .iter()
            .map(|(name, _)| name.clone())
            .filter(|name| {
                rest.iter()
                    .all(|m| m.protocols.iter().any(|(other, _)| other == name))
            })
            .collect()
    }

    /// Kafka's `supportsProtocols`: a joining member must share the group's
    /// protocol type and one protocol every current member supports.
    pub fn supports_protocols(&self, protocol_type: &str, protocols: &[(String, Bytes)]) -> bool {
        if self.members.is_empty() {
            return !protocol_type.is_empty() && !protocols.is_empty();
        }
        let candidates = self.candidate_protocols();
        self.protocol_type.as_deref() == Some(protocol_type)
            && protocols.iter().any(|(name, _)| candidates.contains(name))
    }

    /// Each member votes for its most preferred candidate; most votes wins,
    /// ties to the earlier candidate.
    pub fn select_protocol(&self) -> Option<String> {
        let candidates = self.candidate_protocols();
        let mut votes = vec![0usize; candidates.len()];
        for member in self.members.values() {
            if let Some(choice) = member
                .protocols
                .iter()
                .find_map(|(name, _)| candidates.iter().position(|c| c == name))
            {
                votes[choice] += 1;
            }
        }
        let best = votes.iter().max()?;
        candidates
            .into_iter()
            .zip(votes.iter())
            .find(|(_, v)| *v == best)
            .map(|(name, _)| name)
    }

    pub fn add_member(&mut self, member: Member) {
        if self.leader_id.is_none() {
            self.leader_id = Some(member.member_id.clone());
        }
        if let Some(instance) = &member.group_instance_id {
            self.static_members
                .insert(instance.clone(), member.member_id.clone());
        }
        self.pending_members.remove(&member.member_id);
        self.members.insert(member.member_id.clone(), member);
    }

    /// Removes a member; whoever waits on its join or sync is told it is gone.
    pub fn remove_member(&mut self, member_id: &str) -> Option<Member> {
        let mut member = self.members.remove(member_id)?;
        if let Some(instance) = &member.group_instance_id {
            if self.static_members.get(instance).map(String::as_str) == Some(member_id) {
                self.static_members.remove(instance);
            }
        }
        if let Some(reply) = member.awaiting_join.take() {
            let _ = reply.send(join_error(ResponseError::UnknownMemberId, member_id));
        }
        if let Some(reply) = member.awaiting_sync.take() {
            let _ = reply.send(sync_error(ResponseError::UnknownMemberId));
        }
        if self.leader_id.as_deref() == Some(member_id) {
            self.leader_id = self.members.keys().next().cloned();
        }
        Some(member)
    }

    pub fn max_rebalance_timeout_ms(&self) -> i64 {
        self.members
            .values()
            .map(|m| m.rebalance_timeout_ms as i64)
            .max()
            .unwrap_or(0)
    }

    pub fn all_members_joined(&self) -> bool {
        self.pending_members.is_empty() && self.members.values().all(|m| m.awaiting_join.is_some())
    }

    /// Starts a rebalance: pending syncs fail with REBALANCE_IN_PROGRESS, and
    /// the join phase gets its deadline (the initial delay for an empty group).
    pub fn prepare_rebalance(&mut self, initial_delay_ms: i64, now_ms: i64) {
        assert!(matches!(
            self.state,
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance
        ));
        if self.is(GroupState::CompletingRebalance) {
            for member in self.members.values_mut() {
                member.assignment = Bytes::new();
                if let Some(reply) = member.awaiting_sync.take() {
                    member.last_heartbeat_ms = now_ms;
                    let _ = reply.send(sync_error(ResponseError::RebalanceInProgress));
                }
            }
        }
        let rebalance_timeout_ms = self.max_rebalance_timeout_ms();
        self.initial_delay =
            (self.is(GroupState::Empty) && initial_delay_ms > 0).then(|| InitialDelay {
                deadline_ms: now_ms + initial_delay_ms,
                remaining_ms: (rebalance_timeout_ms - initial_delay_ms).max(0),
            });
        self.rebalance_deadline_ms = now_ms + rebalance_timeout_ms;
        self.transition_to(GroupState::PreparingRebalance, now_ms);
    }

    pub fn maybe_prepare_rebalance(&mut self, initial_delay_ms: i64, now_ms: i64) {
        if matches!(
            self.state,
            GroupState::Empty | GroupState::Stable | GroupState::CompletingRebalance
        ) {
            self.prepare_rebalance(initial_delay_ms, now_ms);
        }
    }

    /// Whether the join phase can end now: every member rejoined (or, with
    /// `force`, the deadline passed), and no initial delay is running.
    pub fn join_can_complete(&self, now_ms: i64) -> bool {
        self.is(GroupState::PreparingRebalance)
            && self.initial_delay.is_none()
            && (self.all_members_joined() || now_ms >= self.rebalance_deadline_ms)
    }

    /// Ends the join phase (Kafka's `onCompleteJoin`): dynamic members that
    /// did not rejoin are dropped, a new generation starts, and every waiting
    /// member gets its answer (the leader gets everyone's metadata). Returns
    /// false when no member rejoined yet only static members remain: the join
    /// phase then waits again, as Kafka's does.
    pub fn complete_join(&mut self, now_ms: i64) -> bool {
        assert!(self.is(GroupState::PreparingRebalance));
        let not_rejoined: Vec<String> = self
            .members
            .values()
            .filter(|m| m.awaiting_join.is_none() && m.group_instance_id.is_none())
            .map(|m| m.member_id.clone())
            .collect();
        for member_id in not_rejoined {
            self.remove_member(&member_id);
        }
        self.pending_members.clear();
        let leader_rejoined = self
            .leader_id
            .as_ref()
            .and_then(|id| self.members.get(id))
            .is_some_and(|m| m.awaiting_join.is_some());
        if !leader_rejoined {
            self.leader_id = self
                .members
                .values()
                .find(|m| m.awaiting_join.is_some())
                .map(|m| m.member_id.clone());
        }
        if self.leader_id.is_none() && !self.members.is_empty() {
            self.rebalance_deadline_ms = now_ms + self.max_rebalance_timeout_ms();
            return false;
        }
        self.generation_id += 1;
        self.initial_delay = None;
        self.new_member_added = false;
        if self.members.is_empty() {
            self.protocol_name = None;
            self.transition_to(GroupState::Empty, now_ms);
            return true;
        }
        self.protocol_name = self.select_protocol();
        self.transition_to(GroupState::CompletingRebalance, now_ms);
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let leader = self.leader_id.clone().unwrap_or_default();
        let everyone: Vec<JoinGroupResponseMember> = self
            .members
            .values()
            .map(|m| {
                JoinGroupResponseMember::default()
                    .with_member_id(StrBytes::from_string(m.member_id.clone()))
                    .with_group_instance_id(m.group_instance_id.clone().map(StrBytes::from_string))
                    .with_metadata(m.metadata(&protocol))
            })
            .collect();
        let (generation, protocol_type) = (self.generation_id, self.protocol_type.clone());
        for member in self.members.values_mut() {
            member.last_heartbeat_ms = now_ms;
            let Some(reply) = member.awaiting_join.take() else {
                continue;
            };
            let members = if member.member_id == leader {
                everyone.clone()
            } else {
                Vec::new()
            };
            let _ = reply.send(
                JoinGroupResponse::default()
                    .with_generation_id(generation)
                    .with_protocol_type(protocol_type.clone().map(StrBytes::from_string))
                    .with_protocol_name(Some(StrBytes::from_string(protocol.clone())))
                    .with_leader(StrBytes::from_string(leader.clone()))
                    .with_member_id(StrBytes::from_string(member.member_id.clone()))
                    .with_members(members),
            );
        }
        true
    }

    /// The answer to a member rejoining a group whose generation stands: the
    /// current generation, with everyone's metadata for the leader.
    pub fn current_join_response(&self, member_id: &str) -> JoinGroupResponse {
        let protocol = self.protocol_name.clone().unwrap_or_default();
        let is_leader = self.leader_id.as_deref() == Some(member_id);
        let members = if is_leader {
            self.members
                .values()
                .map(|m| {
                    JoinGroupResponseMember::default()
                        .with_member_id(StrBytes::from_string(m.member_id.clone()))
                        .with_group_instance_id(
                            m.group_instance_id.clone().map(StrBytes::from_string),
                        )
                        .with_metadata(m.metadata(&protocol))
                })
                .collect()
        } else {
            Vec::new()
        };
        JoinGroupResponse::default()
            .with_generation_id(self.generation_id)
            .with_protocol_type(self.protocol_type.clone().map(StrBytes::from_string))
            .with_protocol_name(self.protocol_name.clone().map(StrBytes::from_string))
            .with_leader(StrBytes::from_string(
                self.leader_id.clone().unwrap_or_default(),
            ))
            .with_member_id(StrBytes::from_string(member_id.to_owned()))
            .with_members(members)
    }

    /// Topics the members subscribe to, when they speak the consumer protocol
    /// and their metadata parses; None when it cannot be known.
    pub fn subscribed_topics(&self) -> Option<BTreeSet<String>> {
        if self.protocol_type.as_deref() != Some(CONSUMER_PROTOCOL_TYPE) {
            return None;
        }
        let protocol = self.protocol_name.clone()?;
        let mut topics = BTreeSet::new();
        for member in self.members.values() {
            let mut metadata = member.metadata(&protocol);
            if metadata.len() < 2 {
                return None;
            }
            let version = i16::from_be_bytes([metadata[0], metadata[1]]);
            let _ = bytes::Buf::get_i16(&mut metadata);
            let subscription =
                ConsumerProtocolSubscription::decode(&mut metadata, version.clamp(0, 3)).ok()?;
            topics.extend(subscription.topics.iter().map(|t| t.to_string()));
        }
        Some(topics)
    }

    /// Offsets past `offsets.retention.minutes` (Kafka's KIP-211 rules): an
    /// empty consumer group's once it has been empty that long; a group of
    /// standalone committers' per commit; an active consumer group's only for
    /// topics no member subscribes to. An explicit expire timestamp wins.
    pub fn expired_offsets(&self, retention_ms: i64, now_ms: i64) -> Vec<(String, i32)> {
        if matches!(
            self.state,
            GroupState::PreparingRebalance | GroupState::CompletingRebalance
        ) {
            return Vec::new();
        }
        let subscribed = self.subscribed_topics();
        let base = |offset: &CommittedOffset| -> Option<i64> {
            match (&self.protocol_type, self.state) {
                (Some(_), GroupState::Empty) => Some(self.state_timestamp_ms),
                (None, _) => Some(offset.commit_timestamp_ms),
                (Some(_), GroupState::Stable) if subscribed.is_some() => {
                    Some(offset.commit_timestamp_ms)
                }
                _ => None,
            }
        };
        self.offsets
            .iter()
            .filter(|(key, _)| !self.pending_offset_commits.contains_key(*key))
            .filter(|((topic, _), offset)| {
                if self.is(GroupState::Stable)
                    && subscribed.as_ref().is_some_and(|s| s.contains(topic))
                {
                    return false;
                }
                match offset.expire_timestamp_ms {
                    Some(expire) => now_ms >= expire,
                    None => base(offset).is_some_and(|base| now_ms >= base + retention_ms),
                }
            })
            .map(|(key, _)| key.clone())
            .collect()
    }
}

pub fn join_error(error: ResponseError, member_id: &str) -> JoinGroupResponse {
    JoinGroupResponse::default()
        .with_error_code(error.code())
        .with_generation_id(-1)
        .with_member_id(StrBytes::from_string(member_id.to_owned()))
}

pub fn sync_error(error: ResponseError) -> SyncGroupResponse {
    SyncGroupResponse::default().with_error_code(error.code())
}

#[cfg(test)]
mod tests {
    use super::*;

    fn member(id: &str, protocols: &[&str]) -> (Member, oneshot::Receiver<JoinGroupResponse>) {
        let (reply, answer) = oneshot::channel();
        let member = Member {
            member_id: id.into(),
            group_instance_id: None,
            client_id: "c".into(),
            client_host: "/127.0.0.1".into(),
            rebalance_timeout_ms: 1000,
            session_timeout_ms: 500,
            protocols: protocols
                .iter()
                .map(|p| (p.to_string(), Bytes::from(p.to_string())))
                .collect(),
            assignment: Bytes::new(),
            awaiting_join: Some(reply),
            awaiting_sync: None,
            last_heartbeat_ms: 0,
        };
        (member, answer)
    }

    #[test]
    fn first_member_leads_and_gets_everyones_metadata() {
        let mut group = Group::new("g".into(), 0, 0);
        let (a, mut a_answer) = member("a", &["range", "roundrobin"]);
        let (b, mut b_answer) = member("b", &["roundrobin", "range"]);
        group.add_member(a);
        group.protocol_type = Some("consumer".into());
        group.prepare_rebalance(0, 0);
        assert!(!group.join_can_complete(0) || group.all_members_joined());
        group.add_member(b);
        assert!(group.join_can_complete(1));
        assert!(group.complete_join(1));
        assert!(group.is(GroupState::CompletingRebalance));
        let a_response = a_answer.try_recv().unwrap().unwrap();
        let b_response = b_answer.try_recv().unwrap().unwrap();
        assert_eq!(a_response.generation_id, 1);
        assert_eq!(a_response.leader.as_str(), "a");
        assert_eq!(a_response.members.len(), 2);
        assert!(b_response.members.is_empty());
        // One vote each: the tie goes to the first candidate, range.
        assert_eq!(a_response.protocol_name.unwrap().as_str(), "range");
    }

    #[test]
    fn members_that_do_not_rejoin_are_dropped_at_the_deadline() {
        let mut group = Group::new("g".into(), 0, 0);
        let (mut a, _a_answer) = member("a", &["range"]);
        let (mut b, _b_answer) = member("b", &["range"]);
        a.awaiting_join = None;
        b.awaiting_join = None;
        group.add_member(a);
        group.add_member(b);
        group.transition_to(GroupState::Stable, 0);
        group.prepare_rebalance(0, 0);
        let (b_again, mut b_answer) = member("b", &["range"]);
        group.members.insert("b".into(), b_again);
        assert!(!group.join_can_complete(999));
        assert!(group.join_can_complete(1000));
        assert!(group.complete_join(1000));
        assert_eq!(group.members.len(), 1);
        let response = b_answer.try_recv().unwrap().unwrap();
        assert_eq!(response.leader.as_str(), "b");
    }

    #[test]
    fn a_member_must_share_a_protocol_with_everyone() {
        let mut group = Group::new("g".into(), 0, 0);
        let (a, _answer) = member("a", &["range"]);
        group.add_member(a);
        group.protocol_type = Some("consumer".into());
        let range = vec![("range".to_string(), Bytes::new())];
        let sticky = vec![("sticky".to_string(), Bytes::new())];
        assert!(group.supports_protocols("consumer", &range));
        assert!(!group.supports_protocols("consumer", &sticky));
        assert!(!group.supports_protocols("connect", &range));
    }

    #[test]
    fn empty_consumer_groups_expire_offsets_after_retention() {
        let mut group = Group::new("g".into(), 0, 100);
        group.protocol_type = Some("consumer".into());
        group.offsets.insert(
            ("t".into(), 0),
            CommittedOffset {
                offset: 5,
                leader_epoch: -1,
                metadata: String::new(),
                commit_timestamp_ms: 0,
                expire_timestamp_ms: None,
            },
        );
        assert!(group.expired_offsets(1000, 1099).is_empty());
        assert_eq!(group.expired_offsets(1000, 1100), vec![("t".into(), 0)]);
    }
}
