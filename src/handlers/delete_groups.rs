//! DeleteGroups (key 42): empty groups go, offsets and all.

use kafka_protocol::messages::delete_groups_response::DeletableGroupResult;
use kafka_protocol::messages::{DeleteGroupsRequest, DeleteGroupsResponse};

use super::RequestContext;
use crate::protocol::ErrorCode;

pub async fn handle(
    ctx: &RequestContext,
    request: DeleteGroupsRequest,
    _version: i16,
) -> DeleteGroupsResponse {
    let mut results = Vec::with_capacity(request.groups_names.len());
    for group_id in request.groups_names {
        let id = group_id.to_string();
        let deleted = ctx
            .broker
            .on_group_coordinator(&id.clone(), move |groups, partition| async move {
                groups.delete_group(partition, &id).await
            })
            .await
            .and_then(|deleted| deleted);
        results.push(
            DeletableGroupResult::default()
                .with_group_id(group_id)
                .with_error_code(deleted.error_code()),
        );
    }
    DeleteGroupsResponse::default().with_results(results)
}
