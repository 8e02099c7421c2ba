//! The shard runtime: one glommio executor per configured core, pinned unless
//! configured otherwise, each owning its partitions outright; a bounded
//! channel mesh between them.

pub mod activity;
pub mod iovecs;
pub mod memory_cgroup;
mod mesh;
mod placement;
mod scheduler_slice;

use std::future::Future;
use std::io;
use std::rc::Rc;

use glommio::sync::Semaphore;
use glommio::{
    CpuSet, ExecutorJoinHandle, LocalExecutor, LocalExecutorBuilder, Placement, PoolPlacement,
};
use tracing::{info, warn};

pub use mesh::{build_mesh, Delivery, Job, MeshEnds, MeshError, ShardMesh};
pub use placement::{ShardPlacement, SHARD_PLACEMENT_FILE};
use scheduler_slice::{set_current_thread_slice, SliceOutcome};
pub use scheduler_slice::{MAX_SLICE_US, MIN_SLICE_US};

/// Memory each executor registers with io_uring for its buffers.
pub const DEFAULT_IO_MEMORY_BYTES: usize = 2 * 1024 * 1024;

/// Threads of each shard's blocking pool (glommio's default is one). Its
/// jobs include fsyncs and frees of deleted or trimmed blocks that wait for
/// the disk for hundreds of milliseconds; with one thread, a roll's renames
/// queued behind another partition's trim held that partition's appends.
/// They sleep in the kernel, not on the CPU.
const BLOCKING_THREADS_PER_SHARD: usize = 4;

/// Jobs that wait for the disk (writeback, freed blocks: a trim's and a deleted
/// file's last close, checkpoint fsyncs, a cleaner swap's renames and their
/// directory fsync, a log move's copy) a shard runs on its
/// blocking pool at once: one fewer than its threads, so a short job (a
/// roll's renames) finds a thread free. Six partitions of one rate roll
/// together; with every thread in their writebacks and trims, a roll's
/// renames waited 28 ms and so did that partition's appends.
const MAX_DISK_BOUND_JOBS: usize = BLOCKING_THREADS_PER_SHARD - 1;

thread_local! {
    static DISK_BOUND_JOBS: Rc<Semaphore> = Rc::new(Semaphore::new(MAX_DISK_BOUND_JOBS as u64));
}

/// Awaits `job`, whose blocking-pool work waits for the disk, holding one of
/// the shard's `MAX_DISK_BOUND_JOBS` places.
pub async fn disk_bound<T>(job: impl Future<Output = T>) -> T {
    let places = DISK_BOUND_JOBS.with(Rc::clone);
    let _place = places
        .acquire_permit(1)
        .await
        .expect("the disk-bound places are never closed");
    job.await
}

#[derive(Debug, Clone)]
pub struct ShardRuntimeConfig {
    /// CPU ids to pin shards to, one shard each.
    pub cores: Vec<usize>,
    /// False: one shard per entry of `cores`, but each thread left to the
    /// kernel's scheduler, for a host whose cores the broker shares (its
    /// clients, a benchmark): a woken shard then runs on whichever CPU is
    /// free instead of queueing behind another thread on its own.
    pub pinned: bool,
    /// The kernel's time slice for each shard's thread (`scheduler_slice.rs`);
    /// None leaves the kernel's default.
    pub slice_us: Option<u32>,
    pub io_memory_bytes: usize,
    /// Jobs that may wait in each shard-to-shard channel.
    pub mesh_channel_capacity: usize,
    /// Forwarded jobs a shard runs at once.
    pub max_in_flight_mesh_jobs: usize,
}

impl ShardRuntimeConfig {
    pub fn for_cores(cores: Vec<usize>) -> Self {
        Self {
            cores,
            pinned: true,
            slice_us: None,
            io_memory_bytes: DEFAULT_IO_MEMORY_BYTES,
            mesh_channel_capacity: 1024,
            max_in_flight_mesh_jobs: 4096,
        }
    }

    /// What the shards lock in memory together.
    pub fn locked_bytes(&self) -> u64 {
        self.cores.len() as u64 * (EXECUTOR_LOCKED_BYTES + self.io_memory_bytes as u64)
    }
}

/// What a shard starts with: its id and its unconnected mesh ends.
pub struct ShardStart<S: 'static> {
    pub shard_id: usize,
    pub nr_shards: usize,
    pub mesh: MeshEnds<S>,
}

/// What glommio locks per executor beyond its io memory (its rings).
pub const EXECUTOR_LOCKED_BYTES: u64 = 512 * 1024;

/// glommio locks its io_uring rings and buffers in memory: lift RLIMIT_MEMLOCK
/// so they fit under a small `ulimit -l`, to unlimited where allowed (root),
/// else to the hard limit. The first call in a process decides; it says once,
/// with what to change, when the limit stays below `needed_bytes`.
pub fn raise_memlock_limit(needed_bytes: u64) {
    static RAISED: std::sync::Once = std::sync::Once::new();
    RAISED.call_once(|| {
        let unlimited = libc::rlimit {
            rlim_cur: libc::RLIM_INFINITY,
            rlim_max: libc::RLIM_INFINITY,
        };
        // SAFETY: getrlimit/setrlimit on valid, initialized structs.
        unsafe {
            if libc::setrlimit(libc::RLIMIT_MEMLOCK, &unlimited) == 0 {
                return;
            }
            let mut limit: libc::rlimit = std::mem::zeroed();
            if libc::getrlimit(libc::RLIMIT_MEMLOCK, &mut limit) != 0 {
                return;
            }
            limit.rlim_cur = limit.rlim_max;
            libc::setrlimit(libc::RLIMIT_MEMLOCK, &limit);
            if limit.rlim_max != libc::RLIM_INFINITY && limit.rlim_max < needed_bytes {
                warn!(
                    limit_kib = limit.rlim_max / 1024,
                    needed_kib = needed_bytes / 1024,
                    "locked memory (RLIMIT_MEMLOCK) is below what io_uring needs; raise it \
                     with `ulimit -l unlimited`, LimitMEMLOCK=infinity in a systemd unit, or \
                     memlock in /etc/security/limits.conf"
                );
            }
        }
    });
}

/// Starts one pinned executor per configured core, each running `init`.
pub fn spawn_shards<S, Init, Fut, R>(
    config: &ShardRuntimeConfig,
    init: Init,
) -> io::Result<Vec<ExecutorJoinHandle<R>>>
where
    S: 'static,
    Init: FnOnce(ShardStart<S>) -> Fut + Send + Clone + 'static,
    Fut: Future<Output = R> + 'static,
    R: Send + 'static,
{
    assert!(!config.cores.is_empty(), "at least one shard");
    raise_memlock_limit(config.locked_bytes());
    let nr_shards = config.cores.len();
    let mut handles = Vec::with_capacity(nr_shards);
    for (shard_id, mesh) in build_mesh::<S>(nr_shards, config.mesh_channel_capacity)
        .into_iter()
        .enumerate()
    {
        let init = init.clone();
        let slice_us = config.slice_us;
        let (placement, blocking_placement) = if config.pinned {
            let cpu = config.cores[shard_id];
            let cpu_set = CpuSet::online()
                .map_err(|error| io::Error::other(error.to_string()))?
                .filter(|location| location.cpu == cpu);
            (
                Placement::Fixed(cpu),
                PoolPlacement::Custom(vec![cpu_set; BLOCKING_THREADS_PER_SHARD]),
            )
        } else {
            (
                Placement::Unbound,
                PoolPlacement::Unbound(BLOCKING_THREADS_PER_SHARD),
            )
        };
        let handle = LocalExecutorBuilder::new(placement)
            .blocking_thread_pool_placement(blocking_placement)
            .name(&format!("shard-{shard_id}"))
            .io_memory(config.io_memory_bytes)
            .spawn(move || {
                if let Some(slice_us) = slice_us {
                    set_shard_slice(shard_id, slice_us);
                }
                init(ShardStart {
                    shard_id,
                    nr_shards,
                    mesh,
                })
            })
            .map_err(|error| io::Error::other(error.to_string()))?;
        handles.push(handle);
    }
    Ok(handles)
}

/// A shard that cannot have its slice runs with what it has: said once per shard.
fn set_shard_slice(shard_id: usize, slice_us: u32) {
    match set_current_thread_slice(slice_us) {
        Ok(SliceOutcome::Set) => {}
        Ok(SliceOutcome::KernelSlice) => warn!(
            shard_id,
            slice_us,
            "the kernel keeps its own time slice for this shard (custom slices need Linux 6.12)"
        ),
        Ok(SliceOutcome::NotFair) => info!(
            shard_id,
            slice_us,
            "this shard runs under a real-time or deadline policy: its time slice is left as it is"
        ),
        Err(error) => warn!(shard_id, slice_us, %error, "cannot set this shard's time slice"),
    }
}

/// An unpinned executor for tools and tests that drive the log directly.
pub fn local_executor() -> LocalExecutor {
    raise_memlock_limit(EXECUTOR_LOCKED_BYTES + DEFAULT_IO_MEMORY_BYTES as u64);
    LocalExecutorBuilder::new(Placement::Unbound)
        .io_memory(DEFAULT_IO_MEMORY_BYTES)
        .make()
        .expect("cannot start a glommio executor")
}

#[cfg(test)]
mod tests {
    use super::*;
    use std::rc::Rc;

    struct Counter {
        shard_id: usize,
    }

    #[test]
    fn shards_answer_each_other_over_the_mesh() {
        shards_answer_each_other(true);
        shards_answer_each_other(false);
    }

    /// How many CPUs the calling thread may run on.
    fn allowed_cpus() -> u32 {
        // SAFETY: sched_getaffinity fills a zeroed cpu_set_t of the size given.
        unsafe {
            let mut set: libc::cpu_set_t = std::mem::zeroed();
            let size = std::mem::size_of::<libc::cpu_set_t>();
            assert_eq!(libc::sched_getaffinity(0, size, &mut set), 0);
            libc::CPU_COUNT(&set) as u32
        }
    }

    fn shards_answer_each_other(pinned: bool) {
        let config = ShardRuntimeConfig {
            cores: vec![0, 0, 0],
            pinned,
            slice_us: None,
            io_memory_bytes: 256 * 1024,
            mesh_channel_capacity: 2,
            max_in_flight_mesh_jobs: 4,
        };
        let inherited_cpus = allowed_cpus();
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(3));
        let handles = spawn_shards::<Counter, _, _, (Vec<usize>, u32)>(
            &config,
            move |start: ShardStart<Counter>| {
                let barrier = barrier.clone();
                async move {
                    let state = Rc::new(Counter {
                        shard_id: start.shard_id,
                    });
                    let mesh = start.mesh.connect(state.clone(), 4).await;
                    // More calls than the channels hold, so backpressure is exercised.
                    let mut answers = Vec::new();
                    for i in 0..30 {
                        let target = i % start.nr_shards;
                        let from = start.shard_id;
                        answers.push(
                            mesh.invoke_on(target, &state, move |s: Rc<Counter>| async move {
                                s.shard_id * 1000 + from
                            })
                            .await
                            .unwrap(),
                        );
                    }
                    // Keep serving peers until every shard has its answers.
                    glommio::executor()
                        .spawn_blocking(move || {
                            barrier.wait();
                        })
                        .await;
                    (answers, allowed_cpus())
                }
            },
        )
        .unwrap();
        for (shard_id, handle) in handles.into_iter().enumerate() {
            let (answers, cpus) = handle.join().unwrap();
            assert_eq!(cpus, if pinned { 1 } else { inherited_cpus });
            for (i, answer) in answers.into_iter().enumerate() {
                assert_eq!(answer, (i % 3) * 1000 + shard_id);
            }
        }
    }

    #[test]
    fn each_shard_runs_with_the_configured_slice() {
        let inherited_ns = scheduler_slice::current_attr().unwrap().sched_runtime;
        for slice_us in [None, Some(500)] {
            let config = ShardRuntimeConfig {
                pinned: false,
                slice_us,
                ..ShardRuntimeConfig::for_cores(vec![0, 0])
            };
            let handles = spawn_shards::<Counter, _, _, u64>(&config, |_| async {
                scheduler_slice::current_attr().unwrap().sched_runtime
            })
            .unwrap();
            for handle in handles {
                let slice_ns = handle.join().unwrap();
                match slice_us {
                    // A kernel before 6.12 reports no slice: nothing to compare.
                    Some(_) if inherited_ns == 0 => assert_eq!(slice_ns, 0),
                    Some(us) => assert_eq!(slice_ns, u64::from(us) * 1_000),
                    None => assert_eq!(slice_ns, inherited_ns),
                }
            }
        }
    }

    /// A job of a shard's blocking pool that waits (for the disk, say) does
    /// not hold up the others: each job here waits, a bounded time, for all
    /// of them to have started, which only as many threads as jobs allow.
    #[test]
    fn a_shards_blocking_jobs_run_side_by_side() {
        use std::sync::{Arc, Condvar, Mutex};
        let config = ShardRuntimeConfig {
            pinned: false,
            ..ShardRuntimeConfig::for_cores(vec![0])
        };
        let handles = spawn_shards::<Counter, _, _, Vec<bool>>(&config, |_| async {
            let started = Arc::new((Mutex::new(0usize), Condvar::new()));
            // Tasks, so that every job is handed to the pool before any is awaited.
            let jobs: Vec<_> = (0..BLOCKING_THREADS_PER_SHARD)
                .map(|_| {
                    let started = started.clone();
                    glommio::spawn_local(glommio::executor().spawn_blocking(move || {
                        let (count, all_started) = &*started;
                        let mut count = count.lock().unwrap();
                        *count += 1;
                        all_started.notify_all();
                        let timeout = std::time::Duration::from_secs(5);
                        let (count, waited) = all_started
                            .wait_timeout_while(count, timeout, |count| {
                                *count < BLOCKING_THREADS_PER_SHARD
                            })
                            .unwrap();
                        drop(count);
                        !waited.timed_out()
                    }))
                })
                .collect();
            let mut saw_all = Vec::new();
            for job in jobs {
                saw_all.push(job.await);
            }
            saw_all
        })
        .unwrap();
        for handle in handles {
            let saw_all = handle.join().unwrap();
            assert!(saw_all.iter().all(|saw| *saw), "{saw_all:?}");
        }
    }

    /// Disk-bound jobs leave a thread of the pool free: with more of them
    /// waiting than the pool has threads, a short job still runs at once.
    #[test]
    fn a_short_blocking_job_does_not_wait_behind_disk_bound_ones() {
        let config = ShardRuntimeConfig {
            pinned: false,
            ..ShardRuntimeConfig::for_cores(vec![0])
        };
        let handles = spawn_shards::<Counter, _, _, std::time::Duration>(&config, |_| async {
            let stuck = std::time::Duration::from_secs(3);
            for _ in 0..BLOCKING_THREADS_PER_SHARD + 1 {
                glommio::spawn_local(disk_bound(
                    glommio::executor().spawn_blocking(move || std::thread::sleep(stuck)),
                ))
                .detach();
            }
            // Every disk-bound job handed to the pool (or waiting for a place).
            glommio::timer::sleep(std::time::Duration::from_millis(100)).await;
            let started = std::time::Instant::now();
            glommio::executor().spawn_blocking(|| ()).await;
            started.elapsed()
        })
        .unwrap();
        for handle in handles {
            let waited = handle.join().unwrap();
            assert!(waited < std::time::Duration::from_secs(1), "{waited:?}");
        }
    }

    /// Each shard sleeps a little between calls to the other, so each is often
    /// asleep on a timer when a job or an answer arrives for it: a lost wakeup
    /// leaves both asleep for good (no other timer is due), and the calls stop.
    #[test]
    fn sleeping_shards_wake_for_each_others_jobs() {
        const CALLS: u32 = 3_000;
        let config = ShardRuntimeConfig {
            cores: vec![0, 1],
            pinned: false,
            slice_us: None,
            io_memory_bytes: 256 * 1024,
            mesh_channel_capacity: 2,
            max_in_flight_mesh_jobs: 4,
        };
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let handles = spawn_shards::<(), _, _, u32>(&config, move |start| {
            let barrier = barrier.clone();
            async move {
                let state = Rc::new(());
                let mesh = start.mesh.connect(state.clone(), 4).await;
                let peer = 1 - start.shard_id;
                // xorshift64: pauses that differ between the shards and calls.
                let mut seed = 0x9e37_79b9_7f4a_7c15_u64 + start.shard_id as u64;
                let mut answered = 0;
                for _ in 0..CALLS {
                    seed ^= seed << 13;
                    seed ^= seed >> 7;
                    seed ^= seed << 17;
                    let pause = std::time::Duration::from_micros(seed % 1_500);
                    glommio::timer::sleep(pause).await;
                    mesh.invoke_on(peer, &state, |_: Rc<()>| async {})
                        .await
                        .unwrap();
                    answered += 1;
                }
                glommio::executor()
                    .spawn_blocking(move || {
                        barrier.wait();
                    })
                    .await;
                answered
            }
        })
        .unwrap();
        let (done, finished) = std::sync::mpsc::channel();
        std::thread::spawn(move || {
            let answered: Vec<u32> = handles.into_iter().map(|h| h.join().unwrap()).collect();
            let _ = done.send(answered);
        });
        // The calls take about 2.5 s of pauses; a stuck shard never finishes.
        let Ok(answered) = finished.recv_timeout(std::time::Duration::from_secs(60)) else {
            eprint!("{}", rings_and_threads());
            panic!("a shard slept through a job or an answer from the other");
        };
        assert_eq!(answered, vec![CALLS, CALLS]);
    }

    /// A job for when its shard is awake waits while that shard sleeps, and
    /// runs as soon as it wakes: for a job that wakes it, or for its channel
    /// from here reaching half of its capacity.
    #[test]
    fn jobs_for_when_awake_wait_for_their_shard_to_wake() {
        use std::sync::atomic::{AtomicUsize, Ordering};
        use std::time::{Duration, Instant};
        const CAPACITY: usize = 8;
        let config = ShardRuntimeConfig {
            cores: vec![0, 1],
            pinned: false,
            slice_us: None,
            io_memory_bytes: 256 * 1024,
            mesh_channel_capacity: CAPACITY,
            max_in_flight_mesh_jobs: CAPACITY,
        };
        let ran = std::sync::Arc::new(AtomicUsize::new(0));
        let barrier = std::sync::Arc::new(std::sync::Barrier::new(2));
        let handles = spawn_shards::<(), _, _, Vec<usize>>(&config, move |start| {
            let (ran, barrier) = (ran.clone(), barrier.clone());
            async move {
                let state = Rc::new(());
                let mesh = start.mesh.connect(state.clone(), CAPACITY).await;
                let mut seen = Vec::new();
                if start.shard_id == 0 {
                    let count = |ran: &std::sync::Arc<AtomicUsize>| {
                        let ran = ran.clone();
                        move |_: Rc<()>| async move {
                            ran.fetch_add(1, Ordering::SeqCst);
                        }
                    };
                    let settle = Duration::from_millis(100);
                    let ran_within = |expected: usize| {
                        let ran = ran.clone();
                        async move {
                            let until = Instant::now() + Duration::from_secs(10);
                            while ran.load(Ordering::SeqCst) < expected && Instant::now() < until {
                                glommio::timer::sleep(Duration::from_millis(1)).await;
                            }
                            ran.load(Ordering::SeqCst)
                        }
                    };
                    // Shard 1 has nothing to do: it is asleep.
                    glommio::timer::sleep(settle).await;
                    assert!(mesh.try_submit_when_awake(1, count(&ran)));
                    glommio::timer::sleep(settle).await;
                    seen.push(ran.load(Ordering::SeqCst));
                    // A job that wakes it runs behind the one that waited.
                    mesh.invoke_on(1, &state, |_: Rc<()>| async {})
                        .await
                        .unwrap();
                    seen.push(ran_within(1).await);
                    glommio::timer::sleep(settle).await;
                    // Under half of the channel: left; half of it: woken.
                    for _ in 0..CAPACITY / 2 - 1 {
                        assert!(mesh.try_submit_when_awake(1, count(&ran)));
                    }
                    glommio::timer::sleep(settle).await;
                    seen.push(ran.load(Ordering::SeqCst));
                    let answer = glommio::timer::timeout(Duration::from_secs(10), async {
                        Ok(mesh
                            .invoke_on_with(1, &state, |_: Rc<()>| async { 7 }, Delivery::WhenAwake)
                            .await)
                    });
                    let answer = answer.await.expect("a half-full channel wakes its shard");
                    assert_eq!(answer.unwrap(), 7);
                    seen.push(ran_within(CAPACITY / 2).await);
                }
                glommio::executor()
                    .spawn_blocking(move || {
                        barrier.wait();
                    })
                    .await;
                seen
            }
        })
        .unwrap();
        let seen: Vec<Vec<usize>> = handles.into_iter().map(|h| h.join().unwrap()).collect();
        assert_eq!(seen[0], vec![0, 1, 1, CAPACITY / 2]);
    }

    /// What a stuck run leaves to read: each io_uring's and eventfd's fdinfo
    /// (a completion not yet reaped, an eventfd count not yet read) and each
    /// thread's kernel stack, so a lost wake is placed in the kernel or in
    /// glommio (`vendor/glommio/PATCHES.md`).
    fn rings_and_threads() -> String {
        let mut out = String::new();
        for entry in std::fs::read_dir("/proc/self/fd").unwrap().flatten() {
            let target = std::fs::read_link(entry.path()).unwrap_or_default();
            let target = target.to_string_lossy();
            if target.contains("io_uring") || target.contains("eventfd") {
                let name = entry.file_name();
                let info = std::fs::read_to_string(format!(
                    "/proc/self/fdinfo/{}",
                    name.to_string_lossy()
                ))
                .unwrap_or_default();
                out += &format!("fd {name:?} {target}\n{info}\n");
            }
        }
        for entry in std::fs::read_dir("/proc/self/task").unwrap().flatten() {
            let read =
                |file: &str| std::fs::read_to_string(entry.path().join(file)).unwrap_or_default();
            out += &format!("task {}{}\n", read("stat"), read("stack"));
        }
        out
    }
}
