//! The Java client through Kafka's own command-line tools (Kafka 4 jars from
//! Maven Central, tests/support/kafka): kafka-topics, kafka-configs,
//! kafka-console-producer and kafka-console-consumer.

mod common;

use std::io::Write;
use std::path::PathBuf;
use std::process::{Command, Stdio};

use common::Broker;

fn repo_root() -> PathBuf {
    PathBuf::from(env!("CARGO_MANIFEST_DIR"))
}

/// Runs a Kafka tool class; returns its stdout, failing on a non-zero exit.
fn kafka_tool(class: &str, args: &[&str], input: Option<&str>) -> String {
    let fetch = Command::new(repo_root().join("tests/support/kafka/fetch.sh"))
        .output()
        .unwrap();
    assert!(
        fetch.status.success(),
        "{}",
        String::from_utf8_lossy(&fetch.stderr)
    );
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
    let output = child.wait_with_output().unwrap();
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{class} {args:?} failed:\n{stdout}\n{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

const TOPICS: &str = "org.apache.kafka.tools.TopicCommand";
const CONFIGS: &str = "org.apache.kafka.tools.ConfigCommand";

#[test]
fn kafka_topics_and_kafka_configs() {
    let broker = Broker::start(&[]);
    let address = broker.address();
    let bootstrap = ["--bootstrap-server", address.as_str()];
    let with = |extra: &[&'static str]| -> Vec<&str> {
        bootstrap
            .iter()
            .copied()
            .chain(extra.iter().copied())
            .collect()
    };

    kafka_tool(
        TOPICS,
        &with(&[
            "--create",
            "--topic",
            "cli",
            "--partitions",
            "3",
            "--replication-factor",
            "1",
            "--config",
            "retention.ms=3600000",
        ]),
        None,
    );
    let described = kafka_tool(TOPICS, &with(&["--describe", "--topic", "cli"]), None);
    assert!(described.contains("PartitionCount: 3"), "{described}");
    assert!(described.contains("retention.ms=3600000"), "{described}");
    assert!(kafka_tool(TOPICS, &with(&["--list"]), None)
        .lines()
        .any(|l| l == "cli"));

    kafka_tool(
        TOPICS,
        &with(&["--alter", "--topic", "cli", "--partitions", "5"]),
        None,
    );
    let described = kafka_tool(TOPICS, &with(&["--describe", "--topic", "cli"]), None);
    assert!(described.contains("PartitionCount: 5"), "{described}");

    let topic_configs = |action: &[&'static str]| {
        let mut args = vec!["--entity-type", "topics", "--entity-name", "cli"];
        args.extend_from_slice(action);
        kafka_tool(CONFIGS, &with(&args), None)
    };
    topic_configs(&[
        "--alter",
        "--add-config",
        "cleanup.policy=compact,retention.bytes=1048576",
    ]);
    let configs = topic_configs(&["--describe"]);
    assert!(configs.contains("cleanup.policy=compact"), "{configs}");
    assert!(configs.contains("retention.bytes=1048576"), "{configs}");
    topic_configs(&["--alter", "--delete-config", "retention.bytes"]);
    let configs = topic_configs(&["--describe"]);
    assert!(!configs.contains("retention.bytes=1048576"), "{configs}");

    let dirs = kafka_tool(
        "org.apache.kafka.tools.LogDirsCommand",
        &with(&["--describe", "--topic-list", "cli"]),
        None,
    );
    assert!(dirs.contains("\"partition\":\"cli-4\""), "{dirs}");
    assert!(
        dirs.contains(&broker.data_dir().display().to_string()),
        "{dirs}"
    );

    kafka_tool(TOPICS, &with(&["--delete", "--topic", "cli"]), None);
    assert!(!kafka_tool(TOPICS, &with(&["--list"]), None)
        .lines()
        .any(|l| l == "cli"));
}

#[test]
fn console_producer_and_consumer() {
    let broker = Broker::start(&[]);
    let address = broker.address();
    kafka_tool(
        TOPICS,
        &[
            "--bootstrap-server",
            &address,
            "--create",
            "--topic",
            "console",
            "--partitions",
            "1",
        ],
        None,
    );
    let lines: String = (0..200).map(|i| format!("line-{i}\n")).collect();
    kafka_tool(
        "org.apache.kafka.tools.ConsoleProducer",
        &["--bootstrap-server", &address, "--topic", "console"],
        Some(&lines),
    );
    let consumed = kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            "--bootstrap-server",
            &address,
            "--topic",
            "console",
            "--partition",
            "0",
            "--offset",
            "earliest",
            "--max-messages",
            "200",
            "--timeout-ms",
            "20000",
        ],
        None,
    );
    let got: Vec<&str> = consumed.lines().collect();
    let want: Vec<String> = (0..200).map(|i| format!("line-{i}")).collect();
    assert_eq!(got, want);
}
