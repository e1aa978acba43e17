//! Counters: the union of zswap's debugfs counters, zram's `mm_stat` and
//! `io_stat`, and Zircon's `zx_info_kmem_stats_compression`, each named after
//! its outcome with its unit in the name.
//!
//! Counters are relaxed atomics bumped outside any lock: a snapshot taken while
//! other threads work is a consistent-enough view, not a transaction.

use serde::Serialize;
use std::sync::atomic::{AtomicU64, Ordering::Relaxed};
use zpage_codec::PAGE_SIZE;

/// Why a page is being compressed: Zircon counts each trigger apart.
#[derive(Clone, Copy, Debug, PartialEq, Eq, Default)]
pub enum CompressionTrigger {
    /// The page aged out with no memory pressure.
    #[default]
    Eager,
    /// A budget or watermark was crossed.
    MemoryPressure,
    /// Near out-of-memory: compress whatever it takes.
    CriticalMemory,
}

macro_rules! counters {
    ($($(#[$doc:meta])* $name:ident),* $(,)?) => {
        #[derive(Debug, Default)]
        pub(crate) struct Counters {
            $(pub(crate) $name: AtomicU64,)*
        }

        /// Monotonic event counters (they only grow; take two snapshots and subtract for rates).
        #[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
        pub struct EventCounts {
            $($(#[$doc])* pub $name: u64,)*
        }

        impl Counters {
            pub(crate) fn snapshot(&self) -> EventCounts {
                EventCounts {
                    $($name: self.$name.load(Relaxed),)*
                }
            }
        }
    };
}

counters! {
    /// Pages given to `store` (Zircon `total_page_compression_attempts`; same-filled pages included).
    store_attempts,
    /// Pages stored as a same-filled word, ever (zram `same_pages` counts the current ones).
    same_filled_stores,
    /// Pages stored compressed, ever.
    compressed_stores,
    /// Pages stored raw because they reached the reject threshold (zram `huge_pages_since`).
    raw_stores,
    /// Pages refused because they compressed poorly and raw storage is off (zswap `reject_compress_poor`).
    reject_compress_poor_pages,
    /// Pages refused because the compressor failed (zswap `reject_compress_fail`).
    reject_compress_fail_pages,
    /// Pages refused because the pool could not allocate (zswap `reject_alloc_fail`).
    reject_alloc_fail_pages,
    /// Stores refused by the pool limit (zswap `pool_limit_hit`).
    pool_limit_hit_count,
    /// Stores that replaced a page already held under the same key (zswap `duplicate_entry`).
    duplicate_entry_count,
    /// Compressions triggered by aging without pressure (Zircon `eager_page_compressions`).
    eager_compressions,
    /// Compressions triggered by memory pressure (Zircon `memory_pressure_page_compressions`).
    memory_pressure_compressions,
    /// Compressions to avoid OOM (Zircon `critical_memory_page_compressions`).
    critical_memory_compressions,
    /// CPU time spent compressing, summed over threads (Zircon `compression_time`).
    compression_time_ns,
    /// Successful loads of any kind (zswap `zswpin`).
    loads,
    /// Loads that ran a decompressor (Zircon `total_page_decompressions` counts every load).
    decompressions,
    /// Loads whose blob failed to decode (zswap `decompress_fail`, zram `failed_reads`).
    decompress_fail_count,
    /// Loads for keys the store does not hold.
    load_misses,
    /// CPU time spent decompressing, summed over threads (Zircon `decompression_time`).
    decompression_time_ns,
    /// Pages dropped without being loaded (zram `notify_free`, Zircon `compressed_page_evictions`).
    invalidated_pages,
    /// Pages moved to the backing file (zswap `written_back_pages`).
    written_back_pages,
    /// Writebacks that failed (zswap `reject_reclaim_fail`).
    writeback_fail_count,
    /// Pool pages released by compaction (zram `pages_compacted`).
    pages_compacted,
    /// Old pages now held with the recompression codec (zram `recompress`).
    recompressed_pages,
    /// Old pages the recompression codec could not move to a smaller size class (zram's `incompressible` mark).
    recompress_no_gain_pages,
}

impl Counters {
    pub(crate) fn add(counter: &AtomicU64, n: u64) {
        counter.fetch_add(n, Relaxed);
    }
}

/// What the store holds right now (gauges), with units in the names.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct Contents {
    /// Pages held in any form, in memory or in the tier below RAM.
    pub stored_pages: u64,
    /// Pages held as a same-filled word (zram `same_pages`).
    pub same_filled_pages: u64,
    /// Pages held compressed.
    pub compressed_pages: u64,
    /// Pages held raw (zram `huge_pages`, zswap `stored_incompressible_pages`).
    pub raw_pages: u64,
    /// Pages held in the tier below RAM (the backing file).
    pub written_back_pages: u64,
    /// Bytes of the tier's device holding data (sealed compressed blobs, live
    /// and not yet collected).
    pub backing_used_bytes: u64,
    /// Uncompressed size of the pages held in memory (zram `orig_data_size`, Zircon `uncompressed_content_bytes`).
    pub uncompressed_bytes: u64,
    /// Sum of blob sizes in the pool, raw pages counting 4096 (zram `compr_data_size`).
    pub compressed_bytes: u64,
    /// Memory the pool holds (zram `mem_used_total`, zswap `pool_total_size`, Zircon `compressed_storage_bytes`).
    pub pool_memory_used_bytes: u64,
    /// Highest `pool_memory_used_bytes` seen (zram `mem_used_max`).
    pub pool_memory_used_max_bytes: u64,
    /// The pool limit, 0 when unlimited (zram `mem_limit`).
    pub pool_memory_limit_bytes: u64,
    /// Pool memory not holding blob bytes (Zircon `compressed_fragmentation_bytes`).
    pub pool_fragmentation_bytes: u64,
    /// Page-table and handle metadata outside the pool's pages, estimated.
    pub metadata_bytes: u64,
}

/// A snapshot of the store: what it holds and what has happened.
#[derive(Clone, Debug, Default, PartialEq, Eq, Serialize)]
pub struct StoreStats {
    /// Gauges.
    pub contents: Contents,
    /// Monotonic counters.
    pub events: EventCounts,
    /// The tier below RAM, when there is one: its contents, its read
    /// latency, and every failure by cause (pages reported lost).
    pub tier: Option<zpage_tier::TierStats>,
}

/// Builds a snapshot from the object store's gauges and counters, and its
/// tier's: the pages written back are the blobs the tier holds.
pub(crate) fn snapshot(pages: &crate::PageStore) -> StoreStats {
    let tier = pages.tier().map(|t| t.stats());
    let (written_back_pages, backing_used_bytes) =
        tier.as_ref().map_or((0, 0), |t| (t.pages, t.backing_bytes));
    let gauges = &pages.gauges;
    let same = gauges.same_filled_pages.load(Relaxed);
    let compressed = gauges.compressed_pages.load(Relaxed);
    let raw = gauges.raw_pages.load(Relaxed);
    let in_memory = same + compressed + raw;
    let compressed_bytes = gauges.compressed_bytes.load(Relaxed);
    let used = pages.pool_memory_used_bytes();
    StoreStats {
        contents: Contents {
            stored_pages: in_memory + written_back_pages,
            same_filled_pages: same,
            compressed_pages: compressed,
            raw_pages: raw,
            written_back_pages,
            backing_used_bytes,
            uncompressed_bytes: in_memory * PAGE_SIZE as u64,
            compressed_bytes,
            pool_memory_used_bytes: used,
            pool_memory_used_max_bytes: gauges.pool_pages_max.load(Relaxed) * PAGE_SIZE as u64,
            pool_memory_limit_bytes: pages.pool_limit_bytes().unwrap_or(0),
            pool_fragmentation_bytes: used.saturating_sub(compressed_bytes),
            metadata_bytes: pages.pool_metadata_bytes(),
        },
        events: pages.counters.snapshot(),
        tier,
    }
}

impl StoreStats {
    /// Uncompressed bytes per byte of pool memory (what memory compression saves); 0 when empty.
    pub fn effective_ratio(&self) -> f64 {
        let used = self.contents.pool_memory_used_bytes;
        if used == 0 {
            return 0.0;
        }
        self.contents.uncompressed_bytes as f64 / used as f64
    }

    /// The nine fields of zram's `mm_stat`, by their kernel names, in the kernel's order.
    pub fn zram_mm_stat(&self) -> [(&'static str, u64); 9] {
        let c = &self.contents;
        [
            ("orig_data_size", c.uncompressed_bytes),
            ("compr_data_size", c.compressed_bytes),
            ("mem_used_total", c.pool_memory_used_bytes),
            ("mem_limit", c.pool_memory_limit_bytes),
            ("mem_used_max", c.pool_memory_used_max_bytes),
            ("same_pages", c.same_filled_pages),
            ("pages_compacted", self.events.pages_compacted),
            ("huge_pages", c.raw_pages),
            ("huge_pages_since", self.events.raw_stores),
        ]
    }
}
