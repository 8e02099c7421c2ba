//! The broker's metrics in Prometheus' text format, with the names Kafka's JMX
//! exporter setups give Kafka's own MBeans (`kafka_server_brokertopicmetrics_*`,
//! `kafka_network_requestmetrics_*`, `kafka_log_log_*`, ...), plus per-shard
//! figures of the thread-per-core runtime. Each shard counts into its own
//! `ShardMetrics` (plain cells: no atomics, no locks on the data path); a
//! scrape collects a `MetricsSnapshot` from every shard over the mesh and
//! renders their sum (`http.rs` serves it).

pub mod errors;
pub mod histogram;
pub mod http;
pub mod request_metrics;
pub mod slow_requests;

use std::cell::{Cell, RefCell};
use std::collections::{BTreeMap, HashMap};
use std::fmt::Write;
use std::time::{Duration, Instant};

use self::histogram::LatencyHistogram;
use self::request_metrics::Phase;
use self::slow_requests::SlowRequests;

/// Distinct topics a shard keeps counters for; a client naming ever more topics
/// (each refused) cannot grow it without bound.
const MAX_COUNTED_TOPICS: usize = 100_000;

#[derive(Debug, Clone, Default, PartialEq, Eq)]
pub struct TopicCounters {
    pub messages_in: u64,
    pub bytes_in: u64,
    pub bytes_out: u64,
}

impl TopicCounters {
    fn add(&mut self, other: &Self) {
        self.messages_in += other.messages_in;
        self.bytes_in += other.bytes_in;
        self.bytes_out += other.bytes_out;
    }
}

/// One API's requests: how many, how long in each phase, and the error
/// codes its responses carried.
#[derive(Debug, Clone, Default, PartialEq)]
pub struct RequestStats {
    pub count: u64,
    /// Only the phases the API has seen.
    pub phases: BTreeMap<Phase, LatencyHistogram>,
    pub errors: BTreeMap<i16, u64>,
}

impl RequestStats {
    fn add(&mut self, other: &Self) {
        self.count += other.count;
        for (phase, histogram) in &other.phases {
            self.phases.entry(*phase).or_default().add(histogram);
        }
        for (code, count) in &other.errors {
            *self.errors.entry(*code).or_default() += count;
        }
    }
}

/// One partition's log, as the `kafka.log:type=Log` MBeans show it.
#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LogGauges {
    pub topic: String,
    pub partition: i32,
    pub size_bytes: u64,
    pub segments: u64,
    pub log_start_offset: i64,
    pub log_end_offset: i64,
}

/// The runtime figures of one shard.
#[derive(Debug, Clone, PartialEq)]
pub struct ShardGauges {
    pub shard: usize,
    pub tasks_executed: u64,
    pub runtime_seconds: f64,
    /// Share of the wall time since the previous scrape spent running tasks.
    pub busy_ratio: f64,
    /// Jobs from other shards running here now.
    pub mesh_jobs_in_flight: u64,
    /// Time the shard's thread was runnable but waited for a CPU, since
    /// start: the kernel's share of a tail (another process on its core).
    pub runqueue_wait_seconds: f64,
    /// Connections served here now.
    pub connections: u64,
    /// Connections other shards sent here, since start.
    pub connections_moved_in: u64,
}

/// This thread's time waiting on a run queue (schedstat's second field), or
/// 0 where the kernel keeps no schedstats.
fn runqueue_wait_seconds() -> f64 {
    std::fs::read_to_string("/proc/thread-self/schedstat")
        .ok()
        .and_then(|stat| stat.split_whitespace().nth(1)?.parse::<u64>().ok())
        .map_or(0.0, |ns| ns as f64 / 1e9)
}

/// A shard's replication, for Kafka's ReplicaManager gauges.
#[derive(Debug, Clone, Copy, Default)]
pub struct ReplicationGauges {
    /// Led partitions whose ISR lacks a replica.
    pub under_replicated_partitions: u64,
    /// Led partitions whose ISR is below `min.insync.replicas`.
    pub under_min_isr_partitions: u64,
    /// Replicas here fetching from a leader elsewhere.
    pub followed_partitions: u64,
    /// The most messages an ISR follower of a partition led here lags.
    pub max_follower_lag_messages: i64,
    /// ISR shrinks and expansions the controller committed, since start.
    pub isr_shrinks: u64,
    pub isr_expands: u64,
}

/// Kafka's `kafka.controller:type=KafkaController` gauges, from the image:
/// reported by one shard, nonzero only on the active controller.
#[derive(Debug, Clone, Copy, Default)]
pub struct ControllerGauges {
    pub active_controller: bool,
    /// Partitions with no leader (topics being deleted aside).
    pub offline_partitions: u64,
    /// Partitions whose leader is not their preferred replica.
    pub preferred_replica_imbalance: u64,
}

/// Everything one shard reports to a scrape; plain data, sent across shards.
#[derive(Debug, Clone)]
pub struct MetricsSnapshot {
    pub topics: HashMap<String, TopicCounters>,
    pub requests: BTreeMap<i16, RequestStats>,
    pub logs: Vec<LogGauges>,
    pub leaders: u64,
    pub replication: ReplicationGauges,
    /// Shard 0's only.
    pub controller: Option<ControllerGauges>,
    pub parked_fetches: u64,
    /// Groups coordinated here, by state name (Kafka's NumGroups<State>).
    pub groups_by_state: BTreeMap<String, u64>,
    pub shard: ShardGauges,
}

/// A shard's counters, touched only by its own thread.
pub struct ShardMetrics {
    topics: RefCell<HashMap<String, TopicCounters>>,
    /// By API key.
    requests: RefCell<BTreeMap<i16, RequestStats>>,
    /// (wall time, executor runtime) at the previous scrape, for the busy ratio.
    last_scrape: Cell<(Instant, Duration)>,
    pub slow_requests: RefCell<SlowRequests>,
}

impl Default for ShardMetrics {
    fn default() -> Self {
        Self {
            topics: RefCell::new(HashMap::new()),
            requests: RefCell::new(BTreeMap::new()),
            last_scrape: Cell::new((Instant::now(), Duration::ZERO)),
            slow_requests: RefCell::new(SlowRequests::default()),
        }
    }
}

impl ShardMetrics {
    fn with_topic(&self, topic: &str, update: impl FnOnce(&mut TopicCounters)) {
        let mut topics = self.topics.borrow_mut();
        if let Some(counters) = topics.get_mut(topic) {
            update(counters);
        } else if topics.len() < MAX_COUNTED_TOPICS {
            update(topics.entry(topic.to_owned()).or_default());
        }
    }

    /// A batch appended to a partition of `topic` (BytesInPerSec, MessagesInPerSec).
    pub fn record_produce(&self, topic: &str, messages: u64, bytes: u64) {
        self.with_topic(topic, |c| {
            c.messages_in += messages;
            c.bytes_in += bytes;
        });
    }

    /// Record bytes sent to a fetcher of `topic` (BytesOutPerSec).
    pub fn record_fetch(&self, topic: &str, bytes: u64) {
        if bytes > 0 {
            self.with_topic(topic, |c| c.bytes_out += bytes);
        }
    }

    /// One request of `api` answered, its time in each of `Phase::REQUEST`
    /// (RequestsPerSec, TotalTimeMs and the other phases).
    pub fn record_request(&self, api_key: i16, phases: &[Duration; 7]) {
        let mut requests = self.requests.borrow_mut();
        let stats = requests.entry(api_key).or_default();
        stats.count += 1;
        for (phase, elapsed) in Phase::REQUEST.iter().zip(phases) {
            stats.phases.entry(*phase).or_default().record(*elapsed);
        }
    }

    /// One of ringbroker's own phases of a request of `api`, or of a
    /// partition's part in it.
    pub fn record_phase(&self, api_key: i16, phase: Phase, elapsed: Duration) {
        assert!(!Phase::REQUEST.contains(&phase), "recorded per request");
        self.requests
            .borrow_mut()
            .entry(api_key)
            .or_default()
            .phases
            .entry(phase)
            .or_default()
            .record(elapsed);
    }

    /// An error code a response of `api` carried (ErrorsPerSec).
    pub fn record_error(&self, api_key: i16, error_code: i16) {
        *self
            .requests
            .borrow_mut()
            .entry(api_key)
            .or_default()
            .errors
            .entry(error_code)
            .or_default() += 1;
    }

    /// The counters, and the runtime figures since the previous scrape.
    pub fn snapshot(
        &self,
        shard: usize,
        stats: &glommio::ExecutorStats,
        mesh_jobs_in_flight: u64,
        (connections, connections_moved_in): (u64, u64),
    ) -> (
        HashMap<String, TopicCounters>,
        BTreeMap<i16, RequestStats>,
        ShardGauges,
    ) {
        let now = Instant::now();
        let runtime = stats.total_runtime();
        let (last_wall, last_runtime) = self.last_scrape.replace((now, runtime));
        let wall = now.duration_since(last_wall).as_secs_f64();
        let busy = runtime.saturating_sub(last_runtime).as_secs_f64();
        (
            self.topics.borrow().clone(),
            self.requests.borrow().clone(),
            ShardGauges {
                shard,
                tasks_executed: stats.tasks_executed(),
                runtime_seconds: runtime.as_secs_f64(),
                busy_ratio: if wall > 0.0 {
                    (busy / wall).min(1.0)
                } else {
                    0.0
                },
                mesh_jobs_in_flight,
                runqueue_wait_seconds: runqueue_wait_seconds(),
                connections,
                connections_moved_in,
            },
        )
    }
}

/// Prometheus label values escape backslash, quote and newline.
fn label(value: &str) -> String {
    value
        .replace('\\', "\\\\")
        .replace('"', "\\\"")
        .replace('\n', "\\n")
}

/// A metric family's HELP and TYPE lines; returns its name for the samples.
fn header(out: &mut String, name: &str, kind: &str, help: &str) -> String {
    let _ = writeln!(out, "# HELP {name} {help}\n# TYPE {name} {kind}");
    name.to_owned()
}

/// The text exposition of every shard's snapshot together.
/// `api_name` and `error_name` give Kafka's names for API keys and error codes.
pub fn render(
    snapshots: &[MetricsSnapshot],
    api_name: impl Fn(i16) -> String,
    error_name: impl Fn(i16) -> String,
) -> String {
    let mut topics: BTreeMap<&str, TopicCounters> = BTreeMap::new();
    let mut requests: BTreeMap<String, RequestStats> = BTreeMap::new();
    let mut groups: BTreeMap<&str, u64> = BTreeMap::new();
    for snapshot in snapshots {
        for (topic, counters) in &snapshot.topics {
            topics.entry(topic).or_default().add(counters);
        }
        for (api_key, stats) in &snapshot.requests {
            requests.entry(api_name(*api_key)).or_default().add(stats);
        }
        for (state, count) in &snapshot.groups_by_state {
            *groups.entry(state).or_default() += count;
        }
    }
    let mut out = String::new();

    for (name, help, pick) in [
        (
            "kafka_server_brokertopicmetrics_messagesin_total",
            "Messages appended, per topic (MessagesInPerSec).",
            (|c: &TopicCounters| c.messages_in) as fn(&TopicCounters) -> u64,
        ),
        (
            "kafka_server_brokertopicmetrics_bytesin_total",
            "Record bytes produced, per topic (BytesInPerSec).",
            |c: &TopicCounters| c.bytes_in,
        ),
        (
            "kafka_server_brokertopicmetrics_bytesout_total",
            "Record bytes fetched, per topic (BytesOutPerSec).",
            |c: &TopicCounters| c.bytes_out,
        ),
    ] {
        let name = header(&mut out, name, "counter", help);
        let total: u64 = topics.values().map(pick).sum();
        let _ = writeln!(out, "{name} {total}");
        for (topic, counters) in &topics {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\"}} {}",
                label(topic),
                pick(counters)
            );
        }
    }

    let name = header(
        &mut out,
        "kafka_network_requestmetrics_requests_total",
        "counter",
        "Requests answered, per API (RequestsPerSec).",
    );
    for (api, stats) in &requests {
        let _ = writeln!(out, "{name}{{request=\"{api}\"}} {}", stats.count);
    }
    let name = header(
        &mut out,
        "kafka_network_requestmetrics_errors_total",
        "counter",
        "Error codes in responses, per API and error (ErrorsPerSec).",
    );
    for (api, stats) in &requests {
        for (code, count) in &stats.errors {
            let _ = writeln!(
                out,
                "{name}{{request=\"{api}\",error=\"{}\"}} {count}",
                error_name(*code)
            );
        }
    }
    // Each phase's histogram lists only its occupied buckets: their bounds
    // are the same everywhere (`histogram::bucket_upper_bound_us`), so two
    // scrapes subtract bucket by bucket.
    for phase in Phase::REQUEST.into_iter().chain(Phase::OWN) {
        let name = header(&mut out, &phase.metric_name(), "histogram", phase.help());
        for (api, stats) in &requests {
            let Some(histogram) = stats.phases.get(&phase) else {
                continue;
            };
            let mut cumulative = 0;
            for (index, count) in histogram.occupied() {
                cumulative += count;
                let le_ms = histogram::bucket_upper_bound_us(index) as f64 / 1000.0;
                let _ = writeln!(
                    out,
                    "{name}_bucket{{request=\"{api}\",le=\"{le_ms}\"}} {cumulative}"
                );
            }
            let count = histogram.count();
            let sum_ms = histogram.sum_us() as f64 / 1000.0;
            let _ = writeln!(
                out,
                "{name}_bucket{{request=\"{api}\",le=\"+Inf\"}} {count}"
            );
            let _ = writeln!(out, "{name}_sum{{request=\"{api}\"}} {sum_ms}");
            let _ = writeln!(out, "{name}_count{{request=\"{api}\"}} {count}");
        }
    }

    let logs = snapshots.iter().flat_map(|s| &s.logs);
    let name = header(
        &mut out,
        "kafka_server_replicamanager_partitioncount",
        "gauge",
        "Partitions with a replica on this broker.",
    );
    let _ = writeln!(out, "{name} {}", logs.clone().count());
    let name = header(
        &mut out,
        "kafka_server_replicamanager_leadercount",
        "gauge",
        "Partitions this broker leads.",
    );
    let _ = writeln!(
        out,
        "{name} {}",
        snapshots.iter().map(|s| s.leaders).sum::<u64>()
    );
    for (name, help, pick) in [
        (
            "kafka_server_replicamanager_underreplicatedpartitions",
            "Led partitions whose ISR lacks a replica.",
            (|g: &ReplicationGauges| g.under_replicated_partitions as i64)
                as fn(&ReplicationGauges) -> i64,
        ),
        (
            "kafka_server_replicamanager_underminisrpartitioncount",
            "Led partitions whose ISR is smaller than min.insync.replicas.",
            |g: &ReplicationGauges| g.under_min_isr_partitions as i64,
        ),
        (
            "ringbroker_replication_followed_partitions",
            "Replicas here fetching from their leader.",
            |g: &ReplicationGauges| g.followed_partitions as i64,
        ),
    ] {
        let name = header(&mut out, name, "gauge", help);
        let total: i64 = snapshots.iter().map(|s| pick(&s.replication)).sum();
        let _ = writeln!(out, "{name} {total}");
    }
    for (name, help, pick) in [
        (
            "kafka_server_replicamanager_isrshrinks_total",
            "ISR shrinks committed for partitions led here (IsrShrinksPerSec).",
            (|g: &ReplicationGauges| g.isr_shrinks) as fn(&ReplicationGauges) -> u64,
        ),
        (
            "kafka_server_replicamanager_isrexpands_total",
            "ISR expansions committed for partitions led here (IsrExpandsPerSec).",
            |g: &ReplicationGauges| g.isr_expands,
        ),
    ] {
        let name = header(&mut out, name, "counter", help);
        let total: u64 = snapshots.iter().map(|s| pick(&s.replication)).sum();
        let _ = writeln!(out, "{name} {total}");
    }
    let controller = snapshots
        .iter()
        .find_map(|s| s.controller)
        .unwrap_or_default();
    for (name, help, value) in [
        (
            "kafka_controller_kafkacontroller_activecontrollercount",
            "1 on the active controller, 0 elsewhere.",
            u64::from(controller.active_controller),
        ),
        (
            "kafka_controller_kafkacontroller_offlinepartitionscount",
            "Partitions without a leader, on the active controller.",
            controller.offline_partitions,
        ),
        (
            "kafka_controller_kafkacontroller_preferredreplicaimbalancecount",
            "Partitions not led by their preferred replica, on the active controller.",
            controller.preferred_replica_imbalance,
        ),
    ] {
        let name = header(&mut out, name, "gauge", help);
        let _ = writeln!(out, "{name} {value}");
    }
    let name = header(
        &mut out,
        "ringbroker_replication_max_follower_lag_messages",
        "gauge",
        "The most messages an in-sync follower of a partition led here lags.",
    );
    let _ = writeln!(
        out,
        "{name} {}",
        snapshots
            .iter()
            .map(|s| s.replication.max_follower_lag_messages)
            .max()
            .unwrap_or(0)
    );
    for (name, help, pick) in [
        (
            "kafka_log_log_size",
            "Bytes of a partition's log segments.",
            (|l: &LogGauges| l.size_bytes as i64) as fn(&LogGauges) -> i64,
        ),
        (
            "kafka_log_log_numlogsegments",
            "Segments of a partition's log.",
            |l: &LogGauges| l.segments as i64,
        ),
        (
            "kafka_log_log_logstartoffset",
            "A partition's log start offset.",
            |l: &LogGauges| l.log_start_offset,
        ),
        (
            "kafka_log_log_logendoffset",
            "A partition's log end offset.",
            |l: &LogGauges| l.log_end_offset,
        ),
    ] {
        let name = header(&mut out, name, "gauge", help);
        for log in logs.clone() {
            let _ = writeln!(
                out,
                "{name}{{topic=\"{}\",partition=\"{}\"}} {}",
                label(&log.topic),
                log.partition,
                pick(log)
            );
        }
    }
    let name = header(
        &mut out,
        "kafka_server_delayedoperationpurgatory_purgatorysize",
        "gauge",
        "Requests waiting in a purgatory.",
    );
    let _ = writeln!(
        out,
        "{name}{{delayedOperation=\"Fetch\"}} {}",
        snapshots.iter().map(|s| s.parked_fetches).sum::<u64>()
    );
    let name = header(
        &mut out,
        "kafka_coordinator_group_groupmetadatamanager_numgroups",
        "gauge",
        "Groups this broker coordinates.",
    );
    let _ = writeln!(out, "{name} {}", groups.values().sum::<u64>());
    for (state, count) in &groups {
        let name = header(
            &mut out,
            &format!(
                "kafka_coordinator_group_groupmetadatamanager_numgroups{}",
                state.to_ascii_lowercase()
            ),
            "gauge",
            &format!("Groups in state {state}."),
        );
        let _ = writeln!(out, "{name} {count}");
    }

    for (name, kind, help, pick) in [
        (
            "ringbroker_shard_tasks_executed_total",
            "counter",
            "Tasks a shard's executor ran.",
            (|s: &ShardGauges| s.tasks_executed as f64) as fn(&ShardGauges) -> f64,
        ),
        (
            "ringbroker_shard_runtime_seconds_total",
            "counter",
            "Time a shard's executor spent running tasks.",
            |s: &ShardGauges| s.runtime_seconds,
        ),
        (
            "ringbroker_shard_runqueue_wait_seconds_total",
            "counter",
            "Time a shard's thread was runnable but waited for a CPU.",
            |s: &ShardGauges| s.runqueue_wait_seconds,
        ),
        (
            "ringbroker_shard_busy_ratio",
            "gauge",
            "Share of the time since the previous scrape a shard spent running tasks.",
            |s: &ShardGauges| s.busy_ratio,
        ),
        (
            "ringbroker_shard_mesh_jobs_in_flight",
            "gauge",
            "Jobs from other shards running on a shard.",
            |s: &ShardGauges| s.mesh_jobs_in_flight as f64,
        ),
        (
            "ringbroker_shard_connections",
            "gauge",
            "Connections a shard serves.",
            |s: &ShardGauges| s.connections as f64,
        ),
        (
            "ringbroker_shard_connections_moved_in_total",
            "counter",
            "Connections other shards handed to a shard (gathering a lightly loaded broker on one).",
            |s: &ShardGauges| s.connections_moved_in as f64,
        ),
    ] {
        let name = header(&mut out, name, kind, help);
        for snapshot in snapshots {
            let _ = writeln!(
                out,
                "{name}{{shard=\"{}\"}} {}",
                snapshot.shard.shard,
                pick(&snapshot.shard)
            );
        }
    }
    out
}
