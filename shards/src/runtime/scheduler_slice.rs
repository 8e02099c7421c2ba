//! The kernel's time slice for a shard's thread.
//!
//! Linux's EEVDF scheduler (6.6+) gives each runnable thread a virtual deadline
//! one slice after it becomes eligible; a woken thread preempts the running one
//! when its deadline comes first, and since 6.12 a woken thread with the shorter
//! slice also ends the running one's protected turn. With
//! every thread on the default slice (0.7 ms times 1 + log2 of the CPUs), a shard
//! woken for a request on a CPU that a client holds waited milliseconds for it:
//! in the tail-latency bench, most requests slower than 4 ms were a hop to a
//! shard, or a response send, waiting for a CPU. Since 6.12 a thread may ask for
//! its own slice (`sched_attr::sched_runtime` with a fair policy, 0.1-100 ms, no
//! privilege needed). Its share of the CPU does not change (that is its weight,
//! its nice value); it is only cut into shorter turns, which a shard's short
//! bursts of work fit.

use std::io;

/// The shortest slice the kernel takes.
pub const MIN_SLICE_US: u32 = 100;
/// The longest slice the kernel takes.
pub const MAX_SLICE_US: u32 = 100_000;

/// What asking for a slice came to.
#[derive(Debug, PartialEq, Eq)]
pub enum SliceOutcome {
    /// The kernel runs this thread with the slice asked for.
    Set,
    /// The kernel took the call but keeps its own slice (before Linux 6.12).
    KernelSlice,
    /// The thread runs under a real-time or deadline policy the operator
    /// chose, which has no slice of this kind: left as it is.
    NotFair,
}

/// Asks the kernel to run the calling thread in slices of `slice_us`,
/// keeping its policy and nice value.
pub fn set_current_thread_slice(slice_us: u32) -> io::Result<SliceOutcome> {
    assert!(
        (MIN_SLICE_US..=MAX_SLICE_US).contains(&slice_us),
        "slice {slice_us} us outside the kernel's range"
    );
    let mut attr = current_attr()?;
    let fair = [libc::SCHED_OTHER, libc::SCHED_BATCH, libc::SCHED_IDLE];
    if !fair
        .iter()
        .any(|&policy| attr.sched_policy == policy as u32)
    {
        return Ok(SliceOutcome::NotFair);
    }
    attr.sched_runtime = u64::from(slice_us) * 1_000;
    // SAFETY: `attr` is a valid sched_attr whose `size` the kernel filled in.
    let set = unsafe { libc::syscall(libc::SYS_sched_setattr, 0, &attr, 0) };
    if set != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(if current_attr()?.sched_runtime == attr.sched_runtime {
        SliceOutcome::Set
    } else {
        SliceOutcome::KernelSlice
    })
}

/// The calling thread's scheduling attributes, as the kernel reports them.
pub(super) fn current_attr() -> io::Result<libc::sched_attr> {
    // SAFETY: all-zero is a valid sched_attr.
    let mut attr: libc::sched_attr = unsafe { std::mem::zeroed() };
    let size = std::mem::size_of::<libc::sched_attr>() as u32;
    // SAFETY: the kernel writes at most `size` bytes into `attr`.
    let got = unsafe { libc::syscall(libc::SYS_sched_getattr, 0, &mut attr, size, 0) };
    if got != 0 {
        return Err(io::Error::last_os_error());
    }
    Ok(attr)
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn a_thread_runs_with_the_slice_it_asked_for() {
        std::thread::spawn(|| {
            let before = current_attr().unwrap();
            match set_current_thread_slice(MIN_SLICE_US).unwrap() {
                SliceOutcome::Set => {
                    let after = current_attr().unwrap();
                    assert_eq!(after.sched_runtime, 100_000);
                    assert_eq!(after.sched_policy, before.sched_policy);
                    assert_eq!(after.sched_nice, before.sched_nice);
                }
                // A kernel before 6.12 reports no slice for SCHED_OTHER.
                SliceOutcome::KernelSlice => assert_eq!(before.sched_runtime, 0),
                SliceOutcome::NotFair => panic!("a test thread runs SCHED_OTHER"),
            }
        })
        .join()
        .unwrap();
    }

    #[test]
    #[should_panic(expected = "outside the kernel's range")]
    fn a_slice_below_the_kernels_range_is_refused() {
        let _ = set_current_thread_slice(MIN_SLICE_US - 1);
    }
}
