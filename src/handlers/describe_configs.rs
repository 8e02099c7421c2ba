//! DescribeConfigs (key 32): a topic's effective configs, marking which are
//! the topic's own overrides.

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;
use shards::log::TOPIC_CONFIG_NAMES;

use super::{RequestContext, RESOURCE_TYPE_BROKER, RESOURCE_TYPE_TOPIC};
use crate::protocol::error_code;

/// Kafka's ConfigSource values.
const DYNAMIC_TOPIC_CONFIG: i8 = 1;
const DEFAULT_CONFIG: i8 = 5;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeConfigsRequest,
    _version: i16,
) -> DescribeConfigsResponse {
    let image = ctx.broker.image();
    let results = request
        .resources
        .into_iter()
        .map(|resource| {
            let result = DescribeConfigsResult::default()
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name.clone());
            let wanted = |name: &str| {
                resource
                    .configuration_keys
                    .as_ref()
                    .is_none_or(|keys| keys.iter().any(|k| k.as_str() == name))
            };
            match resource.resource_type {
                RESOURCE_TYPE_TOPIC => match image.topic(resource.resource_name.as_str()) {
                    Some(topic) => {
                        let configs = TOPIC_CONFIG_NAMES
                            .iter()
                            .filter(|name| wanted(name))
                            .map(|name| {
                                let source = if topic.config_overrides.contains_key(*name) {
                                    DYNAMIC_TOPIC_CONFIG
                                } else {
                                    DEFAULT_CONFIG
                                };
                                DescribeConfigsResourceResult::default()
                                    .with_name(StrBytes::from_static_str(name))
                                    .with_value(
                                        topic.log_config.value_of(name).map(StrBytes::from_string),
                                    )
                                    .with_config_source(source)
                            })
                            .collect();
                        result
                            .with_error_code(error_code::NONE)
                            .with_configs(configs)
                    }
                    None => result
                        .with_error_code(error_code::UNKNOWN_TOPIC_OR_PARTITION)
                        .with_error_message(Some(StrBytes::from_string(format!(
                            "topic '{}' does not exist",
                            resource.resource_name.as_str()
                        )))),
                },
                // Broker configs are static (server.properties); none are dynamic.
                RESOURCE_TYPE_BROKER => result.with_error_code(error_code::NONE),
                other => result
                    .with_error_code(error_code::INVALID_REQUEST)
                    .with_error_message(Some(StrBytes::from_string(format!(
                        "unsupported resource type {other}"
                    )))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
