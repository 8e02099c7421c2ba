//! AlterConfigs (key 33) and IncrementalAlterConfigs (key 44) for topics and
//! for brokers' dynamic configs (this broker's id, or empty for every broker).

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{RequestContext, RESOURCE_TYPE_BROKER, RESOURCE_TYPE_TOPIC};
use crate::controller::{ConfigEntity, ConfigOp};
use crate::metadata::znodes::ConfigEntityZNode;
use crate::protocol::{ApiError, ResponseError};

type Changes = Vec<(String, ConfigOp, Option<String>)>;

/// One resource's outcome: (type, name, error code, error message).
type ResourceOutcome = (i8, StrBytes, i16, Option<StrBytes>);

/// Applies each resource's changes through the controller.
async fn alter_all(
    ctx: &RequestContext,
    resources: Vec<(i8, StrBytes, Result<Changes, ApiError>)>,
    replace_all: bool,
    validate_only: bool,
) -> Vec<ResourceOutcome> {
    let mut outcomes = Vec::with_capacity(resources.len());
    for (resource_type, name, changes) in resources {
        let entity = config_entity(ctx, resource_type, &name);
        let result = match (entity, changes) {
            (Ok(entity), Ok(changes)) => {
                ctx.broker
                    .control
                    .alter_configs(entity, changes, replace_all, validate_only)
                    .await
            }
            (Err(error), _) | (_, Err(error)) => Err(error),
        };
        let (code, message) = match result {
            Ok(()) => (0, None),
            Err(error) => (error.code(), Some(StrBytes::from_string(error.message))),
        };
        outcomes.push((resource_type, name, code, message));
    }
    outcomes
}

/// The entity a resource names: a topic, this broker (by its id) or every
/// broker (the empty name), as Kafka's ZooKeeper-mode broker accepts them.
fn config_entity(
    ctx: &RequestContext,
    resource_type: i8,
    name: &str,
) -> Result<ConfigEntity, ApiError> {
    let broker_id = ctx.broker.config.broker_id;
    match resource_type {
        RESOURCE_TYPE_TOPIC => Ok(ConfigEntity::Topic(name.to_owned())),
        RESOURCE_TYPE_BROKER if name.is_empty() => Ok(ConfigEntity::Broker(
            ConfigEntityZNode::DEFAULT_BROKER.to_owned(),
        )),
        RESOURCE_TYPE_BROKER if name.parse() == Ok(broker_id) => {
            Ok(ConfigEntity::Broker(name.to_owned()))
        }
        RESOURCE_TYPE_BROKER => Err(ApiError::new(
            ResponseError::InvalidRequest,
            format!(
                "Unexpected broker id, expected {broker_id} or empty string, but received {name}"
            ),
        )),
        _ => Err(ApiError::new(
            ResponseError::InvalidRequest,
            "only topic and broker configs can be altered",
        )),
    }
}

/// Legacy AlterConfigs: the given set replaces every override of the topic.
pub async fn handle(
    ctx: &RequestContext,
    request: AlterConfigsRequest,
    _version: i16,
) -> AlterConfigsResponse {
    let resources = request
        .resources
        .into_iter()
        .map(|resource| {
            let changes = resource
                .configs
                .iter()
                .map(|c| {
                    (
                        c.name.to_string(),
                        ConfigOp::Set,
                        c.value.as_ref().map(|v| v.to_string()),
                    )
                })
                .collect();
            (resource.resource_type, resource.resource_name, Ok(changes))
        })
        .collect();
    let responses = alter_all(ctx, resources, true, request.validate_only)
        .await
        .into_iter()
        .map(|(resource_type, name, code, message)| {
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(resource_type)
                .with_resource_name(name)
        })
        .collect();
    AlterConfigsResponse::default().with_responses(responses)
}

/// IncrementalAlterConfigs: SET (0), DELETE (1), APPEND (2) and SUBTRACT (3) per key.
pub async fn handle_incremental(
    ctx: &RequestContext,
    request: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let resources = request
        .resources
        .into_iter()
        .map(|resource| {
            let changes = resource
                .configs
                .iter()
                .map(|c| {
                    let op = match c.config_operation {
                        0 => ConfigOp::Set,
                        1 => ConfigOp::Delete,
                        2 => ConfigOp::Append,
                        3 => ConfigOp::Subtract,
                        other => {
                            return Err(ApiError::new(
                                ResponseError::InvalidRequest,
                                format!("Unknown alter configs operation type {other}"),
                            ))
                        }
                    };
                    Ok((
                        c.name.to_string(),
                        op,
                        c.value.as_ref().map(|v| v.to_string()),
                    ))
                })
                .collect();
            (resource.resource_type, resource.resource_name, changes)
        })
        .collect();
    let responses = alter_all(ctx, resources, false, request.validate_only)
        .await
        .into_iter()
        .map(|(resource_type, name, code, message)| {
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(resource_type)
                .with_resource_name(name)
        })
        .collect();
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
