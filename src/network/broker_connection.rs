//! A connection to another broker's listener, for the requests brokers send
//! each other (the controller's to every broker, a broker's to the
//! controller). Frames in, frames out: the callers encode and decode.

use std::time::Duration;

use bytes::Bytes;
use futures_lite::{AsyncReadExt, AsyncWriteExt};
use glommio::net::TcpStream;

pub struct BrokerConnection {
    address: String,
    stream: Option<TcpStream>,
    correlation_id: i32,
    /// Kafka's `controller.socket.timeout.ms` or `request.timeout.ms`.
    timeout: Duration,
    max_response_bytes: usize,
}

impl BrokerConnection {
    pub fn new(address: String, timeout: Duration, max_response_bytes: usize) -> Self {
        Self {
            address,
            stream: None,
            correlation_id: 0,
            timeout,
            max_response_bytes,
        }
    }

    /// The next request's correlation id.
    pub fn next_correlation_id(&mut self) -> i32 {
        self.correlation_id = self.correlation_id.wrapping_add(1);
        self.correlation_id
    }

    /// Sends one request frame and reads its response frame (after its
    /// length); connects first when not connected, and drops the connection
    /// on any failure so the next attempt connects again.
    pub async fn exchange(&mut self, frame: &[u8]) -> Result<Bytes, String> {
        let answered = self.try_exchange(frame).await;
        if answered.is_err() {
            self.stream = None;
        }
        answered
    }

    async fn try_exchange(&mut self, frame: &[u8]) -> Result<Bytes, String> {
        let stream = match self.stream.as_mut() {
            Some(stream) => stream,
            None => {
                let stream = TcpStream::connect(&self.address)
                    .await
                    .map_err(|e| format!("{}: {e}", self.address))?;
                stream
                    .set_read_timeout(Some(self.timeout))
                    .map_err(|e| e.to_string())?;
                stream
                    .set_write_timeout(Some(self.timeout))
                    .map_err(|e| e.to_string())?;
                self.stream.insert(stream)
            }
        };
        stream.write_all(frame).await.map_err(|e| e.to_string())?;
        let mut size = [0u8; 4];
        stream
            .read_exact(&mut size)
            .await
            .map_err(|e| e.to_string())?;
        let size = i32::from_be_bytes(size);
        if size < 0 || size as usize > self.max_response_bytes {
            return Err(format!("a {size}-byte response"));
        }
        let mut body = vec![0u8; size as usize];
        stream
            .read_exact(&mut body)
            .await
            .map_err(|e| e.to_string())?;
        Ok(Bytes::from(body))
    }
}
