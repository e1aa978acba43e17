//! Latency histogram with bounded memory.
//!
//! The kernel tiers run inside a memory cgroup whose limit is the budget, so
//! the measuring code must not grow with the number of touches (a `Vec` of
//! every latency would be charged to the cgroup and steal budget from the
//! workload). A log-linear histogram keeps ~1.6% relative precision in a
//! fixed 30 KiB table: values below 64 ns are exact, above that each power
//! of two is split into 64 equal sub-buckets (the HDR histogram layout).

use serde::{Deserialize, Serialize};

const SUB_BUCKET_BITS: u32 = 6;
const SUB_BUCKETS: u64 = 1 << SUB_BUCKET_BITS;
/// Exact buckets for 0..64, then 64 sub-buckets for each exponent 6..=63.
const BUCKET_COUNT: usize = (SUB_BUCKETS + (64 - SUB_BUCKET_BITS as u64) * SUB_BUCKETS) as usize;

/// Latencies in nanoseconds, bucketed; percentiles within ~1.6%, exact min/max/mean.
#[derive(Clone, Debug, PartialEq, Eq, Serialize, Deserialize)]
pub struct LatencyHistogram {
    counts: Vec<u64>,
    total: u64,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

fn bucket_of(value: u64) -> usize {
    if value < SUB_BUCKETS {
        return value as usize;
    }
    let exponent = 63 - value.leading_zeros();
    let shift = exponent - SUB_BUCKET_BITS;
    let sub = (value >> shift) - SUB_BUCKETS;
    (SUB_BUCKETS + u64::from(shift) * SUB_BUCKETS + sub) as usize
}

/// The range of values `[low, high]` that land in bucket `index`.
fn bucket_range(index: usize) -> (u64, u64) {
    let index = index as u64;
    if index < SUB_BUCKETS {
        return (index, index);
    }
    let shift = (index - SUB_BUCKETS) / SUB_BUCKETS;
    let sub = (index - SUB_BUCKETS) % SUB_BUCKETS;
    let low = (SUB_BUCKETS + sub) << shift;
    let high = low.saturating_add((1u64 << shift) - 1);
    (low, high)
}

impl LatencyHistogram {
    /// An empty histogram (allocates its fixed table once, up front).
    pub fn new() -> Self {
        LatencyHistogram {
            counts: vec![0; BUCKET_COUNT],
            total: 0,
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record(&mut self, nanos: u64) {
        self.counts[bucket_of(nanos)] += 1;
        self.total += 1;
        self.sum_ns += u128::from(nanos);
        self.min_ns = self.min_ns.min(nanos);
        self.max_ns = self.max_ns.max(nanos);
    }

    /// Adds every sample of `other` to this histogram.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        for (mine, theirs) in self.counts.iter_mut().zip(&other.counts) {
            *mine += theirs;
        }
        self.total += other.total;
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Number of recorded samples.
    pub fn count(&self) -> u64 {
        self.total
    }

    /// Largest recorded value (exact); 0 when empty.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Smallest recorded value (exact); 0 when empty.
    pub fn min_ns(&self) -> u64 {
        if self.total == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Arithmetic mean (exact); 0 when empty.
    pub fn mean_ns(&self) -> f64 {
        if self.total == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.total as f64
        }
    }

    /// The value below or at which `quantile` (0.0..=1.0) of the samples lie.
    ///
    /// Uses the nearest-rank definition; the answer is the middle of the
    /// bucket holding that rank, clamped to the exact min and max, so p100 is
    /// the true maximum and a histogram of one value answers that value.
    pub fn percentile_ns(&self, quantile: f64) -> u64 {
        if self.total == 0 {
            return 0;
        }
        let quantile = quantile.clamp(0.0, 1.0);
        let rank = ((quantile * self.total as f64).ceil() as u64).clamp(1, self.total);
        let mut seen = 0u64;
        for (index, &count) in self.counts.iter().enumerate() {
            seen += count;
            if seen >= rank {
                let (low, high) = bucket_range(index);
                let middle = low + (high - low) / 2;
                return middle.clamp(self.min_ns, self.max_ns);
            }
        }
        self.max_ns
    }

    /// Share of the samples at or below `nanos` (0.0..=1.0), within the
    /// histogram's ~1.6% bucket precision.
    pub fn share_at_most(&self, nanos: u64) -> f64 {
        if self.total == 0 {
            return 0.0;
        }
        let last = bucket_of(nanos);
        let below: u64 = self.counts[..=last].iter().sum();
        below as f64 / self.total as f64
    }

    /// Clears every sample, keeping the table.
    pub fn reset(&mut self) {
        self.counts.iter_mut().for_each(|c| *c = 0);
        self.total = 0;
        self.sum_ns = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn buckets_cover_every_value_in_order() {
        let mut previous_high = None;
        for index in 0..BUCKET_COUNT {
            let (low, high) = bucket_range(index);
            assert!(low <= high);
            if let Some(prev) = previous_high {
                assert_eq!(low, prev + 1, "gap before bucket {index}");
            }
            assert_eq!(bucket_of(low), index);
            assert_eq!(bucket_of(high), index);
            previous_high = Some(high);
        }
        assert_eq!(previous_high, Some(u64::MAX));
    }

    #[test]
    fn small_values_are_exact() {
        let mut h = LatencyHistogram::new();
        for v in 1..=50 {
            h.record(v);
        }
        assert_eq!(h.percentile_ns(0.5), 25);
        assert_eq!(h.percentile_ns(0.9), 45);
        assert_eq!(h.percentile_ns(1.0), 50);
        assert_eq!(h.min_ns(), 1);
        assert_eq!(h.mean_ns(), 25.5);
    }

    #[test]
    fn percentiles_of_a_uniform_spread_are_within_two_percent() {
        let mut h = LatencyHistogram::new();
        for v in 1..=100_000u64 {
            h.record(v * 10);
        }
        for (q, exact) in [
            (0.5, 500_000.0),
            (0.9, 900_000.0),
            (0.99, 990_000.0),
            (0.999, 999_000.0),
        ] {
            let got = h.percentile_ns(q) as f64;
            assert!(
                (got - exact).abs() / exact < 0.02,
                "q={q}: got {got}, want {exact}"
            );
        }
        assert_eq!(h.percentile_ns(1.0), 1_000_000);
        assert_eq!(h.max_ns(), 1_000_000);
    }

    #[test]
    fn a_rare_slow_tail_shows_in_p999_but_not_p99() {
        let mut h = LatencyHistogram::new();
        for _ in 0..9_990 {
            h.record(2_000);
        }
        for _ in 0..10 {
            h.record(400_000);
        }
        assert!(h.percentile_ns(0.99) < 2_100);
        assert!(h.percentile_ns(0.9995) > 390_000);
        assert_eq!(h.max_ns(), 400_000);
    }

    #[test]
    fn merge_equals_recording_everything_in_one() {
        let mut a = LatencyHistogram::new();
        let mut b = LatencyHistogram::new();
        let mut both = LatencyHistogram::new();
        for v in 0..1000u64 {
            let value = v * v;
            if v.is_multiple_of(3) {
                a.record(value);
            } else {
                b.record(value);
            }
            both.record(value);
        }
        a.merge(&b);
        assert_eq!(a, both);
    }

    #[test]
    fn shares_at_most_add_up() {
        let mut h = LatencyHistogram::new();
        for v in [10, 20, 30, 1_000, 2_000] {
            h.record(v);
        }
        assert_eq!(h.share_at_most(5), 0.0);
        assert_eq!(h.share_at_most(30), 0.6);
        assert_eq!(h.share_at_most(u64::MAX), 1.0);
    }

    #[test]
    fn empty_histogram_answers_zero() {
        let h = LatencyHistogram::new();
        assert_eq!(h.percentile_ns(0.99), 0);
        assert_eq!(h.min_ns(), 0);
        assert_eq!(h.mean_ns(), 0.0);
    }
}
