//! AlterConfigs (key 33) and IncrementalAlterConfigs (key 44) for topics.

use kafka_protocol::messages::{
    alter_configs_response, incremental_alter_configs_response, AlterConfigsRequest,
    AlterConfigsResponse, IncrementalAlterConfigsRequest, IncrementalAlterConfigsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::{RequestContext, RESOURCE_TYPE_TOPIC};
use crate::controller::{ApiError, ConfigOp};
use crate::protocol::error_code;

async fn alter(
    ctx: &RequestContext,
    resource_type: i8,
    name: &StrBytes,
    changes: Result<Vec<(String, ConfigOp, Option<String>)>, ApiError>,
    replace_all: bool,
    validate_only: bool,
) -> Result<(), ApiError> {
    if resource_type != RESOURCE_TYPE_TOPIC {
        return Err(ApiError::new(
            error_code::INVALID_REQUEST,
            "only topic configs can be altered",
        ));
    }
    ctx.broker
        .control
        .alter_configs(name.to_string(), changes?, replace_all, validate_only)
        .await
}

fn error_parts(result: Result<(), ApiError>) -> (i16, Option<StrBytes>) {
    match result {
        Ok(()) => (error_code::NONE, None),
        Err(error) => (error.code, Some(StrBytes::from_string(error.message))),
    }
}

/// Legacy AlterConfigs: the given set replaces every override of the topic.
pub async fn handle(
    ctx: &RequestContext,
    request: AlterConfigsRequest,
    _version: i16,
) -> AlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
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
        let result = alter(
            ctx,
            resource.resource_type,
            &resource.resource_name,
            Ok(changes),
            true,
            request.validate_only,
        )
        .await;
        let (code, message) = error_parts(result);
        responses.push(
            alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name),
        );
    }
    AlterConfigsResponse::default().with_responses(responses)
}

/// IncrementalAlterConfigs: SET (0) and DELETE (1) per key.
pub async fn handle_incremental(
    ctx: &RequestContext,
    request: IncrementalAlterConfigsRequest,
    _version: i16,
) -> IncrementalAlterConfigsResponse {
    let mut responses = Vec::with_capacity(request.resources.len());
    for resource in request.resources {
        let changes = resource
            .configs
            .iter()
            .map(|c| {
                let op = match c.config_operation {
                    0 => ConfigOp::Set,
                    1 => ConfigOp::Delete,
                    other => {
                        return Err(ApiError::new(
                            error_code::INVALID_REQUEST,
                            format!("config operation {other} (APPEND/SUBTRACT) is not supported"),
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
        let result = alter(
            ctx,
            resource.resource_type,
            &resource.resource_name,
            changes,
            false,
            request.validate_only,
        )
        .await;
        let (code, message) = error_parts(result);
        responses.push(
            incremental_alter_configs_response::AlterConfigsResourceResponse::default()
                .with_error_code(code)
                .with_error_message(message)
                .with_resource_type(resource.resource_type)
                .with_resource_name(resource.resource_name),
        );
    }
    IncrementalAlterConfigsResponse::default().with_responses(responses)
}
