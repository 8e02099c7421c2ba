//! SyncGroup (key 14): the leader hands out the assignment; every member
//! gets its share once it is stored.

use kafka_protocol::messages::{SyncGroupRequest, SyncGroupResponse};

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: SyncGroupRequest,
    version: i16,
) -> SyncGroupResponse {
    let group_id = request.group_id.to_string();
    let mut response = ctx
        .broker
        .on_group_coordinator(&group_id, move |groups, partition| async move {
            groups.sync_group(partition, request).await
        })
        .await
        .unwrap_or_else(|code| SyncGroupResponse::default().with_error_code(code.code()));
    if version < 5 {
        response.protocol_type = None;
        response.protocol_name = None;
    }
    response
}
