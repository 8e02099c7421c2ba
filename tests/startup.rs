//! Starting from `server.properties`: unknown keys are warned about, an invalid
//! value stops the start with a message naming the key.

use std::process::Command;

fn start(overrides: &[&str]) -> std::process::Output {
    let dir = tempfile::tempdir().unwrap();
    let config = dir.path().join("server.properties");
    std::fs::write(
        &config,
        format!(
            "log.dirs={}\nlisteners=PLAINTEXT://127.0.0.1:0\n",
            dir.path().join("data").display()
        ),
    )
    .unwrap();
    let mut command = Command::new("timeout");
    command
        .args([
            "--preserve-status",
            "-s",
            "TERM",
            "3",
            env!("CARGO_BIN_EXE_ringbroker"),
            "start",
        ])
        .arg(&config);
    for entry in overrides {
        command.arg("--override").arg(entry);
    }
    command.output().unwrap()
}

#[test]
fn invalid_values_stop_the_start_and_name_the_key() {
    for (entry, key) in [
        ("log.segment.bytes=lots", "log.segment.bytes"),
        ("num.partitions=-x", "num.partitions"),
        ("listeners=SSL://:9093", "listeners"),
        ("zookeeper.connect=127.0.0.1:2181/a/", "zookeeper.connect"),
        ("zookeeper.connect=127.0.0.1:port", "zookeeper.connect"),
    ] {
        let output = start(&[entry]);
        assert!(!output.status.success(), "{entry} was accepted");
        let stderr = String::from_utf8_lossy(&output.stderr);
        assert!(stderr.contains(key), "{entry}: {stderr}");
    }
}

#[test]
fn zookeeper_unreachable_at_start_stops_the_start_after_the_connection_timeout() {
    // Nothing listens on port 1.
    let output = start(&[
        "zookeeper.connect=127.0.0.1:1",
        "zookeeper.connection.timeout.ms=1000",
    ]);
    assert!(!output.status.success());
    let stderr = String::from_utf8_lossy(&output.stderr);
    assert!(
        stderr.contains(
            "cannot open a ZooKeeper session at 127.0.0.1:1 (zookeeper.connect) within 1000 ms"
        ),
        "{stderr}"
    );
}

#[test]
fn unknown_keys_are_warned_about_and_sigterm_shuts_down_cleanly() {
    let output = start(&["made.up.key=1"]);
    let log = format!(
        "{}{}",
        String::from_utf8_lossy(&output.stdout),
        String::from_utf8_lossy(&output.stderr)
    );
    assert!(
        output.status.success(),
        "SIGTERM is a clean shutdown: {log}"
    );
    assert!(
        log.contains("unknown configuration key") && log.contains("made.up.key"),
        "{log}"
    );
    assert!(log.contains("ringbroker is ready"), "{log}");
    assert!(log.contains("shut down cleanly"), "{log}");
}
