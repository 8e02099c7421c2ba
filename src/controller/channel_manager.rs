//! Kafka's ControllerChannelManager: one bounded queue and one sender task
//! per live broker, each with its own connection to the broker's
//! inter-broker listener. A request is sent again, on a new connection after a
//! backoff, until the broker answers or leaves the cluster.

use std::collections::BTreeMap;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::channels::local_channel::{self, LocalReceiver, LocalSender};
use glommio::net::TcpStream;
use glommio::task::JoinHandle;
use tracing::{debug, warn};

use crate::metadata::image::EndPoint;
use crate::protocol::inter_broker::{
    decode_update_metadata_response, encode_update_metadata_request, UpdateMetadataRequest,
};
use crate::protocol::ResponseError;

/// Requests that may wait for one broker: a slow broker holds back only its
/// own queue, and a full one makes the controller wait.
const BROKER_QUEUE_CAPACITY: usize = 64;
/// Kafka's `controller.socket.timeout.ms`.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);
/// Between attempts at a broker that did not answer.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// The largest response the controller reads.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

struct BrokerChannel {
    endpoint: EndPoint,
    queue: LocalSender<UpdateMetadataRequest>,
    sender: JoinHandle<()>,
}

pub struct ControllerChannelManager {
    controller_id: i32,
    brokers: BTreeMap<i32, BrokerChannel>,
}

impl ControllerChannelManager {
    pub fn new(controller_id: i32) -> Self {
        Self {
            controller_id,
            brokers: BTreeMap::new(),
        }
    }

    /// Keeps one channel per broker of `live` (its inter-broker endpoint):
    /// new brokers get one, gone or moved ones lose theirs.
    pub fn set_brokers(&mut self, live: &BTreeMap<i32, EndPoint>) {
        let gone: Vec<i32> = self
            .brokers
            .iter()
            .filter(|(id, channel)| live.get(id) != Some(&channel.endpoint))
            .map(|(id, _)| *id)
            .collect();
        for id in gone {
            let channel = self.brokers.remove(&id).expect("listed");
            channel.sender.cancel();
        }
        for (id, endpoint) in live {
            if self.brokers.contains_key(id) {
                continue;
            }
            let (queue, requests) = local_channel::new_bounded(BROKER_QUEUE_CAPACITY);
            let sender = glommio::spawn_local(send_loop(
                self.controller_id,
                *id,
                endpoint.clone(),
                requests,
            ))
            .detach();
            self.brokers.insert(
                *id,
                BrokerChannel {
                    endpoint: endpoint.clone(),
                    queue,
                    sender,
                },
            );
        }
    }

    /// Queues each request for its broker.
    pub async fn send_update_metadata(&self, requests: Vec<(i32, UpdateMetadataRequest)>) {
        for (id, request) in requests {
            if let Some(channel) = self.brokers.get(&id) {
                if channel.queue.send(request).await.is_err() {
                    warn!(broker = id, "the channel to the broker closed");
                }
            }
        }
    }

    /// Stops every sender (this broker is no longer the controller).
    pub fn shutdown(&mut self) {
        for (_, channel) in std::mem::take(&mut self.brokers) {
            channel.sender.cancel();
        }
    }
}

/// One broker's sender: each request in turn, until the broker answers it.
async fn send_loop(
    controller_id: i32,
    broker: i32,
    endpoint: EndPoint,
    requests: LocalReceiver<UpdateMetadataRequest>,
) {
    let address = format!("{}:{}", endpoint.host, endpoint.port);
    let client_id = controller_id.to_string();
    let mut connection: Option<TcpStream> = None;
    let mut correlation_id = 0i32;
    while let Some(request) = requests.recv().await {
        loop {
            correlation_id = correlation_id.wrapping_add(1);
            let frame = encode_update_metadata_request(correlation_id, &client_id, &request)
                .expect("the controller's requests encode");
            let answered = match connection.as_mut() {
                Some(stream) => exchange(stream, &frame, correlation_id).await,
                None => match TcpStream::connect(&address).await {
                    Ok(stream) => {
                        let stream = connection.insert(stream);
                        let _ = stream.set_read_timeout(Some(SOCKET_TIMEOUT));
                        exchange(stream, &frame, correlation_id).await
                    }
                    Err(error) => Err(error.to_string()),
                },
            };
            match answered {
                Ok(0) => break,
                Ok(code) => {
                    let error = ResponseError::try_from_code(code);
                    warn!(broker, ?error, "UpdateMetadata refused");
                    break;
                }
                Err(error) => {
                    debug!(broker, address, %error, "cannot reach the broker; retrying");
                    connection = None;
                    glommio::timer::sleep(RETRY_BACKOFF).await;
                }
            }
        }
    }
}

/// Sends one request and reads its answer: the response's error code.
async fn exchange(
    stream: &mut TcpStream,
    frame: &Bytes,
    correlation_id: i32,
) -> Result<i16, String> {
    stream.write_all(frame).await.map_err(|e| e.to_string())?;
    let mut size = [0u8; 4];
    stream
        .read_exact(&mut size)
        .await
        .map_err(|e| e.to_string())?;
    let size = i32::from_be_bytes(size);
    if size < 0 || size as usize > MAX_RESPONSE_BYTES {
        return Err(format!("a {size}-byte response"));
    }
    let mut body = vec![0u8; size as usize];
    stream
        .read_exact(&mut body)
        .await
        .map_err(|e| e.to_string())?;
    let (answered, response) = decode_update_metadata_response(Bytes::from(body))?;
    if answered != correlation_id {
        return Err(format!("answer to {answered}, expected {correlation_id}"));
    }
    Ok(response.error_code)
}
