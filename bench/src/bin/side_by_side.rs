//! ringbroker against Apache Kafka on this machine, one run: the same
//! librdkafka client, the same topics, each workload alternating between the
//! two brokers, every broker started fresh. Writes a report to bench/results/.
//!
//! bench/run (fetches Kafka's jars from Maven Central, builds, then runs this)

use std::path::PathBuf;
use std::time::{Duration, Instant};

use bench::brokers::{self, BrokerKind, BrokerSources, RssSampler};
use bench::cluster;
use bench::report::{self, Metrics};
use bench::workloads::{self, latency_ms, ProduceSpec};
use clap::Parser;
use hdrhistogram::Histogram;
// jemalloc as this process's malloc, for librdkafka's C code as much as for
// Rust. With glibc's, every message op librdkafka's fetch thread allocates is
// freed by the consuming thread, and the two contend for one arena's lock: in
// W3 that cost the client 1.4-2.1 CPU-s per GiB (0.9-1.0 with jemalloc),
// enough to make the client, not the broker, what bounded W1 and W3 on two
// cores. Both brokers get the same client.
use tikv_jemalloc_sys as _;

#[derive(Parser)]
struct Args {
    /// Scratch directory for the brokers' data (emptied per run).
    #[arg(long, default_value = "bench/work")]
    work_dir: PathBuf,
    /// Where the report goes.
    #[arg(long, default_value = "bench/results")]
    results_dir: PathBuf,
    #[arg(long, default_value = "target/release/ringbroker")]
    ringbroker_bin: PathBuf,
    #[arg(long, default_value = "tests/support/kafka/kafka-run-class.sh")]
    kafka_run_class: PathBuf,
    /// Kafka 3.9.1's jars, for W6 (ZooKeeper and ZooKeeper-mode Kafka).
    #[arg(long, default_value = "tests/.deps/kafka-3.9")]
    kafka_zk_jars: PathBuf,
    /// Only W6, topic creation on three-broker ZooKeeper-mode clusters.
    #[arg(long)]
    w6_only: bool,
    /// Only W7, replication on three-broker ZooKeeper-mode clusters.
    #[arg(long)]
    w7_only: bool,
    /// W7: 1 KiB records produced as fast as the client goes.
    #[arg(long, default_value_t = 500_000)]
    w7_records: u64,
    /// W7: records/s of the fixed-rate latency run (W2's seconds long).
    #[arg(long, default_value_t = 10_000.0)]
    w7_rate: f64,
    /// Runs of every workload per broker; medians are reported.
    #[arg(long, default_value_t = 3)]
    repeat: usize,
    /// W1: 1 KiB records produced (2.2M: a little over 2 GiB, read back by W3).
    #[arg(long, default_value_t = 2_200_000)]
    w1_records: u64,
    /// W2: seconds at the fixed rate.
    #[arg(long, default_value_t = 20)]
    w2_seconds: u64,
    /// W4: 100-byte records produced over 1000 partitions.
    #[arg(long, default_value_t = 1_000_000)]
    w4_records: u64,
    /// Only this broker ("ringbroker" or "kafka"), for profiling one side;
    /// W2 then needs --w2-rate.
    #[arg(long)]
    only: Option<String>,
    /// W2's rate in records/s instead of half of Kafka's W1.
    #[arg(long)]
    w2_rate: Option<f64>,
    /// Only W2 (needs --w2-rate), for iterating on latency.
    #[arg(long)]
    latency_only: bool,
    /// A `key=value` added to ringbroker's server.properties (repeatable).
    #[arg(long = "ringbroker-config")]
    ringbroker_config: Vec<String>,
}

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;
/// How long a broker sits idle before its idle memory is read.
const IDLE_SETTLE: Duration = Duration::from_secs(3);

/// CPU time this process (the client) has used, in seconds.
fn client_cpu_seconds() -> f64 {
    brokers::cpu_seconds(std::process::id()).total
}

/// What one workload cost: broker and client CPU seconds, the broker's peak RSS.
struct Usage {
    broker_cpu_s: f64,
    client_cpu_s: f64,
    broker_peak_rss_bytes: u64,
}

/// Runs `work` while measuring what it costs the brokers `pids` (their CPU
/// and peak RSS summed) and the client.
fn measured<T>(pids: &[u32], work: impl FnOnce() -> T) -> (T, Usage) {
    let brokers_cpu = || {
        pids.iter()
            .map(|pid| brokers::cpu_seconds(*pid).total)
            .sum::<f64>()
    };
    let (broker_cpu, client_cpu) = (brokers_cpu(), client_cpu_seconds());
    let rss: Vec<RssSampler> = pids.iter().map(|pid| RssSampler::start(*pid)).collect();
    let outcome = work();
    let usage = Usage {
        broker_peak_rss_bytes: rss.into_iter().map(RssSampler::peak_bytes).sum(),
        broker_cpu_s: brokers_cpu() - broker_cpu,
        client_cpu_s: client_cpu_seconds() - client_cpu,
    };
    (outcome, usage)
}

/// A workload's throughput ("{what} MB/s", "{what} records/s") and its cost
/// ("{workload} broker CPU-s per GiB", ...), per GiB of values moved.
fn record_throughput(
    metrics: &mut Metrics,
    workload: &str,
    what: &str,
    (records, bytes, elapsed): (u64, u64, Duration),
    usage: &Usage,
) {
    let gib = bytes as f64 / GIB;
    let seconds = elapsed.as_secs_f64();
    let mut put = |name: String, value: f64| metrics.insert(name, value);
    put(format!("{what} MB/s"), bytes as f64 / 1e6 / seconds);
    put(format!("{what} records/s"), records as f64 / seconds);
    put(
        format!("{workload} broker CPU-s per GiB"),
        usage.broker_cpu_s / gib,
    );
    put(
        format!("{workload} client CPU-s per GiB"),
        usage.client_cpu_s / gib,
    );
    put(
        format!("{workload} broker peak RSS MiB"),
        usage.broker_peak_rss_bytes as f64 / MIB,
    );
}

/// W5, W1, W3 and W4 on a fresh broker.
fn throughput_run(
    args: &Args,
    sources: &BrokerSources,
    kind: BrokerKind,
    progress: &str,
) -> Metrics {
    let mut metrics = Metrics::new();
    let broker = brokers::start(kind, sources, &args.work_dir.join("broker"));
    let (address, pid) = (broker.address.clone(), broker.pid());
    metrics.insert(
        "W5 start-up to first Metadata ms".into(),
        broker.startup.as_secs_f64() * 1e3,
    );
    std::thread::sleep(IDLE_SETTLE);
    metrics.insert(
        "W5 idle RSS MiB".into(),
        brokers::rss_bytes(pid) as f64 / MIB,
    );

    eprintln!(
        "{progress} {}: W1 produce {} x 1 KiB, acks=1, linger.ms=5",
        kind.name(),
        args.w1_records
    );
    workloads::create_topic(&address, "w1", 6);
    let (w1, usage) = measured(&[pid], || {
        workloads::produce(
            &address,
            &ProduceSpec {
                topic: "w1",
                partitions: 6,
                records: args.w1_records,
                value_bytes: 1024,
                acks: "1",
                linger_ms: 5,
                rate: None,
            },
        )
    });
    record_throughput(
        &mut metrics,
        "W1",
        "W1 produce",
        (w1.records, w1.bytes, w1.elapsed),
        &usage,
    );
    let ack = latency_ms(&w1.ack_latency_us);
    metrics.insert("W1 ack latency p50 ms".into(), ack["p50"]);
    metrics.insert("W1 ack latency p99 ms".into(), ack["p99"]);
    eprintln!(
        "{progress} {}: W1 {:.0} MB/s; W3 reading it back from the beginning",
        kind.name(),
        metrics["W1 produce MB/s"]
    );

    let (w3, usage) = measured(&[pid], || {
        workloads::consume_from_beginning(&address, "w1", 6, w1.records)
    });
    record_throughput(
        &mut metrics,
        "W3",
        "W3 catch-up",
        (w3.records, w3.bytes, w3.elapsed),
        &usage,
    );
    eprintln!(
        "{progress} {}: W3 {:.0} MB/s; W4 {} x 100 B over 1000 partitions",
        kind.name(),
        metrics["W3 catch-up MB/s"],
        args.w4_records
    );

    let created = workloads::create_topic(&address, "w4", 1000);
    metrics.insert("W4 create 1000 partitions s".into(), created.as_secs_f64());
    let (w4, usage) = measured(&[pid], || {
        workloads::produce(
            &address,
            &ProduceSpec {
                topic: "w4",
                partitions: 1000,
                records: args.w4_records,
                value_bytes: 100,
                acks: "1",
                linger_ms: 5,
                rate: None,
            },
        )
    });
    record_throughput(
        &mut metrics,
        "W4",
        "W4 produce",
        (w4.records, w4.bytes, w4.elapsed),
        &usage,
    );
    eprintln!(
        "{progress} {}: W4 {:.1} MB/s",
        kind.name(),
        metrics["W4 produce MB/s"]
    );
    broker.stop();
    metrics
}

/// W2 on a fresh broker: `rate` records/s of 1 KiB, acks=all.
fn latency_run(
    args: &Args,
    sources: &BrokerSources,
    kind: BrokerKind,
    rate: f64,
    progress: &str,
) -> Metrics {
    let mut metrics = Metrics::new();
    let broker = brokers::start(kind, sources, &args.work_dir.join("broker"));
    let (address, pid) = (broker.address.clone(), broker.pid());
    workloads::create_topic(&address, "w2", 6);
    eprintln!(
        "{progress} {}: W2 {rate:.0} records/s for {} s, acks=all",
        kind.name(),
        args.w2_seconds
    );
    let ((produced, consumed), usage) = measured(&[pid], || {
        workloads::produce_and_consume(
            &address,
            &ProduceSpec {
                topic: "w2",
                partitions: 6,
                records: (rate * args.w2_seconds as f64) as u64,
                value_bytes: 1024,
                acks: "all",
                // W1's producer, but acks=all at a fixed rate.
                linger_ms: 5,
                rate: Some(rate),
            },
        )
    });
    record_throughput(
        &mut metrics,
        "W2",
        "W2 rate",
        (produced.records, produced.bytes, produced.elapsed),
        &usage,
    );
    for (kind, histogram) in [
        ("end-to-end", &consumed.end_to_end_us),
        ("ack", &produced.ack_latency_us),
    ] {
        for (label, ms) in latency_ms(histogram) {
            metrics.insert(format!("W2 {kind} {label} ms"), ms);
        }
    }
    eprintln!(
        "{progress} {}: W2 end-to-end p99.9 {:.2} ms, ack p99.9 {:.2} ms",
        kind.name(),
        metrics["W2 end-to-end p99.9 ms"],
        metrics["W2 ack p99.9 ms"]
    );
    broker.stop();
    metrics
}

/// W6 on fresh three-broker ZooKeeper-mode clusters: ringbrokers, or Kafka
/// 3.9.1 brokers (the last Kafka with ZooKeeper mode).
fn cluster_run(args: &Args, sources: &BrokerSources, kind: BrokerKind, progress: &str) -> Metrics {
    eprintln!(
        "{progress} {}: W6 1000 partitions created on 3 brokers in ZooKeeper mode",
        kind.name()
    );
    let cluster = cluster::start(kind, sources, &args.work_dir.join("cluster"));
    let created = workloads::create_topic(&cluster.bootstrap(), "w6", 1000);
    cluster.stop();
    eprintln!(
        "{progress} {}: W6 {:.2} s",
        kind.name(),
        created.as_secs_f64()
    );
    let mut metrics = Metrics::new();
    metrics.insert(
        "W6 create 1000 partitions on 3 brokers s".into(),
        created.as_secs_f64(),
    );
    metrics
}

/// W7's topics: replication factor 3, `min.insync.replicas=2`.
const W7_TOPIC_CONFIGS: &[(&str, &str)] = &[("min.insync.replicas", "2")];
/// W7's failover: the leader is killed this long into the producer's run...
const W7_KILL_AFTER: Duration = Duration::from_secs(5);
/// ... and its partitions must take writes again within this.
const W7_FAILOVER_GIVE_UP: Duration = Duration::from_secs(120);
/// W7's failover producer, records/s of 1 KiB.
const W7_FAILOVER_RATE: f64 = 2_000.0;

/// The percentiles of a latency histogram as `{prefix} {label} ms`.
fn insert_latencies(metrics: &mut Metrics, prefix: &str, histogram: &Histogram<u64>) {
    for (label, ms) in latency_ms(histogram) {
        metrics.insert(format!("{prefix} {label} ms"), ms);
    }
}

/// W7 on a fresh three-broker ZooKeeper-mode cluster, each broker with its
/// own defaults: replication factor 3, `min.insync.replicas=2`, acks=all.
/// Throughput as fast as the client goes, latency at a fixed rate, and the
/// time from kill -9 of a leader to the next acknowledged produce on its
/// partitions.
fn replication_run(
    args: &Args,
    sources: &BrokerSources,
    kind: BrokerKind,
    progress: &str,
) -> Metrics {
    let mut metrics = Metrics::new();
    let mut cluster = cluster::start(kind, sources, &args.work_dir.join("cluster"));
    let bootstrap = cluster.bootstrap();
    let pids: Vec<u32> = cluster.brokers.iter().map(|b| b.pid()).collect();
    if let Some(ms) = cluster.negotiated_session_timeout_ms() {
        metrics.insert("W7 ZooKeeper session s".into(), ms as f64 / 1e3);
    }
    let spec = |topic, records, rate| ProduceSpec {
        topic,
        partitions: 6,
        records,
        value_bytes: 1024,
        acks: "all",
        linger_ms: 5,
        rate,
    };
    for topic in ["w7", "w7-latency", "w7-failover"] {
        workloads::create_replicated_topic(&bootstrap, topic, 6, 3, W7_TOPIC_CONFIGS);
    }

    eprintln!(
        "{progress} {}: W7 produce {} x 1 KiB to 3 replicas, acks=all",
        kind.name(),
        args.w7_records
    );
    let (w7, usage) = measured(&pids, || {
        workloads::produce(&bootstrap, &spec("w7", args.w7_records, None))
    });
    let totals = (w7.records, w7.bytes, w7.elapsed);
    record_throughput(&mut metrics, "W7", "W7 produce", totals, &usage);
    let ack = latency_ms(&w7.ack_latency_us);
    metrics.insert("W7 ack latency p50 ms".into(), ack["p50"]);
    metrics.insert("W7 ack latency p99 ms".into(), ack["p99"]);

    let rate = args.w7_rate;
    eprintln!(
        "{progress} {}: W7 {:.0} MB/s; {rate:.0} records/s for {} s",
        kind.name(),
        metrics["W7 produce MB/s"],
        args.w2_seconds
    );
    let records = (rate * args.w2_seconds as f64) as u64;
    let ((produced, consumed), usage) = measured(&pids, || {
        workloads::produce_and_consume(&bootstrap, &spec("w7-latency", records, Some(rate)))
    });
    let totals = (produced.records, produced.bytes, produced.elapsed);
    record_throughput(
        &mut metrics,
        "W7 fixed-rate",
        "W7 fixed-rate",
        totals,
        &usage,
    );
    insert_latencies(&mut metrics, "W7 end-to-end", &consumed.end_to_end_us);
    insert_latencies(&mut metrics, "W7 ack", &produced.ack_latency_us);

    eprintln!(
        "{progress} {}: W7 end-to-end p99.9 {:.2} ms; failover: kill -9 of a leader",
        kind.name(),
        metrics["W7 end-to-end p99.9 ms"]
    );
    let failover = workloads::produce_through_failover(
        &bootstrap,
        &spec("w7-failover", 0, Some(W7_FAILOVER_RATE)),
        W7_KILL_AFTER,
        W7_FAILOVER_GIVE_UP,
        || {
            let leaders = workloads::partition_leaders(&bootstrap, "w7-failover");
            cluster.kill(leaders[0]);
            let led = leaders
                .iter()
                .enumerate()
                .filter(|(_, l)| **l == leaders[0]);
            led.map(|(partition, _)| partition as i32).collect()
        },
    );
    metrics.insert(
        "W7 failover, first partition s".into(),
        failover.first_partition.as_secs_f64(),
    );
    metrics.insert(
        "W7 failover, every partition s".into(),
        failover.all_partitions.as_secs_f64(),
    );
    eprintln!(
        "{progress} {}: W7 failover {:.2} s (first partition), {:.2} s (every one), {} records",
        kind.name(),
        failover.first_partition.as_secs_f64(),
        failover.all_partitions.as_secs_f64(),
        failover.records
    );
    cluster.stop();
    metrics
}

/// Every run's metrics, per broker: one entry per repeat.
struct Runs {
    ours: Vec<Metrics>,
    theirs: Vec<Metrics>,
    repeat: usize,
    started: Instant,
}

impl Runs {
    /// Runs `run` for every repeat and broker (`kinds` of the repeat, in
    /// order), adding its metrics to that repeat's.
    fn each(
        &mut self,
        kinds: &dyn Fn(usize) -> Vec<BrokerKind>,
        mut run: impl FnMut(BrokerKind, &str) -> Metrics,
    ) {
        for repeat in 0..self.repeat {
            for kind in kinds(repeat) {
                let progress = format!(
                    "[{:>4.0}s run {}/{}]",
                    self.started.elapsed().as_secs_f64(),
                    repeat + 1,
                    self.repeat
                );
                let metrics = run(kind, &progress);
                let runs = match kind {
                    BrokerKind::Ringbroker => &mut self.ours,
                    BrokerKind::Kafka => &mut self.theirs,
                };
                if runs.len() <= repeat {
                    runs.push(Metrics::new());
                }
                runs[repeat].extend(metrics);
            }
        }
    }
}

fn machine() -> String {
    let cpu = std::fs::read_to_string("/proc/cpuinfo")
        .ok()
        .and_then(|c| {
            c.lines()
                .find(|l| l.starts_with("model name"))
                .map(|l| l.split(':').nth(1).unwrap_or("").trim().to_owned())
        })
        .unwrap_or_default();
    let memory = std::fs::read_to_string("/proc/meminfo")
        .ok()
        .and_then(|m| {
            m.lines().next().map(|l| {
                l.split_whitespace()
                    .nth(1)
                    .unwrap_or("0")
                    .parse::<f64>()
                    .unwrap_or(0.0)
                    / MIB
            })
        })
        .unwrap_or(0.0);
    let kernel = std::fs::read_to_string("/proc/sys/kernel/osrelease").unwrap_or_default();
    let cores = std::thread::available_parallelism().map_or(1, |n| n.get());
    format!(
        "{cores} cores ({cpu}), {memory:.0} GiB memory, Linux {}",
        kernel.trim()
    )
}

fn main() {
    let args = Args::parse();
    let sources = BrokerSources {
        ringbroker_bin: args.ringbroker_bin.clone(),
        kafka_run_class: args.kafka_run_class.clone(),
        ringbroker_overrides: args.ringbroker_config.clone(),
        kafka_zk_jars: args.kafka_zk_jars.clone(),
    };
    assert!(
        sources.ringbroker_bin.exists(),
        "build ringbroker first (cargo build --release)"
    );
    let started = Instant::now();
    let kinds = |repeat: usize| -> Vec<BrokerKind> {
        // Alternate which broker goes first.
        let both = if repeat % 2 == 0 {
            [BrokerKind::Kafka, BrokerKind::Ringbroker]
        } else {
            [BrokerKind::Ringbroker, BrokerKind::Kafka]
        };
        both.into_iter()
            .filter(|kind| match args.only.as_deref() {
                Some("ringbroker") => *kind == BrokerKind::Ringbroker,
                Some("kafka") => *kind == BrokerKind::Kafka,
                Some(other) => panic!("--only {other}: ringbroker or kafka"),
                None => true,
            })
            .collect()
    };
    let mut runs = Runs {
        ours: Vec::new(),
        theirs: Vec::new(),
        repeat: args.repeat,
        started,
    };
    let single_node = !args.w6_only && !args.w7_only;
    if !args.latency_only && single_node {
        runs.each(&kinds, |kind, progress| {
            throughput_run(&args, &sources, kind, progress)
        });
    }
    if !args.latency_only && !args.w7_only {
        runs.each(&kinds, |kind, progress| {
            cluster_run(&args, &sources, kind, progress)
        });
    }
    if !args.latency_only && !args.w6_only {
        runs.each(&kinds, |kind, progress| {
            replication_run(&args, &sources, kind, progress)
        });
    }
    // W2's rate: half of Kafka's W1 maximum in this run.
    let kafka_w1: Vec<f64> = runs
        .theirs
        .iter()
        .filter_map(|m| m.get("W1 produce records/s").copied())
        .collect();
    let rate = args
        .w2_rate
        .unwrap_or_else(|| report::median(&kafka_w1) / 2.0);
    assert!(
        rate.is_finite() || !single_node,
        "W2 needs Kafka's W1 or --w2-rate"
    );
    if single_node {
        runs.each(&kinds, |kind, progress| {
            latency_run(&args, &sources, kind, rate, progress)
        });
    }
    let Runs { ours, theirs, .. } = runs;
    let _ = std::fs::remove_dir_all(&args.work_dir);

    let (ours, theirs) = (report::medians(&ours), report::medians(&theirs));
    let stamp = chrono_like_stamp();
    std::fs::create_dir_all(&args.results_dir).expect("create the results directory");
    let svg = |name: &str, body: String| {
        let file = format!("{stamp}-{name}.svg");
        std::fs::write(args.results_dir.join(&file), body).expect("write a chart");
        file
    };
    let e2e = svg(
        "end-to-end-latency",
        report::latency_svg("end-to-end", &ours, &theirs),
    );
    let acks = svg("ack-latency", report::latency_svg("ack", &ours, &theirs));
    let throughput = svg("throughput", report::throughput_svg(&ours, &theirs));
    let command: Vec<String> = std::env::args().collect();
    let markdown = format!(
        "# ringbroker vs Apache Kafka, {stamp}\n\n\
         Machine: {}. Both brokers on loopback, one at a time, started fresh for every run \
         (Kafka {}: a single KRaft node with its shipped `server.properties` and the start \
         script's JVM options, `-Xmx1G -Xms1G` G1; ringbroker with its defaults, one shard per \
         core). Client: librdkafka {} through the rdkafka crate, with jemalloc as its malloc, \
         on the same machine. Medians \
         of {} runs per broker; ratio = ringbroker / Kafka.\n\n\
         Workloads: W1 {} records of 1 KiB over 6 partitions, acks=1, linger.ms=5, as fast as \
         the client goes; W2 {:.0} records/s of 1 KiB (half of Kafka's W1 records/s) for {} s, \
         acks=all, linger.ms=5, latency counted from when each record was due (coordinated \
         omission corrected), end to end read by a consumer from the end; W3 the W1 topic \
         read back from the beginning; W4 {} records of 100 B round-robin over 1000 \
         partitions, acks=1, linger.ms=5; W5 spawn to the first Metadata answer, and resident \
         memory after {} s idle; W6 CreateTopics of 1000 partitions (replication factor 1) on a \
         fresh three-broker ZooKeeper-mode cluster until a client sees every leader, against \
         Kafka 3.9.1 in ZooKeeper mode (ZooKeeper 3.8.4 from its jars); W7 on such a cluster, \
         each broker with its own defaults (Kafka 3.9's shipped `server.properties`; the \
         ZooKeeper session each negotiated is in the table), ZooKeeper ticking every 500 ms \
         and granting 1-60 s sessions: 6 partitions, replication factor 3, \
         `min.insync.replicas=2`, acks=all, linger.ms=5: {} records of 1 KiB as fast as the \
         client goes, then {:.0} records/s for {} s read back by a consumer from the end, then \
         an idempotent producer at {:.0} records/s while the leader of partition 0 is killed \
         (kill -9) {} s in: failover is the time from the kill to the first acknowledgement of \
         a record sent after it, on the first of the dead leader's partitions and on every one \
         of them; W7's CPU and RSS are the three brokers' together. CPU: the broker process's \
         user + system time (/proc) over the workload, per GiB of values moved; the client's \
         the same for the load generator's process (both share the machine's cores).\n\n{}\n\
         ![throughput]({throughput}) ![end-to-end latency]({e2e}) ![ack latency]({acks})\n\n\
         Command: `{}`\n",
        machine(),
        kafka_version(),
        rdkafka::util::get_rdkafka_version().1,
        args.repeat,
        args.w1_records,
        rate,
        args.w2_seconds,
        args.w4_records,
        IDLE_SETTLE.as_secs(),
        args.w7_records,
        args.w7_rate,
        args.w2_seconds,
        W7_FAILOVER_RATE,
        W7_KILL_AFTER.as_secs(),
        report::table(&ours, &theirs),
        command.join(" ")
    );
    let path = args.results_dir.join(format!("{stamp}.md"));
    std::fs::write(&path, &markdown).expect("write the report");
    println!("{markdown}\nreport: {}", path.display());
}

/// The Kafka version the jars are (from the pom beside the run script).
fn kafka_version() -> String {
    std::fs::read_to_string("tests/support/kafka/pom.xml")
        .ok()
        .and_then(|pom| {
            let start = pom.find("<kafka.version>")? + "<kafka.version>".len();
            let end = pom[start..].find('<')? + start;
            Some(pom[start..end].to_owned())
        })
        .unwrap_or_else(|| "4.x".into())
}

/// UTC date and time as YYYY-MM-DDTHH-MM (for file names), without a date crate.
fn chrono_like_stamp() -> String {
    let output = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H-%M"])
        .output()
        .expect("run date");
    String::from_utf8_lossy(&output.stdout).trim().to_owned()
}
