//! CreatePartitions (key 37): grows topics through the controller.

use kafka_protocol::messages::create_partitions_response::CreatePartitionsTopicResult;
use kafka_protocol::messages::{CreatePartitionsRequest, CreatePartitionsResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: CreatePartitionsRequest,
    _version: i16,
) -> CreatePartitionsResponse {
    let mut results = Vec::with_capacity(request.topics.len());
    for topic in request.topics {
        let assignments = topic.assignments.map(|list| {
            list.into_iter()
                .map(|a| a.broker_ids.into_iter().map(|b| b.0).collect())
                .collect()
        });
        let result = ctx
            .broker
            .control
            .create_partitions(
                topic.name.0.to_string(),
                topic.count,
                assignments,
                request.validate_only,
            )
            .await;
        let response = CreatePartitionsTopicResult::default().with_name(topic.name);
        results.push(match result {
            Ok(()) => response.with_error_code(0),
            Err(error) => response
                .with_error_code(error.code())
                .with_error_message(Some(StrBytes::from_string(error.message))),
        });
    }
    CreatePartitionsResponse::default().with_results(results)
}
