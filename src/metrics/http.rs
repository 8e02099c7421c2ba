//! The metrics endpoint: a minimal HTTP/1.1 server on shard 0 for Prometheus
//! (`GET /metrics`, the text exposition of every shard's metrics), for
//! probes (`GET /health`, 200 once the broker serves clients) and for a look
//! at a tail (`GET /slow_requests?since_ms=<epoch ms>&limit=<n>&api=<name>`:
//! the slowest requests since then as JSON, each with what the shards were
//! doing meanwhile). One request per connection, bounded in size and time.

use std::io;
use std::rc::Rc;
use std::time::{Duration, Instant};

use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::{TcpListener, TcpStream};
use tracing::{debug, warn};

use shards::log::wall_clock_ms;

use super::slow_requests::{self, ShardSlowRequests};
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

/// Requests listed by `/slow_requests` unless `limit` says otherwise.
const DEFAULT_SLOW_REQUESTS: usize = 20;

/// Every shard's slow requests since `since_ms` and its activities.
async fn collect_slow_requests(broker: &Rc<ShardBroker>, since_ms: i64) -> Vec<ShardSlowRequests> {
    let mesh = broker.mesh();
    let mut shards = Vec::with_capacity(mesh.nr_shards());
    for shard in 0..mesh.nr_shards() {
        let listed = mesh
            .invoke_on(shard, broker, move |broker: Rc<ShardBroker>| async move {
                broker.slow_requests(since_ms)
            })
            .await;
        if let Ok(listed) = listed {
            shards.push(listed);
        }
    }
    shards
}

/// What `/slow_requests` lists: since when, how many, of which API.
struct SlowRequestQuery<'a> {
    since_ms: i64,
    limit: usize,
    api: Option<&'a str>,
}

/// `since_ms`, `limit` and `api` (Kafka's name) from a query string (`a=1&b=2`).
fn slow_request_query(query: &str) -> SlowRequestQuery<'_> {
    let mut wanted = SlowRequestQuery {
        since_ms: 0,
        limit: DEFAULT_SLOW_REQUESTS,
        api: None,
    };
    for pair in query.split('&') {
        match pair.split_once('=') {
            Some(("since_ms", value)) => wanted.since_ms = value.parse().unwrap_or(0),
            Some(("limit", value)) => wanted.limit = value.parse().unwrap_or(DEFAULT_SLOW_REQUESTS),
            Some(("api", value)) => wanted.api = Some(value),
            _ => {}
        }
    }
    wanted
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
    let (method, target) = (words.next().unwrap_or(""), words.next().unwrap_or(""));
    let (path, query) = target.split_once('?').unwrap_or((target, ""));
    let (status, content_type, body) = match (method, path) {
        ("GET", "/metrics") => (
            "200 OK",
            "text/plain; version=0.0.4; charset=utf-8",
            render(&collect(broker).await, api_name, error_name),
        ),
        ("GET", "/health") => ("200 OK", "text/plain", "ok\n".to_owned()),
        ("GET", "/slow_requests") => {
            let wanted = slow_request_query(query);
            let mut shards = collect_slow_requests(broker, wanted.since_ms).await;
            if let Some(api) = wanted.api {
                for shard in &mut shards {
                    shard.requests.retain(|r| api_name(r.api_key) == api);
                }
            }
            let (now, now_wall_ms) = (Instant::now(), wall_clock_ms());
            let listing = slow_requests::render(&shards, wanted.limit, now, now_wall_ms, api_name);
            ("200 OK", "application/json", format!("{listing}\n"))
        }
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
