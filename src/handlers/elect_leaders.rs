//! ElectLeaders (key 43): a preferred or unclean leader election the
//! controller runs for the requested partitions (`kafka-leader-election`).
//! Asked for every partition, the answer leaves out those that needed none,
//! as Kafka's does.

use std::collections::BTreeMap;

use kafka_protocol::messages::elect_leaders_response::{PartitionResult, ReplicaElectionResult};
use kafka_protocol::messages::{ElectLeadersRequest, ElectLeadersResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::controller::ElectionType;
use crate::protocol::{ApiError, ResponseError};

pub async fn handle(
    ctx: &RequestContext,
    request: ElectLeadersRequest,
    _version: i16,
) -> ElectLeadersResponse {
    let Some(election_type) = ElectionType::from_byte(request.election_type) else {
        return ElectLeadersResponse::default()
            .with_error_code(ResponseError::InvalidRequest.code());
    };
    let requested: Option<Vec<(String, i32)>> = request.topic_partitions.as_ref().map(|topics| {
        topics
            .iter()
            .flat_map(|t| t.partitions.iter().map(|p| (t.topic.0.to_string(), *p)))
            .collect()
    });
    let every_partition = requested.is_none();
    let results = match ctx
        .broker
        .control
        .elect_leaders(election_type, requested.clone())
        .await
    {
        Ok(results) => results,
        // Kafka answers each requested partition with the controller's error.
        Err(error) => requested
            .unwrap_or_default()
            .into_iter()
            .map(|partition| (partition, Err(error.clone())))
            .collect(),
    };
    let mut by_topic: BTreeMap<String, Vec<PartitionResult>> = BTreeMap::new();
    for ((topic, partition), result) in results {
        let result = match result {
            Ok(_) => PartitionResult::default().with_partition_id(partition),
            Err(ApiError { error, .. })
                if every_partition && error == ResponseError::ElectionNotNeeded =>
            {
                continue
            }
            Err(error) => PartitionResult::default()
                .with_partition_id(partition)
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(error.message))),
        };
        by_topic.entry(topic).or_default().push(result);
    }
    let results = by_topic
        .into_iter()
        .map(|(topic, partitions)| {
            ReplicaElectionResult::default()
                .with_topic(TopicName(StrBytes::from_string(topic)))
                .with_partition_result(partitions)
        })
        .collect();
    ElectLeadersResponse::default().with_replica_election_results(results)
}
