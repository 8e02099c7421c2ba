//! Tail latency side by side, the run a skeptic would make: fixed rates at
//! 10%, 25% and 50% of Apache Kafka's maximum (measured first, in the same
//! run), acks=1 and acks=all, one node and a three-broker ZooKeeper-mode
//! cluster, with librdkafka and with Kafka's Java ProducerPerformance and
//! EndToEndLatency; each run `--seconds` long. For ringbroker the broker's
//! own request-phase histograms are read over the same seconds, with its
//! slowest requests and what it and the kernel were doing then; charts show
//! latency over each run's time. Writes bench/results/<stamp>-tail-latency.md.
//!
//! bench/run-tail-latency (fetches the jars, builds, then runs this)

use std::path::PathBuf;
use std::time::Duration;

use bench::broker_clocks::{self, Sampler, Scrape, Second, SCRAPED};
use bench::brokers::{self, BrokerKind, BrokerSources, CpuSeconds, RunningBroker, DELETE_DELAY_MS};
use bench::cluster::{self, Cluster};
use bench::java_clients;
use bench::memory_cgroup::MemoryCgroup;
use bench::report::{self, format_value, Series};
use bench::workloads::{
    self, latency_ms, ClientSecond, ProduceSpec, Timeline, WARM_UP_RECORDS_PER_PARTITION,
};
use clap::Parser;
use hdrhistogram::Histogram;
use tikv_jemalloc_sys as _;

#[derive(Parser)]
struct Args {
    #[arg(long, default_value = "bench/work")]
    work_dir: PathBuf,
    #[arg(long, default_value = "bench/results")]
    results_dir: PathBuf,
    #[arg(long, default_value = "target/release/ringbroker")]
    ringbroker_bin: PathBuf,
    #[arg(long, default_value = "tests/support/kafka/kafka-run-class.sh")]
    kafka_run_class: PathBuf,
    #[arg(long, default_value = "tests/.deps/kafka-3.9")]
    kafka_zk_jars: PathBuf,
    /// `single` and/or `cluster`.
    #[arg(long, value_delimiter = ',', default_values = ["single", "cluster"])]
    topologies: Vec<String>,
    /// Loads, in percent of Kafka's maximum.
    #[arg(long, value_delimiter = ',', default_values_t = [10, 25, 50])]
    loads: Vec<u32>,
    #[arg(long, value_delimiter = ',', default_values = ["1", "all"])]
    acks: Vec<String>,
    /// `librdkafka` and/or `java` (ProducerPerformance, then EndToEndLatency).
    #[arg(long, value_delimiter = ',', default_values = ["librdkafka", "java"])]
    clients: Vec<String>,
    /// Seconds each fixed-rate run lasts.
    #[arg(long, default_value_t = 60)]
    seconds: u64,
    /// Kafka's maximum records/s on one node, instead of measuring it.
    #[arg(long)]
    kafka_max_single: Option<f64>,
    /// Kafka's maximum records/s on three brokers, instead of measuring it.
    #[arg(long)]
    kafka_max_cluster: Option<f64>,
    /// Only this broker ("ringbroker" or "kafka").
    #[arg(long)]
    only: Option<String>,
    /// A `key=value` added to ringbroker's server.properties (repeatable).
    #[arg(long = "ringbroker-config")]
    ringbroker_config: Vec<String>,
    /// Run in a memory cgroup of this many GiB, with everything started (both
    /// brokers alike), so the page cache recycles its own pages as on a
    /// machine whose memory it has filled (bench/src/memory_cgroup.rs).
    #[arg(long)]
    memory_limit_gib: Option<u64>,
    /// The producers' linger.ms in the fixed-rate runs (the report
    /// used 5; 0 shows what is left when the client does not wait). Kafka's
    /// maximum is measured with 5 either way.
    #[arg(long, default_value_t = 5)]
    linger_ms: u32,
}

#[derive(Clone, Copy, PartialEq, Eq)]
enum Topology {
    Single,
    Cluster,
}

impl Topology {
    fn name(self) -> &'static str {
        match self {
            Topology::Single => "one node",
            Topology::Cluster => "3 brokers",
        }
    }

    fn replication_factor(self) -> i32 {
        match self {
            Topology::Single => 1,
            Topology::Cluster => 3,
        }
    }

    fn topic_configs(self) -> &'static [(&'static str, &'static str)] {
        match self {
            Topology::Single => &[],
            Topology::Cluster => &[("min.insync.replicas", "2")],
        }
    }

    /// What Kafka's maximum is taken with: W1's producer on one node
    /// (acks=1), W7's on three brokers (acks=all).
    fn max_acks(self) -> &'static str {
        match self {
            Topology::Single => "1",
            Topology::Cluster => "all",
        }
    }

    fn max_records(self) -> u64 {
        match self {
            Topology::Single => 2_000_000,
            Topology::Cluster => 500_000,
        }
    }
}

/// A broker or a cluster under test.
enum Deployment {
    Single(RunningBroker),
    Cluster(Cluster),
}

impl Deployment {
    fn start(kind: BrokerKind, topology: Topology, sources: &BrokerSources, args: &Args) -> Self {
        match topology {
            Topology::Single => {
                Deployment::Single(brokers::start(kind, sources, &args.work_dir.join("broker")))
            }
            Topology::Cluster => Deployment::Cluster(cluster::start(
                kind,
                sources,
                &args.work_dir.join("cluster"),
            )),
        }
    }

    fn brokers(&self) -> Vec<&RunningBroker> {
        match self {
            Deployment::Single(broker) => vec![broker],
            Deployment::Cluster(cluster) => cluster.brokers.iter().collect(),
        }
    }

    fn bootstrap(&self) -> String {
        let addresses: Vec<&str> = self.brokers().iter().map(|b| b.address.as_str()).collect();
        addresses.join(",")
    }

    fn pids(&self) -> Vec<u32> {
        self.brokers().iter().map(|b| b.pid()).collect()
    }

    fn metrics_addresses(&self) -> Vec<String> {
        self.brokers()
            .iter()
            .filter_map(|b| b.metrics_address.clone())
            .collect()
    }

    fn cpu_seconds(&self) -> CpuSeconds {
        self.pids()
            .iter()
            .map(|pid| brokers::cpu_seconds(*pid))
            .sum()
    }

    fn stop(self) {
        match self {
            Deployment::Single(broker) => broker.stop(),
            Deployment::Cluster(cluster) => cluster.stop(),
        }
    }
}

/// One fixed-rate run's client figures: percentiles (ms, NaN where the
/// client does not give one) and latency over time.
struct ClientFigures {
    /// "ack" (produce to acknowledgement) or "end-to-end".
    measure: &'static str,
    p50: f64,
    p99: f64,
    p999: f64,
    p9999: f64,
    max: f64,
    /// (second, p99 or average, max).
    timeline: Vec<(f64, f64, f64)>,
}

fn from_histogram(
    measure: &'static str,
    histogram: &Histogram<u64>,
    timeline: &Timeline,
) -> ClientFigures {
    let ms = latency_ms(histogram);
    ClientFigures {
        measure,
        p50: ms["p50"],
        p99: ms["p99"],
        p999: ms["p99.9"],
        p9999: ms["p99.99"],
        max: ms["max"],
        timeline: timeline
            .per_second_ms()
            .into_iter()
            .enumerate()
            .map(|(s, (p99, max))| (s as f64 + 1.0, p99, max))
            .collect(),
    }
}

/// One run of one broker.
struct Run {
    topology: Topology,
    acks: String,
    /// Percent of Kafka's maximum; None for EndToEndLatency (one at a time).
    load: Option<u32>,
    client: &'static str,
    kind: BrokerKind,
    rate: f64,
    figures: Vec<ClientFigures>,
    /// librdkafka's own clocks, one per second; empty for the Java clients.
    client_seconds: Vec<ClientSecond>,
    /// librdkafka's Produce and Fetch requests per MiB produced, from its
    /// statistics; None for the Java clients.
    requests_per_mib: Option<(f64, f64)>,
    seconds: f64,
    broker_cpu_per_gib: CpuSeconds,
    /// The clients' CPU over the run, in cores: on two cores shared with
    /// the broker, clients near their share place a tail in the client.
    clients_cores: f64,
    /// ringbroker's own: Produce phases over the run, per second, slowest.
    broker: Option<BrokerSide>,
}

struct BrokerSide {
    phases: Scrape,
    /// Fetch's phases: an end-to-end tail is the broker's when its Fetch
    /// LocalTime is; a long ResponseSend is a consumer not reading.
    fetch_phases: Scrape,
    seconds: Vec<Second>,
    slowest: Vec<(f64, String)>,
}

const MIB: f64 = 1024.0 * 1024.0;
const GIB: f64 = 1024.0 * MIB;
/// Every run's record value, in every client: the 1 KiB.
const VALUE_BYTES: usize = 1024;
/// Slowest Produce requests listed per ringbroker run.
const SLOWEST_LISTED: usize = 8;
/// How long a deployment sits idle for its idle CPU figure.
const IDLE_SECONDS: u64 = 10;

/// Partitions of the fixed-rate runs' topics and of the maximum's.
const PARTITIONS: i32 = 6;
/// ProducerPerformance's first seconds (at most half the run), left out of
/// its percentiles (`--warmup-records`): its JVM's connections and JIT, not
/// the broker.
const PRODUCER_PERFORMANCE_WARMUP_SECONDS: f64 = 5.0;

/// CPU used while a run's clients ran: the brokers' and the clients'.
struct RunCpu {
    brokers: CpuSeconds,
    clients: CpuSeconds,
}

/// Runs `work` with the broker's clocks around it: scrapes before and
/// after, a sampler each second, the slowest requests afterwards.
fn with_broker_clocks<T>(
    deployment: &Deployment,
    work: impl FnOnce() -> T,
) -> (T, RunCpu, Option<BrokerSide>) {
    let metrics = deployment.metrics_addresses();
    let clocked = !metrics.is_empty();
    let since_ms = broker_clocks::wall_clock_ms();
    let before = clocked.then(|| {
        (
            broker_clocks::scrape(&metrics, "Produce").expect(SCRAPED),
            broker_clocks::scrape(&metrics, "Fetch").expect(SCRAPED),
        )
    });
    let sampler = Sampler::start(metrics.clone());
    let (brokers_cpu, clients_cpu) = (deployment.cpu_seconds(), brokers::clients_cpu_seconds());
    let outcome = work();
    let cpu = RunCpu {
        brokers: deployment.cpu_seconds() - brokers_cpu,
        clients: brokers::clients_cpu_seconds() - clients_cpu,
    };
    let seconds = sampler.finish();
    let broker = before.map(|(produce, fetch)| BrokerSide {
        phases: broker_clocks::scrape(&metrics, "Produce")
            .expect(SCRAPED)
            .since(&produce),
        fetch_phases: broker_clocks::scrape(&metrics, "Fetch")
            .expect(SCRAPED)
            .since(&fetch),
        seconds,
        slowest: broker_clocks::slowest_produces(&metrics, since_ms, SLOWEST_LISTED),
    });
    (outcome, cpu, broker)
}

/// How long a run's topic may take to leave the disk after the run. A run
/// at 50% writes 11 GB or more per broker: the matrix's runs together would
/// fill this machine's disk.
const DELETED_WITHIN: Duration = Duration::from_secs(180);

#[allow(clippy::too_many_arguments)]
fn fixed_rate_run(
    args: &Args,
    deployment: &Deployment,
    kind: BrokerKind,
    topology: Topology,
    acks: &str,
    load: u32,
    client: &'static str,
    rate: f64,
) -> Run {
    let topic = format!("lat-{acks}-{load}-{client}");
    let bootstrap = deployment.bootstrap();
    workloads::create_replicated_topic(
        &bootstrap,
        &topic,
        PARTITIONS,
        topology.replication_factor(),
        topology.topic_configs(),
    );
    workloads::warm_up_topic(&bootstrap, &topic, PARTITIONS);
    let records = (rate * args.seconds as f64) as u64;
    let spec = ProduceSpec {
        topic: &topic,
        partitions: PARTITIONS,
        records,
        value_bytes: VALUE_BYTES,
        acks,
        linger_ms: args.linger_ms,
        rate: Some(rate),
    };
    let produced_bytes = (records * spec.value_bytes as u64) as f64;
    let mib = produced_bytes / MIB;
    let ((figures, client_seconds, requests_per_mib, elapsed), cpu, broker) =
        with_broker_clocks(deployment, || match client {
            "librdkafka" => {
                let (produced, consumed) = workloads::produce_and_consume(&bootstrap, &spec);
                (
                    vec![
                        from_histogram("ack", &produced.ack_latency_us, &produced.ack_timeline),
                        from_histogram(
                            "end-to-end",
                            &consumed.end_to_end_us,
                            &consumed.end_to_end_timeline,
                        ),
                    ],
                    produced.client_seconds,
                    Some((
                        produced.produce_requests as f64 / mib,
                        consumed.fetch_requests as f64 / mib,
                    )),
                    produced.elapsed,
                )
            }
            _ => {
                let perf = java_clients::producer_performance(
                    &args.kafka_run_class,
                    &bootstrap,
                    &spec,
                    (rate * PRODUCER_PERFORMANCE_WARMUP_SECONDS).min(records as f64 / 2.0) as u64,
                );
                let figures = ClientFigures {
                    measure: "ack",
                    p50: perf.p50_ms,
                    p99: perf.p99_ms,
                    p999: perf.p999_ms,
                    p9999: f64::NAN,
                    max: perf.max_ms,
                    timeline: perf.windows.clone(),
                };
                (vec![figures], Vec::new(), None, perf.elapsed)
            }
        });
    workloads::delete_topic(&bootstrap, &topic, &args.work_dir, DELETED_WITHIN);
    Run {
        topology,
        acks: acks.to_owned(),
        load: Some(load),
        client: if client == "librdkafka" {
            "librdkafka"
        } else {
            "Java ProducerPerformance"
        },
        kind,
        rate,
        figures,
        client_seconds,
        requests_per_mib,
        seconds: elapsed.as_secs_f64(),
        broker_cpu_per_gib: cpu.brokers / (produced_bytes / GIB),
        clients_cores: cpu.clients.total / elapsed.as_secs_f64(),
        broker,
    }
}

fn end_to_end_run(
    args: &Args,
    deployment: &Deployment,
    kind: BrokerKind,
    topology: Topology,
    acks: &str,
) -> Run {
    let topic = format!("e2e-{acks}");
    let bootstrap = deployment.bootstrap();
    workloads::create_replicated_topic(
        &bootstrap,
        &topic,
        1,
        topology.replication_factor(),
        topology.topic_configs(),
    );
    workloads::warm_up_topic(&bootstrap, &topic, 1);
    let (e2e, cpu, broker) = with_broker_clocks(deployment, || {
        java_clients::end_to_end_latency(
            &args.kafka_run_class,
            &bootstrap,
            &topic,
            acks,
            VALUE_BYTES,
            args.seconds,
        )
    });
    workloads::delete_topic(&bootstrap, &topic, &args.work_dir, DELETED_WITHIN);
    Run {
        topology,
        acks: acks.to_owned(),
        load: None,
        client: "Java EndToEndLatency",
        kind,
        rate: e2e.records as f64 / e2e.elapsed.as_secs_f64(),
        figures: vec![ClientFigures {
            measure: "end-to-end",
            p50: e2e.p50_ms,
            p99: e2e.p99_ms,
            p999: e2e.p999_ms,
            p9999: f64::NAN,
            max: f64::NAN,
            timeline: Vec::new(),
        }],
        client_seconds: Vec::new(),
        requests_per_mib: None,
        seconds: e2e.elapsed.as_secs_f64(),
        broker_cpu_per_gib: cpu.brokers / ((e2e.records * VALUE_BYTES as u64) as f64 / GIB),
        clients_cores: cpu.clients.total / e2e.elapsed.as_secs_f64(),
        broker,
    }
}

/// Kafka's records/s with librdkafka as fast as it goes, on a fresh
/// deployment of `topology`.
fn kafka_max(args: &Args, sources: &BrokerSources, topology: Topology) -> f64 {
    let deployment = Deployment::start(BrokerKind::Kafka, topology, sources, args);
    let bootstrap = deployment.bootstrap();
    workloads::create_replicated_topic(
        &bootstrap,
        "max",
        PARTITIONS,
        topology.replication_factor(),
        topology.topic_configs(),
    );
    let outcome = workloads::produce(
        &bootstrap,
        &ProduceSpec {
            topic: "max",
            partitions: PARTITIONS,
            records: topology.max_records(),
            value_bytes: VALUE_BYTES,
            acks: topology.max_acks(),
            linger_ms: 5,
            rate: None,
        },
    );
    deployment.stop();
    outcome.records as f64 / outcome.elapsed.as_secs_f64()
}

/// Every run of one broker on one topology, on one fresh deployment, and
/// its idle CPU (% of a core).
fn broker_runs(
    args: &Args,
    sources: &BrokerSources,
    kind: BrokerKind,
    topology: Topology,
    max: f64,
) -> (Vec<Run>, f64) {
    let deployment = Deployment::start(kind, topology, sources, args);
    let cpu = deployment.cpu_seconds();
    std::thread::sleep(Duration::from_secs(IDLE_SECONDS));
    let idle_percent = (deployment.cpu_seconds() - cpu).total / IDLE_SECONDS as f64 * 100.0;
    eprintln!(
        "{} on {}: idle {idle_percent:.2}% of a core",
        kind.name(),
        topology.name()
    );
    let mut runs = Vec::new();
    for acks in &args.acks {
        for load in &args.loads {
            for client in &args.clients {
                let client: &'static str = if client == "java" {
                    "java"
                } else {
                    "librdkafka"
                };
                let rate = max * *load as f64 / 100.0;
                eprintln!(
                    "{} on {}: acks={acks}, {load}% ({rate:.0} records/s), {client}, {} s",
                    kind.name(),
                    topology.name(),
                    args.seconds
                );
                let run =
                    fixed_rate_run(args, &deployment, kind, topology, acks, *load, client, rate);
                eprintln!("  {}", summary(&run));
                runs.push(run);
            }
        }
        if args.clients.iter().any(|c| c == "java") {
            eprintln!(
                "{} on {}: EndToEndLatency acks={acks}",
                kind.name(),
                topology.name()
            );
            let run = end_to_end_run(args, &deployment, kind, topology, acks);
            eprintln!("  {}", summary(&run));
            runs.push(run);
        }
    }
    deployment.stop();
    (runs, idle_percent)
}

fn summary(run: &Run) -> String {
    run.figures
        .iter()
        .map(|f| format!("{} p99.9 {:.2} ms, max {:.2} ms", f.measure, f.p999, f.max))
        .collect::<Vec<_>>()
        .join("; ")
}

fn run_label(run: &Run) -> String {
    format!(
        "{}, acks={}, {}, {}",
        run.topology.name(),
        run.acks,
        run.load.map_or("one at a time".to_owned(), |l| format!(
            "{l}% ({:.0}/s)",
            run.rate
        )),
        run.client
    )
}

/// The report's tables: client percentiles of both brokers with the ratio
/// at p99.9, ringbroker's broker-side Produce phases, CPU per GiB.
fn tables(runs: &[Run]) -> String {
    let mut out = String::from(
        "| run | measure | ringbroker p50 | p99 | p99.9 | p99.99 | max | Kafka p50 | p99 | p99.9 | p99.99 | max | p99.9 ratio |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    let ours = runs.iter().filter(|r| r.kind == BrokerKind::Ringbroker);
    let theirs = |run: &Run| {
        runs.iter().find(|r| {
            r.kind == BrokerKind::Kafka
                && r.topology == run.topology
                && r.acks == run.acks
                && r.load == run.load
                && r.client == run.client
        })
    };
    for run in ours.clone() {
        let kafka = theirs(run);
        for (i, figures) in run.figures.iter().enumerate() {
            let other = kafka.map(|k| &k.figures[i]);
            let pick =
                |f: Option<&ClientFigures>, p: fn(&ClientFigures) -> f64| f.map_or(f64::NAN, p);
            out.push_str(&format!(
                "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}x |\n",
                run_label(run),
                figures.measure,
                format_value(figures.p50),
                format_value(figures.p99),
                format_value(figures.p999),
                format_value(figures.p9999),
                format_value(figures.max),
                format_value(pick(other, |f| f.p50)),
                format_value(pick(other, |f| f.p99)),
                format_value(pick(other, |f| f.p999)),
                format_value(pick(other, |f| f.p9999)),
                format_value(pick(other, |f| f.max)),
                format_value(figures.p999 / pick(other, |f| f.p999)),
            ));
        }
    }
    out.push_str(
        "\nringbroker's own clocks over the same runs: Produce requests' TotalTimeMs and its phases (ms; every broker of the run added up; a bucket bound, at most 12.5% above), the wait of a request's first bytes in the socket before the broker read them (SocketWaitTimeMs, not in TotalTime, as in Kafka; a lower bound), the shards' run-queue wait, and CPU against Kafka's (CPU-seconds per GiB of values, and of those the seconds spent in the kernel: system time); last, the clients' CPU in the same run with each broker, in cores (the bench's process, where the librdkafka clients run, and its Java children).\n\n\
         | run | requests | total p50 | p99 | p99.9 | p99.99 | max | local p99.9 | remote p99.9 | response queue p99.9 | mesh wait p99.9 | append p99.9 | acks wait p99.9 | socket wait p99.9 | run-queue wait ms/s | ringbroker CPU-s/GiB | in the kernel | Kafka CPU-s/GiB | in the kernel | ratio | clients' cores, ringbroker | Kafka |\n|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in ours {
        let Some(broker) = &run.broker else { continue };
        let phase = |name: &str, q: f64| {
            broker
                .phases
                .phases
                .get(name)
                .map_or(f64::NAN, |b| b.quantile_ms(q))
        };
        let total = broker.phases.phases.get("total").map_or(0, |b| b.count());
        let kafka = theirs(run);
        let kafka_cpu = kafka.map_or(
            CpuSeconds {
                total: f64::NAN,
                kernel: f64::NAN,
            },
            |k| k.broker_cpu_per_gib,
        );
        let kafka_clients_cores = kafka.map_or(f64::NAN, |k| k.clients_cores);
        out.push_str(&format!(
            "| {} | {total} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {} | {}x | {} | {} |\n",
            run_label(run),
            format_value(phase("total", 0.5)),
            format_value(phase("total", 0.99)),
            format_value(phase("total", 0.999)),
            format_value(phase("total", 0.9999)),
            format_value(phase("total", 1.0)),
            format_value(phase("local", 0.999)),
            format_value(phase("remote", 0.999)),
            format_value(phase("response queue", 0.999)),
            format_value(phase("mesh wait", 0.999)),
            format_value(phase("append", 0.999)),
            format_value(phase("acks wait", 0.999)),
            format_value(phase("socket wait", 0.999)),
            format_value(broker.phases.runqueue_wait_s * 1000.0 / run.seconds),
            format_value(run.broker_cpu_per_gib.total),
            format_value(run.broker_cpu_per_gib.kernel),
            format_value(kafka_cpu.total),
            format_value(kafka_cpu.kernel),
            format_value(run.broker_cpu_per_gib.total / kafka_cpu.total),
            format_value(run.clients_cores),
            format_value(kafka_clients_cores),
        ));
    }
    out
}

/// librdkafka's own clocks beside the client's and the broker's p99.9, so a
/// tail is placed: in the client's queue, waiting for the socket, or in the
/// round trip (the kernel both ways and the broker).
fn client_clocks(runs: &[Run]) -> String {
    let mut out = String::from(
        "\nlibrdkafka's own clocks over the same runs (its statistics each second, the worst broker connection's; ms): a record's wait in the client until it is in a request (int_latency, linger.ms included), a request's wait to be written to the socket (outbuf_latency), and the round trip from that write to the response (rtt: the kernel both ways and the broker). \
         Per clock: the median second's p99, the worst second's p99.99, the run's max; beside them the client's ack p99.9 and ringbroker's Produce TotalTimeMs p99.9; \
         then the client's end-to-end p99.9 and ringbroker's Fetch LocalTimeMs and ResponseSendTimeMs p99.9 (its RemoteTime is the wait for data, up to fetch.wait.max.ms; a long send is a consumer not reading its socket). \
         Last, the Produce and Fetch requests the producer and the consumer sent per MiB produced (as of their last statistics, so up to a second's short): besides the bytes, a broker's CPU per GiB pays for each request.\n\n\
         | run | broker | ack p99.9 | queue p99 | queue p99.99 | queue max | outbuf p99 | outbuf p99.99 | outbuf max | rtt p99 | rtt p99.99 | rtt max | broker total p99.9 | end-to-end p99.9 | Fetch local p99.9 | Fetch send p99.9 | Produce requests/MiB | Fetch requests/MiB |\n|---|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|\n",
    );
    for run in runs.iter().filter(|r| !r.client_seconds.is_empty()) {
        let mut cells = Vec::new();
        for clock in [
            |s: &ClientSecond| s.queue,
            |s: &ClientSecond| s.outbuf,
            |s: &ClientSecond| s.rtt,
        ] {
            // Seconds without a request on any connection have no window.
            let windows: Vec<_> = run
                .client_seconds
                .iter()
                .map(clock)
                .filter(|w| w.max > 0)
                .collect();
            let ms = |us: i64| us as f64 / 1e3;
            let p99: Vec<f64> = windows.iter().map(|w| ms(w.p99)).collect();
            let worst = |f: fn(&workloads::WindowUs) -> i64| {
                windows.iter().map(|w| ms(f(w))).fold(f64::NAN, f64::max)
            };
            cells.push(report::median(&p99));
            cells.push(worst(|w| w.p99_99));
            cells.push(worst(|w| w.max));
        }
        let broker_p999 = |phases: fn(&BrokerSide) -> &Scrape, phase: &str| {
            run.broker.as_ref().map_or(f64::NAN, |b| {
                phases(b)
                    .phases
                    .get(phase)
                    .map_or(f64::NAN, |h| h.quantile_ms(0.999))
            })
        };
        let end_to_end = run
            .figures
            .iter()
            .find(|f| f.measure == "end-to-end")
            .map_or(f64::NAN, |f| f.p999);
        let (produce_per_mib, fetch_per_mib) = run.requests_per_mib.unwrap_or((f64::NAN, f64::NAN));
        out.push_str(&format!(
            "| {} | {} | {} | {} | {} | {} | {} | {} | {} | {} |\n",
            run_label(run),
            run.kind.name(),
            format_value(run.figures[0].p999),
            cells
                .iter()
                .map(|v| format_value(*v))
                .collect::<Vec<_>>()
                .join(" | "),
            format_value(broker_p999(|b| &b.phases, "total")),
            format_value(end_to_end),
            format_value(broker_p999(|b| &b.fetch_phases, "local")),
            format_value(broker_p999(|b| &b.fetch_phases, "send")),
            format_value(produce_per_mib),
            format_value(fetch_per_mib),
        ));
    }
    out
}

/// Each ringbroker run's slowest Produce requests, with the kernel's
/// dirty/writeback memory, the machine's free memory taken and time in the
/// kernel, and the shards' run-queue wait in that second.
fn slowest(runs: &[Run]) -> String {
    let mut out = String::new();
    for run in runs.iter().filter(|r| r.kind == BrokerKind::Ringbroker) {
        let Some(broker) = &run.broker else { continue };
        out.push_str(&format!("\n**{}**\n\n", run_label(run)));
        for (_, line) in &broker.slowest {
            let second = line
                .strip_prefix('+')
                .and_then(|rest| rest.split(' ').next())
                .and_then(|s| s.parse::<f64>().ok())
                .and_then(|at| broker.seconds.iter().find(|s| s.at_s >= at));
            let kernel = second.map_or(String::new(), |s| {
                format!(
                    "; that second: dirty {:.0} MiB, writeback {:.0} MiB, free memory taken {:.0} MiB, the machine's CPUs {:.0} ms in the kernel, shards waited {:.1} ms for a CPU",
                    s.dirty_mib, s.writeback_mib, s.free_taken_mib, s.machine_system_ms, s.runqueue_wait_ms
                )
            });
            out.push_str(&format!("- {line}{kernel}\n"));
        }
    }
    out
}

/// A chart per ringbroker run at the highest load with acks=all: client max
/// and p99 (or average) by second for both brokers, the broker's own, and
/// librdkafka's queue and round-trip maxima.
fn charts(runs: &[Run], results_dir: &std::path::Path, stamp: &str) -> Vec<String> {
    let top = runs.iter().filter_map(|r| r.load).max();
    let mut files = Vec::new();
    for run in runs
        .iter()
        .filter(|r| r.kind == BrokerKind::Ringbroker && r.load.is_some() && r.load == top)
    {
        let kafka = runs.iter().find(|k| {
            k.kind == BrokerKind::Kafka
                && k.topology == run.topology
                && k.acks == run.acks
                && k.load == run.load
                && k.client == run.client
        });
        let mut series = Vec::new();
        let average = run.client.starts_with("Java");
        for (who, color, end_to_end_color, source) in [
            ("ringbroker", "#d9480f", "#f59f00", Some(run)),
            ("Kafka", "#1c7ed6", "#15aabf", kafka),
        ] {
            let Some(source) = source else { continue };
            let max_series = |figures: &ClientFigures, color| Series {
                name: format!("{who} {} max", figures.measure),
                color,
                dashed: false,
                points: figures
                    .timeline
                    .iter()
                    .map(|(s, _, max)| (*s, *max))
                    .collect(),
            };
            // The target's measure: the chart shows when its tail happened.
            if let Some(end_to_end) = source.figures.iter().find(|f| f.measure == "end-to-end") {
                series.push(max_series(end_to_end, end_to_end_color));
            }
            let figures = &source.figures[0];
            series.push(max_series(figures, color));
            series.push(Series {
                name: format!(
                    "{who} {} {}",
                    figures.measure,
                    if average { "avg" } else { "p99" }
                ),
                color,
                dashed: true,
                points: figures.timeline.iter().map(|(s, p, _)| (*s, *p)).collect(),
            });
        }
        if let Some(broker) = &run.broker {
            series.push(Series {
                name: "ringbroker broker Produce max".into(),
                color: "#2f9e44",
                dashed: false,
                points: broker
                    .seconds
                    .iter()
                    .map(|s| (s.at_s, s.broker_max_ms))
                    .collect(),
            });
            series.push(Series {
                name: "ringbroker broker Produce p99".into(),
                color: "#2f9e44",
                dashed: true,
                points: broker
                    .seconds
                    .iter()
                    .map(|s| (s.at_s, s.broker_p99_ms))
                    .collect(),
            });
        }
        for (name, color, clock) in [
            (
                "ringbroker librdkafka queue max",
                "#ae3ec9",
                (|s: &ClientSecond| s.queue) as fn(&ClientSecond) -> workloads::WindowUs,
            ),
            ("ringbroker librdkafka rtt max", "#868e96", |s| s.rtt),
        ] {
            if run.client_seconds.is_empty() {
                break;
            }
            series.push(Series {
                name: name.into(),
                color,
                dashed: false,
                points: run
                    .client_seconds
                    .iter()
                    .map(|s| match clock(s).max {
                        0 => (s.at_s, f64::NAN),
                        max_us => (s.at_s, max_us as f64 / 1e3),
                    })
                    .collect(),
            });
        }
        let name = format!(
            "{stamp}-tail-{}-acks{}-{}.svg",
            if run.topology == Topology::Single {
                "single"
            } else {
                "cluster"
            },
            run.acks,
            run.client
                .split(' ')
                .next_back()
                .unwrap_or("client")
                .to_lowercase()
        );
        let svg = report::timeline_svg(&run_label(run), &series);
        std::fs::write(results_dir.join(&name), svg).expect("write a chart");
        files.push(name);
    }
    files
}

fn main() {
    let args = Args::parse();
    // Before anything is started, so all of it is born inside; dropped last.
    let cgroup = args.memory_limit_gib.map(|gib| {
        MemoryCgroup::enter(
            gib.checked_mul(1 << 30)
                .expect("--memory-limit-gib in bytes fits a u64"),
        )
    });
    let sources = BrokerSources {
        ringbroker_bin: args.ringbroker_bin.clone(),
        kafka_run_class: args.kafka_run_class.clone(),
        ringbroker_overrides: args.ringbroker_config.clone(),
        kafka_zk_jars: args.kafka_zk_jars.clone(),
    };
    let kinds: Vec<BrokerKind> = [BrokerKind::Kafka, BrokerKind::Ringbroker]
        .into_iter()
        .filter(|kind| match args.only.as_deref() {
            Some("ringbroker") => *kind == BrokerKind::Ringbroker,
            Some("kafka") => *kind == BrokerKind::Kafka,
            Some(other) => panic!("--only {other}: ringbroker or kafka"),
            None => true,
        })
        .collect();
    let mut runs = Vec::new();
    let mut maxima = Vec::new();
    let mut idle = Vec::new();
    for name in &args.topologies {
        let topology = match name.as_str() {
            "single" => Topology::Single,
            "cluster" => Topology::Cluster,
            other => panic!("--topologies {other}: single or cluster"),
        };
        let given = match topology {
            Topology::Single => args.kafka_max_single,
            Topology::Cluster => args.kafka_max_cluster,
        };
        let max = given.unwrap_or_else(|| {
            eprintln!("Kafka's maximum on {}", topology.name());
            kafka_max(&args, &sources, topology)
        });
        eprintln!("Kafka's maximum on {}: {max:.0} records/s", topology.name());
        maxima.push((topology, max, given.is_some()));
        for kind in &kinds {
            let (broker_runs, idle_percent) = broker_runs(&args, &sources, *kind, topology, max);
            runs.extend(broker_runs);
            idle.push((topology, *kind, idle_percent));
        }
    }
    let _ = std::fs::remove_dir_all(&args.work_dir);
    std::fs::create_dir_all(&args.results_dir).expect("create the results directory");
    let stamp = std::process::Command::new("date")
        .args(["-u", "+%Y-%m-%dT%H-%M"])
        .output()
        .map(|o| String::from_utf8_lossy(&o.stdout).trim().to_owned())
        .expect("run date");
    let charts = charts(&runs, &args.results_dir, &stamp);
    let maxima: Vec<String> = maxima
        .iter()
        .map(|(t, max, given)| {
            format!(
                "{} {max:.0} records/s ({}, librdkafka, acks={}{})",
                t.name(),
                if *given { "given" } else { "measured first" },
                t.max_acks(),
                if *t == Topology::Cluster {
                    ", replication factor 3, min.insync.replicas=2"
                } else {
                    ""
                }
            )
        })
        .collect();
    let idle: Vec<String> = idle
        .iter()
        .map(|(t, k, p)| format!("{} on {}: {p:.2}% of a core", k.name(), t.name()))
        .collect();
    let memory = match &cgroup {
        Some(cgroup) => format!(
            "The bench, the brokers and their clients ran in a memory cgroup of {} GiB, so the page cache recycled its own pages as on a machine whose memory it has filled.",
            cgroup.limit_bytes >> 30
        ),
        None => "No memory limit: on a VM, page-cache pages taken from free memory may cost the host's page faults.".to_owned(),
    };
    let command: Vec<String> = std::env::args().collect();
    let ringbroker_config = match args.ringbroker_config.as_slice() {
        [] => "its defaults".to_owned(),
        overrides => format!("its defaults but {}", overrides.join(", ")),
    };
    let markdown = format!(
        "# Tail latency, ringbroker vs Apache Kafka, {stamp}\n\n\
         Same machine, same run, loopback; each broker fresh per topology (Kafka 4 as a single KRaft node, Kafka 3.9.1 in ZooKeeper mode on three brokers; ringbroker with {ringbroker_config}; \
         both with log.segment.delete.delay.ms={DELETE_DELAY_MS}, so a run's deleted topic is gone before the next). \
         Kafka's maximum: {}. Each fixed-rate run lasts {} s on its own {PARTITIONS}-partition topic (replication factor 3 and min.insync.replicas=2 on three brokers), 1 KiB values, linger.ms={}, \
         after {WARM_UP_RECORDS_PER_PARTITION} untimed acks=all records per partition. \
         librdkafka's timed producer first sends one untimed empty record to every partition and waits for it (its connections to the leaders are made before the run), \
         then counts from when each record was due (coordinated omission corrected), acknowledgement and end to end (a consumer reading from the end); \
         Java ProducerPerformance (batch.size=262144) counts from send(), leaves its first {PRODUCER_PERFORMANCE_WARMUP_SECONDS} s out of its percentiles (--warmup-records) and gives no p99.99; its timeline is its 5-second windows (average and max); \
         EndToEndLatency sends one record at a time and waits for its consumer to read it, whole milliseconds.\n\n\
         {memory}\n\n\
         Idle (after start, {IDLE_SECONDS} s without traffic): {}.\n\n{}{}\n## Slowest requests (ringbroker)\n\nA produce's slowest partition: its shard wait (from the request's dispatch to its append's start: a hop to another shard if any, and what that shard ran first, this request's earlier appends included), its append and its acks wait, each the longest over the request's partitions.\n{}\n## Latency over time\n\n{}\n\nCommand: `{}`\n",
        maxima.join("; "),
        args.seconds,
        args.linger_ms,
        idle.join("; "),
        tables(&runs),
        client_clocks(&runs),
        slowest(&runs),
        charts.iter().map(|c| format!("![{c}]({c})")).collect::<Vec<_>>().join("\n"),
        command.join(" ")
    );
    let path = args.results_dir.join(format!("{stamp}-tail-latency.md"));
    std::fs::write(&path, &markdown).expect("write the report");
    println!("{markdown}\nreport: {}", path.display());
}
