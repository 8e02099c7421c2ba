//! The memory cgroup this process runs in, as the writeback job's drop-behind
//! (`ringbroker.log.drop.behind.bytes`) reads it. Inside a cgroup with a
//! limit, the page cache the broker writes is charged to it; once it is full,
//! every append reclaims pages inside its `pwritev`, which is what the drop
//! is for. Until then the pages cost nothing and serve consumers that fall
//! behind, so the drop waits until the cgroup is half full: at 10% of Kafka's
//! maximum in the bench's 4 GiB cgroup, dropping was about 5% of the broker's
//! CPU for no gain.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Limits from here up are "no limit" (cgroup v1 reports 2^63 less a page).
const UNLIMITED_BYTES: u64 = 1 << 62;

#[derive(Debug, PartialEq)]
pub struct MemoryCgroup {
    usage_file: PathBuf,
    limit_file: PathBuf,
}

impl MemoryCgroup {
    /// This process's memory cgroup, found once; None when it has none.
    pub fn of_this_process() -> Option<&'static MemoryCgroup> {
        static FOUND: OnceLock<Option<MemoryCgroup>> = OnceLock::new();
        FOUND
            .get_or_init(|| {
                let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
                Self::find(&own, Path::new("/sys/fs/cgroup"))
            })
            .as_ref()
    }

    /// The memory cgroup named in `proc_self_cgroup` (/proc/self/cgroup's
    /// text) under `root`: v1's memory controller ("4:memory:/path"), else
    /// the unified hierarchy (v2, "0::/path").
    fn find(proc_self_cgroup: &str, root: &Path) -> Option<MemoryCgroup> {
        let v1 = proc_self_cgroup.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path)
        });
        let (dir, usage, limit) = match v1 {
            Some(path) => (
                root.join("memory").join(path.trim_start_matches('/')),
                "memory.usage_in_bytes",
                "memory.limit_in_bytes",
            ),
            None => {
                let path = proc_self_cgroup
                    .lines()
                    .find_map(|line| line.strip_prefix("0::"))?;
                (
                    root.join(path.trim_start_matches('/')),
                    "memory.current",
                    "memory.max",
                )
            }
        };
        let cgroup = MemoryCgroup {
            usage_file: dir.join(usage),
            limit_file: dir.join(limit),
        };
        cgroup.usage_and_limit().ok().map(|_| cgroup)
    }

    /// Bytes charged to the cgroup, and its limit (None: unlimited).
    fn usage_and_limit(&self) -> io::Result<(u64, Option<u64>)> {
        let read = |file: &Path| -> io::Result<String> {
            Ok(std::fs::read_to_string(file)?.trim().to_owned())
        };
        let number = |text: &str| {
            text.parse::<u64>()
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
        };
        let usage = number(&read(&self.usage_file)?)?;
        let limit = match read(&self.limit_file)?.as_str() {
            "max" => None,
            text => Some(number(text)?).filter(|limit| *limit < UNLIMITED_BYTES),
        };
        Ok((usage, limit))
    }

    /// Whether a segment's writeback job drops what lies behind it now: once
    /// the cgroup is more than half full; always without a limit (the setting
    /// asked for it, and there is no fill to wait for) or when its files
    /// cannot be read.
    fn drop_behind_due(&self) -> bool {
        match self.usage_and_limit() {
            Ok((usage, Some(limit))) => usage > limit / 2,
            Ok((_, None)) | Err(_) => true,
        }
    }
}

/// `MemoryCgroup::drop_behind_due` for this process; always outside a memory
/// cgroup.
pub fn drop_behind_due() -> bool {
    MemoryCgroup::of_this_process().is_none_or(MemoryCgroup::drop_behind_due)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn finds_v1_and_v2_cgroups_and_reads_their_fill() {
        let root = tempfile::tempdir().unwrap();
        let v1_dir = root.path().join("memory/broker");
        write(&v1_dir.join("memory.usage_in_bytes"), "600\n");
        write(&v1_dir.join("memory.limit_in_bytes"), "1000\n");
        let v1 = MemoryCgroup::find("5:cpu:/\n4:memory:/broker\n0::/\n", root.path()).unwrap();
        assert_eq!(v1.usage_file, v1_dir.join("memory.usage_in_bytes"));
        assert_eq!(v1.usage_and_limit().unwrap(), (600, Some(1000)));
        assert!(v1.drop_behind_due());
        write(&v1_dir.join("memory.usage_in_bytes"), "500\n");
        assert!(!v1.drop_behind_due());
        write(
            &v1_dir.join("memory.limit_in_bytes"),
            "9223372036854771712\n",
        );
        assert_eq!(v1.usage_and_limit().unwrap(), (500, None));
        assert!(v1.drop_behind_due());

        let v2_dir = root.path().join("system.slice/broker.service");
        write(&v2_dir.join("memory.current"), "700\n");
        write(&v2_dir.join("memory.max"), "max\n");
        let v2 = MemoryCgroup::find("0::/system.slice/broker.service\n", root.path()).unwrap();
        assert_eq!(v2.usage_and_limit().unwrap(), (700, None));
        assert!(v2.drop_behind_due());
        write(&v2_dir.join("memory.max"), "2048\n");
        assert!(!v2.drop_behind_due());
        write(&v2_dir.join("memory.max"), "1024\n");
        assert!(v2.drop_behind_due());

        // Named, but without the files: no cgroup to read.
        assert_eq!(MemoryCgroup::find("0::/elsewhere\n", root.path()), None);
        assert_eq!(MemoryCgroup::find("", root.path()), None);
    }
}
