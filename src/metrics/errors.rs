//! The error codes a response carries, as Kafka counts them for its
//! `ErrorsPerSec` metric (each response's `errorCounts`: its top-level code
//! and every topic's, partition's, group's or member's, NONE included).

use kafka_protocol::messages::*;

pub trait ResponseErrors {
    /// Calls `count` once per error code in the response.
    fn for_each_error(&self, count: &mut dyn FnMut(i16));
}

/// Responses whose only code is their top-level `error_code`.
macro_rules! top_level_error {
    ($($response:ty),* $(,)?) => {$(
        impl ResponseErrors for $response {
            fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
                count(self.error_code);
            }
        }
    )*};
}

top_level_error!(
    ApiVersionsResponse,
    SaslHandshakeResponse,
    InitProducerIdResponse,
    JoinGroupResponse,
    HeartbeatResponse,
    SyncGroupResponse,
    ListGroupsResponse,
    DescribeClusterResponse,
    ListPartitionReassignmentsResponse,
    AllocateProducerIdsResponse,
);

/// Responses with one code per entry of a list.
macro_rules! per_entry_error {
    ($($response:ty => $list:ident),* $(,)?) => {$(
        impl ResponseErrors for $response {
            fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
                self.$list.iter().for_each(|entry| count(entry.error_code));
            }
        }
    )*};
}

per_entry_error!(
    CreateTopicsResponse => topics,
    DeleteTopicsResponse => responses,
    DescribeConfigsResponse => results,
    AlterConfigsResponse => responses,
    IncrementalAlterConfigsResponse => responses,
    CreatePartitionsResponse => results,
    DeleteGroupsResponse => results,
    DescribeGroupsResponse => groups,
);

/// Responses with one code per partition of each topic.
macro_rules! per_partition_error {
    ($($response:ty => $topics:ident . $partitions:ident),* $(,)?) => {$(
        impl ResponseErrors for $response {
            fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
                for topic in &self.$topics {
                    topic.$partitions.iter().for_each(|p| count(p.error_code));
                }
            }
        }
    )*};
}

per_partition_error!(
    ProduceResponse => responses.partition_responses,
    ListOffsetsResponse => topics.partitions,
    OffsetCommitResponse => topics.partitions,
    DeleteRecordsResponse => topics.partitions,
    AlterReplicaLogDirsResponse => results.partitions,
    kafka_protocol_legacy::messages::OffsetForLeaderEpochResponse => topics.partitions,
);

/// Responses with a top-level code and one per partition of each topic.
macro_rules! top_level_and_per_partition_error {
    ($($response:ty => $topics:ident . $partitions:ident),* $(,)?) => {$(
        impl ResponseErrors for $response {
            fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
                count(self.error_code);
                for topic in &self.$topics {
                    topic.$partitions.iter().for_each(|p| count(p.error_code));
                }
            }
        }
    )*};
}

top_level_and_per_partition_error!(
    AlterPartitionResponse => topics.partitions,
    FetchResponse => responses.partitions,
    ElectLeadersResponse => replica_election_results.partition_result,
    AlterPartitionReassignmentsResponse => responses.partitions,
);

impl ResponseErrors for MetadataResponse {
    fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
        for topic in &self.topics {
            count(topic.error_code);
            topic.partitions.iter().for_each(|p| count(p.error_code));
        }
    }
}

impl ResponseErrors for OffsetFetchResponse {
    fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
        // v8+ answers per group; before, for one group at the top level.
        if self.groups.is_empty() {
            count(self.error_code);
            for topic in &self.topics {
                topic.partitions.iter().for_each(|p| count(p.error_code));
            }
        }
        for group in &self.groups {
            count(group.error_code);
            for topic in &group.topics {
                topic.partitions.iter().for_each(|p| count(p.error_code));
            }
        }
    }
}

impl ResponseErrors for FindCoordinatorResponse {
    fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
        // v4+ answers per key; before, for one key at the top level.
        if self.coordinators.is_empty() {
            count(self.error_code);
        }
        self.coordinators.iter().for_each(|c| count(c.error_code));
    }
}

impl ResponseErrors for LeaveGroupResponse {
    fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
        count(self.error_code);
        self.members.iter().for_each(|m| count(m.error_code));
    }
}

impl ResponseErrors for DescribeLogDirsResponse {
    fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
        count(self.error_code);
        self.results.iter().for_each(|r| count(r.error_code));
    }
}

impl ResponseErrors for OffsetDeleteResponse {
    fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
        count(self.error_code);
        for topic in &self.topics {
            topic.partitions.iter().for_each(|p| count(p.error_code));
        }
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn codes(response: &impl ResponseErrors) -> Vec<i16> {
        let mut codes = Vec::new();
        response.for_each_error(&mut |code| codes.push(code));
        codes
    }

    #[test]
    fn every_code_of_a_response_as_kafka_counts_them() {
        use kafka_protocol::messages::find_coordinator_response::Coordinator;
        use kafka_protocol::messages::metadata_response::{
            MetadataResponsePartition, MetadataResponseTopic,
        };
        let metadata =
            MetadataResponse::default().with_topics(vec![MetadataResponseTopic::default()
                .with_error_code(3)
                .with_partitions(vec![
                    MetadataResponsePartition::default(),
                    MetadataResponsePartition::default().with_error_code(5),
                ])]);
        assert_eq!(codes(&metadata), [3, 0, 5]);
        let batched = FindCoordinatorResponse::default().with_coordinators(vec![
            Coordinator::default().with_error_code(15),
            Coordinator::default(),
        ]);
        assert_eq!(codes(&batched), [15, 0]);
        assert_eq!(
            codes(&FindCoordinatorResponse::default().with_error_code(16)),
            [16]
        );
    }
}

/// The controller's requests' responses (kafka-protocol 0.15.1's types).
mod control {
    use super::ResponseErrors;
    use crate::protocol::inter_broker::{
        ControlledShutdownResponse, LeaderAndIsrResponse, StopReplicaResponse,
        UpdateMetadataResponse,
    };

    top_level_error!(UpdateMetadataResponse, ControlledShutdownResponse);

    impl ResponseErrors for LeaderAndIsrResponse {
        fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
            count(self.error_code);
            self.partition_errors
                .iter()
                .for_each(|p| count(p.error_code));
            for topic in &self.topics {
                topic
                    .partition_errors
                    .iter()
                    .for_each(|p| count(p.error_code));
            }
        }
    }

    impl ResponseErrors for StopReplicaResponse {
        fn for_each_error(&self, count: &mut dyn FnMut(i16)) {
            count(self.error_code);
            self.partition_errors
                .iter()
                .for_each(|p| count(p.error_code));
        }
    }
}
