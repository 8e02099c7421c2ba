//! A real ZooKeeper (3.8.4, from Kafka 3.9.1's jars) on a free port, for
//! cluster tests, and reads of its znodes through the `zookeeper-client`
//! crate on a glommio executor of the test's own.

use std::future::Future;
use std::net::TcpStream;
use std::path::PathBuf;
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use zookeeper_client as zk;

use super::{fetch_kafka_jars, free_port, Broker};

/// ZooKeeper's tick: sessions may last 2 to 20 ticks.
const TICK_MS: u64 = 500;
/// The brokers' default `zookeeper.session.timeout.ms`, which the cluster
/// tests run with: ZooKeeper's expiry is their failure detector.
pub const SESSION_TIMEOUT: Duration = Duration::from_millis(2_000);
const START_TIMEOUT: Duration = Duration::from_secs(30);

pub struct ZooKeeper {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl ZooKeeper {
    pub fn start() -> ZooKeeper {
        let libs = fetch_kafka_jars("kafka-3.9");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let log = std::fs::File::create(dir.path().join("zookeeper.log")).unwrap();
        // Loopback only, and no admin HTTP server.
        let config = dir.path().join("zoo.cfg");
        std::fs::write(
            &config,
            format!(
                "tickTime={TICK_MS}\ndataDir={}\nclientPort={port}\nclientPortAddress=127.0.0.1\n\
                 admin.enableServer=false\n",
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let child = Command::new("java")
            .arg("-cp")
            .arg(format!("{libs}/*"))
            .arg("org.apache.zookeeper.server.ZooKeeperServerMain")
            .arg(&config)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start ZooKeeper");
        let zookeeper = ZooKeeper {
            port,
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + START_TIMEOUT;
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "ZooKeeper did not start:\n{}",
                zookeeper.log()
            );
            std::thread::sleep(Duration::from_millis(50));
        }
        zookeeper
    }

    /// SIGSTOP: ZooKeeper stops answering, its sockets stay open.
    pub fn pause(&self) {
        let pid = self.child.as_ref().expect("running").id() as i32;
        unsafe { libc::kill(pid, libc::SIGSTOP) };
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        let pid = self.child.as_ref().expect("running").id() as i32;
        unsafe { libc::kill(pid, libc::SIGCONT) };
    }

    /// `zookeeper.connect` for brokers, under `chroot`.
    pub fn connect(&self, chroot: &str) -> String {
        format!("127.0.0.1:{}{chroot}", self.port)
    }

    /// The broker overrides that put a broker `id` in this ZooKeeper's
    /// cluster under `chroot`.
    pub fn broker_overrides(&self, chroot: &str, id: i32) -> Vec<String> {
        vec![
            format!("broker.id={id}"),
            format!("zookeeper.connect={}", self.connect(chroot)),
            "ringbroker.metrics.port=0".into(),
        ]
    }

    /// Starts broker `id` of the cluster under `chroot`, with `extra` overrides.
    pub fn start_broker(&self, chroot: &str, id: i32, extra: &[&str]) -> Broker {
        let mut overrides = self.broker_overrides(chroot, id);
        overrides.extend(extra.iter().map(|entry| entry.to_string()));
        let overrides: Vec<&str> = overrides.iter().map(String::as_str).collect();
        Broker::start(&overrides)
    }

    /// Starts a Kafka 3.9.1 broker `id` (ZooKeeper mode, from Maven
    /// Central's jars) in the cluster under `chroot`, and waits until it
    /// answers on its listener.
    pub fn start_kafka_broker(&self, chroot: &str, id: i32) -> KafkaBroker {
        let libs = fetch_kafka_jars("kafka-3.9");
        let dir = tempfile::tempdir().unwrap();
        let port = free_port();
        let config = dir.path().join("server.properties");
        std::fs::write(
            &config,
            format!(
                "broker.id={id}\nlisteners=PLAINTEXT://127.0.0.1:{port}\nzookeeper.connect={}\n\
                 zookeeper.session.timeout.ms={}\nlog.dirs={}\noffsets.topic.replication.factor=1\n\
                 group.initial.rebalance.delay.ms=0\n",
                self.connect(chroot),
                SESSION_TIMEOUT.as_millis(),
                dir.path().join("data").display()
            ),
        )
        .unwrap();
        let log = std::fs::File::create(dir.path().join("kafka.log")).unwrap();
        let dest = std::path::Path::new(&libs).parent().unwrap().to_owned();
        let child = Command::new(super::repo_root().join("tests/support/kafka/kafka-run-class.sh"))
            .env("DEST", dest)
            .env("KAFKA_HEAP_OPTS", "-Xmx512M -Xms512M")
            .arg("kafka.Kafka")
            .arg(&config)
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start Kafka 3.9.1");
        let broker = KafkaBroker {
            port,
            child: Some(child),
            dir,
        };
        let deadline = Instant::now() + Duration::from_secs(90);
        while TcpStream::connect(("127.0.0.1", port)).is_err() {
            assert!(
                Instant::now() < deadline,
                "Kafka 3.9.1 did not start:\n{}",
                broker.log()
            );
            std::thread::sleep(Duration::from_millis(100));
        }
        broker
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("zookeeper.log")).unwrap_or_default()
    }

    fn data_dir(&self) -> PathBuf {
        self.dir.path().join("data")
    }

    /// Runs `read` against a session of its own (closed after).
    fn with_session<T, F>(&self, read: impl FnOnce(zk::Client) -> F + Send + 'static) -> T
    where
        T: Send + 'static,
        F: Future<Output = T> + 'static,
    {
        let cluster = self.connect("");
        glommio::LocalExecutorBuilder::default()
            .io_memory(256 * 1024)
            .spawn(move || async move {
                let _spawner = asyncs::task::enter(&TEST_SPAWNER);
                let client = zk::Client::connector()
                    .with_session_timeout(SESSION_TIMEOUT)
                    .connect(&cluster)
                    .await
                    .expect("a session for the test");
                read(client).await
            })
            .expect("a test executor")
            .join()
            .expect("the read ran")
    }

    /// A znode's data and czxid, None if it does not exist.
    pub fn get(&self, path: &str) -> Option<(Vec<u8>, i64)> {
        let path = path.to_owned();
        self.with_session(move |client| async move {
            match client.get_data(&path).await {
                Ok((data, stat)) => Some((data, stat.czxid)),
                Err(zk::Error::NoNode) => None,
                Err(error) => panic!("get {path}: {error}"),
            }
        })
    }

    /// `/controller_epoch` of the cluster under `chroot`.
    pub fn controller_epoch(&self, chroot: &str) -> i64 {
        let (data, _) = self
            .get(&format!("{chroot}/controller_epoch"))
            .expect("an epoch");
        String::from_utf8(data).unwrap().parse().unwrap()
    }

    /// A partition's leader and ISR, from its state znode in the cluster
    /// under `chroot`.
    pub fn partition_state(&self, chroot: &str, topic: &str, partition: i32) -> (i32, Vec<i32>) {
        let path = format!("{chroot}/brokers/topics/{topic}/partitions/{partition}/state");
        let state = self.json(&path).unwrap_or_else(|| panic!("no {path}"));
        (state["leader"].as_i64().unwrap() as i32, ids(&state["isr"]))
    }

    /// A topic's replicas, partition by partition, from its znode in the
    /// cluster under `chroot` (empty if it does not exist).
    pub fn assignment(&self, chroot: &str, topic: &str) -> Vec<Vec<i32>> {
        let Some(znode) = self.json(&format!("{chroot}/brokers/topics/{topic}")) else {
            return Vec::new();
        };
        let partitions = znode["partitions"].as_object().unwrap();
        (0..partitions.len())
            .map(|p| ids(&partitions[&p.to_string()]))
            .collect()
    }

    /// Brokers `ids` of the cluster under `chroot`, with `extra` overrides,
    /// and their addresses.
    pub fn start_brokers(
        &self,
        chroot: &str,
        ids: impl IntoIterator<Item = i32>,
        extra: &[&str],
    ) -> (Vec<Broker>, Vec<String>) {
        let brokers: Vec<Broker> = ids
            .into_iter()
            .map(|id| self.start_broker(chroot, id, extra))
            .collect();
        let addresses = brokers.iter().map(Broker::address).collect();
        (brokers, addresses)
    }

    /// A znode's data as JSON.
    pub fn json(&self, path: &str) -> Option<serde_json::Value> {
        self.get(path)
            .map(|(data, _)| serde_json::from_slice(&data).expect("a JSON znode"))
    }

    /// A znode's children, sorted; empty if it does not exist.
    pub fn children(&self, path: &str) -> Vec<String> {
        let path = path.to_owned();
        self.with_session(move |client| async move {
            match client.list_children(&path).await {
                Ok(mut children) => {
                    children.sort();
                    children
                }
                Err(zk::Error::NoNode) => Vec::new(),
                Err(error) => panic!("children of {path}: {error}"),
            }
        })
    }

    /// Waits at most `within` for `condition` over this ZooKeeper.
    pub fn wait_for(&self, within: Duration, what: &str, condition: impl Fn(&Self) -> bool) {
        let deadline = Instant::now() + within;
        while !condition(self) {
            assert!(Instant::now() < deadline, "{what}: not within {within:?}");
            std::thread::sleep(Duration::from_millis(100));
        }
    }
}

impl Drop for ZooKeeper {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- zookeeper data in {} ---", self.data_dir().display());
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The crate's session task on the test's executor.
struct TestSpawner;

impl asyncs::task::Spawn for TestSpawner {
    fn spawn(&self, task: asyncs::task::Task) {
        glommio::spawn_local(Box::into_pin(task.future)).detach();
    }
}

static TEST_SPAWNER: TestSpawner = TestSpawner;

/// A Kafka 3.9.1 broker in ZooKeeper mode: the oracle for the controller's
/// requests and a member of mixed clusters.
pub struct KafkaBroker {
    pub port: u16,
    child: Option<Child>,
    dir: tempfile::TempDir,
}

impl KafkaBroker {
    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.dir.path().join("kafka.log")).unwrap_or_default()
    }
}

impl Drop for KafkaBroker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- Kafka 3.9.1 log ---\n{}", self.log());
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A JSON array of broker ids.
fn ids(array: &serde_json::Value) -> Vec<i32> {
    let array = array.as_array().expect("an array of ids");
    array.iter().map(|id| id.as_i64().unwrap() as i32).collect()
}

/// Each partition's leader (by index) as `address` answers Metadata for `topic`.
pub fn leaders(address: &str, topic: &str) -> Vec<i32> {
    use kafka_protocol::messages::metadata_request::MetadataRequestTopic;
    use kafka_protocol::messages::{ApiKey, MetadataRequest, MetadataResponse, TopicName};
    use kafka_protocol::protocol::StrBytes;
    let mut client = super::Client::connect(address);
    let request =
        MetadataRequest::default().with_topics(Some(vec![MetadataRequestTopic::default()
            .with_name(Some(TopicName(StrBytes::from_string(topic.to_owned()))))]));
    let Ok(response) = client.call::<_, MetadataResponse>(ApiKey::Metadata, 12, &request) else {
        return Vec::new();
    };
    let mut partitions: Vec<(i32, i32)> = response
        .topics
        .iter()
        .flat_map(|t| {
            t.partitions
                .iter()
                .map(|p| (p.partition_index, p.leader_id.0))
        })
        .collect();
    partitions.sort();
    partitions.into_iter().map(|(_, leader)| leader).collect()
}

/// Polls `condition` every 100 ms until it holds; fails after `within`.
pub fn wait(within: Duration, what: &str, mut condition: impl FnMut() -> bool) {
    let deadline = std::time::Instant::now() + within;
    while !condition() {
        assert!(
            std::time::Instant::now() < deadline,
            "{what}: not within {within:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// kafka-topics against `bootstrap`; its output.
pub fn kafka_topics(bootstrap: &str, args: &[&str]) -> String {
    let mut all = vec!["--bootstrap-server", bootstrap];
    all.extend_from_slice(args);
    super::kafka_tool("org.apache.kafka.tools.TopicCommand", &all, None)
}

/// The coordinator `address` names for `group` (FindCoordinator v3); None
/// while it answers with an error (COORDINATOR_NOT_AVAILABLE at first).
pub fn find_coordinator(address: &str, group: &str) -> Option<i32> {
    use kafka_protocol::messages::{ApiKey, FindCoordinatorRequest, FindCoordinatorResponse};
    use kafka_protocol::protocol::StrBytes;
    let mut client = super::Client::connect(address);
    let request =
        FindCoordinatorRequest::default().with_key(StrBytes::from_string(group.to_owned()));
    let response: FindCoordinatorResponse =
        client.call(ApiKey::FindCoordinator, 3, &request).ok()?;
    (response.error_code == 0).then_some(response.node_id.0)
}
