//! The workloads, driven through librdkafka (the rdkafka crate) so that the
//! broker is the only difference between the two runs.

use std::collections::HashMap;
use std::path::Path;
use std::sync::atomic::{AtomicBool, AtomicU64, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

use hdrhistogram::Histogram;
use rdkafka::admin::{AdminClient, AdminOptions, NewTopic, TopicReplication, TopicResult};
use rdkafka::client::DefaultClientContext;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, Consumer, ConsumerContext};
use rdkafka::error::{KafkaError, KafkaResult, RDKafkaErrorCode};
use rdkafka::producer::{BaseRecord, DeliveryResult, Producer, ProducerContext, ThreadedProducer};
use rdkafka::{ClientContext, Message, Offset, TopicPartitionList};

/// Latencies are recorded in microseconds, up to an hour, 3 significant digits.
pub fn new_histogram() -> Histogram<u64> {
    Histogram::new_with_bounds(1, 3_600_000_000, 3).expect("histogram bounds")
}

/// Latencies second by second of a run, by when each record was due: what
/// a chart of latency over time draws.
#[derive(Clone)]
pub struct Timeline {
    /// Second 0 starts when the first record recorded was due, so what a
    /// run does before its first timed record is not a second of it.
    start_ns: Option<u64>,
    seconds: Vec<Histogram<u64>>,
}

impl Timeline {
    fn new() -> Self {
        Self {
            start_ns: None,
            seconds: Vec::new(),
        }
    }

    fn record(&mut self, due_ns: u64, latency_us: u64) {
        let start_ns = *self.start_ns.get_or_insert(due_ns);
        let second = (due_ns.saturating_sub(start_ns) / 1_000_000_000) as usize;
        while self.seconds.len() <= second {
            self.seconds
                .push(Histogram::new_with_bounds(1, 3_600_000_000, 2).expect("histogram bounds"));
        }
        let _ = self.seconds[second].record(latency_us.max(1));
    }

    /// (p99, max) in ms of each second; NaN for a second without records.
    pub fn per_second_ms(&self) -> Vec<(f64, f64)> {
        self.seconds
            .iter()
            .map(|h| {
                if h.is_empty() {
                    (f64::NAN, f64::NAN)
                } else {
                    (h.value_at_quantile(0.99) as f64 / 1e3, h.max() as f64 / 1e3)
                }
            })
            .collect()
    }
}

fn now_ns() -> u64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_nanos() as u64
}

/// How often librdkafka reports its own clocks to the producer.
const STATISTICS_INTERVAL_MS: u64 = 1000;

/// One librdkafka latency window (its statistics of one interval), in µs.
#[derive(Clone, Copy, Default)]
pub struct WindowUs {
    pub p99: i64,
    pub p99_99: i64,
    pub max: i64,
}

impl WindowUs {
    fn of(window: &Option<rdkafka::statistics::Window>) -> Self {
        match window {
            Some(w) if w.cnt > 0 => Self {
                p99: w.p99,
                p99_99: w.p99_99,
                max: w.max,
            },
            _ => Self::default(),
        }
    }

    fn worst(self, other: Self) -> Self {
        Self {
            p99: self.p99.max(other.p99),
            p99_99: self.p99_99.max(other.p99_99),
            max: self.max.max(other.max),
        }
    }
}

/// librdkafka's own clocks over one statistics interval, the worst broker
/// connection's: where a record's time goes before and after the broker.
#[derive(Clone, Copy, Default)]
pub struct ClientSecond {
    /// Seconds since the producer was created.
    pub at_s: f64,
    /// From produce() until the record is in a request (`int_latency`,
    /// linger.ms included).
    pub queue: WindowUs,
    /// From a request's enqueue until it is written to the socket
    /// (`outbuf_latency`).
    pub outbuf: WindowUs,
    /// From a request's write to its response (`rtt`): the kernel both
    /// ways and the broker.
    pub rtt: WindowUs,
}

/// Counts acknowledgements and records each one's latency from the time the
/// record was due (its delivery opaque, in ns since the epoch).
struct AckContext {
    acked: AtomicU64,
    failed: AtomicU64,
    latency_us: Mutex<(Histogram<u64>, Timeline)>,
    started: Instant,
    /// Bounded by the run's length in statistics intervals.
    client_seconds: Mutex<Vec<ClientSecond>>,
    produce_requests: RequestCount,
}

/// How many requests of one API a client has sent, as of its last
/// statistics (each `STATISTICS_INTERVAL_MS`): what a broker's cost per
/// byte depends on besides the bytes.
#[derive(Default)]
struct RequestCount {
    sent: AtomicU64,
    /// `sent` when the timed part of a run began.
    at_start: AtomicU64,
}

impl RequestCount {
    fn update(&self, statistics: &rdkafka::Statistics, api: &str) {
        let sent: i64 = statistics
            .brokers
            .values()
            .filter_map(|broker| broker.req.get(api))
            .sum();
        self.sent.store(sent as u64, Ordering::Relaxed);
    }

    fn start(&self) {
        self.at_start
            .store(self.sent.load(Ordering::Relaxed), Ordering::Relaxed);
    }

    fn since_start(&self) -> u64 {
        // A broker gone from the statistics takes its count with it.
        self.sent
            .load(Ordering::Relaxed)
            .saturating_sub(self.at_start.load(Ordering::Relaxed))
    }
}

/// A consumer's context: counts its Fetch requests.
#[derive(Default)]
struct FetchCount(RequestCount);

impl ClientContext for FetchCount {
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.0.update(&statistics, "Fetch");
    }
}

impl ConsumerContext for FetchCount {}

impl ClientContext for AckContext {
    fn stats(&self, statistics: rdkafka::Statistics) {
        self.produce_requests.update(&statistics, "Produce");
        let second = statistics.brokers.values().fold(
            ClientSecond {
                at_s: self.started.elapsed().as_secs_f64(),
                ..ClientSecond::default()
            },
            |worst, broker| ClientSecond {
                queue: worst.queue.worst(WindowUs::of(&broker.int_latency)),
                outbuf: worst.outbuf.worst(WindowUs::of(&broker.outbuf_latency)),
                rtt: worst.rtt.worst(WindowUs::of(&broker.rtt)),
                ..worst
            },
        );
        self.client_seconds.lock().unwrap().push(second);
    }
}

impl ProducerContext for AckContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, due_ns: usize) {
        match result {
            Ok(_) if due_ns == UNTIMED => {}
            Ok(_) => {
                let latency_us = now_ns().saturating_sub(due_ns as u64) / 1_000;
                let mut latency = self.latency_us.lock().unwrap();
                let _ = latency.0.record(latency_us.max(1));
                latency.1.record(due_ns as u64, latency_us);
                self.acked.fetch_add(1, Ordering::Relaxed);
            }
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What a produce workload measured.
pub struct ProduceOutcome {
    pub records: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    pub ack_latency_us: Histogram<u64>,
    pub ack_timeline: Timeline,
    /// librdkafka's own clocks, one per statistics interval.
    pub client_seconds: Vec<ClientSecond>,
    /// Produce requests sent, as of the producer's last statistics.
    pub produce_requests: u64,
}

pub struct ProduceSpec<'a> {
    pub topic: &'a str,
    pub partitions: i32,
    pub records: u64,
    pub value_bytes: usize,
    pub acks: &'a str,
    pub linger_ms: u32,
    /// None: as fast as the producer's queue allows; Some: records per second.
    pub rate: Option<f64>,
}

fn producer(address: &str, spec: &ProduceSpec<'_>) -> ThreadedProducer<AckContext> {
    ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("acks", spec.acks)
        .set("linger.ms", spec.linger_ms.to_string())
        .set("queue.buffering.max.kbytes", "1048576")
        .set("statistics.interval.ms", STATISTICS_INTERVAL_MS.to_string())
        .create_with_context(AckContext {
            acked: AtomicU64::new(0),
            failed: AtomicU64::new(0),
            latency_us: Mutex::new((new_histogram(), Timeline::new())),
            started: Instant::now(),
            client_seconds: Mutex::new(Vec::new()),
            produce_requests: RequestCount::default(),
        })
        .expect("create the producer")
}

/// Queues one record (its delivery opaque the time it was due), waiting
/// while the producer's queue is full.
fn send<C: ProducerContext<DeliveryOpaque = usize> + 'static>(
    producer: &ThreadedProducer<C>,
    topic: &str,
    partition: i32,
    due_ns: u64,
    value: &[u8],
) {
    let mut record = BaseRecord::<(), [u8], usize>::with_opaque_to(topic, due_ns as usize)
        .partition(partition)
        .payload(value);
    loop {
        match producer.send(record) {
            Ok(()) => return,
            Err((KafkaError::MessageProduction(RDKafkaErrorCode::QueueFull), back)) => {
                record = back;
                std::thread::sleep(Duration::from_micros(200));
            }
            Err((error, _)) => panic!("produce failed: {error}"),
        }
    }
}

/// The delivery opaque of a record that is not timed.
const UNTIMED: usize = 0;

/// Sends one untimed record, with an empty value, to every partition and
/// waits for them: a fixed-rate run then does not count the producer's own
/// first connections to the leaders (on three brokers they held records in
/// its queue for up to 105 ms in the run's first second). The end-to-end
/// reader of `produce_and_consume` skips values shorter than a due time.
fn connect_to_every_leader(producer: &ThreadedProducer<AckContext>, spec: &ProduceSpec<'_>) {
    for partition in 0..spec.partitions {
        send(producer, spec.topic, partition, UNTIMED as u64, &[]);
    }
    producer
        .flush(Duration::from_secs(60))
        .expect("every untimed record acknowledged");
    producer.context().client_seconds.lock().unwrap().clear();
    producer.context().produce_requests.start();
}

/// Fixed-rate records are released in ticks of this length: every record
/// scheduled within a tick is due at its start, so the producer sleeps at
/// most once per tick (as Kafka's ProducerPerformance sleeps in 2 ms steps)
/// rather than once per record, on cores it shares with the brokers.
const PACING_TICK_NS: u64 = 1_000_000;

/// When record `i` of a run at `rate` records/s started at `start_ns` is
/// due: the start of the tick its exact schedule falls in.
fn due_at_ns(start_ns: u64, i: u64, rate: f64) -> u64 {
    let exact_ns = (i as f64 * 1e9 / rate) as u64;
    start_ns + exact_ns / PACING_TICK_NS * PACING_TICK_NS
}

fn sleep_until(due_ns: u64) {
    let wait_ns = due_ns.saturating_sub(now_ns());
    if wait_ns > 0 {
        std::thread::sleep(Duration::from_nanos(wait_ns));
    }
}

/// Produces `records` values round-robin over the partitions; each value
/// starts with the time it was due (ns since the epoch), for end-to-end latency.
pub fn produce(address: &str, spec: &ProduceSpec<'_>) -> ProduceOutcome {
    let producer = producer(address, spec);
    if spec.rate.is_some() {
        connect_to_every_leader(&producer, spec);
    }
    let mut value = vec![b'x'; spec.value_bytes.max(8)];
    let started = Instant::now();
    let start_ns = now_ns();
    for i in 0..spec.records {
        let due_ns = match spec.rate {
            // Coordinated omission: latency counts from when a record was due,
            // not from when a late producer got round to sending it.
            Some(rate) => {
                let due = due_at_ns(start_ns, i, rate);
                sleep_until(due);
                due
            }
            None => now_ns(),
        };
        value[..8].copy_from_slice(&due_ns.to_be_bytes());
        let partition = (i % spec.partitions as u64) as i32;
        send(&producer, spec.topic, partition, due_ns, &value);
    }
    producer
        .flush(Duration::from_secs(300))
        .expect("every record acknowledged");
    let elapsed = started.elapsed();
    let context = producer.context();
    assert_eq!(
        context.failed.load(Ordering::Relaxed),
        0,
        "failed deliveries"
    );
    let records = context.acked.load(Ordering::Relaxed);
    let (ack_latency_us, ack_timeline) = context.latency_us.lock().unwrap().clone();
    let client_seconds = context.client_seconds.lock().unwrap().clone();
    ProduceOutcome {
        records,
        bytes: records * spec.value_bytes as u64,
        elapsed,
        ack_latency_us,
        ack_timeline,
        client_seconds,
        produce_requests: context.produce_requests.since_start(),
    }
}

/// What a consume workload measured.
pub struct ConsumeOutcome {
    pub records: u64,
    pub bytes: u64,
    pub elapsed: Duration,
    /// From each record's due time to its arrival, in µs.
    pub end_to_end_us: Histogram<u64>,
    pub end_to_end_timeline: Timeline,
    /// Fetch requests sent, as of the consumer's last statistics.
    pub fetch_requests: u64,
}

/// A consumer assigned every partition of `topic`, from the beginning or,
/// with `from_end`, from each partition's current end.
fn consumer(
    address: &str,
    topic: &str,
    partitions: i32,
    from_end: bool,
) -> BaseConsumer<FetchCount> {
    let consumer: BaseConsumer<FetchCount> = ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("group.id", "bench")
        .set("enable.auto.commit", "false")
        .set("enable.partition.eof", "false")
        .set("statistics.interval.ms", STATISTICS_INTERVAL_MS.to_string())
        .create_with_context(FetchCount::default())
        .expect("create the consumer");
    let mut assignment = TopicPartitionList::new();
    for partition in 0..partitions {
        let from = if from_end {
            // A new topic's leaders may not be known to this client yet.
            let deadline = Instant::now() + Duration::from_secs(30);
            let high = loop {
                match consumer.fetch_watermarks(topic, partition, Duration::from_secs(10)) {
                    Ok((_, high)) => break high,
                    Err(error) if Instant::now() < deadline => {
                        eprintln!("  {topic}-{partition}'s end, again: {error}");
                        std::thread::sleep(Duration::from_millis(200));
                    }
                    Err(error) => panic!("the end of {topic}-{partition}: {error}"),
                }
            };
            Offset::Offset(high)
        } else {
            Offset::Beginning
        };
        assignment
            .add_partition_offset(topic, partition, from)
            .expect("assign");
    }
    consumer.assign(&assignment).expect("assign");
    consumer
}

/// Reads `records` records from the beginning of every partition.
pub fn consume_from_beginning(
    address: &str,
    topic: &str,
    partitions: i32,
    records: u64,
) -> ConsumeOutcome {
    let consumer = consumer(address, topic, partitions, false);
    let started = Instant::now();
    let (mut read, mut bytes) = (0u64, 0u64);
    let deadline = started + Duration::from_secs(600);
    while read < records {
        assert!(
            Instant::now() < deadline,
            "catch-up stalled at {read} records"
        );
        if let Some(message) = consumer.poll(Duration::from_millis(100)) {
            let message = message.expect("consume");
            read += 1;
            bytes += message.payload_len() as u64;
        }
    }
    ConsumeOutcome {
        records: read,
        bytes,
        elapsed: started.elapsed(),
        end_to_end_us: new_histogram(),
        end_to_end_timeline: Timeline::new(),
        fetch_requests: consumer.context().0.since_start(),
    }
}

/// A consumer reading from the end while a fixed-rate producer runs; returns
/// both sides' measurements.
pub fn produce_and_consume(
    address: &str,
    spec: &ProduceSpec<'_>,
) -> (ProduceOutcome, ConsumeOutcome) {
    let consumer = consumer(address, spec.topic, spec.partitions, true);
    let done = Arc::new(AtomicBool::new(false));
    let expected = spec.records;
    let reader_done = done.clone();
    let reader = std::thread::spawn(move || {
        let mut end_to_end_us = new_histogram();
        let mut end_to_end_timeline = Timeline::new();
        let (mut read, mut bytes) = (0u64, 0u64);
        let started = Instant::now();
        consumer.context().0.start();
        let deadline = Instant::now() + Duration::from_secs(600);
        while read < expected && Instant::now() < deadline {
            if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
                let payload = message.payload().unwrap_or_default();
                // Shorter values are the producer's untimed ones.
                if payload.len() >= 8 {
                    let due_ns = u64::from_be_bytes(payload[..8].try_into().unwrap());
                    let latency_us = now_ns().saturating_sub(due_ns) / 1_000;
                    let _ = end_to_end_us.record(latency_us.max(1));
                    end_to_end_timeline.record(due_ns, latency_us);
                    read += 1;
                    bytes += payload.len() as u64;
                }
            }
            if reader_done.load(Ordering::Acquire) && read >= expected {
                break;
            }
        }
        ConsumeOutcome {
            records: read,
            bytes,
            elapsed: started.elapsed(),
            end_to_end_us,
            end_to_end_timeline,
            fetch_requests: consumer.context().0.since_start(),
        }
    });
    let produced = produce(address, spec);
    done.store(true, Ordering::Release);
    let consumed = reader.join().expect("the reader thread");
    assert_eq!(consumed.records, produced.records, "every record read back");
    (produced, consumed)
}

/// Creates a topic (replication factor 1), waiting for the answer.
pub fn create_topic(address: &str, topic: &str, partitions: i32) -> Duration {
    create_replicated_topic(address, topic, partitions, 1, &[])
}

fn admin_client(address: &str) -> AdminClient<DefaultClientContext> {
    ClientConfig::new()
        .set("bootstrap.servers", address)
        .create()
        .expect("create the admin client")
}

/// Panics unless the admin request `api` succeeded for every topic in it.
fn expect_every_topic(results: KafkaResult<Vec<TopicResult>>, api: &str) {
    for result in results.unwrap_or_else(|error| panic!("{api}: {error}")) {
        result.unwrap_or_else(|(name, error)| panic!("{api} for {name}: {error}"));
    }
}

/// Creates a topic with `replication_factor` and `configs`, and waits until
/// a fresh client sees every partition's leader; returns how long it took.
pub fn create_replicated_topic(
    address: &str,
    topic: &str,
    partitions: i32,
    replication_factor: i32,
    configs: &[(&str, &str)],
) -> Duration {
    let admin = admin_client(address);
    let started = Instant::now();
    let mut new_topic = NewTopic::new(
        topic,
        partitions,
        TopicReplication::Fixed(replication_factor),
    );
    for (key, value) in configs {
        new_topic = new_topic.set(key, value);
    }
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(120)));
    let created = futures_lite::future::block_on(admin.create_topics(&[new_topic], &options));
    expect_every_topic(created, "CreateTopics");
    // Leaders known to a fresh client: every partition ready to take records.
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .create()
        .expect("create a metadata client");
    let deadline = Instant::now() + Duration::from_secs(120);
    loop {
        let ready = probe
            .fetch_metadata(Some(topic), Duration::from_secs(10))
            .ok()
            .and_then(|m| {
                m.topics().first().map(|t| {
                    t.partitions().len() == partitions as usize
                        && t.partitions().iter().all(|p| p.leader() >= 0)
                })
            })
            .unwrap_or(false);
        if ready {
            return started.elapsed();
        }
        assert!(Instant::now() < deadline, "{topic} never got its leaders");
        std::thread::sleep(Duration::from_millis(50));
    }
}

/// Deletes `topic` and waits, up to `within`, until no directory under
/// `broker_dirs` holds one of its partitions: a run's records then neither fill
/// the disk for the runs after it nor get removed while those run.
pub fn delete_topic(address: &str, topic: &str, broker_dirs: &Path, within: Duration) {
    let admin = admin_client(address);
    let options = AdminOptions::new().operation_timeout(Some(Duration::from_secs(60)));
    let deleted = futures_lite::future::block_on(admin.delete_topics(&[topic], &options));
    expect_every_topic(deleted, "DeleteTopics");
    let deadline = Instant::now() + within;
    while holds_partition_of(broker_dirs, topic, 3) {
        assert!(
            Instant::now() < deadline,
            "{topic}'s partitions still on disk under {} after {within:?}",
            broker_dirs.display()
        );
        std::thread::sleep(Duration::from_millis(200));
    }
    // Ringbroker's directories go at once, their blocks held for the delay.
    std::thread::sleep(Duration::from_millis(2 * crate::brokers::DELETE_DELAY_MS));
}

/// Whether a directory named `<topic>-<partition>...` is within `depth`
/// levels of `dir` (Kafka's doomed ones are `<topic>-<partition>.<id>-delete`).
fn holds_partition_of(dir: &Path, topic: &str, depth: usize) -> bool {
    let prefix = format!("{topic}-");
    let Ok(entries) = std::fs::read_dir(dir) else {
        return false;
    };
    entries.flatten().any(|entry| {
        let is_dir = entry.file_type().is_ok_and(|t| t.is_dir());
        let name = entry.file_name();
        let partition = name.to_str().is_some_and(|name| {
            name.strip_prefix(&prefix)
                .is_some_and(|rest| rest.starts_with(|c: char| c.is_ascii_digit()))
        });
        is_dir && (partition || (depth > 0 && holds_partition_of(&entry.path(), topic, depth - 1)))
    })
}

/// Records each partition takes in `warm_up_topic`.
pub const WARM_UP_RECORDS_PER_PARTITION: u64 = 16;

/// Produces a few records to every partition with acks=all and waits for
/// them all: a fresh topic's followers have then fetched and its producers
/// know every leader, so a timed run starting next does not measure the
/// topic's first second (followers joining took 0.8 s of acks wait).
pub fn warm_up_topic(address: &str, topic: &str, partitions: i32) {
    let spec = ProduceSpec {
        topic,
        partitions,
        records: partitions as u64 * WARM_UP_RECORDS_PER_PARTITION,
        value_bytes: 1024,
        acks: "all",
        linger_ms: 0,
        rate: None,
    };
    let outcome = produce(address, &spec);
    assert_eq!(
        outcome.records, spec.records,
        "every warm-up record acknowledged"
    );
}

/// Percentiles reported for latencies, with their labels.
pub const PERCENTILES: &[(&str, f64)] = &[
    ("p50", 50.0),
    ("p99", 99.0),
    ("p99.9", 99.9),
    ("p99.99", 99.99),
    ("max", 100.0),
];

/// The percentiles of a histogram in milliseconds, by label.
pub fn latency_ms(histogram: &Histogram<u64>) -> HashMap<&'static str, f64> {
    PERCENTILES
        .iter()
        .map(|(label, q)| {
            let us = if *q >= 100.0 {
                histogram.max()
            } else {
                histogram.value_at_quantile(q / 100.0)
            };
            (*label, us as f64 / 1_000.0)
        })
        .collect()
}

/// Each partition's leader as a fresh client sees it.
pub fn partition_leaders(address: &str, topic: &str) -> Vec<i32> {
    let probe: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", address)
        .create()
        .expect("create a metadata client");
    let metadata = probe
        .fetch_metadata(Some(topic), Duration::from_secs(10))
        .expect("the topic's metadata");
    let mut partitions: Vec<(i32, i32)> = metadata
        .topics()
        .first()
        .map(|t| {
            t.partitions()
                .iter()
                .map(|p| (p.id(), p.leader()))
                .collect()
        })
        .unwrap_or_default();
    partitions.sort();
    partitions.into_iter().map(|(_, leader)| leader).collect()
}

/// For a failover: the moment a broker was killed, and each partition's
/// first acknowledgement of a record due after it (ns since the epoch).
struct FailoverContext {
    killed_ns: AtomicU64,
    first_ack_ns: Mutex<HashMap<i32, u64>>,
    failed: AtomicU64,
}

impl ClientContext for FailoverContext {}

impl ProducerContext for FailoverContext {
    type DeliveryOpaque = usize;

    fn delivery(&self, result: &DeliveryResult<'_>, due_ns: usize) {
        match result {
            Ok(message) => {
                let killed_ns = self.killed_ns.load(Ordering::Acquire);
                if killed_ns != 0 && due_ns as u64 > killed_ns {
                    let mut first = self.first_ack_ns.lock().unwrap();
                    first.entry(message.partition()).or_insert_with(now_ns);
                }
            }
            Err(_) => {
                self.failed.fetch_add(1, Ordering::Relaxed);
            }
        }
    }
}

/// What a failover measured: from the kill to the first acknowledged
/// produce on the victim's partitions, the first of them and the last.
pub struct FailoverOutcome {
    pub first_partition: Duration,
    pub all_partitions: Duration,
    pub records: u64,
}

/// An idempotent acks=all producer writes `rate` records/s of `value_bytes`
/// round-robin over the partitions; after `kill_after`, `kill` is called
/// with the partitions it must take down (the leader of partition 0's) and
/// the producer goes on until each of them acknowledges a record sent after
/// the kill, or `give_up_after`. Every record must be acknowledged.
pub fn produce_through_failover(
    address: &str,
    spec: &ProduceSpec<'_>,
    kill_after: Duration,
    give_up_after: Duration,
    kill: impl FnOnce() -> Vec<i32>,
) -> FailoverOutcome {
    let rate = spec.rate.expect("a failover runs at a fixed rate");
    let producer: ThreadedProducer<FailoverContext> = ClientConfig::new()
        .set("bootstrap.servers", address)
        .set("acks", "all")
        .set("enable.idempotence", "true")
        .set("linger.ms", spec.linger_ms.to_string())
        .create_with_context(FailoverContext {
            killed_ns: AtomicU64::new(0),
            first_ack_ns: Mutex::new(HashMap::new()),
            failed: AtomicU64::new(0),
        })
        .expect("create the producer");
    let mut value = vec![b'x'; spec.value_bytes.max(8)];
    let start_ns = now_ns();
    let mut kill = Some(kill);
    let mut victims: Vec<i32> = Vec::new();
    let mut killed_at: Option<Instant> = None;
    let mut sent = 0u64;
    loop {
        let due_ns = due_at_ns(start_ns, sent, rate);
        sleep_until(due_ns);
        match killed_at {
            None if Duration::from_nanos(now_ns() - start_ns) >= kill_after => {
                let kill = kill.take().expect("one kill");
                producer
                    .context()
                    .killed_ns
                    .store(now_ns(), Ordering::Release);
                killed_at = Some(Instant::now());
                victims = kill();
            }
            Some(at) => {
                let first_ack = producer.context().first_ack_ns.lock().unwrap();
                let all = victims.iter().all(|p| first_ack.contains_key(p));
                drop(first_ack);
                if all || at.elapsed() > give_up_after {
                    break;
                }
            }
            None => {}
        }
        value[..8].copy_from_slice(&due_ns.to_be_bytes());
        let partition = (sent % spec.partitions as u64) as i32;
        send(&producer, spec.topic, partition, due_ns, &value);
        sent += 1;
    }
    producer
        .flush(Duration::from_secs(300))
        .expect("every record acknowledged");
    let context = producer.context();
    assert_eq!(
        context.failed.load(Ordering::Relaxed),
        0,
        "failed deliveries"
    );
    let killed_ns = context.killed_ns.load(Ordering::Acquire);
    let first_ack = context.first_ack_ns.lock().unwrap();
    let after_kill: Vec<Duration> = victims
        .iter()
        .map(|p| {
            let acked_ns = first_ack.get(p).copied().unwrap_or_else(|| {
                panic!("partition {p} took no write within {give_up_after:?} of the kill")
            });
            Duration::from_nanos(acked_ns - killed_ns)
        })
        .collect();
    FailoverOutcome {
        first_partition: after_kill.iter().min().copied().unwrap_or_default(),
        all_partitions: after_kill.iter().max().copied().unwrap_or_default(),
        records: sent,
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_timeline_starts_at_its_first_record() {
        let mut timeline = Timeline::new();
        timeline.record(7_000_000_000, 2_000);
        timeline.record(6_999_000_000, 3_000);
        timeline.record(8_500_000_000, 4_000);
        let seconds = timeline.per_second_ms();
        // Second 0 holds the first record and one due just before it.
        assert_eq!(seconds.len(), 2);
        assert!((seconds[0].1 - 3.0).abs() < 0.05, "{seconds:?}");
        assert!((seconds[1].1 - 4.0).abs() < 0.05, "{seconds:?}");
    }

    #[test]
    fn paced_records_are_due_at_their_ticks_start() {
        let start_ns = 5_000_000_000;
        let rate = 19_182.0;
        let mut last_ns = start_ns;
        for i in 0..100_000 {
            let due_ns = due_at_ns(start_ns, i, rate);
            let exact_ns = start_ns + (i as f64 * 1e9 / rate) as u64;
            assert!(due_ns <= exact_ns && exact_ns - due_ns < PACING_TICK_NS);
            assert_eq!((due_ns - start_ns) % PACING_TICK_NS, 0);
            assert!(due_ns >= last_ns);
            last_ns = due_ns;
        }
        // About rate / 1000 records share each tick.
        let first_tick = (0..100).filter(|&i| due_at_ns(start_ns, i, rate) == start_ns);
        assert_eq!(first_tick.count(), 20);
    }

    #[test]
    fn a_topics_partition_directories_are_found_in_any_broker() {
        let root = std::env::temp_dir().join(format!("bench-holds-{}", std::process::id()));
        let data = root.join("cluster/broker-2/data");
        std::fs::create_dir_all(data.join("lat-all-10-javax-0")).unwrap();
        std::fs::create_dir_all(data.join("lat-all-10-java.stray")).unwrap();
        std::fs::write(data.join("lat-all-10-java-9"), b"a file").unwrap();
        assert!(!holds_partition_of(&root, "lat-all-10-java", 3));
        let doomed = data.join("lat-all-10-java-3.5e0f2a-delete");
        std::fs::create_dir_all(&doomed).unwrap();
        assert!(holds_partition_of(&root, "lat-all-10-java", 3));
        assert!(!holds_partition_of(&root, "lat-all-10-java", 2));
        std::fs::remove_dir(&doomed).unwrap();
        std::fs::create_dir_all(data.join("lat-all-10-java-0")).unwrap();
        assert!(holds_partition_of(&root, "lat-all-10-java", 3));
        std::fs::remove_dir_all(&root).unwrap();
    }
}
