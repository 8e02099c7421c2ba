//! ListGroups (key 16): every group this broker coordinates, from every
//! shard; filtered by state (v4+) and type (v5+, all are "classic").

use kafka_protocol::messages::list_groups_response::ListedGroup;
use kafka_protocol::messages::{GroupId, ListGroupsRequest, ListGroupsResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::protocol::{ErrorCode, ResponseError};

const CLASSIC_GROUP_TYPE: &str = "classic";

pub async fn handle(
    ctx: &RequestContext,
    request: ListGroupsRequest,
    version: i16,
) -> ListGroupsResponse {
    let broker = &ctx.broker;
    let mut listed = Vec::new();
    let mut code = None;
    for shard in 0..broker.mesh().nr_shards() {
        let summaries = broker
            .mesh()
            .invoke_on(shard, broker, |broker| async move {
                broker.groups.list_groups()
            })
            .await
            .unwrap_or(Err(ResponseError::CoordinatorNotAvailable));
        match summaries {
            Ok(summaries) => listed.extend(summaries),
            Err(error) => code = Some(error),
        }
    }
    let type_ok = request.types_filter.is_empty()
        || request
            .types_filter
            .iter()
            .any(|t| t.eq_ignore_ascii_case(CLASSIC_GROUP_TYPE));
    let groups = listed
        .into_iter()
        .filter(|_| type_ok)
        .filter(|g| {
            request.states_filter.is_empty()
                || request
                    .states_filter
                    .iter()
                    .any(|s| s.eq_ignore_ascii_case(g.state.name()))
        })
        .map(|g| {
            let group = ListedGroup::default()
                .with_group_id(GroupId(StrBytes::from_string(g.group_id)))
                .with_protocol_type(StrBytes::from_string(g.protocol_type));
            let group = if version >= 4 {
                group.with_group_state(StrBytes::from_static_str(g.state.name()))
            } else {
                group
            };
            if version >= 5 {
                group.with_group_type(StrBytes::from_static_str(CLASSIC_GROUP_TYPE))
            } else {
                group
            }
        })
        .collect();
    ListGroupsResponse::default()
        .with_error_code(code.error_code())
        .with_groups(groups)
}
