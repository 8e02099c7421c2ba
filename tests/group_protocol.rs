//! The classic group protocol byte by byte, with a raw client: KIP-394's
//! member id round trip, generations, static membership, the errors Kafka
//! gives bad requests, and a heartbeat storm that leaves other groups alone.

mod common;

use std::time::{Duration, Instant};

use bytes::Bytes;
use common::{Broker, Client};
use kafka_protocol::messages::join_group_request::JoinGroupRequestProtocol;
use kafka_protocol::messages::leave_group_request::MemberIdentity;
use kafka_protocol::messages::offset_commit_request::{
    OffsetCommitRequestPartition, OffsetCommitRequestTopic,
};
use kafka_protocol::messages::sync_group_request::SyncGroupRequestAssignment;
use kafka_protocol::messages::*;
use kafka_protocol::protocol::StrBytes;

const NONE: i16 = 0;
const UNKNOWN_SERVER_ERROR: i16 = -1;
const ILLEGAL_GENERATION: i16 = 22;
const INCONSISTENT_GROUP_PROTOCOL: i16 = 23;
const INVALID_GROUP_ID: i16 = 24;
const UNKNOWN_MEMBER_ID: i16 = 25;
const INVALID_SESSION_TIMEOUT: i16 = 26;
const REBALANCE_IN_PROGRESS: i16 = 27;
const NON_EMPTY_GROUP: i16 = 68;
const GROUP_ID_NOT_FOUND: i16 = 69;
const MEMBER_ID_REQUIRED: i16 = 79;
const FENCED_INSTANCE_ID: i16 = 82;
const UNKNOWN_TOPIC_OR_PARTITION: i16 = 3;

fn s(value: &str) -> StrBytes {
    StrBytes::from_string(value.to_owned())
}

fn start() -> (Broker, Client) {
    start_with(&[])
}

fn start_with(extra: &[&str]) -> (Broker, Client) {
    let config: Vec<&str> = ["group.initial.rebalance.delay.ms=0"]
        .into_iter()
        .chain(extra.iter().copied())
        .collect();
    let broker = Broker::start(&config);
    let mut client = Client::connect(&broker.address());
    // The first FindCoordinator creates __consumer_offsets.
    let found: FindCoordinatorResponse = client
        .call(
            ApiKey::FindCoordinator,
            3,
            &FindCoordinatorRequest::default().with_key(s("any")),
        )
        .unwrap();
    assert_eq!(found.error_code, NONE, "{found:?}");
    assert_eq!(found.port as u16, broker.port);
    (broker, client)
}

fn join_request(
    group: &str,
    member_id: &str,
    protocol_type: &str,
    metadata: Bytes,
) -> JoinGroupRequest {
    JoinGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_session_timeout_ms(10_000)
        .with_rebalance_timeout_ms(10_000)
        .with_member_id(s(member_id))
        .with_protocol_type(s(protocol_type))
        .with_protocols(vec![JoinGroupRequestProtocol::default()
            .with_name(s("range"))
            .with_metadata(metadata)])
}

fn join(client: &mut Client, request: &JoinGroupRequest) -> JoinGroupResponse {
    client.call(ApiKey::JoinGroup, 9, request).unwrap()
}

/// KIP-394: a new member gets its id with MEMBER_ID_REQUIRED, then joins.
fn join_new_member(client: &mut Client, group: &str) -> JoinGroupResponse {
    let first = join(
        client,
        &join_request(group, "", "consumer", Bytes::from_static(b"m")),
    );
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    assert!(!first.member_id.is_empty());
    let joined = join(
        client,
        &join_request(
            group,
            &first.member_id,
            "consumer",
            Bytes::from_static(b"m"),
        ),
    );
    assert_eq!(joined.error_code, NONE, "{joined:?}");
    assert_eq!(joined.member_id, first.member_id);
    joined
}

fn sync(
    client: &mut Client,
    group: &str,
    member_id: &str,
    generation: i32,
    assignment: &[u8],
) -> SyncGroupResponse {
    let request = SyncGroupRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id(generation)
        .with_member_id(s(member_id))
        .with_protocol_type(Some(s("consumer")))
        .with_protocol_name(Some(s("range")))
        .with_assignments(vec![SyncGroupRequestAssignment::default()
            .with_member_id(s(member_id))
            .with_assignment(Bytes::copy_from_slice(assignment))]);
    client.call(ApiKey::SyncGroup, 5, &request).unwrap()
}

fn heartbeat(
    client: &mut Client,
    group: &str,
    member_id: &str,
    generation: i32,
    instance: Option<&str>,
) -> i16 {
    let request = HeartbeatRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_member_id(s(member_id))
        .with_generation_id(generation)
        .with_group_instance_id(instance.map(s));
    let response: HeartbeatResponse = client.call(ApiKey::Heartbeat, 4, &request).unwrap();
    response.error_code
}

fn commit(
    client: &mut Client,
    group: &str,
    member_id: &str,
    generation: i32,
    topic: &str,
    offset: i64,
) -> i16 {
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s(group)))
        .with_generation_id_or_member_epoch(generation)
        .with_member_id(s(member_id))
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s(topic)))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(offset)])]);
    let response: OffsetCommitResponse = client.call(ApiKey::OffsetCommit, 8, &request).unwrap();
    response.topics[0].partitions[0].error_code
}

fn committed(client: &mut Client, group: &str) -> Vec<(String, i32, i64)> {
    common::committed_offsets(client, group)
}

fn describe(client: &mut Client, group: &str) -> describe_groups_response::DescribedGroup {
    let request = DescribeGroupsRequest::default().with_groups(vec![GroupId(s(group))]);
    let response: DescribeGroupsResponse =
        client.call(ApiKey::DescribeGroups, 5, &request).unwrap();
    response.groups[0].clone()
}

#[test]
fn a_generation_from_join_to_commit_and_the_errors_around_it() {
    let (mut broker, mut client) = start();
    client.create_topic("t", 1);

    // Bad joins.
    let mut bad = join_request("", "", "consumer", Bytes::new());
    assert_eq!(join(&mut client, &bad).error_code, INVALID_GROUP_ID);
    bad = join_request("g", "", "consumer", Bytes::new()).with_session_timeout_ms(10);
    assert_eq!(join(&mut client, &bad).error_code, INVALID_SESSION_TIMEOUT);
    bad = join_request("g", "no-such-member", "consumer", Bytes::new());
    assert_eq!(join(&mut client, &bad).error_code, UNKNOWN_MEMBER_ID);

    let joined = join_new_member(&mut client, "g");
    let (member, generation) = (joined.member_id.to_string(), joined.generation_id);
    assert_eq!(generation, 1);
    assert_eq!(joined.leader, joined.member_id, "the first member leads");
    assert_eq!(
        joined.members.len(),
        1,
        "the leader gets everyone's metadata"
    );
    assert_eq!(joined.members[0].metadata.as_ref(), b"m");

    // A member of another protocol type cannot join.
    let other = join(&mut client, &join_request("g", "", "connect", Bytes::new()));
    assert_eq!(other.error_code, INCONSISTENT_GROUP_PROTOCOL);

    assert_eq!(
        sync(&mut client, "g", "stranger", generation, b"").error_code,
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        sync(&mut client, "g", &member, generation + 1, b"").error_code,
        ILLEGAL_GENERATION
    );
    let synced = sync(&mut client, "g", &member, generation, b"assignment");
    assert_eq!(synced.error_code, NONE);
    assert_eq!(synced.assignment.as_ref(), b"assignment");
    assert_eq!(describe(&mut client, "g").group_state.as_str(), "Stable");

    assert_eq!(heartbeat(&mut client, "g", &member, generation, None), NONE);
    assert_eq!(
        heartbeat(&mut client, "g", &member, generation - 1, None),
        ILLEGAL_GENERATION
    );
    assert_eq!(
        heartbeat(&mut client, "g", "stranger", generation, None),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        heartbeat(&mut client, "nobody", "stranger", 1, None),
        UNKNOWN_MEMBER_ID
    );

    // Commits are fenced by generation.
    assert_eq!(
        commit(&mut client, "g", &member, generation - 1, "t", 5),
        ILLEGAL_GENERATION
    );
    assert_eq!(
        commit(&mut client, "g", "stranger", generation, "t", 5),
        UNKNOWN_MEMBER_ID
    );
    assert_eq!(
        commit(&mut client, "g", &member, generation, "no-such-topic", 5),
        UNKNOWN_TOPIC_OR_PARTITION
    );
    assert_eq!(commit(&mut client, "g", &member, generation, "t", 7), NONE);
    assert_eq!(committed(&mut client, "g"), vec![("t".to_string(), 0, 7)]);

    // A second member starts a rebalance: the first learns it on its heartbeat.
    let mut second_client = Client::connect(&broker.address());
    let waiting = std::thread::spawn(move || {
        let joined = join_new_member(&mut second_client, "g");
        (second_client, joined)
    });
    let deadline = Instant::now() + Duration::from_secs(10);
    loop {
        match heartbeat(&mut client, "g", &member, generation, None) {
            REBALANCE_IN_PROGRESS => break,
            NONE => assert!(Instant::now() < deadline, "no rebalance started"),
            other => panic!("heartbeat error {other}"),
        }
        std::thread::sleep(Duration::from_millis(50));
    }
    let rejoined = join(
        &mut client,
        &join_request("g", &member, "consumer", Bytes::from_static(b"m")),
    );
    assert_eq!(rejoined.error_code, NONE);
    assert_eq!(rejoined.generation_id, generation + 1);
    assert_eq!(rejoined.members.len(), 2);
    let (mut second_client, second) = waiting.join().unwrap();
    assert_eq!(second.generation_id, generation + 1);
    assert!(
        second.members.is_empty(),
        "only the leader gets the members"
    );
    // Until the leader hands out the assignment, commits wait for it.
    assert_eq!(
        commit(&mut client, "g", &member, generation + 1, "t", 9),
        REBALANCE_IN_PROGRESS
    );
    let synced = sync(&mut client, "g", &member, generation + 1, b"a");
    assert_eq!(synced.error_code, NONE);
    // A commit from the old generation is refused.
    assert_eq!(
        commit(&mut client, "g", &member, generation, "t", 9),
        ILLEGAL_GENERATION
    );
    // Non-empty groups cannot be deleted.
    let deleted: DeleteGroupsResponse = client
        .call(
            ApiKey::DeleteGroups,
            2,
            &DeleteGroupsRequest::default().with_groups_names(vec![GroupId(s("g"))]),
        )
        .unwrap();
    assert_eq!(deleted.results[0].error_code, NON_EMPTY_GROUP);

    // Both leave in one request (v3+); the group empties, keeping its offsets.
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("g")))
        .with_members(vec![
            MemberIdentity::default().with_member_id(s(&member)),
            MemberIdentity::default().with_member_id(second.member_id.clone()),
            MemberIdentity::default().with_member_id(s("stranger")),
        ]);
    let left: LeaveGroupResponse = second_client.call(ApiKey::LeaveGroup, 5, &leave).unwrap();
    let codes: Vec<i16> = left.members.iter().map(|m| m.error_code).collect();
    assert_eq!(codes, vec![NONE, NONE, UNKNOWN_MEMBER_ID]);
    let deadline = Instant::now() + Duration::from_secs(5);
    while describe(&mut client, "g").group_state.as_str() != "Empty" {
        assert!(Instant::now() < deadline, "the group did not empty");
        std::thread::sleep(Duration::from_millis(50));
    }

    // The offsets and the group survive a restart.
    broker.stop();
    broker.restart();
    let mut client = Client::connect(&broker.address());
    let offsets = committed(&mut client, "g");
    assert_eq!(offsets, vec![("t".to_string(), 0, 7)]);
    assert_eq!(describe(&mut client, "g").group_state.as_str(), "Empty");

    // An empty group can go; then it is gone.
    let delete = DeleteGroupsRequest::default()
        .with_groups_names(vec![GroupId(s("g")), GroupId(s("never-existed"))]);
    let deleted: DeleteGroupsResponse = client.call(ApiKey::DeleteGroups, 2, &delete).unwrap();
    let codes: Vec<i16> = deleted.results.iter().map(|r| r.error_code).collect();
    assert_eq!(codes, vec![NONE, GROUP_ID_NOT_FOUND]);
    assert!(committed(&mut client, "g").is_empty());
    assert_eq!(describe(&mut client, "g").group_state.as_str(), "Dead");
}

#[test]
fn static_members_rejoin_without_a_rebalance_and_fence_their_old_id() {
    let (_broker, mut client) = start();
    let static_join = |client: &mut Client| {
        let request = join_request("s", "", "consumer", Bytes::from_static(b"m"))
            .with_group_instance_id(Some(s("instance-1")));
        join(client, &request)
    };
    // No MEMBER_ID_REQUIRED round trip for a static member.
    let first = static_join(&mut client);
    assert_eq!(first.error_code, NONE);
    let old_id = first.member_id.to_string();
    assert_eq!(
        sync(&mut client, "s", &old_id, first.generation_id, b"mine").error_code,
        NONE
    );

    // The instance restarts: same generation, same assignment, new id.
    let second = static_join(&mut client);
    assert_eq!(second.error_code, NONE);
    assert_ne!(second.member_id.as_str(), old_id);
    assert_eq!(second.generation_id, first.generation_id, "no rebalance");
    let new_id = second.member_id.to_string();
    let synced = sync(&mut client, "s", &new_id, second.generation_id, b"");
    assert_eq!(synced.assignment.as_ref(), b"mine");

    // The old incarnation is fenced, whatever it sends.
    let old_join = join_request("s", &old_id, "consumer", Bytes::from_static(b"m"))
        .with_group_instance_id(Some(s("instance-1")));
    assert_eq!(join(&mut client, &old_join).error_code, FENCED_INSTANCE_ID);
    let old_sync = SyncGroupRequest::default()
        .with_group_id(GroupId(s("s")))
        .with_generation_id(first.generation_id)
        .with_member_id(s(&old_id))
        .with_group_instance_id(Some(s("instance-1")));
    let synced: SyncGroupResponse = client.call(ApiKey::SyncGroup, 5, &old_sync).unwrap();
    assert_eq!(synced.error_code, FENCED_INSTANCE_ID);
    assert_eq!(
        heartbeat(
            &mut client,
            "s",
            &old_id,
            first.generation_id,
            Some("instance-1")
        ),
        FENCED_INSTANCE_ID
    );
    assert_eq!(
        heartbeat(
            &mut client,
            "s",
            &new_id,
            first.generation_id,
            Some("instance-1")
        ),
        NONE
    );
    // An admin removes the instance by its instance id alone.
    let leave = LeaveGroupRequest::default()
        .with_group_id(GroupId(s("s")))
        .with_members(vec![MemberIdentity::default()
            .with_member_id(s(""))
            .with_group_instance_id(Some(s("instance-1")))]);
    let left: LeaveGroupResponse = client.call(ApiKey::LeaveGroup, 5, &leave).unwrap();
    assert_eq!(left.members[0].error_code, NONE);
}

#[test]
fn oversized_metadata_and_a_heartbeat_storm_leave_other_groups_alone() {
    let (broker, mut client) = start();
    client.create_topic("t", 1);
    // A well-behaved group, checked throughout.
    let good = join_new_member(&mut client, "good");
    let good_id = good.member_id.to_string();
    assert_eq!(
        sync(&mut client, "good", &good_id, good.generation_id, b"a").error_code,
        NONE
    );

    // 2 MiB of member metadata: joins, but its generation cannot be stored
    // in __consumer_offsets (max.message.bytes): Kafka's UNKNOWN_SERVER_ERROR.
    let mut big_client = Client::connect(&broker.address());
    let huge = Bytes::from(vec![7u8; 2 << 20]);
    let first = join(
        &mut big_client,
        &join_request("big", "", "consumer", huge.clone()),
    );
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let joined = join(
        &mut big_client,
        &join_request("big", &first.member_id, "consumer", huge),
    );
    assert_eq!(joined.error_code, NONE);
    assert_eq!(joined.members[0].metadata.len(), 2 << 20);
    let synced = sync(
        &mut big_client,
        "big",
        &joined.member_id,
        joined.generation_id,
        b"",
    );
    assert_eq!(synced.error_code, UNKNOWN_SERVER_ERROR);

    // A storm of heartbeats with stale and unknown ids from several connections.
    let storms: Vec<_> = (0..4)
        .map(|i| {
            let address = broker.address();
            std::thread::spawn(move || {
                let mut client = Client::connect(&address);
                let mut answered = 0;
                for n in 0..2_000 {
                    let code = heartbeat(&mut client, "good", &format!("ghost-{i}-{n}"), n, None);
                    assert_eq!(code, UNKNOWN_MEMBER_ID);
                    answered += 1;
                }
                answered
            })
        })
        .collect();
    for _ in 0..20 {
        assert_eq!(
            heartbeat(&mut client, "good", &good_id, good.generation_id, None),
            NONE
        );
        assert_eq!(
            commit(&mut client, "good", &good_id, good.generation_id, "t", 3),
            NONE
        );
    }
    for storm in storms {
        assert_eq!(storm.join().unwrap(), 2_000);
    }
    assert_eq!(describe(&mut client, "good").group_state.as_str(), "Stable");
    assert_eq!(
        committed(&mut client, "good"),
        vec![("t".to_string(), 0, 3)]
    );
    // Garbage where a protocol name should be does not hurt anyone either.
    let garbage = JoinGroupRequest::default()
        .with_group_id(GroupId(s("good")))
        .with_session_timeout_ms(10_000)
        .with_member_id(s(""))
        .with_protocol_type(s("consumer"));
    assert_eq!(
        join(&mut client, &garbage).error_code,
        INCONSISTENT_GROUP_PROTOCOL
    );
    assert_eq!(
        heartbeat(&mut client, "good", &good_id, good.generation_id, None),
        NONE
    );
}

#[test]
fn list_groups_filters_by_state_and_offset_delete_spares_subscribed_topics() {
    let (_broker, mut client) = start();
    client.create_topic("t", 1);
    client.create_topic("u", 1);
    // A standalone committer (generation -1): an Empty group without members.
    assert_eq!(commit(&mut client, "standalone", "", -1, "t", 1), NONE);
    assert_eq!(commit(&mut client, "standalone", "", -1, "u", 2), NONE);
    let joined = join_new_member(&mut client, "active");
    assert_eq!(
        sync(
            &mut client,
            "active",
            &joined.member_id,
            joined.generation_id,
            b""
        )
        .error_code,
        NONE
    );

    let list = |client: &mut Client, states: &[&str]| -> Vec<(String, String)> {
        let request = ListGroupsRequest::default()
            .with_states_filter(states.iter().map(|st| s(st)).collect());
        let response: ListGroupsResponse = client.call(ApiKey::ListGroups, 5, &request).unwrap();
        assert_eq!(response.error_code, NONE);
        let mut groups: Vec<(String, String)> = response
            .groups
            .iter()
            .map(|g| (g.group_id.to_string(), g.group_state.to_string()))
            .collect();
        groups.sort();
        groups
    };
    assert_eq!(
        list(&mut client, &[]),
        vec![
            ("active".into(), "Stable".into()),
            ("standalone".into(), "Empty".into())
        ]
    );
    assert_eq!(
        list(&mut client, &["empty"]),
        vec![("standalone".into(), "Empty".into())]
    );

    let delete = |client: &mut Client, group: &str, topic: &str| -> (i16, i16) {
        let request = OffsetDeleteRequest::default()
            .with_group_id(GroupId(s(group)))
            .with_topics(vec![
                offset_delete_request::OffsetDeleteRequestTopic::default()
                    .with_name(TopicName(s(topic)))
                    .with_partitions(vec![
                        offset_delete_request::OffsetDeleteRequestPartition::default()
                            .with_partition_index(0),
                    ]),
            ]);
        let response: OffsetDeleteResponse =
            client.call(ApiKey::OffsetDelete, 0, &request).unwrap();
        let partition = response
            .topics
            .first()
            .map_or(-100, |t| t.partitions[0].error_code);
        (response.error_code, partition)
    };
    assert_eq!(delete(&mut client, "standalone", "t"), (NONE, NONE));
    assert_eq!(
        committed(&mut client, "standalone"),
        vec![("u".to_string(), 0, 2)]
    );
    assert_eq!(delete(&mut client, "nobody", "t").0, GROUP_ID_NOT_FOUND);
}

/// Bytes of every `__consumer_offsets` segment file under the data dir.
fn offsets_topic_bytes(broker: &Broker) -> u64 {
    std::fs::read_dir(&broker.data_dir)
        .unwrap()
        .flatten()
        .filter(|d| {
            d.file_name()
                .to_string_lossy()
                .starts_with("__consumer_offsets-")
        })
        .flat_map(|d| std::fs::read_dir(d.path()).unwrap().flatten())
        .filter(|f| f.path().extension().is_some_and(|e| e == "log"))
        // The cleaner may swap a segment out between the listing and the stat.
        .filter_map(|f| f.metadata().ok())
        .map(|metadata| metadata.len())
        .sum()
}

#[test]
fn compaction_keeps_the_offsets_topic_bounded() {
    let (mut broker, mut client) = start_with(&[
        "offsets.topic.segment.bytes=4096",
        "log.cleaner.backoff.ms=100",
    ]);
    client.create_topic("t", 1);
    const COMMITS: i64 = 3_000;
    for offset in 0..COMMITS {
        assert_eq!(commit(&mut client, "compact-me", "", -1, "t", offset), NONE);
    }
    // Uncompacted, each commit is at least a 61-byte batch header: 180 KiB.
    let uncompacted_min = COMMITS as u64 * 61;
    let deadline = Instant::now() + Duration::from_secs(30);
    loop {
        let size = offsets_topic_bytes(&broker);
        if size < 16 * 1024 {
            eprintln!(
                "__consumer_offsets holds {size} bytes (uncompacted: at least {uncompacted_min})"
            );
            break;
        }
        assert!(Instant::now() < deadline, "still {size} bytes");
        std::thread::sleep(Duration::from_millis(100));
    }
    // What is left is the last commit, also after a restart.
    broker.stop();
    broker.restart();
    let mut client = Client::connect(&broker.address());
    assert_eq!(
        committed(&mut client, "compact-me"),
        vec![("t".to_string(), 0, COMMITS - 1)]
    );
}

#[test]
fn expired_offsets_and_then_their_empty_group_go_for_good() {
    let (mut broker, mut client) = start_with(&["offsets.retention.check.interval.ms=200"]);
    client.create_topic("t", 1);
    // OffsetCommit v2-4 carry a retention of their own: one second here.
    let request = OffsetCommitRequest::default()
        .with_group_id(GroupId(s("expiring")))
        .with_generation_id_or_member_epoch(-1)
        .with_retention_time_ms(1_000)
        .with_topics(vec![OffsetCommitRequestTopic::default()
            .with_name(TopicName(s("t")))
            .with_partitions(vec![OffsetCommitRequestPartition::default()
                .with_partition_index(0)
                .with_committed_offset(11)])]);
    let response: OffsetCommitResponse = client.call(ApiKey::OffsetCommit, 2, &request).unwrap();
    assert_eq!(response.topics[0].partitions[0].error_code, NONE);
    assert_eq!(commit(&mut client, "kept", "", -1, "t", 12), NONE);
    assert_eq!(
        committed(&mut client, "expiring"),
        vec![("t".to_string(), 0, 11)]
    );

    let listed = |client: &mut Client| -> Vec<String> {
        let response: ListGroupsResponse = client
            .call(ApiKey::ListGroups, 5, &ListGroupsRequest::default())
            .unwrap();
        let mut groups: Vec<String> = response
            .groups
            .iter()
            .map(|g| g.group_id.to_string())
            .collect();
        groups.sort();
        groups
    };
    let deadline = Instant::now() + Duration::from_secs(10);
    while !committed(&mut client, "expiring").is_empty() || listed(&mut client) != ["kept"] {
        assert!(
            Instant::now() < deadline,
            "never expired: {:?}",
            listed(&mut client)
        );
        std::thread::sleep(Duration::from_millis(100));
    }
    // The tombstones are in the log: gone after a restart too.
    broker.stop();
    broker.restart();
    let mut client = Client::connect(&broker.address());
    let deadline = Instant::now() + Duration::from_secs(10);
    while listed(&mut client).is_empty() {
        assert!(Instant::now() < deadline, "groups never loaded");
        std::thread::sleep(Duration::from_millis(50));
    }
    assert_eq!(listed(&mut client), ["kept"]);
    assert_eq!(
        committed(&mut client, "kept"),
        vec![("t".to_string(), 0, 12)]
    );
}

#[test]
fn the_initial_rebalance_delay_is_waited_once() {
    let (_broker, mut client) = start_with(&["group.initial.rebalance.delay.ms=1000"]);
    let first = join(
        &mut client,
        &join_request("d", "", "consumer", Bytes::new()),
    );
    assert_eq!(first.error_code, MEMBER_ID_REQUIRED);
    let started = Instant::now();
    let joined = join(
        &mut client,
        &join_request("d", &first.member_id, "consumer", Bytes::new()),
    );
    let waited = started.elapsed();
    assert_eq!(joined.error_code, NONE);
    // The broker counts whole milliseconds: its deadline can fall up to 1 ms
    // before 1000 ms of this clock have passed.
    assert!(
        waited >= Duration::from_millis(999) && waited < Duration::from_millis(1800),
        "joined after {waited:?}"
    );
}

#[test]
fn offsets_of_a_deleted_topic_go_and_the_offsets_topic_takes_no_produce() {
    let (_broker, mut client) = start();
    client.create_topic("doomed", 1);
    client.create_topic("t", 1);
    assert_eq!(commit(&mut client, "g", "", -1, "doomed", 5), NONE);
    assert_eq!(commit(&mut client, "g", "", -1, "t", 6), NONE);
    let request = DeleteTopicsRequest::default()
        .with_topic_names(vec![TopicName(s("doomed"))])
        .with_timeout_ms(5_000);
    let deleted: DeleteTopicsResponse = client.call(ApiKey::DeleteTopics, 5, &request).unwrap();
    assert_eq!(deleted.responses[0].error_code, NONE);
    client.create_topic("doomed", 1);
    assert_eq!(committed(&mut client, "g"), vec![("t".to_string(), 0, 6)]);

    // Only the coordinator writes __consumer_offsets.
    let mut builder = shards::log::record_batch::RecordBatchBuilder::new(0, 0);
    builder.append(0, Some(b"forged"), Some(b"group"));
    let produced = client
        .produce("__consumer_offsets", 0, builder.build())
        .unwrap();
    assert_eq!(produced.error_code, 17, "INVALID_TOPIC_EXCEPTION");
}
