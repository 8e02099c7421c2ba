//! W6's clusters: a ZooKeeper (3.8.4, from Kafka 3.9.1's jars) and three
//! brokers in ZooKeeper mode on loopback, all ringbrokers or all Kafka 3.9.1
//! brokers, each started fresh.

use std::net::TcpStream;
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use rdkafka::consumer::{BaseConsumer, Consumer};
use rdkafka::ClientConfig;

use crate::brokers::{self, BrokerKind, BrokerSources, Mode, RunningBroker};

/// Brokers in a W6 cluster.
pub const BROKERS: i32 = 3;
const START_TIMEOUT: Duration = Duration::from_secs(120);

pub struct Cluster {
    dir: PathBuf,
    zookeeper: Child,
    pub brokers: Vec<RunningBroker>,
}

impl Cluster {
    /// Every broker's address, for a client's `bootstrap.servers`.
    pub fn bootstrap(&self) -> String {
        let addresses: Vec<&str> = self.brokers.iter().map(|b| b.address.as_str()).collect();
        addresses.join(",")
    }

    /// The ZooKeeper session timeout the first broker was granted, from its
    /// log (ringbroker's `session_timeout_ms=`, the ZooKeeper Java
    /// client's `negotiated timeout = `).
    pub fn negotiated_session_timeout_ms(&self) -> Option<u64> {
        let log = std::fs::read_to_string(self.dir.join("broker-1/broker.log")).ok()?;
        log.lines().find_map(|line| {
            let (_, rest) = line
                .split_once("session_timeout_ms=")
                .or_else(|| line.split_once("negotiated timeout = "))?;
            let digits: String = rest.chars().take_while(char::is_ascii_digit).collect();
            digits.parse().ok()
        })
    }

    /// kill -9 of broker `broker_id`; it leaves the cluster.
    pub fn kill(&mut self, broker_id: i32) {
        let at = self
            .brokers
            .iter()
            .position(|b| b.broker_id == broker_id)
            .expect("a live broker");
        self.brokers.remove(at).kill();
    }

    /// The brokers (SIGTERM), then ZooKeeper.
    pub fn stop(mut self) {
        for broker in self.brokers.drain(..) {
            broker.stop();
        }
        let _ = self.zookeeper.kill();
        let _ = self.zookeeper.wait();
    }
}

impl Drop for Cluster {
    /// A run that panics leaves no ZooKeeper behind (the brokers see to
    /// themselves).
    fn drop(&mut self) {
        if self.zookeeper.try_wait().ok().flatten().is_none() {
            let _ = self.zookeeper.kill();
            let _ = self.zookeeper.wait();
        }
    }
}

/// Starts ZooKeeper and three `kind` brokers under `dir`, and waits until a
/// client sees all three. ZooKeeper ticks every 500 ms and grants sessions
/// of 1-60 s, so each broker gets the session timeout it asks for (a dead
/// broker's session expires within a tick of it) rather than ZooKeeper's
/// defaults' floor of two 3 s ticks.
pub fn start(kind: BrokerKind, sources: &BrokerSources, dir: &Path) -> Cluster {
    let _ = std::fs::remove_dir_all(dir);
    std::fs::create_dir_all(dir).expect("create the cluster directory");
    let port = brokers::free_port();
    let config = dir.join("zoo.cfg");
    std::fs::write(
        &config,
        format!(
            "tickTime=500\nminSessionTimeout=1000\nmaxSessionTimeout=60000\ndataDir={}\n\
             clientPort={port}\nclientPortAddress=127.0.0.1\nadmin.enableServer=false\n",
            dir.join("zookeeper").display()
        ),
    )
    .expect("write zoo.cfg");
    let log = std::fs::File::create(dir.join("zookeeper.log")).expect("create zookeeper.log");
    let zookeeper = Command::new("java")
        .arg("-cp")
        .arg(format!("{}/libs/*", sources.kafka_zk_jars.display()))
        .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
        .arg(&config)
        .stdout(Stdio::from(log.try_clone().expect("clone the log handle")))
        .stderr(Stdio::from(log))
        .spawn()
        .expect("start ZooKeeper");
    let started = Instant::now();
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(started.elapsed() < START_TIMEOUT, "ZooKeeper did not start");
        std::thread::sleep(Duration::from_millis(50));
    }
    let connect = format!("127.0.0.1:{port}/w6");
    let brokers = (1..=BROKERS)
        .map(|broker_id| {
            let mode = Mode::ZooKeeper {
                connect: &connect,
                broker_id,
            };
            brokers::start_with(
                kind,
                sources,
                &dir.join(format!("broker-{broker_id}")),
                mode,
            )
        })
        .collect();
    let cluster = Cluster {
        dir: dir.to_owned(),
        zookeeper,
        brokers,
    };
    // Every broker, asked alone, lists all three: each has heard from the
    // controller (UpdateMetadata carries the controller's id), so a client
    // finds the controller whichever broker it asks first.
    for broker in &cluster.brokers {
        let probe: BaseConsumer = ClientConfig::new()
            .set("bootstrap.servers", &broker.address)
            .create()
            .expect("create a metadata client");
        loop {
            let seen = probe
                .fetch_metadata(None, Duration::from_secs(10))
                .map_or(0, |metadata| metadata.brokers().len());
            if seen == BROKERS as usize {
                break;
            }
            assert!(
                started.elapsed() < START_TIMEOUT,
                "{} cluster: {} sees {seen} brokers",
                kind.name(),
                broker.address
            );
            std::thread::sleep(Duration::from_millis(100));
        }
    }
    cluster
}
