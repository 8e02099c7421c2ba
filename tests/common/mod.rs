//! Starting the real broker binary for end-to-end tests, and a minimal Kafka
//! client (kafka-protocol's messages over a blocking socket) for the cases
//! where a test must control every byte.
#![allow(dead_code)]

pub mod acked;
pub mod cluster;

use std::collections::BTreeSet;
use std::io::{Read, Write};
use std::net::{TcpListener, TcpStream};
use std::path::{Path, PathBuf};
use std::process::{Child, Command, Stdio};
use std::time::{Duration, Instant};

use bytes::{Buf, BufMut, Bytes, BytesMut};
use kafka_protocol::messages::create_topics_request::CreatableTopic;
use kafka_protocol::messages::offset_fetch_request::OffsetFetchRequestGroup;
use kafka_protocol::messages::produce_request::{PartitionProduceData, TopicProduceData};
use kafka_protocol::messages::produce_response::PartitionProduceResponse;
use kafka_protocol::messages::{
    ApiKey, ConsumerProtocolAssignment, CreateTopicsRequest, CreateTopicsResponse,
    DescribeGroupsRequest, DescribeGroupsResponse, GroupId, OffsetFetchRequest,
    OffsetFetchResponse, ProduceRequest, ProduceResponse, RequestHeader, ResponseHeader, TopicName,
};
use kafka_protocol::protocol::{Decodable, Encodable, StrBytes};

/// How long a broker may take to accept connections.
const START_TIMEOUT: Duration = Duration::from_secs(20);

/// Waits at most `within` for `child` to exit; None if it is still running.
pub fn wait_for_exit(child: &mut Child, within: Duration) -> Option<std::process::ExitStatus> {
    let deadline = Instant::now() + within;
    loop {
        if let Some(status) = child.try_wait().unwrap() {
            return Some(status);
        }
        if Instant::now() > deadline {
            return None;
        }
        std::thread::sleep(Duration::from_millis(20));
    }
}

pub fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Kafka's jars from Maven Central, fetched once: `jars` is the folder under
/// tests/support (`kafka` for Kafka 4, `kafka-3.9`). Returns their directory.
pub fn fetch_kafka_jars(jars: &str) -> String {
    let fetch = Command::new(repo_root().join(format!("tests/support/{jars}/fetch.sh")))
        .output()
        .unwrap();
    assert!(
        fetch.status.success(),
        "{}",
        String::from_utf8_lossy(&fetch.stderr)
    );
    String::from_utf8(fetch.stdout).unwrap().trim().to_owned()
}

/// A port nothing listens on, never one this process handed out before: the
/// kernel may give bind(0) a port again before the broker told it has bound
/// it (two brokers of one cluster were once given the same metrics port).
pub fn free_port() -> u16 {
    static HANDED_OUT: std::sync::Mutex<BTreeSet<u16>> = std::sync::Mutex::new(BTreeSet::new());
    for _ in 0..1_000 {
        let port = TcpListener::bind("127.0.0.1:0")
            .unwrap()
            .local_addr()
            .unwrap()
            .port();
        if HANDED_OUT.lock().unwrap().insert(port) {
            return port;
        }
    }
    panic!("no port not handed out before in 1000 tries");
}

/// A broker process on a free port with its own data directory.
pub struct Broker {
    pub port: u16,
    pub data_dir: PathBuf,
    extra: Vec<String>,
    child: Option<Child>,
    _dir: Option<tempfile::TempDir>,
}

impl Broker {
    pub fn start(extra: &[&str]) -> Broker {
        Self::start_on(free_port(), extra)
    }

    /// A broker whose PLAINTEXT listener is on `port`, for overrides that name it.
    pub fn start_on(port: u16, extra: &[&str]) -> Broker {
        let dir = tempfile::tempdir().unwrap();
        let mut broker = Broker {
            port,
            data_dir: dir.path().join("data"),
            extra: extra.iter().map(|s| s.to_string()).collect(),
            child: None,
            _dir: Some(dir),
        };
        broker.launch();
        broker
    }

    pub fn address(&self) -> String {
        format!("127.0.0.1:{}", self.port)
    }

    fn launch(&mut self) {
        let config = self.data_dir.parent().unwrap().join("server.properties");
        std::fs::write(
            &config,
            format!(
                "broker.id=0\nlisteners=PLAINTEXT://127.0.0.1:{}\nlog.dirs={}\noffsets.topic.replication.factor=1\n",
                self.port,
                self.data_dir.display()
            ),
        )
        .unwrap();
        let log =
            std::fs::File::create(self.data_dir.parent().unwrap().join("broker.log")).unwrap();
        let mut command = Command::new(env!("CARGO_BIN_EXE_ringbroker"));
        command.arg("start").arg(&config);
        for entry in &self.extra {
            command.arg("--override").arg(entry);
        }
        let child = command
            .stdout(Stdio::from(log.try_clone().unwrap()))
            .stderr(Stdio::from(log))
            .spawn()
            .expect("start ringbroker");
        self.child = Some(child);
        // Ready once it answers a request, as a client would find out.
        let deadline = Instant::now() + START_TIMEOUT;
        while !self.answers() {
            assert!(
                Instant::now() < deadline,
                "broker did not start:\n{}",
                self.log()
            );
            assert!(
                self.child.as_mut().unwrap().try_wait().unwrap().is_none(),
                "broker exited:\n{}",
                self.log()
            );
            std::thread::sleep(Duration::from_millis(20));
        }
    }

    fn answers(&self) -> bool {
        let Ok(stream) = TcpStream::connect(self.address()) else {
            return false;
        };
        // A broker that accepted but never answers must not hang the start.
        stream
            .set_read_timeout(Some(Duration::from_secs(5)))
            .unwrap();
        let mut client = Client {
            stream,
            correlation_id: 0,
        };
        client
            .call::<_, kafka_protocol::messages::ApiVersionsResponse>(
                ApiKey::ApiVersions,
                3,
                &kafka_protocol::messages::ApiVersionsRequest::default(),
            )
            .is_ok()
    }

    pub fn log(&self) -> String {
        std::fs::read_to_string(self.data_dir.parent().unwrap().join("broker.log"))
            .unwrap_or_default()
    }

    /// SIGTERM, and wait (bounded) for a clean exit.
    pub fn stop(&mut self) {
        let mut child = self.child.take().expect("running");
        unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
        match wait_for_exit(&mut child, Duration::from_secs(30)) {
            Some(status) => assert!(status.success(), "unclean exit {status}:\n{}", self.log()),
            None => {
                let _ = child.kill();
                panic!("broker did not stop within 30 s:\n{}", self.log());
            }
        }
    }

    /// The broker process's pid.
    pub fn pid(&self) -> i32 {
        self.child.as_ref().expect("running").id() as i32
    }

    /// SIGSTOP: the process stops answering, its sockets stay open.
    pub fn pause(&self) {
        unsafe { libc::kill(self.pid(), libc::SIGSTOP) };
    }

    /// SIGCONT after `pause`.
    pub fn resume(&self) {
        unsafe { libc::kill(self.pid(), libc::SIGCONT) };
    }

    /// kill -9.
    pub fn kill(&mut self) {
        let mut child = self.child.take().expect("running");
        child.kill().unwrap();
        child.wait().unwrap();
    }

    pub fn restart(&mut self) {
        assert!(self.child.is_none(), "stop or kill first");
        self.launch();
    }

    /// Restarts with other settings than it started with.
    pub fn restart_with(&mut self, extra: &[&str]) {
        self.extra = extra.iter().map(|s| s.to_string()).collect();
        self.restart();
    }

    pub fn data_dir(&self) -> &Path {
        &self.data_dir
    }
}

impl Drop for Broker {
    fn drop(&mut self) {
        if std::thread::panicking() {
            eprintln!("--- broker log ---\n{}", self.log());
        }
        if let Some(mut child) = self.child.take() {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// A blocking Kafka connection speaking kafka-protocol's messages.
pub struct Client {
    pub stream: TcpStream,
    correlation_id: i32,
}

impl Client {
    pub fn connect(address: &str) -> Client {
        let stream = TcpStream::connect(address).unwrap();
        stream
            .set_read_timeout(Some(Duration::from_secs(15)))
            .unwrap();
        Client {
            stream,
            correlation_id: 0,
        }
    }

    pub fn send_frame(&mut self, frame: &[u8]) -> std::io::Result<()> {
        self.stream.write_all(frame)
    }

    /// Reads one response frame; Err when the broker closed the connection.
    pub fn read_frame(&mut self) -> std::io::Result<Bytes> {
        let mut size = [0u8; 4];
        self.stream.read_exact(&mut size)?;
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        self.stream.read_exact(&mut body)?;
        Ok(Bytes::from(body))
    }

    pub fn request_frame<Req: Encodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> Vec<u8> {
        self.correlation_id += 1;
        let header = RequestHeader::default()
            .with_request_api_key(key as i16)
            .with_request_api_version(version)
            .with_correlation_id(self.correlation_id)
            .with_client_id(Some(StrBytes::from_static_str("e2e")));
        let mut body = BytesMut::new();
        header
            .encode(&mut body, key.request_header_version(version))
            .unwrap();
        request.encode(&mut body, version).unwrap();
        let mut frame = BytesMut::new();
        frame.put_i32(body.len() as i32);
        frame.put_slice(&body);
        frame.to_vec()
    }

    pub fn call<Req: Encodable, Resp: Decodable>(
        &mut self,
        key: ApiKey,
        version: i16,
        request: &Req,
    ) -> std::io::Result<Resp> {
        let frame = self.request_frame(key, version, request);
        self.send_frame(&frame)?;
        let mut response = self.read_frame()?;
        let header =
            ResponseHeader::decode(&mut response, key.response_header_version(version)).unwrap();
        assert_eq!(
            header.correlation_id, self.correlation_id,
            "responses come back in order"
        );
        let body = Resp::decode(&mut response, version).unwrap();
        assert!(!response.has_remaining(), "trailing bytes in the response");
        Ok(body)
    }

    /// Produces one batch with acks=all; Err when the connection is gone.
    pub fn produce(
        &mut self,
        topic: &str,
        partition: i32,
        batch: Vec<u8>,
    ) -> std::io::Result<PartitionProduceResponse> {
        let request = ProduceRequest::default()
            .with_acks(-1)
            .with_timeout_ms(5_000)
            .with_topic_data(vec![TopicProduceData::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_partition_data(vec![PartitionProduceData::default()
                    .with_index(partition)
                    .with_records(Some(Bytes::from(batch)))])]);
        let response: ProduceResponse = self.call(ApiKey::Produce, 9, &request)?;
        Ok(response.responses[0].partition_responses[0].clone())
    }

    /// Creates a topic (replication factor 1) and checks that it was created.
    pub fn create_topic(&mut self, topic: &str, partitions: i32) {
        let request = CreateTopicsRequest::default()
            .with_timeout_ms(5_000)
            .with_topics(vec![CreatableTopic::default()
                .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
                .with_num_partitions(partitions)
                .with_replication_factor(1)]);
        let created: CreateTopicsResponse = self.call(ApiKey::CreateTopics, 7, &request).unwrap();
        assert_eq!(created.topics[0].error_code, 0, "creating {topic}");
    }
}

/// The group as its coordinator describes it (DescribeGroups): the state and
/// each member's assigned partitions.
pub fn describe_group(client: &mut Client, group: &str) -> (String, Vec<BTreeSet<(String, i32)>>) {
    let request = DescribeGroupsRequest::default()
        .with_groups(vec![GroupId(StrBytes::from_string(group.to_owned()))]);
    let response: DescribeGroupsResponse =
        client.call(ApiKey::DescribeGroups, 5, &request).unwrap();
    let group = &response.groups[0];
    let assignments = group
        .members
        .iter()
        .map(|m| {
            let mut bytes = m.member_assignment.clone();
            if bytes.len() < 2 {
                return BTreeSet::new();
            }
            let version = i16::from_be_bytes([bytes[0], bytes[1]]);
            bytes = bytes.slice(2..);
            let assignment = ConsumerProtocolAssignment::decode(&mut bytes, version).unwrap();
            assignment
                .assigned_partitions
                .iter()
                .flat_map(|t| t.partitions.iter().map(|p| (t.topic.to_string(), *p)))
                .collect()
        })
        .collect();
    (group.group_state.to_string(), assignments)
}

/// Waits until the group is Stable with `members` members whose assignments
/// are disjoint and cover exactly `expected`; returns the assignments.
pub fn wait_for_assignment(
    client: &mut Client,
    group: &str,
    members: usize,
    expected: &BTreeSet<(String, i32)>,
    timeout: Duration,
) -> Vec<BTreeSet<(String, i32)>> {
    let deadline = Instant::now() + timeout;
    loop {
        let (state, assignments) = describe_group(client, group);
        let union: BTreeSet<(String, i32)> = assignments.iter().flatten().cloned().collect();
        let total: usize = assignments.iter().map(BTreeSet::len).sum();
        if state == "Stable"
            && assignments.len() == members
            && union == *expected
            && total == union.len()
        {
            return assignments;
        }
        assert!(
            Instant::now() < deadline,
            "group {group} never reached {members} members covering {expected:?}: {state} {assignments:?}"
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

/// A group's committed offsets, every partition (OffsetFetch v9), sorted;
/// waits for its coordinator to load them (COORDINATOR_LOAD_IN_PROGRESS
/// right after a start).
pub fn committed_offsets(client: &mut Client, group: &str) -> Vec<(String, i32, i64)> {
    const COORDINATOR_LOAD_IN_PROGRESS: i16 = 14;
    let request =
        OffsetFetchRequest::default().with_groups(vec![OffsetFetchRequestGroup::default()
            .with_group_id(GroupId(StrBytes::from_string(group.to_owned())))
            .with_topics(None)]);
    let deadline = Instant::now() + Duration::from_secs(20);
    loop {
        let response: OffsetFetchResponse = client.call(ApiKey::OffsetFetch, 9, &request).unwrap();
        let answer = &response.groups[0];
        if answer.error_code == COORDINATOR_LOAD_IN_PROGRESS && Instant::now() < deadline {
            std::thread::sleep(Duration::from_millis(50));
            continue;
        }
        assert_eq!(answer.error_code, 0, "{response:?}");
        let mut offsets: Vec<(String, i32, i64)> = answer
            .topics
            .iter()
            .flat_map(|t| {
                t.partitions
                    .iter()
                    .map(|p| (t.name.to_string(), p.partition_index, p.committed_offset))
            })
            .collect();
        offsets.sort();
        return offsets;
    }
}

/// Runs a Kafka tool class; returns its stdout, failing on a non-zero exit.
pub fn kafka_tool(class: &str, args: &[&str], input: Option<&str>) -> String {
    let output = kafka_tool_output(class, args, input);
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{class} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// Runs a Kafka tool class (at most 120 s) with `input` on stdin; how it ended.
pub fn kafka_tool_output(class: &str, args: &[&str], input: Option<&str>) -> std::process::Output {
    fetch_kafka_jars("kafka");
    let mut child = Command::new("timeout")
        .arg("120")
        .arg(repo_root().join("tests/support/kafka/kafka-run-class.sh"))
        .arg(class)
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    let mut stdin = child.stdin.take().unwrap();
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).unwrap();
    }
    drop(stdin);
    child.wait_with_output().unwrap()
}

/// Runs kcat (installed by tests/run) with `input` on stdin; its stdout.
pub fn kcat(args: &[&str], input: Option<&str>) -> String {
    let mut child = Command::new("timeout")
        .arg("60")
        .arg("kcat")
        .args(args)
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .expect("kcat is installed by tests/run");
    let mut stdin = child.stdin.take().unwrap();
    if let Some(input) = input {
        stdin.write_all(input.as_bytes()).unwrap();
    }
    drop(stdin);
    let output = child.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "kcat {args:?} failed: {}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout).unwrap()
}

/// (status line, body) of an HTTP GET.
pub fn http_get(port: u16, path: &str) -> (String, String) {
    let mut stream = TcpStream::connect(("127.0.0.1", port)).unwrap();
    stream
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    write!(stream, "GET {path} HTTP/1.1\r\nHost: localhost\r\n\r\n").unwrap();
    let mut response = String::new();
    stream.read_to_string(&mut response).unwrap();
    let (head, body) = response.split_once("\r\n\r\n").unwrap();
    (head.lines().next().unwrap().to_owned(), body.to_owned())
}
