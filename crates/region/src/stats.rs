//! Counters, kept with relaxed atomics so the fault path can bump them.
use std::sync::atomic::{AtomicU64, Ordering};

/// Log2 buckets of nanoseconds: bucket i holds latencies in [2^i, 2^(i+1)).
pub const LATENCY_BUCKETS: usize = 32;

#[derive(Debug, Default)]
pub struct Counters {
    pub faults: AtomicU64,
    pub zero_fills: AtomicU64,
    pub restores: AtomicU64,
    pub trial_hits: AtomicU64,
    pub activations: AtomicU64,
    pub demotions: AtomicU64,
    pub first_writes: AtomicU64,
    pub clean_evictions: AtomicU64,
    pub sync_evictions: AtomicU64,
    pub evictions: AtomicU64,
    pub compressions: AtomicU64,
    pub compress_failures: AtomicU64,
    pub eager_compressions: AtomicU64,
    pub pressure_compressions: AtomicU64,
    pub throttles: AtomicU64,
    pub throttle_ns: AtomicU64,
    pub ebusy_fixes: AtomicU64,
    pub holes: AtomicU64,
    pub discarded: AtomicU64,
    pub fault_ns_total: AtomicU64,
    pub fault_hist: [AtomicU64; LATENCY_BUCKETS],
}

impl Counters {
    pub fn bump(c: &AtomicU64) {
        c.fetch_add(1, Ordering::Relaxed);
    }

    pub fn record_fault_ns(&self, ns: u64) {
        self.fault_ns_total.fetch_add(ns, Ordering::Relaxed);
        let b = (63 - ns.max(1).leading_zeros() as usize).min(LATENCY_BUCKETS - 1);
        self.fault_hist[b].fetch_add(1, Ordering::Relaxed);
    }

    pub fn latency(&self) -> LatencySummary {
        let hist: Vec<u64> = self
            .fault_hist
            .iter()
            .map(|a| a.load(Ordering::Relaxed))
            .collect();
        let count: u64 = hist.iter().sum();
        let q = |p: f64| -> u64 {
            if count == 0 {
                return 0;
            }
            let rank = ((count as f64) * p).ceil().max(1.0) as u64;
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
            mean_ns: self
                .fault_ns_total
                .load(Ordering::Relaxed)
                .checked_div(count)
                .unwrap_or(0),
            p50_ns: q(0.50),
            p90_ns: q(0.90),
            p99_ns: q(0.99),
            p999_ns: q(0.999),
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

/// A snapshot of a region's state and counters.
#[derive(Clone, Debug, Default)]
pub struct RegionStats {
    /// Region size.
    pub size_bytes: usize,
    /// The resident budget.
    pub budget_bytes: usize,
    /// Uncompressed bytes the region holds: resident pages plus staged pages.
    /// Pages mapped to the shared zero page count too (an upper bound).
    pub resident_bytes: usize,
    /// Of which held uncompressed in the staging area (trial eviction).
    pub staged_bytes: usize,
    /// Pinned bytes (never evicted).
    pub pinned_bytes: usize,
    /// Bytes of compressed blobs (and raw pages) held for evicted pages.
    pub compressed_bytes: usize,
    /// Memory the store's pool uses for them (blobs plus fragmentation).
    pub pool_bytes: usize,
    /// Pages held in the store.
    pub stored_pages: usize,
    /// Of which same-filled (no blob).
    pub same_filled_pages: usize,
    /// Of which stored raw (incompressible).
    pub raw_pages: usize,
    /// Faults resolved (every kind).
    pub faults: u64,
    /// Faults on never-written (or discarded) pages, resolved with zeros.
    pub zero_fills: u64,
    /// Faults that decompressed a page from the store.
    pub restores: u64,
    /// Faults on pages still in the staging area (trial eviction hits: no decompression).
    pub trial_hits: u64,
    /// Refaults (restores + trial hits) whose refault distance marked the page active.
    pub activations: u64,
    /// Write faults on restored pages (write tracking: their store copy became stale).
    pub first_writes: u64,
    /// Evictions of pages unwritten since their restore: the store's copy was
    /// still exact, so nothing was compressed.
    pub clean_evictions: u64,
    /// Of the clean evictions, those a fault did itself at the hard limit
    /// (instead of waiting for the reclaimer).
    pub sync_evictions: u64,
    /// Active pages moved back to the inactive queue (the active queue was full).
    pub demotions: u64,
    /// Pages taken out of the region (moved to staging).
    pub evictions: u64,
    /// Pages compressed into the store.
    pub compressions: u64,
    /// Of which by `advise_cold` (Zircon's eager compressions).
    pub eager_compressions: u64,
    /// Of which by the reclaimer (Zircon's memory-pressure compressions).
    pub pressure_compressions: u64,
    /// Pages the codec or store refused (kept resident).
    pub compress_failures: u64,
    /// Faults that waited because the region was over its budget.
    pub throttles: u64,
    /// Total time those faults waited.
    pub throttle_ns: u64,
    /// Pages made exclusive again after fork (`EBUSY` from MOVE).
    pub ebusy_fixes: u64,
    /// Pages found absent at eviction (the program discarded them): now zero.
    pub holes: u64,
    /// Evicted pages dropped because the program discarded their range (MADV_DONTNEED).
    pub discarded: u64,
    /// Fault handling latency.
    pub fault_latency: LatencySummary,
    /// The store's own counters (zram / zswap / Zircon names), including
    /// Zircon's how-long-compressed histogram.
    pub store: zpage_store::StoreStats,
}
