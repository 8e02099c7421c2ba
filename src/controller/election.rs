//! Kafka's leader election rules for a partition whose brokers came or went
//! (PartitionStateMachine's offline election, clean or unclean,
//! ReplicaStateMachine's removal of dead replicas from the ISR), as pure
//! functions.

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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::replication::partition_state::RECOVERED;

    fn live(ids: &'static [i32]) -> impl Fn(i32) -> bool {
        move |id| ids.contains(&id)
    }

    fn state(leader: i32, isr: &[i32]) -> TopicPartitionStateZNode {
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
}
