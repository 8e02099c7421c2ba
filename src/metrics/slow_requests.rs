//! The slowest requests a shard answered lately, for `GET /slow_requests`:
//! the `SLOWEST_PER_WINDOW` slowest of each API in each `WINDOW_MS` (so
//! fetches parked for their max wait do not crowd out a slow produce), for
//! the last `WINDOWS` windows, so a tail can be looked at after the fact with the
//! shards' activities (`shards::runtime::activity`) from the same moment.

use std::collections::{BTreeMap, VecDeque};
use std::time::{Duration, Instant};

use serde_json::{json, Value};
use shards::runtime::activity::Activity;

use super::request_metrics::Phase;
use crate::replication::AppendTiming;

const WINDOW_MS: i64 = 10_000;
/// Ten minutes of windows.
const WINDOWS: usize = 60;
const SLOWEST_PER_WINDOW: usize = 16;

#[derive(Debug, Clone)]
pub struct SlowRequest {
    pub shard: usize,
    /// When its last byte was read, wall clock and monotonic.
    pub received_wall_ms: i64,
    pub received: Instant,
    pub api_key: i16,
    pub api_version: i16,
    pub correlation_id: i32,
    pub client_host: String,
    /// In `Phase::REQUEST`'s order.
    pub phases: [Duration; 7],
    /// Before `received`: `Phase::SocketWait`.
    pub socket_wait: Option<Duration>,
    /// Jobs from other shards running on its shard when it was answered.
    pub mesh_jobs_in_flight: u64,
    /// A produce's longest partition parts.
    pub slowest_partition: Option<AppendTiming>,
}

impl SlowRequest {
    pub fn total(&self) -> Duration {
        self.phases[6]
    }

    pub fn answered(&self) -> Instant {
        self.received + self.total()
    }
}

#[derive(Debug, Default)]
pub struct SlowRequests {
    /// (window start ms, its slowest requests by API key), oldest first.
    windows: VecDeque<(i64, BTreeMap<i16, Vec<SlowRequest>>)>,
}

impl SlowRequests {
    fn window_start(now_ms: i64) -> i64 {
        now_ms - now_ms.rem_euclid(WINDOW_MS)
    }

    /// Whether a request of `api_key` taking `total`, answered at `now_ms`,
    /// is among the slowest of its window so far (checked before one is built).
    pub fn keeps(&self, now_ms: i64, api_key: i16, total: Duration) -> bool {
        match self.windows.back() {
            Some((start, by_api)) if *start == Self::window_start(now_ms) => {
                by_api.get(&api_key).is_none_or(|slowest| {
                    slowest.len() < SLOWEST_PER_WINDOW
                        || slowest.iter().any(|kept| kept.total() < total)
                })
            }
            _ => true,
        }
    }

    pub fn record(&mut self, now_ms: i64, request: SlowRequest) {
        let start = Self::window_start(now_ms);
        if self.windows.back().is_none_or(|(last, _)| *last != start) {
            if self.windows.len() == WINDOWS {
                self.windows.pop_front();
            }
            self.windows.push_back((start, BTreeMap::new()));
        }
        let by_api = &mut self.windows.back_mut().expect("just pushed").1;
        let slowest = by_api.entry(request.api_key).or_default();
        if slowest.len() == SLOWEST_PER_WINDOW {
            let (fastest, _) = slowest
                .iter()
                .enumerate()
                .min_by_key(|(_, kept)| kept.total())
                .expect("full");
            if slowest[fastest].total() >= request.total() {
                return;
            }
            slowest.swap_remove(fastest);
        }
        slowest.push(request);
        assert!(slowest.len() <= SLOWEST_PER_WINDOW);
    }

    /// The kept requests read at or after `since_ms`.
    pub fn since(&self, since_ms: i64) -> Vec<SlowRequest> {
        self.windows
            .iter()
            .filter(|(start, _)| start + WINDOW_MS > since_ms)
            .flat_map(|(_, by_api)| by_api.values().flatten())
            .filter(|request| request.received_wall_ms >= since_ms)
            .cloned()
            .collect()
    }
}

/// One shard's part of a listing: its slow requests, its activities, and
/// since when its activity ring remembers (None: nothing recorded yet).
#[derive(Debug, Clone)]
pub struct ShardSlowRequests {
    pub shard: usize,
    pub requests: Vec<SlowRequest>,
    pub activities: Vec<Activity>,
    pub activities_since: Option<Instant>,
}

/// The `limit` slowest requests of every shard since `since_ms`, slowest
/// first, each with every shard's activities that overlapped it.
pub fn render(
    shards: &[ShardSlowRequests],
    limit: usize,
    now: Instant,
    now_wall_ms: i64,
    api_name: impl Fn(i16) -> String,
) -> Value {
    let wall_ms = |at: Instant| {
        now_wall_ms - now.saturating_duration_since(at).as_millis() as i64
            + at.saturating_duration_since(now).as_millis() as i64
    };
    let ms = |d: Duration| d.as_secs_f64() * 1000.0;
    let mut requests: Vec<&SlowRequest> = shards.iter().flat_map(|s| &s.requests).collect();
    requests.sort_by_key(|request| std::cmp::Reverse(request.total()));
    requests.truncate(limit);
    let listed: Vec<Value> = requests
        .iter()
        .map(|request| {
            let phases: serde_json::Map<String, Value> = Phase::REQUEST
                .iter()
                .zip(request.phases)
                .map(|(phase, d)| (phase.name().to_owned(), json!(ms(d))))
                .collect();
            let activities: Vec<Value> = shards
                .iter()
                .flat_map(|s| s.activities.iter().map(move |a| (s.shard, a)))
                .filter(|(_, a)| a.started <= request.answered() && a.ended() >= request.received)
                .map(|(shard, a)| {
                    json!({
                        "shard": shard,
                        "kind": a.kind.name(),
                        "start_ms": wall_ms(a.started),
                        "duration_ms": ms(a.duration),
                    })
                })
                .collect();
            json!({
                "time_ms": request.received_wall_ms,
                "shard": request.shard,
                "api": api_name(request.api_key),
                "api_version": request.api_version,
                "correlation_id": request.correlation_id,
                "client_host": request.client_host,
                "total_ms": ms(request.total()),
                "phases_ms": phases,
                "socket_wait_ms": request.socket_wait.map(ms),
                "mesh_jobs_in_flight": request.mesh_jobs_in_flight,
                "slowest_partition_ms": request.slowest_partition.map(|p| json!({
                    "ShardWait": ms(p.shard_wait),
                    "Append": ms(p.append),
                    "AcksWait": ms(p.acks_wait),
                })),
                "activities": activities,
            })
        })
        .collect();
    let remembered: serde_json::Map<String, Value> = shards
        .iter()
        .map(|s| {
            (
                s.shard.to_string(),
                s.activities_since
                    .map_or(Value::Null, |at| json!(wall_ms(at))),
            )
        })
        .collect();
    json!({ "requests": listed, "activities_remembered_since_ms": remembered })
}

#[cfg(test)]
mod tests {
    use super::*;

    fn request(received_wall_ms: i64, total_ms: u64) -> SlowRequest {
        let mut phases = [Duration::ZERO; 7];
        phases[6] = Duration::from_millis(total_ms);
        SlowRequest {
            shard: 0,
            received_wall_ms,
            received: Instant::now(),
            api_key: 0,
            api_version: 9,
            correlation_id: 1,
            client_host: "/127.0.0.1".into(),
            phases,
            socket_wait: None,
            mesh_jobs_in_flight: 0,
            slowest_partition: None,
        }
    }

    #[test]
    fn keeps_each_windows_slowest_for_a_bounded_time() {
        let mut slow = SlowRequests::default();
        for ms in 0..100 {
            let total = Duration::from_millis(ms);
            if slow.keeps(5_000, 0, total) {
                slow.record(5_000, request(5_000, ms));
            }
        }
        let kept = slow.since(0);
        assert_eq!(kept.len(), SLOWEST_PER_WINDOW);
        assert!(kept.iter().all(|r| r.total() >= Duration::from_millis(84)));
        assert!(!slow.keeps(5_000, 0, Duration::from_millis(84)));
        assert!(slow.keeps(5_000, 1, Duration::ZERO), "another API");
        assert!(slow.keeps(15_000, 0, Duration::ZERO), "a new window");
        for window in 1..=WINDOWS as i64 {
            slow.record(window * WINDOW_MS, request(window * WINDOW_MS, 1));
        }
        assert!(slow
            .since(0)
            .iter()
            .all(|r| r.received_wall_ms >= WINDOW_MS));
        assert_eq!(slow.since(WINDOWS as i64 * WINDOW_MS).len(), 1);
    }
}
