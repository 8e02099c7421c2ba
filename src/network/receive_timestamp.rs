//! How long a request's first bytes sat in the socket before the shard read
//! them: the kernel's receive timestamp (SO_TIMESTAMPNS) of the bytes read,
//! against the clock at the read. Kafka's request phases start once a
//! request is read, so a request waiting in the socket for its shard (busy
//! with other connections, or waiting for a CPU) or for the request before
//! it on its connection shows in none of them; from the client it looks like
//! the kernel's.
//!
//! TCP keeps one timestamp per buffer and merges later arrivals into a
//! buffer still queued, moving its timestamp to theirs: with more bytes
//! arriving behind a request, the wait read is from the last of them, so it
//! is a lower bound.

use std::io;
use std::mem::MaybeUninit;
use std::os::fd::RawFd;
use std::time::{Duration, SystemTime};

/// Asks the kernel to timestamp what `fd` receives. The kernel turns
/// timestamping on for its receive path a moment after the first socket asks
/// (deferred work); until then, reads carry no timestamp or the read's own time.
pub fn enable(fd: RawFd) -> io::Result<()> {
    super::set_socket_option(fd, libc::SO_TIMESTAMPNS, 1)
}

/// Reads what `fd` has, up to `buf.len()` bytes, without waiting
/// (WouldBlock when it has nothing), and how long ago the kernel received
/// them: None without a timestamp, or with one ahead of the clock (the wall
/// clock was set back since).
pub fn recv(fd: RawFd, buf: &mut [MaybeUninit<u8>]) -> io::Result<(usize, Option<Duration>)> {
    // Room for one control message holding a timespec, aligned as cmsghdr.
    let mut control = [0u64; 8];
    let mut iovec = libc::iovec {
        iov_base: buf.as_mut_ptr().cast(),
        iov_len: buf.len(),
    };
    // SAFETY: zeroed is a valid msghdr; the iovec and the control buffer
    // outlive the call, and the kernel writes within their lengths.
    let (read, message) = unsafe {
        let mut message: libc::msghdr = std::mem::zeroed();
        message.msg_iov = &mut iovec;
        message.msg_iovlen = 1;
        message.msg_control = control.as_mut_ptr().cast();
        message.msg_controllen = size_of_val(&control) as _;
        let read = libc::recvmsg(fd, &mut message, libc::MSG_DONTWAIT);
        (read, message)
    };
    if read < 0 {
        return Err(io::Error::last_os_error());
    }
    let now = SystemTime::now();
    let mut received = None;
    // SAFETY: the control messages are the kernel's, within msg_controllen
    // of `control`; the CMSG macros walk them.
    unsafe {
        let mut header = libc::CMSG_FIRSTHDR(&message);
        while !header.is_null() {
            if (*header).cmsg_level == libc::SOL_SOCKET
                && (*header).cmsg_type == libc::SCM_TIMESTAMPNS
            {
                received = Some(std::ptr::read_unaligned(
                    libc::CMSG_DATA(header).cast::<libc::timespec>(),
                ));
            }
            header = libc::CMSG_NXTHDR(&message, header);
        }
    }
    // The kernel's timestamp is the wall clock's (CLOCK_REALTIME).
    let waited = received.and_then(|at: libc::timespec| {
        let at = SystemTime::UNIX_EPOCH + Duration::new(at.tv_sec as u64, at.tv_nsec as u32);
        now.duration_since(at).ok()
    });
    Ok((read as usize, waited))
}

#[cfg(test)]
mod tests {
    use std::io::Write;
    use std::net::{TcpListener, TcpStream};
    use std::os::fd::AsRawFd;
    use std::time::Instant;

    use super::*;

    fn recv_into(fd: RawFd, buf: &mut [u8]) -> io::Result<(usize, Option<Duration>)> {
        // SAFETY: initialised bytes are valid MaybeUninit ones, and recv
        // writes only bytes.
        recv(fd, unsafe {
            &mut *(buf as *mut [u8] as *mut [MaybeUninit<u8>])
        })
    }

    /// Bytes left unread for 50 ms are read as having waited that long; with
    /// nothing to read, the read does not wait.
    #[test]
    fn a_read_tells_how_long_its_bytes_waited() {
        let listener = TcpListener::bind("127.0.0.1:0").unwrap();
        let mut client = TcpStream::connect(listener.local_addr().unwrap()).unwrap();
        let (server, _) = listener.accept().unwrap();
        enable(server.as_raw_fd()).unwrap();
        let mut buf = [0u8; 4];
        assert_eq!(
            recv_into(server.as_raw_fd(), &mut buf).unwrap_err().kind(),
            io::ErrorKind::WouldBlock
        );
        // The kernel turns timestamping on a moment later: until a read
        // carries a sane one, the bytes are sent again.
        let deadline = Instant::now() + Duration::from_secs(5);
        let waited = loop {
            let sent = Instant::now();
            client.write_all(b"size").unwrap();
            std::thread::sleep(Duration::from_millis(50));
            let (read, waited) = recv_into(server.as_raw_fd(), &mut buf).unwrap();
            let held = sent.elapsed();
            assert_eq!((read, &buf), (4, b"size"));
            match waited {
                Some(waited) if waited >= Duration::from_millis(50) => {
                    assert!(waited <= held, "{waited:?} beyond the {held:?} held");
                    break waited;
                }
                _ => assert!(Instant::now() < deadline, "no timestamp: {waited:?}"),
            }
        };
        assert!(waited < Duration::from_secs(1), "{waited:?}");
    }
}
