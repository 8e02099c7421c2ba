//! Kafka's ReplicationQuotaManager: replication traffic of throttled
//! replicas (a topic's `leader.replication.throttled.replicas` and
//! `follower.replication.throttled.replicas`) held to the broker's
//! `leader.replication.throttled.rate` and `follower.replication.throttled.rate`,
//! so a reassignment's catching up cannot starve producers. The rate is the
//! bytes recorded over Kafka's window (11 samples of 1 s, never measured over
//! less than 10 s); past the bound, a leader sends a throttled out-of-sync
//! follower nothing and a throttled out-of-sync follower does not ask. One
//! quota per broker, shared by its shards; the clock is handed in.

use std::sync::atomic::{AtomicU64, Ordering};
use std::sync::Mutex;

/// The topic configs naming the throttled replicas of each side.
pub const LEADER_REPLICATION_THROTTLED_REPLICAS: &str = "leader.replication.throttled.replicas";
pub const FOLLOWER_REPLICATION_THROTTLED_REPLICAS: &str = "follower.replication.throttled.replicas";

/// `replication.quota.window.num` and `.window.size.seconds`, Kafka's.
const WINDOW_SAMPLES: usize = 11;
const SAMPLE_MS: u64 = 1_000;
/// No bound: Kafka's default rate, Long.MAX_VALUE.
const UNBOUNDED: u64 = u64::MAX;

pub struct ReplicationQuota {
    bound_bytes_per_second: AtomicU64,
    /// Bytes recorded per sample, each with the start of its second.
    samples: Mutex<[(u64, u64); WINDOW_SAMPLES]>,
}

impl Default for ReplicationQuota {
    fn default() -> Self {
        Self {
            bound_bytes_per_second: AtomicU64::new(UNBOUNDED),
            samples: Mutex::new([(0, 0); WINDOW_SAMPLES]),
        }
    }
}

impl ReplicationQuota {
    /// The rate in bytes per second; None lifts the bound.
    pub fn set_bound(&self, bytes_per_second: Option<u64>) {
        let bound = bytes_per_second.unwrap_or(UNBOUNDED);
        self.bound_bytes_per_second.store(bound, Ordering::Relaxed);
    }

    pub fn is_bounded(&self) -> bool {
        self.bound_bytes_per_second.load(Ordering::Relaxed) != UNBOUNDED
    }

    /// Whether the measured rate is above the bound at `now_ms`.
    pub fn is_quota_exceeded(&self, now_ms: u64) -> bool {
        let bound = self.bound_bytes_per_second.load(Ordering::Relaxed);
        if bound == UNBOUNDED {
            return false;
        }
        let samples = self.samples.lock().expect("no panics under the lock");
        let window_start = now_ms.saturating_sub(SAMPLE_MS * WINDOW_SAMPLES as u64);
        let live = samples
            .iter()
            .filter(|(start, _)| *start > window_start || *start == 0);
        let (bytes, oldest_ms) = live.fold((0u64, now_ms), |(bytes, oldest), (start, b)| {
            let oldest = if *b > 0 { oldest.min(*start) } else { oldest };
            (bytes + b, oldest)
        });
        // Kafka's Rate: elapsed since the oldest sample, at least the
        // window less one sample.
        let elapsed_ms = (now_ms - oldest_ms).max(SAMPLE_MS * (WINDOW_SAMPLES as u64 - 1));
        bytes as u128 * 1_000 > bound as u128 * elapsed_ms as u128
    }

    /// Counts `bytes` of throttled replication at `now_ms`.
    pub fn record(&self, bytes: u64, now_ms: u64) {
        if bytes == 0 || !self.is_bounded() {
            return;
        }
        let second = now_ms / SAMPLE_MS * SAMPLE_MS;
        let mut samples = self.samples.lock().expect("no panics under the lock");
        let slot = &mut samples[(now_ms / SAMPLE_MS) as usize % WINDOW_SAMPLES];
        if slot.0 != second {
            *slot = (second, 0);
        }
        slot.1 += bytes;
    }
}

/// The broker's two replication quotas.
#[derive(Default)]
pub struct ReplicationQuotas {
    /// What leaders here send throttled followers.
    pub leader: ReplicationQuota,
    /// What followers here fetch for throttled replicas.
    pub follower: ReplicationQuota,
}

/// Whether a throttled-replicas list (`*`, or `partition:broker,...`) names
/// `partition`'s replica on `broker`.
pub fn is_throttled(list: Option<&str>, partition: i32, broker: i32) -> bool {
    let Some(list) = list.map(str::trim).filter(|list| !list.is_empty()) else {
        return false;
    };
    list == "*"
        || list.split(',').any(|entry| {
            entry.trim().split_once(':').is_some_and(|(p, b)| {
                p.trim().parse() == Ok(partition) && b.trim().parse() == Ok(broker)
            })
        })
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn unbounded_until_a_rate_is_set() {
        let quota = ReplicationQuota::default();
        quota.record(1 << 40, 5_000);
        assert!(!quota.is_quota_exceeded(5_000));
    }

    #[test]
    fn the_rate_is_measured_over_at_least_ten_seconds() {
        let quota = ReplicationQuota::default();
        quota.set_bound(Some(1_000));
        let start = 1_000_000;
        // 10 kB in the first second is within 1 kB/s over 10 s...
        quota.record(10_000, start);
        assert!(!quota.is_quota_exceeded(start + 500));
        // ...one byte more is not.
        quota.record(1, start + 600);
        assert!(quota.is_quota_exceeded(start + 700));
        // Once the bytes leave the 11 s window the rate falls back.
        assert!(!quota.is_quota_exceeded(start + 12_000));
        quota.set_bound(None);
        quota.record(1 << 30, start + 12_000);
        assert!(!quota.is_quota_exceeded(start + 12_000));
    }

    #[test]
    fn a_throttled_list_names_replicas_or_all() {
        assert!(is_throttled(Some("0:1,0:2, 1:3"), 1, 3));
        assert!(!is_throttled(Some("0:1,0:2"), 0, 3));
        assert!(is_throttled(Some("*"), 7, 9));
        assert!(!is_throttled(Some(""), 0, 1));
        assert!(!is_throttled(None, 0, 1));
    }
}
