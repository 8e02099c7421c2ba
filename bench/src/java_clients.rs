//! Kafka's own Java clients as a skeptic runs them: `ProducerPerformance`
//! (kafka-producer-perf-test) at a fixed rate and `EndToEndLatency`, from
//! the jars, their printed figures parsed.

use std::path::Path;
use std::process::Command;
use std::time::{Duration, Instant};

use crate::workloads::ProduceSpec;

/// What ProducerPerformance printed: its final percentiles (ms), of the
/// records after its warm-up, and its 5-second windows (seconds from its
/// start, average and max ms).
#[derive(Debug, Clone)]
pub struct ProducerPerformance {
    pub records: u64,
    pub elapsed: Duration,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
    pub max_ms: f64,
    pub windows: Vec<(f64, f64, f64)>,
}

fn run_class(run_class: &Path, class: &str, args: &[String]) -> String {
    let output = Command::new(run_class)
        .arg(class)
        .args(args)
        .output()
        .unwrap_or_else(|error| panic!("run {class}: {error}"));
    let stdout = String::from_utf8_lossy(&output.stdout).into_owned();
    assert!(
        output.status.success(),
        "{class} failed: {stdout}{}",
        String::from_utf8_lossy(&output.stderr)
    );
    stdout
}

/// The number before `unit` in `line` ("8.2 ms avg latency" -> 8.2).
fn number_before(line: &str, unit: &str) -> Option<f64> {
    let at = line.find(unit)?;
    line[..at]
        .split([' ', ','])
        .rfind(|w| !w.is_empty())?
        .parse()
        .ok()
}

/// Parses ProducerPerformance's output: interval lines
/// (`N records sent, R records/sec (M MB/sec), A ms avg latency, X ms max
/// latency.`) and the summary ones, which add the percentiles: of every
/// record, then (with `--warmup-records`) of those after the warm-up
/// (`N steady state records sent, ...`), which is the one taken.
pub fn parse_producer_performance(output: &str, elapsed: Duration) -> ProducerPerformance {
    let mut windows = Vec::new();
    let mut last = None;
    for line in output.lines().filter(|l| l.contains("records sent")) {
        let avg = number_before(line, " ms avg latency").expect("avg latency");
        let max = number_before(line, " ms max latency").expect("max latency");
        if line.contains("50th") {
            last = Some(line.to_owned());
        } else {
            windows.push(((windows.len() + 1) as f64 * 5.0, avg, max));
        }
    }
    let last = last.expect("ProducerPerformance's final line");
    let records = number_before(&last, " steady state records sent")
        .or_else(|| number_before(&last, " records sent"))
        .expect("records");
    ProducerPerformance {
        records: records as u64,
        elapsed,
        p50_ms: number_before(&last, " ms 50th").expect("p50"),
        p99_ms: number_before(&last, " ms 99th").expect("p99"),
        p999_ms: number_before(&last, " ms 99.9th").expect("p99.9"),
        max_ms: number_before(&last, " ms max latency").expect("max"),
        windows,
    }
}

/// ProducerPerformance sending `spec`'s records at its fixed rate, with the
/// producer of the report's batch.size=262144 (over all the topic's
/// partitions, whatever `spec.partitions` says); the first `warmup_records`
/// (its connections made, its JIT warm) are left out of the percentiles.
pub fn producer_performance(
    kafka_run_class: &Path,
    bootstrap: &str,
    spec: &ProduceSpec<'_>,
    warmup_records: u64,
) -> ProducerPerformance {
    let records = spec.records;
    let rate = spec.rate.expect("ProducerPerformance runs at a fixed rate");
    assert!(warmup_records < records);
    let started = Instant::now();
    let args: Vec<String> = [
        "--topic",
        spec.topic,
        "--num-records",
        &records.to_string(),
        "--record-size",
        &spec.value_bytes.to_string(),
        "--warmup-records",
        &warmup_records.to_string(),
        "--throughput",
        &format!("{rate:.0}"),
        "--producer-props",
        &format!("bootstrap.servers={bootstrap}"),
        &format!("acks={}", spec.acks),
        &format!("linger.ms={}", spec.linger_ms),
        "batch.size=262144",
    ]
    .iter()
    .map(|a| a.to_string())
    .collect();
    let output = run_class(
        kafka_run_class,
        "org.apache.kafka.tools.ProducerPerformance",
        &args,
    );
    parse_producer_performance(&output, started.elapsed())
}

/// What EndToEndLatency printed: each record produced and consumed in turn.
#[derive(Debug, Clone)]
pub struct EndToEndLatency {
    pub records: u64,
    pub elapsed: Duration,
    pub avg_ms: f64,
    pub p50_ms: f64,
    pub p99_ms: f64,
    pub p999_ms: f64,
}

pub fn parse_end_to_end_latency(output: &str, records: u64, elapsed: Duration) -> EndToEndLatency {
    let avg = output
        .lines()
        .find_map(|l| l.strip_prefix("Avg latency: "))
        .and_then(|rest| rest.trim_end_matches(" ms").trim().parse().ok())
        .expect("Avg latency");
    let percentiles = output
        .lines()
        .find_map(|l| l.strip_prefix("Percentiles: "))
        .expect("Percentiles");
    let percentile = |name: &str| -> f64 {
        percentiles
            .split(", ")
            .find_map(|p| p.strip_prefix(name))
            .and_then(|v| v.trim().parse().ok())
            .unwrap_or_else(|| panic!("{name} in {percentiles}"))
    };
    EndToEndLatency {
        records,
        elapsed,
        avg_ms: avg,
        p50_ms: percentile("50th = "),
        p99_ms: percentile("99th = "),
        p999_ms: percentile("99.9th = "),
    }
}

/// EndToEndLatency on `topic` (one partition, made beforehand) for at least
/// `seconds`: a short run gives the round trip's average, which sizes the
/// measured run.
pub fn end_to_end_latency(
    kafka_run_class: &Path,
    bootstrap: &str,
    topic: &str,
    acks: &str,
    value_bytes: usize,
    seconds: u64,
) -> EndToEndLatency {
    let run = |records: u64| {
        let started = Instant::now();
        let args: Vec<String> = [
            "--bootstrap-server",
            bootstrap,
            "--topic",
            topic,
            "--num-records",
            &records.to_string(),
            "--producer-acks",
            acks,
            "--record-size",
            &value_bytes.to_string(),
        ]
        .iter()
        .map(|a| a.to_string())
        .collect();
        let output = run_class(
            kafka_run_class,
            "org.apache.kafka.tools.EndToEndLatency",
            &args,
        );
        parse_end_to_end_latency(&output, records, started.elapsed())
    };
    let probe = run(1_000);
    let records = ((seconds as f64 * 1000.0 / probe.avg_ms.max(0.05)) * 1.1) as u64;
    run(records.clamp(2_000, 2_000_000))
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn parses_what_the_tools_print() {
        let output = "\
49942 records sent, 9972.4 records/sec (9.74 MB/sec), 8.2 ms avg latency, 696.0 ms max latency.
50000 records sent, 9897.070467 records/sec (9.67 MB/sec), 8.18 ms avg latency, 696.00 ms max latency, 7 ms 50th, 13 ms 95th, 45 ms 99th, 107 ms 99.9th.
";
        let parsed = parse_producer_performance(output, Duration::from_secs(5));
        assert_eq!(parsed.records, 50_000);
        assert_eq!(
            (parsed.p50_ms, parsed.p99_ms, parsed.p999_ms),
            (7.0, 45.0, 107.0)
        );
        assert_eq!(parsed.max_ms, 696.0);
        assert_eq!(parsed.windows, vec![(5.0, 8.2, 696.0)]);
        let output = "\
In steady state.
49942 records sent, 9972.4 records/sec (9.74 MB/sec), 8.2 ms avg latency, 696.0 ms max latency.
50000 records sent, 9897.070467 records/sec (9.67 MB/sec), 8.18 ms avg latency, 696.00 ms max latency, 7 ms 50th, 13 ms 95th, 45 ms 99th, 107 ms 99.9th.
40000 steady state records sent, 9897.070467 records/sec (9.67 MB/sec), 6.18 ms avg latency, 96.00 ms max latency, 5 ms 50th, 11 ms 95th, 35 ms 99th, 57 ms 99.9th.
";
        let parsed = parse_producer_performance(output, Duration::from_secs(5));
        assert_eq!(parsed.records, 40_000);
        assert_eq!(
            (parsed.p50_ms, parsed.p99_ms, parsed.p999_ms, parsed.max_ms),
            (5.0, 35.0, 57.0, 96.0)
        );
        assert_eq!(parsed.windows, vec![(5.0, 8.2, 696.0)]);
        let output = "0\t141.04\n1000\t2.15\nAvg latency: 3.0558 ms\nPercentiles: 50th = 1, 99th = 13, 99.9th = 21\n";
        let parsed = parse_end_to_end_latency(output, 2000, Duration::from_secs(6));
        assert_eq!(parsed.avg_ms, 3.0558);
        assert_eq!(
            (parsed.p50_ms, parsed.p99_ms, parsed.p999_ms),
            (1.0, 13.0, 21.0)
        );
    }
}
