//! AlterPartitionReassignments (key 45): new replicas for partitions, or a
//! reassignment cancelled (null replicas), run by the controller (KIP-455).
//! A broker that is not the controller answers NOT_CONTROLLER at the top.

use kafka_protocol::messages::alter_partition_reassignments_response::{
    ReassignablePartitionResponse, ReassignableTopicResponse,
};
use kafka_protocol::messages::{
    AlterPartitionReassignmentsRequest, AlterPartitionReassignmentsResponse,
};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: AlterPartitionReassignmentsRequest,
    _version: i16,
) -> AlterPartitionReassignmentsResponse {
    let requests = request
        .topics
        .iter()
        .flat_map(|topic| {
            topic.partitions.iter().map(|p| {
                let target = p
                    .replicas
                    .as_ref()
                    .map(|r| r.iter().map(|id| id.0).collect());
                ((topic.name.0.to_string(), p.partition_index), target)
            })
        })
        .collect();
    let results = match ctx
        .broker
        .control
        .alter_partition_reassignments(requests)
        .await
    {
        Ok(results) => results,
        Err(error) => {
            return AlterPartitionReassignmentsResponse::default()
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(error.message)))
        }
    };
    let mut responses: Vec<ReassignableTopicResponse> = Vec::new();
    for ((topic, partition), result) in results {
        let mut answer = ReassignablePartitionResponse::default().with_partition_index(partition);
        if let Err(error) = result {
            answer = answer
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(error.message)));
        }
        match responses.last_mut() {
            Some(last) if *last.name.0 == *topic => last.partitions.push(answer),
            _ => responses.push(
                ReassignableTopicResponse::default()
                    .with_name(kafka_protocol::messages::TopicName(StrBytes::from_string(
                        topic,
                    )))
                    .with_partitions(vec![answer]),
            ),
        }
    }
    AlterPartitionReassignmentsResponse::default().with_responses(responses)
}
