//! The client listener: every shard binds the same address with SO_REUSEPORT
//! (glommio's TcpListener does), so the kernel spreads connections over shards.
//! A connection is served by the shard that accepted it, one request at a time
//! as Kafka does (it mutes a channel while a request is in flight), so pipelined
//! requests are answered in order and each connection has one request in flight.

use std::cell::Cell;
use std::net::SocketAddr;
use std::rc::Rc;
use std::time::Duration;

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use tracing::{debug, info, warn};

use crate::handlers::{handle_request, Outcome};
use crate::server::broker::ShardBroker;

/// How long the accept loop waits after a failed accept.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);
/// How often an idle connection looks for shutdown.
const STOP_POLL_INTERVAL: Duration = Duration::from_millis(20);

/// This shard's connections, for a shutdown that answers in-flight requests
/// and then closes every connection.
#[derive(Default)]
pub struct InFlight {
    connections: Cell<usize>,
    stopping: Cell<bool>,
}

impl InFlight {
    pub fn stop(&self) {
        self.stopping.set(true);
    }
    /// Open connections; each closes after answering its current request.
    pub fn connections(&self) -> usize {
        self.connections.get()
    }
    async fn stopped(&self) {
        while !self.stopping.get() {
            glommio::timer::sleep(STOP_POLL_INTERVAL).await;
        }
    }
}

pub async fn accept_loop(listener: TcpListener, broker: Rc<ShardBroker>, in_flight: Rc<InFlight>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let broker = broker.clone();
                let in_flight = in_flight.clone();
                in_flight.connections.set(in_flight.connections.get() + 1);
                glommio::spawn_local(async move {
                    let peer = stream.peer_addr().ok();
                    if let Err(reason) = serve_connection(stream, &broker, &in_flight).await {
                        warn!(?peer, shard = broker.shard_id, %reason, "closing connection");
                    }
                    in_flight.connections.set(in_flight.connections.get() - 1);
                })
                .detach();
            }
            Err(error) => {
                // Out of descriptors, say: back off instead of spinning.
                warn!(%error, "accept failed");
                glommio::timer::sleep(ACCEPT_ERROR_BACKOFF).await;
            }
        }
    }
}

pub fn bind(address: SocketAddr) -> std::io::Result<TcpListener> {
    let listener =
        TcpListener::bind(address).map_err(|error| std::io::Error::other(error.to_string()))?;
    info!(%address, "listening");
    Ok(listener)
}

/// Serves one connection until the client closes it or breaks the protocol.
async fn serve_connection(
    mut stream: TcpStream,
    broker: &Rc<ShardBroker>,
    in_flight: &InFlight,
) -> Result<(), String> {
    stream.set_nodelay(true).map_err(|e| e.to_string())?;
    let client_host = stream
        .peer_addr()
        .map(|address| format!("/{}", address.ip()))
        .unwrap_or_default();
    let max_request_bytes = broker.config.socket_request_max_bytes;
    let idle_timeout = Duration::from_millis(broker.config.connections_max_idle_ms);
    loop {
        let mut size = [0u8; 4];
        let next =
            futures_lite::future::or(async { Some(stream.read_exact(&mut size).await) }, async {
                // Shutting down, or idle past `connections.max.idle.ms`.
                futures_lite::future::or(in_flight.stopped(), glommio::timer::sleep(idle_timeout))
                    .await;
                None
            })
            .await;
        match next {
            // Shutting down or idle between requests: close quietly, as Kafka does.
            None => return Ok(()),
            Some(Ok(())) => {}
            // A client hanging up between requests is the normal end.
            Some(Err(error))
                if matches!(
                    error.kind(),
                    std::io::ErrorKind::UnexpectedEof | std::io::ErrorKind::ConnectionReset
                ) =>
            {
                return Ok(())
            }
            Some(Err(error)) => return Err(error.to_string()),
        }
        let size = i32::from_be_bytes(size);
        if size < 0 || size as usize > max_request_bytes {
            return Err(format!("request of {size} bytes is outside [0, socket.request.max.bytes = {max_request_bytes}]"));
        }
        let mut frame = vec![0u8; size as usize];
        stream
            .read_exact(&mut frame)
            .await
            .map_err(|e| format!("truncated request: {e}"))?;
        let outcome = handle_request(broker, &client_host, Bytes::from(frame)).await;
        match outcome {
            Ok(Outcome::Respond(response)) => stream
                .write_all(&response)
                .await
                .map_err(|e| e.to_string())?,
            Ok(Outcome::NoResponse) => {}
            Err(error) => {
                debug!(%error, "request refused");
                return Err(error.to_string());
            }
        }
    }
}
