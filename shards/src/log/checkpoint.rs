//! Kafka's checkpoint text files (`recovery-point-offset-checkpoint`,
//! `leader-epoch-checkpoint`, ...): a version line, a count line, then one entry
//! per line. Written to a temporary file, synced, and renamed into place.
//!
//! These are control files written rarely; shards call them through glommio's
//! blocking pool so a reactor never waits on fsync.

use std::fs;
use std::io::{self, Write};
use std::path::Path;

pub const CHECKPOINT_VERSION: u32 = 0;

pub fn write_checkpoint_file(path: &Path, lines: &[String]) -> io::Result<()> {
    let mut text = format!("{CHECKPOINT_VERSION}\n{}\n", lines.len());
    for line in lines {
        text.push_str(line);
        text.push('\n');
    }
    let tmp = path.with_extension("tmp");
    {
        let mut file = fs::File::create(&tmp)?;
        file.write_all(text.as_bytes())?;
        file.sync_all()?;
    }
    fs::rename(&tmp, path)?;
    if let Some(parent) = path.parent() {
        fs::File::open(parent)?.sync_all()?;
    }
    Ok(())
}

/// The entry lines of a checkpoint file; `Ok(None)` when it does not exist.
pub fn read_checkpoint_file(path: &Path) -> io::Result<Option<Vec<String>>> {
    let text = match fs::read_to_string(path) {
        Ok(text) => text,
        Err(error) if error.kind() == io::ErrorKind::NotFound => return Ok(None),
        Err(error) => return Err(error),
    };
    let malformed = |why: &str| {
        io::Error::new(
            io::ErrorKind::InvalidData,
            format!("{}: {why}", path.display()),
        )
    };
    let mut lines = text.lines();
    let version: u32 = lines
        .next()
        .and_then(|line| line.trim().parse().ok())
        .ok_or_else(|| malformed("no version line"))?;
    if version != CHECKPOINT_VERSION {
        return Err(malformed(&format!("unknown version {version}")));
    }
    let count: usize = lines
        .next()
        .and_then(|line| line.trim().parse().ok())
        .ok_or_else(|| malformed("no count line"))?;
    let entries: Vec<String> = lines
        .filter(|line| !line.trim().is_empty())
        .map(str::to_owned)
        .collect();
    if entries.len() != count {
        return Err(malformed(&format!(
            "count says {count} entries, found {}",
            entries.len()
        )));
    }
    Ok(Some(entries))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn round_trips_and_rejects_bad_counts() {
        let dir = tempfile::tempdir().unwrap();
        let path = dir.path().join("recovery-point-offset-checkpoint");
        assert_eq!(read_checkpoint_file(&path).unwrap(), None);
        let lines = vec!["t 0 5".to_string(), "t 1 9".to_string()];
        write_checkpoint_file(&path, &lines).unwrap();
        assert_eq!(fs::read_to_string(&path).unwrap(), "0\n2\nt 0 5\nt 1 9\n");
        assert_eq!(read_checkpoint_file(&path).unwrap(), Some(lines));
        fs::write(&path, "0\n3\nt 0 5\n").unwrap();
        assert!(read_checkpoint_file(&path).is_err());
    }
}
