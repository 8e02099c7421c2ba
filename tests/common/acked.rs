//! What cluster tests check of records: an acks=all producer that keeps
//! what was acknowledged, every record read back, and replicas compared
//! byte for byte.

use std::borrow::Borrow;
use std::collections::BTreeMap;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::Duration;

use rdkafka::producer::{BaseProducer, BaseRecord, Producer};
use rdkafka::Message;

use super::cluster::wait;
use super::{kcat, Broker};

/// The bytes of a partition's segment files on a broker, in offset order.
pub fn replica_bytes(broker: &Broker, topic: &str, partition: i32) -> Vec<u8> {
    let dir = broker.data_dir().join(format!("{topic}-{partition}"));
    let mut logs: Vec<_> = std::fs::read_dir(&dir)
        .unwrap()
        .filter_map(|entry| entry.ok().map(|e| e.path()))
        .filter(|path| path.extension().is_some_and(|e| e == "log"))
        .collect();
    logs.sort();
    logs.iter()
        .flat_map(|path| std::fs::read(path).unwrap())
        .collect()
}

/// Waits until every replica of each partition holds the same bytes.
pub fn replicas_agree<B: Borrow<Broker>>(brokers: &[B], topic: &str, partitions: i32) {
    wait(Duration::from_secs(20), "identical replicas", || {
        (0..partitions).all(|p| {
            let first = replica_bytes(brokers[0].borrow(), topic, p);
            brokers[1..]
                .iter()
                .all(|b| replica_bytes(b.borrow(), topic, p) == first)
        })
    });
}

/// Every record of `topic`, read from the beginning: (partition, value).
pub fn read_all(bootstrap: &str, topic: &str) -> Vec<(i32, String)> {
    kcat(
        &[
            "-b", bootstrap, "-t", topic, "-C", "-e", "-q", "-f", "%p %s\n",
        ],
        None,
    )
    .lines()
    .map(|line| {
        let (partition, value) = line.split_once(' ').unwrap();
        (partition.parse().unwrap(), value.to_owned())
    })
    .collect()
}

pub struct Acked {
    acked: Arc<Mutex<Vec<(i32, i64, String)>>>,
    errors: Arc<Mutex<Vec<String>>>,
    /// `RDKAFKA_DEBUG` is set: librdkafka's log goes to stderr.
    log: bool,
}

impl rdkafka::ClientContext for Acked {
    /// librdkafka's log, on stderr with the wall clock in ms (tests' brokers
    /// log theirs), when `RDKAFKA_DEBUG` turns it on.
    fn log(&self, level: rdkafka::config::RDKafkaLogLevel, facility: &str, message: &str) {
        if !self.log {
            return;
        }
        let now_ms = shards::log::wall_clock_ms();
        eprintln!("rdkafka {now_ms} {level:?} {facility} {message}");
    }
}

impl rdkafka::producer::ProducerContext for Acked {
    type DeliveryOpaque = ();

    fn delivery(&self, result: &rdkafka::message::DeliveryResult<'_>, _: ()) {
        match result {
            Ok(message) => {
                let value = String::from_utf8(message.payload().unwrap().to_vec()).unwrap();
                self.acked
                    .lock()
                    .unwrap()
                    .push((message.partition(), message.offset(), value));
            }
            Err((error, _)) => self.errors.lock().unwrap().push(error.to_string()),
        }
    }
}

/// The acknowledged records (partition, offset, value) and the delivery errors.
pub type AckedRecords = (Vec<(i32, i64, String)>, Vec<String>);

/// rdkafka, acks=all and idempotent, writing numbered records without pause
/// until `producing` is cleared; returns the acknowledged records and the
/// delivery errors.
pub fn produce_until(
    bootstrap: String,
    topic: &'static str,
    producing: Arc<AtomicBool>,
) -> std::thread::JoinHandle<AckedRecords> {
    std::thread::spawn(move || {
        let acked = Arc::new(Mutex::new(Vec::new()));
        let errors = Arc::new(Mutex::new(Vec::new()));
        let mut config = rdkafka::ClientConfig::new();
        config
            .set("bootstrap.servers", &bootstrap)
            .set("acks", "all")
            .set("enable.idempotence", "true")
            .set("linger.ms", "2")
            .set("message.timeout.ms", "120000");
        // For a failing run: librdkafka's `debug` contexts, e.g. `eos,broker`.
        let debug = std::env::var("RDKAFKA_DEBUG").ok();
        if let Some(contexts) = &debug {
            config
                .set("debug", contexts)
                .set_log_level(rdkafka::config::RDKafkaLogLevel::Debug);
        }
        let producer: BaseProducer<Acked> = config
            .create_with_context(Acked {
                acked: acked.clone(),
                errors: errors.clone(),
                log: debug.is_some(),
            })
            .unwrap();
        let mut next = 0u64;
        while producing.load(Ordering::Acquire) {
            let value = next.to_string();
            let key = (next % 16).to_string();
            let record = BaseRecord::to(topic).key(&key).payload(&value);
            if producer.send(record).is_ok() {
                next += 1;
            }
            producer.poll(Duration::from_millis(1));
        }
        producer.flush(Duration::from_secs(120)).unwrap();
        let acked = acked.lock().unwrap().clone();
        let errors = errors.lock().unwrap().clone();
        (acked, errors)
    })
}

/// Every acknowledged record is read back once, at its offset's place, and
/// each partition's values only grow (the producer's order).
pub fn check_acknowledged(acked: &[(i32, i64, String)], read: &[(i32, String)]) {
    let mut by_partition: BTreeMap<i32, Vec<String>> = BTreeMap::new();
    for (partition, value) in read {
        by_partition
            .entry(*partition)
            .or_default()
            .push(value.clone());
    }
    for (partition, offset, value) in acked {
        let values = by_partition.get(partition);
        if *offset < 0 {
            // librdkafka's implicit ack: a request whose answer was lost (its
            // leader killed) is acknowledged by a later one's success, with
            // no offset (RD_KAFKA_OFFSET_INVALID).
            assert!(
                values.is_some_and(|values| values.contains(value)),
                "acknowledged {value} in {partition} without an offset"
            );
            continue;
        }
        assert_eq!(
            values.and_then(|values| values.get(*offset as usize)),
            Some(value),
            "acknowledged {value} at {partition}/{offset}"
        );
    }
    // After the acknowledged records, so that a loss is named as one.
    for values in by_partition.values() {
        let numbers: Vec<u64> = values.iter().map(|v| v.parse().unwrap()).collect();
        assert!(
            numbers.windows(2).all(|pair| pair[0] < pair[1]),
            "a partition's records are in order, each once"
        );
    }
}
