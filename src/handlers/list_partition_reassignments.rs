//! ListPartitionReassignments (key 46): the reassignments in progress, with
//! each partition's replicas and those being added and removed.

use kafka_protocol::messages::list_partition_reassignments_response::{
    OngoingPartitionReassignment, OngoingTopicReassignment,
};
use kafka_protocol::messages::{
    BrokerId, ListPartitionReassignmentsRequest, ListPartitionReassignmentsResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;

fn ids(ids: &[i32]) -> Vec<BrokerId> {
    ids.iter().copied().map(BrokerId).collect()
}

pub async fn handle(
    ctx: &RequestContext,
    request: ListPartitionReassignmentsRequest,
    _version: i16,
) -> ListPartitionReassignmentsResponse {
    let partitions = request.topics.map(|topics| {
        topics
            .iter()
            .flat_map(|t| {
                t.partition_indexes
                    .iter()
                    .map(|p| (t.name.0.to_string(), *p))
            })
            .collect()
    });
    let ongoing = match ctx
        .broker
        .control
        .list_partition_reassignments(partitions)
        .await
    {
        Ok(ongoing) => ongoing,
        Err(error) => {
            return ListPartitionReassignmentsResponse::default()
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(error.message)))
        }
    };
    let mut topics: Vec<OngoingTopicReassignment> = Vec::new();
    for (topic, partition, replicas, reassignment) in ongoing {
        let answer = OngoingPartitionReassignment::default()
            .with_partition_index(partition)
            .with_replicas(ids(&replicas))
            .with_adding_replicas(ids(&reassignment.adding))
            .with_removing_replicas(ids(&reassignment.removing));
        match topics.last_mut() {
            Some(last) if *last.name.0 == *topic => last.partitions.push(answer),
            _ => topics.push(
                OngoingTopicReassignment::default()
                    .with_name(TopicName(StrBytes::from_string(topic)))
                    .with_partitions(vec![answer]),
            ),
        }
    }
    ListPartitionReassignmentsResponse::default().with_topics(topics)
}
