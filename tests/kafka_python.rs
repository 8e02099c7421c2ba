//! kafka-python's producer and consumer.

mod common;

use std::process::Command;

use common::Broker;

#[test]
fn kafka_python_produces_and_consumes() {
    let broker = Broker::start(&[]);
    let script = concat!(
        env!("CARGO_MANIFEST_DIR"),
        "/tests/support/python/produce_consume.py"
    );
    let output = Command::new("timeout")
        .args([
            "120",
            "python3",
            script,
            &broker.address(),
            "pythonic",
            "500",
        ])
        .output()
        .expect("python3");
    assert!(
        output.status.success(),
        "kafka-python failed:\n{}\n{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    let lines: Vec<String> = String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(str::to_owned)
        .collect();
    let expected: Vec<String> = (0..500).map(|i| format!("{i} k{} v{i}", i % 10)).collect();
    assert_eq!(lines, expected);
}
