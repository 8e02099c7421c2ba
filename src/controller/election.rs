//! Kafka's leader election rules for a partition whose brokers came or went
//! (PartitionStateMachine's offline election, ReplicaStateMachine's removal
//! of dead replicas from the ISR), as pure functions.

/// A partition's leader and ISR after the live brokers changed; None when
/// nothing changes. A dead replica leaves the ISR, but the ISR is never
/// emptied: its last member stays, leaderless, until it returns. The leader
/// is the first replica, in assignment order, that is live and in the ISR.
pub fn after_broker_change(
    replicas: &[i32],
    leader: i32,
    isr: &[i32],
    is_live: impl Fn(i32) -> bool,
) -> Option<(i32, Vec<i32>)> {
    let live_isr: Vec<i32> = isr.iter().copied().filter(|id| is_live(*id)).collect();
    let new_isr = if live_isr.is_empty() {
        isr.to_vec()
    } else {
        live_isr
    };
    let new_leader = if is_live(leader) && new_isr.contains(&leader) {
        leader
    } else {
        replicas
            .iter()
            .copied()
            .find(|id| is_live(*id) && new_isr.contains(id))
            .unwrap_or(-1)
    };
    (new_leader != leader || new_isr != isr).then_some((new_leader, new_isr))
}

/// Kafka's ControlledShutdownPartitionLeaderElection and the stopping
/// replica's removal from the ISR: a partition `stopping` leads gets the
/// first replica, in assignment order, that is eligible and in the ISR (None
/// when there is none: it keeps its leader), and `stopping` leaves the ISR;
/// as a follower it leaves the ISR unless that would empty it.
pub fn on_controlled_shutdown(
    replicas: &[i32],
    leader: i32,
    isr: &[i32],
    stopping: i32,
    eligible: impl Fn(i32) -> bool,
) -> Option<(i32, Vec<i32>)> {
    let rest: Vec<i32> = isr.iter().copied().filter(|id| *id != stopping).collect();
    if leader == stopping {
        let leader = replicas
            .iter()
            .copied()
            .find(|id| eligible(*id) && rest.contains(id))?;
        return Some((leader, rest));
    }
    (isr.contains(&stopping) && !rest.is_empty()).then_some((leader, rest))
}

#[cfg(test)]
mod tests {
    use super::*;

    fn live(ids: &'static [i32]) -> impl Fn(i32) -> bool {
        move |id| ids.contains(&id)
    }

    #[test]
    fn a_dead_leader_is_replaced_from_the_isr() {
        assert_eq!(
            after_broker_change(&[1, 2, 3], 1, &[1, 2, 3], live(&[2, 3])),
            Some((2, vec![2, 3]))
        );
        // The assignment's order, not the ISR's.
        assert_eq!(
            after_broker_change(&[3, 1, 2], 1, &[1, 2, 3], live(&[2, 3])),
            Some((3, vec![2, 3]))
        );
    }

    #[test]
    fn the_isr_is_never_emptied_and_its_last_member_leads_when_it_returns() {
        assert_eq!(
            after_broker_change(&[1], 1, &[1], live(&[2, 3])),
            Some((-1, vec![1]))
        );
        // An out-of-sync replica is not elected (that would be unclean).
        assert_eq!(
            after_broker_change(&[1, 2], 1, &[1], live(&[2])),
            Some((-1, vec![1]))
        );
        assert_eq!(
            after_broker_change(&[1, 2], -1, &[1], live(&[1, 2])),
            Some((1, vec![1]))
        );
    }

    #[test]
    fn a_stopping_broker_hands_its_leaderships_to_the_rest_of_the_isr() {
        assert_eq!(
            on_controlled_shutdown(&[1, 2, 3], 1, &[1, 2, 3], 1, live(&[2, 3])),
            Some((2, vec![2, 3]))
        );
        // Only an eligible ISR member leads; without one the leader stays.
        assert_eq!(
            on_controlled_shutdown(&[1, 2, 3], 1, &[1, 3], 1, live(&[2])),
            None
        );
        // As a follower it leaves the ISR, but never empties it.
        assert_eq!(
            on_controlled_shutdown(&[1, 2], 2, &[2, 1], 1, live(&[2])),
            Some((2, vec![2]))
        );
        assert_eq!(
            on_controlled_shutdown(&[1, 2], -1, &[1], 1, live(&[2])),
            None
        );
    }

    #[test]
    fn a_dead_follower_leaves_the_isr_and_nothing_else_changes() {
        assert_eq!(
            after_broker_change(&[1, 2, 3], 1, &[1, 2, 3], live(&[1, 3])),
            Some((1, vec![1, 3]))
        );
        assert_eq!(
            after_broker_change(&[1, 2, 3], 1, &[1, 2, 3], live(&[1, 2, 3])),
            None
        );
    }
}
