//! The memory cgroup a process runs in (v1's memory controller or v2's unified
//! hierarchy): where it is, and how full it is against its limit. The log's
//! writeback job reads it to know when its drop-behind is due; the bench
//! makes its limited cgroup as a child of it.

use std::io;
use std::path::{Path, PathBuf};
use std::sync::OnceLock;

/// Limits from here up are "no limit" (cgroup v1 reports 2^63 less a page).
const UNLIMITED_BYTES: u64 = 1 << 62;

#[derive(Debug, Clone, Copy, PartialEq)]
enum CgroupVersion {
    V1,
    V2,
}

#[derive(Debug, PartialEq)]
pub struct MemoryCgroup {
    dir: PathBuf,
    version: CgroupVersion,
}

impl MemoryCgroup {
    /// This process's memory cgroup, found once; None when it has none, or
    /// its files cannot be read.
    pub fn of_this_process() -> Option<&'static MemoryCgroup> {
        static FOUND: OnceLock<Option<MemoryCgroup>> = OnceLock::new();
        FOUND
            .get_or_init(|| {
                let cgroup = Self::current()?;
                cgroup.usage_and_limit().ok().map(|_| cgroup)
            })
            .as_ref()
    }

    /// The memory cgroup /proc/self/cgroup names, under /sys/fs/cgroup, its
    /// files not read yet.
    pub fn current() -> Option<MemoryCgroup> {
        let own = std::fs::read_to_string("/proc/self/cgroup").ok()?;
        Self::named(&own, Path::new("/sys/fs/cgroup"))
    }

    /// The memory cgroup `proc_self_cgroup` (/proc/self/cgroup's text) names,
    /// under `root`: v1's memory controller ("4:memory:/path"), else the
    /// unified hierarchy (v2, "0::/path").
    pub fn named(proc_self_cgroup: &str, root: &Path) -> Option<MemoryCgroup> {
        let v1 = proc_self_cgroup.lines().find_map(|line| {
            let mut fields = line.splitn(3, ':');
            let (_, controllers, path) = (fields.next()?, fields.next()?, fields.next()?);
            controllers
                .split(',')
                .any(|c| c == "memory")
                .then_some(path)
        });
        let (root, path, version) = match v1 {
            Some(path) => (root.join("memory"), path, CgroupVersion::V1),
            None => {
                let path = proc_self_cgroup
                    .lines()
                    .find_map(|line| line.strip_prefix("0::"))?;
                (root.to_owned(), path, CgroupVersion::V2)
            }
        };
        Some(MemoryCgroup {
            dir: root.join(path.trim_start_matches('/')),
            version,
        })
    }

    /// Its child cgroup `name` (made by writing its directory).
    pub fn child(&self, name: &str) -> MemoryCgroup {
        MemoryCgroup {
            dir: self.dir.join(name),
            version: self.version,
        }
    }

    pub fn dir(&self) -> &Path {
        &self.dir
    }

    /// The file that holds (and sets) its limit.
    pub fn limit_file(&self) -> PathBuf {
        self.dir.join(match self.version {
            CgroupVersion::V1 => "memory.limit_in_bytes",
            CgroupVersion::V2 => "memory.max",
        })
    }

    fn usage_file(&self) -> PathBuf {
        self.dir.join(match self.version {
            CgroupVersion::V1 => "memory.usage_in_bytes",
            CgroupVersion::V2 => "memory.current",
        })
    }

    /// Bytes charged to the cgroup, and its limit (None: unlimited).
    pub fn usage_and_limit(&self) -> io::Result<(u64, Option<u64>)> {
        let read = |file: PathBuf| -> io::Result<String> {
            Ok(std::fs::read_to_string(file)?.trim().to_owned())
        };
        let number = |text: &str| {
            text.parse::<u64>()
                .map_err(|error| io::Error::new(io::ErrorKind::InvalidData, error))
        };
        let usage = number(&read(self.usage_file())?)?;
        let limit = match read(self.limit_file())?.as_str() {
            "max" => None,
            text => Some(number(text)?).filter(|limit| *limit < UNLIMITED_BYTES),
        };
        Ok((usage, limit))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    fn write(path: &Path, text: &str) {
        std::fs::create_dir_all(path.parent().unwrap()).unwrap();
        std::fs::write(path, text).unwrap();
    }

    #[test]
    fn finds_v1_and_v2_cgroups_and_reads_their_usage_and_limit() {
        let root = tempfile::tempdir().unwrap();
        let v1 = MemoryCgroup::named("5:cpu:/\n4:memory:/broker\n0::/\n", root.path()).unwrap();
        assert_eq!(v1.dir(), root.path().join("memory/broker"));
        assert_eq!(v1.limit_file(), v1.dir().join("memory.limit_in_bytes"));
        assert!(v1.usage_and_limit().is_err(), "no files yet");
        write(&v1.dir().join("memory.usage_in_bytes"), "600\n");
        write(&v1.limit_file(), "1000\n");
        assert_eq!(v1.usage_and_limit().unwrap(), (600, Some(1000)));
        write(&v1.limit_file(), "9223372036854771712\n");
        assert_eq!(v1.usage_and_limit().unwrap(), (600, None));

        let v2 = MemoryCgroup::named("0::/system.slice/broker.service\n", root.path()).unwrap();
        assert_eq!(v2.dir(), root.path().join("system.slice/broker.service"));
        write(&v2.dir().join("memory.current"), "700\n");
        write(&v2.limit_file(), "max\n");
        assert_eq!(v2.usage_and_limit().unwrap(), (700, None));
        write(&v2.limit_file(), "1024\n");
        assert_eq!(v2.usage_and_limit().unwrap(), (700, Some(1024)));

        let child = v2.child("bench");
        assert_eq!(child.limit_file(), v2.dir().join("bench/memory.max"));
        assert_eq!(MemoryCgroup::named("", root.path()), None);
    }
}
