//! Kafka's leader election rules (PartitionStateMachine's offline election,
//! clean or unclean, ReplicaStateMachine's removal of dead replicas from the
//! ISR, the preferred replica election and the auto rebalance's choice of
//! partitions), as pure functions.

use kafka_protocol::ResponseError;

use crate::metadata::znodes::TopicPartitionStateZNode;
use crate::replication::partition_state::RECOVERING;

/// A partition's new leader, ISR and leader recovery state.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LeaderChange {
    pub leader: i32,
    pub isr: Vec<i32>,
    pub leader_recovery_state: i8,
    /// The leader came from outside the ISR: records only the ISR had are lost.
    pub unclean: bool,
}

/// A partition's leader and ISR after the live brokers changed; None when
/// nothing changes. A dead replica leaves the ISR, but the ISR is never
/// emptied: its last member stays, leaderless, until it returns. The leader
/// is the first replica, in assignment order, that is live and in the ISR;
/// with none and `allow_unclean` (`unclean.leader.election.enable`), the
/// first live replica, alone in the ISR and RECOVERING until it expands.
pub fn after_broker_change(
    replicas: &[i32],
    state: &TopicPartitionStateZNode,
    is_live: impl Fn(i32) -> bool,
    allow_unclean: bool,
) -> Option<LeaderChange> {
    let live_isr: Vec<i32> = state
        .isr
        .iter()
        .copied()
        .filter(|id| is_live(*id))
        .collect();
    let change = if live_isr.is_empty() {
        match replicas.iter().copied().find(|id| is_live(*id)) {
            Some(leader) if allow_unclean => LeaderChange {
                leader,
                isr: vec![leader],
                leader_recovery_state: RECOVERING,
                unclean: true,
            },
            _ => LeaderChange {
                leader: -1,
                isr: state.isr.clone(),
                leader_recovery_state: state.leader_recovery_state,
                unclean: false,
            },
        }
    } else {
        let leader = if live_isr.contains(&state.leader) {
            state.leader
        } else {
            replicas
                .iter()
                .copied()
                .find(|id| live_isr.contains(id))
                .unwrap_or(-1)
        };
        LeaderChange {
            leader,
            isr: live_isr,
            leader_recovery_state: state.leader_recovery_state,
            unclean: false,
        }
    };
    (change.leader != state.leader || change.isr != state.isr).then_some(change)
}

/// Kafka's ControlledShutdownPartitionLeaderElection and the stopping
/// replica's removal from the ISR: a partition `stopping` leads gets the
/// first replica, in assignment order, that is eligible and in the ISR (None
/// when there is none: it keeps its leader), and `stopping` leaves the ISR;
/// as a follower it leaves the ISR unless that would empty it.
pub fn on_controlled_shutdown(
    replicas: &[i32],
    state: &TopicPartitionStateZNode,
    stopping: i32,
    eligible: impl Fn(i32) -> bool,
) -> Option<LeaderChange> {
    let rest: Vec<i32> = state
        .isr
        .iter()
        .copied()
        .filter(|id| *id != stopping)
        .collect();
    let leader = if state.leader == stopping {
        replicas
            .iter()
            .copied()
            .find(|id| eligible(*id) && rest.contains(id))?
    } else if state.isr.contains(&stopping) && !rest.is_empty() {
        state.leader
    } else {
        return None;
    };
    Some(LeaderChange {
        leader,
        isr: rest,
        leader_recovery_state: state.leader_recovery_state,
        unclean: false,
    })
}

/// ElectLeaders' election type (Kafka's `ElectionType`).
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum ElectionType {
    Preferred,
    Unclean,
}

impl ElectionType {
    /// The request's `ElectionType` byte: 0 preferred, 1 unclean.
    pub fn from_byte(value: i8) -> Option<Self> {
        match value {
            0 => Some(Self::Preferred),
            1 => Some(Self::Unclean),
            _ => None,
        }
    }
}

/// An election an operator asked for (ElectLeaders), with Kafka's answers
/// for a partition that does not get one.
/// - Preferred: the first assigned replica leads if it is eligible and in
///   the ISR, which is unchanged; ELECTION_NOT_NEEDED when it already leads,
///   PREFERRED_LEADER_NOT_AVAILABLE otherwise.
/// - Unclean: only for a partition whose leader is gone; the offline
///   election with unclean allowed; ELECTION_NOT_NEEDED while the leader is
///   eligible, ELIGIBLE_LEADERS_NOT_AVAILABLE when no replica is live.
pub fn requested(
    election_type: ElectionType,
    replicas: &[i32],
    state: &TopicPartitionStateZNode,
    eligible: impl Fn(i32) -> bool,
) -> Result<LeaderChange, ResponseError> {
    match election_type {
        ElectionType::Preferred => {
            let preferred = *replicas.first().expect("a partition has replicas");
            if state.leader == preferred {
                return Err(ResponseError::ElectionNotNeeded);
            }
            if !eligible(preferred) || !state.isr.contains(&preferred) {
                return Err(ResponseError::PreferredLeaderNotAvailable);
            }
            Ok(LeaderChange {
                leader: preferred,
                isr: state.isr.clone(),
                leader_recovery_state: state.leader_recovery_state,
                unclean: false,
            })
        }
        ElectionType::Unclean => {
            if state.leader != -1 && eligible(state.leader) {
                return Err(ResponseError::ElectionNotNeeded);
            }
            after_broker_change(replicas, state, eligible, true)
                .filter(|change| change.leader != -1)
                .ok_or(ResponseError::EligibleLeadersNotAvailable)
        }
    }
}

/// Kafka's `checkAndTriggerAutoLeaderRebalance`: partitions (each an item
/// of `partitions` with its replicas and state) grouped by their preferred
/// replica; where more than `imbalance_percentage` percent of a broker's
/// group is led by another broker, those whose preferred replica can lead
/// now (eligible and in the ISR). Returns the indices into `partitions`.
pub fn auto_rebalance_candidates<'a>(
    partitions: impl IntoIterator<Item = (&'a [i32], &'a TopicPartitionStateZNode)>,
    imbalance_percentage: u32,
    eligible: impl Fn(i32) -> bool,
) -> Vec<usize> {
    // Preferred broker -> (partitions preferring it, the ones it does not lead).
    let mut by_preferred: std::collections::BTreeMap<i32, (usize, Vec<usize>)> = Default::default();
    let partitions: Vec<_> = partitions.into_iter().collect();
    for (index, (replicas, state)) in partitions.iter().enumerate() {
        let preferred = replicas[0];
        let (count, not_leading) = by_preferred.entry(preferred).or_default();
        *count += 1;
        if state.leader != preferred {
            not_leading.push(index);
        }
    }
    let mut candidates = Vec::new();
    for (count, not_leading) in by_preferred.into_values() {
        // ratio > percentage / 100, in integers.
        if not_leading.len() * 100 <= count * imbalance_percentage as usize {
            continue;
        }
        candidates.extend(not_leading.into_iter().filter(|index| {
            let (replicas, state) = partitions[*index];
            requested(ElectionType::Preferred, replicas, state, &eligible).is_ok()
        }));
    }
    candidates.sort_unstable();
    candidates
}

#[cfg(test)]
pub(super) mod tests {
    use super::*;
    use crate::replication::partition_state::RECOVERED;

    fn live(ids: &'static [i32]) -> impl Fn(i32) -> bool {
        move |id| ids.contains(&id)
    }

    /// A state at leader epoch 4, recovered.
    pub fn state(leader: i32, isr: &[i32]) -> TopicPartitionStateZNode {
        TopicPartitionStateZNode {
            leader,
            leader_epoch: 4,
            isr: isr.to_vec(),
            controller_epoch: 1,
            leader_recovery_state: RECOVERED,
        }
    }

    fn clean(leader: i32, isr: &[i32]) -> Option<LeaderChange> {
        Some(LeaderChange {
            leader,
            isr: isr.to_vec(),
            leader_recovery_state: RECOVERED,
            unclean: false,
        })
    }

    #[test]
    fn a_dead_leader_is_replaced_from_the_isr() {
        let change = after_broker_change(&[1, 2, 3], &state(1, &[1, 2, 3]), live(&[2, 3]), false);
        assert_eq!(change, clean(2, &[2, 3]));
        // The assignment's order, not the ISR's.
        let change = after_broker_change(&[3, 1, 2], &state(1, &[1, 2, 3]), live(&[2, 3]), false);
        assert_eq!(change, clean(3, &[2, 3]));
        // An ISR member is preferred even when unclean election is allowed.
        let change = after_broker_change(&[3, 1, 2], &state(1, &[1, 2]), live(&[2, 3]), true);
        assert_eq!(change, clean(2, &[2]));
    }

    #[test]
    fn the_isr_is_never_emptied_and_its_last_member_leads_when_it_returns() {
        let change = after_broker_change(&[1], &state(1, &[1]), live(&[2, 3]), false);
        assert_eq!(change, clean(-1, &[1]));
        // An out-of-sync replica is not elected while unclean election is off.
        let change = after_broker_change(&[1, 2], &state(1, &[1]), live(&[2]), false);
        assert_eq!(change, clean(-1, &[1]));
        let change = after_broker_change(&[1, 2], &state(-1, &[1]), live(&[1, 2]), false);
        assert_eq!(change, clean(1, &[1]));
    }

    #[test]
    fn an_unclean_election_takes_the_first_live_replica_alone_and_recovering() {
        let change = after_broker_change(&[1, 3, 2], &state(1, &[1]), live(&[2, 3]), true);
        let expected = LeaderChange {
            leader: 3,
            isr: vec![3],
            leader_recovery_state: RECOVERING,
            unclean: true,
        };
        assert_eq!(change, Some(expected));
        // An offline partition is elected once it is allowed (a config change).
        let change = after_broker_change(&[1, 2], &state(-1, &[1]), live(&[2]), true);
        assert!(change.is_some_and(|c| c.leader == 2 && c.unclean));
        // With no live replica at all it stays offline.
        let change = after_broker_change(&[1, 2], &state(-1, &[1]), live(&[3]), true);
        assert_eq!(change, None);
        // A recovering leader that goes on leading stays recovering.
        let mut recovering = state(2, &[2]);
        recovering.leader_recovery_state = RECOVERING;
        let change = after_broker_change(&[1, 2], &recovering, live(&[1, 2]), true);
        assert_eq!(change, None);
    }

    #[test]
    fn a_stopping_broker_hands_its_leaderships_to_the_rest_of_the_isr() {
        let change = on_controlled_shutdown(&[1, 2, 3], &state(1, &[1, 2, 3]), 1, live(&[2, 3]));
        assert_eq!(change, clean(2, &[2, 3]));
        // Only an eligible ISR member leads; without one the leader stays.
        let change = on_controlled_shutdown(&[1, 2, 3], &state(1, &[1, 3]), 1, live(&[2]));
        assert_eq!(change, None);
        // As a follower it leaves the ISR, but never empties it.
        let change = on_controlled_shutdown(&[1, 2], &state(2, &[2, 1]), 1, live(&[2]));
        assert_eq!(change, clean(2, &[2]));
        let change = on_controlled_shutdown(&[1, 2], &state(-1, &[1]), 1, live(&[2]));
        assert_eq!(change, None);
    }

    #[test]
    fn a_dead_follower_leaves_the_isr_and_nothing_else_changes() {
        let change = after_broker_change(&[1, 2, 3], &state(1, &[1, 2, 3]), live(&[1, 3]), false);
        assert_eq!(change, clean(1, &[1, 3]));
        let all = live(&[1, 2, 3]);
        assert_eq!(
            after_broker_change(&[1, 2, 3], &state(1, &[1, 2, 3]), all, false),
            None
        );
    }

    #[test]
    fn a_preferred_election_moves_leadership_to_the_first_replica_in_the_isr() {
        let change = requested(
            ElectionType::Preferred,
            &[1, 2, 3],
            &state(2, &[2, 3, 1]),
            live(&[1, 2, 3]),
        );
        assert_eq!(change, Ok(clean(1, &[2, 3, 1]).unwrap()));
        let already = requested(
            ElectionType::Preferred,
            &[1, 2, 3],
            &state(1, &[1, 2]),
            live(&[1, 2, 3]),
        );
        assert_eq!(already, Err(ResponseError::ElectionNotNeeded));
        // Out of the ISR, or not eligible (dead or stopping): not available.
        for (isr, eligible) in [
            (&[2, 3][..], live(&[1, 2, 3])),
            (&[2, 3, 1][..], live(&[2, 3])),
        ] {
            let change = requested(
                ElectionType::Preferred,
                &[1, 2, 3],
                &state(2, isr),
                eligible,
            );
            assert_eq!(change, Err(ResponseError::PreferredLeaderNotAvailable));
        }
    }

    #[test]
    fn an_unclean_election_is_for_partitions_without_a_live_leader() {
        let led = requested(
            ElectionType::Unclean,
            &[1, 2],
            &state(1, &[1]),
            live(&[1, 2]),
        );
        assert_eq!(led, Err(ResponseError::ElectionNotNeeded));
        let change = requested(ElectionType::Unclean, &[1, 2], &state(-1, &[1]), live(&[2]));
        assert!(change.is_ok_and(|c| c.leader == 2 && c.unclean && c.isr == [2]));
        // A leader whose broker is dead and not yet replaced is elected cleanly.
        let change = requested(
            ElectionType::Unclean,
            &[1, 2],
            &state(1, &[1, 2]),
            live(&[2]),
        );
        assert_eq!(change, Ok(clean(2, &[2]).unwrap()));
        let none = requested(ElectionType::Unclean, &[1, 2], &state(-1, &[1]), live(&[3]));
        assert_eq!(none, Err(ResponseError::EligibleLeadersNotAvailable));
    }

    #[test]
    fn the_auto_rebalance_acts_on_brokers_over_the_imbalance_percentage() {
        // Broker 1 prefers 4 partitions and leads 2 (50%); broker 2 prefers
        // 10 and leads 9 (10%, not over 10%).
        let mut partitions = Vec::new();
        for leader in [1, 1, 2, 3] {
            partitions.push((vec![1, 2, 3], state(leader, &[1, 2, 3])));
        }
        for index in 0..10 {
            let leader = if index == 0 { 3 } else { 2 };
            partitions.push((vec![2, 3, 1], state(leader, &[1, 2, 3])));
        }
        // One of broker 1's is out of its ISR, so it cannot lead there yet.
        partitions[3].1.isr = vec![2, 3];
        let items = || partitions.iter().map(|(r, s)| (r.as_slice(), s));
        assert_eq!(
            auto_rebalance_candidates(items(), 10, live(&[1, 2, 3])),
            [2]
        );
        assert_eq!(
            auto_rebalance_candidates(items(), 9, live(&[1, 2, 3])),
            [2, 4]
        );
        assert!(auto_rebalance_candidates(items(), 10, live(&[2, 3])).is_empty());
        assert!(auto_rebalance_candidates(items(), 50, live(&[1, 2, 3])).is_empty());
    }
}
