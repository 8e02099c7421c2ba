//! `ShardBalancer`: moves partitions between this broker's shards as the load
//! changes (Redpanda's continuous core balancing, by requests rather than
//! partition counts). A partition placed on one shard but asked for over
//! connections of another costs two cross-core wake-ups a request; at low
//! load those wake-ups are most of a request's cost. So every
//! `ringbroker.shard.balance.interval.ms` shard 0 asks each shard how busy
//! its thread was and where each partition it leads had its requests come
//! from, and:
//! - a broker using under `GATHER_START_MAX_BUSY` of a core in all fits on
//!   one shard: its partitions, its connections and its new partitions gather
//!   on the shard most of its requests already meet, and the other shards
//!   sleep, until the broker uses `GATHER_MAX_BUSY`;
//! - a shard over `SPREAD_MIN_BUSY` of a core gives partitions to the least
//!   busy shard, the costliest first, while that evens them, and connections
//!   to the shards holding fewest, the next to come to a request first (the
//!   busiest), until their numbers are even: what the kernel's spread gives
//!   a broker that never gathered;
//! - otherwise a partition whose requests come mostly from one other shard
//!   follows them there, if that shard stays under `AFFINITY_MAX_BUSY`.
//!
//! The gaps between the bounds keep a partition from going back and forth.
//! A move hands the partition's log from shard to shard inside the process
//! (`ReplicaManager::hand_off`): no copy, no flush, its idempotent producers
//! with it; requests that meet it on the way are sent on (`on_partitions`).
//! `__consumer_offsets` stays: the groups live with its partitions.

use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_util::future::join_all;
use shards::log::TopicPartition;
use tracing::{debug, info, warn};

use super::broker::ShardBroker;
use crate::replication::REQUEST_SHARE_UNITS;

/// A shard taking partitions for their requests' sake stays under this
/// much of a core.
const AFFINITY_MAX_BUSY: f64 = 0.5;

/// A broker whose shards together use less than this much of a core
/// gathers on one of them...
const GATHER_START_MAX_BUSY: f64 = 0.4;

/// ...and stays gathered until they use this much: load near one bound does
/// not gather and scatter it round after round.
const GATHER_MAX_BUSY: f64 = 0.5;

/// A shard busier than this gives partitions to the least busy one.
const SPREAD_MIN_BUSY: f64 = 0.8;

/// Of a partition's requests, the share from one other shard that makes it
/// follow them: 3/5 (a partition asked for from everywhere stays). A
/// request for several partitions counts a share of one for each.
const AFFINITY_MIN_SHARE: (u64, u64) = (3, 5);

/// A partition with fewer requests a second than this is not worth a move.
const MIN_REQUESTS_PER_SECOND_TO_MOVE: f64 = 1.0;

/// Moves in one round at most: each stops its partition for a moment.
const MAX_MOVES_PER_ROUND: usize = 16;

/// What one shard says in a round: its thread's CPU time so far, and for
/// each partition it leads the requests since the last round by the shard
/// they arrived on.
pub struct ShardTraffic {
    pub cpu_time: Duration,
    /// Connections open on the shard.
    pub connections: usize,
    pub partitions: Vec<(TopicPartition, Vec<u64>)>,
}

/// The CPU time of the calling thread (a shard's, user and kernel).
pub fn thread_cpu_time() -> Duration {
    let mut now = libc::timespec {
        tv_sec: 0,
        tv_nsec: 0,
    };
    // SAFETY: `now` is a valid timespec for the call to fill.
    let result = unsafe { libc::clock_gettime(libc::CLOCK_THREAD_CPUTIME_ID, &mut now) };
    assert_eq!(result, 0, "every Linux thread has a CPU clock");
    Duration::new(now.tv_sec as u64, now.tv_nsec as u32)
}

/// A partition's requests in a round, where it lives now.
#[derive(Debug, Clone)]
pub struct PartitionTraffic {
    pub tp: TopicPartition,
    pub shard: usize,
    /// Indexed by the shard the requests arrived on; may be shorter than
    /// the shard count (no requests from the rest). A request for several
    /// partitions counts a share of one for each.
    pub requests_by_shard: Vec<u64>,
}

impl PartitionTraffic {
    fn requests(&self) -> u64 {
        self.requests_by_shard.iter().sum()
    }
}

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct ShardMove {
    pub tp: TopicPartition,
    pub from: usize,
    pub to: usize,
}

/// One connection to hand from shard to shard.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct ConnectionMove {
    pub from: usize,
    pub to: usize,
}

/// What a round does.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct RoundPlan {
    pub moves: Vec<ShardMove>,
    /// The shard the broker gathers on: every connection of the others goes
    /// there. None: connections stay where they are, but for
    /// `connection_moves`.
    pub gather_on: Option<usize>,
    pub connection_moves: Vec<ConnectionMove>,
}

/// A round's plan: gathering on one shard while the whole broker uses less
/// than `GATHER_START_MAX_BUSY` of a core, or `GATHER_MAX_BUSY` once
/// gathered (the one meeting most requests; on a tie `gathered_on` if it
/// was already, else the one leading most partitions), else `plan_moves`
/// and `plan_connection_moves` (`connections` open, indexed by shard).
pub fn plan_round(
    busy: &[f64],
    connections: &[usize],
    partitions: &[PartitionTraffic],
    min_requests: u64,
    gathered_on: Option<usize>,
) -> RoundPlan {
    assert_eq!(busy.len(), connections.len());
    let gather_max_busy = match gathered_on {
        Some(_) => GATHER_MAX_BUSY,
        None => GATHER_START_MAX_BUSY,
    };
    if busy.iter().sum::<f64>() >= gather_max_busy {
        return RoundPlan {
            moves: plan_moves(busy, partitions, min_requests),
            gather_on: None,
            connection_moves: plan_connection_moves(busy, connections),
        };
    }
    // Each shard's share of the requests: those arriving on its connections
    // and those for its partitions; then (an idle broker) its partitions.
    let mut met = vec![0u64; busy.len()];
    let mut led = vec![0usize; busy.len()];
    for partition in partitions {
        met[partition.shard] += partition.requests();
        led[partition.shard] += 1;
        for (shard, requests) in partition.requests_by_shard.iter().enumerate() {
            met[shard] += requests;
        }
    }
    let home = (0..busy.len())
        .max_by_key(|shard| {
            (
                met[*shard],
                Some(*shard) == gathered_on,
                led[*shard],
                std::cmp::Reverse(*shard),
            )
        })
        .expect("a shard at least");
    let moves = partitions
        .iter()
        .filter(|partition| partition.shard != home && partition.requests() >= min_requests.max(1))
        .take(MAX_MOVES_PER_ROUND)
        .map(|partition| ShardMove {
            tp: partition.tp.clone(),
            from: partition.shard,
            to: home,
        })
        .collect();
    RoundPlan {
        moves,
        gather_on: Some(home),
        connection_moves: Vec::new(),
    }
}

/// Connections a shard over `SPREAD_MIN_BUSY` of a core hands to the shards
/// holding fewest (of those not over it), one at a time while that evens
/// the numbers; from each shard's busy share of a core and its open
/// connections. By number, not cost: which go is the shard's choice, the
/// next to come to a request, so the busiest.
pub fn plan_connection_moves(busy: &[f64], connections: &[usize]) -> Vec<ConnectionMove> {
    assert_eq!(busy.len(), connections.len());
    let mut open = connections.to_vec();
    let mut moves = Vec::new();
    let mut hot: Vec<usize> = (0..busy.len())
        .filter(|&shard| busy[shard] > SPREAD_MIN_BUSY)
        .collect();
    hot.sort_by(|a, b| busy[*b].total_cmp(&busy[*a]));
    for &from in &hot {
        while let Some(to) = (0..busy.len())
            .filter(|shard| !hot.contains(shard))
            .min_by_key(|&shard| (open[shard], shard))
            .filter(|&to| open[to] + 1 < open[from])
        {
            open[from] -= 1;
            open[to] += 1;
            moves.push(ConnectionMove { from, to });
        }
    }
    moves
}

/// The moves for a round, from each shard's busy share of a core (`busy`,
/// indexed by shard) and the partitions' requests, at least `min_requests`
/// for a partition to move. A partition's cost is its share of its shard's
/// requests times the shard's busy share: the network work of other shards'
/// partitions counts too, which errs toward fewer moves.
pub fn plan_moves(
    busy: &[f64],
    partitions: &[PartitionTraffic],
    min_requests: u64,
) -> Vec<ShardMove> {
    let mut requests_on = vec![0u64; busy.len()];
    for partition in partitions {
        assert!(partition.shard < busy.len());
        assert!(partition.requests_by_shard.len() <= busy.len());
        requests_on[partition.shard] += partition.requests();
    }
    let cost = |partition: &PartitionTraffic| match requests_on[partition.shard] {
        0 => 0.0,
        on_shard => busy[partition.shard] * partition.requests() as f64 / on_shard as f64,
    };
    let mut busy = busy.to_vec();
    let mut moves: Vec<ShardMove> = Vec::new();
    let mut moved = vec![false; partitions.len()];
    let apply = |index: usize,
                 to: usize,
                 busy: &mut [f64],
                 moved: &mut [bool],
                 moves: &mut Vec<ShardMove>| {
        let partition = &partitions[index];
        let cost = cost(partition);
        busy[partition.shard] -= cost;
        busy[to] += cost;
        moved[index] = true;
        moves.push(ShardMove {
            tp: partition.tp.clone(),
            from: partition.shard,
            to,
        });
    };
    let mut hot: Vec<usize> = (0..busy.len())
        .filter(|&shard| busy[shard] > SPREAD_MIN_BUSY)
        .collect();
    hot.sort_by(|a, b| busy[*b].total_cmp(&busy[*a]));
    for from in hot {
        let mut costliest: Vec<usize> = (0..partitions.len())
            .filter(|&i| partitions[i].shard == from && cost(&partitions[i]) > 0.0)
            .collect();
        costliest.sort_by(|a, b| cost(&partitions[*b]).total_cmp(&cost(&partitions[*a])));
        for index in costliest {
            let to = (0..busy.len())
                .min_by(|a, b| busy[*a].total_cmp(&busy[*b]))
                .expect("a shard at least");
            let cost = cost(&partitions[index]);
            if moves.len() < MAX_MOVES_PER_ROUND && busy[to] + cost <= busy[from] - cost {
                apply(index, to, &mut busy, &mut moved, &mut moves);
            }
        }
    }
    for (index, partition) in partitions.iter().enumerate() {
        if moved[index] || moves.len() >= MAX_MOVES_PER_ROUND {
            continue;
        }
        let requests = partition.requests();
        let Some((to, &from_there)) = partition
            .requests_by_shard
            .iter()
            .enumerate()
            .max_by_key(|(shard, requests)| (**requests, std::cmp::Reverse(*shard)))
        else {
            continue;
        };
        let (share_num, share_den) = AFFINITY_MIN_SHARE;
        let follows = to != partition.shard
            && requests >= min_requests.max(1)
            && from_there * share_den >= requests * share_num
            && busy[partition.shard] <= SPREAD_MIN_BUSY
            && busy[to] + cost(partition) < AFFINITY_MAX_BUSY;
        if follows {
            apply(index, to, &mut busy, &mut moved, &mut moves);
        }
    }
    moves
}

/// Starts the rounds on shard 0 of a broker with more than one shard.
pub fn start(broker: Rc<ShardBroker>) {
    let interval_ms = broker.config.shard_balance_interval_ms;
    let nr_shards = broker.config.cores.len();
    assert_eq!(broker.shard_id, 0, "one balancer a broker");
    if interval_ms == 0 || nr_shards < 2 {
        return;
    }
    let interval = Duration::from_millis(interval_ms);
    glommio::spawn_local(async move {
        // The clocks start with the shards, so the first round can move.
        let Some((mut since, first)) = ask_shards(&broker, nr_shards).await else {
            return;
        };
        let mut cpu_times: Vec<Duration> = first.iter().map(|t| t.cpu_time).collect();
        let mut gathered_on = None;
        loop {
            glommio::timer::sleep(interval).await;
            let Some((now, traffic)) = ask_shards(&broker, nr_shards).await else {
                return; // the shards are stopping
            };
            let elapsed = now.duration_since(since).as_secs_f64();
            let busy: Vec<f64> = traffic
                .iter()
                .zip(&cpu_times)
                .map(|(now, before)| now.cpu_time.saturating_sub(*before).as_secs_f64() / elapsed)
                .collect();
            cpu_times = traffic.iter().map(|t| t.cpu_time).collect();
            let connections: Vec<usize> = traffic.iter().map(|t| t.connections).collect();
            since = now;
            let partitions: Vec<PartitionTraffic> = traffic
                .into_iter()
                .enumerate()
                .flat_map(|(shard, traffic)| {
                    traffic
                        .partitions
                        .into_iter()
                        .map(move |(tp, requests_by_shard)| PartitionTraffic {
                            tp,
                            shard,
                            requests_by_shard,
                        })
                })
                .collect();
            let min_requests =
                (MIN_REQUESTS_PER_SECOND_TO_MOVE * elapsed * REQUEST_SHARE_UNITS as f64) as u64;
            debug!(?busy, ?connections, ?partitions, "shard balancing round");
            let plan = plan_round(&busy, &connections, &partitions, min_requests, gathered_on);
            if plan.gather_on != gathered_on {
                gathered_on = plan.gather_on;
                let placed = broker.control.gather_on_shard(gathered_on).await;
                if placed.is_err() || !send_connections(&broker, nr_shards, gathered_on).await {
                    return; // the shards are stopping
                }
                // Said once the control plane places new partitions there
                // (what tests/shard_balance.rs waits for).
                match gathered_on {
                    Some(shard) => info!(shard, ?busy, "gathering on one shard"),
                    None => info!(
                        ?busy,
                        "stopped gathering: the broker uses half a core or more"
                    ),
                }
            }
            for ShardMove { tp, from, to } in plan.moves {
                move_partition(&broker, tp, from, to).await;
            }
            if !plan.connection_moves.is_empty() {
                info!(?busy, ?connections, moves = ?plan.connection_moves, "evening out connections");
                if !send_some_connections(&broker, nr_shards, &plan.connection_moves).await {
                    return; // the shards are stopping
                }
            }
        }
    })
    .detach();
}

/// Every shard's `ShardTraffic`, and when it was asked; None once the shards
/// are stopping.
async fn ask_shards(
    broker: &Rc<ShardBroker>,
    nr_shards: usize,
) -> Option<(Instant, Vec<ShardTraffic>)> {
    let asked = (0..nr_shards).map(|shard| {
        broker
            .mesh()
            .invoke_on(shard, broker, |broker: Rc<ShardBroker>| async move {
                broker.shard_traffic()
            })
    });
    let traffic = join_all(asked).await.into_iter().collect::<Result<_, _>>();
    Some((Instant::now(), traffic.ok()?))
}

/// Has every shard but `gather_on` send its connections there (None: each
/// keeps its own); false once the shards are stopping.
async fn send_connections(
    broker: &Rc<ShardBroker>,
    nr_shards: usize,
    gather_on: Option<usize>,
) -> bool {
    let sent = (0..nr_shards).map(|shard| {
        let to = gather_on.filter(|home| *home != shard);
        broker
            .mesh()
            .invoke_on(shard, broker, move |broker: Rc<ShardBroker>| async move {
                broker.send_connections_to(to)
            })
    });
    join_all(sent).await.into_iter().all(|sent| sent.is_ok())
}

/// Has each shard hand its `moves` on, one connection each; false once the
/// shards are stopping.
async fn send_some_connections(
    broker: &Rc<ShardBroker>,
    nr_shards: usize,
    moves: &[ConnectionMove],
) -> bool {
    let sent = (0..nr_shards).filter_map(|shard| {
        let to: Vec<usize> = moves
            .iter()
            .filter(|m| m.from == shard)
            .map(|m| m.to)
            .collect();
        (!to.is_empty()).then(|| {
            broker
                .mesh()
                .invoke_on(shard, broker, move |broker: Rc<ShardBroker>| async move {
                    broker.send_some_connections_to(to)
                })
        })
    });
    join_all(sent).await.into_iter().all(|sent| sent.is_ok())
}

/// One move: shard `from` hands the partition's log off, the control plane
/// places it on `to` (which opens it before any other shard routes there),
/// or, failing that, `from` takes it back.
async fn move_partition(broker: &Rc<ShardBroker>, tp: TopicPartition, from: usize, to: usize) {
    let started = Instant::now();
    let handing = tp.clone();
    let handed_off = broker
        .mesh()
        .invoke_on(from, broker, move |broker: Rc<ShardBroker>| async move {
            broker.hand_off_partition(&handing).await
        })
        .await;
    match handed_off {
        Ok(Ok(())) => {}
        Ok(Err(error)) => {
            info!(partition = %tp, from, to, ?error, "partition not moved");
            return;
        }
        Err(_) => return, // the shards are stopping
    }
    match broker.control.move_replica_to_shard(tp.clone(), to).await {
        Ok(()) => info!(
            partition = %tp,
            from,
            to,
            took_ms = started.elapsed().as_millis() as u64,
            "moved partition to another shard"
        ),
        Err(error) => {
            warn!(partition = %tp, from, to, ?error, "cannot place the partition; its shard takes it back");
            let _ = broker
                .mesh()
                .invoke_on(from, broker, move |broker: Rc<ShardBroker>| async move {
                    broker.take_back_partition(&tp).await
                })
                .await;
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn traffic(partition: i32, shard: usize, requests_by_shard: &[u64]) -> PartitionTraffic {
        PartitionTraffic {
            tp: TopicPartition::new("t", partition),
            shard,
            requests_by_shard: requests_by_shard.to_vec(),
        }
    }

    fn moved(moves: &[ShardMove]) -> Vec<(i32, usize, usize)> {
        moves
            .iter()
            .map(|m| (m.tp.partition, m.from, m.to))
            .collect()
    }

    #[test]
    fn a_lightly_loaded_broker_gathers_on_the_shard_meeting_most_requests() {
        // A producer's connection on shard 0, a consumer's on shard 1, each
        // partition asked for from both; shard 0 meets a little more.
        let partitions = [
            traffic(0, 0, &[600, 400]),
            traffic(1, 1, &[600, 400]),
            traffic(2, 0, &[590, 410]),
            traffic(3, 1, &[610, 390]),
            traffic(4, 1, &[5]), // too few requests to be worth a move
        ];
        let plan = plan_round(&[0.15, 0.2], &[2, 1], &partitions, 10, None);
        assert_eq!(plan.gather_on, Some(0));
        assert_eq!(moved(&plan.moves), vec![(1, 1, 0), (3, 1, 0)]);
        // Gathered, it stays; an idle broker stays where it gathered.
        let gathered = [traffic(0, 0, &[1000]), traffic(1, 0, &[1000])];
        let plan = plan_round(&[0.3, 0.0], &[2, 0], &gathered, 10, Some(0));
        assert_eq!((plan.gather_on, plan.moves.len()), (Some(0), 0));
        assert_eq!(
            plan_round(&[0.0, 0.0], &[0, 0], &[], 10, Some(1)).gather_on,
            Some(1)
        );
        assert_eq!(
            plan_round(&[0.0, 0.0], &[0, 0], &[], 10, None).gather_on,
            Some(0)
        );
        // Restarted idle, it gathers where its partitions are.
        let idle = [traffic(0, 1, &[]), traffic(1, 1, &[]), traffic(2, 0, &[])];
        assert_eq!(
            plan_round(&[0.0, 0.0], &[0, 0], &idle, 10, None).gather_on,
            Some(1)
        );
    }

    #[test]
    fn a_busier_broker_stops_gathering() {
        let partitions = [traffic(0, 0, &[1000, 0]), traffic(1, 1, &[0, 1000])];
        let plan = plan_round(&[0.3, 0.3], &[1, 1], &partitions, 10, Some(0));
        assert_eq!(plan.gather_on, None);
        assert_eq!(plan.moves, plan_moves(&[0.3, 0.3], &partitions, 10));
        // Between the bounds it neither gathers nor scatters.
        let gathered = [traffic(0, 0, &[1000, 0]), traffic(1, 0, &[1000, 0])];
        let plan = plan_round(&[0.45, 0.0], &[2, 0], &gathered, 10, Some(0));
        assert_eq!((plan.gather_on, plan.moves.len()), (Some(0), 0));
        let plan = plan_round(&[0.25, 0.2], &[1, 1], &partitions, 10, None);
        assert_eq!(plan.gather_on, None);
        assert!(plan.connection_moves.is_empty());
    }

    #[test]
    fn a_hot_shard_evens_out_its_connections() {
        let spread = |busy: &[f64], open: &[usize]| -> Vec<(usize, usize)> {
            plan_connection_moves(busy, open)
                .iter()
                .map(|m| (m.from, m.to))
                .collect()
        };
        // Gathered while idle, then the load grew: half go, to the others.
        assert_eq!(spread(&[0.9, 0.1], &[5, 0]), vec![(0, 1), (0, 1)]);
        assert_eq!(
            spread(&[0.9, 0.0, 0.0], &[6, 0, 0]),
            vec![(0, 1), (0, 2), (0, 1), (0, 2)]
        );
        // Even already, or the others as busy: they stay.
        assert!(spread(&[0.9, 0.1], &[2, 1]).is_empty());
        assert!(spread(&[0.9, 0.85], &[6, 0]).is_empty());
        // Under the bound, a shard keeps what it holds.
        assert!(spread(&[0.7, 0.0], &[6, 0]).is_empty());
        // Through a round's plan, once the broker no longer gathers.
        let partitions = [traffic(0, 0, &[5000, 0])];
        let plan = plan_round(&[0.95, 0.05], &[3, 0], &partitions, 10, Some(0));
        assert_eq!(plan.gather_on, None);
        assert_eq!(
            plan.connection_moves,
            vec![ConnectionMove { from: 0, to: 1 }]
        );
    }

    #[test]
    fn partitions_follow_their_requests_while_the_shard_has_room() {
        // One producer's connection on shard 1; the partitions are split,
        // each of shard 0's costing 0.1 of a core.
        let partitions = [
            traffic(0, 0, &[0, 2000]),
            traffic(1, 1, &[0, 2000]),
            traffic(2, 0, &[0, 2000]),
            traffic(3, 1, &[0, 2000]),
        ];
        let moves = plan_moves(&[0.2, 0.3], &partitions, 10);
        assert_eq!(moved(&moves), vec![(0, 0, 1)]);
    }

    #[test]
    fn a_partition_asked_for_from_everywhere_or_rarely_stays() {
        let partitions = [
            traffic(0, 0, &[900, 1100]), // no shard asks for 3/5
            traffic(1, 0, &[0, 5]),      // too few requests
            traffic(2, 1, &[0, 700]),    // already there
        ];
        assert!(plan_moves(&[0.1, 0.1], &partitions, 10).is_empty());
    }

    #[test]
    fn a_partition_follows_three_fifths_of_its_requests() {
        // A producer on shard 0 (one partition a request) and a consumer on
        // shard 1 (four a fetch, each counting a quarter).
        let partitions = [traffic(0, 1, &[600, 400]), traffic(1, 1, &[590, 410])];
        let moves = plan_moves(&[0.1, 0.1], &partitions, 10);
        assert_eq!(moved(&moves), vec![(0, 1, 0)]);
    }

    #[test]
    fn a_shard_near_its_bound_takes_no_more() {
        let partitions = [
            traffic(0, 0, &[0, 3000]),
            traffic(1, 0, &[0, 3000]),
            traffic(2, 1, &[0, 3000]),
        ];
        // Each of shard 0's partitions costs 0.1 of a core: one fits under 0.5.
        let moves = plan_moves(&[0.2, 0.35], &partitions, 10);
        assert_eq!(moved(&moves), vec![(0, 0, 1)]);
        assert!(plan_moves(&[0.2, 0.45], &partitions, 10).is_empty());
    }

    #[test]
    fn a_hot_shard_gives_its_costliest_partitions_to_the_least_busy() {
        // Everything followed one connection to shard 0, then the load grew.
        let partitions = [
            traffic(0, 0, &[4000]),
            traffic(1, 0, &[1000]),
            traffic(2, 0, &[3000]),
            traffic(3, 0, &[2000]),
        ];
        let moves = plan_moves(&[1.0, 0.1], &partitions, 10);
        // 0.4 moves (0.6 against 0.5), then 0.3 would pass shard 0: stop there.
        assert_eq!(moved(&moves), vec![(0, 0, 1)]);
        // Moved for the load, a partition does not follow its requests back
        // while the shard they come from is over the affinity bound.
        let after = [traffic(0, 1, &[4000]), traffic(1, 0, &[1000])];
        assert!(plan_moves(&[0.6, 0.4], &after, 10).is_empty());
    }

    #[test]
    fn a_round_moves_a_bounded_number() {
        let partitions: Vec<_> = (0..40).map(|p| traffic(p, 0, &[0, 100])).collect();
        let moves = plan_moves(&[0.0, 0.01], &partitions, 10);
        assert_eq!(moves.len(), MAX_MOVES_PER_ROUND);
    }
}
