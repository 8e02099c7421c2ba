//! A broker's ZooKeeper session is its failure detector: at the default
//! `zookeeper.session.timeout.ms` (2 s, where Kafka needs 18 s for its
//! garbage collector) a dead broker's leaderships move within about that, so
//! a live one must keep its session however busy the machine is. Alone in
//! its binary: the test saturates both cores, and tests in one binary run
//! side by side.

mod common;

use std::time::Duration;

use common::cluster::{kafka_topics, ZooKeeper};

const CHROOT: &str = "/session";

fn path(znode: &str) -> String {
    format!("{CHROOT}{znode}")
}

/// Both cores kept busy for several seconds, by spinning threads and a
/// producer flat out with acks=all to three replicas, while topics are
/// created and grown, cost no broker its
/// ZooKeeper session at the default `zookeeper.session.timeout.ms`: every
/// registration and the controller stay as they were, and no ISR shrinks.
#[test]
fn brokers_under_load_keep_their_sessions() {
    use rdkafka::producer::{BaseRecord, Producer, ThreadedProducer};
    use std::sync::atomic::{AtomicBool, Ordering};
    use std::sync::Arc;

    const LOAD: Duration = Duration::from_secs(10);
    const SPINNERS: usize = 4;
    let zk = ZooKeeper::start();
    let brokers: Vec<_> = (1..=3).map(|id| zk.start_broker(CHROOT, id, &[])).collect();
    let bootstrap: Vec<String> = brokers.iter().map(|b| b.address()).collect();
    let bootstrap = bootstrap.join(",");
    kafka_topics(
        &brokers[0].address(),
        &[
            "--create",
            "--topic",
            "loaded",
            "--partitions",
            "6",
            "--replication-factor",
            "3",
            "--config",
            "min.insync.replicas=2",
        ],
    );
    let isrs = |zk: &ZooKeeper| -> Vec<usize> {
        (0..6)
            .map(|p| {
                let state = zk
                    .json(&path(&format!(
                        "/brokers/topics/loaded/partitions/{p}/state"
                    )))
                    .unwrap();
                state["isr"].as_array().unwrap().len()
            })
            .collect()
    };
    zk.wait_for(Duration::from_secs(20), "full ISRs", |zk| {
        isrs(zk).iter().all(|n| *n == 3)
    });
    let registrations = |zk: &ZooKeeper| -> Vec<i64> {
        (1..=3)
            .map(|id| zk.get(&path(&format!("/brokers/ids/{id}"))).unwrap().1)
            .collect()
    };
    let before = (registrations(&zk), zk.controller_epoch(CHROOT));

    let loading = Arc::new(AtomicBool::new(true));
    let spinners: Vec<_> = (0..SPINNERS)
        .map(|_| {
            let loading = loading.clone();
            std::thread::spawn(move || {
                let mut spins = 0u64;
                while loading.load(Ordering::Relaxed) {
                    spins = std::hint::black_box(spins + 1);
                }
            })
        })
        .collect();
    let producer: ThreadedProducer<rdkafka::producer::DefaultProducerContext> =
        rdkafka::ClientConfig::new()
            .set("bootstrap.servers", &bootstrap)
            .set("acks", "all")
            .set("linger.ms", "5")
            .create()
            .unwrap();
    // The controller and the brokers' control threads busy too: 300 more
    // replicas made while the load runs.
    let creating = {
        let address = brokers[1].address();
        std::thread::spawn(move || {
            std::thread::sleep(Duration::from_secs(2));
            kafka_topics(
                &address,
                &["--create", "--topic", "more", "--partitions", "100"],
            );
            kafka_topics(
                &address,
                &["--alter", "--topic", "more", "--partitions", "200"],
            );
        })
    };
    let value = vec![b'x'; 1024];
    let started = std::time::Instant::now();
    let mut sent = 0u64;
    while started.elapsed() < LOAD {
        let record = BaseRecord::<(), [u8]>::to("loaded").payload(&value);
        match producer.send(record) {
            Ok(()) => sent += 1,
            Err(_) => std::thread::sleep(Duration::from_millis(1)),
        }
    }
    loading.store(false, Ordering::Relaxed);
    for spinner in spinners {
        spinner.join().unwrap();
    }
    producer.flush(Duration::from_secs(60)).unwrap();
    creating.join().unwrap();
    assert!(sent > 10_000, "{sent} records sent under load");

    assert_eq!((registrations(&zk), zk.controller_epoch(CHROOT)), before);
    assert!(isrs(&zk).iter().all(|n| *n == 3), "{:?}", isrs(&zk));
    for broker in &brokers {
        let log = broker.log();
        assert!(!log.contains("registered again"), "{log}");
    }
}
