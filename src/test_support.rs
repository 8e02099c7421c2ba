//! Helpers for unit tests that need the control thread's executor.

/// Runs `test` to completion on a glommio executor of its own.
pub fn run_local<F>(test: impl FnOnce() -> F + Send + 'static)
where
    F: std::future::Future<Output = ()> + 'static,
{
    glommio::LocalExecutorBuilder::default()
        .io_memory(256 * 1024)
        .spawn(move || async move { test().await })
        .expect("a test executor")
        .join()
        .expect("the test ran");
}
