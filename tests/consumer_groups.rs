//! Consumer groups with librdkafka (the rdkafka crate). Each group member is
//! a child process (this test binary re-run as `group_member`), so one can be
//! killed with SIGKILL and never send LeaveGroup. The broker's view of the
//! group is read with DescribeGroups and OffsetFetch.

mod common;

use std::collections::BTreeSet;
use std::io::{BufRead, BufReader, Write};
use std::process::{Child, Command, Stdio};
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant};

use common::{committed_offsets, wait_for_assignment, Broker, Client};
use kafka_protocol::messages::create_partitions_request::CreatePartitionsTopic;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;
use rdkafka::config::ClientConfig;
use rdkafka::consumer::{BaseConsumer, CommitMode, Consumer};
use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;

const MEMBER_ENV: &str = "RINGBROKER_TEST_GROUP_MEMBER";
const SESSION_TIMEOUT_MS: u64 = 6_000;

/// Not a test: the body of a group member process, which the tests start
/// with `--ignored --exact group_member`.
#[test]
#[ignore = "a group member process, started by the other tests"]
fn group_member() {
    let Ok(spec) = std::env::var(MEMBER_ENV) else {
        return;
    };
    let [bootstrap, group, subscription]: [&str; 3] =
        spec.split('|').collect::<Vec<_>>().try_into().unwrap();
    let consumer: BaseConsumer = ClientConfig::new()
        .set("bootstrap.servers", bootstrap)
        .set("group.id", group)
        .set("session.timeout.ms", SESSION_TIMEOUT_MS.to_string())
        .set("heartbeat.interval.ms", "500")
        .set("auto.offset.reset", "earliest")
        .set("topic.metadata.refresh.interval.ms", "1000")
        // At least once: an offset is stored only once its record is out.
        .set("enable.auto.commit", "true")
        .set("auto.commit.interval.ms", "100")
        .set("enable.auto.offset.store", "false")
        .create()
        .unwrap();
    consumer.subscribe(&[subscription]).unwrap();
    let stop = Arc::new(AtomicBool::new(false));
    let stdin_closed = stop.clone();
    std::thread::spawn(move || {
        let _ = std::io::stdin().lines().count();
        stdin_closed.store(true, Ordering::Release);
    });
    let mut out = std::io::stdout();
    while !stop.load(Ordering::Acquire) {
        if let Some(Ok(message)) = consumer.poll(Duration::from_millis(100)) {
            writeln!(
                out,
                "RECORD {} {} {}",
                message.topic(),
                message.partition(),
                message.offset()
            )
            .unwrap();
            out.flush().unwrap();
            consumer.store_offset_from_message(&message).unwrap();
        }
    }
    consumer.commit_consumer_state(CommitMode::Sync).ok();
    // Dropping the consumer closes it: LeaveGroup.
    drop(consumer);
}

/// A member process and the records it printed.
struct Member {
    child: Child,
    records: Arc<Mutex<Vec<(String, i32, i64)>>>,
}

impl Member {
    fn spawn(broker: &Broker, group: &str, subscription: &str) -> Member {
        let mut child = Command::new(std::env::current_exe().unwrap())
            .args([
                "group_member",
                "--exact",
                "--ignored",
                "--nocapture",
                "--test-threads=1",
            ])
            .env(
                MEMBER_ENV,
                format!("{}|{group}|{subscription}", broker.address()),
            )
            .stdin(Stdio::piped())
            .stdout(Stdio::piped())
            .stderr(Stdio::null())
            .spawn()
            .unwrap();
        let records = Arc::new(Mutex::new(Vec::new()));
        let sink = records.clone();
        let stdout = child.stdout.take().unwrap();
        std::thread::spawn(move || {
            for line in BufReader::new(stdout).lines() {
                let Ok(line) = line else { break };
                // libtest's "test group_member ... " may precede the first one.
                let Some(at) = line.find("RECORD ") else {
                    continue;
                };
                let fields: Vec<&str> = line[at..].split(' ').collect();
                if let ["RECORD", topic, partition, offset] = fields[..] {
                    sink.lock().unwrap().push((
                        topic.to_owned(),
                        partition.parse().unwrap(),
                        offset.parse().unwrap(),
                    ));
                }
            }
        });
        Member { child, records }
    }

    /// Leaves the group cleanly (LeaveGroup) and waits for the process.
    fn leave(&mut self) {
        drop(self.child.stdin.take());
        assert!(
            common::wait_for_exit(&mut self.child, Duration::from_secs(20)).is_some(),
            "member did not exit"
        );
    }
}

impl Drop for Member {
    fn drop(&mut self) {
        let _ = self.child.kill();
        let _ = self.child.wait();
    }
}

fn produce(broker: &Broker, topic: &str, partitions: i32, per_partition: usize) {
    let producer: BaseProducer = ClientConfig::new()
        .set("bootstrap.servers", broker.address())
        .set("acks", "all")
        .create()
        .unwrap();
    for partition in 0..partitions {
        for n in 0..per_partition {
            let payload = format!("{partition}-{n}");
            producer
                .send(
                    BaseRecord::<(), str>::to(topic)
                        .partition(partition)
                        .payload(&payload),
                )
                .unwrap();
            producer.poll(Duration::ZERO);
        }
    }
    producer.flush(Duration::from_secs(20)).unwrap();
}

fn s(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

/// Every offset below `end` of every partition appears in some member's output.
fn assert_nothing_skipped(
    members: &[&Member],
    topic: &str,
    partitions: i32,
    end: i64,
    timeout: Duration,
) {
    let deadline = Instant::now() + timeout;
    loop {
        let seen: BTreeSet<(i32, i64)> = members
            .iter()
            .flat_map(|m| m.records.lock().unwrap().clone())
            .filter(|(t, _, _)| t == topic)
            .map(|(_, p, o)| (p, o))
            .collect();
        let missing: Vec<(i32, i64)> = (0..partitions)
            .flat_map(|p| (0..end).map(move |o| (p, o)))
            .filter(|key| !seen.contains(key))
            .collect();
        if missing.is_empty() {
            return;
        }
        assert!(
            Instant::now() < deadline,
            "{} records never consumed, first {:?}",
            missing.len(),
            &missing[..missing.len().min(10)]
        );
        std::thread::sleep(Duration::from_millis(100));
    }
}

#[test]
fn members_share_partitions_survivors_take_over_and_commits_survive_a_restart() {
    let mut broker = Broker::start(&["group.initial.rebalance.delay.ms=1000"]);
    let mut client = Client::connect(&broker.address());
    client.create_topic("events", 12);
    produce(&broker, "events", 12, 100);
    let all: BTreeSet<(String, i32)> = (0..12).map(|p| ("events".to_string(), p)).collect();

    let mut members: Vec<Member> = (0..3)
        .map(|_| Member::spawn(&broker, "g", "events"))
        .collect();
    let shares = wait_for_assignment(&mut client, "g", 3, &all, Duration::from_secs(30));
    assert!(shares.iter().all(|share| share.len() == 4), "{shares:?}");
    assert_nothing_skipped(
        &members.iter().collect::<Vec<_>>(),
        "events",
        12,
        100,
        Duration::from_secs(30),
    );

    // One leaves cleanly; another dies without a word.
    members[0].leave();
    members[1].child.kill().unwrap();
    let killed_at = Instant::now();
    produce(&broker, "events", 12, 100);
    wait_for_assignment(
        &mut client,
        "g",
        1,
        &all,
        Duration::from_millis(SESSION_TIMEOUT_MS + 10_000),
    );
    let takeover = killed_at.elapsed();
    eprintln!("the survivor held every partition {takeover:?} after the kill");
    assert!(
        takeover <= Duration::from_millis(SESSION_TIMEOUT_MS + 4_000),
        "takeover took {takeover:?}"
    );
    // Commits follow processing: whatever the dead member had not committed
    // is read again by the survivor, nothing is skipped.
    assert_nothing_skipped(
        &members.iter().collect::<Vec<_>>(),
        "events",
        12,
        200,
        Duration::from_secs(30),
    );
    members[2].leave();
    let expected: Vec<(String, i32, i64)> = all.iter().map(|(t, p)| (t.clone(), *p, 200)).collect();
    assert_eq!(committed_offsets(&mut client, "g"), expected);

    // The commits survive a restart; a new member resumes from them.
    broker.stop();
    broker.restart();
    let mut client = Client::connect(&broker.address());
    assert_eq!(committed_offsets(&mut client, "g"), expected);
    produce(&broker, "events", 12, 1);
    let resumed = Member::spawn(&broker, "g", "events");
    let deadline = Instant::now() + Duration::from_secs(30);
    while resumed.records.lock().unwrap().len() < 12 {
        assert!(Instant::now() < deadline, "the new member read nothing");
        std::thread::sleep(Duration::from_millis(100));
    }
    std::thread::sleep(Duration::from_millis(500));
    let mut read: Vec<(i32, i64)> = resumed
        .records
        .lock()
        .unwrap()
        .iter()
        .map(|(_, p, o)| (*p, *o))
        .collect();
    read.sort();
    assert_eq!(
        read,
        (0..12).map(|p| (p, 200)).collect::<Vec<_>>(),
        "resumed at the commits"
    );
}

#[test]
fn regex_subscriptions_and_added_partitions_trigger_rebalances() {
    let broker = Broker::start(&["group.initial.rebalance.delay.ms=0"]);
    let mut client = Client::connect(&broker.address());
    client.create_topic("rx-a", 2);
    let _member = Member::spawn(&broker, "rx", "^rx-.*");
    let tp = |t: &str, p: i32| (t.to_string(), p);
    let expected: BTreeSet<_> = [tp("rx-a", 0), tp("rx-a", 1)].into();
    wait_for_assignment(&mut client, "rx", 1, &expected, Duration::from_secs(30));

    // A new topic matching the pattern joins the assignment.
    client.create_topic("rx-b", 1);
    client.create_topic("other", 1);
    let expected: BTreeSet<_> = [tp("rx-a", 0), tp("rx-a", 1), tp("rx-b", 0)].into();
    wait_for_assignment(&mut client, "rx", 1, &expected, Duration::from_secs(30));

    // So do added partitions.
    let request = CreatePartitionsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatePartitionsTopic::default()
            .with_name(TopicName(s("rx-a")))
            .with_count(4)
            .with_assignments(None)]);
    let response: CreatePartitionsResponse =
        client.call(ApiKey::CreatePartitions, 3, &request).unwrap();
    assert_eq!(response.results[0].error_code, 0);
    let expected: BTreeSet<_> = [
        tp("rx-a", 0),
        tp("rx-a", 1),
        tp("rx-a", 2),
        tp("rx-a", 3),
        tp("rx-b", 0),
    ]
    .into();
    wait_for_assignment(&mut client, "rx", 1, &expected, Duration::from_secs(30));
}
