//! DeleteTopics (key 20): through the controller's `/admin/delete_topics`.

use kafka_protocol::messages::delete_topics_response::DeletableTopicResult;
use kafka_protocol::messages::{DeleteTopicsRequest, DeleteTopicsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    request: DeleteTopicsRequest,
    version: i16,
) -> DeleteTopicsResponse {
    let image = ctx.broker.image();
    // v6+ names topics by name or id; earlier versions by name.
    let targets: Vec<(String, uuid::Uuid)> = if version >= 6 {
        request
            .topics
            .iter()
            .map(|t| match &t.name {
                Some(name) => (
                    name.0.to_string(),
                    image.topic(&name.0).map_or(uuid::Uuid::nil(), |t| t.id),
                ),
                None => (
                    image
                        .topic_by_id(&t.topic_id)
                        .map(|t| t.name.clone())
                        .unwrap_or_default(),
                    t.topic_id,
                ),
            })
            .collect()
    } else {
        request
            .topic_names
            .iter()
            .map(|n| {
                (
                    n.0.to_string(),
                    image.topic(&n.0).map_or(uuid::Uuid::nil(), |t| t.id),
                )
            })
            .collect()
    };
    let results = ctx
        .broker
        .control
        .delete_topics(targets.iter().map(|(name, _)| name.clone()).collect())
        .await;
    let responses = targets
        .into_iter()
        .zip(results)
        .map(|((name, id), result)| {
            let mut response = DeletableTopicResult::default()
                .with_name(Some(TopicName(StrBytes::from_string(name))));
            if version >= 6 {
                response = response.with_topic_id(id);
            }
            match result {
                Ok(()) => response.with_error_code(0),
                Err(error) => {
                    let response = response.with_error_code(error.code());
                    if version >= 5 {
                        response.with_error_message(Some(StrBytes::from_string(error.message)))
                    } else {
                        response
                    }
                }
            }
        })
        .collect();
    DeleteTopicsResponse::default().with_responses(responses)
}
