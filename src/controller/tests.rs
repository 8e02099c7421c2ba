use std::cell::Cell;
use std::rc::Rc;

use kafka_protocol::messages::{alter_partition_request, AlterPartitionRequest, BrokerId};
use serde_json::{json, Value};
use shards::log::LogConfig;

use super::reassignment::Reassignment;
use super::*;
use crate::metadata::image::{Broker, EndPoint};
use crate::metadata::store::EmbeddedStore;
use crate::metadata::zk_client::{CreateMode, MultiError, Stat};
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
    controller_on(store).await
}

/// Broker 0 registered in `store`, and its controller.
async fn controller_on<Z: ZkClient>(store: Z) -> KafkaController<Z> {
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

async fn data<Z: ZkClient>(c: &KafkaController<Z>, path: &str) -> Value {
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

const STATE_PATH: &str = "/brokers/topics/t/partitions/0/state";

/// `c` with brokers 0 and 1 live and a topic "t" of one partition on
/// `replicas`.
async fn topic_on<Z: ZkClient>(
    mut c: KafkaController<Z>,
    replicas: Vec<i32>,
) -> KafkaController<Z> {
    c.zk.register_broker(&registration(1)).await.unwrap();
    c.on_broker_change().await.unwrap();
    let topic = NewTopic {
        name: "t".into(),
        num_partitions: -1,
        replication_factor: -1,
        assignments: vec![replicas],
        ..NewTopic::default()
    };
    assert_eq!(c.create_topics(&[topic], false).await, vec![Ok((1, 2))]);
    c
}

/// Replaces the state znode's data with `rewrite` of it, bumping its version
/// as a write the controller did not make, or one whose answer it lost,
/// would. Returns the version before.
async fn rewrite_state<Z: ZkClient>(
    c: &KafkaController<Z>,
    rewrite: impl FnOnce(&mut Value),
) -> i32 {
    let (mut state, version) = state_and_version(c).await;
    rewrite(&mut state);
    let rewritten = serde_json::to_vec(&state).unwrap();
    c.zk.zk()
        .set_data(STATE_PATH, &rewritten, Some(version))
        .await
        .unwrap();
    version
}

/// Broker `id`'s registration gone, and the controller told.
async fn broker_gone<Z: ZkClient>(c: &mut KafkaController<Z>, id: i32) {
    let path = format!("/brokers/ids/{id}");
    let delete = Op::Delete {
        path,
        version: None,
    };
    c.zk.zk().multi(&[delete]).await.unwrap();
    c.on_broker_change().await.unwrap();
}

/// The state znode's JSON and its version.
async fn state_and_version<Z: ZkClient>(c: &KafkaController<Z>) -> (Value, i32) {
    let (bytes, stat) = c.zk.zk().get_data(STATE_PATH).await.unwrap();
    (serde_json::from_slice(&bytes).unwrap(), stat.version)
}

fn leader_epoch_isr(state: &Value) -> (&Value, &Value, &Value) {
    (&state["leader"], &state["leader_epoch"], &state["isr"])
}

#[test]
fn a_state_written_under_the_controller_is_read_again_and_elected_anew() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = topic_on(controller(dir.path()).await, vec![1, 0]).await;
        assert_eq!(data(&c, STATE_PATH).await["leader"], json!(1));
        // The same state at a newer version: the leader's election meets it.
        let version = rewrite_state(&c, |_| {}).await;
        broker_gone(&mut c, 1).await;
        let (state, written) = state_and_version(&c).await;
        assert_eq!(
            leader_epoch_isr(&state),
            (&json!(0), &json!(1), &json!([0]))
        );
        assert_eq!(written, version + 2, "read again, then written");
    });
}

#[test]
fn a_state_already_as_elected_is_not_written_again_and_its_version_is_kept() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = topic_on(controller(dir.path()).await, vec![1, 0]).await;
        // The very state the leader's election writes, already there.
        let version = rewrite_state(&c, |state| {
            state["leader"] = json!(0);
            state["leader_epoch"] = json!(1);
            state["isr"] = json!([0]);
        })
        .await;
        broker_gone(&mut c, 1).await;
        let (_, written) = state_and_version(&c).await;
        assert_eq!(written, version + 1, "not written twice");
        // The context holds the znode's version: the next election writes.
        broker_gone(&mut c, 0).await;
        let state = data(&c, STATE_PATH).await;
        assert_eq!(
            leader_epoch_isr(&state),
            (&json!(-1), &json!(2), &json!([0]))
        );
    });
}

#[test]
fn an_isr_change_whose_first_attempt_took_is_answered_as_made() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = topic_on(controller(dir.path()).await, vec![0, 1]).await;
        // The shrink the leader asks for, already in the znode.
        let version = rewrite_state(&c, |state| state["isr"] = json!([0])).await;
        let topic_id = c.context.as_ref().unwrap().topics["t"].id;
        let partition = alter_partition_request::PartitionData::default()
            .with_partition_index(0)
            .with_leader_epoch(0)
            .with_new_isr(vec![BrokerId(0)])
            .with_partition_epoch(version);
        let request = AlterPartitionRequest::default()
            .with_broker_id(BrokerId(0))
            .with_broker_epoch(-1)
            .with_topics(vec![alter_partition_request::TopicData::default()
                .with_topic_id(topic_id)
                .with_partitions(vec![partition])]);
        let response = c.alter_partition(request, 2).await;
        let answer = &response.topics[0].partitions[0];
        assert_eq!(
            (answer.error_code, answer.partition_epoch, &answer.isr),
            (0, version + 1, &vec![BrokerId(0)])
        );
    });
}

#[test]
fn a_reassignment_whose_completing_election_did_not_take_stays_ongoing() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let mut c = topic_on(controller(dir.path()).await, vec![0, 1]).await;
        // The target is in the ISR already, so the reassignment completes at
        // once, unless its election meets a state that moved on.
        rewrite_state(&c, |_| {}).await;
        let reassigned = c
            .alter_partition_reassignments(vec![(("t".into(), 0), Some(vec![1]))])
            .await
            .unwrap();
        assert!(reassigned[0].1.is_ok());
        let removing_0 = Reassignment {
            adding: vec![],
            removing: vec![0],
        };
        assert_eq!(
            c.list_partition_reassignments(None).unwrap(),
            vec![("t".into(), 0, vec![1, 0], removing_0)]
        );
        let topic = data(&c, "/brokers/topics/t").await;
        assert_eq!(
            (&topic["partitions"]["0"], &topic["removing_replicas"]["0"]),
            (&json!([1, 0]), &json!([0]))
        );
        // Phase A instead, at the version read: the old leader stays.
        let state = data(&c, STATE_PATH).await;
        assert_eq!(state["leader"], json!(0));

        // The next broker change completes it.
        c.zk.register_broker(&registration(2)).await.unwrap();
        c.on_broker_change().await.unwrap();
        assert!(c.list_partition_reassignments(None).unwrap().is_empty());
        let topic = data(&c, "/brokers/topics/t").await;
        assert_eq!(
            (&topic["partitions"]["0"], &topic["removing_replicas"]),
            (&json!([1]), &json!({}))
        );
        let state = data(&c, STATE_PATH).await;
        assert_eq!((&state["leader"], &state["isr"]), (&json!(1), &json!([1])));
    });
}

/// An embedded store that can lose the answer to the next state write:
/// that write is made or not, as `next_state_write_made` says, and answered
/// ConnectionLoss either way, as ZooKeeper's client answers a request whose
/// connection dropped.
struct LostAnswers {
    store: EmbeddedStore,
    next_state_write_made: Cell<Option<bool>>,
}

impl ZkClient for LostAnswers {
    async fn create(&self, path: &str, data: &[u8], mode: CreateMode) -> Result<String, ZkError> {
        self.store.create(path, data, mode).await
    }
    async fn get_data(&self, path: &str) -> Result<(Vec<u8>, Stat), ZkError> {
        self.store.get_data(path).await
    }
    async fn exists(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        self.store.exists(path).await
    }
    async fn set_data(
        &self,
        path: &str,
        data: &[u8],
        expected_version: Option<i32>,
    ) -> Result<Stat, ZkError> {
        self.store.set_data(path, data, expected_version).await
    }
    async fn get_children(&self, path: &str) -> Result<Vec<String>, ZkError> {
        self.store.get_children(path).await
    }
    async fn multi(&self, ops: &[Op]) -> Result<Vec<OpResult>, MultiError> {
        let writes_state = ops
            .iter()
            .any(|op| matches!(op, Op::SetData { path, .. } if path == STATE_PATH));
        match self.next_state_write_made.take() {
            Some(made) if writes_state => {
                if made {
                    self.store.multi(ops).await?;
                }
                Err(ZkError::ConnectionLoss("answer lost".into()).into())
            }
            armed => {
                self.next_state_write_made.set(armed);
                self.store.multi(ops).await
            }
        }
    }
    async fn get_children_and_watch(&self, path: &str) -> Result<Vec<String>, ZkError> {
        self.store.get_children_and_watch(path).await
    }
    async fn exists_and_watch(&self, path: &str) -> Result<Option<Stat>, ZkError> {
        self.store.exists_and_watch(path).await
    }
    fn session_id(&self) -> i64 {
        self.store.session_id()
    }
}

#[test]
fn a_state_write_whose_answer_was_lost_is_read_again() {
    run_local(|| async {
        let dir = tempfile::tempdir().unwrap();
        let (store, _events) = EmbeddedStore::open(dir.path()).unwrap();
        let store = LostAnswers {
            store,
            next_state_write_made: Cell::new(None),
        };
        let mut c = topic_on(controller_on(store).await, vec![1, 0]).await;
        let lose_next_state_write = |c: &KafkaController<LostAnswers>, made| {
            c.zk.zk().next_state_write_made.set(Some(made))
        };
        let (_, version) = state_and_version(&c).await;

        // Made: the state read again is the one written.
        lose_next_state_write(&c, true);
        broker_gone(&mut c, 1).await;
        let (state, written) = state_and_version(&c).await;
        assert_eq!(
            leader_epoch_isr(&state),
            (&json!(0), &json!(1), &json!([0]))
        );
        assert_eq!(written, version + 1, "written once");

        // Not made: the election runs again on the state read.
        lose_next_state_write(&c, false);
        broker_gone(&mut c, 0).await;
        let (state, written) = state_and_version(&c).await;
        assert_eq!(
            leader_epoch_isr(&state),
            (&json!(-1), &json!(2), &json!([0]))
        );
        assert_eq!(written, version + 2);
    });
}
