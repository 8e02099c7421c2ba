//! Topic configs byte by byte: every key Kafka defines is accepted and
//! persisted, values are checked with Kafka's types and validators, unknown
//! keys are refused, and IncrementalAlterConfigs' APPEND and SUBTRACT edit
//! LIST configs.

mod common;

use common::{Broker, Client};
use kafka_protocol::messages::create_topics_request::{CreatableTopic, CreatableTopicConfig};
use kafka_protocol::messages::describe_configs_request::DescribeConfigsResource;
use kafka_protocol::messages::incremental_alter_configs_request::{
    AlterConfigsResource, AlterableConfig,
};
use kafka_protocol::messages::{
    ApiKey, CreateTopicsRequest, CreateTopicsResponse, DescribeConfigsRequest,
    DescribeConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
    TopicName,
};
use kafka_protocol::protocol::StrBytes;

const TOPIC: i8 = 2;
const INVALID_CONFIG: i16 = 40;

fn create(client: &mut Client, topic: &str, configs: &[(&str, &str)]) -> (i16, String) {
    let request = CreateTopicsRequest::default()
        .with_timeout_ms(5_000)
        .with_topics(vec![CreatableTopic::default()
            .with_name(TopicName(StrBytes::from_string(topic.to_owned())))
            .with_num_partitions(1)
            .with_replication_factor(1)
            .with_configs(
                configs
                    .iter()
                    .map(|(name, value)| {
                        CreatableTopicConfig::default()
                            .with_name(StrBytes::from_string((*name).to_owned()))
                            .with_value(Some(StrBytes::from_string((*value).to_owned())))
                    })
                    .collect(),
            )]);
    let response: CreateTopicsResponse = client.call(ApiKey::CreateTopics, 7, &request).unwrap();
    let result = &response.topics[0];
    (
        result.error_code,
        result
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

/// One IncrementalAlterConfigs operation (0 SET, 1 DELETE, 2 APPEND, 3 SUBTRACT).
fn alter(client: &mut Client, topic: &str, name: &str, op: i8, value: &str) -> (i16, String) {
    let request = IncrementalAlterConfigsRequest::default().with_resources(vec![
        AlterConfigsResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(StrBytes::from_string(topic.to_owned()))
            .with_configs(vec![AlterableConfig::default()
                .with_name(StrBytes::from_string(name.to_owned()))
                .with_config_operation(op)
                .with_value(Some(StrBytes::from_string(value.to_owned())))]),
    ]);
    let response: IncrementalAlterConfigsResponse = client
        .call(ApiKey::IncrementalAlterConfigs, 1, &request)
        .unwrap();
    let result = &response.responses[0];
    (
        result.error_code,
        result
            .error_message
            .as_ref()
            .map(|m| m.to_string())
            .unwrap_or_default(),
    )
}

/// The value and source DescribeConfigs v4 gives for one key of a topic.
fn described(client: &mut Client, topic: &str, name: &str) -> (Option<String>, i8) {
    let request =
        DescribeConfigsRequest::default().with_resources(vec![DescribeConfigsResource::default()
            .with_resource_type(TOPIC)
            .with_resource_name(StrBytes::from_string(topic.to_owned()))
            .with_configuration_keys(Some(vec![StrBytes::from_string(name.to_owned())]))]);
    let response: DescribeConfigsResponse =
        client.call(ApiKey::DescribeConfigs, 4, &request).unwrap();
    let entry = &response.results[0].configs[0];
    (
        entry.value.as_ref().map(|v| v.to_string()),
        entry.config_source,
    )
}

#[test]
fn every_kafka_topic_config_is_accepted_checked_and_kept() {
    let mut broker = Broker::start(&[]);
    let mut client = Client::connect(&broker.address());
    // Keys the broker acts on and keys it only keeps, 4.x's and 3.9's.
    let configs = [
        ("compression.type", "lz4"),
        ("compression.lz4.level", "12"),
        ("min.insync.replicas", "2"),
        ("unclean.leader.election.enable", "true"),
        ("preallocate", "true"),
        ("message.downconversion.enable", "false"),
        ("remote.copy.lag.ms", "5"),
        ("leader.replication.throttled.replicas", "0:1,1:2"),
    ];
    assert_eq!(create(&mut client, "kept", &configs), (0, String::new()));
    for (name, value) in configs {
        assert_eq!(
            described(&mut client, "kept", name),
            (Some(value.to_owned()), 1),
            "{name}"
        );
    }

    // The topic's min.insync.replicas (2) is more than its one replica: as
    // Kafka 3.7+ (its effective minimum is the replication factor), acks=all
    // is served by the ISR of one.
    let mut builder = shards::log::record_batch::RecordBatchBuilder::new(0, 0);
    builder.append(shards::log::wall_clock_ms(), None, Some(b"v"));
    assert_eq!(
        client
            .produce("kept", 0, builder.build())
            .unwrap()
            .error_code,
        0
    );

    let (code, message) = create(&mut client, "bad", &[("segment.jitter.ms", "-1")]);
    assert_eq!(code, INVALID_CONFIG);
    assert_eq!(
        message,
        "Invalid value -1 for configuration segment.jitter.ms: Value must be at least 0"
    );
    let (code, message) = create(&mut client, "bad", &[("compression.type", "brotli")]);
    assert_eq!(code, INVALID_CONFIG, "{message}");
    let (code, message) = create(&mut client, "bad", &[("retention.hours", "1")]);
    assert_eq!(
        (code, message.as_str()),
        (INVALID_CONFIG, "Unknown topic config name: retention.hours")
    );

    // APPEND adds what is missing, SUBTRACT removes, on LIST configs only.
    assert_eq!(
        alter(&mut client, "kept", "cleanup.policy", 2, "compact").0,
        0
    );
    assert_eq!(
        described(&mut client, "kept", "cleanup.policy")
            .0
            .as_deref(),
        Some("compact,delete")
    );
    assert_eq!(
        alter(&mut client, "kept", "cleanup.policy", 2, "compact").0,
        0
    );
    assert_eq!(
        alter(&mut client, "kept", "cleanup.policy", 3, "delete").0,
        0
    );
    assert_eq!(
        described(&mut client, "kept", "cleanup.policy")
            .0
            .as_deref(),
        Some("compact")
    );
    assert_eq!(
        alter(
            &mut client,
            "kept",
            "leader.replication.throttled.replicas",
            3,
            "0:1"
        )
        .0,
        0
    );
    let (code, message) = alter(&mut client, "kept", "retention.ms", 2, "5");
    assert_eq!(
        (code, message.as_str()),
        (
            INVALID_CONFIG,
            "Config value append is not allowed for config key: retention.ms"
        )
    );

    // Kept across a restart.
    broker.stop();
    broker.restart();
    let mut client = Client::connect(&broker.address());
    assert_eq!(
        described(&mut client, "kept", "preallocate"),
        (Some("true".to_owned()), 1)
    );
    assert_eq!(
        described(&mut client, "kept", "leader.replication.throttled.replicas")
            .0
            .as_deref(),
        Some("1:2")
    );
    assert_eq!(
        described(&mut client, "kept", "cleanup.policy")
            .0
            .as_deref(),
        Some("compact")
    );
}
