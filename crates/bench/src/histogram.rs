//! Latency histogram with bounded memory: `hdrhistogram`'s, plus the exact
//! minimum, maximum and sum.
//!
//! The kernel tiers run inside a memory cgroup whose limit is the budget, so
//! the measuring code must not grow with the number of touches (a `Vec` of
//! every latency would be charged to the cgroup and steal budget from the
//! workload). An HDR histogram of two significant figures keeps values
//! within 1% in a table allocated once, up front, for every value a `u64`
//! of nanoseconds can hold; recording allocates nothing. (The region's own
//! fault-latency histogram, filled in the SIGBUS handler, stays the
//! hand-written power-of-two one in `zpage-region`.)

use hdrhistogram::Histogram;
use serde::{Deserialize, Serialize};

/// Significant figures kept: values within 1%.
const SIGNIFICANT_FIGURES: u8 = 2;

/// Latencies in nanoseconds, bucketed; percentiles within 1%, exact min/max/mean.
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
#[serde(into = "Recorded", from = "Recorded")]
pub struct LatencyHistogram {
    counts: Histogram<u64>,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

/// A histogram as it crosses a process boundary (a kernel tier's child
/// reports in JSON): the occupied buckets, each as one value in it and its
/// count, and the exact figures.
#[derive(Clone, Debug, Serialize, Deserialize)]
struct Recorded {
    buckets: Vec<(u64, u64)>,
    sum_ns: u128,
    min_ns: u64,
    max_ns: u64,
}

impl From<LatencyHistogram> for Recorded {
    fn from(h: LatencyHistogram) -> Recorded {
        Recorded {
            buckets: h
                .counts
                .iter_recorded()
                .map(|v| (v.value_iterated_to(), v.count_at_value()))
                .collect(),
            sum_ns: h.sum_ns,
            min_ns: h.min_ns,
            max_ns: h.max_ns,
        }
    }
}

impl From<Recorded> for LatencyHistogram {
    fn from(recorded: Recorded) -> LatencyHistogram {
        let mut h = LatencyHistogram::new();
        for (value, count) in recorded.buckets {
            h.counts.saturating_record_n(value, count);
        }
        h.sum_ns = recorded.sum_ns;
        h.min_ns = recorded.min_ns;
        h.max_ns = recorded.max_ns;
        h
    }
}

impl Default for LatencyHistogram {
    fn default() -> Self {
        Self::new()
    }
}

impl LatencyHistogram {
    /// An empty histogram (allocates its fixed table once, up front).
    pub fn new() -> Self {
        LatencyHistogram {
            counts: Histogram::new_with_bounds(1, u64::MAX, SIGNIFICANT_FIGURES)
                .expect("constant bounds and precision are valid"),
            sum_ns: 0,
            min_ns: u64::MAX,
            max_ns: 0,
        }
    }

    /// Records one latency.
    #[inline]
    pub fn record(&mut self, nanos: u64) {
        self.counts.saturating_record(nanos);
        self.sum_ns += u128::from(nanos);
        self.min_ns = self.min_ns.min(nanos);
        self.max_ns = self.max_ns.max(nanos);
    }

    /// Adds every sample of `other` to this histogram.
    pub fn merge(&mut self, other: &LatencyHistogram) {
        self.counts
            .add(&other.counts)
            .expect("histograms of the same bounds add");
        self.sum_ns += other.sum_ns;
        self.min_ns = self.min_ns.min(other.min_ns);
        self.max_ns = self.max_ns.max(other.max_ns);
    }

    /// Number of recorded samples.
    pub fn count(&self) -> u64 {
        self.counts.len()
    }

    /// Largest recorded value (exact); 0 when empty.
    pub fn max_ns(&self) -> u64 {
        self.max_ns
    }

    /// Smallest recorded value (exact); 0 when empty.
    pub fn min_ns(&self) -> u64 {
        if self.count() == 0 {
            0
        } else {
            self.min_ns
        }
    }

    /// Arithmetic mean (exact); 0 when empty.
    pub fn mean_ns(&self) -> f64 {
        if self.count() == 0 {
            0.0
        } else {
            self.sum_ns as f64 / self.count() as f64
        }
    }

    /// The value below or at which `quantile` (0.0..=1.0) of the samples lie.
    ///
    /// Nearest rank: the top of the bucket holding that rank, clamped to the
    /// exact min and max, so p100 is the true maximum and a histogram of one
    /// value answers that value.
    pub fn percentile_ns(&self, quantile: f64) -> u64 {
        if self.count() == 0 {
            return 0;
        }
        self.counts
            .value_at_quantile(quantile.clamp(0.0, 1.0))
            .clamp(self.min_ns, self.max_ns)
    }

    /// Share of the samples at or below `nanos` (0.0..=1.0), within the
    /// histogram's 1% bucket precision.
    pub fn share_at_most(&self, nanos: u64) -> f64 {
        if self.count() == 0 {
            return 0.0;
        }
        self.counts.count_between(0, nanos) as f64 / self.count() as f64
    }

    /// Clears every sample, keeping the table.
    pub fn reset(&mut self) {
        self.counts.reset();
        self.sum_ns = 0;
        self.min_ns = u64::MAX;
        self.max_ns = 0;
    }
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_value_is_recorded_within_one_percent() {
        let mut h = LatencyHistogram::new();
        for value in [0, 1, 255, 256, 10_000, 123_456_789, u64::MAX / 4, u64::MAX] {
            h.reset();
            h.record(value);
            h.record(value);
            assert_eq!(h.count(), 2);
            // Clamped to the exact extremes: a single value answers itself.
            assert_eq!(h.percentile_ns(0.5), value);
            assert_eq!(h.share_at_most(value), 1.0);
        }
        h.reset();
        for v in (1..=1_000u64).map(|v| v * 997) {
            h.record(v);
        }
        let p50 = h.percentile_ns(0.5) as f64;
        assert!(
            (p50 - 500.0 * 997.0).abs() / (500.0 * 997.0) <= 0.01,
            "{p50}"
        );
    }

    #[test]
    fn crosses_a_process_boundary_as_json_unchanged() {
        let mut h = LatencyHistogram::new();
        for v in [3u64, 70, 70, 5_000, 1 << 40] {
            h.record(v);
        }
        let json = serde_json::to_string(&h).unwrap();
        let back: LatencyHistogram = serde_json::from_str(&json).unwrap();
        assert_eq!(back, h);
        assert_eq!(back.percentile_ns(0.6), h.percentile_ns(0.6));
        assert_eq!(back.mean_ns(), h.mean_ns());
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
