//! Vectored I/O resumed after a short transfer: what is left of a list of
//! buffers, as iovecs on the caller's stack.

/// Fills `iovecs` with what is left of `parts` after their first `skip` bytes
/// (as many as fit) and returns how many it filled. The iovecs point into
/// `parts`: they are valid while `parts` are.
pub fn remaining_iovecs<'a>(
    parts: impl IntoIterator<Item = &'a [u8]>,
    mut skip: usize,
    iovecs: &mut [libc::iovec],
) -> usize {
    let mut count = 0;
    for part in parts {
        if count == iovecs.len() {
            break;
        }
        if skip >= part.len() {
            skip -= part.len();
            continue;
        }
        let rest = &part[skip..];
        skip = 0;
        iovecs[count] = libc::iovec {
            iov_base: rest.as_ptr() as *mut libc::c_void,
            iov_len: rest.len(),
        };
        count += 1;
    }
    count
}

/// An iovec array's initial value.
pub const EMPTY_IOVEC: libc::iovec = libc::iovec {
    iov_base: std::ptr::null_mut(),
    iov_len: 0,
};

#[cfg(test)]
mod tests {
    use super::*;

    fn lens(parts: &[&[u8]], skip: usize, room: usize) -> Vec<usize> {
        let mut iovecs = vec![EMPTY_IOVEC; room];
        let count = remaining_iovecs(parts.iter().copied(), skip, &mut iovecs);
        iovecs[..count].iter().map(|iovec| iovec.iov_len).collect()
    }

    #[test]
    fn what_is_left_after_a_short_transfer() {
        let parts: [&[u8]; 3] = [b"abc", b"", b"defgh"];
        assert_eq!(lens(&parts, 0, 8), vec![3, 5]);
        assert_eq!(lens(&parts, 2, 8), vec![1, 5]);
        assert_eq!(lens(&parts, 3, 8), vec![5]);
        assert_eq!(lens(&parts, 4, 8), vec![4]);
        assert_eq!(lens(&parts, 8, 8), Vec::<usize>::new());
        assert_eq!(lens(&parts, 0, 1), vec![3]);
    }
}
