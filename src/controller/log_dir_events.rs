//! A broker's failed log dir, as Kafka's controller handles it: the broker
//! writes `/log_dir_event_notification/log_dir_event_<seq>`; the controller
//! takes each notification (deleting it) and sends that broker LeaderAndIsr
//! for every replica it holds; the replicas it answers KAFKA_STORAGE_ERROR
//! for are offline there (`replicas_on_offline_dirs`): partitions they led
//! get new leaders and they leave the ISRs, while the broker's other
//! replicas go on serving.

use std::collections::BTreeSet;

use shards::log::TopicPartition;
use tracing::{info, warn};

use super::KafkaController;
use crate::metadata::kafka_zk_client::KafkaZkError;
use crate::metadata::zk_client::ZkClient;

impl<Z: ZkClient> KafkaController<Z> {
    /// At failover: the notifications are dropped unread, since every live
    /// broker is sent LeaderAndIsr for all its replicas anyway.
    pub(super) async fn clear_log_dir_events(&mut self) -> Result<(), KafkaZkError> {
        let epoch = self.context_mut().epoch;
        for child in self.zk.get_log_dir_events_and_watch().await? {
            self.zk.take_log_dir_event(epoch, &child).await?;
        }
        Ok(())
    }

    /// The notifications' watch fired: each broker named is sent
    /// LeaderAndIsr for all its replicas, to learn which are offline.
    pub async fn on_log_dir_event(&mut self) -> Result<(), KafkaZkError> {
        if !self.is_active() {
            return Ok(());
        }
        let epoch = self.context_mut().epoch;
        let mut brokers = BTreeSet::new();
        for child in self.zk.get_log_dir_events_and_watch().await? {
            brokers.insert(self.zk.take_log_dir_event(epoch, &child).await?);
        }
        let brokers: Vec<i32> = brokers.into_iter().collect();
        info!(?brokers, "log dir failure reported");
        self.send_whole_state(&brokers);
        Ok(())
    }

    /// `broker` answered KAFKA_STORAGE_ERROR for `partitions`: they are
    /// offline there; partitions whose leader or ISR changes are elected
    /// again and every broker told.
    pub async fn on_replicas_on_offline_dirs(
        &mut self,
        broker: i32,
        partitions: Vec<TopicPartition>,
    ) -> Result<(), KafkaZkError> {
        let Some(context) = self.context.as_mut() else {
            return Ok(());
        };
        if !context.live_brokers.contains_key(&broker) {
            return Ok(());
        }
        let offline = context.replicas_on_offline_dirs.entry(broker).or_default();
        let before = offline.len();
        offline.extend(partitions.into_iter().map(|tp| (tp.topic, tp.partition)));
        if offline.len() == before {
            return Ok(());
        }
        warn!(broker, replicas = ?offline, "replicas on an offline log dir");
        self.elect_after_broker_change().await?;
        self.send_update_metadata();
        Ok(())
    }
}
