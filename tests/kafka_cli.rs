//! The Java client through Kafka's own command-line tools (Kafka 4 jars from
//! Maven Central, tests/support/kafka): kafka-topics, kafka-configs,
//! kafka-console-producer and kafka-console-consumer, kafka-delete-records.

mod common;

use std::process::{Command, Stdio};

use std::collections::BTreeSet;
use std::time::Duration;

use common::{fetch_kafka_jars, kafka_tool, repo_root, wait_for_assignment, Broker, Client};

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

const CONSUMER_GROUPS: &str = "org.apache.kafka.tools.consumer.group.ConsumerGroupCommand";

/// The Java consumer in a group (kafka-console-consumer --group) and the
/// kafka-consumer-groups tool: list, describe, reset offsets, delete.
#[test]
fn console_consumer_group_and_kafka_consumer_groups() {
    let broker = Broker::start(&["group.initial.rebalance.delay.ms=0"]);
    let address = broker.address();
    let groups_tool = |extra: &[&str]| -> String {
        let args: Vec<&str> = ["--bootstrap-server", address.as_str()]
            .into_iter()
            .chain(extra.iter().copied())
            .collect();
        kafka_tool(CONSUMER_GROUPS, &args, None)
    };
    kafka_tool(
        TOPICS,
        &[
            "--bootstrap-server",
            &address,
            "--create",
            "--topic",
            "cg",
            "--partitions",
            "3",
        ],
        None,
    );
    let lines: String = (0..90).map(|i| format!("{i}:value-{i}\n")).collect();
    kafka_tool(
        "org.apache.kafka.tools.ConsoleProducer",
        &[
            "--bootstrap-server",
            &address,
            "--topic",
            "cg",
            "--property",
            "parse.key=true",
            "--property",
            "key.separator=:",
        ],
        Some(&lines),
    );
    let consume = || -> Vec<String> {
        let out = kafka_tool(
            "org.apache.kafka.tools.consumer.ConsoleConsumer",
            &[
                "--bootstrap-server",
                &address,
                "--topic",
                "cg",
                "--group",
                "cg-group",
                "--from-beginning",
                "--max-messages",
                "90",
                "--timeout-ms",
                "30000",
            ],
            None,
        );
        let mut got: Vec<String> = out.lines().map(str::to_owned).collect();
        got.sort();
        got
    };
    let mut want: Vec<String> = (0..90).map(|i| format!("value-{i}")).collect();
    want.sort();
    assert_eq!(consume(), want);

    assert!(groups_tool(&["--list"])
        .lines()
        .any(|l| l.trim() == "cg-group"));
    // Kafka's own decoder reads the group's records in __consumer_offsets.
    let segment = std::fs::read_dir(&broker.data_dir)
        .unwrap()
        .flatten()
        .filter(|d| {
            d.file_name()
                .to_string_lossy()
                .starts_with("__consumer_offsets-")
        })
        .map(|d| d.path().join("00000000000000000000.log"))
        .find(|log| std::fs::metadata(log).is_ok_and(|m| m.len() > 0))
        .expect("the group's partition has records");
    let dumped = kafka_tool(
        "org.apache.kafka.tools.DumpLogSegments",
        &["--files", segment.to_str().unwrap(), "--offsets-decoder"],
        None,
    );
    for expected in [
        r#"key: {"type":"2","data":{"group":"cg-group"}}"#,
        r#""protocolType":"consumer""#,
        r#"key: {"type":"1","data":{"group":"cg-group","topic":"cg","partition":0}}"#,
    ] {
        assert!(dumped.contains(expected), "{expected} not in\n{dumped}");
    }
    // Every partition's committed offset is its end: lag 0.
    let described = groups_tool(&["--describe", "--group", "cg-group"]);
    let rows: Vec<Vec<&str>> = described
        .lines()
        .map(|l| l.split_whitespace().collect::<Vec<_>>())
        .filter(|f| f.first() == Some(&"cg-group") && f.get(1) == Some(&"cg"))
        .collect();
    assert_eq!(rows.len(), 3, "{described}");
    let mut total = 0;
    for row in &rows {
        assert_eq!(row[3], row[4], "current offset is the end: {described}");
        assert_eq!(row[5], "0", "{described}");
        total += row[3].parse::<i64>().unwrap();
    }
    assert_eq!(total, 90);

    let reset = groups_tool(&[
        "--reset-offsets",
        "--group",
        "cg-group",
        "--topic",
        "cg",
        "--to-earliest",
        "--execute",
    ]);
    assert_eq!(
        reset
            .lines()
            .filter(|l| l.starts_with("cg-group") && l.split_whitespace().last() == Some("0"))
            .count(),
        3,
        "{reset}"
    );
    // From the reset offsets, the group reads everything again.
    assert_eq!(consume(), want);

    let deleted = groups_tool(&["--delete", "--group", "cg-group"]);
    assert!(deleted.contains("successful"), "{deleted}");
    assert!(!groups_tool(&["--list"])
        .lines()
        .any(|l| l.trim() == "cg-group"));
}

/// Java consumers (kafka-console-consumer processes) in one group: disjoint
/// shares of every partition; one killed -9, one stopped (LeaveGroup); the
/// survivor holds everything once the dead one's session times out.
#[test]
fn java_consumers_share_partitions_and_the_survivor_takes_over() {
    fetch_kafka_jars("kafka");
    let broker = Broker::start(&["group.initial.rebalance.delay.ms=3000"]);
    let address = broker.address();
    let mut client = Client::connect(&address);
    client.create_topic("shared", 6);
    let all: BTreeSet<(String, i32)> = (0..6).map(|p| ("shared".to_string(), p)).collect();
    let spawn = || {
        Command::new(repo_root().join("tests/support/kafka/kafka-run-class.sh"))
            .args([
                "org.apache.kafka.tools.consumer.ConsoleConsumer",
                "--bootstrap-server",
                &address,
                "--topic",
                "shared",
                "--group",
                "java-group",
                "--consumer-property",
                "session.timeout.ms=6000",
                "--consumer-property",
                "heartbeat.interval.ms=500",
            ])
            .stdout(Stdio::null())
            .stderr(Stdio::null())
            .spawn()
            .unwrap()
    };
    let mut members = Children((0..3).map(|_| spawn()).collect());
    let shares = wait_for_assignment(&mut client, "java-group", 3, &all, Duration::from_secs(90));
    assert!(shares.iter().all(|share| share.len() == 2), "{shares:?}");

    members.0[0].kill().unwrap();
    let killed_at = std::time::Instant::now();
    // SIGTERM: the console consumer closes its consumer, which leaves the group.
    assert_eq!(
        unsafe { libc::kill(members.0[1].id() as i32, libc::SIGTERM) },
        0
    );
    assert!(
        common::wait_for_exit(&mut members.0[1], Duration::from_secs(30)).is_some(),
        "the consumer ignored SIGTERM"
    );
    wait_for_assignment(&mut client, "java-group", 1, &all, Duration::from_secs(30));
    eprintln!(
        "the Java survivor held every partition {:?} after the kill",
        killed_at.elapsed()
    );
}

/// Child processes killed when the test ends, however it ends.
struct Children(Vec<std::process::Child>);

impl Drop for Children {
    fn drop(&mut self) {
        for child in &mut self.0 {
            let _ = child.kill();
            let _ = child.wait();
        }
    }
}

/// The earliest offset (ListOffsets -2) and a fetch's error at `offset`.
fn earliest_and_fetch_error(address: &str, topic: &str, offset: i64) -> (i64, i16) {
    use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
    use kafka_protocol::messages::list_offsets_request::{ListOffsetsPartition, ListOffsetsTopic};
    use kafka_protocol::messages::{
        ApiKey, FetchRequest, FetchResponse, ListOffsetsRequest, ListOffsetsResponse, TopicName,
    };
    use kafka_protocol::protocol::StrBytes;
    let name = TopicName(StrBytes::from_string(topic.to_owned()));
    let mut client = Client::connect(address);
    let listed: ListOffsetsResponse = client
        .call(
            ApiKey::ListOffsets,
            7,
            &ListOffsetsRequest::default()
                .with_replica_id(kafka_protocol::messages::BrokerId(-1))
                .with_topics(vec![ListOffsetsTopic::default()
                    .with_name(name.clone())
                    .with_partitions(vec![ListOffsetsPartition::default()
                        .with_partition_index(0)
                        .with_timestamp(-2)])]),
        )
        .unwrap();
    let fetched: FetchResponse = client
        .call(
            ApiKey::Fetch,
            11,
            &FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name)
                    .with_partitions(vec![FetchPartition::default()
                        .with_partition(0)
                        .with_fetch_offset(offset)
                        .with_partition_max_bytes(1 << 20)])]),
        )
        .unwrap();
    (
        listed.topics[0].partitions[0].offset,
        fetched.responses[0].partitions[0].error_code,
    )
}

#[test]
fn kafka_delete_records_moves_the_log_start_for_good() {
    let mut broker = Broker::start(&[
        "log.segment.bytes=16384",
        "log.retention.check.interval.ms=100",
    ]);
    let address = broker.address();
    let bootstrap = ["--bootstrap-server", address.as_str()];
    kafka_tool(
        TOPICS,
        &[
            &bootstrap[..],
            &["--create", "--topic", "purged", "--partitions", "1"],
        ]
        .concat(),
        None,
    );
    let lines: String = (0..2000)
        .map(|i| format!("record-{i:05}-{}\n", "x".repeat(40)))
        .collect();
    kafka_tool(
        "org.apache.kafka.tools.ConsoleProducer",
        &[
            &bootstrap[..],
            &["--topic", "purged", "--batch-size", "2048"],
        ]
        .concat(),
        Some(&lines),
    );
    let offsets = std::env::temp_dir().join(format!("delete-records-{}.json", broker.port));
    std::fs::write(
        &offsets,
        r#"{"version":1,"partitions":[{"topic":"purged","partition":0,"offset":1500}]}"#,
    )
    .unwrap();
    let output = kafka_tool(
        "org.apache.kafka.tools.DeleteRecordsCommand",
        &[
            &bootstrap[..],
            &["--offset-json-file", offsets.to_str().unwrap()],
        ]
        .concat(),
        None,
    );
    std::fs::remove_file(&offsets).unwrap();
    assert!(
        output.contains("partition: purged-0\tlow_watermark: 1500"),
        "{output}"
    );
    // OFFSET_OUT_OF_RANGE below the new start.
    assert_eq!(
        earliest_and_fetch_error(&address, "purged", 1499),
        (1500, 1)
    );
    assert_eq!(
        earliest_and_fetch_error(&address, "purged", 1500),
        (1500, 0)
    );
    // The segments wholly below it go in the background.
    let first_segment = broker.data_dir().join("purged-0/00000000000000000000.log");
    let deadline = std::time::Instant::now() + Duration::from_secs(10);
    while first_segment.exists() {
        assert!(std::time::Instant::now() < deadline, "segment 0 stays");
        std::thread::sleep(Duration::from_millis(50));
    }
    let consumed = kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            &bootstrap[..],
            &[
                "--topic",
                "purged",
                "--from-beginning",
                "--max-messages",
                "500",
                "--timeout-ms",
                "20000",
            ],
        ]
        .concat(),
        None,
    );
    assert!(
        consumed.starts_with("record-01500-"),
        "{}",
        consumed.lines().next().unwrap_or("")
    );
    // The log start offset is kept across a restart.
    broker.stop();
    let checkpoint =
        std::fs::read_to_string(broker.data_dir().join("log-start-offset-checkpoint")).unwrap();
    assert!(checkpoint.contains("purged 0 1500"), "{checkpoint}");
    broker.restart();
    assert_eq!(
        earliest_and_fetch_error(&address, "purged", 1499),
        (1500, 1)
    );
}

/// The keys Kafka's own jars define: ConfigDefs.java run against Kafka 4's
/// jars (`kafka`) or 3.9's (`kafka-3.9`).
fn kafka_config_keys(jars: &str, scope: &str) -> BTreeSet<String> {
    let libs = fetch_kafka_jars(jars);
    let output = Command::new("timeout")
        .args(["180", "java", "-cp"])
        .arg(format!("{}/*", libs.trim()))
        .arg(repo_root().join("tests/support/kafka/ConfigDefs.java"))
        .arg(scope)
        .output()
        .unwrap();
    assert!(
        output.status.success(),
        "{}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| line.split('\t').next().unwrap().to_owned())
        .collect()
}

/// The names `kafka-configs --describe --all` printed ("  name=value sensitive=...").
fn described_keys(output: &str) -> BTreeSet<String> {
    output
        .lines()
        .filter_map(|line| line.strip_prefix("  "))
        .filter_map(|entry| entry.split_once('=').map(|(name, _)| name.to_owned()))
        .collect()
}

#[test]
fn kafka_configs_describe_all_lists_every_key_kafka_defines() {
    let broker = Broker::start(&["log.retention.hours=24", "num.io.threads=4"]);
    let address = broker.address();
    let bootstrap = ["--bootstrap-server", address.as_str()];
    kafka_tool(
        TOPICS,
        &[
            &bootstrap[..],
            &[
                "--create",
                "--topic",
                "described",
                "--config",
                "preallocate=true",
            ],
        ]
        .concat(),
        None,
    );
    let topic = kafka_tool(
        CONFIGS,
        &[
            &bootstrap[..],
            &[
                "--entity-type",
                "topics",
                "--entity-name",
                "described",
                "--describe",
                "--all",
            ],
        ]
        .concat(),
        None,
    );
    let mut topic_keys = kafka_config_keys("kafka", "topic");
    topic_keys.extend(kafka_config_keys("kafka-3.9", "topic"));
    assert_eq!(described_keys(&topic), topic_keys, "{topic}");
    // The override, the broker's own value with its synonyms, and a default.
    assert!(
        topic.contains(
            "  preallocate=true sensitive=false synonyms={DYNAMIC_TOPIC_CONFIG:preallocate=true"
        ),
        "{topic}"
    );
    assert!(topic.contains("  retention.ms=86400000 "), "{topic}");
    assert!(topic.contains("  compression.type=producer sensitive=false synonyms={DEFAULT_CONFIG:compression.type=producer}"), "{topic}");
    let overrides = kafka_tool(
        CONFIGS,
        &[
            &bootstrap[..],
            &[
                "--entity-type",
                "topics",
                "--entity-name",
                "described",
                "--describe",
            ],
        ]
        .concat(),
        None,
    );
    assert!(
        overrides.contains("preallocate=true") && !overrides.contains("retention.ms"),
        "{overrides}"
    );

    let brokers = kafka_tool(
        CONFIGS,
        &[
            &bootstrap[..],
            &[
                "--entity-type",
                "brokers",
                "--entity-name",
                "0",
                "--describe",
                "--all",
            ],
        ]
        .concat(),
        None,
    );
    let broker_keys = kafka_config_keys("kafka-3.9", "broker");
    let described = described_keys(&brokers);
    let missing: Vec<_> = broker_keys.difference(&described).collect();
    assert!(missing.is_empty(), "missing {missing:?}:\n{brokers}");
    assert!(brokers.contains("  num.io.threads=4 sensitive=false synonyms={STATIC_BROKER_CONFIG:num.io.threads=4, DEFAULT_CONFIG:num.io.threads=8}"), "{brokers}");
    assert!(brokers.contains("  log.retention.hours=24 sensitive=false synonyms={STATIC_BROKER_CONFIG:log.retention.hours=24, DEFAULT_CONFIG:log.retention.hours=168}"), "{brokers}");
    assert!(
        brokers.contains("  ssl.keystore.password=null sensitive=true"),
        "{brokers}"
    );
}

/// Batches of the given codec and record count in a partition's segments.
fn stored_codecs(partition_dir: &std::path::Path) -> Vec<(shards::log::CompressionType, i32)> {
    let mut batches = Vec::new();
    for entry in std::fs::read_dir(partition_dir).unwrap() {
        let path = entry.unwrap().path();
        if path.extension().is_some_and(|e| e == "log") {
            let bytes = std::fs::read(&path).unwrap();
            for batch in shards::log::record_batch::BatchIter::new(&bytes) {
                let (header, _) = batch.unwrap();
                batches.push((header.compression().unwrap(), header.records_count));
            }
        }
    }
    batches
}

#[test]
fn a_zstd_topic_recompresses_gzip_batches_that_every_client_reads() {
    let broker = Broker::start(&[]);
    let address = broker.address();
    let bootstrap = ["--bootstrap-server", address.as_str()];
    kafka_tool(
        TOPICS,
        &[
            &bootstrap[..],
            &["--create", "--topic", "zstd", "--partitions", "1"],
        ]
        .concat(),
        None,
    );
    kafka_tool(
        CONFIGS,
        &[
            &bootstrap[..],
            &[
                "--entity-type",
                "topics",
                "--entity-name",
                "zstd",
                "--alter",
                "--add-config",
                "compression.type=zstd,compression.zstd.level=9",
            ],
        ]
        .concat(),
        None,
    );
    let lines: String = (0..300).map(|i| format!("line-{i:04}\n")).collect();
    kafka_tool(
        "org.apache.kafka.tools.ConsoleProducer",
        &[
            &bootstrap[..],
            &["--topic", "zstd", "--compression-codec", "gzip"],
        ]
        .concat(),
        Some(&lines),
    );
    let stored = stored_codecs(&broker.data_dir().join("zstd-0"));
    assert!(!stored.is_empty());
    assert!(
        stored
            .iter()
            .all(|(codec, _)| *codec == shards::log::CompressionType::Zstd),
        "{stored:?}"
    );
    assert_eq!(stored.iter().map(|(_, n)| n).sum::<i32>(), 300);
    let java = kafka_tool(
        "org.apache.kafka.tools.consumer.ConsoleConsumer",
        &[
            &bootstrap[..],
            &[
                "--topic",
                "zstd",
                "--from-beginning",
                "--max-messages",
                "300",
                "--timeout-ms",
                "20000",
            ],
        ]
        .concat(),
        None,
    );
    assert_eq!(java, lines);
    // The system's librdkafka (with zstd), not the one cargo built for the
    // rdkafka crate (without codecs), which cargo puts on LD_LIBRARY_PATH.
    let kcat = Command::new("timeout")
        .env_remove("LD_LIBRARY_PATH")
        .args([
            "60",
            "kcat",
            "-C",
            "-b",
            &address,
            "-t",
            "zstd",
            "-o",
            "beginning",
            "-e",
            "-q",
        ])
        .output()
        .unwrap();
    assert!(
        kcat.status.success(),
        "{}",
        String::from_utf8_lossy(&kcat.stderr)
    );
    assert_eq!(String::from_utf8_lossy(&kcat.stdout), lines);
}
