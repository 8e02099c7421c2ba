//! ApiVersions (key 18): what this broker serves.

use kafka_protocol::messages::api_versions_response::ApiVersion;
use kafka_protocol::messages::{ApiVersionsRequest, ApiVersionsResponse};

use super::{ApiTable, RequestContext};
use crate::protocol::ResponseError;

/// Exactly what the listener's table serves.
fn api_keys(apis: &ApiTable) -> Vec<ApiVersion> {
    apis.apis()
        .iter()
        .map(|api| {
            ApiVersion::default()
                .with_api_key(api.key)
                .with_min_version(api.min_version)
                .with_max_version(api.max_version)
        })
        .collect()
}

pub async fn handle(
    ctx: &RequestContext,
    _request: ApiVersionsRequest,
    _version: i16,
) -> ApiVersionsResponse {
    ApiVersionsResponse::default().with_api_keys(api_keys(&ctx.apis))
}

pub fn unsupported_version(apis: &ApiTable) -> ApiVersionsResponse {
    ApiVersionsResponse::default()
        .with_error_code(ResponseError::UnsupportedVersion.code())
        .with_api_keys(api_keys(apis))
}
