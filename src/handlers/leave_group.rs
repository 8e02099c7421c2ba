//! LeaveGroup (key 13): one member (v0-2) or several (v3+, KIP-345) leave.

use kafka_protocol::messages::leave_group_response::MemberResponse;
use kafka_protocol::messages::{LeaveGroupRequest, LeaveGroupResponse};

use super::RequestContext;
use crate::coordinator::group::LeavingMember;
use crate::protocol::ErrorCode;

pub async fn handle(
    ctx: &RequestContext,
    request: LeaveGroupRequest,
    version: i16,
) -> LeaveGroupResponse {
    let identities = if version >= 3 {
        request.members.clone()
    } else {
        vec![Default::default()]
    };
    let leaving: Vec<LeavingMember> = if version >= 3 {
        request
            .members
            .iter()
            .map(|m| LeavingMember {
                member_id: m.member_id.to_string(),
                group_instance_id: m.group_instance_id.as_ref().map(|i| i.to_string()),
            })
            .collect()
    } else {
        vec![LeavingMember {
            member_id: request.member_id.to_string(),
            group_instance_id: None,
        }]
    };
    let group_id = request.group_id.to_string();
    let left =
        ctx.broker
            .on_group_coordinator(&group_id, {
                let group_id = group_id.clone();
                move |groups, partition| async move {
                    groups.leave_group(partition, &group_id, &leaving)
                }
            })
            .await
            .and_then(|left| left);
    if version < 3 {
        // One member: its error is the response's.
        let code = match &left {
            Ok(members) => members.first().map_or(0, ErrorCode::error_code),
            Err(error) => error.code(),
        };
        return LeaveGroupResponse::default().with_error_code(code);
    }
    let code = left.error_code();
    let member_codes = left.unwrap_or_default();
    let members = identities
        .into_iter()
        .zip(member_codes)
        .map(|(identity, code)| {
            MemberResponse::default()
                .with_member_id(identity.member_id)
                .with_group_instance_id(identity.group_instance_id)
                .with_error_code(code.error_code())
        })
        .collect();
    LeaveGroupResponse::default()
        .with_error_code(code)
        .with_members(members)
}
