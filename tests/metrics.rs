//! The metrics endpoint scraped before and after a produce and fetch run,
//! parsed with Prometheus' own Python parser (prometheus_client): the counters
//! move by exactly the records and bytes moved, and `/health` answers; a
//! request waiting in its socket behind a parked fetch is seen waiting.

mod common;

use std::collections::BTreeMap;
use std::io::Write;
use std::process::{Command, Stdio};

use common::{free_port, http_get, Broker, Client};
use kafka_protocol::messages::fetch_request::{FetchPartition, FetchTopic};
use kafka_protocol::messages::{
    ApiKey, ApiVersionsRequest, FetchRequest, FetchResponse, TopicName,
};
use kafka_protocol::protocol::StrBytes;
use shards::log::record_batch::RecordBatchBuilder;

/// Every sample of a scrape, by name and sorted labels, through prometheus_client.
fn scrape(port: u16) -> BTreeMap<(String, String), f64> {
    let (status, body) = http_get(port, "/metrics");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let mut parser = Command::new("python3")
        .arg(concat!(
            env!("CARGO_MANIFEST_DIR"),
            "/tests/support/python/parse_metrics.py"
        ))
        .stdin(Stdio::piped())
        .stdout(Stdio::piped())
        .stderr(Stdio::piped())
        .spawn()
        .unwrap();
    parser
        .stdin
        .take()
        .unwrap()
        .write_all(body.as_bytes())
        .unwrap();
    let output = parser.wait_with_output().unwrap();
    assert!(
        output.status.success(),
        "prometheus_client refused the exposition: {}\n{body}",
        String::from_utf8_lossy(&output.stderr)
    );
    String::from_utf8(output.stdout)
        .unwrap()
        .lines()
        .map(|line| {
            let sample: serde_json::Value = serde_json::from_str(line).unwrap();
            let labels: BTreeMap<String, String> =
                serde_json::from_value(sample["labels"].clone()).unwrap();
            let labels = labels
                .iter()
                .map(|(k, v)| format!("{k}={v}"))
                .collect::<Vec<_>>()
                .join(",");
            (
                (sample["name"].as_str().unwrap().to_owned(), labels),
                sample["value"].as_f64().unwrap(),
            )
        })
        .collect()
}

fn value(samples: &BTreeMap<(String, String), f64>, name: &str, labels: &str) -> f64 {
    samples
        .get(&(name.to_owned(), labels.to_owned()))
        .copied()
        .unwrap_or(0.0)
}

#[test]
fn counters_move_by_what_was_produced_and_fetched() {
    let port = free_port();
    let broker = Broker::start(&[&format!("ringbroker.metrics.port={port}")]);
    assert_eq!(
        http_get(port, "/health"),
        ("HTTP/1.1 200 OK".to_owned(), "ok\n".to_owned())
    );
    assert_eq!(http_get(port, "/nothing").0, "HTTP/1.1 404 Not Found");
    let mut client = Client::connect(&broker.address());
    client.create_topic("measured", 2);
    let before = scrape(port);

    let mut produced_bytes = 0;
    for i in 0..10 {
        let mut builder = RecordBatchBuilder::new(0, shards::log::wall_clock_ms());
        for j in 0..(i + 1) {
            builder.append(
                shards::log::wall_clock_ms(),
                None,
                Some(format!("v{j}").as_bytes()),
            );
        }
        let batch = builder.build();
        produced_bytes += batch.len();
        let response = client.produce("measured", i % 2, batch).unwrap();
        assert_eq!(response.error_code, 0);
    }
    // A produce to a partition that does not exist is an error, counted as one.
    assert_ne!(
        client
            .produce("measured", 7, RecordBatchBuilder::new(0, 0).build())
            .unwrap()
            .error_code,
        0
    );
    let name = TopicName(StrBytes::from_static_str("measured"));
    let fetched: FetchResponse = client
        .call(
            ApiKey::Fetch,
            12,
            &FetchRequest::default()
                .with_max_wait_ms(0)
                .with_max_bytes(1 << 20)
                .with_topics(vec![FetchTopic::default()
                    .with_topic(name)
                    .with_partitions(
                        (0..2)
                            .map(|p| {
                                FetchPartition::default()
                                    .with_partition(p)
                                    .with_partition_max_bytes(1 << 20)
                            })
                            .collect(),
                    )]),
        )
        .unwrap();
    let fetched_bytes: usize = fetched.responses[0]
        .partitions
        .iter()
        .map(|p| p.records.as_ref().map_or(0, |r| r.len()))
        .sum();
    assert_eq!(fetched_bytes, produced_bytes);
    let after = scrape(port);

    let delta =
        |name: &str, labels: &str| value(&after, name, labels) - value(&before, name, labels);
    let topic = "topic=measured";
    assert_eq!(
        delta("kafka_server_brokertopicmetrics_messagesin_total", topic),
        55.0
    );
    assert_eq!(
        delta("kafka_server_brokertopicmetrics_bytesin_total", topic),
        produced_bytes as f64
    );
    assert_eq!(
        delta("kafka_server_brokertopicmetrics_bytesout_total", topic),
        fetched_bytes as f64
    );
    assert_eq!(
        delta("kafka_server_brokertopicmetrics_messagesin_total", ""),
        55.0,
        "the broker-wide total"
    );
    assert_eq!(
        delta(
            "kafka_network_requestmetrics_requests_total",
            "request=Produce"
        ),
        11.0
    );
    assert_eq!(
        delta(
            "kafka_network_requestmetrics_requests_total",
            "request=Fetch"
        ),
        1.0
    );
    assert_eq!(
        delta(
            "kafka_network_requestmetrics_totaltimems_count",
            "request=Produce"
        ),
        11.0
    );
    assert_eq!(
        delta(
            "kafka_network_requestmetrics_errors_total",
            "error=NONE,request=Produce"
        ),
        10.0
    );
    assert_eq!(
        delta(
            "kafka_network_requestmetrics_errors_total",
            "error=UNKNOWN_TOPIC_OR_PARTITION,request=Produce"
        ),
        1.0
    );
    assert_eq!(
        value(&after, "kafka_server_replicamanager_partitioncount", ""),
        2.0
    );
    assert_eq!(
        value(&after, "kafka_server_replicamanager_leadercount", ""),
        2.0
    );
    for partition in 0..2 {
        let labels = format!("partition={partition},topic=measured");
        let size = std::fs::metadata(
            broker
                .data_dir()
                .join(format!("measured-{partition}/00000000000000000000.log")),
        )
        .unwrap()
        .len();
        assert_eq!(value(&after, "kafka_log_log_size", &labels), size as f64);
        assert_eq!(value(&after, "kafka_log_log_numlogsegments", &labels), 1.0);
        assert_eq!(
            value(&after, "kafka_log_log_logendoffset", &labels),
            [25.0, 30.0][partition]
        );
    }
    let shards = after
        .keys()
        .filter(|(name, _)| name == "ringbroker_shard_tasks_executed_total")
        .count();
    assert_eq!(shards, 2, "one series per shard");

    // Every Produce in each of Kafka's request phases; the ten stored
    // batches each in AppendTimeMs and, acks=all, AcksWaitTimeMs.
    let phases = [
        "requestqueuetimems",
        "localtimems",
        "remotetimems",
        "throttletimems",
        "responsequeuetimems",
        "responsesendtimems",
    ];
    let produce = "request=Produce";
    for phase in phases.iter().chain(&["totaltimems"]) {
        let name = format!("kafka_network_requestmetrics_{phase}_count");
        assert_eq!(delta(&name, produce), 11.0, "{phase}");
    }
    for phase in ["appendtimems", "ackswaittimems"] {
        let name = format!("ringbroker_requestmetrics_{phase}_count");
        assert_eq!(delta(&name, produce), 10.0, "{phase}");
    }
    // The phases add up to the total (each is counted in whole microseconds).
    let phase_sum_ms: f64 = phases
        .iter()
        .map(|phase| {
            delta(
                &format!("kafka_network_requestmetrics_{phase}_sum"),
                produce,
            )
        })
        .sum();
    let total_ms = delta("kafka_network_requestmetrics_totaltimems_sum", produce);
    assert!(
        total_ms > 0.0 && (phase_sum_ms - total_ms).abs() < 0.1,
        "{phase_sum_ms} against {total_ms}"
    );
    // Cumulative buckets, +Inf holding every request.
    let bucket = "kafka_network_requestmetrics_totaltimems_bucket";
    let inf = value(&after, bucket, "le=+Inf,request=Produce");
    assert_eq!(
        inf - value(&before, bucket, "le=+Inf,request=Produce"),
        11.0
    );
    assert!(after
        .iter()
        .filter(|((name, labels), _)| name == bucket && labels.ends_with(produce))
        .all(|(_, count)| *count <= inf));

    // The slowest requests, slowest first, each phase by phase.
    let (status, body) = http_get(port, "/slow_requests?since_ms=0&limit=100");
    assert_eq!(status, "HTTP/1.1 200 OK");
    let listing: serde_json::Value = serde_json::from_str(&body).unwrap();
    let requests = listing["requests"].as_array().unwrap();
    let totals: Vec<f64> = requests
        .iter()
        .map(|r| r["total_ms"].as_f64().unwrap())
        .collect();
    assert!(
        totals.windows(2).all(|pair| pair[0] >= pair[1]),
        "{totals:?}"
    );
    assert!(requests
        .iter()
        .any(|r| r["api"] == "Produce" && r["api_version"] == 9));
    assert!(requests.iter().any(|r| r["api"] == "Fetch"));
    for request in requests {
        let phases = request["phases_ms"].as_object().unwrap();
        assert_eq!(phases.len(), 7);
        let sum: f64 = phases
            .iter()
            .filter(|(name, _)| *name != "TotalTimeMs")
            .map(|(_, ms)| ms.as_f64().unwrap())
            .sum();
        assert!(
            (sum - request["total_ms"].as_f64().unwrap()).abs() < 0.01,
            "{request}"
        );
    }
    let future_ms = shards::log::wall_clock_ms() + 60_000;
    let (_, body) = http_get(port, &format!("/slow_requests?since_ms={future_ms}"));
    let listing: serde_json::Value = serde_json::from_str(&body).unwrap();
    assert_eq!(listing["requests"].as_array().unwrap().len(), 0);
}

/// A fetch parks for its max wait with an ApiVersions pipelined behind it on
/// the same connection: Kafka's phases of the ApiVersions start once it is
/// read and see nothing of that wait; SocketWaitTimeMs holds it.
#[test]
fn a_request_behind_a_parked_fetch_waits_in_the_socket() {
    const MAX_WAIT_MS: i32 = 400;
    let port = free_port();
    let broker = Broker::start(&[&format!("ringbroker.metrics.port={port}")]);
    let mut client = Client::connect(&broker.address());
    client.create_topic("quiet", 1);
    let before = scrape(port);

    let fetch = client.request_frame(
        ApiKey::Fetch,
        12,
        &FetchRequest::default()
            .with_max_wait_ms(MAX_WAIT_MS)
            .with_min_bytes(1)
            .with_max_bytes(1 << 20)
            .with_topics(vec![FetchTopic::default()
                .with_topic(TopicName(StrBytes::from_static_str("quiet")))
                .with_partitions(vec![FetchPartition::default()
                    .with_partition(0)
                    .with_partition_max_bytes(1 << 20)])]),
    );
    let api_versions = client.request_frame(ApiKey::ApiVersions, 0, &ApiVersionsRequest::default());
    client.send_frame(&[fetch, api_versions].concat()).unwrap();
    for _ in 0..2 {
        client.read_frame().unwrap();
    }
    let after = scrape(port);

    let delta =
        |name: &str, labels: &str| value(&after, name, labels) - value(&before, name, labels);
    let waited_ms = |request: &str| {
        let labels = format!("request={request}");
        let family = "ringbroker_requestmetrics_socketwaittimems";
        assert_eq!(delta(&format!("{family}_count"), &labels), 1.0, "{request}");
        delta(&format!("{family}_sum"), &labels)
    };
    let parked_ms = f64::from(MAX_WAIT_MS);
    let behind_ms = waited_ms("ApiVersions");
    assert!(
        behind_ms >= parked_ms * 0.9,
        "the ApiVersions waited {behind_ms} ms behind a fetch parked {parked_ms} ms"
    );
    assert!(
        waited_ms("Fetch") < behind_ms - parked_ms * 0.5,
        "the fetch was read as it came"
    );
    let total_ms = delta(
        "kafka_network_requestmetrics_totaltimems_sum",
        "request=ApiVersions",
    );
    assert!(
        total_ms < parked_ms * 0.5,
        "TotalTime starts at the read: {total_ms} ms"
    );
}
