//! The listeners: for each, every shard has its own socket on the same address
//! (SO_REUSEPORT), so the kernel spreads connections over shards. A connection
//! is served by the shard that accepted it (or, between two requests, handed
//! to another when the broker gathers on one shard or evens out a busy one),
//! one request at a time as
//! Kafka does (it mutes a channel while a request is in flight), so pipelined
//! requests are answered in order and each connection has one request in
//! flight.

pub mod broker_connection;
mod receive_timestamp;
mod request_reader;

use std::cell::{Cell, RefCell};
use std::io;
use std::net::SocketAddr;
use std::os::fd::{AsRawFd, BorrowedFd, FromRawFd, IntoRawFd, OwnedFd, RawFd};
use std::rc::Rc;
use std::time::{Duration, Instant};

use bytes::Bytes;
use futures_lite::AsyncWriteExt;
use glommio::net::{TcpListener, TcpStream};
use glommio::sync::Semaphore;
use shards::log::FileRecords;
use shards::runtime::iovecs::{remaining_iovecs, EMPTY_IOVEC};
use tracing::{debug, info, warn};

use crate::config::ListenerConfig;
use crate::metrics::request_metrics::RequestTimes;
use crate::protocol::{peek_api, FrameError, FramePart};
use request_reader::{ReadError, RequestReader};

/// Scrapers waiting to be accepted by the metrics endpoint.
const METRICS_BACKLOG: i32 = 16;
/// How long a start waits for a port held by a process that just died.
const PORT_RELEASE_WAIT: Duration = Duration::from_secs(3);
const PORT_RETRY_INTERVAL: Duration = Duration::from_millis(50);
/// How long the accept loop waits after a failed accept.
const ACCEPT_ERROR_BACKOFF: Duration = Duration::from_millis(100);

/// Who is at the other end of a connection, for every request on it.
pub struct ConnectionInfo {
    pub listener_name: Rc<str>,
    /// The peer as Kafka prints it (`/127.0.0.1`).
    pub client_host: String,
}

/// What to do after a request.
pub enum Outcome {
    Respond(Bytes),
    /// A frame in parts, ranges of segment files among them (Fetch).
    RespondInParts(Vec<FramePart>),
    /// acks=0 produce: Kafka sends nothing back.
    NoResponse,
}

/// What serves a listener's requests: the network reads frames and sends
/// responses, the dispatcher turns one into the other.
#[allow(async_fn_in_trait)] // called on the shard that owns the connection only
pub trait Dispatcher {
    /// Serves one request; the handler marks its phases on `times`.
    async fn dispatch(
        &self,
        connection: &ConnectionInfo,
        frame: Bytes,
        times: &Rc<RequestTimes>,
    ) -> Result<Outcome, FrameError>;
    /// A request whose API or version is not served: the connection closes.
    fn request_refused(&self, api_key: i16);
    /// Hands a connection's socket to shard `shard` of this broker, to be
    /// served there by its listener of the same name.
    async fn send_connection(&self, shard: usize, listener_name: &str, socket: OwnedFd);
    /// A request answered: its response complete at `responded`, sent from
    /// `send_started` until now.
    fn request_answered(
        &self,
        api_key: i16,
        connection: &ConnectionInfo,
        times: &RequestTimes,
        responded: Instant,
        send_started: Instant,
    );
}

/// Bounds every connection of a listener keeps to.
#[derive(Debug, Clone, Copy)]
pub struct ConnectionLimits {
    /// `socket.request.max.bytes`
    pub max_request_bytes: usize,
    /// `connections.max.idle.ms`
    pub idle_timeout: Duration,
    /// How long a response waits at most before the next request is taken
    /// up (`PendingResponses`): `ringbroker.response.hold.us`.
    pub response_hold: Duration,
}

/// This shard's connections: where they go when the broker gathers its work
/// on another shard or evens out a busy one, and a shutdown that answers
/// in-flight requests and then closes every connection.
pub struct ShardConnections {
    open: Cell<usize>,
    /// Connections moved here from other shards, since start.
    moved_in: Cell<u64>,
    /// The shard every connection here moves to before its next request
    /// (`ShardBalancer`, gathering a lightly loaded broker on one shard).
    send_to: Cell<Option<usize>>,
    /// Shards to hand one connection each, taken by the next connections to
    /// come to a request (`ShardBalancer`, evening out a busy shard's
    /// connections): the busiest come first.
    send_some_to: RefCell<Vec<usize>>,
    /// Never has a permit: a connection waiting between requests wakes when
    /// `stop` closes it, and not before.
    stopping: Semaphore,
}

impl Default for ShardConnections {
    fn default() -> Self {
        Self {
            open: Cell::new(0),
            moved_in: Cell::new(0),
            send_to: Cell::new(None),
            send_some_to: RefCell::new(Vec::new()),
            stopping: Semaphore::new(0),
        }
    }
}

impl ShardConnections {
    pub fn stop(&self) {
        self.stopping.close();
    }
    /// Open connections; each closes after answering its current request.
    pub fn open(&self) -> usize {
        self.open.get()
    }
    pub fn moved_in(&self) -> u64 {
        self.moved_in.get()
    }
    /// From now on each connection here goes to `shard` (None: stays)
    /// between two of its requests.
    pub fn send_to(&self, shard: Option<usize>) {
        self.send_to.set(shard);
    }
    /// From now on the next connections here to come to a request go, one
    /// each, to `shards` (replacing what was asked before); no more than are
    /// open, as some may have closed since they were counted.
    pub fn send_some_to(&self, mut shards: Vec<usize>) {
        shards.truncate(self.open.get());
        *self.send_some_to.borrow_mut() = shards;
    }
    /// Where a connection coming to its next request goes, if anywhere.
    fn destination(&self) -> Option<usize> {
        self.send_to
            .get()
            .or_else(|| self.send_some_to.borrow_mut().pop())
    }
    async fn stopped(&self) {
        let closed = self.stopping.acquire(1).await;
        assert!(closed.is_err(), "the stop semaphore has no permits");
    }
}

/// Checks, before the broker loads anything, that nobody else listens on any
/// listener's address (Kafka's "Address already in use", at once rather than
/// after recovery), and resolves port 0. The sockets are bound once the broker
/// has loaded its partitions (`ListenerSockets::bind`): like Kafka's, a broker
/// still recovering refuses connections instead of holding them.
pub fn probe_listeners(listeners: &[ListenerConfig]) -> Result<Vec<SocketAddr>, String> {
    listeners
        .iter()
        .map(|listener| exclusive_port(listener.address).map_err(bind_failed(listener.address)))
        .collect()
}

/// Kafka's words (SocketServer's Acceptor.openServerSocket).
fn bind_failed(address: SocketAddr) -> impl Fn(io::Error) -> String {
    move |error| format!("Socket server failed to bind to {address}: {error}.")
}

/// Every listener's sockets, one per shard each, and the metrics endpoint's.
pub struct ListenerSockets {
    /// (listener name, one socket per shard)
    listeners: Vec<(String, Vec<OwnedFd>)>,
    metrics: Option<OwnedFd>,
}

impl ListenerSockets {
    /// Binds each listener `nr_shards` times. The shards share a port through
    /// SO_REUSEPORT, which would also let another process share it and take a
    /// share of the clients: so each address is first bound once without it,
    /// which fails while anyone else listens there. SO_REUSEADDR lets a restart
    /// bind over connections left in TIME_WAIT, as Kafka's listener does.
    pub fn bind(
        listeners: &[(String, SocketAddr)],
        nr_shards: usize,
        backlog: u32,
        metrics: Option<SocketAddr>,
    ) -> Result<Self, String> {
        let listeners = listeners
            .iter()
            .map(|(name, address)| {
                exclusive_port(*address).map_err(bind_failed(*address))?;
                let sockets = (0..nr_shards)
                    .map(|_| shard_socket(*address, backlog))
                    .collect::<io::Result<Vec<_>>>()
                    .map_err(bind_failed(*address))?;
                info!(listener = name, %address, "listening");
                Ok((name.clone(), sockets))
            })
            .collect::<Result<Vec<_>, String>>()?;
        let metrics = metrics.map(bind_metrics).transpose()?;
        Ok(Self { listeners, metrics })
    }

    /// One shard's sockets: one per listener, and the metrics endpoint's for
    /// shard 0, which collects from every shard.
    pub fn take(&mut self, shard_id: usize) -> (Vec<(String, OwnedFd)>, Option<OwnedFd>) {
        let sockets = self
            .listeners
            .iter_mut()
            .map(|(name, sockets)| (name.clone(), sockets.pop().expect("one socket per shard")))
            .collect();
        let metrics = if shard_id == 0 {
            self.metrics.take()
        } else {
            None
        };
        (sockets, metrics)
    }
}

/// A socket bound to `address` without SO_REUSEPORT: Err while another socket
/// listens there. A process killed with its sockets in io_uring requests keeps
/// listening for a moment after it is gone (the ring's files are released
/// asynchronously), so "in use" is retried for `PORT_RELEASE_WAIT` before it is
/// believed.
fn bind_exclusive(address: SocketAddr) -> io::Result<socket2::Socket> {
    let deadline = std::time::Instant::now() + PORT_RELEASE_WAIT;
    loop {
        let socket = new_socket(address)?;
        match socket.bind(&address.into()) {
            Ok(()) => return Ok(socket),
            Err(error)
                if error.kind() == io::ErrorKind::AddrInUse
                    && std::time::Instant::now() < deadline =>
            {
                std::thread::sleep(PORT_RETRY_INTERVAL);
            }
            Err(error) => return Err(error),
        }
    }
}

/// Binds `address` exclusively and lets it go: the address with its port
/// resolved, while nobody else listens there.
fn exclusive_port(address: SocketAddr) -> io::Result<SocketAddr> {
    bind_exclusive(address)?
        .local_addr()?
        .as_socket()
        .ok_or_else(|| io::Error::other("not an inet address"))
}

/// The metrics endpoint's socket, bound and listening.
fn bind_metrics(address: SocketAddr) -> Result<OwnedFd, String> {
    let socket = bind_exclusive(address)
        .and_then(|socket| socket.listen(METRICS_BACKLOG).map(|()| socket))
        .map_err(|error| format!("metrics endpoint failed to bind to {address}: {error}."))?;
    info!(%address, "metrics endpoint listening");
    // SAFETY: the descriptor was just taken out of its owner.
    Ok(unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) })
}

fn shard_socket(address: SocketAddr, backlog: u32) -> io::Result<OwnedFd> {
    let socket = new_socket(address)?;
    socket.set_reuse_port(true)?;
    socket.bind(&address.into())?;
    socket.listen(backlog.min(i32::MAX as u32) as i32)?;
    // SAFETY: the descriptor was just taken out of its owner.
    Ok(unsafe { OwnedFd::from_raw_fd(socket.into_raw_fd()) })
}

fn new_socket(address: SocketAddr) -> io::Result<socket2::Socket> {
    let socket = socket2::Socket::new(
        socket2::Domain::for_address(address),
        socket2::Type::STREAM,
        Some(socket2::Protocol::TCP),
    )?;
    socket.set_reuse_address(true)?;
    Ok(socket)
}

/// One listener's side on this shard: what serves the connections it
/// accepts.
pub struct Listener<D> {
    pub name: Rc<str>,
    dispatcher: D,
    limits: ConnectionLimits,
    connections: Rc<ShardConnections>,
}

impl<D: Dispatcher + 'static> Listener<D> {
    pub fn new(
        name: Rc<str>,
        dispatcher: D,
        limits: ConnectionLimits,
        connections: Rc<ShardConnections>,
    ) -> Rc<Self> {
        Rc::new(Self {
            name,
            dispatcher,
            limits,
            connections,
        })
    }

    /// Serves a connection on this shard until it ends or moves to another.
    pub fn serve(self: &Rc<Self>, stream: TcpStream) {
        let listener = self.clone();
        let connections = &listener.connections.open;
        connections.set(connections.get() + 1);
        glommio::spawn_local(async move {
            let peer = stream.peer_addr().ok();
            match serve_connection(stream, &listener).await {
                Ok(Served::Closed) => {}
                Ok(Served::Moving(shard, stream)) => listener.send(shard, stream).await,
                Err(ConnectionError::Peer(error)) => {
                    debug!(?peer, %error, "client disconnected")
                }
                Err(ConnectionError::Protocol(reason)) => {
                    warn!(?peer, %reason, "closing connection")
                }
            }
            let connections = &listener.connections.open;
            connections.set(connections.get() - 1);
        })
        .detach();
    }

    /// A connection between two requests goes to another shard: nothing of
    /// it is buffered here, so its socket is all there is to hand over. If
    /// that shard is stopping, the connection closes (its client reconnects).
    async fn send(&self, shard: usize, stream: TcpStream) {
        // SAFETY: `stream` owns this descriptor until it is dropped below.
        let socket = unsafe { BorrowedFd::borrow_raw(stream.as_raw_fd()) }.try_clone_to_owned();
        drop(stream);
        match socket {
            Ok(socket) => {
                self.dispatcher
                    .send_connection(shard, &self.name, socket)
                    .await
            }
            Err(error) => warn!(%error, "cannot hand a connection to another shard; closing it"),
        }
    }

    /// Serves a connection another shard sent here.
    pub fn adopt(self: &Rc<Self>, socket: OwnedFd) {
        let moved_in = &self.connections.moved_in;
        moved_in.set(moved_in.get() + 1);
        // SAFETY: a connected TCP socket this function now owns.
        self.serve(unsafe { TcpStream::from_raw_fd(socket.into_raw_fd()) });
    }
}

/// Accepts on one listener's socket of this shard, for as long as it runs.
pub async fn accept_loop<D: Dispatcher + 'static>(socket: OwnedFd, listener: Rc<Listener<D>>) {
    // SAFETY: a bound, listening TCP socket this function now owns.
    let accepting = unsafe { TcpListener::from_raw_fd(socket.into_raw_fd()) };
    loop {
        match accepting.accept().await {
            Ok(stream) => listener.serve(stream),
            Err(error) => {
                // Out of descriptors, say: back off instead of spinning.
                warn!(%error, "accept failed");
                glommio::timer::sleep(ACCEPT_ERROR_BACKOFF).await;
            }
        }
    }
}

/// How a connection's service on this shard ended, short of an error.
enum Served {
    /// The client hung up, sat idle too long, or the shard is stopping.
    Closed,
    /// It goes on on another shard.
    Moving(usize, TcpStream),
}

/// Why a connection ended early.
enum ConnectionError {
    /// The socket failed: the client hung up or reset it, an ordinary end.
    Peer(io::Error),
    /// The client broke the protocol: worth an operator's attention.
    Protocol(String),
}

/// SO_RCVLOWAT: the socket reads as readable once `size_bytes` are in.
fn set_receive_low_water(fd: RawFd, size_bytes: usize) -> io::Result<()> {
    let value = libc::c_int::try_from(size_bytes).expect("a frame size is an i32");
    set_socket_option(fd, libc::SO_RCVLOWAT, value)
}

/// setsockopt(2) of an int `option` at SOL_SOCKET.
fn set_socket_option(fd: RawFd, option: libc::c_int, value: libc::c_int) -> io::Result<()> {
    // SAFETY: a plain setsockopt on a descriptor the stream keeps open, with
    // an int that outlives the call.
    let result = unsafe {
        libc::setsockopt(
            fd,
            libc::SOL_SOCKET,
            option,
            (&value as *const libc::c_int).cast(),
            std::mem::size_of::<libc::c_int>() as libc::socklen_t,
        )
    };
    if result < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

fn set_nonblocking(fd: RawFd) -> io::Result<()> {
    // SAFETY: plain fcntl calls on a descriptor the stream keeps open.
    let flags = unsafe { libc::fcntl(fd, libc::F_GETFL) };
    if flags < 0 || unsafe { libc::fcntl(fd, libc::F_SETFL, flags | libc::O_NONBLOCK) } < 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(())
}

/// Byte parts one sendmsg(2) gathers at most; far below the kernel's IOV_MAX.
const MAX_SEND_IOVECS: usize = 64;

/// Sends a frame's parts in order: each run of byte parts with one sendmsg(2)
/// (MSG_MORE while parts follow, so a partition's fields and its records share
/// packets), file ranges with sendfile(2) straight from the page cache.
async fn send_parts(stream: &mut TcpStream, parts: &[FramePart]) -> io::Result<()> {
    let mut start = 0;
    while start < parts.len() {
        if let FramePart::File(records) = &parts[start] {
            send_file(stream, records).await?;
            start += 1;
            continue;
        }
        let end = parts[start..]
            .iter()
            .take(MAX_SEND_IOVECS)
            .position(|part| matches!(part, FramePart::File(_)))
            .map_or(parts.len().min(start + MAX_SEND_IOVECS), |run| start + run);
        send_bytes(stream, &parts[start..end], end < parts.len()).await?;
        start = end;
    }
    Ok(())
}

/// Sends byte parts, gathered; `more` when other parts follow them.
async fn send_bytes(stream: &mut TcpStream, parts: &[FramePart], more: bool) -> io::Result<()> {
    fn bytes(part: &FramePart) -> &[u8] {
        match part {
            FramePart::Bytes(bytes) => bytes,
            FramePart::File(_) => unreachable!("a run of byte parts"),
        }
    }
    assert!(parts.len() <= MAX_SEND_IOVECS);
    let flags = libc::MSG_DONTWAIT | libc::MSG_NOSIGNAL | if more { libc::MSG_MORE } else { 0 };
    let len: usize = parts.iter().map(|part| bytes(part).len()).sum();
    let mut sent = 0;
    while sent < len {
        let mut iovecs = [EMPTY_IOVEC; MAX_SEND_IOVECS];
        let count = remaining_iovecs(parts.iter().map(bytes), sent, &mut iovecs);
        // SAFETY: zeroed is a valid msghdr; the first `count` iovecs cover
        // live slices of `parts`.
        let n = unsafe {
            let mut message: libc::msghdr = std::mem::zeroed();
            message.msg_iov = iovecs.as_mut_ptr();
            message.msg_iovlen = count as _;
            libc::sendmsg(stream.as_raw_fd(), &message, flags)
        };
        if n >= 0 {
            sent += n as usize;
            continue;
        }
        let error = io::Error::last_os_error();
        match error.kind() {
            io::ErrorKind::Interrupted => {}
            // A full socket: glommio's write waits for room, for the rest of
            // the part it stopped in.
            io::ErrorKind::WouldBlock => {
                let rest = iovecs[0];
                // SAFETY: the first iovec covers a live slice of `parts`.
                let rest =
                    unsafe { std::slice::from_raw_parts(rest.iov_base as *const u8, rest.iov_len) };
                stream.write_all(rest).await?;
                sent += rest.len();
            }
            _ => return Err(error),
        }
    }
    Ok(())
}

/// How much of a file range goes through a plain write when the socket is full:
/// glommio offers no wait for room other than a write, so the range's next bytes
/// are that write, and sendfile takes over again once it is through.
const FULL_SOCKET_WRITE_BYTES: usize = 4096;

async fn send_file(stream: &mut TcpStream, records: &FileRecords) -> io::Result<()> {
    let ended = || {
        io::Error::new(
            io::ErrorKind::UnexpectedEof,
            "a segment file ended inside a fetched range",
        )
    };
    let mut sent = 0usize;
    while sent < records.size_bytes() {
        let mut offset = (records.position() + sent as u64) as libc::off_t;
        // SAFETY: both descriptors are open; the kernel advances `offset`.
        let n = unsafe {
            libc::sendfile(
                stream.as_raw_fd(),
                records.as_raw_fd(),
                &mut offset,
                records.size_bytes() - sent,
            )
        };
        match n {
            n if n > 0 => sent += n as usize,
            // The file is shorter than the range: the frame cannot be finished.
            0 => return Err(ended()),
            _ => {
                let error = io::Error::last_os_error();
                match error.kind() {
                    io::ErrorKind::Interrupted => {}
                    io::ErrorKind::WouldBlock => {
                        let mut chunk = [0u8; FULL_SOCKET_WRITE_BYTES];
                        let read = records.read_at(sent, &mut chunk)?;
                        if read == 0 {
                            return Err(ended());
                        }
                        stream.write_all(&chunk[..read]).await?;
                        sent += read;
                    }
                    _ => return Err(error),
                }
            }
        }
    }
    Ok(())
}

/// Responses complete and not yet sent. While the client's next requests are
/// already read and answered at once, their responses wait here and leave
/// together in one sendmsg: on loopback each send also runs the client's
/// receive and wakes it, and librdkafka's pipelined produce requests, each
/// answered with a send of its own, made those sends 8% of the broker's CPU
/// at 10% of Kafka's maximum. A request not answered at once sends what waits
/// first, so no response waits behind a slow one; and none waits longer than
/// `ConnectionLimits::response_hold` behind the appends of the requests after
/// it.
#[derive(Default)]
struct PendingResponses {
    /// (api key, times, when the response was complete), in request order.
    requests: Vec<(i16, Rc<RequestTimes>, Instant)>,
    frames: Vec<FramePart>,
    size_bytes: usize,
}

/// Bounds on what waits: about what a client pipelines (librdkafka's
/// `max.in.flight` is 5 per connection by default, the Java client's 5).
const MAX_PENDING_RESPONSES: usize = 16;
const MAX_PENDING_RESPONSE_BYTES: usize = 64 * 1024;

impl PendingResponses {
    fn push(
        &mut self,
        api_key: i16,
        times: Rc<RequestTimes>,
        responded: Instant,
        frame: impl IntoIterator<Item = FramePart>,
    ) {
        for part in frame {
            self.size_bytes += part.size_bytes();
            self.frames.push(part);
        }
        self.requests.push((api_key, times, responded));
    }

    fn full(&self) -> bool {
        self.requests.len() >= MAX_PENDING_RESPONSES
            || self.size_bytes >= MAX_PENDING_RESPONSE_BYTES
    }

    /// The oldest response has waited `hold` or more by `now`.
    fn held_too_long(&self, now: Instant, hold: Duration) -> bool {
        self.requests
            .first()
            .is_some_and(|(_, _, responded)| now - *responded >= hold)
    }

    /// Sends what waits. It is gone either way: after a failed send the
    /// connection closes, and what it sent of them is not known.
    async fn send<D: Dispatcher>(
        &mut self,
        stream: &mut TcpStream,
        dispatcher: &D,
        connection: &ConnectionInfo,
    ) -> Result<(), ConnectionError> {
        if self.requests.is_empty() {
            return Ok(());
        }
        let send_started = Instant::now();
        let sent = send_parts(stream, &self.frames).await;
        self.frames.clear();
        self.size_bytes = 0;
        let requests = self.requests.drain(..);
        if sent.is_ok() {
            for (api_key, times, responded) in requests {
                dispatcher.request_answered(api_key, connection, &times, responded, send_started);
            }
        }
        sent.map_err(ConnectionError::Peer)
    }
}

/// Serves one connection until the client closes it or breaks the protocol.
async fn serve_connection<D: Dispatcher>(
    mut stream: TcpStream,
    listener: &Listener<D>,
) -> Result<Served, ConnectionError> {
    stream
        .set_nodelay(true)
        .map_err(|e| ConnectionError::Peer(io::Error::other(e.to_string())))?;
    // sendfile must not block the shard on a full socket. glommio's own reads
    // and writes are already nonblocking (MSG_DONTWAIT, then a poll through
    // io_uring), so they are unaffected.
    set_nonblocking(stream.as_raw_fd()).map_err(ConnectionError::Peer)?;
    receive_timestamp::enable(stream.as_raw_fd()).map_err(ConnectionError::Peer)?;
    let connection = ConnectionInfo {
        listener_name: listener.name.clone(),
        client_host: stream
            .peer_addr()
            .map(|address| format!("/{}", address.ip()))
            .unwrap_or_default(),
    };
    let mut pending = PendingResponses::default();
    let served = serve_requests(&mut stream, listener, &connection, &mut pending).await;
    match served {
        Ok(Some(shard)) => {
            assert!(
                pending.requests.is_empty(),
                "a connection moves with nothing to send"
            );
            Ok(Served::Moving(shard, stream))
        }
        ended => {
            // Answered before the end came: as if sent one by one. The
            // connection closes either way.
            let _ = pending
                .send(&mut stream, &listener.dispatcher, &connection)
                .await;
            ended.map(|_| Served::Closed)
        }
    }
}

/// Serves requests until the connection ends (None) or moves to another
/// shard between two of them (that shard).
async fn serve_requests<D: Dispatcher>(
    stream: &mut TcpStream,
    listener: &Listener<D>,
    connection: &ConnectionInfo,
    pending: &mut PendingResponses,
) -> Result<Option<usize>, ConnectionError> {
    let dispatcher = &listener.dispatcher;
    let ConnectionLimits {
        max_request_bytes,
        idle_timeout,
        response_hold,
    } = listener.limits;
    let mut reader = RequestReader::default();
    // A client hanging up between requests is the normal end.
    let hung_up = |error: &io::Error, reader: &RequestReader| {
        reader.is_empty()
            && matches!(
                error.kind(),
                io::ErrorKind::UnexpectedEof | io::ErrorKind::ConnectionReset
            )
    };
    loop {
        let request = match reader.next_request(stream.as_raw_fd(), max_request_bytes) {
            Ok(Some(request)) => request,
            Ok(None) => {
                pending.send(stream, dispatcher, connection).await?;
                if reader.is_empty() {
                    if let Some(shard) = listener.connections.destination() {
                        return Ok(Some(shard));
                    }
                }
                let readable = futures_lite::future::or(
                    async { Some(reader.wait_readable(stream).await) },
                    async {
                        // Shutting down, or idle past `connections.max.idle.ms`.
                        futures_lite::future::or(
                            listener.connections.stopped(),
                            glommio::timer::sleep(idle_timeout),
                        )
                        .await;
                        None
                    },
                )
                .await;
                match readable {
                    // Shutting down or idle: close quietly, as Kafka does.
                    None => return Ok(None),
                    Some(Ok(())) => continue,
                    Some(Err(error)) if hung_up(&error, &reader) => return Ok(None),
                    Some(Err(error)) => return Err(ConnectionError::Peer(error)),
                }
            }
            Err(ReadError::Peer(error)) if hung_up(&error, &reader) => return Ok(None),
            Err(ReadError::Peer(error)) => return Err(ConnectionError::Peer(error)),
            Err(ReadError::Size(size)) => {
                return Err(ConnectionError::Protocol(format!("request of {size} bytes is outside [0, socket.request.max.bytes = {max_request_bytes}]")));
            }
        };
        let received = Instant::now();
        if pending.held_too_long(received, response_hold) {
            pending.send(stream, dispatcher, connection).await?;
        }
        let times = Rc::new(RequestTimes::new(received, request.socket_wait));
        let api_key = peek_api(&request.frame).map_or(-1, |(api_key, _)| api_key);
        let outcome = {
            let mut dispatch =
                std::pin::pin!(dispatcher.dispatch(connection, request.frame, &times));
            match futures_lite::future::poll_once(dispatch.as_mut()).await {
                Some(outcome) => outcome,
                None => {
                    pending.send(stream, dispatcher, connection).await?;
                    dispatch.await
                }
            }
        };
        let responded = Instant::now();
        match outcome {
            Ok(Outcome::Respond(response)) => {
                pending.push(api_key, times, responded, [FramePart::Bytes(response)])
            }
            Ok(Outcome::RespondInParts(parts)) => pending.push(api_key, times, responded, parts),
            Ok(Outcome::NoResponse) => {
                dispatcher.request_answered(api_key, connection, &times, responded, responded)
            }
            Err(error) => {
                if matches!(error, FrameError::Unsupported { .. }) {
                    dispatcher.request_refused(api_key);
                }
                return Err(ConnectionError::Protocol(error.to_string()));
            }
        }
        if pending.full() {
            pending.send(stream, dispatcher, connection).await?;
        }
    }
}

#[cfg(test)]
mod tests {
    use std::io::{Read, Write};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    use super::*;
    use crate::test_support::run_local;

    /// Answers each request with its own bytes; a request of `b"hold"` only
    /// once `release` is set (or after 10 s, for a client that failed before
    /// setting it), one of `b"slow"` at once after 100 ms of work.
    /// Keeps when each response's send started.
    struct Echo {
        release: Arc<AtomicBool>,
        send_started: Rc<RefCell<Vec<Instant>>>,
    }

    impl Dispatcher for Echo {
        async fn dispatch(
            &self,
            _: &ConnectionInfo,
            frame: Bytes,
            _: &Rc<RequestTimes>,
        ) -> Result<Outcome, FrameError> {
            if &frame[..] == b"slow" {
                std::thread::sleep(Duration::from_millis(100));
            }
            if &frame[..] == b"hold" {
                let deadline = Instant::now() + Duration::from_secs(10);
                while !self.release.load(Ordering::SeqCst) && Instant::now() < deadline {
                    glommio::timer::sleep(Duration::from_millis(1)).await;
                }
            }
            Ok(Outcome::Respond(framed(&frame).into()))
        }
        fn request_refused(&self, _: i16) {}
        async fn send_connection(&self, _: usize, _: &str, _: OwnedFd) {
            unreachable!("connections stay")
        }
        fn request_answered(
            &self,
            _: i16,
            _: &ConnectionInfo,
            _: &RequestTimes,
            _: Instant,
            send_started: Instant,
        ) {
            self.send_started.borrow_mut().push(send_started);
        }
    }

    fn framed(body: &[u8]) -> Vec<u8> {
        [&(body.len() as i32).to_be_bytes()[..], body].concat()
    }

    /// Serves one connection with `Echo`, its client writing `requests` at
    /// once (all in the socket before the first read) and then running
    /// `client`; the send start of each response, in order.
    fn serve_echo(
        release: Arc<AtomicBool>,
        response_hold: Duration,
        requests: Vec<u8>,
        client: impl FnOnce(std::net::TcpStream) + Send + 'static,
    ) -> Vec<Instant> {
        let (address_tx, address_rx) = std::sync::mpsc::channel();
        let (written_tx, written_rx) = std::sync::mpsc::channel();
        let client = std::thread::spawn(move || {
            let mut socket = std::net::TcpStream::connect(address_rx.recv().unwrap()).unwrap();
            socket
                .set_read_timeout(Some(Duration::from_secs(5)))
                .unwrap();
            socket.write_all(&requests).unwrap();
            written_tx.send(()).unwrap();
            client(socket);
        });
        let (started_tx, started_rx) = std::sync::mpsc::channel();
        run_local(move || async move {
            let accepting = TcpListener::bind("127.0.0.1:0").unwrap();
            address_tx.send(accepting.local_addr().unwrap()).unwrap();
            let stream = futures_lite::future::or(async { accepting.accept().await.ok() }, async {
                glommio::timer::sleep(Duration::from_secs(10)).await;
                None
            })
            .await
            .expect("the client connects within 10 s");
            written_rx
                .recv_timeout(Duration::from_secs(10))
                .expect("the client writes its requests within 10 s");
            let send_started = Rc::new(RefCell::new(Vec::new()));
            let limits = ConnectionLimits {
                max_request_bytes: 1 << 20,
                idle_timeout: Duration::from_secs(10),
                response_hold,
            };
            let echo = Echo {
                release,
                send_started: send_started.clone(),
            };
            let listener = Listener::new("test".into(), echo, limits, Default::default());
            assert!(matches!(
                serve_connection(stream, &listener).await,
                Ok(Served::Closed)
            ));
            started_tx.send(send_started.take()).unwrap();
        });
        client.join().unwrap();
        started_rx.recv().unwrap()
    }

    fn read_response(socket: &mut std::net::TcpStream) -> Vec<u8> {
        let mut size = [0u8; 4];
        socket.read_exact(&mut size).unwrap();
        let mut body = vec![0u8; i32::from_be_bytes(size) as usize];
        socket.read_exact(&mut body).unwrap();
        body
    }

    /// Requests that come together, each answered at once: their responses
    /// come back in order, sent together.
    #[test]
    fn responses_to_pipelined_requests_leave_together_in_order() {
        let bodies: Vec<Vec<u8>> = vec![b"one".to_vec(), vec![2; 30_000], b"three".to_vec()];
        let requests: Vec<u8> = bodies.iter().flat_map(|body| framed(body)).collect();
        let hold = Duration::from_secs(10);
        let send_started = serve_echo(Arc::default(), hold, requests, move |mut socket| {
            for body in &bodies {
                assert!(read_response(&mut socket) == *body);
            }
        });
        assert_eq!(send_started.len(), 3);
        assert!(
            send_started.iter().all(|at| *at == send_started[0]),
            "one send"
        );
    }

    /// Responses held past `response_hold` by the work of a request after
    /// them leave before the next request is taken up.
    #[test]
    fn held_responses_leave_before_the_next_request_once_held_too_long() {
        let bodies: [&[u8]; 3] = [b"first", b"slow", b"third"];
        let requests: Vec<u8> = bodies.iter().flat_map(|body| framed(body)).collect();
        let send_started = serve_echo(
            Arc::default(),
            Duration::from_millis(20),
            requests,
            move |mut socket| {
                for body in bodies {
                    assert_eq!(read_response(&mut socket), body);
                }
            },
        );
        assert_eq!(send_started.len(), 3);
        assert_eq!(send_started[0], send_started[1], "first and slow together");
        assert!(send_started[2] > send_started[1], "third after them");
    }

    /// A response does not wait behind a request after it that is not
    /// answered at once: the client has it while that request is held.
    #[test]
    fn a_response_does_not_wait_behind_a_request_not_answered_at_once() {
        let release = Arc::new(AtomicBool::new(false));
        let released = release.clone();
        let requests = [framed(b"first"), framed(b"hold")].concat();
        let send_started = serve_echo(
            release,
            Duration::from_secs(10),
            requests,
            move |mut socket| {
                assert_eq!(read_response(&mut socket), b"first");
                released.store(true, Ordering::SeqCst);
                assert_eq!(read_response(&mut socket), b"hold");
            },
        );
        assert_eq!(send_started.len(), 2);
        assert!(send_started[0] < send_started[1]);
    }

    /// Many byte parts, more than one sendmsg gathers and far more than the
    /// socket holds, to a reader that starts late: they arrive whole and in
    /// order, the full socket waited out.
    #[test]
    fn byte_parts_arrive_whole_through_a_full_socket() {
        let parts: Vec<Bytes> = (0..3 * MAX_SEND_IOVECS)
            .map(|index| Bytes::from(vec![index as u8; 1 + index * 97 % 40_000]))
            .collect();
        let expected: Vec<u8> = parts.iter().flat_map(|part| part.to_vec()).collect();
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap();
        let reader = std::thread::spawn(move || {
            let (mut socket, _) = listener.accept().unwrap();
            std::thread::sleep(Duration::from_millis(200));
            let mut received = Vec::new();
            socket.read_to_end(&mut received).unwrap();
            received
        });
        run_local(move || async move {
            let mut stream = TcpStream::connect(address).await.unwrap();
            let socket = socket2::SockRef::from(&stream);
            socket.set_send_buffer_size(4096).unwrap();
            set_nonblocking(stream.as_raw_fd()).unwrap();
            let frame: Vec<FramePart> = parts.into_iter().map(FramePart::Bytes).collect();
            send_parts(&mut stream, &frame).await.unwrap();
        });
        let received = reader.join().unwrap();
        assert_eq!(received.len(), expected.len());
        assert!(received == expected, "the bytes arrive in order");
    }
}
