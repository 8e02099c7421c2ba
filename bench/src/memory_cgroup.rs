//! A memory cgroup of the bench's own, holding it and everything it starts
//! (brokers, ZooKeeper, Java clients) under one limit.
//!
//! Why: a broker writes a fresh page-cache page for every byte produced. On a
//! machine whose memory is full of page cache, as a broker's is after its
//! first hours, those pages are reclaimed ones. On a VM that hands free memory
//! back to its host (this one has virtio-balloon), a page taken from free
//! memory must first be backed again by the host, inside the copy into it:
//! at 50% on one node, ringbroker's `copy_folio_from_iter_atomic` was 68.6%
//! of its samples, its kernel time per GiB twice an earlier run's, and its
//! end-to-end p99.9 55-377 ms; the same run in a 4 GiB cgroup, where the
//! page cache recycles its own pages, had 7.1%, half the CPU and 10.5 ms.
//! Both brokers run under the same limit.

use std::path::{Path, PathBuf};

use shards::runtime::memory_cgroup::MemoryCgroup as Cgroup;

pub struct MemoryCgroup {
    path: PathBuf,
    parent_procs: PathBuf,
    pub limit_bytes: u64,
}

impl MemoryCgroup {
    /// Creates a child of this process's memory cgroup (v1 or v2) limited to
    /// `limit_bytes` and moves this process into it; what it starts later
    /// is born there. Panics where that is not allowed: the caller asked.
    pub fn enter(limit_bytes: u64) -> MemoryCgroup {
        let own = Cgroup::current().expect("a memory cgroup (v1) or the unified hierarchy (v2)");
        let child = own.child(&format!("tail-latency-{}", std::process::id()));
        std::fs::create_dir(child.dir())
            .unwrap_or_else(|e| panic!("create the memory cgroup {}: {e}", child.dir().display()));
        // Made first, so a refused write below removes the cgroup as it unwinds.
        let cgroup = MemoryCgroup {
            path: child.dir().to_owned(),
            parent_procs: own.dir().join("cgroup.procs"),
            limit_bytes,
        };
        write(&child.limit_file(), &limit_bytes.to_string());
        write(
            &cgroup.path.join("cgroup.procs"),
            &std::process::id().to_string(),
        );
        cgroup
    }
}

impl Drop for MemoryCgroup {
    /// Back to the parent, then the cgroup is removed; by now everything
    /// started inside has exited (the kernel refuses otherwise). Reports
    /// rather than panics: a drop may run while unwinding.
    fn drop(&mut self) {
        let left = std::fs::write(&self.parent_procs, std::process::id().to_string())
            .and_then(|()| std::fs::remove_dir(&self.path));
        if let Err(error) = left {
            eprintln!("leave the memory cgroup {}: {error}", self.path.display());
        }
    }
}

fn write(file: &Path, value: &str) {
    std::fs::write(file, value)
        .unwrap_or_else(|e| panic!("write {value} to {}: {e}", file.display()));
}
