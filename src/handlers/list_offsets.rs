//! ListOffsets (key 2): earliest (-2), latest (-1), max timestamp (-3), or the
//! first offset at or after a timestamp; a follower (replica id >= 0) may see
//! up to the leader's log end, a consumer up to its high watermark, and a
//! current leader epoch is checked as Fetch checks it.

use kafka_protocol::messages::list_offsets_response::{
    ListOffsetsPartitionResponse, ListOffsetsTopicResponse,
};
use kafka_protocol::messages::{ListOffsetsRequest, ListOffsetsResponse};

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: ListOffsetsRequest,
    version: i16,
) -> ListOffsetsResponse {
    let from_follower = request.replica_id.0 >= 0;
    let mut topics = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let name = topic.name.0.to_string();
        let mut partitions = Vec::with_capacity(topic.partitions.len());
        for p in topic.partitions {
            let mut response =
                ListOffsetsPartitionResponse::default().with_partition_index(p.partition_index);
            response = match ctx
                .broker
                .list_offset(
                    &name,
                    p.partition_index,
                    p.timestamp,
                    p.current_leader_epoch,
                    from_follower,
                )
                .await
            {
                Ok(found) => {
                    let response = response
                        .with_timestamp(found.timestamp)
                        .with_offset(found.offset);
                    if version >= 4 {
                        response.with_leader_epoch(found.leader_epoch)
                    } else {
                        response
                    }
                }
                Err(code) => response
                    .with_error_code(code.code())
                    .with_timestamp(-1)
                    .with_offset(-1),
            };
            partitions.push(response);
        }
        topics.push(
            ListOffsetsTopicResponse::default()
                .with_name(topic.name)
                .with_partitions(partitions),
        );
    }
    ListOffsetsResponse::default().with_topics(topics)
}
