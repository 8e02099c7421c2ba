//! A broker's port and log dirs are its own: a second broker on either is
//! refused before it touches anything, and the first keeps serving. A restart
//! binds at once over connections left in TIME_WAIT, every listener is bound
//! and answers with its own advertised address, and a log dir that cannot be
//! used is offline from the start while the others serve.

mod common;

use std::io::{Read, Write};
use std::net::{SocketAddr, TcpStream};
use std::path::Path;
use std::process::{Command, Output};
use std::time::{Duration, Instant};

use common::{free_port, wait_for_exit, Broker, Client};
use kafka_protocol::messages::{
    ApiKey, DescribeLogDirsRequest, DescribeLogDirsResponse, MetadataRequest, MetadataResponse,
};
use shards::log::record_batch::RecordBatchBuilder;

/// Runs `ringbroker start` (in `cwd`, with these overrides and no CONFIG),
/// expecting it to exit by itself within 20 s.
fn start_expecting_exit(cwd: &Path, overrides: &[String]) -> Output {
    let mut command = Command::new(env!("CARGO_BIN_EXE_ringbroker"));
    command.current_dir(cwd).arg("start");
    for entry in overrides {
        command.arg("--override").arg(entry);
    }
    let mut child = command
        .stdout(std::process::Stdio::piped())
        .stderr(std::process::Stdio::piped())
        .spawn()
        .unwrap();
    if wait_for_exit(&mut child, Duration::from_secs(20)).is_none() {
        let _ = child.kill();
        panic!("the broker did not exit: {:?}", child.wait_with_output());
    }
    child.wait_with_output().unwrap()
}

fn stderr(output: &Output) -> String {
    String::from_utf8_lossy(&output.stderr).into_owned()
}

fn batch() -> Vec<u8> {
    let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
    builder.append(shards::log::wall_clock_ms(), None, Some(b"value"));
    builder.build()
}

const TOPIC: &str = "still-serving";

/// A broker with `TOPIC`, which `assert_serves` writes to.
fn broker_with_topic() -> Broker {
    let broker = Broker::start(&[]);
    Client::connect(&broker.address()).create_topic(TOPIC, 1);
    broker
}

/// The broker still answers and still takes writes.
fn assert_serves(broker: &Broker) {
    let mut client = Client::connect(&broker.address());
    let metadata: MetadataResponse = client
        .call(ApiKey::Metadata, 12, &MetadataRequest::default())
        .unwrap();
    assert_eq!(metadata.brokers.len(), 1);
    let produced = client.produce(TOPIC, 0, batch()).unwrap();
    assert_eq!(produced.error_code, 0);
}

#[test]
fn a_second_broker_on_a_held_port_or_log_dir_is_refused() {
    let mut first = broker_with_topic();
    let cwd = tempfile::tempdir().unwrap();

    let on_port = start_expecting_exit(
        cwd.path(),
        &[
            format!("listeners=PLAINTEXT://127.0.0.1:{}", first.port),
            format!("log.dirs={}", cwd.path().join("other").display()),
        ],
    );
    assert!(!on_port.status.success());
    let message = stderr(&on_port);
    assert!(
        message.contains("Address already in use")
            && message.contains(&format!("127.0.0.1:{}", first.port)),
        "{message}"
    );
    assert_serves(&first);

    let on_dir = start_expecting_exit(
        cwd.path(),
        &[
            format!("listeners=PLAINTEXT://127.0.0.1:{}", free_port()),
            format!("log.dirs={}", first.data_dir().display()),
        ],
    );
    assert!(!on_dir.status.success());
    let message = stderr(&on_dir);
    assert!(
        message.contains("Failed to acquire lock")
            && message.contains(&*first.data_dir().to_string_lossy()),
        "{message}"
    );
    assert_serves(&first);

    // Another program listening on the port with SO_REUSEPORT is refused too.
    first.stop();
    let foreign = socket2::Socket::new(socket2::Domain::IPV4, socket2::Type::STREAM, None).unwrap();
    foreign.set_reuse_port(true).unwrap();
    let address: SocketAddr = first.address().parse().unwrap();
    foreign.bind(&address.into()).unwrap();
    foreign.listen(16).unwrap();
    let shared = start_expecting_exit(
        cwd.path(),
        &[
            format!("listeners=PLAINTEXT://{}", first.address()),
            format!("log.dirs={}", first.data_dir().display()),
        ],
    );
    assert!(
        stderr(&shared).contains("Address already in use"),
        "{}",
        stderr(&shared)
    );
    drop(foreign);
    first.restart();
    assert_serves(&first);
}

#[test]
fn a_restart_binds_at_once_over_connections_in_time_wait() {
    let mut broker = broker_with_topic();
    // Connections the broker closes on shutdown stay in TIME_WAIT on its port.
    let clients: Vec<Client> = (0..4).map(|_| Client::connect(&broker.address())).collect();
    for mut client in clients {
        let _: MetadataResponse = client
            .call(ApiKey::Metadata, 12, &MetadataRequest::default())
            .unwrap();
        std::mem::forget(client); // kept open until the broker closes it
    }
    broker.stop();
    let started = Instant::now();
    broker.restart();
    assert!(
        started.elapsed() < Duration::from_secs(10),
        "{:?}",
        started.elapsed()
    );
    assert_serves(&broker);
}

#[test]
fn every_listener_is_bound_and_answers_with_its_own_address() {
    let (plain_port, internal_port) = (free_port(), free_port());
    let broker = Broker::start_on(
        plain_port,
        &[
            &format!(
                "listeners=PLAINTEXT://127.0.0.1:{plain_port},INTERNAL://127.0.0.2:{internal_port}"
            ),
            &format!("advertised.listeners=INTERNAL://localhost:{internal_port}"),
            "listener.security.protocol.map=PLAINTEXT:PLAINTEXT,INTERNAL:PLAINTEXT",
        ],
    );
    let advertised = |address: &str| -> (String, i32) {
        let mut client = Client::connect(address);
        let metadata: MetadataResponse = client
            .call(ApiKey::Metadata, 12, &MetadataRequest::default())
            .unwrap();
        let broker = &metadata.brokers[0];
        (broker.host.to_string(), broker.port)
    };
    assert_eq!(
        advertised(&broker.address()),
        ("127.0.0.1".to_owned(), plain_port as i32)
    );
    assert_eq!(
        advertised(&format!("127.0.0.2:{internal_port}")),
        ("localhost".to_owned(), internal_port as i32)
    );
}

#[test]
fn a_start_without_config_uses_the_built_in_defaults_from_any_directory() {
    let cwd = tempfile::tempdir().unwrap();
    let (port, metrics_port) = (free_port(), free_port());
    // The built-in config serves metrics on 9404: moved to a free port here.
    let mut child = Command::new(env!("CARGO_BIN_EXE_ringbroker"))
        .current_dir(cwd.path())
        .args(["start", "--override"])
        .arg(format!("listeners=PLAINTEXT://127.0.0.1:{port}"))
        .arg("--override")
        .arg(format!("ringbroker.metrics.port={metrics_port}"))
        .stdout(std::process::Stdio::null())
        .stderr(std::process::Stdio::null())
        .spawn()
        .unwrap();
    let deadline = Instant::now() + Duration::from_secs(20);
    while TcpStream::connect(("127.0.0.1", port)).is_err() {
        assert!(Instant::now() < deadline, "no listener on {port}");
        assert!(child.try_wait().unwrap().is_none(), "the broker exited");
        std::thread::sleep(Duration::from_millis(20));
    }
    let mut health = TcpStream::connect(("127.0.0.1", metrics_port)).unwrap();
    health
        .set_read_timeout(Some(Duration::from_secs(15)))
        .unwrap();
    health.write_all(b"GET /health HTTP/1.1\r\n\r\n").unwrap();
    let mut answer = String::new();
    health.read_to_string(&mut answer).unwrap();
    assert!(answer.starts_with("HTTP/1.1 200 OK"), "{answer}");
    let mut client = Client::connect(&format!("127.0.0.1:{port}"));
    client.create_topic("defaults", 1);
    assert_eq!(
        client.produce("defaults", 0, batch()).unwrap().error_code,
        0
    );
    unsafe { libc::kill(child.id() as i32, libc::SIGTERM) };
    let status = wait_for_exit(&mut child, Duration::from_secs(30));
    if status.is_none() {
        let _ = child.kill();
    }
    assert!(status.is_some_and(|s| s.success()));
    // config/server.properties says log.dirs=./data.
    assert!(cwd.path().join("data/defaults-0").is_dir());
    assert!(cwd.path().join("data/.lock").is_file());
}

/// Mounts a read-only tmpfs at `path` for the life of the guard (root only).
struct ReadOnlyMount(std::path::PathBuf);

impl ReadOnlyMount {
    fn new(path: &Path) -> Self {
        std::fs::create_dir_all(path).unwrap();
        let status = Command::new("mount")
            .args(["-t", "tmpfs", "-o", "ro,size=64k", "tmpfs"])
            .arg(path)
            .status()
            .expect("mount(8) is needed for this test");
        assert!(status.success(), "mounting a tmpfs needs root");
        Self(path.to_owned())
    }
}

impl Drop for ReadOnlyMount {
    fn drop(&mut self) {
        let _ = Command::new("umount").arg("-l").arg(&self.0).status();
    }
}

#[test]
fn an_unwritable_log_dir_is_offline_from_the_start_and_the_other_serves() {
    let root = tempfile::tempdir().unwrap();
    let read_only = root.path().join("read-only");
    let _mount = ReadOnlyMount::new(&read_only);
    let good = root.path().join("good");
    // The first dir holds the embedded metadata, which must be writable.
    let broker = Broker::start(&[&format!(
        "log.dirs={},{}",
        good.display(),
        read_only.display()
    )]);
    assert!(
        broker.log().contains("Read-only file system"),
        "{}",
        broker.log()
    );
    let mut client = Client::connect(&broker.address());
    client.create_topic("spread", 8);
    for partition in 0..8 {
        let produced = client.produce("spread", partition, batch()).unwrap();
        assert_eq!(produced.error_code, 0, "partition {partition}");
        assert!(good.join(format!("spread-{partition}")).is_dir());
    }
    let described: DescribeLogDirsResponse = client
        .call(
            ApiKey::DescribeLogDirs,
            4,
            &DescribeLogDirsRequest::default(),
        )
        .unwrap();
    let code_of = |dir: &Path| {
        described
            .results
            .iter()
            .find(|r| r.log_dir.as_str() == dir.to_str().unwrap())
            .map(|r| r.error_code)
    };
    assert_eq!(code_of(&read_only), Some(56), "KAFKA_STORAGE_ERROR");
    assert_eq!(code_of(&good), Some(0));
}

#[test]
fn no_usable_log_dir_stops_the_start_naming_each() {
    let root = tempfile::tempdir().unwrap();
    let file = root.path().join("a-file");
    std::fs::write(&file, b"").unwrap();
    let read_only = root.path().join("read-only");
    let _mount = ReadOnlyMount::new(&read_only);
    let under_file = file.join("logs");
    let output = start_expecting_exit(
        root.path(),
        &[
            format!("listeners=PLAINTEXT://127.0.0.1:{}", free_port()),
            format!("log.dirs={},{}", under_file.display(), read_only.display()),
        ],
    );
    assert!(!output.status.success());
    let message = stderr(&output);
    for dir in [&under_file, &read_only] {
        assert!(message.contains(&*dir.to_string_lossy()), "{message}");
    }
}
