//! Compaction of the pool shards, and the memory they hold.

use super::PageStore;
use crate::stats::Counters;
use std::sync::atomic::Ordering::Relaxed;
use zpage_codec::PAGE_SIZE;
use zpage_pool::CompactStats;

impl PageStore {
    /// Compacts every pool shard (zram's `compact`); counts released pages
    /// in `pages_compacted`. The shard's lock is taken for one step at a
    /// time (a size class, in the size-class pool), and the CPU offered
    /// after a step that moved objects, so a fault spinning for a blob there
    /// waits for one step, not for the whole compaction. Steps that found
    /// nothing to move (most classes, most of the time) do not yield: on a
    /// busy machine each `sched_yield` gives the CPU away for a time slice,
    /// and a compaction of a few hundred classes then took longer than the
    /// interval between compactions, with faults waiting on the reclaimer.
    pub fn compact(&self) -> CompactStats {
        let mut total = CompactStats::default();
        for shard in 0..self.pools.len() {
            for step in 0.. {
                let Some(stats) = self.with_pool(shard, |pool| pool.compact_step(step)) else {
                    break;
                };
                let worked = stats.objects_moved > 0;
                total += stats;
                if worked {
                    std::thread::yield_now();
                }
            }
        }
        Counters::add(&self.counters.pages_compacted, total.pages_freed);
        total
    }

    /// Memory the pools hold now, in bytes.
    pub fn pool_memory_used_bytes(&self) -> u64 {
        self.gauges.pool_pages.load(Relaxed) * PAGE_SIZE as u64
    }

    /// Bytes of the blobs (and raw pages) held in the pools now: what
    /// [`pool_memory_used_bytes`](Self::pool_memory_used_bytes) would be
    /// with no fragmentation.
    pub fn blob_bytes_held(&self) -> u64 {
        self.gauges.compressed_bytes.load(Relaxed)
    }

    /// Bytes of per-object metadata the pools keep outside their pages.
    pub(crate) fn pool_metadata_bytes(&self) -> u64 {
        self.pools
            .iter()
            .map(|pool| pool.read().stats().metadata_bytes)
            .sum()
    }
}
