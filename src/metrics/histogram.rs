//! A latency histogram fine enough to place a p99.9: log-linear buckets of
//! microseconds, `SUB_BUCKETS` per power of two (each at most 12.5% wide),
//! the same bounds on every shard so shards add up and two scrapes subtract.

use std::time::Duration;

/// Buckets per power of two; a power of two itself.
const SUB_BUCKETS: u64 = 8;
const SUB_BUCKET_BITS: u32 = SUB_BUCKETS.trailing_zeros();
/// Powers of two covered past the exact first `SUB_BUCKETS` microseconds: up
/// to 2^41 us (25 days). Longer durations count in the last bucket.
const POWERS: u64 = 41 - SUB_BUCKET_BITS as u64 + 1;
pub const BUCKETS: usize = (SUB_BUCKETS + POWERS * SUB_BUCKETS) as usize;

#[derive(Debug, Clone, PartialEq, Eq)]
pub struct LatencyHistogram {
    counts: Box<[u64; BUCKETS]>,
    count: u64,
    sum_us: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self {
            counts: Box::new([0; BUCKETS]),
            count: 0,
            sum_us: 0,
        }
    }
}

/// The bucket of a duration of `us` microseconds.
fn bucket_of(us: u64) -> usize {
    if us < SUB_BUCKETS {
        return us as usize;
    }
    let power = 63 - us.leading_zeros() as u64; // >= SUB_BUCKET_BITS
    let shift = power - SUB_BUCKET_BITS as u64;
    let sub = (us >> shift) - SUB_BUCKETS; // [0, SUB_BUCKETS)
    let index = SUB_BUCKETS + shift * SUB_BUCKETS + sub;
    (index as usize).min(BUCKETS - 1)
}

/// The largest duration (us) bucket `index` holds.
pub fn bucket_upper_bound_us(index: usize) -> u64 {
    assert!(index < BUCKETS);
    let index = index as u64;
    if index < SUB_BUCKETS {
        return index;
    }
    let shift = (index - SUB_BUCKETS) / SUB_BUCKETS;
    let sub = (index - SUB_BUCKETS) % SUB_BUCKETS;
    ((SUB_BUCKETS + sub + 1) << shift) - 1
}

impl LatencyHistogram {
    pub fn record(&mut self, elapsed: Duration) {
        let us = elapsed.as_micros().min(u64::MAX as u128) as u64;
        self.counts[bucket_of(us)] += 1;
        self.count += 1;
        self.sum_us = self.sum_us.saturating_add(us);
    }

    pub fn add(&mut self, other: &Self) {
        for (mine, theirs) in self.counts.iter_mut().zip(other.counts.iter()) {
            *mine += theirs;
        }
        self.count += other.count;
        self.sum_us = self.sum_us.saturating_add(other.sum_us);
    }

    pub fn count(&self) -> u64 {
        self.count
    }

    pub fn sum_us(&self) -> u64 {
        self.sum_us
    }

    /// (bucket index, count) of every bucket holding a duration, in order.
    pub fn occupied(&self) -> impl Iterator<Item = (usize, u64)> + '_ {
        self.counts
            .iter()
            .enumerate()
            .filter(|(_, count)| **count > 0)
            .map(|(index, count)| (index, *count))
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    /// The upper bound (us) of the bucket holding the `quantile`th duration.
    fn quantile_us(histogram: &LatencyHistogram, quantile: f64) -> u64 {
        let rank = (quantile * histogram.count() as f64).ceil() as u64;
        let mut seen = 0;
        for (index, count) in histogram.occupied() {
            seen += count;
            if seen >= rank.max(1) {
                return bucket_upper_bound_us(index);
            }
        }
        unreachable!("the counts add up to count")
    }

    #[test]
    fn buckets_cover_every_duration_in_order_and_are_narrow() {
        let mut previous_upper = None;
        for index in 0..BUCKETS {
            let upper = bucket_upper_bound_us(index);
            if let Some(previous) = previous_upper {
                assert!(upper > previous, "bucket {index}");
                let lower = previous + 1;
                assert_eq!(bucket_of(lower), index);
                assert!(
                    (upper - lower) as f64 <= 0.125 * lower as f64 || upper < SUB_BUCKETS,
                    "bucket {index} is [{lower}, {upper}]"
                );
            }
            assert_eq!(bucket_of(upper), index);
            previous_upper = Some(upper);
        }
        assert_eq!(bucket_of(u64::MAX), BUCKETS - 1);
    }

    #[test]
    fn quantiles_are_the_bucket_bound_of_the_ranked_duration() {
        let mut histogram = LatencyHistogram::default();
        for ms in 1..=1000u64 {
            histogram.record(Duration::from_millis(ms));
        }
        assert_eq!(histogram.count(), 1000);
        assert_eq!(histogram.sum_us(), 500_500_000);
        for (quantile, ms) in [(0.5, 500.0), (0.99, 990.0), (0.999, 999.0), (1.0, 1000.0)] {
            let us = quantile_us(&histogram, quantile) as f64;
            assert!(
                us >= ms * 1000.0 && us <= ms * 1000.0 * 1.125,
                "{quantile}: {us}"
            );
        }
        let mut sum = LatencyHistogram::default();
        sum.add(&histogram);
        sum.add(&histogram);
        assert_eq!(sum.count(), 2000);
        assert_eq!(quantile_us(&sum, 0.5), quantile_us(&histogram, 0.5));
    }
}
