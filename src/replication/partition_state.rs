//! The rules of Kafka's `Partition` without its log: the leader and ISR the
//! controller last gave, the ISR change in flight (Kafka's
//! CommittedPartitionState, PendingExpandIsr, PendingShrinkIsr), and on a
//! leader each follower's state as its fetches report it. Pure: the log's
//! offsets and the clock are handed in, so the high watermark, ISR and epoch
//! rules are tested without a log or a socket.

use std::collections::BTreeMap;

use crate::protocol::ResponseError;

/// Kafka's `LeaderRecoveryState`: RECOVERING after an unclean election until
/// the leader's first ISR change commits.
pub const RECOVERED: i8 = 0;
pub const RECOVERING: i8 = 1;

/// What the controller says of a partition (LeaderAndIsr, an AlterPartition
/// answer).
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderAndIsr {
    pub leader: i32,
    pub leader_epoch: i32,
    /// The state znode's version: moves on every ISR change.
    pub partition_epoch: i32,
    pub isr: Vec<i32>,
    pub replicas: Vec<i32>,
    pub leader_recovery_state: i8,
}

/// A follower as its leader sees it (Kafka's `Replica`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct FollowerState {
    /// -1 until its first fetch under this leader epoch.
    pub log_end_offset: i64,
    pub last_caught_up_time_ms: i64,
    pub last_fetch_time_ms: i64,
    /// The leader's log end at the follower's last fetch.
    pub last_fetch_leader_log_end_offset: i64,
}

impl FollowerState {
    fn new(in_isr: bool, now_ms: i64) -> Self {
        Self {
            log_end_offset: -1,
            // An ISR member is given the benefit of the doubt from now.
            last_caught_up_time_ms: if in_isr { now_ms } else { 0 },
            last_fetch_time_ms: 0,
            last_fetch_leader_log_end_offset: -1,
        }
    }

    /// Kafka's `isCaughtUp`: at the leader's log end, or there within the lag.
    pub fn is_caught_up(&self, leader_log_end_offset: i64, now_ms: i64, max_lag_ms: i64) -> bool {
        self.log_end_offset == leader_log_end_offset
            || now_ms - self.last_caught_up_time_ms <= max_lag_ms
    }
}

/// An ISR the leader asked the controller for (AlterPartition), not yet
/// committed.
#[derive(Debug, Clone, PartialEq, Eq)]
pub enum PendingIsr {
    /// The proposed ISR adds a member: it counts for the high watermark at once.
    Expand(Vec<i32>),
    /// The proposed ISR drops members: they count until it commits.
    Shrink(Vec<i32>),
}

impl PendingIsr {
    #[cfg(test)]
    pub fn isr(&self) -> &[i32] {
        match self {
            PendingIsr::Expand(isr) | PendingIsr::Shrink(isr) => isr,
        }
    }
}

/// Why a state from the controller was not taken.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum Transition {
    /// Nothing newer than what this replica has.
    Stale,
    /// Taken; the leader epoch moved.
    NewEpoch,
    /// Taken: the same leader epoch, a newer partition epoch.
    NewPartitionEpoch,
}

#[derive(Debug, Clone)]
pub struct PartitionState {
    local_broker_id: i32,
    committed: LeaderAndIsr,
    pending: Option<PendingIsr>,
    /// On a leader, every other assigned replica; empty on a follower.
    followers: BTreeMap<i32, FollowerState>,
    /// The leader's log end when its epoch began: a follower joins the ISR
    /// only once it has reached it.
    leader_epoch_start_offset: i64,
}

impl PartitionState {
    /// A replica before the controller said anything of it.
    pub fn new(local_broker_id: i32) -> Self {
        Self {
            local_broker_id,
            committed: LeaderAndIsr {
                leader: -1,
                leader_epoch: -1,
                partition_epoch: -1,
                isr: Vec::new(),
                replicas: Vec::new(),
                leader_recovery_state: RECOVERED,
            },
            pending: None,
            followers: BTreeMap::new(),
            leader_epoch_start_offset: -1,
        }
    }

    pub fn committed(&self) -> &LeaderAndIsr {
        &self.committed
    }
    #[cfg(test)]
    pub fn pending(&self) -> Option<&PendingIsr> {
        self.pending.as_ref()
    }
    pub fn is_leader(&self) -> bool {
        self.committed.leader == self.local_broker_id
    }
    pub fn leader_epoch(&self) -> i32 {
        self.committed.leader_epoch
    }
    pub fn followers(&self) -> impl Iterator<Item = (i32, &FollowerState)> {
        self.followers.iter().map(|(id, state)| (*id, state))
    }

    /// The ISR the high watermark waits for: the committed one plus a member
    /// being added.
    pub fn maximal_isr(&self) -> &[i32] {
        match &self.pending {
            Some(PendingIsr::Expand(isr)) => isr,
            _ => &self.committed.isr,
        }
    }

    /// `min.insync.replicas`, but never more than there are replicas.
    pub fn effective_min_isr(&self, min_insync_replicas: i32) -> usize {
        (min_insync_replicas.max(1) as usize).min(self.committed.replicas.len().max(1))
    }

    /// Takes the controller's state if it is newer (a newer leader epoch, or a
    /// newer partition epoch in the same one), as Kafka's `makeLeader` and
    /// `makeFollower`. A new epoch on a leader starts at `log_end_offset` and
    /// forgets what followers reported under the old one.
    pub fn become_leader_or_follower(
        &mut self,
        state: &LeaderAndIsr,
        log_end_offset: i64,
        now_ms: i64,
    ) -> Transition {
        let transition = if state.leader_epoch > self.committed.leader_epoch {
            Transition::NewEpoch
        } else if state.leader_epoch == self.committed.leader_epoch
            && state.partition_epoch > self.committed.partition_epoch
        {
            Transition::NewPartitionEpoch
        } else {
            return Transition::Stale;
        };
        self.committed = state.clone();
        self.pending = None;
        if !self.is_leader() {
            self.followers.clear();
            return transition;
        }
        if transition == Transition::NewEpoch {
            self.leader_epoch_start_offset = log_end_offset;
            self.followers.clear();
        }
        let committed = &self.committed;
        let local = self.local_broker_id;
        self.followers
            .retain(|id, _| committed.replicas.contains(id));
        for &replica in committed.replicas.iter().filter(|id| **id != local) {
            self.followers
                .entry(replica)
                .or_insert_with(|| FollowerState::new(committed.isr.contains(&replica), now_ms));
        }
        transition
    }

    /// Kafka's RackAwareReplicaSelector over the leader's view: among
    /// `candidates` (followers in the consumer's rack), one in the ISR that
    /// has `fetch_offset`, the furthest along first, then the most recently
    /// caught up; None leaves the consumer with the leader.
    pub fn preferred_read_replica(&self, candidates: &[i32], fetch_offset: i64) -> Option<i32> {
        self.followers
            .iter()
            .filter(|(id, follower)| {
                candidates.contains(id)
                    && self.committed.isr.contains(id)
                    && follower.log_end_offset >= fetch_offset
            })
            .max_by_key(|(id, f)| (f.log_end_offset, f.last_caught_up_time_ms, -**id))
            .map(|(id, _)| *id)
    }

    /// Kafka's `updateFollowerFetchState`: a follower fetching from
    /// `fetch_offset` has everything before it.
    pub fn update_follower_fetch_state(
        &mut self,
        replica_id: i32,
        fetch_offset: i64,
        leader_log_end_offset: i64,
        now_ms: i64,
    ) -> Result<(), ResponseError> {
        let follower = self
            .followers
            .get_mut(&replica_id)
            .ok_or(ResponseError::UnknownLeaderEpoch)?;
        if fetch_offset >= leader_log_end_offset {
            follower.last_caught_up_time_ms = follower.last_caught_up_time_ms.max(now_ms);
        } else if fetch_offset >= follower.last_fetch_leader_log_end_offset {
            follower.last_caught_up_time_ms = follower
                .last_caught_up_time_ms
                .max(follower.last_fetch_time_ms);
        }
        follower.log_end_offset = fetch_offset;
        follower.last_fetch_time_ms = now_ms;
        follower.last_fetch_leader_log_end_offset = leader_log_end_offset;
        Ok(())
    }

    /// Kafka 3.7's `maybeIncrementLeaderHW`: the lowest log end among the
    /// maximal ISR and the followers caught up enough to join it, but nothing
    /// while the ISR is smaller than the effective `min.insync.replicas`.
    /// Some(new high watermark) when it moves forward.
    pub fn high_watermark(
        &self,
        leader_log_end_offset: i64,
        current_high_watermark: i64,
        min_insync_replicas: i32,
        now_ms: i64,
        max_lag_ms: i64,
    ) -> Option<i64> {
        if !self.is_leader()
            || self.committed.isr.len() < self.effective_min_isr(min_insync_replicas)
        {
            return None;
        }
        let maximal_isr = self.maximal_isr();
        let candidate = self
            .followers
            .iter()
            .filter(|(id, follower)| {
                maximal_isr.contains(id)
                    || follower.is_caught_up(leader_log_end_offset, now_ms, max_lag_ms)
            })
            .map(|(_, follower)| follower.log_end_offset)
            .fold(leader_log_end_offset, i64::min);
        (candidate > current_high_watermark).then_some(candidate)
    }

    /// Kafka's `maybeExpandIsr`: a follower not in the ISR that has reached
    /// the high watermark and this epoch's start joins it. Returns the ISR to
    /// propose, now pending.
    pub fn maybe_expand_isr(&mut self, replica_id: i32, high_watermark: i64) -> Option<Vec<i32>> {
        if self.pending.is_some() || !self.is_leader() || self.committed.isr.contains(&replica_id) {
            return None;
        }
        let follower = self.followers.get(&replica_id)?;
        if follower.log_end_offset < high_watermark
            || follower.log_end_offset < self.leader_epoch_start_offset
        {
            return None;
        }
        let mut isr = self.committed.isr.clone();
        isr.push(replica_id);
        self.pending = Some(PendingIsr::Expand(isr.clone()));
        Some(isr)
    }

    /// Kafka's `maybeShrinkIsr`: ISR members that have not caught up within
    /// `max_lag_ms` leave it. Returns the ISR to propose, now pending.
    pub fn maybe_shrink_isr(
        &mut self,
        leader_log_end_offset: i64,
        now_ms: i64,
        max_lag_ms: i64,
    ) -> Option<Vec<i32>> {
        if self.pending.is_some() || !self.is_leader() {
            return None;
        }
        let (lagging, isr): (Vec<i32>, Vec<i32>) =
            self.committed.isr.iter().copied().partition(|id| {
                self.followers
                    .get(id)
                    .is_some_and(|f| !f.is_caught_up(leader_log_end_offset, now_ms, max_lag_ms))
            });
        if lagging.is_empty() {
            return None;
        }
        assert!(
            isr.contains(&self.local_broker_id),
            "a leader never leaves its ISR"
        );
        self.pending = Some(PendingIsr::Shrink(isr.clone()));
        Some(isr)
    }

    /// The controller committed a proposed ISR (AlterPartition answered).
    /// Returns false when this replica has moved on since (a newer epoch).
    pub fn on_isr_committed(&mut self, state: LeaderAndIsr) -> bool {
        if state.leader_epoch != self.committed.leader_epoch
            || state.partition_epoch < self.committed.partition_epoch
        {
            return false;
        }
        self.committed = state;
        self.pending = None;
        true
    }

    /// The controller refused the proposal: the next check proposes again
    /// from the committed state.
    pub fn on_isr_refused(&mut self) {
        self.pending = None;
    }

    /// Kafka's `checkEnoughReplicasReachOffset` for a delayed produce:
    /// None while the high watermark is below `required_offset`.
    pub fn check_enough_replicas_reach_offset(
        &self,
        required_offset: i64,
        high_watermark: i64,
        min_insync_replicas: i32,
    ) -> Option<Result<(), ResponseError>> {
        if !self.is_leader() {
            return Some(Err(ResponseError::NotLeaderOrFollower));
        }
        if high_watermark < required_offset {
            return None;
        }
        if self.maximal_isr().len() < self.effective_min_isr(min_insync_replicas) {
            Some(Err(ResponseError::NotEnoughReplicasAfterAppend))
        } else {
            Some(Ok(()))
        }
    }
}

/// Where a follower truncates when its leader answers a fetch with
/// `DivergingEpoch` {`leader_epoch`, `leader_end_offset`} (Kafka's
/// AbstractFetcherThread): `local` is the follower's own end of that epoch
/// (`end_offset_for_epoch`). If the follower does not know the leader's epoch
/// it cuts back to the end of its own closest older one and asks again (the
/// boolean is false: not done); else to where both agree. Never to the high
/// watermark alone: that is what lost acknowledged records before KIP-101.
pub fn follower_truncation_offset(
    leader_epoch: i32,
    leader_end_offset: i64,
    local: Option<(i32, i64)>,
    log_end_offset: i64,
) -> (i64, bool) {
    match local {
        None => (leader_end_offset.min(log_end_offset), true),
        Some((epoch, end_offset)) if epoch != leader_epoch => {
            (end_offset.min(log_end_offset), false)
        }
        Some((_, end_offset)) => (leader_end_offset.min(end_offset).min(log_end_offset), true),
    }
}

#[cfg(test)]
#[path = "partition_state_tests.rs"]
mod tests;
