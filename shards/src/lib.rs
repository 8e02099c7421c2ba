//! ringbroker's data plane: the thread-per-core shard runtime and the partition
//! log. Nothing here knows about sockets or the Kafka protocol's requests.

pub mod log;
pub mod runtime;
pub mod topic_partition;

#[cfg(test)]
pub(crate) mod test_support {
    use std::future::Future;

    /// Runs a future to completion on a fresh executor.
    pub fn run<T>(future: impl Future<Output = T>) -> T {
        crate::runtime::local_executor().run(future)
    }
}
