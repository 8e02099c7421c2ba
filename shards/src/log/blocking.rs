//! Work that blocks (std::fs, fsync, codecs) leaves the shard's thread for
//! glommio's blocking pool.

use std::io;

/// Runs a blocking file operation on the shard's blocking pool.
pub async fn run_blocking<T: Send + 'static>(
    work: impl FnOnce() -> io::Result<T> + Send + 'static,
) -> io::Result<T> {
    glommio::executor().spawn_blocking(work).await
}
