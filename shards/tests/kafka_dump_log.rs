//! Apache Kafka's own segment dumper (org.apache.kafka.tools.DumpLogSegments,
//! jars from Maven Central via tests/support/kafka/fetch.sh) reads our segments
//! and indexes without complaint.

mod common;

use std::path::{Path, PathBuf};
use std::process::Command;

use common::*;
use shards::log::LogConfig;

fn repo_root() -> PathBuf {
    Path::new(env!("CARGO_MANIFEST_DIR"))
        .parent()
        .unwrap()
        .to_owned()
}

fn dump(args: &[String]) -> (i32, String, String) {
    let root = repo_root();
    let fetch = Command::new(root.join("tests/support/kafka/fetch.sh"))
        .output()
        .expect("run fetch.sh");
    assert!(
        fetch.status.success(),
        "fetching Kafka's jars failed: {}",
        String::from_utf8_lossy(&fetch.stderr)
    );
    let output = Command::new("timeout")
        .arg("120")
        .arg(root.join("tests/support/kafka/kafka-run-class.sh"))
        .arg("org.apache.kafka.tools.DumpLogSegments")
        .args(args)
        .output()
        .expect("run DumpLogSegments");
    (
        output.status.code().unwrap_or(-1),
        String::from_utf8_lossy(&output.stdout).into_owned(),
        String::from_utf8_lossy(&output.stderr).into_owned(),
    )
}

#[test]
fn kafka_dump_log_segments_reads_our_files() {
    let dir = tempfile::tempdir().unwrap();
    let (files, indexes, expected_records) = run(async {
        let mut config = LogConfig::default();
        config.set("segment.bytes", "5000").unwrap();
        config.set("index.interval.bytes", "500").unwrap();
        config.set("cleanup.policy", "compact").unwrap();
        let log = open_log(dir.path(), config, 0, false).await;
        for round in 0..30 {
            let values: Vec<String> = (0..20)
                .map(|k| format!("value-{round}-{k}-{}", "x".repeat(50)))
                .collect();
            let records: Vec<(String, Option<&str>)> = (0..20)
                .map(|k| {
                    (
                        format!("key-{}", (k + round) % 25),
                        Some(values[k].as_str()),
                    )
                })
                .collect();
            let refs: Vec<(&str, Option<&str>)> =
                records.iter().map(|(k, v)| (k.as_str(), *v)).collect();
            log.append_as_leader(
                keyed_batch(&refs, 1_700_000_000_000 + round as i64),
                5,
                1_700_000_000_000,
            )
            .await
            .unwrap();
        }
        // Cleaning leaves offset gaps inside batches, which Kafka must accept too.
        log.set_high_watermark(log.log_end_offset());
        log.clean(1_700_000_000_000, 1 << 20).await.unwrap();
        let records = read_all(&log).await.len();
        log.close().await.unwrap();
        let mut files = Vec::new();
        let mut indexes = Vec::new();
        for segment in log.segments() {
            for suffix in [".log", ".index", ".timeindex"] {
                let path = log
                    .dir()
                    .join(format!("{:020}{suffix}", segment.base_offset()));
                if suffix != ".log" {
                    indexes.push(path.display().to_string());
                }
                files.push(path.display().to_string());
            }
        }
        (files, indexes, records)
    });
    assert!(files.len() >= 6, "several segments");

    let (code, stdout, stderr) =
        dump(&["--print-data-log".into(), "--files".into(), files.join(",")]);
    assert_eq!(code, 0, "{stderr}");
    // The dumper lists offset gaps (a segment not starting at 0, the cleaner's
    // removals) on stderr; gaps are fine as long as offsets only grow.
    for line in stderr.lines() {
        if line.starts_with("Non-consecutive offsets in ") {
            continue;
        }
        let pair: Vec<i64> = line
            .trim()
            .split(" is followed by ")
            .map(|n| {
                n.parse()
                    .unwrap_or_else(|_| panic!("Kafka complained: {stderr}"))
            })
            .collect();
        assert!(
            pair.len() == 2 && pair[1] > pair[0],
            "offsets go backwards: {line}"
        );
    }
    assert!(!stdout.contains("isvalid: false"), "{stdout}");
    assert!(!stdout.contains("invalid bytes"), "{stdout}");
    assert_eq!(stdout.matches("| offset: ").count(), expected_records);
    assert!(stdout.contains("partitionLeaderEpoch: 5"));
    assert!(stdout.contains("offset: ") && stdout.contains("position: "));

    let (code, stdout, stderr) = dump(&[
        "--verify-index-only".into(),
        "--files".into(),
        indexes.join(","),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert!(
        stderr.trim().is_empty(),
        "index mismatches: {stderr}\n{stdout}"
    );

    let (code, stdout, stderr) = dump(&[
        "--index-sanity-check".into(),
        "--files".into(),
        indexes.join(","),
    ]);
    assert_eq!(code, 0, "{stderr}");
    assert_eq!(
        stdout.matches("passed sanity check").count() + stdout.matches("is empty").count(),
        indexes.len(),
        "{stdout}"
    );
}
