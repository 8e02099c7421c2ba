//! The metrics endpoint: a minimal HTTP/1.1 server on shard 0 for Prometheus
//! (`GET /metrics`, the text exposition of every shard's metrics) and for
//! probes (`GET /health`, 200 once the broker serves clients). One request per
//! connection, bounded in size and time.

use std::io;
use std::rc::Rc;
use std::time::Duration;

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use super::{render, MetricsSnapshot};
use crate::server::broker::ShardBroker;

/// A request head larger than this is refused.
const MAX_REQUEST_HEAD_BYTES: usize = 8 * 1024;
/// How long a client may take to send its request head.
const REQUEST_TIMEOUT: Duration = Duration::from_secs(10);
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Kafka's name for an error code (`NOT_LEADER_OR_FOLLOWER`), from
/// kafka-protocol's variant name.
pub fn error_name(code: i16) -> String {
    use kafka_protocol::error::ResponseError;
    let camel = match ResponseError::try_from_code(code) {
        None => return "NONE".to_owned(),
        Some(ResponseError::Unknown(code)) => return code.to_string(),
        Some(error) => error.to_string(),
    };
    let mut name = String::with_capacity(camel.len() + 8);
    for (i, c) in camel.chars().enumerate() {
        if c.is_ascii_uppercase() && i > 0 {
            name.push('_');
        }
        name.push(c.to_ascii_uppercase());
    }
    name
}

/// Kafka's name for an API (`Produce`, `ListOffsets`), as its RequestMetrics use.
pub fn api_name(api_key: i16) -> String {
    match kafka_protocol::messages::ApiKey::try_from(api_key) {
        Ok(key) => format!("{key:?}"),
        Err(_) => format!("Unknown{api_key}"),
    }
}

/// Every shard's snapshot, collected over the mesh.
async fn collect(broker: &Rc<ShardBroker>) -> Vec<MetricsSnapshot> {
    let mesh = broker.mesh();
    let mut snapshots = Vec::with_capacity(mesh.nr_shards());
    for shard in 0..mesh.nr_shards() {
        let snapshot = mesh
            .invoke_on(shard, broker, |broker: Rc<ShardBroker>| async move {
                broker.metrics_snapshot()
            })
            .await;
        if let Ok(snapshot) = snapshot {
            snapshots.push(snapshot);
        }
    }
    snapshots
}

pub async fn serve(listener: TcpListener, broker: Rc<ShardBroker>) {
    loop {
        match listener.accept().await {
            Ok(stream) => {
                let broker = broker.clone();
                glommio::spawn_local(async move {
                    if let Err(error) = answer(stream, &broker).await {
                        debug!(%error, "metrics request failed");
                    }
                })
                .detach();
            }
            Err(error) => {
                warn!(%error, "metrics accept failed");
                glommio::timer::sleep(ACCEPT_ERROR_BACKOFF).await;
            }
        }
    }
}

async fn read_head(stream: &mut TcpStream) -> io::Result<Vec<u8>> {
    let mut head = Vec::new();
    let mut chunk = [0u8; 1024];
    while !head.windows(4).any(|w| w == b"\r\n\r\n") {
        if head.len() > MAX_REQUEST_HEAD_BYTES {
            return Err(io::Error::other("request head too large"));
        }
        let n = stream.read(&mut chunk).await?;
        if n == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        head.extend_from_slice(&chunk[..n]);
    }
    Ok(head)
}

async fn answer(mut stream: TcpStream, broker: &Rc<ShardBroker>) -> io::Result<()> {
    let head = futures_lite::future::or(read_head(&mut stream), async {
        glommio::timer::sleep(REQUEST_TIMEOUT).await;
        Err(io::ErrorKind::TimedOut.into())
    })
    .await?;
    let request_line = String::from_utf8_lossy(&head);
    let mut words = request_line.split_whitespace();
    let (method, path) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render(&collect(broker).await, api_name, error_name),
        ),
        ("GET", "/health") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", _) => ("404 Not Found", "text/plain", "not found\n".to_owned()),
        _ => (
            "405 Method Not Allowed",
            "text/plain",
            "GET only\n".to_owned(),
        ),
    };
    let response = format!(
        "HTTP/1.1 {status}\r\nContent-Type: {content_type}\r\nContent-Length: {}\r\nConnection: close\r\n\r\n{body}",
        body.len()
    );
    stream.write_all(response.as_bytes()).await?;
    stream.close().await
}

#[cfg(test)]
mod tests {
    use super::error_name;

    #[test]
    fn error_names_are_kafkas() {
        assert_eq!(error_name(0), "NONE");
        assert_eq!(error_name(6), "NOT_LEADER_OR_FOLLOWER");
        assert_eq!(error_name(1), "OFFSET_OUT_OF_RANGE");
        assert_eq!(error_name(-1), "UNKNOWN_SERVER_ERROR");
        assert_eq!(error_name(9999), "9999");
    }
}
