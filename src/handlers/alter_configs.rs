//! AlterConfigs (key 33) and IncrementalAlterConfigs (key 44) for topics.

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{RequestContext, RESOURCE_TYPE_TOPIC};
use crate::controller::ConfigOp;
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
        let result = match (resource_type, changes) {
            (RESOURCE_TYPE_TOPIC, Ok(changes)) => {
                ctx.broker
                    .control
                    .alter_configs(name.to_string(), changes, replace_all, validate_only)
                    .await
            }
            (RESOURCE_TYPE_TOPIC, Err(error)) => Err(error),
            _ => Err(ApiError::new(
                ResponseError::InvalidRequest,
                "only topic configs can be altered",
            )),
        };
        let (code, message) = match result {
            Ok(()) => (0, None),
            Err(error) => (error.code(), Some(StrBytes::from_string(error.message))),
        };
        outcomes.push((resource_type, name, code, message));
    }
    outcomes
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
