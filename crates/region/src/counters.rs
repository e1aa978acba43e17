//! The one list of a region's figures. [`RegionStats`], the counters the
//! fault path bumps, the C API's `struct zpage_stats` and its header, and the
//! metrics a process publishes all come from [`region_stat_fields!`]:
//! adding a figure means adding one line there (and setting it where it
//! happens).
//!
//! Counters are relaxed atomics so the fault path can bump them.

use std::sync::atomic::{AtomicU64, Ordering};

/// Log2 buckets of nanoseconds: bucket i holds latencies in [2^i, 2^(i+1)).
pub const LATENCY_BUCKETS: usize = 32;

/// Calls `$callback!` with every figure of [`RegionStats`]: first the
/// gauges (what is true now), then the counters (events since the region was
/// made; they only grow). Every name ends in its unit.
#[macro_export]
macro_rules! region_stat_fields {
    ($callback:ident) => {
        $callback! {
            gauges {
                /// Region size.
                size_bytes,
                /// The resident budget the region draws on (shared by every region of its budget).
                budget_bytes,
                /// Uncompressed bytes this region holds: resident pages plus its staged pages.
                /// Pages mapped to the shared zero page count too (an upper bound).
                resident_bytes,
                /// Uncompressed bytes every region of the budget holds (what the budget limits).
                budget_resident_bytes,
                /// The most bytes the budget held over its limit while pages could not leave
                /// (see `overshoot_count`); 0 if it never had to.
                overshoot_peak_bytes,
                /// Of this region's bytes, those held uncompressed in the staging area (trial eviction).
                staged_bytes,
                /// Pinned bytes of this region (never evicted).
                pinned_bytes,
                /// Bytes of compressed blobs (and raw pages) the budget's store holds.
                compressed_bytes,
                /// Memory the budget's compressed pool uses for them (blobs plus fragmentation).
                pool_bytes,
                /// Pages the budget's store holds (evicted pages, and clean resident pages' copies).
                stored_pages,
                /// Of which same-filled (no blob).
                same_filled_pages,
                /// Of which stored raw (incompressible).
                raw_pages,
            }
            counters {
                /// Faults resolved (every kind).
                fault_count,
                /// Time spent resolving them, from handler entry to the page being mapped.
                fault_ns,
                /// Faults on never-written (or discarded) pages, resolved with zeros.
                zero_fill_count,
                /// Pages filled with zeros after a first-touch fault's page (fault-around), each
                /// sparing the program a fault of its own.
                fault_around_count,
                /// Faults that decompressed a page from the store.
                restore_count,
                /// Faults on pages still in the staging area (trial eviction hits: no decompression).
                trial_hit_count,
                /// Refaults (restores and trial hits) whose refault distance activated the page.
                activation_count,
                /// Active pages moved back to the inactive queue.
                demotion_count,
                /// Write faults on write-protected restored pages (their compressed copy became stale).
                first_write_count,
                /// Pages taken out of the region.
                eviction_count,
                /// Evictions of pages unwritten since their restore: the compressed copy was
                /// still exact, so nothing was compressed.
                clean_eviction_count,
                /// Of the clean evictions, those a faulting thread did itself.
                sync_eviction_count,
                /// Pages compressed into the store.
                compression_count,
                /// Of which by `advise_cold` (Zircon's eager compressions).
                eager_compression_count,
                /// Of which by the reclaimer (Zircon's memory-pressure compressions).
                pressure_compression_count,
                /// Of those, pages the reclaimer's second compressor stored (it shares large
                /// batches when the machine has a second CPU).
                helper_compression_count,
                /// Pages the codec or the store refused (kept resident).
                compress_failure_count,
                /// Faults that went over the budget without waiting because pages could not
                /// leave (the pool at its cap with no tier to write back to, a full or failing
                /// tier, every resident page pinned or held by `mlockall`/`restore_all`).
                overshoot_count,
                /// Faults that waited: the budget was full, or the reclaimer was moving a burst of
                /// pages out (it does so while faults wait, see the crate documentation).
                throttle_count,
                /// Total time those faults waited.
                throttle_ns,
                /// Pages made exclusive again after fork (`EBUSY` from MOVE).
                ebusy_fix_count,
                /// Pages found absent at eviction (the program discarded them): now zero.
                hole_count,
                /// Evicted pages dropped because the program discarded their range (MADV_DONTNEED).
                discard_count,
                /// Compressed pages recompressed with the budget's cold codec (kept: they took less memory).
                recompression_count,
                /// Bytes of compressed blobs those recompressions saved.
                recompression_saved_bytes,
                /// Pages the cold codec tried and did not shrink to a smaller size class (left as they were).
                recompression_no_gain_count,
                /// Evictions compressed straight with the cold codec (pages with no quick reuse,
                /// `BudgetConfig::cold_at_eviction`).
                cold_compression_count,
                /// Evicted pages found identical to a stored page (dedup): they share its blob.
                dedup_hit_count,
                /// Bytes of compressed blobs those pages would have taken stored on their own.
                dedup_saved_bytes,
                /// Pages whose hash matched a stored page's and whose bytes did not (kept apart).
                dedup_verify_mismatch_count,
                /// Looks of the budget's memory max (`memory_max_bytes`) that found the process's
                /// resident memory over it (budget-wide; 0 without one).
                memory_max_over_count,
                /// The most the process's resident memory was over the memory max at a look
                /// (budget-wide; never falls; 0 if it never was).
                memory_max_over_peak_bytes,
            }
        }
    };
}

macro_rules! define_stats {
    (
        gauges { $( $(#[doc = $gdoc:literal])* $gauge:ident, )* }
        counters { $( $(#[doc = $cdoc:literal])* $counter:ident, )* }
    ) => {
        /// A snapshot of a region's state and counters.
        #[derive(Clone, Debug, Default)]
        pub struct RegionStats {
            $( $(#[doc = $gdoc])* pub $gauge: u64, )*
            $( $(#[doc = $cdoc])* pub $counter: u64, )*
            /// Fault handling latency.
            pub fault_latency: LatencySummary,
            /// The budget's store counters (zram / zswap / Zircon names), including
            /// Zircon's how-long-compressed histogram.
            pub store: zpage_store::StoreStats,
        }

        /// The event counters of one region.
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $( pub(crate) $counter: AtomicU64, )*
            fault_hist: [AtomicU64; LATENCY_BUCKETS],
        }

        impl Counters {
            fn fill(&self, stats: &mut RegionStats) {
                $( stats.$counter = self.$counter.load(Ordering::Relaxed); )*
                stats.fault_latency = self.latency(stats.fault_count, stats.fault_ns);
            }
        }

        impl RegionStats {
            /// Every figure's name, meaning and kind, in the order of [`RegionStats::values`].
            pub const FIELDS: &'static [StatField] = &[
                $( StatField { name: stringify!($gauge), help: concat!($($gdoc),*), kind: StatKind::Gauge }, )*
                $( StatField { name: stringify!($counter), help: concat!($($cdoc),*), kind: StatKind::Counter }, )*
            ];

            /// Every figure's value, in the order of [`RegionStats::FIELDS`].
            pub fn values(&self) -> Vec<u64> {
                vec![ $( self.$gauge, )* $( self.$counter, )* ]
            }
        }
    };
}

region_stat_fields!(define_stats);

/// Whether a figure is a level or an event count.
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub enum StatKind {
    /// What is true now (goes up and down).
    Gauge,
    /// Events since the region was made (only grows).
    Counter,
}

/// One figure of [`RegionStats`].
#[derive(Clone, Copy, Debug, PartialEq, Eq)]
pub struct StatField {
    /// Its name (also the C field's), ending in its unit.
    pub name: &'static str,
    /// What it counts.
    pub help: &'static str,
    /// Level or count.
    pub kind: StatKind,
}

impl Counters {
    pub(crate) fn bump(counter: &AtomicU64) {
        counter.fetch_add(1, Ordering::Relaxed);
    }

    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Ordering::Relaxed);
    }

    /// Counts one resolved fault that took `ns`.
    pub(crate) fn record_fault(&self, ns: u64) {
        Self::bump(&self.fault_count);
        Self::add(&self.fault_ns, ns);
        let bucket = (63 - ns.max(1).leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        self.fault_hist[bucket].fetch_add(1, Ordering::Relaxed);
    }

    /// The counters into `stats` (the gauges, and the budget-wide memory
    /// max counters, are the caller's).
    pub(crate) fn snapshot_into(&self, stats: &mut RegionStats) {
        self.fill(stats);
    }

    fn latency(&self, count: u64, total_ns: u64) -> LatencySummary {
        let hist: Vec<u64> = self
            .fault_hist
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        LatencySummary::from_log2_buckets(count, total_ns, hist)
    }
}

impl LatencySummary {
    /// The summary of `count` faults that took `total_ns` together, whose
    /// latencies fell in `log2_buckets` (bucket i: [2^i, 2^(i+1)) ns); for
    /// figures merged from several regions or processes.
    pub fn from_log2_buckets(count: u64, total_ns: u64, log2_buckets: Vec<u64>) -> LatencySummary {
        let hist = log2_buckets;
        let counted: u64 = hist.iter().sum();
        let quantile = |p: f64| -> u64 {
            if counted == 0 {
                return 0;
            }
            let rank = ((counted as f64) * p).ceil().max(1.0) as u64;
            let mut seen = 0;
            for (i, n) in hist.iter().enumerate() {
                seen += n;
                if seen >= rank {
                    return 1u64 << (i + 1);
                }
            }
            1u64 << LATENCY_BUCKETS
        };
        LatencySummary {
            count,
            mean_ns: total_ns.checked_div(count).unwrap_or(0),
            p50_ns: quantile(0.50),
            p90_ns: quantile(0.90),
            p99_ns: quantile(0.99),
            p999_ns: quantile(0.999),
            max_ns: hist
                .iter()
                .rposition(|&n| n > 0)
                .map(|i| 1u64 << (i + 1))
                .unwrap_or(0),
            log2_buckets: hist,
        }
    }
}

/// Fault-handling time measured inside the handler (from handler entry to the
/// page being mapped; it excludes the kernel's signal delivery and return,
/// about 2 us here). Percentiles are upper bounds of log2 buckets.
#[derive(Clone, Debug, Default, PartialEq, Eq)]
pub struct LatencySummary {
    /// Faults measured.
    pub count: u64,
    /// Exact mean.
    pub mean_ns: u64,
    /// Median (bucket upper bound).
    pub p50_ns: u64,
    /// 90th percentile (bucket upper bound).
    pub p90_ns: u64,
    /// 99th percentile (bucket upper bound).
    pub p99_ns: u64,
    /// 99.9th percentile (bucket upper bound).
    pub p999_ns: u64,
    /// Largest bucket with a sample (upper bound).
    pub max_ns: u64,
    /// Bucket i counts faults that took [2^i, 2^(i+1)) ns.
    pub log2_buckets: Vec<u64>,
}

#[cfg(test)]
mod tests {
    use super::*;

    #[test]
    fn every_field_has_a_unit_and_a_meaning() {
        for field in RegionStats::FIELDS {
            assert!(
                ["_bytes", "_pages", "_count", "_ns"]
                    .iter()
                    .any(|unit| field.name.ends_with(unit)),
                "{} has no unit in its name",
                field.name
            );
            assert!(!field.help.trim().is_empty(), "{} has no help", field.name);
        }
        assert_eq!(
            RegionStats::default().values().len(),
            RegionStats::FIELDS.len()
        );
    }

    #[test]
    fn latency_quantiles_are_bucket_upper_bounds() {
        let counters = Counters::default();
        for ns in [1_000, 1_100, 1_200, 9_000] {
            counters.record_fault(ns);
        }
        let mut stats = RegionStats::default();
        counters.snapshot_into(&mut stats);
        assert_eq!(stats.fault_count, 4);
        assert_eq!(stats.fault_latency.p50_ns, 2048);
        assert_eq!(stats.fault_latency.max_ns, 16384);
        assert_eq!(stats.fault_latency.mean_ns, 3_075);
    }
}
