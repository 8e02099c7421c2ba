//! DescribeCluster (key 60): the brokers, the controller, the cluster id.

use kafka_protocol::messages::describe_cluster_response::DescribeClusterBroker;
use kafka_protocol::messages::{BrokerId, DescribeClusterRequest, DescribeClusterResponse};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;

pub async fn handle(
    ctx: &RequestContext,
    _request: DescribeClusterRequest,
    _version: i16,
) -> DescribeClusterResponse {
    let image = ctx.broker.image();
    let brokers = image
        .broker_endpoints(&ctx.listener_name)
        .map(|(broker, endpoint)| {
            DescribeClusterBroker::default()
                .with_broker_id(BrokerId(broker.id))
                .with_host(StrBytes::from_string(endpoint.host.clone()))
                .with_port(i32::from(endpoint.port))
                .with_rack(broker.rack.clone().map(StrBytes::from_string))
        })
        .collect();
    DescribeClusterResponse::default()
        .with_error_code(0)
        .with_cluster_id(StrBytes::from_string(image.cluster_id.clone()))
        .with_controller_id(BrokerId(image.controller_id))
        .with_brokers(brokers)
}
