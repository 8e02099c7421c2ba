//! ringbroker's benchmarks: the brokers under test, the workloads that drive
//! them through librdkafka, and the side-by-side report.

pub mod broker_clocks;
pub mod brokers;
pub mod cluster;
pub mod java_clients;
pub mod memory_cgroup;
pub mod report;
pub mod workloads;
