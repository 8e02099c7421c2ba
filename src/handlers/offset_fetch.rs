//! OffsetFetch (key 9): committed offsets of one group (v1-7) or several
//! (v8+); all of a group's when no topics are named.

use kafka_protocol::messages::offset_fetch_response::{
    OffsetFetchResponseGroup, OffsetFetchResponsePartition, OffsetFetchResponsePartitions,
    OffsetFetchResponseTopic, OffsetFetchResponseTopics,
};
use kafka_protocol::messages::{GroupId, OffsetFetchRequest, OffsetFetchResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::coordinator::group::{FetchedOffset, FetchedOffsets as Fetched};
use crate::protocol::ResponseError;

async fn fetch_group(
    ctx: &RequestContext,
    group_id: String,
    partitions: Option<Vec<(String, i32)>>,
) -> Result<Fetched, ResponseError> {
    ctx.broker
        .on_group_coordinator(&group_id.clone(), move |groups, partition| async move {
            groups.fetch_offsets(partition, &group_id, partitions)
        })
        .await
        .and_then(|fetched| fetched)
}

/// Groups fetched offsets by topic, in first-seen order.
fn by_topic(fetched: Fetched) -> Vec<(String, Vec<(i32, FetchedOffset)>)> {
    let mut topics: Vec<(String, Vec<(i32, FetchedOffset)>)> = Vec::new();
    for ((topic, partition), offset) in fetched {
        match topics.iter_mut().find(|(name, _)| *name == topic) {
            Some((_, partitions)) => partitions.push((partition, offset)),
            None => topics.push((topic, vec![(partition, offset)])),
        }
    }
    topics
}

pub async fn handle(
    ctx: &RequestContext,
    request: OffsetFetchRequest,
    version: i16,
) -> OffsetFetchResponse {
    if version >= 8 {
        let mut groups = Vec::with_capacity(request.groups.len());
        for group in request.groups {
            let partitions = group.topics.map(|topics| {
                topics
                    .into_iter()
                    .flat_map(|t| {
                        let name = t.name.to_string();
                        t.partition_indexes
                            .into_iter()
                            .map(move |p| (name.clone(), p))
                    })
                    .collect()
            });
            let fetched = fetch_group(ctx, group.group_id.to_string(), partitions).await;
            let response = OffsetFetchResponseGroup::default().with_group_id(group.group_id);
            groups.push(match fetched {
                Err(code) => response.with_error_code(code.code()),
                Ok(fetched) => response.with_topics(
                    by_topic(fetched)
                        .into_iter()
                        .map(|(name, partitions)| {
                            OffsetFetchResponseTopics::default()
                                .with_name(TopicName(StrBytes::from_string(name)))
                                .with_partitions(
                                    partitions
                                        .into_iter()
                                        .map(|(index, o)| {
                                            OffsetFetchResponsePartitions::default()
                                                .with_partition_index(index)
                                                .with_committed_offset(o.offset)
                                                .with_committed_leader_epoch(o.leader_epoch)
                                                .with_metadata(Some(StrBytes::from_string(
                                                    o.metadata,
                                                )))
                                        })
                                        .collect(),
                                )
                        })
                        .collect(),
                ),
            });
        }
        return OffsetFetchResponse::default().with_groups(groups);
    }
    let requested: Option<Vec<(String, i32)>> = request.topics.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partition_indexes.iter().map(|p| (t.name.to_string(), *p)))
            .collect()
    });
    let group_id: GroupId = request.group_id;
    let (code, fetched) = match fetch_group(ctx, group_id.to_string(), requested.clone()).await {
        Ok(fetched) => (0, fetched),
        // v1 has no group-level error: each partition carries it.
        Err(error) => (
            error.code(),
            requested
                .unwrap_or_default()
                .into_iter()
                .map(|key| {
                    (
                        key,
                        FetchedOffset {
                            offset: -1,
                            leader_epoch: -1,
                            metadata: String::new(),
                        },
                    )
                })
                .collect(),
        ),
    };
    let partition_code = if version < 2 { code } else { 0 };
    let topics = by_topic(fetched)
        .into_iter()
        .map(|(name, partitions)| {
            OffsetFetchResponseTopic::default()
                .with_name(TopicName(StrBytes::from_string(name)))
                .with_partitions(
                    partitions
                        .into_iter()
                        .map(|(index, o)| {
                            OffsetFetchResponsePartition::default()
                                .with_partition_index(index)
                                .with_committed_offset(o.offset)
                                .with_committed_leader_epoch(if version >= 5 {
                                    o.leader_epoch
                                } else {
                                    -1
                                })
                                .with_metadata(Some(StrBytes::from_string(o.metadata)))
                                .with_error_code(partition_code)
                        })
                        .collect(),
                )
        })
        .collect();
    let response = OffsetFetchResponse::default().with_topics(topics);
    if version >= 2 {
        response.with_error_code(code)
    } else {
        response
    }
}
