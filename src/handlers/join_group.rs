//! JoinGroup (key 11): answered when the group's join phase ends, on the
//! shard coordinating the group.

use kafka_protocol::messages::{JoinGroupRequest, JoinGroupResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::coordinator::group::JoinParams;

pub async fn handle(
    ctx: &RequestContext,
    request: JoinGroupRequest,
    version: i16,
) -> JoinGroupResponse {
    let member_id = request.member_id.clone();
    let params = JoinParams {
        version,
        client_id: ctx.client_id(),
        client_host: ctx.client_host.clone(),
        request,
    };
    let group_id = params.request.group_id.to_string();
    let mut response = ctx
        .broker
        .on_group_coordinator(&group_id, move |groups, partition| async move {
            groups.join_group(partition, params).await
        })
        .await
        .unwrap_or_else(|code| {
            JoinGroupResponse::default()
                .with_error_code(code.code())
                .with_member_id(member_id)
        });
    // Before v7 the protocol name is a non-null string.
    if version < 7 && response.protocol_name.is_none() {
        response.protocol_name = Some(StrBytes::default());
    }
    response
}
