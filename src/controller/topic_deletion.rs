//! Kafka's TopicDeletionManager, for replicas that are all on this broker:
//! a topic marked under `/admin/delete_topics` loses its znodes (assignment
//! and partition states, config), then its mark, each write fenced; the
//! image without it makes every shard delete its logs.

use tracing::info;

use super::KafkaController;
use crate::metadata::kafka_zk_client::KafkaZkError;
use crate::metadata::zk_client::ZkClient;

impl<Z: ZkClient> KafkaController<Z> {
    /// The marks' watch fired. Returns whether a topic went.
    pub async fn on_topic_deletion(&mut self) -> bool {
        if !self.is_active() {
            return false;
        }
        match self.process_topic_deletions().await {
            Ok(deleted) => deleted,
            Err(KafkaZkError::ControllerMoved) => {
                self.resign();
                false
            }
            Err(error) => {
                tracing::error!(%error, "topic deletion failed");
                false
            }
        }
    }

    /// Deletes every topic marked for deletion (a mark for a topic that does
    /// not exist is only removed) and watches for the next mark. Returns
    /// whether a topic went.
    pub(super) async fn process_topic_deletions(&mut self) -> Result<bool, KafkaZkError> {
        let mut deleted = Vec::new();
        let epoch = self.context_mut().epoch;
        for name in self.zk.get_topic_deletions(true).await? {
            self.zk.delete_topic_znodes(epoch, &name).await?;
            if let Some(topic) = self.context_mut().topics.remove(&name) {
                info!(topic = name, "deleted topic");
                deleted.push((name, topic));
            }
        }
        if !deleted.is_empty() {
            self.send_update_metadata(&deleted);
        }
        Ok(!deleted.is_empty())
    }
}
