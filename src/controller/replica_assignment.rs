//! Where a topic's replicas go, and the checks on an assignment a request
//! names (Kafka's `AdminUtils` and `AdminManager` rules).

use crate::protocol::{ApiError, ResponseError};

const MAX_TOPIC_NAME_LENGTH: usize = 249;
/// Partitions a topic may have: its assignment znode must stay under
/// ZooKeeper's default 1 MiB node limit (`jute.maxbuffer`), and a request must
/// never make the broker allocate without bound.
const MAX_PARTITIONS_PER_TOPIC: i32 = 100_000;

pub fn check_partition_count(count: i32) -> Result<(), ApiError> {
    if count > MAX_PARTITIONS_PER_TOPIC {
        return Err(ApiError::new(
            ResponseError::InvalidPartitions,
            format!("{count} partitions exceed the limit of {MAX_PARTITIONS_PER_TOPIC} per topic"),
        ));
    }
    Ok(())
}

pub fn validate_topic_name(name: &str) -> Result<(), ApiError> {
    let legal = !name.is_empty()
        && name != "."
        && name != ".."
        && name.len() <= MAX_TOPIC_NAME_LENGTH
        && name
            .bytes()
            .all(|b| b.is_ascii_alphanumeric() || b == b'.' || b == b'_' || b == b'-');
    if legal {
        Ok(())
    } else {
        Err(ApiError::new(
            ResponseError::InvalidTopicException,
            format!("topic name {name:?} is illegal: up to 249 of [a-zA-Z0-9._-], not '.' or '..'"),
        ))
    }
}

/// Replica assignments must name known brokers, once each, with one
/// replication factor for every partition.
pub fn check_assignments(
    assignments: &[Vec<i32>],
    live_brokers: &[i32],
    replication_factor: Option<usize>,
) -> Result<(), ApiError> {
    let invalid = |why: String| Err(ApiError::new(ResponseError::InvalidReplicaAssignment, why));
    let factor = replication_factor
        .or(assignments.first().map(Vec::len))
        .unwrap_or(0);
    for (partition, replicas) in assignments.iter().enumerate() {
        if replicas.is_empty() || replicas.len() != factor {
            return invalid(format!(
                "partition {partition} has {} replicas, expected {factor}",
                replicas.len()
            ));
        }
        if let Some(unknown) = replicas.iter().find(|b| !live_brokers.contains(b)) {
            return invalid(format!(
                "partition {partition} names unknown broker {unknown}"
            ));
        }
        let mut sorted = replicas.clone();
        sorted.sort_unstable();
        sorted.dedup();
        if sorted.len() != replicas.len() {
            return invalid(format!(
                "partition {partition} repeats a broker: {replicas:?}"
            ));
        }
    }
    Ok(())
}

/// A broker as replica assignment sees it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct BrokerMetadata {
    pub id: i32,
    pub rack: Option<String>,
}

/// Where the rotation starts: Kafka picks both at random for a new topic,
/// and derives both from the first replica of partition 0 when it adds
/// partitions.
#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub struct AssignmentStart {
    pub start_index: usize,
    pub replica_shift: usize,
}

fn replica_index(first: usize, shift: usize, j: usize, brokers: usize) -> usize {
    (first + 1 + (shift + j) % (brokers - 1)) % brokers
}

/// Kafka's `AdminUtils.assignReplicasToBrokers`: replicas for partitions
/// `first_partition..first_partition + partitions`, leaders spread round
/// robin, followers shifted. Rack-aware when any broker has a rack (then all
/// must), so no two replicas share a rack while racks remain.
pub fn assign_replicas_to_brokers(
    brokers: &[BrokerMetadata],
    partitions: i32,
    replication_factor: i16,
    start: AssignmentStart,
    first_partition: i32,
) -> Result<Vec<Vec<i32>>, ApiError> {
    let invalid = |code, why: String| Err(ApiError::new(code, why));
    if partitions <= 0 {
        return invalid(
            ResponseError::InvalidPartitions,
            "Number of partitions must be larger than 0.".into(),
        );
    }
    if replication_factor <= 0 {
        return invalid(
            ResponseError::InvalidReplicationFactor,
            "Replication factor must be larger than 0.".into(),
        );
    }
    let factor = replication_factor as usize;
    if factor > brokers.len() {
        return invalid(
            ResponseError::InvalidReplicationFactor,
            format!(
                "Replication factor: {replication_factor} larger than available brokers: {}.",
                brokers.len()
            ),
        );
    }
    let racks = brokers.iter().filter(|b| b.rack.is_some()).count();
    if racks == 0 {
        let ids: Vec<i32> = brokers.iter().map(|b| b.id).collect();
        return Ok(rack_unaware(
            &ids,
            partitions,
            factor,
            start,
            first_partition,
        ));
    }
    if racks < brokers.len() {
        return invalid(
            ResponseError::InvalidReplicaAssignment,
            "Not all brokers have rack information for replica rack aware assignment.".into(),
        );
    }
    Ok(rack_aware(
        brokers,
        partitions,
        factor,
        start,
        first_partition,
    ))
}

fn rack_unaware(
    brokers: &[i32],
    partitions: i32,
    factor: usize,
    start: AssignmentStart,
    first_partition: i32,
) -> Vec<Vec<i32>> {
    let n = brokers.len();
    let mut shift = start.replica_shift;
    (first_partition..first_partition + partitions)
        .map(|partition| {
            let p = partition as usize;
            if p > 0 && p % n == 0 {
                shift += 1;
            }
            let first = (p + start.start_index) % n;
            std::iter::once(brokers[first])
                .chain((0..factor - 1).map(|j| brokers[replica_index(first, shift, j, n)]))
                .collect()
        })
        .collect()
}

/// Racks in name order, brokers in each by id, then one broker per rack in
/// turn: neighbours in the list are on different racks.
fn rack_alternated(brokers: &[BrokerMetadata]) -> Vec<(i32, &str)> {
    let mut by_rack: std::collections::BTreeMap<&str, Vec<i32>> = Default::default();
    for broker in brokers {
        let rack = broker.rack.as_deref().expect("every broker has a rack");
        by_rack.entry(rack).or_default().push(broker.id);
    }
    for ids in by_rack.values_mut() {
        ids.sort_unstable();
    }
    let mut arranged = Vec::with_capacity(brokers.len());
    for round in 0.. {
        let before = arranged.len();
        for (rack, ids) in &by_rack {
            if let Some(id) = ids.get(round) {
                arranged.push((*id, *rack));
            }
        }
        if arranged.len() == before {
            break;
        }
    }
    arranged
}

fn rack_aware(
    brokers: &[BrokerMetadata],
    partitions: i32,
    factor: usize,
    start: AssignmentStart,
    first_partition: i32,
) -> Vec<Vec<i32>> {
    let arranged = rack_alternated(brokers);
    let n = arranged.len();
    let rack_count = {
        let mut racks: Vec<&str> = arranged.iter().map(|(_, rack)| *rack).collect();
        racks.sort_unstable();
        racks.dedup();
        racks.len()
    };
    let mut shift = start.replica_shift;
    (first_partition..first_partition + partitions)
        .map(|partition| {
            let p = partition as usize;
            if p > 0 && p % n == 0 {
                shift += 1;
            }
            let first = (p + start.start_index) % n;
            let (leader, leader_rack) = arranged[first];
            let mut replicas = vec![leader];
            let mut racks_used = vec![leader_rack];
            // k runs on across replicas, as Kafka's does.
            let mut k = 0;
            while replicas.len() < factor {
                let (candidate, rack) = arranged[replica_index(first, shift * rack_count, k, n)];
                k += 1;
                let rack_ok = !racks_used.contains(&rack) || racks_used.len() == rack_count;
                let broker_ok = !replicas.contains(&candidate) || replicas.len() == n;
                if rack_ok && broker_ok {
                    replicas.push(candidate);
                    if !racks_used.contains(&rack) {
                        racks_used.push(rack);
                    }
                }
            }
            replicas
        })
        .collect()
}

#[cfg(test)]
mod tests {
    use super::*;

    fn brokers(racks: &[(i32, Option<&str>)]) -> Vec<BrokerMetadata> {
        racks
            .iter()
            .map(|(id, rack)| BrokerMetadata {
                id: *id,
                rack: rack.map(str::to_owned),
            })
            .collect()
    }

    const FIXED: AssignmentStart = AssignmentStart {
        start_index: 0,
        replica_shift: 0,
    };

    #[test]
    fn rack_unaware_matches_kafkas_javadoc_example() {
        let five = brokers(&[(0, None), (1, None), (2, None), (3, None), (4, None)]);
        let assignment = assign_replicas_to_brokers(&five, 10, 3, FIXED, 0).unwrap();
        let expected: Vec<Vec<i32>> = vec![
            vec![0, 1, 2],
            vec![1, 2, 3],
            vec![2, 3, 4],
            vec![3, 4, 0],
            vec![4, 0, 1],
            vec![0, 2, 3],
            vec![1, 3, 4],
            vec![2, 4, 0],
            vec![3, 0, 1],
            vec![4, 1, 2],
        ];
        assert_eq!(assignment, expected);
    }

    #[test]
    fn rack_aware_matches_kafkas_javadoc_example() {
        let racked = brokers(&[
            (0, Some("r1")),
            (1, Some("r3")),
            (2, Some("r3")),
            (3, Some("r2")),
            (4, Some("r2")),
            (5, Some("r1")),
        ]);
        let arranged: Vec<i32> = rack_alternated(&racked).iter().map(|(id, _)| *id).collect();
        assert_eq!(arranged, vec![0, 3, 1, 5, 4, 2]);
        let assignment = assign_replicas_to_brokers(&racked, 7, 3, FIXED, 0).unwrap();
        let expected: Vec<Vec<i32>> = vec![
            vec![0, 3, 1],
            vec![3, 1, 5],
            vec![1, 5, 4],
            vec![5, 4, 2],
            vec![4, 2, 0],
            vec![2, 0, 3],
            vec![0, 4, 2],
        ];
        assert_eq!(assignment, expected);
    }

    #[test]
    fn refuses_what_kafka_refuses() {
        let two = brokers(&[(0, None), (1, None)]);
        let refused = |partitions, factor| {
            assign_replicas_to_brokers(&two, partitions, factor, FIXED, 0)
                .unwrap_err()
                .error
        };
        assert_eq!(refused(0, 1), ResponseError::InvalidPartitions);
        assert_eq!(refused(1, 0), ResponseError::InvalidReplicationFactor);
        assert_eq!(refused(1, 3), ResponseError::InvalidReplicationFactor);
        let mixed = brokers(&[(0, Some("r1")), (1, None)]);
        assert_eq!(
            assign_replicas_to_brokers(&mixed, 1, 1, FIXED, 0)
                .unwrap_err()
                .error,
            ResponseError::InvalidReplicaAssignment
        );
        let one = brokers(&[(7, None)]);
        assert_eq!(
            assign_replicas_to_brokers(&one, 3, 1, FIXED, 0).unwrap(),
            vec![vec![7], vec![7], vec![7]]
        );
    }
}
