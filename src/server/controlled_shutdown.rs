//! Kafka's `KafkaServer.controlledShutdown`: before a ZooKeeper-mode broker
//! stops, it asks the controller to move its leaderships to the rest of
//! their ISRs, so clients move to the new leaders before it goes. Tried
//! `controlled.shutdown.max.retries` more times, `retry.backoff.ms` apart,
//! while the controller is unknown or unreachable or this broker still leads
//! replicated partitions; then the broker stops anyway.

use std::time::Duration;

use tracing::{info, warn};

use super::broker::ShardBroker;
use crate::network::broker_connection::BrokerConnection;
use crate::protocol::inter_broker::{
    BrokerId, ControlledShutdownRequest, ControlledShutdownResponse, CONTROLLED_SHUTDOWN,
};
use crate::protocol::ResponseError;

/// Kafka's `request.timeout.ms` for the broker's own requests.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_RESPONSE_BYTES: usize = 16 * 1024 * 1024;

/// Returns whether the controller moved every leadership.
pub async fn controlled_shutdown(broker: &ShardBroker) -> bool {
    let config = &broker.config;
    let retry = config.controlled_shutdown;
    let client_id = config.broker_id.to_string();
    let mut connection: Option<(i32, BrokerConnection)> = None;
    for attempt in 0..=retry.max_retries {
        if attempt > 0 {
            glommio::timer::sleep(Duration::from_millis(retry.retry_backoff_ms)).await;
        }
        let image = broker.image();
        let controller = image.controller_id;
        let Some(endpoint) = image
            .brokers
            .get(&controller)
            .and_then(|b| b.endpoint(&config.inter_broker_listener_name))
        else {
            warn!(controller, "controlled shutdown: no controller known yet");
            continue;
        };
        // A controller that moved gets a connection of its own.
        if connection.as_ref().is_none_or(|(id, _)| *id != controller) {
            let address = format!("{}:{}", endpoint.host, endpoint.port);
            connection = Some((
                controller,
                BrokerConnection::new(address, REQUEST_TIMEOUT, MAX_RESPONSE_BYTES),
            ));
        }
        let (_, connected) = connection.as_mut().expect("just set");
        let request = ControlledShutdownRequest::default()
            .with_broker_id(BrokerId(config.broker_id))
            .with_broker_epoch(image.broker_epoch);
        let answered: Result<ControlledShutdownResponse, String> = CONTROLLED_SHUTDOWN
            .call(connected, &client_id, &request)
            .await;
        match answered {
            Ok(response)
                if response.error_code == 0 && response.remaining_partitions.is_empty() =>
            {
                info!(controller, "controlled shutdown succeeded");
                return true;
            }
            Ok(response) => {
                let error = ResponseError::try_from_code(response.error_code);
                warn!(
                    controller,
                    ?error,
                    still_led = response.remaining_partitions.len(),
                    "controlled shutdown incomplete"
                );
            }
            Err(error) => warn!(controller, %error, "controlled shutdown: no answer"),
        }
    }
    warn!(
        attempts = retry.max_retries + 1,
        "controlled shutdown failed; stopping anyway"
    );
    false
}
