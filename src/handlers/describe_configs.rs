//! DescribeConfigs (key 32): every key Kafka defines for a topic or for this
//! broker, with its value, source, synonyms, type and documentation as Kafka's
//! ConfigHelper answers (src/config/describe.rs).

use kafka_protocol::messages::describe_configs_response::{
    DescribeConfigsResourceResult, DescribeConfigsResult, DescribeConfigsSynonym,
};
use kafka_protocol::messages::{DescribeConfigsRequest, DescribeConfigsResponse};
use kafka_protocol::protocol::StrBytes;

use super::{RequestContext, RESOURCE_TYPE_BROKER, RESOURCE_TYPE_TOPIC};
use crate::config::describe::{broker_entries, dynamic_broker_entries, topic_entries, ConfigEntry};
use crate::protocol::{ApiError, ResponseError};

fn encode(
    entry: ConfigEntry,
    synonyms: bool,
    documentation: bool,
) -> DescribeConfigsResourceResult {
    let synonyms = if synonyms {
        entry
            .synonyms
            .into_iter()
            .map(|s| {
                DescribeConfigsSynonym::default()
                    .with_name(StrBytes::from_string(s.name))
                    .with_value(s.value.map(StrBytes::from_string))
                    .with_source(s.source as i8)
            })
            .collect()
    } else {
        Vec::new()
    };
    DescribeConfigsResourceResult::default()
        .with_name(StrBytes::from_string(entry.name))
        .with_value(entry.value.map(StrBytes::from_string))
        .with_read_only(entry.read_only)
        .with_config_source(entry.source as i8)
        .with_is_sensitive(entry.is_sensitive)
        .with_synonyms(synonyms)
        .with_config_type(entry.config_type.response_id())
        .with_documentation(documentation.then(|| StrBytes::from_string(entry.documentation)))
}

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeConfigsRequest,
    _version: i16,
) -> DescribeConfigsResponse {
    let image = ctx.broker.image();
    let properties = &ctx.broker.config.properties;
    let (synonyms, documentation) = (request.include_synonyms, request.include_documentation);
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
            let name = resource.resource_name.as_str();
            let entries = match resource.resource_type {
                RESOURCE_TYPE_TOPIC => match image.topic(name) {
                    Some(topic) => Ok(topic_entries(
                        &topic.config_overrides,
                        &topic.log_config,
                        properties,
                        wanted,
                    )),
                    None => Err(ApiError::new(
                        ResponseError::UnknownTopicOrPartition,
                        format!("topic '{name}' does not exist"),
                    )),
                },
                // An empty name asks for the cluster's dynamic defaults.
                RESOURCE_TYPE_BROKER if name.is_empty() => Ok(dynamic_broker_entries(
                    &image.dynamic_broker_configs,
                    false,
                    wanted,
                )),
                RESOURCE_TYPE_BROKER => match name.parse::<i32>() {
                    Ok(id) if id == ctx.broker.config.broker_id => {
                        let mut entries =
                            dynamic_broker_entries(&image.dynamic_broker_configs, true, wanted);
                        entries.extend(broker_entries(properties, wanted));
                        Ok(entries)
                    }
                    Ok(id) => Err(ApiError::new(
                        ResponseError::InvalidRequest,
                        format!(
                            "Unexpected broker id, expected {} or empty string, but received {id}",
                            ctx.broker.config.broker_id
                        ),
                    )),
                    Err(_) => Err(ApiError::new(
                        ResponseError::InvalidRequest,
                        format!("Broker id must be an integer, but it is: {name}"),
                    )),
                },
                other => Err(ApiError::new(
                    ResponseError::InvalidRequest,
                    format!("Unsupported resource type: {other}"),
                )),
            };
            match entries {
                Ok(entries) => result.with_configs(
                    entries
                        .into_iter()
                        .map(|entry| encode(entry, synonyms, documentation))
                        .collect(),
                ),
                Err(error) => result
                    .with_error_code(error.code())
                    .with_error_message(Some(StrBytes::from_string(error.message))),
            }
        })
        .collect();
    DescribeConfigsResponse::default().with_results(results)
}
