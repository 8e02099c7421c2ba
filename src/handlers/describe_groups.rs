//! DescribeGroups (key 15): state, protocol and members of each group; an
//! unknown group is described as Dead, as Kafka does before v6.

use kafka_protocol::messages::describe_groups_response::{DescribedGroup, DescribedGroupMember};
use kafka_protocol::messages::{DescribeGroupsRequest, DescribeGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeGroupsRequest,
    _version: i16,
) -> DescribeGroupsResponse {
    let mut groups = Vec::with_capacity(request.groups.len());
    for group_id in request.groups {
        let id = group_id.to_string();
        let summary = ctx
            .broker
            .on_group_coordinator(&id.clone(), move |groups, partition| async move {
                groups.describe_group(partition, &id)
            })
            .await
            .and_then(|summary| summary);
        let described = DescribedGroup::default().with_group_id(group_id);
        groups.push(match summary {
            Err(code) => described.with_error_code(code.code()),
            Ok(summary) => described
                .with_group_state(StrBytes::from_static_str(summary.state.name()))
                .with_protocol_type(StrBytes::from_string(summary.protocol_type))
                .with_protocol_data(StrBytes::from_string(summary.protocol))
                .with_members(
                    summary
                        .members
                        .into_iter()
                        .map(|m| {
                            DescribedGroupMember::default()
                                .with_member_id(StrBytes::from_string(m.member_id))
                                .with_group_instance_id(
                                    m.group_instance_id.map(StrBytes::from_string),
                                )
                                .with_client_id(StrBytes::from_string(m.client_id))
                                .with_client_host(StrBytes::from_string(m.client_host))
                                .with_member_metadata(m.metadata)
                                .with_member_assignment(m.assignment)
                        })
                        .collect(),
                ),
        });
    }
    DescribeGroupsResponse::default().with_groups(groups)
}
