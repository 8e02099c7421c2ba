//! ringbroker's own clocks, read the way an operator would: its metrics
//! endpoint's request-phase histograms (scraped before and after a run and
//! subtracted bucket by bucket), once a second during the run for a
//! timeline, and its `/slow_requests` listing afterwards. Beside them the
//! kernel's view: dirty and writeback memory, the machine's free memory and
//! its CPUs' time in the kernel, and the shards' time waiting for a CPU.

use std::collections::BTreeMap;
use std::io::{Read, Write};
use std::net::TcpStream;
use std::sync::atomic::{AtomicBool, Ordering};
use std::sync::{Arc, Mutex};
use std::time::{Duration, Instant, SystemTime, UNIX_EPOCH};

/// Phase families read from the endpoint, by their label in the report.
pub const PHASES: &[(&str, &str)] = &[
    ("total", "kafka_network_requestmetrics_totaltimems"),
    ("local", "kafka_network_requestmetrics_localtimems"),
    ("remote", "kafka_network_requestmetrics_remotetimems"),
    (
        "response queue",
        "kafka_network_requestmetrics_responsequeuetimems",
    ),
    ("send", "kafka_network_requestmetrics_responsesendtimems"),
    ("socket wait", "ringbroker_requestmetrics_socketwaittimems"),
    ("mesh wait", "ringbroker_requestmetrics_meshwaittimems"),
    ("append", "ringbroker_requestmetrics_appendtimems"),
    ("acks wait", "ringbroker_requestmetrics_ackswaittimems"),
];
const RUNQUEUE_WAIT: &str = "ringbroker_shard_runqueue_wait_seconds_total";
const IO_TIMEOUT: Duration = Duration::from_secs(10);

pub fn wall_clock_ms() -> i64 {
    SystemTime::now()
        .duration_since(UNIX_EPOCH)
        .expect("clock after 1970")
        .as_millis() as i64
}

/// What a scrape that must succeed panics with.
pub const SCRAPED: &str = "scrape the brokers' metrics";

/// A GET of the broker's metrics endpoint; an error if connecting, sending
/// or the answer takes longer than `IO_TIMEOUT` (its shard 0 held), or it
/// closes without an answer.
fn http_get(address: &str, path: &str) -> std::io::Result<String> {
    let socket_address = address.parse().map_err(std::io::Error::other)?;
    let mut stream = TcpStream::connect_timeout(&socket_address, IO_TIMEOUT)?;
    stream.set_write_timeout(Some(IO_TIMEOUT))?;
    stream.set_read_timeout(Some(IO_TIMEOUT))?;
    write!(
        stream,
        "GET {path} HTTP/1.1\r\nHost: {address}\r\nConnection: close\r\n\r\n"
    )?;
    let mut response = String::new();
    stream.read_to_string(&mut response)?;
    let Some((head, body)) = response.split_once("\r\n\r\n") else {
        return Err(std::io::Error::other(format!("{path}: no HTTP response")));
    };
    assert!(head.starts_with("HTTP/1.1 200"), "{path}: {head}");
    Ok(body.to_owned())
}

/// One histogram as scraped: requests per bucket, by bucket bound in us
/// (the endpoint's bounds are whole microseconds).
#[derive(Debug, Clone, Default, PartialEq)]
pub struct Buckets {
    pub counts: BTreeMap<u64, u64>,
}

impl Buckets {
    pub fn count(&self) -> u64 {
        self.counts.values().sum()
    }

    pub fn add(&mut self, other: &Buckets) {
        for (bound, count) in &other.counts {
            *self.counts.entry(*bound).or_default() += count;
        }
    }

    /// What was added since `before`.
    pub fn since(&self, before: &Buckets) -> Buckets {
        let counts = self
            .counts
            .iter()
            .map(|(bound, count)| {
                let earlier = before.counts.get(bound).copied().unwrap_or(0);
                assert!(*count >= earlier, "a histogram went backwards");
                (*bound, count - earlier)
            })
            .filter(|(_, count)| *count > 0)
            .collect();
        Buckets { counts }
    }

    /// The bound (ms) of the bucket holding the `quantile`th request: at
    /// most one bucket's width (12.5%) above the true value. NaN if empty.
    pub fn quantile_ms(&self, quantile: f64) -> f64 {
        let count = self.count();
        if count == 0 {
            return f64::NAN;
        }
        let rank = ((quantile * count as f64).ceil() as u64).clamp(1, count);
        let mut seen = 0;
        for (bound, n) in &self.counts {
            seen += n;
            if seen >= rank {
                return *bound as f64 / 1000.0;
            }
        }
        unreachable!("the buckets add up")
    }
}

/// One scrape of one broker: each phase's Produce histogram, and the
/// shards' run-queue wait.
#[derive(Debug, Clone, Default)]
pub struct Scrape {
    pub phases: BTreeMap<&'static str, Buckets>,
    pub runqueue_wait_s: f64,
}

impl Scrape {
    pub fn add(&mut self, other: &Scrape) {
        for (phase, buckets) in &other.phases {
            self.phases.entry(phase).or_default().add(buckets);
        }
        self.runqueue_wait_s += other.runqueue_wait_s;
    }

    pub fn since(&self, before: &Scrape) -> Scrape {
        let phases = self
            .phases
            .iter()
            .map(|(phase, buckets)| {
                let earlier = before.phases.get(phase).cloned().unwrap_or_default();
                (*phase, buckets.since(&earlier))
            })
            .collect();
        Scrape {
            phases,
            runqueue_wait_s: self.runqueue_wait_s - before.runqueue_wait_s,
        }
    }
}

/// `request`'s phase histograms and the run-queue wait from an exposition.
pub fn parse(exposition: &str, request: &str) -> Scrape {
    let mut scrape = Scrape::default();
    let wanted = format!("{{request=\"{request}\",le=\"");
    for line in exposition.lines() {
        if let Some(rest) = line.strip_prefix(RUNQUEUE_WAIT) {
            let value = rest.rsplit(' ').next().and_then(|v| v.parse::<f64>().ok());
            scrape.runqueue_wait_s += value.unwrap_or(0.0);
            continue;
        }
        let Some((label, family)) = PHASES
            .iter()
            .find(|(_, family)| line.starts_with(&format!("{family}_bucket{wanted}")))
        else {
            continue;
        };
        let rest = &line[family.len() + "_bucket".len() + wanted.len()..];
        let Some((le, count)) = rest.split_once("\"} ") else {
            continue;
        };
        if le == "+Inf" {
            continue;
        }
        let bound_us = (le.parse::<f64>().expect("a bucket bound") * 1000.0).round() as u64;
        let cumulative: u64 = count.parse().expect("a bucket count");
        let buckets = scrape.phases.entry(label).or_default();
        let below: u64 = buckets.counts.values().sum();
        buckets.counts.insert(bound_us, cumulative - below);
    }
    scrape
}

/// Every broker's scrape, added up.
pub fn scrape(metrics_addresses: &[String], request: &str) -> std::io::Result<Scrape> {
    let mut total = Scrape::default();
    for address in metrics_addresses {
        total.add(&parse(&http_get(address, "/metrics")?, request));
    }
    Ok(total)
}

/// What the kernel says of the whole machine at one moment.
struct KernelReading {
    dirty_mib: f64,
    writeback_mib: f64,
    free_mib: f64,
    /// All CPUs' time in the kernel since boot (/proc/stat's `system`).
    system_ms: f64,
}

impl KernelReading {
    fn now() -> Self {
        let meminfo = std::fs::read_to_string("/proc/meminfo").unwrap_or_default();
        let field = |name: &str| {
            meminfo
                .lines()
                .find(|l| l.starts_with(name))
                .and_then(|l| l.split_whitespace().nth(1))
                .and_then(|kib| kib.parse::<f64>().ok())
                .map_or(0.0, |kib| kib / 1024.0)
        };
        let stat = std::fs::read_to_string("/proc/stat").unwrap_or_default();
        // "cpu  user nice system ...", in clock ticks.
        let system_ticks = stat
            .lines()
            .next()
            .and_then(|l| l.split_whitespace().nth(3))
            .and_then(|ticks| ticks.parse::<f64>().ok())
            .unwrap_or(0.0);
        KernelReading {
            dirty_mib: field("Dirty:"),
            writeback_mib: field("Writeback:"),
            free_mib: field("MemFree:"),
            system_ms: system_ticks * 1000.0 / crate::brokers::clock_ticks_per_second(),
        }
    }
}

/// One second of a run as the broker and the kernel saw it.
#[derive(Debug, Clone)]
pub struct Second {
    /// From the sampler's start.
    pub at_s: f64,
    pub wall_ms: i64,
    /// Produce TotalTimeMs of the requests answered in this second (ms).
    pub broker_p99_ms: f64,
    pub broker_max_ms: f64,
    pub runqueue_wait_ms: f64,
    pub dirty_mib: f64,
    pub writeback_mib: f64,
    /// The machine's free memory taken in this second (negative: given
    /// back). While a memory cgroup fills, its page cache takes free memory,
    /// which on a VM that reports free memory to its host must be backed
    /// again; once full, it recycles its own pages instead.
    pub free_taken_mib: f64,
    /// All CPUs' time in the kernel in this second (ms), everything on the
    /// machine: page-cache allocation and reclaim in any writer show here.
    pub machine_system_ms: f64,
}

/// Samples the brokers' endpoints (if any) and the kernel once a second
/// until stopped.
pub struct Sampler {
    stop: Arc<AtomicBool>,
    seconds: Arc<Mutex<Vec<Second>>>,
    thread: Option<std::thread::JoinHandle<()>>,
}

impl Sampler {
    pub fn start(metrics_addresses: Vec<String>) -> Self {
        let stop = Arc::new(AtomicBool::new(false));
        let seconds = Arc::new(Mutex::new(Vec::new()));
        let (stopped, sampled) = (stop.clone(), seconds.clone());
        let thread = std::thread::spawn(move || {
            let started = Instant::now();
            let mut previous = scrape(&metrics_addresses, "Produce").expect(SCRAPED);
            let mut previous_kernel = KernelReading::now();
            let mut next = started + Duration::from_secs(1);
            while !stopped.load(Ordering::Acquire) {
                std::thread::sleep(next.saturating_duration_since(Instant::now()));
                next += Duration::from_secs(1);
                // A broker that does not answer in time (its shard 0 held,
                // in one run by a writeback of 9 s) leaves its seconds to the
                // next scrape, which then covers them all.
                let Ok(now) = scrape(&metrics_addresses, "Produce") else {
                    next = Instant::now() + Duration::from_secs(1);
                    continue;
                };
                let second = now.since(&previous);
                let total = second.phases.get("total").cloned().unwrap_or_default();
                let kernel = KernelReading::now();
                sampled.lock().unwrap().push(Second {
                    at_s: started.elapsed().as_secs_f64(),
                    wall_ms: wall_clock_ms(),
                    broker_p99_ms: total.quantile_ms(0.99),
                    broker_max_ms: total.quantile_ms(1.0),
                    runqueue_wait_ms: second.runqueue_wait_s * 1000.0,
                    dirty_mib: kernel.dirty_mib,
                    writeback_mib: kernel.writeback_mib,
                    free_taken_mib: previous_kernel.free_mib - kernel.free_mib,
                    machine_system_ms: kernel.system_ms - previous_kernel.system_ms,
                });
                previous = now;
                previous_kernel = kernel;
            }
        });
        Self {
            stop,
            seconds,
            thread: Some(thread),
        }
    }

    pub fn finish(mut self) -> Vec<Second> {
        self.stop.store(true, Ordering::Release);
        if let Some(thread) = self.thread.take() {
            thread.join().expect("the sampler thread");
        }
        std::mem::take(&mut *self.seconds.lock().unwrap())
    }
}

/// The slowest Produce requests since `since_ms` on every broker, slowest
/// first, each as one line: when, how long, its phases and what the shards
/// were doing.
pub fn slowest_produces(
    metrics_addresses: &[String],
    since_ms: i64,
    limit: usize,
) -> Vec<(f64, String)> {
    let mut listed = Vec::new();
    for (broker, address) in metrics_addresses.iter().enumerate() {
        let body = http_get(
            address,
            &format!("/slow_requests?since_ms={since_ms}&limit={limit}&api=Produce"),
        )
        .expect("list the slowest requests");
        let listing: serde_json::Value = serde_json::from_str(&body).expect("JSON");
        for request in listing["requests"].as_array().into_iter().flatten() {
            let total_ms = request["total_ms"].as_f64().unwrap_or(0.0);
            let phases: Vec<String> = request["phases_ms"]
                .as_object()
                .into_iter()
                .flatten()
                .filter(|(name, ms)| *name != "TotalTimeMs" && ms.as_f64().unwrap_or(0.0) >= 0.05)
                .map(|(name, ms)| {
                    format!(
                        "{} {:.2}",
                        name.trim_end_matches("TimeMs"),
                        ms.as_f64().unwrap_or(0.0)
                    )
                })
                .collect();
            let activities: Vec<String> = request["activities"]
                .as_array()
                .into_iter()
                .flatten()
                .map(|a| {
                    format!(
                        "{} on shard {} ({:.1} ms)",
                        a["kind"].as_str().unwrap_or("?"),
                        a["shard"],
                        a["duration_ms"].as_f64().unwrap_or(0.0)
                    )
                })
                .collect();
            let partition =
                request["slowest_partition_ms"]
                    .as_object()
                    .map_or(String::new(), |p| {
                        let ms = |name: &str| p.get(name).and_then(|v| v.as_f64()).unwrap_or(0.0);
                        format!(
                        "; its slowest partition: shard wait {:.2}, append {:.2}, acks wait {:.2}",
                        ms("ShardWait"),
                        ms("Append"),
                        ms("AcksWait")
                    )
                    });
            let socket_wait = request["socket_wait_ms"]
                .as_f64()
                .map_or(String::new(), |ms| format!(", after {ms:.2} in the socket"));
            let at_ms = request["time_ms"].as_i64().unwrap_or(0) - since_ms;
            listed.push((
                total_ms,
                format!(
                    "+{:.3} s, broker {}, shard {}: {total_ms:.2} ms ({}{socket_wait}){partition}; mesh jobs {}; {}",
                    at_ms as f64 / 1000.0,
                    broker + 1,
                    request["shard"],
                    phases.join(", "),
                    request["mesh_jobs_in_flight"],
                    if activities.is_empty() {
                        "no broker activity".to_owned()
                    } else {
                        activities.join(", ")
                    }
                ),
            ));
        }
    }
    listed.sort_by(|a, b| b.0.total_cmp(&a.0));
    listed.truncate(limit);
    listed
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn scrapes_subtract_bucket_by_bucket() {
        let before = "\
kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\",le=\"0.319\"} 2
kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\",le=\"+Inf\"} 2
kafka_network_requestmetrics_totaltimems_bucket{request=\"Fetch\",le=\"500.2\"} 9
ringbroker_shard_runqueue_wait_seconds_total{shard=\"0\"} 0.5
ringbroker_shard_runqueue_wait_seconds_total{shard=\"1\"} 0.25
";
        let after = "\
kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\",le=\"0.319\"} 3
kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\",le=\"2.047\"} 5
kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\",le=\"10.239\"} 6
kafka_network_requestmetrics_totaltimems_bucket{request=\"Produce\",le=\"+Inf\"} 6
ringbroker_shard_runqueue_wait_seconds_total{shard=\"0\"} 1.5
ringbroker_shard_runqueue_wait_seconds_total{shard=\"1\"} 0.25
";
        let run = parse(after, "Produce").since(&parse(before, "Produce"));
        let total = &run.phases["total"];
        assert_eq!(total.count(), 4);
        assert_eq!(total.quantile_ms(0.25), 0.319);
        assert_eq!(total.quantile_ms(0.5), 2.047);
        assert_eq!(total.quantile_ms(1.0), 10.239);
        assert_eq!(run.runqueue_wait_s, 1.0);
    }

    /// A scrape the endpoint does not answer (here: closed at once) is
    /// skipped; the sampler goes on with the next.
    #[test]
    fn a_scrape_not_answered_is_left_to_the_next() {
        use std::io::{BufRead, BufReader};
        let listener = std::net::TcpListener::bind("127.0.0.1:0").unwrap();
        let address = listener.local_addr().unwrap().to_string();
        std::thread::spawn(move || {
            for (index, stream) in listener.incoming().enumerate() {
                let mut stream = stream.unwrap();
                // The first scrape is the sampler's start; the third fails.
                if index == 2 {
                    continue;
                }
                let mut reader = BufReader::new(stream.try_clone().unwrap());
                let mut line = String::new();
                while reader.read_line(&mut line).unwrap() > 2 {
                    line.clear();
                }
                stream.write_all(b"HTTP/1.1 200 OK\r\n\r\n").unwrap();
            }
        });
        let sampler = Sampler::start(vec![address]);
        std::thread::sleep(Duration::from_millis(4_500));
        let seconds = sampler.finish();
        // Scrapes at 1, 3 and 4 s; the one at 2 s was not answered.
        assert!(seconds.len() >= 2, "{} seconds", seconds.len());
        assert!(
            seconds.windows(2).any(|w| w[1].at_s - w[0].at_s > 1.5),
            "{seconds:?}"
        );
    }

    #[test]
    fn reads_the_machines_free_memory_and_kernel_time() {
        let before = KernelReading::now();
        // 300 ms of system calls: tens of clock ticks in the kernel.
        let until = Instant::now() + Duration::from_millis(300);
        while Instant::now() < until {
            let _ = std::fs::metadata("/proc/self/stat");
        }
        let after = KernelReading::now();
        assert!(after.free_mib > 0.0);
        assert!(after.system_ms > before.system_ms);
    }
}
