//! librdkafka through kcat: 100k keyed records over six partitions with
//! acks=all and idempotence, consumed back from the beginning, a clean broker
//! restart in the middle.

mod common;

use std::collections::{BTreeMap, HashMap};

use common::{kcat, Broker};

const RECORDS: usize = 100_000;

fn produce(broker: &Broker, range: std::ops::Range<usize>) {
    let input: String = range
        .map(|i| format!("key-{}:value-{i}\n", i % 997))
        .collect();
    kcat(
        &[
            "-b",
            &broker.address(),
            "-t",
            "keyed",
            "-P",
            "-K:",
            "-X",
            "acks=all",
            "-X",
            "linger.ms=5",
        ],
        Some(&input),
    );
}

#[test]
fn librdkafka_produces_and_consumes_across_a_restart() {
    let mut broker = Broker::start(&["num.partitions=6"]);
    produce(&broker, 0..RECORDS / 2);
    broker.stop();
    broker.restart();
    produce(&broker, RECORDS / 2..RECORDS);

    let listing = kcat(&["-b", &broker.address(), "-L", "-t", "keyed"], None);
    assert!(listing.contains("6 partitions"), "{listing}");

    let consumed = kcat(
        &[
            "-b",
            &broker.address(),
            "-t",
            "keyed",
            "-C",
            "-e",
            "-o",
            "beginning",
            "-f",
            "%p %o %k %s\\n",
        ],
        None,
    );
    let mut partition_of_key: HashMap<String, String> = HashMap::new();
    let mut last_offset: BTreeMap<String, i64> = BTreeMap::new();
    let mut values_per_key: HashMap<String, Vec<usize>> = HashMap::new();
    let mut count = 0;
    for line in consumed.lines() {
        let parts: Vec<&str> = line.split(' ').collect();
        let [partition, offset, key, value] = parts[..] else {
            panic!("bad line {line:?}")
        };
        let offset: i64 = offset.parse().unwrap();
        count += 1;
        // Offsets grow by one within each partition: nothing lost, nothing twice.
        let previous = last_offset
            .insert(partition.to_owned(), offset)
            .unwrap_or(-1);
        assert_eq!(
            offset,
            previous + 1,
            "gap or repeat in partition {partition}"
        );
        // Each key lives on one partition, its records in the order produced.
        let home = partition_of_key
            .entry(key.to_owned())
            .or_insert_with(|| partition.to_owned());
        assert_eq!(home, partition, "{key} moved partitions");
        values_per_key
            .entry(key.to_owned())
            .or_default()
            .push(value.trim_start_matches("value-").parse().unwrap());
    }
    assert_eq!(count, RECORDS);
    assert_eq!(last_offset.len(), 6, "every partition used");
    for (key, values) in values_per_key {
        assert!(values.windows(2).all(|w| w[0] < w[1]), "{key} out of order");
    }
}
