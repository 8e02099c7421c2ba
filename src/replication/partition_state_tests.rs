use proptest::prelude::*;
use shards::log::LeaderEpochFileCache;

use super::*;

const LAG_MS: i64 = 30_000;

fn state(leader: i32, leader_epoch: i32, isr: &[i32]) -> LeaderAndIsr {
    LeaderAndIsr {
        leader,
        leader_epoch,
        partition_epoch: leader_epoch,
        isr: isr.to_vec(),
        replicas: vec![1, 2, 3],
        leader_recovery_state: RECOVERED,
    }
}

fn leader_of_three(log_end_offset: i64) -> PartitionState {
    let mut partition = PartitionState::new(1);
    let transition =
        partition.become_leader_or_follower(&state(1, 5, &[1, 2, 3]), log_end_offset, 0);
    assert_eq!(transition, Transition::NewEpoch);
    partition
}

#[test]
fn high_watermark_waits_for_every_isr_member() {
    let mut partition = leader_of_three(0);
    // Followers have not fetched under this epoch: nothing is committed.
    assert_eq!(partition.high_watermark(10, 0, 2, 1, LAG_MS), None);
    partition.update_follower_fetch_state(2, 10, 10, 1).unwrap();
    assert_eq!(partition.high_watermark(10, 0, 2, 1, LAG_MS), None);
    partition.update_follower_fetch_state(3, 4, 10, 1).unwrap();
    assert_eq!(partition.high_watermark(10, 0, 2, 1, LAG_MS), Some(4));
    assert_eq!(
        partition.high_watermark(10, 4, 2, 1, LAG_MS),
        None,
        "never back"
    );
}

#[test]
fn high_watermark_holds_below_min_isr() {
    // Followers out of the ISR that never fetched do not hold it back.
    let now_ms = 10 * LAG_MS;
    let mut partition = PartitionState::new(1);
    partition.become_leader_or_follower(&state(1, 1, &[1]), 0, now_ms);
    assert_eq!(partition.high_watermark(10, 0, 2, now_ms, LAG_MS), None);
    assert_eq!(partition.high_watermark(10, 0, 1, now_ms, LAG_MS), Some(10));
    // min.insync.replicas beyond the replication factor is the factor.
    let mut single = PartitionState::new(1);
    let mut one = state(1, 1, &[1]);
    one.replicas = vec![1];
    single.become_leader_or_follower(&one, 0, 0);
    assert_eq!(single.high_watermark(10, 0, 2, 0, LAG_MS), Some(10));
}

#[test]
fn lagging_member_is_shrunk_and_caught_up_one_expands() {
    let mut partition = leader_of_three(0);
    partition
        .update_follower_fetch_state(2, 100, 100, 1_000)
        .unwrap();
    partition
        .update_follower_fetch_state(3, 100, 100, 1_000)
        .unwrap();
    // Replica 3 stops fetching; 2 keeps up.
    partition
        .update_follower_fetch_state(2, 200, 200, 20_000)
        .unwrap();
    assert_eq!(partition.maybe_shrink_isr(200, 30_000, LAG_MS), None);
    assert_eq!(
        partition.maybe_shrink_isr(200, 31_001, LAG_MS),
        Some(vec![1, 2])
    );
    // While the shrink is pending, 3 still counts for the high watermark.
    assert_eq!(partition.maximal_isr(), &[1, 2, 3]);
    assert!(partition.on_isr_committed(LeaderAndIsr {
        partition_epoch: 6,
        isr: vec![1, 2],
        ..state(1, 5, &[1, 2])
    }));
    assert_eq!(
        partition.high_watermark(200, 100, 2, 31_001, LAG_MS),
        Some(200)
    );
    // 3 comes back: below the high watermark it stays out.
    partition
        .update_follower_fetch_state(3, 150, 200, 32_000)
        .unwrap();
    assert_eq!(partition.maybe_expand_isr(3, 200), None);
    partition
        .update_follower_fetch_state(3, 200, 200, 32_100)
        .unwrap();
    assert_eq!(partition.maybe_expand_isr(3, 200), Some(vec![1, 2, 3]));
    assert_eq!(partition.maximal_isr(), &[1, 2, 3]);
    assert_eq!(
        partition.maybe_expand_isr(3, 200),
        None,
        "one change in flight"
    );
}

#[test]
fn expansion_needs_the_epoch_start() {
    let mut partition = leader_of_three(50);
    partition.update_follower_fetch_state(2, 40, 50, 1).unwrap();
    let mut out = state(1, 5, &[1, 2]);
    out.partition_epoch = 6;
    partition.become_leader_or_follower(&out, 50, 1);
    // The high watermark (say 40) is reached, this epoch's start (50) is not.
    partition.update_follower_fetch_state(3, 45, 50, 2).unwrap();
    assert_eq!(partition.maybe_expand_isr(3, 40), None);
    partition.update_follower_fetch_state(3, 50, 50, 3).unwrap();
    assert_eq!(partition.maybe_expand_isr(3, 40), Some(vec![1, 2, 3]));
}

#[test]
fn stale_states_are_refused_and_newer_ones_taken() {
    let mut partition = leader_of_three(0);
    assert_eq!(
        partition.become_leader_or_follower(&state(1, 5, &[1]), 0, 0),
        Transition::Stale
    );
    assert_eq!(
        partition.become_leader_or_follower(&state(1, 4, &[1]), 0, 0),
        Transition::Stale
    );
    let mut newer = state(1, 5, &[1, 2]);
    newer.partition_epoch = 9;
    assert_eq!(
        partition.become_leader_or_follower(&newer, 0, 0),
        Transition::NewPartitionEpoch
    );
    assert_eq!(
        partition.become_leader_or_follower(&state(2, 6, &[2, 3]), 0, 0),
        Transition::NewEpoch
    );
    assert!(!partition.is_leader());
    assert_eq!(partition.followers().count(), 0);
    // An AlterPartition answer for an epoch gone is ignored.
    assert!(!partition.on_isr_committed(state(1, 5, &[1, 2, 3])));
}

#[test]
fn delayed_produce_completes_with_kafkas_errors() {
    let mut partition = leader_of_three(0);
    assert_eq!(partition.check_enough_replicas_reach_offset(10, 5, 2), None);
    assert_eq!(
        partition.check_enough_replicas_reach_offset(10, 10, 2),
        Some(Ok(()))
    );
    partition.become_leader_or_follower(
        &LeaderAndIsr {
            partition_epoch: 7,
            ..state(1, 5, &[1])
        },
        10,
        0,
    );
    assert_eq!(
        partition.check_enough_replicas_reach_offset(10, 10, 2),
        Some(Err(ResponseError::NotEnoughReplicasAfterAppend))
    );
    partition.become_leader_or_follower(&state(2, 6, &[2]), 10, 0);
    assert_eq!(
        partition.check_enough_replicas_reach_offset(10, 10, 2),
        Some(Err(ResponseError::NotLeaderOrFollower))
    );
}

#[test]
fn truncation_follows_the_leaders_epochs() {
    // The follower knows the leader's epoch: cut where both agree.
    assert_eq!(
        follower_truncation_offset(3, 120, Some((3, 150)), 150),
        (120, true)
    );
    // It does not: back to its own closest older epoch's end, then ask again.
    assert_eq!(
        follower_truncation_offset(3, 120, Some((2, 100)), 150),
        (100, false)
    );
    // It knows nothing of epochs: the leader's end.
    assert_eq!(follower_truncation_offset(3, 120, None, 150), (120, true));
    assert_eq!(follower_truncation_offset(3, 120, None, 90), (90, true));
}

/// A replica of the seeds' scenario: its log as one leader epoch per record,
/// its epoch cache, and its high watermark.
struct Replica {
    _dir: tempfile::TempDir,
    records: Vec<(i32, &'static str)>,
    epochs: LeaderEpochFileCache,
    high_watermark: i64,
}

impl Replica {
    fn new() -> Self {
        let dir = tempfile::tempdir().unwrap();
        let epochs = LeaderEpochFileCache::load(dir.path()).unwrap();
        Self {
            _dir: dir,
            records: Vec::new(),
            epochs,
            high_watermark: 0,
        }
    }
    fn log_end_offset(&self) -> i64 {
        self.records.len() as i64
    }
    fn append(&mut self, epoch: i32, record: &'static str) {
        self.epochs.assign(epoch, self.log_end_offset());
        self.records.push((epoch, record));
    }
    fn truncate_to(&mut self, offset: i64) {
        self.records.truncate(offset as usize);
        self.epochs.truncate_from_end(offset);
        self.high_watermark = self.high_watermark.min(offset);
    }
    /// One fetch from `leader` as Kafka's leader and follower handle it:
    /// diverging epochs truncate, otherwise the follower appends and learns
    /// the leader's high watermark.
    fn fetch_from(&mut self, leader: &Replica) {
        loop {
            let fetch_offset = self.log_end_offset();
            if let Some(last_fetched_epoch) = self.epochs.latest_epoch() {
                let (epoch, end) = leader
                    .epochs
                    .end_offset_for(last_fetched_epoch, leader.log_end_offset())
                    .unwrap();
                if epoch < last_fetched_epoch || end < fetch_offset {
                    let local = self.epochs.end_offset_for(epoch, fetch_offset);
                    let (offset, _) = follower_truncation_offset(epoch, end, local, fetch_offset);
                    self.truncate_to(offset);
                    continue;
                }
            }
            for &(epoch, record) in &leader.records[fetch_offset as usize..] {
                self.append(epoch, record);
            }
            self.high_watermark = leader.high_watermark.min(self.log_end_offset());
            return;
        }
    }
}

/// The seeds' scenario (KIP-101): B leads, A follows. Both have m1 and m2 and
/// B's high watermark covers m2 (acknowledged), but A restarts before its
/// next fetch tells it so. B dies and A leads. Truncating to the high
/// watermark on restart loses m2; with leader epochs nothing acknowledged is
/// lost, and B, back as a follower, keeps what A has.
fn seeds_scenario(truncate_to_high_watermark_on_restart: bool) -> (Vec<&'static str>, i64) {
    let (mut a, mut b) = (Replica::new(), Replica::new());
    b.append(0, "m1");
    a.fetch_from(&b);
    b.high_watermark = 1;
    b.append(0, "m2");
    a.fetch_from(&b); // A has m2; its high watermark is still 1
    b.high_watermark = 2; // m2 acknowledged to the producer
    assert_eq!(a.high_watermark, 1);
    // A restarts.
    if truncate_to_high_watermark_on_restart {
        let high_watermark = a.high_watermark;
        a.truncate_to(high_watermark);
    }
    // B dies; A leads in epoch 1 and takes a new record.
    a.epochs.assign(1, a.log_end_offset());
    a.append(1, "m3");
    a.high_watermark = a.log_end_offset();
    // B returns as A's follower.
    b.fetch_from(&a);
    assert_eq!(b.records, a.records, "replicas agree");
    let acknowledged = 2;
    (a.records.iter().map(|(_, r)| *r).collect(), acknowledged)
}

#[test]
fn seeds_scenario_loses_nothing_with_epochs() {
    let (records, acknowledged) = seeds_scenario(false);
    assert_eq!(records, ["m1", "m2", "m3"]);
    assert!(records.len() as i64 >= acknowledged);
}

#[test]
fn seeds_scenario_loses_m2_when_truncating_to_the_high_watermark() {
    let (records, _) = seeds_scenario(true);
    assert_eq!(records, ["m1", "m3"], "m2 was acknowledged, and it is gone");
}

#[derive(Debug, Clone)]
enum Op {
    Append(i64),
    Fetch { replica: i32, behind: i64 },
    Tick(i64),
    Shrink,
    Commit,
}

fn op() -> impl Strategy<Value = Op> {
    prop_oneof![
        (1..20i64).prop_map(Op::Append),
        (2..4i32, 0..30i64).prop_map(|(replica, behind)| Op::Fetch { replica, behind }),
        (1..20_000i64).prop_map(Op::Tick),
        Just(Op::Shrink),
        Just(Op::Commit),
    ]
}

proptest! {
    /// Against a model of the replicas' logs: the high watermark never goes
    /// back, never passes the leader's log end, and every member of the ISR
    /// (committed or being shrunk) holds every record below it. With
    /// min.insync.replicas=2 an ISR of the leader alone commits nothing.
    #[test]
    fn high_watermark_is_held_by_the_isr(ops in proptest::collection::vec(op(), 1..200)) {
        let mut partition = leader_of_three(0);
        let mut log_end_offset = 0i64;
        let mut high_watermark = 0i64;
        let mut now_ms = 0i64;
        let mut follower_log_end: BTreeMap<i32, i64> = BTreeMap::new();
        for op in ops {
            match op {
                Op::Append(count) => log_end_offset += count,
                Op::Fetch { replica, behind } => {
                    let known = follower_log_end.get(&replica).copied().unwrap_or(0);
                    let offset = (log_end_offset - behind).max(known);
                    partition.update_follower_fetch_state(replica, offset, log_end_offset, now_ms).unwrap();
                    follower_log_end.insert(replica, offset);
                    partition.maybe_expand_isr(replica, high_watermark);
                }
                Op::Tick(ms) => now_ms += ms,
                Op::Shrink => { partition.maybe_shrink_isr(log_end_offset, now_ms, LAG_MS); }
                Op::Commit => {
                    if let Some(pending) = partition.pending().cloned() {
                        let committed = partition.committed().clone();
                        partition.on_isr_committed(LeaderAndIsr {
                            partition_epoch: committed.partition_epoch + 1,
                            isr: pending.isr().to_vec(),
                            ..committed
                        });
                    }
                }
            }
            if let Some(moved) = partition.high_watermark(log_end_offset, high_watermark, 2, now_ms, LAG_MS) {
                prop_assert!(moved > high_watermark);
                high_watermark = moved;
            }
            prop_assert!(high_watermark <= log_end_offset);
            if partition.committed().isr.len() < 2 {
                prop_assert!(partition.high_watermark(log_end_offset, -1, 2, now_ms, LAG_MS).is_none());
            }
            for member in partition.committed().isr.iter().chain(partition.maximal_isr()) {
                if *member != 1 {
                    let held = follower_log_end.get(member).copied().unwrap_or(0);
                    prop_assert!(held >= high_watermark, "ISR member {} holds {} < {}", member, held, high_watermark);
                }
            }
        }
    }
}

#[test]
fn a_consumer_is_sent_to_an_in_sync_follower_of_its_rack_that_has_its_offset() {
    let mut partition = leader_of_three(10);
    partition.update_follower_fetch_state(2, 10, 10, 1).unwrap();
    partition.update_follower_fetch_state(3, 8, 10, 1).unwrap();
    assert_eq!(partition.preferred_read_replica(&[2, 3], 8), Some(2));
    assert_eq!(partition.preferred_read_replica(&[3], 8), Some(3));
    // Not there yet: the leader keeps the consumer.
    assert_eq!(partition.preferred_read_replica(&[3], 9), None);
    assert_eq!(partition.preferred_read_replica(&[], 0), None);
    // Out of the ISR: never chosen.
    partition.become_leader_or_follower(&state(1, 6, &[1, 3]), 10, 2);
    partition.update_follower_fetch_state(2, 10, 10, 3).unwrap();
    partition.update_follower_fetch_state(3, 10, 10, 3).unwrap();
    assert_eq!(partition.preferred_read_replica(&[2, 3], 10), Some(3));
    assert_eq!(partition.preferred_read_replica(&[2], 10), None);
}
