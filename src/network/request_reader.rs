//! A connection's requests as they come off its socket. Each read takes what
//! the socket holds, up to a read-ahead, so requests a client pipelined come
//! in with one recvmsg between them rather than a size and a body each (at
//! 10% of Kafka's maximum, librdkafka's produce requests came three at a
//! time, and the reads were over 40% of the shard's syscalls). A request
//! that fits in the read-ahead is copied out of it into a buffer of its own
//! size: handlers keep slices of requests (a group member's metadata, say),
//! and such a slice must hold its request alone, not a read-ahead. A larger
//! request is read in place into a buffer of its size, never zeroed: from its
//! first byte when the wait for it saw its size field, otherwise after a copy
//! of what the read-ahead took of it.

use std::io;
use std::os::fd::{AsRawFd, RawFd};
use std::time::{Duration, Instant};

use bytes::Bytes;
use glommio::net::TcpStream;

use super::{receive_timestamp, set_receive_low_water};

/// What a read asks for when no request larger than it is under way.
const READ_AHEAD_BYTES: usize = 64 * 1024;
/// A request's size field, before it.
const SIZE_FIELD_BYTES: usize = 4;

/// A request read whole: its frame (the size field left out), and how long
/// its first bytes waited after the kernel had them before the broker took
/// the request up (None without the kernel's timestamp): in the socket, or
/// behind the requests before it in a read.
pub struct Request {
    pub frame: Bytes,
    pub socket_wait: Option<Duration>,
}

/// Why no request came.
pub enum ReadError {
    /// The socket failed or the client hung up.
    Peer(io::Error),
    /// A size outside [0, `max_request_bytes`].
    Size(i32),
}

#[derive(Default)]
pub struct RequestReader {
    /// Bytes read; those before `start` are handed out, the rest are the
    /// start of the next requests.
    buffer: Vec<u8>,
    start: usize,
    /// How long the first bytes after `start` had waited when the broker
    /// first looked for their request (`head_seen`).
    head_wait: Option<Duration>,
    head_seen: bool,
    /// When the kernel had the bytes of the last read, by its timestamp.
    last_read_arrived: Option<Instant>,
    /// SO_RCVLOWAT is set to the rest of a large request.
    low_water_raised: bool,
    /// The size field of the next request, as the wait for it saw it
    /// (`wait_readable`), until the read that takes it.
    peeked_size: Option<i32>,
    /// The last read took less than it had room for, so the socket held no
    /// more: the next read waits first, rather than find nothing (a
    /// recvmsg per request at low load).
    socket_drained: bool,
}

impl RequestReader {
    /// Between two requests: nothing of the next one read yet.
    pub fn is_empty(&self) -> bool {
        self.start == self.buffer.len()
    }

    /// The next request, if the buffer and the socket hold all of it; None
    /// when more has to come first, or the socket was empty when last read
    /// (`wait_readable`). Does not wait.
    pub fn next_request(
        &mut self,
        fd: RawFd,
        max_request_bytes: usize,
    ) -> Result<Option<Request>, ReadError> {
        if !self.head_seen && !self.is_empty() {
            // Read along with the request before it, so in the last read:
            // that request was whole before any later one.
            self.head_wait = self
                .last_read_arrived
                .map(|arrived| Instant::now().saturating_duration_since(arrived));
            self.head_seen = true;
        }
        loop {
            if let Some(request) = self.split_request(fd, max_request_bytes)? {
                return Ok(Some(request));
            }
            if self.socket_drained {
                return Ok(None);
            }
            match self.read(fd, max_request_bytes) {
                Ok(()) => {}
                Err(error) if error.kind() == io::ErrorKind::WouldBlock => return Ok(None),
                Err(error) if error.kind() == io::ErrorKind::Interrupted => {}
                Err(error) => return Err(ReadError::Peer(error)),
            }
        }
    }

    /// Waits until the socket has more: the rest of a large request, not
    /// its next segment (SO_RCVLOWAT, which the kernel caps at half the
    /// receive buffer; a 200 KiB produce used to wake the shard once per
    /// segment). Between requests the buffer goes, so an idle connection
    /// holds no memory.
    pub async fn wait_readable(&mut self, stream: &TcpStream) -> io::Result<()> {
        if self.is_empty() {
            assert_eq!(self.start, 0, "an emptied buffer starts over");
            self.buffer = Vec::new();
        }
        if let Some(rest) = self.rest_of_request().filter(|rest| *rest > 1) {
            set_receive_low_water(stream.as_raw_fd(), rest)?;
            self.low_water_raised = true;
        }
        // glommio has no other wait: a peek leaves the bytes for the read,
        // and their timestamp with them. Between requests it takes the next
        // one's size field, when that much has come.
        let mut head = [0u8; SIZE_FIELD_BYTES];
        match stream.peek(&mut head).await? {
            0 => Err(io::ErrorKind::UnexpectedEof.into()),
            peeked => {
                self.peeked(&head[..peeked]);
                Ok(())
            }
        }
    }

    /// What a wait's peek saw of the socket's first bytes.
    fn peeked(&mut self, head: &[u8]) {
        self.socket_drained = false;
        if let (Ok(size_field), true) = (head.try_into(), self.is_empty()) {
            self.peeked_size = Some(i32::from_be_bytes(size_field));
        }
    }

    fn unread(&self) -> &[u8] {
        &self.buffer[self.start..]
    }

    /// The size of the request at the head, once it is read.
    fn head_size(&self) -> Option<i32> {
        let field = self.unread().get(..SIZE_FIELD_BYTES)?;
        Some(i32::from_be_bytes(field.try_into().expect("four bytes")))
    }

    /// Bytes still to come of the request at the head, once its size is
    /// read (and checked).
    fn rest_of_request(&self) -> Option<usize> {
        let size = usize::try_from(self.head_size()?).expect("a checked size");
        Some((SIZE_FIELD_BYTES + size).saturating_sub(self.unread().len()))
    }

    fn split_request(
        &mut self,
        fd: RawFd,
        max_request_bytes: usize,
    ) -> Result<Option<Request>, ReadError> {
        let Some(size) = self.head_size() else {
            return Ok(None);
        };
        let size = match usize::try_from(size) {
            Ok(checked) if checked <= max_request_bytes => checked,
            _ => return Err(ReadError::Size(size)),
        };
        let end = self.start + SIZE_FIELD_BYTES + size;
        if self.buffer.len() < end {
            return Ok(None);
        }
        let frame = if self.start == 0 && self.buffer.capacity() == end {
            // A buffer of its own: handed out as it is.
            Bytes::from(std::mem::take(&mut self.buffer)).slice(SIZE_FIELD_BYTES..)
        } else {
            let frame = Bytes::copy_from_slice(&self.buffer[self.start + SIZE_FIELD_BYTES..end]);
            self.start = end;
            frame
        };
        if self.is_empty() {
            self.buffer.clear();
            self.start = 0;
        }
        let socket_wait = self.head_wait.take();
        self.head_seen = false;
        if self.low_water_raised {
            // The next wait is for a request's size, which may be all that comes.
            set_receive_low_water(fd, 1).map_err(ReadError::Peer)?;
            self.low_water_raised = false;
        }
        Ok(Some(Request { frame, socket_wait }))
    }

    /// One read of what the socket holds, into the buffer's room: a
    /// read-ahead's worth, or the whole of a larger request under way.
    fn read(&mut self, fd: RawFd, max_request_bytes: usize) -> io::Result<()> {
        let peeked_request_bytes = self
            .peeked_size
            .take()
            .and_then(|size| usize::try_from(size).ok())
            .filter(|size| *size <= max_request_bytes)
            .map(|size| SIZE_FIELD_BYTES + size);
        assert!(
            peeked_request_bytes.is_none() || self.is_empty(),
            "a size is peeked between requests, and taken by the next read"
        );
        let rest = self.rest_of_request();
        let request_bytes = rest.map(|rest| self.unread().len() + rest);
        let room = self.buffer.capacity() - self.buffer.len();
        match (request_bytes, peeked_request_bytes) {
            // A large request not yet begun: read into its own buffer from
            // the start, nothing of the next request with it.
            (None, Some(bytes)) if bytes > READ_AHEAD_BYTES => {
                assert_eq!(self.start, 0, "an emptied buffer starts over");
                self.buffer = Vec::with_capacity(bytes);
            }
            (Some(bytes), _)
                if bytes > READ_AHEAD_BYTES && self.buffer.capacity() - self.start < bytes =>
            {
                let mut own = Vec::with_capacity(bytes);
                own.extend_from_slice(self.unread());
                (self.buffer, self.start) = (own, 0);
            }
            // Less room than the head still needs: what is handed out goes.
            _ if room < rest.unwrap_or(SIZE_FIELD_BYTES) => {
                self.buffer.drain(..self.start);
                self.start = 0;
                self.buffer
                    .reserve_exact(READ_AHEAD_BYTES.saturating_sub(self.buffer.len()));
            }
            _ => {}
        }
        let was_empty = self.is_empty();
        let asked_bytes = self.buffer.capacity() - self.buffer.len();
        let (read, waited) = receive_timestamp::recv(fd, self.buffer.spare_capacity_mut())?;
        if read == 0 {
            return Err(io::ErrorKind::UnexpectedEof.into());
        }
        self.socket_drained = read < asked_bytes;
        // SAFETY: the kernel initialised `read` more bytes of the spare room.
        unsafe { self.buffer.set_len(self.buffer.len() + read) };
        self.last_read_arrived = waited.and_then(|waited| Instant::now().checked_sub(waited));
        if was_empty {
            self.head_wait = waited;
            self.head_seen = true;
        }
        Ok(())
    }
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};

    use super::*;

    const MAX_REQUEST_BYTES: usize = 1 << 20;

    fn framed(body: &[u8]) -> Vec<u8> {
        [&(body.len() as i32).to_be_bytes()[..], body].concat()
    }

    /// A connected pair: the client's end, and the server's, nonblocking.
    fn connected() -> (TcpStream, TcpStream) {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        server.set_nonblocking(true).unwrap();
        (client, server)
    }

    /// The first bytes in the server's socket, once at least `at_least`
    /// have come (until `deadline`), and how many of them there are.
    fn peek_head(
        server: &TcpStream,
        at_least: usize,
        deadline: Instant,
    ) -> ([u8; SIZE_FIELD_BYTES], usize) {
        let mut head = [0u8; SIZE_FIELD_BYTES];
        loop {
            let peeked = server.peek(&mut head).unwrap_or(0);
            if peeked >= at_least {
                return (head, peeked);
            }
            assert!(Instant::now() < deadline, "nothing came in time");
            std::thread::sleep(Duration::from_millis(1));
        }
    }

    /// The next request, for up to 5 s, waiting as `wait_readable` does
    /// but by polling a peek.
    fn next(reader: &mut RequestReader, server: &TcpStream) -> Result<Request, ReadError> {
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            if let Some(request) = reader.next_request(server.as_raw_fd(), MAX_REQUEST_BYTES)? {
                return Ok(request);
            }
            assert!(Instant::now() < deadline, "no request in 5 s");
            let (head, peeked) = peek_head(server, 1, deadline);
            reader.peeked(&head[..peeked]);
        }
    }

    /// The size field at the head of the server's socket, once it has come
    /// (up to 5 s).
    fn size_field_in(server: &TcpStream) -> [u8; SIZE_FIELD_BYTES] {
        peek_head(
            server,
            SIZE_FIELD_BYTES,
            Instant::now() + Duration::from_secs(5),
        )
        .0
    }

    /// Requests cut anywhere, their size fields too, smaller and larger than
    /// a read-ahead, come whole and in order.
    #[test]
    fn requests_come_whole_however_they_are_cut() {
        let bodies: Vec<Vec<u8>> = [0, 5, READ_AHEAD_BYTES + 4_464, 3, 3 * READ_AHEAD_BYTES]
            .iter()
            .enumerate()
            .map(|(index, size)| (0..*size).map(|at| (at * 31 + index) as u8).collect())
            .collect();
        let stream: Vec<u8> = bodies.iter().flat_map(|body| framed(body)).collect();
        let (mut client, server) = connected();
        let writer = std::thread::spawn(move || {
            let mut cut = 0;
            for (index, piece) in [1, 2, 6, 7, 11, 5_000, 90_000, 2, 1]
                .iter()
                .cycle()
                .enumerate()
            {
                let end = (cut + piece).min(stream.len());
                client.write_all(&stream[cut..end]).unwrap();
                cut = end;
                if cut == stream.len() {
                    return client;
                }
                if index % 3 == 0 {
                    std::thread::sleep(Duration::from_millis(2));
                }
            }
            unreachable!("the cycle ends with the stream")
        });
        let mut reader = RequestReader::default();
        for body in &bodies {
            let request = next(&mut reader, &server).ok().expect("a request");
            assert!(request.frame == body[..], "{} bytes", body.len());
        }
        assert!(reader.is_empty());
        drop(writer.join().unwrap());
    }

    /// A large request whose size field the wait saw is read alone into a
    /// buffer of its size, and the request behind it after it.
    #[test]
    fn a_large_request_seen_by_the_wait_is_read_alone_into_its_own_buffer() {
        let large: Vec<u8> = (0..3 * READ_AHEAD_BYTES).map(|at| at as u8).collect();
        let (mut client, server) = connected();
        client
            .write_all(&[framed(&large), framed(b"next")].concat())
            .unwrap();
        let head = size_field_in(&server);
        let mut reader = RequestReader::default();
        reader.peeked(&head);
        let fd = server.as_raw_fd();
        reader.read(fd, MAX_REQUEST_BYTES).unwrap();
        let request_bytes = SIZE_FIELD_BYTES + large.len();
        assert_eq!(reader.buffer.capacity(), request_bytes, "its own buffer");
        let request = next(&mut reader, &server).ok().expect("the large request");
        assert!(request.frame == large[..]);
        let request = next(&mut reader, &server).ok().expect("the next request");
        assert_eq!(&request.frame[..], b"next");
        // A size outside the bound seen by the wait gets no buffer of its
        // size, and is refused by the read.
        let (mut client, server) = connected();
        let size = MAX_REQUEST_BYTES as i32 + 1;
        client.write_all(&size.to_be_bytes()).unwrap();
        let mut reader = RequestReader::default();
        reader.peeked(&size_field_in(&server));
        reader.read(server.as_raw_fd(), MAX_REQUEST_BYTES).unwrap();
        assert!(
            reader.buffer.capacity() <= READ_AHEAD_BYTES,
            "the read-ahead"
        );
        assert!(matches!(
            next(&mut reader, &server),
            Err(ReadError::Size(refused)) if refused == size
        ));
    }

    /// A read that emptied the socket is not followed by another before a
    /// wait: what came meanwhile is read after the wait's peek.
    #[test]
    fn a_drained_socket_is_read_again_only_after_a_wait() {
        let (mut client, server) = connected();
        client.write_all(&framed(b"first")).unwrap();
        let mut reader = RequestReader::default();
        assert_eq!(
            &next(&mut reader, &server).ok().expect("first").frame[..],
            b"first"
        );
        client.write_all(&framed(b"second")).unwrap();
        let head = size_field_in(&server);
        let fd = server.as_raw_fd();
        assert!(matches!(
            reader.next_request(fd, MAX_REQUEST_BYTES),
            Ok(None)
        ));
        reader.peeked(&head);
        match reader.next_request(fd, MAX_REQUEST_BYTES) {
            Ok(Some(request)) => assert_eq!(&request.frame[..], b"second"),
            _ => panic!("the second request after the wait"),
        }
    }

    /// A size below 0 or above `socket.request.max.bytes` ends the reading.
    #[test]
    fn a_size_outside_the_bound_is_refused() {
        for size in [-1, MAX_REQUEST_BYTES as i32 + 1] {
            let (mut client, server) = connected();
            client.write_all(&size.to_be_bytes()).unwrap();
            match next(&mut RequestReader::default(), &server) {
                Err(ReadError::Size(refused)) => assert_eq!(refused, size),
                _ => panic!("a size of {size} is read"),
            }
        }
    }

    /// A request read along with the one before it waited, by its socket
    /// wait, until the broker took it up, not only until that read.
    #[test]
    fn a_request_read_behind_another_waited_until_taken_up() {
        let (mut client, server) = connected();
        receive_timestamp::enable(server.as_raw_fd()).unwrap();
        let mut reader = RequestReader::default();
        // The kernel turns timestamping on a moment later: until the first
        // request carries a timestamp, the two are sent again.
        let deadline = Instant::now() + Duration::from_secs(5);
        loop {
            client
                .write_all(&[framed(b"first"), framed(b"second")].concat())
                .unwrap();
            std::thread::sleep(Duration::from_millis(20));
            let first = next(&mut reader, &server).ok().expect("first");
            std::thread::sleep(Duration::from_millis(30));
            let second = next(&mut reader, &server).ok().expect("second");
            assert_eq!(
                (&first.frame[..], &second.frame[..]),
                (&b"first"[..], &b"second"[..])
            );
            if let (Some(first), Some(second)) = (first.socket_wait, second.socket_wait) {
                assert!(first >= Duration::from_millis(20), "{first:?}");
                assert!(second >= first + Duration::from_millis(30), "{second:?}");
                return;
            }
            assert!(Instant::now() < deadline, "no timestamp");
        }
    }
}
