use std::rc::Rc;

use serde_json::{json, Value};
use shards::log::LogConfig;

use super::*;
use crate::metadata::image::{Broker, EndPoint};
use crate::metadata::store::EmbeddedStore;
use crate::metadata::znodes::BrokerIdZNode;
use crate::test_support::run_local;

/// Broker `id`'s registration, listening on 127.0.0.1:9092 + `id`.
fn registration(id: i32) -> BrokerIdZNode {
    BrokerIdZNode {
        broker: Broker {
            id,
            endpoints: vec![EndPoint {
                listener_name: "PLAINTEXT".into(),
                security_protocol: "PLAINTEXT".into(),
                host: "127.0.0.1".into(),
                port: 9092 + id as u16,
            }],
            rack: None,
        },
        timestamp_ms: 1,
    }
}

/// A broker registered in a store under `dir`, and its controller.
async fn controller(dir: &std::path::Path) -> KafkaController<EmbeddedStore> {
    let (store, _events) = EmbeddedStore::open(dir).unwrap();
    let zk = Rc::new(KafkaZkClient::new(store));
    zk.create_top_level_paths().await.unwrap();
    let cluster_id = zk
        .get_or_create_cluster_id("Frrn4MFERc6ziAA8S75Ejg")
        .await
        .unwrap();
    zk.register_broker(&registration(0)).await.unwrap();
    let defaults = TopicDefaults {
        num_partitions: 1,
        default_replication_factor: 1,
        log_config: LogConfig::default(),
    };
    let mut controller = KafkaController::new(zk, 0, cluster_id, defaults);
    controller.elect().await.unwrap();
    assert!(controller.is_active());
    controller
}

async fn data(c: &KafkaController<EmbeddedStore>, path: &str) -> Value {
    serde_json::from_slice(&c.zk.zk().get_data(path).await.unwrap().0).unwrap()
}

async fn refused(created: Vec<Result<(i32, i16), ApiError>>) -> ResponseError {
    created[0].as_ref().unwrap_err().error
}

#[test]
fn topics_are_created_altered_grown_and_deleted_in_kafkas_layout() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = controller(dir.path()).await;
        let topic = NewTopic {
            name: "orders".into(),
            num_partitions: 3,
            replication_factor: -1,
            configs: vec![("cleanup.policy".into(), Some("compact".into()))],
            ..NewTopic::default()
        };
        assert_eq!(
            c.create_topics(std::slice::from_ref(&topic), false).await,
            vec![Ok((3, 1))]
        );
        assert_eq!(
            refused(c.create_topics(&[topic], false).await).await,
            ResponseError::TopicAlreadyExists
        );
        let named = |name: &str, partitions, factor| NewTopic {
            name: name.into(),
            num_partitions: partitions,
            replication_factor: factor,
            ..NewTopic::default()
        };
        assert_eq!(
            refused(c.create_topics(&[named("bad/name", 1, 1)], false).await).await,
            ResponseError::InvalidTopicException
        );
        assert_eq!(
            refused(c.create_topics(&[named("rf", 1, 3)], false).await).await,
            ResponseError::InvalidReplicationFactor
        );
        let bad_config = NewTopic {
            configs: vec![("retention.ms".into(), Some("soon".into()))],
            ..named("cfg", 1, 1)
        };
        assert_eq!(
            refused(c.create_topics(&[bad_config], false).await).await,
            ResponseError::InvalidConfig
        );

        let state = data(&c, "/brokers/topics/orders/partitions/2/state").await;
        assert_eq!(
            state,
            json!({"version": 1, "leader": 0, "leader_epoch": 0, "controller_epoch": 1, "isr": [0]})
        );
        let assignment = data(&c, "/brokers/topics/orders").await;
        assert_eq!(
            assignment["partitions"],
            json!({"0": [0], "1": [0], "2": [0]})
        );
        assert_eq!(
            data(&c, "/config/topics/orders").await,
            json!({"version": 1, "config": {"cleanup.policy": "compact"}})
        );

        c.create_partitions("orders", 5, None, false).await.unwrap();
        let partitions_refused = |result: Result<(), ApiError>| result.unwrap_err().error;
        assert_eq!(
            partitions_refused(c.create_partitions("orders", 4, None, false).await),
            ResponseError::InvalidPartitions
        );
        assert_eq!(
            partitions_refused(c.create_partitions("orders", i32::MAX, None, false).await),
            ResponseError::InvalidPartitions,
            "no unbounded allocation from a request"
        );
        for bad in [vec![vec![]], vec![vec![7]], vec![vec![0, 0]]] {
            assert_eq!(
                partitions_refused(c.create_partitions("orders", 6, Some(bad), false).await),
                ResponseError::InvalidReplicaAssignment
            );
        }
        let defaults = LogConfig::default();
        assert_eq!(
            partitions_refused(
                alter_topic_config(&c.zk, &defaults, "orders/partitions", &[], false, false).await
            ),
            ResponseError::InvalidTopicException,
            "names become znode paths: never a path"
        );
        let retention = [("retention.ms".into(), ConfigOp::Set, Some("1000".into()))];
        alter_topic_config(&c.zk, &defaults, "orders", &retention, false, false)
            .await
            .unwrap();
        // Every broker reads it again on the notification.
        let changes = c.zk.get_config_changes(false).await.unwrap();
        assert_eq!(changes, ["config_change_0000000000"]);
        assert_eq!(
            c.zk.get_config_change(&changes[0]).await.unwrap(),
            "topics/orders"
        );
        c.on_topic_config_change("orders").await.unwrap();
        let image = c.build_image(1).unwrap();
        let orders = image.topic("orders").unwrap();
        assert_eq!(orders.partitions.len(), 5);
        assert!(orders.log_config.cleanup_policy.compact);
        assert_eq!(orders.log_config.retention_ms, 1000);
        assert_eq!(image.topic_by_id(&orders.id).unwrap().name, "orders");

        let deleted = c.delete_topics(&["orders".into(), "nope".into()]).await;
        assert_eq!(
            deleted[1].as_ref().unwrap_err().error,
            ResponseError::UnknownTopicOrPartition
        );
        assert!(c.build_image(2).unwrap().topic("orders").is_none());
        assert_eq!(c.zk.zk().exists("/brokers/topics/orders").await, Ok(None));
        assert_eq!(c.zk.zk().exists("/config/topics/orders").await, Ok(None));
        assert!(c
            .zk
            .zk()
            .get_children("/admin/delete_topics")
            .await
            .unwrap()
            .is_empty());

        // Producer ids are never reused, across restarts too.
        let first = c.allocate_producer_id().await.unwrap();
        assert_eq!(c.allocate_producer_id().await.unwrap(), first + 1);

        // The tree survives a restart; the controller epoch moves on.
        c.create_topics(&[named("kept", 2, 1)], false).await;
        drop(c);
        let mut c = controller(dir.path()).await;
        assert_eq!(c.context.as_ref().unwrap().epoch.epoch, 2);
        let image = c.build_image(1).unwrap();
        let kept = image.topic("kept").unwrap();
        assert_eq!(kept.partitions.len(), 2);
        assert_eq!(
            (kept.partitions[1].leader, &kept.partitions[1].isr),
            (0, &vec![0])
        );
        assert!(c.allocate_producer_id().await.unwrap() > first + 1);
    });
}

#[test]
fn every_controller_write_is_fenced_by_its_epoch() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = controller(dir.path()).await;
        // Another controller took office: /controller_epoch moved on.
        let client = c.zk.clone();
        let zk = client.zk();
        let (_, stat) = zk.get_data("/controller_epoch").await.unwrap();
        zk.set_data("/controller_epoch", b"7", Some(stat.version))
            .await
            .unwrap();
        let created = c
            .create_topics(
                &[NewTopic {
                    name: "late".into(),
                    num_partitions: 1,
                    replication_factor: 1,
                    ..NewTopic::default()
                }],
                false,
            )
            .await;
        assert_eq!(
            created[0].as_ref().unwrap_err().error,
            ResponseError::NotController
        );
        assert_eq!(
            zk.exists("/brokers/topics/late/partitions/0/state").await,
            Ok(None),
            "the old controller wrote no partition state"
        );
        assert!(!c.is_active(), "it resigned");
        assert_eq!(
            c.allocate_producer_id().await.unwrap_err().error,
            ResponseError::NotController
        );
    });
}

#[test]
fn a_state_written_under_the_controller_is_read_again_and_elected_anew() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = controller(dir.path()).await;
        let client = c.zk.clone();
        let zk = client.zk();
        client.register_broker(&registration(1)).await.unwrap();
        c.on_broker_change().await.unwrap();
        let topic = NewTopic {
            name: "t".into(),
            num_partitions: -1,
            replication_factor: -1,
            assignments: vec![vec![1, 0]],
            ..NewTopic::default()
        };
        assert_eq!(c.create_topics(&[topic], false).await, vec![Ok((1, 2))]);
        let path = "/brokers/topics/t/partitions/0/state";
        assert_eq!(data(&c, path).await["leader"], json!(1));
        // Written under the controller (as by a first attempt whose answer
        // was lost): the same state at a newer version.
        let (bytes, stat) = zk.get_data(path).await.unwrap();
        zk.set_data(path, &bytes, Some(stat.version)).await.unwrap();
        // The leader goes away: its election meets the newer version.
        zk.multi(&[Op::Delete {
            path: "/brokers/ids/1".into(),
            version: None,
        }])
        .await
        .unwrap();
        c.on_broker_change().await.unwrap();
        let state = data(&c, path).await;
        assert_eq!(
            (&state["leader"], &state["leader_epoch"], &state["isr"]),
            (&json!(0), &json!(1), &json!([0]))
        );
        assert_eq!(zk.get_data(path).await.unwrap().1.version, stat.version + 2);
    });
}
