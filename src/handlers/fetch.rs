//! Fetch (key 1): stored batches below the high watermark, as they are on disk,
//! with Kafka's long poll (`min_bytes`, `max_wait_ms`; a fetch that found too
//! little is parked until an append moves one of its high watermarks), byte budgets
//! (`max_bytes`, `partition_max_bytes`, the first batch always whole) and
//! incremental fetch sessions (KIP-227).

use std::collections::BTreeMap;
use std::time::{Duration, Instant};

use bytes::Bytes;
use kafka_protocol::messages::fetch_response::{
    EpochEndOffset, FetchableTopicResponse, PartitionData,
};
use kafka_protocol::messages::{BrokerId, FetchRequest, FetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;
use shards::log::{wall_clock_ms, TopicPartition, WatchedOffset};

use super::RequestContext;
use crate::protocol::{ErrorCode, Records, ResponseError};
use crate::replication::quota::{is_throttled, LEADER_REPLICATION_THROTTLED_REPLICAS};
use crate::replication::{PartitionFetch, ReadResult};
use crate::server::broker::WokenReads;
use crate::server::fetch_session::{next_epoch, CachedPartition, SessionKey};

const FETCH_SESSION_ID_NOT_FOUND: i16 = 70;
const INVALID_FETCH_SESSION_EPOCH: i16 = 71;
/// A session epoch that asks for a full, sessionless fetch (or closes a session).
const FINAL_EPOCH: i32 = -1;
/// The epoch that opens a session.
const INITIAL_EPOCH: i32 = 0;

enum Mode {
    /// Every partition asked for is answered; a session is opened if asked.
    Full { open_session: bool },
    /// Only partitions with something new are answered.
    Incremental { session_id: i32 },
}

/// The response, with each answered partition's records in order beside it
/// (`encode_fetch_response` frames them; the partitions' own `records` are unset).
pub async fn handle(
    ctx: &RequestContext,
    request: FetchRequest,
    version: i16,
) -> (FetchResponse, Vec<Records>) {
    let refused = |error_code| {
        (
            FetchResponse::default().with_error_code(error_code),
            Vec::new(),
        )
    };
    let image = ctx.broker.image();
    let topic_name = |name: &TopicName, id: &uuid::Uuid| {
        if version >= 13 {
            image
                .topic_by_id(id)
                .map(|t| t.name.clone())
                .unwrap_or_default()
        } else {
            name.0.to_string()
        }
    };
    let requested: Vec<(SessionKey, CachedPartition)> = request
        .topics
        .iter()
        .flat_map(|topic| {
            let name = topic_name(&topic.topic, &topic.topic_id);
            topic.partitions.iter().map(move |p| {
                (
                    (name.clone(), p.partition),
                    CachedPartition {
                        topic_id: topic.topic_id,
                        fetch_offset: p.fetch_offset,
                        max_bytes: p.partition_max_bytes,
                        current_leader_epoch: p.current_leader_epoch,
                        last_fetched_epoch: p.last_fetched_epoch,
                        high_watermark: -1,
                        last_stable_offset: -1,
                        log_start_offset: -1,
                    },
                )
            })
        })
        .collect();
    let (session_id, epoch) = if version >= 7 {
        (request.session_id, request.session_epoch)
    } else {
        (0, FINAL_EPOCH)
    };
    let (mode, targets) = match (session_id, epoch) {
        (0, FINAL_EPOCH) => (
            Mode::Full {
                open_session: false,
            },
            requested,
        ),
        (0, INITIAL_EPOCH) => (Mode::Full { open_session: true }, requested),
        (0, _) => return refused(INVALID_FETCH_SESSION_EPOCH),
        (id, FINAL_EPOCH) => {
            ctx.broker.fetch_sessions.borrow_mut().remove(id);
            (
                Mode::Full {
                    open_session: false,
                },
                requested,
            )
        }
        // Close this session and open a new one: what clients send after an error.
        (id, INITIAL_EPOCH) => {
            ctx.broker.fetch_sessions.borrow_mut().remove(id);
            (Mode::Full { open_session: true }, requested)
        }
        (id, epoch) => {
            if !ctx.broker.fetch_sessions.borrow().contains(id) {
                ctx.broker.claim_fetch_session(id).await;
            }
            let mut sessions = ctx.broker.fetch_sessions.borrow_mut();
            let Some(session) = sessions.get_mut(id) else {
                return refused(FETCH_SESSION_ID_NOT_FOUND);
            };
            if session.next_epoch != epoch {
                return refused(INVALID_FETCH_SESSION_EPOCH);
            }
            for (key, partition) in requested {
                let cached = session.partitions.entry(key).or_insert(partition.clone());
                cached.fetch_offset = partition.fetch_offset;
                cached.max_bytes = partition.max_bytes;
                cached.current_leader_epoch = partition.current_leader_epoch;
                cached.last_fetched_epoch = partition.last_fetched_epoch;
            }
            for forgotten in &request.forgotten_topics_data {
                let name = topic_name(&forgotten.topic, &forgotten.topic_id);
                for partition in &forgotten.partitions {
                    session.partitions.remove(&(name.clone(), *partition));
                }
            }
            session.next_epoch = next_epoch(epoch);
            let targets = session
                .partitions
                .iter()
                .map(|(k, v)| (k.clone(), v.clone()))
                .collect();
            (Mode::Incremental { session_id: id }, targets)
        }
    };

    // A follower (Kafka's replica id; v15+ in ReplicaState) reads to the log
    // end and waits on it; a consumer reads below the high watermark.
    let replica_id = if version >= 15 {
        request.replica_state.replica_id.0
    } else {
        request.replica_id.0
    };
    let watched = if replica_id >= 0 {
        WatchedOffset::LogEnd
    } else {
        WatchedOffset::HighWatermark
    };
    let deadline = Instant::now() + Duration::from_millis(request.max_wait_ms.max(0) as u64);
    // A follower's partitions in `leader.replication.throttled.replicas`
    // (Kafka's leader side of the replication quota).
    let broker_id = ctx.broker.config.broker_id;
    let throttled: Vec<bool> = targets
        .iter()
        .map(|((name, partition), _)| {
            replica_id >= 0
                && image.topic(name).is_some_and(|topic| {
                    let list = topic
                        .config_overrides
                        .get(LEADER_REPLICATION_THROTTLED_REPLICAS);
                    is_throttled(list.map(String::as_str), *partition, broker_id)
                })
        })
        .collect();
    let quota = &ctx.broker.replica_manager.quotas.leader;
    // KIP-392: a consumer that says where it is (v11+) may read from a
    // follower; one that names its rack is sent by the leader to an in-sync
    // follower there when `replica.selector.class` is rack-aware.
    let from_any_replica = replica_id < 0 && version >= 11;
    let client_rack = request.rack_id.as_str();
    let candidates: Vec<Vec<i32>> = targets
        .iter()
        .map(|((name, partition), _)| {
            if !from_any_replica
                || client_rack.is_empty()
                || !ctx.broker.config.rack_aware_replica_selector
            {
                return Vec::new();
            }
            let in_rack = |id: &i32| {
                image.brokers.get(id).and_then(|b| b.rack.as_deref()) == Some(client_rack)
            };
            match image.partition(name, *partition) {
                Some(p) if p.leader == broker_id && !in_rack(&broker_id) => p
                    .isr
                    .iter()
                    .copied()
                    .filter(|id| *id != broker_id && in_rack(id))
                    .collect(),
                _ => Vec::new(),
            }
        })
        .collect();
    // The broker bounds what one response may hold (`fetch.max.bytes`).
    let max_bytes = (request.max_bytes.max(0) as usize).min(ctx.broker.config.fetch_max_bytes);
    // What a woken fetch read again (the partitions of the shard that woke
    // it), over the pass before it, which found nothing at all.
    let mut woken: Option<(Vec<ReadResult>, WokenReads)> = None;
    let results = loop {
        // Every partition is read at once (on its own shard), each up to its
        // own limit; the response's budget is then applied in request order,
        // the first batch of the first partition with data always whole (KIP-74).
        // The reads are awaited in this (connection) task, not a task each: an
        // answer from another shard then wakes a task that outlives it, never one
        // that finishes right after its wake (glommio's cross-thread wake can
        // race the teardown of such a task).
        // Kafka's shouldLeaderThrottle: an out-of-sync follower of a
        // throttled partition gets nothing while the leader quota is spent.
        // One look at the quota per pass, and only for a throttled follower.
        let quota_exceeded =
            throttled.contains(&true) && quota.is_quota_exceeded(wall_clock_ms() as u64);
        let held: Vec<bool> = targets
            .iter()
            .zip(&throttled)
            .map(|(((name, partition), _), throttled)| {
                quota_exceeded
                    && *throttled
                    && image
                        .partition(name, *partition)
                        .is_some_and(|p| !p.isr.contains(&replica_id))
            })
            .collect();
        let limits: Vec<usize> = targets
            .iter()
            .zip(&held)
            .map(|((_, cached), held)| {
                if *held {
                    0
                } else {
                    (cached.max_bytes.max(0) as usize).min(max_bytes)
                }
            })
            .collect();
        // Every partition read at once, one mesh hop per shard; a topic id
        // this broker does not know is answered here.
        let fetches: Vec<Option<PartitionFetch>> = targets
            .iter()
            .zip(limits.iter().zip(&held).zip(&candidates))
            .map(|(((name, _), cached), ((limit, held), candidates))| {
                (!name.is_empty()).then(|| PartitionFetch {
                    fetch_offset: cached.fetch_offset,
                    max_bytes: *limit,
                    min_one_batch: !held,
                    current_leader_epoch: cached.current_leader_epoch,
                    last_fetched_epoch: cached.last_fetched_epoch,
                    replica_id,
                    from_any_replica,
                    preferred_read_candidates: candidates.clone(),
                })
            })
            .collect();
        let read: Vec<ReadResult> = match woken.take() {
            Some((mut read, fresh)) => {
                for (slot, result) in fresh {
                    read[slot] = result;
                }
                read
            }
            None => {
                let reads = targets
                    .iter()
                    .zip(&fetches)
                    .filter_map(|(((name, partition), _), fetch)| {
                        let tp = TopicPartition::new(name.as_str(), *partition);
                        Some((tp, fetch.clone()?))
                    })
                    .collect();
                let mut read = ctx
                    .broker
                    .read_all(reads, from_any_replica)
                    .await
                    .into_iter();
                fetches
                    .iter()
                    .map(|fetch| match fetch {
                        Some(_) => read.next().expect("one read per known partition"),
                        None => ReadResult::error(ResponseError::UnknownTopicId),
                    })
                    .collect()
            }
        };
        let mut budget = max_bytes;
        let mut total_bytes = 0usize;
        let mut any_error = false;
        let mut results: Vec<ReadResult> = Vec::with_capacity(targets.len());
        for (limit, mut result) in limits.into_iter().zip(read) {
            let size = result.records.as_ref().map_or(0, Records::size_bytes);
            if total_bytes > 0 && (size > budget || size > limit) {
                // Past a limit, and not the first data: the next fetch gets it.
                result.records = None;
            } else {
                total_bytes += size;
                budget = budget.saturating_sub(size);
            }
            any_error |= result.error.is_some();
            results.push(result);
        }
        let any_diverging = results
            .iter()
            .any(|result| result.diverging_epoch.is_some());
        let satisfied = total_bytes >= request.min_bytes.max(0) as usize
            || any_error
            || any_diverging
            || targets.is_empty();
        if satisfied || Instant::now() >= deadline {
            let throttled_bytes: usize = results
                .iter()
                .zip(&throttled)
                .filter(|(_, throttled)| **throttled)
                .map(|(result, _)| result.records.as_ref().map_or(0, Records::size_bytes))
                .sum();
            quota.record(throttled_bytes as u64, wall_clock_ms() as u64);
            break results;
        }
        // Too little: wait for an append to one of these partitions (or the
        // deadline), then read again. After a pass that found nothing at all
        // (no records, so nothing the budget held back), only the partitions
        // of the shard that woke the fetch are read again, on that shard as it
        // answers: the rest have not moved. A throttled follower reads afresh.
        let seen = targets
            .iter()
            .zip(&results)
            .map(|(((name, partition), _), result)| {
                (
                    TopicPartition::new(name.as_str(), *partition),
                    result.watched_offset,
                )
            })
            .collect();
        let reread = total_bytes == 0 && !throttled.contains(&true);
        let reads = reread.then(|| {
            fetches
                .into_iter()
                // An unknown topic id is an error, which answers at once.
                .map(|fetch| fetch.expect("a parked fetch knows its topics"))
                .collect()
        });
        ctx.times.local_complete_at(Instant::now());
        let fresh = ctx.broker.park_fetch(seen, reads, watched, deadline).await;
        woken = fresh.map(|fresh| (results, fresh));
    };

    // Session bookkeeping: what each partition's client now knows.
    let mut answered: Vec<bool> = vec![true; targets.len()];
    let response_session_id = match mode {
        Mode::Full { open_session, .. } => {
            let partitions: BTreeMap<SessionKey, CachedPartition> = targets
                .iter()
                .zip(&results)
                .map(|((key, cached), result)| (key.clone(), remembered(cached, result)))
                .collect();
            let stride = ctx.broker.config.cores.len() as i32;
            if open_session {
                ctx.broker
                    .fetch_sessions
                    .borrow_mut()
                    .create(partitions, stride)
                    .unwrap_or(0)
            } else {
                0
            }
        }
        Mode::Incremental { session_id } => {
            let mut sessions = ctx.broker.fetch_sessions.borrow_mut();
            if let Some(session) = sessions.get_mut(session_id) {
                for (index, ((key, _), result)) in targets.iter().zip(&results).enumerate() {
                    if let Some(cached) = session.partitions.get_mut(key) {
                        let changed = result.records.as_ref().is_some_and(|r| r.size_bytes() > 0)
                            || result.error.is_some()
                            || result.diverging_epoch.is_some()
                            || result.high_watermark != cached.high_watermark
                            || result.last_stable_offset != cached.last_stable_offset
                            || result.log_start_offset != cached.log_start_offset;
                        answered[index] = changed;
                        *cached = remembered(cached, result);
                    }
                }
            }
            session_id
        }
    };

    // Group answered partitions by topic, in order.
    let mut responses: Vec<FetchableTopicResponse> = Vec::new();
    let mut records: Vec<Records> = Vec::new();
    for (((name, partition), cached), (result, answer)) in
        targets.iter().zip(results.into_iter().zip(answered))
    {
        if !answer {
            continue;
        }
        ctx.broker.metrics.record_fetch(
            name,
            result.records.as_ref().map_or(0, Records::size_bytes) as u64,
        );
        let mut data = PartitionData::default()
            .with_partition_index(*partition)
            .with_error_code(result.error.error_code())
            .with_high_watermark(result.high_watermark)
            .with_last_stable_offset(result.last_stable_offset)
            .with_log_start_offset(result.log_start_offset)
            .with_records(None);
        if version >= 11 {
            data = data.with_preferred_read_replica(BrokerId(result.preferred_read_replica));
        }
        if let Some((epoch, end_offset)) = result.diverging_epoch {
            data = data.with_diverging_epoch(
                EpochEndOffset::default()
                    .with_epoch(epoch)
                    .with_end_offset(end_offset),
            );
        }
        // Clients read a null record set as a protocol error: send empty.
        records.push(
            result
                .records
                .unwrap_or_else(|| Records::Memory(Bytes::new())),
        );
        if version >= 4 {
            data = data.with_aborted_transactions(Some(Vec::new()));
        }
        let same_topic = responses.last().is_some_and(|t| {
            if version >= 13 {
                t.topic_id == cached.topic_id
            } else {
                t.topic.0.as_str() == name
            }
        });
        if !same_topic {
            let topic = FetchableTopicResponse::default();
            responses.push(if version >= 13 {
                topic.with_topic_id(cached.topic_id)
            } else {
                topic.with_topic(TopicName(StrBytes::from_string(name.clone())))
            });
        }
        responses.last_mut().unwrap().partitions.push(data);
    }
    let mut response = FetchResponse::default().with_responses(responses);
    if version >= 7 {
        response = response.with_session_id(response_session_id);
    }
    (response, records)
}

fn remembered(cached: &CachedPartition, result: &ReadResult) -> CachedPartition {
    CachedPartition {
        high_watermark: result.high_watermark,
        last_stable_offset: result.last_stable_offset,
        log_start_offset: result.log_start_offset,
        ..cached.clone()
    }
}
