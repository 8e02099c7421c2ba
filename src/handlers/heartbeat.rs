//! Heartbeat (key 12): keeps a member's session alive; tells it when a
//! rebalance started.

use kafka_protocol::messages::{HeartbeatRequest, HeartbeatResponse};

use super::RequestContext;
use crate::protocol::ErrorCode;

pub async fn handle(
    ctx: &RequestContext,
    request: HeartbeatRequest,
    _version: i16,
) -> HeartbeatResponse {
    let group_id = request.group_id.to_string();
    let outcome = ctx
        .broker
        .on_group_coordinator(&group_id, move |groups, partition| async move {
            groups.heartbeat(
                partition,
                &request.group_id,
                &request.member_id,
                request.group_instance_id.as_deref(),
                request.generation_id,
            )
        })
        .await
        .and_then(|outcome| outcome);
    HeartbeatResponse::default().with_error_code(outcome.error_code())
}
