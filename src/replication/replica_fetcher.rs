//! Kafka's `ReplicaFetcherManager` and `ReplicaFetcherThread`, per shard: the
//! followers on this shard fetch from their leaders, one fetcher per (leader
//! broker, fetcher id) (`num.replica.fetchers`), each a task that sends Fetch
//! v17 with the follower's `ReplicaState` and appends what comes back as the
//! leader stored it. A leader that answers with a diverging epoch makes the
//! follower truncate where their logs part; one that answers
//! OFFSET_OUT_OF_RANGE is asked for its log end and start (ListOffsets), and
//! the follower truncates to the end or starts again at the start; a
//! partition the leader refuses otherwise waits `replica.fetch.backoff.ms`
//! (it moves with the next LeaderAndIsr).

use std::cell::{Cell, RefCell};
use std::collections::BTreeMap;
use std::rc::Rc;
use std::sync::Arc;
use std::time::{Duration, Instant};

use futures_lite::future::or;
use glommio::sync::Semaphore;
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic, ReplicaState};
use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
use kafka_protocol::messages::{
    ApiKey, BrokerId, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shards::log::{wall_clock_ms, TopicPartition};
use tracing::{debug, warn};
use uuid::Uuid;

use super::partition::Partition;
use super::partition_state::follower_truncation_offset;
use super::quota::ReplicationQuotas;
use crate::config::ReplicationConfig;
use crate::network::broker_connection::BrokerConnection;
use crate::protocol::{call, ResponseError};

const FETCH_VERSION: i16 = 17;
/// ListOffsets as a follower asks it; Kafka 3.4 and later serve it.
const LIST_OFFSETS_VERSION: i16 = 8;
/// ListOffsets' timestamps for the log end and the log start.
const LATEST_TIMESTAMP: i64 = -1;
const EARLIEST_TIMESTAMP: i64 = -2;
/// A response may pass `replica.fetch.response.max.bytes` by one partition's
/// first batch (KIP-74); anything beyond this is no fetch response.
const MAX_RESPONSE_BYTES: usize = 256 * 1024 * 1024;

/// The partitions a fetch asked for, by (topic id, partition) as the
/// response names them: each one's name and the leader epoch sent.
type SentPartitions = BTreeMap<(Uuid, i32), (TopicPartition, i32)>;

/// One followed partition in its fetcher.
struct FetchState {
    partition: Rc<Partition>,
    topic_id: Uuid,
    /// The epoch of the leader this follower was told of.
    leader_epoch: i32,
    /// Not fetched before this (the leader refused it, or it failed here).
    delayed_until: Option<Instant>,
    /// In the topic's `follower.replication.throttled.replicas`.
    throttled: bool,
}

/// A fetcher: the partitions this shard follows from one leader.
struct ReplicaFetcher {
    leader_id: i32,
    address: RefCell<String>,
    partitions: RefCell<BTreeMap<TopicPartition, FetchState>>,
    /// Signalled when partitions are added, or the fetcher is stopped.
    changed: Semaphore,
    stopped: Cell<bool>,
}

impl ReplicaFetcher {
    /// Not fetched again before `backoff` has passed.
    fn delay(&self, tp: &TopicPartition, backoff: Duration) {
        if let Some(state) = self.partitions.borrow_mut().get_mut(tp) {
            state.delayed_until = Some(Instant::now() + backoff);
        }
    }
}

pub struct ReplicaFetcherManager {
    broker_id: i32,
    config: ReplicationConfig,
    quotas: Arc<ReplicationQuotas>,
    broker_epoch: Cell<i64>,
    fetchers: RefCell<BTreeMap<(i32, u32), Rc<ReplicaFetcher>>>,
}

impl ReplicaFetcherManager {
    pub fn new(broker_id: i32, config: ReplicationConfig, quotas: Arc<ReplicationQuotas>) -> Self {
        Self {
            broker_id,
            config,
            quotas,
            broker_epoch: Cell::new(-1),
            fetchers: RefCell::new(BTreeMap::new()),
        }
    }

    /// This broker's registration epoch, sent in every fetch.
    pub fn set_broker_epoch(&self, broker_epoch: i64) {
        self.broker_epoch.set(broker_epoch);
    }

    /// Kafka's `getFetcherId`: a partition's fetcher among `num.replica.fetchers`.
    fn fetcher_id(&self, tp: &TopicPartition) -> u32 {
        let hash = tp.topic.bytes().fold(0u32, |hash, byte| {
            hash.wrapping_mul(31).wrapping_add(byte as u32)
        });
        hash.wrapping_mul(31).wrapping_add(tp.partition as u32) % self.config.num_replica_fetchers
    }

    /// Follows `partition` from `leader_id` at `address`, from its log end,
    /// moving it from any other fetcher; `throttled` as `set_throttled`.
    pub fn add_partition(
        self: &Rc<Self>,
        partition: Rc<Partition>,
        topic_id: Uuid,
        leader_id: i32,
        address: String,
        throttled: bool,
    ) {
        let tp = partition.topic_partition().clone();
        self.remove_partition(&tp);
        let key = (leader_id, self.fetcher_id(&tp));
        let fetcher = self
            .fetchers
            .borrow_mut()
            .entry(key)
            .or_insert_with(|| {
                let fetcher = Rc::new(ReplicaFetcher {
                    leader_id,
                    address: RefCell::new(address.clone()),
                    partitions: RefCell::new(BTreeMap::new()),
                    changed: Semaphore::new(0),
                    stopped: Cell::new(false),
                });
                let (manager, running) = (self.clone(), fetcher.clone());
                glommio::spawn_local(async move { manager.run(running).await }).detach();
                fetcher
            })
            .clone();
        *fetcher.address.borrow_mut() = address;
        let leader_epoch = partition.leader_epoch();
        fetcher.partitions.borrow_mut().insert(
            tp,
            FetchState {
                partition,
                topic_id,
                leader_epoch,
                delayed_until: None,
                throttled,
            },
        );
        fetcher.changed.signal(1);
    }

    /// Whether `tp`'s fetching is held to `follower.replication.throttled.rate`
    /// while it is out of the ISR.
    pub fn set_throttled(&self, tp: &TopicPartition, throttled: bool) {
        for fetcher in self.fetchers.borrow().values() {
            if let Some(state) = fetcher.partitions.borrow_mut().get_mut(tp) {
                state.throttled = throttled;
            }
        }
    }

    /// Whether `tp` is fetched from `leader_id`.
    pub fn is_following(&self, tp: &TopicPartition, leader_id: i32) -> bool {
        self.fetchers.borrow().iter().any(|((leader, _), fetcher)| {
            *leader == leader_id && fetcher.partitions.borrow().contains_key(tp)
        })
    }

    /// Stops following `tp` (it leads now, or is gone); a fetcher left with
    /// nothing stops.
    pub fn remove_partition(&self, tp: &TopicPartition) {
        let mut fetchers = self.fetchers.borrow_mut();
        fetchers.retain(|_, fetcher| {
            fetcher.partitions.borrow_mut().remove(tp);
            let empty = fetcher.partitions.borrow().is_empty();
            if empty {
                fetcher.stopped.set(true);
                fetcher.changed.signal(1);
            }
            !empty
        });
    }

    /// Stops every fetcher (the shard is stopping).
    pub fn shutdown(&self) {
        for fetcher in std::mem::take(&mut *self.fetchers.borrow_mut()).into_values() {
            fetcher.stopped.set(true);
            fetcher.changed.signal(1);
        }
    }

    pub fn followed_partition_count(&self) -> usize {
        self.fetchers
            .borrow()
            .values()
            .map(|fetcher| fetcher.partitions.borrow().len())
            .sum()
    }

    async fn run(self: Rc<Self>, fetcher: Rc<ReplicaFetcher>) {
        let mut connection: Option<(String, BrokerConnection)> = None;
        let backoff = Duration::from_millis(self.config.replica_fetch_backoff_ms);
        while !fetcher.stopped.get() {
            let now = Instant::now();
            let request = self.build_fetch(&fetcher, now);
            let Some((request, sent)) = request else {
                // Nothing to fetch now: wait for a change or the first delay to end.
                let wake_at = fetcher
                    .partitions
                    .borrow()
                    .values()
                    .filter_map(|state| state.delayed_until)
                    .min()
                    .unwrap_or(now + backoff);
                let sleep = glommio::timer::sleep(wake_at.saturating_duration_since(now));
                or(
                    async {
                        let _ = fetcher.changed.acquire(1).await;
                    },
                    sleep,
                )
                .await;
                continue;
            };
            let address = fetcher.address.borrow().clone();
            if connection.as_ref().is_none_or(|(at, _)| *at != address) {
                connection = Some((
                    address.clone(),
                    BrokerConnection::new(
                        address,
                        Duration::from_millis(self.config.replica_socket_timeout_ms),
                        MAX_RESPONSE_BYTES,
                    ),
                ));
            }
            let (_, link) = connection.as_mut().expect("made above");
            let answered: Result<FetchResponse, String> = call(
                link,
                ApiKey::Fetch,
                FETCH_VERSION,
                &format!("broker-{}-fetcher", self.broker_id),
                &request,
            )
            .await;
            match answered {
                Ok(response) if response.error_code == 0 => {
                    let out_of_range = self.process_response(&fetcher, &sent, response).await;
                    for (tp, partition, leader_epoch) in out_of_range {
                        let outcome = self
                            .fetch_offset_and_truncate(link, &tp, &partition, leader_epoch)
                            .await;
                        if let Err(why) = outcome {
                            debug!(partition = %tp, %why, "cannot catch up with the leader's log");
                            fetcher.delay(&tp, backoff);
                        }
                    }
                }
                Ok(response) => {
                    warn!(leader = fetcher.leader_id, error = ?ResponseError::try_from_code(response.error_code), "fetch refused");
                    glommio::timer::sleep(backoff).await;
                }
                Err(error) => {
                    debug!(leader = fetcher.leader_id, %error, "fetch from the leader failed");
                    // Until the controller moves these partitions elsewhere.
                    or(
                        async {
                            let _ = fetcher.changed.acquire(1).await;
                        },
                        glommio::timer::sleep(backoff),
                    )
                    .await;
                }
            }
        }
    }

    /// The fetch for every partition not delayed, with what each was sent
    /// for (partition, topic id, leader epoch).
    fn build_fetch(
        &self,
        fetcher: &ReplicaFetcher,
        now: Instant,
    ) -> Option<(FetchRequest, SentPartitions)> {
        let mut topics: Vec<FetchTopic> = Vec::new();
        let mut sent = SentPartitions::new();
        let now_ms = wall_clock_ms() as u64;
        for (tp, state) in fetcher.partitions.borrow_mut().iter_mut() {
            if state.delayed_until.is_some_and(|until| until > now) {
                continue;
            }
            // Kafka's shouldFollowerThrottle: an out-of-sync throttled
            // replica waits while the follower quota is spent.
            if state.throttled
                && !state
                    .partition
                    .leader_and_isr()
                    .isr
                    .contains(&self.broker_id)
                && self.quotas.follower.is_quota_exceeded(now_ms)
            {
                continue;
            }
            state.delayed_until = None;
            let log = state.partition.log();
            let partition = FetchPartition::default()
                .with_partition(tp.partition)
                .with_current_leader_epoch(state.leader_epoch)
                .with_fetch_offset(log.log_end_offset())
                .with_last_fetched_epoch(log.latest_epoch().unwrap_or(-1))
                .with_log_start_offset(log.log_start_offset())
                .with_partition_max_bytes(self.config.replica_fetch_max_bytes);
            match topics.last_mut() {
                Some(topic) if topic.topic_id == state.topic_id => topic.partitions.push(partition),
                _ => topics.push(
                    FetchTopic::default()
                        .with_topic_id(state.topic_id)
                        .with_partitions(vec![partition]),
                ),
            }
            sent.insert(
                (state.topic_id, tp.partition),
                (tp.clone(), state.leader_epoch),
            );
        }
        if sent.is_empty() {
            return None;
        }
        let request = FetchRequest::default()
            .with_replica_state(
                ReplicaState::default()
                    .with_replica_id(BrokerId(self.broker_id))
                    .with_replica_epoch(self.broker_epoch.get()),
            )
            .with_max_wait_ms(self.config.replica_fetch_wait_max_ms)
            .with_min_bytes(self.config.replica_fetch_min_bytes)
            .with_max_bytes(self.config.replica_fetch_response_max_bytes)
            .with_isolation_level(0)
            .with_session_id(0)
            .with_session_epoch(-1)
            .with_topics(topics);
        Some((request, sent))
    }

    /// Appends, or truncates on a diverging epoch, each partition's data;
    /// returns those the leader answered OFFSET_OUT_OF_RANGE, with the
    /// leader epoch they were fetched at.
    async fn process_response(
        &self,
        fetcher: &ReplicaFetcher,
        sent: &SentPartitions,
        response: FetchResponse,
    ) -> Vec<(TopicPartition, Rc<Partition>, i32)> {
        let backoff = Duration::from_millis(self.config.replica_fetch_backoff_ms);
        let mut out_of_range = Vec::new();
        for topic in response.responses {
            for data in topic.partitions {
                let Some((tp, leader_epoch)) = sent.get(&(topic.topic_id, data.partition_index))
                else {
                    continue;
                };
                // Moved to another fetcher, or told of a newer leader, meanwhile.
                let partition = match fetcher.partitions.borrow().get(tp) {
                    Some(state) if state.leader_epoch == *leader_epoch => {
                        if state.throttled {
                            let bytes = data.records.as_ref().map_or(0, |r| r.len());
                            self.quotas
                                .follower
                                .record(bytes as u64, wall_clock_ms() as u64);
                        }
                        state.partition.clone()
                    }
                    _ => continue,
                };
                let outcome = match ResponseError::try_from_code(data.error_code) {
                    None => self.on_partition_data(&partition, data).await,
                    Some(ResponseError::OffsetOutOfRange) => {
                        out_of_range.push((tp.clone(), partition, *leader_epoch));
                        continue;
                    }
                    Some(error) => Err(format!("the leader answered {error:?}")),
                };
                if let Err(why) = outcome {
                    debug!(partition = %tp, %why, "fetch of a partition failed; backing off");
                    fetcher.delay(tp, backoff);
                }
            }
        }
        out_of_range
    }

    /// Kafka's `fetchOffsetAndTruncate`, for a follower the leader answered
    /// OFFSET_OUT_OF_RANGE: past the leader's log end it truncates to it;
    /// behind the leader's log start (retention or DeleteRecords there while
    /// it was away) it empties its log and starts again at the leader's.
    async fn fetch_offset_and_truncate(
        &self,
        link: &mut BrokerConnection,
        tp: &TopicPartition,
        partition: &Partition,
        leader_epoch: i32,
    ) -> Result<(), String> {
        let log_end_offset = partition.log().log_end_offset();
        let leader_end = self
            .leader_offset(link, tp, leader_epoch, LATEST_TIMESTAMP)
            .await?;
        if leader_end < log_end_offset {
            return partition
                .truncate_to(leader_end)
                .await
                .map_err(|e| e.to_string());
        }
        let leader_start = self
            .leader_offset(link, tp, leader_epoch, EARLIEST_TIMESTAMP)
            .await?;
        if leader_start > log_end_offset {
            partition
                .truncate_fully_and_start_at(leader_start)
                .await
                .map_err(|e| e.to_string())?;
        }
        Ok(())
    }

    /// ListOffsets to the leader, as this follower (`timestamp` -1: its log
    /// end, -2: its log start).
    async fn leader_offset(
        &self,
        link: &mut BrokerConnection,
        tp: &TopicPartition,
        leader_epoch: i32,
        timestamp: i64,
    ) -> Result<i64, String> {
        let request = ListOffsetsRequest::default()
            .with_replica_id(BrokerId(self.broker_id))
            .with_topics(vec![ListOffsetsTopic::default()
                .with_name(TopicName(StrBytes::from_string(tp.topic.clone())))
                .with_partitions(vec![ListOffsetsPartition::default()
                    .with_partition_index(tp.partition)
                    .with_current_leader_epoch(leader_epoch)
                    .with_timestamp(timestamp)])]);
        let response: ListOffsetsResponse = call(
            link,
            ApiKey::ListOffsets,
            LIST_OFFSETS_VERSION,
            &format!("broker-{}-fetcher", self.broker_id),
            &request,
        )
        .await?;
        let answer = response
            .topics
            .first()
            .and_then(|topic| topic.partitions.first())
            .ok_or("ListOffsets answered no partition")?;
        match ResponseError::try_from_code(answer.error_code) {
            None => Ok(answer.offset),
            Some(error) => Err(format!("ListOffsets answered {error:?}")),
        }
    }

    async fn on_partition_data(
        &self,
        partition: &Partition,
        data: kafka_protocol::messages::fetch_response::PartitionData,
    ) -> Result<(), String> {
        let log = partition.log();
        if data.diverging_epoch.epoch >= 0 {
            let (epoch, end_offset) = (data.diverging_epoch.epoch, data.diverging_epoch.end_offset);
            let log_end_offset = log.log_end_offset();
            let (offset, _) = follower_truncation_offset(
                epoch,
                end_offset,
                log.end_offset_for_epoch(epoch),
                log_end_offset,
            );
            return partition
                .truncate_to(offset)
                .await
                .map_err(|e| e.to_string());
        }
        let records = data.records.unwrap_or_default();
        partition
            .append_records_as_follower(
                whole_batches(&records),
                data.high_watermark,
                data.log_start_offset,
            )
            .await
            .map(|_| ())
            .map_err(|e| e.to_string())
    }
}

/// The whole batches at the front of fetched records: a Kafka leader may
/// cut the last one short at the byte limit.
fn whole_batches(records: &[u8]) -> &[u8] {
    const LENGTH_END: usize = 12; // base offset (8), batch length (4)
    let mut position = 0;
    while records.len() - position >= LENGTH_END {
        let length = i32::from_be_bytes(records[position + 8..position + 12].try_into().unwrap());
        let size = LENGTH_END + length.max(0) as usize;
        if records.len() - position < size {
            break;
        }
        position += size;
    }
    &records[..position]
}

#[cfg(test)]
mod tests {
    use super::whole_batches;

    #[test]
    fn a_cut_last_batch_is_left_for_the_next_fetch() {
        let mut records = Vec::new();
        for length in [20i32, 30] {
            records.extend_from_slice(&0i64.to_be_bytes());
            records.extend_from_slice(&length.to_be_bytes());
            records.extend(std::iter::repeat_n(0u8, length as usize));
        }
        assert_eq!(whole_batches(&records).len(), records.len());
        assert_eq!(whole_batches(&records[..50]).len(), 32);
        assert_eq!(whole_batches(&records[..5]).len(), 0);
    }
}
