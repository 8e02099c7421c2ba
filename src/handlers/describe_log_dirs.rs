//! DescribeLogDirs (key 35): each log directory, its health and space, and the
//! size of every partition in it, gathered from every shard.

use std::collections::BTreeMap;
use std::rc::Rc;

use kafka_protocol::messages::describe_log_dirs_response::{
    DescribeLogDirsPartition, DescribeLogDirsResult, DescribeLogDirsTopic,
};
use kafka_protocol::messages::{DescribeLogDirsRequest, DescribeLogDirsResponse, TopicName};
use kafka_protocol::protocol::StrBytes;

use super::RequestContext;
use crate::protocol::ResponseError;
use crate::server::broker::ShardBroker;

/// (directory, topic, partition, size in bytes, future) of every log a shard
/// owns, and of every one it is moving to another directory (a future
/// replica there, as Kafka reports it while the copy runs).
type LogSizes = Vec<(String, String, i32, i64, bool)>;

fn local_sizes(broker: &ShardBroker) -> LogSizes {
    let mut sizes: LogSizes = broker
        .log_manager
        .logs()
        .iter()
        .map(|log| {
            let dir = log.health().path().display().to_string();
            let tp = log.topic_partition();
            (
                dir,
                tp.topic.clone(),
                tp.partition,
                log.size_bytes() as i64,
                false,
            )
        })
        .collect();
    let dirs = broker.log_manager.dirs();
    for (tp, dir) in broker.moving_logs() {
        let dir = dirs.dirs()[dir].health.path().display().to_string();
        sizes.push((dir, tp.topic, tp.partition, 0, true));
    }
    sizes
}

/// Total and usable bytes of the filesystem holding `path`.
fn disk_space(path: &std::path::Path) -> (i64, i64) {
    let Ok(c_path) = std::ffi::CString::new(path.as_os_str().as_encoded_bytes()) else {
        return (-1, -1);
    };
    // SAFETY: statvfs fills a zeroed, owned struct from a valid C string.
    let mut stat: libc::statvfs = unsafe { std::mem::zeroed() };
    if unsafe { libc::statvfs(c_path.as_ptr(), &mut stat) } != 0 {
        return (-1, -1);
    }
    let block = stat.f_frsize as i64;
    (stat.f_blocks as i64 * block, stat.f_bavail as i64 * block)
}

pub async fn handle(
    ctx: &RequestContext,
    request: DescribeLogDirsRequest,
    version: i16,
) -> DescribeLogDirsResponse {
    let mesh = ctx.broker.mesh();
    let mut sizes = LogSizes::new();
    for shard in 0..mesh.nr_shards() {
        let report = mesh
            .invoke_on(shard, &ctx.broker, |broker: Rc<ShardBroker>| async move {
                local_sizes(&broker)
            })
            .await
            .unwrap_or_default();
        sizes.extend(report);
    }
    let wanted = |topic: &str, partition: i32| {
        request.topics.as_ref().is_none_or(|topics| {
            topics
                .iter()
                .any(|t| t.topic.0.as_str() == topic && t.partitions.contains(&partition))
        })
    };
    let results = ctx
        .broker
        .log_manager
        .dirs()
        .dirs()
        .iter()
        .map(|dir| {
            let path = dir.health.path().display().to_string();
            let mut topics: BTreeMap<&str, Vec<DescribeLogDirsPartition>> = BTreeMap::new();
            for (_, topic, partition, size, future) in sizes
                .iter()
                .filter(|(d, t, p, ..)| *d == path && wanted(t, *p))
            {
                topics.entry(topic).or_default().push(
                    DescribeLogDirsPartition::default()
                        .with_partition_index(*partition)
                        .with_partition_size(*size)
                        .with_offset_lag(0)
                        .with_is_future_key(*future),
                );
            }
            let topics = topics
                .into_iter()
                .map(|(name, partitions)| {
                    DescribeLogDirsTopic::default()
                        .with_name(TopicName(StrBytes::from_string(name.to_owned())))
                        .with_partitions(partitions)
                })
                .collect();
            let code = if dir.health.is_offline() {
                ResponseError::KafkaStorageError.code()
            } else {
                0
            };
            let mut result = DescribeLogDirsResult::default()
                .with_error_code(code)
                .with_log_dir(StrBytes::from_string(path))
                .with_topics(topics);
            if version >= 4 {
                let (total, usable) = disk_space(dir.health.path());
                result = result.with_total_bytes(total).with_usable_bytes(usable);
            }
            result
        })
        .collect();
    DescribeLogDirsResponse::default()
        .with_error_code(0)
        .with_results(results)
}
