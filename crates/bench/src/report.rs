//! Results: one [`BenchResult`] per tier × workload × phase, the aligned
//! table, and zpage's ratios against each kernel tier.

use crate::workload::{FillOutcome, PhaseOutcome, WorkloadSpec};
use serde::{Deserialize, Serialize};

/// One measured phase of one workload on one tier (the `--json` object).
#[derive(Clone, Debug, PartialEq, Serialize, Deserialize)]
pub struct BenchResult {
    /// "zpage", "zpage-fifo", "zram-lz4", "zswap-lzo", ...
    pub tier: String,
    /// "replay", "bench-c-high-entropy", "swapdemo", ...
    pub workload: String,
    /// Phase, e.g. "random-read", "hotcold-write", "sequential-scan".
    pub pattern: String,
    /// "read" or "write".
    pub op: String,
    /// Touches timed.
    pub touches: u64,
    /// Wall time of the phase.
    pub elapsed_s: f64,
    /// Touches per second over the phase.
    pub touches_per_s: f64,
    /// Bytes read or written per second (bench.c's figure), MiB/s.
    pub mib_per_s: f64,
    /// Mean touch latency.
    pub mean_us: f64,
    /// Median touch latency.
    pub p50_us: f64,
    /// 90th percentile.
    pub p90_us: f64,
    /// 99th percentile.
    pub p99_us: f64,
    /// 99.9th percentile.
    pub p999_us: f64,
    /// Slowest touch.
    pub max_us: f64,
    /// Highest resident memory sampled during the phase (mincore over the data, plus the library for swapdemo).
    pub resident_max_bytes: u64,
    /// Compressed footprint at the end of the phase (zpage store, zram mem_used_total, zswap pool).
    pub compressed_bytes: u64,
    /// Pages recompressed with zpage's cold codec (`--cold-codec`) by the
    /// end of the phase, fill included (0 for other tiers).
    #[serde(default)]
    pub recompressed_pages: u64,
    /// Evicted pages that shared an identical stored page's blob (zpage's
    /// `--dedup`) by the end of the phase, fill included (0 for other tiers).
    #[serde(default)]
    pub deduplicated_pages: u64,
    /// Bytes on the tier below RAM's device at the end of the phase
    /// (`--backing`; 0 without one).
    pub backing_bytes: u64,
    /// Bytes the tier's file takes on disk at the end of the phase
    /// (`st_blocks` × 512, what `du` shows; `null` without a file tier).
    #[serde(default)]
    pub backing_disk_bytes: Option<u64>,
    /// Compressed bytes of the live pages in the tier at the end of the
    /// phase: the codec's output, without the seal's tag (`null` without a tier).
    #[serde(default)]
    pub backing_live_payload_bytes: Option<u64>,
    /// `backing_disk_bytes / backing_live_payload_bytes`: disk bytes per
    /// byte of compressed page (`null` without a file tier or with nothing in it).
    #[serde(default)]
    pub disk_bytes_per_payload_byte: Option<f64>,
    /// Bytes the tier's garbage collection copied during the phase (what
    /// keeping `disk_bytes_per_payload_byte` low costs in writes).
    #[serde(default)]
    pub tier_gc_moved_bytes: u64,
    /// What the tier did to each blob ("AES-256-GCM"; a build made to
    /// measure encryption's cost says "none ..."); `null` without a tier.
    #[serde(default)]
    pub tier_sealing: Option<String>,
    /// Pages read back from that tier during the phase.
    pub tier_reads: u64,
    /// Their mean read latency (device read and authentication), microseconds.
    pub tier_read_mean_us: f64,
    /// Faults that brought a page back (zpage faults; kernel major faults = swap-ins).
    pub faults: u64,
    /// faults / touches.
    pub fault_share: f64,
    /// Share of the second half of the measured touches that faulted.
    pub steady_fault_share: f64,
    /// Touches of the same pattern run before the measured ones and left out
    /// of every other figure (0 for phases without a warm-up).
    pub warmup_touches: u64,
    /// Share of the warm-up touches that faulted (while a policy learns).
    pub warmup_fault_share: f64,
    /// Data size.
    pub size_bytes: u64,
    /// Resident budget (region budget or cgroup limit).
    pub budget_bytes: u64,
    /// Time the fill took (same for every phase of a workload).
    pub fill_s: f64,
    /// Highest resident memory during the fill.
    pub fill_resident_max_bytes: u64,
    /// Bytes one touch reads or writes (8 for a word, 4096 for a page scan).
    #[serde(default)]
    pub bytes_per_touch: u64,
    /// Share of touches in each latency band, fio's bands: (upper bound in µs, share 0-1).
    #[serde(default)]
    pub latency_bands: Vec<(f64, f64)>,
    /// The latency distribution: (µs, share of touches at or below it), log-spaced from min to max.
    #[serde(default)]
    pub latency_cdf: Vec<(f64, f64)>,
}

/// fio's latency bands (upper bounds, µs): 2, 4, 10, 20, 50, 100, 250, 500, 750 µs, 1, 2, 4, 10 ... ms.
pub const LATENCY_BANDS_US: [f64; 22] = [
    2.0,
    4.0,
    10.0,
    20.0,
    50.0,
    100.0,
    250.0,
    500.0,
    750.0,
    1e3,
    2e3,
    4e3,
    1e4,
    2e4,
    5e4,
    1e5,
    2.5e5,
    5e5,
    7.5e5,
    1e6,
    2e6,
    f64::INFINITY,
];

fn bands(h: &crate::histogram::LatencyHistogram) -> Vec<(f64, f64)> {
    let mut previous = 0.0;
    let mut out = Vec::new();
    for bound in LATENCY_BANDS_US {
        let at_most = if bound.is_finite() {
            h.share_at_most((bound * 1000.0) as u64)
        } else {
            1.0
        };
        out.push((bound, (at_most - previous).max(0.0)));
        previous = at_most;
        if at_most >= 1.0 {
            break;
        }
    }
    out
}

fn cdf(h: &crate::histogram::LatencyHistogram) -> Vec<(f64, f64)> {
    if h.count() == 0 {
        return Vec::new();
    }
    let (low, high) = (h.min_ns().max(1) as f64, h.max_ns().max(1) as f64);
    const POINTS: usize = 48;
    (0..=POINTS)
        .map(|i| {
            let ns = low * (high / low).powf(i as f64 / POINTS as f64);
            (ns / 1000.0, h.share_at_most(ns as u64))
        })
        .collect()
}

fn us(nanos: u64) -> f64 {
    nanos as f64 / 1000.0
}

impl BenchResult {
    /// Builds the result of one phase.
    pub fn new(
        tier: &str,
        spec: &WorkloadSpec,
        budget_bytes: u64,
        fill: &FillOutcome,
        outcome: &PhaseOutcome,
    ) -> Self {
        let secs = outcome.elapsed.as_secs_f64().max(1e-9);
        let touches = outcome.latency.count();
        let h = &outcome.latency;
        BenchResult {
            tier: tier.to_string(),
            workload: spec.name(),
            pattern: outcome.phase.name(),
            op: outcome.phase.op().name().to_string(),
            touches,
            elapsed_s: secs,
            touches_per_s: touches as f64 / secs,
            mib_per_s: (touches * outcome.phase.bytes_per_touch()) as f64 / secs / (1 << 20) as f64,
            mean_us: h.mean_ns() / 1000.0,
            p50_us: us(h.percentile_ns(0.50)),
            p90_us: us(h.percentile_ns(0.90)),
            p99_us: us(h.percentile_ns(0.99)),
            p999_us: us(h.percentile_ns(0.999)),
            max_us: us(h.max_ns()),
            resident_max_bytes: outcome.resident_max_bytes,
            compressed_bytes: outcome.compressed_bytes,
            recompressed_pages: outcome.recompressed_pages,
            deduplicated_pages: outcome.deduplicated_pages,
            backing_bytes: outcome.backing_bytes,
            backing_disk_bytes: outcome.backing_disk_bytes,
            backing_live_payload_bytes: outcome.backing_live_payload_bytes,
            disk_bytes_per_payload_byte: outcome.disk_bytes_per_payload_byte,
            tier_gc_moved_bytes: outcome.tier_gc_moved_bytes,
            tier_sealing: outcome.tier_sealing.clone(),
            tier_reads: outcome.tier_reads,
            tier_read_mean_us: if outcome.tier_reads == 0 {
                0.0
            } else {
                outcome.tier_read_ns as f64 / outcome.tier_reads as f64 / 1000.0
            },
            faults: outcome.faults,
            fault_share: if touches == 0 {
                0.0
            } else {
                outcome.faults as f64 / touches as f64
            },
            steady_fault_share: if touches < 2 {
                0.0
            } else {
                outcome.faults_second_half as f64 / (touches - touches / 2) as f64
            },
            warmup_touches: outcome.phase.warmup_touches,
            warmup_fault_share: if outcome.phase.warmup_touches == 0 {
                0.0
            } else {
                outcome.warmup_faults as f64 / outcome.phase.warmup_touches as f64
            },
            size_bytes: spec.size_bytes,
            budget_bytes,
            fill_s: fill.elapsed.as_secs_f64(),
            fill_resident_max_bytes: fill.resident_max_bytes,
            bytes_per_touch: outcome.phase.bytes_per_touch(),
            latency_bands: bands(h),
            latency_cdf: cdf(h),
        }
    }
}

fn mib(bytes: u64) -> String {
    format!("{:.1}", bytes as f64 / (1 << 20) as f64)
}

fn rate(value: f64) -> String {
    if value >= 1e6 {
        format!("{:.2}M", value / 1e6)
    } else if value >= 1e3 {
        format!("{:.1}k", value / 1e3)
    } else {
        format!("{value:.0}")
    }
}

fn micros(value: f64) -> String {
    if value >= 100.0 {
        format!("{value:.0}")
    } else {
        format!("{value:.2}")
    }
}

/// A table's header and rows, as text cells; the CLI lays them out.
#[derive(Clone, Debug, Default, PartialEq)]
pub struct Rows {
    /// Column names.
    pub header: Vec<&'static str>,
    /// One entry per row, as many cells as columns.
    pub rows: Vec<Vec<String>>,
}

/// Every result: throughput, latency percentiles, memory, faults per touch.
/// MiB/s only where a touch moves a whole page (a word touch's MiB/s says nothing).
pub fn results_rows(results: &[BenchResult]) -> Rows {
    let header = vec![
        "tier",
        "workload",
        "pattern",
        "touches",
        "touches/s",
        "MiB/s",
        "p50 µs",
        "p90 µs",
        "p99 µs",
        "p99.9 µs",
        "max µs",
        "resident max MiB",
        "compressed MiB",
        "faults/touch",
    ];
    let rows = results
        .iter()
        .map(|r| {
            vec![
                r.tier.clone(),
                r.workload.clone(),
                r.pattern.clone(),
                r.touches.to_string(),
                rate(r.touches_per_s),
                if r.bytes_per_touch >= crate::PAGE_SIZE as u64 {
                    format!("{:.1}", r.mib_per_s)
                } else {
                    "-".into()
                },
                micros(r.p50_us),
                micros(r.p90_us),
                micros(r.p99_us),
                micros(r.p999_us),
                micros(r.max_us),
                mib(r.resident_max_bytes),
                mib(r.compressed_bytes),
                format!("{:.3}", r.fault_share),
            ]
        })
        .collect();
    Rows { header, rows }
}

/// The tier below RAM at the end of each phase that had one: its reads, the
/// bytes in its segments, what its file takes on disk and the compressed
/// bytes of the live pages it holds, and the one per the other.
pub fn backing_rows(results: &[BenchResult]) -> Rows {
    let optional_mib = |bytes: Option<u64>| bytes.map_or("-".into(), mib);
    let rows = results
        .iter()
        .filter(|r| r.backing_live_payload_bytes.is_some())
        .map(|r| {
            vec![
                r.tier.clone(),
                r.workload.clone(),
                r.pattern.clone(),
                r.tier_reads.to_string(),
                micros(r.tier_read_mean_us),
                mib(r.backing_bytes),
                optional_mib(r.backing_disk_bytes),
                optional_mib(r.backing_live_payload_bytes),
                r.disk_bytes_per_payload_byte
                    .map_or("-".into(), |ratio| format!("{ratio:.3}x")),
                mib(r.tier_gc_moved_bytes),
            ]
        })
        .collect();
    Rows {
        header: vec![
            "tier",
            "workload",
            "pattern",
            "tier reads",
            "read mean µs",
            "backing MiB",
            "on disk MiB",
            "live payload MiB",
            "disk / payload",
            "GC copied MiB",
        ],
        rows,
    }
}

/// zpage's figures divided by each kernel tier's, for every phase both ran:
/// throughput ratio (above 1: zpage faster) and p99 ratio (below 1: zpage's tail shorter).
pub fn ratios_rows(results: &[BenchResult], zpage_tier: &str) -> Rows {
    let mut rows = Vec::new();
    for ours in results.iter().filter(|r| r.tier == zpage_tier) {
        for theirs in results.iter().filter(|r| {
            !r.tier.starts_with("zpage") && r.workload == ours.workload && r.pattern == ours.pattern
        }) {
            rows.push(vec![
                ours.workload.clone(),
                ours.pattern.clone(),
                theirs.tier.clone(),
                format!(
                    "{:.2}x",
                    ours.touches_per_s / theirs.touches_per_s.max(1e-9)
                ),
                format!("{:.2}x", ours.p50_us / theirs.p50_us.max(1e-9)),
                format!("{:.2}x", ours.p99_us / theirs.p99_us.max(1e-9)),
                format!("{:.2}x", ours.p999_us / theirs.p999_us.max(1e-9)),
                format!(
                    "{:.2}x",
                    ours.resident_max_bytes as f64 / theirs.resident_max_bytes.max(1) as f64
                ),
            ]);
        }
    }
    Rows {
        header: vec![
            "workload",
            "pattern",
            "vs tier",
            "touches/s ratio",
            "p50 ratio",
            "p99 ratio",
            "p99.9 ratio",
            "resident ratio",
        ],
        rows,
    }
}

/// Hot/cold fault shares: zpage's aging policy against FIFO (and the kernel's
/// LRU), during the warm-up, over the measured touches and over their second
/// half; the last column divides each tier's measured share by FIFO's on the
/// same phase.
pub fn fault_share_rows(results: &[BenchResult]) -> Rows {
    let fifo_share = |r: &BenchResult| {
        results
            .iter()
            .find(|f| f.tier == "zpage-fifo" && f.workload == r.workload && f.pattern == r.pattern)
            .map(|f| f.fault_share)
    };
    let rows = results
        .iter()
        .filter(|r| r.pattern.starts_with("hotcold"))
        .map(|r| {
            vec![
                r.tier.clone(),
                r.workload.clone(),
                r.pattern.clone(),
                r.touches.to_string(),
                r.faults.to_string(),
                format!("{:.2}%", r.warmup_fault_share * 100.0),
                format!("{:.2}%", r.fault_share * 100.0),
                format!("{:.2}%", r.steady_fault_share * 100.0),
                fifo_share(r)
                    .filter(|f| *f > 0.0)
                    .map_or("-".into(), |f| format!("{:.2}x", r.fault_share / f)),
            ]
        })
        .collect();
    Rows {
        header: vec![
            "tier",
            "workload",
            "pattern",
            "touches",
            "faults",
            "warm-up share",
            "faulting share",
            "second half",
            "share / FIFO's",
        ],
        rows,
    }
}

/// The budget check: the highest resident memory of each tier relative to the budget.
pub fn budget_overshoot(results: &[BenchResult], tier: &str) -> Option<f64> {
    results
        .iter()
        .filter(|r| r.tier == tier && r.budget_bytes > 0)
        .map(|r| r.resident_max_bytes.max(r.fill_resident_max_bytes) as f64 / r.budget_bytes as f64)
        .reduce(f64::max)
}

#[cfg(test)]
mod tests {
    use super::*;

    fn result(tier: &str, pattern: &str, tput: f64, p99: f64) -> BenchResult {
        BenchResult {
            tier: tier.into(),
            workload: "replay".into(),
            pattern: pattern.into(),
            op: "read".into(),
            touches: 1000,
            elapsed_s: 1.0,
            touches_per_s: tput,
            mib_per_s: 1.0,
            mean_us: 1.0,
            p50_us: 1.0,
            p90_us: 2.0,
            p99_us: p99,
            p999_us: p99 * 2.0,
            max_us: 500.0,
            resident_max_bytes: 100 << 20,
            compressed_bytes: 10 << 20,
            recompressed_pages: 0,
            deduplicated_pages: 0,
            backing_bytes: 0,
            backing_disk_bytes: None,
            backing_live_payload_bytes: None,
            disk_bytes_per_payload_byte: None,
            tier_gc_moved_bytes: 0,
            tier_sealing: None,
            tier_reads: 0,
            tier_read_mean_us: 0.0,
            faults: 100,
            fault_share: 0.1,
            steady_fault_share: 0.05,
            warmup_touches: 0,
            warmup_fault_share: 0.0,
            size_bytes: 400 << 20,
            budget_bytes: 100 << 20,
            fill_s: 1.0,
            fill_resident_max_bytes: 104 << 20,
            bytes_per_touch: 8,
            latency_bands: vec![(2.0, 0.5), (4.0, 0.5)],
            latency_cdf: vec![(1.0, 0.5), (4.0, 1.0)],
        }
    }

    #[test]
    fn json_has_the_issue_fields() {
        let json = serde_json::to_value(result("zpage", "random-read", 1.0, 1.0)).unwrap();
        for field in [
            "tier",
            "workload",
            "pattern",
            "touches",
            "touches_per_s",
            "p50_us",
            "p90_us",
            "p99_us",
            "p999_us",
            "max_us",
            "resident_max_bytes",
            "compressed_bytes",
        ] {
            assert!(json.get(field).is_some(), "missing {field}");
        }
    }

    #[test]
    fn ratios_compare_zpage_with_each_kernel_tier() {
        let results = [
            result("zpage", "random-read", 200_000.0, 20.0),
            result("zram-lz4", "random-read", 100_000.0, 200.0),
            result("zram-lzo", "random-read", 50_000.0, 400.0),
        ];
        let table = format!("{:?}", ratios_rows(&results, "zpage").rows);
        assert!(table.contains("zram-lz4") && table.contains("2.00x") && table.contains("0.10x"));
        assert!(table.contains("4.00x") && table.contains("0.05x"));
    }

    #[test]
    fn fault_shares_are_compared_with_fifo() {
        let mut zpage = result("zpage", "hotcold-read", 1.0, 1.0);
        zpage.fault_share = 0.2;
        let mut fifo = result("zpage-fifo", "hotcold-read", 1.0, 1.0);
        fifo.fault_share = 0.4;
        let table = format!("{:?}", fault_share_rows(&[zpage, fifo]).rows);
        assert!(table.contains("20.00%") && table.contains("0.50x") && table.contains("1.00x"));
    }

    #[test]
    fn word_touches_have_no_mib_per_s_and_faults_are_per_touch() {
        let mut scan = result("zpage", "sequential-scan", 1.0, 1.0);
        scan.bytes_per_touch = 4096;
        scan.fault_share = 1.762;
        let rows = results_rows(&[result("zpage", "random-read", 123_456.0, 12.5), scan]).rows;
        assert_eq!(rows[0][4], "123.5k");
        assert_eq!(rows[0][5], "-", "a word touch has no meaningful MiB/s");
        assert_eq!(rows[1][5], "1.0");
        assert_eq!(
            rows[1][13], "1.762",
            "faults per touch, not a percentage over 100"
        );
    }

    #[test]
    fn the_tier_table_shows_disk_bytes_per_payload_byte_and_nulls_without_a_tier() {
        let plain = result("zpage", "random-read", 1.0, 1.0);
        let json = serde_json::to_value(&plain).unwrap();
        assert!(json["backing_disk_bytes"].is_null(), "{json}");
        assert!(json["disk_bytes_per_payload_byte"].is_null(), "{json}");
        assert!(backing_rows(std::slice::from_ref(&plain)).rows.is_empty());
        let mut tiered = plain.clone();
        tiered.backing_disk_bytes = Some(105 << 20);
        tiered.backing_live_payload_bytes = Some(100 << 20);
        tiered.disk_bytes_per_payload_byte = Some(1.05);
        tiered.tier_gc_moved_bytes = 300 << 20;
        let rows = backing_rows(&[plain, tiered]).rows;
        assert_eq!(rows.len(), 1);
        assert_eq!(rows[0][6..], ["105.0", "100.0", "1.050x", "300.0"]);
    }

    #[test]
    fn budget_overshoot_takes_the_fill_into_account() {
        let results = [result("zpage", "random-read", 1.0, 1.0)];
        assert!((budget_overshoot(&results, "zpage").unwrap() - 1.04).abs() < 1e-9);
        assert!(budget_overshoot(&results, "zram-lz4").is_none());
    }
}
