//! AlterReplicaLogDirs (key 34): moves replicas of this broker to another
//! of its log dirs. Each is answered once its move has started (the copy
//! runs on the owning shard); LOG_DIR_NOT_FOUND for a dir not in
//! `log.dirs`, KAFKA_STORAGE_ERROR for an offline one, REPLICA_NOT_AVAILABLE
//! for a partition this broker holds no log of.

use std::path::Path;

use kafka_protocol::messages::alter_replica_log_dirs_response::{
    AlterReplicaLogDirPartitionResult, AlterReplicaLogDirTopicResult,
};
use kafka_protocol::messages::{AlterReplicaLogDirsRequest, AlterReplicaLogDirsResponse};

use super::RequestContext;
use crate::protocol::{ErrorCode, ResponseError};

/// The index in `log.dirs` of `path`, compared as the file system resolves both.
fn log_dir_index(configured: &[std::path::PathBuf], path: &str) -> Option<usize> {
    let resolve = |path: &Path| std::fs::canonicalize(path).unwrap_or_else(|_| path.to_owned());
    let wanted = resolve(Path::new(path));
    configured.iter().position(|dir| resolve(dir) == wanted)
}

pub async fn handle(
    ctx: &RequestContext,
    request: AlterReplicaLogDirsRequest,
    _version: i16,
) -> AlterReplicaLogDirsResponse {
    let mut results: Vec<AlterReplicaLogDirTopicResult> = Vec::new();
    for dir in request.dirs {
        let index = log_dir_index(&ctx.broker.config.log_dirs, dir.path.as_str());
        let offline = |index: usize| {
            ctx.broker.log_manager.dirs().dirs()[index]
                .health
                .is_offline()
        };
        for topic in dir.topics {
            let mut partitions = Vec::with_capacity(topic.partitions.len());
            for partition in topic.partitions {
                let moved = match index {
                    None => Err(ResponseError::LogDirNotFound),
                    Some(index) if offline(index) => Err(ResponseError::KafkaStorageError),
                    Some(index) => {
                        ctx.broker
                            .alter_replica_log_dir(topic.name.as_str(), partition, index)
                            .await
                    }
                };
                partitions.push(
                    AlterReplicaLogDirPartitionResult::default()
                        .with_partition_index(partition)
                        .with_error_code(moved.error_code()),
                );
            }
            results.push(
                AlterReplicaLogDirTopicResult::default()
                    .with_topic_name(topic.name)
                    .with_partitions(partitions),
            );
        }
    }
    AlterReplicaLogDirsResponse::default().with_results(results)
}
