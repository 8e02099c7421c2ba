//! Kafka's RPCProducerIdManager, per shard: a ZooKeeper-mode broker hands
//! out producer ids from a block the controller gave it with
//! AllocateProducerIds (the controller claims blocks in
//! `/latest_producer_id_block`), so no two brokers, nor two shards, ever
//! hand out the same id. One request for a block is in flight at a time.

use std::cell::{Cell, RefCell};
use std::time::Duration;

use glommio::sync::Semaphore;
use kafka_protocol::messages::{
    AllocateProducerIdsRequest, AllocateProducerIdsResponse, ApiKey, BrokerId,
};

use super::broker::ShardBroker;
use crate::network::broker_connection::BrokerConnection;
use crate::protocol::{call, ResponseError};

/// Kafka's `request.timeout.ms` for the broker's own requests.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(30);
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;
const ALLOCATE_PRODUCER_IDS_VERSION: i16 = 0;

pub struct ProducerIdManager {
    /// The next id to hand out and the end of the block (exclusive).
    next: Cell<i64>,
    end: Cell<i64>,
    fetching: Semaphore,
    /// The controller last asked, and the connection to it.
    connection: RefCell<Option<(i32, BrokerConnection)>>,
}

impl Default for ProducerIdManager {
    fn default() -> Self {
        Self {
            next: Cell::new(0),
            end: Cell::new(0),
            fetching: Semaphore::new(1),
            connection: RefCell::new(None),
        }
    }
}

impl ProducerIdManager {
    /// The next producer id, asking the controller for a block when this
    /// one is used up (COORDINATOR_LOAD_IN_PROGRESS, retriable, when it
    /// cannot be reached or refuses).
    pub async fn generate_producer_id(&self, broker: &ShardBroker) -> Result<i64, ResponseError> {
        if let Some(id) = self.take() {
            return Ok(id);
        }
        let _permit = self
            .fetching
            .acquire_permit(1)
            .await
            .map_err(|_| ResponseError::CoordinatorLoadInProgress)?;
        // Another request may have fetched a block while this one waited.
        if let Some(id) = self.take() {
            return Ok(id);
        }
        let (start, len) = self.fetch_block(broker).await?;
        self.next.set(start);
        self.end.set(start + i64::from(len));
        self.take().ok_or(ResponseError::CoordinatorLoadInProgress)
    }

    fn take(&self) -> Option<i64> {
        let id = self.next.get();
        (id < self.end.get()).then(|| {
            self.next.set(id + 1);
            id
        })
    }

    async fn fetch_block(&self, broker: &ShardBroker) -> Result<(i64, i32), ResponseError> {
        let image = broker.image();
        let controller = image.controller_id;
        let endpoint = image
            .brokers
            .get(&controller)
            .and_then(|b| b.endpoint(&broker.config.inter_broker_listener_name))
            .ok_or(ResponseError::CoordinatorLoadInProgress)?;
        // Taken out while in use: only the permit holder gets here.
        let mut connection = match self.connection.borrow_mut().take() {
            Some((id, connection)) if id == controller => connection,
            _ => BrokerConnection::new(
                format!("{}:{}", endpoint.host, endpoint.port),
                REQUEST_TIMEOUT,
                MAX_RESPONSE_BYTES,
            ),
        };
        let request = AllocateProducerIdsRequest::default()
            .with_broker_id(BrokerId(broker.config.broker_id))
            .with_broker_epoch(image.broker_epoch);
        let answered: Result<AllocateProducerIdsResponse, String> = call(
            &mut connection,
            ApiKey::AllocateProducerIds,
            ALLOCATE_PRODUCER_IDS_VERSION,
            &broker.config.broker_id.to_string(),
            &request,
        )
        .await;
        *self.connection.borrow_mut() = Some((controller, connection));
        match answered {
            Ok(response) if response.error_code == 0 && response.producer_id_len > 0 => {
                Ok((response.producer_id_start.0, response.producer_id_len))
            }
            Ok(response) => {
                let error = ResponseError::try_from_code(response.error_code);
                tracing::warn!(controller, ?error, "AllocateProducerIds refused");
                Err(ResponseError::CoordinatorLoadInProgress)
            }
            Err(error) => {
                tracing::warn!(controller, %error, "AllocateProducerIds: no answer");
                Err(ResponseError::CoordinatorLoadInProgress)
            }
        }
    }
}
