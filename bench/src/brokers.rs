//! Starting and stopping the two brokers under test on loopback, each in a
//! fresh directory, and what the kernel says about their processes.

use std::io::{Read, Write};
use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

/// How long a broker may take to answer its first Metadata request.
const START_TIMEOUT: Duration = Duration::from_secs(120);
/// How long a broker may take to stop after SIGTERM before it is killed.
const STOP_TIMEOUT: Duration = Duration::from_secs(60);

#[derive(Debug, Clone, Copy, PartialEq, Eq)]
pub enum BrokerKind {
    Ringbroker,
    Kafka,
}

impl BrokerKind {
    pub fn name(self) -> &'static str {
        match self {
            BrokerKind::Ringbroker => "ringbroker",
            BrokerKind::Kafka => "Apache Kafka",
        }
    }
}

/// Where the brokers come from.
pub struct BrokerSources {
    /// The ringbroker binary (target/release/ringbroker).
    pub ringbroker_bin: PathBuf,
    /// tests/support/kafka/kafka-run-class.sh, with Kafka's jars fetched.
    pub kafka_run_class: PathBuf,
    /// Extra `key=value` lines for ringbroker's server.properties.
    pub ringbroker_overrides: Vec<String>,
    /// Kafka 3.9.1's jars (tests/support/kafka-3.9/fetch.sh), for W6's
    /// ZooKeeper-mode cluster: ZooKeeper itself and Kafka's brokers.
    pub kafka_zk_jars: PathBuf,
}

/// How a broker runs: alone (ringbroker's embedded metadata, Kafka's single
/// KRaft node), or as broker `broker_id` of a ZooKeeper-mode cluster.
#[derive(Debug, Clone, Copy)]
pub enum Mode<'a> {
    Single,
    ZooKeeper { connect: &'a str, broker_id: i32 },
}

pub struct RunningBroker {
    pub kind: BrokerKind,
    /// Its `broker.id` in a cluster; 0 alone.
    pub broker_id: i32,
    pub address: String,
    /// ringbroker's metrics endpoint (`/metrics`, `/slow_requests`).
    pub metrics_address: Option<String>,
    child: Child,
    /// From spawn to the first answered Metadata request.
    pub startup: Duration,
}

impl RunningBroker {
    pub fn pid(&self) -> u32 {
        self.child.id()
    }

    /// SIGKILL, as a crash.
    pub fn kill(mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }

    /// SIGTERM, then SIGKILL if it does not exit in time.
    pub fn stop(mut self) {
        // SAFETY: signalling a child we spawned and have not reaped.
        unsafe { libc::kill(self.child.id() as i32, libc::SIGTERM) };
        let deadline = Instant::now() + STOP_TIMEOUT;
        while Instant::now() < deadline {
            if self.child.try_wait().ok().flatten().is_some() {
                return;
            }
            std::thread::sleep(Duration::from_millis(50));
        }
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

impl Drop for RunningBroker {
    /// A run that panics leaves no broker behind.
    fn drop(&mut self) {
        if self.child.try_wait().ok().flatten().is_none() {
            let _ = self.child.kill();
            let _ = self.child.wait();
        }
    }
}

/// Added to both brokers' configs (the broker key of `file.delete.delay.ms`;
/// the topic key itself, given here before, is not a broker config and Kafka
/// ignored it): a deleted topic's files go (Kafka) or give back their blocks
/// (ringbroker, which unlinks at once and holds them) after 1 s rather than
/// 60, between runs rather than during the next one.
pub const DELETE_DELAY_MS: u64 = 1000;

/// Kafka 4's shipped `config/server.properties` (single KRaft node, broker and
/// controller in one process), with this run's ports and directory.
fn kafka_server_properties(port: u16, controller_port: u16, log_dir: &Path) -> String {
    format!(
        "process.roles=broker,controller
node.id=1
controller.quorum.bootstrap.servers=127.0.0.1:{controller_port}
listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
inter.broker.listener.name=PLAINTEXT
advertised.listeners=PLAINTEXT://127.0.0.1:{port},CONTROLLER://127.0.0.1:{controller_port}
controller.listener.names=CONTROLLER
listener.security.protocol.map=CONTROLLER:PLAINTEXT,PLAINTEXT:PLAINTEXT,SSL:SSL,SASL_PLAINTEXT:SASL_PLAINTEXT,SASL_SSL:SASL_SSL
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
share.coordinator.state.topic.replication.factor=1
share.coordinator.state.topic.min.isr=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.segment.bytes=1073741824
log.retention.check.interval.ms=300000
log.segment.delete.delay.ms={DELETE_DELAY_MS}
",
        log_dir.display()
    )
}

/// Kafka 3.9's shipped `config/server.properties` for a ZooKeeper-mode
/// broker, with this run's broker id, port, directory and ZooKeeper.
fn kafka_zk_server_properties(broker_id: i32, port: u16, log_dir: &Path, connect: &str) -> String {
    format!(
        "broker.id={broker_id}
listeners=PLAINTEXT://127.0.0.1:{port}
zookeeper.connect={connect}
zookeeper.connection.timeout.ms=18000
num.network.threads=3
num.io.threads=8
socket.send.buffer.bytes=102400
socket.receive.buffer.bytes=102400
socket.request.max.bytes=104857600
log.dirs={}
num.partitions=1
num.recovery.threads.per.data.dir=1
offsets.topic.replication.factor=1
transaction.state.log.replication.factor=1
transaction.state.log.min.isr=1
log.retention.hours=168
log.retention.check.interval.ms=300000
group.initial.rebalance.delay.ms=0
log.segment.delete.delay.ms={DELETE_DELAY_MS}
",
        log_dir.display()
    )
}

/// log4j2 for a ZooKeeper-mode Kafka broker: warnings, and the ZooKeeper
/// client's INFO lines ("negotiated timeout = ...").
const KAFKA_ZK_LOG4J: &str = "status = error
appender.stderr.type = Console
appender.stderr.name = STDERR
appender.stderr.target = SYSTEM_ERR
appender.stderr.layout.type = PatternLayout
appender.stderr.layout.pattern = [%d] %p %m (%c)%n
rootLogger.level = warn
rootLogger.appenderRef.stderr.ref = STDERR
logger.zookeeper.name = org.apache.zookeeper.ClientCnxn
logger.zookeeper.level = info
";

/// The JVM options Kafka's start scripts set: kafka-server-start.sh's heap,
/// kafka-run-class.sh's G1 settings.
const KAFKA_HEAP_OPTS: &str = "-Xmx1G -Xms1G";
const KAFKA_JVM_PERFORMANCE_OPTS: &str = "-server -XX:+UseG1GC -XX:MaxGCPauseMillis=20 \
     -XX:InitiatingHeapOccupancyPercent=35 -XX:+ExplicitGCInvokesConcurrent \
     -XX:MaxInlineLevel=15 -Djava.awt.headless=true";

pub fn free_port() -> u16 {
    std::net::TcpListener::bind("127.0.0.1:0")
        .expect("bind an ephemeral port")
        .local_addr()
        .expect("local address")
        .port()
}

/// Kafka's broker with `config`, and the start scripts' JVM options.
fn kafka_server_command(sources: &BrokerSources, config: &Path) -> Command {
    let mut command = Command::new(&sources.kafka_run_class);
    command
        .env(
            "KAFKA_HEAP_OPTS",
            format!("{KAFKA_HEAP_OPTS} {KAFKA_JVM_PERFORMANCE_OPTS}"),
        )
        .arg("kafka.Kafka")
        .arg(config);
    command
}

/// Starts `kind` alone in a fresh `dir` on a free loopback port and waits
/// for its first Metadata answer.
pub fn start(kind: BrokerKind, sources: &BrokerSources, dir: &Path) -> RunningBroker {
    start_with(kind, sources, dir, Mode::Single)
}

/// `start`, in `mode`.
pub fn start_with(
    kind: BrokerKind,
    sources: &BrokerSources,
    dir: &Path,
    mode: Mode,
) -> RunningBroker {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create the broker directory");
    let port = free_port();
    let log = std::fs::File::create(dir.join("broker.log")).expect("create broker.log");
    let metrics_port = free_port();
    let mut command = match (kind, mode) {
        (BrokerKind::Ringbroker, _) => {
            let config = dir.join("server.properties");
            let membership = match mode {
                Mode::Single => "broker.id=0\n".to_owned(),
                Mode::ZooKeeper { connect, broker_id } => {
                    format!("broker.id={broker_id}\nzookeeper.connect={connect}\n")
                }
            };
            std::fs::write(
                &config,
                format!(
                    "{membership}listeners=PLAINTEXT://127.0.0.1:{port}\nlog.dirs={}\n\
                     ringbroker.metrics.port={metrics_port}\n\
                     offsets.topic.replication.factor=1\nlog.segment.delete.delay.ms={DELETE_DELAY_MS}\n{}",
                    dir.join("data").display(),
                    sources
                        .ringbroker_overrides
                        .iter()
                        .map(|line| format!("{line}\n"))
                        .collect::<String>()
                ),
            )
            .expect("write server.properties");
            let mut command = Command::new(&sources.ringbroker_bin);
            command.arg("start").arg(config);
            command
        }
        (BrokerKind::Kafka, Mode::ZooKeeper { connect, broker_id }) => {
            let config = dir.join("server.properties");
            std::fs::write(
                &config,
                kafka_zk_server_properties(broker_id, port, &dir.join("data"), connect),
            )
            .expect("write server.properties");
            // The quiet logging of kafka-run-class.sh, but the ZooKeeper
            // client's session (its negotiated timeout) logged too.
            let log4j = dir.join("log4j2.properties");
            std::fs::write(&log4j, KAFKA_ZK_LOG4J).expect("write log4j2.properties");
            let mut command = kafka_server_command(sources, &config);
            command
                .env("DEST", &sources.kafka_zk_jars)
                .env("KAFKA_LOG4J_CONFIG", &log4j);
            command
        }
        (BrokerKind::Kafka, Mode::Single) => {
            let config = dir.join("server.properties");
            std::fs::write(
                &config,
                kafka_server_properties(port, free_port(), &dir.join("data")),
            )
            .expect("write server.properties");
            let format = Command::new(&sources.kafka_run_class)
                .args(["kafka.tools.StorageTool", "format", "--standalone"])
                .args(["--cluster-id", "q1Sh-9_ISia_zwGINzRvyQ", "--config"])
                .arg(&config)
                .output()
                .expect("run kafka-storage format");
            assert!(
                format.status.success(),
                "kafka-storage format failed: {}",
                String::from_utf8_lossy(&format.stderr)
            );
            kafka_server_command(sources, &config)
        }
    };
    let started = Instant::now();
    let child = command
        .stdout(Stdio::from(log.try_clone().expect("clone the log handle")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("spawn the broker");
    let broker_id = match mode {
        Mode::Single => 0,
        Mode::ZooKeeper { broker_id, .. } => broker_id,
    };
    let mut broker = RunningBroker {
        kind,
        broker_id,
        address: format!("127.0.0.1:{port}"),
        metrics_address: (kind == BrokerKind::Ringbroker)
            .then(|| format!("127.0.0.1:{metrics_port}")),
        child,
        startup: Duration::ZERO,
    };
    while !answers_metadata(&broker.address) {
        if let Ok(Some(status)) = broker.child.try_wait() {
            panic!(
                "{} exited while starting ({status}); see {}",
                kind.name(),
                dir.join("broker.log").display()
            );
        }
        assert!(
            started.elapsed() < START_TIMEOUT,
            "{} did not answer within {START_TIMEOUT:?}",
            kind.name()
        );
        std::thread::sleep(Duration::from_millis(5));
    }
    broker.startup = started.elapsed();
    broker
}

/// Sends a Metadata v0 request for every topic; true once any answer comes.
fn answers_metadata(address: &str) -> bool {
    let Ok(mut stream) = TcpStream::connect(address) else {
        return false;
    };
    let _ = stream.set_read_timeout(Some(Duration::from_secs(2)));
    // api key 3, version 0, correlation id 1, client id "bench", no topics.
    let mut body = Vec::new();
    body.extend_from_slice(&3i16.to_be_bytes());
    body.extend_from_slice(&0i16.to_be_bytes());
    body.extend_from_slice(&1i32.to_be_bytes());
    body.extend_from_slice(&5i16.to_be_bytes());
    body.extend_from_slice(b"bench");
    body.extend_from_slice(&0i32.to_be_bytes());
    let mut frame = (body.len() as i32).to_be_bytes().to_vec();
    frame.extend_from_slice(&body);
    let mut size = [0u8; 4];
    stream.write_all(&frame).is_ok() && stream.read_exact(&mut size).is_ok()
}

/// CPU time a process has used, in seconds: all of it, and the part it spent
/// in the kernel (system time), so a report can say how much of a broker's
/// cost is its own code and how much the syscalls it makes.
#[derive(Debug, Clone, Copy, Default, PartialEq)]
pub struct CpuSeconds {
    pub total: f64,
    pub kernel: f64,
}

impl std::ops::Sub for CpuSeconds {
    type Output = CpuSeconds;
    fn sub(self, earlier: CpuSeconds) -> CpuSeconds {
        CpuSeconds {
            total: self.total - earlier.total,
            kernel: self.kernel - earlier.kernel,
        }
    }
}

impl std::ops::Div<f64> for CpuSeconds {
    type Output = CpuSeconds;
    fn div(self, by: f64) -> CpuSeconds {
        CpuSeconds {
            total: self.total / by,
            kernel: self.kernel / by,
        }
    }
}

impl std::iter::Sum for CpuSeconds {
    fn sum<I: Iterator<Item = CpuSeconds>>(all: I) -> CpuSeconds {
        all.fold(CpuSeconds::default(), |sum, one| CpuSeconds {
            total: sum.total + one.total,
            kernel: sum.kernel + one.kernel,
        })
    }
}

/// CPU time of the bench's own process and of the children it has waited
/// for: the clients of a run, as the librdkafka ones run in this process (with
/// the bench's sampler, a scrape a second) and the Java ones are children.
pub fn clients_cpu_seconds() -> CpuSeconds {
    stat_cpu_seconds(std::process::id(), true)
}

/// CPU time a process has used (`utime` and `stime` of /proc/PID/stat).
pub fn cpu_seconds(pid: u32) -> CpuSeconds {
    stat_cpu_seconds(pid, false)
}

/// /proc/PID/stat's CPU time, with its waited-for children's (`cutime`,
/// `cstime`) when `with_children`.
fn stat_cpu_seconds(pid: u32, with_children: bool) -> CpuSeconds {
    let Ok(stat) = std::fs::read_to_string(format!("/proc/{pid}/stat")) else {
        return CpuSeconds::default();
    };
    // Fields after the command (which may hold spaces) in parentheses.
    let rest = &stat[stat.rfind(')').map_or(0, |i| i + 2)..];
    let fields: Vec<&str> = rest.split_whitespace().collect();
    let ticks =
        |field: usize| -> u64 { fields.get(field).and_then(|f| f.parse().ok()).unwrap_or(0) };
    let (mut user_ticks, mut system_ticks) = (ticks(11), ticks(12));
    if with_children {
        user_ticks += ticks(13);
        system_ticks += ticks(14);
    }
    let per_second = clock_ticks_per_second();
    CpuSeconds {
        total: (user_ticks + system_ticks) as f64 / per_second,
        kernel: system_ticks as f64 / per_second,
    }
}

/// The unit of /proc's CPU times.
pub fn clock_ticks_per_second() -> f64 {
    // SAFETY: sysconf has no preconditions.
    unsafe { libc::sysconf(libc::_SC_CLK_TCK) }.max(1) as f64
}

/// Resident memory of a process, in bytes.
pub fn rss_bytes(pid: u32) -> u64 {
    std::fs::read_to_string(format!("/proc/{pid}/status"))
        .ok()
        .and_then(|status| {
            status
                .lines()
                .find(|l| l.starts_with("VmRSS:"))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<u64>().ok())
        })
        .map_or(0, |kib| kib * 1024)
}

/// Samples a process's resident memory every 50 ms until dropped; keeps the peak.
pub struct RssSampler {
    stop: std::sync::Arc<std::sync::atomic::AtomicBool>,
    thread: Option<std::thread::JoinHandle<u64>>,
}

impl RssSampler {
    pub fn start(pid: u32) -> Self {
        let stop = std::sync::Arc::new(std::sync::atomic::AtomicBool::new(false));
        let stopped = stop.clone();
        let thread = std::thread::spawn(move || {
            let mut peak = 0;
            while !stopped.load(std::sync::atomic::Ordering::Acquire) {
                peak = peak.max(rss_bytes(pid));
                std::thread::sleep(Duration::from_millis(50));
            }
            peak.max(rss_bytes(pid))
        });
        Self {
            stop,
            thread: Some(thread),
        }
    }

    pub fn peak_bytes(mut self) -> u64 {
        self.stop.store(true, std::sync::atomic::Ordering::Release);
        self.thread.take().map_or(0, |t| t.join().unwrap_or(0))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_waited_for_child_counts_among_the_clients() {
        let before = clients_cpu_seconds();
        // A child that does nothing but count: its CPU is the clients' once
        // it has been waited for, as a Java client's is.
        let status = Command::new("sh")
            .args(["-c", "i=0; while [ $i -lt 300000 ]; do i=$((i+1)); done"])
            .status()
            .expect("run sh");
        assert!(status.success());
        let child = clients_cpu_seconds() - before;
        assert!(child.total >= 0.05, "the child's CPU is counted: {child:?}");
        assert!(child.kernel <= child.total);
    }
}
