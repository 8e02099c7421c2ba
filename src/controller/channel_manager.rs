//! Kafka's ControllerChannelManager: one sender task per live broker, each
//! with its own connection to the broker's inter-broker listener. A request is
//! sent again, on a new connection after a backoff, until the broker answers
//! or leaves the cluster.
//!
//! Every UpdateMetadata carries the whole state, so a broker's queue is one
//! slot: a newer request replaces one not yet sent, keeping the deleted
//! topics the older one announced. The controller never waits for a broker,
//! which matters when the broker is its own and waits for the controller's
//! thread to apply the request.

use std::cell::RefCell;
use std::collections::BTreeMap;
use std::rc::Rc;
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
    LEADER_DURING_DELETE,
};
use crate::protocol::ResponseError;

/// Kafka's `controller.socket.timeout.ms`.
const SOCKET_TIMEOUT: Duration = Duration::from_secs(30);
/// Between attempts at a broker that did not answer.
const RETRY_BACKOFF: Duration = Duration::from_millis(100);
/// The largest response the controller reads.
const MAX_RESPONSE_BYTES: usize = 1024 * 1024;

/// The request a broker is to be sent next, if any.
type Pending = Rc<RefCell<Option<UpdateMetadataRequest>>>;

struct BrokerChannel {
    endpoint: EndPoint,
    pending: Pending,
    /// One wake-up at most waits: the sender takes whatever is pending.
    wake: LocalSender<()>,
    sender: JoinHandle<()>,
}

/// `newer`, with the deleted topics `older` announced that `newer` does not
/// mention (a broker must still drop them).
fn superseding(
    older: UpdateMetadataRequest,
    mut newer: UpdateMetadataRequest,
) -> UpdateMetadataRequest {
    for topic in older.topic_states {
        let deleting = topic
            .partition_states
            .iter()
            .all(|state| state.leader.0 == LEADER_DURING_DELETE);
        let mentioned = newer
            .topic_states
            .iter()
            .any(|t| t.topic_name == topic.topic_name);
        if deleting && !mentioned {
            newer.topic_states.push(topic);
        }
    }
    newer
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
            let pending: Pending = Rc::default();
            let (wake, woken) = local_channel::new_bounded(1);
            let sender = glommio::spawn_local(send_loop(
                self.controller_id,
                *id,
                endpoint.clone(),
                pending.clone(),
                woken,
            ))
            .detach();
            self.brokers.insert(
                *id,
                BrokerChannel {
                    endpoint: endpoint.clone(),
                    pending,
                    wake,
                    sender,
                },
            );
        }
    }

    /// Hands each request to its broker's sender, replacing one not yet sent.
    pub fn send_update_metadata(&self, requests: Vec<(i32, UpdateMetadataRequest)>) {
        for (id, request) in requests {
            let Some(channel) = self.brokers.get(&id) else {
                continue;
            };
            let mut pending = channel.pending.borrow_mut();
            *pending = Some(match pending.take() {
                Some(older) => superseding(older, request),
                None => request,
            });
            // Full: a wake-up is already waiting, and it takes this one.
            let _ = channel.wake.try_send(());
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
    pending: Pending,
    woken: LocalReceiver<()>,
) {
    let address = format!("{}:{}", endpoint.host, endpoint.port);
    let client_id = controller_id.to_string();
    let mut connection: Option<TcpStream> = None;
    let mut correlation_id = 0i32;
    while woken.recv().await.is_some() {
        let Some(mut request) = pending.borrow_mut().take() else {
            continue;
        };
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
                    // What came meanwhile goes instead, with what this one deleted.
                    if let Some(newer) = pending.borrow_mut().take() {
                        request = superseding(request, newer);
                    }
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

#[cfg(test)]
mod tests {
    use super::*;
    use crate::protocol::inter_broker::{
        BrokerId, StrBytes, TopicName, UpdateMetadataPartitionState, UpdateMetadataTopicState,
    };

    fn topic(name: &'static str, leader: i32) -> UpdateMetadataTopicState {
        UpdateMetadataTopicState::default()
            .with_topic_name(TopicName(StrBytes::from_static_str(name)))
            .with_partition_states(vec![
                UpdateMetadataPartitionState::default().with_leader(BrokerId(leader))
            ])
    }

    #[test]
    fn a_newer_request_keeps_the_deletions_of_the_one_it_replaces() {
        let older = UpdateMetadataRequest::default().with_topic_states(vec![
            topic("kept", 1),
            topic("gone", LEADER_DURING_DELETE),
            topic("recreated", LEADER_DURING_DELETE),
        ]);
        let newer = UpdateMetadataRequest::default()
            .with_controller_epoch(2)
            .with_topic_states(vec![topic("kept", 2), topic("recreated", 1)]);
        let sent = superseding(older, newer);
        let topics: Vec<(String, i32)> = sent
            .topic_states
            .iter()
            .map(|t| (t.topic_name.to_string(), t.partition_states[0].leader.0))
            .collect();
        assert_eq!(
            topics,
            vec![
                ("kept".into(), 2),
                ("recreated".into(), 1),
                ("gone".into(), LEADER_DURING_DELETE)
            ]
        );
        assert_eq!(sent.controller_epoch, 2);
    }
}
